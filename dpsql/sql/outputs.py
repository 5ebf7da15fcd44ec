"""A result's error columns, and the rule that they never take a column's name.

A result has, after each of its visible aggregates and each computed select item that
reads an aggregate (:func:`error_outputs`), three error columns: its standard error and
the two ends of its confidence interval. With one such output they are ``std_error``,
``ci_low`` and ``ci_high``; with several, ``<output>_std_error``, ``<output>_ci_low``
and ``<output>_ci_high`` (:func:`error_names`).

A statement whose own column (an output, or a group key or aggregate read only by
HAVING or ORDER BY) has, ignoring case, the name of an error column its result would
add is refused at compile time, before anything is spent (:func:`clash`): one of
the two would overwrite the other (``SELECT COUNT(*) AS std_error FROM t`` would
otherwise answer with the standard error). Rename the column: error columns keep
their names, so every result reads the same way.

>>> from dpsql.schema import load_schema
>>> from dpsql.sql.analyze import plan_statement
>>> s = load_schema({"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 2}}})
>>> plan = plan_statement("SELECT a, COUNT(*) AS n, SUM(a) AS s FROM t GROUP BY a", s)
>>> error_outputs(plan), error_names(plan, "n")
(['n', 's'], ('n_std_error', 'n_ci_low', 'n_ci_high'))
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.sql.plan import QueryPlan

__all__ = ["error_outputs", "error_names", "clash"]


def error_outputs(plan: QueryPlan) -> list[str]:
    """The output columns that get a standard error: visible aggregates, and computed select
    items that read an aggregate, or a SUM or AVG window over them (``SUM(COUNT(*)) OVER ()``)."""
    aggregates = {a.name for a in plan.aggregates}
    aggregates |= {name for name, w in plan.windows if isinstance(w.this, (exp.Sum, exp.Avg))
                   and any(c.name in aggregates for c in w.this.find_all(exp.Column))}
    computed = {name for name, e in plan.computed if any(c.name in aggregates for c in e.find_all(exp.Column))}
    return [a.name for a in plan.aggregates if a.visible] + [n for n in plan.outputs if n in computed]


def error_names(plan: QueryPlan, output: str) -> tuple[str, str, str]:
    """The standard error, low and high end columns of ``output``, one of :func:`error_outputs`."""
    if error_outputs(plan) == [output]:
        return "std_error", "ci_low", "ci_high"
    return f"{output}_std_error", f"{output}_ci_low", f"{output}_ci_high"


def clash(plan: QueryPlan) -> tuple[str, str, str] | None:
    """``(column, error column, its output)`` for the first of the statement's columns (its
    outputs in SELECT order, then its hidden keys and aggregates) that has, ignoring case, the
    name of an error column of its result; None when none has."""
    added = {e.lower(): (e, out) for out in error_outputs(plan) for e in error_names(plan, out)}
    hidden = [k.name for k in plan.keys if not k.visible] + [a.name for a in plan.aggregates if not a.visible]
    for column in (*plan.outputs, *hidden):
        if column.lower() in added:
            return (column, *added[column.lower()])
    return None
