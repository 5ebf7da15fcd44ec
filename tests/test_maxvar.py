"""OPT_M_max (dpsql.hdmm.optimize.maxvar) against dense numpy and generic convex solvers."""

from __future__ import annotations

import math
import time
from functools import reduce

import cvxpy as cp
import numpy as np
import pytest

from dpsql.errors import WorkloadError
from dpsql.hdmm.marginals import MarginalsGram, ResidualMarginals
from dpsql.hdmm.matrix import Dense, Identity, IdentityTotal, Prefix, Total, Weighted
from dpsql.hdmm.optimize import maxvar
from dpsql.hdmm.optimize.marginal import opt_marginal
from dpsql.hdmm.optimize.maxvar import opt_max_marginal
from dpsql.hdmm.strategy import MarginalStrategy
from dpsql.hdmm.workload import Workload, marginals_workload
from dpsql.privacy import Gaussian, Laplace

GAUSS = Gaussian(epsilon=1.0, delta=1e-6)

#: The Adult domain of benchmarks/workloads.py.
ADULT = (100, 100, 100, 99, 85, 42, 16, 15, 9, 7, 6, 5, 2, 2)


def small_workloads():
    yield marginals_workload((2, 3), k=1, lower=True)
    yield marginals_workload((3, 3, 2), k=2, lower=True)
    yield marginals_workload((3, 3, 2), k=1)
    yield Workload((3, 3, 2), [(1.0, (IdentityTotal(3), IdentityTotal(3), IdentityTotal(2)))])
    yield Workload((2, 3), [(2.0, (Identity(2), Total(3))), (0.5, (IdentityTotal(2), Weighted(Identity(3), 3.0)))])


def dense_max_variance(A: np.ndarray, W: np.ndarray) -> float:
    """``max diag(W (AᵀA)⁺ Wᵀ)`` times the squared L2 sensitivity of ``A``, densely."""
    X = A.T @ A
    Xp = np.linalg.pinv(X, rcond=1e-10)
    assert np.allclose(W @ Xp @ X, W, atol=1e-8), "the strategy cannot answer the workload"
    return float(np.max(np.einsum("ij,jk,ik->i", W, Xp, W)) * np.max((A**2).sum(axis=0)))


def strategy_max_variance(s: MarginalStrategy, W: Workload) -> float:
    return max(float(v.max()) for v in s.query_variances(W)) * s.sensitivity(2) ** 2


def projectors(domain):
    """Dense eigenprojectors ``Π_t = ⊗ (I − J/n if i ∈ t else J/n)`` and ``κ_t = diag(Π_t)``."""
    P = [reduce(np.kron, [np.eye(n) - 1.0 / n if t >> i & 1 else np.full((n, n), 1.0 / n)
                          for i, n in enumerate(domain)]) for t in range(2 ** len(domain))]
    return P, np.array([p[0, 0] for p in P])


@pytest.mark.parametrize("W", list(small_workloads()))
def test_reported_max_variance_matches_dense_oracle(W):
    opt = opt_max_marginal(W, GAUSS)
    assert opt.strategy.operator == "OPT_M_max"
    assert opt.gap <= 1e-6
    assert opt.lower_bound <= opt.max_variance * (1 + 1e-12)
    assert math.isclose(opt.strategy.sensitivity(2), 1.0, rel_tol=1e-9)
    dense = dense_max_variance(opt.strategy.matrix.dense(), W.dense())
    assert dense == pytest.approx(opt.max_variance, rel=1e-9)
    assert strategy_max_variance(opt.strategy, W) == pytest.approx(opt.max_variance, rel=1e-9)


@pytest.mark.parametrize("W", list(small_workloads()))
def test_no_better_than_total_variance_optimum_or_random_strategies(W):
    opt = opt_max_marginal(W, GAUSS)
    Wd = W.dense()
    total = opt_marginal(W, GAUSS)
    assert opt.max_variance <= dense_max_variance(total.matrix.dense(), Wd) * (1 + 1e-9)
    rng = np.random.default_rng(0)
    _, kappa = projectors(W.domain)
    for _ in range(20):
        lam = rng.exponential(size=2 ** len(W.domain))
        lam /= kappa @ lam
        A = ResidualMarginals.from_eigenvalues(W.domain, lam).dense()
        assert opt.max_variance <= dense_max_variance(A, Wd) * (1 + 1e-9)


@pytest.mark.parametrize("W", list(small_workloads())[:3])
def test_optimal_over_the_algebra_by_a_generic_solver(W):
    """Variances from dense projectors, ``v_r = Σ_t (w_r Π_t w_rᵀ) / λ_t``, minimized by Clarabel."""
    P, kappa = projectors(W.domain)
    Wd = W.dense()
    C = np.array([[w @ p @ w for p in P] for w in Wd])
    C[np.abs(C) < 1e-12] = 0.0
    reached = C.any(axis=0)  # eigenspaces no query reaches are best left at 0
    lam = cp.Variable(int(reached.sum()), nonneg=True)
    v = C[:, reached] @ cp.inv_pos(lam)
    problem = cp.Problem(cp.Minimize(cp.max(v)), [kappa[reached] @ lam <= 1])
    problem.solve(solver="CLARABEL")
    opt = opt_max_marginal(W, GAUSS)
    assert opt.max_variance == pytest.approx(problem.value, rel=2e-6)
    assert opt.lower_bound <= problem.value * (1 + 1e-7)


