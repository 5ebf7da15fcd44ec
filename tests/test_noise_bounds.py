"""Every sampler and calibration finishes quickly and raises only dpsql errors, for every finite
parameter: tiny and huge ε, δ, ρ, sensitivity and ``changed``, and overflowing logits.

Oracles: the original doubling loop of ``lattice_laplace`` (re-implemented below, stopped where
it would never end), closed-form bounds (``δ(σ) ≤ Φ(a)``, the noise-scale bound of
:func:`dpsql.private.noise.laplace_lattice`) and exact rational arithmetic. Calls that used to hang run
under a deadline, so a regression fails instead of hanging the suite.
"""

from __future__ import annotations

import contextlib
import math
import signal
import warnings
from fractions import Fraction

import numpy as np
import pytest
from scipy.special import ndtr

from dpsql.errors import ArgumentError, Error, PrivacyError
from dpsql.privacy import GAUSSIAN_MIN_DELTA, GAUSSIAN_MIN_EPSILON, Gaussian, Laplace, analytic_gaussian_sigma
from dpsql.private.budget import MIN_EPSILON, MIN_RHO
from dpsql.private.noise import (
    NOISE_CEILING,
    ROUNDING_SLACK,
    GaussianLattice,
    LaplaceLattice,
    bernoulli_exp,
    categorical,
    discrete_laplace,
    gaussian,
    gaussian_lattice,
    integers_below,
    laplace,
    laplace_epsilon_floor,
    laplace_lattice,
    lattice_gaussian,
    lattice_laplace,
)

TINY, HUGE = 5e-324, 1.7976931348623157e308


@contextlib.contextmanager
def deadline(seconds: float):
    """Fail with TimeoutError if the block is still running after ``seconds``."""
    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def original_plan(sens: float, eps: float, changed: int) -> tuple[float, int] | None:
    """``(γ, T)`` of the original ``lattice_laplace`` loop, or None where it failed (ValueError,
    OverflowError) or would never end (γ doubled to infinity)."""
    changed = max(int(changed), 1)
    try:
        gamma = 2.0 ** math.floor(math.log2(sens / (ROUNDING_SLACK * changed)))
        while math.ceil((sens / gamma + 2 * changed) / eps) > 2**45:
            gamma *= 2.0
            if math.isinf(gamma):
                return None
        return gamma, math.ceil((sens / gamma + 2 * changed) / eps)
    except (ValueError, OverflowError):
        return None


def works_today(sens: float, eps: float, changed: int) -> tuple[float, int] | None:
    """The original plan where it is within the documented bounds: it ended, ``changed`` is at
    most 2^53, the first step Δ/(2^24·changed) is a normal double, ε > changed·2^-44, and the
    noise scale γT is at most 2^1000."""
    plan = original_plan(sens, eps, changed)
    c = max(int(changed), 1)
    if plan is None or c > 2**53 or sens / (ROUNDING_SLACK * c) < 2.0**-1022 or eps <= c * 2.0**-44:
        return None
    gamma, scale = plan
    return plan if gamma * scale <= 2.0**1000 else None


def check_plan(plan: LaplaceLattice, sens: float, eps: float, changed: int) -> None:
    c = max(int(changed), 1)
    g, t = plan.gamma, plan.scale
    assert 1 <= t <= 2**45 and g >= 2.0**-1022 and math.frexp(g)[0] == 0.5 and g * t <= NOISE_CEILING
    # ε-DP: T ≥ (Δ/γ + 2c)/ε, in exact arithmetic (up to the one rounding of the float computation)
    need = (Fraction(sens) / Fraction(g) + 2 * c) / Fraction(eps)
    assert Fraction(t) >= need * (1 - Fraction(1, 2**50))
    # the documented noise-scale bound γT < (Δ/ε)(1 + x + 2^-22)/(1 − x) + γ, x = c·2^-44/ε
    x = Fraction(c, 2**44) / Fraction(eps)
    bound = Fraction(sens) / Fraction(eps) * (1 + x + Fraction(1, 2**22)) / (1 - x) + Fraction(g)
    assert Fraction(g) * t <= bound * (1 + Fraction(1, 2**40))
    assert math.isfinite(plan.std) and plan.std > 0


