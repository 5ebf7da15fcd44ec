"""The engine: the one place that plans, spends and answers a request.

Every front end (the Python API :mod:`dpsql.api.connection`, the command line
:mod:`dpsql.api.cli`, the server :mod:`dpsql.server`) only translates its input
(Python arguments, flags, wire messages) into a :class:`Request` and the engine's
:class:`~dpsql.engine.answer.Answer` objects back into its output. The engine:

1. compiles the statements into one workload (:mod:`dpsql.sql`), refusing bad SQL
   before anything is spent;
2. works out the spend and the noise options it allows (:mod:`dpsql.engine.spend`),
   or, for a ``std_error`` target, the least spend that meets it;
3. selects a strategy per noise option (HDMM, cached: :class:`Strategies`) and keeps
   the best under the request's objective among those the budget still affords;
4. has the private kernel (:class:`~dpsql.private.kernel.PrivateTable`) charge the
   ledger and measure, reconstructs every answer by least squares, and adds its
   standard error and confidence interval (:mod:`dpsql.engine.uncertainty`).

Nothing that fails before the kernel's ledger write (bad SQL or parameters, an
unaffordable request, a table or column that does not exist) spends anything.
A request that the same analyst sent before (the same statements, spend and options)
is answered with that release again, exactly, for free (:mod:`dpsql.engine.repeats`),
so that every front end gets it.

>>> import duckdb, dpsql
>>> from dpsql.private.kernel import PrivateTable
>>> con = duckdb.connect()
>>> _ = con.execute("CREATE TABLE t AS SELECT range % 3 AS a FROM range(30)")
>>> schema = dpsql.load_schema({"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 2}}})
>>> ledger = dpsql.Ledger(None, dpsql.Budget(epsilon=1.0))
>>> engine = Engine(PrivateTable(con, "t", schema, ledger), schema, ledger, Strategies(None, progress=False))
>>> plan = engine.run(Request("EXPLAIN SELECT a, COUNT(*) AS n FROM t GROUP BY a", epsilon=0.5, noise="laplace"))
>>> plan.statements[0]["std_error"].round(3).tolist(), ledger.spent().epsilon
([2.828, 2.828, 2.828], 0.0)
"""

from __future__ import annotations

import math
import numbers
import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
from scipy.stats import norm

from dpsql.engine.answer import Answer, Explanation, Release
from dpsql.engine.repeats import Repeats, request_key
from dpsql.engine.spend import NOISE_FAMILIES, noise_options, statement_options
from dpsql.engine.uncertainty import error_columns, ordered
from dpsql.errors import ArgumentError, BudgetExceededError, PrivacyError, ResourceLimitError, UnsupportedSQLError
from dpsql.hdmm.cache import StrategyCache
from dpsql.hdmm.error_analysis import max_variance
from dpsql.hdmm.error_analysis import rmse as expected_rmse
from dpsql.hdmm.optimize import select
from dpsql.hdmm.optimize.selector import OBJECTIVES
from dpsql.hdmm.reconstruct import least_squares, nonnegative
from dpsql.hdmm.reduction import reduce_domain
from dpsql.privacy import Gaussian, Laplace, NoiseModel
from dpsql.private.budget import MIN_EPSILON, MIN_RHO, ZCDP, Budget, Cost
from dpsql.private.kernel import PrivateTable
from dpsql.released import ReleasedData
from dpsql.schema import Schema
from dpsql.sql.compile import CompiledBatch, compile_batch, schema_attributes
from dpsql.sql.outputs import error_names, error_outputs
from dpsql.sql.parse import explained
from dpsql.sql.postprocess import postprocess

if TYPE_CHECKING:
    import pandas as pd

    from dpsql.hdmm.strategy import Strategy
    from dpsql.hdmm.workload import Workload
    from dpsql.private.ledger import Ledger
    from dpsql.synth.synthesize import SyntheticTable

__all__ = ["Engine", "Request", "Strategies"]


