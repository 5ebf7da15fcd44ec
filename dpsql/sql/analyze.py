"""Analysis: one parsed statement to a :class:`~dpsql.sql.plan.QueryPlan`.

The public function is :func:`plan_statement`. It checks the statement
against the grammar (``grammar/dpsql.ebnf``) and the schema, resolves column
names, matches select items to GROUP BY keys, and rewrites HAVING and ORDER BY
over output column names. Anything outside the grammar raises a
:class:`dpsql.errors.SQLError` subclass naming the construct, its line and
its column. Nothing here looks at data.

DuckDB reads the statement too (:mod:`dpsql.sql.bind`, on empty tables): its output
columns are named as DuckDB names them (``count_star()``, duplicates suffixed ``_1``),
and a statement DuckDB's binder refuses is refused (after dpsql's own checks, whose
messages say more), as is a table called by its name after it was aliased. A column
named as one of the result's error columns is refused (:mod:`dpsql.sql.outputs`), and
so is a constant that DuckDB cannot evaluate in a clause that runs after noise, or a
division by a constant 0 (:mod:`dpsql.sql.constants`).

The guarantee that nothing is silently ignored is :data:`SUPPORTED`: the
sqlglot node types the compiler implements exactly, each with the arguments
it reads. One pass over every node of a statement refuses any other type, and
any argument that is set but not read (``BETWEEN SYMMETRIC``, a table's
``TABLESAMPLE`` or schema qualifier, ``NULLS FIRST``, ``LIMIT ... PERCENT``),
before any expression is evaluated.

>>> from dpsql.schema import load_schema
>>> s = load_schema({"table": "t", "columns": {"sex": {"type": "categorical", "values": ["F", "M"]},
...                                          "age": {"type": "integer", "min": 0, "max": 99}}})
>>> p = plan_statement("SELECT sex, COUNT(*) AS n FROM t WHERE age >= 18 GROUP BY sex", s)
>>> [k.name for k in p.keys], [(a.name, a.func) for a in p.aggregates], p.where.sql()
(['sex'], [('n', 'count')], 'age >= 18')
>>> plan_statement("SELECT sex, COUNT(*) FROM t JOIN u ON t.a = u.a GROUP BY sex", s)
Traceback (most recent call last):
...
dpsql.errors.UnsupportedSQLError: JOIN with 'u' is not supported: only a public lookup table (declared under public_tables: in the schema, or marked public by the data owner when connecting) can be joined (a join of two private tables would let one row weigh on many answers) at line 1, column 29
"""

from __future__ import annotations

import math
from typing import Callable, NoReturn

import duckdb
import numpy as np
from sqlglot import exp

from dpsql import limits
from dpsql.errors import DomainError, GroupingError, SQLError, UnknownColumnError, UnsupportedSQLError, did_you_mean
from dpsql.released import SYNTH_SCHEMA
from dpsql.schema import Binned, DateRange, Schema
from dpsql.sql import sandbox
from dpsql.sql.affine import affine_aggregates
from dpsql.sql.bind import output_names
from dpsql.sql.constants import check_constants
from dpsql.sql.grid import (
    MAX_ATTRIBUTE_SIZE,
    Grid,
    column_function,
    column_refs,
    conjuncts,
    construct_name,
    literal_value,
    number_value,
)
from dpsql.sql.inline import inline
from dpsql.sql.levels import LEVEL_FUNCTION, with_levels
from dpsql.sql.lookup import lookup
from dpsql.sql.outputs import clash
from dpsql.sql.parse import Statement, parse_statements
from dpsql.sql.plan import Aggregate, GroupKey, QueryPlan

__all__ = ["plan_statement", "analyze", "SUPPORTED", "set_args"]

_ALLOWED_SELECT_ARGS = {"expressions", "from_", "where", "group", "having", "qualify", "order", "limit", "offset"}
_SELECT_ARG_NAMES = {"distinct": "SELECT DISTINCT", "joins": "JOIN", "with_": "WITH (common table expression)",
                     "qualify": "QUALIFY", "windows": "WINDOW clause", "laterals": "LATERAL",
                     "sample": "TABLESAMPLE", "pivots": "PIVOT", "into": "SELECT INTO",
                     "locks": "FOR UPDATE", "connect": "CONNECT BY", "prewhere": "PREWHERE",
                     "settings": "SETTINGS", "format": "FORMAT", "match": "MATCH_RECOGNIZE",
                     "cluster": "CLUSTER BY", "distribute": "DISTRIBUTE BY", "sort": "SORT BY",
                     "operation_modifiers": "operation modifier", "exclude": "EXCLUDE"}
_AGGREGATES = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg", exp.Variance: "var_samp",
               exp.VariancePop: "var_pop", exp.Stddev: "stddev_samp", exp.StddevSamp: "stddev_samp",
               exp.StddevPop: "stddev_pop"}
_SUPPORTED_AGGREGATES = ("COUNT, SUM, AVG, VAR_POP, VAR_SAMP, VARIANCE, STDDEV, STDDEV_POP, STDDEV_SAMP, MEDIAN, "
                         "QUANTILE_CONT, QUANTILE_DISC, QUANTILE, PERCENTILE_CONT and PERCENTILE_DISC")
_AGGREGATE_NAMES = tuple(_SUPPORTED_AGGREGATES.replace(" and", ",").split(", "))

_BINARY = frozenset({"this", "expression"})
#: The sqlglot node types the compiler implements exactly, each with the arguments it reads (an
#: argument not listed must be unset: None, False or empty). Keyed by exact type (TryCast is not
#: Cast). Membership is necessary, not sufficient: the analyzer and the evaluator still refuse a
#: node in the wrong place (a division in WHERE) or with the wrong values.
SUPPORTED: dict[type, frozenset[str]] = {
    # the statement: SELECT ... FROM one table [WHERE] [GROUP BY] [HAVING] [ORDER BY] [LIMIT] [OFFSET]
    exp.Select: frozenset(_ALLOWED_SELECT_ARGS | {"distinct"}),  # a plain DISTINCT; DISTINCT ON is refused first
    exp.From: frozenset({"this"}),
    exp.Table: frozenset({"this", "alias"}),
    exp.TableAlias: frozenset({"this"}),
    exp.Identifier: frozenset({"this", "quoted"}),
    exp.Alias: frozenset({"this", "alias"}),
    exp.Column: frozenset({"this", "table"}),
    exp.Star: frozenset(),
    exp.Where: frozenset({"this"}),
    exp.Group: frozenset({"expressions", "all", "rollup", "cube"}),  # rollup, cube: MySQL's trailing WITH ROLLUP
    # GROUPING SETS, ROLLUP, CUBE (a Tuple is a composite element or a set; () the grand total) and GROUPING()
    exp.GroupingSets: frozenset({"expressions"}), exp.Rollup: frozenset({"expressions"}),
    exp.Cube: frozenset({"expressions"}), exp.Tuple: frozenset({"expressions"}),
    exp.Grouping: frozenset({"expressions"}),
    # windows over a grouped statement's released aggregates (_check_windows), run after noise
    exp.Window: frozenset({"this", "partition_by", "order", "spec", "over"}),
    exp.WindowSpec: frozenset({"kind", "start", "start_side", "end", "end_side"}),
    exp.RowNumber: frozenset(), exp.Rank: frozenset(), exp.DenseRank: frozenset(), exp.PercentRank: frozenset(),
    exp.CumeDist: frozenset(), exp.Ntile: frozenset({"this"}), exp.Lag: frozenset({"this", "offset", "default"}),
    exp.Lead: frozenset({"this", "offset", "default"}), exp.FirstValue: frozenset({"this"}),
    exp.LastValue: frozenset({"this"}), exp.NthValue: frozenset({"this", "offset"}),
    exp.Having: frozenset({"this"}), exp.Qualify: frozenset({"this"}),
    exp.Order: frozenset({"expressions", "this"}),  # this: the fraction of QUANTILE_CONT(x, q ORDER BY x)
    exp.Ordered: frozenset({"this", "desc", "nulls_first"}),  # nulls_first only False: DuckDB's default
    exp.Limit: frozenset({"expression"}),
    exp.Offset: frozenset({"expression"}),
    # aggregates (big_int is sqlglot's note that COUNT returns BIGINT)
    exp.Count: frozenset({"this", "big_int"}), exp.CountIf: frozenset({"this"}),
    exp.Filter: frozenset({"this", "expression"}),
    exp.Distinct: frozenset(),  # SELECT DISTINCT only (in an aggregate, or DISTINCT ON, it is refused)
    exp.Sum: frozenset({"this"}),
    exp.Avg: frozenset({"this"}),
    exp.Variance: frozenset({"this"}),
    exp.VariancePop: frozenset({"this"}),
    exp.Stddev: frozenset({"this"}),
    exp.StddevSamp: frozenset({"this"}),
    exp.StddevPop: frozenset({"this"}),
    exp.Median: frozenset({"this"}),
    exp.PercentileCont: _BINARY, exp.PercentileDisc: _BINARY,  # QUANTILE_CONT(x, q), or q WITHIN GROUP
    exp.Quantile: frozenset({"this", "quantile"}),
    exp.WithinGroup: _BINARY,
    # conditions and values: WHERE and GROUP BY keys, evaluated on the domain (dpsql.sql.grid)
    exp.Paren: frozenset({"this"}),
    exp.And: _BINARY, exp.Or: _BINARY, exp.Not: frozenset({"this"}),
    exp.EQ: _BINARY, exp.NEQ: _BINARY, exp.LT: _BINARY, exp.LTE: _BINARY, exp.GT: _BINARY, exp.GTE: _BINARY,
    exp.Between: frozenset({"this", "low", "high"}),
    exp.In: frozenset({"this", "expressions"}),
    exp.Is: _BINARY,
    exp.Literal: frozenset({"this", "is_string"}),
    exp.Boolean: frozenset({"this"}),
    exp.Null: frozenset(),
    exp.Neg: frozenset({"this"}),
    exp.Add: _BINARY, exp.Sub: _BINARY, exp.Mul: _BINARY,
    exp.Cast: frozenset({"this", "to"}),
    exp.TryCast: frozenset({"this", "to", "safe"}),
    exp.DataType: frozenset({"this", "nested", "expressions"}),
    exp.DataTypeParam: frozenset({"this"}),  # DECIMAL(10, 2): DuckDB converts (dpsql.sql.domain_eval)
    exp.Case: frozenset({"this", "ifs", "default"}),
    exp.If: frozenset({"this", "true", "false"}),  # a CASE branch; IF(c, a, b) in HAVING
    # any other scalar function or operator (see scalar_function) DuckDB evaluates itself: on the
    # domain in WHERE and GROUP BY, on the released answers in SELECT, HAVING and ORDER BY
}

