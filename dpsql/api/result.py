"""Query results: noisy answers with their standard errors, as DuckDB users expect.

A :class:`Result` is one statement's answer table. ``df`` is a pandas
DataFrame with the statement's SELECT columns (group keys and aggregates,
after HAVING / ORDER BY / LIMIT, which run on the noisy answers) and, next to
each aggregate, its standard error and a normal confidence interval.
``relation`` is the same table as a DuckDB relation on the analyst's DuckDB
(:attr:`dpsql.api.connection.Connection.released`, a database of released data
only, never the one holding the private table), so ``.df()``,
``.fetchall()``, ``.show()`` and further SQL work as usual.
Everything in a Result is post-processing of noisy values: it costs no
further budget to look at, filter or join.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from dpsql.private.budget import Cost
    from dpsql.released import ReleasedData


@dataclass(frozen=True)
class Release:
    """What one measurement spent and how accurate it is (shared by a batch).

    ``epsilon``/``delta`` (approximate DP) or ``rho`` (zCDP) is the spend
    recorded in the ledger; ``rmse`` is the expected root mean squared error
    over every query of the batch; ``operator`` is the HDMM strategy operator.
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

    def describe(self) -> str:
        if not self.queries:
            return (f"nothing measured and nothing spent: {self.statements} statement"
                    f"{'s' if self.statements != 1 else ''} answered from the public schema alone (the keys' "
                    "declared domain, less the groups WHERE rules out on it)")
        spend = (f"rho={self.rho:g}" if self.rho else
                 f"epsilon={self.epsilon:g}" + (f", delta={self.delta:g}" if self.delta else ""))
        return (f"{self.mechanism} noise, {spend}; strategy {self.operator} for {self.queries} queries "
                f"in {self.statements} statement{'s' if self.statements != 1 else ''}; "
                f"expected RMSE {self.rmse:.4g}")


@dataclass(frozen=True, eq=False)
class Explanation:
    """What a request would do, before anything is read or spent (:meth:`Connection.explain`).

    ``mechanism`` and ``cost`` are the noise and what it would charge; ``operator`` and
    ``rmse`` the selected strategy and its expected root mean squared error over the
    batch's answers; ``statements[i]`` has statement ``i``'s groups (all of them: HAVING,
    ORDER BY and LIMIT run on the noisy answers) with each aggregate's expected standard
    error (NULL where it depends on the answers, as for AVG).
    """

    mechanism: str
    cost: "Cost"
    operator: str
    rmse: float
    statements: "list[pd.DataFrame]"

    def __repr__(self) -> str:
        c = self.cost
        spend = f"rho={c.rho:g}" if c.rho else f"epsilon={c.epsilon:g}" + (f", delta={c.delta:g}" if c.delta else "")
        head = (f"-- would spend {spend} with {self.mechanism} noise; strategy {self.operator}; "
                f"expected RMSE {self.rmse:.4g}" if self.mechanism != "none"
                else "-- nothing to measure: answered from the public schema alone, spending nothing")
        return "\n".join([head, *(df.to_string(index=False) for df in self.statements)])


@dataclass(frozen=True, eq=False)
class Result:
    """One statement's private answers (see the module docstring)."""

    sql: str
    df: "pd.DataFrame"
    release: Release
    _released: "ReleasedData" = field(repr=False)

    @property
    def relation(self) -> "duckdb.DuckDBPyRelation":
        """The answers as a DuckDB relation on the analyst's DuckDB (released data only)."""
        return self._released.relation(self.df)

    @property
    def mechanism(self) -> str:
        return self.release.mechanism

    @property
    def epsilon(self) -> float:
        return self.release.epsilon

    @property
    def delta(self) -> float:
        return self.release.delta

    @property
    def rho(self) -> float:
        return self.release.rho

    @property
    def rmse(self) -> float:
        return self.release.rmse

    def __len__(self) -> int:
        return len(self.df)

    def __repr__(self) -> str:
        table = self.df.to_string(index=False, float_format=lambda v: f"{v:,.2f}")
        return f"-- {self.release.describe()}\n{table}"
