"""Lookup joins with public tables, inlined as functions of the private columns.

One public function, :func:`lookup`. ``FROM people p JOIN regions r ON p.state =
r.state`` (or ``USING (state)``, or a LEFT JOIN), where ``regions`` is declared
under the schema's ``public_tables:`` (or marked public by the owner in
``dpsql.connect(..., public_tables=[...])``) and its join key is unique there, adds no
row and removes none but those without a match: each private row gets at most
one public row, a function of its key. So every column of ``regions`` is
rewritten to a CASE over the key's values (``CASE p.state WHEN 'CA' THEN 'West'
... END``), an INNER join also keeps only the rows whose key has a match (``p.state
IN (...)``), and the join is dropped. What remains reads the private table alone
and is evaluated on its domain like any other expression, so the semantics are
the join's exactly, NULL keys included (they match nothing).

Refused, with the reason: a table that is not public (a join of two private
tables), a key that is not unique in the public table (one-to-many: a row would
be counted more than once), RIGHT, FULL and CROSS joins, and conditions other
than equalities between a private and a public column.

>>> import sqlglot
>>> from dpsql.schema import load_schema
>>> s = load_schema({"table": "t", "columns": {"st": {"type": "categorical", "values": ["CA", "NY"]}},
...                  "public_tables": {"r": {"columns": ["st", "region"], "rows": [["CA", "W"], ["NY", "E"]]}}})
>>> tree = sqlglot.parse_one("SELECT r.region, COUNT(*) FROM t JOIN r USING (st) GROUP BY 1", dialect="duckdb")
>>> lookup(tree, s, lambda *a: ValueError(a[1])).sql(dialect="duckdb")
"SELECT CASE st WHEN 'CA' THEN 'W' WHEN 'NY' THEN 'E' END AS region, COUNT(*) FROM t WHERE st IN ('CA', 'NY') GROUP BY 1"
"""

from __future__ import annotations

from typing import Any, Callable

from sqlglot import exp

from dpsql.errors import SQLError, UnsupportedSQLError
from dpsql.schema import PublicTable, Schema

__all__ = ["lookup"]

Fail = Callable[..., SQLError]


def lookup(tree: exp.Select, schema: Schema, fail: Fail) -> exp.Select:
    """``tree`` with its joins with public tables inlined (see the module docstring); a tree
    without joins is returned as it is. ``fail(cls, message, construct, node)`` builds the error."""
    joins = tree.args.get("joins") or []
    if not joins or any(not any(j.args.get(k) for k in ("on", "using", "side", "kind", "method")) for j in joins):
        return tree  # none, or FROM a, b: the analyzer refuses a second table
    frm = tree.args.get("from_")
    private = frm.this if frm is not None else None
    if not isinstance(private, exp.Table) or private.name.lower() != schema.table.lower():
        return tree  # the FROM check names what is wrong
    private_names = {schema.table.lower()} | ({private.alias.lower()} if private.alias else set())
    tree = tree.copy()  # the statement's own tree stays as written
    for join in tree.args["joins"]:
        tree = _inline(tree, join, schema, private_names, fail)
    tree.set("joins", None)
    return tree