_COMPARISON_TYPES = frozenset({exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE})

#: Names of arguments that are set but not supported, for messages.
_ARG_NAMES = {
    (exp.Between, "symmetric"): "BETWEEN SYMMETRIC", (exp.Table, "sample"): "TABLESAMPLE",
    (exp.Table, "db"): "a schema-qualified table name", (exp.Table, "catalog"): "a catalog-qualified table name",
    (exp.Table, "version"): "time travel (AT / FOR SYSTEM_TIME)", (exp.Table, "only"): "ONLY",
    (exp.TableAlias, "columns"): "column names in a table alias", (exp.Ordered, "nulls_first"): "NULLS FIRST",
    (exp.Limit, "limit_options"): "LIMIT ... PERCENT / WITH TIES", (exp.Limit, "offset"): "LIMIT offset, count",
    (exp.Group, "all"): "GROUP BY ALL", (exp.Group, "grouping_sets"): "GROUPING SETS",
    (exp.Group, "totals"): "WITH TOTALS", (exp.In, "query"): "IN (subquery)",
    (exp.In, "unnest"): "IN UNNEST", (exp.Column, "db"): "a schema-qualified column name",
    (exp.Column, "catalog"): "a catalog-qualified column name", (exp.Cast, "format"): "CAST ... FORMAT",
    (exp.DataType, "nested"): "a nested type",
    (exp.Is, "negate"): "IS NOT",
}


class _Context:
    """Builds errors with positions for one statement."""

    def __init__(self, stmt: Statement) -> None:
        self.stmt = stmt

    def error(self, cls: type[SQLError], message: str, construct: str | None = None,
              node: exp.Expression | None = None) -> SQLError:
        line, col = self.stmt.position(node)
        return cls(message, construct, line, col)

    def fail(self, cls: type[SQLError], message: str, construct: str | None = None,
             node: exp.Expression | None = None) -> NoReturn:
        raise self.error(cls, message, construct, node)


def plan_statement(sql: "str | Statement", schema: Schema) -> QueryPlan:
    """Analyze exactly one SQL statement into a :class:`QueryPlan`."""
    if isinstance(sql, Statement):
        return analyze(sql, schema)
    stmts = parse_statements(sql)
    if len(stmts) != 1:
        if not stmts:
            raise UnsupportedSQLError("no SQL statement to compile", "empty statement", 1, 1)
        line, col = stmts[1].position(None)
        raise UnsupportedSQLError("expected one statement; use compile_batch for several",
                                  "second statement", line, col)
    return analyze(stmts[0], schema)


def analyze(stmt: Statement, schema: Schema) -> QueryPlan:
    """Check one parsed statement and build its plan (its CTEs and FROM-subqueries merged first:
    :func:`~dpsql.sql.inline.inline`)."""
    try:
        return _analyze(inline(stmt, schema), schema)
    except RecursionError:  # a safety net: parse_statements bounds the nesting on tokens first
        line, col = stmt.position(None)
        raise limits.nesting_error(line, col, ", or its syntax tree is too deep for the Python stack left") from None


#: One select item as read from the select list: (alias, expression, whether it is an aggregate).
_Item = tuple[str | None, exp.Expression, bool]


def _analyze(stmt: Statement, schema: Schema) -> QueryPlan:
    """The steps of :func:`analyze`, in the order their errors are raised."""
    ctx = _Context(stmt)
    unit = stmt.options.get("privacy_unit_column")
    if unit is not None and (schema.privacy_unit.column or "").lower() != str(unit).lower():
        declared = (f"column {schema.privacy_unit.column!r}" if schema.privacy_unit.column else "each row")
        ctx.fail(UnsupportedSQLError, f"privacy_unit_column = {unit} is not the privacy unit the data owner declared "
                 f"in the schema ({declared}); a statement cannot choose whom the noise protects",
                 "privacy_unit_column", None)
    tree = affine_aggregates(_check_statement(with_levels(stmt.tree, schema), schema, ctx), schema)
    table, alias = _check_from(tree, schema, ctx)
    _resolve_columns(tree, schema, table, alias, ctx)
    items, select_aliases = _read_select_list(tree, ctx)
    _check_windows(tree, ctx)
    where = _check_where(tree, schema, ctx)
    keys, key_exprs, sets = _read_group_by(tree, items, select_aliases, schema, ctx)
    grouped = tree.args.get("group") is not None or tree.args.get("distinct") is not None
    key_of_item = _match_items_to_keys(items, key_exprs, grouped, schema, ctx)
    names, refusal = _duckdb_names(stmt, schema, len(items))
    outputs, aggregates, used_names, computed = _name_outputs(items, keys, key_of_item, schema, ctx, names)
    set_column = _unique("grouping_set", used_names) if sets is not None else None
    rewrite = _Rewriter(keys, key_exprs, aggregates, items, outputs, schema, ctx, used_names, (sets, set_column))
    # an expression over aggregates reads them (hidden if not selected) by output name
    computed = [(name, rewrite(body, "SELECT") if _after_noise(body) else body) for name, body in computed]
    having = _rewrite_having(tree, rewrite)
    qualify = _rewrite_qualify(tree, rewrite, computed)
    order = _read_order_by(tree, rewrite, outputs, ctx)
    limit = _count_clause(tree.args.get("limit"), "LIMIT", ctx)
    offset = _count_clause(tree.args.get("offset"), "OFFSET", ctx)
    if refusal is not None:  # after dpsql's own checks, whose messages are more precise
        ctx.fail(UnsupportedSQLError, f"DuckDB refuses this statement ({refusal})", "statement", None)
    line, _ = stmt.position(None)
    plan = QueryPlan(sql=stmt.sql, table=schema.table, keys=tuple(keys), aggregates=tuple(rewrite.aggregates),
                     where=_strip(where) if where is not None else None, outputs=tuple(outputs),
                     having=having, order_by=tuple(order), limit=limit, offset=offset,
                     options=dict(stmt.options), line=line, computed=tuple(computed),
                     grouping_sets=sets, set_column=set_column, windows=tuple(rewrite.windows),
                     qualify=qualify)
    _check_clash(plan, tree, ctx)
    return plan


# -- the steps of _analyze, in order ------------------------------------------------------

def _duckdb_names(stmt: Statement, schema: Schema, items: int) -> tuple[list[str] | None, str | None]:
    """DuckDB's names for the statement's select items (:mod:`dpsql.sql.bind`), or why DuckDB's
    binder refuses it (the first line of its message, with the names it suggests). Names are None when there is no text to
    bind, or DuckDB cannot read it for another reason: a chain of operators longer than its
    parser allows, which dpsql evaluates; dpsql's own names are used then.

    What is bound is the statement up to HAVING (:attr:`~dpsql.sql.parse.Statement.head`): the
    rest does not name a column, and DuckDB's binder evaluates a constant HAVING condition,
    unbounded; WHERE and GROUP BY have been evaluated on the domain by then. HAVING and ORDER BY
    run in DuckDB at compile time (:func:`~dpsql.sql.postprocess.check_postprocessing`)."""
    if not stmt.text:
        return None, None
    try:
        names = output_names(stmt.head, schema)
    except duckdb.BinderException as e:
        lines = str(e).strip().splitlines()
        # its first line, and the names it suggests (DuckDB matches ASCII letters alone in any case:
        # "ünïcode" does not find "Ünïcode"); what it binds is the schema, never a row
        reason = "; ".join(lines[:1] + [line for line in lines[1:] if line.startswith("Candidate bindings")]) \
            if lines else type(e).__name__
        return None, reason[:300]
    except duckdb.Error:
        return None, None
    return (names if len(names) == items else None), None


def _check_clash(plan: QueryPlan, tree: exp.Select, ctx: _Context) -> None:
    """Refuse a column named as an error column of the result (:mod:`dpsql.sql.outputs`)."""
    found = clash(plan)
    if found is None:
        return
    column, error, output = found
    if column in plan.outputs:
        where, node = f"select item {plan.outputs.index(column) + 1}", tree.expressions[plan.outputs.index(column)]
    else:
        where, node = "a column read by HAVING or ORDER BY only", None
    whose = "it" if output == column else repr(output)
    ctx.fail(UnsupportedSQLError, f"the output column {column!r} ({where}) has the name of the error column "
             f"{error!r} that the result adds for {whose}, so one would overwrite the other: rename it "
             "(AS another name)", f"column {column!r}", node)


def _check_statement(tree: exp.Expression, schema: Schema, ctx: _Context) -> exp.Select:
    """Check that the statement is a SELECT using only supported clauses and nodes, before anything reads it."""
    if not isinstance(tree, exp.Select):
        name = _statement_kind(tree)
        ctx.fail(UnsupportedSQLError, f"{name} is not supported: only SELECT statements compile", name, tree)
    tree = lookup(tree, schema, ctx.error)
    _check_select_args(tree, ctx)
    _check_supported(tree, schema, ctx)
    return tree


def _read_select_list(tree: exp.Select, ctx: _Context) -> tuple[list[_Item], dict[str, exp.Expression]]:
    """Read the select items (refusing * and expressions over aggregates) and their aliases, for GROUP BY."""
    items = list(tree.expressions)
    if not items:  # pragma: no cover - sqlglot rejects an empty select list
        ctx.fail(UnsupportedSQLError, "empty select list", "SELECT", tree)
    select_aliases: dict[str, exp.Expression] = {}
    parsed_items: list[_Item] = []
    for item in items:
        alias = item.alias if isinstance(item, exp.Alias) else None
        body = _unwrap(item)  # aliases and parentheses: (SUM(x)) is SUM(x)
        if isinstance(body, exp.Star):
            ctx.fail(UnsupportedSQLError, "SELECT * is not supported: name the group keys and aggregates",
                     "*", body)
        parsed_items.append((alias, body, _after_noise(body)))
        if alias:
            select_aliases[alias.lower()] = body
    return parsed_items, select_aliases


