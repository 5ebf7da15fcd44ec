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

import os
from typing import TYPE_CHECKING, Any, Sequence

import duckdb

from dpsql.api.result import Explanation, Result
from dpsql.engine.answer import Answer
from dpsql.engine.dataset import Dataset
from dpsql.engine.engine import Request
from dpsql.errors import PrivacyError
from dpsql.owner.validate import ValidationReport, owner_report
from dpsql.private.backend import Backend, opened_by_dpsql
from dpsql.private.budget import Budget, Cost
from dpsql.private.noise import UniformSource
from dpsql.released import ReleasedData
from dpsql.schema import Schema
from dpsql.sql.parse import read_dialect

if TYPE_CHECKING:
    from dpsql.synth.synthesize import SyntheticTable

__all__ = ["Connection", "connect", "query", "batch"]

_last: "Connection | None" = None


def connect(source: "duckdb.DuckDBPyConnection | str | os.PathLike | Backend | Any", table: str | None = None,
            schema: "Schema | dict | str | os.PathLike | None" = None, budget: Budget | None = None,
            ledger: "str | os.PathLike | None" = None, *, cache: "bool | str | os.PathLike" = True,
            progress: bool | None = None, source_of_noise: UniformSource | None = None,
            public_tables: Sequence[str] = (), dialect: str | None = None,
            validate: bool | None = None, snapshot: bool | None = None) -> "Connection":
    """Open a private table for differentially private queries.

    ``source``: a DuckDB connection holding ``table``, a ``.duckdb`` database
    file (opened read-only), a CSV or Parquet file (read as ``table``), a
    :class:`dpsql.CSV` (a text file without a header, values to trim), a pandas
    or Polars DataFrame or an Arrow table (copied), a pyspark ``SparkSession``
    whose catalog holds ``table`` (a table or temp view; the counting query
    runs on Spark and only the counts come back), or any :class:`~dpsql.private.backend.Backend`.
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
    ``validate``: count, for the owner, the rows outside the schema's domains
    (:func:`dpsql.owner.validate.owner_report`): a warning when there are any,
    a refusal when no row is left, the report on :attr:`Connection.validation`.
    None (the default) does it for the sources dpsql reads itself (CSV,
    Parquet, data frames), not for a database, which may be large. Whatever
    ``validate`` is, a table lacking a declared column, or with a column whose
    SQL type holds none of its domain, is refused.
    ``snapshot``: validate and index the table once, now, into small-integer columns on the
    owner's connection (:func:`~dpsql.private.measure.take_snapshot`), so that each measurement
    is a plain ``GROUP BY`` of them; rows the owner changes in the table afterwards are not seen.
    None (the default) takes one for the sources dpsql opens itself (files), whose rows nobody
    else changes; for a table in the owner's own DuckDB connection, give True when it is fixed.
    """
    global _last
    check = opened_by_dpsql(source) if validate is None else validate
    dataset = Dataset.open(source, table, schema, budget, ledger, cache=cache, progress=progress,
                           source_of_noise=source_of_noise, public_tables=public_tables,
                           owner_check=owner_report if check else None, snapshot=snapshot)
    conn = Connection(dataset, dialect)
    _last = conn
    return conn


