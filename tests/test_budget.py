"""Privacy budgets and costs: validation, composition, the admission boundary, zCDP conversions."""

import json
import math

import pytest

from dpsql.errors import Error, PrivacyError
from dpsql.private.budget import APPROX_DP, MIN_EPSILON, MIN_RHO, RELATIVE_TOLERANCE, ZCDP, Budget, Cost


@pytest.mark.parametrize("kwargs, match", [
    ({}, "exactly one"),
    ({"epsilon": 1.0, "rho": 1.0}, "exactly one"),
    ({"epsilon": 0.0}, "epsilon must be > 0"),
    ({"epsilon": -1.0}, "epsilon must be > 0"),
    ({"epsilon": math.inf}, "finite"),
    ({"epsilon": math.nan}, "finite"),
    ({"epsilon": "1"}, "must be a number"),
    ({"epsilon": True}, "must be a number"),
    ({"epsilon": 1.0, "delta": -1e-9}, "delta must be in"),
    ({"epsilon": 1.0, "delta": 1.0}, "delta must be in"),
    ({"rho": 0.0}, "rho must be > 0"),
    ({"rho": math.inf}, "finite"),
    ({"rho": 1.0, "delta": 1e-6}, "takes no delta"),
])
def test_budget_validation(kwargs, match):
    with pytest.raises(PrivacyError, match=match):
        Budget(**kwargs)


def test_privacy_error_is_a_dpsql_error():
    assert issubclass(PrivacyError, Error)


def test_budget_currency_and_normalization():
    assert Budget(epsilon=1).currency == APPROX_DP == "approx-dp"
    assert Budget(epsilon=1.0, delta=1e-6).currency == APPROX_DP
    assert Budget(rho=0.5).currency == ZCDP == "zcdp"
    # integers are stored as floats, so equal budgets compare and serialize equal
    assert Budget(epsilon=1) == Budget(epsilon=1.0)
    assert isinstance(Budget(epsilon=1).epsilon, float)
    assert Budget(epsilon=1.0) != Budget(epsilon=1.0, delta=1e-9)


@pytest.mark.parametrize("budget", [Budget(epsilon=1.0), Budget(epsilon=0.3, delta=1e-7), Budget(rho=0.1)])
def test_budget_dict_round_trip(budget):
    d = json.loads(json.dumps(budget.to_dict()))
    assert Budget.from_dict(d) == budget


def test_budget_from_dict_errors():
    with pytest.raises(PrivacyError, match="unknown budget keys: eps"):
        Budget.from_dict({"eps": 1.0})
    with pytest.raises(PrivacyError, match="does not match"):
        Budget.from_dict({"currency": "zcdp", "epsilon": 1.0})
    with pytest.raises(PrivacyError, match="must be a dict"):
        Budget.from_dict([1.0])
    assert Budget.from_dict({"epsilon": 2.0}) == Budget(epsilon=2.0)


@pytest.mark.parametrize("kwargs, match", [
    ({"epsilon": -0.1}, "epsilon of a cost must be >= 0"),
    ({"delta": -1e-9}, "delta of a cost must be >= 0"),
    ({"rho": -1.0}, "rho of a cost must be >= 0"),
    ({"epsilon": math.inf}, "finite"),
    ({"rho": math.nan}, "finite"),
    ({"epsilon": None}, "must be a number"),
])
def test_cost_validation(kwargs, match):
    with pytest.raises(PrivacyError, match=match):
        Cost(**kwargs)


def test_cost_composition_and_round_trip():
    total = Cost(epsilon=0.5, delta=1e-6) + Cost(epsilon=0.25) + Cost(delta=2e-6)
    assert total == Cost(epsilon=0.75, delta=3e-6)
    assert Cost() + Cost(rho=0.5) + Cost(rho=0.25) == Cost(rho=0.75)
    assert Cost.from_dict(json.loads(json.dumps(total.to_dict()))) == total
    assert Cost.from_dict({"rho": 1.0}) == Cost(rho=1.0)
    with pytest.raises(PrivacyError, match="unknown cost keys"):
        Cost.from_dict({"eps": 1.0})
    with pytest.raises(TypeError):
        Cost(epsilon=1.0) + 1.0