# -- lattice Laplace --------------------------------------------------------------------------


@pytest.mark.parametrize("eps,changed", [(5e-14, 1), (5e-5, 10**9), (1e-300, 1), (TINY, 3)])
def test_tiny_epsilon_is_refused_quickly(eps, changed):
    """The original loop never ended here: 2·changed/ε ≥ 2^45 whatever the lattice step."""
    floor = laplace_epsilon_floor(changed)
    assert eps < floor
    with deadline(30.0):  # a hang guard: the original loop never ended
        with pytest.raises(PrivacyError) as e:
            laplace_lattice(1.0, eps, changed)
        with pytest.raises(PrivacyError):
            lattice_laplace(np.zeros(3), 1.0, eps, changed, np.random.default_rng(0))
    message = str(e.value)
    assert f"epsilon={eps!r}" in message and repr(floor) in message and f"changed={changed}" in message


def test_epsilon_floor_is_exact():
    for c in (1, 3, 10**6, 10**9):
        floor = laplace_epsilon_floor(c)
        assert floor == c * 2.0**-44
        with pytest.raises(PrivacyError, match="below the floor"):
            laplace_lattice(1.0, floor, c)
        plan = laplace_lattice(1.0, floor * 1.01, c)          # just above: a coarse lattice, T near 2^45
        check_plan(plan, 1.0, floor * 1.01, c)
        assert plan.scale > 2**44


EPSILONS = [TINY, 1e-300, 1e-20, 5e-14, 1e-9, 5e-5, 0.3, 1.0, 7.0, 1e10, 1e300, HUGE]
SENSITIVITIES = [TINY, 1e-300, 1e-12, 0.5, 1.0, 3.0, 1e10, 1e290, 1e300, HUGE]
CHANGED = [0, 1, 3, 10**6, 10**9, 10**15, 2**53, 2**53 + 1, 10**30]


def test_grid_of_extreme_parameters_returns_finite_values_or_refuses():
    rng = np.random.default_rng(0)
    outcomes = {"plan": 0, "refused": 0}
    with deadline(60.0):
        for eps in EPSILONS:
            for sens in SENSITIVITIES:
                for changed in CHANGED:
                    old = works_today(sens, eps, changed)
                    try:
                        plan = laplace_lattice(sens, eps, changed)
                    except PrivacyError:
                        assert old is None, (sens, eps, changed)
                        outcomes["refused"] += 1
                        with pytest.raises(PrivacyError):
                            lattice_laplace(np.zeros(2), sens, eps, changed, rng)
                        continue
                    outcomes["plan"] += 1
                    assert old == (plan.gamma, plan.scale), (sens, eps, changed)
                    check_plan(plan, sens, eps, changed)
                    s = min(sens, 2.0**1000)
                    exact = np.array([0.0, s, -s, 0.5 * s])
                    with warnings.catch_warnings():
                        warnings.simplefilter("error")
                        values = plan.release(exact, rng)
                        again, std = lattice_laplace(exact, sens, eps, changed, rng)
                    assert np.all(np.isfinite(values)) and np.all(np.isfinite(again)) and std == plan.std
    assert outcomes["plan"] > 100 and outcomes["refused"] > 100


def test_random_parameters_keep_the_original_plan_or_refuse():
    """Where the original loop gave a usable plan, the new one is identical (same γ and T, so the
    same noise distribution and accounting); everywhere else it refuses, in bounded time."""
    rng = np.random.default_rng(1)
    same = 0
    with deadline(60.0):
        for _ in range(3000):
            sens = 10 ** rng.uniform(-20, 20)
            eps = 10 ** rng.uniform(-16, 12)
            changed = int(10 ** rng.uniform(0, 12))
            old = works_today(sens, eps, changed)
            if old is None:
                with pytest.raises(PrivacyError):
                    laplace_lattice(sens, eps, changed)
            else:
                plan = laplace_lattice(sens, eps, changed)
                assert (plan.gamma, plan.scale) == old
                same += 1
    assert same > 1000


