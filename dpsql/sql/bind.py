"""DuckDB's own reading of a statement: its output column names, and its binder's refusals.

One public function, :func:`output_names`, and the naming rule :func:`deduplicated`.
A statement's result columns are named as DuckDB names them (``SELECT COUNT(*) FROM t``
gives ``count_star()``, ``SUM(age) / 2`` gives ``(sum(age) / 2)``): rather than imitate
DuckDB's spelling of every expression, the statement, as written, is bound by DuckDB
itself (:mod:`dpsql.sql.sandbox`) against empty tables with the schema's columns and
types, and the public tables' columns (typed by their declared values). Binding reads the statement and the schema
only (no data, no row is evaluated), so the names and any refusal (a table referred
to by its name after it was aliased, ``FROM t a WHERE t.x = 1``) are public.

Duplicate names are suffixed as DuckDB suffixes a result's columns (its ``df()``,
or ``CREATE TABLE ... AS``): so no column of a result can overwrite another.

>>> from dpsql.schema import load_schema
>>> s = load_schema({"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 2}}})
>>> output_names("SELECT a, COUNT(*), COUNT(*), SUM(a) / 2 AS half FROM t GROUP BY a", s)
['a', 'count_star()', 'count_star()_1', 'half']
"""

from __future__ import annotations

from typing import Sequence

from dpsql.schema import Schema
from dpsql.sql import sandbox

__all__ = ["output_names", "deduplicated"]


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def output_names(text: str, schema: Schema) -> list[str]:
    """The names DuckDB gives the result columns of the SELECT statement ``text`` over ``schema``'s
    table, deduplicated as DuckDB does (:func:`deduplicated`). Raises ``duckdb.Error`` when DuckDB
    cannot read the statement (``duckdb.BinderException`` when its binder refuses it)."""
    with sandbox.limited("binding the statement") as con:  # the binder folds constants: bounded in time
        columns = ", ".join([f"{_quoted(c.name)} {c.sql_type}" for c in schema.columns]
                            + [f"{_quoted(level)} VARCHAR" for c in schema.columns for level, _ in getattr(c, "levels", ())])
        con.execute(f"CREATE TEMP TABLE {_quoted(schema.table)} ({columns})")
        for table in schema.public_tables:
            columns = ", ".join(f"{_quoted(c)} {_public_type([r[i] for r in table.rows])}"
                                for i, c in enumerate(table.columns))
            con.execute(f"CREATE TEMP TABLE {_quoted(table.name)} ({columns})")
        return deduplicated(con.sql(text).columns)


def _public_type(values: list) -> str:
    """The DuckDB type of a public table's column: BOOLEAN, BIGINT or DOUBLE when its declared
    values (NULLs aside) are all of that kind, else VARCHAR."""
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return "BOOLEAN"
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return "BIGINT"
    if present and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return "DOUBLE"
    return "VARCHAR"


def deduplicated(names: Sequence[str]) -> list[str]:
    """``names`` with each name that repeats one before it (ignoring case, as DuckDB's names
    do) suffixed ``_1``, or ``_2``..., the first suffix not yet taken: DuckDB's rule for the
    columns of a result.

    >>> deduplicated(["n", "N", "n_1", "n"])
    ['n', 'N_1', 'n_1_1', 'n_2']
    """
    taken: set[str] = set()
    out = []
    for name in names:
        unique, k = name, 1
        while unique.lower() in taken:
            unique, k = f"{name}_{k}", k + 1
        taken.add(unique.lower())
        out.append(unique)
    return out
