"""Inlining: CTEs and FROM-subqueries merged into one statement before analysis.

One public function, :func:`inline`. A statement that reads the private table
through common table expressions (``WITH c AS (...)``) or subqueries in FROM
becomes the one ``SELECT ... FROM <table>`` that DuckDB would answer the same
way, so the analyzer and the compiler see a statement of the grammar they know:

* a **row-by-row** subquery (a select list of expressions over the table's
  columns and a WHERE, nothing else) is a map and a filter: each outer
  reference to one of its columns becomes the column's expression (in
  parentheses where an operator reads it), and the two WHERE clauses are
  joined with AND, the inner one first. Both are functions of one row, so the
  result is DuckDB's, NULLs included. Chained CTEs and nested subqueries merge
  one level at a time, inside out;
* an **aggregate** subquery (GROUP BY, or an aggregate in its select list)
  under an outer query without aggregates is post-processing of its released
  answers: the outer select items become expressions over its keys and
  aggregates, the outer WHERE joins its HAVING (its QUALIFY, applied after the
  windows, if it has windows), the outer ORDER BY, LIMIT and OFFSET replace its own. They run on the noisy answers
  (:mod:`dpsql.sql.postprocess`), so they cost nothing beyond the aggregate;
* a **share of the total**, grouped results joined with a total (``,``, CROSS JOIN, ``ON TRUE``) or a
  total as a scalar subquery in a grouped query's select list: the total's COUNT and SUM
  aggregates are summed over the groups, ``SUM(COUNT(*) FILTER (WHERE w)) OVER ()``, exact since
  GROUP BY keeps the group of NULL keys. What drops groups (HAVING, the NULL keys of a join on
  keys, an outer WHERE) applies after that window, as a QUALIFY.

What would change whom a row weighs on is refused, naming the construct:
DISTINCT, LIMIT or OFFSET, a window function, a join (other than a lookup of a
table, which the merged statement keeps for the analyzer to check) or a set
operation inside a row-by-row subquery, an aggregate of an aggregate subquery's result (its
rows are released answers, not rows of people), a join of two subqueries, a
recursive CTE, an outer WHERE or ORDER BY over a subquery whose own LIMIT
would then see other rows, and an outer window over one whose LIMIT or QUALIFY would. Every error is a :class:`dpsql.errors.SQLError`
with the position of the construct in the text as written (merged nodes keep
their positions).

>>> from dpsql.schema import load_schema
>>> from dpsql.sql.parse import parse_statements
>>> s = load_schema({"table": "t", "columns": {"age": {"type": "integer", "min": 0, "max": 99}}})
>>> sql = ("WITH adults AS (SELECT age + 1 AS a FROM t WHERE age >= 18) "
...        "SELECT a, COUNT(*) AS n FROM adults WHERE a < 65 GROUP BY a")
>>> inline(parse_statements(sql)[0], s).tree.sql()
'SELECT age + 1 AS a, COUNT(*) AS n FROM t WHERE age >= 18 AND (age + 1) < 65 GROUP BY age + 1'
>>> sql = "SELECT a, n * 2 AS m FROM (SELECT age AS a, COUNT(*) AS n FROM t GROUP BY age) WHERE n > 3"
>>> inline(parse_statements(sql)[0], s).tree.sql()
'SELECT age AS a, COUNT(*) * 2 AS m FROM t GROUP BY age HAVING COUNT(*) > 3'
"""

from __future__ import annotations

import dataclasses
from typing import NoReturn

from sqlglot import exp
from sqlglot.tokens import TokenType

from dpsql.errors import SQLError, UnknownColumnError, UnsupportedSQLError
from dpsql.schema import Schema
from dpsql.sql import sandbox
from dpsql.sql.parse import Statement

__all__ = ["inline"]

#: Select clauses a row-by-row subquery may have (ORDER BY without LIMIT does not change its rows).
_ROW_ARGS = frozenset({"expressions", "from_", "where", "order", "with_"})
#: Select clauses an aggregate subquery may have.
_AGGREGATE_ARGS = frozenset({"expressions", "from_", "where", "group", "having", "qualify", "order", "limit", "offset",
                             "with_"})
#: Clauses of an outer query over an aggregate subquery (run on its released answers).
_OUTER_ARGS = frozenset({"expressions", "from_", "where", "order", "limit", "offset", "with_"})
_CLAUSE_NAMES = {"distinct": "SELECT DISTINCT", "limit": "LIMIT", "offset": "OFFSET", "joins": "JOIN",
                 "group": "GROUP BY", "having": "HAVING", "qualify": "QUALIFY", "windows": "WINDOW",
                 "laterals": "LATERAL", "sample": "TABLESAMPLE", "pivots": "PIVOT"}
_KEYWORDS = {"distinct": frozenset({TokenType.DISTINCT}), "limit": frozenset({TokenType.LIMIT}),
             "offset": frozenset({TokenType.OFFSET}), "group": frozenset({TokenType.GROUP_BY}),
             "having": frozenset({TokenType.HAVING}), "where": frozenset({TokenType.WHERE}),
             "order": frozenset({TokenType.ORDER_BY}), "qualify": frozenset({TokenType.QUALIFY}),
             "joins": frozenset({TokenType.JOIN, TokenType.COMMA})}
_JOIN_WORDS = frozenset({TokenType.LEFT, TokenType.RIGHT, TokenType.FULL, TokenType.INNER, TokenType.OUTER,
                         TokenType.CROSS, TokenType.NATURAL, TokenType.SEMI, TokenType.ANTI})
_SET_OPERATORS = frozenset({TokenType.UNION, TokenType.EXCEPT, TokenType.INTERSECT})
_OPERATORS = (exp.Binary, exp.Unary, exp.Connector, exp.Between, exp.In, exp.Is)


