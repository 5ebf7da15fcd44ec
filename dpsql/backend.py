"""Where measurement queries run: DuckDB (the default) or Apache Spark.

:mod:`dpsql.measure` builds one counting query as a :mod:`sqlglot`
expression; a :class:`Backend` is the one thing that knows how to run it
somewhere. It has three members:

* ``dialect``: the sqlglot dialect the query is rendered in
  (``"duckdb"``, ``"spark"``);
* :meth:`~Backend.column_types`: the *type family* of every column of a
  table (see :data:`FAMILIES`), read from the catalog without reading rows.
  :func:`dpsql.measure.index_expression` picks the value-to-index mapping
  from it, so the same cell gets the same index whatever the engine;
* :meth:`~Backend.run`: render, execute and return the result columns as
  numpy arrays. Only the aggregated counts of the query come back (one row
  per marginal cell seen), never rows of the table.

Failures of the engine are raised as :class:`BackendError`, whose text is
data-free: the engine's message is kept only for schema-level problems
found before any row is read (a missing table or column); for any other
failure only the exception class (and Spark's error condition name, e.g.
``CAST_INVALID_INPUT``) is kept, since a runtime message can quote a value.
:func:`dpsql.measure.measure_marginals` turns it into a
:class:`~dpsql.errors.MeasurementError`.

Noise, the budget ledger and strategy selection never run in a backend:
they stay in the Python process that calls :mod:`dpsql.kernel`.

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
from typing import Any

import duckdb
import numpy as np
from sqlglot import exp

__all__ = ["FAMILIES", "Backend", "BackendError", "DuckDBBackend", "SparkBackend", "backend_for",
           "duckdb_type_family", "spark_type_family", "table_expression", "is_spark_session"]

#: The type families a backend reports (what the domain-index mapping needs to know).
FAMILIES = ("string", "int", "float", "decimal", "bool", "null", "other")

_DUCKDB_FAMILIES = {
    "varchar": "string", "enum": "string", "json": "string",
    "tinyint": "int", "smallint": "int", "integer": "int", "bigint": "int", "hugeint": "int",
    "utinyint": "int", "usmallint": "int", "uinteger": "int", "ubigint": "int", "uhugeint": "int",
    "bignum": "int", "varint": "int", "int": "int",
    "float": "float", "double": "float", "decimal": "decimal",
    "boolean": "bool", "bool": "bool", "null": "null", "other": "other",
}


def duckdb_type_family(sql_type: Any) -> str | None:
    """The family of a DuckDB column type (a ``duckdb`` type object, whose
    ``id`` is used, or a type name), or None when ``sql_type`` is None.

    Family names map to themselves, so a family is also a valid type here.

    >>> duckdb_type_family("DECIMAL(5,2)"), duckdb_type_family("VARCHAR"), duckdb_type_family("DATE")
    ('decimal', 'string', 'other')
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
    TINYINT … BIGINT ints; FLOAT and DOUBLE floats; VOID (an all-NULL column)
    is ``"null"``; dates, timestamps, binary and nested types are ``"other"``
    (never in a declared domain).

    >>> [spark_type_family(t) for t in ("string collate UTF8_LCASE", "varchar(3)", "tinyint", "bigint",
    ...                                 "double", "decimal(10,2)", "boolean", "void", "date", "array<int>")]
    ['string', 'string', 'int', 'int', 'float', 'decimal', 'bool', 'null', 'other', 'other']
    """
    key = simple_string.strip().lower()
    head = key.split("(", 1)[0].split("<", 1)[0].split(" ", 1)[0]
    if head in ("string", "varchar", "char"):
        return "string"
    if head in ("tinyint", "smallint", "int", "bigint", "byte", "short", "integer", "long"):
        return "int"
    if head in ("float", "double", "real"):
        return "float"
    return {"decimal": "decimal", "boolean": "bool", "void": "null", "null": "null"}.get(head, "other")


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

    def render(self, query: exp.Expression) -> str:
        """The SQL text this backend executes for ``query``."""
        return query.sql(dialect=self.dialect)

    def _schema_query(self, table: "str | exp.Table") -> str:
        return self.render(exp.select(exp.Star()).from_(table_expression(table)).limit(0))


class DuckDBBackend(Backend):
    """Queries run on a DuckDB connection (or any object with DuckDB's
    ``sql`` and ``execute`` methods).

    >>> DuckDBBackend(duckdb.connect()).dialect
    'duckdb'
    """

    dialect = "duckdb"

    def __init__(self, con: "duckdb.DuckDBPyConnection") -> None:
        self.con = con

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


def _duckdb_failure(e: BaseException) -> BackendError:
    if isinstance(e, (duckdb.CatalogException, duckdb.BinderException)):
        return BackendError(str(e), schema_level=True)
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
