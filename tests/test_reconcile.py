"""OPT_H+ and its reconciled estimate (dpsql.hdmm.reconcile) against dense generalized least squares.

Small domains: a geography of 10 tracts in 4 counties in 2 states, and three other attributes read by
two groups of statements (``a``; ``b`` by ``c``), plus totals by level. The oracle is the dense
``(AᵀA)⁺Aᵀy`` over all 240 cells and ``W (AᵀA)⁺ Wᵀ`` for the covariances.
"""

import math

import numpy as np
import pytest
import scipy.sparse as sp

from dpsql.hdmm.hierarchy import HierarchyFactor
from dpsql.hdmm.matrix import Dense, Identity, Sparse, Total, constant_row
from dpsql.hdmm.optimize.hier import hierarchies
from dpsql.hdmm.optimize.hierplus import opt_hier_plus, split
from dpsql.hdmm.reconcile import ReconciledUnion
from dpsql.hdmm.reconstruct import least_squares, nonnegative
from dpsql.hdmm.strategy import KronStrategy
from dpsql.hdmm.workload import Workload
from dpsql.privacy import Gaussian, Laplace

COUNTY = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 3])  # tract -> county
STATE = np.array([0, 0, 1, 1])                    # county -> state
DOMAIN = (10, 3, 2, 4)


def level(labels: np.ndarray) -> Sparse:
    return Sparse(sp.csr_matrix((np.ones(labels.size), (labels, np.arange(labels.size)))))


def workload() -> Workload:
    state, county, tract = level(STATE[COUNTY]), level(COUNTY), Identity(10)
    T = Total
    return Workload(DOMAIN, [
        (1.0, (state, Identity(3), T(2), T(4))),      # 0  group a
        (1.0, (county, Identity(3), T(2), T(4))),     # 1  group a
        (1.0, (tract, Identity(3), T(2), T(4))),      # 2  group a
        (1.0, (county, T(3), Identity(2), Identity(4))),  # 3  group b x c
        (1.0, (state, T(3), Identity(2), T(4))),      # 4  group b x c
        (1.0, (T(10), T(3), T(2), T(4))),             # 5  totals
        (1.0, (state, T(3), T(2), T(4))),             # 6
        (1.0, (county, T(3), T(2), T(4))),            # 7
        (2.0, (tract, T(3), T(2), T(4))),             # 8  (a weight, too)
    ])


def given() -> ReconciledUnion:
    """A union built by hand, not selected: random level weights and random dense factors (a p-Identity's
    shape), and a third part measuring the totals by level alone. Selection's L1-optimal weights can
    reach 10⁻⁸ (a level all but unmeasured), where dense solves agree only to about 10⁻⁵; these are
    well conditioned, so the oracle is exact to rounding."""
    rng = np.random.default_rng(0)
    tree = hierarchies(workload())[0]

    def hierarchy() -> HierarchyFactor:
        return HierarchyFactor(tree, rng.uniform(0.3, 1.0, len(tree.labels)))

    def factor(n: int) -> Dense:
        return Dense(np.vstack([np.eye(n), rng.uniform(0, 1, (2, n))]))

    parts = [KronStrategy((hierarchy(), factor(3), Total(2), Total(4))),
             KronStrategy((hierarchy(), Total(3), factor(2), factor(4))),
             KronStrategy((hierarchy(), Total(3), Total(2), Total(4)))]
    return ReconciledUnion(parts, [0.7, 0.5, 0.4], [[0, 1, 2], [3, 4], []], [5, 6, 7, 8], 0)


@pytest.fixture(scope="module", params=["selected", "given"])
def case(request):
    W = workload()
    A = opt_hier_plus(W, Gaussian(1.0, 1e-6)) if request.param == "selected" else given()
    D = A.matrix.dense()
    Dp = np.linalg.pinv(D, rcond=1e-13)  # of D, not of its Gram, whose condition is D's squared
    return W, A, D, Dp


def test_laplace_selection_answers_every_query():
    W = workload()
    A = opt_hier_plus(W, Laplace(1.0))
    assert np.isfinite(A.trace_error(W)) and A.groups[:2] == [[0, 1, 2], [3, 4]]


def test_split_groups_terms_by_the_attributes_they_read():
    h, tree, groups, totals = split(workload())
    assert (h, groups, totals) == (0, [[0, 1, 2], [3, 4]], [5, 6, 7, 8]) and tree.n == 10


def test_each_part_measures_its_own_marginal_only(case):
    W, A, D, _ = case
    assert isinstance(A, ReconciledUnion) and len(A.parts) in (2, 3)
    # part 0 sums b and c out, part 1 sums a out (a third, the totals', all three): nothing measures all four
    summed = [[constant_row(f) is not None for f in p.factors] for p in A.parts]
    assert summed[:2] == [[False, False, True, True], [False, True, False, False]]
    assert summed[2:] in ([], [[False, True, True, True]])


def test_estimate_equals_dense_generalized_least_squares(case):
    W, A, D, Dp = case
    rng = np.random.default_rng(3)
    x = rng.integers(0, 20, D.shape[1]).astype(float)
    y = D @ x + rng.normal(0, 3.0, D.shape[0])
    expected = W.dense() @ (Dp @ y)
    got = least_squares(W, A, y)
    assert np.allclose(got, expected, rtol=1e-9, atol=1e-8)
    # and with no noise, the exact answers
    assert np.allclose(least_squares(W, A, D @ x), W.dense() @ x, atol=1e-8)


