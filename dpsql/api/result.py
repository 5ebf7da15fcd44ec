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

from dpsql.engine.answer import Explanation, Release

__all__ = ["Explanation", "Release", "Result"]

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from dpsql.released import ReleasedData


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
