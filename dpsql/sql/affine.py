"""SUM and AVG of an affine function of one column, as the column's own aggregates.

One public function, :func:`affine_aggregates`. ``SUM(a * c + b)`` over the rows where the
column ``c`` is not NULL (where ``a * c + b`` is not NULL either) is ``a * SUM(c) + b * COUNT(c)``,
NULL where ``SUM(c)`` is (no value); ``AVG(a * c + b)`` is ``a * AVG(c) + b``. Both are DuckDB's
answers, NULLs included, and expressions over measured aggregates: their standard errors follow
by the delta method, which for a linear function is exact. A FILTER applies to each part. This is
what ``SUM(age + 1)``, ``AVG(2 * age - 3)`` and ``WITH t AS (SELECT age + 1 AS a1 FROM p) SELECT
SUM(a1) FROM t`` (:mod:`dpsql.sql.inline` merges it to ``SUM(age + 1)``) need, and T-SQL's
``AVG(CAST(age AS FLOAT))``: a cast of an integer column to a floating-point type that holds
each of its values exactly is the column. An argument that
is not affine in one numeric column (``age * age``, ``abs(age)``) is left as it is, and the
analyzer refuses it by name.

>>> import sqlglot
>>> from dpsql.schema import load_schema
>>> s = load_schema({"table": "t", "columns": {"age": {"type": "integer", "min": 0, "max": 99}}})
>>> affine_aggregates(sqlglot.parse_one("SELECT SUM(age + 1), AVG(2 * age - 3) FROM t"), s).sql()
'SELECT (SUM(age) + COUNT(age)), (2 * AVG(age) + -3) FROM t'
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.schema import Binned, IntegerRange, Schema
from dpsql.sql.grid import literal_value

__all__ = ["affine_aggregates"]

#: (column, a, b): the argument is ``a * column + b``; column None for a constant ``b``.
#: The floating-point types a CAST of an integer column may widen to, with the largest integer each holds exactly.
_EXACT_INTEGERS = {exp.DataType.Type.DOUBLE: 2**53, exp.DataType.Type.FLOAT: 2**24}
_Affine = tuple[exp.Column | None, float, float]


def affine_aggregates(tree: exp.Expression, schema: Schema) -> exp.Expression:
    """``tree`` with every SUM or AVG (FILTER included) of an affine function of one numeric
    column of ``schema`` written over the column's SUM, AVG and COUNT (see the module docstring)."""
    def rewrite(node: exp.Expression) -> exp.Expression:
        call, condition = (node.this, node.expression) if isinstance(node, exp.Filter) else (node, None)
        if not isinstance(call, (exp.Sum, exp.Avg)) or call.expressions or (
                condition is None and isinstance(node.parent, exp.Filter)):
            return node
        form = _affine(call.this, schema)
        if form is None or form[0] is None or (form[1] == 1 and form[2] == 0 and isinstance(call.this, exp.Column)):
            return node  # a constant, or a column itself

        def agg(kind: type[exp.Func], column: exp.Column) -> exp.Expression:
            made = kind(this=column.copy())
            return exp.Filter(this=made, expression=condition.copy()) if condition is not None else made

        column, a, b = form
        main = _times(a, agg(type(call), column))
        if b == 0:
            return main if a == 1 else exp.Paren(this=main)
        other = _times(b, agg(exp.Count, column)) if isinstance(call, exp.Sum) else _number(b)
        return exp.Paren(this=exp.Add(this=main, expression=other))

    return tree.transform(rewrite)


def _number(v: float) -> exp.Expression:
    return exp.Literal.number(int(v) if float(v).is_integer() and abs(v) < 2**53 else v)


def _times(a: float, e: exp.Expression) -> exp.Expression:
    return e if a == 1 else exp.Mul(this=_number(a), expression=e)


def _affine(node: exp.Expression, schema: Schema) -> _Affine | None:
    """``(column, a, b)`` where ``node`` is ``a * column + b``; None where it is not affine in one
    numeric column (or holds a division by zero, which DuckDB makes NULL)."""
    if isinstance(node, exp.Paren):
        return _affine(node.this, schema)
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Column):  # T-SQL's AVG(CAST(age AS FLOAT))
        col, exact = schema.column(node.this.name), _EXACT_INTEGERS.get(node.to.this)
        if isinstance(col, IntegerRange) and exact is not None and max(abs(col.min), abs(col.max)) <= exact:
            return node.this, 1.0, 0.0  # every value of the column, exactly
        return None
    if isinstance(node, exp.Column):
        col = schema.column(node.name)
        return (node, 1.0, 0.0) if col is not None and (col.is_numeric or isinstance(col, Binned)) else None
    ok, value = literal_value(node)
    if ok:
        return (None, 0.0, float(value)) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if isinstance(node, exp.Neg):
        inner = _affine(node.this, schema)
        return None if inner is None else (inner[0], -inner[1], -inner[2])
    if not isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        return None
    left, right = _affine(node.this, schema), _affine(node.expression, schema)
    if left is None or right is None:
        return None
    if isinstance(node, (exp.Add, exp.Sub)):
        sign = 1.0 if isinstance(node, exp.Add) else -1.0
        if left[0] is not None and right[0] is not None and left[0].sql() != right[0].sql():
            return None
        return (left[0] if left[0] is not None else right[0], left[1] + sign * right[1], left[2] + sign * right[2])
    if isinstance(node, exp.Mul):
        if left[0] is not None and right[0] is not None:
            return None
        (column, a, b), k = (left, right[2]) if right[0] is None else (right, left[2])
        return column, a * k, b * k
    if right[0] is not None or right[2] == 0:
        return None
    return left[0], left[1] / right[2], left[2] / right[2]
