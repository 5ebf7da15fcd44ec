"""Noise calibration (dpsql.privacy), with the analytic Gaussian boundary
checked by an independent implementation of Balle & Wang (2018), Theorem 8."""

from __future__ import annotations

import math

import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from dpsql.errors import PrivacyError
from dpsql.privacy import Gaussian, Laplace, analytic_gaussian_sigma


def bw_delta(sigma, eps, sens=1.0):
    """δ(σ) = Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ), via log-space for the second term."""
    a = sens / (2 * sigma) - eps * sigma / sens
    b = -sens / (2 * sigma) - eps * sigma / sens
    return norm.cdf(a) - math.exp(eps + norm.logcdf(b))


def test_laplace():
    for eps in [0.1, 0.5, 1.0, 3.0]:
        L = Laplace(eps)
        for sens in [1.0, 2.5, 7.0]:
            assert L.scale(sens) == pytest.approx(sens / eps)
            assert L.variance(sens) == pytest.approx(2 * sens**2 / eps**2)
    assert Laplace(1.0).norm == 1
    assert Laplace(1.0).name == "laplace"
    assert Laplace(1.0).key() != Laplace(2.0).key()


@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan"), float("inf"), "1"])
def test_laplace_invalid(eps):
    with pytest.raises(PrivacyError):
        Laplace(eps)


def test_laplace_wrong_norm():
    with pytest.raises(PrivacyError):
        Laplace(1.0, norm=2)


def test_gaussian_reference_constant():
    g = Gaussian(epsilon=1.0, delta=1e-6)
    assert round(g.sigma(1.0), 4) == 4.2247
    assert g.sigma(3.0) == pytest.approx(3 * g.sigma(1.0), rel=1e-12)
    assert g.variance(2.0) == pytest.approx((2 * g.sigma(1.0)) ** 2, rel=1e-12)
    assert g.norm == 2 and g.name == "gaussian"


@pytest.mark.parametrize("eps,delta", [(1.0, 1e-6), (0.1, 1e-5), (0.5, 1e-9), (2.0, 1e-3), (5.0, 1e-6),
                                        (1.0, 0.3), (10.0, 1e-10)])
def test_analytic_gaussian_is_tight(eps, delta):
    sigma = analytic_gaussian_sigma(eps, delta)
    # private at σ, not private a hair below it
    assert bw_delta(sigma, eps) <= delta * (1 + 1e-9)
    assert bw_delta(sigma * (1 - 1e-6), eps) > delta
    # agrees with an independent root-finder
    ref = brentq(lambda s: bw_delta(s, eps) - delta, 1e-3, 1e4, xtol=1e-14, rtol=1e-13)
    assert sigma == pytest.approx(ref, rel=1e-8)
    # scaling with sensitivity: σ(Δ) = Δ σ(1) satisfies δ for a Δ-sensitive query
    g = Gaussian(epsilon=eps, delta=delta)
    assert bw_delta(g.sigma(3.0), eps, sens=3.0) <= delta * (1 + 1e-9)


def test_analytic_gaussian_beats_classical():
    """The analytic calibration is never worse than the classical √(2 ln(1.25/δ))/ε (ε < 1)."""
    for eps, delta in [(0.5, 1e-6), (0.9, 1e-5)]:
        assert analytic_gaussian_sigma(eps, delta) < math.sqrt(2 * math.log(1.25 / delta)) / eps


@pytest.mark.parametrize("rho", [0.01, 0.5, 2.0])
def test_zcdp(rho):
    g = Gaussian(rho=rho)
    for sens in [1.0, 4.0]:
        assert g.sigma(sens) == pytest.approx(sens / math.sqrt(2 * rho))
        assert g.variance(sens) == pytest.approx(sens**2 / (2 * rho))
    assert g.key() != Gaussian(epsilon=1.0, delta=1e-6).key()


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(epsilon=1.0),
        dict(delta=1e-6),
        dict(),
        dict(epsilon=0.0, delta=1e-6),
        dict(epsilon=-1.0, delta=1e-6),
        dict(epsilon=float("inf"), delta=1e-6),
        dict(epsilon=1.0, delta=0.0),
        dict(epsilon=1.0, delta=1.0),
        dict(epsilon=1.0, delta=-1e-6),
        dict(epsilon=1.0, delta=float("nan")),
        dict(rho=0.0),
        dict(rho=-1.0),
        dict(rho=float("nan")),
        dict(rho=1.0, epsilon=1.0),
        dict(rho=1.0, delta=1e-6),
        dict(epsilon=1.0, delta=1e-6, norm=1),
    ],
)
def test_gaussian_invalid(kwargs):
    with pytest.raises(PrivacyError):
        Gaussian(**kwargs)


@pytest.mark.parametrize("eps,delta", [(0.0, 1e-6), (1.0, 0.0), (1.0, 1.5), (-2.0, 0.1)])
def test_analytic_sigma_invalid(eps, delta):
    with pytest.raises(PrivacyError):
        analytic_gaussian_sigma(eps, delta)
