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

import itertools
import math
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from tqdm.auto import tqdm

from ..budget import Budget, Cost
from ..errors import PrivacyError, WorkloadError
from ..kernel import PrivateTable
from ..matrix import is_total
from ..privacy import Laplace
from ..sql.compile import Attribute, compile_batch
from .accounting import (dualquery_epsilon, dualquery_rho, exponential_rho, fem_rounds, fem_rounds_zcdp,
                         largest_integer, zcdp_epsilon, zcdp_rho)
from .cells import MarginalCells, marginal_name
from .dualquery import dualquery
from .fem import PUBLISHED_EPS0_FACTOR, fem
from .game import GameResult
from .mwem import marginal_strategy, mwem, mwem_steps

if TYPE_CHECKING:
    import duckdb
    import pandas as pd

    from ..released import ReleasedData
    from ..schema import Schema

METHODS = ("mwem", "dualquery", "fem")


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

    @property
    def relation(self) -> "duckdb.DuckDBPyRelation":
        """The table as a relation on the analyst's DuckDB (released data only)."""
        return self._released.table(self.name)

    def __repr__(self) -> str:
        spend = f"rho={self.rho:g}" if self.rho else f"epsilon={self.epsilon:g}, delta={self.delta:g}"
        made = f"; records by {', '.join(f'{k} {v:,}' for k, v in self.oracle.items())}" if self.oracle else ""
        return (f"-- synthetic table {self.name!r}: {len(self.df):,} rows by {self.method} ({spend}{made})\n"
                f"{self.report.to_string(index=False, float_format=lambda v: f'{v:,.2f}')}")


def workload_marginals(workload: "int | Sequence[Sequence[str]] | str | Sequence[str]", schema: "Schema",
                       attributes: Sequence[Attribute]) -> list[tuple[int, ...]]:
    """Marginals (sorted attribute positions) from a workload description.

    An int ``k``: every k-way marginal. A list of tuples of column names
    (or merged attribute names): those marginals (a merged column brings its
    whole attribute). SQL (a
    text or a list of texts): the attributes each compiled query term does
    not sum out.
    """
    position = {c: i for i, a in enumerate(attributes) for c in a.columns}
    if isinstance(workload, int):
        if not 1 <= workload <= len(attributes):
            raise WorkloadError(f"a {workload}-way workload needs 1 <= k <= {len(attributes)} attributes")
        return list(itertools.combinations(range(len(attributes)), workload))
    if isinstance(workload, str) or (workload and all(isinstance(w, str) for w in workload)):
        batch = compile_batch(workload, schema)
        if tuple(a.columns for a in batch.attributes) != tuple(a.columns for a in attributes):
            raise WorkloadError("these statements couple columns across attributes; synthesize over them "
                                "needs the schema's merge section to declare those columns together")
        out = []
        for _, factors in batch.terms:
            kept = tuple(i for i, f in enumerate(factors) if not is_total(f))
            if kept and kept not in out:
                out.append(kept)
        return out
    by_attribute = {a.name.lower(): i for i, a in enumerate(attributes)}
    out = []
    for names in workload:
        try:
            kept = tuple(sorted({by_attribute[c.lower()] if c.lower() in by_attribute
                                 else position[schema.column(c).name] for c in names}))
        except (AttributeError, KeyError):
            raise WorkloadError(f"unknown column in marginal {tuple(names)!r}") from None
        if kept not in out:
            out.append(kept)
    return out


def decode(records: np.ndarray, attributes: Sequence[Attribute], schema: "Schema") -> "pd.DataFrame":
    """Domain-index records back to column values (labels; None is NULL), in schema column order."""
    import pandas as pd

    data = {}
    for a, attr in enumerate(attributes):
        idx = np.unravel_index(records[:, a], attr.sizes) if len(attr.columns) > 1 else (records[:, a],)
        for col_name, col_idx in zip(attr.columns, idx):
            labels = schema.column(col_name).labels
            data[col_name] = pd.Series(np.asarray(labels, dtype=object)[col_idx])
    return pd.DataFrame({c.name: data[c.name] for c in schema.columns})


