"""PGM synthesis: junction trees, belief propagation, estimation and sampling against dense
oracles on small domains, and the method's privacy accounting (dpsql.synth.pgm)."""

from __future__ import annotations

import itertools
import math
import warnings

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
from dpsql.errors import BudgetExceededError, ResourceLimitError
from dpsql.private.budget import Budget
from dpsql.synth.estimate import Observation, estimate, estimate_total, pool
from dpsql.synth.graphical import GraphicalModel
from dpsql.synth.junction import junction_tree
from dpsql.synth.pgm import marginal_weights, model_structure


def dense_marginal(p: np.ndarray, subset) -> np.ndarray:
    return p.sum(axis=tuple(a for a in range(p.ndim) if a not in subset)).ravel()


def dense_joint(model: GraphicalModel) -> np.ndarray:
    """The model's counts on the full domain, from its potentials (the oracle for belief propagation)."""
    domain = model.tree.domain
    log = np.zeros(domain)
    for clique, theta in zip(model.tree.cliques, model.theta):
        log = log + theta.reshape([domain[a] if a in clique else 1 for a in range(len(domain))])
    p = np.exp(log - log.max())
    return model.total * p / p.sum()


FAMILIES = [
    ((2, 3, 4, 5), [(0, 1), (1, 2), (2, 3), (0, 3)]),          # a cycle: triangulated with one chord
    ((3, 2, 4, 2, 3), [(0, 1), (1, 2), (2, 3, 4), (0, 4)]),
    ((2, 2, 2, 2, 2, 2), [(0, 1, 2), (2, 3), (4,), (3, 4, 5), (0, 5)]),
    ((4, 3, 2), []),                                             # no interactions: three components
    ((2, 3, 2, 2, 3, 2, 2), [(0, 1, 2), (0, 3), (1, 4), (2, 5), (0, 1, 6)]),  # a hub with a parent, 3 children
    ((2, 3, 2, 2, 3, 2), [(0, 1), (0, 2), (0, 3), (0, 4), (0, 5)]),  # a star: the root has 4 children
]


@pytest.mark.parametrize("domain,subsets", FAMILIES)
def test_junction_tree_covers_every_subset_and_has_the_running_intersection_property(domain, subsets):
    tree = junction_tree(domain, subsets)
    assert all(tree.home(s) >= 0 for s in subsets) and all(tree.home((a,)) >= 0 for a in range(len(domain)))
    assert len(tree.edges) == len(tree.cliques) - 1 and sorted(c for _, c in tree.edges) == list(range(1, len(tree.cliques)))
    # parents come first, and an attribute's cliques form a connected subtree
    seen = {0}
    for p, c in tree.edges:
        assert p in seen
        seen.add(c)
    for a in range(len(domain)):
        holding = {i for i, c in enumerate(tree.cliques) if a in c}
        linked = [(p, c) for p, c in tree.edges if p in holding and c in holding]
        assert len(linked) == len(holding) - 1, (a, tree)
    assert tree.size == sum(math.prod(domain[a] for a in c) for c in tree.cliques)


@pytest.mark.parametrize("domain,subsets", FAMILIES)
def test_belief_propagation_equals_the_dense_distribution(domain, subsets):
    rng = np.random.default_rng(1)
    tree = junction_tree(domain, subsets)
    model = GraphicalModel(tree, [rng.normal(size=[domain[a] for a in c]) * 2 for c in tree.cliques], total=123.0)
    joint = dense_joint(model)
    for clique, belief in zip(tree.cliques, model.beliefs()):
        np.testing.assert_allclose(belief.ravel(), dense_marginal(joint, clique), rtol=1e-10)
    for s in subsets:
        np.testing.assert_allclose(model.marginal(s), dense_marginal(joint, s), rtol=1e-10)


