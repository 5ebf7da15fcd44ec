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
Each is split into a *plan* computed from public parameters only
(:func:`laplace_lattice`, :func:`gaussian_lattice`), which refuses with
:class:`~dpsql.errors.PrivacyError` any parameters outside its documented
floors and ceilings, and a *release* of the plan that cannot fail for finite
inputs; so a refusal never depends on the data and can happen before the
budget is charged.

**Termination.** Every sampler here finishes in bounded time, or, for the
rejection samplers (:func:`integers_below`, :func:`bernoulli_exp`,
:func:`discrete_laplace`), in bounded expected time with geometric tails, for
every finite argument, and raises only dpsql errors for finite arguments
(:class:`~dpsql.errors.PrivacyError` for noise parameters outside their
range, :class:`~dpsql.errors.ArgumentError` for a negative size or NaN
logits). Noise scales above :data:`NOISE_CEILING` (2^1000) are refused, so
no noise value overflows a double.

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
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from dpsql.errors import ArgumentError, PrivacyError

__all__ = ["UniformSource", "SecureRandom", "laplace", "gaussian", "categorical", "discrete_laplace",
           "LaplaceLattice", "laplace_lattice", "laplace_epsilon_floor", "lattice_laplace",
           "GaussianLattice", "gaussian_lattice", "lattice_gaussian", "integers_below", "bernoulli_exp",
           "NOISE_CEILING", "MAX_CHANGED"]


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

#: Largest noise scale (Laplace ``b``, Gaussian ``σ``, lattice ``γ·T``) any sampler accepts: 2^1000
#: (about 1.07e301), far enough below the largest double (about 2^1024) that no noise value overflows.
NOISE_CEILING = 2.0**1000


def _check_scale(name: str, value: float) -> float:
    """``value`` as a float in [0, :data:`NOISE_CEILING`], else PrivacyError naming it."""
    try:
        value = float(value)
    except (TypeError, ValueError, OverflowError):
        raise PrivacyError(f"noise {name} must be a finite nonnegative number, got {value!r}") from None
    if not math.isfinite(value) or value < 0:
        raise PrivacyError(f"noise {name} must be a finite nonnegative number, got {value!r}")
    if value > NOISE_CEILING:
        raise PrivacyError(f"noise {name}={value!r} is above the ceiling 2^1000 = {NOISE_CEILING:.4g}: "
                           "its samples would not fit in a double")
    return value


def _check_size(size: int) -> int:
    """``size`` as a nonnegative int, else ArgumentError."""
    try:
        n = int(size)
    except (TypeError, ValueError, OverflowError):
        raise ArgumentError(f"the number of draws must be a nonnegative integer, got {size!r}") from None
    if n < 0:
        raise ArgumentError(f"the number of draws must be a nonnegative integer, got {size!r}")
    return n


def laplace(scale: float, size: int, source: UniformSource | None = None) -> np.ndarray:
    """``size`` independent Laplace(0, ``scale``) draws (density ∝ exp(−|z|/scale)).

    ``scale`` must lie in [0, 2^1000] (PrivacyError otherwise). Each draw is
    ``b (E₁ − E₂)`` with ``|E₁ − E₂| < 37``, so it is finite; time O(size)."""
    b = _check_scale("scale", scale)
    n = _check_size(size)
    u = (source or _SECURE).random(2 * n)
    e = -np.log1p(-u)  # standard exponentials; 1 − u ∈ (0, 1]
    return b * (e[:n] - e[n:])


