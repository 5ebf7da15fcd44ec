"""OPT_⊗: the best single Kronecker-product strategy (HDMM Definitions 17–18).

For a strategy ``A₁ ⊗ … ⊗ A_d`` the error of a union of products splits as
``Σ_k w_k² Π_i tr(G_ki X_i⁻¹)`` (Theorem 6). Fixing all factors but one
leaves an OPT_0 problem on the surrogate Gram ``Σ_k c_k G_ki`` with
``c_k = w_k² Π_{j≠i} tr(G_kj X_j⁻¹)`` (Equation 5), so the factors are
optimized cyclically until the error stops improving, or until every factor
is given the same problem (``G`` up to scale) as in the sweep before: a fixed
point, where more sweeps would only refine the same solves. Attributes that
every term only totals get the one-query strategy ``T(n)``, and large ones that every term
only groups by or totals a closed-form factor (:mod:`~dpsql.hdmm.optimize.symmetric`).

>>> from dpsql.hdmm.matrix import IdentityTotal
>>> from dpsql.privacy import Laplace
>>> from dpsql.hdmm.workload import Workload
>>> W = Workload((3, 4), [(1.0, (IdentityTotal(3), IdentityTotal(4)))])
>>> len(opt_kron(W, Laplace(1.0)).factors)
2
"""

from __future__ import annotations

import hashlib
import math
from typing import Sequence

import numpy as np

from dpsql.hdmm.matrix import InvertibleGram, Matrix
from dpsql.hdmm.optimize import symmetric
from dpsql.hdmm.optimize.opt0 import deterministic, optimize_factor, rank_one, single_query
from dpsql.hdmm.strategy import KronStrategy
from dpsql.hdmm.workload import Term, Workload
from dpsql.privacy import NoiseModel

#: Sweeps stop when the error improves by less than this fraction.
SWEEP_TOL = 1e-6
MAX_SWEEPS = 25
#: Attributes above this many values that the workload only groups by or totals get the closed-form
#: factor of :mod:`~dpsql.hdmm.optimize.symmetric` instead of an OPT_0 search (below, OPT_0 takes
#: under a second and its p-Identity family, wider under Laplace noise, is kept).
SYMMETRIC_MIN = 256


def _gram_pinv(A: Matrix) -> np.ndarray:
    """``(AᵀA)⁺``, dense (factors are one attribute wide)."""
    X = A.gram()
    return X.inverse() if isinstance(X, InvertibleGram) else X.pinv().dense()