class _Scope:
    """What an outer query reads: the merged subquery (columns unqualified), its output columns by
    lower-case name (None where a name is ambiguous), and, by the lower-case name of each table it
    reads (a subquery's alias, a CTE's name), that table's columns."""

    def __init__(self, select: exp.Select, columns: dict[str, exp.Expression | None], aggregate: bool,
                 tables: dict[str, dict[str, exp.Expression | None]] | None = None) -> None:
        self.select = select
        self.columns = columns
        self.aggregate = aggregate
        self.tables = tables or {}


def inline(stmt: Statement, schema: Schema) -> Statement:
    """``stmt`` with its CTEs and FROM-subqueries merged into one SELECT (see the module
    docstring); a statement without any is returned as it is. Raises a
    :class:`~dpsql.errors.SQLError` for a subquery that cannot be merged exactly."""
    tree = stmt.tree
    if not isinstance(tree, exp.Select) or not (_has_subquery_source(tree) or _scalar_subqueries(tree)):
        return stmt
    inliner = _Inliner(stmt, schema)
    merged = inliner.select(tree.copy(), {})
    return dataclasses.replace(stmt, tree=inliner.scalar_totals(merged))


def _scalar_subqueries(tree: exp.Select) -> list[exp.Subquery]:
    """The outermost subqueries in ``tree``'s select items."""
    return [s for item in tree.expressions for s in item.find_all(exp.Subquery)
            if not any(isinstance(p, exp.Subquery) for p in _ups(s, item))]


def _has_subquery_source(tree: exp.Select) -> bool:
    frm = tree.args.get("from_")
    return bool(tree.args.get("with_")) or (frm is not None and isinstance(frm.this, exp.Subquery))