#: The functions a window may call: ranking and offset functions, and SUM, AVG and COUNT.
_WINDOW_FUNCTIONS = (exp.RowNumber, exp.Rank, exp.DenseRank, exp.PercentRank, exp.CumeDist, exp.Ntile, exp.Lag,
                     exp.Lead, exp.FirstValue, exp.LastValue, exp.NthValue, exp.Sum, exp.Avg, exp.Count)


def _check_windows(tree: exp.Select, ctx: _Context) -> None:
    """Refuse a window function over the table's rows: a window runs after noise, on the released
    groups of a statement that aggregates (``SUM(COUNT(*)) OVER ()``, ``rank() OVER (ORDER BY
    COUNT(*) DESC)``), in SELECT and ORDER BY only, as SQL evaluates windows after HAVING."""
    windows = list(tree.find_all(exp.Window))
    if not windows:
        if tree.args.get("qualify") is not None:
            ctx.fail(UnsupportedSQLError, "QUALIFY filters on window functions over the aggregates (rank() OVER "
                     "(ORDER BY COUNT(*) DESC) <= 3); without one, write HAVING", "QUALIFY", tree.args["qualify"])
        return
    aggregated = tree.args.get("group") is not None or any(_is_agg_node(n) for n in tree.find_all(exp.AggFunc))
    for w in windows:
        clause = w.find_ancestor(exp.Where, exp.Group, exp.Having, exp.Filter, exp.Window)
        if clause is not None:
            name = {exp.Where: "WHERE", exp.Group: "GROUP BY", exp.Having: "HAVING", exp.Filter: "FILTER",
                    exp.Window: "another window"}[type(clause)]
            ctx.fail(UnsupportedSQLError, f"window functions are not allowed in {name}", "window function", w.this)
        if not isinstance(w.this, _WINDOW_FUNCTIONS):
            name = w.this.sql_name() if not isinstance(w.this, exp.Anonymous) else str(w.this.this).upper()
            ctx.fail(UnsupportedSQLError, f"window function {name} is not supported (row_number, rank, dense_rank, "
                     "percent_rank, cume_dist, ntile, lag, lead, first_value, last_value, nth_value, SUM, AVG and "
                     "COUNT are)", "window function", w.this)
        if not aggregated:
            ctx.fail(UnsupportedSQLError, "window functions over the table's rows are not supported: a window runs "
                     "after noise over a statement's aggregates, e.g. SUM(COUNT(*)) OVER () or rank() OVER "
                     "(ORDER BY COUNT(*) DESC)", "window function", w.this)


def _check_where(tree: exp.Select, schema: Schema, ctx: _Context) -> exp.Expression | None:
    """Return the WHERE condition, checked to hold no aggregate and to evaluate on the columns' domains."""
    where_node = tree.args.get("where")
    where = where_node.this if where_node is not None else None
    if where is not None:
        _check_condition(where, "WHERE; use HAVING", schema, ctx)
    return where


def _check_condition(condition: exp.Expression, clause: str, schema: Schema, ctx: _Context) -> None:
    """Refuse a row condition (WHERE, FILTER, a CASE argument's WHEN) that holds an aggregate or
    does not evaluate on the columns' domains."""
    agg = _first_aggregate(condition)
    if agg is not None:
        ctx.fail(GroupingError, f"aggregates are not allowed in {clause}", construct_name(agg), agg)
    for part in conjuncts(condition):  # each on its own columns, as compile measures them
        _validate_expression(part, schema, ctx, predicate=True)


def _read_group_by(tree: exp.Select, items: list[_Item], select_aliases: dict[str, exp.Expression],
                   schema: Schema, ctx: _Context
                   ) -> tuple[list[GroupKey], list[exp.Expression], tuple[tuple[int, ...], ...] | None]:
    """Build the (not yet visible) group keys and their expressions from GROUP BY (or SELECT DISTINCT),
    refusing what cannot be a key; and, for GROUPING SETS, ROLLUP or CUBE, the grouping sets (each
    the indices of its keys, in the order the SQL standard expands them), else None."""
    keys: list[GroupKey] = []
    key_exprs: list[exp.Expression] = []
    group, distinct = tree.args.get("group"), tree.args.get("distinct") is not None
    if distinct and (group is not None or any(is_agg for _, _, is_agg in items)):
        ctx.fail(UnsupportedSQLError, "SELECT DISTINCT with aggregates or GROUP BY is not supported; SELECT "
                 "DISTINCT lists the public domain of its columns", "SELECT DISTINCT", tree.expressions[0])
    if group is None and not distinct:
        return keys, key_exprs, None
    for extra in ("grouping_sets", "totals"):
        if group is not None and group.args.get(extra):
            name = {"grouping_sets": "GROUPING SETS", "totals": "WITH TOTALS"}[extra]
            ctx.fail(UnsupportedSQLError, f"{name} is not supported here; write GROUP BY ROLLUP (...), CUBE (...) "
                     "or GROUPING SETS (...)", name, group)
    trailing = [n for n in ("rollup", "cube") if group is not None and group.args.get(n)]  # MySQL's WITH ROLLUP
    if len(trailing) > 1 or any(e.expressions for n in trailing for e in group.args[n]) \
            or (trailing and any(isinstance(g, _SET_NODES) for g in group.expressions)):
        ctx.fail(UnsupportedSQLError, "WITH ROLLUP or WITH CUBE takes a plain list of keys", "WITH ROLLUP", group)

    def key(g: exp.Expression) -> int:
        """The index of the key ``g`` names, added if new."""
        expr, name, _ = _resolve_group_item(_unwrap(g), items, select_aliases, schema, ctx)
        if _first_aggregate(expr) is not None:
            ctx.fail(GroupingError, "aggregates are not allowed in GROUP BY", "GROUP BY", g)
        found = next((k for k, e in enumerate(key_exprs) if _same(expr, e)), None)
        if found is not None:
            return found  # GROUP BY a, a
        if not column_refs(expr):
            ctx.fail(GroupingError, "GROUP BY a constant is not supported; group on columns",
                     f"GROUP BY {expr.sql(dialect='duckdb')}", g)
        _validate_expression(expr, schema, ctx, predicate=False)
        key_exprs.append(expr)
        keys.append(GroupKey(name=name, expr=_strip(expr), columns=tuple(column_refs(expr)), visible=False))
        return len(keys) - 1

    # DuckDB's GROUP BY ALL groups by every select item that holds no aggregate and reads a column;
    # SELECT DISTINCT (without aggregates) by every select item.
    every = distinct or group.args.get("all")
    entries = [body for _, body, is_agg in items if not is_agg and column_refs(body)] if every else group.expressions
    if trailing:  # GROUP BY a, b WITH ROLLUP is GROUP BY ROLLUP (a, b)
        entries = [(exp.Rollup if trailing[0] == "rollup" else exp.Cube)(expressions=list(entries))]
    if not any(isinstance(g, _SET_NODES) for g in entries):
        for g in entries:
            key(g)
        return keys, key_exprs, None
    sets: list[tuple[int, ...]] = [()]
    for g in entries:  # the cross product of the elements' sets
        expanded = _expand_sets(g, key, ctx)
        if len(sets) * len(expanded) > _MAX_GROUPING_SETS:
            ctx.fail(UnsupportedSQLError, f"this GROUP BY expands to more than {_MAX_GROUPING_SETS} grouping sets",
                     construct_name(g), g)
        sets = [tuple(dict.fromkeys(a + b)) for a in sets for b in expanded]
    return keys, key_exprs, tuple(tuple(sorted(s)) for s in sets)


_SET_NODES = (exp.GroupingSets, exp.Rollup, exp.Cube)
#: The most grouping sets one statement expands to (CUBE of 10 elements); each is measured.
_MAX_GROUPING_SETS = 1024


def _expand_sets(g: exp.Expression, key: Callable[[exp.Expression], int], ctx: _Context) -> list[tuple[int, ...]]:
    """The grouping sets of one GROUP BY element, each a tuple of key indices (``key(node)`` gives a
    node's): a key is one set of itself; ``ROLLUP (e1, ..., en)`` the prefixes (e1..en), ..., (e1), ();
    ``CUBE (e1, ..., en)`` every subset, largest first; ``GROUPING SETS (s1, ...)`` each listed set in
    turn, where a set is a key, a parenthesized list of keys (``()`` the grand total) or a nested
    ROLLUP, CUBE or GROUPING SETS. An element of ROLLUP and CUBE may be a parenthesized list of keys,
    kept together."""
    def unit(e: exp.Expression) -> tuple[int, ...]:  # (sqlglot does not parse a set node inside ROLLUP or CUBE)
        return tuple(key(x) for x in e.expressions) if isinstance(e, exp.Tuple) else (key(e),)

    if isinstance(g, exp.Rollup):
        units = [unit(e) for e in g.expressions]
        return [tuple(k for u in units[:n] for k in u) for n in range(len(units), -1, -1)]
    if isinstance(g, exp.Cube):
        units = [unit(e) for e in g.expressions]
        if 2 ** len(units) > _MAX_GROUPING_SETS:
            ctx.fail(UnsupportedSQLError, f"CUBE of {len(units)} elements expands to more than {_MAX_GROUPING_SETS} "
                     "grouping sets", "CUBE", g)
        n = len(units)
        return [tuple(k for i, u in enumerate(units) if mask >> (n - 1 - i) & 1 for k in u)
                for mask in range(2**n - 1, -1, -1)]
    if isinstance(g, exp.GroupingSets):
        out: list[tuple[int, ...]] = []
        for e in g.expressions:
            out.extend(_expand_sets(e, key, ctx) if isinstance(e, _SET_NODES) else [unit(e)])
            if len(out) > _MAX_GROUPING_SETS:
                ctx.fail(UnsupportedSQLError, f"GROUPING SETS lists more than {_MAX_GROUPING_SETS} sets",
                         "GROUPING SETS", g)
        return out
    return [(key(g),)]