class Connection:
    """A private table with a budget: ask it SQL, get noisy answers with error bars.

    ``dataset`` is the owner's opened table (:class:`~dpsql.engine.dataset.Dataset`);
    the connection translates Python calls into the engine's requests
    (:mod:`dpsql.engine`), which plans, spends and answers them.
    Only the private kernel (:mod:`dpsql.private.kernel`) holds the table; no public
    attribute of a Connection, a :class:`~dpsql.api.result.Result` or a
    synthetic table leads to it. Everything handed out lives on
    :attr:`released`, a separate, locked-down DuckDB database holding
    released data only (:mod:`dpsql.released`).
    """

    def __init__(self, dataset: Dataset, dialect: str | None = None) -> None:
        #: the SQL dialect statements are written in by default (sqlglot's name; None: DuckDB's)
        self.dialect = None if dialect is None else read_dialect(dialect)
        self.schema = dataset.schema
        self.ledger = dataset.ledger
        #: the owner's report of rows outside the domains, when ``connect`` validated (never released)
        self.validation: ValidationReport | None = dataset.validation
        self._engine = dataset.engine()
        self._released = ReleasedData()

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
              objective: str = "total", std_error: float | None = None, *,
              dialect: str | None = None, integer: bool = False) -> Result | Explanation:
        """Answer one statement privately (see :meth:`batch` for the arguments).

        ``EXPLAIN SELECT …`` returns :meth:`explain`'s :class:`Explanation` instead: nothing
        is read or spent."""
        return self._run(Request(sql, epsilon, delta, rho, noise, nonnegative, confidence, objective, std_error,
                                 single=True, dialect=dialect or self.dialect, integer=integer))

    def batch(self, statements: "Sequence[str] | str", epsilon: float | None = None, delta: float | None = None,
              rho: float | None = None, noise: str | None = None, nonnegative: bool = False,
              confidence: float = 0.95, objective: str = "total", std_error: float | None = None, *,
              dialect: str | None = None, integer: bool = False) -> list[Result]:
        """Answer many statements from one jointly optimized measurement.

        ``statements``: a list of SQL texts or a text of ``;``-separated
        statements (a text is SQL, never a file name: a Connection reads no
        file). The spend (``epsilon``/``delta``
        or ``rho``) is for the whole batch. ``nonnegative=True`` returns
        non-negative, mutually consistent answers (biased; see
        :func:`dpsql.hdmm.reconstruct.nonnegative`); ``integer=True`` also makes
        them integers: every answer is read from one non-negative integer count per
        cell of the domain (for a hierarchy, TopDown's tables), so COUNTs are
        non-negative integers that add up. ``confidence`` sets the
        level of the ``ci_low``/``ci_high`` normal intervals. ``objective``:
        ``"total"`` picks the strategy (and noise) with the lowest expected RMSE
        over all answers, a SUM's in units of its bound (the power of two at or
        above it, so that a SUM of pay does not crowd out the COUNT of an AVG),
        ``"max"`` the one whose least accurate answer is most
        accurate (the largest standard error is minimized: for tabulations
        where every published cell must meet an accuracy standard).
        ``std_error``, instead of ``epsilon`` or ``rho``: spend the least that
        gives every COUNT and SUM answer an expected standard error of at most
        this (they are known before measuring; see :meth:`explain`), with
        Laplace noise, or Gaussian under a zCDP budget or with ``noise="gaussian"``
        and a ``delta``. A ``delta`` that no affordable Gaussian noise would spend
        is refused rather than dropped. ``dialect`` (default: the connection's) reads the
        statements in another SQL dialect (``"postgres"``, ``"bigquery"``, ``"tsql"``,
        ``"spark"``...), transpiled to DuckDB's; refusals point into the text as written.
        """
        return self._run(Request(statements, epsilon, delta, rho, noise, nonnegative, confidence, objective,
                                 std_error, dialect=dialect or self.dialect, integer=integer))

    def explain(self, statements: "Sequence[str] | str", epsilon: float | None = None, delta: float | None = None,
                rho: float | None = None, noise: str | None = None, objective: str = "total",
                std_error: float | None = None, *, dialect: str | None = None) -> Explanation:
        """What :meth:`batch` with these arguments would do, reading no data and spending nothing.

        It shows the noise and its cost, the selected strategy and the expected
        RMSE, and per statement a table of its groups with each COUNT and SUM
        answer's expected standard error. These depend on the public schema,
        the SQL and the budget alone (that is why they can be known before
        measuring); an AVG's or a variance's standard error depends on the
        answers, and is NULL here. The error columns are named as a result's
        (``std_error`` for a statement's one aggregate, else ``n_std_error``...).
        With ``std_error=`` instead of a spend, it shows the least spend that
        gives every COUNT and SUM that standard error: what an accuracy costs,
        known before anything is spent. The budget is not checked: the cost is
        shown, whether or not it fits; but like :meth:`batch`, it chooses among
        the noises whose cost fits when any does (Gaussian noise needs a delta
        that may be spent).

        >>> import duckdb, dpsql
        >>> con = duckdb.connect()
        >>> _ = con.execute("CREATE TABLE t AS SELECT range % 3 AS a FROM range(30)")
        >>> db = dpsql.connect(con, schema={"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 2}}},
        ...                    budget=dpsql.Budget(epsilon=1.0), cache=False, progress=False)
        >>> plan = db.explain("SELECT a, COUNT(*) AS n FROM t GROUP BY a", epsilon=0.5, noise="laplace")
        >>> plan.statements[0]["std_error"].round(3).tolist(), db.spent().epsilon
        ([2.828, 2.828, 2.828], 0.0)
        >>> db.explain("SELECT a, COUNT(*) AS n FROM t GROUP BY a", std_error=5.0).cost.epsilon  # doctest: +ELLIPSIS
        0.2828...
        """
        return self._run(Request(statements, epsilon, delta, rho, noise, objective=objective, std_error=std_error,
                                 explain=True, dialect=dialect or self.dialect))

    def _run(self, request: Request) -> "list[Result] | Result | Explanation":
        """The engine's answer to ``request`` as Results on :attr:`released`."""
        out = self._engine.run(request)
        if isinstance(out, Explanation):
            return out
        results = [self._result(a) for a in out]
        return results[0] if request.single else results

    def _result(self, answer: Answer) -> Result:
        return Result(answer.sql, answer.df, answer.release, self._released, answer.errors, answer.notes)

    def sql(self, query: str, epsilon: float | None = None, delta: float | None = None, rho: float | None = None,
            noise: str | None = None, nonnegative: bool = False, confidence: float = 0.95,
            objective: str = "total", std_error: float | None = None, *,
            dialect: str | None = None, integer: bool = False) -> duckdb.DuckDBPyRelation:
        """Like DuckDB's ``con.sql``: :meth:`query`'s answers as a relation on :attr:`released`
        (for ``EXPLAIN``, the statement's groups with their expected standard errors)."""
        self._released.check_open()  # where the answers go: refused before the spend, not after
        out = self.query(query, epsilon, delta, rho, noise, nonnegative, confidence, objective, std_error,
                         dialect=dialect, integer=integer)
        return self._released.relation(out.statements[0]) if isinstance(out, Explanation) else out.relation

    def synthesize(self, method: str = "pgm", workload: Any = None, epsilon: float | None = None,
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
          ``count_share``, ``noise``, ``oracle``, ``time_limit``, ``processes``);
        * ``"pgm"``: the workload's marginals measured once with OPT_M's weights
          (Gaussian under ``rho`` or ``delta``, Laplace under a pure ``epsilon``) and a
          graphical model fitted to them (:mod:`dpsql.synth.pgm`; options ``iterations``,
          ``max_model_size``, ``sweeps``, ``measure``, ``adaptive``); under Gaussian noise,
          when the marginals are too large for one model once the one-way counts have
          compressed the domain, AIM's rounds select among them instead (``adaptive=False``:
          measured all the same);
        * ``"aim"``: zCDP AIM, adaptive selection of the marginals to measure on the
          same model, its whole spend charged before the first read
          (:mod:`dpsql.synth.aim`; options ``rounds``, ``iterations``,
          ``max_model_size``, ``sweeps``);
        * ``"mst"``: zCDP MST, a spanning tree of the workload's pairs picked privately,
          then measured, on the same model (:mod:`dpsql.synth.mst`; options
          ``iterations``, ``max_model_size``, ``sweeps``, ``compress``).

        ``workload``: the marginals to preserve (default: every 3-way marginal as AIM's target;
        under a zCDP or ``(ε, δ)`` spend ``"pgm"`` measures them all when one model of at most
        :data:`~dpsql.synth.pgm.GREEDY_CELLS` cells holds every attribute, else selects them
        adaptively, as ``"aim"``, or, on a table too wide for aim's rounds, picks a spanning
        tree of pairs, as ``"mst"``), as ``k`` (all k-way
        marginals), a list of tuples of column names (e.g. from
        :func:`dpsql.synth.random_marginals`), or SQL statements. The spend
        is ``epsilon`` (and ``delta``), or ``rho`` under a zCDP budget; it is
        checked against the budget before any data is read, and what the run
        actually spends (never more) is in the result and the ledger. ``rows``
        defaults to the noisy row count (FEM and DualQuery spend ``count_share`` of the
        request on it), capped by :data:`dpsql.limits.MAX_SYNTHETIC_CELLS`. ``seed``
        drives only public randomness. Any SQL over the synthetic table is
        free post-processing. Every option, size and name is checked before
        the first draw: a refused request raises a :class:`dpsql.Error` and
        records nothing.
        """
        return self._engine.synthesize(self._released, method, workload, epsilon, delta, rho, rows, name, seed,
                                       options)

    def close(self) -> None:
        """Close the ledger and :attr:`released` (results keep their ``df``)."""
        self.ledger.close()
        self._released.close()

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
