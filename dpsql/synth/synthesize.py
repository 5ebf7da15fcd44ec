"""Private synthetic tables: learn a distribution privately, sample rows, query them with SQL.

:func:`synthesize` runs a synthesis method through the private kernel,
samples a table from what it learned and registers it in DuckDB under a
name. Once made, the synthetic table is ordinary data: any SQL over it costs
no further privacy budget (post-processing).

The quality report is computed only from released numbers: for each marginal
the method measured, the synthetic table's counts against the noisy
measurement (whose noise standard deviation is given next to it). It says how
faithfully the table reproduces what was measured, not its error against the
private data, which only the data owner may compute.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import heapq
import itertools
import math
import numbers
import os
import sys
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np
from tqdm.auto import tqdm

from dpsql import limits
from dpsql.errors import ArgumentError, Error, PrivacyError, ResourceLimitError, WorkloadError, did_you_mean
from dpsql.hdmm.matrix import is_total
from dpsql.limits import MAX_MEASURED_CELLS, check_synthetic_cells, synthetic_rows_cap
from dpsql.privacy import Gaussian, Laplace, NoiseModel
from dpsql.private.budget import MIN_EPSILON, ZCDP, Budget, Cost
from dpsql.private.kernel import PrivateTable, Reservation
from dpsql.private.measure import MAX_GROUPING_SETS
from dpsql.released import SYNTH_SCHEMA
from dpsql.schema import Attribute, Binned
from dpsql.sql.compile import compile_batch
from dpsql.sql.parse import lone_surrogate
from dpsql.synth.accounting import (
    dualquery_epsilon,
    dualquery_eta,
    dualquery_eta_zcdp,
    dualquery_rho,
    exponential_rho,
    fem_rounds,
    fem_rounds_zcdp,
    gaussian_rho,
    largest_integer,
    zcdp_epsilon,
    zcdp_rho,
)
from dpsql.synth.aim import (
    AIM_ITERATIONS,
    ALPHA,
    TREE_NOISE,
    aim,
    first_measurement,
    first_share,
    round_iterations,
    round_noise,
    too_noisy,
)
from dpsql.synth.aim import candidates as aim_candidates
from dpsql.synth.cells import MarginalCells, marginal_name
from dpsql.synth.coarsen import WIDE_SHARE, binned, coarsen, wide
from dpsql.synth.compress import FEW_ROWS, THRESHOLD, compress, compressible
from dpsql.synth.dualquery import DEFAULT_ETA, DEFAULT_SAMPLES, MAX_ETA, dualquery
from dpsql.synth.estimate import Observation, estimate_total, pool, total_std
from dpsql.synth.factored import MAX_GROUP_CELLS
from dpsql.synth.fem import PUBLISHED_EPS0_FACTOR, PUBLISHED_NOISE, fem
from dpsql.synth.game import GameResult
from dpsql.synth.junction import junction_tree
from dpsql.synth.mst import candidate_pairs as mst_candidates
from dpsql.synth.mst import mst, picks
from dpsql.synth.mwem import INITS, check_mwem, marginal_strategy, mwem, mwem_steps
from dpsql.synth.options import choice, flag, integer, option, real
from dpsql.synth.oracle import ORACLES
from dpsql.synth.pgm import (
    PGM_ITERATIONS,
    PGMResult,
    Rounds,
    fit_cells,
    full_share,
    marginal_weights,
    measurement,
    model_limit,
    one_way_counts,
    one_way_weights,
    pgm,
    pgm_compressed,
    planned_model,
    unit_weights,
)
from dpsql.synth.work import (
    CELL,
    FEM_QUERY,
    FEM_ROUND,
    LOCAL_SEARCH,
    MIN_FIT_STEPS,
    QUERY,
    READ,
    REFINE_ROW,
    SOLVE,
    STEP,
    Work,
    fem_seconds,
    fit_seconds,
    fitting,
    max_seconds,
    refine_seconds,
    structure_seconds,
)

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from dpsql.released import ReleasedData
    from dpsql.schema import Schema

METHODS = ("mwem", "dualquery", "fem", "pgm", "aim", "mst")
#: With no workload given, every marginal of this many attributes is the target (AIM's default).
DEFAULT_WAY = 3


@dataclass(frozen=True, eq=False)
class SyntheticTable:
    """A synthetic table registered on the analyst's DuckDB (:mod:`dpsql.released`), and how
    it was made. ``oracle`` counts the learned records (DualQuery, FEM) by what produced each
    one, a label of :data:`dpsql.synth.oracle.RESULT_METHODS`."""

    name: str
    df: "pd.DataFrame"
    method: str
    epsilon: float
    delta: float
    rho: float
    report: "pd.DataFrame"
    records: np.ndarray
    oracle: dict[str, int]
    _released: "ReleasedData"
    private_table: str = ""

    @property
    def relation(self) -> "duckdb.DuckDBPyRelation":
        """The table as a relation on the analyst's DuckDB (released data only)."""
        return self._released.table(self.name)

    def sql(self, query: str) -> "duckdb.DuckDBPyRelation":
        """``query``, SQL written for the private table, run unchanged (and free) on this synthetic
        table: the private table's name, unqualified, is this table there (DuckDB's SQL on
        released data only). The latest synthetic table of a private table ``t`` is also
        ``synth.t`` on :attr:`dpsql.Connection.released` (:data:`~dpsql.released.SYNTH_SCHEMA`)."""
        return self._released.under(self.private_table, self.name).sql(query)

    def __repr__(self) -> str:
        spend = f"rho={self.rho:g}" if self.rho else f"epsilon={self.epsilon:g}, delta={self.delta:g}"
        made = f"; records by {', '.join(f'{k} {v:,}' for k, v in self.oracle.items())}" if self.oracle else ""
        notes = "".join(f"-- warning: {w}\n" for w in self.report.attrs.get("warnings", []))
        return (f"-- synthetic table {self.name!r}: {len(self.df):,} rows by {self.method} ({spend}{made})\n{notes}"
                f"{self.report.to_string(index=False, float_format=lambda v: f'{v:,.2f}')}")


def column_groups(text: str) -> list[tuple[str, ...]]:
    """Marginals spelt as the command line's ``--workload`` spells them: groups of column names
    separated by ``;``, names within a group by ``,``. Spaces and double quotes around a name
    are dropped, and so are empty names and groups.

    >>> column_groups('age, sex; "race";')
    [('age', 'sex'), ('race',)]
    """
    groups = (tuple(c.strip().strip('"') for c in g.split(",") if c.strip().strip('"')) for g in text.split(";"))
    return [g for g in groups if g]


def workload_marginals(workload: "int | Sequence[Sequence[str]] | str | Sequence[str]", schema: "Schema",
                       attributes: Sequence[Attribute]) -> list[tuple[int, ...]]:
    """Marginals (sorted attribute positions) from a workload description.

    An int ``k``: every k-way marginal. A list of tuples of column names
    (or merged attribute names; a single name may stand for a one-column
    tuple, and a list of names alone is their one-way marginals): those
    marginals (a merged column brings its whole attribute). SQL (a text or a
    list of texts): the attributes each compiled query term does not sum out.
    Anything else, an empty marginal or no marginal at all is a
    :class:`~dpsql.errors.WorkloadError`; nothing is read.
    """
    if isinstance(workload, bool) or not isinstance(workload, (numbers.Integral, str, list, tuple)):
        raise WorkloadError("a workload is k (every k-way marginal), a list of tuples of column names, or SQL; "
                            f"got {type(workload).__name__} {workload!r:.80}")
    if isinstance(workload, numbers.Integral):
        k = int(workload)
        if not 1 <= k <= len(attributes):
            have = f"{len(attributes)} attribute" + ("s" if len(attributes) != 1 else "")
            raise WorkloadError(f"workload={k} asks for every {k}-way marginal, but the table has {have}: give k from "
                                f"1 to {len(attributes)}")
        if math.comb(len(attributes), k) > MAX_MEASURED_CELLS:
            raise ResourceLimitError(f"workload={k} has {math.comb(len(attributes), k):,} marginals, more than the "
                                     f"limit of {MAX_MEASURED_CELLS:,} cells; choose a list of marginals")
        return list(itertools.combinations(range(len(attributes)), k))
    texts = [workload] if isinstance(workload, str) else list(workload)
    names = {c.lower() for a in attributes for c in a.columns} | {a.name.lower() for a in attributes}
    if texts and all(isinstance(w, str) and w.lower() in names for w in texts):
        workload = [(w,) for w in texts]  # column names, not SQL: one-way marginals
    elif texts and all(isinstance(w, str) for w in texts):
        unknown = [w for w in texts if w.strip().isidentifier() and w.strip().lower() not in names]
        if unknown:  # a bare word is a column name, never a statement
            raise _unknown_column(unknown[0].strip(), "the workload", attributes)
        listed = next(((w, groups) for w, groups in ((w, column_groups(w)) for w in texts if w.lower() not in names)
                       if groups and all(c.lower() in names for g in groups for c in g)), None)
        if listed is not None:  # "age, sex" or "age,sex;race": marginals spelt as the command line's --workload
            text, groups = listed
            marginals = ", ".join(repr(g) for g in groups)
            raise WorkloadError(f"{text!r:.80} names columns, not a statement: give a marginal as a tuple of "
                                f"names, workload=[{marginals:.120}]")
        known = [w for w in texts if w.lower() in names]
        if known:
            raise WorkloadError(f"this workload mixes column names ({known[0]!r}) with SQL: give names alone, "
                                "tuples of names, or SQL statements")
        batch = compile_batch(workload if isinstance(workload, str) else list(workload), schema)
        if any(st.plan.options for st in batch.statements):
            raise WorkloadError("WITH DIFFERENTIAL_PRIVACY OPTIONS in a synthetic table's workload: its spend is "
                                "synthesize's epsilon, delta or rho, and the workload's statements are never answered")
        if tuple(a.columns for a in batch.attributes) != tuple(a.columns for a in attributes):
            raise WorkloadError("these statements couple columns across attributes; synthesize over them "
                                "needs the schema's merge section to declare those columns together")
        out = []
        for _, factors in batch.terms:
            kept = tuple(i for i, f in enumerate(factors) if not is_total(f))
            if kept and kept not in out:
                out.append(kept)
        if not out:
            raise WorkloadError("these statements measure no column (no aggregate reads one; group keys alone, as "
                                "in SELECT DISTINCT, come from the public domain), so they leave no marginal to learn")
        return out
    if not workload:
        raise WorkloadError("the workload needs at least one marginal")
    position = {c: i for i, a in enumerate(attributes) for c in a.columns}
    by_attribute = {a.name.lower(): i for i, a in enumerate(attributes)}
    out = []
    for names in workload:
        names = (names,) if isinstance(names, str) else names
        if not isinstance(names, (list, tuple)) or not names or not all(isinstance(c, str) for c in names):
            raise WorkloadError(f"each marginal of the workload is a nonempty tuple of column names, got {names!r:.80}")
        unknown = next((c for c in names if c.lower() not in by_attribute and schema.column(c) is None), None)
        if unknown is not None:
            raise _unknown_column(unknown, f"marginal {tuple(names)!r:.200}", attributes)
        kept = tuple(sorted({by_attribute[c.lower()] if c.lower() in by_attribute
                             else position[schema.column(c).name] for c in names}))
        if kept not in out:
            out.append(kept)
    return out


def _unknown_column(name: str, where: str, attributes: Sequence[Attribute]) -> WorkloadError:
    """The error for a workload naming ``name`` (in ``where``), which is no column: with the nearest
    column's name and the columns (the first 12)."""
    columns = [c for a in attributes for c in a.columns]
    return WorkloadError(f"unknown column {name!r:.80} in {where}{did_you_mean(name, columns)}; the columns are "
                         f"{', '.join(columns[:12])}{', ...' if len(columns) > 12 else ''}")


def decode(records: np.ndarray, attributes: Sequence[Attribute], schema: "Schema") -> "pd.DataFrame":
    """Domain-index records back to column values (None is NULL), in schema column order: a
    binned column's value is its bin's midpoint, so that it stays a number, which SQL written
    for the private table compares and averages (its bin label is text). Each column has the
    dtype DuckDB's ``.df()`` gives the registered table (:func:`_typed`), not ``object`` (on
    which ``describe()`` counts values instead of averaging them)."""
    import pandas as pd

    data = {}
    for a, attr in enumerate(attributes):
        idx = np.unravel_index(records[:, a], attr.sizes) if len(attr.columns) > 1 else (records[:, a],)
        for col_name, col_idx in zip(attr.columns, idx):
            col = schema.column(col_name)
            values = ([(lo + hi) / 2 for lo, hi, _ in col.intervals()] + ([None] if col.nullable else [])
                      if isinstance(col, Binned) else list(col.labels))
            data[col_name] = _typed(values, col_idx)
    return pd.DataFrame({c.name: data[c.name] for c in schema.columns})