def kron_search(
    domain: Sequence[int], terms: Sequence[Term], norm: int, rng: np.random.Generator,
    p: Sequence[int | None] | None = None, memo: dict | None = None,
) -> tuple[tuple[Matrix, ...], float]:
    """Block-coordinate search for one product strategy; returns factors and trace error.

    With a single term the attributes decouple (Theorem 4), so one sweep is
    exact. ``memo`` lets repeated searches (OPT_+ runs one per term) reuse the
    first-sweep factor found for an identical normalized Gram matrix, since
    scaling ``G`` does not change its optimal strategy.
    """
    d = len(domain)
    # attributes every term groups by or totals (Gram aI + bJ): a closed-form factor, no n × n matrix
    # (dpsql.hdmm.optimize.symmetric); the others keep their dense Grams
    sym = [symmetric_attribute(domain[i], [fs[i] for _, fs in terms]) for i in range(d)]
    grams = [[f.gram().dense() if sym[i] is None else None for i, f in enumerate(fs)] for _, fs in terms]
    w2 = np.array([w * w for w, _ in terms])
    p = [None] * d if p is None else list(p)
    # An attribute where every term asks one query (up to scale), such as a
    # total, a SUM's weights or a filter, is fixed to that query (optimal, see
    # rank_one); the others start from identity strategies (X_i = I).
    single = [rank_one(sum(g[i] for g in grams)) if sym[i] is None else
              (np.ones(domain[i]) if not np.any(sym[i][:, 0] > 0) else None) for i in range(d)]
    fixed = [v is not None for v in single]
    factors: list[Matrix] = [single_query(v) if v is not None else None for v in single]
    thetas: list[np.ndarray | None] = [None] * d
    # traces[k, i] = tr(G_ki X_i⁺)
    pinvs = [_gram_pinv(f) if f is not None and sym[i] is None else None for i, f in enumerate(factors)]
    traces = np.array([[0.0 if sym[i] is not None else np.trace(g[i]) if not fixed[i] else
                        float(np.sum(g[i] * pinvs[i])) for i in range(d)] for g in grams], dtype=float)
    for i in range(d):
        if sym[i] is not None:
            traces[:, i] = symmetric.traces(sym[i], domain[i], 0.0, 1.0) if fixed[i] else \
                domain[i] * sym[i].sum(axis=1)  # X = I: tr(aI + bJ) = (a + b) n
    error = math.inf
    problems: list[np.ndarray | None] = [None] * d  # each attribute's last surrogate Gram, over its trace
    for _ in range(MAX_SWEEPS):
        same = True
        for i in range(d):
            if fixed[i]:
                continue
            others = np.prod(np.delete(traces, i, axis=1), axis=1) * w2
            if sym[i] is not None:
                a, b = others @ sym[i]
                problem = np.array([a, b]) / max(float(a + b) * domain[i], 1e-300)
            else:
                G = sum(c * g[i] for c, g in zip(others, grams))
                problem = G / max(float(np.trace(G)), 1e-300)
            same = same and problems[i] is not None and np.allclose(problem, problems[i], rtol=1e-9, atol=1e-12)
            problems[i] = problem
            if sym[i] is not None:
                st = symmetric.closed_form(float(a), float(b), domain[i], norm) if a > 0 else (1.0, 0.0)
                factors[i] = symmetric.factor(*st, domain[i])
                traces[:, i] = symmetric.traces(sym[i], domain[i], *st)
                continue
            A = _factor(G, norm, rng, p[i], thetas[i], memo)
            thetas[i], factors[i] = getattr(A, "theta", None), A
            P = _gram_pinv(A)
            traces[:, i] = [float(np.sum(g[i] * P)) for g in grams]
        new = float(np.sum(w2 * np.prod(traces, axis=1)))
        # same: every factor was given the problem it was given last sweep (scaling G does not change
        # its optimum): the sweeps have reached a fixed point, and more would only refine the same solves
        converged = error - new <= SWEEP_TOL * new or same
        error = new
        if converged or len(terms) == 1 or all(fixed):
            break
    return tuple(factors), error


def symmetric_attribute(n: int, fs: Sequence[Matrix]) -> np.ndarray | None:
    """Per term, ``(a_k, b_k)`` with ``G_k = a_k I + b_k J`` on an attribute of more than
    :data:`SYMMETRIC_MIN` values when every term's factor is of that form, else None."""
    if n <= SYMMETRIC_MIN:
        return None
    found = [symmetric.coefficients(f) for f in fs]
    return None if any(c is None for c in found) else np.array(found, dtype=float)


def _factor(G: np.ndarray, norm: int, rng: np.random.Generator, p: int | None, theta0: np.ndarray | None,
            memo: dict | None) -> Matrix:
    if memo is None or theta0 is not None:
        return optimize_factor(G, norm, rng, p, theta0=theta0)[0]
    t = float(np.trace(G))
    key = hashlib.sha256(np.round(G / t if t > 0 else G, 12).tobytes() + repr((G.shape, norm, p)).encode()).hexdigest()
    if key not in memo:
        memo[key] = optimize_factor(G, norm, rng, p)[0]
    return memo[key]


def opt_kron(
    workload: Workload, noise: NoiseModel, p: Sequence[int] | None = None, restarts: int = 1, seed: int = 0
) -> KronStrategy:
    """OPT_⊗: the best of ``restarts`` block-coordinate searches for a product strategy."""
    rng = np.random.default_rng(seed)
    if deterministic(noise.norm, workload.domain):
        restarts = 1
    runs = [kron_search(workload.domain, workload.terms, noise.norm, rng, p) for _ in range(max(1, restarts))]
    factors, _ = min(runs, key=lambda r: r[1])
    return KronStrategy(factors, operator="OPT_kron")
