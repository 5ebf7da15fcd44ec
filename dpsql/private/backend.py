"""Where measurement queries run: DuckDB (the default) or Apache Spark.

:mod:`dpsql.private.measure` builds one counting query as a :mod:`sqlglot`
expression; a :class:`Backend` is the one thing that knows how to run it
somewhere. It has three members:

* ``dialect``: the sqlglot dialect the query is rendered in
  (``"duckdb"``, ``"spark"``);
* :meth:`~Backend.column_types`: the *type family* of every column of a
  table (see :data:`FAMILIES`), read from the catalog without reading rows.
  :func:`dpsql.private.measure.index_expression` picks the value-to-index mapping
  from it, so the same cell gets the same index whatever the engine;
* :meth:`~Backend.source`: what a measurement reads FROM for a table. On
  DuckDB, a view is read through its definition with every ``CAST`` made a
  ``TRY_CAST`` and its row-level expressions wrapped in ``TRY(...)``, so that
  no row's value can make the counting query fail (:func:`safe_view`);
* :meth:`~Backend.run`: render, execute and return the result columns as
  numpy arrays. Only the aggregated counts of the query come back (one row
  per marginal cell seen), never rows of the table.

:func:`open_source` turns what ``dpsql.connect`` is given (a connection, a
file, a ``SparkSession``) into a backend. A CSV file is read line by line
with fixed dialect options and nothing sniffed (:func:`csv_view`): in a
sniffed read, one row could change the detected types, delimiter or line
ends, and with them every other row.

Failures of the engine are raised as :class:`BackendError`, whose text is
data-free: the engine's message is kept only for schema-level problems
found before any row is read (a missing table or column); for any other
failure only the exception class (and Spark's error condition name, e.g.
``CAST_INVALID_INPUT``) is kept, since a runtime message can quote a value.
:func:`dpsql.private.measure.measure_marginals` turns it into a
:class:`~dpsql.errors.MeasurementError`.

Noise, the budget ledger and strategy selection never run in a backend:
they stay in the Python process that calls :mod:`dpsql.private.kernel`.

>>> import duckdb
>>> from sqlglot import exp
>>> con = duckdb.connect()
>>> _ = con.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('a', 1), ('b', 2), ('a', 3)) v(s, x)")
>>> backend = backend_for(con)
>>> backend.dialect, backend.column_types("t")
('duckdb', {'s': 'string', 'x': 'int'})
>>> q = exp.select("s", exp.Count(this=exp.Star()).as_("n")).from_("t").group_by("s").order_by("s")
>>> {k: v.tolist() for k, v in backend.run(q).items()}
{'s': ['a', 'b'], 'n': [2, 1]}
"""

from __future__ import annotations

import abc
import csv
import decimal
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import duckdb
import numpy as np
import sqlglot
from sqlglot import exp

from dpsql.errors import ArgumentError

if TYPE_CHECKING:
    from dpsql.schema import Schema

__all__ = ["CSV", "FAMILIES", "Backend", "BackendError", "DuckDBBackend", "SparkBackend", "backend_for",
           "csv_unread_lines", "csv_view", "duckdb_type_family", "is_spark_session", "open_source", "opened_by_dpsql",
           "public_table", "safe_view", "scans_python_object", "spark_type_family", "table_expression"]

#: The type families a backend reports (what the domain-index mapping needs to know). ``uint``: unsigned
#: integers, which hold no negative value (DuckDB compares a UHUGEINT with a negative literal by casting
#: it to BIGINT, which fails on a large value). ``date``: a DATE, or a TIMESTAMP without a time zone
#: (read as its day).
FAMILIES = ("string", "int", "uint", "float", "decimal", "bool", "date", "null", "other")

_DUCKDB_FAMILIES = {
    "varchar": "string", "enum": "string", "json": "string",
    "tinyint": "int", "smallint": "int", "integer": "int", "bigint": "int", "hugeint": "int",
    "utinyint": "uint", "usmallint": "uint", "uinteger": "uint", "ubigint": "uint", "uhugeint": "uint",
    "bignum": "int", "varint": "int", "int": "int", "uint": "uint",
    "float": "float", "double": "float", "decimal": "decimal",
    "boolean": "bool", "bool": "bool", "null": "null", "other": "other",
    # a day, or a time of a day that no time zone changes (TIMESTAMP WITH TIME ZONE is "other": its
    # day is the session's time zone's)
    "date": "date", "timestamp": "date", "timestamp_s": "date", "timestamp_ms": "date", "timestamp_ns": "date",
    "datetime": "date",
}


def duckdb_type_family(sql_type: Any) -> str | None:
    """The family of a DuckDB column type (a ``duckdb`` type object, whose
    ``id`` is used, or a type name), or None when ``sql_type`` is None.

    Family names map to themselves, so a family is also a valid type here.

    >>> duckdb_type_family("DECIMAL(5,2)"), duckdb_type_family("VARCHAR"), duckdb_type_family("TIMESTAMP")
    ('decimal', 'string', 'date')
    >>> [duckdb_type_family(f) for f in FAMILIES] == list(FAMILIES)
    True
    """
    if sql_type is None:
        return None
    key = getattr(sql_type, "id", None)
    if not isinstance(key, str):
        key = str(sql_type)
    key = key.strip().lower().split("(", 1)[0].strip()
    if key.startswith("varchar") or key in ("text", "string", "char", "bpchar"):
        key = "varchar"
    return _DUCKDB_FAMILIES.get(key, "other")


def spark_type_family(simple_string: str) -> str:
    """The family of a Spark SQL type, given its ``DataType.simpleString()``.

    STRING (with any collation), CHAR(n) and VARCHAR(n) are strings;
    TINYINT … BIGINT ints; FLOAT and DOUBLE floats; DATE and TIMESTAMP_NTZ dates;
    VOID (an all-NULL column) is ``"null"``; TIMESTAMP (whose day is the session's
    time zone's), binary and nested types are ``"other"`` (never in a declared domain).

    >>> [spark_type_family(t) for t in ("string collate UTF8_LCASE", "varchar(3)", "tinyint", "bigint",
    ...                                 "double", "decimal(10,2)", "boolean", "void", "date", "timestamp", "array<int>")]
    ['string', 'string', 'int', 'int', 'float', 'decimal', 'bool', 'null', 'date', 'other', 'other']
    """
    key = simple_string.strip().lower()
    head = key.split("(", 1)[0].split("<", 1)[0].split(" ", 1)[0]
    if head in ("string", "varchar", "char"):
        return "string"
    if head in ("tinyint", "smallint", "int", "bigint", "byte", "short", "integer", "long"):
        return "int"
    if head in ("float", "double", "real"):
        return "float"
    return {"decimal": "decimal", "boolean": "bool", "void": "null", "null": "null", "date": "date",
            "timestamp_ntz": "date"}.get(head, "other")