def test_a_step_so_long_that_beliefs_underflow_is_rejected_by_the_line_search_without_a_warning():
    """Laplace noise of scale 400 on 50 records (a pure epsilon on a tiny table): the line search
    tries a step whose potentials lie hundreds apart, so a clique's product underflows in every
    cell and its beliefs are 0/0. Such a model is NaN, silently (no RuntimeWarning reaches the
    user), and the step is rejected: the fit goes on and ends finite."""
    dom, b = (3, 4, 5), 400.0
    rng = np.random.default_rng(81)  # a draw whose fit tries such a step (81, 91, 96 and 100 of the first 101)
    x = rng.multinomial(50, rng.dirichlet(np.ones(60) * 0.3)).reshape(dom).astype(float)
    obs = [Observation((0, 1), x.sum(2).ravel() + rng.laplace(0, b, 12), np.sqrt(2) * b),
           Observation((1, 2), x.sum(0).ravel() + rng.laplace(0, b, 20), np.sqrt(2) * b),
           Observation((0,), x.sum((1, 2)) + rng.laplace(0, b / 10, 3), np.sqrt(2) * b / 10)]
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = estimate(dom, obs, iterations=2000,
                         progress=lambda step, ratio: seen.append(step))
    assert seen and all(np.all(np.isfinite(q)) for q in model.beliefs())
    underflow = GraphicalModel(model.tree, [np.where(np.arange(12).reshape(3, 4) == 0, 0.0, -800.0),
                                            np.where(np.arange(20).reshape(4, 5) < 5, -800.0, 0.0)], total=50.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert all(np.all(np.isnan(q)) for q in underflow.beliefs())


def test_estimation_without_noise_recovers_the_marginals_and_is_the_maximum_entropy_fit():
    """Exact marginals of a random (not decomposable) distribution on a decomposable family: the fit
    matches each one, and its joint is the maximum-entropy one, prod mu_C / prod mu_S (dense oracle)."""
    rng = np.random.default_rng(2)
    domain = (3, 2, 4, 3)
    p = rng.dirichlet(np.full(math.prod(domain), 0.7)).reshape(domain) * 5000
    subsets = [(0, 1), (1, 2), (2, 3), (1,)]
    obs = [Observation(s, dense_marginal(p, s), 1.0) for s in subsets]
    model = estimate(domain, obs, iterations=3000, tolerance=1e-15)
    for s in subsets:
        np.testing.assert_allclose(model.marginal(s), dense_marginal(p, s), atol=1e-6)
    maxent = (dense_marginal(p, (0, 1)).reshape(3, 2, 1, 1) * dense_marginal(p, (1, 2)).reshape(1, 2, 4, 1)
              * dense_marginal(p, (2, 3)).reshape(1, 1, 4, 3)
              / dense_marginal(p, (1,)).reshape(1, 2, 1, 1) / dense_marginal(p, (2,)).reshape(1, 1, 4, 1))
    np.testing.assert_allclose(dense_joint(model), maxent, rtol=1e-6)
    assert model.total == pytest.approx(5000)


def test_a_coarse_observation_is_fitted_through_the_marginal_it_groups():
    """Exact one-way counts and exact counts of a grouping of the pair's cells (AIM's coarse
    candidates): the fit matches all three, and its joint is the maximum-entropy one under them,
    found here by iterative proportional fitting on the dense table (the I-projection of the
    uniform). Two measurements of one grouping pool into one, apart from the pair's own counts."""
    rng = np.random.default_rng(8)
    domain = (4, 3)
    p = rng.dirichlet(np.full(12, 0.8)).reshape(domain) * 1000
    cells = np.array([0, 1, 1, 0, 1, 1, 2, 3, 3, 2, 3, 3])  # x in {0, 1} or {2, 3}, y 0 or {1, 2}
    grouped = np.bincount(cells, p.ravel())
    obs = [Observation((0,), p.sum(1), 1.0), Observation((1,), p.sum(0), 1.0), Observation((0, 1), grouped, 1.0, cells)]
    model = estimate(domain, obs, iterations=5000, tolerance=1e-15)
    joint = dense_joint(model)
    np.testing.assert_allclose(np.bincount(cells, joint.ravel()), grouped, atol=1e-5)
    np.testing.assert_allclose(joint.sum(1), p.sum(1), atol=1e-5)
    np.testing.assert_allclose(joint.sum(0), p.sum(0), atol=1e-5)
    ipf = np.full(domain, p.sum() / 12)
    for _ in range(2000):
        ipf *= (p.sum(1) / ipf.sum(1))[:, None]
        ipf *= (p.sum(0) / ipf.sum(0))[None, :]
        ipf = (ipf.ravel() * (grouped / np.bincount(cells, ipf.ravel()))[cells]).reshape(domain)
    np.testing.assert_allclose(joint, ipf, rtol=1e-4)
    pooled = pool([obs[2], Observation((0, 1), grouped + 4, 1.0, cells), Observation((0, 1), p.ravel(), 1.0)])
    assert [(o.subset, o.cells is None) for o in pooled] == [((0, 1), False), ((0, 1), True)]
    np.testing.assert_allclose(pooled[0].values, grouped + 2)


def test_estimation_weighs_each_measurement_by_its_noise():
    """Two inconsistent measurements of one marginal: the fit is their precision-weighted mean."""
    a, b = np.array([60.0, 40.0]), np.array([30.0, 70.0])
    model = estimate((2,), [Observation((0,), a, 1.0), Observation((0,), b, 3.0)], total=100.0, iterations=2000,
                     tolerance=1e-15)
    np.testing.assert_allclose(model.marginal((0,)), (a * 9 + b) / 10, atol=1e-6)
    assert estimate_total([Observation((0,), a, 1.0), Observation((0, 1), np.full(4, 30.0), 1.0)]) == \
        pytest.approx((100 / 2 + 120 / 4) / (1 / 2 + 1 / 4))


def test_a_slow_fit_runs_until_it_converges_not_for_a_fixed_number_of_steps():
    """Exact chain marginals of 500,000 skewed records (many empty cells, whose log-potentials
    must go far down) at sigma = 50: after 1,000 steps a cell is still 4.5 sigma off, so the
    default fit must run on until its steps stop mattering, and then stop before its cap."""
    rng = np.random.default_rng(0)
    domain = tuple(int(k) for k in rng.integers(6, 16, 8))
    records = np.zeros((500_000, len(domain)), dtype=np.int64)
    records[:, 0] = rng.choice(domain[0], len(records), p=rng.dirichlet(np.full(domain[0], 0.3)))
    for a in range(1, len(domain)):  # each attribute drawn given the previous one
        cumulative = np.cumsum(rng.dirichlet(np.full(domain[a], 0.1), size=domain[a - 1]), axis=1)
        drawn = (rng.random((len(records), 1)) > cumulative[records[:, a - 1]]).sum(axis=1)
        records[:, a] = drawn.clip(max=domain[a] - 1)
    subsets = [(a, a + 1) for a in range(len(domain) - 1)] + [(a, a + 2) for a in range(len(domain) - 2)]
    obs = [Observation(s, np.bincount(np.ravel_multi_index(records[:, list(s)].T, [domain[a] for a in s]),
                                      minlength=math.prod(domain[a] for a in s)).astype(float), 50.0)
           for s in subsets]
    steps: list[int] = []
    model = estimate(domain, obs, progress=lambda step, _: steps.append(step))
    assert 1000 < len(steps) < 10_000
    assert max(np.max(np.abs(model.marginal(o.subset) - o.values)) for o in obs) < 50.0


def test_sampling_rounds_each_clique_to_within_a_record_or_two_and_is_unbiased():
    rng = np.random.default_rng(3)
    domain = (3, 4, 2, 3)
    tree = junction_tree(domain, [(0, 1), (1, 2), (2, 3)])
    model = GraphicalModel(tree, [rng.normal(size=[domain[a] for a in c]) for c in tree.cliques], total=1.0)
    n, draws = 997, []
    for seed in range(200):
        records = model.sample(n, np.random.default_rng(seed))
        assert records.shape == (n, 4) and (records >= 0).all() and (records < np.array(domain)).all()
        counts = [np.bincount(np.ravel_multi_index(records[:, list(c)].T, [domain[a] for a in c]),
                              minlength=math.prod(domain[a] for a in c)) for c in tree.cliques]
        expected = [n * b.ravel() for b in model.beliefs()]
        assert np.abs(counts[0] - expected[0]).max() < 1 + 1e-9   # the root: floor or floor + 1
        assert all(np.abs(c - e).max() < 2 + 1e-9 for c, e in zip(counts, expected))
        draws.append(np.concatenate(counts))
    # unbiased: the mean over draws approaches the model's counts
    np.testing.assert_allclose(np.mean(draws, axis=0), np.concatenate([n * b.ravel() for b in model.beliefs()]),
                               atol=0.15)


# -- the method: synthesize("pgm") -------------------------------------------------------------

SCHEMA = {"table": "t", "columns": {
    "a": {"type": "integer", "min": 0, "max": 2},
    "b": {"type": "integer", "min": 0, "max": 3},
    "c": {"type": "boolean"},
    "d": {"type": "categorical", "values": ["x", "y", "z"]}}}


@pytest.fixture(scope="module")
def table():
    return make_table()


def make_table(n: int = 5000):
    """``n`` rows of four dependent columns (a, b, c, d) as DuckDB table t."""
    rng = np.random.default_rng(4)
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 4
    c = (b > 1) ^ (rng.random(n) < 0.2)
    d = np.where(c, "x", np.where(rng.random(n) < 0.5, "y", "z"))
    con = duckdb.connect()
    con.register("df", pd.DataFrame({"a": a, "b": b, "c": c, "d": d}))
    con.execute("CREATE TABLE t AS SELECT * FROM df")
    con.unregister("df")
    return con


def exact_counts(con, cols):
    g = ", ".join(cols)
    return {tuple(r[:-1]): r[-1] for r in con.sql(f"SELECT {g}, COUNT(*) FROM t GROUP BY {g}").fetchall()}


def largest_count_difference(con, df, cols) -> int:
    """The most any cell of the marginal on ``cols`` differs between table t and the synthetic ``df``."""
    want, got = exact_counts(con, cols), synthetic_counts(df, cols)
    return max(abs(got.get(k, 0) - want.get(k, 0)) for k in set(want) | set(got))


def synthetic_counts(df, cols):
    return {k: v for k, v in df.groupby(list(cols)).size().items()} if len(cols) > 1 else \
        {(k,): v for k, v in df.groupby(cols[0]).size().items()}


def test_at_a_huge_budget_the_table_has_the_measured_marginals(table):
    """No noise to speak of: the table's workload marginals equal the data's, up to sampling's rounding."""
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(rho=1e12), cache=False, progress=False)
    workload = [("a", "b"), ("b", "c"), ("c", "d")]
    syn = db.synthesize("pgm", workload=workload, rho=1e12, seed=0, name="s")
    assert len(syn.df) == 5000
    for cols in workload:
        assert largest_count_difference(table, syn.df, cols) <= 2, cols
    assert db.released.sql("SELECT COUNT(*) FROM s").fetchall() == [(5000,)]
    assert list(syn.report.columns[:2]) == ["marginal", "cells"] and (syn.report.max_abs_error_vs_noisy < 3).all()


