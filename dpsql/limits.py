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
:data:`MAX_SQL_DEPTH`         nesting of one statement, counted on its tokens (parse time)
:data:`MAX_QUERIES`           answers of one batch: GROUP BY cells over all statements (memory:
                              :data:`BYTES_PER_ANSWER` each, at most :data:`MAX_ANSWER_BYTES`)
:data:`MAX_MEASURED_CELLS`    cells of one marginal the measurement counts, or its answers (memory;
                              a workload's own marginals: :meth:`~dpsql.hdmm.workload.Workload.check_size`)
:data:`MAX_SYNTHETIC_CELLS`   rows times columns of one synthetic table (``db.synthesize``)
:data:`MAX_PUBLIC_ROWS`       rows of a table the owner marks public (``connect(public_tables=...)``)
:data:`MAX_CANDIDATE_BYTES`   memory of one strategy operator, estimated from the workload's
                              shape (:mod:`dpsql.hdmm.optimize.footprint`); those above are skipped
:data:`MAX_EVAL_SECONDS`      DuckDB's time for one expression on the declared domain (compile
                              time) and for one statement's post-processing of its answers
:data:`MAX_EVAL_MEMORY_MIB`   the memory DuckDB may hold for those (its ``memory_limit``)
============================  ==========================================================

The last two bound the sandbox DuckDB (:mod:`dpsql.sql.sandbox`), which runs one thread per
query. DuckDB does not count every allocation against ``memory_limit`` (a string or list it
builds in one value is not counted), so the sandbox also evaluates only functions whose result
is no larger than their inputs (:func:`dpsql.sql.sandbox.check_bounded`): ``repeat``, ``range``,
``lpad`` and the like, which build a value from a number, are refused when compiling.

Two limits sit with what they bound. A schema's ``integer`` column holds at most 1,000,000
values (:data:`dpsql.schema.MAX_COLUMN_DOMAIN`), and the columns one condition couples at most
:data:`dpsql.sql.grid.MAX_ATTRIBUTE_SIZE` cells: a predicate on one column (``a % 7 = 0``) costs
time in proportion to that domain, about 2 s for a million values, and beyond it the statement
is refused when it is compiled. Strategy selection then runs on the values the workload tells
apart (:mod:`dpsql.hdmm.reduction`), and the measurement keys each value by its group with a
lookup whose text is one byte per value and digit (:mod:`dpsql.private.measure`).

