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

Both are exact transforms of uniform variables, up to float64 rounding; the
known floating-point weakness of textbook samplers (Mironov 2012) is the
subject of a separate hardening step, not handled here.

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

__all__ = ["UniformSource", "SecureRandom", "laplace", "gaussian"]


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
