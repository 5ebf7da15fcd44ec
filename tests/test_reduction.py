"""Workload-based domain reduction against the unreduced dense computation.

Every figure of a strategy on the reduced domain (sensitivity, expected
error, per-query variances and covariances, least-squares answers) must equal
the figure of its expansion ``A_red (⊗ P_i)`` computed densely on the full
domain, and the kernel must count exactly ``P x``.
"""

from __future__ import annotations

import functools
import math

import duckdb
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpsql
from dpsql.errors import WorkloadError
from dpsql.hdmm.cache import StrategyCache
from dpsql.hdmm.error_analysis import expected_error, query_variances
from dpsql.hdmm.matrix import Dense, Identity, Prefix, Total
from dpsql.hdmm.optimize import select
from dpsql.hdmm.optimize.baseline import direct, identity
from dpsql.hdmm.reconstruct import least_squares, nonnegative
from dpsql.hdmm.reduction import ReducedStrategy, reduce_domain
from dpsql.hdmm.strategy import UnionStrategy, measured_cells
from dpsql.hdmm.workload import Workload
from dpsql.privacy import Gaussian, Laplace
from dpsql.private.budget import Budget, Cost
from dpsql.private.kernel import PrivateTable, on_cells
from dpsql.private.ledger import Ledger
from dpsql.private.measure import measure_marginals
from dpsql.schema import Attribute, load_schema

NOISES = [Laplace(1.0), Gaussian(1.0, 1e-6)]
IDS = ["laplace", "gaussian"]


def buckets(labels):
    """The CASE-bucket predicate matrix: row g selects the values labelled g."""
    labels = np.asarray(labels)
    return Dense((labels[None, :] == np.arange(labels.max() + 1)[:, None]).astype(float))


def case_workload():
    """hours (12 values) in 3 CASE buckets by sex, and a filter on hours by region."""
    h = [0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2]
    over = Dense(np.array([[0.0] * 8 + [1.0] * 4]))
    return Workload((12, 2, 4), [(1.0, (buckets(h), Identity(2), Total(4))),
                                 (2.0, (over, Total(2), Identity(4)))])


def kron_dense(mats):
    return functools.reduce(np.kron, [np.asarray(m) for m in mats])


def partition_dense(reduction):
    """``⊗ P_i`` over the full domain, with ``1ᵀ`` on the dropped attributes."""
    return kron_dense([reduction.partition(i).dense() if i in reduction.kept else np.ones((1, n))
                       for i, n in enumerate(reduction.domain)])


def dense_sensitivity(A, p):
    return float(np.max(np.abs(A).sum(axis=0) if p == 1 else np.sqrt((A**2).sum(axis=0))))


def dense_covariance(W, A, noise):
    """``σ² Δ² W (AᵀA)⁺ Wᵀ``, the exact least-squares covariance."""
    X = np.linalg.pinv(A.T @ A, rcond=1e-10, hermitian=True)
    return noise.variance(dense_sensitivity(A, noise.norm)) * (W @ X @ W.T)


def test_reduction_factors_the_workload_exactly():
    W = case_workload()
    r = reduce_domain(W)
    assert r.workload.domain == (3, 2, 4)          # hours: the 3 buckets, the filter respects them
    assert r.kept == (0, 1, 2)
    assert np.array_equal(W.dense(), r.workload.dense() @ partition_dense(r))


def test_attributes_only_summed_out_are_dropped_and_their_scalars_folded():
    weights = Dense(np.array([[2.0, 2.0, 2.0]]))  # a constant row on attribute 1: one group, one number
    W = Workload((4, 3, 5), [(1.5, (Prefix(4), weights, Total(5))), (1.0, (Identity(4), Total(3), Total(5)))])
    r = reduce_domain(W)
    assert r.kept == (0,) and r.workload.domain == (4,)
    assert [w for w, _ in r.workload.terms] == [3.0, 1.0]
    assert np.allclose(W.dense(), r.workload.dense() @ partition_dense(r))