def table_expression(table: "str | exp.Table") -> exp.Table:
    """A table reference: a string is ONE (quoted) identifier, whatever it
    contains; pass an ``exp.Table`` for a qualified name.

    >>> table_expression('my "odd" table').sql("duckdb"), table_expression("people").sql("spark")
    ('"my ""odd"" table"', '`people`')
    """
    if isinstance(table, exp.Table):
        return table.copy()
    return exp.Table(this=exp.to_identifier(table, quoted=True))


class BackendError(Exception):
    """A failed query, described without data values.

    ``reason`` is the engine's message when ``schema_level`` (a missing
    table or column: found before rows are read), else the exception class.
    """

    def __init__(self, reason: str, schema_level: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.schema_level = schema_level


class Backend(abc.ABC):
    """Where measurement queries run (see the module docstring)."""

    #: the sqlglot dialect queries are rendered in
    dialect: str = "duckdb"

    @abc.abstractmethod
    def column_types(self, table: "str | exp.Table") -> dict[str, str]:
        """Every column of ``table`` → its family (one of :data:`FAMILIES`), reading no rows."""

    @abc.abstractmethod
    def run(self, query: exp.Select) -> dict[str, np.ndarray]:
        """Execute ``query`` rendered in :attr:`dialect`; its result as one array per column."""

    @abc.abstractmethod
    def check(self, query: exp.Select) -> None:
        """Plan ``query`` without reading a row, so that what fails whatever the data holds (a
        missing column, a view DuckDB cannot bind) fails here, before the budget is charged."""

    def render(self, query: exp.Expression) -> str:
        """The SQL text this backend executes for ``query``."""
        return query.sql(dialect=self.dialect)

    def source(self, table: "str | exp.Table") -> exp.Expression:
        """What a measurement reads FROM for ``table`` (by default the table itself)."""
        return table_expression(table)

    @abc.abstractmethod
    def has_table(self, name: str) -> bool:
        """Whether a table or view called ``name`` exists (a catalog lookup: reads no rows)."""

    def _schema_query(self, table: "str | exp.Table") -> str:
        return self.render(exp.select(exp.Star()).from_(table_expression(table)).limit(0))


class DuckDBBackend(Backend):
    """Queries run on a DuckDB connection (or any object with DuckDB's
    ``sql`` and ``execute`` methods).

    >>> DuckDBBackend(duckdb.connect()).dialect
    'duckdb'
    """

    dialect = "duckdb"

    def __init__(self, con: "duckdb.DuckDBPyConnection", csv: "CSV | None" = None) -> None:
        self.con = con
        #: the CSV file the connection's view reads (:func:`open_source`), for the owner's line counts
        self.csv = csv

    def column_types(self, table: "str | exp.Table") -> dict[str, str]:
        try:
            rel = self.con.sql(self._schema_query(table))
            return {name: duckdb_type_family(t) for name, t in zip(rel.columns, rel.types)}
        except duckdb.Error as e:
            raise _duckdb_failure(e) from None

    def run(self, query: exp.Select) -> dict[str, np.ndarray]:
        try:
            return dict(self.con.execute(self.render(query)).fetchnumpy())
        except duckdb.Error as e:
            raise _duckdb_failure(e) from None

    def check(self, query: exp.Select) -> None:
        """Bind and plan ``query`` as a prepared statement, dropped at once. (Not ``EXPLAIN``, which
        plans the same but then prints the plan: 0.8 s for the literal of an 85,000-value domain.)"""
        name = f"_dpsql_check_{secrets.token_hex(8)}"
        try:
            self.con.execute(f"PREPARE {name} AS {self.render(query)}")
        except duckdb.Error as e:
            raise _duckdb_failure(e) from None
        self.con.execute(f"DEALLOCATE {name}")

    def source(self, table: "str | exp.Table") -> exp.Expression:
        """``table``, or for a view, its definition made safe (:func:`safe_view`)."""
        if isinstance(table, str):
            try:
                view = safe_view(self.con, table)
            except duckdb.Error as e:
                raise _duckdb_failure(e) from None
            if view is not None:
                return view
        return table_expression(table)

    def create_temporary(self, name: exp.Table, query: exp.Select) -> None:
        """``CREATE TEMPORARY TABLE name AS query``: a table of this connection alone, in memory
        (spilled to disk when large), which a read-only database file also allows."""
        try:
            self.con.execute(f"CREATE TEMPORARY TABLE {name.sql('duckdb')} AS {self.render(query)}")
        except duckdb.Error as e:
            raise _duckdb_failure(e) from None

    def has_table(self, name: str) -> bool:
        try:
            return _catalog_has(self.con, name)
        except duckdb.Error as e:
            raise _duckdb_failure(e) from None


def _catalog_has(con: "duckdb.DuckDBPyConnection", name: str) -> bool:
    """Whether a table or view ``name`` (any case, any schema) is in ``con``'s catalogs."""
    return con.execute(
        "SELECT count(*) FROM (SELECT table_name AS name FROM duckdb_tables() UNION ALL "
        "SELECT view_name FROM duckdb_views() WHERE NOT internal) WHERE lower(name) = lower(?)",
        [name]).fetchall()[0][0] > 0


#: Deepest chain of views (a view reading a view ...) that :func:`safe_view` rewrites.
MAX_VIEW_DEPTH = 16
#: Table functions whose view text cannot be run again (they scan a Python object).
_OBJECT_SCANS = ("pandas_scan", "arrow_scan", "arrow_scan_dumb", "python_map_function")
#: Functions that TRY(...) must not wrap (volatile) or that may be volatile (unknown to sqlglot).
_VOLATILE = (exp.Rand, exp.Anonymous, exp.Uuid)


def _view_definition(con: "duckdb.DuckDBPyConnection", name: str) -> tuple[str, list[str]] | None:
    """The SQL text and column names of the view ``name`` as DuckDB resolves an unqualified name
    (temporary objects first, then the current schema), or None when ``name`` is not a view."""
    rows = con.execute(
        "SELECT v.sql, v.database_name, v.schema_name, v.view_oid FROM duckdb_views() v "
        "WHERE NOT v.internal AND lower(v.view_name) = lower(?) AND (v.temporary OR "
        "(v.database_name = current_database() AND v.schema_name = current_schema())) "
        "ORDER BY v.temporary DESC LIMIT 1", [name]).fetchall()
    if not rows:
        return None
    sql, _, _, oid = rows[0]
    columns = [r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_oid = ? ORDER BY column_index", [oid]).fetchall()]
    return sql, columns


#: Nodes TRY(...) cannot wrap, or whose meaning it would change: aggregates, windows, subqueries,
#: set-returning functions (UNNEST) and lambdas.
_NOT_ROW_LEVEL = (exp.AggFunc, exp.Window, exp.Select, exp.Subquery, exp.SetOperation, exp.Unnest, exp.Explode,
                  exp.Lambda, *_VOLATILE)
#: Comparisons, whose sides are wrapped rather than the comparison (see :func:`_guard`).
_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.NullSafeEQ, exp.NullSafeNEQ)
#: Nodes no row's value can make fail: nothing to wrap.
_ATOMS = (exp.Column, exp.Literal, exp.Null, exp.Boolean, exp.Star, exp.Identifier, exp.Var, exp.Placeholder,
          exp.Parameter, exp.Try)


def _row_level(e: exp.Expression) -> bool:
    """Whether TRY(e) is allowed and means the same per row: no aggregate, window, subquery,
    set-returning or (possibly) volatile function inside."""
    return not any(isinstance(n, _NOT_ROW_LEVEL) for n in e.walk())


def _map_args(node: exp.Expression, fn: "Callable[[exp.Expression], exp.Expression]") -> exp.Expression:
    """``node`` with ``fn`` applied to each of its child expressions."""
    for key, child in list(node.args.items()):
        if isinstance(child, exp.Expression):
            node.set(key, fn(child))
        elif isinstance(child, list):
            node.set(key, [fn(c) if isinstance(c, exp.Expression) else c for c in child])
    return node


def _guard(node: exp.Expression) -> exp.Expression:
    """``node`` with each largest subexpression that could fail on a row's value (one that reads a
    column, and is not just a column) wrapped in ``TRY(...)``. What TRY cannot wrap (an aggregate, a window,
    an UNNEST ...) is entered and its arguments wrapped; a nested SELECT is left to its own pass
    (:func:`_guard_select`)."""
    if isinstance(node, (exp.Select, exp.Subquery, exp.SetOperation, *_ATOMS)) or node.find(exp.Column) is None:
        return node  # what reads no column fails on every table or on none
    if isinstance(node, (exp.PropertyEQ, exp.Kwarg)):  # a named argument (x := v): its value
        node.set("expression", _guard(node.expression))
        return node
    if isinstance(node, (exp.Connector, exp.Not, exp.Paren, *_COMPARISONS)):
        # each side on its own: a join's equalities (ASOF's inequality) must stay visible to
        # DuckDB, or a hash join becomes a nested loop; two columns compared cannot fail
        return _map_args(node, _guard)
    if isinstance(node, exp.Condition) and _row_level(node):
        return exp.Try(this=node)
    if isinstance(node, exp.Window):  # ROW_NUMBER() and the like must stay the window's function
        node.set("this", _map_args(node.this, _guard))
        return _map_args(node, lambda c: c if c is node.this else _guard(c))
    return _map_args(node, _guard)


def _guard_query(query: exp.Expression) -> None:
    """Wrap in TRY(...) what ``query`` computes from a row's values (see :func:`_guard`): in every
    SELECT (:func:`_guard_select`), every join condition and the arguments of every UNNEST and
    table function, in set operations, subqueries, CTEs and parenthesized joins alike."""
    for select in list(query.find_all(exp.Select)):
        _guard_select(select)
    for join in list(query.find_all(exp.Join)):
        if join.args.get("on") is not None:
            join.set("on", _guard(join.args["on"]))
    for unnest in list(query.find_all(exp.Unnest)):
        _map_args(unnest, _guard)
    for table in list(query.find_all(exp.Table)):  # a table function's arguments: range(10 // k)
        if isinstance(table.this, exp.Func):
            _map_args(table.this, _guard_argument)


def _group_key(select: exp.Select, key: exp.Expression) -> exp.Expression:
    """What the GROUP BY item ``key`` groups on: the output it names by position or alias, else itself."""
    items = select.expressions
    if isinstance(key, exp.Literal) and key.is_int and 1 <= int(key.name) <= len(items):
        key = items[int(key.name) - 1]
    elif isinstance(key, exp.Column) and not key.table:
        key = next((i for i in items if isinstance(i, exp.Alias) and i.alias.lower() == key.name.lower()), key)
    return key.this if isinstance(key, exp.Alias) else key


def _guard_argument(arg: exp.Expression) -> exp.Expression:
    """:func:`_guard` of a table function's argument; of a named one (``header = true``, which
    DuckDB's catalog keeps in parentheses), its value."""
    named = arg.unnest()
    if isinstance(named, (exp.EQ, exp.PropertyEQ, exp.Kwarg)) and isinstance(named.this, (exp.Column, exp.Var,
                                                                                          exp.Identifier)):
        named.set("expression", _guard(named.expression))
        return arg
    return _guard(arg)


def _guard_select(select: exp.Select) -> None:
    """Wrap, in TRY(...), what one SELECT computes from a row's values: its output expressions,
    WHERE, GROUP BY keys, HAVING, QUALIFY and ORDER BY (inside aggregates and windows, their
    arguments). A GROUP BY key that is an expression is wrapped the same way
    wherever it appears in the SELECT, so DuckDB still matches the outputs to the key."""
    group = select.args.get("group")
    items = list(group.expressions) if group else []
    for node in group.find_all(exp.GroupingSets, exp.Rollup, exp.Cube) if group else ():
        items.extend(e for x in node.expressions for e in (x.expressions if isinstance(x, exp.Tuple) else [x]))
    keys = [k for k in (_group_key(select, k) for k in items)
            if not isinstance(k, (*_ATOMS, exp.GroupingSets, exp.Rollup, exp.Cube, exp.Tuple))
            and k.find(exp.Column) is not None and _row_level(k)]

    def same_key(node: exp.Expression) -> exp.Expression:
        if isinstance(node, (exp.Select, exp.Subquery, exp.SetOperation)):
            return node
        if any(node == k for k in keys):
            return exp.Try(this=node)
        return _map_args(node, same_key)

    clauses = [key for key in ("expressions", "where", "group", "having", "qualify", "order", "distinct")
               if select.args.get(key) is not None]
    for fn in ([same_key] if keys else []) + [_guard]:
        for key in clauses:
            value = select.args[key]
            select.set(key, [fn(v) for v in value] if isinstance(value, list) else fn(value))


def scans_python_object(backend: Backend, name: str) -> bool:
    """Whether ``name`` is a DuckDB view that scans a Python object (a registered pandas DataFrame or
    Arrow table). DuckDB types such a scan's object columns from a sample of rows, so a value
    after the sample can fail the read or be converted (2.5 read into an integer column as 2)."""
    found = _view_definition(backend.con, name) if isinstance(backend, DuckDBBackend) else None
    return found is not None and any(f"{scan}(" in found[0].lower() for scan in _OBJECT_SCANS)


def safe_view(con: "duckdb.DuckDBPyConnection", name: str, depth: int = 0) -> exp.Subquery | None:
    """The view ``name`` of ``con`` as a subquery that no row's value can make fail, or None when
    ``name`` is not a view (or is one whose text cannot be run again: a registered DataFrame).

    The view's SQL is read from the catalog (not data) and rewritten: every ``CAST`` becomes a
    ``TRY_CAST``; everything computed from a row's values, in every SELECT of it (set operations,
    subqueries and CTEs too), is wrapped in ``TRY(...)`` (DuckDB's "NULL on error"): outputs,
    WHERE, join conditions, GROUP BY keys, HAVING, QUALIFY, ORDER BY, and the arguments of
    aggregates, windows, UNNEST and table functions (:func:`_guard_query`); and the views it
    reads are inlined the same way, up to :data:`MAX_VIEW_DEPTH` deep. A value that would have
    made the view fail is then NULL, which the measurement counts as outside the domain (a
    row-level filter, like any other out-of-domain value), and a condition it would have made
    fail is NULL, which drops the row. What TRY cannot wrap (an aggregate or window function
    itself, a function sqlglot does not know, which may be volatile) is left as it is; the
    kernel charges the budget before reading, so a failure there is fail-closed.

    >>> con = duckdb.connect()
    >>> _ = con.execute("CREATE TABLE raw AS SELECT * FROM (VALUES ('1'), ('x')) v(a)")
    >>> _ = con.execute("CREATE VIEW people AS SELECT CAST(a AS INTEGER) AS age FROM raw")
    >>> view = safe_view(con, "people")
    >>> view.sql("duckdb")
    '(SELECT TRY(TRY_CAST(a AS INT)) AS age FROM raw) AS "people"("age")'
    >>> con.sql(f"SELECT age FROM {view.sql('duckdb')} ORDER BY age").fetchall()
    [(1,), (None,)]
    """
    found = _view_definition(con, name)
    if found is None:
        return None
    sql, columns = found
    if depth >= MAX_VIEW_DEPTH:
        raise BackendError(f"views nested more than {MAX_VIEW_DEPTH} deep under {name!r}", schema_level=True)
    try:
        create = sqlglot.parse_one(sql, read="duckdb")
    except (sqlglot.errors.ParseError, sqlglot.errors.TokenError):
        return None
    query = create.args.get("expression") if isinstance(create, exp.Create) else None
    if query is None or any(isinstance(f, exp.Func) and f.sql_name().lower() in _OBJECT_SCANS
                            or (isinstance(f, exp.Anonymous) and str(f.this).lower() in _OBJECT_SCANS)
                            for f in query.walk()):
        return None
    ctes = {c.alias_or_name.lower() for c in query.find_all(exp.CTE)}

    def inline(node: exp.Expression) -> exp.Expression:
        if (isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier) and not node.args.get("db")
                and node.name.lower() not in ctes):
            inner = safe_view(con, node.name, depth + 1)
            if inner is not None:
                alias = node.alias or node.name
                inner.set("alias", exp.TableAlias(this=exp.to_identifier(alias, quoted=True),
                                                  columns=inner.args["alias"].args.get("columns")))
                return inner
        return node

    query = query.transform(inline)
    for cast in [c for c in query.find_all(exp.Cast) if type(c) is exp.Cast]:  # nested casts too
        cast.replace(exp.TryCast(**{**cast.args, "safe": True}))
    _guard_query(query)
    return exp.Subquery(this=query, alias=exp.TableAlias(
        this=exp.to_identifier(name, quoted=True), columns=[exp.to_identifier(c, quoted=True) for c in columns]))


