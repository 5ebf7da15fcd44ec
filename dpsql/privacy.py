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

Calibration always finishes in bounded time and raises only
:class:`~dpsql.errors.PrivacyError` for finite parameters: the analytic
Gaussian calibration refuses ``ε`` below :data:`GAUSSIAN_MIN_EPSILON` or ``δ``
below :data:`GAUSSIAN_MIN_DELTA`, where double precision can no longer
resolve the privacy profile (see :func:`analytic_gaussian_sigma`); the ρ
calibration is closed-form for every ``ρ > 0``. Variances too large for a
double are ``inf``. A request's own floors, :data:`dpsql.private.budget.MIN_EPSILON`
and :data:`dpsql.private.budget.MIN_RHO`, are at or above the Gaussian ones and well
above the lattice Laplace floor ``changed · 2^-44``
(:func:`dpsql.private.noise.laplace_epsilon_floor`) for up to ``changed ≈ 1.7·10^7``.

>>> round(Gaussian(epsilon=1.0, delta=1e-6).sigma(1.0), 4)
4.2247
>>> Laplace(epsilon=1.0).variance(1.0)
2.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Union

from scipy.special import erfcx, log_ndtr

from dpsql.errors import PrivacyError

#: Smallest ε the analytic Gaussian calibration accepts. Below it (with tiny δ) the profile
#: ``δ(σ)`` is a difference of nearly equal numbers that double precision cannot resolve.
GAUSSIAN_MIN_EPSILON = 1e-6
#: Smallest δ the analytic Gaussian calibration accepts (far below any meaningful δ).
GAUSSIAN_MIN_DELTA = 1e-100
#: Above this ε the second term of the privacy profile is computed through the Mills ratio:
#: ``e^ε Φ(b) = φ(a)·M(−b)``; the log form ``exp(ε + log Φ(b))`` loses all precision once
#: ``ε·2^-53`` is not small against ``√ε`` (ε ≳ 1e20). Below it, the original log form.
_MILLS_EPSILON = 1e4


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
        """Per-measurement noise variance ``2 (Δ₁/ε)²`` (``inf`` if too large for a double)."""
        return 2.0 * _square(self.scale(sensitivity))

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
            _probability("delta", self.delta)
        if self.norm != 2:
            raise PrivacyError("Gaussian noise is calibrated to the L2 norm (norm=2)")

    @property
    def name(self) -> str:
        return "gaussian"

    def sigma(self, sensitivity: float) -> float:
        """Noise standard deviation for L2 sensitivity ``Δ₂`` (``inf`` if too large for a double;
        :func:`dpsql.private.noise.gaussian_lattice` refuses it). For ρ it is ``Δ₂/√(2ρ)`` for every
        ``ρ > 0`` (as ``Δ₂·√(1/2)/√ρ`` when ``2ρ`` overflows); for (ε, δ) PrivacyError below
        :data:`GAUSSIAN_MIN_EPSILON` or :data:`GAUSSIAN_MIN_DELTA`."""
        if self.rho is not None:
            two_rho = 2.0 * self.rho
            if math.isinf(two_rho):
                return sensitivity * math.sqrt(0.5) / math.sqrt(self.rho)
            return sensitivity / math.sqrt(two_rho)
        return sensitivity * analytic_gaussian_sigma(self.epsilon, self.delta)

    def scale(self, sensitivity: float) -> float:
        return self.sigma(sensitivity)

    def variance(self, sensitivity: float) -> float:
        return _square(self.sigma(sensitivity))

    def key(self) -> str:
        if self.rho is not None:
            return f"gaussian(rho={self.rho!r})"
        return f"gaussian(eps={self.epsilon!r},delta={self.delta!r})"


NoiseModel = Union[Laplace, Gaussian]


