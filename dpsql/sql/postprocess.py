"""Post-processing: a statement's HAVING, ORDER BY, LIMIT and OFFSET, run on its noisy answers.

One public function, :func:`postprocess`, and the compile-time check
:func:`check_postprocessing`. Answers are put in one pandas table per
statement (:meth:`~dpsql.sql.compile.CompiledBatch.tables`) and each
statement's clauses run on it in DuckDB (:meth:`~dpsql.sql.plan.QueryPlan.postprocess_sql`).
Everything here is a function of released values only, and the DuckDB it uses
(:mod:`dpsql.sql.sandbox`) holds nothing else and has no file access.

>>> import numpy as np
>>> from dpsql.sql import compile_batch
>>> s = {"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 2}}}
>>> batch = compile_batch("SELECT a, COUNT(*) AS n FROM t GROUP BY a HAVING n > 1 ORDER BY n DESC", s)
>>> postprocess(batch, np.array([1.0, 5.0, 3.0]))[0].to_dict("list")
{'a': [1, 2], 'n': [5.0, 3.0]}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import duckdb
import numpy as np

from dpsql.errors import UnsupportedSQLError
from dpsql.sql import sandbox

if TYPE_CHECKING:
    import pandas as pd

    from dpsql.sql.compile import CompiledBatch

__all__ = ["postprocess", "check_postprocessing"]

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
    con = None  # opened only if some statement needs post-processing
    try:
        for i, (st, df) in enumerate(zip(batch.statements, batch.tables(y))):
            columns = dict(extra[i]) if extra is not None else {}
            for name, values in columns.items():
                df[name] = values
            if not st.plan.has_postprocessing:
                out.append(df[[*st.plan.outputs, *columns]])
                continue
            con = con or sandbox.cursor()
            con.register("answers", df)
            try:
                out.append(con.sql(st.plan.postprocess_sql("answers", list(columns))).df())
            except duckdb.Error as e:
                raise UnsupportedSQLError(f"HAVING, ORDER BY, LIMIT or a constant select item failed on the answers "
                                          f"({type(e).__name__})",
                                          "post-processing", st.plan.line, 1) from None
            con.unregister("answers")
    finally:
        if con is not None:
            con.close()
    return out


def check_postprocessing(batch: CompiledBatch) -> None:
    """Run every statement's HAVING, ORDER BY, LIMIT and OFFSET once on zero answers, at
    compile time, so SQL that DuckDB cannot evaluate (a literal no DOUBLE holds, a bad
    comparison) is refused before anything is spent rather than after the release."""
    if not any(st.plan.has_postprocessing for st in batch.statements):
        return
    con = sandbox.cursor()
    try:
        for st, df in zip(batch.statements, batch.tables(np.zeros(batch.num_rows))):
            if not st.plan.has_postprocessing:
                continue
            con.register("answers", df)
            try:
                con.sql(st.plan.postprocess_sql("answers")).fetchall()
            except duckdb.Error as e:
                reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise UnsupportedSQLError(f"HAVING, ORDER BY, LIMIT or a constant select item cannot be evaluated "
                                          f"({reason[:300]})",
                                          "post-processing", st.plan.line, 1) from None
            finally:
                con.unregister("answers")
    finally:
        con.close()