def _typed(values: Sequence[Any], index: np.ndarray) -> "pd.Series":
    """The column of ``values[index]`` in the dtype DuckDB's ``.df()`` gives it: numpy's for
    integers, floats, booleans and its text dtype; with a NULL (None) drawn, pandas' nullable
    ``Int64`` or ``boolean`` for integers or booleans (floats take NaN). With no row drawn, the
    dtype of the domain's values (not ``object``, which is what an empty series infers)."""
    import pandas as pd

    series = pd.Series(np.asarray(values, dtype=object)[index])
    present = [v for v in values if v is not None]
    if present and series.isna().any():
        if all(isinstance(v, (bool, np.bool_)) for v in present):
            return series.astype("boolean")
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in present):
            return series.astype("Int64")
    if present and series.empty:
        return series.astype(pd.Series(present, dtype=object).infer_objects().dtype)
    return series.infer_objects()


def synthesize(private: PrivateTable, released: "ReleasedData", schema: "Schema",
               attributes: Sequence[Attribute], method: str,
               workload: "int | Sequence[Sequence[str]] | str | Sequence[str]", budget: "Budget",
               epsilon: float | None, delta: float | None, rho: float | None, rows: int | None, name: str,
               seed: int | None = None, progress: bool | None = None,
               options: "dict[str, Any] | None" = None) -> SyntheticTable:
    """Learn privately with ``method``, spending ``epsilon`` (and ``delta``) or
    ``rho`` in ``budget``'s currency (:meth:`~dpsql.private.budget.Budget.request`),
    sample ``rows`` rows and register them as table ``name`` on ``released``,
    the analyst's DuckDB. ``name`` must be new there and on the private
    table's connection (it can never replace the private table).

    The whole request is validated before any data is read: the spend and
    the budget, the name, ``rows`` (an int >= 0 within
    :data:`~dpsql.limits.MAX_SYNTHETIC_CELLS`), ``seed`` (an int >= 0 or None),
    the workload and every option of the method (see :data:`OPTIONS`), and
    everything the run will compute from them. A refused request raises a
    :class:`~dpsql.errors.Error` and records nothing; once the first draw is
    taken nothing is refused. The result reports exactly what the ledger
    charged, never more than was asked.
    """
    run = _plan(private, schema, attributes, method, workload, budget, epsilon, delta, rho, rows, name, seed,
                options or {})
    with released.reserve(name) as slot:  # refused if taken; claimed in the catalog until filled
        private.check(run.cost)  # the whole spend fits now; nothing read yet
        bar = tqdm(desc=f"[dpsql] {run.method}", unit="round", file=sys.stderr, leave=False,
                   disable=progress is False, delay=0 if progress else 2.0)
        try:
            records, report, oracle, spent = run.execute(bar, np.random.default_rng(seed))
        finally:
            bar.close()
        df = decode(records, attributes, schema)
        made = slot.fill(df, {c.name: c.sql_type for c in schema.columns})
    table = SyntheticTable(name=made, df=df, method=run.method, epsilon=spent.epsilon, delta=spent.delta,
                           rho=spent.rho, report=report, records=records, oracle=oracle, _released=released,
                           private_table=schema.table.split(".")[-1])
    try:  # synth.<table>: SQL for the private table runs there; after the spend, never an error
        released.alias(SYNTH_SCHEMA, table.private_table, made)
    except Error as e:
        warnings.warn(f"the synthetic table {made!r} is not {SYNTH_SCHEMA}.{table.private_table} ({e}); "
                      "its .sql() runs SQL written for the private table all the same", stacklevel=2)
    if made != name:
        raise NameTakenError(name, table)
    return table


class NameTakenError(WorkloadError):
    """The synthetic table's name was taken on the analyst's DuckDB while the table was made (its
    placeholder dropped and the name reused there). The spend is recorded and the table is not
    lost: it is registered under a fresh name, and ``table`` is the :class:`SyntheticTable`."""

    def __init__(self, name: str, table: SyntheticTable) -> None:
        self.table = table
        super().__init__(f"the name {name!r} was taken on db.released while the synthetic table was made "
                         f"(its placeholder view was dropped): the table, whose spend is recorded, is registered as "
                         f"{table.name!r} instead, and this error's .table is it")


#: The options each method takes (besides the spend, ``rows`` and ``seed``), with their defaults
#: (an option given as None takes its default):
#:
#: * ``mwem``: ``rounds`` (int >= 1, 10), ``replays`` (int >= 1, 100), ``init`` (``"uniform"`` or
#:   ``"noisy"``), ``average`` (bool, False). Pure ε-DP: a ``delta`` > 0 is refused.
#: * ``dualquery``: ``eta`` (float in (0, 1e6]), ``rounds`` (int >= 1), ``samples`` (int >= 1, 35),
#:   ``count_share`` (float in (0, 1), 0.05), ``oracle`` (``"auto"``, ``"mip"`` or ``"heuristic"``;
#:   ``"auto"``), ``time_limit`` (seconds > 0, 10). The spend fixes one of ``eta``, ``rounds`` and
#:   ``samples`` given the other two and the noisy row count: give at most two, and not both ``eta``
#:   and ``rounds``. Without ``rounds`` it is the most that fit (at least 1: a first round costs
#:   nothing); with ``rounds``, ``eta`` is the largest that fits (it always exists).
#: * ``fem``: ``eps0`` (float > 0) or ``rounds`` (int >= 1) or both, ``samples`` (int >= 1, 50),
#:   ``noise`` (float > 0), ``oracle`` (``"heuristic"``, ``"auto"`` or ``"mip"``), ``time_limit``,
#:   ``processes`` (int >= 1, 1), ``bounded_range`` (bool, True), ``count_share`` (float in (0, 1),
#:   0.05: the noisy row count, its default rows, measured only when ``rows`` is not given).
#: * ``pgm``: ``iterations`` (int >= 1, 10,000: the most steps of the model fit, which stops
#:   once it converges), ``max_model_size`` (megabytes of float64 cells the graphical model may
#:   hold, > 0, 10), ``sweeps`` (int >= 0, 30) refining the sampled records toward every measured
#:   marginal, ``measure`` (:data:`PGM_MEASURES`:
#:   ``"workload"``, the workload's marginals, or ``"pairs"``, their two-way marginals only, which
#:   spends the budget on fewer cells), ``compress`` (float > 0, :data:`~dpsql.synth.compress.THRESHOLD`,
#:   or False: merge each attribute's values whose noisy one-way count is below this many noise
#:   standard deviations, :func:`~dpsql.synth.pgm.pgm_compressed`; only with Gaussian noise, and
#:   only attributes of more than two values), ``one_way_share`` (in (0, 1): the share of the
#:   budget those one-way counts take, :data:`ONE_WAY_SHARE` times the attributes' fraction that
#:   has more than two values), ``adaptive`` (bool, True: under Gaussian noise, when the measured
#:   marginals are too large for one model on the compressed domain, AIM's rounds select among
#:   them with the rest of the budget, and on a table too small for them
#:   (:func:`~dpsql.synth.aim.too_noisy`) MST's tree of pairs, :func:`_plan_pgm_two`; False:
#:   measured all at once, and a greedy model fitted). Gaussian noise under a zCDP or an
#:   ``(ε, δ)`` spend (through ``ρ``-zCDP when compressing), Laplace under a pure ``ε`` one.
#: * ``aim``: ``rounds`` (int >= 1, ``16d`` for ``d`` attributes: the shares the budget starts in;
#:   a default that does not fit in ``max_seconds`` is cut to the most that do, down to ``2d``),
#:   ``iterations`` (of the last fit, warm-started, 1,000), and ``max_model_size``, ``sweeps``,
#:   ``compress`` and ``one_way_share`` as for pgm.
#:   zCDP: a ``rho``, or an ``epsilon`` with a ``delta`` > 0 (converted to the ``ρ`` that implies it).
#: * ``mst``: ``iterations``, ``max_model_size``, ``sweeps`` and ``compress`` as for pgm; its
#:   candidates are the pairs within the workload's marginals (:mod:`dpsql.synth.mst`). zCDP, as aim.
#:
#: Every method also takes ``max_seconds`` (seconds > 0, :data:`~dpsql.synth.work.DEFAULT_MAX_SECONDS`,
#: 600): a run whose options imply more work is refused before the spend, and the counts the spend
#: or the data set (derived rounds, the default rows) are capped to it (:mod:`dpsql.synth.work`).
OPTIONS = {
    "mwem": ("rounds", "replays", "init", "average", "max_seconds"),
    "dualquery": ("eta", "rounds", "samples", "count_share", "oracle", "time_limit", "max_seconds"),
    "fem": ("eps0", "rounds", "samples", "count_share", "noise", "oracle", "time_limit", "processes", "bounded_range",
            "max_seconds"),
    "pgm": ("iterations", "max_model_size", "sweeps", "measure", "one_way_share", "compress", "adaptive", "max_seconds"),
    "aim": ("rounds", "iterations", "max_model_size", "sweeps", "one_way_share", "compress", "max_seconds"),
    "mst": ("iterations", "max_model_size", "sweeps", "compress", "max_seconds"),
}

#: What pgm measures: the workload's marginals, or only their two-way marginals.
PGM_MEASURES = ("workload", "pairs")

#: The default share of the budget (pgm's and aim's) for the one-way marginals that decide a
#: compressed domain, when every attribute has more than two values (else in proportion to the
#: attributes that do).
ONE_WAY_SHARE = 0.3
#: The least share of pgm's budget for every one-way marginal, measured always (about AIM's: its
#: ``d`` first rounds of ``16d`` take 0.9/16 of its budget).
MIN_ONE_WAY_SHARE = 0.05
#: A default row count within this many noise standard deviations of 0 is warned about: noise
#: alone makes one that large with probability 0.1% (Gaussian) or 0.7% (Laplace).
NOISY_COUNT = 3.0
#: The default share of the spend (DualQuery's and FEM's ``count_share``) for a noisy row count
#: (:func:`_plan_count`).
COUNT_SHARE = 0.05

#: Most shares AIM's budget may start in (each round spends at least one).
AIM_MAX_ROUNDS = 1_000_000
#: The most candidate marginals AIM scores (every marginal within a workload marginal): each round
#: builds each one's model and estimates its marginal, 1 to 16 ms each on 30 to 80 columns. The
#: 4,525 candidates of 30 columns' triples (20,000 rows, 2 to 5 values) took 384 to 441 s at
#: (ε, δ) = (1, 10⁻⁶), 80% of it in that scoring; the 35,990 of 60 columns' take minutes a round.
#: With no workload on a wider table, mst picks a spanning tree of pairs instead (:func:`_default_target`).
AIM_MAX_CANDIDATES = 5_000
#: Under a pure epsilon with no workload, the most pairs of columns the default measures (one
#: Laplace measurement); past them, mst picks a spanning tree of pairs. On chain tables of 20,000
#: rows at epsilon = 1, mean TV over random triples with every pair against independent columns:
#: 24 columns (276 pairs) 0.073 against 0.200, 30 (435) 0.092 against 0.166, 40 (780) 0.119
#: against 0.118, 60 (1,770) 0.258 against 0.077.
PURE_MAX_PAIRS = 500
#: The fewest rounds per column AIM's default is cut to when 16 a column do not fit in
#: ``max_seconds`` (below it the one-way marginals would take more than half the budget).
AIM_MIN_ROUNDS = 2

#: Most rounds and replays MWEM takes: each round reads the private table once and each replay
#: passes over every measurement so far, so more would run for days.
MWEM_MAX_ROUNDS = MWEM_MAX_REPLAYS = 10_000
#: MWEM's replays of its measurements a round (multiplicative-weights updates; post-processing) when
#: none are given: fewer when these may not fit in ``max_seconds``.
MWEM_REPLAYS = 100

#: Longest ``time_limit`` an oracle call may be given, in seconds (a day).
MAX_TIME_LIMIT = 86_400.0

#: What a run yields: the records, the quality report, the oracle summary and the cost charged.
Outcome = tuple[np.ndarray, "pd.DataFrame", dict, Cost]