def synthesize(private: PrivateTable, released: "ReleasedData", schema: "Schema",
               attributes: Sequence[Attribute], method: str, workload, budget: "Budget",
               epsilon: float | None, delta: float | None, rho: float | None, rows: int | None, name: str,
               seed: int | None = None, progress: bool | None = None, **options) -> SyntheticTable:
    """Learn privately with ``method``, spending ``epsilon`` (and ``delta``) or
    ``rho`` in ``budget``'s currency, sample ``rows`` rows and register them as
    table ``name`` on ``released``, the analyst's DuckDB. ``name`` must be new
    there and on the private table's connection (it can never replace the
    private table). The whole spend is checked against the budget before any
    data is read. ``options`` go to the method (see :data:`OPTIONS`)."""
    if method not in METHODS:
        raise WorkloadError(f"unknown synthesis method {method!r}; choose from {METHODS}")
    unknown = set(options) - set(OPTIONS[method])
    if unknown:
        raise WorkloadError(f"{method} takes no option {', '.join(sorted(unknown))}; "
                            f"its options are {', '.join(OPTIONS[method])}")
    total = _requested(budget, epsilon, delta, rho)
    private.check(total)
    if not isinstance(name, str) or not name:
        raise WorkloadError(f"the synthetic table's name must be a nonempty string, got {name!r}")
    if released.has(name) or private.has_table(name):
        raise WorkloadError(f"a table or view named {name!r} already exists; choose a new name for the "
                            "synthetic table (it never replaces an existing one)")
    marginals = workload_marginals(workload, schema, attributes)
    bar = tqdm(desc=f"[dpsql] {method}", unit="round", file=sys.stderr, leave=False,
               disable=progress is False, delay=0 if progress else 2.0)
    rng = np.random.default_rng(seed)
    try:
        if method == "mwem":
            steps = mwem_steps(options.get("rounds", 10), options.get("init", "uniform"))
            step_eps = math.sqrt(2.0 * total.rho / steps) if budget.rho is not None else total.epsilon / steps
            bar.total = options.get("rounds", 10)
            learned = mwem(private, attributes, marginals, step_eps, Cost.laplace(step_eps, budget),
                           progress=_advance(bar), **options)
            n = int(round(learned.distribution.total)) if rows is None else _rows(rows)
            records = learned.distribution.sample(n, rng)
            report, oracle = _report(learned, records, attributes, n), {}
        else:
            run = _dualquery if method == "dualquery" else _fem
            learned, default_rows, total = run(private, attributes, marginals, budget, total, bar, seed, options)
            n = default_rows if rows is None else _rows(rows)
            records = learned.records if n == len(learned.records) and rows is None \
                else learned.records[rng.integers(0, len(learned.records), size=n)]
            report, oracle = _game_report(learned, marginals, attributes), learned.oracle_summary()
    finally:
        bar.close()
    df = decode(records, attributes, schema)
    released.register(name, df)
    return SyntheticTable(name=name, df=df, method=method, epsilon=total.epsilon, delta=total.delta,
                          rho=total.rho, report=report, records=records, oracle=oracle,
                          _released=released)


#: The options each method takes (besides the spend, ``rows`` and ``seed``).
OPTIONS = {
    "mwem": ("rounds", "replays", "init", "average"),
    "dualquery": ("eta", "rounds", "samples", "count_share", "oracle", "time_limit"),
    "fem": ("eps0", "rounds", "samples", "noise", "oracle", "time_limit", "processes", "bounded_range"),
}


def _advance(bar: tqdm) -> Callable[[int], None]:
    """A progress callback taking the number of rounds done so far."""
    return lambda done: bar.update(done - bar.n)


