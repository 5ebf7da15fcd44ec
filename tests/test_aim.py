"""AIM (dpsql.synth.aim): its candidates, the marginals it scores against, its privacy accounting
by hand, and its table at a huge budget."""

from __future__ import annotations

import itertools
import math

import duckdb
import numpy as np
import pandas as pd
import pytest
from test_pgm import (
    FAMILIES,
    SCHEMA,
    ZCDP_SPENDS,
    assert_reserved_up_front,
    dense_joint,
    dense_marginal,
    largest_count_difference,
    make_table,
    spy_result,
)

import dpsql
from dpsql.errors import ArgumentError, PrivacyError, ResourceLimitError
from dpsql.private.budget import Budget
from dpsql.synth import aim as aim_module
from dpsql.synth.aim import ALPHA, candidates
from dpsql.synth.estimate import Observation
from dpsql.synth.graphical import GraphicalModel
from dpsql.synth.junction import junction_tree


@pytest.fixture(scope="module")
def table():
    return make_table()


def test_candidates_are_the_downward_closure_weighted_by_overlap_with_the_workload():
    got = candidates([(0, 1, 2), (2, 3)])
    assert set(got) == {(0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2), (3,), (2, 3)}
    # w_r = sum over workload marginals s of |r ∩ s|
    assert (got[(0, 1, 2)], got[(2,)], got[(2, 3)], got[(3,)], got[(0, 1)]) == (4.0, 2.0, 3.0, 1.0, 2.0)


@pytest.mark.parametrize("domain,subsets", FAMILIES)
def test_marginals_across_cliques_equal_the_dense_distribution(domain, subsets):
    """Every attribute set of up to three attributes, held by a clique or not."""
    rng = np.random.default_rng(2)
    tree = junction_tree(domain, subsets)
    model = GraphicalModel(tree, [rng.normal(size=[domain[a] for a in c]) for c in tree.cliques], total=50.0)
    joint = dense_joint(model)
    for k in (1, 2, 3):
        for s in itertools.combinations(range(len(domain)), k):
            np.testing.assert_allclose(model.marginal(s), dense_marginal(joint, s), rtol=1e-9, atol=1e-12)


def test_a_model_moved_to_a_larger_tree_keeps_its_distribution():
    rng = np.random.default_rng(3)
    domain, subsets = (2, 3, 2, 4, 3), [(0, 1), (1, 2), (3, 4)]
    small = junction_tree(domain, subsets)
    model = GraphicalModel(small, [rng.normal(size=[domain[a] for a in c]) for c in small.cliques], total=9.0)
    moved = model.on_tree(junction_tree(domain, subsets + [(0, 2, 4)]))
    np.testing.assert_allclose(dense_joint(moved), dense_joint(model), rtol=1e-9)


