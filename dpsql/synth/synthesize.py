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

Each method's plan (its spend split, model and time, fixed from public values before the charge)
lives in :mod:`dpsql.synth.plan`; this module validates what every method shares, picks the
planner, and carries the run out: charged, drawn, decoded and registered.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
import numbers
import sys
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from tqdm.auto import tqdm

from dpsql.errors import Error, PrivacyError, ResourceLimitError, WorkloadError, did_you_mean
from dpsql.hdmm.matrix import is_total
from dpsql.limits import MAX_MEASURED_CELLS, check_synthetic_cells
from dpsql.private.budget import Budget, Cost
from dpsql.private.kernel import PrivateTable
from dpsql.released import SYNTH_SCHEMA
from dpsql.schema import Attribute, Binned
from dpsql.sql.compile import compile_batch
from dpsql.sql.parse import lone_surrogate
from dpsql.synth.coarsen import binned, wide
from dpsql.synth.options import integer
from dpsql.synth.pgm import PGM_ITERATIONS, model_limit
from dpsql.synth.plan.binned import plan_binned
from dpsql.synth.plan.games import plan_dualquery, plan_fem_rows, plan_mwem
from dpsql.synth.plan.model import ModelOptions
from dpsql.synth.plan.pgm import plan_pgm
from dpsql.synth.plan.request import Request, Run, caller, unnamed_attributes
from dpsql.synth.plan.rounds import AIM_MAX_CANDIDATES, plan_aim
from dpsql.synth.plan.tree import plan_mst

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
#:   marginal, ``measure`` (:data:`~dpsql.synth.plan.pgm.PGM_MEASURES`:
#:   ``"workload"``, the workload's marginals, or ``"pairs"``, their two-way marginals only, which
#:   spends the budget on fewer cells), ``compress`` (float > 0, :data:`~dpsql.synth.compress.THRESHOLD`,
#:   or False: merge each attribute's values whose noisy one-way count is below this many noise
#:   standard deviations, :func:`~dpsql.synth.pgm.pgm_compressed`; only with Gaussian noise, and
#:   only attributes of more than two values), ``one_way_share`` (in (0, 1): the share of the
#:   budget those one-way counts take, :data:`~dpsql.synth.plan.model.ONE_WAY_SHARE` times the attributes' fraction that
#:   has more than two values), ``adaptive`` (bool, True: under Gaussian noise, when the measured
#:   marginals are too large for one model on the compressed domain, AIM's rounds select among
#:   them with the rest of the budget, and on a table too small for them
#:   (:func:`~dpsql.synth.aim.too_noisy`) MST's tree of pairs, :func:`~dpsql.synth.plan.pgm.plan_pgm_two`; False:
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
#: Under a pure epsilon with no workload, the most pairs of columns the default measures (one
#: Laplace measurement); past them, mst picks a spanning tree of pairs. On chain tables of 20,000
#: rows at epsilon = 1, mean TV over random triples with every pair against independent columns:
#: 24 columns (276 pairs) 0.073 against 0.200, 30 (435) 0.092 against 0.166, 40 (780) 0.119
#: against 0.118, 60 (1,770) 0.258 against 0.077.
PURE_MAX_PAIRS = 500


def _plan(private: PrivateTable, schema: "Schema", attributes: Sequence[Attribute],
          method: Any, workload: Any, budget: Budget, epsilon: Any, delta: Any, rho: Any, rows: Any, name: Any,
          seed: Any, options: dict) -> Run:
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
    alone = [] if method in ("pgm", "aim", "mst") else unnamed_attributes(len(attributes), marginals)
    widened = {**widened, **{a: np.zeros(attributes[a].size, dtype=np.int64) for a in alone}}
    request = Request(budget, total, marginals, rows, columns, seed, widened)
    planner = {"mwem": plan_mwem, "dualquery": plan_dualquery, "fem": plan_fem_rows, "pgm": plan_pgm,
               "aim": functools.partial(plan_aim, tree=asked == "pgm"), "mst": plan_mst}[method]
    gaussian = request.zcdp or total.delta > 0  # pgm (so), aim and mst measure every one-way marginal themselves
    if request.wide and not (method in ("aim", "mst") or method == "pgm" and gaussian):
        run = plan_binned(private, attributes, request, planner, dict(options), alone)
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
      rounds to score every candidate (:data:`~dpsql.synth.plan.rounds.AIM_MAX_CANDIDATES`), mst picks a spanning tree
      of pairs (on chain tables of 40 to 80 columns, mean TV 0.14 to 0.27 times independent columns', where pgm
      measuring every pair had 0.29 to 0.98), or, given options of pgm's that mst does not take, pgm measures every
      pair;
    * under a pure ε, whose Laplace noise grows with the marginals' number, pgm measures every pair
      (mean TV over every triple at ε = 1: 0.200 against 0.307 on the salary proxy, 0.644 against
      0.769 on the passenger proxy, 0.073 against 0.314 on 24 columns), and past
      :data:`PURE_MAX_PAIRS` pairs (unless given an option mst does not take) mst picks a spanning
      tree of pairs with Laplace noise (chain tables of 40 to 80 columns: mean TV 0.20 to 0.48
      times independent columns', which measuring each column alone had made them)."""
    way = min(DEFAULT_WAY, len(attributes))
    if method != "pgm" or not set(options) <= set(OPTIONS["aim"]) or \
            math.prod(a.cells for a in binned(attributes, widened)) <= \
            model_limit(ModelOptions.of(options, PGM_ITERATIONS).max_cells):
        return method, way
    if not (total.rho > 0 or total.delta > 0):
        pairs = math.comb(len(attributes), 2)
        if pairs <= PURE_MAX_PAIRS or not set(options) <= set(OPTIONS["mst"]):
            return method, min(2, way)
        warnings.warn(f"with no workload and a pure epsilon on {len(attributes)} columns, Laplace noise would drown "
                      f"the {pairs:,} pairs of columns measured at once: mst selects a spanning tree of them instead "
                      "(give a workload, or a delta for aim's adaptive selection)", stacklevel=caller())
        return "mst", 2
    scored = sum(math.comb(len(attributes), k) for k in range(1, way + 1))
    wide = "mst" if set(options) <= set(OPTIONS["mst"]) else method
    if scored <= AIM_MAX_CANDIDATES or not set(options) <= set(OPTIONS[wide]):
        return "aim", way
    warnings.warn(f"with no workload on {len(attributes)} columns, aim would score {scored:,} candidate marginals "
                  f"every round, more than {AIM_MAX_CANDIDATES:,}: " + ("mst selects a spanning tree of pairs of "
                  "columns" if wide == "mst" else "pgm measures every pair of columns") + " instead (give a workload "
                  "to choose)", stacklevel=caller())
    return wide, 2