@pytest.mark.parametrize("sens,eps,changed", [(1.0, 1.0, 1), (2.0, 0.5, 4), (1.0, 1.0, 3), (1.0, 0.1, 1),
                                              (7.5, 2.0, 12), (1.0, 1e-6, 1), (1.0, 1e-3, 10**6), (3.0, 1e-5, 10**4),
                                              (1.0, 1e-6, 10**6), (1e6, 1e-4, 10**3), (1.0, 50.0, 1)])
def test_plan_and_release_equal_the_original_on_ordinary_parameters(sens, eps, changed):
    gamma, scale = original_plan(sens, eps, changed)
    plan = laplace_lattice(sens, eps, changed)
    assert (plan.gamma, plan.scale) == (gamma, scale)
    alpha = math.exp(-1.0 / scale)
    assert plan.std == gamma * math.sqrt(2.0 * alpha) / -math.expm1(-1.0 / scale)
    exact = np.array([0.0, 3.25, -17.0, 1e6 + 0.3])
    expected = (np.rint(exact / gamma) + discrete_laplace(scale, exact.size, np.random.default_rng(5))) * gamma
    values, std = lattice_laplace(exact, sens, eps, changed, np.random.default_rng(5))
    assert np.array_equal(values, expected) and std == plan.std
    assert np.array_equal(plan.release(exact, np.random.default_rng(5)), expected)


