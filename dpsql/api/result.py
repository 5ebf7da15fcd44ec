"""Query results: noisy answers with their standard errors, as DuckDB users expect.

A :class:`Result` is one statement's answer table. ``df`` is a pandas
DataFrame with the statement's SELECT columns (group keys and aggregates,
after HAVING / ORDER BY / LIMIT, which run on the noisy answers) and, next to
each aggregate, its standard error and a normal confidence interval.
``relation`` is the same table as a DuckDB relation on the analyst's DuckDB
(:attr:`dpsql.api.connection.Connection.released`, a database of released data
only, never the one holding the private table), so ``.df()``,
``.fetchall()``, ``.show()`` and further SQL work as usual; :meth:`Result.register`
names it there. ``arrow()`` and ``pl()`` give it as an Arrow or Polars table, and
``plot()`` draws each answer with its confidence interval (pyarrow, polars and
matplotlib are optional, imported when first used: ``pip install 'dpsql[plot]'``
for the plot). Its text form (and ``_repr_html_``, for notebooks) is headed by the
statement, the spend and each answer column's expected RMSE, numbers to four
significant digits.
Everything in a Result is post-processing of noisy values: it costs no
further budget to look at, filter or join.
"""

from __future__ import annotations

import html
import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from dpsql.engine.answer import Answer, Explanation, Release, significant
from dpsql.errors import ArgumentError, DependencyError

__all__ = ["Explanation", "Release", "Result"]

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from dpsql.released import ReleasedData


def _optional(module: str, package: str, extra: str | None = None) -> Any:
    """``module`` imported, or DependencyError naming the install that adds it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        hint = f"pip install 'dpsql[{extra}]'" if extra else f"pip install {package}"
        raise DependencyError(f"this needs {package}, which is not installed: {hint}") from None


@dataclass(frozen=True, eq=False)
class Result:
    """One statement's private answers (see the module docstring). ``errors`` maps each answer
    column that has a standard error to its error columns ``(std_error, ci_low, ci_high)``."""

    sql: str
    df: "pd.DataFrame"
    release: Release
    _released: "ReleasedData" = field(repr=False)
    errors: "dict[str, tuple[str, str, str]]" = field(default_factory=dict)
    #: what the values do not say: a quantile of a binned column is interpolated within a bin
    notes: tuple[str, ...] = ()

    @property
    def relation(self) -> "duckdb.DuckDBPyRelation":
        """The answers as a DuckDB relation on the analyst's DuckDB (released data only)."""
        return self._released.relation(self.df)

    def register(self, name: str) -> "duckdb.DuckDBPyRelation":
        """Make the answers the table ``name`` on the analyst's DuckDB (``db.released``), queryable by
        name in further SQL (free: released data only), and return it as a relation. WorkloadError
        if the name is taken."""
        relation = self.relation
        self._released.register(name, self.df, dict(zip(relation.columns, map(str, relation.types))))
        return self._released.table(name)

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
        """The expected RMSE over every measured query of the batch (see :attr:`answer_rmse` for
        each answer column's own)."""
        return self.release.rmse

    @property
    def answer_rmse(self) -> "dict[str, float]":
        """Each answer column's expected RMSE (the root mean square of its standard errors), by name."""
        return self._answer().rmse

    @property
    def repeated(self) -> bool:
        """Whether this is an earlier release given again for the same SQL and spend (nothing spent now)."""
        return self.release.repeated

    def _answer(self) -> Answer:
        return Answer(self.sql, self.df, self.release, self.errors, self.notes)

    def describe(self) -> str:
        """The header of the text form: the statement, the spend and each answer column's expected RMSE."""
        return self._answer().describe()

    def provenance(self) -> "dict[str, Any]":
        """What made these answers, as JSON-able values (what ``dpsql query --out`` writes beside them):
        the SQL, the mechanism and spend, the ledger entry, the strategy, the confidence level of the
        intervals, the :attr:`notes`, and per answer column its error columns and its expected RMSE (None
        if unknown)."""
        r = self.release
        rmse = self._answer().rmse
        return {"sql": self.sql, "mechanism": r.mechanism, "epsilon": r.epsilon, "delta": r.delta, "rho": r.rho,
                "ledger_entry": r.entry if r.entry >= 0 else None, "repeated": r.repeated, "strategy": r.operator,
                "confidence": r.confidence, "notes": list(self.notes),
                "errors": {column: {"std_error": se, "ci_low": low, "ci_high": high,
                                    "expected_rmse": rmse[column] if np.isfinite(rmse[column]) else None}
                           for column, (se, low, high) in self.errors.items()}}

    def arrow(self) -> Any:
        """The answers as a ``pyarrow.Table`` (needs pyarrow)."""
        pa = _optional("pyarrow", "pyarrow")
        return pa.Table.from_pandas(self.df, preserve_index=False)

    def pl(self) -> Any:
        """The answers as a ``polars.DataFrame`` (needs polars)."""
        pl = _optional("polars", "polars")
        return pl.DataFrame(self.df)

    def plot(self, ax: Any = None) -> Any:
        """Each answer with its confidence interval as an error bar, one series per answer column, the
        groups along the x axis; drawn on ``ax`` (default: a new figure's) and returned (needs
        matplotlib: ``pip install 'dpsql[plot]'``)."""
        if not self.errors:
            raise ArgumentError("plot needs an answer column with a confidence interval; this result has none")
        plt = _optional("matplotlib.pyplot", "matplotlib", "plot")
        if ax is None:
            _, ax = plt.subplots()
        shown = {c for names in self.errors.values() for c in names} | set(self.errors)
        keys = [c for c in self.df.columns if c not in shown]
        labels = [", ".join(str(v) for v in row) for row in self.df[keys].itertuples(index=False)] if keys else []
        x = np.arange(len(self.df), dtype=float)
        width = 0.8 / len(self.errors)
        for i, (column, (_, low, high)) in enumerate(self.errors.items()):
            y = self.df[column].to_numpy(dtype=float)
            below = y - self.df[low].to_numpy(dtype=float)
            above = self.df[high].to_numpy(dtype=float) - y
            ax.errorbar(x + (i - (len(self.errors) - 1) / 2) * width, y, yerr=np.vstack([below, above]),
                        fmt="o", capsize=3, label=column)
        ax.set_xticks(x, labels or [str(int(i) + 1) for i in x])
        ax.set_xlabel(", ".join(keys) if keys else "row")
        if len(self.errors) > 1:
            ax.legend()
        else:
            ax.set_ylabel(next(iter(self.errors)))
        ax.set_title(self.sql if len(self.sql) <= 80 else self.sql[:77] + "...", fontsize="small")
        return ax

    def __len__(self) -> int:
        return len(self.df)

    def __repr__(self) -> str:
        return f"{self.describe()}\n{self.df.to_string(index=False, float_format=significant)}"

    def _repr_html_(self) -> str:
        """The text form's header and the table, for notebooks."""
        head = "<br>".join(html.escape(line) for line in self.describe().splitlines())
        return f"<p><code>{head}</code></p>\n{self.df.to_html(index=False, float_format=significant)}"