@dataclass(frozen=True)
class Request:
    """One request, as every front end states it.

    ``statements``: SQL text (``;``-separated statements, or ``EXPLAIN SELECT …``) or a
    list of statements, answered together from one measurement. The spend is
    ``epsilon``/``delta`` or ``rho`` (or the statements' own ``WITH DIFFERENTIAL_PRIVACY
    OPTIONS``), or ``std_error``: the least spend that gives every COUNT and SUM answer
    that expected standard error. ``explain=True`` (or an ``EXPLAIN`` statement) reads and
    spends nothing and returns an :class:`~dpsql.engine.answer.Explanation`. ``single``:
    the request must hold exactly one statement. ``max_rows``: refuse, before anything is
    spent, a statement whose answer could have more rows (its groups, from the public domain).
    ``default_spend``: the spend given here (a server session's ``SET dpsql.epsilon``) applies
    only when the statements set none in their OPTIONS; otherwise a spend given in two places
    is refused.
    """

    statements: "str | Sequence[str]"
    epsilon: float | None = None
    delta: float | None = None
    rho: float | None = None
    noise: str | None = None
    nonnegative: bool = False
    confidence: float = 0.95
    objective: str = "total"
    std_error: float | None = None
    explain: bool = False
    single: bool = False
    max_rows: int | None = None
    default_spend: bool = False
    #: the SQL dialect the statements are written in (sqlglot's name; None: DuckDB's)
    dialect: str | None = None
    #: answers read from one non-negative integer data vector (implies ``nonnegative``)
    integer: bool = False


class Strategies:
    """Selected strategies by workload, noise family and objective: memoized in this process,
    and kept in the on-disk ``cache`` (None: none) across processes. Selection reads no data,
    so engines of different analysts of one dataset may share one. Thread-safe: one selection
    at a time (a second request for the same workload waits and reuses it); a workload selected
    before is returned without waiting."""

    def __init__(self, cache: StrategyCache | None, progress: bool | None = None) -> None:
        self._cache = cache
        #: show progress bars for long work (None: only when slow)
        self.progress = progress
        self._memo: dict[tuple[str, str, str], Strategy] = {}
        self._lock = threading.Lock()

    def get(self, W: Workload, model: NoiseModel, objective: str) -> Strategy:
        """The selected strategy for ``W`` under ``model``'s noise family and ``objective``."""
        key = (W.fingerprint(), model.name, objective)
        if key in self._memo:  # selected before: no wait behind another request's selection
            return self._memo[key]
        with self._lock:
            if key not in self._memo:
                self._memo[key] = select(W, model, cache=self._cache, progress=self.progress,
                                         objective=objective).strategy
            return self._memo[key]