class _Inliner:
    def __init__(self, stmt: Statement, schema: Schema) -> None:
        self.stmt = stmt
        self.schema = schema

    def fail(self, message: str, construct: str, node: exp.Expression | None,
             cls: type[SQLError] = UnsupportedSQLError, keyword: frozenset | None = None) -> NoReturn:
        """Raise ``cls`` at ``node``, or at the ``keyword`` token that starts its clause."""
        line, col = self.stmt.position(node)
        off = self.stmt.offset_of(node) if node is not None and keyword else None
        if off is not None:
            kw = self.stmt.source.token_before(off + 1, keyword)
            if kw is not None and keyword is _KEYWORDS["joins"]:  # LEFT JOIN: at LEFT
                before = [t for t in self.stmt.source.tokens if t.start < kw]
                while before and before[-1].token_type in _JOIN_WORDS:
                    kw = before.pop().start
            if kw is not None:
                line, col = self.stmt.source.position(kw)
        raise cls(message, construct, line, col)

    # -- one level ------------------------------------------------------------------------

    def select(self, tree: exp.Select, ctes: dict[str, exp.Select]) -> exp.Select:
        """``tree`` merged with its source: its CTEs first (each sees those before it), then the
        subquery or CTE it reads FROM."""
        ctes = dict(ctes)
        with_ = tree.args.get("with_")
        if with_ is not None:
            if with_.args.get("recursive"):
                self.fail("WITH RECURSIVE is not supported: a recursive CTE reads its own rows", "WITH RECURSIVE",
                          with_, keyword=frozenset({TokenType.WITH}))
            for cte in with_.expressions:
                body = cte.this
                if not isinstance(body, exp.Select):
                    self.fail(f"the CTE {cte.alias!r} must be one SELECT (a set operation combines rows of "
                              "several queries, so one person can weigh on several of them)",
                              _kind(body), _set_operator(body), keyword=_SET_OPERATORS)
                body = self.select(body, ctes)
                ctes[cte.alias.lower()] = self.renamed(body, cte.args.get("alias"))
            tree.set("with_", None)
        frm = tree.args.get("from_")
        if frm is None:
            return tree
        inner, name = self.source(frm.this, ctes)
        if inner is None:
            return tree  # the table itself (the analyzer checks that it is the private one)
        joins = tree.args.get("joins") or []
        if joins:
            return self.join(tree, [(inner, name, frm.this)], joins, ctes)
        scope = self.scope(inner)
        scope.tables = {name.lower(): scope.columns} if name else {}
        return self.merge(tree, scope)

    def source(self, node: exp.Expression, ctes: dict[str, exp.Select]) -> tuple[exp.Select | None, str | None]:
        """The merged query a FROM or JOIN source reads, and the name it is read by; (None, None)
        for a table."""
        if isinstance(node, exp.Subquery):
            inner = node.this
            while isinstance(inner, exp.Subquery) and not inner.alias:  # FROM ((SELECT ...))
                inner = inner.this
            if not isinstance(inner, exp.Select):
                self.fail("a set operation in FROM is not supported: it combines rows of several queries, so one "
                          "person can weigh on several of them", _kind(inner), _set_operator(inner),
                          keyword=_SET_OPERATORS)
            return self.renamed(self.select(inner, ctes), node.args.get("alias")), node.alias or None
        if isinstance(node, exp.Table) and not node.args.get("db") and node.name.lower() in ctes:
            return ctes[node.name.lower()].copy(), node.alias or node.name
        return None, None

    def join(self, outer: exp.Select, sides: list[tuple[exp.Select, str | None, exp.Expression]],
             joins: list[exp.Join], ctes: dict[str, exp.Select]) -> exp.Select:
        """An outer query over an inner join of aggregate subqueries on all their keys: one
        aggregate statement, each side's aggregates filtered by its WHERE (``FILTER``), the sides'
        HAVING clauses joined with AND; the outer query is then post-processing, as over one."""
        for j in joins:
            inner, name = self.source(j.this, ctes)
            if inner is None:
                self.fail("a JOIN of a subquery or CTE with a table is not supported: join the table inside "
                          "the subquery's statement", "JOIN", j, keyword=_KEYWORDS["joins"])
            if j.args.get("side") or j.args.get("kind") not in (None, "", "INNER", "CROSS") \
                    or j.args.get("method") or j.args.get("global_"):
                what = " ".join(str(j.args.get(k) or "") for k in ("method", "side", "kind")).split()
                self.fail(f"a {' '.join(what)} JOIN of aggregate results is not supported: only an inner join on "
                          "their keys, which keeps the groups they share", f"{' '.join(what)} JOIN", j,
                          keyword=_KEYWORDS["joins"])
            if _always_true(j.args.get("on")):
                j.set("on", None)  # ON TRUE, ON 1 = 1: a cross join
            sides.append((inner, name, j))
        scopes = [self.scope(inner) for inner, _, _ in sides]
        names = [name.lower() if name else None for _, name, _ in sides]
        for (_, name, node), scope in zip(sides, scopes):
            if not scope.aggregate:
                self.fail("a JOIN of a row-by-row subquery is not supported: only aggregate results can be joined, "
                          "on their keys", "JOIN", node, keyword=_KEYWORDS["joins"])
            if scope.select.args.get("joins"):
                self.fail("a joined aggregate subquery with a JOIN of its own is not supported", "JOIN",
                          scope.select.args["joins"][0], keyword=_KEYWORDS["joins"])
            if name is None:
                self.fail("a joined subquery needs a name (AS name)", "subquery", node)
            for clause in ("limit", "offset"):
                if scope.select.args.get(clause) is not None:
                    self.fail(f"{clause.upper()} in a joined aggregate subquery is not supported", clause.upper(),
                              scope.select.args[clause], keyword=_KEYWORDS[clause])
            window = next(scope.select.find_all(exp.Window), None)
            if window is not None:
                self.fail("a window function in a joined aggregate subquery is not supported", "window function",
                          window)
        tables = {str(t.args["from_"].this.name).lower() for t in (sc.select for sc in scopes)
                  if isinstance(t.args.get("from_") and t.args["from_"].this, exp.Table)}
        if len(tables) != 1 or len(set(names)) != len(names):
            self.fail("joined aggregate subqueries must each read the private table, under different names", "JOIN",
                      joins[0], keyword=_KEYWORDS["joins"])
        keys = [self.keys(sc.select) for sc in scopes]
        grouped = [i for i, k in enumerate(keys) if k]
        totals = [i for i, k in enumerate(keys) if not k] if grouped else []
        if totals:
            self.check_totals(scopes, joins, grouped, totals)
        self.check_join_keys([sides[i] for i in grouped or range(len(sides))],
                             [scopes[i] for i in grouped or range(len(sides))],
                             [keys[i] for i in grouped or range(len(sides))],
                             [joins[i - 1] for i in grouped[1:]] if totals else joins)
        wheres = [sc.select.args.get("where") for sc in scopes]
        common = len({w.this.sql(dialect="duckdb") if w is not None else "" for w in wheres}) == 1
        tables_of: dict[str, dict[str, exp.Expression | None]] = {}
        items: list[exp.Expression] = []  # what * reads: a USING column once, as in DuckDB
        havings: list[exp.Expression] = []
        using = {i.name.lower() for j in joins for i in j.args.get("using") or []}
        for index, (name, sc, where) in enumerate(zip(names, scopes, wheres)):
            cond = None if common or where is None else where.this
            own = {e.alias.lower(): e.this for e in sc.select.expressions if isinstance(e, exp.Alias)}
            having = sc.select.args.get("having")
            if having is not None:
                self.own_aliases(having, own, sc.select)
                havings.append(_filtered(having.this, cond))
            over = _over_groups if index in totals else _filtered  # a total: the sum of its answers over the groups
            tables_of[name] = {k: (None if v is None else over(v, cond)) for k, v in sc.columns.items()}
            items.extend(over(e, cond) for e in sc.select.expressions
                         if not (index and e.alias_or_name.lower() in using))
        columns: dict[str, exp.Expression | None] = {}
        for cols in tables_of.values():
            for k, v in cols.items():
                same = k not in columns or (v is not None and columns[k] is not None
                                            and v.sql(dialect="duckdb") == columns[k].sql(dialect="duckdb"))
                columns[k] = v if same else None
        first = scopes[0].select
        merged = exp.Select(expressions=items, from_=first.args["from_"])
        # an equality is never true of NULL keys: the join drops their groups, and so does this WHERE
        kept = [exp.Not(this=exp.Is(this=k.copy(), expression=exp.Null())) for k in keys[grouped[0] if grouped else 0]]
        if totals:
            # the totals sum over every group, so what drops groups applies after them: a QUALIFY; a cross join
            # of one grouped side keeps its NULL-key group
            havings.extend(kept if len(grouped) > 1 else [])
            kept = []
        conditions = ([wheres[0].this] if common and wheres[0] is not None else []) + kept
        if conditions:
            merged.set("where", exp.Where(this=exp.and_(*conditions) if len(conditions) > 1 else conditions[0]))
        if grouped:
            merged.set("group", exp.Group(expressions=[k.copy() for k in keys[grouped[0]]]))
        if havings:
            clause, cls = ("qualify", exp.Qualify) if totals else ("having", exp.Having)
            merged.set(clause, cls(this=exp.and_(*havings) if len(havings) > 1 else havings[0]))
        outer.set("joins", None)
        return self.merge(outer, _Scope(merged, columns, True, tables_of))

    def keys(self, select: exp.Select) -> list[exp.Expression]:
        """An aggregate query's GROUP BY keys, aliases and positions spelled out."""
        group = select.args.get("group")
        own = {e.alias.lower(): e.this for e in select.expressions if isinstance(e, exp.Alias)}
        out = []
        for g in group.expressions if group is not None else []:
            if isinstance(g, exp.Literal) and not g.is_string and g.this.isdigit() \
                    and 1 <= int(g.this) <= len(select.expressions):
                item = select.expressions[int(g.this) - 1]
                g = item.this if isinstance(item, exp.Alias) else item
            elif isinstance(g, exp.Column) and not g.table and g.name.lower() in own \
                    and self.schema.column(g.name) is None:
                g = own[g.name.lower()]
            out.append(g)
        return out

    def check_totals(self, scopes: list[_Scope], joins: list[exp.Join], grouped: list[int], totals: list[int]) -> None:
        """Refuse a join of grouped results with totals that is not a cross join, or whose totals
        are not additive (a COUNT or SUM is the sum of its groups' answers; an AVG is not)."""
        for index in totals + grouped[:1]:
            j = joins[index - 1] if index else None
            if j is not None and (j.args.get("on") is not None or j.args.get("using")):
                self.fail("a total (an aggregate query without GROUP BY) joins grouped results with CROSS JOIN, "
                          "',' or ON TRUE: it has no keys to join on", "JOIN condition",
                          j.args.get("on") or j, keyword=None if j.args.get("on") is not None else _KEYWORDS["joins"])
        for index in totals:
            self.check_total(scopes[index].select, "a total joined with grouped results")

    def check_total(self, select: exp.Select, what: str) -> None:
        """Refuse a total (``what``) that is not the sum of the groups' answers: with HAVING, or an
        aggregate other than COUNT and SUM (an AVG, a variance, a quantile, a DISTINCT count)."""
        if select.args.get("having") is not None:
            self.fail(f"HAVING in {what} is not supported", "HAVING", select.args["having"],
                      keyword=_KEYWORDS["having"])
        for agg in (a for e in select.expressions for a in _aggregates(e)):
            if not (isinstance(agg, (exp.Count, exp.Sum)) and not isinstance(agg.this, exp.Distinct)) \
                    or isinstance(agg.parent, exp.WithinGroup):
                name = agg.sql_name() if isinstance(agg, exp.Func) else agg.key.upper()
                name += "(DISTINCT)" if isinstance(agg.this, exp.Distinct) else ""
                self.fail(f"{name} in {what} is not supported: it is computed as the sum of the groups' answers, "
                          "which only COUNT and SUM are", name, agg)

    def scalar_totals(self, tree: exp.Select) -> exp.Select:
        """``tree`` with each scalar subquery of its select list that is a total of the table it
        groups (``COUNT(*) / (SELECT COUNT(*) FROM t)``) written as the sum of that total's
        aggregates over its groups, ``SUM(COUNT(*)) OVER ()``, its WHERE their FILTER. HAVING, which
        would drop groups from the sum, becomes a QUALIFY (after the windows). Other scalar
        subqueries are left to the analyzer, which refuses them."""
        subqueries = _scalar_subqueries(tree)
        aggregate = bool(tree.args.get("group")) or any(_aggregates(e) for e in tree.expressions)
        if not subqueries or not aggregate:
            return tree
        what = "a scalar subquery over groups"
        group = tree.args.get("group")
        frm = tree.args.get("from_")
        if group is not None and set(_set_args(group)) != {"expressions"} or any(
                isinstance(g, (exp.Rollup, exp.Cube, exp.GroupingSets)) for g in (group.expressions if group else [])):
            self.fail(f"GROUPING SETS, ROLLUP, CUBE or GROUP BY ALL with {what} is not supported: the total is "
                      "summed over the groups of a GROUP BY of keys (with margins, over every margin)", "GROUP BY",
                      group, keyword=_KEYWORDS["group"])
        if tree.args.get("joins") or frm is None or not isinstance(frm.this, exp.Table):
            self.fail(f"{what} needs the outer query to read the table alone (no JOIN)", "subquery", subqueries[0])
        if tree.args.get("having") is not None and (tree.args.get("qualify") is not None
                                                    or any(tree.find_all(exp.Window))):
            self.fail(f"HAVING with both {what} and a window function is not supported", "HAVING",
                      tree.args["having"], keyword=_KEYWORDS["having"])
        outer_where = tree.args.get("where")
        for sub in subqueries:
            body = sub.this
            while isinstance(body, exp.Subquery):
                body = body.this
            if not isinstance(body, exp.Select):
                continue
            body = self.select(body.copy(), {})
            scope = self.scope(body)
            if not scope.aggregate or self.keys(body) or len(body.expressions) != 1:
                self.fail(f"{what} must be one total of the table (an aggregate without GROUP BY)", "subquery", sub)
            for clause in ("limit", "offset", "qualify", "joins"):
                value = body.args.get(clause)
                if value:
                    self.fail(f"{_CLAUSE_NAMES[clause]} in {what} is not supported", _CLAUSE_NAMES[clause],
                              value[0] if isinstance(value, list) else value, keyword=_KEYWORDS[clause])
            inner_from = body.args["from_"].this
            if not isinstance(inner_from, exp.Table) or inner_from.name.lower() != frm.this.name.lower():
                self.fail(f"{what} must read the table the outer query groups", "subquery", sub)
            self.check_total(body, what)
            where = body.args.get("where")
            same = (where.this.sql(dialect="duckdb") if where else None) == (
                outer_where.this.sql(dialect="duckdb") if outer_where else None)
            if not same and outer_where is not None:
                self.fail(f"{what} under an outer WHERE other than its own is not supported: the total is summed "
                          "over the outer groups, which that WHERE filters", "subquery", sub)
            item = body.expressions[0]
            total = _over_groups(item.this if isinstance(item, exp.Alias) else item,
                                 None if same else where.this)
            sub.replace(exp.Paren(this=total))
        having = tree.args.get("having")
        if having is not None:
            tree.set("having", None)
            tree.set("qualify", exp.Qualify(this=having.this))
        return tree

    def check_join_keys(self, sides: list, scopes: list[_Scope], keys: list[list[exp.Expression]],
                        joins: list[exp.Join]) -> None:
        """Refuse a join that is not on every key of each side, equal to the same key of the other."""
        spelled = [sorted(k.sql(dialect="duckdb") for k in ks) for ks in keys]
        if any(s != spelled[0] for s in spelled):
            self.fail("joined aggregate subqueries must group by the same keys: a join of groups of different "
                      "keys is not merged into one statement", "JOIN", joins[0], keyword=_KEYWORDS["joins"])
        names = [name.lower() for _, name, _ in sides]
        for index, j in enumerate(joins, start=1):
            paired: set[str] = set()
            if j.args.get("using"):
                for ident in j.args["using"]:
                    for earlier in range(index):
                        a, b = scopes[earlier].columns.get(ident.name.lower()), scopes[index].columns.get(
                            ident.name.lower())
                        if a is not None and b is not None and a.sql(dialect="duckdb") == b.sql(dialect="duckdb"):
                            paired.add(a.sql(dialect="duckdb"))
            on = j.args.get("on")
            for part in _conjuncts(on):
                if not (isinstance(part, exp.EQ) and isinstance(part.this, exp.Column)
                        and isinstance(part.expression, exp.Column)):
                    self.fail("a join of aggregate results is on equalities of their keys (a.k = b.k AND ...)",
                              "JOIN condition", part)
                ends = []
                for c in (part.this, part.expression):
                    t = c.table.lower() if c.table else None
                    side = names.index(t) if t in names else None
                    value = scopes[side].columns.get(c.name.lower()) if side is not None else None
                    if side is None or value is None:
                        self.fail(f"{c.sql()} is not a key of a joined subquery (qualify it: name.column)",
                                  f"column {c.name!r}", c, UnknownColumnError)
                    ends.append((side, value.sql(dialect="duckdb")))
                (sa, va), (sb, vb) = ends
                if va != vb or index not in (sa, sb) or max(sa, sb) != index:
                    self.fail("a join of aggregate results must equate each key with the same key of the other "
                              "side", "JOIN condition", part)
                paired.add(va)
            if paired != set(spelled[0]):
                self.fail("a join of aggregate results must be on all their keys (it would otherwise repeat "
                          "groups)", "JOIN condition", on if on is not None else j,
                          keyword=None if on is not None else _KEYWORDS["joins"])

    def renamed(self, select: exp.Select, alias: exp.TableAlias | None) -> exp.Select:
        """``select`` with its first items renamed by a column list (``c(x, y) AS (...)``,
        ``AS s(x, y)``), its ``*`` spelled out first."""
        names = alias.args.get("columns") if alias is not None else None
        if not names:
            return select
        self.expand(select)
        items = list(select.expressions)
        if len(names) > len(items):
            self.fail(f"{len(names)} column names are given for a query with {len(items)} columns",
                      "column names", alias)
        for k, name in enumerate(names):
            body = items[k].this if isinstance(items[k], exp.Alias) else items[k]
            items[k] = exp.alias_(body.copy(), name.copy())
        select.set("expressions", items)
        return select

    def expand(self, inner: exp.Select) -> None:
        """Spell out a ``*`` (or ``table.*``) of a query over the private table: its columns, then
        the levels of its hierarchy columns (:mod:`dpsql.sql.levels`), as DuckDB reads the table."""
        items = []
        for item in inner.expressions:
            body = item.this if isinstance(item, exp.Alias) else item
            if isinstance(body, exp.Star) or (isinstance(body, exp.Column) and isinstance(body.this, exp.Star)):
                if set(_set_args(body)) - {"this", "table"} or set(_set_args(body.this) if isinstance(
                        body, exp.Column) else []) - {"this"}:
                    self.fail("this * is not supported in a subquery: name its columns", "*", body)
                # the table's columns, then its hierarchy levels: the columns DuckDB binds it with (dpsql.sql.bind)
                items.extend(exp.column(c.name) for c in self.schema.columns)
                items.extend(exp.column(level) for c in self.schema.columns for level, _ in getattr(c, "levels", ())
                             if self.schema.column(level) is None)
                continue
            items.append(item)
        inner.set("expressions", items)

    def scope(self, inner: exp.Select) -> _Scope:
        """The inner query's outputs, after checking that it is a row-by-row map and filter or an
        aggregate query that can be merged."""
        aggregate = bool(inner.args.get("group")) or any(_aggregates(e) for e in inner.expressions) \
            or bool(inner.args.get("having"))
        allowed = _AGGREGATE_ARGS if aggregate else _ROW_ARGS
        lookups = inner.args.get("joins") or []
        if lookups and all(isinstance(j.this, exp.Table) for j in lookups):
            allowed = allowed | {"joins"}  # a join with a lookup table: the analyzer checks it is one
        for key, value in inner.args.items():
            if key in allowed or not value:
                continue
            name = _CLAUSE_NAMES.get(key, key.upper())
            node = value if isinstance(value, exp.Expression) else value[0] if isinstance(value, list) else inner
            why = {"LIMIT": "it keeps some rows and drops others, depending on the data",
                   "OFFSET": "it keeps some rows and drops others, depending on the data",
                   "SELECT DISTINCT": "it merges rows, so a count of its rows counts distinct values, not people",
                   "JOIN": "a join can repeat a person's row"}.get(name, "it reads other rows")
            if key == "distinct":
                node = inner.expressions[0]
            self.fail(f"{name} inside a subquery or CTE is not supported: {why}", name, node,
                      keyword=_KEYWORDS.get(key))
        self.unqualify(inner)
        if not aggregate:
            for node in inner.find_all(exp.Window):
                self.fail("a window function inside a subquery or CTE is not supported: it reads other rows, so "
                          "one person's row weighs on many", "window function", node)
        if inner.args.get("from_") is None:
            self.fail("a subquery or CTE must read the table: FROM it", "subquery without FROM",
                      inner.expressions[0] if inner.expressions else inner)
        if (aggregate or lookups) and any(isinstance(e, exp.Star) for e in inner.expressions):
            what = "an aggregate subquery" if aggregate else "a subquery with a JOIN"
            self.fail(f"SELECT * is not supported in {what}: name its columns", "*",
                      next(e for e in inner.expressions if isinstance(e, exp.Star)))
        self.expand(inner)
        columns: dict[str, exp.Expression | None] = {}
        for item in inner.expressions:
            body = item.this if isinstance(item, exp.Alias) else item
            name = item.alias if isinstance(item, exp.Alias) else body.name if isinstance(body, exp.Column) else None
            if name:
                key = name.lower()
                columns[key] = None if key in columns else body  # None: ambiguous, as in DuckDB
        return _Scope(inner, columns, aggregate)

    def unqualify(self, inner: exp.Select) -> None:
        """Drop the qualifiers of the inner query's columns (its table's name, or its alias) and its
        table's alias: once merged, its columns are read through the outer query's names."""
        frm = inner.args.get("from_")
        table = frm.this if frm is not None else None
        if not isinstance(table, exp.Table) or inner.args.get("joins"):  # with a lookup: qualified as written
            return
        names = {(table.alias or table.name).lower()}
        for col in list(inner.find_all(exp.Column)):
            if not col.table or any(isinstance(p, (exp.Subquery, exp.Select)) for p in _ups(col, inner)):
                continue
            if col.table.lower() not in names:
                self.fail(f"unknown table {col.table!r} in {col.sql()}", f"table {col.table!r}", col,
                          UnknownColumnError)
            col.set("table", None)
        table.set("alias", None)

    # -- merging --------------------------------------------------------------------------

    def merge(self, outer: exp.Select, scope: _Scope) -> exp.Select:
        inner = scope.select
        outer_aggregate = (bool(outer.args.get("group")) or bool(outer.args.get("having"))
                           or any(_aggregates(e) for e in outer.expressions))
        if scope.aggregate and outer_aggregate:
            group = outer.args.get("group")
            node = group or next((a for e in outer.expressions for a in _aggregates(e)), outer)
            self.fail("an aggregate over the result of an aggregate subquery or CTE is not supported: its rows are "
                      "noisy answers, not rows of the table; aggregate the table directly, or post-process the "
                      "answers (WHERE, ORDER BY, LIMIT and expressions over them)", "aggregate of an aggregate", node,
                      keyword=_KEYWORDS["group"] if group else None)
        if scope.aggregate:
            self.check_outer(outer, inner)
        aliases = {e.alias.lower(): e.this for e in outer.expressions if isinstance(e, exp.Alias)}
        for clause in ("where", "group", "having", "order", "qualify"):
            part = outer.args.get(clause)
            if part is not None:
                self.substitute(part, scope, aliases, clause.upper())
        items: list[exp.Expression] = []
        for item in outer.expressions:
            body = item.this if isinstance(item, exp.Alias) else item
            if isinstance(body, exp.Star) or (isinstance(body, exp.Column) and isinstance(body.this, exp.Star)):
                if set(_set_args(body)) - {"this", "table"}:
                    self.fail("this * is not supported over a subquery: name its columns", "*", body)
                items.extend(e.copy() for e in inner.expressions)  # the subquery's items, with their names
                continue
            if isinstance(body, exp.Column) and not isinstance(item, exp.Alias):
                replaced = self.reference(body, scope, {}, "SELECT")
                items.append(replaced if _named(replaced, body.name)
                             else exp.alias_(replaced, exp.to_identifier(body.name, quoted=body.this.quoted)))
                continue
            self.substitute(item, scope, {}, "SELECT")
            items.append(item)
        outer.set("expressions", items)
        return self.merge_aggregate(outer, inner) if scope.aggregate else self.merge_rows(outer, inner)

    def merge_rows(self, outer: exp.Select, inner: exp.Select) -> exp.Select:
        """A row-by-row subquery: the outer query, FROM the inner table (and its lookup joins), WHERE both
        conditions."""
        outer.set("from_", inner.args["from_"])
        outer.set("joins", inner.args.get("joins"))
        conditions = [w.this for w in (inner.args.get("where"), outer.args.get("where")) if w is not None]
        if conditions:
            outer.set("where", exp.Where(this=exp.and_(*conditions) if len(conditions) > 1 else conditions[0]))
        for count in list(outer.find_all(exp.Count)):
            _count_rows(count)
        return outer

    def check_outer(self, outer: exp.Select, inner: exp.Select) -> None:
        """Refuse an outer clause over an aggregate subquery that would not be the same once merged."""
        for key, value in outer.args.items():
            if key not in _OUTER_ARGS and value:
                name = _CLAUSE_NAMES.get(key, key.upper())
                node = value if isinstance(value, exp.Expression) else value[0] if isinstance(value, list) else outer
                self.fail(f"{name} over the result of an aggregate subquery or CTE is not supported", name, node,
                          keyword=_KEYWORDS.get(key))
        limited = inner.args.get("limit") or inner.args.get("offset")
        for clause in ("where", "order", "limit", "offset"):
            part = outer.args.get(clause)
            if part is not None and limited is not None:
                self.fail(f"an outer {clause.upper()} over an aggregate subquery with its own LIMIT or OFFSET is not "
                          "supported: it would apply to the rows the subquery keeps, not to all its groups",
                          clause.upper(), part, keyword=_KEYWORDS.get(clause))
        kept = "LIMIT or OFFSET" if limited is not None else "QUALIFY" if inner.args.get("qualify") else None
        if kept is not None and any(outer.find_all(exp.Window)):
            self.fail(f"a window function over an aggregate subquery with its own {kept} is not supported: it would "
                      "see all its groups, not the ones the subquery keeps", "window function",
                      next(outer.find_all(exp.Window)))

    def merge_aggregate(self, outer: exp.Select, inner: exp.Select) -> exp.Select:
        """An outer query over an aggregate subquery: post-processing of its answers."""
        where = outer.args.get("where")
        if where is not None:
            sandbox_check(self, where.this)
            # over a subquery with windows, the outer WHERE applies after them (to all its groups): a QUALIFY
            clause, cls = ("qualify", exp.Qualify) if any(inner.find_all(exp.Window)) else ("having", exp.Having)
            before = inner.args.get(clause)
            conditions = [before.this, where.this] if before is not None else [where.this]
            inner.set(clause, cls(this=exp.and_(*conditions) if len(conditions) > 1 else conditions[0]))
        if inner.args.get("having") is not None:
            sandbox_check(self, inner.args["having"].this)
        own = {e.alias.lower(): e.this for e in inner.expressions if isinstance(e, exp.Alias)}
        for part in (inner.args.get("having"), inner.args.get("qualify"), inner.args.get("order")):
            if part is not None:
                self.own_aliases(part, own, inner)
        if outer.args.get("order") is not None:
            inner.set("order", outer.args["order"])
        for clause in ("limit", "offset"):
            if outer.args.get(clause) is not None:
                inner.set(clause, outer.args[clause])
        inner.set("expressions", outer.expressions)
        return inner

    def own_aliases(self, part: exp.Expression, own: dict[str, exp.Expression], inner: exp.Select) -> None:
        """Inner HAVING and ORDER BY name the inner select items by alias or position: spell them
        out, since the merged select list is the outer one."""
        if isinstance(part, exp.Order):
            for o in part.expressions:
                term = o.this
                if isinstance(term, exp.Literal) and not term.is_string and term.this.isdigit():
                    k = int(term.this)
                    if 1 <= k <= len(inner.expressions):
                        item = inner.expressions[k - 1]
                        o.set("this", (item.this if isinstance(item, exp.Alias) else item).copy())
        for col in list(part.find_all(exp.Column)):
            key = col.name.lower()
            if not col.table and key in own and self.schema.column(col.name) is None:
                _replace(col, own[key].copy())

    def substitute(self, node: exp.Expression, scope: _Scope, aliases: dict[str, exp.Expression],
                   clause: str) -> None:
        """Replace, in ``node``, each reference to a column of the subquery with its expression."""
        for col in list(node.find_all(exp.Column)):
            if isinstance(col.this, exp.Star) or any(isinstance(p, (exp.Subquery, exp.Select)) for p in _ups(col, node)):
                continue
            replaced = self.reference(col, scope, aliases, clause)
            if replaced is not col:
                _replace(col, replaced)

    def reference(self, col: exp.Column, scope: _Scope, aliases: dict[str, exp.Expression],
                  clause: str) -> exp.Expression:
        """What the outer reference ``col`` reads: a copy of the subquery column's expression, or
        ``col`` itself for an outer select alias (HAVING, ORDER BY)."""
        key = col.name.lower()
        columns = scope.columns
        if col.table:
            columns = scope.tables.get(col.table.lower())
            if columns is None:
                named = ", ".join(repr(t) for t in scope.tables) or "a subquery without a name"
                self.fail(f"unknown table {col.table!r} in {col.sql()}: the query reads {named}",
                          f"table {col.table!r}", col, UnknownColumnError)
        if col.args.get("db") or col.args.get("catalog"):
            self.fail("qualified names with a schema are not supported", col.sql(), col)
        if key in columns:
            found = columns[key]
            if found is None:
                self.fail(f"column {col.name!r} is ambiguous: the subquery has several columns of that name",
                          f"column {col.name!r}", col, UnknownColumnError)
            if clause in ("HAVING", "ORDER") and key in aliases and not _same_column(aliases[key], col.name):
                self.fail(f"{col.name!r} names both a column of the subquery and a select item: rename one",
                          f"column {col.name!r}", col)
            return found.copy()
        if not col.table and key in aliases and clause in ("WHERE", "GROUP"):
            # an outer select alias, as DuckDB reads it there: its expression
            holder = exp.Paren(this=aliases[key].copy())
            self.substitute(holder, scope, {k: v for k, v in aliases.items() if k != key}, clause)
            return holder.this
        if not col.table and key in aliases:
            return col  # an outer select alias in HAVING or ORDER BY: the analyzer resolves it
        known = ", ".join(k for k, v in columns.items() if v is not None) or "none"
        self.fail(f"unknown column {col.name!r}: the subquery's columns are {known}", f"column {col.name!r}", col,
                  UnknownColumnError)