def _duckdb_failure(e: BaseException) -> BackendError:
    """A DuckDB error as a BackendError: a catalog or binder error (found before any row is read)
    by its first line (the lines after it quote the SQL, which may be a view's definition), any
    other by its class alone."""
    if isinstance(e, (duckdb.CatalogException, duckdb.BinderException)):
        return BackendError(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__,
                            schema_level=True)
    return BackendError(type(e).__name__, schema_level=False)


class SparkBackend(Backend):
    """Queries run on Apache Spark through a ``SparkSession`` (classic or
    Spark Connect), as Spark SQL rendered by sqlglot's ``spark`` dialect.

    The query is planned and executed by Spark where the data lives; the
    driver collects only its result, the aggregated marginal counts (at
    most one row per cell of the requested marginals). Tables and temp
    views are named as for DuckDB: a string is one identifier (register a
    temp view, or pass an ``exp.Table``, for a ``db.table`` name).
    pyspark is imported only when a SparkBackend is made.
    """

    dialect = "spark"

    def __init__(self, spark: Any) -> None:
        from pyspark.errors import AnalysisException, PySparkException  # pyspark >= 3.4

        errors: list[type[BaseException]] = [PySparkException]
        try:
            from py4j.protocol import Py4JError  # classic sessions only
            errors.append(Py4JError)
        except ImportError:  # pragma: no cover - Spark Connect without py4j
            pass
        self.spark = spark
        self._analysis = AnalysisException
        self._errors = tuple(errors)

    def column_types(self, table: "str | exp.Table") -> dict[str, str]:
        try:  # analysis only: a LIMIT 0 query is planned, not run
            fields = self.spark.sql(self._schema_query(table)).schema.fields
            return {f.name: spark_type_family(f.dataType.simpleString()) for f in fields}
        except self._errors as e:
            raise self._failure(e) from None

    def run(self, query: exp.Select) -> dict[str, np.ndarray]:
        try:
            df = self.spark.sql(self.render(query))
            names = list(df.columns)
            rows = df.collect()
        except self._errors as e:
            raise self._failure(e) from None
        return {name: np.array([r[i] for r in rows]) for i, name in enumerate(names)}

    def check(self, query: exp.Select) -> None:
        try:  # spark.sql analyzes the query; nothing runs until an action
            self.spark.sql(self.render(query))
        except self._errors as e:
            raise self._failure(e) from None

    def has_table(self, name: str) -> bool:
        try:
            return bool(self.spark.catalog.tableExists(name))
        except self._errors as e:
            raise self._failure(e) from None

    def _failure(self, e: BaseException) -> BackendError:
        if isinstance(e, self._analysis):  # raised while planning, before any row is read
            return BackendError(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__,
                                schema_level=True)
        condition = None
        for getter in ("getCondition", "getErrorClass"):
            try:
                condition = getattr(e, getter)()
                break
            except Exception:  # not a Spark error with a condition name
                continue
        return BackendError(type(e).__name__ + (f" {condition}" if isinstance(condition, str) else ""),
                            schema_level=False)