@pytest.mark.parametrize("budget,spend,kind", [
    (Budget(epsilon=2.0), {"epsilon": 0.5}, "laplace"),
])
def test_pure_epsilon_accounting_is_one_measurement_charged_before_reading_with_the_calibrated_noise(
        table, monkeypatch, budget, spend, kind):
    from dpsql.privacy import Gaussian, Laplace
    from dpsql.synth import pgm as pgm_module

    db = dpsql.connect(table, schema=SCHEMA, budget=budget, cache=False, progress=False)
    seen = {}
    real = pgm_module.estimate

    def spy(domain, observations, **kw):
        seen["observations"] = observations
        seen["ledger"] = db.ledger.spent()  # the charge is in the ledger before the fit (after the read)
        return real(domain, observations, **kw)

    monkeypatch.setattr(pgm_module, "estimate", spy)
    workload = [("a", "b"), ("b", "c", "d")]
    syn = db.synthesize("pgm", workload=workload, seed=1, name="s", compress=False, **spend)
    entries = db.ledger.entries()
    assert len(entries) == 1 and entries[0].mechanism.startswith(kind)
    assert seen["ledger"] == db.ledger.spent()
    # hand calculation: the strategy's sensitivity from its weights, each observation's noise from it
    domain = (3, 4, 2, 3)
    marginals = [(0, 1), (1, 2, 3)]
    if kind == "laplace":
        theta = marginal_weights(domain, marginals, Laplace(spend["epsilon"]))
        scale = sum(theta.values()) / spend["epsilon"] * math.sqrt(2)
        assert (syn.epsilon, syn.delta, syn.rho) == (spend["epsilon"], 0.0, 0.0)
    else:
        noise = Gaussian(rho=spend["rho"]) if "rho" in spend else Gaussian(epsilon=spend["epsilon"], delta=spend["delta"])
        theta = marginal_weights(domain, marginals, noise)
        l2 = math.sqrt(sum(w * w for w in theta.values()))
        scale = noise.sigma(l2)
        if "rho" in spend:
            assert scale == pytest.approx(l2 / math.sqrt(2 * spend["rho"]))
            assert syn.rho == spend["rho"]
        else:
            assert (syn.epsilon, syn.delta) == (spend["epsilon"], spend["delta"])
    stds = {o.subset: o.std for o in seen["observations"]}
    assert set(stds) == set(theta)
    for subset, std in stds.items():  # the release lattice's discrete noise: within 1e-6 of the continuous std
        assert std == pytest.approx(scale / theta[subset], rel=1e-6)


def spy_kernel(monkeypatch, db) -> dict:
    """Record the ledger when the table is first read, and the reservation a run makes."""
    from dpsql.private.kernel import PrivateTable

    seen: dict = {"ledger_at_first_read": None}
    read, reserve = PrivateTable._read, PrivateTable.reserve

    def spy_read(self, counting, entry):
        if seen["ledger_at_first_read"] is None:
            seen["ledger_at_first_read"] = (len(db.ledger.entries()), db.ledger.spent())
        return read(self, counting, entry)

    def spy_reserve(self, *args, **kwargs):
        seen["reservation"] = reserve(self, *args, **kwargs)
        return seen["reservation"]

    monkeypatch.setattr(PrivateTable, "_read", spy_read)
    monkeypatch.setattr(PrivateTable, "reserve", spy_reserve)
    return seen


def gaussian_rho_by_hand(epsilon: float, delta: float) -> float:
    """The rho of Gaussian noise alone that is exactly (epsilon, delta)-DP, from the GDP curve:
    mu-GDP has delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (Dong, Roth & Su 2022,
    Corollary 2.13); Gaussian measurements of total rho are sqrt(2 rho)-GDP."""
    from scipy.optimize import brentq
    from scipy.stats import norm

    def excess(mu):
        return norm.cdf(-epsilon / mu + mu / 2) - math.exp(epsilon) * norm.cdf(-epsilon / mu - mu / 2) - delta

    mu = brentq(excess, 1e-6, 100.0, xtol=1e-14, rtol=1e-14)
    return mu * mu / 2


def zcdp_epsilon_by_hand(rho: float, delta: float) -> float:
    """The epsilon of (epsilon, delta)-DP that rho-zCDP implies by Canonne, Kamath & Steinke (2020,
    Corollary 13), minimized over a dense grid of alpha."""
    alpha = 1 + np.exp(np.linspace(-20, 25, 400_001))
    return float(np.min(alpha * rho + (math.log(1 / delta) - np.log(alpha)) / (alpha - 1) + np.log1p(-1 / alpha)))


def zcdp_rho_by_hand(epsilon: float, delta: float) -> float:
    """The largest rho whose :func:`zcdp_epsilon_by_hand` is within epsilon."""
    from scipy.optimize import brentq

    return brentq(lambda rho: zcdp_epsilon_by_hand(rho, delta) - epsilon, 1e-12, 10 * epsilon, xtol=1e-16,
                  rtol=1e-12)


#: A zCDP spend and an (epsilon, delta) one, each with a budget that holds it.
ZCDP_SPENDS = [(Budget(rho=0.5), {"rho": 0.2}), (Budget(epsilon=2.0, delta=1e-6), {"epsilon": 1.0, "delta": 1e-7})]


def spy_result(monkeypatch, db, method: str) -> dict:
    """:func:`spy_kernel`'s record, and under ``"result"`` what the function ``method`` that
    synthesize runs (``"aim"``, ``"mst"``, ``"pgm_compressed"``) returned."""
    import dpsql.synth.plan.pgm as pgm_plan
    import dpsql.synth.plan.rounds as rounds
    import dpsql.synth.plan.tree as tree

    planner = {"aim": rounds, "mst": tree, "pgm_compressed": pgm_plan}[method]  # the module that calls it
    seen = spy_kernel(monkeypatch, db)
    run = getattr(planner, method)

    def spy(*args, **kwargs):
        seen["result"] = run(*args, **kwargs)
        return seen["result"]

    monkeypatch.setattr(planner, method, spy)
    return seen


def assert_reserved_up_front(db, syn, seen, spend: dict, mechanism: str, gaussian: bool = False):
    """The run's whole spend (``spend``: rho, or epsilon and delta through the rho implying them: the
    exact Gaussian one for a mechanism of ``gaussian`` measurements alone, else the zCDP one) is one
    ledger entry of ``mechanism``, there before the first read; returns the closed reservation."""
    rho = spend.get("rho") or (gaussian_rho_by_hand if gaussian else zcdp_rho_by_hand)(spend["epsilon"],
                                                                                        spend["delta"])
    entries = db.ledger.entries()
    assert len(entries) == 1 and entries[0].mechanism == mechanism
    assert seen["ledger_at_first_read"] == (1, db.ledger.spent())            # all of it, before any row is read
    if "rho" in spend:
        assert db.spent().rho == syn.rho == spend["rho"]
    else:
        assert (db.spent().epsilon, db.spent().delta) == (syn.epsilon, syn.delta) == (spend["epsilon"], spend["delta"])
    reservation = seen["reservation"]
    assert reservation.rho == pytest.approx(rho, rel=1e-7) and reservation.closed
    return reservation


