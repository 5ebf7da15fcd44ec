"""What the engine hands its front ends: released answers and plans, never private data.

:class:`Answer` is one statement's released table with the :class:`Release` that made it
(the spend, the mechanism, the strategy and its expected error, shared by a batch);
:class:`Explanation` is what a request would do, before anything is read or spent. The
Python API wraps an Answer as a :class:`~dpsql.api.result.Result` (with a relation on the
analyst's DuckDB), the command line prints or writes it, the server sends it as rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

    from dpsql.private.budget import Cost

__all__ = ["Answer", "Explanation", "Release", "budget_number", "one_line", "significant"]


def significant(value: float, digits: int = 4) -> str:
    """``value`` shown to ``digits`` significant digits (all of its integer digits when it has more), with
    thousands separators: ``0.001234``, ``37.38``, ``12,346``. A standard error of a ratio stays readable
    (it printed as ``0.00`` at two decimals); beyond ordinary magnitudes, scientific notation."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    decimals = digits - 1 - math.floor(math.log10(abs(value)))
    if decimals > digits + 4 or value >= 1e15 or value <= -1e15:
        return f"{value:.{digits}g}"
    return f"{value:,.{max(decimals, 0)}f}"


def budget_number(value: float) -> str:
    """A spend or budget as it is printed: 12 significant digits (``0.1``, not ``0.10000000000000009``, the
    float sum the ledger holds). Printed this way a remaining budget is off by at most a relative 5e-13, within
    the ledger's tolerance (:data:`~dpsql.private.budget.RELATIVE_TOLERANCE`), so spending it is admitted."""
    return f"{value:.12g}"


def one_line(sql: str) -> str:
    """A statement as a one-line label: its whitespace runs collapsed to single spaces."""
    return " ".join(sql.split())


@dataclass(frozen=True)
class Release:
    """What one measurement spent and how accurate it is (shared by a batch).

    ``epsilon``/``delta`` (approximate DP) or ``rho`` (zCDP) is the spend
    recorded in the ledger (entry ``entry``, at ``time``); ``rmse`` is the expected root mean squared
    error over every measured query of the batch (internal COUNTs and SUMs included:
    each answer's own error is :attr:`Answer.rmse`); ``operator`` is the HDMM strategy
    operator; ``confidence`` the level of the answers' confidence intervals. ``repeated``:
    the same request was answered before, and this is that release again, kept beside the
    ledger (:mod:`dpsql.engine.repeats`): nothing was spent now.
    """

    mechanism: str
    epsilon: float
    delta: float
    rho: float
    rmse: float
    operator: str
    queries: int
    statements: int
    entry: int
    repeated: bool = False
    confidence: float = 0.95
    time: str = ""

    def describe(self) -> str:
        if not self.queries:
            return (f"nothing measured and nothing spent: {self.statements} statement"
                    f"{'s' if self.statements != 1 else ''} answered from the public schema alone (the keys' "
                    "declared domain, less the groups WHERE rules out on it)")
        spend = (f"rho={budget_number(self.rho)}" if self.rho else f"epsilon={budget_number(self.epsilon)}"
                 + (f", delta={budget_number(self.delta)}" if self.delta else ""))
        again = (f"a repeat: the release of ledger entry {self.entry} again, nothing spent now; "
                 if self.repeated else "")
        return (f"{again}{self.mechanism} noise, {spend}; strategy {self.operator} for {self.queries} queries "
                f"in {self.statements} statement{'s' if self.statements != 1 else ''}")


@dataclass(frozen=True, eq=False)
class Explanation:
    """What a request would do, before anything is read or spent (:meth:`Connection.explain`).

    ``mechanism`` and ``cost`` are the noise and what it would charge; ``operator`` and
    ``rmse`` the selected strategy and its expected root mean squared error over the
    batch's answers; ``statements[i]`` has statement ``i``'s groups (all of them: HAVING,
    ORDER BY and LIMIT run on the noisy answers) with each aggregate's expected standard
    error (NULL where it depends on the answers, as for AVG). ``remaining`` is what the
    caller's budget has left now, and ``affordable`` whether ``cost`` fits in it: what an
    accuracy (``std_error=``) costs, and whether it can be bought, before anything is spent.
    """

    mechanism: str
    cost: "Cost"
    operator: str
    rmse: float
    statements: "list[pd.DataFrame]"
    remaining: "Cost | None" = None
    affordable: bool = True

    def __repr__(self) -> str:
        c = self.cost
        spend = (f"rho={budget_number(c.rho)}" if c.rho else f"epsilon={budget_number(c.epsilon)}"
                 + (f", delta={budget_number(c.delta)}" if c.delta else ""))
        head = (f"-- would spend {spend} with {self.mechanism} noise; strategy {self.operator}; "
                f"expected RMSE {self.rmse:.4g}" if self.mechanism != "none"
                else "-- nothing to measure: answered from the public schema alone, spending nothing")
        if self.remaining is not None and self.mechanism != "none":
            r = self.remaining
            left = (f"rho={budget_number(r.rho)}" if c.rho else f"epsilon={budget_number(r.epsilon)}"
                    + (f", delta={budget_number(r.delta)}" if c.delta else ""))
            head += f"\n-- the remaining budget ({left}) {'affords' if self.affordable else 'does not afford'} it"
        return "\n".join([head, *(df.to_string(index=False, float_format=significant) for df in self.statements)])


@dataclass(frozen=True, eq=False)
class Answer:
    """One statement's released answers: ``df`` holds its SELECT columns and their error
    columns (post-processed noisy values only); ``release`` is its batch's measurement;
    ``errors`` maps each answer column the statement asked for that has a standard error
    (an aggregate, or a computed item over aggregates) to its error columns
    ``(std_error, ci_low, ci_high)``. ``notes`` say what the values do not: a quantile of a binned
    column is interpolated within a bin (:meth:`~dpsql.sql.compile.CompiledStatement.notes`)."""

    sql: str
    df: "pd.DataFrame"
    release: Release
    errors: "dict[str, tuple[str, str, str]]" = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def rmse(self) -> "dict[str, float]":
        """Each answer column's expected RMSE, by name: the root mean square of its standard errors
        over the groups (NaN where none is known, as for an empty result)."""
        out = {}
        for column, (se, _, _) in self.errors.items():
            values = self.df[se].to_numpy(dtype=float)
            known = values[np.isfinite(values)]
            out[column] = float(np.sqrt(np.mean(known**2))) if known.size else math.nan
        return out

    def describe(self) -> str:
        """The answer's header: its statement, its release, and each answer column's expected RMSE."""
        lines = [f"-- {one_line(self.sql)}", f"-- {self.release.describe()}"]
        if self.errors:
            lines.append("-- expected RMSE: " + ", ".join(f"{name} {significant(v)}" for name, v in self.rmse.items()))
        lines.extend(f"-- note: {note}" for note in self.notes)
        return "\n".join(lines)