def _rows(rows: int) -> int:
    if int(rows) < 0:
        raise WorkloadError("rows must be nonnegative")
    return int(rows)


def _requested(budget: "Budget", epsilon: float | None, delta: float | None, rho: float | None) -> Cost:
    """The most a run may spend, in the budget's currency (validated, nothing read)."""
    if budget.rho is not None:
        if rho is None:
            raise PrivacyError("say how much to spend: rho=... (this ledger's budget is zCDP)")
        if epsilon is not None or delta is not None:
            raise PrivacyError("this ledger's budget is zCDP: spend rho=..., not epsilon or delta")
        return Cost.gaussian(budget, rho=rho)
    if rho is not None:
        raise PrivacyError(f"this ledger's budget is {budget}: spend epsilon=... (and delta=...), not rho")
    if epsilon is None:
        raise PrivacyError("say how much to spend: epsilon=...")
    if not delta:
        return Cost.laplace(epsilon, budget)
    return Cost.gaussian(budget, epsilon=epsilon, delta=delta)


def _dualquery(private: PrivateTable, attributes, marginals, budget: "Budget", total: Cost, bar, seed, options):
    """DualQuery within ``total``: a noisy row count (``count_share`` of the
    spend; the formulas' public ``n``), then the most rounds (or, given
    ``rounds``, the most samples per round) the rest allows."""
    eta = float(options.get("eta", 0.4))
    share = float(options.get("count_share", 0.05))
    if not 0.0 < share < 1.0:
        raise WorkloadError(f"count_share must be in (0, 1), got {share!r}")
    zcdp = budget.rho is not None
    count_eps = math.sqrt(2.0 * share * total.rho) if zcdp else share * total.epsilon
    count = private.measure(attributes, marginal_strategy([a.size for a in attributes], ()), Laplace(count_eps),
                            Cost.laplace(count_eps, budget), "DualQuery noisy row count").values[0]
    n = max(float(count), 1.0) / private.rows_per_unit
    rest_rho, rest_eps, delta = (1.0 - share) * total.rho, (1.0 - share) * total.epsilon, total.delta

    def fits(rounds: int, samples: int) -> bool:
        if zcdp:
            return dualquery_rho(eta, rounds, samples, n) <= rest_rho
        return dualquery_epsilon(eta, rounds, samples, n, delta) <= rest_eps

    rounds, samples = options.get("rounds"), options.get("samples")
    if rounds is None:
        samples = int(samples or 35)
        rounds = largest_integer(lambda t: fits(t, samples), "DualQuery rounds")
    elif samples is None:
        samples = largest_integer(lambda s: fits(int(rounds), s), "DualQuery samples per round")
    rounds, samples = int(rounds), int(samples)
    if not fits(rounds, samples):
        raise PrivacyError(f"DualQuery with eta={eta}, rounds={rounds}, samples={samples} costs more than "
                           f"the {budget.describe(total)} asked for")
    cost = Cost(rho=dualquery_rho(eta, rounds, samples, n)) if zcdp else \
        Cost(epsilon=dualquery_epsilon(eta, rounds, samples, n, delta), delta=delta)
    reservation = private.reserve(cost, f"DualQuery: eta={eta}, T={rounds}, s={samples}, n={n!r}",
                                  "dualquery")
    bar.total = rounds
    try:
        learned = dualquery(private, attributes, marginals, eta=eta, rounds=rounds, samples=samples, n=n,
                            reservation=reservation, oracle=options.get("oracle", "auto"),
                            time_limit=float(options.get("time_limit", 10.0)), seed=seed, progress=_advance(bar))
    finally:
        reservation.close()
    return learned, int(round(n * private.rows_per_unit)), Cost.laplace(count_eps, budget) + cost


