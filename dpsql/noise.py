"""Noise samplers driven by the operating system's cryptographically secure generator.

A mechanism's guarantee holds only if its noise is unpredictable. NumPy's
default generators (PCG64, Mersenne Twister) are fast but predictable from a
few outputs, so released values could be "de-noised". :class:`SecureRandom`
instead draws every bit from ``os.urandom`` (the kernel CSPRNG) and turns
them into uniforms with 53 random bits each, from which:

* :func:`laplace` draws Laplace(0, b) as ``b (E₁ − E₂)``, a difference of two
  standard exponentials (``E = −log(1 − U)``, finite for every ``U`` in
  [0, 1));
* :func:`gaussian` draws N(0, σ²) by the Box–Muller transform.

Both are exact transforms of uniform variables, up to float64 rounding, and
so carry the floating-point weakness of textbook samplers (Mironov 2012):
released values never use them bare. The kernel releases through
:func:`lattice_laplace` (exact discrete Laplace noise on a power-of-two
lattice, no floating-point noise at all) and :func:`lattice_gaussian` (a
Gaussian sample rounded to such a lattice); see the section at the end.

Tests and audits may pass any object with a ``random(size)`` method
returning uniforms in [0, 1), such as ``numpy.random.default_rng(seed)``,
to make draws reproducible. That source is **not secure** and must never be
used for a real release.

>>> x = laplace(2.0, 200_000)            # variance 2 b² = 8
>>> bool(7.6 < float(x.var()) < 8.4)
True
>>> bool(abs(float(gaussian(3.0, 200_000, source=__import__("numpy").random.default_rng(0)).std()) - 3.0) < 0.05)
True
"""

from __future__ import annotations

import math
import os
from typing import Protocol

import numpy as np

from .errors import PrivacyError

__all__ = ["UniformSource", "SecureRandom", "laplace", "gaussian", "categorical"]


class UniformSource(Protocol):
    """Anything that returns an array of uniforms in [0, 1)."""

    def random(self, size: int) -> np.ndarray: ...


class SecureRandom:
    """Uniforms in [0, 1) with 53 bits each, from ``os.urandom``."""

    def random(self, size: int) -> np.ndarray:
        size = int(size)
        if size < 0:
            raise ValueError("size must be nonnegative")
        words = np.frombuffer(os.urandom(8 * size), dtype=np.uint64)
        return (words >> np.uint64(11)).astype(np.float64) * 2.0**-53


_SECURE = SecureRandom()


def _check_scale(name: str, value: float) -> float:
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise PrivacyError(f"noise {name} must be a finite nonnegative number, got {value!r}")
    return value


def laplace(scale: float, size: int, source: UniformSource | None = None) -> np.ndarray:
    """``size`` independent Laplace(0, ``scale``) draws (density ∝ exp(−|z|/scale))."""
    b = _check_scale("scale", scale)
    u = (source or _SECURE).random(2 * int(size))
    e = -np.log1p(-u)  # standard exponentials; 1 − u ∈ (0, 1]
    return b * (e[: int(size)] - e[int(size):])


def gaussian(sigma: float, size: int, source: UniformSource | None = None) -> np.ndarray:
    """``size`` independent N(0, ``sigma``²) draws (Box–Muller)."""
    s = _check_scale("sigma", sigma)
    n = int(size)
    half = (n + 1) // 2
    u = (source or _SECURE).random(2 * half)
    r = np.sqrt(-2.0 * np.log1p(-u[:half]))
    theta = 2.0 * math.pi * u[half:]
    z = np.concatenate([r * np.cos(theta), r * np.sin(theta)])[:n]
    return s * z


def categorical(logits: np.ndarray, size: int, source: UniformSource | None = None) -> np.ndarray:
    """``size`` independent indices ``j`` drawn with probability ∝ ``exp(logits[j])``.

    Inverse-CDF sampling with one secure uniform per draw, so drawing many
    samples from a large candidate set (the exponential mechanism of DualQuery
    and FEM over every marginal cell) costs ``O(len(logits) + size log len)``.

    >>> class Fixed:
    ...     def random(self, size): return np.full(size, 0.6)
    >>> categorical(np.log([1.0, 1.0, 2.0]), 2, Fixed()).tolist()     # CDF 0.25, 0.5, 1
    [2, 2]
    """
    logits = np.asarray(logits, dtype=float).reshape(-1)
    if logits.size == 0 or not np.all(np.isfinite(logits)):
        raise ValueError("categorical sampling needs a nonempty array of finite logits")
    cdf = np.cumsum(np.exp(logits - logits.max()))
    u = (source or _SECURE).random(int(size)) * cdf[-1]
    return np.minimum(np.searchsorted(cdf, u, side="right"), logits.size - 1)


