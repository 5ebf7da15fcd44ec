"""Post-processing: a statement's HAVING, ORDER BY, LIMIT and OFFSET, run on its noisy answers.

One public function, :func:`postprocess`, and the compile-time check
:func:`check_postprocessing`. Answers are put in one pandas table per
statement (:meth:`~dpsql.sql.compile.CompiledBatch.tables`) and each
statement's clauses run on it in DuckDB (:meth:`~dpsql.sql.plan.QueryPlan.postprocess_sql`).
Everything here is a function of released values only, and the DuckDB it uses
(:mod:`dpsql.sql.sandbox`) holds nothing else and has no file access.

Post-processing runs after the charge, so it must not fail then for want of
time or memory. Its cost cannot depend on the noisy answers:
:func:`check_postprocessing` refuses, while compiling, any function that can
build a value larger than its arguments (``len(range(n * 100000))``,
``repeat``, ``lpad``, ``unnest``: :func:`dpsql.sql.sandbox.check_bounded`),
and then runs every expression on every group of zero answers under the
sandbox's limits (:data:`dpsql.limits.MAX_EVAL_SECONDS`,
:data:`dpsql.limits.MAX_EVAL_MEMORY_MIB`), so a statement that passes costs
about the same when released. What that run cannot measure is a branch taken
only for some answers (``CASE WHEN n > 100 THEN <slow> END``, or select items
of groups HAVING drops on zeros): :func:`postprocess` runs under the same
limits, and past them raises :class:`dpsql.limits.EvaluationLimitError` after
the charge, never takes the machine's memory.

>>> import numpy as np
>>> from dpsql.sql import compile_batch
>>> s = {"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 2}}}
>>> batch = compile_batch("SELECT a, COUNT(*) AS n FROM t GROUP BY a HAVING n > 1 ORDER BY n DESC", s)
>>> postprocess(batch, np.array([1.0, 5.0, 3.0]))[0].to_dict("list")
{'a': [1, 2], 'n': [5.0, 3.0]}
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Sequence

import duckdb
import numpy as np
from sqlglot import exp

from dpsql.errors import UnsupportedSQLError
from dpsql.sql import sandbox

if TYPE_CHECKING:
    import pandas as pd

    from dpsql.sql.compile import CompiledBatch, CompiledStatement

__all__ = ["postprocess", "check_postprocessing", "window_frames"]

_WHAT = "HAVING, ORDER BY and computed select items on the answers"


def postprocess(batch: CompiledBatch, y: np.ndarray,
                extra: Sequence[dict[str, np.ndarray]] | None = None) -> list[pd.DataFrame]:
    """Each statement's result table from workload answers ``y``: its groups, with HAVING,
    ORDER BY, LIMIT and OFFSET applied, in SELECT column order.

    ``extra[i]`` maps column names to per-group values (such as standard errors) added to
    statement ``i``'s table before post-processing and kept, after the SELECT columns, in its
    rows. A failure is an UnsupportedSQLError; :func:`check_postprocessing` has refused, at
    compile time, what DuckDB cannot evaluate, so this is a safety net.
    """
    out = []
    for i, (st, df) in enumerate(zip(batch.statements, batch.tables(y))):
        columns = dict(extra[i]) if extra is not None else {}
        for name, values in columns.items():
            df[name] = values
        if not st.plan.has_postprocessing:
            out.append(df[[*st.plan.outputs, *columns]])
            continue
        try:
            with sandbox.limited(_WHAT, "post-processing", st.plan.line, 1) as con:
                con.register("answers", df)
                # days stay Python dates, as they are in a table without post-processing
                out.append(con.sql(st.plan.postprocess_sql("answers", list(columns))).df(date_as_object=True))
        except duckdb.Error as e:
            raise UnsupportedSQLError(f"HAVING, ORDER BY, LIMIT or a constant select item failed on the answers "
                                      f"({type(e).__name__})",
                                      "post-processing", st.plan.line, 1) from None
    return out


def check_postprocessing(batch: CompiledBatch) -> None:
    """Refuse, at compile time, a statement whose HAVING, ORDER BY, LIMIT, OFFSET or computed
    select items could fail after the release: SQL that DuckDB cannot evaluate on zero answers (a
    literal no DOUBLE holds, a bad comparison), a function whose cost depends on the answers
    (:func:`dpsql.sql.sandbox.check_bounded`), or expressions that pass the sandbox's limits when
    evaluated on every group (HAVING not applied). Nothing has been spent yet."""
    if not any(st.plan.has_postprocessing for st in batch.statements):
        return
    for st, df in zip(batch.statements, batch.tables(np.zeros(batch.num_rows))):
        if not st.plan.has_postprocessing:
            continue
        sql = st.plan.postprocess_sql("answers")
        every_row = dataclasses.replace(st.plan, having=None, qualify=None, limit=None, offset=None).postprocess_sql("answers")
        try:
            sandbox.check_bounded(sql)
            with sandbox.limited(_WHAT, "post-processing", st.plan.line, 1) as con:
                con.register("answers", df)
                con.sql(sql).fetchall()
                con.sql(every_row).fetchall()
        except (duckdb.Error, ValueError) as e:
            reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UnsupportedSQLError(f"HAVING, ORDER BY, LIMIT or a constant select item cannot be evaluated "
                                      f"({reason[:300]})",
                                      "post-processing", st.plan.line, 1) from None


#: The group index column :func:`window_frames` adds to the answers.
_GROUP = "__dpsql_group"


def window_frames(st: CompiledStatement, table: pd.DataFrame) -> dict[str, list[np.ndarray | None]]:
    """Per SUM or AVG window of the statement (by hidden column name), per group: the indices of
    the groups in that group's frame, as DuckDB forms it on ``table`` (the statement's answers,
    :meth:`~dpsql.sql.compile.CompiledStatement.table`) after HAVING; None for a group HAVING
    drops. The same window, with ``list`` of the group index in place of its function, so
    partitions, orderings, peers and frames are DuckDB's own. A window's standard error is a
    sum over its frame (:mod:`dpsql.engine.uncertainty`). Public: a function of released values.
    Empty when DuckDB cannot evaluate it (the standard errors are then NULL)."""
    linear = [(name, w) for name, w in st.plan.windows if isinstance(w.this, (exp.Sum, exp.Avg))]
    if not linear:
        return {}
    df = table.copy()
    df[_GROUP] = np.arange(len(df), dtype=np.int64)
    items = []
    for name, window in linear:
        window = window.copy()
        window.set("this", exp.ArrayAgg(this=exp.column(_GROUP, quoted=True)))
        items.append(exp.alias_(window, name, quoted=True))
    select = exp.select(exp.column(_GROUP, quoted=True), *items).from_(exp.to_identifier("answers", quoted=True))
    if st.plan.having is not None:
        select = select.where(st.plan.having.copy())
    try:
        with sandbox.limited(_WHAT, "post-processing", st.plan.line, 1) as con:
            con.register("answers", df)
            rows = con.sql(select.sql(dialect="duckdb")).fetchall()
    except duckdb.Error:
        return {}
    out: dict[str, list[np.ndarray | None]] = {name: [None] * len(df) for name, _ in linear}
    for row in rows:
        for (name, _), members in zip(linear, row[1:]):
            out[name][row[0]] = np.asarray(members or [], dtype=np.int64)
    return out