def test_a_workload_of_totals_keeps_one_attribute():
    W = Workload((3, 4), [(1.0, (Total(3), Total(4)))])
    r = reduce_domain(W)
    assert r.workload.domain == (1,) and np.allclose(W.dense(), r.workload.dense() @ partition_dense(r))


def test_structured_factors_too_big_to_compare_are_left_unreduced():
    W = Workload((3000,), [(1.0, (Prefix(3000),))])
    assert reduce_domain(W).trivial


@pytest.mark.parametrize("noise", NOISES, ids=IDS)
def test_reduced_strategy_errors_variances_and_sensitivity_match_the_dense_expansion(noise):
    W = case_workload()
    sel = select(W, noise, restarts=1)
    S = sel.strategy
    assert isinstance(S, ReducedStrategy)
    A = S.matrix.dense()
    assert A.shape[1] == W.shape[1]
    for p in (1, 2):
        assert S.sensitivity(p) == pytest.approx(dense_sensitivity(A, p), rel=1e-12)
    C = dense_covariance(W.dense(), A, noise)
    assert expected_error(W, S, noise) == pytest.approx(np.trace(C), rel=1e-8)
    assert sel.rmse == pytest.approx(math.sqrt(np.trace(C) / W.shape[0]), rel=1e-8)
    assert np.allclose(query_variances(W, S, noise), np.diag(C), rtol=1e-8, atol=1e-12)
    assert sel.max_variance == pytest.approx(np.diag(C).max(), rel=1e-8)
    # covariance of a COUNT and a SUM by the same keys (AVG's delta method needs it)
    count = W.terms[0]
    W2 = Workload(W.domain, [count, (1.0, (count[1][0], count[1][1], Dense(np.array([[1.0, 2.0, 3.0, 4.0]]))))])
    S2 = select(W2, noise, restarts=1).strategy
    C2 = dense_covariance(W2.dense(), S2.matrix.dense(), noise)
    scale = noise.variance(S2.sensitivity(noise.norm))
    rows = W2.term_rows(0).stop
    assert np.allclose(scale * S2.cross_variances(W2, 0, 1), np.diag(C2[:rows, rows:]), rtol=1e-8)


@pytest.mark.parametrize("noise", NOISES, ids=IDS)
def test_least_squares_through_a_reduced_strategy_is_the_dense_least_squares(noise):
    W = case_workload()
    S = select(W, noise, restarts=1).strategy
    A = S.matrix.dense()
    rng = np.random.default_rng(3)
    x = rng.poisson(4.0, W.shape[1]).astype(float)
    assert np.allclose(least_squares(W, S, A @ x), W.dense() @ x)            # exact without noise
    y = A @ x + rng.normal(0, 3.0, A.shape[0])
    dense = W.dense() @ np.linalg.pinv(A, rcond=1e-10) @ y
    assert np.allclose(least_squares(W, S, y), dense, atol=1e-8)
    fitted = nonnegative(W, S, A @ x)
    assert np.allclose(fitted, W.dense() @ x, atol=1e-4)


def test_a_workload_telling_merged_values_apart_is_refused():
    W = case_workload()
    S = select(W, Laplace(1.0), restarts=1).strategy
    finer = Workload(W.domain, [(1.0, (Identity(12), Total(2), Total(4)))])
    with pytest.raises(WorkloadError, match="distinguishes values the reduction merged"):
        S.trace_error(finer)


def test_the_case_bucket_query_of_the_issue_reaches_the_direct_error():
    """GROUP BY a 3-bucket CASE on a 99-value column and sex, on a 5-column table, Laplace ε = 1:
    each group answered directly has sensitivity 1 and std error √2."""
    h = np.zeros(99, dtype=int)
    h[19:40], h[40:] = 1, 2
    W = Workload((99, 2, 10, 5, 7), [(1.0, (buckets(h), Identity(2), Total(10), Total(5), Total(7)))])
    sel = select(W, Laplace(1.0), restarts=1)
    assert sel.reduction.workload.domain == (3, 2)
    assert sel.rmse == pytest.approx(math.sqrt(2.0), rel=1e-9)
    assert np.sqrt(sel.max_variance) == pytest.approx(math.sqrt(2.0), rel=1e-9)
    assert sel.rmse < select(W, Laplace(1.0), restarts=1, reduce=False, operators=["OPT_kron"]).rmse