def is_spark_session(obj: Any) -> bool:
    """Whether ``obj`` is a pyspark ``SparkSession`` (classic or Connect),
    decided from its class names, without importing pyspark.

    >>> is_spark_session(duckdb.connect()), is_spark_session("persons")
    (False, False)
    """
    return any(c.__name__ == "SparkSession" and c.__module__.startswith("pyspark.")
               for c in type(obj).__mro__)


def backend_for(source: Any) -> Backend:
    """The backend for ``source``: a :class:`Backend` itself, a
    ``SparkSession`` (:class:`SparkBackend`), or a DuckDB connection
    (:class:`DuckDBBackend`; also any object with DuckDB's ``sql`` and
    ``execute`` methods).

    >>> type(backend_for(duckdb.connect())).__name__
    'DuckDBBackend'
    >>> backend_for(42)
    Traceback (most recent call last):
    ...
    TypeError: cannot run measurement queries on a int: pass a DuckDB connection, a SparkSession or a Backend
    """
    if isinstance(source, Backend):
        return source
    if is_spark_session(source):
        return SparkBackend(source)
    if isinstance(source, duckdb.DuckDBPyConnection) or (hasattr(source, "sql") and hasattr(source, "execute")):
        return DuckDBBackend(source)
    raise TypeError(f"cannot run measurement queries on a {type(source).__name__}: "
                    "pass a DuckDB connection, a SparkSession or a Backend")


