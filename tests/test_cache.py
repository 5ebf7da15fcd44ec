"""The strategy cache (dpsql.hdmm.cache): hits, round trips, atomic writes, corrupt entries."""

from __future__ import annotations

import os

import numpy as np
import pytest

import dpsql.hdmm.optimize.selector as selector
from dpsql.errors import CacheError
from dpsql.hdmm.cache import StrategyCache
from dpsql.hdmm.error_analysis import rmse
from dpsql.hdmm.matrix import AllRange, Identity, Prefix, Total
from dpsql.hdmm.optimize import select
from dpsql.hdmm.workload import Workload, marginals_workload
from dpsql.privacy import Gaussian, Laplace

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
        cache.put(key, sel.strategy)
        back = cache.get(key)
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
    path = cache.put("k", sel.strategy)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert cache.get("k") is None


def test_atomic_write_failure_keeps_old_entry(tmp_path, monkeypatch):
    cache = StrategyCache(tmp_path)
    W = Workload.of(Prefix(8))
    old = select(W, LAP, operators=["OPT_0"], restarts=1).strategy
    cache.put("k", old)
    new = select(Workload.of(AllRange(8)), LAP, operators=["OPT_0"], restarts=1).strategy

    def failing_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(CacheError):
        cache.put("k", new)
    monkeypatch.undo()
    # the old entry is intact and no temporary files are left behind
    back = cache.get("k")
    np.testing.assert_array_equal(back.matrix.dense(), old.matrix.dense())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.npz"]


def test_unwritable_directory_raises_cache_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    cache = StrategyCache(blocker / "sub")
    sel = select(Workload.of(Prefix(4)), LAP, operators=["OPT_0"], restarts=1)
    with pytest.raises(CacheError):
        cache.put("k", sel.strategy)


def test_a_cache_that_cannot_be_written_warns_and_the_selection_goes_on(tmp_path):
    """A read-only home or cache directory must not stop every measured query."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    W = Workload.of(Prefix(6))
    with pytest.warns(RuntimeWarning, match="cannot write strategy cache entry.*the strategy is used, not cached"):
        sel = select(W, LAP, operators=["OPT_0"], restarts=1, cache=StrategyCache(blocker / "sub"))
    plain = select(W, LAP, operators=["OPT_0"], restarts=1)
    assert not sel.cached and sel.rmse == pytest.approx(plain.rmse)


@pytest.mark.parametrize("edit", ["nan", "zero"])
def test_an_entry_that_is_not_finite_or_measures_nothing_is_a_miss(tmp_path, edit):
    """A hand-edited entry: NaN made every later selection fail in the SVD, zeros a strategy of
    sensitivity 0 that no noise can calibrate."""
    cache = StrategyCache(tmp_path)
    W, operators = marginals_workload((3, 4), k=1), ["OPT_M"]  # zero weights: a strategy of sensitivity 0
    select(W, LAP, operators=operators, restarts=1, cache=cache)
    (path,) = tmp_path.glob("*.npz")
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    for k, a in arrays.items():
        if a.dtype.kind == "f":
            arrays[k] = np.full_like(a, np.nan if edit == "nan" else 0.0)
    np.savez(path, **arrays)
    assert cache.get(path.stem) is None
    again = select(W, LAP, operators=operators, restarts=1, cache=cache)
    assert not again.cached and np.isfinite(again.rmse)
    assert select(W, LAP, operators=operators, restarts=1, cache=cache).cached
