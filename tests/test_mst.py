"""MST (dpsql.synth.mst): its privacy accounting by hand, the noise each measurement carries, the
spanning forest its picks make, its table at a huge budget, and the wide-table default."""

from __future__ import annotations

import itertools
import math
import warnings

import duckdb
import numpy as np
import pandas as pd
import pytest
from test_pgm import SCHEMA, ZCDP_SPENDS, assert_reserved_up_front, largest_count_difference, make_table, spy_result

import dpsql
from dpsql.errors import ResourceLimitError
from dpsql.private.budget import Budget
from dpsql.synth.mst import candidate_pairs, picks


@pytest.fixture(scope="module")
def table():
    return make_table()


def test_the_picks_of_a_forest_are_the_attributes_less_the_candidates_parts():
    assert candidate_pairs([(0, 1, 2), (2, 3)]) == [(0, 1), (0, 2), (1, 2), (2, 3)]
    assert picks(4, candidate_pairs([(0, 1, 2), (2, 3)])) == 3  # one part: a spanning tree
    assert picks(6, [(0, 1), (2, 3), (3, 4), (2, 4)]) == 3      # parts {0, 1}, {2, 3, 4}, {5}
    assert picks(3, []) == 0


@pytest.mark.parametrize("budget,spend", ZCDP_SPENDS)
@pytest.mark.parametrize("compressed", [False, True])
def test_accounting_by_hand_with_the_whole_spend_reserved_before_the_first_read(table, monkeypatch, budget, spend,
                                                                                compressed):
    """A third of rho for the one-way marginals, d - 1 = 3 picks at eps = sqrt(8 (rho/3) / 3) (each
    eps^2/8), and the rest, a third, for the pairs picked; each measurement's noise is the sigma its
    charge pays for at its L2 sensitivity (sqrt(4) for the one-way counts, sqrt(3) for the pairs)."""
    db = dpsql.connect(table, schema=SCHEMA, budget=budget, cache=False, progress=False)
    seen = spy_result(monkeypatch, db, "mst")
    syn = db.synthesize("mst", workload=2, seed=1, name="s", **spend, **({} if compressed else {"compress": False}))
    reservation = assert_reserved_up_front(db, syn, seen, spend, "mst")
    rho = reservation.rho
    kinds = [m.split(":")[0].split("(")[0] for m, _ in reservation.drawn]
    charges = [r for _, r in reservation.drawn]
    assert kinds == ["gaussian", "exponential", "exponential", "exponential", "gaussian"]
    eps = math.sqrt(8 * (rho / 3) / 3)
    assert charges[:4] == pytest.approx([rho / 3] + [eps**2 / 8] * 3, rel=1e-12)
    assert math.fsum(charges) == pytest.approx(rho, rel=1e-12) and charges[4] == pytest.approx(rho / 3, rel=1e-9)
    result = seen["result"]
    assert (result.compression is not None) == compressed
    one_way, pairs = result.observations[:4], result.observations[4:]
    for o in one_way:
        merged = np.bincount(result.compression.labels[o.subset[0]]) if compressed else np.ones(len(o.values))
        np.testing.assert_allclose(np.broadcast_to(o.std, merged.shape), np.sqrt(merged * 4 / (2 * charges[0])),
                                   rtol=1e-6)
    assert len(pairs) == 3
    for o in pairs:
        assert o.std == pytest.approx(math.sqrt(3 / (2 * charges[4])), rel=1e-6)