# -- floating-point-safe releases (Mironov 2012) ---------------------------------------------
#
# A textbook Laplace sample ``x + b·(E₁ − E₂)`` computed in floating point does not take every
# value near ``x + z`` with the right probability: which doubles can come out depends on ``x``,
# so the low-order bits of a release can reveal ``x`` exactly (Mironov, "On significance of the
# least significant bits for differential privacy", CCS 2012). The releases below avoid that by
# never adding floating-point noise: the exact value is rounded to a lattice ``γ·Z`` (``γ`` a
# power of two chosen from public parameters only), integer noise is drawn exactly from random
# bits (no logarithm, no floating-point probability), and the release is ``γ·(r + K)``, a
# function of the integer ``r + K`` alone.

#: Most random bits one uniform draw of :class:`UniformSource` carries (53 for a double).
_WORD_BITS = 53
#: Largest lattice noise scale, so a uniform integer below it takes one 53-bit word.
_MAX_SCALE = 2**45
#: Lattice steps per unit of sensitivity (per changed coordinate): the rounding slack is at most
#: 2^-23 of Δ, and exact integer lattice coordinates hold for answers up to 2^29 Δ (5·10^8 rows).
ROUNDING_SLACK = 2**24


def _integers_below(bound: np.ndarray, source: UniformSource | None) -> np.ndarray:
    """Exactly uniform integers in ``[0, bound)`` (each ``bound`` in [1, 2^45]), by rejection
    from the 53-bit integers ``u·2^53`` of the source's uniforms."""
    bound = np.asarray(bound, dtype=np.int64)
    out = np.empty(bound.shape, dtype=np.int64)
    todo = np.arange(bound.size)
    while todo.size:
        words = ((source or _SECURE).random(todo.size) * 2.0**_WORD_BITS).astype(np.int64)
        b = bound[todo]
        limit = (np.int64(2**_WORD_BITS) // b) * b
        ok = words < limit
        out[todo[ok]] = words[ok] % b[ok]
        todo = todo[~ok]
    return out


def _bernoulli_exp(num: np.ndarray, den: np.ndarray, source: UniformSource | None) -> np.ndarray:
    """Exact Bernoulli(exp(−num/den)) draws for integers ``0 ≤ num ≤ den`` (Canonne, Kamath &
    Steinke 2020, Algorithm 1): count ``K`` while Bernoulli(γ/K) succeeds; true iff ``K`` is odd.
    Bernoulli(γ/K) is drawn as Bernoulli(num/den) and Bernoulli(1/K), so bounds stay small."""
    num, den = np.asarray(num, dtype=np.int64), np.asarray(den, dtype=np.int64)
    out = np.empty(num.shape, dtype=bool)
    k = np.ones(num.shape, dtype=np.int64)
    active = np.arange(num.size)
    while active.size:
        hit = _integers_below(den[active], source) < num[active]
        hit &= _integers_below(k[active], source) == 0
        stop = active[~hit]
        out[stop] = k[stop] % 2 == 1
        active = active[hit]
        k[active] += 1
    return out


def discrete_laplace(scale: int, size: int, source: UniformSource | None = None) -> np.ndarray:
    """``size`` exact draws of the discrete Laplace distribution ``P(k) ∝ exp(−|k|/scale)`` on
    the integers, for an integer ``scale`` in [1, 2^45] (Canonne, Kamath & Steinke 2020,
    Algorithm 2, from uniform integers only: no floating-point arithmetic touches a probability).

    >>> import numpy as np
    >>> k = discrete_laplace(3, 100_000, source=np.random.default_rng(1))
    >>> a = np.exp(-1 / 3); round(float(k.var()), 1), round(float(2 * a / (1 - a) ** 2), 1)   # sample vs exact
    (17.7, 17.8)
    """
    t = int(scale)
    if not 1 <= t <= _MAX_SCALE:
        raise PrivacyError(f"discrete Laplace scale must be an integer in [1, 2^45], got {scale!r}")
    n = int(size)
    out = np.empty(n, dtype=np.int64)
    pending = np.arange(n)
    while pending.size:
        m = pending.size
        u = _integers_below(np.full(m, t), source)
        keep = _bernoulli_exp(u, np.full(m, t), source)          # accept u w.p. exp(−u/t)
        v = np.zeros(m, dtype=np.int64)
        going = np.arange(m)
        while going.size:                                        # v ~ Geometric(1 − 1/e)
            more = _bernoulli_exp(np.ones(going.size, np.int64), np.ones(going.size, np.int64), source)
            going = going[more]
            v[going] += 1
        x = u + t * v
        negative = _integers_below(np.full(m, 2), source) == 1
        keep &= ~(negative & (x == 0))                           # −0 would count zero twice
        out[pending[keep]] = np.where(negative[keep], -x[keep], x[keep])
        pending = pending[~keep]
    return out


def _power_of_two_at_most(x: float) -> float:
    return 2.0 ** math.floor(math.log2(x))


def lattice_laplace(exact: np.ndarray, sensitivity: float, epsilon: float, changed: int,
                    source: UniformSource | None = None) -> tuple[np.ndarray, float]:
    """An ε-DP release of ``exact`` (L1 sensitivity ``sensitivity``, at most ``changed`` of its
    coordinates moved by one privacy unit) that is immune to floating-point attacks.

    Returns ``(γ (r + K), std)``: ``r = rint(exact / γ)``, ``K`` i.i.d. discrete Laplace of
    integer scale ``T``, ``std`` the exact standard deviation of ``γ K``. ``γ`` is a power of two
    and ``T`` an integer, both functions of (``sensitivity``, ``epsilon``, ``changed``) only.

    **Guarantee.** ``|rint(a) − rint(a')| ≤ |a − a'| + 1``, so one unit moves the integer
    vector ``r`` by at most ``Δ/γ + 2·changed`` in L1: ``Δ/γ`` for the exact change, and 2 per
    changed coordinate for the two roundings and for floating-point error in the computed
    answers of up to half a step each (relative error ~1e-16 of counts; the one assumption).
    With the integer ``T ≥ (Δ/γ + 2·changed) / ε`` the discrete Laplace mechanism on ``r`` is
    ε-DP, and ``γ (r + K)`` (rounded to a double) is a function of ``r + K`` alone. The noise
    is ``Laplace(Δ/ε)`` to within a relative ``2^-23`` in scale, and never below one lattice step
    (``γ ≤ Δ/2^24``), so a huge ε releases answers within about ``2·10^-7 Δ`` of the exact ones.
    """
    exact = np.asarray(exact, dtype=np.float64)
    sens, eps = float(sensitivity), float(epsilon)
    if not (math.isfinite(sens) and sens > 0 and math.isfinite(eps) and eps > 0):
        raise PrivacyError(f"lattice Laplace needs positive finite sensitivity and epsilon, got {sens!r}, {eps!r}")
    changed = max(int(changed), 1)
    gamma = _power_of_two_at_most(sens / (ROUNDING_SLACK * changed))
    while math.ceil((sens / gamma + 2 * changed) / eps) > _MAX_SCALE:
        gamma *= 2.0
    scale = math.ceil((sens / gamma + 2 * changed) / eps)
    r = np.rint(exact / gamma)
    k = discrete_laplace(scale, exact.size, source)
    alpha = math.exp(-1.0 / scale)
    std = gamma * math.sqrt(2.0 * alpha) / -math.expm1(-1.0 / scale)
    return (r + k) * gamma, std


def lattice_gaussian(exact: np.ndarray, sigma: float, source: UniformSource | None = None) -> np.ndarray:
    """``exact`` plus N(0, σ²) noise, released on the lattice ``γ·Z`` with ``γ`` the largest
    power of two at most ``σ / 2^24`` (a function of ``σ`` only): the low-order bits of a
    release are those of a lattice point, not of ``exact``. The Gaussian sample itself is
    continuous (Box–Muller in float64); unlike :func:`lattice_laplace` its floating-point
    distribution is not analysed exactly, only its low-order bits are removed."""
    s = _check_scale("sigma", sigma)
    exact = np.asarray(exact, dtype=np.float64)
    if s == 0:
        return exact.copy()
    gamma = _power_of_two_at_most(s / ROUNDING_SLACK)
    return np.rint((exact + gaussian(s, exact.size, source)) / gamma) * gamma
