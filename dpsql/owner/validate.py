"""Data validation for the data owner: which rows of the private table the analyst path drops.

The analyst path never reports messy data: a row whose value in a column a
measurement reads is outside the column's declared domain is silently dropped
from that measurement (:mod:`dpsql.private.measure`), and each privacy unit's rows
beyond ``max_rows`` are dropped at random. Those rules keep every release
differentially private, but the owner, who may see the data, wants to know
how much is dropped and why. :func:`validate` counts it, per column and per
reason, with a few example values, in a handful of SQL scans
(``dpsql validate --data … --schema …``).

**This report is not private.** It holds exact counts and raw data values;
it is for the data owner only and must never be shown to analysts.

Reasons, in the order they are tested (each bad row counts once per column):

* ``null``: NULL in a column that is not ``nullable``;
* ``nan``, ``inf``: a NaN or ±infinity (floating-point columns);
* ``type``: the column's SQL type cannot hold any domain value (a VARCHAR
  column for an integer domain, a DATE for anything); every non-NULL value;
* ``outside``: any other value not in the domain (a category not listed, an
  integer out of range or with a fraction, a number outside the bins).

**A view over the private table must be total**: it must give a value (or
NULL) for every row, never raise. A request is charged before the table is
read, so a view that raises on some row makes a charged request fail or not
depending on that one row, which no noise covers. dpsql reads a view through
its definition made safe (:func:`dpsql.private.backend.safe_view`: ``CAST``
becomes ``TRY_CAST``, row-level expressions are wrapped in ``TRY(...)``), but
it cannot wrap everything: ``error(...)``, a user macro, or a function dpsql
does not know (which may be volatile) run as written. :func:`view_hazards`
lists, in the table's view and every view it reads, each expression that can
raise on some row: a call of ``error``, a call of a user macro, and a ``CAST``
(or ``::``) whose input type does not always convert to its target (a
``VARCHAR`` to ``INTEGER``; ``TRY_CAST`` gives NULL instead and is fine).
:func:`validate` reports them as ``view_warnings``; rewrite each (``TRY_CAST``,
a ``CASE`` that yields NULL) so the view is total.

>>> import duckdb
>>> con = duckdb.connect()
>>> _ = con.execute("CREATE TABLE t AS SELECT * FROM (VALUES (30, 'F'), (41, 'X'), (NULL, 'M'), (200, 'F')) v(age, sex)")
>>> report = validate(con, {"table": "t", "columns": {"age": {"type": "integer", "min": 0, "max": 99},
...                                                 "sex": {"type": "categorical", "values": ["F", "M"]}}})
>>> report.rows, report.clean_rows, report.problems()
(4, 1, 3)
>>> [(c.name, c.counts, c.examples) for c in report.columns]
[('age', {'null': 1, 'outside': 1}, ['200']), ('sex', {'outside': 1}, ['X'])]
>>> _ = con.execute("CREATE VIEW v AS SELECT CAST(sex AS INTEGER) AS age, sex FROM t")
>>> view_hazards(con, "v")
['view v: CAST(sex AS INT) fails on a value that does not convert from VARCHAR to INT (TRY_CAST gives NULL)']
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from typing import Callable

import duckdb
import sqlglot
from sqlglot import exp

from dpsql.errors import ArgumentError, MeasurementError, SchemaError
from dpsql.private.backend import (
    MAX_VIEW_DEPTH,
    Backend,
    BackendError,
    DuckDBBackend,
    _view_definition,
    csv_unread_lines,
    duckdb_type_family,
    open_source,
)
from dpsql.private.columns import holds
from dpsql.private.measure import index_expression
from dpsql.schema import Categorical, Column, DateRange, Schema, load_schema

__all__ = ["ColumnReport", "UnitReport", "ValidationReport", "owner_report", "validate", "view_hazards", "REASONS"]

REASONS = ("null", "nan", "inf", "type", "outside")

#: Distinct bad values shown per column.
EXAMPLES = 5


@dataclass
class ColumnReport:
    """One column: its SQL type, rows dropped per reason (only nonzero reasons), examples."""

    name: str
    sql_type: str
    counts: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)
    type_problem: str | None = None
    #: how to read more of the column's values into the domain (surrounding spaces), if that would
    hint: str | None = None

    @property
    def dropped(self) -> int:
        return sum(self.counts.values())


@dataclass
class UnitReport:
    """The privacy unit: how many units, the most rows one has, and the rows beyond ``max_rows``."""

    column: str
    max_rows: int
    units: int
    largest: int
    units_over: int
    rows_over: int
    null_rows: int


@dataclass
class ValidationReport:
    """What :func:`validate` found. ``clean_rows`` have every schema column in its domain."""

    table: str
    rows: int
    clean_rows: int
    columns: list[ColumnReport]
    unit: UnitReport | None = None
    missing: list[str] = field(default_factory=list)
    #: expressions of the table's view (and the views it reads) that can raise on a row (:func:`view_hazards`)
    view_warnings: list[str] = field(default_factory=list)
    #: a CSV file's lines read as no row, by reason (:func:`~dpsql.private.backend.csv_unread_lines`)
    unread_lines: dict[str, int] = field(default_factory=dict)
    #: what those lines are and the fix, for the owner (:func:`~dpsql.private.backend.csv_unread_lines`)
    unread_note: str | None = None

    def problems(self) -> int:
        """Rows with some column out of its domain, plus rows beyond the unit bound, plus missing columns,
        plus a CSV file's lines read as no row."""
        over = self.unit.rows_over if self.unit is not None else 0
        return self.rows - self.clean_rows + over + len(self.missing) + sum(self.unread_lines.values())

    def __str__(self) -> str:
        lines = [f"table {self.table}: {self.rows:,} rows, {self.clean_rows:,} with every column in its "
                 f"declared domain ({self.rows - self.clean_rows:,} dropped from every answer)"]
        if self.unread_note:
            lines.append(f"  {self.unread_note}")
        for name in self.missing:
            lines.append(f"  {name}: MISSING from the table (every query fails)")
        for c in self.columns:
            if not c.counts and c.type_problem is None:
                lines.append(f"  {c.name} ({c.sql_type}): ok")
                continue
            parts = ", ".join(f"{n:,} {reason}" for reason, n in c.counts.items())
            lines.append(f"  {c.name} ({c.sql_type}): {c.dropped:,} rows outside the domain: {parts}")
            for note in (c.type_problem, c.hint):
                if note:
                    lines.append(f"    {note}")
            if c.examples:
                lines.append(f"    e.g. {', '.join(c.examples)}")
        if self.unit is not None:
            u = self.unit
            lines.append(f"  privacy unit {u.column}: {u.units:,} units, the largest has {u.largest:,} rows; "
                         f"{u.units_over:,} units exceed max_rows={u.max_rows} and lose {u.rows_over:,} rows "
                         f"(chosen at random per query); {u.null_rows:,} rows have a NULL unit (each its own unit)")
        for warning in self.view_warnings:
            lines.append(f"  warning: {warning}; a view must be total (never raise on a row)")
        lines.append("problems: none" if self.problems() == 0 else f"problems: {self.problems():,}")
        lines.append("This report shows exact counts and data values: for the data owner only.")
        return "\n".join(lines)


