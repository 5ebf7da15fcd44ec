"""The levels of a hierarchy column, read as expressions over its codes.

A schema's ``type: hierarchy`` column (:class:`~dpsql.schema.Hierarchy`) names levels that are
prefixes of its codes. Before a statement is analyzed, every reference to a level that is not a
column is replaced by its definition: ``state`` by ``substr(geo, 1, 2)``, a level as long as every
code by ``geo`` itself. The rest of the compiler sees a key or a predicate over ``geo``, evaluated
on its public domain like any other (:mod:`dpsql.sql.grid`): ``GROUP BY state`` is a partition of
the codes, which strategy selection recognizes as a level of a tree (:mod:`dpsql.hdmm.hierarchy`).
The result columns keep the level's name (DuckDB binds the statement with the levels as columns,
:mod:`dpsql.sql.bind`).

>>> from dpsql.schema import load_schema
>>> import sqlglot
>>> s = load_schema({"table": "t", "columns": {"geo": {"type": "hierarchy", "values": ["0601", "0602"],
...                                            "levels": {"state": 2, "county": 4}}}})
>>> with_levels(sqlglot.parse_one("SELECT state, county FROM t WHERE state = '06'"), s).sql()
"SELECT SUBSTRING(geo, 1, 2) AS state, geo AS county FROM t WHERE SUBSTRING(geo, 1, 2) = '06'"
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.schema import Hierarchy, Schema

__all__ = ["with_levels", "level_columns"]


def level_columns(schema: Schema) -> dict[str, tuple[Hierarchy, int, bool]]:
    """Every level's name (lower case) with its column, prefix length and whether it is the whole code."""
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
        value = code if whole else exp.Substring(this=code, start=exp.Literal.number(1),
                                                 length=exp.Literal.number(length))
        if isinstance(node.parent, exp.Select) and node.arg_key == "expressions":
            return exp.alias_(value, node.name)
        return value

    return tree.copy().transform(replace)