def _positive(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise PrivacyError(f"{name} must be a positive finite number, got {value!r}")


def _probability(name: str, value: float) -> None:
    if not (isinstance(value, (int, float)) and 0.0 < value < 1.0):
        raise PrivacyError(f"{name} must be in (0, 1), got {value!r}")


def _square(x: float) -> float:
    """``x ** 2``, or ``inf`` where that overflows (float ``**`` raises OverflowError)."""
    try:
        return x**2
    except OverflowError:
        return math.inf


def _analytic_delta(sigma: float, epsilon: float) -> float:
    """The smallest δ for which ``N(0, σ²)`` noise on a sensitivity-1 query is (ε, δ)-DP:
    ``Φ(a) − e^ε Φ(b)`` with ``a = 1/(2σ) − εσ``, ``b = −1/(2σ) − εσ`` (Balle & Wang 2018).

    Never raises for ``σ, ε > 0`` (``σ`` may be ``inf``) and never returns NaN. The second term
    is at most the first (δ ≥ 0), which the log form enforces so that ``exp`` cannot overflow;
    for ``ε >`` 1e4 it is ``φ(a)·M(−b)`` (``e^ε φ(b) = φ(a)``, ``M`` the Mills ratio, computed
    as ``erfcx(−b/√2)·√(π/2)``), which stays accurate where ``ε + log Φ(b)`` cancels."""
    a = 1.0 / (2.0 * sigma) - epsilon * sigma
    b = -1.0 / (2.0 * sigma) - epsilon * sigma
    log_first = log_ndtr(a)
    if epsilon <= _MILLS_EPSILON:
        return math.exp(log_first) - math.exp(min(epsilon + log_ndtr(b), log_first))
    second = 0.5 * math.exp(-0.5 * a * a) * float(erfcx(-b / math.sqrt(2.0)))   # a² may be inf: 0
    return math.exp(log_first) - second


def analytic_gaussian_sigma(epsilon: float, delta: float) -> float:
    """Smallest σ per unit of L2 sensitivity giving ``(ε, δ)``-DP (Balle & Wang 2018).

    The privacy profile ``δ(σ)`` is decreasing in ``σ``, so the exact boundary
    is found by bisection to relative precision 1e-12, then rounded up.

    **Floors.** PrivacyError unless ``ε ≥`` :data:`GAUSSIAN_MIN_EPSILON` (1e-6) and
    ``δ ≥`` :data:`GAUSSIAN_MIN_DELTA` (1e-100), besides ``ε`` finite and ``0 < δ < 1``.
    Within them, checked against a 60-digit evaluation of the profile, the true ``δ(σ)``
    of the σ returned exceeds ``δ`` by at most a relative 1e-4 (1e-8 for ε ≥ 0.01); below
    them the profile is a difference of nearly equal doubles and the σ found can be far
    too small (e.g. ``δ(σ)`` 10^70 times the target at ε = 1e-12, δ = 1e-100). Every
    finite ε above the floor works, up to 1.8e308: for ε ≳ 1e28 no double σ lies close
    enough to the boundary to hit it, and the σ returned is a slightly larger, private one.

    **Time.** At most about 1100 doublings and 1100 halvings of the bracket (the exponent
    range of a double; with the floors, σ ≤ 4e7 and at most 26 doublings), then about 40
    bisection steps, each one evaluation of the profile.
    """
    _positive("epsilon", epsilon)
    _probability("delta", delta)
    if epsilon < GAUSSIAN_MIN_EPSILON:
        raise PrivacyError(f"epsilon={epsilon!r} is below the floor {GAUSSIAN_MIN_EPSILON!r} of the analytic "
                           "Gaussian calibration (double precision cannot resolve its privacy profile there)")
    if delta < GAUSSIAN_MIN_DELTA:
        raise PrivacyError(f"delta={delta!r} is below the floor {GAUSSIAN_MIN_DELTA!r} of the analytic "
                           "Gaussian calibration (double precision cannot resolve its privacy profile there)")
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
    if not math.isfinite(hi):  # pragma: no cover - impossible within the floors
        raise PrivacyError(f"no finite Gaussian noise gives (epsilon={epsilon!r}, delta={delta!r})-DP")
    return hi