def test_admits_boundary_approx_dp():
    budget = Budget(epsilon=1.0, delta=1e-5)
    assert budget.admits(Cost())
    assert budget.admits(Cost(epsilon=1.0, delta=1e-5))  # exactly the budget
    assert not budget.admits(Cost(epsilon=1.0 + 1e-9, delta=1e-5))
    assert not budget.admits(Cost(epsilon=1.0, delta=1e-5 * (1 + 1e-9)))
    assert not budget.admits(Cost(epsilon=0.1, delta=2e-5))  # delta alone exceeds


def test_admits_pure_dp_refuses_any_delta():
    budget = Budget(epsilon=1.0)
    assert budget.admits(Cost(epsilon=1.0))
    assert not budget.admits(Cost(epsilon=0.5, delta=1e-12))


def test_admits_boundary_zcdp():
    budget = Budget(rho=0.5)
    assert budget.admits(Cost(rho=0.5))
    assert not budget.admits(Cost(rho=0.5 + 1e-9))


def test_admits_tolerates_float_rounding_of_sums():
    budget = Budget(epsilon=1.0)
    # ten plain float additions of 0.1 give 0.9999999999999999, and 0.3 + 0.7 style
    # sums can land one ulp above: both must be admitted at the boundary
    naive = Cost()
    for _ in range(10):
        naive = naive + Cost(epsilon=0.1)
    assert budget.admits(naive)
    assert budget.admits(Cost(epsilon=math.nextafter(1.0, 2.0)))
    assert budget.admits(Cost(epsilon=math.fsum([0.01] * 100)))
    assert not budget.admits(Cost(epsilon=math.fsum([0.01] * 101)))


def test_remaining_is_floored_at_zero():
    budget = Budget(epsilon=1.0, delta=1e-6)
    assert budget.remaining(Cost(epsilon=0.25)) == Cost(epsilon=0.75, delta=1e-6)
    assert budget.remaining(Cost(epsilon=2.0, delta=1e-5)) == Cost()
    assert Budget(rho=1.0).remaining(Cost(rho=0.25)) == Cost(rho=0.75)
    assert Budget(rho=1.0).remaining(Cost(rho=3.0)) == Cost()


def test_currency_mismatch_in_admits_and_remaining():
    with pytest.raises(PrivacyError, match="zCDP.*budget is epsilon=1.0"):
        Budget(epsilon=1.0).admits(Cost(rho=0.1))
    with pytest.raises(PrivacyError, match="approximate DP.*budget is rho=1.0"):
        Budget(rho=1.0).admits(Cost(epsilon=0.1))
    with pytest.raises(PrivacyError, match="approximate DP"):
        Budget(rho=1.0).remaining(Cost(delta=1e-6))
    with pytest.raises(PrivacyError, match="must be a Cost"):
        Budget(rho=1.0).admits(0.5)


def test_laplace_costs():
    assert Cost.laplace(0.5, Budget(epsilon=1.0)) == Cost(epsilon=0.5)
    assert Cost.laplace(0.5, Budget(epsilon=1.0, delta=1e-6)) == Cost(epsilon=0.5)
    # Bun & Steinke 2016, Prop. 1.4: eps-DP implies eps^2/2-zCDP
    assert Cost.laplace(1.0, Budget(rho=1.0)) == Cost(rho=0.5)
    assert Cost.laplace(0.2, Budget(rho=1.0)).rho == pytest.approx(0.02, rel=1e-15)
    with pytest.raises(PrivacyError, match="epsilon must be > 0"):
        Cost.laplace(0.0, Budget(epsilon=1.0))
    with pytest.raises(PrivacyError, match="expected a Budget"):
        Cost.laplace(1.0, 1.0)


