"""A starting schema drawn from the data, for its owner to review (``dpsql schema draft DATA``).

Writing a schema by hand for a wide table is slow; :func:`draft_schema` reads the table once per
column and writes YAML that :func:`dpsql.load_schema` accepts: a column of numbers becomes an
``integer`` (from its smallest to its largest value, when that is at most
:data:`MAX_INTEGER_VALUES` values) or ``numeric`` column (:data:`BINS` equal bins over the same
range); a floating-point column of whole numbers (pandas' integers beside a NaN) is an integer
column, and its NaN and infinities, outside every domain, are left out of its range; a column
of booleans a ``boolean``, a DATE or TIMESTAMP column a ``date`` one (from its first day to its
last), a column of text a ``categorical`` with its distinct values (at
most ``max_values`` of them; a column with more is left out, in a comment), and a column
holding a NULL is ``nullable``. A CSV file is read as ``dpsql.connect`` reads it (each
field as text, :func:`~dpsql.private.backend.csv_view`): a column whose every value is a whole
number is an integer, any number a numeric one, ``true``/``false`` a boolean, ISO dates
(``2024-02-29``) a date, and text with a
number of leading zeros (a ZIP code ``02134``) stays text; numbers beside at most
:data:`MAX_PLACEHOLDERS` other texts in fewer rows (``Not Provided``) are numbers, nullable, with a
comment naming those texts, which read as NULL. A text column of a database or a data
frame stays text, numbers or not (connecting reads it as text, which no numeric domain holds).

**The draft is not a schema to publish as it is.** A schema is public, and every value, minimum
and maximum here was read from the private rows: the oldest person's exact age, the one rare
category only one person has. The YAML's header says so: keep a domain only where it is public
knowledge (a published code list, a range that any such table could have) and replace the rest
(``age`` from 0 to 120, not to the oldest age seen). The draft is for the owner only.

>>> import duckdb
>>> con = duckdb.connect()
>>> _ = con.execute("CREATE TABLE t AS SELECT range % 50 + 17 AS age, ['F', 'M'][range % 2 + 1] AS sex, "
...                 "range % 3 = 0 AS smoker, range / 7 AS hours FROM range(200)")
>>> print(draft_schema(con, "t").split("\\n\\n", 1)[1])
table: t
privacy_unit: row
columns:
  age: {type: integer, min: 17, max: 66}
  sex: {type: categorical, values: [F, M]}
  smoker: {type: boolean}
  hours: {type: numeric, bins: [0, 3, 6, 9, 12, 15, 18, 21, 24, 27, 30]}
<BLANKLINE>
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import yaml
from sqlglot import exp

from dpsql.errors import ArgumentError, MeasurementError
from dpsql.private.backend import (
    BackendError,
    DuckDBBackend,
    csv_unread_lines,
    open_source,
    opened_by_dpsql,
    table_expression,
)

__all__ = ["draft_schema", "BINS", "MAX_INTEGER_VALUES", "MAX_PLACEHOLDERS", "MAX_VALUES", "MIN_IDENTIFIER_ROWS"]

#: Most distinct text values a drafted categorical column lists.
MAX_VALUES = 50
#: Most distinct texts other than numbers (``Not Provided``, ``N/A``) a CSV column drafted as numbers
#: may hold (in fewer rows than its numbers); they read as NULL.
MAX_PLACEHOLDERS = 3
#: Widest range of integers drafted as an ``integer`` column; a wider one gets :data:`BINS` bins.
MAX_INTEGER_VALUES = 200
#: An integer column whose every value differs, over at least this many rows, is commented as a
#: likely identifier (fewer rows are all distinct by chance often).
MIN_IDENTIFIER_ROWS = 100
#: Bins of a drafted ``numeric`` column.
BINS = 10

HEADER = """\
# A STARTING schema drafted by `dpsql schema draft` from {source}.
# REVIEW EVERY DOMAIN BEFORE USE. A schema is public, and every value, min and max below was
# read from the private data itself (the oldest age, a category only one person has). Keep a
# domain only if it is public knowledge (a published code list, a range any such table could
# have), replace the others (age 0..120, not the oldest age seen), and set privacy_unit.
# Values outside a domain are dropped from every answer: run `dpsql validate` after editing.
"""


def draft_schema(source: Any, table: str | None = None, *, max_values: int = MAX_VALUES) -> str:
    """A YAML schema for the table ``table`` of ``source`` (anything ``dpsql.connect`` reads: a file, a
    :class:`dpsql.CSV`, a DuckDB connection, a data frame), with the header saying that it must be
    reviewed; see the module docstring. ``table`` defaults to a file's name without its suffix, or
    the only table of a database. Raises :class:`~dpsql.errors.ArgumentError` for a source or table it
    cannot read. For the data owner only: the YAML quotes the data."""
    table = table or _default_table(source)
    backend = open_source(source, table, None)
    if not isinstance(backend, DuckDBBackend):
        raise ArgumentError("schema draft reads DuckDB sources, files and data frames")
    read = table
    try:
        if not backend.has_table(table):
            raise ArgumentError(f"schema draft: the source has no table or view {table!r}")
        if opened_by_dpsql(source):  # read a file once, not once per column
            read = "dpsql_draft"
            backend.con.execute(f"CREATE TEMP TABLE {read} AS SELECT * FROM {table_expression(table).sql('duckdb')}")
        unread = _unread(backend, read)
        families = backend.column_types(read)
        lines = [_column(backend, read, name, family, max_values, backend.csv is not None)
                 for name, family in families.items()]
    except BackendError as e:
        raise MeasurementError(f"schema draft: reading table {table!r} failed: {e.reason}") from None
    body = [f"table: {_scalar(table)}", "privacy_unit: row", "columns:", *lines]
    return HEADER.format(source=_shown(source)) + unread + "\n" + "\n".join(body) + "\n"


def _unread(backend: DuckDBBackend, read: str) -> str:
    """For a CSV file with lines read as no row (:func:`~dpsql.private.backend.csv_unread_lines`), a
    header line saying so; an :class:`~dpsql.errors.ArgumentError` when no line is read, since every
    column would be drafted as "only NULLs"."""
    if backend.csv is None:
        return ""
    rows = int(backend.con.execute(f"SELECT count(*) FROM {read}").fetchone()[0])
    unread, note = csv_unread_lines(backend.con, backend.csv, rows)
    if unread and not rows:
        raise ArgumentError(f"schema draft: {note}: no row to draft from")
    return f"# NOTE: {note}.\n" if unread else ""


def _shown(source: Any) -> str:
    """How the header names ``source``: a file's path, else what it is."""
    path = getattr(source, "path", source)
    if isinstance(path, (str, os.PathLike)):
        return os.fspath(path)
    return "a data frame" if opened_by_dpsql(source) else "a database"