def test_release_never_fails_for_any_exact_vector():
    plan = laplace_lattice(1.0, 1.0, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = plan.release(np.array([HUGE, -HUGE, np.inf, np.nan, 0.0, 1e-320]), np.random.default_rng(0))
        assert y.shape == (6,) and np.isfinite(y[[4, 5]]).all()
        assert plan.release(np.zeros((2, 3)), np.random.default_rng(0)).shape == (2, 3)
        assert plan.release(np.zeros(0), np.random.default_rng(0)).shape == (0,)


@pytest.mark.parametrize("kwargs", [dict(sensitivity=float("nan"), epsilon=1.0, changed=1),
                                    dict(sensitivity=1.0, epsilon=float("inf"), changed=1),
                                    dict(sensitivity=1.0, epsilon=0.0, changed=1),
                                    dict(sensitivity="1", epsilon=None, changed=1),
                                    dict(sensitivity=1.0, epsilon=1.0, changed=float("nan")),
                                    dict(sensitivity=1.0, epsilon=1.0, changed=float("inf")),
                                    dict(sensitivity=1.0, epsilon=1e300, changed=2**53 + 1),
                                    dict(sensitivity=1e-301, epsilon=1.0, changed=1)])
def test_invalid_lattice_parameters_raise_privacy_error(kwargs):
    with pytest.raises(PrivacyError):
        laplace_lattice(**kwargs)


def test_a_hand_made_plan_is_checked():
    good = laplace_lattice(1.0, 1.0, 1)
    with pytest.raises(PrivacyError):
        LaplaceLattice(1.0, 1.0, 1, good.gamma, good.scale - 10, good.std)      # too little noise
    with pytest.raises(PrivacyError):
        LaplaceLattice(1.0, 1.0, 1, 3.0, good.scale, good.std)                   # not a power of two


# -- lattice Gaussian -------------------------------------------------------------------------


@pytest.mark.parametrize("sigma", [0.0, TINY, 1e-300, 2.0**-998 * 0.99, 2.0**-998, 1e-10, 1.0, 1e300, 2.0**1000,
                                   HUGE, float("inf"), float("nan"), -1.0, "x"])
def test_gaussian_lattice_returns_finite_values_or_refuses(sigma):
    exact = np.array([0.0, 1.0, -2.5])
    try:
        plan = gaussian_lattice(sigma)
    except PrivacyError:
        assert not (sigma == 0 or (isinstance(sigma, float) and 2.0**-998 <= sigma <= 2.0**1000))
        with pytest.raises(PrivacyError):
            lattice_gaussian(exact, sigma, np.random.default_rng(0))
        return
    assert sigma == 0 or 2.0**-998 <= sigma <= 2.0**1000
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = plan.release(exact, np.random.default_rng(0))
    assert np.all(np.isfinite(y))
    if sigma:
        assert plan.gamma == 2.0 ** math.floor(math.log2(sigma / ROUNDING_SLACK))
        assert np.array_equal(np.rint(y / plan.gamma) * plan.gamma, y)
        assert np.array_equal(y, lattice_gaussian(exact, sigma, np.random.default_rng(0)))
    else:
        assert np.array_equal(y, exact)
    with pytest.raises(PrivacyError):
        GaussianLattice(1.0, 3.0)


# -- Gaussian calibration ---------------------------------------------------------------------


@pytest.mark.parametrize("eps", [TINY, 1e-300, 5e-14, 1e-7, 1e-6, 1e-3, 1.0, 1e4, 1.0001e4, 1e10, 1e20, 1e100,
                                 1e300, HUGE])
def test_analytic_gaussian_finishes_for_every_epsilon_and_delta(eps):
    with deadline(10.0):
        for delta in [TINY, 1e-300, 1e-101, 1e-100, 1e-20, 1e-6, 0.5, 1 - 1e-16]:
            if eps < GAUSSIAN_MIN_EPSILON or delta < GAUSSIAN_MIN_DELTA:
                with pytest.raises(PrivacyError) as e:
                    analytic_gaussian_sigma(eps, delta)
                name, value, floor = (("epsilon", eps, GAUSSIAN_MIN_EPSILON) if eps < GAUSSIAN_MIN_EPSILON
                                      else ("delta", delta, GAUSSIAN_MIN_DELTA))
                assert f"{name}={value!r}" in str(e.value) and repr(floor) in str(e.value)
                continue
            sigma = analytic_gaussian_sigma(eps, delta)
            assert math.isfinite(sigma) and sigma > 0
            g = Gaussian(epsilon=eps, delta=delta)
            assert g.sigma(2.0) == 2.0 * sigma and math.isfinite(g.variance(1.0))


@pytest.mark.parametrize("eps", [1e6, 1e8, 1e12, 1e16, 1e20, 1e24, 1e40])
@pytest.mark.parametrize("delta", [1e-3, 1e-12, 1e-90])
def test_analytic_gaussian_is_private_for_huge_epsilon(eps, delta):
    """The σ returned is private: ``δ(σ) = Φ(a) − φ(a) M(−b) ≤ Φ(a) − φ(a)·(−b)/(b² + 1)`` (a lower
    bound on the Mills ratio ``M``), with ``a = 1/(2σ) − εσ`` and ``b`` computed exactly in
    rationals. (The log form ``exp(ε + log Φ(b))`` loses all precision by ε = 1e20, where the
    σ it gave had about 100 times the target δ.)"""
    sigma = analytic_gaussian_sigma(eps, delta)
    s, e = Fraction(sigma), Fraction(eps)
    a, b = float(1 / (2 * s) - e * s), float(-1 / (2 * s) - e * s)
    upper = float(ndtr(a)) - math.exp(-0.5 * a * a) / math.sqrt(2 * math.pi) * (-b) / (b * b + 1)
    assert upper <= delta * (1 + 1e-6)


def test_rho_calibration_for_every_rho():
    for rho in [TINY, 1e-300, MIN_RHO, 0.5, 1e300, 8.98846567431158e307, HUGE]:
        g = Gaussian(rho=rho)
        sigma = g.sigma(1.0)
        assert 0 < sigma < math.inf and sigma == pytest.approx(1 / math.sqrt(2) / math.sqrt(rho), rel=1e-15)
        assert g.variance(1.0) == pytest.approx(sigma * sigma, rel=1e-15) or math.isinf(g.variance(1.0))
        assert g.variance(HUGE) > 0                                # inf where it overflows, no OverflowError
    assert Gaussian(rho=TINY).variance(HUGE) == math.inf
    assert Laplace(1e-300).variance(1.0) == math.inf
    assert MIN_RHO == MIN_EPSILON**2 / 2


@pytest.mark.parametrize("kwargs", [dict(epsilon=1.0, delta="x"), dict(epsilon=1.0, delta=None)])
def test_gaussian_rejects_non_numeric_delta(kwargs):
    with pytest.raises(PrivacyError):
        Gaussian(**kwargs)
    with pytest.raises(PrivacyError):
        analytic_gaussian_sigma(1.0, kwargs["delta"])


# -- categorical ------------------------------------------------------------------------------


def test_categorical_with_overflowing_logits_is_the_limit():
    rng = np.random.default_rng(2)
    scores = np.array([3.0, 1.0, 3.0, -2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # the caller's own ε·score overflow
        logits = 1e300 * scores * 1e10           # [inf, inf, inf, -inf] → uniform on {0, 1, 2}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        draws = categorical(logits, 3000, rng)
        assert set(np.unique(draws)) == {0, 1, 2}
        draws = categorical(np.array([np.inf, 5.0, np.inf, -np.inf]), 2000, rng)
        counts = np.bincount(draws, minlength=4)
        assert counts[1] == counts[3] == 0 and 900 < counts[0] < 1100
        assert set(categorical(np.array([-np.inf, 0.0, -np.inf]), 100, rng)) == {1}
        assert set(categorical(np.array([-np.inf, -np.inf]), 100, rng)) == {0, 1}
        assert set(categorical(np.array([HUGE, -HUGE, 5.0]), 100, rng)) == {0}
        assert categorical(np.array([1.0]), 0, rng).shape == (0,)


@pytest.mark.parametrize("logits,size", [(np.array([]), 1), (np.array([1.0, np.nan]), 1), (np.array([1.0]), -1)])
def test_categorical_bad_input_raises_a_dpsql_error(logits, size):
    with pytest.raises(ArgumentError):
        categorical(logits, size, np.random.default_rng(0))


# -- the samplers themselves ------------------------------------------------------------------


def test_rejection_samplers_refuse_bounds_they_cannot_meet():
    rng = np.random.default_rng(3)
    with deadline(2.0):
        for bound in ([0], [2**45 + 1], [-3]):
            with pytest.raises(PrivacyError):       # a 0 bound used to loop forever
                integers_below(np.array(bound), rng)
        for num, den in (([2], [1]), ([-1], [3]), ([0], [0])):
            with pytest.raises(PrivacyError):
                bernoulli_exp(np.array(num), np.array(den), rng)
        for scale in (0, 2**45 + 1, float("nan"), float("inf"), "x", None):
            with pytest.raises(PrivacyError):
                discrete_laplace(scale, 3, rng)
        assert discrete_laplace(2**45, 1000, rng).shape == (1000,)
        assert integers_below(np.array([1, 2**45]), rng).tolist()[0] == 0


@pytest.mark.parametrize("sampler", [laplace, gaussian])
def test_continuous_samplers_finite_or_refused(sampler):
    rng = np.random.default_rng(4)
    for scale in [0.0, TINY, 1.0, 2.0**1000]:
        assert np.all(np.isfinite(sampler(scale, 1000, rng)))
    for scale in [2.0**1000 * 1.001, HUGE, float("inf"), float("nan"), -1.0, None]:
        with pytest.raises(PrivacyError):
            sampler(scale, 10, rng)
    with pytest.raises(ArgumentError):
        sampler(1.0, -1, rng)
    assert sampler(1.0, 0, rng).shape == (0,)


def test_errors_are_dpsql_errors():
    assert issubclass(PrivacyError, Error) and issubclass(ArgumentError, Error)
    assert not issubclass(ArgumentError, ValueError)
