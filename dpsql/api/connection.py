"""The user-facing API: ``dpsql.connect`` and private queries on a DuckDB or Spark table.

>>> import duckdb, dpsql
>>> con = duckdb.connect()
>>> _ = con.execute("CREATE TABLE people AS SELECT (i % 2 = 0) AS adult, i % 3 AS kids FROM range(300) t(i)")
>>> db = dpsql.connect(con, schema={"table": "people", "columns": {
...     "adult": {"type": "boolean"}, "kids": {"type": "integer", "min": 0, "max": 2}}},
...     budget=dpsql.Budget(epsilon=1.0))
>>> res = db.query("SELECT kids, COUNT(*) AS n FROM people GROUP BY kids", epsilon=0.5)
>>> list(res.df.columns)
['kids', 'n', 'std_error', 'ci_low', 'ci_high']
>>> res.mechanism, db.spent().epsilon
('laplace', 0.5)

Each call compiles its SQL into one workload, selects a measurement strategy
for it with HDMM (data-independent, cached on disk), has the private kernel
(:mod:`dpsql.private.kernel`) record the spend and then measure it once with noise,
and reconstructs every answer by least squares with its standard error.
Nothing that fails before the kernel's ledger write (bad SQL or parameters,
an unaffordable request, a table or column that does not exist) spends
anything; a failure while the table is read keeps the charge.

How much a request spends, in the budget's currency:

* an ``(ε, δ)`` budget: ``epsilon=`` (and optionally ``delta=``) per call, or
  the statements' ``WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=…, delta=…)``,
  summed over a batch. Laplace noise spends ``(ε, 0)``; Gaussian noise spends
  ``(ε, δ)`` with ``δ`` defaulting to the budget's δ times ``ε / budget ε``.
* a ``ρ``-zCDP budget: ``rho=`` per call. Gaussian noise spends ``ρ``;
  Laplace noise at ``ε = √(2ρ)`` spends the same ``ρ`` (ε-DP implies
  ε²/2-zCDP).

``noise="laplace"`` or ``"gaussian"`` fixes the mechanism; by default both
are considered when the budget allows both, and the one with the lower
expected error for this workload is used.

The private table can live in DuckDB (a connection or a file) or in Apache
Spark (pass a ``SparkSession`` and the name of a table or temp view): only
the counting query runs there (:mod:`dpsql.private.backend`); the ledger, the noise
and the reconstruction stay in this process. What the analyst gets (results,
their relations, synthetic tables) lives on :attr:`Connection.released`, a
separate DuckDB database that holds released data only and has no access
to files (:mod:`dpsql.released`).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import warnings
from typing import TYPE_CHECKING, Any, Callable, Sequence

import duckdb
import numpy as np
from scipy.stats import norm
from sqlglot import exp

from dpsql.api.result import Explanation, Release, Result
from dpsql.errors import ArgumentError, BudgetExceededError, PrivacyError, UnsupportedSQLError
from dpsql.hdmm.cache import StrategyCache
from dpsql.hdmm.error_analysis import max_variance
from dpsql.hdmm.error_analysis import rmse as expected_rmse
from dpsql.hdmm.optimize import select
from dpsql.hdmm.optimize.selector import OBJECTIVES
from dpsql.hdmm.reconstruct import least_squares, nonnegative
from dpsql.hdmm.reduction import reduce_domain
from dpsql.hdmm.strategy import Strategy
from dpsql.limits import MAX_PUBLIC_ROWS
from dpsql.privacy import Gaussian, Laplace, NoiseModel
from dpsql.private.backend import Backend, backend_for, open_source, public_table, scans_python_object
from dpsql.private.budget import APPROX_DP, MIN_EPSILON, MIN_RHO, ZCDP, Budget, Cost
from dpsql.private.kernel import PrivateTable
from dpsql.private.ledger import Ledger
from dpsql.private.noise import UniformSource
from dpsql.released import ReleasedData
from dpsql.schema import Schema, load_schema, with_public_tables
from dpsql.sql.aggregates import QUANTILES, gradient, quantile_interval
from dpsql.sql.compile import Block, CompiledBatch, CompiledStatement, compile_batch, schema_attributes
from dpsql.sql.delta import partials
from dpsql.sql.parse import explained
from dpsql.sql.plan import Aggregate
from dpsql.sql.postprocess import postprocess

if TYPE_CHECKING:
    import pandas as pd

    from dpsql.hdmm.workload import Workload
    from dpsql.synth.synthesize import SyntheticTable

__all__ = ["Connection", "connect", "query", "batch"]

NOISE_FAMILIES = ("laplace", "gaussian")

_last: "Connection | None" = None


def connect(source: "duckdb.DuckDBPyConnection | str | os.PathLike | Backend | Any", table: str | None = None,
            schema: "Schema | dict | str | os.PathLike | None" = None, budget: Budget | None = None,
            ledger: "str | os.PathLike | None" = None, *, cache: "bool | str | os.PathLike" = True,
            progress: bool | None = None, source_of_noise: UniformSource | None = None,
            public_tables: Sequence[str] = ()) -> "Connection":
    """Open a private table for differentially private queries.

    ``source``: a DuckDB connection holding ``table``, a ``.duckdb`` database
    file (opened read-only), a CSV or Parquet file (read as ``table``), a
    pyspark ``SparkSession`` whose catalog holds ``table`` (a table or temp
    view; the counting query runs on Spark and only the counts come back),
    or any :class:`~dpsql.private.backend.Backend`.
    ``schema``: the table's public domain (a :class:`~dpsql.schema.Schema`,
    dict, or YAML/JSON path); queries name ``table``, which defaults to the
    schema's table name. ``budget``: the total privacy budget, required for a
    new ledger. ``ledger``: a file recording every spend across processes and
    restarts; ``None`` keeps the ledger in memory for this connection only.
    ``cache``: True for the default on-disk strategy cache, a directory, or
    False for none. ``progress``: show progress for long strategy selections
    (None: only when slow). ``source_of_noise``: a seeded uniform source for
    reproducible tests; it is not secure and must not be used for releases.
    ``public_tables``: names of tables in ``source`` that the owner declares
    public, so statements may join them as lookup tables (like the schema's
    ``public_tables:``). They are read in full, once, now (at most
    :data:`~dpsql.limits.MAX_PUBLIC_ROWS` rows each), and nothing read later
    from the source is public: only the owner can mark a table, here, because
    marking one publishes it.
    """
    global _last
    if schema is None:
        raise PrivacyError("connect needs the table's public schema (schema=...)")
    schema = load_schema(schema)
    name = table or schema.table
    if name != schema.table:
        schema = dataclasses.replace(schema, table=name)
    if isinstance(public_tables, str) or not all(isinstance(t, str) for t in public_tables):
        raise ArgumentError("public_tables must be a list of table names")
    if any(t.lower() == name.lower() for t in public_tables):
        raise ArgumentError(f"the private table {name!r} cannot be marked public")
    if ledger is not None and not isinstance(ledger, (str, os.PathLike)):
        raise ArgumentError(f"ledger must be a file path, or None to keep it in memory; got {type(ledger).__name__}")
    backend = open_source(source, name, schema)
    if scans_python_object(backend, name):
        warnings.warn(f"the private table {name!r} is a registered Python object (a DataFrame or Arrow table): "
                      "DuckDB types its object columns from a sample of rows, so one value after the sample can "
                      "fail every read or be converted into the domain; copy it into a table first "
                      "(CREATE TABLE ... AS SELECT * FROM the object)", stacklevel=2)
    if public_tables:
        schema = with_public_tables(schema, {t: public_table(backend, t, MAX_PUBLIC_ROWS) for t in public_tables})
    conn = Connection(backend, schema, Ledger(ledger, budget), cache=cache,
                      progress=progress, source_of_noise=source_of_noise)
    _last = conn
    return conn


class Connection:
    """A private table with a budget: ask it SQL, get noisy answers with error bars.

    ``con`` is where the private table lives: a DuckDB connection or a
    :class:`~dpsql.private.backend.Backend` (e.g. :class:`~dpsql.private.backend.SparkBackend`).
    Only the private kernel (:mod:`dpsql.private.kernel`) holds it; no public
    attribute of a Connection, a :class:`~dpsql.api.result.Result` or a
    synthetic table leads to it. Everything handed out lives on
    :attr:`released`, a separate, locked-down DuckDB database holding
    released data only (:mod:`dpsql.released`).
    """

    def __init__(self, con: "duckdb.DuckDBPyConnection | Backend", schema: Schema, ledger: Ledger, *,
                 cache: "bool | str | os.PathLike" = True, progress: bool | None = None,
                 source_of_noise: UniformSource | None = None) -> None:
        self.schema = schema
        self.ledger = ledger
        self._private = PrivateTable(backend_for(con), schema.table, schema, ledger, source_of_noise)
        self._released = ReleasedData()
        self._cache = None if cache is False else StrategyCache(None if cache is True else cache, ledger.path)
        self._progress = progress
        self._strategies: dict[tuple[str, str, str], Strategy] = {}

    @property
    def released(self) -> duckdb.DuckDBPyConnection:
        """The analyst's DuckDB: synthetic tables are registered here, results' relations live
        here, and any SQL over them is free. It holds released data only and cannot read files
        or the private table (:mod:`dpsql.released`)."""
        return self._released.con

    # -- budget -----------------------------------------------------------------------
    @property
    def budget(self) -> Budget:
        return self.ledger.budget

    def spent(self) -> Cost:
        """Everything recorded in the ledger so far (by any process)."""
        return self.ledger.spent()

    def remaining(self) -> Cost:
        return self.ledger.remaining()

    # -- queries ----------------------------------------------------------------------
    def query(self, sql: str, epsilon: float | None = None, delta: float | None = None, rho: float | None = None,
              noise: str | None = None, nonnegative: bool = False, confidence: float = 0.95,
              objective: str = "total", std_error: float | None = None) -> Result | Explanation:
        """Answer one statement privately (see :meth:`batch` for the arguments).

        ``EXPLAIN SELECT …`` returns :meth:`explain`'s :class:`Explanation` instead: nothing
        is read or spent."""
        inner = explained(sql)
        if inner is not None:
            if std_error is not None:
                raise ArgumentError("EXPLAIN shows the standard errors a spend gives: pass epsilon= or rho=, "
                                    "not std_error=")
            return self.explain(inner, epsilon, delta, rho, noise, objective)
        compiled = compile_batch(sql, self.schema)
        if len(compiled.statements) != 1:
            raise UnsupportedSQLError(f"query takes one statement, got {len(compiled.statements)}; use batch",
                                      "several statements")
        if std_error is not None:
            noise, epsilon, delta, rho = self._spend_for(compiled, std_error, epsilon, delta, rho, noise, objective)
        return self._answer(compiled, epsilon, delta, rho, noise, nonnegative, confidence, objective)[0]

    def batch(self, statements: "Sequence[str] | str", epsilon: float | None = None, delta: float | None = None,
              rho: float | None = None, noise: str | None = None, nonnegative: bool = False,
              confidence: float = 0.95, objective: str = "total", std_error: float | None = None) -> list[Result]:
        """Answer many statements from one jointly optimized measurement.

        ``statements``: a list of SQL texts or a text of ``;``-separated
        statements (a text is SQL, never a file name: a Connection reads no
        file). The spend (``epsilon``/``delta``
        or ``rho``) is for the whole batch. ``nonnegative=True`` returns
        non-negative, mutually consistent answers (biased; see
        :func:`dpsql.hdmm.reconstruct.nonnegative`). ``confidence`` sets the
        level of the ``ci_low``/``ci_high`` normal intervals. ``objective``:
        ``"total"`` picks the strategy (and noise) with the lowest expected RMSE
        over all answers, ``"max"`` the one whose least accurate answer is most
        accurate (the largest standard error is minimized: for tabulations
        where every published cell must meet an accuracy standard).
        ``std_error``, instead of ``epsilon`` or ``rho``: spend the least that
        gives every COUNT and SUM answer an expected standard error of at most
        this (they are known before measuring; see :meth:`explain`), with
        Laplace noise, or Gaussian under a zCDP budget or with ``noise="gaussian"``
        and a ``delta``.
        """
        compiled = compile_batch(statements, self.schema)
        if std_error is not None:
            noise, epsilon, delta, rho = self._spend_for(compiled, std_error, epsilon, delta, rho, noise, objective)
        return self._answer(compiled, epsilon, delta, rho, noise, nonnegative, confidence, objective)

    def explain(self, statements: "Sequence[str] | str", epsilon: float | None = None, delta: float | None = None,
                rho: float | None = None, noise: str | None = None, objective: str = "total") -> Explanation:
        """What :meth:`batch` with these arguments would do, reading no data and spending nothing.

        It shows the noise and its cost, the selected strategy and the expected
        RMSE, and per statement a table of its groups with each COUNT and SUM
        answer's expected standard error. These depend on the public schema,
        the SQL and the budget alone (that is why they can be known before
        measuring); an AVG's or a variance's standard error depends on the
        answers, and is NULL here. The error columns are named as a result's
        (``std_error`` for a statement's one aggregate, else ``n_std_error``...).
        The budget is not checked: the cost is shown, whether or not it fits;
        but like :meth:`batch`, it chooses among the noises whose cost fits
        when any does (Gaussian noise needs a delta that may be spent).

        >>> import duckdb, dpsql
        >>> con = duckdb.connect()
        >>> _ = con.execute("CREATE TABLE t AS SELECT range % 3 AS a FROM range(30)")
        >>> db = dpsql.connect(con, schema={"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 2}}},
        ...                    budget=dpsql.Budget(epsilon=1.0), cache=False, progress=False)
        >>> plan = db.explain("SELECT a, COUNT(*) AS n FROM t GROUP BY a", epsilon=0.5, noise="laplace")
        >>> plan.statements[0]["std_error"].round(3).tolist(), db.spent().epsilon
        ([2.828, 2.828, 2.828], 0.0)
        """
        if objective not in OBJECTIVES:
            raise ArgumentError(f"objective must be one of {OBJECTIVES}, got {objective!r:.80}")
        compiled = compile_batch(statements, self.schema)
        requested = self._noise_options(compiled, epsilon, delta, rho, noise)
        if not compiled.terms:
            empty = np.zeros(0)
            frames = compiled.tables(empty)
            return Explanation("none", Cost(0.0, 0.0, 0.0), "none", 0.0,
                               [df[[k.name for k in st.plan.keys]] for st, df in zip(compiled.statements, frames)])
        W = compiled.workload
        reduce_domain(W).workload.check_size()  # what the kernel counts: the values the queries tell apart
        model, cost, strategy = self._choose(W, self._affordable(requested) or requested, objective)
        plan = self._private.plan(strategy, model, attributes=compiled.attributes)
        se = plan.std * np.sqrt(np.concatenate(strategy.query_variances(W)))
        frames = []
        for st, df in zip(compiled.statements, compiled.tables(np.zeros(W.num_queries))):
            out = df[[k.name for k in st.plan.keys]].copy()
            aggregates = {a.name for a in st.plan.aggregates}
            for output in _error_outputs(st):  # the result's error columns; one measured block: a COUNT or SUM
                blocks = st.blocks_of(output) if output in aggregates else []
                out[_error_names(st, output)[0]] = (blocks[0].take(se, len(df)) if len(blocks) == 1
                                                    else np.full(len(df), np.nan))
            frames.append(out)
        rmse = self._private.rows_per_unit * expected_rmse(W, strategy, model)
        return Explanation(model.name, cost, strategy.operator, rmse, frames)

    def sql(self, query: str, epsilon: float | None = None, delta: float | None = None, rho: float | None = None,
            noise: str | None = None, nonnegative: bool = False, confidence: float = 0.95,
            objective: str = "total", std_error: float | None = None) -> duckdb.DuckDBPyRelation:
        """Like DuckDB's ``con.sql``: :meth:`query`'s answers as a relation on :attr:`released`
        (for ``EXPLAIN``, the statement's groups with their expected standard errors)."""
        self._released.check_open()  # where the answers go: refused before the spend, not after
        out = self.query(query, epsilon, delta, rho, noise, nonnegative, confidence, objective, std_error)
        return self._released.relation(out.statements[0]) if isinstance(out, Explanation) else out.relation

    def synthesize(self, method: str = "pgm", workload: Any = 2, epsilon: float | None = None,
                   delta: float | None = None, rho: float | None = None, rows: int | None = None,
                   name: str | None = None, seed: int | None = None, **options: Any) -> "SyntheticTable":
        """A private synthetic table, registered on :attr:`released` as ``name`` (a new name).

        ``method`` (default ``"pgm"``, the most accurate on the synthetic benchmark in
        the most settings, under every kind of budget):

        * ``"mwem"``: ε-DP multiplicative weights over a factored distribution
          (:mod:`dpsql.synth.mwem`; options ``rounds``, ``replays``, ``init``,
          ``average``); a ``delta`` it would not use is refused;
        * ``"dualquery"``: ε-DP, or (ε, δ)-DP with ``delta``, by DualQuery's
          theorems (:mod:`dpsql.synth.dualquery`; options ``eta`` or
          ``rounds``, not both, since the spend sets the other once the noisy
          row count is known; ``samples``, ``count_share``, ``oracle``,
          ``time_limit``);
        * ``"fem"``: zCDP-accounted FEM, converted to (ε, δ) with ``delta``
          (:mod:`dpsql.synth.fem`; options ``eps0``, ``rounds``, ``samples``,
          ``noise``, ``oracle``, ``time_limit``, ``processes``);
        * ``"pgm"``: the workload's marginals measured once with OPT_M's weights
          (Gaussian under ``rho`` or ``delta``, Laplace under a pure ``epsilon``) and a
          graphical model fitted to them (:mod:`dpsql.synth.pgm`; options ``iterations``,
          ``max_model_size``, ``sweeps``, ``measure``);
        * ``"aim"``: zCDP AIM, adaptive selection of the marginals to measure on the
          same model, its whole spend charged before the first read
          (:mod:`dpsql.synth.aim`; options ``rounds``, ``iterations``,
          ``max_model_size``, ``sweeps``).

        ``workload``: the marginals to preserve, as ``k`` (all k-way
        marginals), a list of tuples of column names (e.g. from
        :func:`dpsql.synth.random_marginals`), or SQL statements. The spend
        is ``epsilon`` (and ``delta``), or ``rho`` under a zCDP budget; it is
        checked against the budget before any data is read, and what the run
        actually spends (never more) is in the result and the ledger. ``rows``
        defaults to the noisy row count (MWEM, DualQuery, PGM, AIM) or the records FEM
        made, capped by :data:`dpsql.limits.MAX_SYNTHETIC_CELLS`. ``seed``
        drives only public randomness. Any SQL over the synthetic table is
        free post-processing. Every option, size and name is checked before
        the first draw: a refused request raises a :class:`dpsql.Error` and
        records nothing.
        """
        from dpsql.synth.synthesize import synthesize

        name = name or f"{self.schema.table}_synthetic"
        return synthesize(self._private, self._released, self.schema, schema_attributes(self.schema), method,
                          workload, self.budget, epsilon, delta, rho, rows, name, seed=seed,
                          progress=self._progress, options=options)

    def close(self) -> None:
        """Close the ledger and :attr:`released` (results keep their ``df``)."""
        self.ledger.close()
        self._released.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the pipeline -----------------------------------------------------------------
    def _answer(self, compiled: CompiledBatch, epsilon: float | None, delta: float | None, rho: float | None,
                noise: str | None, nonneg: bool, confidence: float, objective: str) -> list[Result]:
        if isinstance(confidence, bool) or not isinstance(confidence, numbers.Real) or not 0.0 < confidence < 1.0:
            raise ArgumentError(f"confidence must be a number in (0, 1), got {confidence!r}")
        if not isinstance(nonneg, bool):
            raise ArgumentError(f"nonnegative must be True or False, got {nonneg!r}")
        if objective not in OBJECTIVES:
            raise ArgumentError(f"objective must be one of {OBJECTIVES}, got {objective!r:.80}")
        requested = self._noise_options(compiled, epsilon, delta, rho, noise)
        if not compiled.terms:  # only group keys, or WHERE rules out every group: the public domain answers
            release = Release(mechanism="none", epsilon=0.0, delta=0.0, rho=0.0, rmse=0.0, operator="none",
                              queries=0, statements=len(compiled.statements), entry=-1)
            empty = np.zeros(0)
            frames = postprocess(compiled, empty, [_error_columns(st, empty, empty, 0.0, None)
                                                   for st in compiled.statements])
            return [Result(st.plan.sql, _ordered(st, df), release, self._released)
                    for st, df in zip(compiled.statements, frames)]
        W = compiled.workload
        k = self._private.rows_per_unit
        reduce_domain(W).workload.check_size()  # what the kernel counts: the values the queries tell apart
        affordable = self._affordable(requested)
        if not affordable:
            self.ledger.check(requested[0][1])  # raises BudgetExceededError, before any optimization
        model, cost, strategy = self._choose(W, affordable, objective)
        rmse = k * expected_rmse(W, strategy, model)
        description = ";\n".join(st.plan.sql for st in compiled.statements)
        m = self._private.measure(compiled.attributes, strategy, model, cost, description)
        answers = nonnegative(W, strategy, m.values) if nonneg else least_squares(W, strategy, m.values)
        se = m.noise_std * np.sqrt(np.concatenate(strategy.query_variances(W)))
        release = Release(mechanism=model.name, epsilon=cost.epsilon, delta=cost.delta, rho=cost.rho,
                          rmse=rmse, operator=strategy.operator, queries=W.num_queries,
                          statements=len(compiled.statements), entry=m.entry)
        z = float(norm.ppf(0.5 + confidence / 2.0))
        def covariance(a: int, b: int) -> np.ndarray:
            return m.noise_std**2 * strategy.cross_variances(W, a, b)

        frames = postprocess(compiled, answers, [_error_columns(st, answers, se, z, covariance)
                                                 for st in compiled.statements])
        return [Result(st.plan.sql, _ordered(st, df), release, self._released)
                for st, df in zip(compiled.statements, frames)]

    def _spend_for(self, compiled: CompiledBatch, target: float, epsilon: float | None, delta: float | None,
                   rho: float | None, noise: str | None, objective: str) -> tuple[str, float | None, float | None,
                                                                                  float | None]:
        """``(noise, epsilon, delta, rho)``: the least spend whose largest expected standard error
        of a COUNT or SUM answer is at most ``target``, from public values only.

        The strategy does not depend on the size of the spend (only on the noise family), and the
        noise's standard deviation falls as the spend grows, so a bisection on the spend finds it.
        """
        if isinstance(target, bool) or not isinstance(target, numbers.Real) or not 0.0 < target < math.inf:
            raise ArgumentError(f"std_error must be a positive finite number, got {target!r:.80}")
        if epsilon is not None or rho is not None:
            raise ArgumentError("give std_error, or epsilon or rho, not both")
        if _statement_options(compiled) is not None:
            raise ArgumentError("give std_error, or the statements' WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = ...), "
                                "not both")
        if noise is not None and noise not in NOISE_FAMILIES:
            raise PrivacyError(f"noise must be one of {NOISE_FAMILIES}, got {noise!r:.80}")
        zcdp = self.budget.currency == ZCDP
        noise = noise or ("gaussian" if zcdp else "laplace")
        if noise == "gaussian" and not zcdp and delta is None:
            raise ArgumentError("std_error with Gaussian noise under an (epsilon, delta) budget needs delta=")
        rows = [b for st in compiled.statements for a in st.plan.aggregates if a.visible and a.func in ("count", "sum")
                for b in [st.block(a.name)] if b.term is not None]
        if not rows:
            raise ArgumentError("std_error needs a COUNT or SUM to measure: the standard errors of other aggregates "
                                "depend on their answers")

        def model(spend: float) -> NoiseModel:
            if noise == "laplace":
                return Laplace(spend)
            return Gaussian(rho=spend) if zcdp else Gaussian(epsilon=spend, delta=delta)

        W = compiled.workload
        strategy = self._strategy(W, model(1.0), objective)
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
            return noise, None, None, hi
        return noise, hi, delta, None

    def _choose(self, W: Workload, options: Sequence[tuple[NoiseModel, Cost]],
                objective: str) -> tuple[NoiseModel, Cost, Strategy]:
        """The noise option, and its selected strategy, best under ``objective``."""
        scored = []
        for model, cost in options:
            strategy = self._strategy(W, model, objective)
            figure = expected_rmse(W, strategy, model) if objective == "total" else max_variance(W, strategy, model)
            scored.append((figure, model, cost, strategy))
        _, model, cost, strategy = min(scored, key=lambda o: o[0])
        return model, cost, strategy

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

    def _strategy(self, W: Workload, model: NoiseModel, objective: str) -> Strategy:
        key = (W.fingerprint(), model.name, objective)
        if key not in self._strategies:
            self._strategies[key] = select(W, model, cache=self._cache, progress=self._progress,
                                           objective=objective).strategy
        return self._strategies[key]

    def _noise_options(self, compiled: CompiledBatch, epsilon: float | None, delta: float | None, rho: float | None,
                       noise: str | None) -> list[tuple[NoiseModel, Cost]]:
        """The (noise model, cost) pairs this request allows, from public values only.

        The request is validated by :meth:`Budget.request` (types, finiteness,
        the floors, δ or ρ the budget cannot be charged with), so a refusal is a
        PrivacyError and nothing is spent. Laplace noise costs ``ε`` (``ρ = ε²/2``
        under zCDP); Gaussian noise costs ``(ε, δ)``, with ``δ`` defaulting to the
        budget's δ in proportion to ``ε``, or ``ρ``. A Gaussian option whose
        calibration is refused (e.g. δ below its floor) is dropped when the noise
        family is left to dpsql, and refused when it was asked for.
        """
        if noise is not None and noise not in NOISE_FAMILIES:
            raise PrivacyError(f"noise must be one of {NOISE_FAMILIES}, got {noise!r:.80}")
        budget = self.budget
        stated = _statement_options(compiled)
        if stated is not None:
            given = [f"{k}=" for k, v in (("epsilon", epsilon), ("rho", rho), ("delta", delta)) if v is not None
                     and (k != "delta" or stated[1] is not None)]
            if given:
                raise PrivacyError(f"the statements set their spend in WITH DIFFERENTIAL_PRIVACY OPTIONS, and this "
                                   f"call passes {' and '.join(given)} too: give the spend in one place")
            epsilon, delta = stated[0], stated[1] if stated[1] is not None else delta
        elif not compiled.terms and epsilon is None and rho is None:
            return []  # nothing to measure, nothing to spend
        requested = budget.request(epsilon=epsilon, delta=delta, rho=rho)
        families = [noise] if noise else list(NOISE_FAMILIES)
        out: list[tuple[NoiseModel, Cost]] = []
        for fam in families:
            if fam == "laplace":
                # under zCDP, epsilon as given (validated above), or the epsilon whose cost is rho
                eps = (requested.epsilon if budget.currency == APPROX_DP
                       else float(epsilon) if rho is None else math.sqrt(2.0) * math.sqrt(requested.rho))
                out.append((Laplace(eps), Cost.laplace(eps, budget)))
                continue
            if budget.currency == ZCDP:
                if rho is None:
                    if noise == "gaussian":
                        raise PrivacyError("Gaussian noise under a zCDP budget is given by rho=, not epsilon=")
                    continue
                model: NoiseModel = Gaussian(rho=requested.rho)
                cost = Cost.gaussian(budget, rho=requested.rho)
            else:
                gauss_delta = requested.delta if delta is not None else budget.delta * requested.epsilon / budget.epsilon
                if gauss_delta <= 0:
                    if noise == "gaussian":
                        raise PrivacyError("Gaussian noise needs delta > 0; " + (
                            "this request's delta is 0" if delta is not None else "this budget has delta = 0"))
                    continue
                model = Gaussian(epsilon=requested.epsilon, delta=gauss_delta)
                cost = Cost.gaussian(budget, epsilon=requested.epsilon, delta=gauss_delta)
            try:
                model.sigma(1.0)  # the calibration's floors depend on epsilon and delta only
            except PrivacyError:
                if noise == "gaussian":
                    raise
                continue
            out.append((model, cost))
        return out


def _statement_options(compiled: CompiledBatch) -> tuple[float, float | None] | None:
    """ε and δ (None if no statement sets one) summed over the statements' WITH DIFFERENTIAL_PRIVACY
    OPTIONS, or None when no statement sets ε; a PrivacyError when some do and others do not."""
    opts = [st.plan.options for st in compiled.statements]
    stated = [i + 1 for i, o in enumerate(opts) if "epsilon" in o]
    if not stated:
        return None
    if len(stated) < len(opts):
        missing = [i + 1 for i, o in enumerate(opts) if "epsilon" not in o]
        raise PrivacyError(f"statement{'s' if len(stated) > 1 else ''} {', '.join(map(str, stated))} of the batch "
                           f"set{'' if len(stated) > 1 else 's'} epsilon in WITH DIFFERENTIAL_PRIVACY OPTIONS, "
                           "and statement"
                           f"{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} "
                           f"{'do' if len(missing) > 1 else 'does'} not: give every "
                           "statement its epsilon, or none and pass epsilon= to the call")
    eps = math.fsum(float(o["epsilon"]) for o in opts)
    delta = math.fsum(float(o.get("delta", 0.0)) for o in opts) if any("delta" in o for o in opts) else None
    return eps, delta


def _error_outputs(st: CompiledStatement) -> list[str]:
    """The output columns that get a standard error: visible aggregates, and computed select
    items that read an aggregate."""
    aggregates = {a.name for a in st.plan.aggregates}
    computed = {name for name, e in st.plan.computed if any(c.name in aggregates for c in e.find_all(exp.Column))}
    return [a.name for a in st.plan.aggregates if a.visible] + [n for n in st.plan.outputs if n in computed]


def _error_names(st: CompiledStatement, output: str) -> tuple[str, str, str]:
    if _error_outputs(st) == [output]:
        return "std_error", "ci_low", "ci_high"
    return f"{output}_std_error", f"{output}_ci_low", f"{output}_ci_high"


#: An aggregate or expression as a function of measured queries: (block, ∂value/∂block answer) pairs.
_Gradient = list[tuple[Block, np.ndarray]]


def _aggregate_gradient(st: CompiledStatement, aggregate: Aggregate, answers: np.ndarray) -> _Gradient | None:
    """None for a quantile, which is not a differentiable function of its measured queries."""
    if aggregate.func in QUANTILES:
        return None
    blocks = st.blocks_of(aggregate.name)
    if len(blocks) == 1:
        return [(blocks[0], np.ones(len(st.groups)))]
    grad = gradient(aggregate.func, st.parts(aggregate.name, answers))
    return [(b, grad[b.measure]) for b in blocks]


def _delta_method(pairs: _Gradient, se: np.ndarray, covariance: Callable[[int, int], np.ndarray] | None,
                  size: int) -> np.ndarray:
    """``sqrt(g' Σ g)`` per group: the standard error of a function of measured queries with
    gradient ``pairs``, ``Σ`` their exact covariance (the variances ``se²`` and the
    least-squares answers' cross covariances). Two entries on one query add up."""
    merged: dict[tuple[int | None, int, int], tuple[Block, np.ndarray]] = {}
    for block, g in pairs:
        key = (block.term, block.start, block.stop)
        merged[key] = (block, merged[key][1] + g if key in merged else g)
    terms = list(merged.values())
    var = np.zeros(size)
    with np.errstate(invalid="ignore"):
        for i, (a, ga) in enumerate(terms):
            var = var + (ga * a.take(se, size)) ** 2
            for b, gb in terms[i + 1:]:
                if a.term is not None and b.term is not None and covariance is not None:
                    var = var + 2.0 * ga * gb * covariance(a.term, b.term) * a.scale * b.scale
    return np.sqrt(np.maximum(var, 0.0))


def _error_columns(st: CompiledStatement, answers: np.ndarray, se: np.ndarray, z: float,
                   covariance: Callable[[int, int], np.ndarray] | None) -> dict[str, np.ndarray]:
    """Standard error and confidence interval of every visible aggregate, and of every computed
    select item that reads aggregates, per group.

    COUNT and SUM use their exact closed-form variance. The others (AVG,
    variances, standard deviations, and expressions such as ``SUM(a) / COUNT(*)``
    or ``POWER(AVG(x), 2)``) are functions of several measured queries
    (:mod:`dpsql.sql.aggregates`, :mod:`dpsql.sql.delta`) and use the delta method,
    ``Var f ≈ Σ_ab ∂_a f ∂_b f Cov(a, b)``, with the exact covariances
    ``covariance(term_a, term_b)`` of the least-squares answers: a first-order
    approximation, good when the noise is small beside the values. An expression
    :mod:`dpsql.sql.delta` cannot differentiate gets NULL: no standard error
    rather than a wrong one.
    """
    out: dict[str, np.ndarray] = {}
    size = len(st.groups)
    grads = {a.name: _aggregate_gradient(st, a, answers) for a in st.plan.aggregates}
    values = {a.name: st.values(a.name, answers) for a in st.plan.aggregates}
    for agg in st.plan.aggregates:
        if not agg.visible:
            continue
        name, lo, hi = _error_names(st, agg.name)
        if agg.func in QUANTILES and not st.measured(agg.name):  # NULL, exactly
            out[name] = out[lo] = out[hi] = np.full(size, np.nan)
            continue
        if agg.func in QUANTILES:  # an interval from the CDF's error band, no standard error
            parts = st.parts(agg.name, answers)
            spread = {b.measure: b.take(se, size) for b in st.blocks_of(agg.name)}
            out[name] = np.full(size, np.nan)
            out[lo], out[hi] = quantile_interval(agg.func, agg.quantile, agg.descending,
                                                 np.array(st.thresholds[agg.name]), parts, spread, z)
            continue
        err = _delta_method(grads[agg.name], se, covariance, size)
        err[np.isnan(values[agg.name])] = np.nan  # a NULL answer has no standard error
        out[name], out[lo], out[hi] = err, values[agg.name] - z * err, values[agg.name] + z * err
    computed = dict(st.plan.computed)
    columns = {**values, **{k.name: np.array([g[i] for g in st.groups]) for i, k in enumerate(st.plan.keys)}}
    for output in _error_outputs(st):
        if output not in computed:
            continue
        dual = partials(computed[output], columns, set(grads))
        name, lo, hi = _error_names(st, output)
        if dual is None or any(grads[a] is None for a in dual[1]):
            out[name] = out[lo] = out[hi] = np.full(size, np.nan)
            continue
        value, d = dual
        pairs = [(b, g * d[a]) for a in d for b, g in grads[a]]
        err = _delta_method(pairs, se, covariance, size)
        err[np.isnan(value)] = np.nan
        out[name], out[lo], out[hi] = err, value - z * err, value + z * err
    return out


def _ordered(st: CompiledStatement, df: pd.DataFrame) -> pd.DataFrame:
    """Each aggregate's and computed item's error columns right after it."""
    order = []
    errors = set(_error_outputs(st))
    for col in st.plan.outputs:
        order.append(col)
        if col in errors:
            order.extend(c for c in _error_names(st, col) if c in df.columns)
    return df[order + [c for c in df.columns if c not in order]].reset_index(drop=True)


def _current() -> Connection:
    if _last is None:
        raise PrivacyError("no open dpsql connection: call dpsql.connect(...) first")
    return _last


def query(sql: str, **kwargs: Any) -> Result:
    """:meth:`Connection.query` on the most recently opened connection."""
    return _current().query(sql, **kwargs)


def batch(statements: "Sequence[str] | str", **kwargs: Any) -> list[Result]:
    """:meth:`Connection.batch` on the most recently opened connection."""
    return _current().batch(statements, **kwargs)
