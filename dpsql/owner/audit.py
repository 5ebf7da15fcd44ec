"""A statistical privacy audit: lower bounds on the privacy loss of released mechanisms.

A mechanism ``M`` is ``(ε, δ)``-DP when for every pair of neighbouring tables
``D``, ``D'`` and every event ``E``, ``P[M(D) ∈ E] ≤ e^ε P[M(D') ∈ E] + δ``.
The audit runs ``M`` many times on one neighbouring pair (``D'`` is ``D`` plus
one row), counts how often each of a few events chosen in advance happens,
and turns the counts into a *lower* confidence bound on ``ε``:

    ε ≥ ln((p_lo − δ) / p'_hi)

where ``p_lo`` is the one-sided Clopper–Pearson lower bound on ``P[M(D) ∈ E]``
and ``p'_hi`` the upper bound on ``P[M(D') ∈ E]`` (and the same with ``D``
and ``D'`` swapped). Every bound of every event is taken at level
``α / (number of bounds)`` (Bonferroni), so with probability at least
``1 − α`` all of them hold together and the reported lower bound is below
the mechanism's true ε. A mechanism whose lower bound exceeds its claimed ε
therefore violates its claim (verdict ``violation``), except with probability
``α``. The converse does not hold: an audit can only find violations on the
events and tables it tries, it cannot prove privacy.

:func:`run_audit` audits every mechanism dpsql releases, through its public
entry points and the private kernel, with seeded (insecure, reproducible)
noise sources: ``db.query`` under Laplace and under Gaussian noise,
``db.batch``, the exponential mechanism that picks MWEM's marginals
(:meth:`~dpsql.private.kernel.PrivateTable.select_marginal`) and AIM's weighted one, the exponential
mechanism that samples DualQuery's and FEM's queries
(:meth:`~dpsql.private.kernel.PrivateTable.sample_cells`), and a deliberately broken
mechanism (Laplace with half the noise its ε needs) that the audit must flag.
``benchmarks/audit.py`` runs it at large sizes; ``tests/audit`` at small ones.

>>> lo, hi = clopper_pearson(50, 100, 0.05)
>>> round(lo, 3), round(hi, 3)
(0.414, 0.586)
>>> round(epsilon_lower_bound(500, 68, 1000, delta=0.0, alpha=0.05), 2)   # 0.5 vs 0.068: ε ≥ 1.75
1.75
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import duckdb
import numpy as np
import pandas as pd
from scipy.stats import beta

from dpsql.api.connection import connect
from dpsql.private.budget import Budget, Cost
from dpsql.private.kernel import PrivateTable
from dpsql.private.ledger import Ledger
from dpsql.schema import load_schema
from dpsql.sql.compile import schema_attributes

__all__ = ["AuditRow", "Sizes", "clopper_pearson", "epsilon_lower_bound", "audit_outputs", "run_audit",
           "MECHANISMS"]

#: Joint confidence level of each mechanism's audit: its verdict is wrong with probability at most this.
ALPHA = 0.05


@dataclass(frozen=True)
class AuditRow:
    """One mechanism's audit. ``audited_epsilon_lower`` is a lower confidence
    bound (level ``1 − α``) on its true ε; ``verdict`` is ``"violation"`` when
    that bound exceeds ``claimed_epsilon``, else ``"ok"``."""

    mechanism: str
    claimed_epsilon: float
    claimed_delta: float
    audited_epsilon_lower: float
    trials: int
    verdict: str
    event: str

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Sizes:
    """Trials per table (each of ``D`` and ``D'``), per kind of mechanism.

    ``queries``: calls of ``db.query``/``db.batch`` (about 7 ms each);
    ``selections``: calls of MWEM's selection (one count each);
    ``samples``: draws of DualQuery/FEM sampling (one count for all)."""

    queries: int = 250
    selections: int = 400
    samples: int = 200_000

    @classmethod
    def large(cls) -> "Sizes":
        return cls(queries=5_000, selections=10_000, samples=5_000_000)


def clopper_pearson(hits: int, trials: int, alpha: float) -> tuple[float, float]:
    """One-sided Clopper–Pearson bounds ``(lo, hi)`` on a binomial probability,
    each holding with probability at least ``1 − alpha``."""
    if not 0 <= hits <= trials or trials <= 0:
        raise ValueError(f"need 0 <= hits <= trials and trials > 0, got {hits}, {trials}")
    lo = 0.0 if hits == 0 else float(beta.ppf(alpha, hits, trials - hits + 1))
    hi = 1.0 if hits == trials else float(beta.ppf(1.0 - alpha, hits + 1, trials - hits))
    return lo, hi


def epsilon_lower_bound(hits: int, hits_neighbour: int, trials: int, delta: float, alpha: float) -> float:
    """``ln((p_lo − δ) / p'_hi)``: a lower bound on ε from one event seen ``hits``
    times on ``D`` and ``hits_neighbour`` times on ``D'`` in ``trials`` runs each
    (0 when the data show no loss). Each of the two bounds holds with
    probability ``1 − alpha``."""
    lo, _ = clopper_pearson(hits, trials, alpha)
    _, hi = clopper_pearson(hits_neighbour, trials, alpha)
    if lo - delta <= 0.0 or lo - delta <= hi:
        return 0.0
    return math.log((lo - delta) / hi)


Event = tuple[str, Callable[[np.ndarray], np.ndarray]]


def audit_outputs(mechanism: str, outputs: np.ndarray, outputs_neighbour: np.ndarray, events: Sequence[Event],
                  epsilon: float, delta: float = 0.0, alpha: float = ALPHA) -> AuditRow:
    """Audit one mechanism from its outputs on ``D`` and ``D'`` (one row per trial).

    Every event (a name and a function from the outputs to a boolean per
    trial) is tried in both directions; the bound reported is the largest,
    with all ``4·len(events)`` confidence bounds at level ``alpha`` jointly.
    """
    outputs, outputs_neighbour = np.asarray(outputs), np.asarray(outputs_neighbour)
    trials = len(outputs)
    if len(outputs_neighbour) != trials or trials == 0:
        raise ValueError("need the same positive number of trials on both tables")
    level = alpha / (4 * len(events))
    best, best_event = 0.0, "none"
    for name, event in events:
        a, b = int(np.count_nonzero(event(outputs))), int(np.count_nonzero(event(outputs_neighbour)))
        for hits, other, direction in ((a, b, "D/D'"), (b, a, "D'/D")):
            bound = epsilon_lower_bound(hits, other, trials, delta, level)
            if bound > best:
                best, best_event = bound, f"{name} ({direction})"
    verdict = "violation" if best > epsilon else "ok"
    return AuditRow(mechanism, float(epsilon), float(delta), best, trials, verdict, best_event)


# -- the neighbouring tables -----------------------------------------------------------

SCHEMA = {"table": "t", "columns": {
    "a": {"type": "categorical", "values": ["x", "y", "z"]},
    "b": {"type": "integer", "min": 0, "max": 3}}}

#: The row that ``D'`` adds to ``D``.
ADDED = ("x", 0)


def _tables() -> tuple[duckdb.DuckDBPyConnection, duckdb.DuckDBPyConnection, dict[str, int]]:
    """Two DuckDB connections holding ``t``: ``D`` (60 rows) and ``D'`` (``D`` and :data:`ADDED`);
    and the exact counts of ``D`` by ``a``."""
    a = np.array(["x", "y", "z"])[np.arange(60) % 3]
    b = (np.arange(60) // 3) % 4
    df = pd.DataFrame({"a": a, "b": b})
    cons = []
    for frame in (df, pd.concat([df, pd.DataFrame({"a": [ADDED[0]], "b": [ADDED[1]]})], ignore_index=True)):
        con = duckdb.connect()
        con.register("frame", frame)
        con.execute("CREATE TABLE t AS SELECT a, b::INTEGER AS b FROM frame")
        con.unregister("frame")
        cons.append(con)
    return cons[0], cons[1], df["a"].value_counts().to_dict()


def _count_events(exact: float, column: int) -> list[Event]:
    """Tail events on one released count whose exact value moves from ``exact`` to ``exact + 1``:
    ``y > exact + 1/2`` and ``y > exact + 1`` (the Laplace tail ratio is e^ε past ``exact + 1``)."""
    return [(f"answer[{column}] > {t:g}", lambda out, t=t: out[:, column] > t) for t in (exact + 0.5, exact + 1.0)]


def _queries(statements: Sequence[str], epsilon: float, noise: str, trials: int, seed: int,
             budget: Budget) -> tuple[np.ndarray, np.ndarray]:
    """Each table's released COUNT columns (all statements, concatenated) over ``trials`` runs.

    Each run asks with its own confidence level: a repeated request is answered from its earlier
    release (:mod:`dpsql.engine.repeats`), and the level changes only the intervals, not the counts
    or their noise, so every run is a fresh measurement."""
    outs = []
    with tempfile.TemporaryDirectory() as cache:  # the strategy is selected once, not per trial
        for i, con in enumerate(_tables()[:2]):
            db = connect(con, schema=SCHEMA, budget=budget, cache=cache, progress=False,
                         source_of_noise=np.random.default_rng(seed + i))
            rows = []
            for k in range(trials):
                results = db.batch(list(statements), epsilon=epsilon, noise=noise, confidence=_level(k))
                rows.append(np.concatenate([r.df["n"].to_numpy(dtype=float) for r in results]))
            db.close()
            outs.append(np.array(rows))
    return outs[0], outs[1]


def _level(k: int) -> float:
    """A confidence level of its own for run ``k`` (see :func:`_queries`)."""
    return 0.5 + 0.49 * k / (k + 1)


_BY_A = "SELECT a, COUNT(*) AS n FROM t GROUP BY a"
_BY_B = "SELECT b, COUNT(*) AS n FROM t GROUP BY b"


def audit_query_laplace(sizes: Sizes, seed: int = 0, epsilon: float = 1.0) -> AuditRow:
    """``db.query`` of a COUNT … GROUP BY with Laplace noise, claimed ε."""
    _, _, counts = _tables()
    out, out1 = _queries([_BY_A], epsilon, "laplace", sizes.queries, seed, Budget(epsilon=1e9))
    return audit_outputs("query_laplace", out, out1, _count_events(counts["x"], 0), epsilon)


def audit_query_gaussian(sizes: Sizes, seed: int = 0, epsilon: float = 1.0, delta: float = 1e-5) -> AuditRow:
    """``db.query`` of a COUNT … GROUP BY with Gaussian noise, claimed (ε, δ)."""
    _, _, counts = _tables()
    db_budget = Budget(epsilon=1e9, delta=0.5)
    outs = []
    with tempfile.TemporaryDirectory() as cache:
        for i, con in enumerate(_tables()[:2]):
            db = connect(con, schema=SCHEMA, budget=db_budget, cache=cache, progress=False,
                         source_of_noise=np.random.default_rng(seed + i))
            outs.append(np.array([db.query(_BY_A, epsilon=epsilon, delta=delta, noise="gaussian",
                                           confidence=_level(k)).df["n"].to_numpy(float)
                                  for k in range(sizes.queries)]))
            db.close()
    c = counts["x"]
    events = [(f"answer[0] > {t:g}", lambda o, t=t: o[:, 0] > t) for t in (c + 0.5, c + 4.0, c + 8.0)]
    return audit_outputs("query_gaussian", outs[0], outs[1], events, epsilon, delta)


def audit_batch_laplace(sizes: Sizes, seed: int = 0, epsilon: float = 1.0) -> AuditRow:
    """``db.batch`` of two COUNT … GROUP BY statements (one joint Laplace measurement), claimed ε."""
    _, _, counts = _tables()
    out, out1 = _queries([_BY_A, _BY_B], epsilon, "laplace", sizes.queries, seed, Budget(epsilon=1e9))
    b0 = 15  # rows of D with b = 0: 60 rows, b cycles every 3 rows through 0..3
    sums = lambda o: o[:, 0] + o[:, 3]  # noqa: E731 - the two answers the added row moves
    events = _count_events(counts["x"], 0) + [
        (f"answer[0] + answer[3] > {t:g}", lambda o, t=t: sums(o) > t) for t in (counts["x"] + b0 + 1.0,)]
    return audit_outputs("batch_laplace", out, out1, events, epsilon)


def audit_broken_laplace(sizes: Sizes, seed: int = 0, epsilon: float = 1.0) -> AuditRow:
    """A deliberately broken mechanism: claims ε but adds the Laplace noise of 2ε (half the noise)."""
    _, _, counts = _tables()
    out, out1 = _queries([_BY_A], 2.0 * epsilon, "laplace", sizes.queries, seed, Budget(epsilon=1e9))
    return audit_outputs("broken_laplace_half_noise", out, out1, _count_events(counts["x"], 0), epsilon)


def _private_tables(seed: int) -> list[PrivateTable]:
    schema = load_schema(SCHEMA)
    return [PrivateTable(con, "t", schema, Ledger(None, Budget(epsilon=1e12)), source=np.random.default_rng(seed + i))
            for i, con in enumerate(_tables()[:2])]


def audit_mwem_selection(sizes: Sizes, seed: int = 0, epsilon: float = 1.0) -> AuditRow:
    """MWEM's exponential-mechanism selection of a marginal, claimed ε per selection.

    Public estimates are chosen so the added row raises the score of the
    marginal on ``a`` by one and lowers that of the marginal on ``b`` by one,
    with the first picked about 8% of the time on ``D``: the event
    "picks ``a``" has the largest possible likelihood ratio."""
    _, _, counts = _tables()
    est_a = np.array([counts[v] for v in ("x", "y", "z")], dtype=float)    # score on D: 0; on D': 1
    est_b = np.array([15.0, 15.0, 15.0, 15.0])
    est_b[0] += 5.0                                                        # score on D: 5; on D': 4
    attributes = schema_attributes(load_schema(SCHEMA))
    outs = []
    for table in _private_tables(seed):
        outs.append(np.array([table.select_marginal(attributes, [(0,), (1,)], [est_a, est_b], epsilon,
                                                    Cost(epsilon=epsilon)) for _ in range(sizes.selections)]))
    events = [(f"picks {name}", lambda o, j=j: o == j) for j, name in enumerate(("a", "b"))]
    return audit_outputs("mwem_exponential_selection", outs[0], outs[1], events, epsilon)


def audit_aim_selection(sizes: Sizes, seed: int = 0, epsilon: float = 1.0) -> AuditRow:
    """AIM's exponential-mechanism selection (weighted scores, drawn from a zCDP reservation),
    claimed ε per selection.

    Candidates: the marginals on ``a`` and ``b`` with weight 3 and on ``(a, b)`` with weight 1,
    so the scores are scaled by the largest weight, 3. As in :func:`audit_mwem_selection`, the
    added row raises the miss on ``a`` by one and lowers that on ``b`` by one (scores +3 and −3)
    and ``(a, b)``'s by one, with ``a`` picked about 7% of the time on ``D``."""
    _, _, counts = _tables()
    est_a = np.array([counts[v] for v in ("x", "y", "z")], dtype=float)    # miss on D: 0; on D': 1
    est_b = np.array([20.0, 15.0, 15.0, 15.0])                             # miss on D: 5; on D': 4
    est_ab = np.full(12, 5.0)                                              # each (a, b) cell holds 5 rows of D
    attributes = schema_attributes(load_schema(SCHEMA))
    outs = []
    for table in _private_tables(seed):
        reservation = table.reserve(Cost(epsilon=epsilon * sizes.selections), "audit", "aim", rho=1e12)
        outs.append(np.array([table.select_marginal(attributes, [(0,), (1,), (0, 1)], [est_a, est_b, est_ab], epsilon,
                                                    reservation, weights=[3.0, 3.0, 1.0])
                              for _ in range(sizes.selections)]))
        reservation.close()
    events = [(f"picks {name}", lambda o, j=j: o == j) for j, name in enumerate(("a", "b", "(a, b)"))]
    return audit_outputs("aim_weighted_selection", outs[0], outs[1], events, epsilon)


def audit_query_sampling(sizes: Sizes, seed: int = 0, epsilon: float = 1.0) -> AuditRow:
    """DualQuery's and FEM's exponential-mechanism sampling of cell queries, claimed ε per draw.

    On the marginal of ``a`` (20 rows per cell in ``D``), the estimates
    ``(1/4, 1/3, 1/3)`` give cell ``x`` the score 5 and the others 0, so
    "the negation of cell ``x``" is a rare outcome (about 0.5% on ``D``)
    whose logit falls by ``ε (1 − 1/4) / 2`` with the added row while the
    dominant outcome's rises: its likelihood ratio is about ``e^0.67``.
    Every outcome ``(cell, sign)`` is an event.
    """
    attributes = schema_attributes(load_schema(SCHEMA))
    estimates = np.array([0.25, 1.0 / 3.0, 1.0 / 3.0])
    outs = []
    for table in _private_tables(seed):
        reservation = table.reserve(Cost(epsilon=epsilon * sizes.samples), "audit", "exponential")
        draws = table.sample_cells(attributes, [(0,)], estimates, epsilon, sizes.samples, reservation)
        reservation.close()
        outs.append(draws[:, 0] * 2 + (draws[:, 1] > 0))
    events = [(f"cell {j // 2} sign {'+' if j % 2 else '-'}", lambda o, j=j: o == j) for j in range(6)]
    return audit_outputs("dualquery_fem_query_sampling", outs[0], outs[1], events, epsilon)


def audit_pgm_measurement(sizes: Sizes, seed: int = 0, epsilon: float = 1.0) -> AuditRow:
    """PGM's one private step: the workload's weighted marginals (OPT_M's weights for the
    marginals on ``(a, b)`` and ``a``) measured together with Laplace noise, claimed ε. What
    PGM does next (its model's structure, the fit, the sampling, the refinement) reads only
    this release, so the measurement is all there is to audit.

    The added row ``(x, 0)`` raises the first cell of every measured marginal by its weight;
    the events are each such cell, and their sum, past the values on ``D`` (each noisy value
    divided by its weight is a count)."""
    from dpsql.privacy import Laplace
    from dpsql.synth.pgm import marginal_weights, measurement

    attributes = schema_attributes(load_schema(SCHEMA))
    domain = tuple(a.size for a in attributes)
    weights = marginal_weights(domain, [(0, 1), (0,)], Laplace(epsilon))
    strategy = measurement(domain, weights)
    starts = np.cumsum([0] + [math.prod(domain[a] for a in s) for s in weights])[:-1]
    outs = []
    for table in _private_tables(seed):
        values = np.array([table.measure(attributes, strategy, Laplace(epsilon), Cost(epsilon=epsilon)).values
                           for _ in range(sizes.queries)])
        outs.append(values[:, starts] / np.array(list(weights.values())))
    _, _, counts = _tables()
    exact = np.array([5.0 if s == (0, 1) else counts["x"] for s in weights])  # rows of D in cell (x, 0), and x
    events = [(f"{s} cell 0 > {t:g}", lambda o, j=j, t=t: o[:, j] > t)
              for j, s in enumerate(weights) for t in (exact[j] + 0.5, exact[j] + 1.0)]
    events.append(("sum of the cells > exact + 1", lambda o: o.sum(axis=1) > exact.sum() + 1.0))
    return audit_outputs("pgm_weighted_marginals", outs[0], outs[1], events, epsilon)


#: Every audited mechanism, in report order.
MECHANISMS: dict[str, Callable[..., AuditRow]] = {
    "query_laplace": audit_query_laplace,
    "query_gaussian": audit_query_gaussian,
    "batch_laplace": audit_batch_laplace,
    "mwem_exponential_selection": audit_mwem_selection,
    "aim_weighted_selection": audit_aim_selection,
    "dualquery_fem_query_sampling": audit_query_sampling,
    "pgm_weighted_marginals": audit_pgm_measurement,
    "broken_laplace_half_noise": audit_broken_laplace,
}


def run_audit(sizes: Sizes = Sizes(), seed: int = 0, only: Sequence[str] | None = None) -> list[AuditRow]:
    """Audit every mechanism of :data:`MECHANISMS` (or those named in ``only``)."""
    names = list(MECHANISMS) if only is None else list(only)
    return [MECHANISMS[name](sizes, seed) for name in names]