>>> check_queries(10**12, "this statement has 1,000,000,000,000 groups and needs")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
dpsql.errors.ResourceLimitError: this statement has 1,000,000,000,000 groups and needs 1,000,000,000,000 answers (about 400,000.0 GB of memory), more than the limit of 20,000,000; ...db.synthesize(...)...
"""

from __future__ import annotations

from dpsql.errors import ResourceLimitError, SQLError

__all__ = ["MAX_SQL_CHARS", "MAX_STATEMENTS", "MAX_SQL_DEPTH", "MAX_QUERIES", "BYTES_PER_ANSWER", "MAX_ANSWER_BYTES", "MAX_MEASURED_CELLS",
           "MAX_SYNTHETIC_CELLS", "MAX_PUBLIC_ROWS", "MAX_CANDIDATE_BYTES", "MAX_SUM_MAGNITUDE", "MAX_EVAL_SECONDS",
           "MAX_EVAL_MEMORY_MIB", "NestingLimitError", "EvaluationLimitError", "check_queries", "check_measured_cells",
           "check_synthetic_cells", "nesting_error", "evaluation_error", "refuse", "synthetic_rows_cap"]

#: Characters of SQL in one request (the SF1 batch of 49 statements has about 10,000;
#: compiling takes about 10 s per million).
MAX_SQL_CHARS = 1_000_000
#: Statements in one batch. Compiling takes about 1 ms per statement and selecting a
#: strategy several seconds per thousand, so 10,000 is minutes of work.
MAX_STATEMENTS = 10_000
#: Nesting depth of one statement: at any point of its text, the number of open parentheses,
#: brackets and CASE ... END, plus the operators still waiting for their operand there (NOT, a
#: comparison, IS, IN, BETWEEN, unary minus, ``::``). Long AND / OR / + / - / * chains do not nest.
#: sqlglot parses by recursive descent, about 25 Python frames per level at worst, so 25 levels
#: take about 700 of Python's default 1,000 frames and leave some 250 to the caller. Checked on
#: the tokens before parsing (dpsql.sql.parse), so a deeper statement is refused in microseconds.
MAX_SQL_DEPTH = 25
#: Bytes of memory one answer holds at a request's peak: its group's labels, its row of the workload,
#: its noisy value, standard error and interval, and its row of the result. Measured: the 2,295,000
#: answers of a tract-level batch (85,000 tracts x (sex x 6 age groups, total, 7 races x Hispanic))
#: raised the peak resident memory by 552 MiB, 252 bytes each; counted here with headroom.
BYTES_PER_ANSWER = 400
#: Memory the answers of one batch may take, estimated (``answers x BYTES_PER_ANSWER``) when it is
#: compiled, before any group is listed.
MAX_ANSWER_BYTES = 8 * 10**9
#: Answers (result rows times aggregates) of one batch; each is a row of the workload.
#: ``MAX_ANSWER_BYTES / BYTES_PER_ANSWER``: a tract-level release (85,000 tracts x 126 race x
#: Hispanic cells and the tables beside them, about 11 million answers) fits.
MAX_QUERIES = MAX_ANSWER_BYTES // BYTES_PER_ANSWER
#: Cells of the largest marginal one measurement counts, or its answers if more: float64 vectors of
#: 400 MB, of which the measurement holds a few at once (the counts, the noisy answers, the noise in
#: chunks). A census release at 85,000 tracts, each table measured with the geography on its own
#: (:mod:`dpsql.hdmm.optimize.hierplus`), gives 24 million answers.
MAX_MEASURED_CELLS = 50_000_000
#: Largest magnitude a SUM's (or AVG's, a variance's) bounds may reach: 2^53, below which float64
#: holds every integer. Beyond, one row's value is a noise scale no answer survives, and squares
#: and Gram matrices overflow (1e155 did, in the strategy's SVD).
MAX_SUM_MAGNITUDE = 2.0**53
#: Bytes one strategy operator may need at its peak, as :func:`dpsql.hdmm.optimize.footprint.estimate_bytes`
#: estimates them from the workload's shape before it runs; an operator above is skipped, and the
#: others answer (the identity and the marginal operators need no Gram). 2 GiB lets OPT_0 search an
#: attribute of up to 5,181 values; one of 7,071 (the largest dense Gram) would need about 3.6 GB.
MAX_CANDIDATE_BYTES = 2 * 2**30
#: Rows of a table the owner marks public when connecting: a lookup join inlines one CASE
#: branch per row whose key is in the private column's domain.
MAX_PUBLIC_ROWS = 100_000
#: Seconds DuckDB may take to evaluate one expression on the declared domain while compiling
#: (:mod:`dpsql.sql.domain_eval`), or one statement's HAVING, ORDER BY and computed select items
#: on its answers (:mod:`dpsql.sql.postprocess`; the compile-time check runs them twice, on zero
#: answers, within one limit). Measured on a loaded 2-core machine: a string predicate on the
#: largest domain allowed (5 million cells) compiled in 7 s in all; ``levenshtein`` of a domain
#: value and 1,000 characters on 16 x 42 cells took 9 s, of 2,000 characters was refused.
#: Interrupted at the limit, the request is refused (benchmarks/limits_red-b.py).
MAX_EVAL_SECONDS = 10.0
#: DuckDB's ``memory_limit`` for that evaluation, in MiB: the sorts, hashes and results it keeps
#: (a sorted domain of 5 million cells is about 200 MB). DuckDB cannot spill to disk there.
MAX_EVAL_MEMORY_MIB = 1024

_SYNTHETIC = ("answer fewer or coarser groups (a CASE bucketing, a WHERE), split the batch, or "
              "build a synthetic table once with db.synthesize(...) (dpsql synth) and query it freely")


class NestingLimitError(ResourceLimitError, SQLError):
    """A statement nested deeper than :data:`MAX_SQL_DEPTH`: a resource limit, and like every
    :class:`~dpsql.errors.SQLError` it names the construct (``"nesting"``) and carries the line
    and column where the limit is passed."""


def nesting_error(line: "int | None", column: "int | None", reason: str = "") -> NestingLimitError:
    """The error for a statement nested more than :data:`MAX_SQL_DEPTH` levels deep (``reason``
    adds why, e.g. that the syntax tree was too deep for Python's stack).

    >>> err = nesting_error(1, 30)
    >>> isinstance(err, ResourceLimitError) and isinstance(err, SQLError), err.construct, (err.line, err.column)
    (True, 'nesting', (1, 30))
    """
    return NestingLimitError(f"this statement nests more than {MAX_SQL_DEPTH} levels deep (parentheses, CASE, NOT, "
                             f"comparisons, unary minus and casts each open a level){reason}; split it or "
                             "flatten it (a long AND / OR / + chain does not nest)", "nesting", line, column)


class EvaluationLimitError(ResourceLimitError, SQLError):
    """DuckDB passed :data:`MAX_EVAL_SECONDS` or :data:`MAX_EVAL_MEMORY_MIB` evaluating an
    expression on public values: a resource limit, refused before anything is spent when it
    happens at compile time; ``construct`` names what was being evaluated."""


def evaluation_error(what: str, reason: str, construct: str = "evaluation", line: "int | None" = None,
                     column: "int | None" = None) -> EvaluationLimitError:
    """The error for DuckDB stopped at a limit (``reason``: ``"time"`` or ``"memory"``) while
    evaluating ``what``.

    >>> str(evaluation_error("'levenshtein(a, b) > 0' on the declared domain", "time"))  # doctest: +ELLIPSIS
    "evaluating 'levenshtein(a, b) > 0' on the declared domain took more than the limit of 10 seconds; ..."
    """
    limit = (f"took more than the limit of {MAX_EVAL_SECONDS:g} seconds" if reason == "time"
             else f"needed more than the limit of {MAX_EVAL_MEMORY_MIB:,} MiB of memory")
    return EvaluationLimitError(f"evaluating {what} {limit}; use simpler expressions (shorter strings, fewer "
                                "columns in one expression)", construct, line, column)


def refuse(what: str, size: int, unit: str, limit: int) -> ResourceLimitError:
    """The error for ``what`` (e.g. "this batch has") ``size`` ``unit`` when at most ``limit`` are allowed."""
    return ResourceLimitError(f"{what} {size:,} {unit}, more than the limit of {limit:,}; {_SYNTHETIC}")


def check_queries(count: int, what: str) -> None:
    """Refuse a batch whose answers would number more than :data:`MAX_QUERIES`."""
    if count > MAX_QUERIES:
        raise refuse(what, count, f"answers (about {count * BYTES_PER_ANSWER / 1e9:,.1f} GB of memory)", MAX_QUERIES)


def check_measured_cells(cells: int, what: str) -> None:
    """Refuse a measurement whose largest marginal has more than :data:`MAX_MEASURED_CELLS` cells."""
    if cells > MAX_MEASURED_CELLS:
        raise refuse(what, cells, "cells to count", MAX_MEASURED_CELLS)


# -- synthetic tables ---------------------------------------------------------------------------

#: Cells (rows times columns) of one synthetic table, or of the records a synthesis method keeps
#: while it runs: 100 million int64 cells are 800 MB, and the decoded table holds one value per cell.
#: Sized for real tables: KDD99's 494,021 rows of 42 columns are 20.7 million cells (``pgm`` peaked
#: 330 MB above the loaded data), and 1 million rows of 100 columns fit.
MAX_SYNTHETIC_CELLS = 100_000_000


def synthetic_rows_cap(columns: int) -> int:
    """The most rows of ``columns`` columns a synthetic table may hold under :data:`MAX_SYNTHETIC_CELLS`.

    >>> synthetic_rows_cap(4)
    25000000
    """
    return MAX_SYNTHETIC_CELLS // max(int(columns), 1)


def check_synthetic_cells(rows: int, columns: int, what: str) -> None:
    """Refuse ``what`` (e.g. "rows=10**12") when ``rows`` records of ``columns`` columns
    exceed :data:`MAX_SYNTHETIC_CELLS` cells; checked before anything is read or spent.

    >>> check_synthetic_cells(10**12, 4, "rows=1000000000000")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    dpsql.errors.ResourceLimitError: rows=1000000000000 means 4,000,000,000,000 synthetic cells ... (at most 25,000,000 rows); ...
    """
    cells = int(rows) * max(int(columns), 1)
    if cells > MAX_SYNTHETIC_CELLS:
        raise ResourceLimitError(f"{what} means {cells:,} synthetic cells ({int(rows):,} rows of {int(columns)} "
                                 f"columns), more than the limit of {MAX_SYNTHETIC_CELLS:,} (at most "
                                 f"{synthetic_rows_cap(columns):,} rows); ask for fewer rows and sample more "
                                 "tables if needed")