def sandbox_check(inliner: _Inliner, condition: exp.Expression) -> None:
    """Refuse, before DuckDB's binder folds its constants, a condition that runs on the answers
    and calls a function whose cost depends on them (:func:`dpsql.sql.sandbox.check_bounded`)."""
    holder = exp.Paren(this=condition.copy())
    for agg in _aggregates(holder):  # an aggregate is an answer (a number) there
        node = agg
        while isinstance(node.parent, (exp.Filter, exp.WithinGroup)):
            node = node.parent
        node.replace(exp.column("answer"))
    try:
        sandbox.check_bounded(f"SELECT {holder.this.sql(dialect='duckdb')}")
    except ValueError as e:
        inliner.fail(f"a condition on the answers cannot be evaluated: {e}", "post-processing", condition)


def _aggregates(node: exp.Expression) -> list[exp.Expression]:
    """The aggregate calls in ``node`` that are not window functions (nor a subquery's)."""
    names = sandbox.aggregate_names()
    out = []
    for sub in node.walk(prune=lambda n: isinstance(n, exp.Subquery) and n is not node):
        if (isinstance(sub, exp.AggFunc) or (isinstance(sub, exp.Anonymous) and str(sub.this).lower() in names)) \
                and not isinstance(sub.parent, exp.Window) \
                and not (isinstance(sub.parent, (exp.Filter, exp.WithinGroup)) and isinstance(sub.parent.parent,
                                                                                               exp.Window)):
            out.append(sub)
    return out