def _match_items_to_keys(items: list[_Item], key_exprs: list[exp.Expression], grouped: bool, schema: Schema,
                         ctx: _Context) -> dict[int, int]:
    """Map each non-aggregate select item to its group key, refusing an item that is not a key (an
    unknown column in it first: ``SELECT oops FROM t`` was told about GROUP BY)."""
    key_of_item: dict[int, int] = {}
    for i, (alias, body, is_agg) in enumerate(items):
        if is_agg:
            continue
        if not column_refs(body):  # a constant: evaluated by DuckDB after noise, once per output row
            if not grouped and not _first_aggregate_in_items(items):
                ctx.fail(UnsupportedSQLError, "a constant select item needs an aggregate or GROUP BY beside it "
                         "(alone it would be one row per table row)", construct_name(body), body)
            continue
        match = next((k for k, e in enumerate(key_exprs) if _same(body, e)), None)
        if match is None:
            _check_known(body, schema, ctx)
            construct = f"column {body.name!r}" if isinstance(body, exp.Column) else construct_name(body)
            if not grouped and _first_aggregate_in_items(items):
                msg = "a non-aggregate select item needs GROUP BY"
            else:
                msg = "this select item is not a GROUP BY key and not inside an aggregate"
            ctx.fail(GroupingError, msg, construct, body)
        key_of_item[i] = match
    return key_of_item


def _name_outputs(items: list[_Item], keys: list[GroupKey], key_of_item: dict[int, int], schema: Schema,
                  ctx: _Context, names: list[str] | None = None
                  ) -> tuple[list[str], list[Aggregate], set[str], list[tuple[str, exp.Expression]]]:
    """Build the aggregates, the computed items (constants, expressions over aggregates) and
    unique output and key names (selected keys made visible), for HAVING and ORDER BY. Select
    item ``i`` is named ``names[i]`` (DuckDB's names, unique) when given."""
    outputs: list[str] = []
    aggregates: list[Aggregate] = []
    computed: list[tuple[str, exp.Expression]] = []
    used_names: set[str] = set()
    for i, (alias, body, is_agg) in enumerate(items):
        alias = names[i] if names is not None else alias
        if is_agg and _is_aggregate_call(body):
            agg = _make_aggregate(body, alias, schema, ctx, used_names)
            aggregates.append(agg)
            outputs.append(agg.name)
        elif i not in key_of_item:
            computed.append((_unique(alias or _default_name(body), used_names), body.copy()))
            outputs.append(computed[-1][0])
        else:
            k = key_of_item[i]
            key = keys[k]
            name = alias or key.name
            if key.visible:
                if name in outputs:
                    ctx.fail(GroupingError, f"group key {name!r} is selected twice", name, body)
                # selected twice under different aliases: not supported (ambiguous)
                ctx.fail(UnsupportedSQLError, "a group key may be selected only once", name, body)
            name = _unique(name, used_names)
            keys[k] = GroupKey(name=name, expr=key.expr, columns=key.columns, visible=True)
            outputs.append(name)
    for k, key in enumerate(keys):
        if not key.visible:
            keys[k] = GroupKey(name=_unique(key.name, used_names), expr=key.expr, columns=key.columns,
                               visible=False)
    return outputs, aggregates, used_names, computed


def _rewrite_having(tree: exp.Select, rewrite: _Rewriter) -> exp.Expression | None:
    """Rewrite HAVING over output names, so it can run on the released answers."""
    having_node = tree.args.get("having")
    if having_node is None:
        return None
    return rewrite(having_node.this, "HAVING")


def _rewrite_qualify(tree: exp.Select, rewrite: _Rewriter,
                     computed: list[tuple[str, exp.Expression]]) -> exp.Expression | None:
    """Rewrite QUALIFY over output names and the windows' hidden columns: it runs after the windows,
    before the select items, so a select item it names is spelled out."""
    node = tree.args.get("qualify")
    if node is None:
        return None
    items = {name: body for name, body in computed}
    return rewrite(node.this, "QUALIFY").transform(
        lambda n: items[n.name].copy() if isinstance(n, exp.Column) and not n.table and n.name in items else n)


def _read_order_by(tree: exp.Select, rewrite: _Rewriter, outputs: list[str],
                   ctx: _Context) -> list[tuple[exp.Expression, bool]]:
    """Resolve each ORDER BY term to an expression over output columns (a position, an output
    column, a group key, an aggregate, or an expression over them) and a direction, so it can run
    on the released answers."""
    order: list[tuple[exp.Expression, bool]] = []
    order_node = tree.args.get("order")
    if order_node is None:
        return order
    for o in order_node.expressions:
        target = o.this
        if isinstance(target, exp.Var) and target.name.upper() == "ALL":  # ORDER BY ALL: every output, in order
            order.extend((exp.column(name, quoted=True), bool(o.args.get("desc"))) for name in outputs)
            continue
        ok, lit = literal_value(target)
        if ok and isinstance(lit, int) and not isinstance(lit, bool):
            if not 1 <= lit <= len(outputs):
                ctx.fail(GroupingError, f"ORDER BY position {lit} is not in the select list "
                         f"(1..{len(outputs)})", f"ORDER BY {lit}", target)
            term: exp.Expression = exp.column(outputs[lit - 1], quoted=True)
        else:
            term = rewrite(target, "ORDER BY")
        order.append((term, bool(o.args.get("desc"))))
    return order


# -- structural checks -------------------------------------------------------------------

def _statement_kind(tree: exp.Expression) -> str:
    if isinstance(tree, exp.Union):
        return "UNION"
    if isinstance(tree, exp.Intersect):
        return "INTERSECT"
    if isinstance(tree, exp.Except):
        return "EXCEPT"
    key = tree.key.upper()
    return {"COMMAND": (str(tree.this).upper() if tree.this else "command")}.get(key, key)


def _check_select_args(tree: exp.Select, ctx: _Context) -> None:
    for key, value in tree.args.items():
        if key in _ALLOWED_SELECT_ARGS or not value or _plain_distinct(tree, value):
            continue
        if key == "joins":
            join = value[0]
            if not join.args.get("kind") and not join.args.get("side") and not join.args.get("on") \
                    and not join.args.get("using") and join.args.get("method") is None \
                    and _is_comma_join(join, ctx):
                ctx.fail(UnsupportedSQLError, f"a second table ({join.this.sql()}) is not supported: "
                         "a statement reads one table", "second table", join.this)
            ctx.fail(UnsupportedSQLError, "JOIN is not supported: a statement reads one table", "JOIN", join)
        name = _SELECT_ARG_NAMES.get(key, key.upper())
        node = value if isinstance(value, exp.Expression) else (value[0] if isinstance(value, list) else tree)
        if key == "distinct":  # a plain DISTINCT was let through above
            on = value.args["on"]
            name, node = "SELECT DISTINCT ON", on.expressions[0] if getattr(on, "expressions", None) else on
        ctx.fail(UnsupportedSQLError, f"{name} is not supported", name, node)


def _plain_distinct(tree: exp.Select, value: object) -> bool:
    """Whether ``value`` is the statement's own ``SELECT DISTINCT`` (not ``DISTINCT ON``)."""
    return value is tree.args.get("distinct") and isinstance(value, exp.Distinct) and not value.args.get("on")


def _is_comma_join(join: exp.Join, ctx: _Context) -> bool:
    from sqlglot.tokens import TokenType

    off = ctx.stmt.offset_of(join)
    if off is None:
        return False
    kw = ctx.stmt.source.token_before(off, {TokenType.COMMA, TokenType.JOIN, TokenType.FROM})
    for tok in ctx.stmt.source.tokens:
        if tok.start == kw:
            return tok.token_type == TokenType.COMMA
    return False


def scalar_function(node: exp.Expression) -> bool:
    """Whether ``node`` is a scalar function or operator outside :data:`SUPPORTED`: DuckDB
    evaluates the expression around it, on the declared domain in WHERE and GROUP BY
    (:mod:`dpsql.sql.domain_eval`, which also refuses a non-deterministic one) and on released
    values in SELECT, HAVING and ORDER BY. Aggregates, table functions and EXISTS are not."""
    return (isinstance(node, (exp.Func, exp.Binary, exp.Unary, exp.Interval, exp.Var, exp.Bracket))
            and not isinstance(node, (exp.AggFunc, exp.UDTF, exp.Exists, exp.Columns)))


def set_args(node: exp.Expression) -> list[str]:
    """The argument keys of ``node`` that are set: not None, not False, not an empty list."""
    return [k for k, v in node.args.items() if v is not None and v is not False and not (isinstance(v, list) and not v)]


def _check_supported(tree: exp.Expression, schema: Schema, ctx: "_Context") -> None:
    """Refuse, in one pass over every node, a subquery, a node type not in :data:`SUPPORTED`, an
    argument that is set but that the compiler does not read, and a number literal it cannot read
    exactly."""
    for node in tree.walk():
        allowed = SUPPORTED.get(type(node))
        if node is not tree and isinstance(node, (exp.Select, exp.Subquery, exp.SetOperation)):
            ctx.fail(UnsupportedSQLError, "subqueries are not supported", "subquery", node)
        if isinstance(node, exp.Anonymous) and str(node.this).lower() == "var":
            ctx.fail(UnsupportedSQLError, "VAR is not a DuckDB function: write VAR_SAMP (or VARIANCE) for the "
                     "sample variance, VAR_POP for the population variance", "function VAR", node)
        if isinstance(node, exp.Anonymous) and str(node.this).lower() in sandbox.aggregate_names():
            name = str(node.this).upper()
            ctx.fail(UnsupportedSQLError, f"aggregate {name} is not supported ({_SUPPORTED_AGGREGATES} are)",
                     f"aggregate {name}", node)
        if isinstance(node, exp.Anonymous):
            _check_function(node, ctx)
        if allowed is None and scalar_function(node):
            continue  # DuckDB evaluates it whole, on the domain or on released values
        if allowed is None or (type(node) is exp.Distinct and not _plain_distinct(tree, node)):
            _refuse_node(node, ctx)
        if type(node) is exp.Table and (node.args.get("db") or node.args.get("catalog")):
            ctx.fail(UnsupportedSQLError, _qualified(node, schema), node.sql(dialect="duckdb"), node)
        for key in set_args(node):
            if key not in allowed or (type(node) is exp.Ordered and key == "nulls_first"
                                      and node.args[key] is True):
                name = _ARG_NAMES.get((type(node), key), f"{construct_name(node)} with {key.upper()}")
                value = node.args[key]
                if isinstance(value, (exp.Select, exp.Subquery, exp.SetOperation)):
                    ctx.fail(UnsupportedSQLError, "subqueries are not supported", "subquery", value)
                at = value if isinstance(value, exp.Expression) and ctx.stmt.offset_of(value) is not None else node
                extra = "; DuckDB puts NULLs last, as dpsql does" if key == "nulls_first" else ""
                ctx.fail(UnsupportedSQLError, f"{name} is not supported{extra}", name, at)
        if type(node) in _COMPARISON_TYPES and (type(node.this) in _COMPARISON_TYPES
                                                or type(node.expression) in _COMPARISON_TYPES):
            ctx.fail(UnsupportedSQLError, "chained comparisons (a = b = c) are not supported, as in DuckDB; "
                     "add parentheses or combine them with AND", "chained comparison", node)
        if type(node) is exp.Literal and not node.is_string:
            try:
                number_value(node.this)
            except ValueError:
                ctx.fail(UnsupportedSQLError, f"cannot read the number {node.this[:40]!r}", f"number {node.this[:40]}",
                         node)