def _q(name: str) -> exp.Column:
    return exp.column(exp.to_identifier(name, quoted=True))


def _fixable(column: Column, c: exp.Expression, family: str | None) -> tuple[exp.Expression, Callable[[int], str]] | None:
    """A test of the values of a text column that a view (or a reading option) would bring into the
    domain, with the hint that names the fix (given the count of such rows): a categorical
    column's values that are in the domain once the spaces around them are trimmed (a CSV such as
    UCI's ``39, Female`` read without ``trim``), or a date column's text that is no date DuckDB reads
    (``01/31/2020``). None for any other column."""
    if family != "string":
        return None
    if isinstance(column, DateRange):
        unread = exp.and_(exp.not_(c.copy().is_(exp.null())),
                          exp.TryCast(this=c.copy(), to=exp.DataType.build("DATE"), safe=True).is_(exp.null()))
        name = exp.to_identifier(column.name).sql("duckdb")
        return unread, lambda n: (f"{n:,} of them are text that is no date DuckDB reads (YYYY-MM-DD): read the "
                                  f"column in a view that parses its form, such as strptime({name}, '%m/%d/%Y')::DATE")
    if not isinstance(column, Categorical) or column.is_numeric:
        return None
    trimmed = exp.func("trim", exp.cast(c.copy(), "VARCHAR"))
    index = index_expression(column, trimmed, "VARCHAR", outside=-1)
    return (exp.and_(exp.NEQ(this=trimmed.copy(), expression=exp.cast(c.copy(), "VARCHAR")),
                     exp.GTE(this=index, expression=exp.Literal.number(0))),
            lambda n: (f"{n:,} of them are in the domain once the spaces around them are removed: read the file "
                       "with dpsql.CSV(path, trim=True), or trim them (TRIM) in a view"))