def _filtered(node: exp.Expression, condition: exp.Expression | None) -> exp.Expression:
    """A copy of ``node`` whose aggregates read only the rows where ``condition`` holds (FILTER)."""
    out = node.copy()
    if condition is None:
        return out
    holder = exp.Paren(this=out)
    for agg in _aggregates(holder):
        if isinstance(agg.parent, exp.Filter):
            where = agg.parent.expression
            where.set("this", exp.and_(condition.copy(), where.this))
        elif not isinstance(agg.parent, exp.WithinGroup):
            agg.replace(exp.Filter(this=agg.copy(), expression=exp.Where(this=condition.copy())))
        else:
            agg.parent.replace(exp.Filter(this=agg.parent.copy(), expression=exp.Where(this=condition.copy())))
    return holder.this


def _over_groups(node: exp.Expression, condition: exp.Expression | None) -> exp.Expression:
    """A copy of ``node`` (a total's item: COUNT and SUM aggregates) with each aggregate, filtered by
    ``condition``, summed over the groups: ``SUM(agg FILTER (WHERE condition)) OVER ()``. GROUP BY
    keeps the group of NULL keys, so the sum over all groups is the total."""
    holder = exp.Paren(this=_filtered(node, condition))
    for agg in _aggregates(holder):
        whole = agg.parent if isinstance(agg.parent, exp.Filter) else agg
        whole.replace(exp.Window(this=exp.Sum(this=whole.copy()), over="OVER"))
    return holder.this