#: File name suffixes :func:`open_source` reads, and how.
_DATABASE_SUFFIXES = (".duckdb", ".db", ".ddb")
_CSV_DELIMITERS = {".csv": ",", ".tsv": "\t"}
#: Data frames :func:`open_source` copies into a table: (module, class name) of the class or a base.
_FRAMES = {("pandas", "DataFrame"), ("polars", "DataFrame"), ("pyarrow", "Table")}


@dataclass(frozen=True)
class CSV:
    """A delimited text file and how to read it, as a source for ``dpsql.connect`` (a path ending in
    ``.csv`` or ``.tsv`` is ``CSV(path)``). ``names``: the file's column names in order, for a file
    whose first line is already a row (UCI's ``adult.data``); None reads them from its first line.
    ``delimiter``: one character, by default a tab for a ``.tsv`` name and a comma otherwise.
    ``trim``: remove the spaces around every value (``39, Female`` reads as ``Female``).

    >>> CSV("adult.data", names=["age", "sex"], trim=True).delimiter_or_default
    ','
    """

    path: "str | os.PathLike"
    names: "Sequence[str] | None" = None
    delimiter: "str | None" = None
    trim: bool = False

    @property
    def delimiter_or_default(self) -> str:
        """The delimiter given, or the one of the file name's suffix."""
        return self.delimiter or _CSV_DELIMITERS.get(Path(self.path).suffix.lower(), ",")


def _frame_kind(source: Any) -> str | None:
    """``"pandas"``, ``"polars"`` or ``"pyarrow"`` for a data frame of that library (told from its class,
    without importing the library), else None."""
    return next((c.__module__.split(".")[0] for c in type(source).__mro__
                 if (c.__module__.split(".")[0], c.__name__) in _FRAMES), None)


def opened_by_dpsql(source: Any) -> bool:
    """Whether :func:`open_source` reads ``source`` into a connection of its own: a CSV or Parquet file or a
    data frame, whose every row the owner hands over (a DuckDB connection or file, or Spark, is the owner's
    own database, which may be large).

    >>> opened_by_dpsql("people.csv"), opened_by_dpsql("people.duckdb"), opened_by_dpsql(duckdb.connect())
    (True, False, False)
    """
    if isinstance(source, CSV) or _frame_kind(source) is not None:
        return True
    return isinstance(source, (str, os.PathLike)) and Path(source).suffix.lower() not in _DATABASE_SUFFIXES


def open_source(source: Any, table: str, schema: "Schema") -> Backend:
    """Where ``dpsql.connect`` finds the private table ``table``, as a backend.

    A DuckDB connection, a ``SparkSession`` or a :class:`Backend` is used as
    it is. A ``.duckdb`` (``.db``, ``.ddb``) file is opened read-only; a
    Parquet file is read as ``table`` (its column types are in the file's
    metadata); a CSV or TSV file, or a :class:`CSV`, is read by :func:`csv_view`.
    A pandas or Polars DataFrame or an Arrow table is copied into a table
    ``table`` of a connection of its own (:func:`_copy_frame`). The format of a
    path is told by its last suffix (any case). Anything else, or a file
    that cannot be opened as its format, raises :class:`~dpsql.errors.ArgumentError`
    naming the file: found when connecting, from the owner's arguments and the
    file's format. It repeats DuckDB's message for a database or Parquet file
    (opening one reads its metadata, and for Parquet every string of the schema's
    columns, since one that is not UTF-8 fails every read), only the exception
    class for a CSV file.

    >>> open_source("no/such/people.csv", "people", None)
    Traceback (most recent call last):
    ...
    dpsql.errors.ArgumentError: source: no such data file: no/such/people.csv
    """
    if isinstance(source, (duckdb.DuckDBPyConnection, Backend)) or is_spark_session(source):
        return backend_for(source)
    kind = _frame_kind(source)
    if kind is not None:
        return _copy_frame(source, kind, table)
    csv_options = source if isinstance(source, CSV) else None
    if csv_options is not None:
        source = csv_options.path
    if not isinstance(source, (str, os.PathLike)):
        raise ArgumentError("source must be a DuckDB connection, a SparkSession, a Backend, a file path, a dpsql.CSV, "
                            f"or a pandas, Polars or Arrow table; got {type(source).__name__}")
    path = Path(source)
    if not path.exists():
        raise ArgumentError(f"source: no such data file: {path}")
    if path.is_dir():
        raise ArgumentError(f"source: {path} is a directory, not a data file")
    suffix = path.suffix.lower()
    if csv_options is None and suffix not in (*_DATABASE_SUFFIXES, ".parquet", *_CSV_DELIMITERS):
        raise ArgumentError(f"source: cannot tell the format of {path} from its name: use .duckdb, .csv, .tsv or "
                            ".parquet (compressed files are not read: decompress them first), or "
                            "dpsql.CSV(path) for a delimited text file of another name")
    if csv_options is None and suffix in _CSV_DELIMITERS:
        csv_options = CSV(path)
    if suffix not in _DATABASE_SUFFIXES and any(c in str(path) for c in "*?["):
        raise ArgumentError(f"source: DuckDB reads *, ? and [ in a file's path as a pattern, which can match other "
                            f"files than {path}: rename it, or give a DuckDB connection that reads it")
    try:
        if csv_options is not None:
            con = duckdb.connect()
            con.execute(csv_view(path, table, schema, csv_options.delimiter_or_default, names=csv_options.names,
                                 trim=csv_options.trim))
            return DuckDBBackend(con, csv_options)
        if suffix in _DATABASE_SUFFIXES:
            return DuckDBBackend(duckdb.connect(str(path), read_only=True))
        con = duckdb.connect()
        con.read_parquet(str(path)).create_view(table)
        _check_utf8(con, table, schema)
    except duckdb.Error as e:  # DuckDB's message, but for a CSV file's (it could quote a line) only its class
        lines = [] if csv_options is not None else str(e).strip().splitlines()
        reason = lines[0] if lines else type(e).__name__
        what = "csv" if csv_options is not None else suffix[1:]
        raise ArgumentError(f"source: cannot open {path} as a {what} file: {reason}") from None
    return DuckDBBackend(con)


def _copy_frame(frame: Any, kind: str, table: str) -> DuckDBBackend:
    """A connection of its own holding ``frame`` copied into the table ``table``, with the column types
    DuckDB gives the frame's columns: a copy, not a view of the frame, so a value DuckDB cannot convert
    fails here, when the owner connects, and what a query reads cannot change after connecting."""
    con = duckdb.connect()
    try:
        data = frame.to_arrow() if kind == "polars" else frame
        con.register("dpsql_source_frame", data)
        con.execute(f"CREATE TABLE {exp.to_identifier(table, quoted=True).sql('duckdb')} AS "
                    "SELECT * FROM dpsql_source_frame")
        con.unregister("dpsql_source_frame")
    except duckdb.Error as e:  # its message may quote a value
        raise ArgumentError(f"source: cannot copy the {kind} table into DuckDB ({type(e).__name__}); convert its "
                            "columns to plain numbers, strings and booleans first") from None
    return DuckDBBackend(con)