@pytest.mark.parametrize("budget,spend", ZCDP_SPENDS)
def test_compressed_accounting_by_hand_with_the_whole_spend_reserved_before_the_first_read(table, monkeypatch,
                                                                                           budget, spend):
    """The default under Gaussian noise: every one-way marginal, taking 0.3 * 3/4 of rho (the
    attributes with more than two values, whose counts decide the compression: a, b, d, 3 of 4),
    the weighted marginals, at L2 sensitivity 1, the rest; both drawn from one reservation
    charged before any row is read."""
    from dpsql.synth import pgm as pgm_module
    from dpsql.synth.pgm import unit_weights

    db = dpsql.connect(table, schema=SCHEMA, budget=budget, cache=False, progress=False)
    seen = spy_kernel(monkeypatch, db)
    fit = pgm_module.fit_model

    def spy_fit(domain, observations, *args):
        seen["domain"], seen["observations"], seen["compression"] = domain, observations, args[3]
        return fit(domain, observations, *args)

    monkeypatch.setattr(pgm_module, "fit_model", spy_fit)
    syn = db.synthesize("pgm", workload=[("a", "b"), ("b", "c", "d")], seed=1, name="s", **spend)
    reservation = assert_reserved_up_front(db, syn, seen, spend, "pgm", gaussian=True)
    rho = reservation.rho
    first, second = [r for _, r in reservation.drawn]
    assert first == pytest.approx(0.3 * 3 / 4 * rho, rel=1e-12) and first + second == pytest.approx(rho, rel=1e-12)
    # the one-way noise: sigma = sqrt(4) / sqrt(2 rho_1) per value, variances adding where values were merged
    observations, domain = seen["observations"], seen["domain"]
    sigma1 = math.sqrt(4) / math.sqrt(2 * first)
    assert [o.subset for o in observations[:4]] == [(0,), (1,), (2,), (3,)]
    for o in observations[:4]:
        merged = np.bincount(seen["compression"].labels[o.subset[0]], minlength=domain[o.subset[0]])
        np.testing.assert_allclose(np.broadcast_to(o.std, merged.shape), sigma1 * np.sqrt(merged), rtol=1e-6)
    # the weighted marginals: OPT_M's weights on the compressed domain at L2 norm 1, noise 1/sqrt(2 rho_2)
    theta = unit_weights(marginal_weights(domain, [(0, 1), (1, 2, 3)], dpsql.privacy.Gaussian(rho=second)))
    assert {o.subset for o in observations[4:]} == set(theta)
    for o in observations[4:]:
        assert o.std == pytest.approx(1 / math.sqrt(2 * second) / theta[o.subset], rel=1e-6)


def test_measuring_pairs_measures_the_workloads_two_way_marginals_only(table, monkeypatch):
    from dpsql.synth import pgm as pgm_module

    seen = {}
    real = pgm_module.estimate

    def spy(domain, observations, **kw):
        seen["measured"] = {o.subset for o in observations}
        return real(domain, observations, **kw)

    monkeypatch.setattr(pgm_module, "estimate", spy)
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(rho=1e12), cache=False, progress=False)
    syn = db.synthesize("pgm", workload=[("a", "b", "c"), ("d",)], rho=1e12, seed=0, measure="pairs", name="p",
                        compress=False)
    assert seen["measured"] == {(0, 1), (0, 2), (1, 2), (0,), (1,), (2,), (3,)}  # with every one-way marginal
    # exact measurements (rho 1e12): what is left is the fit's convergence rule (0.5% of the loss) and the
    # randomized rounding of 5,000 sampled rows; CI saw 3
    assert largest_count_difference(table, syn.df, ["a", "b"]) <= 3
    with pytest.raises(dpsql.Error, match="measure must be one of"):
        db.synthesize("pgm", workload=2, rho=1.0, measure="triples")


def test_a_workload_marginal_larger_than_the_model_is_measured_and_the_table_still_follows_it(table, monkeypatch):
    """A model of at most 20 cells cannot hold (a, b, c), 24 cells: the marginal is measured all
    the same, the model joins what fits, and the sampled records are refined to the measurement
    (here all but exact), so the table has that marginal although the model does not."""
    import dpsql.synth.pgm as pgm_module

    sizes = []
    fitted = pgm_module.estimate

    def spy(domain, observations, **kw):
        sizes.append(kw["tree"].size)
        return fitted(domain, observations, **kw)

    monkeypatch.setattr(pgm_module, "estimate", spy)
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(rho=1e12), cache=False, progress=False)
    cells = int(1.6e-4 * 2**20 / 8)
    syn = db.synthesize("pgm", workload=[("a", "b", "c")], rho=1e12, seed=0, name="s", max_model_size=1.6e-4,
                        adaptive=False)  # (else AIM's rounds select, as pgm does by default)
    assert cells == 20 and 0 < sizes[0] <= cells
    assert largest_count_difference(table, syn.df, ("a", "b", "c")) <= 2


def test_refusals_spend_nothing(table):
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(rho=0.1), cache=False, progress=False)
    with pytest.raises(ResourceLimitError, match="every one-way marginal, 12 cells, more than max_model_size=1e-05 MB"):
        db.synthesize("pgm", workload=3, rho=0.05, max_model_size=1e-5)
    with pytest.raises(BudgetExceededError):
        db.synthesize("pgm", workload=2, rho=0.5)
    with pytest.raises(dpsql.Error, match="pgm takes no option rounds"):
        db.synthesize("pgm", workload=2, rho=0.05, rounds=3)
    with pytest.raises(dpsql.Error, match="compress must be a finite number > 0"):
        db.synthesize("pgm", workload=2, rho=0.05, compress=0)
    with pytest.raises(dpsql.Error, match="one_way_share must be in"):
        db.synthesize("pgm", workload=2, rho=0.05, one_way_share=1.0)
    with pytest.raises(dpsql.Error, match="adaptive must be True or False"):
        db.synthesize("pgm", workload=2, rho=0.05, adaptive=1)
    assert db.ledger.entries() == [] and db.spent().rho == 0
    pure = dpsql.connect(table, schema=SCHEMA, budget=Budget(epsilon=1.0), cache=False, progress=False)
    with pytest.raises(dpsql.Error, match="one_way_share is the one-way marginals' share of a Gaussian"):
        pure.synthesize("pgm", workload=2, epsilon=0.5, one_way_share=0.2)
    with pytest.raises(dpsql.Error, match="pgm compresses under Gaussian noise only"):
        pure.synthesize("pgm", workload=2, epsilon=0.5, compress=3.0)
    assert pure.ledger.entries() == []


@pytest.mark.parametrize("options", [{}, {"compress": False}])
def test_the_progress_bar_reports_convergence_not_steps_toward_a_cap(table, monkeypatch, options):
    """Find 5 of issue 42: the bar's ETA assumed all 10,000 steps. The fit stops once it
    converges, far below its cap of steps: the bar counts percent converged, rises, and ends
    full, not at steps of a cap."""
    import dpsql.synth.synthesize as synthesize

    seen = []

    class Recording(synthesize.tqdm):
        def update(self, n=1):
            seen.append(self.n + n)
            return super().update(n)

        def close(self):
            seen.append((self.n, self.total, self.unit, self.desc))
            super().close()

    monkeypatch.setattr(synthesize, "tqdm", Recording)
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(rho=1.0), cache=False, progress=True)
    db.synthesize("pgm", workload=2, rho=1.0, seed=0, **options)
    steps = [x for x in seen if isinstance(x, int)]
    done, total, unit, desc = next(x for x in seen if isinstance(x, tuple))
    assert (done, total, unit) == (100, 100, "% converged") and "fit" in desc
    assert steps[-1] == 100 and 0 < steps[-2] < 100 and steps == sorted(steps)  # converging, then filled