class Engine:
    """Plans, spends and answers requests on one private table (see the module docstring).

    ``private`` is the kernel holding the table and ``ledger`` (the dataset's ledger, or one
    analyst's account of it): the only parts that touch private data and the budget.
    """

    def __init__(self, private: PrivateTable, schema: Schema, ledger: "Ledger", strategies: Strategies) -> None:
        self.schema = schema
        self.ledger = ledger
        self._private = private
        self._strategies = strategies
        self._repeats = Repeats(ledger.path)

    @property
    def budget(self) -> Budget:
        return self.ledger.budget

    def run(self, request: Request) -> "list[Answer] | Explanation":
        """The answers to ``request`` (one per statement), or, for ``EXPLAIN`` or
        ``explain=True``, what answering it would do (nothing read or spent)."""
        statements = request.statements
        inner = explained(statements) if isinstance(statements, str) else None
        if inner is not None:
            request = replace(request, statements=inner, explain=True)
        compiled = compile_batch(request.statements, self.schema, dialect=request.dialect)
        if request.default_spend and statement_options(compiled) is not None:
            request = replace(request, epsilon=None, delta=None, rho=None, std_error=None)
        if request.single and len(compiled.statements) != 1:
            raise UnsupportedSQLError(f"query takes one statement, got {len(compiled.statements)}; use batch",
                                      "several statements")
        _check_options(request)
        _check_rows(compiled, request.max_rows)
        if request.explain:
            return self._explain(compiled, self._spend_for(compiled, request) if request.std_error is not None
                                 else request)
        key = _repeat_key(compiled, request)
        repeated = self._repeats.get(self.ledger, key) if compiled.terms else None
        if repeated is not None:
            return repeated
        answers = self._answer(compiled, request if request.std_error is None else self._spend_for(compiled, request))
        if answers[0].release.entry >= 0:
            self._repeats.put(self.ledger, key, answers)
        return answers

    def synthesize(self, released: ReleasedData, method: str, workload: Any, epsilon: float | None,
                   delta: float | None, rho: float | None, rows: int | None, name: str | None, seed: int | None,
                   options: dict[str, Any]) -> "SyntheticTable":
        """A private synthetic table registered on ``released`` as ``name`` (default
        ``<table>_synthetic``); the arguments are :meth:`dpsql.Connection.synthesize`'s."""
        from dpsql.synth.synthesize import synthesize

        return synthesize(self._private, released, self.schema, schema_attributes(self.schema), method, workload,
                          self.budget, epsilon, delta, rho, rows, name or f"{self.schema.table}_synthetic",
                          seed=seed, progress=self._strategies.progress, options=options)

    def describe(self, request: Request) -> "list[pd.DataFrame]":
        """Each statement's answer columns, with the types a real answer has, as empty tables:
        compiled and post-processed on stand-in answers, reading no data and selecting nothing."""
        compiled = compile_batch(request.statements, self.schema, dialect=request.dialect)
        y = np.ones(compiled.workload.num_queries if compiled.terms else 0)
        frames = postprocess(compiled, y, [error_columns(st, y, y, 1.0, None) for st in compiled.statements])
        return [ordered(st, df).iloc[:0] for st, df in zip(compiled.statements, frames)]

    # -- planning -----------------------------------------------------------------------
    def _affordable(self, requested: "list[tuple[NoiseModel, Cost]]") -> "list[tuple[NoiseModel, Cost]]":
        """The noise options whose cost fits in the remaining budget now."""
        out = []
        for model, cost in requested:
            try:
                self.ledger.check(cost)
            except BudgetExceededError:
                continue
            out.append((model, cost))
        return out

    def _choose(self, W: Workload, options: Sequence[tuple[NoiseModel, Cost]],
                objective: str) -> tuple[NoiseModel, Cost, Strategy]:
        """The noise option, and its selected strategy, best under ``objective``."""
        scored = []
        for model, cost in options:
            strategy = self._strategies.get(W, model, objective)
            figure = expected_rmse(W, strategy, model) if objective == "total" else max_variance(W, strategy, model)
            scored.append((figure, model, cost, strategy))
        _, model, cost, strategy = min(scored, key=lambda o: o[0])
        return model, cost, strategy

    def _spend_for(self, compiled: CompiledBatch, r: Request) -> Request:
        """``r`` with the least spend whose largest expected standard error of a COUNT or SUM
        answer is at most ``r.std_error``, from public values only.

        The strategy does not depend on the size of the spend (only on the noise family), and the
        noise's standard deviation falls as the spend grows, so a bisection on the spend finds it.
        """
        target, noise = r.std_error, r.noise
        if isinstance(target, bool) or not isinstance(target, numbers.Real) or not 0.0 < target < math.inf:
            raise ArgumentError(f"std_error must be a positive finite number, got {target!r:.80}")
        if r.epsilon is not None or r.rho is not None:
            raise ArgumentError("give std_error, or epsilon or rho, not both")
        if statement_options(compiled) is not None:
            raise ArgumentError("give std_error, or the statements' WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = ...), "
                                "not both")
        if noise is not None and noise not in NOISE_FAMILIES:
            raise PrivacyError(f"noise must be one of {NOISE_FAMILIES}, got {noise!r:.80}")
        zcdp = self.budget.currency == ZCDP
        noise = noise or ("gaussian" if zcdp else "laplace")
        if noise == "gaussian" and not zcdp and r.delta is None:
            raise ArgumentError("std_error with Gaussian noise under an (epsilon, delta) budget needs delta=")
        rows = [b for st in compiled.statements for a in st.plan.aggregates if a.visible and a.func in ("count", "sum")
                for b in st.blocks_of(a.name) if b.term is not None]  # several: one per grouping set
        if not rows:
            raise ArgumentError("std_error needs a COUNT or SUM to measure: the standard errors of other aggregates "
                                "depend on their answers")

        def model(spend: float) -> NoiseModel:
            if noise == "laplace":
                return Laplace(spend)
            return Gaussian(rho=spend) if zcdp else Gaussian(epsilon=spend, delta=r.delta)

        W = compiled.workload
        strategy = self._strategies.get(W, model(1.0), r.objective)
        variances = np.concatenate(strategy.query_variances(W))
        worst = max(float(np.sqrt(variances[b.rows].max())) * b.scale for b in rows)

        def error(spend: float) -> float:
            return self._private.plan(strategy, model(spend), attributes=compiled.attributes).std * worst

        lo, hi = (MIN_RHO, 1e24) if zcdp and noise == "gaussian" else (MIN_EPSILON, 1e12)
        if error(hi) > target:
            raise ArgumentError(f"no spend gives a standard error of {target:g} (the least is {error(hi):.3g})")
        for _ in range(200):  # on a log scale, to a relative 1e-9
            mid = math.sqrt(lo * hi)
            lo, hi = (lo, mid) if error(mid) <= target else (mid, hi)
            if hi <= lo * (1 + 1e-9):
                break
        if zcdp and noise == "gaussian":
            return replace(r, noise=noise, epsilon=None, delta=None, rho=hi, std_error=None)
        return replace(r, noise=noise, epsilon=hi, rho=None, std_error=None)

    # -- answering ----------------------------------------------------------------------
    def _explain(self, compiled: CompiledBatch, r: Request) -> Explanation:
        """What answering would do, reading no data and spending nothing (see :class:`Explanation`).
        The budget is not checked: the cost is shown, whether or not it fits; but, as when
        answering, it chooses among the noises whose cost fits when any does."""
        requested = noise_options(compiled, self.budget, r.epsilon, r.delta, r.rho, r.noise)
        if not compiled.terms:
            frames = compiled.tables(np.zeros(0))
            return Explanation("none", Cost(0.0, 0.0, 0.0), "none", 0.0,
                               [df[[k.name for k in st.plan.keys]] for st, df in zip(compiled.statements, frames)])
        W = compiled.workload
        reduce_domain(W).workload.check_size()  # what the kernel counts: the values the queries tell apart
        model, cost, strategy = self._choose(W, self._affordable(requested) or requested, r.objective)
        plan = self._private.plan(strategy, model, attributes=compiled.attributes)
        se = plan.std * np.sqrt(np.concatenate(strategy.query_variances(W)))
        frames = []
        for st, df in zip(compiled.statements, compiled.tables(np.zeros(W.num_queries))):
            out = df[[k.name for k in st.plan.keys]].copy()
            aggregates = {a.name for a in st.plan.aggregates}
            for output in error_outputs(st.plan):  # the result's error columns; one measure: a COUNT or SUM
                blocks = st.blocks_of(output) if output in aggregates else []
                out[error_names(st.plan, output)[0]] = (sum(b.take(se, len(df)) for b in blocks)
                                                   if {b.measure for b in blocks} in ({"count"}, {"sum"})
                                                   else np.full(len(df), np.nan))
            frames.append(out)
        rmse = self._private.rows_per_unit * expected_rmse(W, strategy, model)
        affordable, remaining = self.ledger.afford(cost)
        return Explanation(model.name, cost, strategy.operator, rmse, frames, remaining, affordable)

    def _answer(self, compiled: CompiledBatch, r: Request) -> list[Answer]:
        requested = noise_options(compiled, self.budget, r.epsilon, r.delta, r.rho, r.noise)
        if not compiled.terms:  # only group keys, or WHERE rules out every group: the public domain answers
            release = Release(mechanism="none", epsilon=0.0, delta=0.0, rho=0.0, rmse=0.0, operator="none",
                              queries=0, statements=len(compiled.statements), entry=-1)
            empty = np.zeros(0)
            frames = postprocess(compiled, empty, [error_columns(st, empty, empty, 0.0, None)
                                                   for st in compiled.statements])
            return _answers(compiled, frames, release)
        W = compiled.workload
        k = self._private.rows_per_unit
        reduce_domain(W).workload.check_size()  # what the kernel counts: the values the queries tell apart
        affordable = self._affordable(requested)
        if not affordable:
            self.ledger.check(requested[0][1])  # raises BudgetExceededError, before any optimization
        self._check_delta_used(compiled, r, affordable)
        model, cost, strategy = self._choose(W, affordable, r.objective)
        rmse = k * expected_rmse(W, strategy, model)
        description = ";\n".join(st.plan.sql for st in compiled.statements)
        m = self._private.measure(compiled.attributes, strategy, model, cost, description)
        answers = (nonnegative(W, strategy, m.values, integer=r.integer) if r.nonnegative or r.integer
                   else least_squares(W, strategy, m.values))
        se = m.noise_std * np.sqrt(np.concatenate(strategy.query_variances(W)))
        release = Release(mechanism=model.name, epsilon=cost.epsilon, delta=cost.delta, rho=cost.rho,
                          rmse=rmse, operator=strategy.operator, queries=W.num_queries,
                          statements=len(compiled.statements), entry=m.entry, confidence=r.confidence,
                          time=m.time)
        z = float(norm.ppf(0.5 + r.confidence / 2.0))

        def covariance(a: int, b: int, full: bool = False) -> np.ndarray:
            return m.noise_std**2 * (strategy.cross_covariance if full else strategy.cross_variances)(W, a, b)

        frames = postprocess(compiled, answers, [error_columns(st, answers, se, z, covariance)
                                                 for st in compiled.statements])
        return _answers(compiled, frames, release)

    def _check_delta_used(self, compiled: CompiledBatch, r: Request,
                          affordable: Sequence[tuple[NoiseModel, Cost]]) -> None:
        """Refuse a request that states a delta when no affordable option would spend it: answering
        with Laplace noise would drop the delta the analyst asked for without a word."""
        stated = statement_options(compiled)
        delta = stated[1] if stated is not None and stated[1] is not None else r.delta
        if not delta or any(isinstance(m, Gaussian) for m, _ in affordable):
            return
        raise PrivacyError(f"delta={delta:g} was given, but no Gaussian noise spending it is possible here (the "
                           f"budget's remaining delta is {self.ledger.remaining().delta:g}, and Laplace noise spends "
                           "no delta): give no delta for Laplace noise, or a delta that fits")