def _check_utf8(con: duckdb.DuckDBPyConnection, table: str, schema: "Schema | None") -> None:
    """Read every string of the schema's columns in Parquet view ``table`` once: DuckDB fails a whole
    scan on one string that is not UTF-8, so such a file would fail every measurement after its
    spend, whether it failed depending on the data. Found here, it is the owner's error when
    connecting."""
    declared = {c.name.lower() for c in schema.columns} if schema is not None else set()
    rel = con.sql(f"SELECT * FROM {exp.to_identifier(table, quoted=True).sql('duckdb')} LIMIT 0")
    strings = [c for c, t in zip(rel.columns, rel.types) if c.lower() in declared
               and duckdb_type_family(t) == "string"]
    if strings:
        lengths = [exp.func("count", exp.Length(this=exp.column(c, quoted=True))) for c in strings]
        con.execute(exp.select(*lengths).from_(exp.to_identifier(table, quoted=True)).sql("duckdb")).fetchall()


def public_table(backend: Backend, name: str, max_rows: int) -> dict[str, list]:
    """The columns and rows of table ``name`` of the owner's source, as a ``public_tables:`` entry
    (``{"columns": [...], "rows": [[...], ...]}``), for a table the owner marks public when
    connecting. Values become what a schema declares: NULL and NaN are None, numbers and
    booleans Python's, DECIMALs numbers, and any other type (dates, times, lists...) its text as
    the engine casts it. Raises :class:`~dpsql.errors.ArgumentError` when the table has more than
    ``max_rows`` rows or cannot be read: the owner's own public table, so its size and error are
    not secret.
    """
    try:
        types = backend.column_types(name)
        items = [exp.cast(exp.column(c, quoted=True), "text") if family in ("date", "other") else exp.column(c, quoted=True)
                 for c, family in types.items()]
        data = backend.run(exp.select(*[exp.alias_(e, c, quoted=True) for e, c in zip(items, types)])
                           .from_(table_expression(name)).limit(max_rows + 1))
    except BackendError as e:
        raise ArgumentError(f"public_tables: cannot read public table {name!r}: {e.reason}") from None
    columns = list(data)
    rows = [list(r) for r in zip(*(_python_values(data[c]) for c in columns))]
    if len(rows) > max_rows:
        raise ArgumentError(f"public_tables: public table {name!r} has more than {max_rows:,} rows (each becomes "
                            "a branch of the lookup's CASE); declare a smaller one")
    return {"columns": columns, "rows": rows}


def _python_values(values: np.ndarray) -> list:
    mask = np.ma.getmaskarray(values) if np.ma.isMaskedArray(values) else np.zeros(len(values), bool)
    return [None if m else _python_value(v) for v, m in zip(np.asarray(values), mask)]