def _default_table(source: Any) -> str:
    path = getattr(source, "path", source)
    if isinstance(path, (str, os.PathLike)) and not os.fspath(path).lower().endswith((".duckdb", ".db", ".ddb")):
        return os.path.splitext(os.path.basename(os.fspath(path)))[0]
    if isinstance(path, (str, os.PathLike)):
        backend = open_source(path, "unused", None)
        names = [r[0] for r in backend.con.execute(  # type: ignore[attr-defined]
            "SELECT table_name FROM duckdb_tables() UNION ALL SELECT view_name FROM duckdb_views() "
            "WHERE NOT internal").fetchall()]
        if len(names) == 1:
            return str(names[0])
        raise ArgumentError(f"schema draft: the database holds {len(names)} tables: name one (--table)")
    if opened_by_dpsql(source):  # a data frame
        return "data"
    raise ArgumentError("schema draft: name the table of a connection (--table)")


def _scalar(value: Any) -> str:
    """``value`` as a YAML scalar on one line (quoted where YAML would read it otherwise), its letters as
    they are (``José``, not ``"Jos\\xE9"``: the owner reads the draft), unless that text would not be one
    line or would not read back as ``value`` (a NEL or a line separator in it, which YAML reads as a line
    break): then with YAML's escapes."""
    for allow_unicode in (True, False):
        text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=1 << 30,
                              allow_unicode=allow_unicode).strip().removesuffix("\n...").strip()
        if len(text.splitlines()) == 1 and yaml.safe_load(text) == value:
            break
    return text


