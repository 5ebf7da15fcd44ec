"""Noise models and their calibration.

A noise model turns a strategy's sensitivity into the noise it must add:

* :class:`Laplace`: ``ε``-differential privacy. Each measurement gets
  independent Laplace noise of scale ``Δ₁/ε``, where ``Δ₁`` is the L1
  sensitivity, so its variance is ``2 Δ₁² / ε²``.
* :class:`Gaussian`: ``(ε, δ)``-differential privacy with the *analytic*
  Gaussian mechanism of Balle and Wang (2018), or ``ρ``-zCDP. Noise is
  ``N(0, σ²)`` with ``σ`` proportional to the L2 sensitivity ``Δ₂``.

Neighbouring data vectors differ by one record (one unit of one cell), so the
sensitivity of ``A x`` is the largest column norm of ``A``.

>>> round(Gaussian(epsilon=1.0, delta=1e-6).sigma(1.0), 4)
4.2247
>>> Laplace(epsilon=1.0).variance(1.0)
2.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Union

from scipy.special import log_ndtr

from .errors import PrivacyError


@dataclass(frozen=True)
class Laplace:
    """Laplace noise for pure ``ε``-DP, calibrated to L1 sensitivity."""

    epsilon: float
    norm: int = 1

    def __post_init__(self) -> None:
        _positive("epsilon", self.epsilon)
        if self.norm != 1:
            raise PrivacyError("Laplace noise is calibrated to the L1 norm (norm=1)")

    @property
    def name(self) -> str:
        return "laplace"

    def scale(self, sensitivity: float) -> float:
        """Laplace scale ``b = Δ₁/ε``."""
        return sensitivity / self.epsilon

    def variance(self, sensitivity: float) -> float:
        """Per-measurement noise variance ``2 (Δ₁/ε)²``."""
        return 2.0 * self.scale(sensitivity) ** 2

    def key(self) -> str:
        return f"laplace(eps={self.epsilon!r})"


@dataclass(frozen=True)
class Gaussian:
    """Gaussian noise for ``(ε, δ)``-DP (analytic calibration) or ``ρ``-zCDP.

    Give either ``epsilon`` and ``delta``, or ``rho``. The standard deviation
    is ``σ = c · Δ₂`` where ``c`` is the smallest constant for which the
    Gaussian mechanism satisfies the guarantee (Balle & Wang 2018, Theorem 8)
    or ``c = 1/√(2ρ)`` for zCDP (Bun & Steinke 2016, Proposition 1.6).
    """

    epsilon: Optional[float] = None
    delta: Optional[float] = None
    rho: Optional[float] = None
    norm: int = 2

    def __post_init__(self) -> None:
        if self.rho is not None:
            if self.epsilon is not None or self.delta is not None:
                raise PrivacyError("give either rho, or epsilon and delta, not both")
            _positive("rho", self.rho)
        else:
            if self.epsilon is None or self.delta is None:
                raise PrivacyError("Gaussian noise needs epsilon and delta (or rho)")
            _positive("epsilon", self.epsilon)
            if not 0.0 < self.delta < 1.0:
                raise PrivacyError(f"delta must be in (0, 1), got {self.delta!r}")
        if self.norm != 2:
            raise PrivacyError("Gaussian noise is calibrated to the L2 norm (norm=2)")

    @property
    def name(self) -> str:
        return "gaussian"

    def sigma(self, sensitivity: float) -> float:
        """Noise standard deviation for L2 sensitivity ``Δ₂``."""
        if self.rho is not None:
            return sensitivity / math.sqrt(2.0 * self.rho)
        return sensitivity * analytic_gaussian_sigma(self.epsilon, self.delta)

    def scale(self, sensitivity: float) -> float:
        return self.sigma(sensitivity)

    def variance(self, sensitivity: float) -> float:
        return self.sigma(sensitivity) ** 2

    def key(self) -> str:
        if self.rho is not None:
            return f"gaussian(rho={self.rho!r})"
        return f"gaussian(eps={self.epsilon!r},delta={self.delta!r})"


NoiseModel = Union[Laplace, Gaussian]


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise PrivacyError(f"{name} must be a positive finite number, got {value!r}")


def _analytic_delta(sigma: float, epsilon: float) -> float:
    """The smallest δ for which ``N(0, σ²)`` noise on a sensitivity-1 query is (ε, δ)-DP."""
    a = 1.0 / (2.0 * sigma) - epsilon * sigma
    b = -1.0 / (2.0 * sigma) - epsilon * sigma
    return math.exp(log_ndtr(a)) - math.exp(epsilon + log_ndtr(b))


def analytic_gaussian_sigma(epsilon: float, delta: float) -> float:
    """Smallest σ per unit of L2 sensitivity giving ``(ε, δ)``-DP (Balle & Wang 2018).

    The privacy profile ``δ(σ)`` is decreasing in ``σ``, so the exact boundary
    is found by bisection to relative precision 1e-12, then rounded up.
    """
    _positive("epsilon", epsilon)
    if not 0.0 < delta < 1.0:
        raise PrivacyError(f"delta must be in (0, 1), got {delta!r}")
    lo, hi = 0.5, 1.0
    while _analytic_delta(hi, epsilon) > delta:
        lo, hi = hi, hi * 2.0
    while lo > 1e-300 and _analytic_delta(lo, epsilon) <= delta:
        lo, hi = lo / 2.0, lo
    while hi - lo > 1e-12 * hi:
        mid = 0.5 * (lo + hi)
        if _analytic_delta(mid, epsilon) > delta:
            lo = mid
        else:
            hi = mid
    return hi