def _rows(backend: DuckDBBackend, query: exp.Select) -> list[tuple]:
    """The rows of ``query``, run by ``backend`` so that a failure is a :class:`BackendError` whose
    text holds no data value (the engine's message only for a missing table or column)."""
    return list(zip(*backend.run(query).values()))


def validate(source: "duckdb.DuckDBPyConnection | str | os.PathLike", schema: "Schema | dict | str",
             table: str | None = None) -> ValidationReport:
    """Check a private table against its schema; see the module docstring (owner-only output).

    ``source`` is a DuckDB connection holding the table, a ``.duckdb`` file,
    or a CSV or Parquet file (read as ``table``, default the schema's). The
    table is read as a measurement reads it (:meth:`DuckDBBackend.source`): a
    view through its definition made safe, so a row whose value would make
    the view fail (a ``CAST`` of ``'zz'`` to INTEGER) holds NULL there and is
    reported as a ``null`` (dropped unless the column is nullable), as a
    measurement drops it. A missing table, or a failure while reading it, is a
    :class:`~dpsql.errors.MeasurementError` naming only the exception class of
    a failure while reading rows.
    """
    schema = load_schema(schema)
    name = table or schema.table
    backend = open_source(source, name, schema)  # the same reading rules as dpsql.connect
    if not isinstance(backend, DuckDBBackend):
        raise TypeError("validate reads DuckDB connections and files")
    try:
        if not backend.has_table(name):
            raise MeasurementError(f"validating table {name!r} failed: the data has no table or view of that name")
        return _report(backend, name, schema)
    except BackendError as e:
        raise MeasurementError(f"validating table {name!r} failed: {e.reason}") from None


def owner_report(backend: Backend, name: str, schema: Schema) -> ValidationReport:
    """The owner's check when connecting (``dpsql.connect(..., validate=True)``, the default for a file or
    data frame): :func:`validate`'s report of the table ``name``, which has every declared column. A table
    with rows of which none is in every column's domain is refused (a :class:`~dpsql.errors.SchemaError`
    with each column's counts): every answer would be noise over an empty table. Any other row outside a
    domain is a warning with the counts; the report, with examples, is ``db.validation``. Neither holds
    anything an analyst sees: the owner's process only."""
    if not isinstance(backend, DuckDBBackend):
        raise ArgumentError("validate=True reads DuckDB sources only; run dpsql validate on an extract")
    try:
        report = _report(backend, name, schema)
    except BackendError as e:
        raise MeasurementError(f"validating table {name!r} failed: {e.reason}") from None
    bad = [c for c in report.columns if c.counts]
    summary = [(f"columns.{c.name}", f"{c.dropped:,} rows outside the domain ("
                + ", ".join(f"{n:,} {r}" for r, n in c.counts.items()) + ")"
                + "".join(f"; {note}" for note in (c.type_problem, c.hint) if note)) for c in bad]
    if report.rows and not report.clean_rows:
        raise SchemaError(summary + [("", f"all {report.rows:,} rows have a column outside its declared domain, so "
                                          "every answer would be noise over an empty table: fix the schema or the "
                                          "reading options (dpsql validate shows examples), or connect with "
                                          "validate=False")], f"table {name}")
    if report.unread_lines and not report.rows:
        raise SchemaError([("", f"{report.unread_note}: no row is left, so every answer would be noise over an empty "
                                "table")], f"table {name}")
    if report.problems():
        lines = [f"table {name}: {report.rows - report.clean_rows:,} of {report.rows:,} rows have a column outside "
                 "its declared domain and are dropped from every answer"]
        lines += [f"  {report.unread_note}"] * bool(report.unread_note)
        lines += [f"  {path}: {message}" for path, message in summary]
        if report.unit is not None and report.unit.rows_over:
            lines.append(f"  privacy unit {report.unit.column}: {report.unit.rows_over:,} rows beyond max_rows")
        lines += [f"  warning: {w}" for w in report.view_warnings]
        lines.append("the connection's .validation has the report with examples (owner only)")
        warnings.warn("\n".join(lines), UserWarning, stacklevel=4)
    return report