def test_a_domain_of_binary_attributes_is_not_compressed(monkeypatch):
    """Merging the two values of a binary attribute gains nothing: the one-way counts, measured
    all the same, compress nothing."""
    rng = np.random.default_rng(2)
    con = duckdb.connect()
    con.register("frame", pd.DataFrame(rng.integers(0, 2, (500, 3)), columns=["x", "y", "z"]))
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    schema = {"table": "t", "columns": {c: {"type": "integer", "min": 0, "max": 1} for c in "xyz"}}
    db = dpsql.connect(con, schema=schema, budget=Budget(rho=1.0), cache=False, progress=False)
    from dpsql.synth import pgm as pgm_module

    shrunk = []

    def shrink(*args, **kwargs):
        shrunk.append(pgm_module_shrink(*args, **kwargs))
        return shrunk[-1]

    pgm_module_shrink = pgm_module.shrink
    monkeypatch.setattr(pgm_module, "shrink", shrink)
    db.synthesize("pgm", workload=[("x", "y"), ("y", "z")], rho=0.5, seed=0, name="s")
    assert shrunk == [None]  # the model's domain is the table's
    assert [e.mechanism for e in db.ledger.entries()] == ["pgm"]


def test_beyond_the_marginal_algebra_each_workload_marginal_is_measured_with_weight_one():
    weights = marginal_weights((2,) * 25, [(0, 1), (3, 2, 24)], dpsql.privacy.Gaussian(rho=1.0))
    assert weights == {(0, 1): 1.0, (2, 3, 24): 1.0}


def test_laplace_weights_are_searched_for_on_at_most_laplace_search_attributes():
    """The search over 2^d weights took minutes at 14 binary columns, hours at 20, before the run
    started: a default pgm under a pure epsilon on 20 columns seemed to hang."""
    from dpsql.privacy import Laplace
    from dpsql.synth.pgm import LAPLACE_SEARCH_ATTRIBUTES

    d = LAPLACE_SEARCH_ATTRIBUTES + 1
    pairs = list(itertools.combinations(range(d), 2))
    assert marginal_weights((2,) * d, pairs, Laplace(1.0)) == dict.fromkeys(pairs, 1.0)
    searched = marginal_weights((2, 3, 2), [(0, 1), (1, 2)], Laplace(1.0))
    assert searched != {(0, 1): 1.0, (1, 2): 1.0} and math.isclose(sum(searched.values()), 1.0)


def test_too_many_cells_are_refused_before_the_weights_are_searched_for(monkeypatch):
    import dpsql.synth.plan.pgm as planner

    monkeypatch.setattr(planner, "marginal_weights", lambda *a: pytest.fail("searched first"))
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT range % 1000 AS c0, range % 999 AS c1, range % 998 AS c2 FROM range(10)")
    schema = {"table": "t", "columns": {f"c{i}": {"type": "categorical", "values": list(range(10_000))}
                                        for i in range(3)}}  # (an integer column this wide is binned)
    db = dpsql.connect(con, schema=schema, budget=Budget(epsilon=1.0), cache=False, progress=False)
    with pytest.raises(ResourceLimitError, match="PGM counts every cell of the workload's marginals at once: "
                                                 "300,000,000 cells, .* the widest column, c0, has 10,000 values"):
        db.synthesize("pgm", workload=2, epsilon=1.0)
    assert db.ledger.entries() == []


def test_weights_are_opt_ms_when_it_is_weighted_marginals_else_equal():
    """OPT_M's weighted marginals are measured when OPT_M is weighted marginals (always under
    Laplace noise; under Gaussian noise, for these nested marginals); when Gaussian OPT_M needs
    residual queries (negative marginal weights, as for every pair), the workload's marginals
    with equal weights. Either way, every workload marginal is answered by a measured one."""
    from dpsql.hdmm.marginals import Marginals, ResidualMarginals
    from dpsql.hdmm.matrix import Identity, Total
    from dpsql.hdmm.optimize.marginal import opt_marginal
    from dpsql.hdmm.workload import Workload
    from dpsql.privacy import Gaussian, Laplace

    domain = (3, 4, 2, 3)

    def opt_m(marginals, noise):
        terms = [(1.0, tuple(Identity(n) if a in m else Total(n) for a, n in enumerate(domain))) for m in marginals]
        return opt_marginal(Workload(domain, terms), noise).strategy

    def measured(strategy):  # OPT_M's marginals with a weight, by attribute set
        return {tuple(a for a in range(4) if mask >> a & 1): strategy.theta[mask]
                for mask in np.flatnonzero(strategy.theta > 1e-9 * strategy.theta.max())}

    pairs = list(itertools.combinations(range(4), 2))
    nested = [(0, 1), (0,)]
    assert isinstance(opt_m(pairs, Gaussian(rho=1.0)), ResidualMarginals)
    assert marginal_weights(domain, pairs, Gaussian(rho=1.0)) == {p: 1.0 for p in pairs}
    for marginals, noise in ((nested, Gaussian(rho=1.0)), (pairs, Laplace(1.0)), (nested, Laplace(1.0))):
        strategy = opt_m(marginals, noise)
        assert isinstance(strategy, Marginals)
        theta = marginal_weights(domain, marginals, noise)
        assert theta == pytest.approx(measured(strategy), rel=1e-12)
        assert all(any(set(m) <= set(k) for k in theta) for m in marginals)
    weights = marginal_weights(domain, nested, Gaussian(rho=1.0))
    assert set(weights) == {(0,), (0, 1)} and weights[(0,)] < 0.9 * weights[(0, 1)]  # not equal


# -- refining sampled records toward measured marginals ------------------------------------------

def _marginal(records, domain, subset):
    return np.bincount(np.ravel_multi_index(records[:, list(subset)].T, [domain[a] for a in subset]),
                       minlength=math.prod(domain[a] for a in subset))


def test_a_greedy_model_holds_a_strong_dependence_confined_to_one_cell_of_many():
    """Three 40-value attributes, each pair measured with noise σ = 1 over independent counts,
    one pair with 15σ more in a single cell of its 1,600. The model may join one pair (the full
    tree does not fit): it joins that one, in each of ten noise draws. By the L1 distance less
    the noise's expected L1 (AIM's score), whose noise alone varies by about 25σ over those
    cells, the cell was lost among them: that score joined it in 5 of the 10 draws, and once
    another pair."""
    domain, sigma = (40, 40, 40), 1.0
    pairs = [(0, 1), (0, 2), (1, 2)]
    for seed in range(10):
        rng = np.random.default_rng(seed)
        observations = [Observation((a,), np.full(40, 400.0) + sigma * rng.standard_normal(40), sigma)
                        for a in range(3)]
        for pair in pairs:
            counts = np.full((40, 40), 10.0)
            if pair == (0, 2):
                counts[7, 31] += 15 * sigma
            observations.append(Observation(pair, (counts + sigma * rng.standard_normal((40, 40))).ravel(), sigma))
        tree, fitted = model_structure(domain, observations, max_cells=2_000)
        assert [p for p in pairs if tree.home(p) >= 0] == [(0, 2)], seed
        assert tree.size <= 2_000 and {o.subset for o in fitted} >= {(0,), (1,), (2,), (0, 2)}