def _qualified(table: exp.Table, schema: Schema) -> str:
    """Why a private statement may not name ``table`` with a schema or a catalog. ``synth.t``, a
    synthetic table (:data:`~dpsql.released.SYNTH_SCHEMA`), is released data, queried free elsewhere:
    the generic fix, the private table's name, would spend budget on the private table instead."""
    name = table.sql(dialect="duckdb")
    if table.text("db").lower() == SYNTH_SCHEMA and not table.args.get("catalog"):
        return (f"{SYNTH_SCHEMA}.{table.name} is a synthetic table, released data: query it free with "
                "db.released.sql(...) in Python, or the file dpsql synth --out wrote; FROM "
                f"{schema.table} reads the private table and spends budget")
    return f"a qualified table name ({name}) is not supported: write FROM {schema.table}"


def _refuse_node(node: exp.Expression, ctx: "_Context") -> None:
    """Raise the error for a node type outside :data:`SUPPORTED`, named for its user."""
    if isinstance(node, exp.Exists):
        ctx.fail(UnsupportedSQLError, "EXISTS (a subquery) is not supported", "EXISTS", node)
    if isinstance(node, exp.Window):
        ctx.fail(UnsupportedSQLError, "window functions (OVER) are not supported", "window function", node)
    if isinstance(node, exp.Filter):
        ctx.fail(UnsupportedSQLError, "aggregate FILTER is not supported; use WHERE", "FILTER", node)
    if isinstance(node, (exp.Placeholder, exp.Parameter)):
        ctx.fail(UnsupportedSQLError, "query parameters are not supported; write literals", "parameter", node)
    if isinstance(node, exp.TableSample):
        ctx.fail(UnsupportedSQLError, "TABLESAMPLE is not supported: a statement reads the whole table",
                 "TABLESAMPLE", node)
    if isinstance(node, exp.Distinct) and isinstance(node.parent, exp.AggFunc):
        agg = node.parent
        name = agg.sql_name() if not isinstance(agg, exp.Anonymous) else str(agg.this).upper()
        ctx.fail(UnsupportedSQLError, f"{name}(DISTINCT ...) is not supported", f"{name}(DISTINCT)", agg)
    if isinstance(node, (exp.Min, exp.Max)):
        name = node.sql_name()
        ctx.fail(UnsupportedSQLError, f"aggregate {name} is not supported: one row decides it, so no noise keeps it "
                 f"both private and useful; ask for a quantile instead, such as QUANTILE_DISC(x, "
                 f"{'0.01' if isinstance(node, exp.Min) else '0.99'})", f"aggregate {name}", node)
    if isinstance(node, exp.AggFunc):
        name = node.sql_name()
        ctx.fail(UnsupportedSQLError, f"aggregate {name} is not supported ({_SUPPORTED_AGGREGATES} are)",
                 f"aggregate {name}", node)
    name = construct_name(node)
    ctx.fail(UnsupportedSQLError, f"{name} is not supported", name, node)


def _check_from(tree: exp.Select, schema: Schema, ctx: _Context) -> tuple[str, str | None]:
    frm = tree.args.get("from_")
    if frm is None:
        ctx.fail(UnsupportedSQLError, f"a statement must read FROM {schema.table}", "missing FROM", tree)
    src = frm.this
    if not isinstance(src, exp.Table) or not isinstance(src.this, exp.Identifier):
        ctx.fail(UnsupportedSQLError, f"FROM must name the table {schema.table!r}",
                 construct_name(src), src)
    if src.args.get("db") or src.args.get("catalog"):
        ctx.fail(UnsupportedSQLError, _qualified(src, schema), src.sql(dialect="duckdb"), src)
    if src.name.lower() != schema.table.lower():
        ctx.fail(UnknownColumnError, f"unknown table {src.name!r}{did_you_mean(src.name, [schema.table])}; the "
                 f"schema declares {schema.table!r}", f"table {src.name!r}", src)
    if src.args.get("joins") or src.args.get("laterals"):
        ctx.fail(UnsupportedSQLError, "JOIN is not supported: a statement reads one table", "JOIN", src)
    if src.args.get("pivots"):
        ctx.fail(UnsupportedSQLError, "PIVOT is not supported: a statement reads one table", "PIVOT", src)
    if src.args.get("sample") is not None:
        ctx.fail(UnsupportedSQLError, "TABLESAMPLE is not supported: a statement reads the whole table",
                 "TABLESAMPLE", src.args["sample"])
    alias = src.alias or None
    return src.name, alias


def _resolve_columns(tree: exp.Select, schema: Schema, table: str, alias: str | None,
                     ctx: _Context) -> None:
    """Qualifiers must be the table, or its alias when it has one; names become schema names.
    Unknown names are left alone here, as they may be output aliases in
    GROUP BY / HAVING / ORDER BY; they are reported where they are used."""
    ok_tables = {alias.lower()} if alias else {table.lower()}  # an alias hides the table's name, as in DuckDB
    for col in list(tree.find_all(exp.Column)):
        if isinstance(col.this, exp.Star):
            ctx.fail(UnsupportedSQLError, "SELECT t.* is not supported", "*", col)
        qual = col.table
        if qual and qual.lower() not in ok_tables:
            aliased = (f": FROM {table} {alias} calls the table {alias!r} in this statement, and DuckDB no longer "
                       f"knows it as {table!r}" if alias and qual.lower() == table.lower() else "")
            near = "" if aliased else did_you_mean(qual, ok_tables)
            ctx.fail(UnknownColumnError, f"unknown table {qual!r} in {col.sql()}{near}{aliased}", f"table {qual!r}",
                     col)
        if col.args.get("db") or col.args.get("catalog"):
            ctx.fail(UnsupportedSQLError, "qualified names with a schema are not supported", col.sql(), col)
        c = schema.column(col.name)
        if c is not None:
            col.set("table", None)
            ident = col.this
            ident.set("this", c.name)  # keep the identifier node: it carries the position
            ident.set("quoted", False)
        elif schema.privacy_unit.column and col.name.lower() == schema.privacy_unit.column.lower():
            ctx.fail(UnknownColumnError, f"column {col.name!r} identifies the privacy unit and cannot be "
                     "queried", f"column {col.name!r}", col)


def _check_function(node: exp.Anonymous, ctx: _Context) -> None:
    """Refuse a call of a function DuckDB does not know, naming the nearest aggregate dpsql answers
    or DuckDB function (``AVGG`` -> AVG). A mapped level's call (:mod:`dpsql.sql.levels`) is evaluated on
    the domain."""
    name = str(node.this)
    if name.lower() in sandbox.function_names() or name.lower() == LEVEL_FUNCTION:
        return
    near = did_you_mean(name.upper(), _AGGREGATE_NAMES) or did_you_mean(name, {n.upper() for n in sandbox.function_names()})
    ctx.fail(UnsupportedSQLError, f"unknown function {name}{near}", f"function {name.upper()}", node)


def _check_known(expr: exp.Expression, schema: Schema, ctx: _Context) -> None:
    for col in expr.find_all(exp.Column):
        if schema.column(col.name) is None:
            ctx.fail(UnknownColumnError, f"unknown column {col.name!r}{did_you_mean(col.name, schema.names)}; the "
                     f"schema of {schema.table!r} declares {', '.join(schema.names)}", f"column {col.name!r}", col)


def _validate_expression(expr: exp.Expression, schema: Schema, ctx: _Context, predicate: bool) -> None:
    """Type- and domain-check by evaluating on the domain of the columns involved."""
    _check_known(expr, schema, ctx)
    cols = [schema.column(n) for n in column_refs(expr)]
    cols.sort(key=lambda c: schema.position(c.name))
    size = 1
    for c in cols:
        size *= c.size
    if size > MAX_ATTRIBUTE_SIZE:
        ctx.fail(UnsupportedSQLError, f"this expression couples columns {', '.join(c.name for c in cols)}; "
                 f"measuring them as one attribute needs {size} cells (at most {MAX_ATTRIBUTE_SIZE})",
                 "condition across columns", expr)
    grid = Grid(cols, fail=ctx.error)
    if predicate:
        grid.predicate(expr)
    else:
        v = grid.value(expr)
        if v.kind == "bin" and not isinstance(expr, exp.Column):  # pragma: no cover
            ctx.fail(DomainError, "binned columns can be grouped on directly only", construct_name(expr), expr)


# -- GROUP BY ---------------------------------------------------------------------------

def _resolve_group_item(g: exp.Expression, items: list[_Item], select_aliases: dict[str, exp.Expression],
                        schema: Schema, ctx: _Context) -> tuple[exp.Expression, str, bool]:
    ok, lit = literal_value(g)
    if ok:
        if not isinstance(lit, int) or isinstance(lit, bool):
            ctx.fail(GroupingError, "GROUP BY takes a column, an alias, an expression or a position",
                     "GROUP BY", g)
        if not 1 <= lit <= len(items):
            ctx.fail(GroupingError, f"GROUP BY position {lit} is not in the select list (1..{len(items)})",
                     f"GROUP BY {lit}", g)
        alias, body, is_agg = items[lit - 1]
        if is_agg:
            ctx.fail(GroupingError, f"GROUP BY position {lit} is an aggregate", f"GROUP BY {lit}", g)
        return body, alias or _default_name(body), True
    if isinstance(g, exp.Column):
        if schema.column(g.name) is not None:
            for alias, body, is_agg in items:
                if _same(body, g) and alias:
                    return g, alias, True
            return g, g.name, False
        alias_body = select_aliases.get(g.name.lower())
        if alias_body is not None:
            if _contains_aggregate(alias_body):
                ctx.fail(GroupingError, f"GROUP BY {g.name} names an aggregate", f"GROUP BY {g.name}", g)
            return alias_body, g.name, True
        _check_known(g, schema, ctx)
    return g, _default_name(g), False


