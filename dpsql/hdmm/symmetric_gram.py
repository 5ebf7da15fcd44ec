"""Gram matrices ``aI + bJ`` (``J = 11ᵀ``): read from a factor's type, and their pseudo-inverse applied in O(rows).

A GROUP BY on an attribute is its identity (Gram ``I``), a total is ``1ᵀ`` (Gram ``J``), and
multiples and unions of them keep the form. Their Gram is known from the factor's type, without
the ``n × n`` matrix (80 GB for 100,000 tracts): the workload fingerprint
(:meth:`~dpsql.hdmm.workload.Workload.fingerprint`), OPT_⊗'s closed-form factors
(:mod:`~dpsql.hdmm.optimize.symmetric`) and the error analysis of a product strategy with such
factors (:class:`~dpsql.hdmm.strategy.KronStrategy`) read it here.

For a strategy factor whose Gram is ``X = sI + tJ`` on ``n`` values, and workload rows ``x``, ``y``:

* ``s > 0``: ``X⁻¹ = (I − cJ)/s`` with ``c = t/(s + nt)``, so ``x X⁻¹ yᵀ = (x·y − c (x·1)(y·1))/s``;
* ``s = 0`` (the total alone): ``X⁺ = J/(t n²)``, so ``x X⁺ yᵀ = (x·1)(y·1)/(t n²)``, and ``x`` is
  answerable only when it is constant (``‖x‖² = (x·1)²/n``).

>>> from dpsql.hdmm.matrix import Identity, IdentityTotal, Total
>>> coefficients(IdentityTotal(5)), coefficients(Total(5)), coefficients(Identity(5))
((1.0, 1.0), (0.0, 1.0), (1.0, 0.0))
>>> cross_diag(2.0, 0.0, 5, Identity(5), Identity(5)).tolist()   # X = 2I: each cell's variance 1/2
[0.5, 0.5, 0.5, 0.5, 0.5]
"""

from __future__ import annotations

import numpy as np

from dpsql.hdmm.matrix import DENSE_LIMIT, Identity, Matrix, Ones, Sum, VStack, Weighted

__all__ = ["coefficients", "pinv", "cross_diag", "supported_rows", "DENSE_TEST_MAX"]

#: Largest attribute whose factor of an unrecognized type is densified to test its Gram.
DENSE_TEST_MAX = 1024
#: Relative residual above which a row counts as unanswerable (as :data:`dpsql.hdmm.strategy.SUPPORT_TOL`).
SUPPORT_TOL = 1e-8


def coefficients(f: Matrix, dense_max: int = DENSE_TEST_MAX) -> tuple[float, float] | None:
    """``(a, b)`` with ``fᵀf = aI + bJ``, or None when ``f``'s Gram is not of that form (or cannot
    be told cheaply). Identities, totals and their multiples and unions are read from their type,
    never densified; a factor of another type is densified to test its Gram only on at most
    ``dense_max`` values."""
    if isinstance(f, Identity):
        return (1.0, 0.0)
    if isinstance(f, Ones):
        return (0.0, float(f.shape[0]))
    if isinstance(f, Weighted):
        inner = coefficients(f.base, dense_max)
        return None if inner is None else (inner[0] * f.weight**2, inner[1] * f.weight**2)
    if isinstance(f, VStack):
        parts = [coefficients(b, dense_max) for b in f.blocks]
        return None if any(p is None for p in parts) else (sum(p[0] for p in parts), sum(p[1] for p in parts))
    n = f.shape[1]
    if n > dense_max:
        return None
    G = f.gram().dense()
    if n == 1:
        return (0.0, float(G[0, 0]))
    off = G[~np.eye(n, dtype=bool)]
    diag = np.diag(G)
    tol = 1e-10 * max(1.0, float(np.abs(G).max()))
    if np.ptp(off) > tol or np.ptp(diag) > tol:
        return None
    b = float(off.mean())
    return (float(diag.mean()) - b, b)


def pinv(s: float, t: float, n: int) -> Matrix:
    """``(sI + tJ)⁺`` on ``n`` values, implicit (see the module docstring)."""
    if s == 0:
        return Weighted(Ones(n, n), 1.0 / (t * n * n))
    if t == 0:
        return Weighted(Identity(n), 1.0 / s)
    return Sum([Weighted(Identity(n), 1.0 / s), Weighted(Ones(n, n), -t / (s * (s + n * t)))])


def cross_diag(s: float, t: float, n: int, x: Matrix, y: Matrix) -> np.ndarray:
    """``diag(x (sI + tJ)⁺ yᵀ)`` for two factors with as many rows, in O(rows) for structured ones."""
    sums = x.row_sums() * (x.row_sums() if y is x else y.row_sums())
    if s == 0:
        return sums / (t * n * n)
    return (_row_dots(x, y) - t / (s + n * t) * sums) / s


def supported_rows(s: float, t: float, n: int, x: Matrix) -> np.ndarray:
    """Which rows of ``x`` are in the row space of a factor with Gram ``sI + tJ``: all when ``s > 0``,
    the constant ones when ``s = 0`` (the residual ``‖x‖² − (x·1)²/n`` of the projection on ``1``)."""
    norms = x.row_norms_sq()
    if s > 0:
        return np.ones(norms.shape, dtype=bool)
    return norms - x.row_sums() ** 2 / n <= SUPPORT_TOL * np.maximum(norms, 1.0)


def _row_dots(x: Matrix, y: Matrix) -> np.ndarray:
    """``diag(x yᵀ)``: row norms for ``x is y``, ones for two identities, else dense in chunks of rows."""
    if y is x:
        return x.row_norms_sq()
    if isinstance(x, Identity) and isinstance(y, Identity):
        return np.ones(x.shape[0])
    rows, n = x.shape
    step = max(1, DENSE_LIMIT // (4 * n))
    out = np.empty(rows)
    for a in range(0, rows, step):
        unit = np.zeros((rows, min(step, rows - a)))
        unit[np.arange(a, a + unit.shape[1]), np.arange(unit.shape[1])] = 1.0
        out[a:a + unit.shape[1]] = np.einsum("ij,ij->j", x.rmatvec(unit), y.rmatvec(unit))
    return out

