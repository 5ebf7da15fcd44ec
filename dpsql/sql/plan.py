"""Query plans: what one statement asks for, independent of matrices.

A :class:`QueryPlan` says which groups (GROUP BY keys over the public domain),
which rows (the WHERE predicate), which aggregates (COUNT, SUM with bounds,
AVG as SUM/COUNT), and what happens after noise (HAVING, ORDER BY, LIMIT,
OFFSET, run on the noisy answers by :meth:`QueryPlan.postprocess_sql`).
Expressions are sqlglot trees whose column references are resolved to the
schema's column names (unqualified).
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any, Sequence

from sqlglot import exp

__all__ = ["GroupKey", "Aggregate", "QueryPlan"]


@dataclass(frozen=True, eq=False)
class GroupKey:
    """One GROUP BY key. ``expr`` is a column or an expression (a ``CASE``
    bucketing, a boolean condition, integer arithmetic) over ``columns``;
    ``name`` is its output column; ``visible`` is False for a key that is
    grouped on but not selected."""

    name: str
    expr: exp.Expression
    columns: tuple[str, ...]
    visible: bool = True

    @property
    def sql(self) -> str:
        return self.expr.sql(dialect="duckdb")


@dataclass(frozen=True)
class Aggregate:
    """One aggregate. ``func`` is 'count', 'sum' or 'avg'; ``column`` is None
    for COUNT(*); ``bounds`` are the summed column's SUM bounds (lo, hi): each
    row contributes its value clamped to them, so one row changes a SUM by at
    most max(|lo|, |hi|). ``visible`` is False for an aggregate that only
    HAVING or ORDER BY mention. ``filter`` is the condition of ``FILTER (WHERE
    ...)``: the aggregate reads only the rows where it holds (ANDed with WHERE).
    For 'quantile_cont' and 'quantile_disc' (MEDIAN, QUANTILE_CONT/DISC,
    PERCENTILE_CONT/DISC ... WITHIN GROUP), ``quantile`` is the fraction and
    ``descending`` the order it counts in. For an AVG of a value that is 1, 0 or NULL on every
    row (a proportion, ``AVG(CASE WHEN c THEN 1 ELSE 0 END)``, ``AVG(c::INT)``), ``column`` is
    None, ``filter`` also requires the value not NULL, and ``indicator`` is the condition that
    it is 1: the AVG's SUM part counts the rows where ``indicator`` holds."""

    name: str
    func: str
    column: str | None = None
    bounds: tuple[float, float] | None = None
    visible: bool = True
    filter: exp.Expression | None = None
    quantile: float | None = None
    descending: bool = False
    #: for a quantile of a date column, the first day of its domain: its thresholds are days counted
    #: from it, read and interpolated as numbers, and its answers days again
    #: (:func:`~dpsql.sql.aggregates.as_days`)
    origin: datetime.date | None = None
    indicator: exp.Expression | None = None
    #: the value SUM or AVG reads, when not ``column`` itself: an expression of ``column`` alone,
    #: evaluated on its domain (a public lookup table's numeric column, a CASE over the join key);
    #: ``bounds`` are then its smallest and largest value there
    argument: exp.Expression | None = None

    @property
    def sensitivity(self) -> float:
        """Most one row can change this aggregate's SUM part (1 for COUNT)."""
        if self.func == "count" or self.bounds is None:
            return 1.0
        return float(max(abs(self.bounds[0]), abs(self.bounds[1])))