def gaussian(sigma: float, size: int, source: UniformSource | None = None) -> np.ndarray:
    """``size`` independent N(0, ``sigma``²) draws (Box–Muller).

    ``sigma`` must lie in [0, 2^1000] (PrivacyError otherwise). Each draw is
    ``σ r cos θ`` or ``σ r sin θ`` with ``r < 8.6``, so it is finite; time O(size)."""
    s = _check_scale("sigma", sigma)
    n = _check_size(size)
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
    and FEM over every marginal cell) costs ``O(len(logits) + size log len)``,
    with no loop that depends on the values: it always finishes.

    Infinite logits (e.g. ``ε·score`` overflowing for a huge ``ε``) get their
    exact limiting meaning, never an error, so whether a draw succeeds does not
    depend on the scores: a ``−inf`` logit has probability 0; if some logits
    are ``+inf`` the draws are uniform among them (the limit of equal logits
    growing without bound); if all are ``−inf``, uniform among all. Finite
    logits whose differences overflow behave as the limit too (an entry more
    than about 745 below the maximum already has probability 0 in doubles).
    Empty ``logits`` or a NaN raise ArgumentError.

    >>> class Fixed:
    ...     def random(self, size): return np.full(size, 0.6)
    >>> categorical(np.log([1.0, 1.0, 2.0]), 2, Fixed()).tolist()     # CDF 0.25, 0.5, 1
    [2, 2]
    >>> categorical(np.array([np.inf, 5.0, np.inf]), 2, Fixed()).tolist()   # uniform on {0, 2}
    [2, 2]
    """
    logits = np.asarray(logits, dtype=float).reshape(-1)
    n = _check_size(size)
    if logits.size == 0 or np.isnan(logits).any():
        raise ArgumentError("categorical sampling needs a nonempty array of logits without NaN")
    top = logits.max()
    if np.isinf(top):                      # +inf: uniform on the +inf entries; −inf: all are −inf
        weights = (logits == top).astype(float)
    else:
        with np.errstate(over="ignore"):   # a difference below −1.8e308 is −inf, weight 0
            weights = np.exp(logits - top)
    cdf = np.cumsum(weights)
    u = (source or _SECURE).random(n) * cdf[-1]
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
#: Smallest lattice step: the smallest normal double, so a step is never subnormal (or 0).
_MIN_STEP = 2.0**-1022
#: Most coordinates one privacy unit may move in :func:`laplace_lattice` (so 2·changed is exact).
MAX_CHANGED = 2**53


def integers_below(bound: np.ndarray, source: UniformSource | None) -> np.ndarray:
    """Exactly uniform integers in ``[0, bound)`` (each ``bound`` an integer in [1, 2^45], else
    PrivacyError), by rejection from the 53-bit integers ``u·2^53`` of the source's uniforms.

    **Time.** A word is rejected only if it is at least ``⌊2^53/b⌋·b > 2^53 − 2^45``, with
    probability below 2^-8, independently; so each entry needs a geometric number of words
    (mean < 1.004) and the number of rounds exceeds ``k`` with probability below ``n·2^-8k``."""
    bound = np.asarray(bound, dtype=np.int64)
    if bound.size and not (1 <= int(bound.min()) and int(bound.max()) <= _MAX_SCALE):
        raise PrivacyError(f"uniform integer bounds must lie in [1, 2^45], got [{int(bound.min())}, "
                           f"{int(bound.max())}]")
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


def bernoulli_exp(num: np.ndarray, den: np.ndarray, source: UniformSource | None) -> np.ndarray:
    """Exact Bernoulli(exp(−num/den)) draws for integers ``0 ≤ num ≤ den``, ``1 ≤ den ≤ 2^45``
    (else PrivacyError) (Canonne, Kamath & Steinke 2020, Algorithm 1): count ``K`` while
    Bernoulli(γ/K) succeeds; true iff ``K`` is odd. Bernoulli(γ/K) is drawn as Bernoulli(num/den)
    and Bernoulli(1/K), so bounds stay small.

    **Time.** Step ``K`` continues with probability ``γ/K ≤ 1/K``, so reaching step ``K`` has
    probability at most ``1/(K−1)!``: at most ``e`` steps on average, with a super-geometric tail
    (reaching ``K = 2^45``, where the bound check would refuse, has probability 0 in practice)."""
    num, den = np.asarray(num, dtype=np.int64), np.asarray(den, dtype=np.int64)
    if num.shape != den.shape or (num.size and not (0 <= int(num.min()) and bool(np.all(num <= den))
                                                     and 1 <= int(den.min()) and int(den.max()) <= _MAX_SCALE)):
        raise PrivacyError("Bernoulli(exp(-num/den)) needs integers 0 <= num <= den with den in [1, 2^45]")
    out = np.empty(num.shape, dtype=bool)
    k = np.ones(num.shape, dtype=np.int64)
    active = np.arange(num.size)
    while active.size:
        hit = integers_below(den[active], source) < num[active]
        hit &= integers_below(k[active], source) == 0
        stop = active[~hit]
        out[stop] = k[stop] % 2 == 1
        active = active[hit]
        k[active] += 1
    return out


def discrete_laplace(scale: int, size: int, source: UniformSource | None = None) -> np.ndarray:
    """``size`` exact draws of the discrete Laplace distribution ``P(k) ∝ exp(−|k|/scale)`` on
    the integers, for an integer ``scale`` in [1, 2^45] (Canonne, Kamath & Steinke 2020,
    Algorithm 2, from uniform integers only: no floating-point arithmetic touches a probability).

    **Time.** Each round keeps a candidate with probability at least
    ``(1 − e^-1)(1 − (1 − e^-1)/2) > 0.43`` (``u`` accepted w.p. ``≥ 1 − e^-1``, then a "−0"
    rejected w.p. ``≤ (1 − e^-1)/2``), independently, and the geometric part takes
    ``1/(1 − e^-1) < 1.6`` Bernoulli draws on average: bounded expected time, geometric tails.
    (``|k| ≥ 2^18·scale``, where ``u + t·v`` could exceed 63 bits, has probability ``e^-262144``.)

    >>> import numpy as np
    >>> k = discrete_laplace(3, 100_000, source=np.random.default_rng(1))
    >>> a = np.exp(-1 / 3); round(float(k.var()), 1), round(float(2 * a / (1 - a) ** 2), 1)   # sample vs exact
    (17.7, 17.8)
    """
    try:
        t = int(scale)
    except (TypeError, ValueError, OverflowError):
        t = 0
    if not 1 <= t <= _MAX_SCALE:
        raise PrivacyError(f"discrete Laplace scale must be an integer in [1, 2^45], got {scale!r}")
    n = _check_size(size)
    out = np.empty(n, dtype=np.int64)
    pending = np.arange(n)
    while pending.size:
        m = pending.size
        u = integers_below(np.full(m, t), source)
        keep = bernoulli_exp(u, np.full(m, t), source)          # accept u w.p. exp(−u/t)
        v = np.zeros(m, dtype=np.int64)
        going = np.arange(m)
        while going.size:                                        # v ~ Geometric(1 − 1/e)
            more = bernoulli_exp(np.ones(going.size, np.int64), np.ones(going.size, np.int64), source)
            going = going[more]
            v[going] += 1
        x = u + t * v
        negative = integers_below(np.full(m, 2), source) == 1
        keep &= ~(negative & (x == 0))                           # −0 would count zero twice
        out[pending[keep]] = np.where(negative[keep], -x[keep], x[keep])
        pending = pending[~keep]
    return out


def _power_of_two_at_most(x: float) -> float:
    return 2.0 ** math.floor(math.log2(x))


def _lattice_changed(changed: int) -> int:
    """``max(int(changed), 1)``, refused (PrivacyError) unless at most :data:`MAX_CHANGED`."""
    try:
        c = max(int(changed), 1)
    except (TypeError, ValueError, OverflowError):
        raise PrivacyError(f"changed must be a whole number of coordinates, got {changed!r}") from None
    if c > MAX_CHANGED:
        raise PrivacyError(f"changed={c} is above the ceiling 2^53 = {MAX_CHANGED} coordinates per privacy unit")
    return c


def laplace_epsilon_floor(changed: int) -> float:
    """The epsilon floor of :func:`laplace_lattice`: ``changed · 2^-44`` (``= 2·changed/2^45``).
    Epsilon must exceed it (strictly), for every sensitivity; see :func:`laplace_lattice`.

    >>> laplace_epsilon_floor(1), laplace_epsilon_floor(10**6)
    (5.684341886080802e-14, 5.6843418860808015e-08)
    """
    return _lattice_changed(changed) * 2.0**-44


@dataclass(frozen=True)
class LaplaceLattice:
    """A lattice Laplace mechanism planned from public parameters by :func:`laplace_lattice`:
    lattice step ``gamma`` (a power of two), integer noise scale ``scale`` (``T``), and ``std``,
    the exact standard deviation of the noise ``γ K`` (``K`` discrete Laplace of scale ``T``).

    **Guarantee.** ``release(exact)`` is ``ε``-DP for vectors ``exact`` of L1 sensitivity
    ``sensitivity`` of which at most ``changed`` coordinates move per privacy unit, because
    ``T ≥ (Δ/γ + 2·changed)/ε`` (see :func:`lattice_laplace`); the constructor checks that
    inequality and the invariants that make :meth:`release` infallible (``γ`` a normal power of
    two, ``1 ≤ T ≤ 2^45``, ``γ·T ≤ 2^1000``), so build it with :func:`laplace_lattice`.
    """

    sensitivity: float
    epsilon: float
    changed: int
    gamma: float
    scale: int
    std: float

    def __post_init__(self) -> None:
        g, t = self.gamma, self.scale
        try:
            ok = (isinstance(t, int) and 1 <= t <= _MAX_SCALE and isinstance(g, float) and _MIN_STEP <= g
                  and math.frexp(g)[0] == 0.5 and g * t <= NOISE_CEILING
                  and (self.sensitivity / g + 2 * self.changed) / self.epsilon <= t)
        except (TypeError, ValueError, ArithmeticError):
            ok = False
        if not ok:
            raise PrivacyError(f"not a valid lattice Laplace plan: {self!r} (build it with laplace_lattice)")

    def release(self, exact: np.ndarray, source: UniformSource | None = None) -> np.ndarray:
        """``γ (rint(exact/γ) + K)``, ``K`` i.i.d. discrete Laplace of scale ``T`` (one per entry,
        same shape as ``exact``). Cannot fail for finite ``exact``: it reads no parameter that
        could be refused. An entry with ``|exact| ≤ min(2^1020, 2^1023·γ)`` gets a finite release
        unless ``|K| > 2^23 T`` (probability below ``e^-8000000``)."""
        exact = np.asarray(exact, dtype=np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            r = np.rint(exact / self.gamma)
            k = discrete_laplace(self.scale, exact.size, source).reshape(exact.shape)
            return (r + k) * self.gamma


def laplace_lattice(sensitivity: float, epsilon: float, changed: int) -> LaplaceLattice:
    """Plan an ε-DP lattice Laplace release (:func:`lattice_laplace`) from public parameters
    only: the lattice step ``γ``, the integer scale ``T`` and the noise's standard deviation.
    Raises PrivacyError, naming the parameter, its value and the bound, exactly when no plan
    exists; otherwise the plan's :meth:`~LaplaceLattice.release` cannot fail.

    ``γ`` starts at ``γ₀``, the largest power of two at most ``Δ/(2^24·c)`` (``c = changed``),
    and is doubled until ``T = ⌈(Δ/γ + 2c)/ε⌉ ≤ 2^45`` (the same ``γ`` and ``T``, computed in
    the same floating-point operations, as the original doubling loop, found by bisection on the
    number of doublings: ``T`` is nonincreasing in ``γ``, so this takes O(log 1000) steps).

    **Floors and ceilings** (``c = max(int(changed), 1)``; refused exactly when one fails):

    * ``c ≤ 2^53`` (:data:`MAX_CHANGED`), so that ``2c`` is exact;
    * ``Δ ≥ 2^-998·c``, so that ``γ₀`` is a normal double (not subnormal, not 0);
    * **epsilon floor** ``ε > 2c/2^45 = c·2^-44`` (:func:`laplace_epsilon_floor`): even an
      arbitrarily coarse lattice needs ``T > 2c/ε`` to cover the rounding of ``c`` coordinates;
    * **noise ceiling**: some ``γ = γ₀·2^j ≤ 2^1000`` has computed ``(Δ/γ + 2c)/ε ≤ 2^45``,
      and the first such ``γ`` has ``γ·T ≤ 2^1000`` (:data:`NOISE_CEILING`). Above the floor, with
      ``x = c·2^-44/ε < 1`` the fraction of ``ε`` the rounding needs, the noise scale is
      ``γ·T < (Δ/ε)(1 + x + 2^-22)/(1 − x) + γ``, and ``Δ/ε`` to within ``2^-22`` relative
      (plus one step ``γ``) when no doubling is needed (``c/ε ≲ 2^20``); so the ceiling is
      met whenever ``Δ/(ε − c·2^-44) ≤ 2^998`` and ``Δ ≤ 2^1020``, and, besides the one-step
      minimum ``γ``, ``ε ≥ 10·c·2^-44`` keeps the noise scale within 23% of ``Δ/ε``,
      ``ε ≥ 100·c·2^-44`` within 2.1%.

    >>> p = laplace_lattice(1.0, 1.0, 1)
    >>> p.gamma == 2.0**-24, p.scale == 2**24 + 2
    (True, True)
    >>> laplace_lattice(1.0, 5e-14, 1)
    Traceback (most recent call last):
    ...
    dpsql.errors.PrivacyError: lattice Laplace: epsilon=5e-14 is below the floor 5.684341886080802e-14 = 2*changed/2^45 for changed=1 (rounding changed coordinates needs a noise scale above 2^45 lattice steps)
    """
    try:
        sens, eps = float(sensitivity), float(epsilon)
    except (TypeError, ValueError, OverflowError):
        sens = eps = math.nan
    if not (math.isfinite(sens) and sens > 0 and math.isfinite(eps) and eps > 0):
        raise PrivacyError("lattice Laplace needs positive finite sensitivity and epsilon, got "
                           f"{sensitivity!r}, {epsilon!r}")
    c = _lattice_changed(changed)
    floor = c * 2.0**-44
    if eps <= floor:
        raise PrivacyError(f"lattice Laplace: epsilon={eps!r} is below the floor {floor!r} = 2*changed/2^45 for "
                           f"changed={c} (rounding changed coordinates needs a noise scale above 2^45 lattice steps)")
    q = sens / (ROUNDING_SLACK * c)
    if q < _MIN_STEP:
        raise PrivacyError(f"lattice Laplace: sensitivity={sens!r} is below the floor {_MIN_STEP * ROUNDING_SLACK * c!r}"
                           f" = 2^-998*changed for changed={c} (the lattice step would be subnormal)")

    def fits(g: float) -> bool:                 # ⌈x⌉ ≤ 2^45 ⇔ x ≤ 2^45; x may be inf, never NaN
        return (sens / g + 2 * c) / eps <= _MAX_SCALE

    def over_ceiling() -> PrivacyError:
        return PrivacyError(f"lattice Laplace: sensitivity={sens!r} with epsilon={eps!r} (changed={c}) needs a noise "
                            f"scale above the ceiling 2^1000 = {NOISE_CEILING:.4g}; epsilon must exceed about "
                            f"{floor!r} + sensitivity*2^-998 (its floor 2*changed/2^45 plus the noise's share)")

    gamma = _power_of_two_at_most(q)            # q ≤ 2^1000, so no overflow
    if not fits(gamma):
        top = 1000 - (math.frexp(gamma)[1] - 1)  # most doublings keeping γ ≤ 2^1000
        if top <= 0 or not fits(math.ldexp(gamma, top)):
            raise over_ceiling()
        lo, hi = 0, top                         # fits(γ₀·2^lo) is false, fits(γ₀·2^hi) true
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(math.ldexp(gamma, mid)):
                hi = mid
            else:
                lo = mid
        gamma = math.ldexp(gamma, hi)           # = γ₀ doubled hi times, exactly
    scale = math.ceil((sens / gamma + 2 * c) / eps)
    if gamma * scale > NOISE_CEILING:
        raise over_ceiling()
    alpha = math.exp(-1.0 / scale)
    std = gamma * math.sqrt(2.0 * alpha) / -math.expm1(-1.0 / scale)
    return LaplaceLattice(sensitivity=sens, epsilon=eps, changed=c, gamma=gamma, scale=scale, std=std)


def lattice_laplace(exact: np.ndarray, sensitivity: float, epsilon: float, changed: int,
                    source: UniformSource | None = None) -> tuple[np.ndarray, float]:
    """An ε-DP release of ``exact`` (L1 sensitivity ``sensitivity``, at most ``changed`` of its
    coordinates moved by one privacy unit) that is immune to floating-point attacks:
    ``laplace_lattice(sensitivity, epsilon, changed)`` (which may refuse, see its floors)
    followed by its release.

    Returns ``(γ (r + K), std)``: ``r = rint(exact / γ)``, ``K`` i.i.d. discrete Laplace of
    integer scale ``T``, ``std`` the exact standard deviation of ``γ K``. ``γ`` is a power of two
    and ``T`` an integer, both functions of (``sensitivity``, ``epsilon``, ``changed``) only.

    **Guarantee.** ``|rint(a) − rint(a')| ≤ |a − a'| + 1``, so one unit moves the integer
    vector ``r`` by at most ``Δ/γ + 2·changed`` in L1: ``Δ/γ`` for the exact change, and 2 per
    changed coordinate for the two roundings and for floating-point error in the computed
    answers of up to half a step each (relative error ~1e-16 of counts; the one assumption).
    With the integer ``T ≥ (Δ/γ + 2·changed) / ε`` the discrete Laplace mechanism on ``r`` is
    ε-DP, and ``γ (r + K)`` (rounded to a double) is a function of ``r + K`` alone. The noise
    is ``Laplace(Δ/ε)`` to within a relative ``2^-22`` in scale when ``changed/ε ≲ 2^20`` (then
    ``γ ≤ Δ/2^23``, and the noise is never below one lattice step, so a huge ε releases answers
    within about ``2·10^-7 Δ`` of the exact ones); for smaller ε the lattice is coarsened and
    the noise grows by the factor bounded in :func:`laplace_lattice`.
    """
    plan = laplace_lattice(sensitivity, epsilon, changed)
    return plan.release(exact, source), plan.std


@dataclass(frozen=True)
class GaussianLattice:
    """A lattice Gaussian release planned by :func:`gaussian_lattice`: noise ``N(0, sigma²)``,
    released on the lattice ``γ·Z`` (``gamma``; 0 when ``sigma`` is 0: no noise, no rounding).
    The constructor checks ``0 ≤ σ ≤ 2^1000`` and that ``γ`` is a normal power of two (or 0 with
    ``σ = 0``), so :meth:`release` cannot fail."""

    sigma: float
    gamma: float

    def __post_init__(self) -> None:
        s, g = self.sigma, self.gamma
        ok = (isinstance(s, float) and isinstance(g, float) and 0.0 <= s <= NOISE_CEILING
              and ((s == 0.0 and g == 0.0) or (s > 0.0 and _MIN_STEP <= g and math.frexp(g)[0] == 0.5)))
        if not ok:
            raise PrivacyError(f"not a valid lattice Gaussian plan: {self!r} (build it with gaussian_lattice)")

    @property
    def std(self) -> float:
        """The noise's standard deviation, ``σ`` (the lattice rounding is post-processing)."""
        return self.sigma

    def release(self, exact: np.ndarray, source: UniformSource | None = None) -> np.ndarray:
        """``rint((exact + Z)/γ)·γ`` with ``Z ~ N(0, σ²)`` i.i.d., same shape as ``exact`` (a copy
        of ``exact`` when ``σ = 0``). Cannot fail for finite ``exact``; an entry with
        ``|exact| ≤ min(2^1020, 2^1022·γ)`` gets a finite release."""
        exact = np.asarray(exact, dtype=np.float64)
        if self.sigma == 0:
            return exact.copy()
        with np.errstate(over="ignore", invalid="ignore"):
            z = gaussian(self.sigma, exact.size, source).reshape(exact.shape)
            return np.rint((exact + z) / self.gamma) * self.gamma


def gaussian_lattice(sigma: float) -> GaussianLattice:
    """Plan :func:`lattice_gaussian` for noise ``N(0, σ²)`` from ``σ`` alone: the lattice step
    ``γ``, the largest power of two at most ``σ/2^24``. Refuses (PrivacyError) a ``σ`` that is
    not finite or negative, above the ceiling 2^1000 (:data:`NOISE_CEILING`), or positive but
    below the floor ``2^-998`` (the step would be subnormal). ``σ = 0`` means no noise.

    >>> gaussian_lattice(1.0).gamma == 2.0**-24
    True
    """
    s = _check_scale("sigma", sigma)
    if s == 0:
        return GaussianLattice(sigma=0.0, gamma=0.0)
    q = s / ROUNDING_SLACK
    if q < _MIN_STEP:
        raise PrivacyError(f"lattice Gaussian: sigma={s!r} is below the floor {_MIN_STEP * ROUNDING_SLACK!r} = 2^-998 "
                           "(the lattice step sigma/2^24 would be subnormal)")
    return GaussianLattice(sigma=s, gamma=_power_of_two_at_most(q))


def lattice_gaussian(exact: np.ndarray, sigma: float, source: UniformSource | None = None) -> np.ndarray:
    """``exact`` plus N(0, σ²) noise, released on the lattice ``γ·Z`` with ``γ`` the largest
    power of two at most ``σ / 2^24`` (a function of ``σ`` only): the low-order bits of a
    release are those of a lattice point, not of ``exact``. The Gaussian sample itself is
    continuous (Box–Muller in float64); unlike :func:`lattice_laplace` its floating-point
    distribution is not analysed exactly, only its low-order bits are removed.
    ``gaussian_lattice(sigma)`` (which may refuse ``σ``) followed by its release."""
    return gaussian_lattice(sigma).release(exact, source)
