"""Privacy accounting of the synthesis algorithms: closed forms and their inverses.

Plain math, no data. Each function states the theorem it implements, so
that the tests can check them by hand.

* DualQuery (Gaboardi et al. 2014): each of the ``s`` query samples of round
  ``t`` is an exponential mechanism with a ``(t − 1)/n``-sensitive score,
  hence ``2η(t − 1)/n``-DP (their Lemma 4.1). Basic composition gives
  Theorem 4.2, advanced composition Theorem 4.3, and zCDP (each
  ``ε'``-DP draw is ``ε'²/2``-zCDP; Bun & Steinke 2016, Prop. 1.4) gives
  :func:`dualquery_rho`.
* FEM (Vietri et al. 2020): ``T`` rounds of an ``ε₀``-DP exponential
  mechanism, ``ε₀²/8``-zCDP each (:func:`exponential_rho`; the paper used
  the looser ``ε₀²/2``), composed in zCDP and converted to ``(ε, δ)`` by
  :func:`zcdp_epsilon` (Canonne, Kamath & Steinke 2020; the paper used Bun &
  Steinke's ``ε = ρ + 2√(ρ ln(1/δ))``, which allows 1.26–1.45× less ρ at
  δ = 1/48842² and ε from 1 down to 0.1).
* Mechanisms made of Gaussian measurements alone (PGM) spend :func:`gaussian_rho`:
  their composition is exactly one Gaussian mechanism's (ε, δ) curve.

The paper's KDD99 runs (η = 1.2, T = 170, s = 1750, n = 494,021) are
reported as (1, 0.001)-DP "by Theorem 4.3", but the theorem as printed gives
ε ≈ 1.86 for them (it would give 0.88 with per-draw ``ε' = η(T − 1)/n``,
i.e. without Lemma 4.1's factor 2). dpsql applies the theorem as printed, so
at ε = 1 it runs 116 rounds there, not 170:

>>> round(dualquery_epsilon(eta=1.2, rounds=170, samples=1750, n=494_021, delta=1e-3), 3)
1.859
>>> dualquery_rounds(1.0, 1e-3, eta=1.2, samples=1750, n=494_021)
116
>>> fem_rounds(1.0, 1.0 / 48842**2, eps0=0.008, bounded_range=False)   # the published ADULT 3-way setting
445
>>> fem_rounds(1.0, 1.0 / 48842**2, eps0=0.008)     # the same ε₀ with the exponential mechanism's ρ = ε₀²/8
1783
"""

from __future__ import annotations

import math
from typing import Callable

from scipy.optimize import minimize_scalar

from dpsql.errors import PrivacyError
from dpsql.privacy import analytic_gaussian_sigma

__all__ = ["dualquery_epsilon", "dualquery_rho", "dualquery_rounds", "dualquery_samples", "dualquery_eta",
           "dualquery_eta_zcdp", "zcdp_epsilon", "zcdp_rho", "bun_steinke_rho", "gaussian_rho", "exponential_rho",
           "fem_rounds", "fem_rounds_zcdp", "largest_integer", "largest_real"]


def _check(name: str, value: float, low: float = 0.0) -> float:
    value = float(value)
    if not (math.isfinite(value) and value > low):
        raise PrivacyError(f"{name} must be a finite number > {low:g}, got {value!r}")
    return value


def dualquery_epsilon(eta: float, rounds: int, samples: int, n: float, delta: float = 0.0) -> float:
    """DualQuery's ε for step size ``eta``, ``rounds`` T, ``samples`` s per round and
    ``n`` rows: ``ηT(T − 1)s/n`` (Theorem 4.2) when ``delta`` is 0, else
    Theorem 4.3's ``ε'[√(2k ln(1/δ)) + k(e^{ε'} − 1)]`` with ``ε' = 2η(T − 1)/n``
    and ``k = s(T − 1)`` draws (the first round's draws are uniform, 0-DP).

    >>> dualquery_epsilon(0.5, 3, 10, 100.0)
    0.3
    """
    eta, n = _check("eta", eta), _check("n", n)
    if rounds < 1 or samples < 1:
        raise PrivacyError("DualQuery needs rounds >= 1 and samples >= 1")
    if delta == 0.0:
        return eta * rounds * (rounds - 1) * samples / n
    if not 0.0 < delta < 1.0:
        raise PrivacyError(f"delta must be in [0, 1), got {delta!r}")
    per_draw = 2.0 * eta * (rounds - 1) / n
    k = samples * (rounds - 1)
    try:
        growth = math.expm1(per_draw)
    except OverflowError:  # e^{ε'} beyond a double: no budget admits it
        return math.inf
    return per_draw * (math.sqrt(2.0 * k * math.log(1.0 / delta)) + k * growth)