@pytest.mark.parametrize("compressed", [False, True])
def test_a_pure_epsilon_is_spent_in_laplace_measurements_and_picks_that_add_up_to_it(table, monkeypatch, compressed):
    """With no delta, MST is epsilon-DP: one ledger entry of (0.9, 0) before the first read; a third
    for the one-way marginals (Laplace at L1 sensitivity 4: noise sd sqrt(2)*4/0.3, times sqrt of
    the values merged), 3 picks at 0.9/9 each (their epsilon drawn, not epsilon^2/8), and a third
    for the 3 pairs picked (L1 sensitivity 3)."""
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(epsilon=2.0), cache=False, progress=False)
    seen = spy_result(monkeypatch, db, "mst")
    syn = db.synthesize("mst", workload=2, epsilon=0.9, seed=1, name="s", **({} if compressed else {"compress": False}))
    entries = db.ledger.entries()
    assert len(entries) == 1 and entries[0].mechanism == "mst" and (syn.epsilon, syn.delta) == (0.9, 0.0)
    assert seen["ledger_at_first_read"] == (1, db.ledger.spent()) and db.spent().epsilon == 0.9
    reservation = seen["reservation"]
    assert reservation.epsilon == 0.9 and reservation.rho is None and reservation.closed
    kinds = [m.split(":")[0].split("(")[0] for m, _ in reservation.drawn]
    assert kinds == ["laplace", "exponential", "exponential", "exponential", "laplace"]
    assert [r for _, r in reservation.drawn] == pytest.approx([0.3, 0.1, 0.1, 0.1, 0.3], rel=1e-9)
    result = seen["result"]
    assert (result.compression is not None) == compressed
    for o in result.observations[:4]:
        merged = np.bincount(result.compression.labels[o.subset[0]]) if compressed else np.ones(len(o.values))
        np.testing.assert_allclose(np.broadcast_to(o.std, merged.shape), np.sqrt(merged) * math.sqrt(2) * 4 / 0.3,
                                   rtol=1e-5)
    pairs = result.observations[4:]
    assert len(pairs) == 3 and all(o.std == pytest.approx(math.sqrt(2) * 3 / 0.3, rel=1e-5) for o in pairs)


def test_the_picks_make_a_spanning_tree_of_the_dependent_pairs_at_a_huge_budget(monkeypatch):
    """Six columns drawn as two chains, a-b-c and d-e-f, with the chains joined by nothing: at a
    huge budget the scores separate dependent pairs from the rest by far, so the picks are the
    four chain links and one pair joining the chains, and the table keeps every link's counts."""
    rng = np.random.default_rng(0)
    n = 4000
    a = rng.integers(0, 3, n)
    b = (a + (rng.random(n) < 0.1)) % 3
    c = (b + (rng.random(n) < 0.1)) % 3
    d = rng.integers(0, 3, n)
    e = (d + (rng.random(n) < 0.1)) % 3
    f = (e + (rng.random(n) < 0.1)) % 3
    con = duckdb.connect()
    con.register("frame", pd.DataFrame({"a": a, "b": b, "c": c, "d": d, "e": e, "f": f}))
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    schema = {"table": "t", "columns": {x: {"type": "integer", "min": 0, "max": 2} for x in "abcdef"}}
    db = dpsql.connect(con, schema=schema, budget=Budget(rho=1e9), cache=False, progress=False)
    seen = spy_result(monkeypatch, db, "mst")
    syn = db.synthesize("mst", workload=2, rho=1e9, seed=0, name="s")
    picked = {o.subset for o in seen["result"].observations if len(o.subset) == 2}
    links = {(0, 1), (1, 2), (3, 4), (4, 5)}
    assert len(picked) == 5 and links < picked
    (joining,) = picked - links
    assert joining[0] in (0, 1, 2) and joining[1] in (3, 4, 5)
    for cols in (("a", "b"), ("b", "c"), ("d", "e"), ("e", "f")):
        assert largest_count_difference(con, syn.df, cols) <= 3, cols


def test_candidates_are_the_pairs_within_the_workloads_marginals(table, monkeypatch):
    """With the workload's marginals (a, b) and (c, d), the candidates are those two pairs, which
    make a forest of two parts: two picks, each forced, then the two pairs measured."""
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(rho=1.0), cache=False, progress=False)
    seen = spy_result(monkeypatch, db, "mst")
    db.synthesize("mst", workload=[("a", "b"), ("c", "d")], rho=0.5, seed=0, name="s")
    assert sorted(o.subset for o in seen["result"].observations[4:]) == [(0, 1), (2, 3)]
    assert [m.split(":")[0].split("(")[0] for m, _ in seen["reservation"].drawn] == ["gaussian", "exponential", "exponential",
                                                                             "gaussian"]