def _one(backend: DuckDBBackend, *items: exp.Expression, source: exp.Expression) -> tuple:
    """The one row of ``items`` over ``source``, a NULL as None (DuckDB's numpy result masks a NULL
    integer, which ``int()`` cannot read: the MIN of a column of NULLs only)."""
    return tuple(None if v[0] is np.ma.masked else v[0]
                 for v in backend.run(exp.select(*[exp.alias_(e, f"v{i}") for i, e in enumerate(items)])
                                      .from_(source)).values())


def _column(backend: DuckDBBackend, table: str, name: str, family: str, max_values: int, csv: bool) -> str:
    """The YAML line of column ``name`` (of type ``family``), or a comment saying why it is left out. With
    ``csv`` (a CSV file's column, text cast to the schema's types when read), text may read as numbers
    or booleans; a database's text column stays text, as connecting reads it."""
    c = exp.column(exp.to_identifier(name, quoted=True))
    source = table_expression(table)
    note = ""
    if csv and family == "string":
        family, c, note = _csv_text(backend, c, source)
    null = c.copy().is_(exp.null())  # a CSV's empty field, or a text read as NULL ("Not Provided")
    if family == "date":  # its days (a TIMESTAMP's time of day is no part of a domain); infinity is outside any
        day = exp.cast(c.copy(), exp.DataType.build("DATE"))
        timed = exp.NEQ(this=exp.cast(c.copy(), exp.DataType.build("TIMESTAMP")),
                        expression=exp.cast(day.copy(), exp.DataType.build("TIMESTAMP")))
        if _one(backend, exp.func("count_if", timed), source=source)[0]:
            note = (f"its times of day are read as their day; for the hour, add a column of hour("
                    f"{exp.to_identifier(name).sql('duckdb')}) in a view")
        c = exp.If(this=exp.func("isfinite", day.copy()), true=day.copy())
    if family in ("float", "decimal"):  # the domain of its finite values (a NaN or an infinity is outside any)
        c = exp.If(this=exp.func("isfinite", c.copy()), true=c.copy())
        values, wholes = _one(backend, exp.Count(this=c.copy()), exp.func("count_if", _whole(c)), source=source)
        family = "int" if values and wholes == values else family  # pandas' integers beside a NaN are floats
    nulls, distinct, low, high, rows = _one(backend, exp.func("count_if", null),
                                            exp.Count(this=exp.Distinct(expressions=[c.copy()])), exp.Min(this=c.copy()),
                                            exp.Max(this=c.copy()), exp.Count(this=exp.Star()), source=source)
    spec: dict[str, Any] = {}
    if family == "bool" and distinct:
        spec["type"] = "boolean"
    elif family in ("int", "uint") and high is not None and int(high) - int(low) < MAX_INTEGER_VALUES:
        spec.update(type="integer", min=int(low), max=int(high))
    elif family in ("int", "uint", "float", "decimal") and high is not None and math.isfinite(float(high)) \
            and math.isfinite(float(low)):
        spec.update(type="numeric", bins=_edges(float(low), float(high)))
    elif family == "date" and high is not None:
        spec.update(type="date", min=str(np.datetime64(low, "D")), max=str(np.datetime64(high, "D")))
    elif family == "string" and 0 < distinct <= max_values:
        found = backend.run(exp.select(exp.alias_(c.copy(), "v")).distinct().from_(source)
                            .where(c.copy().is_(exp.null()).not_()).order_by(exp.column("v")))["v"]
        spec.update(type="categorical", values=[str(v) for v in found])
        if any(v != v.strip(" ") for v in spec["values"]):  # UCI's ", Female": an analyst writes 'Female'
            note = "spaces around values: " + ("read the file with --trim (dpsql.CSV(path, trim=True)) and draft again"
                                               if csv else f"trim them in a view (TRIM({exp.to_identifier(name).sql('duckdb')}))")
    elif family == "string" and distinct:
        return f"  # {name}: {distinct:,} distinct values, too many to list: declare a public list, or leave it out"
    else:
        why = "no rows to draft it from" if not rows else \
            "only NULLs" if family in ("int", "uint", "float", "decimal", "string", "null", "bool", "date") else \
            "a type no domain holds (a time, a TIMESTAMP WITH TIME ZONE, a list...): cast it in a view"
        return f"  # {name}: {why}; left out"
    if nulls:
        spec["nullable"] = True
    # a whole number in every row, each a different one: a row's identifier, which a query or a
    # synthetic table has no use for (and whose range would tell the row count)
    identifier = bool(family in ("int", "uint") and rows >= MIN_IDENTIFIER_ROWS and distinct == rows)
    notes = [note] * bool(note) + ["every value distinct: an identifier? leave it out"] * identifier
    return f"  {_scalar(name)}: {_scalar(spec)}" + (f"  # {'; '.join(notes)}" if notes else "")


