"""Partial derivatives of a post-processing expression, for the delta method.

One public function, :func:`partials`. A select item such as ``SUM(a) / COUNT(*)``
or ``POWER(AVG(x), 2)`` is computed by DuckDB from released aggregates
(:attr:`dpsql.sql.plan.QueryPlan.computed`); its standard error, by the delta
method, is ``sqrt(g' Σ g)`` where ``g`` holds the expression's partial
derivatives with respect to the aggregates, at their released values, and
``Σ`` their covariance. This module computes ``g`` by forward-mode
differentiation over the expression's tree: numbers, output columns,
``+ - * /``, unary minus, ``POWER``/``^`` with a constant exponent, ``sqrt``,
``ln``, ``exp``, ``abs``, ``ROUND`` (whose error is taken as the value's) and parentheses. Anything else (a CASE, a comparison,
a function of two aggregates other than those) gives None: no standard error
rather than a wrong one.

>>> import numpy as np, sqlglot
>>> e = sqlglot.parse_one('"s" / "n" + 1', dialect="duckdb")
>>> value, grad = partials(e, {"s": np.array([10.0]), "n": np.array([4.0])}, {"s", "n"})
>>> value.tolist(), grad["s"].tolist(), grad["n"].tolist()
([3.5], [0.25], [-0.625])
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
from sqlglot import exp

from dpsql.sql.grid import literal_value

__all__ = ["partials"]

Dual = tuple[np.ndarray, dict[str, np.ndarray]]


def partials(expr: exp.Expression, columns: Mapping[str, np.ndarray],
             variables: set[str]) -> Dual | None:
    """``(value, {variable: ∂value/∂variable})`` of ``expr`` per row, where ``columns`` holds every
    output column's values (keys and aggregates) and ``variables`` names the noisy ones (the
    aggregates); None where the expression is outside what this module differentiates."""
    try:
        return _dual(expr, columns, variables)
    except _Unsupported:
        return None


class _Unsupported(Exception):
    pass


def _dual(node: exp.Expression, columns: Mapping[str, np.ndarray], variables: set[str]) -> Dual:
    if isinstance(node, (exp.Paren, exp.Try)):
        return _dual(node.this, columns, variables)
    if isinstance(node, exp.Column):
        if node.name not in columns:
            raise _Unsupported
        values = np.asarray(columns[node.name])
        if values.dtype.kind not in "biuf":
            raise _Unsupported
        values = values.astype(np.float64)
        return values, ({node.name: np.ones_like(values)} if node.name in variables else {})
    ok, lit = literal_value(node)
    if ok:
        if isinstance(lit, (bool, str)) or lit is None:
            raise _Unsupported
        return np.asarray(float(lit)), {}
    if isinstance(node, exp.Neg):
        v, d = _dual(node.this, columns, variables)
        return -v, {k: -g for k, g in d.items()}
    if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Div)):
        (a, da), (b, db) = _dual(node.this, columns, variables), _dual(node.expression, columns, variables)
        with np.errstate(divide="ignore", invalid="ignore"):
            if isinstance(node, exp.Add):
                return a + b, _combine(da, 1.0, db, 1.0)
            if isinstance(node, exp.Sub):
                return a - b, _combine(da, 1.0, db, -1.0)
            if isinstance(node, exp.Mul):
                return a * b, _combine(da, b, db, a)
            return a / b, _combine(da, 1.0 / b, db, -a / (b * b))
    if isinstance(node, exp.Pow):
        ok, k = literal_value(node.expression)
        if not ok or isinstance(k, (bool, str)) or k is None:
            raise _Unsupported
        a, da = _dual(node.this, columns, variables)
        k = float(k)
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.power(a, k), {n: g * k * np.power(a, k - 1.0) for n, g in da.items()}
    if isinstance(node, exp.Round):  # the rounded value's error is the value's, to within half a unit
        ok, k = literal_value(node.args["decimals"]) if node.args.get("decimals") is not None else (True, 0)
        if not ok or not isinstance(k, int) or isinstance(k, bool):
            raise _Unsupported
        a, da = _dual(node.this, columns, variables)
        with np.errstate(invalid="ignore"):
            return np.sign(a) * np.floor(np.abs(a) * 10.0**k + 0.5) / 10.0**k, da
    unary = {exp.Sqrt: (np.sqrt, lambda a: 0.5 / np.sqrt(a)), exp.Ln: (np.log, lambda a: 1.0 / a),
             exp.Exp: (np.exp, np.exp), exp.Abs: (np.abs, np.sign)}.get(type(node))
    if unary is not None and not node.expressions:
        fn, slope = unary
        a, da = _dual(node.this, columns, variables)
        with np.errstate(divide="ignore", invalid="ignore"):
            s = slope(a)
            return fn(a), {n: g * s for n, g in da.items()}
    raise _Unsupported


def _combine(da: dict[str, np.ndarray], wa: object, db: dict[str, np.ndarray], wb: object) -> dict[str, np.ndarray]:
    """``wa * da + wb * db``, variable by variable."""
    out = {n: g * wa for n, g in da.items()}
    for n, g in db.items():
        out[n] = out[n] + g * wb if n in out else g * wb
    return out