def _default_name(expr: exp.Expression) -> str:
    if isinstance(expr, exp.Column):
        return expr.name
    return expr.sql(dialect="duckdb")


def _same(a: exp.Expression, b: exp.Expression) -> bool:
    """Whether two expressions are equal up to parentheses around them or aliases (no copies:
    sqlglot caches each node's hash, so comparing every node of a long HAVING is linear)."""
    return _unwrap(a) == _unwrap(b)


def _unwrap(e: exp.Expression) -> exp.Expression:
    while isinstance(e, (exp.Paren, exp.Alias)):
        e = e.this
    return e


def _strip(e: exp.Expression) -> exp.Expression:
    """A copy without parentheses around the whole expression or aliases."""
    return _unwrap(e).copy()


def _first_aggregate_in_items(items: list[_Item]) -> bool:
    return any(is_agg for _, _, is_agg in items)


# -- aggregates ---------------------------------------------------------------------------

def _is_agg_node(node: exp.Expression) -> bool:
    """An aggregate call, with its FILTER clause if it has one (the Filter node wraps the call) and
    its WITHIN GROUP (ORDER BY ...) if it has one (which wraps the call too)."""
    if isinstance(node, exp.Filter):
        node = node.this
    if isinstance(node, exp.WithinGroup):
        node = node.this
    if isinstance(node.parent, exp.Window) and node.arg_key == "this":  # a window's function: post-processing
        return False
    return isinstance(node, exp.AggFunc)


def _after_noise(expr: exp.Expression) -> bool:
    """Whether a select item reads released values: an aggregate, or a window over the groups."""
    return _contains_aggregate(expr) or expr.find(exp.Window) is not None


def _contains_aggregate(expr: exp.Expression) -> bool:
    return _first_aggregate(expr) is not None


def _first_aggregate(expr: exp.Expression) -> exp.Expression | None:
    for node in expr.walk():
        if _is_agg_node(node):
            return node
    return None


def _is_aggregate_call(body: exp.Expression) -> bool:
    """An aggregate that is measured (GROUPING() is computed from the grouping set instead)."""
    return _is_agg_node(body) and not isinstance(body, exp.Grouping)


def _quantile_call(body: exp.Expression, ctx: _Context) -> tuple[str, exp.Expression, float, bool] | None:
    """``(func, column, fraction, descending)`` of a quantile call: MEDIAN(x), QUANTILE_CONT(x, q),
    QUANTILE_DISC(x, q), QUANTILE(x, q) (DuckDB's QUANTILE_DISC), PERCENTILE_CONT(q) or
    PERCENTILE_DISC(q) WITHIN GROUP (ORDER BY x [DESC]); None for another aggregate."""
    if isinstance(body, exp.Median):
        return "quantile_cont", body.this, 0.5, False
    descending = False
    if isinstance(body, exp.WithinGroup):
        order, call = body.expression, body.this
        terms = order.expressions if isinstance(order, exp.Order) else []
        if not isinstance(call, (exp.PercentileCont, exp.PercentileDisc)) or len(terms) != 1 or call.expression:
            ctx.fail(UnsupportedSQLError, "WITHIN GROUP takes PERCENTILE_CONT(q) or PERCENTILE_DISC(q) and one "
                     "ORDER BY column", "WITHIN GROUP", body)
        column, fraction, descending = terms[0].this, call.this, bool(terms[0].args.get("desc"))
        body = call
    elif isinstance(body, (exp.PercentileCont, exp.PercentileDisc)):
        column, fraction = body.this, body.expression
        if isinstance(fraction, exp.Order):  # QUANTILE_CONT(x, q ORDER BY x [DESC]): sqlglot's spelling of WITHIN GROUP
            terms = fraction.expressions
            if len(terms) != 1 or not _same(terms[0].this, column):
                ctx.fail(UnsupportedSQLError, "a quantile's ORDER BY must name its column", "quantile ORDER BY",
                         fraction)
            fraction, descending = fraction.this, bool(terms[0].args.get("desc"))
    elif isinstance(body, exp.Quantile):
        column, fraction = body.this, body.args.get("quantile")
    else:
        return None
    ok, q = literal_value(fraction) if fraction is not None else (False, None)
    if not ok or isinstance(q, (bool, str)) or q is None or not 0 <= q <= 1:
        ctx.fail(UnsupportedSQLError, "a quantile's fraction must be one number from 0 to 1 (a list of "
                 "fractions is not supported: write one aggregate per fraction)", "quantile fraction",
                 fraction if fraction is not None else body)
    func = "quantile_cont" if isinstance(body, exp.PercentileCont) else "quantile_disc"
    return func, column, float(q), descending


def _make_aggregate(body: exp.Expression, alias: str | None, schema: Schema, ctx: _Context,
                    used: set[str], visible: bool = True) -> Aggregate:
    condition = None
    if isinstance(body, exp.Filter):
        condition = _filter_condition(body, schema, ctx)
        body = body.this
    quantile = _quantile_call(body, ctx)
    if quantile is not None:
        return _make_quantile(body, quantile, alias, condition, schema, ctx, used, visible)
    if isinstance(body, exp.CountIf):  # COUNT_IF(c) (BigQuery's COUNTIF): the rows where c is true
        _check_condition(body.this, "COUNT_IF", schema, ctx)
        condition = body.this if condition is None else exp.and_(condition.copy(), body.this.copy())
        body = exp.Count(this=exp.Star())
    func = _AGGREGATES.get(type(body))
    if func is None:
        name = body.sql_name() if isinstance(body, exp.Func) else body.key.upper()
        ctx.fail(UnsupportedSQLError, f"aggregate {name} is not supported ({_SUPPORTED_AGGREGATES} are)",
                 f"aggregate {name}", body)
    arg = body.this
    if isinstance(arg, exp.Distinct):
        ctx.fail(UnsupportedSQLError, f"{func.upper()}(DISTINCT ...) is not supported", f"{func.upper()}(DISTINCT)",
                 body)
    if body.expressions:
        ctx.fail(UnsupportedSQLError, f"{func.upper()} takes one argument", func.upper(), body)
    case_condition, arg = _conditional_argument(func, arg)
    if case_condition is not None:
        _check_condition(case_condition, "CASE WHEN inside an aggregate", schema, ctx)
        condition = case_condition if condition is None else exp.and_(condition.copy(), case_condition.copy())
        if arg is None:  # SUM(CASE WHEN c THEN 1 ...) and COUNT(CASE WHEN c THEN 'x' END) count the rows where c holds
            func, arg = "count", exp.Star()
    if func == "count" and not isinstance(arg, exp.Star) and literal_value(arg)[0] and literal_value(arg)[1] is not None:
        arg = exp.Star()  # COUNT(1): a constant that is not NULL counts every row
    name = alias
    proportion = _proportion(arg, schema, ctx) if func == "avg" else None
    if proportion is not None:  # AVG(CASE WHEN c THEN 1 ELSE 0 END): rows where it is 1 over rows where it is not NULL
        name = name or f"AVG({arg.sql(dialect='duckdb')})" + (
            f" FILTER (WHERE {condition.sql(dialect='duckdb')})" if condition is not None else "")
        if proportion[0] is not None:
            condition = proportion[0] if condition is None else exp.and_(condition.copy(), proportion[0])
    if (func == "count" and isinstance(arg, exp.Star)) or proportion is not None:
        column = None
    else:
        if not isinstance(arg, exp.Column):
            looked_up = arg.meta.get("lookup") if isinstance(arg, exp.Expression) else None
            if looked_up is not None and func in ("sum", "avg"):
                return _lookup_aggregate(func, arg, looked_up, alias, condition, schema, ctx, used, visible, body)
            if looked_up is not None:
                ctx.fail(UnsupportedSQLError, f"{func.upper()}({looked_up.name}) reads a column of a public lookup "
                         "table: an aggregate reads a column of the private table (a lookup column may be used in "
                         f"WHERE and GROUP BY, e.g. COUNT(*) ... WHERE {looked_up.name} IS NOT NULL)",
                         f"{func.upper()} argument", looked_up)
            ok, _ = literal_value(arg)
            if func == "count" and ok:
                ctx.fail(UnsupportedSQLError, "COUNT of a constant is not supported; use COUNT(*)",
                         "COUNT(constant)", body)
            then = {"count": "column or a constant", "sum": "column or 1"}.get(func, "column")
            affine = ", an affine function of one numeric column (2 * age + 1)" if func in ("sum", "avg") else ""
            written = f"{func.upper()}({arg.sql(dialect='duckdb')[:80] if arg is not None else ''})"
            ctx.fail(UnsupportedSQLError, f"{written} is not supported: {func.upper()} takes a column name{', *' if func == 'count' else ''}{affine} "
                     f"or CASE WHEN condition THEN {then} END", f"{func.upper()} argument", arg)
        col = schema.column(arg.name)
        if col is None:
            _check_known(arg, schema, ctx)
        column = col.name
        if func != "count":
            if isinstance(col, Binned) and func not in ("sum", "avg"):
                ctx.fail(DomainError, f"cannot {func.upper()} the binned column {col.name!r}: its SUM and AVG are "
                         "exact (each row is measured between its bin's edges), but a variance needs each row's "
                         "square, which a bin does not hold", f"{func.upper()}({col.name})", body)
            if not (col.is_numeric or isinstance(col, Binned)):
                ctx.fail(DomainError, f"cannot {func.upper()} the {col.kind} column {col.name!r}",
                         f"{func.upper()}({col.name})", body)
    bounds = schema.column(column).sum_bounds if (column and func != "count") else None
    if bounds is not None and max(abs(bounds[0]), abs(bounds[1])) > limits.MAX_SUM_MAGNITUDE:
        ctx.fail(DomainError, f"cannot {func.upper()} {column!r}: its values reach {max(map(abs, bounds)):.3g}, beyond "
                 f"2^53 ({limits.MAX_SUM_MAGNITUDE:.3g}), the largest magnitude dpsql sums; declare the column's "
                 "bounds: [lo, hi] to clamp it", f"{func.upper()}({column})", body)
    if name is None:
        name = f"{func.upper()}({column or '*'})" if func != "count" or column else "COUNT(*)"
        if condition is not None:
            name += f" FILTER (WHERE {condition.sql(dialect='duckdb')})"
    return Aggregate(name=_unique(name, used), func=func, column=column, bounds=bounds, visible=visible,
                     filter=condition, indicator=proportion[1] if proportion is not None else None)


