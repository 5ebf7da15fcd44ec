"""The L2 (Gaussian) strategy problem for one attribute, solved by duality.

With L2 sensitivity the matrix mechanism problem is convex in ``X = AᵀA``
(HDMM §4.2): minimize ``tr(G X⁻¹)`` subject to ``diag(X) ≤ 1``. Its
Lagrange dual is concave in the multipliers ``ν > 0``:

    g(ν) = 2 tr((D G D)^{1/2}) − Σ_j ν_j,   D = diag(√ν),

maximized where ``X(ν) = D⁻¹ (D G D)^{1/2} D⁻¹`` has unit diagonal, and
``∂g/∂ν_j = X(ν)_jj − 1``. Equal ``ν`` gives ``X ∝ G^{1/2}``, the SVD-bound
strategy HDMM starts from. Every iterate yields a feasible strategy
``X(ν) / max_j X(ν)_jj`` with error ``max_j X(ν)_jj · tr((DGD)^{1/2})``; the
best one found is returned (each column's spare norm then spent on its own
cell, see :func:`optimize_l2`), and ``g(ν)`` certifies how far it can be from
optimal. Each evaluation costs one symmetric eigendecomposition.

>>> import numpy as np
>>> from dpsql.hdmm.matrix import Prefix
>>> A, err, gap = optimize_l2(Prefix(32).gram().dense())
>>> bool(gap < 1e-3)
True
"""

from __future__ import annotations

import numpy as np
import scipy.optimize

from dpsql.hdmm.matrix import GramFactored

#: Eigenvalues of ``D G D`` below this fraction of the largest are numerical zeros, and dropped.
EIG_TOL = 1e-12
#: The strategy's smallest eigenvalue (its Gram has unit diagonal), so that it has full
#: column rank; it costs at most this relative share of the error (see :func:`optimize_l2`).
RIDGE = 1e-6


def _evaluate(G: np.ndarray, nu: np.ndarray):
    r = np.sqrt(nu)
    lam, V = np.linalg.eigh(r[:, None] * G * r[None, :])
    lam = np.clip(lam, 0.0, None)
    root = np.sqrt(lam)
    diagX = (V**2 @ root) / nu
    dual = 2.0 * root.sum() - nu.sum()
    primal = float(diagX.max() * root.sum())
    return lam, V, diagX, dual, primal


def default_rtol(n: int) -> float:
    """Duality-gap target: tight for small attributes, looser where each step is an
    ``O(n³)`` eigendecomposition (a gap of 0.5% bounds the RMSE loss by 0.25%)."""
    return 1e-4 if n <= 1024 else 5e-3


def optimize_l2(G: np.ndarray, maxiter: int = 200, rtol: float | None = None) -> tuple[GramFactored, float, float]:
    """Near-optimal unit-L2-sensitivity strategy for Gram ``G``.

    Returns the strategy, its error ``tr(G (AᵀA)⁺)``, and the relative duality
    gap (an upper bound on how far that error is from the optimum). Stops when
    the gap falls below ``rtol`` (default :func:`default_rtol`) or after
    ``maxiter`` evaluations.
    """
    n = G.shape[0]
    rtol = default_rtol(n) if rtol is None else rtol
    scale = max(float(np.trace(G)) / n, 1e-300)
    Gs = G / scale
    best: dict = {}

    def fun(z: np.ndarray):
        # a long trial step can underflow some ν to 0: the point evaluates to inf/NaN, which the
        # line search rejects and backtracks from (no warning for the user: nothing is wrong)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            nu = np.exp(z)
            lam, V, diagX, dual, primal = _evaluate(Gs, nu)
            if not best or primal < best["primal"]:
                best.update(primal=primal, nu=nu, lam=lam, V=V, diagX=diagX)
            best["dual"] = max(best.get("dual", -np.inf), dual)
            if best["primal"] - best["dual"] <= rtol * best["primal"]:
                raise StopIteration
            return -dual, -(nu * (diagX - 1.0))

    # Start at ν ∝ 1 scaled so that X(ν) has unit mean diagonal: ν = (tr G^{1/2} / n)².
    lam0 = np.clip(np.linalg.eigvalsh(Gs), 0.0, None)
    z0 = np.full(n, 2.0 * np.log(max(np.sqrt(lam0).sum() / n, 1e-300)))
    try:
        scipy.optimize.minimize(fun, z0, jac=True, method="L-BFGS-B", options={"maxiter": maxiter, "maxfun": maxiter})
    except StopIteration:
        pass
    nu, lam, V = best["nu"], best["lam"], best["V"]
    # The strategy's Gram: X(ν) scaled to unit largest diagonal, shrunk by 1 − RIDGE, and each
    # column's remaining norm spent on its own cell (a diagonal). Every column then has norm 1
    # and the Gram's eigenvalues are at least RIDGE, so least squares is exact for every query
    # (also one whose weight in G is negligible next to the others'), and the error is at most
    # the search's over 1 − RIDGE. Raising D G D's small eigenvalues instead divided them by
    # ν: a cell no query reads drives its ν to 0, and that one diagonal then dwarfed the rest
    # (320 overlapping ranges: 24 times the error found).
    root = np.sqrt(np.where(lam > EIG_TOL * lam.max(), lam, 0.0))
    inv_r = np.divide(1.0, np.sqrt(nu), out=np.zeros_like(nu), where=nu > 0)  # ν = 0: a cell no query reads
    X = inv_r[:, None] * ((V * root) @ V.T) * inv_r[None, :]
    X *= (1.0 - RIDGE) / X.diagonal().max()
    X[np.diag_indices(n)] = 1.0
    s, U = np.linalg.eigh(X)
    s = np.maximum(s, RIDGE)  # rounding only: X ⪰ RIDGE · I
    A = np.sqrt(s)[:, None] * U.T
    Xinv = (U / s) @ U.T
    gap = (best["primal"] - best["dual"]) / best["primal"]
    return GramFactored(A, Xinv), float(np.sum(Gs * Xinv)) * scale, float(gap)