@dataclass(frozen=True)
class _Run:
    """A validated synthesis: ``cost`` is the most it may charge, ``execute(bar, rng)`` draws and
    returns its :data:`Outcome` (it is only called once the whole ``cost`` has been checked)."""

    cost: Cost
    execute: Callable[[tqdm, np.random.Generator], Outcome]
    method: str = ""


@dataclass(frozen=True)
class _Request:
    """What every method needs, validated: the budget, the requested ``total``, the workload's
    ``marginals``, ``rows`` (None: the method's default), and the synthetic table's ``columns``."""

    budget: Budget
    total: Cost
    marginals: list[tuple[int, ...]]
    rows: int | None
    columns: int
    seed: int | None
    wide: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)

    @property
    def zcdp(self) -> bool:
        return self.budget.currency == ZCDP

    def reservation(self, gaussian: bool = False) -> tuple[float, Cost]:
        """The ``ρ`` a zCDP mechanism may spend (the request's, or the most implying its ``(ε, δ)``:
        :func:`~dpsql.synth.accounting.gaussian_rho` for a mechanism of ``gaussian`` measurements
        alone, else :func:`~dpsql.synth.accounting.zcdp_rho`) and the cost to reserve for it in
        the ledger's currency."""
        total = self.total
        if self.zcdp:
            return total.rho, Cost(rho=total.rho)
        rho = (gaussian_rho if gaussian else zcdp_rho)(total.epsilon, total.delta)
        return rho, Cost(epsilon=total.epsilon, delta=total.delta)

    def default_rows(self, count: float, what: str, std: float, in_time: int | None = None) -> int:
        """``count`` rows (a noisy count of standard deviation ``std``: released), or the most
        :data:`~dpsql.limits.MAX_SYNTHETIC_CELLS` allows, or ``in_time``, the most the run has time
        to make within ``max_seconds``, with a warning: after the spend a too-large default is
        capped, never refused. A count within :data:`NOISY_COUNT` standard deviations of 0 is warned
        about too: at a tiny spend, a 300-row table's default was 84,000 rows (pgm) or 2.2 million
        (aim), though the count told nothing of the table's size."""
        cap = synthetic_rows_cap(self.columns)
        n = max(int(round(count)), 0)
        if n < NOISY_COUNT * std:
            warnings.warn(f"the {what} is {n:,}, less than {NOISY_COUNT:g} times its noise's standard deviation "
                          f"({std:,.0f}): at this spend the table's size is mostly noise (pass rows= to choose it)",
                          stacklevel=_caller())
        if n > cap:
            warnings.warn(f"the {what} is {n:,} rows, more than a synthetic table of {self.columns} columns may "
                          f"hold ({limits.MAX_SYNTHETIC_CELLS:,} cells); sampling {cap:,} rows (pass rows= to choose)",
                          stacklevel=_caller())
            n = cap
        if in_time is not None and n > in_time:
            warnings.warn(f"the {what} is {n:,} rows, more than the run has time to make within max_seconds; "
                          f"sampling {in_time:,} rows (pass rows= or a larger max_seconds to choose)",
                          stacklevel=_caller())
            n = in_time
        return n


def _plan(private: PrivateTable, schema: "Schema", attributes: Sequence[Attribute],
          method: Any, workload: Any, budget: Budget, epsilon: Any, delta: Any, rho: Any, rows: Any, name: Any,
          seed: Any, options: dict) -> _Run:
    """Validate a whole request (reading no data) and return the run that carries it out."""
    if not isinstance(method, str) or method not in METHODS:
        raise WorkloadError(f"unknown synthesis method {method!r:.80}; choose from {METHODS}")
    unknown = set(options) - set(OPTIONS[method])
    if unknown:
        raise WorkloadError(f"{method} takes no option {', '.join(sorted(map(str, unknown)))}; "
                            f"its options are {', '.join(OPTIONS[method])}")
    total = budget.request(epsilon=epsilon, delta=delta, rho=rho)
    columns = max(len(schema.columns), len(attributes), 1)
    if rows is not None:
        rows = integer("rows", rows, low=0)
        check_synthetic_cells(rows, columns, f"rows={rows}")
    if seed is not None:
        seed = integer("seed", seed, low=0)
    if not isinstance(name, str) or not name:
        raise WorkloadError(f"the synthetic table's name must be a nonempty string, got {name!r:.80}")
    if lone_surrogate(name) is not None:
        raise WorkloadError(f"the synthetic table's name {name!r:.80} holds a lone surrogate: it is not Unicode text")
    if private.has_table(name):
        raise WorkloadError(f"a table or view named {name!r} already exists; choose a new name for the "
                            "synthetic table (it never replaces an existing one)")
    widened = wide(attributes, schema)
    asked = method
    if workload is None:
        method, workload = _default_target(method, attributes, widened, total, options)
    marginals = workload_marginals(workload, schema, attributes)
    # mwem, fem and dualquery measure no one-way marginal: a column no workload marginal names is
    # one bin for them, its values drawn by its own measured one-way counts (pgm and aim measure it)
    alone = [] if method in ("pgm", "aim", "mst") else _unnamed(len(attributes), marginals)
    widened = {**widened, **{a: np.zeros(attributes[a].size, dtype=np.int64) for a in alone}}
    request = _Request(budget, total, marginals, rows, columns, seed, widened)
    planner = {"mwem": _plan_mwem, "dualquery": _plan_dualquery, "fem": _plan_fem_rows, "pgm": _plan_pgm,
               "aim": functools.partial(_plan_aim, tree=asked == "pgm"), "mst": _plan_mst}[method]
    gaussian = request.zcdp or total.delta > 0  # pgm (so), aim and mst measure every one-way marginal themselves
    if request.wide and not (method in ("aim", "mst") or method == "pgm" and gaussian):
        run = _plan_binned(private, attributes, request, planner, dict(options), alone)
    else:
        try:
            run = planner(private, attributes, request, dict(options))
        except ResourceLimitError as e:
            if method == asked:
                raise
            raise ResourceLimitError(f"with no workload, pgm selects among every {DEFAULT_WAY}-way marginal as aim does "
                                     f"(no model within its size limit holds all {len(attributes)} columns; "
                                     f"method='aim' takes aim's options): {e}") from None
    if not run.cost.within(total):  # pragma: no cover - each planner fits its cost within the request
        raise PrivacyError(f"{method} would cost {budget.describe(run.cost)}, more than the "
                           f"{budget.describe(total)} asked for")
    return dataclasses.replace(run, method=method)


def _default_target(method: str, attributes: Sequence[Attribute], widened: dict[int, np.ndarray], total: Cost,
                    options: dict) -> tuple[str, int]:
    """The method and the ``k`` of every ``k``-way marginal that a request with no workload targets
    (from the schema and the request alone). AIM's default: every 3-way marginal, which pgm
    measures when one model within its limit holds every attribute, so exactly (on NLTCS 0.66x
    aim's max error). Otherwise, asked for pgm:

    * under a zCDP or ``(ε, δ)`` spend, aim selects among them; on a table too wide for aim's
      rounds to score every candidate (:data:`AIM_MAX_CANDIDATES`), mst picks a spanning tree of
      pairs (on chain tables of 40 to 80 columns, mean TV 0.14 to 0.27 times independent
      columns', where pgm measuring every pair had 0.29 to 0.98), or, given options of pgm's
      that mst does not take, pgm measures every pair;
    * under a pure ε, whose Laplace noise grows with the marginals' number, pgm measures every pair
      (mean TV over every triple at ε = 1: 0.200 against 0.307 on the salary proxy, 0.644 against
      0.769 on the passenger proxy, 0.073 against 0.314 on 24 columns), and past
      :data:`PURE_MAX_PAIRS` pairs (unless given an option mst does not take) mst picks a spanning
      tree of pairs with Laplace noise (chain tables of 40 to 80 columns: mean TV 0.20 to 0.48
      times independent columns', which measuring each column alone had made them)."""
    way = min(DEFAULT_WAY, len(attributes))
    if method != "pgm" or not set(options) <= set(OPTIONS["aim"]) or \
            math.prod(a.cells for a in binned(attributes, widened)) <= \
            model_limit(_ModelOptions.of(options, PGM_ITERATIONS).max_cells):
        return method, way
    if not (total.rho > 0 or total.delta > 0):
        pairs = math.comb(len(attributes), 2)
        if pairs <= PURE_MAX_PAIRS or not set(options) <= set(OPTIONS["mst"]):
            return method, min(2, way)
        warnings.warn(f"with no workload and a pure epsilon on {len(attributes)} columns, Laplace noise would drown "
                      f"the {pairs:,} pairs of columns measured at once: mst selects a spanning tree of them instead "
                      "(give a workload, or a delta for aim's adaptive selection)", stacklevel=_caller())
        return "mst", 2
    scored = sum(math.comb(len(attributes), k) for k in range(1, way + 1))
    wide = "mst" if set(options) <= set(OPTIONS["mst"]) else method
    if scored <= AIM_MAX_CANDIDATES or not set(options) <= set(OPTIONS[wide]):
        return "aim", way
    warnings.warn(f"with no workload on {len(attributes)} columns, aim would score {scored:,} candidate marginals "
                  f"every round, more than {AIM_MAX_CANDIDATES:,}: " + ("mst selects a spanning tree of pairs of "
                  "columns" if wide == "mst" else "pgm measures every pair of columns") + " instead (give a workload "
                  "to choose)", stacklevel=_caller())
    return wide, 2


# -- option values -------------------------------------------------------------------------------

def _advance(bar: tqdm) -> Callable[[int], None]:
    """A progress callback taking the number of rounds done so far."""
    return lambda done: bar.update(done - bar.n)


@contextlib.contextmanager
def _fit_progress(bar: tqdm, steps: int, taken: list[int]) -> Iterator[Callable[[int, float], None]]:
    """``bar`` showing a model's fit (:func:`~dpsql.synth.estimate.estimate`) converge: it
    counts percent of the way, on a log scale, from the first measured improvement over 100
    steps to the one that stops the fit, not steps toward their cap (``steps``, which the fit
    mostly never reaches; shown beside), and is full when the fit has ended. ``taken`` gets
    the steps done (the fit reads released measurements only, so their count is public)."""
    bar.total, bar.unit = 100, "% converged"
    if not bar.disable:  # a disabled bar has no description
        bar.set_description_str(f"{bar.desc} fit")
    first: list[float] = []

    def advance(step: int, ratio: float) -> None:
        taken[:] = [step]
        if math.isfinite(ratio) and ratio > 0:
            first.append(first[0] if first else max(ratio, 1.0 + 1e-9))
            done = 100 * math.log(first[0] / max(ratio, 1.0)) / math.log(first[0])
            bar.update(max(min(int(done), 99) - bar.n, 0))  # never back
        if not bar.disable and step % 10 == 0:
            bar.set_postfix_str(f"step {step:,} (at most {steps:,})", refresh=False)

    yield advance
    bar.update(bar.total - bar.n)


def _check_cells(method: str, marginals: Sequence[tuple[int, ...]], attributes: Sequence[Attribute]) -> MarginalCells:
    """The game's cells, refused when counting them all at once would exceed
    :data:`~dpsql.limits.MAX_MEASURED_CELLS`."""
    domain = [a.cells for a in attributes]
    cells = sum(math.prod(domain[a] for a in m) for m in marginals)
    if cells > MAX_MEASURED_CELLS:
        widest = max((a for m in marginals for a in m), key=lambda a: domain[a])
        raise ResourceLimitError(f"{method} counts every cell of the workload's marginals at once: {cells:,} cells, "
                                 f"more than the limit of {MAX_MEASURED_CELLS:,}; the widest column, "
                                 f"{attributes[widest].name}, has {domain[widest]:,} values: bin it in the schema, "
                                 "or choose fewer or smaller marginals")
    return MarginalCells(domain, marginals)


def _first_parts(attributes: Sequence[Attribute], wide: dict[int, np.ndarray],
                 part: float) -> list[tuple[str, dict[tuple[int, ...], float], float, list[int]]]:
    """The measurements of :func:`~dpsql.synth.pgm.first_counts` at ``part`` of the budget, for a
    planner to plan before the spend: what each counts, its weights, its part, and its domain."""
    share = full_share(len(attributes), len(wide))
    parts = [("one-way", one_way_weights(range(len(attributes))), part * share, [a.size for a in attributes])]
    if wide:
        parts.append(("wide columns' binned one-way", one_way_weights(wide), part * (1 - share),
                      [a.cells for a in binned(attributes, wide)]))
    return parts