def _report(backend: DuckDBBackend, name: str, schema: Schema) -> ValidationReport:
    """:func:`validate`'s scans of the table ``name``, which exists: one for every count, then
    one per column with a row outside its domain, for its examples."""
    source = backend.source(name)
    described = exp.select("column_name", "column_type").from_(
        exp.Subquery(this=exp.Describe(this=exp.select(exp.Star()).from_(source.copy()))))
    types = {c.lower(): t for c, t in _rows(backend, described)}
    present = [c for c in schema.columns if c.name.lower() in types]
    missing = [c.name for c in schema.columns if c.name.lower() not in types]

    # each row's reason per column (NULL: in the domain), computed once, then counted
    checks, counts, bads, fixes = [], [exp.Count(this=exp.Star())], [], []
    for i, col in enumerate(present):
        sql_type = types[col.name.lower()]
        family = duckdb_type_family(sql_type)
        c = _q(col.name)
        bad = exp.LT(this=index_expression(col, c, sql_type, outside=-1), expression=exp.Literal.number(0))
        bads.append(bad)
        as_double = exp.TryCast(this=c.copy(), to=exp.DataType.build("DOUBLE"), safe=True)
        numeric = family in ("float",)
        tests = {
            "null": exp.Is(this=c.copy(), expression=exp.null()),
            "nan": exp.func("isnan", as_double) if numeric else exp.false(),
            "inf": exp.func("isinf", as_double) if numeric else exp.false(),
            "type": exp.true() if not holds(col, family) else exp.false(),
        }
        reason = exp.Case(ifs=[exp.If(this=cond, true=exp.Literal.string(r)) for r, cond in tests.items()],
                          default=exp.Literal.string("outside"))
        fixable = _fixable(col, c, family)
        fixes.append(fixable[1] if fixable is not None else None)
        checks += [exp.alias_(exp.Case(ifs=[exp.If(this=bad.copy(), true=reason)]), f"r{i}"),
                   exp.alias_(fixable[0] if fixable is not None else exp.false(), f"t{i}")]
        r, t = exp.column(f"r{i}"), exp.column(f"t{i}")
        counts += [exp.func("count_if", exp.EQ(this=r.copy(), expression=exp.Literal.string(x))) for x in REASONS]
        counts.append(exp.func("count_if", exp.and_(exp.not_(r.copy().is_(exp.null())), t)))
    if bads:
        counts.append(exp.func("count_if", exp.and_(*[exp.column(f"r{i}").is_(exp.null()) for i in range(len(bads))])))
    checked = exp.Subquery(this=exp.select(*checks or [exp.alias_(exp.Literal.number(1), "one")]).from_(source.copy()),
                           alias=exp.TableAlias(this=exp.to_identifier("checked")))
    totals = [int(n or 0) for n in _rows(backend, exp.select(*counts).from_(checked))[0]]
    rows = totals[0]
    clean = totals[-1] if bads else rows
    reports = []
    for i, (col, bad) in enumerate(zip(present, bads)):
        sql_type = types[col.name.lower()]
        found = totals[1 + i * (len(REASONS) + 1):1 + (i + 1) * (len(REASONS) + 1)]
        by_reason = {r: n for r, n in zip(REASONS, found) if n}
        c = _q(col.name)
        shown = []
        if by_reason:
            examples = (exp.select(exp.alias_(exp.cast(c.copy(), "VARCHAR"), "v")).distinct()
                        .from_(source.copy())
                        .where(exp.and_(bad.copy(), exp.not_(exp.Is(this=c.copy(), expression=exp.null()))))
                        .order_by(exp.column("v")).limit(EXAMPLES))
            shown = [str(r[0]) for r in _rows(backend, examples)]
        problem = None if holds(col, duckdb_type_family(sql_type)) else \
            f"its SQL type {sql_type} cannot hold the declared {col.kind} domain: every non-NULL value is dropped"
        hint = fixes[i](found[-1]) if found[-1] else None
        reports.append(ColumnReport(col.name, str(sql_type), by_reason, shown, problem, hint))

    unit = None
    pu = schema.privacy_unit
    if pu.column is not None and pu.column.lower() in types:
        u = _q(pu.column)
        per = (exp.select(exp.alias_(exp.Count(this=exp.Star()), "k")).from_(source.copy())
               .where(exp.not_(exp.Is(this=u.copy(), expression=exp.null()))).group_by(u.copy()))
        k, bound = exp.column("k"), exp.Literal.number(pu.max_rows)
        zero = exp.Literal.number(0)
        summary = exp.select(
            exp.Count(this=exp.Star()),
            exp.func("coalesce", exp.Max(this=k.copy()), zero.copy()),
            exp.func("count_if", exp.GT(this=k.copy(), expression=bound.copy())),
            exp.func("coalesce", exp.Sum(this=exp.func("greatest", exp.Sub(this=k.copy(), expression=bound.copy()),
                                                       zero.copy())), zero.copy()),
        ).from_(exp.Subquery(this=per, alias=exp.TableAlias(this=exp.to_identifier("per"))))
        units, largest, over, rows_over = _rows(backend, summary)[0]
        nulls_q = (exp.select(exp.Count(this=exp.Star())).from_(source.copy())
                   .where(exp.Is(this=u.copy(), expression=exp.null())))
        nulls = _rows(backend, nulls_q)[0][0]
        unit = UnitReport(pu.column, int(pu.max_rows), int(units), int(largest), int(over), int(rows_over), int(nulls))
    elif pu.column is not None:
        missing.append(pu.column)
    unread, note = ({}, None) if backend.csv is None else csv_unread_lines(backend.con, backend.csv, int(rows))
    return ValidationReport(name, int(rows), int(clean), reports, unit, missing, view_hazards(backend.con, name),
                            unread, note)


