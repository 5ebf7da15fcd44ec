"""Whether the private table's columns can hold the schema's domains, told from the catalog alone.

A measurement drops every row with a declared column outside its domain
(:mod:`dpsql.private.measure`). A column the table lacks fails every query, and a column whose
SQL type holds no value of its domain (a BIGINT column declared with ``values: [F, M]``) drops
every row: both are found from the table's column names and types, reading no row, so
:func:`check_columns` refuses them when the owner connects, each with a way to fix it, before
anything can be spent. :func:`holds` is the rule the measurement's value mapping follows
(:func:`dpsql.private.measure.index_expression`), shared with the owner's report
(:mod:`dpsql.owner.validate`).

>>> import duckdb
>>> from dpsql.private.backend import DuckDBBackend
>>> from dpsql.schema import load_schema
>>> con = duckdb.connect()
>>> _ = con.execute("CREATE TABLE t (age BIGINT, sex BIGINT, smoker BIGINT)")
>>> check_columns(DuckDBBackend(con), "t", load_schema({"table": "t", "columns": {
...     "Age": {"type": "integer", "min": 0, "max": 99}, "sexe": {"type": "categorical", "values": ["F", "M"]},
...     "smoker": {"type": "boolean"}}}))
Traceback (most recent call last):
...
dpsql.errors.SchemaError: table t: 1 schema problem:
  columns.sexe: the table has no such column (did you mean 'sex'?); its columns are age, sex, smoker
"""

from __future__ import annotations

import difflib
from typing import Any

from dpsql.errors import SchemaError
from dpsql.private.backend import Backend, BackendError
from dpsql.schema import Boolean, Categorical, Column, DateRange, Schema

__all__ = ["check_columns", "holds"]

#: How the table's columns are listed in a message: at most this many names.
SHOWN_COLUMNS = 40

#: A type family (:data:`dpsql.private.backend.FAMILIES`) in words.
_FAMILY_WORDS = {"string": "a text column", "int": "an integer column", "uint": "an unsigned integer column",
                 "float": "a floating-point column", "decimal": "a DECIMAL column", "bool": "a BOOLEAN column",
                 "date": "a DATE or TIMESTAMP column",
                 "null": "a column of NULLs only (type NULL)", "other": "a column of a type no domain holds "
                 "(a time, a TIMESTAMP WITH TIME ZONE, a list...)"}


def holds(column: Column, family: str | None) -> bool:
    """Whether a column of SQL type ``family`` can hold a value of ``column``'s domain: text for
    categorical strings, numbers for numbers, BOOLEAN or integers (0 and 1) for booleans, a DATE,
    a TIMESTAMP or text (ISO dates) for days."""
    if family in ("null", "other"):
        return False
    if isinstance(column, DateRange):
        return family in ("date", "string")
    if family == "date":
        return False
    if isinstance(column, Boolean):
        return family in ("bool", "int", "uint")
    if isinstance(column, Categorical) and not column.is_numeric:
        return family == "string"
    return family in ("int", "uint", "float", "decimal")


def _fix(column: Column, family: str) -> str:
    """How to make ``column``'s declaration and its SQL type agree."""
    if isinstance(column, DateRange):
        return "read it in a view that casts it to DATE (TRY_CAST, or strptime for text of another form)"
    if family == "date":
        return "declare it {type: date, min: ..., max: ...}, or read it in a view that casts it (year(col))"
    if family in ("null", "other"):
        return "read it in a view that casts it (TRY_CAST) to a type of the domain"
    if family == "bool":
        return "declare it {type: boolean}"
    if isinstance(column, Categorical) and not column.is_numeric:
        return ("declare its values as the numbers the column holds (values: [1, 2]), or an integer or numeric "
                "column")
    return ("the column holds text: read it as numbers in a view (TRY_CAST(col AS DOUBLE)), or declare it "
            "categorical with its text values")


def _described(column: Column) -> str:
    if isinstance(column, Categorical):
        shown = ", ".join(map(str, column.values[:4])) + (", ..." if len(column.values) > 4 else "")
        return f"categorical domain [{shown}]"
    return f"{column.kind} domain"


def _qualified(table: str) -> str:
    """How to declare a table of another database schema, named ``table`` qualified (else nothing).

    >>> _qualified("s.people")
    '; a table is named alone, as in its default schema: create a view of it there (CREATE VIEW people AS SELECT * FROM s.people) and declare that'
    """
    if "." not in table:
        return ""
    alone = table.rsplit(".", 1)[1]
    return (f"; a table is named alone, as in its default schema: create a view of it there "
            f"(CREATE VIEW {alone} AS SELECT * FROM {table}) and declare that")


def check_columns(backend: Backend, table: str, schema: Schema) -> None:
    """Refuse a table that lacks a declared column (or the privacy unit's), or has one whose SQL type
    holds none of its domain's values: a :class:`~dpsql.errors.SchemaError` listing each, with the
    nearest name of the table's columns for a missing one. Reads the catalog, never a row: the
    column names and types are what the owner declared or loaded, not data."""
    try:
        if not backend.has_table(table):
            raise SchemaError([("table", f"the source has no table or view {table!r}{_qualified(table)}")],
                              f"table {table}")
        types = backend.column_types(table)
    except BackendError as e:
        raise SchemaError([("table", f"cannot read the columns of {table!r}: {e.reason}")], f"table {table}") from None
    by_lower = {name.lower(): family for name, family in types.items()}
    problems: list[tuple[str, str]] = []
    for column in schema.columns:
        family = by_lower.get(column.name.lower())
        if column.name.lower() not in by_lower:
            problems.append((f"columns.{column.name}", _missing(column.name, list(types))))
        elif not holds(column, family):
            problems.append((f"columns.{column.name}",
                             f"is {_FAMILY_WORDS.get(str(family), str(family))} in the table, which holds no value "
                             f"of its declared {_described(column)}, so every row would be dropped: "
                             f"{_fix(column, str(family))}"))
    unit = schema.privacy_unit.column
    if unit is not None and unit.lower() not in by_lower:
        problems.append(("privacy_unit.column", _missing(unit, list(types))))
    if problems:
        raise SchemaError(problems, f"table {table}")


def _missing(name: str, columns: list[Any]) -> str:
    """The message for a declared column ``name`` that is not among ``columns``."""
    lowered = [str(c).lower() for c in columns]
    close = difflib.get_close_matches(name.lower(), lowered, n=1, cutoff=0.6) or \
        [c for c in lowered if len(name) >= 3 and name.lower() in c]  # hours for hours_per_week
    nearest = next((str(c) for c in columns if close and str(c).lower() == close[0]), None)
    hint = f" (did you mean {nearest!r}?)" if nearest else ""
    shown = ", ".join(map(str, columns[:SHOWN_COLUMNS])) + (", ..." if len(columns) > SHOWN_COLUMNS else "")
    return f"the table has no such column{hint}; its columns are {shown or '(none)'}"