def _inline(tree: exp.Select, join: exp.Join, schema: Schema, private_names: set[str], fail: Fail) -> exp.Select:
    table = join.this
    side, kind = (join.args.get("side") or "").upper(), (join.args.get("kind") or "").upper()
    if not isinstance(table, exp.Table) or table.args.get("db") or table.args.get("catalog"):
        raise fail(UnsupportedSQLError, "JOIN takes a public table by name", "JOIN", join)
    public = schema.public_table(table.name)
    if public is None:
        raise fail(UnsupportedSQLError, f"JOIN with {table.name!r} is not supported: only a public lookup table "
                   "(declared under public_tables: in the schema, or marked public by the data owner when "
                   "connecting) can be joined (a join of two private tables would let one row weigh on many "
                   "answers)", "JOIN", join)
    if side not in ("", "LEFT") or kind not in ("", "INNER", "OUTER") or (kind == "OUTER" and side != "LEFT") \
            or join.args.get("method"):
        name = " ".join(x for x in (join.args.get("method"), side, kind) if x) + " JOIN"
        raise fail(UnsupportedSQLError, f"{name} is not supported: a lookup join is INNER or LEFT (a RIGHT or FULL "
                   "join would add rows for public keys)", name, join)
    names = {public.name.lower()} | ({table.alias.lower()} if table.alias else set())
    pairs = _key_pairs(join, public, schema, private_names, names, fail)
    key_cols = [p for p, _ in pairs]
    positions = [q for _, q in pairs]
    rows = [r for r in public.rows if all(_in_domain(schema, c, r[q]) for c, q in pairs)]
    keys = [tuple(r[q] for q in positions) for r in rows]
    if len(set(keys)) != len(keys):
        raise fail(UnsupportedSQLError, f"the join key ({', '.join(public.columns[q] for q in positions)}) is not "
                   f"unique in public table {public.name!r}: a one-to-many join would count a row more than once",
                   "JOIN", join)

    def replace(node: exp.Expression) -> exp.Expression:
        if not isinstance(node, exp.Column) or node.find_ancestor(exp.Join) is not None:
            return node
        qualifier = node.table.lower() if node.table else None
        pos = public.column(node.name)
        if pos is None or (qualifier not in names if qualifier else schema.column(node.name) is not None):
            return node
        if len(key_cols) == 1:  # CASE key WHEN v THEN ...: each value checked against the key's domain
            value = exp.Case(this=exp.column(key_cols[0]),
                             ifs=[exp.If(this=_literal(key[0]), true=_literal(r[pos])) for key, r in zip(keys, rows)])
        else:
            value = exp.Case(ifs=[exp.If(this=_match(key_cols, key), true=_literal(r[pos]))
                                  for key, r in zip(keys, rows)])
        if not value.args["ifs"]:
            value = exp.Null()
        value.meta["lookup"] = node  # what it stands for, and where: for messages about it
        if isinstance(node.parent, exp.Select) and node.arg_key == "expressions":
            return exp.alias_(value, public.columns[pos])
        return value

    tree = tree.transform(replace, copy=False)
    if side != "LEFT":  # INNER: only the rows whose key has a match
        if len(key_cols) == 1 and keys:
            match: exp.Expression = exp.In(this=exp.column(key_cols[0]), expressions=[_literal(k[0]) for k in keys])
        else:
            match = exp.or_(*[_match(key_cols, k) for k in keys]) if keys else exp.false()
        tree.set("where", exp.Where(this=match if tree.args.get("where") is None
                                    else exp.and_(exp.paren(match), exp.paren(tree.args["where"].this))))
    return tree


def _key_pairs(join: exp.Join, public: PublicTable, schema: Schema, private_names: set[str], names: set[str],
               fail: Fail) -> list[tuple[str, int]]:
    """``(private column, public column position)`` of each equality of the join's ON or USING."""
    using = join.args.get("using")
    if using:
        pairs = []
        for ident in using:
            col, pos = schema.column(ident.name), public.column(ident.name)
            if col is None or pos is None:
                raise fail(UnsupportedSQLError, f"USING ({ident.name}) needs a column of both tables", "USING", ident)
            pairs.append((col.name, pos))
        return pairs
    on = join.args.get("on")
    if on is None:
        raise fail(UnsupportedSQLError, "a lookup JOIN needs ON or USING", "JOIN", join)
    pairs = []
    parts = list(on.flatten()) if isinstance(on, exp.And) else [on]
    for part in parts:
        part = part.unnest()
        sides = [part.this, part.expression] if isinstance(part, exp.EQ) else []
        if len(sides) != 2 or not all(isinstance(s, exp.Column) for s in sides):
            raise fail(UnsupportedSQLError, "a lookup JOIN's condition must be equalities between a column of the "
                       "private table and one of the public table", "JOIN condition", part)
        private_side = [s for s in sides if _is_private(s, schema, private_names)]
        public_side = [s for s in sides if s not in private_side and public.column(s.name) is not None
                       and (not s.table or s.table.lower() in names)]
        if len(private_side) != 1 or len(public_side) != 1:
            raise fail(UnsupportedSQLError, "a lookup JOIN's condition must equal a column of the private table with "
                       "a column of the public table", "JOIN condition", part)
        pairs.append((schema.column(private_side[0].name).name, public.column(public_side[0].name)))
    return pairs


def _is_private(col: exp.Column, schema: Schema, private_names: set[str]) -> bool:
    return schema.column(col.name) is not None and (not col.table or col.table.lower() in private_names)


def _in_domain(schema: Schema, column: str, value: Any) -> bool:
    """Whether ``value`` (not NULL) is a value of ``column``'s domain: other keys never match."""
    if value is None:
        return False
    try:
        schema.column(column).index_of(value)
        return True
    except (KeyError, TypeError, ValueError, OverflowError):
        return False


def _match(columns: list[str], key: tuple) -> exp.Expression:
    return exp.and_(*[exp.EQ(this=exp.column(c), expression=_literal(v)) for c, v in zip(columns, key)])


def _literal(value: Any) -> exp.Expression:
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, str):
        return exp.Literal.string(value)
    return exp.Literal.number(repr(value) if isinstance(value, float) else str(value))
