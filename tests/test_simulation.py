"""Expected error vs. an empirical estimate from simulated noise.

For a small random data vector x, draw ``R`` independent noise vectors with
the calibrated scale (Laplace b = Δ₁/ε, Gaussian σ from the analytic
calibration), measure ``y = A x + z``, reconstruct by least squares with a
dense pseudo-inverse, and compare the mean squared error of every workload
answer with ``query_variances`` and the mean total squared error with
``expected_error``.

Tolerance: the empirical mean of ``R`` i.i.d. squared errors has standard
error ``sd / √R``, estimated from the draws themselves; each comparison
allows 5 standard errors. With fixed seeds the outcome is deterministic, and
each test also asserts the tolerance is tight enough to catch a 10 % error.
"""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.hdmm.error_analysis import expected_error, query_variances
from dpsql.hdmm.marginals import Marginals, ResidualMarginals
from dpsql.hdmm.matrix import AllRange, Identity, IdentityTotal, Prefix, Total, WidthRange
from dpsql.hdmm.pidentity import PIdentity
from dpsql.hdmm.strategy import KronStrategy, MarginalStrategy, UnionStrategy
from dpsql.hdmm.workload import Workload, marginals_workload
from dpsql.privacy import Gaussian, Laplace

R = 20_000
K_SE = 5.0


def _draw(noise, sens, shape, rng):
    if noise.norm == 1:
        return rng.laplace(0.0, sens / noise.epsilon, size=shape)
    return rng.normal(0.0, noise.sigma(sens), size=shape)


def _sens(A, norm):
    return (np.abs(A).sum(axis=0) if norm == 1 else np.sqrt((A**2).sum(axis=0))).max()


def simulate_global(W, A, noise, rng):
    """Squared errors (queries × R) of least squares from ``A x + z``."""
    x = rng.integers(0, 20, size=A.shape[1]).astype(float)
    Z = _draw(noise, _sens(A, noise.norm), (A.shape[0], R), rng)
    Y = (A @ x)[:, None] + Z
    Xhat = np.linalg.pinv(A) @ Y
    return (W @ Xhat - (W @ x)[:, None]) ** 2


def compare(sq, predicted_var, predicted_total):
    """Per-query and total mean squared error within K_SE standard errors."""
    mean = sq.mean(axis=1)
    se = sq.std(axis=1, ddof=1) / np.sqrt(R)
    assert np.all(np.abs(mean - predicted_var) <= K_SE * se + 1e-12), (
        np.max(np.abs(mean - predicted_var) / np.maximum(se, 1e-300))
    )
    tot = sq.sum(axis=0)
    se_tot = tot.std(ddof=1) / np.sqrt(R)
    assert abs(tot.mean() - predicted_total) <= K_SE * se_tot
    # power: a 10 % mistake in the prediction would be detected
    assert K_SE * se_tot < 0.1 * predicted_total


def _theta(p, n, seed):
    return np.random.default_rng(seed).random((p, n))


LAP, GAU = Laplace(1.0), Gaussian(epsilon=1.0, delta=1e-6)


@pytest.mark.parametrize("noise", [LAP, GAU], ids=["laplace", "gaussian"])
def test_simulation_1d_pidentity(noise):
    rng = np.random.default_rng(100 + noise.norm)
    W = Workload.of(AllRange(8))
    S = KronStrategy((PIdentity(_theta(2, 8, 1), noise.norm),))
    sq = simulate_global(W.dense(), S.matrix.dense(), noise, rng)
    compare(sq, query_variances(W, S, noise), expected_error(W, S, noise))


@pytest.mark.parametrize("noise", [LAP, GAU], ids=["laplace", "gaussian"])
def test_simulation_kron(noise):
    rng = np.random.default_rng(200 + noise.norm)
    W = Workload(
        (3, 4),
        [(1.0, (AllRange(3), Identity(4))), (2.0, (Total(3), Prefix(4))), (0.5, (IdentityTotal(3), WidthRange(4, 2)))],
    )
    S = KronStrategy((PIdentity(_theta(1, 3, 2), noise.norm), Prefix(4)))
    sq = simulate_global(W.dense(), S.matrix.dense(), noise, rng)
    compare(sq, query_variances(W, S, noise), expected_error(W, S, noise))