@pytest.mark.parametrize("budget,spend", ZCDP_SPENDS)
@pytest.mark.parametrize("compressed", [False, True])
def test_accounting_by_hand_with_the_whole_spend_reserved_before_the_first_read(table, monkeypatch, budget, spend,
                                                                                compressed):
    """The paper's schedule, or by default (a, b and d have more than two values: 3 of 4) the one-way
    marginals at 0.3 * 3/4 of rho, deciding the compression, and then the paper's rounds."""
    db = dpsql.connect(table, schema=SCHEMA, budget=budget, cache=False, progress=False)
    seen = spy_result(monkeypatch, db, "aim")
    syn = db.synthesize("aim", workload=[("a", "b"), ("b", "c", "d")], seed=1, name="s", **spend,
                        **({} if compressed else {"compress": False}))
    reservation = assert_reserved_up_front(db, syn, seen, spend, "aim")
    rho = reservation.rho
    charges = [r for _, r in reservation.drawn]
    assert math.fsum(charges) == pytest.approx(rho, rel=1e-12)
    # the schedule by hand: T = 16d shares; the one-way marginals, then a selection and a measurement a round
    d, shares = 4, 64
    assert charges[0] == pytest.approx((0.3 * 3 / 4 if compressed else d * ALPHA / shares) * rho, rel=1e-12)
    assert charges[1] == pytest.approx((1 - ALPHA) * rho / shares, rel=1e-12)
    assert charges[2] == pytest.approx(ALPHA * rho / shares, rel=1e-12)
    kinds = [m.split(":")[0].split("(")[0] for m, _ in reservation.drawn]
    assert kinds == ["gaussian"] + ["exponential", "gaussian"] * ((len(kinds) - 1) // 2)
    # each measurement's noise is the sigma its charge pays for: 1/(2 sigma^2) = rho_i, for every
    # one-way count (sqrt(d) sensitivity), those merged into one value adding their variances
    result = seen["result"]
    assert (result.compression is not None) == compressed
    observations = result.observations
    measured = [r for (m, r) in reservation.drawn if m.startswith("gaussian")]
    assert len(observations) == d + len(measured) - 1
    for o in observations[:d]:
        merged = np.bincount(result.compression.labels[o.subset[0]]) if compressed else np.ones(len(o.values))
        np.testing.assert_allclose(np.broadcast_to(o.std, merged.shape),
                                   np.sqrt(merged * d / (2 * measured[0])), rtol=1e-6)
    for o, r in zip(observations[d:], measured[1:]):
        assert o.std == pytest.approx(1 / math.sqrt(2 * r), rel=1e-6)


def test_refits_between_rounds_take_fewer_steps_on_larger_models(table, monkeypatch):
    """Every refit but the last takes round_iterations(300, cells) steps: with the cell-step budget
    set to 6,000 here, 300 on the one-way model (12 cells) and fewer once it joins marginals;
    the last refit takes the full iterations."""
    monkeypatch.setattr(aim_module, "ROUND_CELL_STEPS", 6000)
    fits = []
    run = aim_module.estimate

    def spy_estimate(domain, observations, *, tree, iterations, **kwargs):
        fits.append((tree.size, iterations))
        return run(domain, observations, tree=tree, iterations=iterations, **kwargs)

    monkeypatch.setattr(aim_module, "estimate", spy_estimate)
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(rho=0.5), cache=False, progress=False)
    db.synthesize("aim", workload=[("a", "b"), ("b", "c", "d")], rho=0.2, seed=1, name="s", compress=False,
                  iterations=500)
    *refits, last = fits
    assert last[1] == 500
    assert [steps for _, steps in refits] == [max(30, min(300, 6000 // cells)) for cells, _ in refits]
    assert refits[0][1] == 300 and min(steps for _, steps in refits) < 300


def test_the_rounds_end_within_the_seconds_they_price_spending_all_that_is_left(table, monkeypatch):
    """aim's plan counts two reads and a refit a round, not the scoring of every candidate (a
    trial junction tree and an estimate each), which on 30 columns of 5 to 20 values took a
    default run to 713 s against max_seconds=600. The rounds now price their own work as they
    run: the round that, with another like the one before, would pass the time given is the
    last, spends all that is left, and a warning says so."""
    priced, charges = [], []
    price = aim_module.round_seconds

    def spy_price(*args):
        priced.append(price(*args))
        return priced[-1]

    run = aim_module.aim

    def short_aim(*args, **kwargs):
        kwargs["seconds"] = lambda total: 1.7  # about six rounds' reads
        result = run(*args, **kwargs)
        charges.extend(r for _, r in args[4].drawn)
        return result

    monkeypatch.setattr(aim_module, "round_seconds", spy_price)
    monkeypatch.setattr("dpsql.synth.plan.rounds.aim", short_aim)
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(rho=0.5), cache=False, progress=False)
    with pytest.warns(UserWarning, match=r"AIM's rounds took about \d s, priced .* round (\d+) is the last, spending "
                                         r"the \d+% of rho left, so that the run ends within max_seconds"):
        syn = db.synthesize("aim", workload=[("a", "b"), ("b", "c", "d")], rho=0.2, seed=1, name="s", rows=100)
    ended = next(i for i in range(1, len(priced)) if sum(priced[:i]) + 2 * priced[i - 1] > 1.7)
    assert len(priced) == ended + 1  # every round before it fit, and it was the last
    assert 2 <= ended <= 6 and math.fsum(charges) == pytest.approx(0.2, rel=1e-12)
    rounds = len(charges[1:]) // 2  # after the one-way marginals, a selection and a measurement a round
    assert rounds == ended + 1 and charges[-1] > charges[-3]  # the last measures with all that was left
    assert 0.25 * len(priced) <= math.fsum(priced) <= 1.7 + priced[-1]  # a measurement read a round at least
    assert len(syn.df) == 100


def test_the_rounds_time_leaves_room_to_sample_the_noisy_row_count(table, monkeypatch):
    """The rounds may take what the last fit and sampling the rows leave of max_seconds: the more
    rows the noisy count asks for, the less; given rows, the same whatever the count; and never
    less than half of what sampling one row would leave (the default rows are capped then)."""
    given = {}
    run = aim_module.aim

    def spy_aim(*args, **kwargs):
        given.setdefault("seconds", []).append(kwargs["seconds"])
        return run(*args, **kwargs)

    monkeypatch.setattr("dpsql.synth.plan.rounds.aim", spy_aim)
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(rho=0.5), cache=False, progress=False)
    for name, rows in (("s", None), ("s2", 100)):
        db.synthesize("aim", workload=[("a", "b")], rho=0.1, seed=1, name=name, rows=rows, max_seconds=100)
    default, fixed = given["seconds"]
    assert 100 > default(10**3) > default(10**6) > default(10**12) > 0
    assert default(10**12) == pytest.approx(default(1) / 2)
    assert fixed(10**3) == fixed(10**12) == pytest.approx(default(100))


def test_at_a_huge_budget_the_table_has_the_workload_marginals(table):
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(rho=1e10), cache=False, progress=False)
    workload = [("a", "b"), ("b", "c"), ("c", "d")]
    syn = db.synthesize("aim", workload=workload, rho=1e10, seed=0, name="s")
    assert len(syn.df) == 5000
    for cols in workload:
        assert largest_count_difference(table, syn.df, cols) <= 3, cols
    assert db.released.sql("SELECT COUNT(*) FROM s").fetchall() == [(5000,)]