def dualquery_rho(eta: float, rounds: int, samples: int, n: float) -> float:
    """DualQuery's ρ (zCDP): ``Σ_t s (2η(t − 1)/n)²/2 = 2sη²/n² · Σ_{t<T} t²``.

    >>> dualquery_rho(1.0, 3, 1, 1.0)      # 2·(0² + 1² + 2²)
    10.0
    """
    eta, n = _check("eta", eta), _check("n", n)
    if rounds < 1 or samples < 1:
        raise PrivacyError("DualQuery needs rounds >= 1 and samples >= 1")
    squares = (rounds - 1) * rounds * (2 * rounds - 1) / 6.0
    return 2.0 * samples * eta * eta / (n * n) * squares


def largest_integer(fits: Callable[[int], bool], what: str, upper: int = 1 << 40) -> int:
    """The largest integer m >= 1 with ``fits(m)``, for ``fits`` true up to a point and false after
    (PrivacyError when not even 1 fits).

    >>> largest_integer(lambda m: m * m <= 50, "m")
    7
    """
    if not fits(1):
        raise PrivacyError(f"no {what} fits this budget")
    lo, hi = 1, 2
    while hi < upper and fits(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def dualquery_rounds(epsilon: float, delta: float, eta: float, samples: int, n: float) -> int:
    """The most rounds T whose DualQuery cost (:func:`dualquery_epsilon`) is within ``epsilon``."""
    epsilon = _check("epsilon", epsilon)
    return largest_integer(lambda t: dualquery_epsilon(eta, t, samples, n, delta) <= epsilon, "number of rounds")


def dualquery_samples(epsilon: float, delta: float, eta: float, rounds: int, n: float) -> int:
    """The most samples s per round whose DualQuery cost is within ``epsilon``
    (any s fits a single round, whose draws are uniform; then s is capped at 2⁴⁰)."""
    epsilon = _check("epsilon", epsilon)
    return largest_integer(lambda s: dualquery_epsilon(eta, rounds, s, n, delta) <= epsilon, "number of samples")


def largest_real(cost: Callable[[float], float], limit: float, guess: float, upper: float = math.inf) -> float:
    """The largest ``x`` in ``(0, upper]`` with ``cost(x) <= limit``, to double precision, for
    ``cost`` nondecreasing and positive with ``cost(x) → 0`` as ``x → 0``; ``guess`` (> 0) is
    where the search starts. Bisection: the result always satisfies ``cost(x) <= limit``
    exactly, even where a closed form would round a hair above it.

    >>> root = largest_real(lambda x: x * x, 2.0, guess=1.0)
    >>> root, root ** 2 <= 2.0 < math.nextafter(root, 2.0) ** 2
    (1.414213562373095, True)
    """
    lo, hi = 0.0, min(max(guess, 1e-300), upper)
    while cost(hi) <= limit:  # grow until too large (or the cap fits)
        if hi >= upper:
            return upper
        lo, hi = hi, min(hi * 2.0, upper)
    while lo == 0.0 and hi > 1e-300:  # shrink until something fits
        lo, hi = (hi / 2.0, hi) if cost(hi / 2.0) <= limit else (0.0, hi / 2.0)
    if lo == 0.0:
        raise PrivacyError(f"no value above 1e-300 fits the limit {limit!r}")
    for _ in range(200):  # each halving of [lo, hi] keeps cost(lo) <= limit < cost(hi)
        mid = 0.5 * (lo + hi)
        if not lo < mid < hi:
            break
        lo, hi = (mid, hi) if cost(mid) <= limit else (lo, mid)
    return lo


def dualquery_eta(epsilon: float, delta: float, rounds: int, samples: int, n: float,
                  upper: float = math.inf) -> float:
    """The largest step size η (at most ``upper``) whose DualQuery cost
    (:func:`dualquery_epsilon`) over ``rounds`` T ≥ 2 rounds of ``samples`` s draws on ``n``
    rows is within ``epsilon``: Theorem 4.2 inverted, ``η = εn / (T(T − 1)s)``, when ``delta``
    is 0, else Theorem 4.3 inverted by bisection (its ε grows with η). The cost is continuous
    in η, so some η > 0 always fits: with T given, DualQuery spends exactly what it is given.
    (One round's draws are uniform, so T = 1 costs 0 whatever η is: PrivacyError here.)

    >>> dualquery_eta(0.3, 0.0, rounds=3, samples=10, n=100.0)      # inverts the doctest above
    0.5
    >>> eta = dualquery_eta(1.0, 1e-3, rounds=116, samples=1750, n=494_021)
    >>> round(eta, 4), dualquery_epsilon(eta, 116, 1750, 494_021, 1e-3) <= 1.0
    (1.2064, True)
    """
    epsilon, n = _check("epsilon", epsilon), _check("n", n)
    if rounds < 2 or samples < 1:
        raise PrivacyError("the step size eta has a cost only with rounds >= 2 and samples >= 1")
    if delta == 0.0:
        guess = epsilon * n / (rounds * (rounds - 1) * samples)
    else:
        if not 0.0 < delta < 1.0:
            raise PrivacyError(f"delta must be in [0, 1), got {delta!r}")
        k = samples * (rounds - 1)  # ε ≥ ε'·√(2k ln(1/δ)), so ε' ≤ ε/√(2k ln(1/δ))
        guess = epsilon / math.sqrt(2.0 * k * math.log(1.0 / delta)) * n / (2.0 * (rounds - 1))
    guess = guess if math.isfinite(guess) and guess > 0 else 1.0
    return largest_real(lambda eta: dualquery_epsilon(eta, rounds, samples, n, delta), epsilon, guess, upper)


def dualquery_eta_zcdp(rho: float, rounds: int, samples: int, n: float, upper: float = math.inf) -> float:
    """The largest step size η (at most ``upper``) whose :func:`dualquery_rho` is within ``rho``:
    ``η = n √(ρ / (2s Σ_{t<T} t²))``, rounded down to a value that fits exactly.

    >>> dualquery_eta_zcdp(10.0, rounds=3, samples=1, n=1.0)           # inverts dualquery_rho's doctest
    1.0
    """
    rho, n = _check("rho", rho), _check("n", n)
    if rounds < 2 or samples < 1:
        raise PrivacyError("the step size eta has a cost only with rounds >= 2 and samples >= 1")
    squares = (rounds - 1) * rounds * (2 * rounds - 1) / 6.0
    guess = n * math.sqrt(rho / (2.0 * samples * squares))
    guess = guess if math.isfinite(guess) and guess > 0 else 1.0
    return largest_real(lambda eta: dualquery_rho(eta, rounds, samples, n), rho, guess, upper)


def zcdp_epsilon(rho: float, delta: float) -> float:
    """The ε of ``(ε, δ)``-DP implied by ``ρ``-zCDP: ``inf over α > 1 of αρ + (L − ln α)/(α − 1)
    + ln(1 − 1/α)``, ``L = ln(1/δ)`` (Canonne, Kamath & Steinke 2020, Corollary 13). Every ``α``
    gives a valid ε, so the numerical minimum returned is one; it is never above Bun & Steinke's
    ``ρ + 2√(ρL)`` (2016, Prop. 1.3), the same bound without the last two terms, both negative.

    >>> round(zcdp_epsilon(0.5, 1e-6), 4), round(0.5 + 2 * math.sqrt(0.5 * math.log(1e6)), 4)
    (5.2215, 5.7565)
    """
    rho = _check("rho", rho)
    if not 0.0 < delta < 1.0:
        raise PrivacyError(f"delta must be in (0, 1), got {delta!r}")
    log_term = math.log(1.0 / delta)
    standard = rho + 2.0 * math.sqrt(rho * log_term)

    def bound(u: float) -> float:  # the bound at α = 1 + e^u: the search runs on ln(α − 1)
        gap = math.exp(u)
        alpha = 1.0 + gap
        return alpha * rho + (log_term - math.log1p(gap)) / gap + math.log(gap / alpha)

    centre = 0.5 * (math.log(log_term) - math.log(rho))  # the standard bound's best α is 1 + √(L/ρ)
    found = minimize_scalar(bound, bounds=(centre - 30.0, centre + 30.0), method="bounded",
                            options={"xatol": 1e-10})
    tight = bound(float(found.x))
    return max(min(tight, standard) if math.isfinite(tight) else standard, 0.0)


#: The most :func:`zcdp_rho` returns, whatever ε allows: far beyond any meaningful budget, and finite.
MAX_RHO = 1e300


def zcdp_rho(epsilon: float, delta: float) -> float:
    """The largest ρ whose :func:`zcdp_epsilon` is within ``epsilon``, by bisection: what a zCDP
    mechanism may spend under an ``(ε, δ)`` budget.

    >>> r = zcdp_rho(0.1, 1.0 / 48842**2)
    >>> zcdp_epsilon(r, 1.0 / 48842**2) <= 0.1, round(r / bun_steinke_rho(0.1, 1.0 / 48842**2), 3)
    (True, 1.45)
    """
    epsilon = _check("epsilon", epsilon)
    if not 0.0 < delta < 1.0:
        raise PrivacyError(f"delta must be in (0, 1), got {delta!r}")
    return largest_real(lambda rho: zcdp_epsilon(rho, delta), epsilon, guess=bun_steinke_rho(epsilon, delta),
                        upper=MAX_RHO)  # Bun & Steinke's ρ fits: zcdp_epsilon is never above theirs


def bun_steinke_rho(epsilon: float, delta: float) -> float:
    """The ρ whose Bun & Steinke conversion ``ε = ρ + 2√(ρ ln(1/δ))`` (2016, Proposition 1.3) is
    ``epsilon``: ``(√(ln(1/δ) + ε) − √(ln(1/δ)))²``, for ``δ`` in (0, 1). Looser than
    :func:`zcdp_rho`, which starts from it; what the FEM paper's T was computed with.

    >>> round(bun_steinke_rho(1.0, 1.0 / 48842**2), 5)
    0.01132
    """
    log_term = math.log(1.0 / delta)
    return (math.sqrt(log_term + epsilon) - math.sqrt(log_term)) ** 2


def gaussian_rho(epsilon: float, delta: float) -> float:
    """The ρ that Gaussian measurements alone may spend under an ``(ε, δ)`` budget: ``1/(2σ²)``
    for ``σ`` the analytic Gaussian's at sensitivity 1 (Balle & Wang 2018). Gaussian
    measurements whose ``ρ`` (``Δ²/(2σ²)`` each) add up to it, however many and however
    adaptively chosen, are together one ``√(2ρ)``-GDP mechanism (Dong, Roth & Su 2022,
    Corollary 3.3), and ``μ``-GDP is ``(ε, δ)``-DP exactly where the analytic Gaussian of
    ``σ = 1/μ`` is (their Corollary 2.13). So such a run may spend more than :func:`zcdp_rho`,
    which holds for any zCDP mechanism.

    >>> round(gaussian_rho(0.1, 1.0 / 48842**2) / zcdp_rho(0.1, 1.0 / 48842**2), 3)
    1.115
    """
    sigma = analytic_gaussian_sigma(epsilon, delta)
    return 1.0 / (2.0 * sigma * sigma)


def exponential_rho(eps0: float, bounded_range: bool = True) -> float:
    """The ρ (zCDP) of one ``ε₀``-DP exponential mechanism: ``ε₀²/8``, since the
    exponential mechanism is ``ε₀``-bounded-range (Cesar & Rogers 2021,
    Lemma 3.2 with Durfee & Rogers 2019), or with ``bounded_range=False`` the
    ``ε₀²/2`` that holds for every ``ε₀``-DP mechanism (Bun & Steinke 2016,
    Prop. 1.4; what the FEM paper used).

    >>> exponential_rho(0.2), exponential_rho(0.2, bounded_range=False)
    (0.005000000000000001, 0.020000000000000004)
    """
    eps0 = _check("eps0", eps0)
    return eps0 * eps0 / (8.0 if bounded_range else 2.0)


#: Most rounds a closed form returns (a count beyond any run; callers cap it further).
MAX_ROUNDS = 1 << 62


def _floor(x: float) -> int:
    """``⌊x⌋`` for ``x >= 0``, at most :data:`MAX_ROUNDS` (``inf`` included)."""
    return MAX_ROUNDS if not x < MAX_ROUNDS else int(math.floor(x))


def fem_rounds(epsilon: float, delta: float, eps0: float, bounded_range: bool = True) -> int:
    """The most FEM rounds T whose ``T·``:func:`exponential_rho` is within the ρ
    that ``(ε, δ)`` allows (:func:`zcdp_rho`); ``delta = 0`` means pure DP by
    basic composition, ``T = ⌊ε/ε₀⌋``."""
    epsilon, eps0 = _check("epsilon", epsilon), _check("eps0", eps0)
    if delta == 0.0:
        rounds = _floor(epsilon / eps0 * (1 + 1e-12))
        if rounds < 1:
            raise PrivacyError(f"eps0={eps0:g} is more than the budget epsilon={epsilon:g} allows for one round")
        return rounds
    return fem_rounds_zcdp(zcdp_rho(epsilon, delta), eps0, bounded_range)


def fem_rounds_zcdp(rho: float, eps0: float, bounded_range: bool = True) -> int:
    """The most FEM rounds T with ``T·``:func:`exponential_rho` within ``rho`` (at most :data:`MAX_ROUNDS`).

    >>> fem_rounds_zcdp(0.01, 0.05)     # 0.01 / (0.05²/8)
    32
    """
    rho, eps0 = _check("rho", rho), _check("eps0", eps0)
    per_round = exponential_rho(eps0, bounded_range)
    rounds = _floor(rho / per_round * (1 + 1e-12) if per_round > 0 else math.inf)
    if rounds < 1:
        raise PrivacyError(f"eps0={eps0:g} is more than the budget rho={rho:g} allows for one round")
    return rounds