def _refine(error: PrivacyError, what: str) -> PrivacyError:
    """``error`` (a noise floor) said in the terms of the request: ``what`` named its parameters."""
    return PrivacyError(f"{what}: {error}")


# -- wide columns --------------------------------------------------------------------------------

def _unnamed(attributes: int, marginals: Sequence[tuple[int, ...]]) -> list[int]:
    """The positions of the ``attributes`` that no marginal names.

    >>> _unnamed(4, [(0, 2)])
    [1, 3]
    """
    return [a for a in range(attributes) if not any(a in m for m in marginals)]


def _note_alone(report: "pd.DataFrame", attributes: Sequence[Attribute]) -> None:
    """Record on ``report`` the columns of ``attributes`` fitted only through their one-way
    marginals, with a warning; not those of one value, which have no relation to learn."""
    names = [a.name for a in attributes if a.size > 1]
    report.attrs["one_way_only"] = names
    if names:
        report.attrs["warnings"] = [*report.attrs.get("warnings", []),
                                    f"fitted only through their one-way marginals (each keeps its distribution, "
                                    f"not its relation to the other columns): {', '.join(names)}"]


def _plan_binned(private: PrivateTable, attributes: Sequence[Attribute], request: _Request,
                 planner: Callable[[PrivateTable, Sequence[Attribute], _Request, dict], _Run], options: dict,
                 alone: Sequence[int] = ()) -> _Run:
    """A method that measures no one-way marginal (mwem, fem, dualquery; pgm under a pure ``ε``)
    on a request with wide columns (:mod:`dpsql.synth.coarsen`), or with columns no workload
    marginal names (``alone``, each one bin): :data:`~dpsql.synth.coarsen.WIDE_SHARE` of the
    request measures those columns' one-way marginals at full resolution (Laplace noise
    under a pure ``ε`` or an ``(ε, δ)`` spend, Gaussian under a ``ρ`` one), the method runs with
    the rest on the attributes with those columns in bins, and each sampled bin becomes one of
    its values, drawn by those counts (:func:`~dpsql.synth.coarsen.coarsen`): a column ``alone``
    keeps its distribution, not its relation to the others, and the report lists it. The two
    spends compose: they add up (basic composition; zCDP's, Bun & Steinke 2016, Lemma 2.3)."""
    total, budget = request.total, request.budget
    which = sorted(request.wide)
    names = ", ".join(attributes[a].name for a in which)
    what = "wide columns" if not alone else "columns no workload marginal names" if len(alone) == len(which) \
        else "wide columns and those no workload marginal names"
    if request.zcdp:
        noise: NoiseModel = Gaussian(rho=WIDE_SHARE * total.rho)
        cost, rest = Cost.gaussian(budget, rho=WIDE_SHARE * total.rho), Cost(rho=(1 - WIDE_SHARE) * total.rho)
    else:
        noise, cost = Laplace(WIDE_SHARE * total.epsilon), Cost.laplace(WIDE_SHARE * total.epsilon, budget)
        rest = Cost(epsilon=(1 - WIDE_SHARE) * total.epsilon, delta=total.delta)
    full = [a.size for a in attributes]
    try:
        private.plan(measurement(full, one_way_weights(which)), noise)
    except PrivacyError as e:
        raise _refine(e, f"the one-way marginals of the {what} ({names}) get {WIDE_SHARE:g} of "
                         f"{budget.describe(total)}, too little") from None
    inner = planner(private, binned(attributes, request.wide), dataclasses.replace(request, total=rest, wide={}),
                    options)

    def execute(bar: tqdm, rng: np.random.Generator) -> Outcome:
        one_way = one_way_counts(private, attributes, which, noise, cost, f"one-way marginals of {names}")
        records, report, oracle, spent = inner.execute(bar, rng)
        laplace = isinstance(noise, Laplace)
        values = coarsen(compress(full, []), request.wide, one_way, laplace=laplace).expand(records, rng)
        if alone:
            _note_alone(report, [attributes[a] for a in alone])
        return values, report, oracle, cost + spent

    return _Run(cost + inner.cost, execute)


# -- MWEM ----------------------------------------------------------------------------------------

def _plan_mwem(private: PrivateTable, attributes: Sequence[Attribute], request: _Request, options: dict) -> _Run:
    """MWEM's ``2T + 1`` (or ``2T + 2``) equal steps of the request (:mod:`dpsql.synth.mwem`)."""
    total, budget = request.total, request.budget
    if total.delta > 0:
        raise PrivacyError(f"MWEM is pure epsilon-DP and would never use delta={total.delta!r}: leave delta out "
                           "(dualquery and fem use a delta)")
    rounds = integer("rounds", option(options, "rounds", 10), high=MWEM_MAX_ROUNDS)
    replays = integer("replays", option(options, "replays", MWEM_REPLAYS), high=MWEM_MAX_REPLAYS)
    init = choice("init", option(options, "init", "uniform"), INITS)
    average = flag("average", option(options, "average", False))
    limit = max_seconds(options)
    steps = mwem_steps(rounds, init)
    step_eps = math.sqrt(2.0 * total.rho / steps) if request.zcdp else total.epsilon / steps
    try:
        if step_eps < MIN_EPSILON:
            raise PrivacyError(f"epsilon={step_eps!r} is below the floor {MIN_EPSILON!r} of a measurement")
        step_cost = Cost.laplace(step_eps, budget)
        check_mwem(private, attributes, request.marginals, step_eps, rounds, replays, init, average)
    except PrivacyError as e:
        raise _refine(e, f"MWEM with rounds={rounds} splits {budget.describe(total)} into {steps} steps of "
                         f"epsilon={step_eps!r}, too small to measure; spend more or use fewer rounds") from None
    sizes = [math.prod(a.cells for a in (attributes[i] for i in m)) for m in request.marginals]
    touched = sorted((attributes[a].cells for a in set().union(*request.marginals)), reverse=True)
    k = max(len(m) for m in request.marginals)

    def group(r: int) -> int:
        """Cells of a replay in round ``r``: its ``r`` measurements, each on the group of attributes
        they merged, at most the ``r·k`` largest."""
        return min(MAX_GROUP_CELLS, math.prod(touched[:r * k]))

    reads = rounds * (2 * READ + CELL * sum(sizes))
    replay = sum(r * (STEP + CELL * group(r)) for r in range(1, rounds + 1))  # seconds of one replay of each round
    if "replays" not in options and reads + replays * replay > limit and reads + replay <= limit:
        fit = fitting(limit, reads, replay, replays)
        warnings.warn(f"MWEM's default of replays={replays} may not fit in max_seconds={limit:g} (about "
                      f"{reads + replays * replay:,.0f} s if its measurements merge the largest attributes): running "
                      f"replays={fit}, post-processing of the same measurements (give replays= to choose)")
        replays = fit
    updates = replays * rounds * (rounds + 1) // 2
    Work("MWEM", [(f"rounds={rounds}", reads),
                  (f"rounds={rounds} and replays={replays} ({updates:,} updates)", replays * replay)]).check(limit)
    cost = Cost(step_cost.epsilon * steps, 0.0, step_cost.rho * steps)

    def execute(bar: tqdm, rng: np.random.Generator) -> Outcome:
        bar.total = rounds
        learned = mwem(private, attributes, request.marginals, step_eps, step_cost, rounds=rounds,
                       replays=replays, init=init, average=average, progress=_advance(bar))
        n = request.rows if request.rows is not None else request.default_rows(
            learned.distribution.total, "noisy row count", math.sqrt(Laplace(step_eps).variance(private.rows_per_unit)))
        records = learned.distribution.sample(n, rng)
        report = _report([(t, m, None) for t, m in learned.measurements], learned.distribution.total, records,
                         attributes, n)
        return records, report, {}, cost

    return _Run(cost, execute)


# -- DualQuery -----------------------------------------------------------------------------------

def _plan_dualquery(private: PrivateTable, attributes: Sequence[Attribute], request: _Request,
                    options: dict) -> _Run:
    """DualQuery within the request: a noisy row count (``count_share`` of the spend; the
    formulas' public ``n``), then the run, whose cost ties ``eta``, ``rounds``, ``samples`` and
    ``n`` together. At most two of the three may be given, and not ``eta`` with ``rounds``, so
    that the third can always be set to fit once ``n`` is known: ``rounds`` (the most that fit,
    at least 1, whose draws are uniform and cost nothing) or, given ``rounds``, ``eta`` (the
    cost is continuous in ``eta``: the largest that fits, :func:`~dpsql.synth.accounting.dualquery_eta`).
    Nothing can be refused after the count is drawn."""
    given = [k for k in ("eta", "rounds", "samples") if options.get(k) is not None]
    if len(given) == 3 or {"eta", "rounds"} <= set(given):
        raise PrivacyError(f"DualQuery got {', '.join(f'{k}={options[k]!r}' for k in given)}, but its spend "
                           "depends on the noisy row count, so the spend must set one of eta, rounds and samples: "
                           "give rounds (the spend sets eta) or eta (the spend sets rounds), not both")
    eta = None if options.get("eta") is None else real("eta", options["eta"], high=MAX_ETA)
    rounds = None if options.get("rounds") is None else integer("rounds", options["rounds"])
    samples = DEFAULT_SAMPLES if options.get("samples") is None else integer("samples", options["samples"])
    share = real("count_share", option(options, "count_share", COUNT_SHARE), below_one=True)
    oracle = choice("oracle", option(options, "oracle", "auto"), ORACLES)
    time_limit = real("time_limit", option(options, "time_limit", 10.0), high=MAX_TIME_LIMIT)
    time_budget = max_seconds(options)
    if rounds is not None:
        check_synthetic_cells(rounds, request.columns, f"DualQuery makes one record a round: rounds={rounds}")
    if samples > limits.MAX_SYNTHETIC_CELLS:
        raise ResourceLimitError(f"samples={samples} query draws a round is more than the limit of "
                                 f"{limits.MAX_SYNTHETIC_CELLS:,}")
    cells = _check_cells("DualQuery", request.marginals, attributes)
    # a round: the private draws, the multiplicative weights over every cell, and one oracle solve;
    # the local-search oracle's rounds take longer the more rounds came before (measured, QUERY)
    per_round = READ + CELL * (cells.size + samples) + \
        (LOCAL_SEARCH if oracle == "heuristic" else min(time_limit, SOLVE))
    growth = QUERY if oracle == "heuristic" else 0.0

    def seconds(t: int) -> float:
        return READ + t * per_round + growth * t * (t + 1) / 2

    if rounds is not None:
        Work("DualQuery", [(f"rounds={rounds} with samples={samples}", seconds(rounds))]).check(time_budget)
    max_rounds = synthetic_rows_cap(request.columns)  # one record a round
    count_cost, rest, count = _plan_count(private, attributes, request, share, "DualQuery")

    def cost_of(eta: float, rounds: int, n: float) -> Cost:
        if rounds == 1:  # the first round's draws are uniform: 0-DP, whatever eta
            return Cost()
        if request.zcdp:
            return Cost(rho=dualquery_rho(eta, rounds, samples, n))
        return Cost(epsilon=dualquery_epsilon(eta, rounds, samples, n, rest.delta), delta=rest.delta)

    def schedule(n: float) -> tuple[float, int]:
        """(eta, rounds) for the public row count ``n``: always within ``rest``."""
        if rounds is None:
            step = DEFAULT_ETA if eta is None else eta
            limit = rest.rho if request.zcdp else rest.epsilon

            def fits(t: int) -> bool:  # within the records' cells, max_seconds and the spend
                return t <= max_rounds and seconds(t) <= time_budget and (dualquery_rho(step, t, samples, n) if request.zcdp
                                            else dualquery_epsilon(step, t, samples, n, rest.delta)) <= limit
            return step, largest_integer(fits, "DualQuery rounds")  # 1 always fits
        if rounds == 1:
            return DEFAULT_ETA, 1
        if request.zcdp:
            return dualquery_eta_zcdp(rest.rho, rounds, samples, n, upper=MAX_ETA), rounds
        return dualquery_eta(rest.epsilon, rest.delta, rounds, samples, n, upper=MAX_ETA), rounds

    def execute(bar: tqdm, rng: np.random.Generator) -> Outcome:
        counted, std = count()
        n = max(counted, 1.0) / private.rows_per_unit
        step, run_rounds = schedule(n)
        cost = cost_of(step, run_rounds, n)
        if rounds is None and (cost.rho if request.zcdp else cost.epsilon) < (rest.rho if request.zcdp
                                                                              else rest.epsilon) / 2:
            warnings.warn(f"DualQuery runs {run_rounds:,} round{'s' if run_rounds > 1 else ''} at eta={step:g} on "
                          f"a noisy {n:,.0f} rows (one more would exceed the spend, the cells a synthetic table may "
                          f"hold or max_seconds): its rounds spend {request.budget.describe(cost)} of the "
                          f"{request.budget.describe(rest)} asked for them, and the rest is not charged",
                          stacklevel=_caller())
        reservation = private.reserve(cost, f"DualQuery: eta={step!r}, T={run_rounds}, s={samples}, n={n!r}",
                                      "dualquery")
        bar.total = run_rounds
        try:
            learned = dualquery(private, attributes, cells.subsets, eta=step, rounds=run_rounds, samples=samples,
                                n=n, reservation=reservation, oracle=oracle, time_limit=time_limit,
                                seed=request.seed, progress=_advance(bar))
        finally:
            reservation.close()
        records = _resample(learned.records, request.rows if request.rows is not None else
                            request.default_rows(n * private.rows_per_unit, "noisy row count", std), request.rows,
                            rng)
        return records, _game_report(learned, request.marginals, attributes), learned.oracle_summary(), \
            count_cost + cost

    return _Run(count_cost + rest, execute)


