"""Least squares from noisy measurements against the dense oracle ``W A⁺ y``."""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.hdmm.marginals import Marginals, ResidualMarginals
from dpsql.hdmm.matrix import Identity, Prefix, Total
from dpsql.hdmm.reconstruct import least_squares
from dpsql.hdmm.strategy import KronStrategy, MarginalStrategy, UnionStrategy
from dpsql.hdmm.workload import Workload

DOMAIN = (3, 2, 4)


def _workload() -> Workload:
    return Workload(DOMAIN, [
        (1.0, (Identity(3), Total(2), Identity(4))),         # a marginal
        (2.0, (Total(3), Identity(2), Total(4))),            # a weighted marginal
        (1.0, (Prefix(3), Identity(2), Prefix(4))),          # ranges: not a marginal
        (1.0, (Total(3), Total(2), Total(4))),               # the total
    ])


@pytest.mark.parametrize("subsets", [range(8), [0b111], [0b001, 0b110, 0b011], [0b000, 0b101, 0b010]])
def test_marginal_strategy_least_squares_matches_dense_pseudo_inverse(subsets):
    """Any y, in A's range or not: the answers are W A⁺ y. The marginal pseudo-inverse has up to
    2^d terms; reconstruction merges those that act alike on each workload term and block."""
    rng = np.random.default_rng(len(list(subsets)))
    theta = np.zeros(2 ** len(DOMAIN))
    theta[list(subsets)] = rng.uniform(0.5, 2.0, size=len(list(subsets)))
    A = MarginalStrategy(Marginals(DOMAIN, theta))
    W = _workload()
    y = rng.normal(size=A.matrix.shape[0])
    want = W.dense() @ np.linalg.pinv(A.matrix.dense()) @ y
    x = rng.poisson(5.0, size=int(np.prod(DOMAIN))).astype(float)
    if 0b111 in list(subsets):  # A has full column rank: answers from exact measurements are exact
        np.testing.assert_allclose(least_squares(W, A, A.matrix.matvec(x)), W.matvec(x), atol=1e-9)
    # the rows of W outside A's row space still get the least-squares (minimum-norm) answer
    np.testing.assert_allclose(least_squares(W, A, y), want, atol=1e-9)


def test_kronecker_strategy_least_squares_matches_dense_pseudo_inverse():
    A = KronStrategy((Prefix(3), Identity(2), Identity(4)))
    W = _workload()
    y = np.random.default_rng(1).normal(size=A.matrix.shape[0])
    np.testing.assert_allclose(least_squares(W, A, y), W.dense() @ np.linalg.pinv(A.matrix.dense()) @ y, atol=1e-9)


@pytest.mark.parametrize("residual", [False, True], ids=["marginals", "residual"])
def test_marginal_strategy_with_fixed_factors_least_squares_matches_dense_pseudo_inverse(residual):
    """``(Prefix on attribute 0) ⊗ M`` on the others: the pseudo-inverse's
    marginal terms carry the fixed factor's pseudo-inverse along."""
    rng = np.random.default_rng(7 + residual)
    theta = rng.uniform(0.5, 2.0, size=4)
    M = ResidualMarginals(DOMAIN[1:], theta) if residual else Marginals(DOMAIN[1:], theta)
    A = MarginalStrategy(M, fixed=(Prefix(3), None, None))
    W = _workload()
    y = rng.normal(size=A.matrix.shape[0])
    np.testing.assert_allclose(least_squares(W, A, y), W.dense() @ np.linalg.pinv(A.matrix.dense()) @ y, atol=1e-9)


def test_union_with_marginal_part_least_squares_is_local():
    """An OPT_+ union answers each group from its own part only (local least squares)."""
    W = _workload()
    parts = [MarginalStrategy(Marginals(DOMAIN[1:], np.array([0.2, 0.5, 0.3, 0.4])), fixed=(Identity(3), None, None)),
             KronStrategy((Prefix(3), Identity(2), Prefix(4)))]
    U = UnionStrategy(parts, [0.6, 0.4], [[0, 1, 3], [2]])
    y = np.random.default_rng(3).normal(size=U.matrix.shape[0])
    n0 = parts[0].matrix.shape[0]
    own = {k: (0.6 * parts[0].matrix.dense(), y[:n0]) for k in (0, 1, 3)}
    own[2] = (0.4 * parts[1].matrix.dense(), y[n0:])
    want = np.concatenate([W.dense()[W.term_rows(k)] @ np.linalg.pinv(A) @ y_part
                           for k, (A, y_part) in sorted(own.items())])
    np.testing.assert_allclose(least_squares(W, U, y), want, atol=1e-9)


@pytest.mark.parametrize("strategy", [KronStrategy((Identity(4), Identity(3))),
                                      KronStrategy((Prefix(4), Identity(3)))], ids=["identity", "prefix"])
def test_the_nonnegative_fit_is_nnls_and_stops_at_its_time_limit(strategy):
    """Against scipy's exact NNLS on the dense strategy; with no time left it warns and returns
    the vector it has, non-negative (the census batch of 448,000 cells ran for over 18 minutes)."""
    import scipy.optimize

    from dpsql.hdmm.reconstruct import nonnegative

    rng = np.random.default_rng(3)
    W = Workload((4, 3), [(1.0, (Prefix(4), Total(3))), (1.0, (Identity(4), Identity(3)))])
    A = strategy.matrix.dense()
    y = A @ rng.integers(0, 5, 12).astype(float) + rng.normal(scale=3.0, size=A.shape[0])
    x_star, _ = scipy.optimize.nnls(A, y)
    np.testing.assert_allclose(nonnegative(W, strategy, y), W.matvec(x_star), atol=1e-5)
    if isinstance(strategy.factors[0], Identity):  # the least-squares start, clipped, is the fit: nothing to stop
        return
    with pytest.warns(RuntimeWarning, match="the non-negative fit stopped after 0 s, before it converged"):
        early = nonnegative(W, strategy, y, seconds=0.0)
    assert early.min() >= 0.0