def _network(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` rows of a Bayesian network on (100, 20, 10, 2, 2) values: attributes 1 and 2 depend
    strongly on 0 (Dirichlet(0.5) rows), 3 mildly on 2, and 4 on 1 and 3."""
    def child(parent: np.ndarray, k: int, size: int, alpha: float = 0.5) -> np.ndarray:
        table = rng.dirichlet(np.full(k, alpha), size=size)
        return (rng.random(n)[:, None] > table[parent].cumsum(axis=1)).sum(axis=1).clip(0, k - 1)

    x0 = rng.choice(100, n, p=rng.dirichlet(np.full(100, 2.0)))
    x1, x2 = child(x0, 20, 100), child(x0, 10, 100)
    x3 = child(x2, 2, 10, 5.0)
    return np.stack([x0, x1, x2, x3, child(x3 * 20 + x1, 2, 40, 5.0)], axis=1)


def test_a_greedy_model_joins_a_wide_attributes_relations_spread_over_many_cells():
    """Issue 42's salary table in small: a 100-value attribute on which a 20- and a 10-value one
    depend, on 20,000 rows, every triple measured with noise σ = 15. The relation (0, 1) lies
    in 2,000 cells of about 10 rows each, few beyond 3σ: counted only there, its gain was a
    fraction of its distance from independence, and the greedy sets of the small attributes,
    (1, 2, 3, 4), took the cells that joining it needed: the model left it out. The spread
    measure of the gain and the spanning forest first (each needed: with either alone one of
    the draws still left it out) join both of attribute 0's relations."""
    domain, sigma = (100, 20, 10, 2, 2), 15.0
    for seed in range(3):
        rng = np.random.default_rng(seed)
        data = _network(rng, 20_000)
        observations = []
        for t in itertools.combinations(range(5), 3):
            counts = _marginal(data, domain, t).astype(float)
            observations.append(Observation(t, counts + sigma * rng.standard_normal(counts.size), sigma))
        tree, _ = model_structure(domain, observations, max_cells=4_000)
        assert tree.home((0, 1)) >= 0 and tree.home((0, 2)) >= 0 and tree.size <= 4_000, (seed, tree.cliques)


def test_a_model_of_every_measured_set_larger_than_the_greedy_limit_is_built_greedily():
    """Every pair of 20 binary attributes makes one clique of 2^20 cells, within the default 10 MB:
    it used to be the model, and its fit took seconds a step (hours in all). Above GREEDY_CELLS
    the model is chosen greedily, as when the measured sets exceed max_model_size; at or below
    it (all pairs of 16), the model still holds every measured set."""
    from dpsql.synth.pgm import GREEDY_CELLS

    rng = np.random.default_rng(0)
    for d in (16, 20):
        pairs = list(itertools.combinations(range(d), 2))
        observations = [Observation(p, 50.0 + rng.standard_normal(4), 1.0) for p in pairs]
        tree, fitted = model_structure((2,) * d, observations, max_cells=10 * 2**20 // 8)
        assert tree.size <= GREEDY_CELLS
        assert (tree.size == 2**16 and len(fitted) == len(pairs)) if d == 16 else tree.size < 2**20


def test_the_greedy_model_tries_few_trial_models_and_keeps_a_chains_every_link(monkeypatch):
    """pgm with every pair of 40 columns ran past 10 minutes, three quarters of it building a
    trial junction tree for every candidate at every greedy step. Each step now tries the
    candidates in order of their gain per cell added when last tried (those near the set last
    added afresh), and stops at the first that cannot beat the best: on 24 columns' 276 pairs,
    1,458 trial trees (6,866 before) and still every link of the chain the data is drawn from."""
    import dpsql.synth.pgm as pgm_module

    rng = np.random.default_rng(0)
    d, n, sd = 24, 20_000, 40.0
    sizes = [(2, 3, 5, 8)[i % 4] for i in range(d)]
    cols = [rng.integers(0, sizes[0], n)]
    for i in range(1, d):
        cols.append(np.where(rng.random(n) < 0.3, rng.integers(0, sizes[i], n), cols[-1] % sizes[i]))
    observations = []
    for a, b in itertools.combinations(range(d), 2):
        counts = np.bincount(cols[a] * sizes[b] + cols[b], minlength=sizes[a] * sizes[b]).astype(float)
        observations.append(Observation((a, b), counts + rng.normal(0, sd, counts.size), np.full(counts.size, sd)))
    trials = []

    def counted(domain, subsets):
        trials.append(len(subsets))
        return junction_tree(domain, subsets)

    monkeypatch.setattr(pgm_module, "junction_tree", counted)
    tree, fitted = model_structure(sizes, observations, 2**16)
    assert tree.size <= 2**16 and len(trials) < 2_500
    assert all(tree.home((i, i + 1)) >= 0 for i in range(d - 1))


def test_refining_toward_exact_marginals_reaches_them_and_keeps_the_records_in_the_domain():
    from dpsql.synth.refine import refine

    rng = np.random.default_rng(5)
    domain, n = (4, 5, 3, 6), 4000
    a = rng.integers(0, 4, n)
    b = (a + rng.integers(0, 2, n)) % 5
    truth = np.column_stack([a, b, b % 3, (a + b % 3 + rng.integers(0, 2, n)) % 6])
    subsets = list(itertools.combinations(range(4), 2)) + [(0, 1, 3)]
    targets = [(s, _marginal(truth, domain, s).astype(float), 0.0) for s in subsets]
    start = np.column_stack([rng.integers(0, k, n) for k in domain])  # independent attributes
    worst = [max(np.abs(_marginal(r, domain, s) - t).max() for s, t, _ in targets)
             for r in (start, refine(start, domain, targets, np.random.default_rng(0), sweeps=30))]
    assert worst[0] > 400 and worst[1] <= 2
    out = refine(start, domain, targets, np.random.default_rng(0), sweeps=3)
    assert out.shape == start.shape and (out >= 0).all() and (out < np.array(domain)).all()
    assert not np.shares_memory(out, start)


def _chain_result(n: int):
    """A model holding (0, 1) and (1, 2), fitted to a table where c follows a directly (through
    b only in part), and the result with the unheld (0, 2) also measured: exact counts (σ = 1)."""
    from dpsql.synth.pgm import PGMResult

    rng = np.random.default_rng(3)
    domain = (30, 30, 4)
    a = rng.integers(0, 30, n)
    b = (a + rng.integers(0, 3, n)) % 30
    truth = np.column_stack([a, b, (a // 8 + rng.integers(0, 2, n)) % 4])
    held = [Observation(s, _marginal(truth, domain, s).astype(float), 1.0) for s in [(0, 1), (1, 2)]]
    model = estimate(domain, held, tree=junction_tree(domain, [(0, 1), (1, 2)]), iterations=300)
    unheld = Observation((0, 2), _marginal(truth, domain, (0, 2)).astype(float), 1.0)
    return domain, PGMResult(model, held), PGMResult(model, held + [unheld]), unheld.values


def test_refining_a_fresh_draw_toward_the_models_own_counts_moves_no_record():
    """The drawn records miss the model's fractional counts only by the drawing's chance;
    refining toward them with no slack moved 309 of 5,000 records, to cells the drawing had
    left empty (raising the mean total variation on ADULT from 0.124 to 0.134)."""
    n = 5000
    _, held, _, _ = _chain_result(n)
    drawn, refined = (held.sample(n, np.random.default_rng(0), sweeps=s) for s in (0, 30))
    assert (drawn != refined).any(axis=1).sum() < n // 100


def test_refining_scales_the_measured_counts_to_the_rows_drawn():
    """A table of half the model's rows is refined toward half of each measured count: the
    unheld (0, 2) gets much closer to it. Unscaled, most cells looked short of their targets
    and the records moved little (L1 441 to 286 here)."""
    n = 5000
    domain, _, both, counts = _chain_result(n)
    target = counts * 0.5
    drawn, refined = (_marginal(both.sample(n // 2, np.random.default_rng(1), sweeps=s), domain, (0, 2))
                      for s in (0, 30))
    assert np.abs(refined - target).sum() < 0.4 * np.abs(drawn - target).sum()


def test_refining_leaves_differences_within_the_noise_alone():
    from dpsql.synth.refine import refine

    rng = np.random.default_rng(6)
    records = np.column_stack([rng.integers(0, 3, 900), rng.integers(0, 2, 900)])
    counts = _marginal(records, (3, 2), (0, 1)).astype(float)
    noisy = counts + rng.uniform(-9.9, 9.9, counts.size)  # within 2 sigma of sigma = 5
    assert (refine(records, (3, 2), [((0, 1), noisy, 5.0)], rng, sweeps=10) == records).all()
    moved = refine(records, (3, 2), [((0, 1), counts + np.array([60.0, -60, 0, 0, 0, 0]), 5.0)], rng, sweeps=10)
    assert 45 <= _marginal(moved, (3, 2), (0, 1))[0] - counts[0] <= 50  # 60 less the 2-sigma slack


@pytest.mark.slow
@pytest.mark.parametrize("method", ["pgm", "aim"])
def test_a_35_attribute_table_is_synthesized_within_its_time_budget(method):
    """35 attributes (a domain of 2·10^31 cells), 20,000 rows, 64 random 3-way marginals at
    rho = 0.05: within 10 minutes on 2 cores (pgm about 1 here, aim about 4), and closer to the data
    than its exact one-way marginals taken independently: under half their mean total variation
    (about a quarter here) and below their max error (which noise dominates on these small cells:
    0.009 to 0.012 against 0.016)."""
    import time

    from dpsql.owner.evaluate import evaluate
    from dpsql.synth import random_marginals

    rng = np.random.default_rng(7)
    sizes = [4, 5, 6, 8, 10, 12, 16] * 5
    n, d = 20_000, len(sizes)
    latent = rng.integers(0, 4, n)
    data = {f"c{i}": (latent * (i + 1) + rng.integers(0, 3, n)) % k for i, k in enumerate(sizes)}
    con = duckdb.connect()
    con.register("df", pd.DataFrame(data))
    con.execute("CREATE TABLE wide AS SELECT * FROM df")
    schema = {"table": "wide", "columns": {f"c{i}": {"type": "integer", "min": 0, "max": k - 1}
                                           for i, k in enumerate(sizes)}}
    assert math.prod(sizes) > 1e31
    db = dpsql.connect(con, schema=schema, budget=Budget(rho=0.05), cache=False, progress=False)
    marginals = random_marginals(d, 3, 64, seed=3)
    start = time.perf_counter()
    syn = db.synthesize(method, workload=[[f"c{a}" for a in m] for m in marginals], rho=0.05, seed=0)
    assert time.perf_counter() - start < 600
    # the baseline: the exact one-way marginals, independent (each column shuffled on its own)
    shuffled = np.column_stack([rng.permutation(data[f"c{i}"]) for i in range(d)])

    def errors(records):
        e = evaluate(con, "wide", schema, records, marginals)
        return float(e.max_error.iloc[-1]), float((0.5 * e.cells * e.mean_error).iloc[:-1].mean())

    (ours, ours_tv), (indep, indep_tv) = errors(syn.records), errors(shuffled)
    assert ours < indep and ours_tv < 0.5 * indep_tv, (ours, ours_tv, indep, indep_tv)


TOO_LARGE = 40 * 8 / 2**20  # max_model_size of 40 cells: every triple of a, b, c, d is one clique of 72


@pytest.mark.parametrize("budget,spend", ZCDP_SPENDS)
def test_when_the_compressed_marginals_are_too_large_for_one_model_aims_rounds_spend_the_rest(table, monkeypatch,
                                                                                              budget, spend):
    """Every triple of a, b, c, d (72 cells) in a model of 40: measured all at once, each is too
    noisy for the greedy model that must choose among them. After the one-way marginals (AIM's
    share: its 4 first rounds of 16 a column, each 0.9 of a round's), measured again (on 5,000
    rows their noise is above ONE_WAY_NOISE of them at either spend: :func:`one_way_top_up_by_hand`),
    the rest of rho goes to AIM's rounds, each a pick and a measurement,
    from one reservation of the rho any zCDP mechanism stands for (AIM's picks are not Gaussian).
    With adaptive=False, pgm measures them all, as before, at the exact Gaussian rho."""
    db = dpsql.connect(table, schema=SCHEMA, budget=budget, cache=False, progress=False)
    seen = spy_kernel(monkeypatch, db)
    syn = db.synthesize("pgm", workload=3, seed=1, name="s", max_model_size=TOO_LARGE, **spend)
    reservation = assert_reserved_up_front(db, syn, seen, spend, "pgm")
    rho, drawn = reservation.rho, reservation.drawn
    kinds = [m.split("(")[0] for m, _ in drawn]
    assert kinds[:2] == ["gaussian"] * 2 and kinds[2::2] == ["exponential"] * (len(kinds) // 2 - 1)
    assert len(kinds) % 2 == 0
    assert drawn[0][1] == pytest.approx(0.9 * 4 / 64 * rho, rel=1e-9)
    assert drawn[1][1] == pytest.approx(one_way_top_up_by_hand(rho, 5000) * rho, rel=0.03)
    assert math.fsum(r for _, r in drawn) == pytest.approx(rho, rel=1e-9)
    assert syn.method == "pgm" and syn.report.attrs["estimate"].startswith(
        "the measured marginals are too large for one model once compressed: AIM's rounds select among them")
    plain = dpsql.connect(table, schema=SCHEMA, budget=budget, cache=False, progress=False)
    seen = spy_kernel(monkeypatch, plain)
    measured = plain.synthesize("pgm", workload=3, seed=1, name="s", max_model_size=TOO_LARGE, adaptive=False, **spend)
    assert [m.split("(")[0] for m, _ in seen["reservation"].drawn] == ["gaussian", "gaussian"]
    assert_reserved_up_front(plain, measured, seen, spend, "pgm", gaussian=True)


def one_way_top_up_by_hand(rho: float, rows: int) -> float:
    """What pgm measures the one-way marginals of make_table's 4 columns again with before AIM's
    rounds, by hand: AIM's first share (0.9 * 4/64 of rho) leaves each count a noise standard
    deviation sigma = sqrt(4 / (2 * 0.05625 * rho)); pooled with a second share, the variance falls
    as the whole share grows, so the whole that brings sigma to ONE_WAY_NOISE of the rows is
    0.05625 (sigma / (ONE_WAY_NOISE rows))^2, at most pgm's own one-way share (0.3 * 3/4: a, b
    and d have more than two values)."""
    from dpsql.synth.pgm import ONE_WAY_NOISE

    first = 0.9 * 4 / 64
    sigma = math.sqrt(4 / (2 * first * rho))
    return max(0.0, min(0.3 * 3 / 4, first * (sigma / (ONE_WAY_NOISE * rows)) ** 2) - first)


@pytest.mark.parametrize("rows", [4_000, 6_000, 60_000])
def test_before_aims_rounds_the_one_way_counts_are_measured_again_until_their_noise_is_few_rows(monkeypatch, rows):
    """AIM's rounds measure a marginal with the noise its first measurement gave every one-way
    count, so they seldom measure one again. At rho = 0.1, AIM's share of it leaves each count a
    noise standard deviation of 18.9: more than ONE_WAY_NOISE (0.2%) of 4,000 or 6,000 rows, less
    than that of 60,000. So pgm measures them again with what brings the pooled noise there
    (:func:`one_way_top_up_by_hand`): all of its own share on 4,000 rows, part of it on 6,000 (the
    noisy row count moves it by a fraction of a percent), nothing on 60,000."""
    db = dpsql.connect(make_table(rows), schema=SCHEMA, budget=Budget(rho=1.0), cache=False, progress=False)
    seen = spy_kernel(monkeypatch, db)
    db.synthesize("pgm", workload=3, rho=0.1, seed=1, name="s", max_model_size=TOO_LARGE)
    drawn = seen["reservation"].drawn
    more = one_way_top_up_by_hand(0.1, rows)
    assert drawn[0][0].startswith("gaussian") and drawn[0][1] == pytest.approx(0.9 * 4 / 64 * 0.1, rel=1e-9)
    if more > 0:
        assert drawn[1][0].startswith("gaussian") and drawn[1][1] == pytest.approx(more * 0.1, rel=0.03)
        assert drawn[2][0].startswith("exponential")
    else:
        assert drawn[1][0].startswith("exponential")
    assert (rows == 4_000) == (more == pytest.approx(0.3 * 3 / 4 - 0.9 * 4 / 64)) and (rows == 60_000) == (more == 0)


def test_a_given_one_way_share_is_measured_whole_before_aims_rounds(table, monkeypatch):
    """one_way_share is the user's: the one-way marginals take all of it in one measurement, then
    AIM's rounds (a pick first), not AIM's share."""
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(rho=1.0), cache=False, progress=False)
    seen = spy_kernel(monkeypatch, db)
    db.synthesize("pgm", workload=3, rho=0.5, seed=1, name="s", max_model_size=TOO_LARGE, one_way_share=0.1)
    drawn = seen["reservation"].drawn
    assert drawn[0][0].startswith("gaussian") and drawn[0][1] == pytest.approx(0.05, rel=1e-9)
    assert drawn[1][0].startswith("exponential")


def test_the_choice_is_made_on_the_compressed_domain(monkeypatch):
    """x is declared 0..49 but holds two values: (x, a, b) is 300 cells, too many for a model of
    100, and 18 once x's 48 empty values are merged. So AIM's rounds are planned (the reservation
    is the zCDP rho) and the one-way marginals measured first with AIM's share (0.9 * 3/48), but
    once they are released the marginal fits: the rest of pgm's share (0.3 * 2/3: x and a have
    more than two values) measures them again and the marginal is measured whole, as pgm does,
    and no pick is made."""
    from dpsql.synth.accounting import zcdp_rho

    rng = np.random.default_rng(5)
    n = 4000
    a = rng.integers(0, 3, n)
    frame = pd.DataFrame({"x": (a + (rng.random(n) < 0.2)) % 2, "a": a, "b": (a > 0) ^ (rng.random(n) < 0.1)})
    con = duckdb.connect()
    con.register("frame", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    schema = {"table": "t", "columns": {"x": {"type": "integer", "min": 0, "max": 49},
                                        "a": {"type": "integer", "min": 0, "max": 2}, "b": {"type": "boolean"}}}
    db = dpsql.connect(con, schema=schema, budget=Budget(epsilon=2.0, delta=1e-6), cache=False, progress=False)
    seen = spy_kernel(monkeypatch, db)
    syn = db.synthesize("pgm", workload=[("x", "a", "b")], epsilon=1.0, delta=1e-7, seed=0, name="s",
                        max_model_size=100 * 8 / 2**20)
    reservation = seen["reservation"]
    assert [m.split("(")[0] for m, _ in reservation.drawn] == ["gaussian", "gaussian", "gaussian"]
    rho, drawn = reservation.rho, [r for _, r in reservation.drawn]
    assert rho == pytest.approx(zcdp_rho(1.0, 1e-7), rel=1e-9)
    assert drawn[0] == pytest.approx(0.9 * 3 / 48 * rho) and drawn[0] + drawn[1] == pytest.approx(0.2 * rho)
    assert syn.report.attrs["estimate"].startswith("a model of")
    assert largest_count_difference(con, syn.df, ("x", "a", "b")) < 0.05 * n


@pytest.mark.parametrize("method", ["pgm", "aim"])
def test_aims_rounds_merge_only_the_rare_values_that_hold_few_rows(monkeypatch, method):
    """x is declared 0..49 and holds two values; y's 2 common values hold 5,000 of the 6,000 rows
    and its 100 others 10 each, below 3 standard deviations of the one-way noise (about 10 at this
    spend, below ONE_WAY_NOISE of the rows: not measured again) but together a sixth of the rows.
    Every triple is too large for a model of 200 cells,
    so AIM's rounds spend the rest of rho, on a domain where x's 48 empty values are merged
    (together they hold nothing) and y's are not (together they hold more than FEW_ROWS of the
    rows: merged, they would be drawn back independent of every other column). The synthetic x
    keeps its two values. So do aim's rounds (its one-way share, 0.3 * 5/6, leaves a noise of 5)."""
    rng = np.random.default_rng(6)
    n = 6000
    a = rng.integers(0, 3, n)
    y = np.concatenate([np.repeat([0, 1], 2500), np.repeat(np.arange(2, 102), 10)])
    frame = pd.DataFrame({"x": 7 * ((a + (rng.random(n) < 0.2)) % 2), "y": rng.permutation(y), "a": a,
                          "b": (a > 0) ^ (rng.random(n) < 0.1), "c": (a + rng.integers(0, 2, n)) % 3,
                          "d": rng.integers(0, 3, n)})
    con = duckdb.connect()
    con.register("frame", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    schema = {"table": "t", "columns": {"x": {"type": "integer", "min": 0, "max": 49},
                                        "y": {"type": "integer", "min": 0, "max": 101},
                                        **{k: {"type": "integer", "min": 0, "max": 2} for k in "acd"},
                                        "b": {"type": "boolean"}}}
    db = dpsql.connect(con, schema=schema, budget=Budget(rho=1.0), cache=False, progress=False)
    seen = spy_result(monkeypatch, db, "aim")
    syn = db.synthesize(method, workload=3, rho=0.5, seed=0, name="s", max_model_size=200 * 8 / 2**20)
    result = seen["result"]
    x_values, y_values = result.model.tree.domain[:2]
    assert x_values <= 5 and y_values == 102  # x: 2 kept, the rest merged (and a stray value or two)
    assert method == "aim" or syn.report.attrs["estimate"].startswith(
        "the measured marginals are too large for one model once compressed: AIM's rounds select among them, "
        "merging only")
    assert len(result.observations) > 6  # the one-way marginals, then the rounds'
    assert seen["reservation"].drawn[1][0].startswith("exponential")  # a pick next: not measured again
    assert largest_count_difference(con, syn.df, ("x",)) < 0.05 * n


def test_when_aims_rounds_cannot_be_planned_pgm_measures_every_marginal(table, monkeypatch):
    """AIM's rounds refused before the charge (here: more candidates than AIM_MAX_CANDIDATES): pgm
    measures every workload marginal at once and fits its greedy model, as without adaptive."""
    import dpsql.synth.plan.rounds as rounds

    monkeypatch.setattr(rounds, "AIM_MAX_CANDIDATES", 3)
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(rho=1.0), cache=False, progress=False)
    seen = spy_kernel(monkeypatch, db)
    db.synthesize("pgm", workload=3, rho=0.5, seed=1, name="s", max_model_size=TOO_LARGE)
    assert [m.split("(")[0] for m, _ in seen["reservation"].drawn] == ["gaussian", "gaussian"]