def test_the_cache_is_keyed_on_the_reduced_workload(tmp_path):
    cache = StrategyCache(tmp_path)
    a = case_workload()
    # the same queries over a domain whose hours values are listed in another order
    perm = np.random.default_rng(1).permutation(12)
    b = Workload(a.domain, [(w, (Dense(fs[0].dense()[:, perm]),) + fs[1:]) for w, fs in a.terms])
    first = select(a, Laplace(1.0), restarts=1, cache=cache)
    second = select(b, Laplace(1.0), restarts=1, cache=cache)
    assert not first.cached and second.cached
    assert second.rmse == pytest.approx(first.rmse, rel=1e-12)
    C = dense_covariance(b.dense(), second.strategy.matrix.dense(), Laplace(1.0))
    assert second.rmse == pytest.approx(math.sqrt(np.trace(C) / b.shape[0]), rel=1e-8)


# -- the selection is never worse than the obvious mechanisms -------------------------------


def dense_direct_error(W, noise):
    """The direct mechanism computed densely: each group of terms with equal factors measured by
    its own rows, groups weighted ``c ∝ e^{1/3}`` (Laplace) or ``e^{1/4}`` (Gaussian), every query
    answered from its own group's measurement."""
    groups: dict[bytes, list[int]] = {}
    for k, (_, fs) in enumerate(W.terms):
        groups.setdefault(b"|".join(np.round(f.dense(), 12).tobytes() + repr(f.shape).encode() for f in fs),
                          []).append(k)
    errors = []
    for g in groups.values():
        A = kron_dense([f.dense() for f in W.terms[g[0]][1]])
        sens = dense_sensitivity(A, noise.norm)
        if sens == 0:
            errors.append(0.0)
            continue
        X = np.linalg.pinv(A.T @ A, rcond=1e-10, hermitian=True)
        e = sum(float(np.trace(W.dense()[W.term_rows(k)] @ X @ W.dense()[W.term_rows(k)].T)) for k in g)
        errors.append(e * sens**2)
    errors = np.array(errors)
    total = (np.cbrt(errors).sum() ** 3) if noise.norm == 1 else np.sqrt(errors).sum() ** 2
    return noise.variance(1.0) * total


def dense_identity_error(W, noise):
    return noise.variance(1.0) * float(np.trace(W.dense() @ W.dense().T))


def dense_selected_error(W, sel, noise):
    """The selected strategy's expected total squared error, densely on the full domain: joint least
    squares, or for a union each term from its own part ("local least squares", as reconstructed)."""
    S = sel.strategy
    inner = S.inner if isinstance(S, ReducedStrategy) else S
    if not isinstance(inner, UnionStrategy):
        return float(np.trace(dense_covariance(W.dense(), S.matrix.dense(), noise)))
    parts = [ReducedStrategy(p, sel.reduction).matrix.dense() if isinstance(S, ReducedStrategy) else p.matrix.dense()
             for p in inner.parts]
    v = noise.variance(dense_sensitivity(np.vstack([c * A for A, c in zip(parts, inner.weights)]), noise.norm))
    WD, tse = W.dense(), 0.0
    for A, c, g in zip(parts, inner.weights, inner.groups):
        X = np.linalg.pinv(A.T @ A, rcond=1e-10, hermitian=True)
        tse += sum(v * float(np.trace(WD[W.term_rows(k)] @ X @ WD[W.term_rows(k)].T)) for k in g) / c**2
    return tse