def _proportion(arg: exp.Expression, schema: Schema,
                ctx: _Context) -> tuple[exp.Expression | None, exp.Expression] | None:
    """``(counted, indicator)`` when ``AVG(arg)`` is a proportion: ``arg`` is 1, 0 or NULL on every
    row. DuckDB's AVG skips NULLs, so it is the count of rows where ``indicator`` holds over the
    count of rows where ``counted`` holds (None: every row): two linear queries, exact on the domain.

    ``CASE WHEN c THEN 1 ELSE 0 END`` counts c over every row, ``CASE WHEN c THEN 1 [ELSE NULL] END``
    c over c, and ``CAST(c AS INT)`` (or DOUBLE) c over ``c OR NOT c`` (c not NULL), where c is a
    condition; ``CASE WHEN d THEN <one of these> END`` counts it within the rows where d holds. Any other argument that reads columns and is 1, 0 or NULL on every cell of their
    public domain counts ``arg = 1`` over ``arg IS NOT NULL``. None for anything else (a column, or
    values other than 0 and 1), which is read as before.
    """
    if isinstance(arg, (exp.Column, exp.Star)) or not column_refs(arg) or _first_aggregate(arg) is not None:
        return None
    _check_known(arg, schema, ctx)
    shape = _indicator_shape(_unwrap(arg), schema)
    if shape is None:
        cols = sorted({schema.column(n) for n in column_refs(arg)}, key=lambda c: schema.position(c.name))
        if math.prod(c.size for c in cols) > MAX_ATTRIBUTE_SIZE:
            return None
        grid = Grid(cols, fail=ctx.error)
        v = grid.value(arg)
        if v.kind != "num" or not np.isin(grid.full(v.values)[~grid.full(v.null)].astype(float), (0.0, 1.0)).all():
            return None
        shape = (exp.Not(this=exp.Is(this=exp.paren(arg.copy()), expression=exp.Null())),
                 exp.EQ(this=exp.paren(arg.copy()), expression=exp.Literal.number(1)))
    for condition in shape:
        if condition is not None:
            _check_condition(condition, "AVG", schema, ctx)
    return shape


#: The types a condition is cast to in a proportion, ``AVG(c::INT)``: DuckDB's integers and floats.
_INDICATOR_TYPES = tuple((exp.DataType.INTEGER_TYPES - {exp.DataType.Type.BIT})
                         | {exp.DataType.Type.DOUBLE, exp.DataType.Type.FLOAT})


def _indicator_shape(node: exp.Expression, schema: Schema) -> tuple[exp.Expression | None, exp.Expression] | None:
    """``(counted, indicator)`` of a proportion spelled with a condition c (see :func:`_proportion`),
    read from the syntax alone, so that c may be any condition WHERE takes (a cut of a binned
    column too); None for other spellings."""
    if isinstance(node, exp.Case) and node.this is None and len(node.args.get("ifs") or []) == 1:
        when = node.args["ifs"][0]
        ok, then = literal_value(_unwrap(when.args["true"]))
        default = node.args.get("default")
        ok_else, other = literal_value(default) if default is not None else (True, None)
        c = _strip(when.this)
        if ok and ok_else and _is_number(then, 1) and (other is None or _is_number(other, 0)):
            return (None if other is not None else c.copy()), c
        inner = _indicator_shape(_unwrap(when.args["true"]), schema) if ok_else and other is None else None
        if inner is not None:  # CASE WHEN c THEN <a proportion's value> END: that proportion over the rows where c
            counted = c.copy() if inner[0] is None else exp.and_(c.copy(), inner[0])
            return counted, exp.and_(c.copy(), inner[1])
    if isinstance(node, (exp.Cast, exp.TryCast)) and node.to.is_type(*_INDICATOR_TYPES):
        c = _strip(node.this)
        column = schema.column(c.name) if isinstance(c, exp.Column) else None
        if isinstance(c, (exp.Predicate, exp.Connector, exp.Not)) or (column is not None and column.kind == "boolean"):
            return exp.or_(c.copy(), exp.not_(c.copy())), c
    return None


def _is_number(value: object, number: int) -> bool:
    return not isinstance(value, (bool, str)) and value is not None and value == number


def _lookup_aggregate(func: str, arg: exp.Expression, looked_up: exp.Column, alias: str | None,
                      condition: exp.Expression | None, schema: Schema, ctx: _Context, used: set[str],
                      visible: bool, body: exp.Expression) -> Aggregate:
    """SUM or AVG of a public lookup table's numeric column joined on one private key: a weighted
    count over the key's domain, each key value weighing its public value (NULL where it has none,
    which SUM and AVG skip). Its bounds are the public values' smallest and largest."""
    columns = column_refs(arg)
    col = schema.column(columns[0]) if len(columns) == 1 else None
    values = column_function(col, arg) if col is not None and not isinstance(col, Binned) else None
    if values is None:
        why = ("its join key is several columns" if len(columns) > 1 else "its values are not numbers"
               if col is not None and not isinstance(col, Binned) else "its join key is binned")
        ctx.fail(UnsupportedSQLError, f"{func.upper()}({looked_up.name}) reads a column of a public lookup table, "
                 f"and {why}: SUM and AVG read a numeric lookup column joined on one private column",
                 f"{func.upper()} argument", looked_up)
    present = values[0][~values[1]]
    bounds = (float(present.min()), float(present.max())) if present.size else (0.0, 0.0)
    if max(map(abs, bounds)) > limits.MAX_SUM_MAGNITUDE:
        ctx.fail(DomainError, f"cannot {func.upper()} {looked_up.name!r}: its values reach beyond 2^53, the largest "
                 "magnitude dpsql sums", f"{func.upper()}({looked_up.name})", body)
    name = alias or f"{func.upper()}({looked_up.name})"
    if alias is None and condition is not None:
        name += f" FILTER (WHERE {condition.sql(dialect='duckdb')})"
    return Aggregate(name=_unique(name, used), func=func, column=col.name, bounds=bounds, visible=visible,
                     filter=condition, argument=_strip(arg))


def _make_quantile(body: exp.Expression, quantile: tuple[str, exp.Expression, float, bool], alias: str | None,
                   condition: exp.Expression | None, schema: Schema, ctx: _Context, used: set[str],
                   visible: bool) -> Aggregate:
    func, arg, q, descending = quantile
    case_condition, arg = _conditional_argument("quantile", arg)
    if case_condition is not None:  # MEDIAN(CASE WHEN c THEN x END) is MEDIAN(x) FILTER (WHERE c)
        _check_condition(case_condition, "CASE WHEN inside an aggregate", schema, ctx)
        condition = case_condition if condition is None else exp.and_(condition.copy(), case_condition.copy())
    col = schema.column(arg.name) if isinstance(arg, exp.Column) else None
    if not isinstance(arg, exp.Column):
        ctx.fail(UnsupportedSQLError, "a quantile takes a column name", "quantile argument", arg)
    if col is None:
        _check_known(arg, schema, ctx)
    if not (col.is_numeric or isinstance(col, (Binned, DateRange))):  # a binned column's is read within its bins
        ctx.fail(DomainError, f"cannot take a quantile of the {col.kind} column {col.name!r}: it needs a column "
                 "whose values are numbers or days", f"quantile of {col.name}", body)
    name = alias or body.sql(dialect="duckdb")
    if alias is None and condition is not None:
        name += f" FILTER (WHERE {condition.sql(dialect='duckdb')})"
    return Aggregate(name=_unique(name, used), func=func, column=col.name, visible=visible, filter=condition,
                     quantile=q, descending=descending, origin=col.min if isinstance(col, DateRange) else None)


def _filter_condition(node: exp.Filter, schema: Schema, ctx: _Context) -> exp.Expression:
    """The condition of ``agg FILTER (WHERE condition)``, checked like a WHERE clause."""
    where = node.expression
    condition = where.this if isinstance(where, exp.Where) else where
    _check_condition(condition, "FILTER", schema, ctx)
    return _strip(condition)


def _conditional_argument(func: str, arg: exp.Expression) -> tuple[exp.Expression | None, exp.Expression | None]:
    """``(c, v)`` when an aggregate's argument is ``CASE WHEN c THEN v [ELSE e] END`` and the
    aggregate equals ``func(v) FILTER (WHERE c)``, else ``(None, arg)``; ``v`` is None when the
    aggregate counts the rows where ``c`` holds.

    That is so when ``e`` adds nothing: NULL (which SUM, AVG and COUNT skip), or 0 for SUM; and
    ``v`` is a column, or, for SUM, the literal 1 (a sum of ones is a count), or, for COUNT, any
    non-NULL literal. Other CASE arguments are left to be refused as they were.
    """
    case = _unwrap(arg)
    if not (isinstance(case, exp.Case) and case.this is None and len(case.args.get("ifs") or []) == 1):
        return None, arg
    when = case.args["ifs"][0]
    then, default = _unwrap(when.args["true"]), case.args.get("default")
    ok_default, dv = literal_value(default) if default is not None else (True, None)
    if not ok_default or not (dv is None or (func == "sum" and dv == 0 and not isinstance(dv, bool))):
        return None, arg
    if isinstance(then, exp.Column) or then.meta.get("lookup") is not None:  # a column, or a lookup table's
        return _strip(when.this), then
    ok_then, tv = literal_value(then)
    counts = (func == "sum" and tv == 1 and not isinstance(tv, bool)) or (func == "count" and tv is not None)
    if ok_then and counts:
        return _strip(when.this), None
    return None, arg


def _unique(name: str, used: set[str]) -> str:
    base, n = name, 2
    while name.lower() in used:
        name = f"{base}_{n}"
        n += 1
    used.add(name.lower())
    return name


