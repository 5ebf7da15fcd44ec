"""The strategy cache (dpsql.hdmm.cache): hits, round trips, atomic writes, corrupt entries."""

from __future__ import annotations

import os

import numpy as np
import pytest
from test_mwem import SCHEMA, make_table

import dpsql
import dpsql.hdmm.optimize.selector as selector
from dpsql.errors import CacheError
from dpsql.hdmm.cache import StrategyCache, unit_error
from dpsql.hdmm.error_analysis import rmse
from dpsql.hdmm.matrix import AllRange, Dense, Identity, Prefix, Total
from dpsql.hdmm.optimize import select
from dpsql.hdmm.strategy import KronStrategy
from dpsql.hdmm.workload import Workload, marginals_workload
from dpsql.privacy import Gaussian, Laplace
from dpsql.private.budget import Budget

LAP, GAU = Laplace(1.0), Gaussian(epsilon=1.0, delta=1e-6)


def _count_calls(monkeypatch):
    calls = []
    for name, fn in list(selector.OPERATORS.items()):
        def wrapped(*a, _fn=fn, _name=name, **k):
            calls.append(_name)
            return _fn(*a, **k)
        monkeypatch.setitem(selector.OPERATORS, name, wrapped)
    return calls


@pytest.mark.parametrize("noise", [LAP, GAU], ids=["laplace", "gaussian"])
def test_repeated_select_hits_cache(tmp_path, monkeypatch, noise):
    calls = _count_calls(monkeypatch)
    cache = StrategyCache(tmp_path)
    W = Workload((4, 5), [(1.0, (AllRange(4), Total(5))), (1.0, (Total(4), Prefix(5))), (0.5, (Identity(4), Identity(5)))])
    first = select(W, noise, restarts=1, cache=cache)
    n = len(calls)
    assert n > 0 and not first.cached
    assert len(list(tmp_path.glob("*.npz"))) == 1
    second = select(W, noise, restarts=1, cache=cache)
    assert len(calls) == n  # no operator ran again
    assert second.cached
    assert second.rmse == pytest.approx(first.rmse, rel=1e-12)
    assert second.strategy.operator == first.strategy.operator
    np.testing.assert_allclose(second.strategy.matrix.dense(), first.strategy.matrix.dense())
    # a different ε of the same family reuses the strategy (selection depends on the norm only)
    other = Laplace(0.5) if noise.norm == 1 else Gaussian(epsilon=0.5, delta=1e-6)
    third = select(W, other, restarts=1, cache=cache)
    assert third.cached and len(calls) == n
    assert third.rmse == pytest.approx(rmse(W, first.strategy, other))
    # different settings or noise family: a miss
    select(W, noise, restarts=1, seed=1, cache=cache)
    assert len(calls) > n


def test_roundtrip_all_strategy_types(tmp_path):
    cache = StrategyCache(tmp_path)
    W1 = Workload.of(AllRange(8))
    W2 = marginals_workload((2, 3, 4), 1)
    # OPT_+ with a part that fixes a prefix on attribute 0 and has marginals on the rest
    W3 = Workload((5, 2, 3), [(1.0, (Prefix(5), Identity(2), Total(3))), (1.0, (Prefix(5), Total(2), Identity(3))),
                              (1.0, (Prefix(5), Total(2), Prefix(3)))])
    for W, noise, ops in [(W1, LAP, ["OPT_0"]), (W1, GAU, ["OPT_0"]), (W2, GAU, ["OPT_M"]), (W2, LAP, ["OPT_M"]),
                          (W2, LAP, ["OPT_plus"]), (W2, GAU, ["OPT_kron"]), (W3, LAP, ["OPT_plus"]),
                          (W3, GAU, ["OPT_plus"])]:
        sel = select(W, noise, operators=ops, restarts=1)
        key = cache.key(W, noise, operators=ops)
        cache.put(key, sel.strategy, unit_error(W, sel.strategy, noise.norm))
        back = cache.get(key).strategy
        assert type(back) is type(sel.strategy) and back.operator == sel.strategy.operator
        assert rmse(W, back, noise) == pytest.approx(sel.rmse, rel=1e-12)
        np.testing.assert_array_equal(back.matrix.dense(), sel.strategy.matrix.dense())


def test_keys_distinguish_inputs():
    cache = StrategyCache("unused")
    W = marginals_workload((3, 4), 1)
    k = cache.key(W, LAP, restarts=1)
    assert k == cache.key(marginals_workload((3, 4), 1), Laplace(2.0), restarts=1)
    assert k != cache.key(W, GAU, restarts=1)
    assert k != cache.key(W, LAP, restarts=2)
    assert k != cache.key(marginals_workload((3, 5), 1), LAP, restarts=1)


@pytest.mark.parametrize("content", [
    b"", b"not a zip file", b"PK\x03\x04garbage"], ids=["empty", "text", "bad_zip"])