def _python_value(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    if v is None or (isinstance(v, float) and v != v):
        return None
    return float(v) if isinstance(v, decimal.Decimal) else v


def _typed(field: exp.Expression, sql_type: str) -> exp.Expression:
    """``TRY_CAST(field AS sql_type)``; into an integer type only a field that reads as an integral number
    (DuckDB's text-to-integer cast rounds ``'17.5'`` to 18, where a DOUBLE 17.5 is outside the domain)."""
    if duckdb_type_family(sql_type) == "int":
        as_double = exp.TryCast(this=field.copy(), to=exp.DataType.build("DOUBLE"), safe=True)
        integral = exp.EQ(this=exp.Mod(this=as_double, expression=exp.Literal.number(1)),
                          expression=exp.Literal.number(0))
        field = exp.Case(ifs=[exp.If(this=integral, true=field)])
    return exp.TryCast(this=field, to=exp.DataType.build(sql_type), safe=True)


def _field_pattern(delimiter: str, trim: bool) -> str:
    r"""The RE2 pattern of one field after its ``delimiter``, in a line with the delimiter put before
    it (so every field, the first and empty ones too, follows one): a double-quoted field, which
    may hold the delimiter and ``""`` (with ``trim``, spaces around it), or any text up to
    the next delimiter. Its first group is the field.

    >>> _field_pattern(",", False)
    '\\x{2c}("(?:[^"]|"")*"|[^\\x{2c}]*)'
    """
    d = f"\\x{{{ord(delimiter):x}}}"
    space = " *" if trim else ""  # spaces, as TRIM strips (a tab may be the delimiter)
    return f'{d}({space}"(?:[^"]|"")*"{space}|[^{d}]*)'


def _unquoted(field: exp.Expression) -> exp.Expression:
    """A CSV field without its surrounding double quotes (``""`` inside becomes ``"``)."""
    quoted = exp.and_(exp.GTE(this=exp.Length(this=field.copy()), expression=exp.Literal.number(2)),
                      exp.func("starts_with", field.copy(), exp.Literal.string('"')),
                      exp.func("ends_with", field.copy(), exp.Literal.string('"')))
    inner = exp.func("replace", exp.Substring(this=field.copy(), start=exp.Literal.number(2),
                                              length=exp.Sub(this=exp.Length(this=field.copy()),
                                                             expression=exp.Literal.number(2))),
                     exp.Literal.string('""'), exp.Literal.string('"'))
    return exp.Case(ifs=[exp.If(this=quoted, true=inner)], default=field.copy())


#: Longest first line (the header) of a CSV file that :func:`csv_view` reads, in bytes.
MAX_CSV_HEADER_BYTES = 1 << 20


def _csv_header(path: "str | os.PathLike", delimiter: str) -> list[str]:
    """The column names on the first line of the CSV file ``path``: up to its first ``\\r`` or ``\\n``
    (as DuckDB skips it, see :func:`csv_view`), UTF-8 with or without a byte-order mark, split at
    ``delimiter`` with double quotes around a name honoured (a name may hold the delimiter), each
    stripped of spaces. Raises :class:`~dpsql.errors.ArgumentError` for a header that cannot name
    the columns: unreadable, empty, not UTF-8, or repeating a name (case-insensitively, as SQL
    names are compared; which column a repeated name means would be ambiguous). The message
    gives positions, not names: in a file without a header the first line is a row of data."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(MAX_CSV_HEADER_BYTES + 1)
    except OSError as e:
        raise ArgumentError(f"source: cannot read {path}: {e.strerror or type(e).__name__}") from None
    line = re.split(rb"[\r\n]", head, maxsplit=1)[0]
    if len(line) > MAX_CSV_HEADER_BYTES:
        raise ArgumentError(f"source: the first line of {path} (its header) is longer than "
                            f"{MAX_CSV_HEADER_BYTES:,} bytes")
    try:
        text = line.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ArgumentError(f"source: the first line of {path} (its header) is not UTF-8 text; "
                            "save the file as UTF-8") from None
    if not text.strip():
        raise ArgumentError(f"source: the first line of {path} is empty: a CSV file starts with a header line "
                            "naming its columns")
    names = [n.strip() for n in next(csv.reader([text], delimiter=delimiter))]
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name and name.lower() in first:
            raise ArgumentError(f"source: the header of {path} names fields {first[name.lower()] + 1} and {i + 1} "
                                "the same (names are compared case-insensitively); give each column its own name")
        first.setdefault(name.lower(), i)
    return names


def _given_names(names: "Sequence[str]") -> list[str]:
    """The column names given for a CSV file without a header: strings, distinct case-insensitively."""
    if isinstance(names, str) or not all(isinstance(n, str) for n in names) or not names:
        raise ArgumentError("CSV names must be a non-empty list of the file's column names, in order")
    seen: set[str] = set()
    for name in names:
        if name.strip() and name.strip().lower() in seen:
            raise ArgumentError(f"CSV names: {name!r} is given twice (names are compared case-insensitively)")
        seen.add(name.strip().lower())
    return [n.strip() for n in names]


def _csv_lines(path: "str | os.PathLike", header: bool, delimiter: str, encoding: str) -> exp.Expression:
    """DuckDB's ``read_csv`` of the file ``path`` as its lines (after the header line, with ``header``),
    each whole in the column ``line``, ``rest`` NULL unless the line holds the separator (see
    :func:`csv_view`), in ``encoding``; a line that is not in it is skipped."""
    separator = "\x1e" if delimiter == "\x1f" else "\x1f"  # never in text: each line is one field
    return exp.func("read_csv", exp.Literal.string(os.fspath(path)),
                    *[exp.EQ(this=exp.column(k), expression=v) for k, v in (
                        ("auto_detect", exp.false()), ("header", exp.Boolean(this=header)),
                        ("encoding", exp.Literal.string(encoding)),
                        ("delim", exp.Literal.string(separator)), ("quote", exp.Literal.string("")),
                        ("escape", exp.Literal.string("")),
                        ("new_line", exp.Literal.string("\\n")),  # the text \n: \r or \n ends a line
                        ("strict_mode", exp.false()), ("null_padding", exp.true()),
                        ("nullstr", exp.Literal.string("\n")),  # a real line break: never a field
                        ("parallel", exp.false()), ("ignore_errors", exp.true()),
                        ("columns", exp.Struct(expressions=[
                            exp.PropertyEQ(this=exp.Literal.string(f), expression=exp.Literal.string("VARCHAR"))
                            for f in ("line", "rest")])))])


def csv_unread_lines(con: "duckdb.DuckDBPyConnection", source: CSV, rows: int) -> tuple[dict[str, int], str | None]:
    """The lines of ``source``'s file (not empty, after its header line unless ``names`` are given)
    that :func:`csv_view` read none of its ``rows`` from, by reason: ``not_utf8`` (or longer than
    DuckDB's ``max_line_size``: lines DuckDB skips), and ``fields`` (another number of fields than
    the header, text after a closing quote, or a ``\\x1f``); only reasons with a line. With them,
    the owner's sentence saying so and how to fix each (:func:`_unread_note`), None when every line
    is read. For the owner's reports only: counts of the private file."""
    read = _csv_lines(source.path, source.names is None, source.delimiter_or_default, "utf-8")
    line = exp.func("coalesce", exp.column("line", quoted=True), exp.Literal.string(""))
    nonempty = exp.or_(exp.NEQ(this=line, expression=exp.Literal.string("")),
                       exp.column("rest", quoted=True).is_(exp.null()).not_())
    quotes = exp.Sub(this=exp.Length(this=line.copy()),
                     expression=exp.Length(this=exp.func("replace", line.copy(), exp.Literal.string('"'),
                                                         exp.Literal.string(""))))
    odd = exp.EQ(this=exp.Mod(this=exp.Paren(this=quotes), expression=exp.Literal.number(2)),
                 expression=exp.Literal.number(1))
    counts = con.execute(exp.select(exp.func("count_if", nonempty), exp.func("count_if", odd)).from_(read)
                         .sql("duckdb")).fetchone()
    utf8, unclosed = (int(n or 0) for n in counts)  # NULL for a file of its header alone
    lines = _count_lines(source.path) - (source.names is None)
    unread = {reason: n for reason, n in (("not_utf8", lines - utf8), ("fields", utf8 - rows)) if n > 0}
    return unread, _unread_note(source, unread, unclosed) if unread else None


def _count_lines(path: "str | os.PathLike") -> int:
    """The lines of the file ``path`` that are not empty, as :func:`csv_view` splits them (``\\n``,
    ``\\r\\n`` and a lone ``\\r`` each end one), whatever bytes they hold; read a megabyte at a time.

    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "x.csv"
    >>> _ = f.write_bytes(b"a\\r\\nb\\rc\\n\\n\\xff\\xfe")
    >>> _count_lines(f)
    4
    """
    count, tail = 0, b""
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            pieces = re.split(rb"\r\n|\r|\n", tail + chunk)
            tail = pieces.pop()  # its line may go on in the next chunk (a \r then \n adds an empty line only)
            count += sum(1 for piece in pieces if piece)
    return count + bool(tail)


def _unread_note(source: CSV, unread: dict[str, int], unclosed: int) -> str:
    """The owner's sentence on the lines of ``source``'s file read as no row (:func:`csv_unread_lines`),
    with the fix for each reason: for a header that is one field holding ``;``, a tab or ``|``, the
    delimiter to give; for ``unclosed`` lines with an odd number of double quotes, the line breaks
    inside quoted values (a survey's comment on two lines), which :func:`csv_view` never joins.

    >>> _unread_note(CSV("pay.data", names=["name", "pay"]), {"not_utf8": 2, "fields": 1}, 0)
    '3 lines of pay.data were not read, in no answer: 2 not UTF-8 or too long (save the file as UTF-8), 1 with another number of fields than the header or text after a closing quote (a value holding the delimiter must be in double quotes)'
    """
    fields = "a value holding the delimiter must be in double quotes"
    header = _csv_header(source.path, source.delimiter_or_default) if source.names is None and "fields" in unread \
        else []
    other = next((d for d in ";\t|" if len(header) == 1 and d in header[0]), None)
    if other is not None:
        fields += (f"; the header is one field holding {other!r}: give the delimiter, "
                   f"--delimiter {other!r} or dpsql.CSV(path, delimiter={other!r})")
    if unclosed:
        fields += (f"; {unclosed:,} line{'' if unclosed == 1 else 's'} of the file hold an unclosed double quote: a "
                   "quoted value holding a line break is read a line at a time (a line of it with the header's number "
                   "of fields, the first or the last, is a row holding part of that value), so replace the line "
                   "breaks inside values")
    fixes = {"not_utf8": "not UTF-8 or too long (save the file as UTF-8)",
             "fields": f"with another number of fields than the header or text after a closing quote ({fields})"}
    total = sum(unread.values())
    return (f"{total:,} line{'' if total == 1 else 's'} of {os.fspath(source.path)} {'was' if total == 1 else 'were'} "
            "not read, in no answer: " + ", ".join(f"{n:,} {fixes[reason]}" for reason, n in unread.items()))


def csv_view(path: "str | os.PathLike", table: str, schema: "Schema | None", delimiter: str = ",", *,
             names: "Sequence[str] | None" = None, trim: bool = False) -> str:
    """``CREATE VIEW table AS ...``: a CSV file read so that each line is one row, whatever any
    other line holds.

    DuckDB's CSV reader sniffs the dialect, the line ends and the column types from a sample of
    rows, and a quoted field may run across lines: one hostile row could change the types, the
    delimiter or the rows of everyone else. Here nothing is sniffed. The header (column names,
    public) is read in Python (:func:`_csv_header`), or given as ``names`` for a file without one (its
    first line is then a row); a column with an empty name is never read.
    Every line after it is read as text, UTF-8, and ``\\n``, ``\\r\\n`` and a lone ``\\r`` each
    end a line (DuckDB's single-character line-end mode, the same for every file), so a row is
    exactly one line and an empty line is no row. Each line is split at its ``delimiter``s
    outside double quotes (a quoted field may hold the delimiter and ``""``, as a passenger
    list's names do: ``"Braund, Mr. Owen Harris"``; a quote that does not close is text), by
    itself: a line break always ends a line, quoted or not. A line with the wrong number of
    fields is dropped (as an out-of-domain row would be), and so is one with text between a
    closing quote and the next delimiter (``"a"b``), one that is not UTF-8 or longer than DuckDB's
    ``max_line_size`` (the owner's reports count them: :func:`csv_unread_lines`); surrounding double quotes are stripped from each field (after the spaces
    around it, with ``trim``), an empty field is NULL, and each schema column is ``TRY_CAST`` to
    its domain's type (a value that does not convert, such as ``17.5`` for an integer, is NULL,
    outside the domain unless the column is nullable); without a schema, every named column is
    read as text.

    How: DuckDB reads each line whole, as the one field before a separator no text holds
    (``\\x1f``; a line holding it is dropped), with ``strict_mode`` off (with it, a line end other
    than the one DuckDB expects fails the whole read), ``null_padding`` (the separator's missing
    second field is NULL) and ``nullstr`` a line break, which no field can hold (no line read is
    NULL). A line without a double quote is split at every delimiter (``string_split``); one with
    a quote by an RE2 pattern (:func:`_field_pattern`), and kept only if its fields, joined again,
    are the whole line. Reading a million lines took 0.8 s without quotes and 8.7 s with a quoted
    field in each (a line's pattern match is slower; the file is read once, into the snapshot).
    The file is read by one thread: with several, a chunk border between a ``\\r`` and its
    ``\\n`` reads that line twice (seen in DuckDB 2.0).

    >>> import tempfile, pathlib
    >>> from dpsql.schema import load_schema
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "p.csv"
    >>> _ = f.write_bytes(b'\\xef\\xbb\\xbfage,sex\\n30,F\\r\\n"41","M"\\nabc,F\\n5,"M\\n7,F,extra\\r8,M,\\n9,F\\n'
    ...                   b'"1,0",M\\n"2"x,F\\n')
    >>> s = load_schema({"table": "p", "columns": {"age": {"type": "integer", "min": 0, "max": 99},
    ...                                          "sex": {"type": "categorical", "values": ["F", "M"]}}})
    >>> con = duckdb.connect(); _ = con.execute(csv_view(f, "p", s))
    >>> con.sql("SELECT * FROM p").fetchall()
    [(30, 'F'), (41, 'M'), (None, 'F'), (5, '"M'), (9, 'F'), (None, 'M')]
    """
    if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in '"\r\n':
        raise ArgumentError(f"source: a CSV delimiter is one character, not a double quote or a line break; "
                            f"got {delimiter!r:.20}")
    header = names is None
    names = _csv_header(path, delimiter) if names is None else _given_names(names)
    read = _csv_lines(path, header, delimiter, "utf-8")
    line, split = exp.column("line", quoted=True), exp.column("fields", quoted=True)
    quoted = exp.func("contains", line.copy(), exp.Literal.string('"'))
    lines = exp.select(line.copy(), exp.alias_(exp.Case(
        ifs=[exp.If(this=quoted.copy(), true=exp.func("regexp_extract_all", exp.DPipe(
            this=exp.Literal.string(delimiter), expression=line.copy()), exp.Literal.string(_field_pattern(delimiter, trim)),
            exp.Literal.number(1)))],
        default=exp.func("string_split", line.copy(), exp.Literal.string(delimiter))), "fields")).from_(read).where(
        exp.and_(exp.column("rest", quoted=True).is_(exp.null()), exp.NEQ(this=line.copy(), expression=exp.Literal.string(""))))

    def field(i: int) -> exp.Expression:
        text: exp.Expression = exp.func("list_extract", split.copy(), exp.Literal.number(i + 1))
        if trim:
            text = exp.func("trim", text)
        return _unquoted(exp.Nullif(this=text, expression=exp.Literal.string("")))

    position = {n.lower(): i for i, n in enumerate(names) if n}
    if schema is None:  # every named column, as text
        items = [exp.alias_(field(i), exp.to_identifier(n, quoted=True)) for i, n in enumerate(names) if n]
    else:
        wanted = [c for c in schema.columns if c.name.lower() in position]
        items = [exp.alias_(_typed(field(position[c.name.lower()]), c.sql_type), exp.to_identifier(c.name, quoted=True))
                 for c in wanted]
        unit = schema.privacy_unit.column
        if unit is not None and unit.lower() in position and unit.lower() not in {c.name.lower() for c in wanted}:
            items.append(exp.alias_(field(position[unit.lower()]), exp.to_identifier(unit, quoted=True)))
    if not items:
        what = "header" if header else "names given for the columns"
        raise ArgumentError(f"source: the {what} of {path} ({len(names)} field{'s' if len(names) != 1 else ''} "
                            f"split at {delimiter!r}) names none of the schema's columns "
                            f"{', '.join(c.name for c in schema.columns) if schema is not None else ''}"
                            + ("; if its first line is a row, not a header, name the file's columns in order: "
                               "dpsql.CSV(path, names=[...])" if header else ""))
    # exactly the header's fields; a line with a quote is split at the delimiters outside quotes,
    # and is dropped unless its fields, joined again, are the whole line (nothing between them skipped)
    whole = exp.and_(exp.EQ(this=exp.func("len", split.copy()), expression=exp.Literal.number(len(names))),
                     exp.or_(exp.Not(this=quoted.copy()), exp.EQ(this=exp.func("array_to_string", split.copy(),
                                                                                 exp.Literal.string(delimiter)),
                                                                 expression=line.copy())))
    select = exp.select(*items).from_(lines.subquery("lines")).where(whole)
    return f"CREATE VIEW {exp.to_identifier(table, quoted=True).sql('duckdb')} AS {select.sql('duckdb')}"