def _always_true(on: exp.Expression | None) -> bool:
    """``ON TRUE`` or ``ON 1 = 1``: a join condition that holds for every pair."""
    if isinstance(on, exp.Paren):
        return _always_true(on.unnest())
    return (isinstance(on, exp.Boolean) and on.this is True) or (
        isinstance(on, exp.EQ) and isinstance(on.this, exp.Literal) and isinstance(on.expression, exp.Literal)
        and on.this == on.expression)


def _count_rows(count: exp.Count) -> None:
    """``COUNT(e)`` of a derived column ``e`` as ``COUNT(*) FILTER (WHERE (e) IS NOT NULL)``: the
    same rows, NULLs included, in a form the analyzer reads (a column, a CASE and a constant are
    left as they are)."""
    arg = count.this
    if isinstance(arg, (exp.Column, exp.Star, exp.Distinct, exp.Case, exp.Literal, exp.Null)) \
            or isinstance(count.parent, exp.Window) or arg is None:
        return
    holds = exp.Not(this=exp.Is(this=exp.Paren(this=arg.copy()), expression=exp.Null()))
    rows = exp.Count(this=exp.Star())
    if isinstance(count.parent, exp.Filter):
        where = count.parent.expression
        where.set("this", exp.and_(where.this, holds))
        count.replace(rows)
    else:
        count.replace(exp.Filter(this=rows, expression=exp.Where(this=holds)))