@pytest.mark.parametrize("noise", [LAP, GAU], ids=["laplace", "gaussian"])
def test_simulation_union_local_least_squares(noise):
    """Each group is reconstructed from its own part's measurements only."""
    rng = np.random.default_rng(300 + noise.norm)
    W = Workload(
        (3, 4),
        [(1.0, (AllRange(3), Total(4))), (1.0, (Total(3), Prefix(4))), (2.0, (Prefix(3), Total(4))),
         (0.5, (Identity(3), Identity(4)))],
    )
    parts = [
        KronStrategy((PIdentity(_theta(1, 3, 5), 1), Total(4))),
        KronStrategy((Total(3), Prefix(4))),
        KronStrategy((Identity(3), Identity(4))),
    ]
    weights = [0.5, 0.3, 0.2]
    groups = [[0, 2], [1], [3]]
    U = UnionStrategy(parts, weights, groups)
    A_all = np.vstack([c * p.matrix.dense() for p, c in zip(parts, weights)])
    sens = _sens(A_all, noise.norm)  # all parts share the privacy budget
    x = rng.integers(0, 20, size=12).astype(float)
    WD = W.dense()
    sq = np.zeros((WD.shape[0], R))
    for l, g in enumerate(groups):
        A = weights[l] * parts[l].matrix.dense()
        Z = _draw(noise, sens, (A.shape[0], R), rng)
        Xhat = np.linalg.pinv(A) @ ((A @ x)[:, None] + Z)
        for k in g:
            rows = W.term_rows(k)
            sq[rows] = (WD[rows] @ Xhat - (WD[rows] @ x)[:, None]) ** 2
    compare(sq, query_variances(W, U, noise), expected_error(W, U, noise))


@pytest.mark.parametrize(
    "noise,kind",
    [(LAP, "marginals"), (GAU, "marginals"), (GAU, "residual"), (LAP, "residual")],
    ids=["laplace-marginals", "gaussian-marginals", "gaussian-residual", "laplace-residual"],
)
def test_simulation_marginal_strategy(noise, kind):
    rng = np.random.default_rng(400 + noise.norm + (kind == "residual"))
    domain = (2, 3, 3)
    W = marginals_workload(domain, 2)
    theta = np.random.default_rng(9).random(8) + 0.2
    A = Marginals(domain, theta) if kind == "marginals" else ResidualMarginals(domain, theta)
    S = MarginalStrategy(A)
    sq = simulate_global(W.dense(), A.dense(), noise, rng)
    compare(sq, query_variances(W, S, noise), expected_error(W, S, noise))


@pytest.mark.parametrize("noise", [LAP, GAU], ids=["laplace", "gaussian"])
def test_simulation_marginal_strategy_with_fixed_factors(noise):
    """(p-Identity on attribute 0) ⊗ (weighted marginals on attributes 1, 2): OPT_+'s cluster part."""
    rng = np.random.default_rng(500 + noise.norm)
    domain = (4, 2, 3)
    W = Workload(domain, [(1.0, (Prefix(4), Identity(2), Total(3))), (1.0, (Prefix(4), Total(2), Identity(3))),
                          (0.5, (AllRange(4), Identity(2), Identity(3)))])
    theta = np.random.default_rng(10).random(4) + 0.2
    S = MarginalStrategy(Marginals(domain[1:], theta), fixed=(PIdentity(_theta(1, 4, 3), noise.norm), None, None))
    sq = simulate_global(W.dense(), S.matrix.dense(), noise, rng)
    compare(sq, query_variances(W, S, noise), expected_error(W, S, noise))
