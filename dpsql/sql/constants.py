"""Constants in the clauses that run after noise, evaluated by DuckDB before anything is spent.

SELECT items over aggregates, HAVING and ORDER BY run on the released answers
(:mod:`dpsql.sql.postprocess`), where a cast or an operation that fails is NULL (a noisy
value must not make a paid-for release fail). A *constant* sub-expression (no column, no
aggregate: ``'abc'::INTEGER``, ``1 // 0``) fails on every row or on none, whatever the
data: DuckDB refuses such a statement, and so does dpsql, at compile time.
:func:`check_constants` evaluates each one in the sandbox DuckDB (:mod:`dpsql.sql.sandbox`)
and returns DuckDB's reason when it fails. It also refuses ``x // c`` and ``x % c``
where the divisor ``c`` is a constant that is 0: DuckDB raises "Division by zero" on
every row there, whatever ``x`` is (``x / 0`` is not refused: DuckDB's ``/`` gives
``inf``, ``-inf`` or NaN, as dpsql does). A THEN or ELSE value of a CASE or an IF, and a
COALESCE argument after the first, are not looked into: DuckDB evaluates them only on the
rows that reach them, so whether they fail depends on the answers, and there a failure is
NULL, as any failure on a noisy value is. Where WHERE and GROUP BY are concerned,
:mod:`dpsql.sql.domain_eval` already evaluates every expression on the declared
domain, constants included.

>>> from sqlglot import parse_one
>>> check_constants(parse_one("COUNT(*) > '5'::INTEGER", read="duckdb")) is None
True
>>> check_constants(parse_one("COUNT(*) > 'abc'::INTEGER", read="duckdb"))[1]
"Conversion Error: Could not convert string 'abc' to INT32"
>>> check_constants(parse_one("COUNT(*) // (2 - 2)", read="duckdb"))[1]
'division by the constant 0, which DuckDB refuses on every row (Division by zero)'
"""

from __future__ import annotations

import duckdb
from sqlglot import exp

from dpsql.sql import sandbox

__all__ = ["check_constants"]

#: Nodes that are their own value: nothing to evaluate.
_PLAIN = (exp.Literal, exp.Boolean, exp.Null)
#: Nodes not looked into: a column and an aggregate (with its FILTER or WITHIN GROUP) are not constant.
_OPAQUE = (exp.Column, exp.AggFunc, exp.Filter, exp.WithinGroup)
_BY_ZERO = "division by the constant 0, which DuckDB refuses on every row (Division by zero)"


def _constant(node: exp.Expression) -> bool:
    """Whether ``node`` reads no column and no aggregate (its value is the same on every row)."""
    return not any(isinstance(n, (exp.Column, exp.AggFunc, exp.Star)) for n in node.walk())


def _value(node: exp.Expression) -> bool:
    """Whether ``node`` is a value DuckDB can evaluate alone: not a part of one (a type, a
    keyword, a CASE branch, a struct field)."""
    return isinstance(node, (exp.Condition, exp.Interval)) and not isinstance(node, (exp.If, exp.PropertyEQ))


def _always_evaluated(node: exp.Expression) -> list[exp.Expression]:
    """The children of ``node`` DuckDB evaluates whatever the row: not a CASE's or an IF's
    THEN and ELSE values, nor a COALESCE's arguments after the first, which DuckDB evaluates
    only for the rows that reach them (``CASE WHEN COUNT(*) > 10 THEN 1 // 0 END`` fails only
    where the count is above 10: on the released answers, that is NULL)."""
    if isinstance(node, exp.If):
        return [node.this]
    if isinstance(node, exp.Case):
        return [c for c in (node.this, *(node.args.get("ifs") or ())) if c is not None]
    if isinstance(node, exp.Coalesce):
        return [node.this]
    return list(node.iter_expressions())


def check_constants(expr: exp.Expression) -> tuple[exp.Expression, str] | None:
    """``(node, reason)`` for the first constant sub-expression of ``expr`` that DuckDB cannot
    evaluate, or divisor of ``//`` or ``%`` that is a constant 0; None when there is none. Each
    largest constant sub-expression is evaluated once (a loop, not recursion)."""
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, _PLAIN + _OPAQUE):
            continue
        if _value(node) and _constant(node):
            text = f"SELECT {node.sql(dialect='duckdb')}"
            try:
                sandbox.check_bounded(text)  # nothing that can build a value larger than its inputs
            except ValueError as e:
                return node, str(e)[:300]
            with sandbox.limited("a constant expression") as con:  # within the sandbox's time and memory
                try:
                    value = con.execute(text).fetchall()[0][0]
                except (duckdb.InterruptException, duckdb.OutOfMemoryException):
                    raise
                except duckdb.Error as e:
                    reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                    return node, reason[:300]
            if isinstance(node.parent, (exp.IntDiv, exp.Mod)) and node is node.parent.expression \
                    and not isinstance(value, bool) and value == 0:
                return node.parent, _BY_ZERO
            continue
        stack.extend(reversed(_always_evaluated(node)))
        if isinstance(node, (exp.IntDiv, exp.Mod)) and isinstance(node.expression, _PLAIN):
            lit = node.expression
            if isinstance(lit, exp.Literal) and not lit.is_string and float(lit.this) == 0:
                return node, _BY_ZERO
    return None
