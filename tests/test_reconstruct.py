"""Least squares from noisy measurements against the dense oracle ``W A⁺ y``."""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.marginals import Marginals
from dpsql.matrix import Identity, Prefix, Total
from dpsql.reconstruct import least_squares
from dpsql.strategy import KronStrategy, MarginalStrategy
from dpsql.workload import Workload

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