def test_corrupted_entry_is_a_miss_and_is_replaced(tmp_path, content):
    cache = StrategyCache(tmp_path)
    W = Workload.of(Prefix(8))
    key = cache.key(W, LAP, operators=["OPT_0"], restarts=1, seed=0)
    cache.path(key).parent.mkdir(parents=True, exist_ok=True)
    cache.path(key).write_bytes(content)
    assert cache.get(key) is None
    sel = select(W, LAP, operators=["OPT_0"], restarts=1, cache=cache)
    assert not sel.cached
    again = select(W, LAP, operators=["OPT_0"], restarts=1, cache=cache)
    assert again.cached and again.rmse == pytest.approx(sel.rmse)


def test_truncated_entry_is_a_miss(tmp_path):
    cache = StrategyCache(tmp_path)
    W = Workload.of(Prefix(8))
    sel = select(W, LAP, operators=["OPT_0"], restarts=1)
    path = cache.put("k", sel.strategy, unit_error(W, sel.strategy, 1))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert cache.get("k") is None


def test_atomic_write_failure_keeps_old_entry(tmp_path, monkeypatch):
    cache = StrategyCache(tmp_path)
    W = Workload.of(Prefix(8))
    old = select(W, LAP, operators=["OPT_0"], restarts=1).strategy
    cache.put("k", old, unit_error(W, old, 1))
    new = select(Workload.of(AllRange(8)), LAP, operators=["OPT_0"], restarts=1).strategy

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(CacheError):
        cache.put("k", new, 1.0)
    monkeypatch.undo()
    # the old entry is intact and no temporary files are left behind (.key is the signing key)
    back = cache.get("k").strategy
    np.testing.assert_array_equal(back.matrix.dense(), old.matrix.dense())
    assert sorted(p.name for p in tmp_path.iterdir()) == [".key", "k.npz"]


def test_unwritable_directory_raises_cache_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cache = StrategyCache(blocker / "sub")
    sel = select(Workload.of(Prefix(4)), LAP, operators=["OPT_0"], restarts=1)
    with pytest.raises(CacheError):
        cache.put("k", sel.strategy, 1.0)


def test_a_cache_that_cannot_be_written_warns_and_the_selection_goes_on(tmp_path):
    """A read-only home or cache directory must not stop every measured query."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    W = Workload.of(Prefix(6))
    with pytest.warns(RuntimeWarning, match="cannot (write strategy cache entry|read the strategy cache's signing key).*"
                                          "the strategy is used, not cached"):
        sel = select(W, LAP, operators=["OPT_0"], restarts=1, cache=StrategyCache(blocker / "sub"))
    plain = select(W, LAP, operators=["OPT_0"], restarts=1)
    assert not sel.cached and sel.rmse == pytest.approx(plain.rmse)


@pytest.mark.parametrize("value", [np.nan, 0.0], ids=["nan", "zero"])
def test_an_entry_that_is_not_finite_or_measures_nothing_is_a_miss(tmp_path, value):
    """A signed entry (a bug that stored it): NaN made every later selection fail in the SVD, zeros
    a strategy of sensitivity 0 that no noise can calibrate."""
    cache = StrategyCache(tmp_path)
    W, operators = Workload.of(Prefix(8)), ["OPT_0"]
    key = cache.key(W, LAP, operators=operators, restarts=1, seed=0, objective="total")
    cache.put(key, KronStrategy((Dense(np.full((8, 8), value)),), operator="OPT_0"), 1.0)
    assert cache.get(key) is None
    again = select(W, LAP, operators=operators, restarts=1, cache=cache)
    assert not again.cached and np.isfinite(again.rmse)
    assert select(W, LAP, operators=operators, restarts=1, cache=cache).cached


# -- entries that do not belong: signatures and the check on a hit (issue 38, item 7) -------------------

def _two_entries(cache):
    """Entries for two workloads on one domain (neither reduces): 8 counts, and one weighted sum,
    whose strategy measures that sum alone and cannot answer the counts."""
    W1, W2 = Workload.of(Identity(8)), Workload.of(Dense(np.arange(1.0, 9.0)[None, :]))
    for W in (W1, W2):
        select(W, LAP, restarts=1, cache=cache)
    k1, k2 = (cache.key(W, LAP, operators=selector.feasible(W, LAP), restarts=1, seed=0, objective="total")
              for W in (W1, W2))
    assert cache.path(k1).exists() and cache.path(k2).exists()
    return W1, k1, k2


def test_an_entry_moved_under_another_key_is_ignored(tmp_path):
    """The signature covers the key: another workload's entry, signed, copied over this one's, is a miss."""
    cache = StrategyCache(tmp_path)
    W1, k1, k2 = _two_entries(cache)
    cache.path(k1).write_bytes(cache.path(k2).read_bytes())
    assert cache.get(k1) is None
    sel = select(W1, LAP, restarts=1, cache=cache)
    assert not sel.cached and sel.rmse == pytest.approx(select(W1, LAP, restarts=1).rmse)
    assert select(W1, LAP, restarts=1, cache=cache).cached  # stored anew, a hit again


@pytest.mark.parametrize("forgery", ["unsigned", "other_key", "bad_signature"])
def test_an_entry_not_signed_with_this_cache_key_is_ignored(tmp_path, forgery):
    cache = StrategyCache(tmp_path / "mine")
    W = Workload.of(Prefix(8))
    key = cache.key(W, LAP, operators=["OPT_0"], restarts=1, seed=0, objective="total")
    wrong = select(W, LAP, operators=["identity"], restarts=1).strategy  # answers W, not the best
    if forgery == "other_key":  # written by someone with another key (another user's cache)
        theirs = StrategyCache(tmp_path / "theirs")
        cache.directory.mkdir()
        cache.path(key).write_bytes(theirs.put(key, wrong, unit_error(W, wrong, 1)).read_bytes())
    else:
        cache.put(key, wrong, unit_error(W, wrong, 1))
        blob = cache.path(key).read_bytes()
        cache.path(key).write_bytes(blob[32:] if forgery == "unsigned" else bytes(32) + blob[32:])
    assert cache.get(key) is None
    sel = select(W, LAP, operators=["OPT_0"], restarts=1, cache=cache)
    assert not sel.cached and sel.operator == "OPT_0"


@pytest.mark.parametrize("recorded", ["its_own", "the_workloads"])
def test_a_signed_entry_that_does_not_answer_its_workload_is_selected_anew(tmp_path, recorded):
    """The check on a hit: a strategy measuring one sum cannot answer 8 counts (its error is
    infinite), whatever error its entry records."""
    cache = StrategyCache(tmp_path)
    W1, k1, k2 = _two_entries(cache)
    one_sum = cache.get(k2).strategy
    good = cache.get(k1)
    cache.put(k1, one_sum, cache.get(k2).error if recorded == "its_own" else good.error)
    assert cache.get(k1) is not None  # signed, readable: only the check rejects it
    sel = select(W1, LAP, restarts=1, cache=cache)
    assert not sel.cached and np.isfinite(sel.rmse)
    assert sel.rmse == pytest.approx(select(W1, LAP, restarts=1).rmse)


def test_a_signed_entry_whose_error_is_not_the_recorded_one_is_selected_anew(tmp_path):
    """The identity answers Prefix(8), but not with the error recorded for OPT_0's strategy."""
    cache = StrategyCache(tmp_path)
    W = Workload.of(Prefix(8))
    key = cache.key(W, LAP, operators=["OPT_0"], restarts=1, seed=0, objective="total")
    best = select(W, LAP, operators=["OPT_0"], restarts=1).strategy
    cache.put(key, select(W, LAP, operators=["identity"], restarts=1).strategy, unit_error(W, best, 1))
    sel = select(W, LAP, operators=["OPT_0"], restarts=1, cache=cache)
    assert not sel.cached and sel.operator == "OPT_0"