@st.composite
def batches(draw):
    d = draw(st.integers(1, 3))
    domain = tuple(draw(st.integers(2, 6)) for _ in range(d))

    def factor(n):
        kind = draw(st.sampled_from(["identity", "total", "filter", "buckets", "prefix"]))
        if kind == "identity":
            return Identity(n)
        if kind == "total":
            return Total(n)
        if kind == "prefix":
            return Prefix(n)
        if kind == "filter":
            row = draw(st.lists(st.booleans(), min_size=n, max_size=n).filter(any))
            return Dense(np.array([row], dtype=float))
        labels = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
        _, labels = np.unique(labels, return_inverse=True)
        return buckets(labels)

    k = draw(st.integers(1, 4))
    terms = [(draw(st.sampled_from([1.0, 0.5, 2.0])), tuple(factor(n) for n in domain)) for _ in range(k)]
    return Workload(domain, terms)


@pytest.mark.parametrize("noise", NOISES, ids=IDS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(W=batches())
def test_selection_is_never_worse_than_identity_or_direct(noise, W):
    sel = select(W, noise, restarts=1, progress=False)
    tse = dense_selected_error(W, sel, noise)
    assert expected_error(W, sel.strategy, noise) == pytest.approx(tse, rel=1e-6, abs=1e-9)
    # direct is offered unless the workload groups an attribute at nested levels, which one data vector answers
    # so that they add up (selector.feasible): then identity, which adds up too, is the bound
    offered = {c.operator for c in sel.candidates}
    bound = min(dense_identity_error(W, noise), dense_direct_error(W, noise) if "direct" in offered else math.inf)
    assert tse <= bound * (1 + 1e-6) + 1e-9


@pytest.mark.parametrize("noise", NOISES, ids=IDS)
def test_the_baselines_match_their_dense_figures(noise):
    W = case_workload()
    r = reduce_domain(W)
    for make, oracle in ((identity, dense_identity_error), (direct, dense_direct_error)):
        S = make(r.workload, noise)
        assert expected_error(r.workload, S, noise) == pytest.approx(oracle(r.workload, noise), rel=1e-8)


# -- measurement of grouped attributes ------------------------------------------------------


SCHEMA = load_schema({"table": "t", "columns": {
    "hours": {"type": "integer", "min": 1, "max": 12},
    "sex": {"type": "categorical", "values": ["F", "M"], "nullable": True},
    "region": {"type": "integer", "min": 0, "max": 3}}})


def people(n=300, seed=0):
    rng = np.random.default_rng(seed)
    con = duckdb.connect()
    hours = rng.integers(0, 14, n)          # 0 and 13 are outside the domain
    sex = rng.choice(["F", "M", "X", None], n, p=[0.45, 0.45, 0.05, 0.05])
    region = rng.integers(0, 4, n)
    con.execute("CREATE TABLE t (hours INTEGER, sex VARCHAR, region INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", [[int(a), b, int(c)] for a, b, c in zip(hours, sex, region)])
    return con


def test_grouped_attributes_count_exactly_the_partitioned_marginals():
    con = people()
    attrs = [Attribute("hours", ("hours",), (12,)), Attribute("sex", ("sex",), (3,)),
             Attribute("region", ("region",), (4,))]
    full = measure_marginals(con, "t", SCHEMA, attrs, [(0, 1), (0, 2), (1,), ()])
    labels = np.array([0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2])
    sex_groups = np.array([0, 1, 0])                      # F and NULL together, M apart
    grouped = [attrs[0].grouped(labels), attrs[1].grouped(sex_groups), attrs[2]]
    counts = measure_marginals(con, "t", SCHEMA, grouped, [(0, 1), (0, 2), (1,), ()])
    P_h, P_s = buckets(labels).dense(), buckets(sex_groups).dense()
    assert np.array_equal(counts[0], kron_dense([P_h, P_s]) @ full[0])
    assert np.array_equal(counts[1], kron_dense([P_h, np.eye(4)]) @ full[1])
    assert np.array_equal(counts[2], P_s @ full[2])
    assert counts[3][0] == full[3][0]


def test_a_grouped_merge_of_two_columns_counts_by_its_combined_index():
    con = people(seed=4)
    merged = Attribute("hours+region", ("hours", "region"), (12, 4))
    full = measure_marginals(con, "t", SCHEMA, [merged], [(0,)])[0]
    labels = np.random.default_rng(2).integers(0, 5, 48)
    _, labels = np.unique(labels, return_inverse=True)
    counts = measure_marginals(con, "t", SCHEMA, [merged.grouped(labels)], [(0,)])[0]
    assert np.array_equal(counts, buckets(labels).dense() @ full)


def test_group_labels_are_checked():
    a = Attribute("hours", ("hours",), (12,))
    assert a.grouped(range(12)) is a
    with pytest.raises(WorkloadError, match="12 values"):
        a.grouped([0, 1])
    with pytest.raises(WorkloadError, match="without gaps"):
        a.grouped([0] * 11 + [2])


def test_the_kernel_counts_reduced_cells_and_noises_at_the_reduced_strategys_sensitivity():
    """A ReducedStrategy measured through the private kernel: at a huge ε its answers are
    ``A x`` for the full-domain expansion ``A`` (only the reduced cells are counted), and the
    noise scale is the one of the inner strategy's sensitivity."""
    con = people(seed=7)
    attrs = [Attribute("hours", ("hours",), (12,)), Attribute("sex", ("sex",), (3,)),
             Attribute("region", ("region",), (4,))]
    h = [0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2]
    W = Workload((12, 3, 4), [(1.0, (buckets(h), Identity(3), Total(4))),
                              (1.0, (Dense(np.array([[0.0] * 8 + [1.0] * 4])), Total(3), Identity(4)))])
    sel = select(W, Laplace(1.0), restarts=1)
    S = sel.strategy
    assert isinstance(S, ReducedStrategy)
    (x,) = measure_marginals(con, "t", SCHEMA, attrs, [(0, 1, 2)])
    table = PrivateTable(con, "t", SCHEMA, Ledger(None, Budget(epsilon=1e12)))
    m = table.measure(attrs, S, Laplace(1e9), Cost(epsilon=1e9))
    assert np.allclose(m.values, S.matrix.matvec(x), atol=1e-3)
    assert m.sensitivity == S.inner.sensitivity(1) == dense_sensitivity(S.matrix.dense(), 1)
    counted, cells = on_cells(S, attrs)
    assert counted is S.inner and [a.cells for a in cells] == list(sel.reduction.workload.domain)
    assert measured_cells(counted) <= math.prod(sel.reduction.workload.domain) < W.shape[1]
    assert np.allclose(least_squares(W, S, m.values), W.matvec(x), atol=1e-3)


def test_a_workload_of_zero_queries_is_answered_exactly_with_no_error():
    """WHERE race = 'a' AND race = 'b': every query is zero; selection must still work."""
    zero = Dense(np.zeros((1, 4)))
    W = Workload((4, 3), [(1.0, (zero, Identity(3)))])
    for noise in NOISES:
        sel = select(W, noise, restarts=1)
        assert sel.rmse == 0.0 and sel.max_variance == 0.0
        y = sel.strategy.matrix.matvec(np.arange(12.0))
        assert np.array_equal(least_squares(W, sel.strategy, y), np.zeros(3))


def test_an_impossible_where_alone_is_answered_without_measuring():
    """No value of the domain satisfies the WHERE: no group is output, and nothing is spent."""
    con = people(seed=9)
    db = dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=10.0, delta=1e-5))
    for noise in ("laplace", "gaussian"):
        res = db.query("SELECT region, COUNT(*) AS n FROM t WHERE sex = 'F' AND sex = 'M' GROUP BY region",
                       epsilon=1.0, delta=1e-6 if noise == "gaussian" else None, noise=noise)
        assert res.df.empty and list(res.df.columns[:2]) == ["region", "n"] and res.epsilon == 0.0
    assert db.ledger.spent().epsilon == 0.0
    # without GROUP BY there is one row, the answer over no rows, exact and unmeasured
    res = db.query("SELECT COUNT(*) AS n FROM t WHERE sex = 'F' AND sex = 'M'", epsilon=1.0, noise="laplace")
    assert list(res.df["n"]) == [0.0] and list(res.df["std_error"]) == [0.0] and res.epsilon == 0.0
    assert db.ledger.spent().epsilon == 0.0