def _csv_text(backend: DuckDBBackend, c: exp.Expression, source: exp.Expression) -> tuple[str, exp.Expression, str]:
    """How a CSV file's column ``c`` of text reads: its family, its values, a note for the owner.

    Booleans if every value reads as one (``true``, ``f``); days if every value is an ISO date
    (``2024-02-29``, a time of day after it or not). Numbers if every value does, or all but
    at most :data:`MAX_PLACEHOLDERS` distinct texts in fewer rows than the numbers (SF Salaries'
    ``Not Provided`` among its pay): those texts read as NULL, as connecting casts them, and the
    note names them. Text otherwise, or when a number has a leading zero (a ZIP code ``02134``)."""
    as_double = exp.TryCast(this=c.copy(), to=exp.DataType.build("DOUBLE"), safe=True)
    as_bool = exp.TryCast(this=c.copy(), to=exp.DataType.build("BOOLEAN"), safe=True)
    words = exp.In(this=exp.Lower(this=c.copy()), expressions=[exp.Literal.string(w) for w in ("true", "false", "t", "f")])
    padded = exp.RegexpLike(this=c.copy(), expression=exp.Literal.string(r"^\s*[-+]?0[0-9]"))
    text = exp.If(this=as_double.is_(exp.null()), true=c.copy())
    as_date = exp.TryCast(this=c.copy(), to=exp.DataType.build("DATE"), safe=True)
    iso = exp.RegexpLike(this=c.copy(), expression=exp.Literal.string(r"^\s*[0-9]{4}-[0-9]{2}-[0-9]{2}"))
    values, numbers, wholes, booleans, days, codes, others = _one(
        backend, exp.Count(this=c.copy()), exp.Count(this=as_double), exp.func("count_if", _whole(as_double)),
        exp.func("count_if", exp.and_(words, as_bool.is_(exp.null()).not_())),
        exp.func("count_if", exp.and_(iso, as_date.is_(exp.null()).not_())), exp.func("count_if", padded),
        exp.Count(this=exp.Distinct(expressions=[text])), source=source)
    if values and booleans == values:
        return "bool", as_bool, ""
    if values and days == values:
        return "date", as_date, ""
    if not numbers or codes or values - numbers >= numbers or others > MAX_PLACEHOLDERS:
        return "string", c, ""
    note = ""
    if others:
        found = backend.run(exp.select(exp.alias_(text.copy(), "v"), exp.alias_(exp.Count(this=exp.Star()), "n"))
                            .from_(source).where(text.copy().is_(exp.null()).not_()).group_by(exp.column("v"))
                            .order_by(exp.column("v")))
        listed = ", ".join(f"{str(v)!r} ({int(n):,} row{'' if n == 1 else 's'})" for v, n in zip(found["v"], found["n"]))
        note = f"{listed} {'is not a number' if others == 1 else 'are not numbers'}: read as NULL"
    if wholes == numbers:
        return "int", exp.TryCast(this=c.copy(), to=exp.DataType.build("BIGINT"), safe=True), note
    return "float", as_double, note


def _whole(number: exp.Expression) -> exp.Expression:
    """Whether ``number`` is a whole number (NULL for NULL)."""
    return exp.EQ(this=exp.Mod(this=number.copy(), expression=exp.Literal.number(1)), expression=exp.Literal.number(0))


def _edges(low: float, high: float) -> list:
    """:data:`BINS` equal bins from ``floor(low)`` to at least ``ceil(high)``, with whole widths when the range
    is wider than :data:`BINS` (so the edges are round numbers)."""
    lo, hi = math.floor(low), math.ceil(high)
    width = (hi - lo) / BINS if hi > lo else 1
    width = math.ceil(width) if width >= 1 else width
    edges = lo + width * np.arange(BINS + 1)
    return [int(e) if float(e).is_integer() else round(float(e), 12) for e in edges]
