"""OPT_0: explicit strategy optimization for one attribute (HDMM §4).

* Laplace (L1): minimizes ``tr(G (AᵀA)⁻¹)`` over p-Identity strategies
  ``A(Θ)``, ``Θ ≥ 0`` (Definition 14), with L-BFGS-B or, on large attributes,
  projected L-BFGS. ``A`` has unit L1 sensitivity, so the objective is the
  expected total squared error per unit of noise variance. The problem is not
  convex; restarts from independent random starts keep the best local optimum.
* Gaussian (L2): the problem is convex in ``AᵀA`` and is solved to a
  certified duality gap by :func:`~dpsql.hdmm.optimize.gaussian.optimize_l2`;
  domains too large for an eigendecomposition per step fall back to
  p-Identity with L2 column normalization.

>>> from dpsql.hdmm.matrix import AllRange
>>> from dpsql.privacy import Laplace
>>> from dpsql.hdmm.workload import Workload
>>> s = opt_0(Workload.of(AllRange(16)), Laplace(1.0), seed=0)
>>> s.factors[0].shape[1]
16
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import scipy.optimize

from dpsql.errors import WorkloadError
from dpsql.hdmm.matrix import Dense, Matrix, StructuredGram, Total
from dpsql.hdmm.optimize.gaussian import optimize_l2
from dpsql.hdmm.optimize.lbfgs import minimize_bounded
from dpsql.hdmm.optimize.threads import blas_threads
from dpsql.hdmm.pidentity import PIdentity, pidentity_objective
from dpsql.hdmm.strategy import KronStrategy
from dpsql.hdmm.workload import Workload
from dpsql.privacy import NoiseModel


def default_p(n: int) -> int:
    """HDMM's default number of extra queries, ``max(1, n/16)``."""
    return max(1, n // 16)


def search_plan(n: int, restarts: int, p: int | None = None) -> list[Search]:
    """The p-Identity searches OPT_0 runs on an attribute of size ``n``.

    Up to :data:`MULTISTART_MAX` elements, restart ``r`` uses the ``r``-th
    kind of :func:`pidentity_start` with HDMM's ``p`` and no cap beyond
    :func:`evaluation_budget`. Above it, every evaluation is costly, so only
    the two searches of :data:`LARGE_SEARCHES` are run: neither wins everywhere.
    """
    if p is not None and n > MULTISTART_MAX:
        return [Search(0, p)]
    if n > MULTISTART_MAX:
        return [Search(kind, max(1, n // divisor), cap, memory) for kind, divisor, cap, memory in LARGE_SEARCHES]
    kinds = start_kinds(n)
    return [Search(kinds[r % len(kinds)], default_p(n) if p is None else p) for r in range(max(1, restarts))]


@dataclass(frozen=True)
class Search:
    """One p-Identity search: the :func:`pidentity_start` kind, ``p``, an evaluation cap and the quasi-Newton memory."""

    kind: int
    p: int
    cap: int | None = None
    memory: int = 10


#: ``(start kind, n / p, evaluation cap, memory)`` of the two searches above
#: :data:`MULTISTART_MAX`. At n = 4096 (Laplace, ε = 1, RMSE), the ``n/32`` search
#: from the small start reaches all-range 14.38 and prefix 12.17 within its 800
#: evaluations (14.44 and 12.27 from the uniform start), where ``n/16`` needs
#: hundreds more. On width-32 ranges ``n/16`` from the uniform start reaches 6.43
#: within 120 (6.48 with 10 curvature pairs, 6.81 from the small start), where
#: ``n/32`` stalls at 7.2. Each evaluation costs about ``4 p² n`` flops, so the caps
#: keep an n = 4096 row under a minute.
LARGE_SEARCHES = ((1, 32, 800, 10), (0, 16, 120, 20))


def optimize_pidentity(
    G: np.ndarray,
    p: int,
    norm: int,
    rng: np.random.Generator,
    theta0: np.ndarray | None = None,
    product: Callable[[np.ndarray], np.ndarray] | None = None,
    cap: int | None = None,
    memory: int = 10,
) -> tuple[PIdentity, float]:
    """The p-Identity strategy minimizing ``tr(G (AᵀA)⁻¹)`` from one start.

    Returns the strategy and its objective value. ``theta0`` warm-starts the
    search (OPT_⊗ passes the previous sweep's parameters). ``product(Z)``, if
    given, computes ``Z @ G`` from the workload's structure (see
    :class:`~dpsql.hdmm.matrix.StructuredGram`). Entries of ``Θ`` are capped at
    :data:`THETA_MAX`, where the Woodbury evaluation is still accurate; a run
    whose value is not a finite positive number is reported with infinite
    error so that callers discard it. The number of objective evaluations is
    :func:`evaluation_budget` of the problem size, or ``cap`` if smaller;
    ``memory`` is the number of curvature pairs kept. Attributes up to
    :data:`MULTISTART_MAX` are searched with SciPy's L-BFGS-B; larger ones with
    :func:`~dpsql.hdmm.optimize.lbfgs.minimize_bounded`, whose steps cost
    ``O(memory · free variables)`` where L-BFGS-B's walk over the variables at
    a bound took twice the objective's time (an n = 4096 row: 86 s, now 45 s).
    """
    n = G.shape[0]
    scale = max(float(np.trace(G)) / n, 1e-300)
    Gs = G / scale  # scale-free objective for better-conditioned line searches
    products = None if product is None else (lambda Z: product(Z) / scale)
    theta = rng.random((p, n)) if theta0 is None else np.array(theta0, dtype=float)

    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        loss, grad = pidentity_objective(x.reshape(p, n), Gs, norm, products)
        return loss, grad.ravel()

    budget = evaluation_budget(p, n, structured=product is not None)
    budget = budget if cap is None else min(budget, cap)
    # One BLAS thread: the p × n products are too small for two threads to pay on 2 cores.
    x0 = np.clip(theta, 0.0, THETA_MAX).ravel()
    with blas_threads(1):
        if n > MULTISTART_MAX:  # L-BFGS-B's breakpoint search would cost more than the objective
            best = minimize_bounded(fun, x0, 0.0, THETA_MAX, budget, memory=memory).x
        else:
            best = scipy.optimize.minimize(
                fun, x0, jac=True, method="L-BFGS-B",
                bounds=scipy.optimize.Bounds(0.0, THETA_MAX),  # scalar bounds: no list of p·n pairs to convert
                options={"maxiter": budget, "maxfun": budget, "maxcor": memory, "ftol": 1e-15, "gtol": 1e-12},
            ).x
        best = best.reshape(p, n)
        loss = pidentity_objective(best, Gs, norm, products)[0]
    ok = np.isfinite(loss) and loss > 0
    return PIdentity(best, norm), float(loss) * scale if ok else np.inf


#: Upper bound on p-Identity parameters (larger values only shrink the identity part).
THETA_MAX = 1e3

#: Bounds on objective evaluations per search, and the work one search may do.
MIN_EVALUATIONS, EVALUATION_FLOPS = 150, 4e11


def max_evaluations(n: int) -> int:
    """Small problems converge within 600 evaluations and get restarts; large
    ones (one start, about ``p·n`` parameters) need more steps."""
    return 600 if n <= MULTISTART_MAX else 1500


def evaluation_budget(p: int, n: int, structured: bool = False) -> int:
    """How many objective evaluations one p-Identity search may use.

    An evaluation costs about ``4 p² n`` flops plus the Gram product:
    ``2 p n²`` dense, ``O(p n)`` when structured. The budget keeps one search
    near ``EVALUATION_FLOPS`` of work, within ``[MIN_EVALUATIONS, max_evaluations(n)]``.
    """
    cost = 4.0 * p * p * n + (20.0 * p * n if structured else 2.0 * p * n * n)
    return int(np.clip(EVALUATION_FLOPS / cost, MIN_EVALUATIONS, max_evaluations(n)))


#: Largest attribute size for the exact L2 solver (one n×n eigendecomposition per step).
L2_EXACT_MAX = 8192


#: Relative residual below which a Gram matrix counts as rank one.
RANK_ONE_TOL = 1e-10


def rank_one(G: np.ndarray) -> np.ndarray | None:
    """``v`` with ``G = v vᵀ`` when ``G`` has rank at most one, else None.

    A rank-one Gram is a single query (up to scale) such as a SUM's weights
    or a WHERE filter on an attribute nobody groups by. Answering it directly
    is optimal under both norms: if ``v = uᵀA`` then ``|v_j| ≤ ‖u‖₂ ‖a_j‖ ≤ ‖u‖₂``
    for a unit-sensitivity ``A``, so no strategy beats error ``max_j v_j²``,
    which the row ``v / max|v|`` attains.
    """
    d = np.diag(G)
    r = int(np.argmax(d))
    if d[r] <= 0:
        return np.zeros(G.shape[0])
    v = G[:, r] / np.sqrt(d[r])
    if np.abs(G - np.outer(v, v)).max() > RANK_ONE_TOL * d[r]:
        return None
    return v


def single_query(v: np.ndarray) -> Matrix:
    """The unit-sensitivity strategy that answers the one query ``v`` (see :func:`rank_one`)."""
    m = float(np.abs(v).max())
    if m > 0 and np.all(v == v[0]):  # exactly: SUM over values 10⁶..10⁶+9 is no COUNT
        return Total(v.size)
    return Dense((v / m if m > 0 else np.ones_like(v))[None, :])


def deterministic(norm: int, domain: Sequence[int]) -> bool:
    """Whether the per-attribute oracle is deterministic on this domain (the
    convex L2 problem), so that restarts would repeat the same search."""
    return norm == 2 and max(domain) <= L2_EXACT_MAX


def optimize_factor(
    G: np.ndarray, norm: int, rng: np.random.Generator, p: int | None = None, theta0: np.ndarray | None = None
) -> tuple[Matrix, float]:
    """The per-attribute oracle: a unit-sensitivity strategy for Gram ``G`` and its error.

    A zero ``G`` (only all-zero queries, e.g. from an impossible predicate)
    needs no measurement; the identity answers it with zero error.
    """
    n = G.shape[0]
    if not np.any(G):
        return PIdentity(np.zeros((1, n)), norm), 0.0
    if norm == 2 and n <= L2_EXACT_MAX:
        A, err, _ = optimize_l2(G)
        return A, err
    p = default_p(n) if p is None else p
    if theta0 is not None and theta0.shape == (p, n):
        return optimize_pidentity(G, p, norm, rng, theta0=theta0)
    runs = [optimize_pidentity(G, p, norm, rng, theta0=pidentity_start(k, p, n, rng)) for k in start_kinds(n)]
    return min(runs, key=lambda r: r[1])


#: Above this size each evaluation is costly: only HDMM's uniform start is used
#: (per attribute in OPT_⊗, and once per ``p`` of :func:`search_plan` in OPT_0).
MULTISTART_MAX = 1024


def start_kinds(n: int) -> tuple[int, ...]:
    """The kinds of start :func:`pidentity_start` offers for an attribute of size ``n``."""
    return (0, 1, 2) if n <= MULTISTART_MAX else (0,)


def pidentity_start(kind: int, p: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """A starting point for the nonconvex p-Identity search.

    Kind 0 is HDMM's uniform ``[0, 1)`` start; kind 1 is ten times smaller;
    kind 2 is near-constant (extra queries close to scaled totals). The last
    two escape the local optimum at ``Θ = 0`` that traps the search on
    workloads such as ``IT(n)``, where the identity is locally but not
    globally optimal.
    """
    U = rng.random((p, n))
    return (U, 0.1 * U, (1.0 + 0.1 * U) / (p * np.sqrt(n)))[kind]


def opt_0(
    workload: Workload, noise: NoiseModel, p: int | None = None, restarts: int = 1, seed: int = 0
) -> KronStrategy:
    """OPT_0 on a one-attribute workload: the best p-Identity strategy over ``restarts`` starts."""
    if len(workload.domain) != 1:
        raise WorkloadError(f"OPT_0 takes a one-attribute workload; this one has {len(workload.domain)} attributes")
    grams = [(w * w, f.gram()) for w, (f,) in workload.terms]
    G = sum(c * g.dense() for c, g in grams)
    n = G.shape[0]
    rng = np.random.default_rng(seed)
    v = rank_one(G)
    if v is not None:
        return KronStrategy((single_query(v),), operator="OPT_0")
    if deterministic(noise.norm, (n,)):  # convex: one run is enough
        return KronStrategy((optimize_factor(G, 2, rng)[0],), operator="OPT_0")
    product = None
    if all(isinstance(g, StructuredGram) for _, g in grams):
        def product(Z: np.ndarray) -> np.ndarray:
            return sum(c * g._matmat(Z.T).T for c, g in grams)
    runs = [optimize_pidentity(G, s.p, noise.norm, rng, pidentity_start(s.kind, s.p, n, rng), product, s.cap, s.memory)
            for s in search_plan(n, restarts, p)]
    return KronStrategy((min(runs, key=lambda r: r[1])[0],), operator="OPT_0")
