"""OPT_M: marginal-algebra strategies (HDMM Definition 22, Theorem 13).

Every conjunctive workload enters the objective only through its eigen
weights ``γ_t`` (Theorem 10), so the search is over ``2^d`` marginal weights
whatever the attribute sizes.

* Laplace: minimize ``(Σ_a θ_a)² Σ_t γ_t / λ_t(θ²)`` over ``θ ≥ 0`` with
  L-BFGS-B, from Theorem 13's closed form (negative weights clipped) and
  random restarts.
* Gaussian: the problem is solved exactly. Theorem 13's Gram matrix has
  eigenvalues ``√(γ_t / mult_t)``, the SVD-bound optimum. It is realized as
  weighted marginals when its marginal weights are nonnegative, and otherwise
  by residual queries with the same Gram matrix and the same L2 sensitivity,
  so Gaussian OPT_M always attains the SVD bound for these workloads.

>>> from dpsql.privacy import Gaussian
>>> from dpsql.hdmm.workload import marginals_workload
>>> W = marginals_workload((3, 4, 5), k=2)
>>> s = opt_marginal(W, Gaussian(1.0, 1e-6))
>>> s.operator
'OPT_M'
"""

from __future__ import annotations

import numpy as np
import scipy.optimize

from dpsql.hdmm.marginals import (
    MAX_ATTRIBUTES,
    Marginals,
    MarginalsGram,
    ResidualMarginals,
    complement_sizes,
    multiplicities,
    subset_sum,
    superset_sum,
    workload_eigen_weights,
)
from dpsql.hdmm.strategy import MarginalStrategy
from dpsql.hdmm.workload import Workload
from dpsql.privacy import NoiseModel

#: Largest number of attributes OPT_M optimizes over (``2^d`` marginal weights).
MAX_SEARCH_ATTRIBUTES = min(16, MAX_ATTRIBUTES)

#: Random starts per requested restart for the (cheap) Laplace OPT_M search.
STARTS_PER_RESTART = 6


def closed_form_eigenvalues(gamma: np.ndarray, domain: tuple[int, ...]) -> np.ndarray:
    """Eigenvalues ``√(γ_t / mult_t)`` of the square root of the workload's Gram (Theorem 13)."""
    mult = multiplicities(domain)
    return np.sqrt(np.where(mult > 0, gamma / np.maximum(mult, 1), 0.0))


def _laplace_objective(theta: np.ndarray, gamma: np.ndarray, m: np.ndarray, d: int) -> tuple[float, np.ndarray]:
    s = theta.sum()
    lam = superset_sum(theta**2 * m, d)
    pos = lam > 0
    if np.any(gamma[~pos] > 0):
        return np.inf, np.zeros_like(theta)
    ratio = np.where(pos, gamma / np.where(pos, lam, 1.0), 0.0)
    F = ratio.sum()
    dF_du = -m * subset_sum(np.where(pos, ratio / np.where(pos, lam, 1.0), 0.0), d)
    grad = 2 * s * F + s**2 * dF_du * 2 * theta
    return s**2 * F, grad


def _laplace_search(
    gamma: np.ndarray, domain: tuple[int, ...], theta0: np.ndarray, maxiter: int = 2000
) -> tuple[np.ndarray, float]:
    d = len(domain)
    m = complement_sizes(domain)
    scale = max(gamma.max(), 1e-300)
    res = scipy.optimize.minimize(
        lambda x: _laplace_objective(x, gamma / scale, m, d), theta0, jac=True, method="L-BFGS-B",
        bounds=[(0.0, None)] * len(theta0), options={"maxiter": maxiter, "ftol": 1e-12, "gtol": 1e-12},
    )
    return res.x, float(res.fun) * scale


def opt_marginal(workload: Workload, noise: NoiseModel, restarts: int = 1, seed: int = 0) -> MarginalStrategy:
    """OPT_M under the noise model's norm (closed form for Gaussian, L-BFGS-B for Laplace)."""
    domain = workload.domain
    gamma = workload_eigen_weights(domain, workload.terms)
    if not np.any(gamma > 0):  # every query is zero: the total alone answers them, exactly
        return MarginalStrategy(Marginals(domain, np.eye(1, len(gamma)).ravel()))
    root = closed_form_eigenvalues(gamma, domain)
    u = MarginalsGram.from_eigenvalues(domain, root).weights
    tol = 1e-9 * max(1.0, float(np.abs(u).max()))
    if noise.norm == 2:
        if np.all(u >= -tol):
            return MarginalStrategy(Marginals(domain, np.sqrt(np.maximum(u, 0.0))))
        return MarginalStrategy(ResidualMarginals.from_eigenvalues(domain, root))
    rng = np.random.default_rng(seed)
    # Many cheap starts: the closed form, then uniform weights raised to powers
    # 1, 2 and 4 (sparser starts favour strategies with few marginals).
    starts = [np.sqrt(np.maximum(u, 0.0))]
    starts += [rng.random(len(u)) ** (1, 2, 4)[r % 3] for r in range(STARTS_PER_RESTART * max(1, restarts))]
    best = None
    for theta0 in starts:
        if not np.any(theta0 > 0):
            continue
        theta, loss = _laplace_search(gamma, domain, theta0)
        if best is None or loss < best[1]:
            best = (theta, loss)
    theta = best[0] / best[0].sum()
    return MarginalStrategy(Marginals(domain, theta))