@dataclass(frozen=True, eq=False)
class QueryPlan:
    """A compiled-to-plan statement (see the module docstring)."""

    sql: str
    table: str
    keys: tuple[GroupKey, ...]
    aggregates: tuple[Aggregate, ...]
    where: exp.Expression | None
    outputs: tuple[str, ...]
    having: exp.Expression | None = None
    #: (expression over output names, descending?) per ORDER BY term
    order_by: tuple[tuple[exp.Expression, bool], ...] = ()
    limit: int | None = None
    offset: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    line: int | None = None
    #: select items DuckDB evaluates after noise, on the released columns: (output name, expression
    #: over output names) for constants and expressions over aggregates and keys
    computed: tuple[tuple[str, exp.Expression], ...] = ()
    #: GROUPING SETS, ROLLUP or CUBE: the grouping sets, each the indices of its keys in :attr:`keys`,
    #: in the order the SQL standard expands them; None for a plain GROUP BY (one set of every key).
    #: The result holds each set's groups in turn, its other keys NULL (the margins), and
    #: ``set_column``, a hidden column, holds each row's set (0-based) for ``GROUPING()``.
    grouping_sets: tuple[tuple[int, ...], ...] | None = None
    set_column: str | None = None
    #: window functions over the answers, (hidden column, window over output columns): computed
    #: after HAVING, before the select items and ORDER BY that read them, as SQL orders them
    windows: tuple[tuple[str, exp.Expression], ...] = ()
    #: QUALIFY: a condition over output names and :attr:`windows`, applied after the windows (an
    #: outer WHERE over an aggregate subquery that has windows is one too)
    qualify: exp.Expression | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        """Every column the statement reads (keys, WHERE, aggregates)."""
        seen: list[str] = []
        parts = [k.expr for k in self.keys] + ([self.where] if self.where is not None else [])
        parts += [c for a in self.aggregates for c in (a.filter, a.indicator) if c is not None]
        for part in parts:
            for c in part.find_all(exp.Column):
                if c.name not in seen:
                    seen.append(c.name)
        for a in self.aggregates:
            if a.column and a.column not in seen:
                seen.append(a.column)
        return tuple(seen)

    @property
    def has_postprocessing(self) -> bool:
        return (self.having is not None or self.qualify is not None or bool(self.order_by) or self.limit is not None
                or self.offset is not None or any(not k.visible for k in self.keys)
                or any(not a.visible for a in self.aggregates) or bool(self.computed))

    def postprocess_sql(self, relation: str = "answers", extra: Sequence[str] = ()) -> str:
        """SQL that turns the table of noisy answers (one column per key and
        aggregate, named as in :attr:`keys` and :attr:`aggregates`) into the
        statement's result: HAVING, ORDER BY, LIMIT and OFFSET applied, hidden
        columns dropped, columns in SELECT order, then the ``extra`` columns.

        >>> from dpsql.schema import load_schema
        >>> from dpsql.sql.analyze import plan_statement
        >>> s = load_schema({"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 3}}})
        >>> plan_statement("SELECT a, COUNT(*) AS n FROM t GROUP BY a HAVING n > 5 ORDER BY n DESC LIMIT 2", s).postprocess_sql()
        'SELECT "a", "n" FROM "answers" WHERE "n" > 5 ORDER BY "n" DESC LIMIT 2'
        """
        computed = dict(self.computed)
        source: exp.Expression = exp.Table(this=exp.to_identifier(relation, quoted=True))
        days = [exp.alias_(exp.cast(exp.column(a.name, quoted=True), "DATE" if a.func == "quantile_disc" else "TIMESTAMP"),
                           a.name, quoted=True) for a in self.aggregates if a.origin is not None]
        if days:  # a date column's quantiles: typed even where every group's is NULL (None has no type)
            source = exp.select(exp.Star(replace=days)).from_(source).subquery(relation, copy=False)
        having = self.having.copy() if self.having is not None else None
        if self.windows:  # windows see the groups HAVING keeps, and the select items see the windows
            inner = exp.select(exp.Star(), *[exp.alias_(w.copy(), name, quoted=True) for name, w in self.windows])
            inner = inner.from_(source).where(having) if having is not None else inner.from_(source)
            if self.qualify is not None:  # after the windows, before the select items
                inner = exp.select(exp.Star()).from_(inner.subquery(relation, copy=False)).where(self.qualify.copy())
            source, having = inner.subquery(relation, copy=False), None
        elif self.qualify is not None:
            having = self.qualify.copy() if having is None else exp.and_(having, self.qualify.copy())
        select = exp.select(*[exp.alias_(computed[name].copy(), name, quoted=True) if name in computed
                              else exp.column(name, quoted=True) for name in (*self.outputs, *extra)]).from_(source)
        if having is not None:
            select = select.where(having)
        if self.order_by:
            select = select.order_by(*[exp.Ordered(this=e.copy(), desc=d) for e, d in self.order_by])
        if self.limit is not None:
            select = select.limit(self.limit)
        if self.offset is not None:
            select = select.offset(self.offset)
        return select.sql(dialect="duckdb")