def view_hazards(con: duckdb.DuckDBPyConnection, name: str) -> list[str]:
    """Each expression of the view ``name`` of ``con``, and of the views it reads, that can raise
    on some row: ``error(...)``, a user macro's call, a ``CAST`` whose input type does not always
    convert (see the module docstring). Empty for a table. Reads the catalog and binds queries
    (``DESCRIBE``), never rows."""
    macros = {str(r[0]).lower() for r in con.execute(
        "SELECT function_name FROM duckdb_functions() WHERE function_type IN ('macro', 'table_macro') "
        "AND NOT internal").fetchall()}
    found: list[str] = []
    pending, seen = [name], set()
    while pending and len(seen) <= MAX_VIEW_DEPTH:
        view = pending.pop()
        definition = _view_definition(con, view) if view.lower() not in seen else None
        seen.add(view.lower())
        if definition is None:
            continue
        try:
            create = sqlglot.parse_one(definition[0], read="duckdb")
        except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
            found.append(f"view {view}: dpsql cannot read its definition to check it")
            continue
        query = create.args.get("expression") if isinstance(create, exp.Create) else None
        if query is None:
            continue
        ctes = {c.alias_or_name.lower() for c in query.find_all(exp.CTE)}
        for node in query.walk():
            if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier) and node.name.lower() not in ctes:
                pending.append(node.name)
            called = node.name.lower() if isinstance(node, exp.Anonymous) else None
            if called == "error":
                found.append(f"view {view}: {_short(node)} raises on every row that reaches it")
            elif called in macros:
                found.append(f"view {view}: {_short(node)} calls the macro {called}(), which dpsql cannot check")
            elif type(node) is exp.Cast and node.this.find(exp.Column) is not None:
                problem = _failing_cast(con, query, node)
                if problem:
                    found.append(f"view {view}: {_short(node)} {problem}")
    return found


def _short(node: exp.Expression) -> str:
    text = node.sql(dialect="duckdb")
    return text if len(text) <= 80 else text[:77] + "..."


def _failing_cast(con: duckdb.DuckDBPyConnection, query: exp.Expression, cast: exp.Cast) -> str | None:
    """Why ``cast`` (in the view ``query``) can fail on a row, or None when its input type always
    converts to its target: the same type, a widening DuckDB does implicitly, or any type but BLOB
    to VARCHAR. The input's type is found by binding it alone in the cast's own FROM (DESCRIBE)."""
    target = cast.to.sql(dialect="duckdb")
    select = cast.find_ancestor(exp.Select)
    probe = exp.select(exp.alias_(cast.this.copy(), "x"))
    if select is not None and select.args.get("from_") is not None:
        probe = probe.from_(select.args["from_"].copy())
        probe.set("joins", [j.copy() for j in select.args.get("joins") or []])
    if query.args.get("with") is not None:
        probe.set("with", query.args["with"].copy())
    try:
        source = con.execute(f"DESCRIBE {probe.sql(dialect='duckdb')}").fetchall()[0][1]
        converts = con.execute(f"SELECT can_cast_implicitly(NULL::{source}, NULL::{target})").fetchone()[0]
    except duckdb.Error:
        return "may fail on some value (dpsql could not find its input type; TRY_CAST gives NULL)"
    if converts or source == target or (target.upper() in ("VARCHAR", "TEXT") and source != "BLOB"):
        return None
    return f"fails on a value that does not convert from {source} to {target} (TRY_CAST gives NULL)"
