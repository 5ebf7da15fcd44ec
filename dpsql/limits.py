"""Resource limits: requests too large to answer are refused before anything is read or spent.

Every limit is checked on public inputs only (the SQL text, the schema, the
workload and the strategy, never the data), so a refusal reveals nothing
and spends nothing. Each :class:`~dpsql.errors.ResourceLimitError` message
estimates the size of what was asked and points to the synthetic-data path
(``db.synthesize``), whose tables answer any number of queries for one spend.

============================  ==========================================================
limit                         what it bounds
============================  ==========================================================
:data:`MAX_SQL_CHARS`         the text of one batch (parse time)
:data:`MAX_STATEMENTS`        statements in one batch (compile and selection time)
:data:`MAX_SQL_DEPTH`         nesting of one statement's syntax tree (recursion)
:data:`MAX_QUERIES`           answers of one batch: GROUP BY cells over all statements
:data:`MAX_MEASURED_CELLS`    cells of one marginal the measurement counts (memory)
============================  ==========================================================

>>> check_queries(10**12, "this statement has 1,000,000,000,000 groups and needs")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
dpsql.errors.ResourceLimitError: this statement has 1,000,000,000,000 groups and needs 1,000,000,000,000 answers, more than the limit of 2,000,000; ...db.synthesize(...)...
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from .errors import ResourceLimitError
from .matrix import Ones

if TYPE_CHECKING:
    from .workload import Workload

__all__ = ["MAX_SQL_CHARS", "MAX_STATEMENTS", "MAX_SQL_DEPTH", "MAX_QUERIES", "MAX_MEASURED_CELLS",
           "check_queries", "check_measured_cells", "check_workload", "refuse"]

#: Characters of SQL in one request (the SF1 batch of 49 statements has about 10,000;
#: compiling takes about 10 s per million).
MAX_SQL_CHARS = 1_000_000
#: Statements in one batch. Compiling takes about 1 ms per statement and selecting a
#: strategy several seconds per thousand, so 10,000 is minutes of work.
MAX_STATEMENTS = 10_000
#: Nesting depth of one statement's syntax tree (parentheses, NOT, CASE, arithmetic).
MAX_SQL_DEPTH = 200
#: Answers (result rows times aggregates) of one batch; each is a row of the workload.
MAX_QUERIES = 2_000_000
#: Cells of one marginal the measurement counts: a float64 vector of 160 MB.
MAX_MEASURED_CELLS = 20_000_000

_SYNTHETIC = ("answer fewer or coarser groups (a CASE bucketing, a WHERE), split the batch, or "
              "build a synthetic table once with db.synthesize(...) (dpsql synth) and query it freely")


def refuse(what: str, size: int, unit: str, limit: int) -> ResourceLimitError:
    """The error for ``what`` (e.g. "this batch has") ``size`` ``unit`` when at most ``limit`` are allowed."""
    return ResourceLimitError(f"{what} {size:,} {unit}, more than the limit of {limit:,}; {_SYNTHETIC}")


def check_queries(count: int, what: str) -> None:
    """Refuse a batch whose answers would number more than :data:`MAX_QUERIES`."""
    if count > MAX_QUERIES:
        raise refuse(what, count, "answers", MAX_QUERIES)


def check_measured_cells(cells: int, what: str) -> None:
    """Refuse a measurement whose largest marginal has more than :data:`MAX_MEASURED_CELLS` cells."""
    if cells > MAX_MEASURED_CELLS:
        raise refuse(what, cells, "cells to count", MAX_MEASURED_CELLS)


def check_workload(workload: "Workload") -> None:
    """Refuse, before a strategy is selected, a workload one of whose terms reads a marginal of more
    than :data:`MAX_MEASURED_CELLS` cells: the product of the domains of the attributes it does not
    sum out. Any strategy that answers the term measures at least that marginal (the kernel checks
    the selected strategy's marginals again before reading data)."""
    cells = max((math.prod(f.shape[1] for f in factors if not isinstance(f, Ones)) for _, factors in workload.terms),
                default=1)
    check_measured_cells(cells, "answering this workload means counting a marginal of")
