"""The options of a synthesis method, checked before anything is read or spent.

Each function returns the value it checks, converted, or raises
:class:`~dpsql.errors.ArgumentError` naming the option and the value given, so
that a bad option is refused with the same words wherever it is checked
(:mod:`dpsql.synth.synthesize`, :func:`dpsql.synth.mwem.check_mwem`).

>>> integer("rounds", 3), real("eta", 0.5), choice("init", "noisy", ("uniform", "noisy")), flag("average", False)
(3, 0.5, 'noisy', False)
>>> integer("rounds", 0)
Traceback (most recent call last):
...
dpsql.errors.ArgumentError: rounds must be an integer >= 1, got rounds=0
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

import numpy as np

from dpsql.errors import ArgumentError

__all__ = ["integer", "real", "option", "choice", "flag"]


def integer(name: str, value: Any, low: int = 1, high: int | None = None) -> int:
    """``value`` as an int of at least ``low`` and at most ``high`` (bools, floats and strings are refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentError(f"{name} must be an integer >= {low}, got {name}={value!r:.80}")
    if value < low:
        raise ArgumentError(f"{name} must be an integer >= {low}, got {name}={value!r}")
    if high is not None and value > high:
        raise ArgumentError(f"{name} must be at most {high:,}, got {name}={value!r:.80}")
    return int(value)


def real(name: str, value: Any, high: float = math.inf, below_one: bool = False) -> float:
    """``value`` as a finite float > 0 (and at most ``high``, or below 1 when ``below_one``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(f"{name} must be a number, got {name}={value!r:.80}")
    try:
        number = float(value)
    except OverflowError:  # an int beyond any double
        number = math.inf
    if not (math.isfinite(number) and number > 0):
        raise ArgumentError(f"{name} must be a finite number > 0, got {name}={value!r:.80}")
    if below_one and number >= 1.0:
        raise ArgumentError(f"{name} must be in (0, 1), got {name}={value!r}")
    if number > high:
        raise ArgumentError(f"{name} must be at most {high:g}, got {name}={value!r}")
    return number


def option(options: dict, name: str, default: Any) -> Any:
    """The option ``name``, or ``default`` when it is not given (or given as None)."""
    value = options.get(name)
    return default if value is None else value


def choice(name: str, value: Any, choices: Sequence[str]) -> str:
    """``value``, one of the strings ``choices``."""
    if not isinstance(value, str) or value not in choices:
        raise ArgumentError(f"{name} must be one of {tuple(choices)}, got {name}={value!r:.80}")
    return value


def flag(name: str, value: Any) -> bool:
    """``value`` as a bool (Python's or numpy's; 0 and 1 are refused)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ArgumentError(f"{name} must be True or False, got {name}={value!r:.80}")
    return bool(value)