def _fem(private: PrivateTable, attributes, marginals, budget: "Budget", total: Cost, bar, seed, options):
    """FEM within ``total``: ``eps0`` per selection (default ``0.008·√ε``, the
    published ADULT setting; ``√ε`` is ``(2ρ)^{1/4}`` under zCDP) and the most
    rounds that fit, or the largest ``eps0`` that fits given ``rounds``.
    ``bounded_range=False`` accounts each selection as ``ε₀²/2``-zCDP, as
    the paper did, instead of the exponential mechanism's ``ε₀²/8``."""
    tight = bool(options.get("bounded_range", True))
    zcdp = budget.rho is not None
    rho = total.rho if zcdp else (zcdp_rho(total.epsilon, total.delta) if total.delta else None)
    rounds, eps0 = options.get("rounds"), options.get("eps0")
    if rounds is not None and eps0 is None:  # exponential_rho(eps0) = rho / rounds, rounded down
        eps0 = (1.0 - 1e-12) * (math.sqrt((8.0 if tight else 2.0) * rho / int(rounds)) if rho is not None
                                else total.epsilon / int(rounds))
    if eps0 is None:
        eps0 = PUBLISHED_EPS0_FACTOR * math.sqrt(math.sqrt(2.0 * total.rho) if zcdp else total.epsilon)
    eps0 = float(eps0)
    per_round = exponential_rho(eps0, tight)
    if rounds is None:
        rounds = fem_rounds_zcdp(rho, eps0, tight) if zcdp else fem_rounds(total.epsilon, total.delta, eps0, tight)
    rounds = int(rounds)
    if zcdp:
        cost = Cost(rho=rounds * per_round)
    elif total.delta:
        cost = Cost(epsilon=zcdp_epsilon(rounds * per_round, total.delta), delta=total.delta)
    else:
        cost = Cost(epsilon=rounds * eps0)
    if rounds < 1 or not _within(cost, total):
        raise PrivacyError(f"FEM with eps0={eps0:g} and {rounds} rounds costs more than the "
                           f"{budget.describe(total)} asked for")
    reservation = private.reserve(cost, f"FEM: eps0={eps0:g}, T={rounds}", "fem")
    bar.total = rounds
    kwargs = {k: options[k] for k in ("samples", "noise", "oracle", "time_limit", "processes") if k in options}
    try:
        learned = fem(private, attributes, marginals, eps0=eps0, rounds=rounds, reservation=reservation,
                      seed=seed, progress=_advance(bar), **kwargs)
    finally:
        reservation.close()
    return learned, len(learned.records), cost


def _within(cost: Cost, limit: Cost) -> bool:
    """Whether ``cost`` is within ``limit`` in every component (up to float rounding)."""
    return all(getattr(cost, f) <= getattr(limit, f) * (1 + 1e-12) for f in ("epsilon", "delta", "rho"))


def _game_report(learned: GameResult, marginals, attributes: Sequence[Attribute]) -> "pd.DataFrame":
    """Per workload marginal: how often the private selections picked one of its
    cells (released numbers only)."""
    import pandas as pd

    cells = MarginalCells([a.size for a in attributes], marginals)
    picked = np.bincount([cells.locate(j)[0] for j, _ in learned.selected], minlength=len(marginals))
    return pd.DataFrame({"marginal": [marginal_name(attributes, m) for m in marginals],
                         "cells": np.diff(cells.offsets), "times_selected": picked})


def _report(result, records: np.ndarray, attributes: Sequence[Attribute], rows: int) -> "pd.DataFrame":
    """Synthetic counts against each noisy measurement (released numbers only)."""
    import pandas as pd

    domain = [a.size for a in attributes]
    scale = rows / max(result.distribution.total, 1e-12)
    out = []
    for subset, measured in result.measurements:
        synth = MarginalCells(domain, [subset]).counts(records) / scale
        err = np.abs(synth - measured)
        out.append({"marginal": marginal_name(attributes, subset), "cells": len(measured),
                    "max_abs_error_vs_noisy": float(err.max()), "mean_abs_error_vs_noisy": float(err.mean())})
    return pd.DataFrame(out)
