"""OPT_M_max: the marginal strategy that minimizes the largest query variance.

HDMM's OPT_M minimizes the *total* variance of a workload's answers. This
operator minimizes the *largest* per-query variance instead, the objective
ResidualPlanner (Xiao, He, Zhang & Kifer, NeurIPS 2023) optimizes among other
convex functions of marginal variances. It handles Gaussian (L2) noise on
workloads whose every factor has a Gram matrix ``αI + βJ`` (identities,
totals, ``IT`` and their multiples: marginal workloads).

**Problem.** A strategy whose Gram matrix is in the marginal algebra is
``X = Σ_t λ_t Π_t`` (``Π_t`` the eigenprojectors, ``t`` a subset bitmask).
Its squared L2 sensitivity is the constant diagonal ``Σ_t κ_t λ_t`` with
``κ_t = Π_{i∈t} (1 − 1/n_i) Π_{i∉t} 1/n_i``, and a workload query ``r`` has
variance ``v_r(λ) = Σ_t C_rt / λ_t`` per unit noise variance, where ``C_rt``
is ``w²`` times the product over attributes of the query factor row's
squared projection onto the ones vector (``i ∉ t``) or onto its complement
(``i ∈ t``). The operator solves

    minimize  max_r v_r(λ)   subject to  κᵀλ ≤ 1,  λ ≥ 0,

a convex problem over the eigenspaces that some query reaches. Queries are
never enumerated: a term's rows collapse per attribute to their distinct
(ones, complement) projection pairs, and pairs dominated on both parts are
dropped (they never attain the maximum).

**Certificate.** For any distribution ``μ`` over the queries, with
``b = Cᵀμ``, weak duality gives the lower bound
``L(μ) = (Σ_t √(κ_t b_t))² ≤ max_r v_r(λ)`` for every feasible ``λ``, with
equality at the optimum, where ``λ_t ∝ √(b_t / κ_t)``. An interior-point
method (log barrier on the reciprocals ``x_t = 1/(κ_t λ_t)``, where the
constraints ``v_r ≤ 1`` are linear) runs until the relative gap
``(max_r v_r(λ) − L(μ)) / max_r v_r(λ)`` is below ``tol``.

**Guarantee.** The returned strategy is optimal, to the certified gap, among
all strategies whose Gram matrix lies in the algebra. When every factor's set
of rows is closed (up to sign) under permutations of the attribute's values,
as for ``I``, ``T`` and ``IT``, averaging any strategy over those
permutations keeps its sensitivity and does not raise the largest variance
(the variance of a fixed query is convex in the Gram matrix), so it is then
optimal among *all* linear Gaussian strategies with least-squares answers.

>>> from dpsql.privacy import Gaussian
>>> from dpsql.hdmm.workload import marginals_workload
>>> W = marginals_workload((3, 4, 5), k=2)
>>> opt = opt_max_marginal(W, Gaussian(1.0, 1e-6))
>>> opt.strategy.operator, bool(opt.gap <= 1e-6)
('OPT_M_max', True)
>>> worst = max(v.max() for v in opt.strategy.query_variances(W))
>>> bool(abs(worst * opt.strategy.sensitivity(2) ** 2 - opt.max_variance) <= 1e-9 * opt.max_variance)
True
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse
import scipy.sparse.linalg

from dpsql.errors import WorkloadError
from dpsql.hdmm.marginals import ResidualMarginals, in_algebra
from dpsql.hdmm.matrix import Matrix
from dpsql.hdmm.strategy import MarginalStrategy
from dpsql.hdmm.workload import Workload
from dpsql.privacy import NoiseModel

#: Most (query profile, eigenspace) coefficients the problem may have (zeros included).
MAX_PROFILE_ENTRIES = 5_000_000

#: Most entries the Newton system (eigenspaces × eigenspaces that share a query) may have.
MAX_NEWTON_ENTRIES = 4_000_000

#: Relative size below which a projection part counts as zero.
ZERO_TOL = 1e-12

#: Barrier parameter growth per centering round.
BARRIER_GROWTH = 30.0

#: Fraction of the distance to the boundary a Newton step may cover.
STEP_FRACTION = 0.99


@dataclass(frozen=True)
class MaxVarianceOptimum:
    """What :func:`opt_max_marginal` returns.

    ``max_variance`` is the strategy's largest query variance per unit noise
    variance at unit L2 sensitivity (the strategy is scaled to sensitivity 1);
    ``lower_bound`` is the certified bound no strategy of the algebra beats,
    and ``gap = (max_variance − lower_bound) / max_variance``.
    """

    strategy: MarginalStrategy
    max_variance: float
    lower_bound: float
    gap: float


def opt_max_marginal(workload: Workload, noise: NoiseModel, tol: float = 1e-6,
                     maxiter: int = 500) -> MaxVarianceOptimum:
    """The Gaussian marginal strategy minimizing the largest query variance.

    Stops when the certified relative gap is at most ``tol``, or after
    ``maxiter`` iterations (Newton steps and barrier updates) with the best
    strategy found, whose ``gap`` then says how far from optimal it may be.
    Raises WorkloadError for Laplace noise, for a factor outside the marginal
    algebra, or for a problem too large (:data:`MAX_PROFILE_ENTRIES`,
    :data:`MAX_NEWTON_ENTRIES`).
    """
    if noise.norm != 2:
        raise WorkloadError("the max-variance marginal optimum is for Gaussian (L2) noise; "
                            "use OPT_M for Laplace noise")
    if not tol > 0:
        raise WorkloadError(f"tol must be positive, got {tol!r}")
    domain = workload.domain
    for k, (_, factors) in enumerate(workload.terms):
        for i, f in enumerate(factors):
            if not in_algebra(f):
                raise WorkloadError(f"term {k}, attribute {i}: factor {f!r} is not in the marginal algebra "
                                    "(its Gram matrix is not αI + βJ); the max-variance optimum needs "
                                    "identities, totals or IT on every attribute")
    subsets, C = _profiles(workload)
    lam = np.zeros(2 ** len(domain))
    if not subsets.size:  # every query is identically zero: any strategy answers it exactly
        lam[0] = float(math.prod(domain))
        return MaxVarianceOptimum(MarginalStrategy(ResidualMarginals.from_eigenvalues(domain, lam),
                                                   operator="OPT_M_max"), 0.0, 0.0, 0.0)
    newton = min(int((C.getnnz(axis=1).astype(np.int64) ** 2).sum()), len(subsets) ** 2)
    if newton > MAX_NEWTON_ENTRIES:
        raise WorkloadError(f"the max-variance problem couples {len(subsets)} eigenspaces too densely "
                            f"(a Newton system of up to {newton} entries, limit {MAX_NEWTON_ENTRIES})")
    kappa = _sensitivity_weights(domain, subsets)
    D = C @ scipy.sparse.diags(kappa)
    scale = float(D.max())
    z, upper, lower = _solve(scipy.sparse.csr_matrix(D / scale), tol, maxiter)
    lam[subsets] = z / kappa
    strategy = MarginalStrategy(ResidualMarginals.from_eigenvalues(domain, lam), operator="OPT_M_max")
    return MaxVarianceOptimum(strategy, upper * scale, lower * scale, max(0.0, (upper - lower) / upper))


def _projection_pairs(f: Matrix) -> np.ndarray:
    """Each row's squared projections ``(on 1, on 1⊥)``, deduplicated, zero rows dropped, and
    only the pairs no other pair matches or beats on both parts."""
    full = f.row_norms_sq()
    ones = f.row_sums() ** 2 / f.shape[1]
    rest = full - ones
    tiny = ZERO_TOL * full
    pairs = np.column_stack([np.where(ones > tiny, ones, 0.0), np.where(rest > tiny, rest, 0.0)])
    pairs = pairs[full > 0]
    pairs = pairs[np.lexsort((-pairs[:, 1], -pairs[:, 0]))]  # ones descending, then rest descending
    best_before = np.concatenate([[-1.0], np.maximum.accumulate(pairs[:, 1])[:-1]])
    return pairs[pairs[:, 1] > best_before]


def _profiles(workload: Workload) -> tuple[np.ndarray, scipy.sparse.csr_matrix]:
    """The eigenspaces ``t`` some query reaches and the coefficients ``C_rt`` of every
    distinct query profile ``r`` (rows) on them (columns)."""
    rows, cols, vals = [], [], []
    nnz = count = 0
    for w, factors in workload.terms:
        pairs = [_projection_pairs(f) for f in factors]
        if any(len(p) == 0 for p in pairs):
            continue  # a zero factor: every query of the term is zero
        scale = w * w
        active = []
        for i, p in enumerate(pairs):
            if p[:, 1].max() > 0:
                active.append(i)
            else:  # after pruning a constant factor keeps its single largest row
                scale *= p[0, 0]
        sizes = [len(pairs[i]) for i in active]
        combos = np.array(list(itertools.product(*map(range, sizes))), dtype=int).reshape(math.prod(sizes), -1)
        nnz += len(combos) << len(active)
        if nnz > MAX_PROFILE_ENTRIES:
            raise WorkloadError(f"the max-variance problem has more than {MAX_PROFILE_ENTRIES} coefficients "
                                "(too many distinct query profiles)")
        coef = np.full((len(combos), 1), scale)
        t = np.zeros(1, dtype=np.int64)
        for j, i in enumerate(active):
            o, r = pairs[i][combos[:, j], 0], pairs[i][combos[:, j], 1]
            coef = np.concatenate([coef * o[:, None], coef * r[:, None]], axis=1)
            t = np.concatenate([t, t | (1 << i)])
        row, col = np.nonzero(coef)
        rows.append(row + count)
        cols.append(t[col])
        vals.append(coef[row, col])
        count += len(combos)
    if not rows:
        return np.zeros(0, dtype=np.int64), scipy.sparse.csr_matrix((0, 0))
    cols_all = np.concatenate(cols)
    subsets, col_index = np.unique(cols_all, return_inverse=True)
    C = scipy.sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), col_index)),
                                shape=(count, len(subsets)))
    return subsets, C


def _sensitivity_weights(domain: tuple[int, ...], subsets: np.ndarray) -> np.ndarray:
    """``κ_t = Π_{i∈t} (1 − 1/n_i) Π_{i∉t} 1/n_i``: eigenspace ``t``'s share of every column's
    squared norm per unit eigenvalue."""
    n = np.array(domain, dtype=float)
    bits = (subsets[:, None] >> np.arange(len(domain))) & 1
    return np.prod(np.where(bits == 1, 1.0 - 1.0 / n, 1.0 / n), axis=1)


def _certify(D: scipy.sparse.csr_matrix, z: np.ndarray, mu: np.ndarray) -> tuple[float, float]:
    """The largest variance ``max_r Σ_t D_rt / z_t`` of budget shares ``z`` (summing to 1), and
    the dual bound ``(Σ_t √b_t)²``, ``b = Dᵀμ / Σμ``."""
    b = D.T @ (mu / mu.sum())
    return float((D @ (1.0 / z)).max()), float(np.sqrt(b).sum() ** 2)


def _newton_direction(H: scipy.sparse.csr_matrix, grad: np.ndarray) -> np.ndarray:
    """``−H⁻¹ grad``, Jacobi-scaled, by sparse LU: eigenspaces couple only through the queries
    they share (and SuperLU, unlike threaded dense LAPACK, keeps its speed on a busy machine)."""
    d = 1.0 / np.sqrt(H.diagonal())
    Hs = scipy.sparse.diags(d) @ H @ scipy.sparse.diags(d)
    return -d * scipy.sparse.linalg.splu(Hs.tocsc(), permc_spec="MMD_AT_PLUS_A").solve(d * grad)


def _solve(D: scipy.sparse.csr_matrix, tol: float, maxiter: int) -> tuple[np.ndarray, float, float]:
    """Minimize ``max_r Σ_t D_rt / z_t`` over budget shares ``z`` (``z > 0``, ``Σ z = 1``).

    With ``x = 1/z`` up to scale this is ``min Σ_t 1/x_t`` subject to ``D x ≤ 1``; the log
    barrier ``τ Σ 1/x_t − Σ_r log(1 − (D x)_r)`` is minimized by damped Newton steps for growing
    ``τ``, and ``μ = 1/(τ s)`` (``s`` the slacks) gives dual points. Every step is certified:
    both ``z ∝ 1/x`` and the dual's own primal point ``z ∝ √(Dᵀμ)`` are candidates, and
    ``(Σ_t √b_t)²`` with ``b = Dᵀμ/Σμ`` bounds the optimum from below. Returns the best
    shares, their largest variance and the best lower bound.
    """
    m = D.shape[0]
    Dt = D.T.tocsr()
    # Start at the optimum for the uniform query distribution, shrunk well inside D x ≤ 1.
    z = np.sqrt(Dt @ np.full(m, 1.0 / m))
    x = 1.0 / z
    x *= 0.5 / (D @ x).max()
    tau = m / (1.0 / x).sum()
    best_z, upper, lower = z / z.sum(), math.inf, 0.0

    def barrier(x: np.ndarray) -> float:
        s = 1.0 - D @ x
        if np.any(x <= 0) or np.any(s <= 0):
            return math.inf
        return float(tau * (1.0 / x).sum() - np.log(s).sum())

    for _ in range(maxiter):
        s = 1.0 - D @ x
        mu = 1.0 / (tau * s)
        for cand in (1.0 / x, np.sqrt(Dt @ mu)):
            cand = cand / cand.sum()
            up, low = _certify(D, cand, mu)
            if up < upper:
                best_z, upper = cand, up
            lower = max(lower, low)
        if upper - lower <= tol * upper:
            break
        grad = -tau / x**2 + Dt @ (1.0 / s)
        step = _newton_direction(Dt @ scipy.sparse.diags(1.0 / s**2) @ D + scipy.sparse.diags(2.0 * tau / x**3), grad)
        decrement = float(-grad @ step)
        if decrement <= 1e-6:  # centered: tighten the barrier
            tau *= BARRIER_GROWTH
            continue
        # Longest step keeping x > 0 and s > 0, then backtrack on the barrier.
        ds = D @ step
        limits = np.concatenate([-x[step < 0] / step[step < 0], s[ds > 0] / ds[ds > 0]])
        alpha = min(1.0, STEP_FRACTION * limits.min()) if limits.size else 1.0
        f0 = barrier(x)
        while barrier(x + alpha * step) > f0 - 0.25 * alpha * decrement and alpha > 1e-12:
            alpha *= 0.5
        x = x + alpha * step
    return best_z, upper, lower