def test_a_laplace_cost_near_the_largest_float_does_not_overflow():
    # epsilon**2 overflows at 1.4e154 although epsilon**2 / 2 is 1e308: a query's rho=1e308 was
    # refused as "rho must be finite, got inf"
    eps = math.sqrt(2.0) * math.sqrt(1e308)
    assert Cost.laplace(eps, Budget(rho=1e308)).rho == pytest.approx(1e308, rel=1e-15)
    assert Budget(rho=1e308).request(epsilon=eps).rho == pytest.approx(1e308, rel=1e-15)
    with pytest.raises(PrivacyError, match="too large"):
        Budget(rho=1e308).request(epsilon=2e154)


def test_gaussian_costs():
    approx = Budget(epsilon=1.0, delta=1e-5)
    zcdp = Budget(rho=1.0)
    assert Cost.gaussian(approx, epsilon=0.5, delta=1e-6) == Cost(epsilon=0.5, delta=1e-6)
    assert Cost.gaussian(zcdp, rho=0.25) == Cost(rho=0.25)
    with pytest.raises(PrivacyError, match="calibrated to rho .*calibrate it to epsilon and delta"):
        Cost.gaussian(approx, rho=0.25)
    with pytest.raises(PrivacyError, match=r"calibrated to \(epsilon, delta\).*calibrate it to rho"):
        Cost.gaussian(zcdp, epsilon=0.5, delta=1e-6)
    with pytest.raises(PrivacyError, match="not both"):
        Cost.gaussian(zcdp, epsilon=0.5, delta=1e-6, rho=0.1)
    with pytest.raises(PrivacyError, match="needs epsilon and delta"):
        Cost.gaussian(approx, epsilon=0.5)
    with pytest.raises(PrivacyError, match=r"delta in \(0, 1\)"):
        Cost.gaussian(approx, epsilon=0.5, delta=0.0)
    with pytest.raises(PrivacyError, match="rho must be > 0"):
        Cost.gaussian(zcdp, rho=0.0)


def test_gaussian_needs_delta_budget_to_fit():
    # a pure-DP budget admits no Gaussian release: its delta does not fit
    pure = Budget(epsilon=1.0)
    assert not pure.admits(Cost.gaussian(pure, epsilon=0.1, delta=1e-9))


# -- Budget.request: the one validated spend request ------------------------------------------

APPROX, PURE, ZC = Budget(epsilon=1.0, delta=1e-5), Budget(epsilon=1.0), Budget(rho=1.0)


@pytest.mark.parametrize("budget, kwargs, want", [
    (APPROX, {"epsilon": 0.5}, Cost(epsilon=0.5)),
    (APPROX, {"epsilon": 0.5, "delta": 1e-6}, Cost(epsilon=0.5, delta=1e-6)),
    (APPROX, {"epsilon": 1, "delta": 0}, Cost(epsilon=1.0)),
    (PURE, {"epsilon": 0.25, "delta": 0.0}, Cost(epsilon=0.25)),
    (PURE, {"epsilon": MIN_EPSILON}, Cost(epsilon=1e-6)),
    (ZC, {"rho": 0.1}, Cost(rho=0.1)),
    (ZC, {"epsilon": 0.5}, Cost(rho=0.125)),          # an eps-DP request costs eps^2/2
    (ZC, {"rho": MIN_RHO}, Cost(rho=5e-13)),
    (ZC, {"rho": 0.1, "delta": 0.0}, Cost(rho=0.1)),   # delta 0 is no delta
])
def test_request_costs(budget, kwargs, want):
    assert budget.request(**kwargs) == want