def _integral(expr: exp.Expression, integral: set[str]) -> bool:
    """Whether DuckDB would compute ``expr`` (over output columns) in an integer type, ``integral``
    naming the outputs that hold integers: integer literals, and + - * // % of integers."""
    if isinstance(expr, exp.Column):
        return expr.name in integral
    if isinstance(expr, exp.Literal):
        return expr.is_int
    if isinstance(expr, (exp.Paren, exp.Neg)):
        return _integral(expr.this, integral)
    if isinstance(expr, (exp.Add, exp.Sub, exp.Mul, exp.IntDiv, exp.Mod)):
        return _integral(expr.this, integral) and _integral(expr.expression, integral)
    return False


#: Post-processing nodes that no value makes fail (comparisons of numbers, connectives): an
#: expression of these alone needs no TRY.
_CANNOT_FAIL = (exp.Column, exp.Identifier, exp.Literal, exp.Boolean, exp.Null, exp.Paren, exp.And, exp.Or, exp.Not,
                exp.Is, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)


class _Rewriter:
    """Rewrites HAVING / ORDER BY expressions over output column names,
    adding hidden aggregates for those not selected."""

    def __init__(self, keys: list[GroupKey], key_exprs: list[exp.Expression], aggregates: list[Aggregate],
                 items: list[_Item], outputs: list[str], schema: Schema, ctx: _Context, used: set[str],
                 grouping: tuple[tuple[tuple[int, ...], ...] | None, str | None] = (None, None)) -> None:
        self.keys, self.key_exprs = keys, key_exprs
        self.sets, self.set_column = grouping
        #: (hidden column, window over output columns): computed on the answers before the select items
        self.windows: list[tuple[str, exp.Expression]] = []
        self.aggregates = list(aggregates)
        self.items, self.outputs = items, outputs
        self.schema, self.ctx, self.used = schema, ctx, used
        self.alias_names = {o.lower(): o for o in outputs}

    def __call__(self, expr: exp.Expression, clause: str) -> exp.Expression:
        if expr.find(exp.Window) is not None:  # each window becomes a hidden column (TRY cannot hold a window)
            expr = expr.copy()
            for window in list(expr.find_all(exp.Window)):
                column = exp.column(self._window(window, clause), quoted=True)
                if window is expr:
                    expr = column
                else:
                    window.replace(column)
        failed = check_constants(expr)  # what fails on every row is refused now, not made NULL after the spend
        if failed is not None:
            node, reason = failed
            self.ctx.fail(UnsupportedSQLError, f"{node.sql(dialect='duckdb')[:80]} in {clause} cannot be evaluated: "
                          f"{reason}", construct_name(node), node)
        expr = expr.copy()
        for node in list(expr.walk()):
            if isinstance(node, (exp.Select, exp.Subquery)):  # pragma: no cover
                self.ctx.fail(UnsupportedSQLError, f"{construct_name(node)} in {clause}",
                              construct_name(node), node)
        # sqlglot's transform walks in a loop (a long AND chain does not recurse); a node it
        # replaces is not descended into
        expr = expr.transform(lambda node: self._rewrite(node, clause), copy=False)
        # post-processing runs after the release: a cast of a noisy value must not fail
        for cast in list(expr.find_all(exp.Cast)):
            if type(cast) is exp.Cast:
                safe = exp.TryCast(this=cast.this, to=cast.args.get("to"), safe=True)
                if cast is expr:
                    expr = safe
                else:
                    cast.replace(safe)
        # DuckDB's // divides integers (COUNT, a SUM of integers) truncating, and other numbers
        # exactly: the noisy answers are DOUBLEs, so their // is spelled out as trunc(a / b)
        integral = {a.name for a in self.aggregates if self._integer_typed(a)}
        for div in list(expr.find_all(exp.IntDiv)):
            if _integral(div.this, integral) and _integral(div.expression, integral):
                whole = exp.func("trunc", exp.Div(this=div.this, expression=div.expression))
                if div is expr:
                    expr = whole
                else:
                    div.replace(whole)
        # nor may arithmetic (an integer product past its type's range: COUNT(*)::SMALLINT * 100) or
        # a function (sqrt, ln, power...) raise on a noisy value: TRY makes that NULL
        if not all(isinstance(n, _CANNOT_FAIL) for n in expr.walk()):
            expr = exp.Try(this=expr)
        return expr

    def _integer_typed(self, aggregate: Aggregate) -> bool:
        """Whether DuckDB's exact answer to ``aggregate`` has an integer type."""
        if aggregate.func == "count":
            return True
        column = self.schema.column(aggregate.column) if aggregate.column else None
        return (aggregate.func in ("sum", "quantile_disc") and column is not None and aggregate.argument is None
                and column.sql_type not in ("DOUBLE", "VARCHAR", "BOOLEAN"))

    def _rewrite(self, node: exp.Expression, clause: str) -> exp.Expression:
        """One node of a HAVING / ORDER BY expression: an aggregate or a group key becomes its
        output column, a column its output name; other nodes stay (their children are visited)."""
        if isinstance(node, exp.Grouping):
            return self._grouping(node, clause)
        if _is_agg_node(node):
            return exp.column(self._aggregate_name(node), quoted=True)
        for k, e in enumerate(self.key_exprs):
            if _same(node, e):
                return exp.column(self.keys[k].name, quoted=True)
        if isinstance(node, exp.Column):
            if node.name in {w for w, _ in self.windows} and not node.table:  # a window's hidden column
                return node
            name = self.alias_names.get(node.name.lower())
            if name is not None:
                return exp.column(name, quoted=True)
            for key in self.keys:
                if key.name.lower() == node.name.lower():
                    return exp.column(key.name, quoted=True)
            if self.schema.column(node.name) is not None:
                self.ctx.fail(GroupingError, f"{clause} uses column {node.name!r}, which is not a group key",
                              f"column {node.name!r}", node)
            near = did_you_mean(node.name, [*self.outputs, *(k.name for k in self.keys)])
            self.ctx.fail(UnknownColumnError, f"unknown column {node.name!r} in {clause}{near}",
                          f"column {node.name!r}", node)
        return node

    def _window(self, window: exp.Window, clause: str) -> str:
        """The hidden column computing ``window`` on the answers: each expression it reads (its
        function's arguments, PARTITION BY and ORDER BY terms) rewritten over output columns."""
        window = window.copy()
        func = window.this
        for key, value in list(func.args.items()):
            if isinstance(value, exp.Expression) and not isinstance(value, exp.Star):
                func.set(key, self(value, clause))
            elif isinstance(value, list):
                func.set(key, [self(v, clause) for v in value])
        if window.args.get("partition_by"):
            window.set("partition_by", [self(e, clause) for e in window.args["partition_by"]])
        for term in window.args["order"].expressions if window.args.get("order") else []:
            term.set("this", self(term.this, clause))
        name = _unique("__window", self.used)
        self.windows.append((name, window))
        return name

    def _grouping(self, node: exp.Grouping, clause: str) -> exp.Expression:
        """``GROUPING(k1, ..., kn)`` as DuckDB computes it: per grouping set, a bit per key (the first
        the highest), 1 where the key is not in the set (its column is NULL there, for the margin).
        An expression over the statement's grouping-set column (see :attr:`QueryPlan.set_column`)."""
        indices = []
        for arg in node.expressions:
            k = next((k for k, e in enumerate(self.key_exprs) if _same(arg, e)), None)
            if k is None and isinstance(arg, exp.Column):
                k = next((k for k, key in enumerate(self.keys) if key.name.lower() == arg.name.lower()), None)
            if k is None:
                self.ctx.fail(GroupingError, f"GROUPING takes group keys: {arg.sql(dialect='duckdb')[:80]} in {clause} "
                              "is not one", "GROUPING", arg)
            indices.append(k)
        sets = self.sets if self.sets is not None else (tuple(range(len(self.keys))),)
        values = [sum(1 << (len(indices) - 1 - i) for i, k in enumerate(indices) if k not in s) for s in sets]
        if len(set(values)) == 1:
            return exp.Literal.number(values[0])
        case = exp.Case(this=exp.column(self.set_column, quoted=True))
        for j, v in enumerate(values):
            case = case.when(exp.Literal.number(j), exp.Literal.number(v))
        return exp.Paren(this=case)

    def _aggregate_name(self, node: exp.Expression) -> str:
        call = node.this if isinstance(node, exp.Filter) else node
        call = call.this if isinstance(call, exp.WithinGroup) else call  # PERCENTILE_DISC(q) WITHIN GROUP (...)
        if call.this is not None and _first_aggregate(call.this) is not None:
            self.ctx.fail(UnsupportedSQLError, "nested aggregates are not supported", construct_name(node), node)
        probe = _make_aggregate(node, None, self.schema, self.ctx, set(), visible=False)
        for a in self.aggregates:
            if (a.func == probe.func and a.column == probe.column and _same_filter(a.filter, probe.filter)
                    and _same_filter(a.indicator, probe.indicator)
                    and _same_filter(a.argument, probe.argument)
                    and a.quantile == probe.quantile and a.descending == probe.descending):
                return a.name
        agg = _make_aggregate(node, None, self.schema, self.ctx, self.used, visible=False)
        self.aggregates.append(agg)
        return agg.name


def _same_filter(a: exp.Expression | None, b: exp.Expression | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and _same(a, b))


_MAX_COUNT = 2**63 - 1


def _count_clause(node: exp.Expression | None, name: str, ctx: _Context) -> int | None:
    if node is None:
        return None
    value = node.args.get("expression") or node.this
    if name == "LIMIT" and isinstance(value, exp.Var) and value.name.upper() == "ALL":
        return None  # LIMIT ALL: no limit
    ok, lit = literal_value(value) if value is not None else (False, None)
    if not ok or not isinstance(lit, int) or isinstance(lit, bool) or lit < 0:
        ctx.fail(UnsupportedSQLError, f"{name} takes a non-negative integer literal", name, value or node)
    if lit > _MAX_COUNT:  # DuckDB's BIGINT; it refuses more, but only once there are rows to limit
        ctx.fail(UnsupportedSQLError, f"{name} {lit} is more than DuckDB allows ({_MAX_COUNT})", name, value)
    return lit
