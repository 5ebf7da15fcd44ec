"""Privacy budgets and the costs of releases: plain math, no I/O.

A :class:`Budget` is the total privacy loss a dataset may suffer, in exactly
one *currency*:

* ``"approx-dp"``: ``(ε, δ)``-differential privacy under basic sequential
  composition, so the ``ε`` and the ``δ`` of the releases add up (Dwork &
  Roth 2014, Theorem 3.16). ``δ = 0`` (the default) is pure ``ε``-DP.
* ``"zcdp"``: ``ρ``-zero-concentrated DP, where the ``ρ`` of the releases
  add up (Bun & Steinke 2016, Lemma 1.7).

A :class:`Cost` is what one release spends, in the budget's currency; costs
compose with ``+``. :meth:`Cost.laplace` and :meth:`Cost.gaussian` give the
cost of a mechanism under a given budget. The durable record of what has
been spent is :class:`dpsql.private.ledger.Ledger`.

>>> budget = Budget(epsilon=1.0)
>>> spent = Cost.laplace(0.25, budget) + Cost.laplace(0.5, budget)
>>> budget.admits(spent), budget.remaining(spent)
(True, Cost(epsilon=0.25, delta=0.0, rho=0.0))
>>> budget.admits(spent + Cost.laplace(0.5, budget))
False
>>> zcdp = Budget(rho=1.0)
>>> Cost.laplace(1.0, zcdp)
Cost(epsilon=0.0, delta=0.0, rho=0.5)
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from dpsql.errors import BudgetExceededError, PrivacyError

__all__ = ["APPROX_DP", "ZCDP", "Budget", "Cost", "RELATIVE_TOLERANCE", "MIN_EPSILON", "MIN_RHO"]

#: Currency of an ``(ε, δ)`` budget (pure DP when ``δ = 0``).
APPROX_DP = "approx-dp"
#: Currency of a ``ρ``-zCDP budget.
ZCDP = "zcdp"

#: A total is admitted if it exceeds the budget by at most this fraction of the
#: budget, so that float rounding in sums such as ``100 × 0.01`` does not
#: refuse the last spend the budget allows. ``1e-12`` relative is far below any
#: meaningful privacy parameter yet well above double-precision rounding of
#: sums of a few million terms.
RELATIVE_TOLERANCE = 1e-12

#: The smallest ``ε`` a request may spend. Below it the noise would swamp any
#: answer (a count's Laplace noise has scale ``1/ε`` ≥ a million), and the
#: lattice noise of :mod:`dpsql.private.noise` has a floor near ``1e-13`` per changed
#: coordinate that a request's per-step shares must stay well above.
MIN_EPSILON = 1e-6
#: The smallest ``ρ`` a request may spend: that of an ``ε``-DP request at
#: :data:`MIN_EPSILON` (``ε²/2``, Bun & Steinke 2016, Proposition 1.4).
MIN_RHO = MIN_EPSILON ** 2 / 2


def _number(name: str, value: Any) -> float:
    """``value`` as a finite float, or PrivacyError (bools and strings are refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise PrivacyError(f"{name} must be a number, got {value!r:.80}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond any double, e.g. 10**400
        number = math.inf
    if not math.isfinite(number):
        raise PrivacyError(f"{name} must be finite, got {value!r:.80}")
    return number


def _positive(name: str, value: Any, floor: float) -> float:
    """``value`` as a finite float of at least ``floor`` (> 0), or PrivacyError naming ``name``."""
    number = _number(name, value)
    if number <= 0:
        raise PrivacyError(f"{name} must be > 0, got {value!r}")
    if number < floor:
        raise PrivacyError(f"{name}={value!r} is below the smallest {name} dpsql answers with, {floor!r}")
    return number


def _delta(value: Any) -> float:
    """``value`` as a float in ``[0, 1)``, or PrivacyError naming delta."""
    number = _number("delta", value)
    if not 0.0 <= number < 1.0:
        raise PrivacyError(f"delta must be in [0, 1), got {value!r}")
    return number


def _laplace_rho(epsilon: float) -> float:
    """``ε²/2``, the zCDP cost of an ``ε``-DP mechanism, halved before squaring (exactly) so that
    no finite cost overflows on the way (``ε·ε`` does from ``ε = 1.4e154``)."""
    return epsilon * (epsilon / 2.0)


def _within(total: float, limit: float) -> bool:
    return total <= limit * (1.0 + RELATIVE_TOLERANCE)


@dataclass(frozen=True)
class Budget:
    """Total privacy budget of a dataset, in exactly one currency.

    Give ``epsilon`` (and optionally ``delta``, default 0 = pure DP) for
    ``(ε, δ)``-DP under basic sequential composition, or ``rho`` for
    ``ρ``-zCDP, which composes additively. Invalid parameters raise
    :class:`~dpsql.errors.PrivacyError`.

    >>> Budget(epsilon=1.0, delta=1e-6).currency
    'approx-dp'
    >>> str(Budget(rho=0.5))
    'rho=0.5 (zCDP)'
    """

    epsilon: Optional[float] = None
    delta: float = 0.0
    rho: Optional[float] = None

    def __post_init__(self) -> None:
        if (self.epsilon is None) == (self.rho is None):
            raise PrivacyError("a budget needs exactly one of epsilon (approximate DP) or rho (zCDP), "
                               f"got epsilon={self.epsilon!r}, rho={self.rho!r}")
        delta = _number("delta", self.delta)
        if self.rho is not None:
            rho = _number("rho", self.rho)
            if rho <= 0:
                raise PrivacyError(f"rho must be > 0, got {self.rho!r}")
            if delta != 0:
                raise PrivacyError(f"a zCDP budget (rho) takes no delta, got delta={self.delta!r}")
            object.__setattr__(self, "rho", rho)
        else:
            epsilon = _number("epsilon", self.epsilon)
            if epsilon <= 0:
                raise PrivacyError(f"epsilon must be > 0, got {self.epsilon!r}")
            if not 0.0 <= delta < 1.0:
                raise PrivacyError(f"delta must be in [0, 1), got {self.delta!r}")
            object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "delta", delta)

    @property
    def currency(self) -> str:
        """``"approx-dp"`` (``ε``, ``δ``) or ``"zcdp"`` (``ρ``)."""
        return ZCDP if self.rho is not None else APPROX_DP

    def _check_currency(self, cost: "Cost", what: str) -> None:
        if not isinstance(cost, Cost):
            raise PrivacyError(f"{what} must be a Cost, got {type(cost).__name__}")
        if self.currency == APPROX_DP and cost.rho > 0:
            raise PrivacyError(f"{what} is in zCDP (rho={cost.rho!r}) but the budget is {self}; "
                               "costs must be in the budget's currency")
        if self.currency == ZCDP and (cost.epsilon > 0 or cost.delta > 0):
            raise PrivacyError(f"{what} is in approximate DP (epsilon={cost.epsilon!r}, delta={cost.delta!r}) "
                               f"but the budget is {self}; costs must be in the budget's currency")

    def admits(self, spent: "Cost") -> bool:
        """Whether a total spend ``spent`` is within this budget.

        ``(ε, δ)`` budgets need ``Σε ≤ ε`` and ``Σδ ≤ δ``; zCDP budgets need
        ``Σρ ≤ ρ``, each up to a relative :data:`RELATIVE_TOLERANCE`. A cost in
        the other currency raises PrivacyError.
        """
        self._check_currency(spent, "the spend")
        if self.currency == ZCDP:
            return _within(spent.rho, self.rho)
        return _within(spent.epsilon, self.epsilon) and _within(spent.delta, self.delta)

    def request(self, epsilon: Any = None, delta: Any = None, rho: Any = None) -> "Cost":
        """The validated cost of one spend request, in this budget's currency (nothing is read or recorded).

        Every given value must be a real number (not a bool or a string) and
        finite; ``epsilon`` and ``rho`` must be positive and at least
        :data:`MIN_EPSILON` and :data:`MIN_RHO`; ``delta`` must be in ``[0, 1)``.

        * ``(ε, δ)`` budget: ``epsilon`` is required and ``delta`` defaults to 0
          (pure DP); ``rho`` is refused, and so is ``delta > 0`` when the
          budget's δ is 0, since no such spend can ever be charged.
        * zCDP budget: ``rho`` is the request, or ``epsilon`` alone, an ``ε``-DP
          request costing ``ρ = ε²/2`` (Bun & Steinke 2016, Proposition 1.4);
          both together, and any nonzero ``delta``, are refused.

        Every refusal is a :class:`~dpsql.errors.PrivacyError` naming the
        parameter and its value, and a request larger than the whole budget
        is a :class:`~dpsql.errors.BudgetExceededError` naming the parameter
        (``epsilon=1e308``). Whether the cost fits what is left is the
        ledger's check, not this one.

        >>> Budget(epsilon=1.0, delta=1e-6).request(epsilon=0.5)
        Cost(epsilon=0.5, delta=0.0, rho=0.0)
        >>> Budget(rho=1.0).request(epsilon=0.5)
        Cost(epsilon=0.0, delta=0.0, rho=0.125)
        >>> Budget(epsilon=1.0).request(epsilon=1e-320)
        Traceback (most recent call last):
        ...
        dpsql.errors.PrivacyError: epsilon=1e-320 is below the smallest epsilon dpsql answers with, 1e-06
        >>> Budget(rho=1.0).request(rho=0.1, delta=1e-6)
        Traceback (most recent call last):
        ...
        dpsql.errors.PrivacyError: delta=1e-06 cannot be spent from the zCDP budget rho=1.0 (zCDP): spend rho=... (or epsilon=... for an epsilon-DP request), without delta
        """
        if self.currency == ZCDP:
            return self._request_zcdp(epsilon, delta, rho)
        if rho is not None:
            raise PrivacyError(f"rho={rho!r} cannot be spent from the budget {self}: "
                               "spend epsilon=... (and delta=...), not rho")
        if epsilon is None:
            raise PrivacyError(f"say how much to spend: epsilon=... (the budget is {self})")
        eps = _positive("epsilon", epsilon, MIN_EPSILON)
        spend_delta = 0.0 if delta is None else _delta(delta)
        if spend_delta > 0 and self.delta == 0:
            raise PrivacyError(f"delta={delta!r} can never be charged to the budget {self}, whose delta is 0: "
                               "leave delta out (pure DP)")
        return self._whole(Cost(epsilon=eps, delta=spend_delta), f"epsilon={epsilon!r}", "epsilon")

    def _whole(self, cost: "Cost", given: str, name: str) -> "Cost":
        """``cost``, unless its ``name`` part alone is more than the whole budget's: such a request
        can never be charged, and is refused naming what was asked for (``given``), before any
        value derived from it (a Gaussian's delta in proportion to epsilon) is computed."""
        if not _within(getattr(cost, name), getattr(self, name)):
            raise BudgetExceededError(f"{given} is more than the whole budget ({self}): no request can spend it",
                                      requested=cost)
        return cost

    def _request_zcdp(self, epsilon: Any, delta: Any, rho: Any) -> "Cost":
        """:meth:`request` under a zCDP budget."""
        if delta is not None and _delta(delta) != 0:
            raise PrivacyError(f"delta={delta!r} cannot be spent from the zCDP budget {self}: spend rho=... "
                               "(or epsilon=... for an epsilon-DP request), without delta")
        if epsilon is not None and rho is not None:
            raise PrivacyError(f"give rho=... or epsilon=... (an epsilon-DP request costing rho = epsilon**2/2), "
                               f"not both: got epsilon={epsilon!r}, rho={rho!r}")
        if rho is not None:
            return self._whole(Cost(rho=_positive("rho", rho, MIN_RHO)), f"rho={rho!r}", "rho")
        if epsilon is None:
            raise PrivacyError(f"say how much to spend: rho=... (or epsilon=...; the budget is {self})")
        eps = _positive("epsilon", epsilon, MIN_EPSILON)
        cost = _laplace_rho(eps)
        if not math.isfinite(cost):
            raise PrivacyError(f"epsilon={epsilon!r} is too large: its zCDP cost epsilon**2/2 is not a finite number")
        return self._whole(Cost(rho=cost), f"epsilon={epsilon!r} (costing rho = epsilon**2/2 = {cost!r})", "rho")

    def remaining(self, spent: "Cost") -> "Cost":
        """The budget minus ``spent``, each field floored at 0."""
        self._check_currency(spent, "the spend")
        if self.currency == ZCDP:
            return Cost(rho=max(0.0, self.rho - spent.rho))
        return Cost(epsilon=max(0.0, self.epsilon - spent.epsilon), delta=max(0.0, self.delta - spent.delta))

    def describe(self, cost: "Cost") -> str:
        """``cost`` written in this budget's currency, e.g. ``"epsilon=0.5, delta=0.0"``."""
        if self.currency == ZCDP:
            return f"rho={cost.rho!r}"
        return f"epsilon={cost.epsilon!r}, delta={cost.delta!r}"

    def to_dict(self) -> dict:
        """A JSON-able dict; :meth:`from_dict` inverts it exactly."""
        if self.currency == ZCDP:
            return {"currency": ZCDP, "rho": self.rho}
        return {"currency": APPROX_DP, "epsilon": self.epsilon, "delta": self.delta}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Budget":
        """The budget of a dict from :meth:`to_dict` (``currency`` is optional)."""
        if not isinstance(d, Mapping):
            raise PrivacyError(f"a budget must be a dict, got {type(d).__name__}")
        unknown = set(d) - {"currency", "epsilon", "delta", "rho"}
        if unknown:
            raise PrivacyError(f"unknown budget keys: {', '.join(sorted(map(str, unknown)))}")
        budget = cls(epsilon=d.get("epsilon"), delta=d.get("delta", 0.0), rho=d.get("rho"))
        if "currency" in d and d["currency"] != budget.currency:
            raise PrivacyError(f"budget currency {d['currency']!r} does not match its parameters ({budget})")
        return budget

    def __str__(self) -> str:
        if self.currency == ZCDP:
            return f"rho={self.rho!r} (zCDP)"
        kind = "pure DP" if self.delta == 0 else "approximate DP"
        return f"epsilon={self.epsilon!r}, delta={self.delta!r} ({kind})"


@dataclass(frozen=True)
class Cost:
    """What one release spends, in the budget's currency: ``epsilon`` and
    ``delta`` (approximate DP) and/or ``rho`` (zCDP). Fields are finite and
    nonnegative; ``+`` composes costs by summing each field.

    >>> Cost(epsilon=0.5) + Cost(epsilon=0.25, delta=1e-6)
    Cost(epsilon=0.75, delta=1e-06, rho=0.0)
    """

    epsilon: float = 0.0
    delta: float = 0.0
    rho: float = 0.0

    def __post_init__(self) -> None:
        for name in ("epsilon", "delta", "rho"):
            value = _number(name, getattr(self, name))
            if value < 0:
                raise PrivacyError(f"{name} of a cost must be >= 0, got {value!r}")
            object.__setattr__(self, name, value)

    def __add__(self, other: "Cost") -> "Cost":
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(self.epsilon + other.epsilon, self.delta + other.delta, self.rho + other.rho)

    def within(self, limit: "Cost") -> bool:
        """Whether this cost is at most ``limit`` in every field, up to the relative
        :data:`RELATIVE_TOLERANCE` that :meth:`Budget.admits` allows for float rounding.

        >>> Cost(epsilon=0.1) + Cost(epsilon=0.2)
        Cost(epsilon=0.30000000000000004, delta=0.0, rho=0.0)
        >>> (Cost(epsilon=0.1) + Cost(epsilon=0.2)).within(Cost(epsilon=0.3))
        True
        >>> Cost(epsilon=0.5, delta=1e-9).within(Cost(epsilon=1.0))
        False
        """
        if not isinstance(limit, Cost):
            raise PrivacyError(f"a cost can only be compared with a Cost, got {type(limit).__name__}")
        return all(_within(getattr(self, f), getattr(limit, f)) for f in ("epsilon", "delta", "rho"))

    def to_dict(self) -> dict:
        """A JSON-able dict; :meth:`from_dict` inverts it exactly."""
        return {"epsilon": self.epsilon, "delta": self.delta, "rho": self.rho}

    @classmethod
    def from_dict(cls, d: Mapping) -> "Cost":
        """The cost of a dict from :meth:`to_dict` (missing fields are 0)."""
        if not isinstance(d, Mapping):
            raise PrivacyError(f"a cost must be a dict, got {type(d).__name__}")
        unknown = set(d) - {"epsilon", "delta", "rho"}
        if unknown:
            raise PrivacyError(f"unknown cost keys: {', '.join(sorted(map(str, unknown)))}")
        return cls(d.get("epsilon", 0.0), d.get("delta", 0.0), d.get("rho", 0.0))

    @classmethod
    def laplace(cls, epsilon: float, budget: Budget) -> "Cost":
        """Cost of a pure ``ε``-DP mechanism (e.g. Laplace noise of scale ``Δ₁/ε``).

        Under an ``(ε, δ)`` budget it costs ``(ε, 0)`` (an ``ε``-DP mechanism is
        ``(ε, 0)``-DP; basic composition, Dwork & Roth 2014, Theorem 3.16).
        Under a zCDP budget it costs ``ρ = ε²/2``: every ``ε``-DP mechanism is
        ``ε²/2``-zCDP (Bun & Steinke 2016, Proposition 1.4).

        >>> Cost.laplace(0.5, Budget(epsilon=1.0))
        Cost(epsilon=0.5, delta=0.0, rho=0.0)
        >>> Cost.laplace(1.0, Budget(rho=1.0)).rho
        0.5
        """
        budget = _budget(budget)
        epsilon = _number("epsilon", epsilon)
        if epsilon <= 0:
            raise PrivacyError(f"epsilon must be > 0, got {epsilon!r}")
        if budget.currency == ZCDP:
            return cls(rho=_laplace_rho(epsilon))
        return cls(epsilon=epsilon)

    @classmethod
    def gaussian(cls, budget: Budget, epsilon: Optional[float] = None, delta: Optional[float] = None,
                 rho: Optional[float] = None) -> "Cost":
        """Cost of a Gaussian mechanism calibrated to ``(ε, δ)`` or to ``ρ``.

        * ``epsilon`` and ``delta`` (needs an ``(ε, δ)`` budget): Gaussian noise
          calibrated to ``(ε, δ)``-DP, e.g. by the analytic Gaussian mechanism
          (Balle & Wang 2018, Theorem 8), costs ``(ε, δ)`` under basic
          composition (Dwork & Roth 2014, Theorem 3.16).
        * ``rho`` (needs a zCDP budget): Gaussian noise ``σ = Δ₂/√(2ρ)`` is
          ``ρ``-zCDP (Bun & Steinke 2016, Proposition 1.6) and costs ``ρ``.

        A calibration in the other currency than the budget's raises
        PrivacyError.

        >>> Cost.gaussian(Budget(epsilon=1.0, delta=1e-5), epsilon=0.5, delta=1e-6)
        Cost(epsilon=0.5, delta=1e-06, rho=0.0)
        >>> Cost.gaussian(Budget(rho=1.0), rho=0.25)
        Cost(epsilon=0.0, delta=0.0, rho=0.25)
        """
        budget = _budget(budget)
        if rho is not None:
            if epsilon is not None or delta is not None:
                raise PrivacyError("calibrate the Gaussian mechanism to rho, or to epsilon and delta, not both")
            if budget.currency != ZCDP:
                raise PrivacyError(f"a Gaussian mechanism calibrated to rho (zCDP) cannot be charged to the "
                                   f"budget {budget}; calibrate it to epsilon and delta instead")
            rho = _number("rho", rho)
            if rho <= 0:
                raise PrivacyError(f"rho must be > 0, got {rho!r}")
            return cls(rho=rho)
        if epsilon is None or delta is None:
            raise PrivacyError("the Gaussian mechanism needs epsilon and delta, or rho")
        if budget.currency != APPROX_DP:
            raise PrivacyError(f"a Gaussian mechanism calibrated to (epsilon, delta) cannot be charged to the "
                               f"zCDP budget {budget}; calibrate it to rho instead")
        epsilon, delta = _number("epsilon", epsilon), _number("delta", delta)
        if epsilon <= 0:
            raise PrivacyError(f"epsilon must be > 0, got {epsilon!r}")
        if not 0.0 < delta < 1.0:
            raise PrivacyError(f"the Gaussian mechanism needs delta in (0, 1), got {delta!r}")
        return cls(epsilon=epsilon, delta=delta)


def _budget(budget: Any) -> Budget:
    if not isinstance(budget, Budget):
        raise PrivacyError(f"expected a Budget, got {type(budget).__name__}")
    return budget
