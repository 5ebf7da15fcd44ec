"""Attributes a workload uses only as a group key or a total: their strategy factor in closed form.

An attribute that every term of a workload either groups by (an identity factor ``I``) or totals
(``1ᵀ``, or any factor whose Gram matrix is ``aI + bJ``, ``J = 11ᵀ``) gives OPT_⊗ and OPT_+ a
surrogate Gram ``G = aI + bJ`` on it (:mod:`~dpsql.hdmm.optimize.kron`). Such a ``G`` is invariant
under every permutation of the attribute's values, and so is the optimal strategy Gram: it is
``X = sI + tJ``, the Gram of ``[√s·I; √t·1ᵀ]`` (the group-by plus one total row). No OPT_0 search
over an ``n × n`` matrix is needed (a county column of 3,142 values took minutes of it):

* **Gaussian (L2).** The error ``tr(G X⁻¹)`` under unit column norms is minimized by
  ``X ∝ G^{1/2}`` when its diagonal is constant (the SVD bound of Li et al. is attained), as it
  is here: ``G^{1/2} = √a·I + cJ`` with ``c = (√(a + bn) − √a)/n``, so ``s = √a/(√a + c)``,
  ``t = c/(√a + c)``. Exact.
* **Laplace (L1).** Unit column L1 norm means ``√s + √t = 1``; the error is a function of
  ``β = √t`` alone, minimized over ``[0, 1)`` by a bounded scalar search. This is the best
  strategy of the symmetric p-Identity family with ``p = 1`` (HDMM's OPT_0 family, restricted to
  equal weights); with ``b = 0`` it is the identity, which is optimal.

For ``X = sI + tJ`` (``s > 0``): ``tr(X⁻¹) = (n/s)(1 − t/(s + nt))`` and ``1ᵀX⁻¹1 = n/(s + nt)``, so a
term's trace ``tr((a_k I + b_k J) X⁻¹)`` costs O(1) and no ``n × n`` matrix is ever formed.

>>> from dpsql.hdmm.matrix import Identity, IdentityTotal, Total
>>> coefficients(IdentityTotal(5)), coefficients(Total(5)), coefficients(Identity(5))
((1.0, 1.0), (0.0, 1.0), (1.0, 0.0))
>>> s, t = closed_form(1.0, 0.0, 1000, norm=2)   # group-by only: the identity
>>> (s, t)
(1.0, 0.0)
"""

from __future__ import annotations

import math

import numpy as np
import scipy.optimize

from dpsql.hdmm.matrix import Identity, Matrix, Ones, VStack, Weighted
from dpsql.hdmm.symmetric_gram import coefficients


def traces(coeffs: np.ndarray, n: int, s: float, t: float) -> np.ndarray:
    """``tr((a_k I + b_k J) X⁺)`` for every row ``(a_k, b_k)`` of ``coeffs`` and ``X = sI + tJ``
    (``s = 0``: the total alone, ``X⁺ = J/(t n²)``)."""
    a, b = coeffs[:, 0], coeffs[:, 1]
    if s == 0:
        return a / (t * n) + b / t
    return a * (n / s) * (1.0 - t / (s + n * t)) + b * n / (s + n * t)


def closed_form(a: float, b: float, n: int, norm: int) -> tuple[float, float]:
    """``(s, t)``: the unit-sensitivity strategy Gram ``sI + tJ`` for the surrogate Gram
    ``aI + bJ`` (``a > 0``) on ``n`` values, under column norm ``norm`` (see the module docstring)."""
    if b <= 0 or n == 1:
        return (1.0, 0.0)
    if norm == 2:
        root = math.sqrt(a)
        c = (math.sqrt(a + b * n) - root) / n
        return (root / (root + c), c / (root + c))
    coeffs = np.array([[a, b]])

    def error(beta: float) -> float:
        return float(traces(coeffs, n, (1.0 - beta) ** 2, beta**2)[0])

    found = scipy.optimize.minimize_scalar(error, bounds=(0.0, 1.0 - 1e-9), method="bounded",
                                           options={"xatol": 1e-10})
    beta = float(found.x) if error(float(found.x)) < error(0.0) else 0.0
    return ((1.0 - beta) ** 2, beta**2)


def factor(s: float, t: float, n: int) -> Matrix:
    """The strategy factor whose Gram is ``sI + tJ``: the identity, or ``[√s·I; √t·1ᵀ]``."""
    if t == 0:
        return Identity(n) if s == 1.0 else Weighted(Identity(n), math.sqrt(s))
    if s == 0:
        return Weighted(Ones(1, n), math.sqrt(t))
    return VStack([Weighted(Identity(n), math.sqrt(s)), Weighted(Ones(1, n), math.sqrt(t))])


__all__ = ["coefficients", "traces", "closed_form", "factor"]
