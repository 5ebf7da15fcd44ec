"""Error analysis: expected error, per-query variance and the SVD lower bound.

Under the matrix mechanism the error is data-independent. With noise of
variance ``σ²`` per unit of sensitivity and a strategy ``A`` of sensitivity
``Δ``, least squares answers workload ``W`` with covariance
``σ² Δ² W (AᵀA)⁺ Wᵀ``. So:

* expected total squared error ``= σ² Δ² tr(WᵀW (AᵀA)⁺)``;
* RMSE ``= √(TSE / #queries)``;
* the variance of query ``q`` is the ``q``-th diagonal entry, whose square
  root is the standard error reported next to each answer.

>>> from dpsql.hdmm.matrix import AllRange, Identity
>>> from dpsql.privacy import Laplace
>>> from dpsql.hdmm.strategy import KronStrategy
>>> from dpsql.hdmm.workload import Workload
>>> round(rmse(Workload.of(AllRange(64)), KronStrategy((Identity(64),)), Laplace(1.0)), 2)
6.63
"""

from __future__ import annotations

import math

import numpy as np

from dpsql.hdmm.marginals import multiplicities, workload_eigen_weights
from dpsql.hdmm.matrix import DENSE_LIMIT
from dpsql.hdmm.strategy import Strategy
from dpsql.hdmm.workload import Workload
from dpsql.privacy import NoiseModel


def _noise_scale(strategy: Strategy, noise: NoiseModel) -> float:
    return noise.variance(strategy.sensitivity(noise.norm))


def expected_error(workload: Workload, strategy: Strategy, noise: NoiseModel) -> float:
    """Expected total squared error over all workload queries."""
    return _noise_scale(strategy, noise) * strategy.trace_error(workload)


def rmse(workload: Workload, strategy: Strategy, noise: NoiseModel) -> float:
    """Root mean squared error per workload query."""
    return math.sqrt(expected_error(workload, strategy, noise) / workload.num_queries)


def query_variances(workload: Workload, strategy: Strategy, noise: NoiseModel) -> np.ndarray:
    """Variance of every workload answer, in workload row order."""
    return _noise_scale(strategy, noise) * np.concatenate(strategy.query_variances(workload))


def max_variance(workload: Workload, strategy: Strategy, noise: NoiseModel) -> float:
    """The largest variance of any one workload answer (``inf`` if some query is unanswerable)."""
    return _noise_scale(strategy, noise) * max(float(v.max(initial=0.0)) for v in strategy.query_variances(workload))


def _in_marginal_algebra(G: np.ndarray) -> bool:
    """Whether a factor Gram is ``aI + bJ``."""
    n = G.shape[0]
    off = G[~np.eye(n, dtype=bool)]
    return bool(np.allclose(np.diag(G), G[0, 0]) and (off.size == 0 or np.allclose(off, off[0])))


def _sqrt_eigen_sum(workload: Workload) -> float | None:
    """``Σ_i √λ_i(WᵀW)`` (the nuclear norm of ``W``) where it can be computed."""
    terms = workload.terms
    if len(terms) == 1:  # Theorem 5: the bound factors over a single product
        w, fs = terms[0]
        return abs(w) * math.prod(
            float(np.sqrt(np.clip(np.linalg.eigvalsh(f.gram().dense()), 0, None)).sum()) for f in fs
        )
    if all(_in_marginal_algebra(f.gram().dense()) for _, fs in terms for f in fs):
        gamma = workload_eigen_weights(workload.domain, terms)
        return float(np.sqrt(gamma * multiplicities(workload.domain)).sum())
    N = workload.shape[1]
    if N * N <= DENSE_LIMIT / 4:
        return float(np.sqrt(np.clip(np.linalg.eigvalsh(workload.gram().dense()), 0, None)).sum())
    return None


def svd_bound(workload: Workload, noise: NoiseModel) -> float | None:
    """The SVD lower bound on RMSE (Li & Miklau), or ``None`` where it is not computable.

    No strategy with unit L2 sensitivity beats ``(Σ_i √λ_i)² / N`` expected
    total squared error per unit noise variance, ``λ_i`` the eigenvalues of
    ``WᵀW`` and ``N`` the domain size. Since L1 norms dominate L2 norms, the
    same bound holds under Laplace noise with its own variance.
    """
    s = _sqrt_eigen_sum(workload)
    if s is None:
        return None
    tse = noise.variance(1.0) * s * s / workload.shape[1]
    return math.sqrt(tse / workload.num_queries)