@pytest.mark.parametrize("budget, kwargs, match", [
    (PURE, {"epsilon": 1e-320}, r"^epsilon=1e-320 is below the smallest epsilon dpsql answers with, 1e-06$"),
    (PURE, {"epsilon": 0.0}, r"^epsilon must be > 0, got 0.0$"),
    (PURE, {"epsilon": -1}, r"^epsilon must be > 0, got -1$"),
    (PURE, {"epsilon": math.nan}, r"^epsilon must be finite, got nan$"),
    (PURE, {"epsilon": math.inf}, r"^epsilon must be finite"),
    (PURE, {"epsilon": 10**400}, r"^epsilon must be finite"),
    (PURE, {"epsilon": "0.5"}, r"^epsilon must be a number, got '0.5'$"),
    (PURE, {"epsilon": True}, r"^epsilon must be a number, got True$"),
    (PURE, {}, r"say how much to spend: epsilon="),
    (PURE, {"delta": 1e-6}, r"say how much to spend: epsilon="),
    (PURE, {"epsilon": 0.5, "delta": 1e-6}, r"^delta=1e-06 can never be charged .*whose delta is 0"),
    (APPROX, {"epsilon": 0.5, "delta": 1.0}, r"^delta must be in \[0, 1\), got 1.0$"),
    (APPROX, {"epsilon": 0.5, "delta": -1e-9}, r"^delta must be in \[0, 1\), got -1e-09$"),
    (APPROX, {"epsilon": 0.5, "delta": "1e-6"}, r"^delta must be a number"),
    (APPROX, {"epsilon": 0.5, "delta": math.nan}, r"^delta must be finite"),
    (APPROX, {"rho": 0.1}, r"^rho=0.1 cannot be spent from the budget epsilon=1.0"),
    (APPROX, {"epsilon": 0.5, "rho": 0.1}, r"^rho=0.1 cannot be spent"),
    (ZC, {"rho": math.nan}, r"^rho must be finite, got nan$"),
    (ZC, {"rho": -0.01}, r"^rho must be > 0, got -0.01$"),
    (ZC, {"rho": 1e-14}, r"^rho=1e-14 is below the smallest rho dpsql answers with, 5e-13$"),
    (ZC, {"rho": "0.1"}, r"^rho must be a number"),
    (ZC, {"rho": 0.1, "delta": 1e-6}, r"^delta=1e-06 cannot be spent from the zCDP budget"),
    (ZC, {"epsilon": 0.5, "delta": 1e-6}, r"^delta=1e-06 cannot be spent from the zCDP budget"),
    (ZC, {"rho": 0.1, "delta": math.nan}, r"^delta must be finite"),
    (ZC, {"epsilon": 0.5, "rho": 0.1}, r"not both: got epsilon=0.5, rho=0.1$"),
    (ZC, {"epsilon": 1e-320}, r"^epsilon=1e-320 is below the smallest epsilon"),
    (ZC, {"epsilon": 1e300}, r"^epsilon=1e\+300 is too large: its zCDP cost"),
    (ZC, {}, r"say how much to spend: rho="),
])
def test_request_refusals_name_the_parameter(budget, kwargs, match):
    with pytest.raises(PrivacyError, match=match):
        budget.request(**kwargs)


def test_request_floors_are_documented_constants():
    assert MIN_EPSILON == 1e-6 and MIN_RHO == MIN_EPSILON ** 2 / 2
    # an eps-DP request at the floor costs exactly the rho floor under zCDP
    assert Budget(rho=1.0).request(epsilon=MIN_EPSILON) == Cost(rho=MIN_RHO)


def test_cost_within_uses_the_budgets_tolerance():
    assert Cost(epsilon=0.5).within(Cost(epsilon=0.5))
    assert Cost(epsilon=1.0 * (1 + RELATIVE_TOLERANCE / 2)).within(Cost(epsilon=1.0))
    assert not Cost(epsilon=1.0 * (1 + 1e-9)).within(Cost(epsilon=1.0))
    assert not Cost(epsilon=0.1, delta=1e-9).within(Cost(epsilon=1.0))      # every field
    assert Cost(rho=0.25).within(Cost(rho=0.25, epsilon=1.0))
    assert not Cost(rho=0.25).within(Cost(epsilon=1.0))
    # the boundary agrees with Budget.admits
    for total in (Cost(epsilon=math.nextafter(1.0, 2.0)), Cost(epsilon=math.fsum([0.01] * 101))):
        assert total.within(Cost(epsilon=1.0)) == Budget(epsilon=1.0).admits(total)
    with pytest.raises(PrivacyError, match="must be compared with a Cost|only be compared with a Cost"):
        Cost(epsilon=0.5).within(0.5)