def test_refusals_spend_nothing(table):
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(epsilon=1.0, delta=1e-6), cache=False, progress=False)
    with pytest.raises(dpsql.Error, match="mst takes no option rounds"):
        db.synthesize("mst", workload=2, epsilon=0.5, delta=1e-7, rounds=3)
    with pytest.raises(ResourceLimitError, match="every one-way marginal"):
        db.synthesize("mst", workload=2, epsilon=0.5, delta=1e-7, max_model_size=1e-5)
    with pytest.raises(ResourceLimitError, match=r"MST's model of 7 marginals \(\d+ cells at most\) takes about"):
        db.synthesize("mst", workload=2, epsilon=0.5, delta=1e-7, sweeps=0, max_seconds=0.5)
    assert db.ledger.entries() == [] and db.spent().epsilon == 0


def chain_db(columns: int, budget: Budget) -> tuple[dpsql.Connection, pd.DataFrame]:
    """A connection to a chain table t of 3,000 rows and ``columns`` columns of 3 values, each
    copying the previous one in 80% of rows (uniform in the rest), and the table itself."""
    rng = np.random.default_rng(0)
    cols = [rng.integers(0, 3, 3000)]
    for _ in range(columns - 1):
        cols.append(np.where(rng.random(3000) < 0.2, rng.integers(0, 3, 3000), cols[-1]))
    frame = pd.DataFrame({f"c{j:02d}": c for j, c in enumerate(cols)})
    con = duckdb.connect()
    con.register("frame", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    schema = {"table": "t", "columns": {c: {"type": "integer", "min": 0, "max": 2} for c in frame.columns}}
    return dpsql.connect(con, schema=schema, budget=budget, cache=False, progress=False), frame


def chain_links(syn) -> tuple[list[str], int]:
    """The pairs a synthetic table of a :func:`chain_db` table measured, and how many are links."""
    measured = [m for m in syn.report["marginal"] if " x " in m]
    links = {f"c{j:02d} x c{j + 1:02d}" for j in range(len(syn.df.columns) - 1)}
    return measured, len(links & set(measured))


def test_with_no_workload_a_table_too_wide_for_aims_candidates_gets_mst():
    """With no workload on 40 columns, aim would score the 10,700 marginals within every triple
    in every round. The default was pgm measuring all 780 pairs (mean TV 0.29 times independent
    columns' on a chain table of 40 columns, 0.95 on 80: the pairs' noise drowns the relations);
    it is now MST's spanning tree of pairs, with a warning, and the chain's links are kept."""
    db, frame = chain_db(40, Budget(rho=1.0))
    with pytest.warns(UserWarning, match="aim would score 10,700 candidate marginals every round, more than 5,000: "
                                         "mst selects a spanning tree"):
        syn = db.synthesize(rho=0.5, name="s", seed=0)
    assert syn.method == "mst" and len(db.ledger.entries()) == 1
    measured, links = chain_links(syn)
    assert len(measured) == 39 and links >= 37
    for j in range(0, 39, 6):  # each kept link's share of equal values is the data's (about 0.8 + 0.2/3)
        same = (syn.df[f"c{j:02d}"] == syn.df[f"c{j + 1:02d}"]).mean()
        assert abs(same - (frame[f"c{j:02d}"] == frame[f"c{j + 1:02d}"]).mean()) < 0.05 or \
            f"c{j:02d} x c{j + 1:02d}" not in measured


def test_a_workload_of_columns_alone_measures_every_one_way_marginal_with_the_whole_budget(table, monkeypatch):
    """No pair to pick: the one-way marginals take all of rho, not a third."""
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(rho=1.0), cache=False, progress=False)
    seen = spy_result(monkeypatch, db, "mst")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the columns are fitted only through their one-way marginals
        db.synthesize("mst", workload=[("a",), ("b",)], rho=0.5, seed=0, name="s")
    assert [r for _, r in seen["reservation"].drawn] == [pytest.approx(0.5)]
    assert all(len(o.subset) == 1 for o in seen["result"].observations)
    assert list(itertools.chain.from_iterable(o.subset for o in seen["result"].observations)) == [0, 1, 2, 3]