def test_refusals_spend_nothing(table):
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(epsilon=1.0, delta=1e-6), cache=False, progress=False)
    with pytest.raises(PrivacyError, match="AIM is zCDP"):
        db.synthesize("aim", workload=2, epsilon=0.5)
    with pytest.raises(ResourceLimitError, match="every one-way marginal"):
        db.synthesize("aim", workload=2, epsilon=0.5, delta=1e-7, max_model_size=1e-5)
    with pytest.raises(ArgumentError, match="rounds must be an integer >= 1"):
        db.synthesize("aim", workload=2, epsilon=0.5, delta=1e-7, rounds=0)
    with pytest.raises(dpsql.Error, match="aim takes no option measure"):
        db.synthesize("aim", workload=2, epsilon=0.5, delta=1e-7, measure="pairs")
    with pytest.raises(ArgumentError, match="rounds must be at most 1,000,000"):
        db.synthesize("aim", workload=2, epsilon=0.5, delta=1e-7, rounds=10**310)   # beyond a float, too
    assert db.ledger.entries() == [] and db.spent().epsilon == 0


def _wide_table(n: int = 8000):
    """``n`` rows: x of 40 values, z whether x >= 8 (about half the rows), w of 3 free, y of 30 near
    3x/4: the pairs with x too noisy for AIM's rounds at a small budget on all 40 values."""
    rng = np.random.default_rng(11)
    x = np.minimum(rng.geometric(0.08, n) - 1, 39)
    frame = pd.DataFrame({"z": (x >= 8).astype(int), "x": x, "w": rng.integers(0, 3, n),
                          "y": np.minimum(3 * x // 4 + rng.integers(0, 2, n), 29)})
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    schema = {"table": "t", "columns": {c: {"type": "integer", "min": 0, "max": n - 1}
                                        for c, n in {"z": 2, "x": 40, "w": 3, "y": 30}.items()}}
    return con, schema, frame


def _aim_run(monkeypatch, rho: float):
    con, schema, frame = _wide_table()
    db = dpsql.connect(con, schema=schema, budget=Budget(rho=rho), cache=False, progress=False)
    seen = spy_result(monkeypatch, db, "aim")
    syn = db.synthesize("aim", workload=[("z", "x", "y"), ("x", "w", "y")], rho=rho, seed=3, name="s")
    return syn, seen["result"], seen["reservation"], frame


def test_while_the_rounds_are_noisy_coarse_candidates_count_grouped_values_at_the_noise_paid_for(monkeypatch):
    """At rho = 0.004 the rounds' noise (sigma = sqrt(64 / (2 * 0.9 * rho)) = 94) is past 1% of the
    8,000 rows, so coarse candidates are offered, and (x, z) on x's 16 runs, 32 cells whose
    dependence is nearly all of it, scores far above the 80 cells of (x, z) itself. Each coarse
    observation's counts are the data's exact counts grouped by its cells (numpy here) within 6
    standard deviations of the noise its charge pays for, 1/(2 sigma^2) = rho_i; the charges add up
    to rho."""
    syn, result, reservation, frame = _aim_run(monkeypatch, 0.004)
    assert math.fsum(r for _, r in reservation.drawn) == pytest.approx(0.004, rel=1e-12)
    coarse = [o for o in result.observations if o.cells is not None]
    assert coarse and any("(grouped)" in name for name in syn.report.marginal)
    paid = [r for m, r in reservation.drawn if m.endswith("(grouped)")]
    assert len(paid) == len(coarse)
    values = frame[["z", "x", "w", "y"]].to_numpy()
    if result.compression is not None:
        values = np.column_stack([result.compression.labels[a][values[:, a]] for a in range(4)])
    for o, rho_i in zip(coarse, paid):
        cell = np.ravel_multi_index(tuple(values[:, a] for a in o.subset),
                                    [result.model.tree.domain[a] for a in o.subset])
        exact = np.bincount(o.cells[cell], minlength=o.values.size)
        assert float(np.max(o.std)) == pytest.approx(1 / math.sqrt(2 * rho_i), rel=1e-6)
        assert np.max(np.abs(o.values - exact)) < 6 * float(np.max(o.std)), o.subset


def test_with_little_noise_the_rounds_measure_full_marginals_only(monkeypatch):
    """At rho = 1 the rounds' noise is 6 rows, 0.08% of the rows: AIM as published, no coarse candidate."""
    syn, result, _, _ = _aim_run(monkeypatch, 1.0)
    assert all(o.cells is None for o in result.observations)
    assert not any("(grouped)" in name for name in syn.report.marginal)


def test_coarse_cells_follow_the_order_the_kernel_counts_in():
    """Attributes not grouped first, then the grouped ones, each in order: checked against a dense
    grouping of every cell."""
    groups = {1: np.array([0, 0, 1, 2, 2]), 3: np.array([1, 0, 1])}
    domain, subset = (2, 5, 4, 3), (1, 2, 3)
    cells = aim_module.coarse_cells(domain, subset, groups)
    for flat, (i, j, k) in enumerate(itertools.product(range(5), range(4), range(3))):
        assert cells[flat] == np.ravel_multi_index((j, groups[1][i], groups[3][k]), (4, 3, 2))


def test_coarsened_counts_sum_each_cell_into_the_coarse_cell_it_maps_to():
    """coarsened (runs summed along each axis, no map of every cell) against a dense bincount over
    coarse_cells, on random counts and the runs coarse_groups makes of random one-way counts."""
    rng = np.random.default_rng(5)
    domain = (20, 3, 18, 2)
    groups = aim_module.coarse_groups(domain, [Observation((a,), rng.exponential(50, n), 2.0)
                                               for a, n in enumerate(domain)], 6)
    assert sorted(groups) == [0, 2] and all(int(g.max()) + 1 <= 6 for g in groups.values())
    for subset in [(0, 1), (0, 2), (1, 2, 3), (0, 1, 2, 3), (2,)]:
        counts = rng.poisson(5, math.prod(domain[a] for a in subset)).astype(float)
        cells = aim_module.coarse_cells(domain, subset, {a: groups[a] for a in subset if a in groups})
        np.testing.assert_allclose(aim_module.coarsened(domain, subset, groups, counts),
                                   np.bincount(cells, counts, int(cells.max()) + 1))