def test_the_signing_key_is_private_and_one_per_directory(tmp_path):
    cache = StrategyCache(tmp_path)
    W = Workload.of(Prefix(8))
    select(W, LAP, operators=["OPT_0"], restarts=1, cache=cache)
    key_file = tmp_path / ".key"
    assert key_file.stat().st_mode & 0o777 == 0o600 and key_file.stat().st_size == 32
    again = StrategyCache(tmp_path)  # another process: the same key, so the entry is a hit
    assert select(W, LAP, operators=["OPT_0"], restarts=1, cache=again).cached
    key_file.chmod(0o644)  # readable by others: not trusted, and the cache answers nothing
    with pytest.warns(RuntimeWarning, match="must be a file owned by this user and readable by it alone"):
        assert not select(W, LAP, operators=["OPT_0"], restarts=1, cache=StrategyCache(tmp_path)).cached


def test_a_connection_keeps_the_key_beside_its_ledger_and_answers_right_after_a_swap(tmp_path):
    """Issue 38's probe: an entry replaced on disk by another workload's was used, and ε = 10^9 gave
    0 ± inf where the count was exact. The swapped entry is now ignored; the legitimate one is a hit."""
    con, _ = make_table(1000)
    ledger, directory = tmp_path / "ledger.db", tmp_path / "cache"

    def connect():
        return dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=1e8), ledger=str(ledger), cache=directory,
                             progress=False, source_of_noise=np.random.default_rng(0))

    db = connect()
    counts = "SELECT a, COUNT(*) AS n FROM t GROUP BY a"
    db.query(counts, epsilon=1e6)
    (own,) = directory.glob("*.npz")
    db.query("SELECT SUM(a) AS s FROM t", epsilon=1e6)
    (other,) = set(directory.glob("*.npz")) - {own}
    key_file = tmp_path / "ledger.db.key"
    assert key_file.stat().st_mode & 0o777 == 0o600 and not (directory / ".key").exists()
    legitimate = own.read_bytes()
    own.write_bytes(other.read_bytes())
    exact = dict(con.execute("SELECT a, COUNT(*) FROM t GROUP BY a").fetchall())
    for _ in range(2):  # the swapped entry, then the legitimate one put back: a hit
        result = connect().query(counts, epsilon=1e6)
        got = result.relation.df()
        np.testing.assert_allclose(got["n"], [exact.get(a, 0) for a in got["a"]], atol=0.01)
        assert np.isfinite(got["std_error"]).all()
        own.write_bytes(legitimate)