def _caller() -> int:
    """The ``stacklevel`` at which a warning points at the user's call: the first frame, counted
    from the one calling :func:`warnings.warn`, outside the dpsql package (however many of its
    planners wrap one another)."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _plan_count(private: PrivateTable, attributes: Sequence[Attribute], request: _Request, share: float,
                method: str) -> tuple[Cost, Cost, Callable[[], tuple[float, float]]]:
    """A noisy row count for ``method`` (DualQuery's public ``n``, FEM's default rows), planned
    within the request: ``share`` of its spend, a Laplace count of ``ε = share·ε`` (``ε``-DP), or
    of ``ε = √(2·share·ρ)`` under zCDP (``ε²/2 = share·ρ``-zCDP, Bun & Steinke 2016, Prop. 1.4).
    Returns the count's cost, the rest of the request (they compose by adding up), and the
    measurement, taken when called (the noisy count of rows and its noise's standard deviation)."""
    total, budget = request.total, request.budget
    epsilon = math.sqrt(2.0 * share * total.rho) if request.zcdp else share * total.epsilon
    strategy = marginal_strategy([a.cells for a in attributes], ())
    try:
        cost = Cost.laplace(epsilon, budget)
        private.plan(strategy, Laplace(epsilon))
    except PrivacyError as e:
        raise _refine(e, f"{method}'s noisy row count gets count_share={share!r} of {budget.describe(total)}, "
                         f"epsilon={epsilon!r}, too little to measure") from None
    rest = Cost(rho=(1.0 - share) * total.rho) if request.zcdp else \
        Cost(epsilon=(1.0 - share) * total.epsilon, delta=total.delta)

    def count() -> tuple[float, float]:
        measured = private.measure(attributes, strategy, Laplace(epsilon), cost, f"{method} noisy row count")
        return float(measured.values[0]), measured.noise_std

    return cost, rest, count


def _resample(records: np.ndarray, n: int, rows: int | None, rng: np.random.Generator) -> np.ndarray:
    """``n`` of the learned ``records``: all of them, in order, when the default count equals theirs."""
    if rows is None and n == len(records):
        return records
    return records[rng.integers(0, len(records), size=n)]


# -- FEM -----------------------------------------------------------------------------------------

def _plan_fem(private: PrivateTable, attributes: Sequence[Attribute], request: _Request, options: dict) -> _Run:
    """FEM within the request: ``eps0`` per selection (default ``0.008·√ε``, the published
    ADULT setting; ``√ε`` is ``(2ρ)^{1/4}`` under zCDP) and the most rounds that fit, or the
    largest ``eps0`` that fits given ``rounds``, or both given (refused when they do not fit).
    ``bounded_range=False`` accounts each selection as ``ε₀²/2``-zCDP, as the paper did,
    instead of the exponential mechanism's ``ε₀²/8``. Derived rounds are capped so that the
    records fit :data:`~dpsql.limits.MAX_SYNTHETIC_CELLS` (spending less, with a warning)."""
    total, budget = request.total, request.budget
    tight = flag("bounded_range", option(options, "bounded_range", True))
    rounds = None if options.get("rounds") is None else integer("rounds", options["rounds"])
    eps0 = None if options.get("eps0") is None else real("eps0", options["eps0"])
    samples = integer("samples", option(options, "samples", 50))
    noise = real("noise", option(options, "noise", PUBLISHED_NOISE))
    oracle = choice("oracle", option(options, "oracle", "heuristic"), ORACLES)
    time_limit = real("time_limit", option(options, "time_limit", 10.0), high=MAX_TIME_LIMIT)
    # one process unless asked: spawned workers rerun a script's top level, spending again
    # where it lacks an ``if __name__ == "__main__":`` guard
    processes = min(integer("processes", option(options, "processes", 1)), os.cpu_count() or 1)
    width = sum(a.cells for a in attributes)
    if samples * width > limits.MAX_SYNTHETIC_CELLS:
        raise ResourceLimitError(f"FEM perturbs samples={samples} records of {width:,} attribute values a round, "
                                 f"{samples * width:,} numbers, more than the limit of {limits.MAX_SYNTHETIC_CELLS:,}")
    limit = max_seconds(options)
    max_rounds = synthetic_rows_cap(request.columns) // samples  # samples records a round
    if rounds is not None:
        check_synthetic_cells(rounds * samples, request.columns,
                              f"FEM makes samples records a round: rounds={rounds} with samples={samples}")
    elif max_rounds < 1:
        check_synthetic_cells(samples, request.columns, f"FEM makes samples records a round: samples={samples}")
    cells = _check_cells("FEM", request.marginals, attributes)
    # a round: the selection over every cell query and its negation, samples perturbed best responses,
    # which the local search finds in time growing with the cells selected before (FEM_QUERY)
    round_seconds = FEM_ROUND + CELL * (2 * cells.size + samples * width) + \
        samples * (STEP if oracle == "heuristic" else min(time_limit, SOLVE) / processes)  # batched local search

    def seconds(t: int) -> float:
        return fem_seconds(t, round_seconds, samples, cells.size, FEM_QUERY if oracle == "heuristic" else 0.0)

    if rounds is not None:
        Work("FEM", [(f"rounds={rounds} with samples={samples}", seconds(rounds))]).check(limit)
    in_time = largest_integer(lambda t: t <= max(max_rounds, 1) and (t == 1 or seconds(t) <= limit), "FEM rounds")
    zcdp = request.zcdp
    rho = total.rho if zcdp else (zcdp_rho(total.epsilon, total.delta) if total.delta else None)
    if rounds is not None and eps0 is None:  # exponential_rho(eps0) = rho / rounds, rounded down
        eps0 = (1.0 - 1e-12) * (math.sqrt((8.0 if tight else 2.0) * rho / rounds) if rho is not None
                                else total.epsilon / rounds)
    if eps0 is None:
        eps0 = PUBLISHED_EPS0_FACTOR * math.sqrt(math.sqrt(2.0 * total.rho) if zcdp else total.epsilon)
    per_round = exponential_rho(eps0, tight)
    if per_round == 0.0 or not math.isfinite(per_round):
        raise PrivacyError(f"eps0={eps0!r} has no finite, nonzero zCDP cost eps0**2/{8 if tight else 2}: "
                           "choose eps0 between 1e-150 and 1e150")
    if rounds is None:
        rounds = fem_rounds_zcdp(rho, eps0, tight) if zcdp else fem_rounds(total.epsilon, total.delta, eps0, tight)
        if rounds > max_rounds:
            warnings.warn(f"FEM at eps0={eps0:g} fits {rounds:,} rounds of {samples} records, more than a synthetic "
                          f"table may hold ({limits.MAX_SYNTHETIC_CELLS:,} cells); running {max_rounds:,} rounds, "
                          "which spends less", stacklevel=_caller())
            rounds = max_rounds
        if rounds > in_time:
            warnings.warn(f"FEM at eps0={eps0:g} fits {rounds:,} rounds of {samples} records, more than it has time "
                          f"for within max_seconds={limit:g} (about {seconds(rounds):,.0f} s); running {in_time:,} "
                          "rounds, which spends less", stacklevel=_caller())
            rounds = in_time
    if not math.isfinite(noise * math.sqrt(rounds)):
        raise ArgumentError(f"noise={noise!r} times the square root of rounds={rounds} is not a finite number")
    if zcdp:
        cost = Cost(rho=rounds * per_round)
    elif total.delta:
        cost = Cost(epsilon=zcdp_epsilon(rounds * per_round, total.delta), delta=total.delta)
    else:
        cost = Cost(epsilon=rounds * eps0)
    if not cost.within(total):
        raise PrivacyError(f"FEM with eps0={eps0:g} and {rounds} rounds costs {budget.describe(cost)}, more than "
                           f"the {budget.describe(total)} asked for; give eps0 or rounds and the spend sets the other")
    notes = fem_warnings(eps0, cells.offsets[-1], [(a.name, a.cells) for a in attributes], request.marginals)
    for note in notes:  # up front: before anything is spent
        warnings.warn(note, stacklevel=_caller())

    def execute(bar: tqdm, rng: np.random.Generator) -> Outcome:
        reservation = private.reserve(cost, f"FEM: eps0={eps0:g}, T={rounds}", "fem")
        bar.total = rounds
        try:
            learned = fem(private, attributes, cells.subsets, eps0=eps0, rounds=rounds, reservation=reservation,
                          samples=samples, noise=noise, oracle=oracle, time_limit=time_limit, processes=processes,
                          seed=request.seed, progress=_advance(bar))
        finally:
            reservation.close()
        records = _resample(learned.records, len(learned.records) if request.rows is None else request.rows,
                            request.rows, rng)
        report = _game_report(learned, request.marginals, attributes)
        report.attrs["warnings"] = notes
        return records, report, learned.oracle_summary(), cost

    return _Run(cost, execute)


def _plan_fem_rows(private: PrivateTable, attributes: Sequence[Attribute], request: _Request,
                   options: dict) -> _Run:
    """FEM (:func:`_plan_fem`) whose default rows are a noisy row count (``count_share`` of the
    spend, 0.05, :func:`_plan_count`) instead of the records it made (``rounds × samples``, 68,000
    for 3,000 rows: ``COUNT(*)`` on the synthetic table was 23 times the private one's); FEM
    runs with the rest, and its records are resampled to that count. With ``rows`` given, no
    count is measured."""
    share = real("count_share", option(options, "count_share", COUNT_SHARE), below_one=True)
    if request.rows is not None:
        return _plan_fem(private, attributes, request, options)
    count_cost, rest, count = _plan_count(private, attributes, request, share, "FEM")
    inner = _plan_fem(private, attributes, dataclasses.replace(request, total=rest), options)

    def execute(bar: tqdm, rng: np.random.Generator) -> Outcome:
        n, std = count()
        records, report, oracle, spent = inner.execute(bar, rng)
        return _resample(records, request.default_rows(n, "noisy row count", std), None, rng), report, oracle, \
            count_cost + spent

    return _Run(count_cost + inner.cost, execute)


#: Columns with more values than this make FEM's oracle slow (it weighs every value of each attribute).
FEM_SLOW_VALUES = 100


def fem_warnings(eps0: float, cells: int, attributes: Sequence[tuple[str, int]],
                 marginals: Sequence[tuple[int, ...]]) -> list[str]:
    """FEM's known weak spots for this request, from public values only (never the table's size).

    Each selection picks among the ``Q = 2 · cells`` workload cell queries and negations with
    probability ``∝ exp(ε₀ · score / 2)``, the score a count: it finds a cell off by a
    fraction ``τ`` of the rows only once ``ε₀ τ n / 2`` exceeds ``ln Q``, so on a table of
    ``n`` rows its error stays above about ``τ(n) = 2 ln Q / (ε₀ n)``. The note gives the
    rows needed for ``τ = 5%`` (ADULT's 48,842 rows sit near it at the published ε₀; on a
    1,300-row table FEM's output was near-uniform, mean TV 0.79). Its oracle weighs every
    value of each attribute per record: a column of more than :data:`FEM_SLOW_VALUES`
    values makes rounds slow (a 501-value column took 28 minutes on a 135k-row table).

    >>> fem_warnings(0.008, 50_000, [("a", 9), ("b", 501)], [(0, 1)])[0][:80]
    'FEM finds a cell off by 5% of the rows only on tables of more than about 57,565 '
    """
    q = 2 * cells
    rows = 2.0 * math.log(q) / (eps0 * 0.05)
    notes = [f"FEM finds a cell off by 5% of the rows only on tables of more than about {rows:,.0f} rows at "
             f"eps0={eps0:g} among {q:,} cell queries (its error is about 2 ln(Q) / (eps0 n) of the rows); "
             "on smaller tables expect a table near uniform: method='pgm' measures the marginals instead"]
    used = sorted({a for m in marginals for a in m})
    wide = [(attributes[a][0], attributes[a][1]) for a in used if attributes[a][1] > FEM_SLOW_VALUES]
    if wide:
        names = ", ".join(f"{name} ({size} values)" for name, size in wide)
        notes.append(f"FEM's oracle weighs every value of each attribute: {names} will make its rounds slow "
                     "(bin them, or use method='pgm')")
    return notes


# -- PGM and AIM ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class _ModelOptions:
    """The graphical model's options, shared by pgm and aim: fit ``iterations``, refinement
    ``sweeps``, the model's size limit, ``megabytes`` of float64 cells, and ``max_seconds``;
    ``fit`` is the estimated seconds of the run before the sampling (:mod:`dpsql.synth.work`)."""

    iterations: int
    sweeps: int
    megabytes: float
    max_seconds: float
    fit: float = 0.0
    cells: int | None = None
    estimate: str = ""
    besides: float = 0.0

    @classmethod
    def of(cls, options: dict, iterations: int) -> "_ModelOptions":
        """The options given, with ``iterations`` the method's default most fit steps."""
        return cls(integer("iterations", option(options, "iterations", iterations)),
                   integer("sweeps", option(options, "sweeps", 30), low=0),
                   real("max_model_size", option(options, "max_model_size", 10.0)), max_seconds(options))

    def check_time(self, method: str, fit: list[tuple[str, float]], marginals: int,
                   rows: int | None) -> "_ModelOptions":
        """Refuse a run whose ``fit`` terms and refinement of ``rows`` records (at least one; the
        default rows are capped after the spend, :meth:`table`) toward ``marginals`` measured
        marginals exceed ``max_seconds``; these options with the fit's estimate."""
        sweeps = (f"sweeps={self.sweeps} of {marginals} marginals" + (f" over rows={rows}" if rows else ""),
                  refine_seconds(self.sweeps, marginals, rows or 1))
        Work(method, [*fit, sweeps]).check(self.max_seconds)
        estimate = "; ".join(f"{what}: about {seconds:,.0f} s" for what, seconds in fit)
        return dataclasses.replace(self, fit=sum(s for _, s in fit), estimate=estimate)

    def fit_plan(self, method: str, domain: Sequence[int], subsets: Sequence[tuple[int, ...]],
                 fixed: float) -> "_ModelOptions":
        """These options with the model and the fit that ``max_seconds`` allows after ``fixed``
        seconds of other work, from public values alone (:func:`~dpsql.synth.pgm.planned_model`):
        the model of ``subsets`` within ``max_model_size``, or, when its fit could not take
        :data:`~dpsql.synth.work.MIN_FIT_STEPS` steps in time, a smaller one (the limit halved
        until they fit: the model is then selected under it, :func:`~dpsql.synth.pgm.model_structure`),
        and at most the steps that fit in half the time left (the rest samples the default rows,
        whose number is a noisy count). The search for a model is priced at each limit tried
        (:func:`~dpsql.synth.pgm.planned_model`): a model of every measured set may fit the
        limit given and not a halved one. Refused, before anything is charged, when not even a
        model of the one-way marginals fits."""
        least = min(MIN_FIT_STEPS, self.iterations)
        limit, other = self.max_cells, fixed
        while True:
            cells, passes, trials = planned_model(domain, subsets, limit)
            fixed = other + structure_seconds(trials, len(domain))
            each = fit_seconds(1, passes)
            if fixed + least * each <= self.max_seconds or cells <= sum(domain):
                break
            limit = max(cells // 2, sum(domain))
        return self._steps(f"{method}'s model of {len(subsets)} marginals, even at its smallest ({cells:,} cells),",
                           cells, limit, each, fixed)

    def forest_plan(self, method: str, cells: int, marginals: int, fixed: float) -> "_ModelOptions":
        """These options with the fit that ``max_seconds`` allows after ``fixed`` seconds of other
        work of a model of at most ``cells`` cells whose cliques hold each of its ``marginals``
        measured sets (a forest of pairs, and the one-way marginals): each step passes over the
        cliques and each set once. Refused, before anything is charged, when it cannot take
        :data:`~dpsql.synth.work.MIN_FIT_STEPS` steps in time."""
        return self._steps(f"{method}'s model of {marginals} marginals ({cells:,} cells at most)", cells,
                           self.max_cells, fit_seconds(1, 2 * cells), fixed)

    def _steps(self, model: str, cells: int, limit: int, each: float, fixed: float) -> "_ModelOptions":
        """These options with a fit of ``each`` seconds a step, after ``fixed`` seconds of other work,
        of a ``model`` of ``cells`` cells within ``limit``: at most the steps that fit in half the
        time left (the rest samples the default rows, whose number is a noisy count), and at least
        :data:`~dpsql.synth.work.MIN_FIT_STEPS`, else refused."""
        least = min(MIN_FIT_STEPS, self.iterations)
        if fixed + least * each > self.max_seconds:
            raise ResourceLimitError(f"{model} takes about {each:.2g} s a fit step: {least} steps and the rest of the "
                                     f"run ({fixed:,.0f} s) exceed max_seconds={self.max_seconds:g}; choose fewer "
                                     "marginals, or raise max_seconds (estimates: dpsql.synth.work)")
        steps = max(least, fitting(self.max_seconds - (self.max_seconds - fixed) / 2, fixed, each, self.iterations))
        estimate = (f"a model of {cells:,} cells (within {limit:,}), about {each:.2g} s a fit step; at most "
                    f"{steps:,} steps ({steps * each:,.0f} s), stopping once converged; about {fixed:,.0f} s besides")
        return dataclasses.replace(self, iterations=steps, cells=limit, fit=fixed + steps * each, estimate=estimate,
                                   besides=fixed)

    @property
    def max_cells(self) -> int:
        return self.cells if self.cells is not None else int(self.megabytes * 2**20 / 8)

    @property
    def limit(self) -> str:
        return f"max_model_size={self.megabytes:g} MB ({self.max_cells:,} float64 cells)"

    def check_one_ways(self, domain: Sequence[int], model: str) -> None:
        """Refuse a limit that cannot hold ``model``, a model of every one-way marginal."""
        if sum(domain) > self.max_cells:
            raise ResourceLimitError(f"{model} holds every one-way marginal, {sum(domain):,} cells, more than "
                                     f"{self.limit} holds")

    def table(self, learned: PGMResult, request: _Request, attributes: Sequence[Attribute],
              rng: np.random.Generator, taken: Sequence[int] = ()) -> tuple[np.ndarray, "pd.DataFrame"]:
        """The records sampled from a fitted model (``request.rows``, or its noisy total, as many as
        the time left allows) and their report. The time left counts the fit's steps ``taken`` (its
        last, when given), not the most planned: a fit that converged early left the default rows
        of 24 binary columns capped at 6,325 of 10,043 by the 200 steps planned (537 s), in a run
        of 26 s. And it prices them on the model fitted (released values), not the plan's bound for
        a greedy one (each set summed from a clique of the whole limit): on every pair of 60
        columns, 0.1 s a step, not 2.4 s, and the default 19,999 rows, not 3,928."""
        total = learned.model.total
        marginals = len({o.subset for o in learned.observations})
        fit = self.fit if learned.work is None else learned.work
        if taken:
            each = fit_seconds(1, fit_cells(learned.model.tree, [o.subset for o in learned.observations]))
            fit = self.besides + min(taken[-1], self.iterations) * each
        in_time = fitting(self.max_seconds, fit + refine_seconds(self.sweeps, marginals, 0),
                          self.sweeps * marginals * REFINE_ROW, 2**62)
        n = request.rows if request.rows is not None else \
            request.default_rows(total, "noisy row count", total_std(learned.observations), in_time)
        records = learned.sample(n, rng, self.sweeps)
        c = learned.compression  # the report compares on the domain the measurements counted
        counted, axes = (records, attributes) if c is None else (c.apply(records), c.attributes(attributes))
        # one row a measured set: its measurements' precision-weighted mean (aim re-measures sets)
        report = _report([(o.subset, o.values, o.cells) for o in pool(learned.observations)], total, counted, axes, n)
        # joined: measured with another column of more than one value (one of a single value, which
        # OPT_M's Laplace weights add to a marginal for free, relates nothing)
        varied = [{a for a in o.subset if attributes[a].size > 1} for o in learned.observations]
        joined = set().union(*(v for v in varied if len(v) > 1))
        report.attrs["estimate"] = self.estimate
        _note_alone(report, [a for i, a in enumerate(attributes) if i not in joined])
        return records, report


def _compression(options: dict, domain: Sequence[int], first: bool) -> tuple[float | None, float | None]:
    """The options ``one_way_share`` (in (0, 1)) and ``compress`` (a threshold in standard deviations,
    or False), with their defaults: when the method measures the one-way marginals ``first`` (aim,
    mst, and pgm under Gaussian noise), compression at :data:`THRESHOLD` with the one-way marginals
    taking :data:`ONE_WAY_SHARE` times the attributes' fraction that has more than two values.
    None for no compression: when it is off, or no attribute is
    :func:`~dpsql.synth.compress.compressible`."""
    share = option(options, "one_way_share", None)
    share = None if share is None else real("one_way_share", share, below_one=True)
    threshold = option(options, "compress", THRESHOLD if first else False)
    threshold = None if threshold is False else real("compress", threshold)
    if threshold is not None and not first:
        raise ArgumentError("pgm compresses under Gaussian noise only, whose one-way marginals it measures first: "
                            "give rho on a zCDP budget, or epsilon with a delta > 0 (mst compresses under either)")
    merged = compressible(domain)
    if threshold is None or not merged:
        return share, None
    return (ONE_WAY_SHARE * len(merged) / len(domain) if share is None else share), threshold


def _plan_pgm(private: PrivateTable, attributes: Sequence[Attribute], request: _Request, options: dict) -> _Run:
    """PGM within the request (:mod:`dpsql.synth.pgm`). Under Gaussian noise (a zCDP or an
    ``(ε, δ)`` spend) two measurements: every attribute's one-way marginal with ``one_way_share``
    of the budget (:func:`_one_way_share`), which also decides the compression, then the
    workload's marginals, weighted by :func:`~dpsql.synth.pgm.marginal_weights`. Under a pure
    ``ε`` one Laplace measurement of the workload's marginals and the one-way marginal of every
    attribute they leave out. Either way a column the workload never names keeps its
    distribution. The model and its fit are sized before anything is spent, from public values
    alone, to ``max_model_size`` and ``max_seconds`` (:meth:`_ModelOptions.fit_plan`); a run
    that cannot fit in time is refused then. A workload marginal larger than the model is
    measured all the same, and the sampled records follow it
    (:meth:`~dpsql.synth.pgm.PGMResult.sample`)."""
    total, budget = request.total, request.budget
    model = _ModelOptions.of(options, PGM_ITERATIONS)
    measure = choice("measure", option(options, "measure", "workload"), PGM_MEASURES)
    adaptive = flag("adaptive", option(options, "adaptive", True))
    gaussian = request.zcdp or total.delta > 0
    if request.zcdp:
        noise: NoiseModel = Gaussian(rho=total.rho)
        cost = Cost.gaussian(budget, rho=total.rho)
    elif gaussian:
        noise, cost = Gaussian(epsilon=total.epsilon, delta=total.delta), \
            Cost.gaussian(budget, epsilon=total.epsilon, delta=total.delta)
    else:
        noise, cost = Laplace(total.epsilon), Cost.laplace(total.epsilon, budget)
    model_attributes = binned(attributes, request.wide)  # (under a pure epsilon, _plan_binned has binned them)
    domain = [a.cells for a in model_attributes]  # the model's: a wide column's bins (dpsql.synth.coarsen)
    measured = request.marginals if measure == "workload" else \
        sorted({p for m in request.marginals for p in itertools.combinations(m, min(len(m), 2))})
    given = option(options, "one_way_share", None)
    share, threshold = _compression(options, domain, gaussian)
    unnamed = _unnamed(len(domain), measured)
    if not gaussian:
        if share is not None:
            raise ArgumentError("one_way_share is the one-way marginals' share of a Gaussian measurement: give rho "
                                "on a zCDP budget, or epsilon with a delta > 0")
        measured = [*measured, *((a,) for a in unnamed)]
    _check_cells("PGM", measured, model_attributes)  # before the weights, whose search takes seconds
    weights = marginal_weights(domain, measured, noise)
    model.check_one_ways(domain, "PGM's smallest model")
    try:
        private.plan(measurement(domain, weights), noise)
    except PrivacyError as e:
        raise _refine(e, f"PGM measures the workload's marginals with {budget.describe(total)}, too little") from None
    subsets = [*weights, *((a,) for a in range(len(domain)))]
    sweeps = len(set(subsets))
    model.check_time("PGM", [], sweeps, request.rows)
    model = model.fit_plan("PGM", domain, subsets, refine_seconds(model.sweeps, sweeps, request.rows or 1))
    if gaussian:
        share = _one_way_share(domain, unnamed, threshold) if given is None else share
        return _plan_pgm_two(private, attributes, request, model, measured, weights, share, threshold,
                             options if adaptive else None)

    def execute(bar: tqdm, rng: np.random.Generator) -> Outcome:
        taken: list[int] = []
        with _fit_progress(bar, model.iterations, taken) as advance:
            learned = pgm(private, attributes, weights, noise, cost, model.max_cells, iterations=model.iterations,
                          progress=advance)
        return (*model.table(learned, request, attributes, rng, taken), {}, cost)

    return _Run(cost, execute)


def _one_way_share(domain: Sequence[int], unnamed: Sequence[int], threshold: float | None) -> float:
    """The default share of PGM's budget for every one-way marginal: :data:`ONE_WAY_SHARE` times
    the attributes' fraction that the one-way counts alone decide (those of more than two values
    when compressing, and those no workload marginal names), and at least :data:`MIN_ONE_WAY_SHARE`.

    >>> _one_way_share([2, 2, 2, 2], [], None), _one_way_share([2, 5, 2, 2], [3], 3.0)
    (0.05, 0.15)
    """
    decided = set(unnamed) | (set(compressible(domain)) if threshold is not None else set())
    return max(MIN_ONE_WAY_SHARE, ONE_WAY_SHARE * len(decided) / len(domain))


def _plan_pgm_two(private: PrivateTable, attributes: Sequence[Attribute], request: _Request,
                  model: _ModelOptions, measured: Sequence[tuple[int, ...]],
                  weights: dict[tuple[int, ...], float], share: float, threshold: float | None,
                  adaptive: dict | None) -> _Run:
    """PGM's two Gaussian measurements (:func:`~dpsql.synth.pgm.pgm_compressed`): the whole ``ρ``
    reserved at once, ``share`` of it for every one-way marginal and the rest for the weighted
    marginals, on a domain compressed at ``threshold`` (None: not compressed) and with the
    request's wide columns in bins (:mod:`dpsql.synth.coarsen`). Both
    measurements' noise is planned before the spend: the second's, scaled to L2 sensitivity 1,
    does not depend on the compression.

    Given the request's options as ``adaptive`` (None: ``adaptive=False``), unless one model holds
    every measured marginal on the uncompressed domain already, AIM's rounds are planned too
    (:func:`_aim_rounds`; when they cannot be, as on a workload of more than
    :data:`AIM_MAX_CANDIDATES` candidates, pgm measures them all). The one-way marginals are then
    measured first with AIM's share (:func:`~dpsql.synth.aim.first_share`, unless
    ``one_way_share`` is given); when their compression leaves the marginals too large for one
    model, they are measured again, within ``share``, as far as their noise is large against the
    noisy row count (:func:`~dpsql.synth.pgm.one_way_top_up`), and the rest of ``ρ`` is spent in
    those rounds, on a domain where only the rare values
    that hold at most :data:`~dpsql.synth.compress.FEW_ROWS` of a column's rows are merged,
    else the rest of ``share`` measures the one-way marginals again
    (:class:`~dpsql.synth.pgm.Rounds`). Whether or not one model holds the marginals, a table whose
    first one-way counts show it too small for those rounds gets MST from them instead
    (:meth:`_AimRounds.instead`, planned with them). The ``ρ`` standing for an ``(ε, δ)`` is then
    the one for any zCDP mechanism (AIM's and MST's selections are not Gaussian), otherwise the
    exact one for Gaussian measurements alone."""
    domain = [a.cells for a in binned(attributes, request.wide)]
    tree = junction_tree(domain, [*measured, *((a,) for a in range(len(attributes)))])
    rounds = None
    if adaptive is not None and tree.size > model_limit(model.max_cells):
        try:
            rounds = _aim_rounds(private, attributes, request, adaptive, share, tree=True)
        except (ResourceLimitError, PrivacyError):
            pass  # measured all at once, as without adaptive
    rho, cost = request.reservation(gaussian=rounds is None)
    full = [a.size for a in attributes]
    first = share  # the one-way marginals' first measurement: AIM's share when its rounds may follow
    if rounds is not None and option(adaptive, "one_way_share", None) is None:
        first = min(share, first_share(rounds.rounds, len(domain)))
    for what, weighted, part, on in (*_first_parts(attributes, request.wide, first),
                                     *_first_parts(attributes, request.wide, share - first),
                                     ("weighted", unit_weights(weights), 1 - share, domain)):
        try:
            if part > 0:
                private.plan(measurement(on, weighted), Gaussian(rho=part * rho))
        except PrivacyError as e:
            raise _refine(e, f"PGM's {what} marginals get {part:g} of rho={rho:g}, too little") from None

    def learn(reservation: Reservation, advance: Callable[[int, float], None],
              bar: tqdm) -> tuple[PGMResult, _ModelOptions]:
        ran = [model]

        def select(raw: list[Observation], bins: list[Observation]) -> PGMResult:
            ran[0] = dataclasses.replace(rounds.model, estimate="the measured marginals are too large for one model "
                                         f"once compressed: AIM's rounds select among them, merging only the rare values "
                                         f"that hold at most {FEW_ROWS:.0%} of a column's rows; "
                                         f"{rounds.model.estimate}")
            rounds.announce()
            return rounds.run(private, attributes, request, rho, reservation, bar, start=(raw, bins))[0]

        def small(raw: list[Observation], bins: list[Observation]) -> PGMResult | None:
            tree = rounds.instead(private, attributes, request, rho, reservation, bar, (raw, bins), advance)
            if tree is None:
                return None
            ran[0] = tree[1]
            return tree[0]

        learned = pgm_compressed(private, attributes, measured, rho, reservation, model.max_cells, share, threshold,
                                 compressible(full), iterations=model.iterations, progress=advance,
                                 binned=request.wide, adaptive=None if rounds is None else Rounds(first, select, small))
        return learned, ran[0]

    return _reserved_fit(private, request, attributes, model, cost, {"rho": rho}, "pgm", f"PGM: rho={rho!r}", learn)


def _reserved_fit(private: PrivateTable, request: _Request, attributes: Sequence[Attribute], model: _ModelOptions,
                  cost: Cost, allowance: dict[str, float], mechanism: str, description: str,
                  learn: Callable[[Reservation, Callable[[int, float], None], tqdm],
                                  tuple[PGMResult, _ModelOptions]]) -> _Run:
    """The run of a graphical-model method (pgm's two measurements, mst) whose whole budget is
    reserved at once (``cost`` in the ledger, ``allowance`` its ``rho`` or pure ``epsilon``:
    :meth:`~dpsql.private.kernel.PrivateTable.reserve`) before ``learn`` draws on the reservation
    and fits the model, its fit shown converging; the table is sampled from the model fitted,
    with the options ``learn`` ran it with (``model``'s, or aim's rounds' for pgm's adaptive path)."""

    def execute(bar: tqdm, rng: np.random.Generator) -> Outcome:
        reservation = private.reserve(cost, description, mechanism, **allowance)
        taken: list[int] = []
        try:
            with _fit_progress(bar, model.iterations, taken) as advance:
                learned, ran = learn(reservation, advance, bar)
        finally:
            reservation.close()
        return (*ran.table(learned, request, attributes, rng, taken), {}, cost)

    return _Run(cost, execute)


def _plan_aim(private: PrivateTable, attributes: Sequence[Attribute], request: _Request, options: dict,
              tree: bool = False) -> _Run:
    """AIM within the request (:mod:`dpsql.synth.aim`): the whole ``ρ`` (or ``(ε, δ)``) is reserved
    at once and spent in adaptive rounds (:func:`_aim_rounds`; ``tree``: pgm's default target,
    which gives a table too small for them MST instead)."""
    rounds = _aim_rounds(private, attributes, request, options, tree=tree)
    rounds.announce()
    rho, cost = request.reservation()

    def execute(bar: tqdm, rng: np.random.Generator) -> Outcome:
        reservation = private.reserve(cost, f"AIM: rho={rho!r}, T={rounds.rounds}", "aim", rho=rho)
        try:
            start, small = None, None
            if rounds.tree is not None:  # measured here, so that a table too small for the rounds gets MST
                start = first_measurement(private, attributes, rho, reservation, rounds.rounds, rounds.share,
                                          request.wide)
                small = rounds.instead(private, attributes, request, rho, reservation, bar, start)
            learned, ran = small or rounds.run(private, attributes, request, rho, reservation, bar, start)
        finally:
            reservation.close()
        return (*ran.table(learned, request, attributes, rng), {}, cost)

    return _Run(cost, execute)


@dataclass(frozen=True)
class _AimRounds:
    """AIM's rounds as planned before the spend (:func:`_aim_rounds`), for aim and for pgm's
    adaptive path: ``rounds`` shares, the model's options, the one-way marginals' ``share`` of
    ``ρ`` and the compression's ``threshold`` (:func:`_compression`), the ``seconds`` the rounds
    may take given the noisy row count, the warnings to give of them (:meth:`announce`), and
    ``tree``, MST as planned for a table too small for the rounds (None: the rounds run whatever
    the table)."""

    rounds: int
    model: _ModelOptions
    share: float | None
    threshold: float | None
    seconds: Callable[[float], float]
    notes: tuple[str, ...] = ()
    tree: _MstTree | None = None

    def run(self, private: PrivateTable, attributes: Sequence[Attribute], request: _Request, rho: float,
            reservation: Reservation, bar: tqdm,
            start: tuple[list[Observation], list[Observation]] | None = None) -> tuple[PGMResult, _ModelOptions]:
        """The rounds drawing ``rho`` from ``reservation``, ``bar`` showing the share of it spent, and
        the options the model was fitted with; ``start``: the one-way marginals already measured
        (pgm's, :func:`~dpsql.synth.aim.aim`)."""
        bar.total, bar.unit = 100, "% of rho"
        return aim(private, attributes, request.marginals, rho, reservation, self.model.max_cells, rounds=self.rounds,
                   iterations=self.model.iterations, one_way_share=self.share, threshold=self.threshold,
                   progress=_advance(bar), binned=request.wide, seconds=self.seconds,
                   warn=lambda note: warnings.warn(note, stacklevel=_caller()), start=start), self.model

    def instead(self, private: PrivateTable, attributes: Sequence[Attribute], request: _Request, rho: float,
                reservation: Reservation, bar: tqdm, start: tuple[list[Observation], list[Observation]],
                advance: Callable[[int, float], None] | None = None) -> tuple[PGMResult, _ModelOptions] | None:
        """With a ``tree``, on a table whose noisy row count (from the one-way marginals ``start``,
        drawn from ``reservation``) makes the rounds' noise too large
        (:func:`~dpsql.synth.aim.too_noisy`, released counts only): MST from ``start``, drawing the
        rest of ``rho``, its fit on ``bar`` (through ``advance`` when the caller shows it there
        already), with a warning, and the options it was fitted with. Otherwise None, having drawn
        nothing."""
        if self.tree is None:
            return None
        noise, rows = private.rows_per_unit * round_noise(self.rounds, rho), estimate_total(start[0])
        if not too_noisy(noise, start[0]):
            return None
        note = (f"AIM's rounds would measure each marginal with noise of standard deviation {noise:,.1f}, "
                f"{noise / rows:.1%} of the noisy row count ({rows:,.0f}), past {TREE_NOISE:.1%} "
                "(dpsql.synth.aim.TREE_NOISE): MST's spanning tree of pairs is measured instead")
        warnings.warn(note, stacklevel=_caller())
        if advance is not None:
            learned = self.tree.learn(private, attributes, request, reservation, advance, start)
        else:
            with _fit_progress(bar, self.tree.model.iterations, []) as shown:
                learned = self.tree.learn(private, attributes, request, reservation, shown, start)
        return learned, dataclasses.replace(self.tree.model, estimate=f"{note}; {self.tree.model.estimate}")

    def announce(self) -> None:
        """Warn of what the plan changed (the default rounds cut to those that fit in time)."""
        for note in self.notes:
            warnings.warn(note, stacklevel=_caller())


def _aim_rounds(private: PrivateTable, attributes: Sequence[Attribute], request: _Request, options: dict,
                share: float | None = None, tree: bool = False) -> _AimRounds:
    """AIM's rounds within the request, from public values alone (``share``: the one-way
    marginals' share of ``ρ`` when pgm measured them, else :func:`_compression`'s), and with
    ``tree`` (pgm's), MST planned for a table too small for them (:func:`_mst_tree`, after a first
    measurement of that share; none when it cannot be planned: the rounds run). Refused up
    front: a pure ``ε`` spend (AIM is zCDP), a model of one-way marginals beyond
    ``max_model_size``, and noise the first round's share cannot add (the later rounds' shares
    are larger), more than :data:`AIM_MAX_ROUNDS` shares, and more than
    :data:`AIM_MAX_CANDIDATES` candidates. The default ``16d`` rounds are cut to those that
    fit in ``max_seconds`` (from public values: the schema, the workload and the options), at
    least :data:`AIM_MIN_ROUNDS` ``d``: fewer rounds only spend more each. As the rounds run they
    price their own work (scoring every candidate included), and end, the last spending all
    that is left, within what the last fit and sampling the rows leave of ``max_seconds``."""
    total = request.total
    model = _ModelOptions.of(options, AIM_ITERATIONS)
    model_attributes = binned(attributes, request.wide)
    domain = [a.cells for a in model_attributes]  # the model's: a wide column's bins (dpsql.synth.coarsen)
    given = option(options, "rounds", None) is not None
    rounds = integer("rounds", option(options, "rounds", 16 * len(domain)), high=AIM_MAX_ROUNDS)
    default, threshold = _compression(options, domain, True)
    share = default if share is None else share
    if not (request.zcdp or total.delta > 0):
        raise PrivacyError("AIM is zCDP: give rho on a zCDP budget, or epsilon with a delta > 0 (method='pgm' "
                           "takes a pure epsilon)")
    rho, _ = request.reservation()
    model.check_one_ways(domain, "AIM's first model")
    scored = aim_candidates(request.marginals)
    if len(scored) > AIM_MAX_CANDIDATES:
        raise ResourceLimitError(f"AIM scores every marginal within the workload's, {len(scored):,} here, in every "
                                 f"round, and past {AIM_MAX_CANDIDATES:,} its rounds do not fit in minutes; give a "
                                 "workload of fewer marginals, or use method='pgm', which measures them all at once")
    fits = [m for m in scored if math.prod(domain[a] for a in m) <= model.max_cells]
    _check_cells("AIM", fits, model_attributes)
    largest = max(fits, key=lambda m: math.prod(domain[a] for a in m))
    cells = min(model.max_cells, sum(math.prod(domain[a] for a in m) for m in fits))
    refit = fit_seconds(round_iterations(300, cells), cells) / 2  # the model grows from one-way marginals
    last = fit_seconds(model.iterations, cells)
    notes: list[str] = []
    if not given:  # the default, 16 a column, capped to the rounds that fit in time
        rows = request.rows or 1  # each round adds a marginal to the sweeps, as check_time counts them
        fit = fitting(model.max_seconds, last + refine_seconds(model.sweeps, len(domain), rows),
                      2 * READ + refit + refine_seconds(model.sweeps, 1, rows), rounds)
        if fit < rounds and fit >= AIM_MIN_ROUNDS * len(domain):
            notes.append(f"AIM's default of 16 rounds per column (rounds={rounds:,}) does not fit in "
                         f"max_seconds={model.max_seconds:g}: running rounds={fit:,}, whose rounds each spend more")
            rounds = fit
    planned = rounds * (2 * READ + refit)
    marginals = min(rounds, len(fits)) + len(domain)
    try:
        model = model.check_time("AIM", [(f"rounds={rounds}", planned), (f"iterations={model.iterations}", last)],
                                 marginals, request.rows)
    except ResourceLimitError as e:
        if given:
            raise
        raise ResourceLimitError(f"{e}; AIM's default rounds, 16 per column and at least {AIM_MIN_ROUNDS} in time, "
                                 "do not fit: give a workload of fewer marginals") from None

    def seconds(total: float) -> float:
        """The time the rounds may take, as they price it running: what the last fit and sampling
        the rows (the default: the noisy count ``total``) leave, and at least half of what one
        row would (the rows are then capped, :meth:`_ModelOptions.table`)."""
        rows = request.rows if request.rows is not None else max(round(total), 1)
        left = [model.max_seconds - last - refine_seconds(model.sweeps, marginals, n) for n in (rows, 1)]
        return max(left[0], left[1] / 2)

    model = dataclasses.replace(model, estimate=f"{model.estimate}; the rounds end within what the last fit and the "
                                                "sampling leave of max_seconds, as they price their own work")
    private.plan(marginal_strategy(domain, largest), Gaussian(rho=ALPHA * rho / rounds))  # the smallest share
    for _, weighted, part, on in _first_parts(attributes, request.wide, share) if share is not None else ():
        private.plan(measurement(on, weighted), Gaussian(rho=part * rho))

    small = None
    if tree:
        try:
            small = _mst_tree(private, attributes, request, options,
                              first_share(rounds, len(domain)) if share is None else share)
        except (ResourceLimitError, PrivacyError):
            pass  # the rounds run whatever the table
    return _AimRounds(rounds, model, share, threshold, seconds, tuple(notes), small)


def _plan_mst(private: PrivateTable, attributes: Sequence[Attribute], request: _Request, options: dict) -> _Run:
    """MST within the request (:mod:`dpsql.synth.mst`): the whole ``ρ`` (or ``(ε, δ)``), or a pure
    ``ε`` (Laplace measurements), reserved at once, a third each for the one-way marginals (and the
    wide columns' in their bins: :func:`~dpsql.synth.pgm.full_share`), the picks among the pairs
    within the workload's marginals, and the measurement of the pairs picked (:func:`_mst_tree`)."""
    tree = _mst_tree(private, attributes, request, options)
    return _reserved_fit(private, request, attributes, tree.model, tree.cost, {tree.name: tree.budget}, "mst",
                         f"MST: {tree.name}={tree.budget!r}, {tree.count} picks",
                         lambda reservation, advance, bar: (tree.learn(private, attributes, request, reservation,
                                                                       advance), tree.model))


@dataclass(frozen=True)
class _MstTree:
    """MST as planned before the spend (:func:`_mst_tree`), for mst and for AIM's rounds on a table too
    small for them (:meth:`_AimRounds.instead`): the candidate ``pairs`` and the ``count`` of picks, the
    model's options, the compression's ``threshold``, and the ``budget`` (``name``: ``rho`` or a pure
    ``epsilon``) with its ``cost`` in the ledger."""

    pairs: list[tuple[int, int]]
    count: int
    model: _ModelOptions
    threshold: float | None
    budget: float
    name: str
    cost: Cost

    def learn(self, private: PrivateTable, attributes: Sequence[Attribute], request: _Request,
              reservation: Reservation, advance: Callable[[int, float], None],
              start: tuple[list[Observation], list[Observation]] | None = None) -> PGMResult:
        """MST drawing the whole allowance of ``reservation``, its fit shown by ``advance``; ``start``:
        the one-way marginals already measured (:func:`~dpsql.synth.mst.mst`)."""
        return mst(private, attributes, self.pairs, reservation, self.model.max_cells, self.threshold,
                   compressible([a.size for a in attributes]), iterations=self.model.iterations, progress=advance,
                   binned=request.wide, start=start)


def _mst_tree(private: PrivateTable, attributes: Sequence[Attribute], request: _Request, options: dict,
              spent: float = 0.0) -> _MstTree:
    """MST within the request, from public values alone. Refused up front: noise either
    measurement's share cannot add (a third each, or, after a first measurement of the one-way
    marginals that may take ``spent`` of the budget, half each of what it leaves), and a run whose
    fit cannot take :data:`~dpsql.synth.work.MIN_FIT_STEPS` steps in ``max_seconds`` (priced on a
    forest of the largest pairs, which any the picks make is at most:
    :meth:`_ModelOptions.forest_plan`)."""
    total = request.total
    pure = not (request.zcdp or total.delta > 0)
    model = _ModelOptions.of(options, PGM_ITERATIONS)
    model_attributes = binned(attributes, request.wide)
    domain = [a.cells for a in model_attributes]  # the model's: a wide column's bins (dpsql.synth.coarsen)
    _, threshold = _compression(options, domain, True)
    if pure:
        budget, cost, name = total.epsilon, Cost.laplace(total.epsilon, request.budget), "epsilon"
    else:
        (budget, cost), name = request.reservation(), "rho"
    model.check_one_ways(domain, "MST's model")
    pairs = mst_candidates(request.marginals)
    if pairs:
        _check_cells("MST", pairs, model_attributes)
    count = picks(len(domain), pairs)
    size = {p: math.prod(domain[a] for a in p) for p in pairs}
    largest = heapq.nlargest(count, pairs, key=size.__getitem__)  # any forest the picks make is at most these
    one_way = max(1 / 3, spent) if count else 1
    # the pairs' noise, their weights scaled to L2 norm 1, is the same whichever are picked
    for what, weighted, part, on in (*_first_parts(attributes, request.wide, one_way),
                                     ("picked", unit_weights({p: 1.0 for p in largest}), (1 - one_way) / 2, domain)):
        try:
            if weighted:
                private.plan(measurement(on, weighted), Laplace(part * budget) if pure else Gaussian(rho=part * budget))
        except PrivacyError as e:
            raise _refine(e, f"MST's {what} marginals get {part:.3g} of {name}={budget:g}, too little") from None
    marginals = count + len(domain)
    model.check_time("MST", [], marginals, request.rows)
    # two measurements and the first pick's counting; each pick a pass over the pairs' cells
    picking = READ * (2 + math.ceil(len(pairs) / MAX_GROUPING_SETS)) + count * fit_seconds(1, sum(size.values()))
    model = model.forest_plan("MST", sum(size[p] for p in largest) + sum(domain), marginals,
                              picking + refine_seconds(model.sweeps, marginals, request.rows or 1))
    return _MstTree(pairs, count, model, threshold, budget, name, cost)


def _game_report(learned: GameResult, marginals: Sequence[tuple[int, ...]],
                 attributes: Sequence[Attribute]) -> "pd.DataFrame":
    """Per workload marginal: how often the private selections picked one of its
    cells (released numbers only)."""
    import pandas as pd

    cells = MarginalCells([a.cells for a in attributes], marginals)
    picked = np.bincount([cells.locate(j)[0] for j, _ in learned.selected], minlength=len(marginals))
    return pd.DataFrame({"marginal": [marginal_name(attributes, m) for m in marginals],
                         "cells": np.diff(cells.offsets), "times_selected": picked})


def _report(measurements: Sequence[tuple[tuple[int, ...], np.ndarray, np.ndarray | None]], total: float,
            records: np.ndarray, attributes: Sequence[Attribute], rows: int) -> "pd.DataFrame":
    """Synthetic counts (rescaled from ``rows`` to the learned ``total``) against each noisy
    measurement ``(subset, counts, cells)`` (released numbers only): ``cells`` None, or each of the
    marginal's cells' counted cell, for counts of a coarser grouping (AIM's coarse candidates,
    named with ``(grouped)``)."""
    import pandas as pd

    domain = [a.cells for a in attributes]
    scale = rows / max(total, 1e-12) if rows else 1.0  # no rows: every count is 0
    out = []
    for subset, measured, cells in measurements:
        synth = MarginalCells(domain, [subset]).counts(records) / scale
        if cells is not None:
            synth = np.bincount(cells, synth, len(measured))
        err = np.abs(synth - measured)
        name = marginal_name(attributes, subset) + ("" if cells is None else " (grouped)")
        out.append({"marginal": name, "cells": len(measured),
                    "max_abs_error_vs_noisy": float(err.max()), "mean_abs_error_vs_noisy": float(err.mean())})
    return pd.DataFrame(out)