def _repeat_key(compiled: CompiledBatch, r: Request) -> str:
    """What makes two requests the same, so that the second is answered by the first's release: the
    statements (as compiled: spacing and case aside), their inline options, the spend and every answer
    option, and the workload they measure (which holds the public domains)."""
    spend = (r.epsilon, r.delta, r.rho, r.noise, r.std_error, statement_options(compiled))
    workload = compiled.workload.fingerprint() if compiled.terms else None
    shape = "integer" if r.integer else r.nonnegative  # the answers' form (a key made before integer was kept)
    return request_key([st.plan.sql for st in compiled.statements], spend, shape, r.confidence, r.objective, workload)


def _answers(compiled: CompiledBatch, frames: "list[pd.DataFrame]", release: Release) -> list[Answer]:
    """Each statement's Answer: its table, error columns after their answers, and which they are."""
    out = []
    for st, df in zip(compiled.statements, frames):
        df = ordered(st, df)
        measured = set(error_outputs(st.plan))
        errors = {o: error_names(st.plan, o) for o in st.plan.outputs if o in measured}  # in SELECT order
        out.append(Answer(st.plan.sql, df, release, errors, st.notes(df)))
    return out


def _check_rows(compiled: CompiledBatch, limit: int | None) -> None:
    """Refuse a statement whose answer may have more than ``limit`` rows (its groups)."""
    for i, st in enumerate(compiled.statements):
        if limit is not None and len(st.groups) > limit:
            raise ResourceLimitError(f"statement {i + 1} has {len(st.groups):,} groups, more rows than the {limit:,} "
                                     "a result may have here; filter or coarsen its GROUP BY")


def _check_options(r: Request) -> None:
    """Refuse malformed answer options before anything is planned or spent."""
    c = r.confidence
    if isinstance(c, bool) or not isinstance(c, numbers.Real) or not 0.0 < c < 1.0:
        raise ArgumentError(f"confidence must be a number in (0, 1), got {c!r}")
    for name in ("nonnegative", "integer"):
        if not isinstance(getattr(r, name), bool):
            raise ArgumentError(f"{name} must be True or False, got {getattr(r, name)!r}")
    if r.objective not in OBJECTIVES:
        raise ArgumentError(f"objective must be one of {OBJECTIVES}, got {r.objective!r:.80}")