def _conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    if node is None:
        return []
    node = node.unnest() if isinstance(node, exp.Paren) else node
    if isinstance(node, exp.And):
        return _conjuncts(node.this) + _conjuncts(node.expression)
    return [node]


def _set_args(node: exp.Expression) -> list[str]:
    return [k for k, v in node.args.items() if v is not None and v is not False and not (isinstance(v, list) and not v)]


def _ups(node: exp.Expression, top: exp.Expression) -> list[exp.Expression]:
    out = []
    p = node.parent
    while p is not None and p is not top:
        out.append(p)
        p = p.parent
    return out


def _replace(col: exp.Column, value: exp.Expression) -> None:
    """Put ``value`` where ``col`` is, in parentheses where an operator reads it."""
    if isinstance(value, _OPERATORS) and isinstance(col.parent, _OPERATORS):
        value = exp.Paren(this=value)
    col.replace(value)


def _named(e: exp.Expression, name: str) -> bool:
    return isinstance(e, exp.Column) and e.name.lower() == name.lower()


def _same_column(e: exp.Expression, name: str) -> bool:
    return isinstance(e, exp.Column) and e.name.lower() == name.lower()


def _set_operator(node: exp.Expression) -> exp.Expression:
    """Where a set operation's keyword follows: its right-hand query (or the node itself)."""
    right = node.args.get("expression")
    return right if isinstance(right, exp.Expression) else node


def _kind(node: exp.Expression) -> str:
    return {exp.Union: "UNION", exp.Intersect: "INTERSECT", exp.Except: "EXCEPT"}.get(type(node),
                                                                                     node.key.upper())