@pytest.mark.parametrize("W", list(small_workloads())[:2])
def test_optimal_over_all_gaussian_strategies(W):
    """For identities and totals the algebra loses nothing: the semidefinite program
    ``min max_r w_r X⁻¹ w_rᵀ`` subject to ``diag(X) ≤ 1`` over every strategy Gram ``X``."""
    Wd = W.dense()
    N = Wd.shape[1]
    X = cp.Variable((N, N), PSD=True)
    s = cp.Variable()
    problem = cp.Problem(cp.Minimize(s), [cp.diag(X) <= 1] + [cp.matrix_frac(w, X) <= s for w in Wd])
    problem.solve(solver="CLARABEL")
    opt = opt_max_marginal(W, GAUSS)
    assert opt.max_variance == pytest.approx(problem.value, rel=1e-5)


def test_tolerance_is_respected():
    W = marginals_workload((4, 3, 5, 2), k=2)
    loose = opt_max_marginal(W, GAUSS, tol=1e-2)
    tight = opt_max_marginal(W, GAUSS, tol=1e-10)
    assert loose.gap <= 1e-2 and tight.gap <= 1e-10
    assert tight.max_variance <= loose.max_variance
    assert loose.max_variance * (1 - loose.gap) <= tight.max_variance * (1 + 1e-12)


def test_zero_queries_and_zero_factors():
    zero = Dense(np.zeros((2, 3)))
    W = Workload((3, 2), [(1.0, (zero, Identity(2))), (1.0, (Identity(3), Total(2)))])
    opt = opt_max_marginal(W, GAUSS)
    only_second = opt_max_marginal(Workload((3, 2), [W.terms[1]]), GAUSS)
    assert opt.max_variance == pytest.approx(only_second.max_variance, rel=1e-9)
    nothing = opt_max_marginal(Workload((3, 2), [(1.0, (zero, Identity(2)))]), GAUSS)
    assert (nothing.max_variance, nothing.gap) == (0.0, 0.0)
    assert strategy_max_variance(nothing.strategy, Workload((3, 2), [(1.0, (zero, Identity(2)))])) == 0.0


def test_size_limits(monkeypatch):
    W = Workload((3, 3, 3), [(1.0, (IdentityTotal(3),) * 3)])  # 8 query profiles over 8 eigenspaces
    monkeypatch.setattr(maxvar, "MAX_PROFILE_ENTRIES", 8 * 8 - 1)
    with pytest.raises(WorkloadError, match="coefficients"):
        opt_max_marginal(W, GAUSS)
    monkeypatch.setattr(maxvar, "MAX_PROFILE_ENTRIES", 8 * 8)
    assert opt_max_marginal(W, GAUSS).gap <= 1e-6
    monkeypatch.setattr(maxvar, "MAX_NEWTON_ENTRIES", 8 * 8 - 1)
    with pytest.raises(WorkloadError, match="Newton system"):
        opt_max_marginal(W, GAUSS)


def test_refusals():
    W = marginals_workload((3, 4), k=1)
    with pytest.raises(WorkloadError, match="Gaussian"):
        opt_max_marginal(W, Laplace(1.0))
    with pytest.raises(WorkloadError, match="marginal algebra"):
        opt_max_marginal(Workload((4, 3), [(1.0, (Prefix(4), Identity(3)))]), GAUSS)
    with pytest.raises(WorkloadError, match="tol"):
        opt_max_marginal(W, GAUSS, tol=0.0)


def test_adult_three_way_marginals():
    W = marginals_workload(ADULT, k=3)
    start = time.perf_counter()
    opt = opt_max_marginal(W, GAUSS)
    elapsed = time.perf_counter() - start
    assert opt.gap <= 1e-6
    assert elapsed < 30  # about a second unloaded; generous for a shared machine
    assert strategy_max_variance(opt.strategy, W) == pytest.approx(opt.max_variance, rel=1e-8)
    total = opt_marginal(W, GAUSS)
    assert opt.max_variance < strategy_max_variance(total, W)


def test_strategy_gram_is_in_the_algebra_with_unit_sensitivity():
    W = marginals_workload((3, 3, 2), k=2)
    s = opt_max_marginal(W, GAUSS).strategy
    X = s.matrix.dense().T @ s.matrix.dense()
    lam = s.eigenvalues
    np.testing.assert_allclose(X, MarginalsGram.from_eigenvalues(W.domain, lam).dense(), atol=1e-10)
    np.testing.assert_allclose(np.diag(X), 1.0, rtol=1e-9)