def test_variances_equal_the_dense_covariance(case):
    W, A, D, Dp = case
    full = W.dense() @ Dp @ Dp.T @ W.dense().T
    assert np.allclose(np.concatenate(A.query_variances(W)), np.diag(full), rtol=1e-8)
    assert math.isclose(A.trace_error(W), float(np.trace(full)), rel_tol=1e-8)
    rows = np.cumsum([0] + [math.prod(f.shape[0] for f in fs) for _, fs in W.terms])
    # a whole block goes through each hierarchy's inverse Gram, which the selection may make ill-
    # conditioned: with scipy 1.17.1 a part weighs its leaves 3.5e-6 (condition 3e11), and the block
    # and the dense pseudo-inverse then agree to about condition x machine epsilon, not 1e-6
    grams = [H.dense().T @ H.dense() for H in [A.combined, *(p.factors[A.shared] for p in A.parts)]]
    rtol = max(1e-6, 10 * np.finfo(float).eps * max(np.linalg.cond(G) for G in grams))
    for a, b in [(0, 4), (1, 3), (2, 8), (3, 3), (5, 6), (0, 2)]:
        block = full[rows[a]:rows[a + 1], rows[b]:rows[b + 1]]
        assert np.allclose(A.cross_covariance(W, a, b), block, rtol=rtol, atol=1e-7), (a, b)
    # elementwise, between terms of equal shape: a term and itself, two levels' totals (state by b: 4 rows)
    for a, b in [(0, 0), (6, 6), (4, 4)]:
        assert np.allclose(A.cross_variances(W, a, b), np.diag(full[rows[a]:rows[a + 1], rows[b]:rows[b + 1]]),
                           rtol=1e-8)


def test_levels_and_tables_add_up_to_the_last_digit(case):
    W, A, D, _ = case
    rng = np.random.default_rng(5)
    y = D @ rng.integers(0, 50, D.shape[1]).astype(float) + rng.normal(0, 7.3, D.shape[0])
    ans = least_squares(W, A, y)
    rows = np.cumsum([0] + [math.prod(f.shape[0] for f in fs) for _, fs in W.terms])
    term = [ans[rows[k]:rows[k + 1]] for k in range(len(W.terms))]
    state_a, county_a, tract_a = (term[k].reshape(-1, 3) for k in (0, 1, 2))
    county_bc, state_b = term[3].reshape(4, 8), term[4].reshape(2, 2)
    total, states, counties, tracts = term[5], term[6], term[7], term[8] / 2.0
    fsum = math.fsum
    assert [fsum(tracts[COUNTY == c]) for c in range(4)] == counties.tolist()
    assert [fsum(counties[STATE == s]) for s in range(2)] == states.tolist()
    assert fsum(states) == total[0]
    for c in range(4):  # every table's county totals are the same numbers
        assert fsum(county_a[c]) == counties[c] == fsum(county_bc[c])
        for a in range(3):
            assert fsum(tract_a[COUNTY == c, a]) == county_a[c, a]
    for s in range(2):
        assert fsum(state_a[s]) == states[s] == fsum(state_b[s])


def test_integer_answers_are_non_negative_integers_that_add_up(case):
    W, A, D, _ = case
    rng = np.random.default_rng(11)
    x = rng.integers(0, 3, D.shape[1]).astype(float)  # small counts: least squares goes negative
    y = D @ x + rng.normal(0, 4.0, D.shape[0])
    assert least_squares(W, A, y).min() < 0
    for integer in (False, True):
        ans = nonnegative(W, A, y, integer=integer)
        assert ans.min() >= 0
        if integer:
            assert np.array_equal(ans, np.rint(ans))
        rows = np.cumsum([0] + [math.prod(f.shape[0] for f in fs) for _, fs in W.terms])
        term = [ans[rows[k]:rows[k + 1]] for k in range(len(W.terms))]
        counties = term[7]
        assert [math.fsum(term[8][COUNTY == c] / 2.0) for c in range(4)] == counties.tolist()
        assert [math.fsum(r) for r in term[1].reshape(4, 3)] == counties.tolist()
        assert [math.fsum(r) for r in term[3].reshape(4, 8)] == counties.tolist()


def test_standard_errors_match_the_spread_over_repeated_noise(case):
    W, A, D, _ = case
    rng = np.random.default_rng(7)
    x = rng.integers(0, 20, D.shape[1]).astype(float)
    exact = W.dense() @ x
    draws = np.array([least_squares(W, A, D @ x + rng.normal(0, 1.0, D.shape[0])) - exact for _ in range(600)])
    sd = np.sqrt(np.concatenate(A.query_variances(W)))
    ratio = draws.std(axis=0) / sd
    assert abs(ratio.mean() - 1) < 0.03 and 0.8 < ratio.min() and ratio.max() < 1.2


def test_a_cached_strategy_answers_as_the_selected_one(case, tmp_path):
    from dpsql.hdmm.cache import StrategyCache
    W, A, D, _ = case
    cache = StrategyCache(tmp_path / "cache", ledger=tmp_path / "ledger")
    key = cache.key(W, Gaussian(1.0, 1e-6), operators=["OPT_Hplus"])
    cache.put(key, A, A.trace_error(W))
    back = cache.get(key).strategy
    assert isinstance(back, ReconciledUnion) and back.groups == A.groups and back.totals == A.totals
    y = D @ np.arange(D.shape[1], dtype=float)
    assert np.array_equal(least_squares(W, back, y), least_squares(W, A, y))
    assert np.array_equal(np.concatenate(back.query_variances(W)), np.concatenate(A.query_variances(W)))


def test_sensitivity_is_the_largest_column_norm(case):
    """The noise is calibrated to it: each part's columns add up, in L1 and in L2."""
    _, A, D, _ = case
    assert math.isclose(A.sensitivity(1), np.abs(D).sum(axis=0).max(), rel_tol=1e-12)
    assert math.isclose(A.sensitivity(2), np.sqrt((D**2).sum(axis=0)).max(), rel_tol=1e-12)
