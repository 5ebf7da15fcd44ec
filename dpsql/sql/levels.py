"""The levels of a hierarchy column, read as expressions over its codes.

A schema's ``type: hierarchy`` column (:class:`~dpsql.schema.Hierarchy`) names levels that are
prefixes of its codes, or that a public mapping gives for each code. Before a statement is analyzed,
every reference to a level that is not a column is replaced by its definition: ``state`` by
``substr(geo, 1, 2)``, a level as long as every code (or mapping every code to itself) by ``geo``
itself, a mapped level by ``dpsql_level(geo, 'state')``. That call is evaluated on the domain only,
where each code's level code is read from the mapping as one more column of the domain
(:func:`level_sources`, used by :mod:`dpsql.sql.domain_eval`): one array per level, built once from
the mapping, whatever the number of codes. The rest of the compiler sees a key or a predicate over
``geo``, evaluated on its public domain like any other (:mod:`dpsql.sql.grid`): ``GROUP BY state``
is a partition of the codes, which strategy selection recognizes as a level of a tree
(:mod:`dpsql.hdmm.hierarchy`), and the private measurement counts codes (or groups of codes) as for
any column. The result columns keep the level's name (DuckDB binds the statement with the levels as
columns, :mod:`dpsql.sql.bind`).

>>> from dpsql.schema import load_schema
>>> import sqlglot
>>> s = load_schema({"table": "t", "columns": {"geo": {"type": "hierarchy", "values": ["0601", "0602"],
...                                            "levels": {"state": 2, "county": 4}}}})
>>> with_levels(sqlglot.parse_one("SELECT state, county FROM t WHERE state = '06'"), s).sql()
"SELECT SUBSTRING(geo, 1, 2) AS state, geo AS county FROM t WHERE SUBSTRING(geo, 1, 2) = '06'"
>>> m = load_schema({"table": "t", "columns": {"zip": {"type": "hierarchy", "levels": ["region"],
...                                            "codes": {"94110": ["West"], "10001": ["East"]}}}})
>>> with_levels(sqlglot.parse_one("SELECT region FROM t GROUP BY region"), m).sql()
"SELECT DPSQL_LEVEL(zip, 'region') AS region FROM t GROUP BY DPSQL_LEVEL(zip, 'region')"
"""

from __future__ import annotations

from typing import Callable, Sequence

from sqlglot import exp

from dpsql.schema import Column, Hierarchy, Schema

__all__ = ["with_levels", "level_columns", "level_sources", "LEVEL_FUNCTION"]

#: The function a mapped level reads as: ``dpsql_level(geo, 'county')``, evaluated on the domain alone.
LEVEL_FUNCTION = "dpsql_level"


def level_columns(schema: Schema) -> dict[str, tuple[Hierarchy, int | None, bool]]:
    """Every level's name (lower case) with its column, prefix length (None for a mapped level) and
    whether it is the whole code."""
    out = {}
    for col in schema.columns:
        if isinstance(col, Hierarchy):
            for name, _ in col.levels:
                length, whole = col.level_expression(name)
                out[name.lower()] = (col, length, whole)
    return out


def with_levels(tree: exp.Expression, schema: Schema) -> exp.Expression:
    """``tree`` with every level reference replaced by its expression (a select item keeps the level's
    name as its alias), unless it names another table (a public table's column of the same name);
    ``tree`` itself when the schema has no hierarchy."""
    levels = level_columns(schema)
    if not levels:
        return tree
    private = {schema.table.lower()} | {t.alias_or_name.lower() for t in tree.find_all(exp.Table)
                                         if t.name.lower() == schema.table.lower()}

    def replace(node: exp.Expression) -> exp.Expression:
        if (not isinstance(node, exp.Column) or node.name.lower() not in levels or schema.column(node.name)
                or (node.table and node.table.lower() not in private)):  # a public table's column
            return node
        col, length, whole = levels[node.name.lower()]
        code = exp.column(col.name, table=node.table or None)
        if whole:
            value = code
        elif length is None:
            level = next(name for name, _ in col.levels if name.lower() == node.name.lower())
            value = exp.Anonymous(this=LEVEL_FUNCTION, expressions=[code, exp.Literal.string(level)])
        else:
            value = exp.Substring(this=code, start=exp.Literal.number(1), length=exp.Literal.number(length))
        if isinstance(node.parent, exp.Select) and node.arg_key == "expressions":
            return exp.alias_(value, node.name)
        return value

    return tree.copy().transform(replace)


def level_sources(tree: exp.Expression, columns: Sequence[Column], name: Callable[[int, int], str]
                  ) -> tuple[exp.Expression, dict[int, list[tuple[str, tuple[str, ...]]]]]:
    """``tree`` with every ``dpsql_level(code, 'level')`` call on a mapped level of one of ``columns``
    replaced by a column reference, ``name(i, k)`` for level ``k`` of ``columns[i]`` (in place, but for
    a call that is the whole tree); and, for each such column's position ``i``, the referenced levels
    as ``(name(i, k), every value's code at level k)``: the columns its domain must also list for the
    tree to evaluate. A call on anything else is left to DuckDB, which has no such function and
    refuses it."""
    out: dict[int, list[tuple[str, tuple[str, ...]]]] = {}
    position = {c.name.lower(): i for i, c in enumerate(columns)}
    for call in list(tree.find_all(exp.Anonymous)):
        args = call.expressions
        if (str(call.this).lower() != LEVEL_FUNCTION or len(args) != 2 or not isinstance(args[0], exp.Column)
                or args[0].name.lower() not in position or not isinstance(args[1], exp.Literal)):
            continue
        i = position[args[0].name.lower()]
        col = columns[i]
        k = next((k for k, (level, length) in enumerate(getattr(col, "levels", ()))
                  if length is None and level.lower() == args[1].name.lower()), None)
        if k is None:
            continue
        ref = name(i, k)
        if all(ref != have for have, _ in out.get(i, [])):
            out.setdefault(i, []).append((ref, col.level_codes[k]))
        ref_node = exp.column(ref, quoted=True)
        if call is tree:
            return ref_node, out
        call.replace(ref_node)
    return tree, out
