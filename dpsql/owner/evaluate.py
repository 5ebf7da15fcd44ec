"""NON-PRIVATE evaluation of a synthetic table against the private data, for the data owner.

:func:`evaluate` compares every workload marginal cell of a synthetic table
with the exact private answer, as fractions of each table's rows (the error
measure of the MWEM, DualQuery and FEM papers: ``max_i |q_i(D) − q_i(D̂)|``).
Its output is computed from the private data **without noise**: it is for
the data owner and for benchmarks, never for an analyst, and every row it
returns is labelled ``private = False``. Analysts get
:attr:`dpsql.synth.SyntheticTable.report`, which uses released numbers only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from dpsql.private.measure import measure_marginals
from dpsql.schema import Schema, load_schema
from dpsql.sql.compile import schema_attributes
from dpsql.synth.cells import MarginalCells, marginal_name

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["evaluate"]


def evaluate(con: Any, table: str, schema: "Schema | dict | str", synthetic: np.ndarray,
             marginals: Sequence[tuple[int, ...]]) -> "pd.DataFrame":
    """Per marginal (attribute positions of ``schema_attributes(schema)``) and
    overall (``marginal = "all"``): the max and mean absolute error of the
    cell fractions of ``synthetic`` (records of domain indices, e.g.
    :attr:`SyntheticTable.records`) against ``table`` read exactly through
    ``con`` (a DuckDB connection or a backend). NON-PRIVATE.

    >>> import duckdb
    >>> con = duckdb.connect()
    >>> _ = con.execute("CREATE TABLE t AS SELECT range % 2 AS a FROM range(10)")
    >>> s = {"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 1}}}
    >>> evaluate(con, "t", s, np.array([[0], [0], [0], [1]]), [(0,)]).to_dict("records")[0]
    {'marginal': 'a', 'cells': 2, 'max_error': 0.25, 'mean_error': 0.25, 'private': False}
    """
    import pandas as pd

    schema = load_schema(schema)
    attributes = schema_attributes(schema)
    cells = MarginalCells([a.size for a in attributes], marginals)
    truth = measure_marginals(con, table, schema, attributes, cells.subsets)
    fake = cells.fractions(synthetic)
    rows, errors = [], []
    for m, (subset, exact) in enumerate(zip(cells.subsets, truth)):
        err = np.abs(exact / max(exact.sum(), 1.0) - fake[cells.offsets[m]:cells.offsets[m + 1]])
        errors.append(err)
        rows.append({"marginal": marginal_name(attributes, subset), "cells": int(err.size),
                     "max_error": float(err.max()), "mean_error": float(err.mean()), "private": False})
    every = np.concatenate(errors)
    rows.append({"marginal": "all", "cells": int(every.size), "max_error": float(every.max()),
                 "mean_error": float(every.mean()), "private": False})
    return pd.DataFrame(rows)
