"""The best-response oracle of DualQuery and FEM.

Both algorithms play a zero-sum game between a query player and a data
player, and both repeatedly need the data player's *best response*: over a
finite product domain (attribute ``i`` takes one value in ``0..n_i-1``) find
the record ``x`` maximizing

    ``Σ_q c_q · q(x) + Σ_i l_i[x_i]``

where every query ``q`` is a :class:`Conjunction` (``x_i`` must lie in an
allowed set for every attribute ``i`` it mentions; a k-way marginal cell
allows one value per mentioned attribute) and the optional ``l_i`` are
per-attribute linear terms (FEM's follow-the-perturbed-leader noise).
DualQuery sums the ``s`` queries it sampled, FEM the losses of the earlier
rounds. Negated queries are the caller's business: ``1 − q`` is the
coefficient ``−1`` plus a constant, so coefficients may be negative.

The problem is NP-hard in general (it contains MAX-CSP), but neither
algorithm needs an exact answer: DualQuery's accuracy theorem only asks for an
approximate best response, and the paper stops CPLEX at a timeout and takes
its best solution. :func:`best_response` therefore offers

* ``"mip"``: the integer program of DualQuery §5 generalized to non-binary
  attributes, modeled in CVXPY and solved by HiGHS under a time limit and a
  relative gap, returning the best feasible record when a limit is hit;
* ``"heuristic"``: coordinate ascent (set one attribute to its best value
  given the others, vectorized over the queries) with random restarts and
  random perturbations, fast on instances the MIP cannot finish;
* ``"auto"`` (the default): the heuristic first, then the MIP started from the
  heuristic's record for what remains of the time limit, keeping the better.
  Easy instances end with a proven optimum; hard ones never end worse than
  the heuristic.

The reported objective is always recomputed on the returned record, never
taken from the solver. :func:`best_responses` solves independent problems
(DualQuery's or FEM's samples of one round) in parallel processes.

>>> from dpsql.synth.oracle import Conjunction, best_response
>>> queries = [Conjunction.from_cell((0, 1), (1, 2)),         # x0 = 1 and x1 = 2
...            Conjunction(((1, frozenset({0, 2})),))]         # x1 in {0, 2}
>>> r = best_response((2, 3), queries, [1.0, 0.5], method="mip")
>>> r.record, r.objective, r.method
((1, 2), 1.5, 'mip-optimal')
>>> best_response((2, 3), queries, [-1.0, 0.5], method="heuristic", seed=0).objective
0.5
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence, Union

import numpy as np
import scipy.sparse as sp

from dpsql.errors import WorkloadError

__all__ = [
    "Conjunction", "Response", "OracleProblem", "best_response", "best_responses", "perturbed_responses", "objective",
    "ORACLES", "RESULT_METHODS",
]

#: Values of ``method`` accepted by :func:`best_response`.
ORACLES = ("auto", "mip", "heuristic")

#: Values of :attr:`Response.method`: what produced the returned record.
RESULT_METHODS = ("mip-optimal", "mip-gap", "mip-time-limit", "heuristic", "warm-start")

#: Relative MIP gap at or below which a HiGHS "optimal" status counts as proven optimal.
_PROVEN_GAP = 1e-9

#: Largest literals × values block the heuristic keeps dense (8 bytes each); larger ones are sparse.
_DENSE_MASK_LIMIT = 1 << 21

#: Smallest time limit handed to HiGHS, in seconds (it rejects non-positive limits).
_MIN_SOLVER_SECONDS = 1e-3

Seed = Union[int, np.random.SeedSequence, None]


# --------------------------------------------------------------------------- queries


@dataclass(frozen=True)
class Conjunction:
    """A conjunction of attribute literals: ``q(x) = 1`` iff ``x_a ∈ S`` for
    every literal ``(a, S)``, else 0.

    ``literals`` is normalized on construction: attributes sorted, values
    stored as a frozenset of ints, and two literals on one attribute merged by
    intersecting their sets, so every attribute appears at most once. An empty
    allowed set makes the query never true; no literals make it always true.

    >>> q = Conjunction(((2, frozenset({0, 1})), (0, frozenset({3}))))
    >>> q.attributes
    (0, 2)
    >>> q.evaluate(np.array([[3, 9, 1], [3, 9, 2], [0, 0, 0]])).tolist()
    [True, False, False]
    """

    literals: tuple[tuple[int, frozenset[int]], ...]

    def __post_init__(self) -> None:
        merged: dict[int, frozenset[int]] = {}
        for literal in self.literals:
            attribute, values = literal
            if isinstance(values, (int, np.integer)):
                raise WorkloadError(f"literal on attribute {attribute}: allowed values must be a set, got {values!r}")
            attribute = _index(attribute, "attribute")
            values = frozenset(_index(v, "value") for v in values)
            merged[attribute] = merged[attribute] & values if attribute in merged else values
        object.__setattr__(self, "literals", tuple(sorted(merged.items())))

    @classmethod
    def from_cell(cls, attributes: Sequence[int], cell: Sequence[int]) -> "Conjunction":
        """The indicator of one marginal cell: ``x_a = cell[j]`` for the j-th
        attribute ``a`` of ``attributes``.

        >>> Conjunction.from_cell((4, 1), (0, 2)).literals
        ((1, frozenset({2})), (4, frozenset({0})))
        """
        if len(attributes) != len(cell):
            raise WorkloadError(f"a cell on {len(attributes)} attributes needs as many values, got {len(cell)}")
        return cls(tuple((a, frozenset((v,))) for a, v in zip(attributes, cell)))

    @property
    def attributes(self) -> tuple[int, ...]:
        """The attributes the conjunction mentions, ascending."""
        return tuple(a for a, _ in self.literals)

    def __len__(self) -> int:
        """The number of literals ``k`` (a k-way marginal cell has k)."""
        return len(self.literals)

    def evaluate(self, records: np.ndarray) -> np.ndarray:
        """``q(x)`` for each row ``x`` of the ``(m, d)`` integer array ``records``, as booleans."""
        records = np.asarray(records)
        if records.ndim != 2:
            raise WorkloadError(f"records must be an (m, d) array, got shape {records.shape}")
        out = np.ones(records.shape[0], dtype=bool)
        for attribute, values in self.literals:
            if attribute >= records.shape[1]:
                raise WorkloadError(f"the query mentions attribute {attribute} but records have {records.shape[1]}")
            out &= np.isin(records[:, attribute], np.fromiter(values, dtype=np.int64, count=len(values)))
        return out


def objective(queries: Sequence[Conjunction], weights: Sequence[float] | np.ndarray, records: np.ndarray,
              linear: Sequence[Sequence[float] | np.ndarray] | None = None) -> np.ndarray:
    """``Σ_q c_q q(x) + Σ_i l_i[x_i]`` for each row ``x`` of ``records``, straight from the definition.

    >>> objective([Conjunction.from_cell((0,), (1,))], [2.0], np.array([[0, 0], [1, 0]]), [[0.0, 0.0], [0.5, 0.0]])
    array([0.5, 2.5])
    """
    records = np.asarray(records, dtype=np.int64)
    if records.ndim != 2:
        raise WorkloadError(f"records must be an (m, d) array, got shape {records.shape}")
    weights = np.asarray(weights, dtype=float).reshape(-1)
    if len(weights) != len(queries):
        raise WorkloadError(f"{len(queries)} queries but {len(weights)} weights")
    total = np.zeros(records.shape[0])
    for q, c in zip(queries, weights):
        if c != 0.0:
            total += c * q.evaluate(records)
    if linear is not None:
        if len(linear) != records.shape[1]:
            raise WorkloadError(f"linear terms for {len(linear)} attributes, records have {records.shape[1]}")
        for i, terms in enumerate(linear):
            total += np.asarray(terms, dtype=float)[records[:, i]]
    return total


def _index(value: Any, what: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 0:
        raise WorkloadError(f"{what} must be a non-negative int, got {value!r}")
    return int(value)


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Response:
    """A best response.

    ``record`` is the chosen record, ``objective`` its exact objective value
    (recomputed on the record), ``method`` what produced it (one of
    :data:`RESULT_METHODS`: ``"mip-optimal"`` proven optimal up to HiGHS's
    feasibility tolerances, ``"mip-gap"`` within the relative ``mip_gap`` of
    the optimum, ``"mip-time-limit"`` the MIP's incumbent when time ran out,
    ``"heuristic"`` local search, ``"warm-start"`` the caller's warm start,
    nothing found beat it), ``seconds`` the wall time of the call, and
    ``bound`` an upper bound on the optimum from the MIP's dual bound (None
    when no MIP ran to a bound).
    """

    record: tuple[int, ...]
    objective: float
    method: str
    seconds: float
    bound: float | None = None


@dataclass(frozen=True)
class OracleProblem:
    """One best-response problem for :func:`best_responses` (the arguments of
    :func:`best_response` that differ between problems)."""

    domain: tuple[int, ...]
    queries: tuple[Conjunction, ...]
    weights: tuple[float, ...]
    linear: tuple[tuple[float, ...], ...] | None = None
    warm_start: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "domain", tuple(int(n) for n in self.domain))
        object.__setattr__(self, "queries", tuple(self.queries))
        object.__setattr__(self, "weights", tuple(float(w) for w in np.asarray(self.weights, dtype=float).reshape(-1)))
        if self.linear is not None:
            object.__setattr__(self, "linear", tuple(tuple(float(v) for v in np.asarray(t, dtype=float).reshape(-1))
                                                    for t in self.linear))
        if self.warm_start is not None:
            object.__setattr__(self, "warm_start", tuple(int(v) for v in self.warm_start))


# --------------------------------------------------------------------------- compiled form


class _Compiled:
    """The problem in array form, shared by the MIP and the heuristic.

    Simplifications, all exact: zero-weight and never-true queries are
    dropped, literals allowing every value are dropped, queries left with no
    literal become a constant, queries left with one literal become linear
    terms (``q(x) = [x_i ∈ S]`` is linear in the one-hot encoding), and
    identical conjunctions are merged by summing their weights. What remains
    are the *active* queries, each with at least two literals on distinct
    attributes.
    """

    def __init__(self, domain: Sequence[int], queries: Sequence[Conjunction], weights: Sequence[float] | np.ndarray,
                 linear: Sequence[Sequence[float] | np.ndarray] | None) -> None:
        domain = tuple(_index(n, "attribute size") for n in domain)
        if not domain or min(domain) < 1:
            raise WorkloadError(f"the domain needs at least one attribute and every size >= 1, got {domain}")
        weights = np.asarray(weights, dtype=float).reshape(-1)
        if len(weights) != len(queries):
            raise WorkloadError(f"{len(queries)} queries but {len(weights)} weights")
        if not np.all(np.isfinite(weights)):
            raise WorkloadError("weights must be finite")
        d = len(domain)
        self.domain = domain
        self.offsets = np.concatenate([[0], np.cumsum(domain)]).astype(np.int64)
        self.linear = np.zeros(int(self.offsets[-1]))
        if linear is not None:
            if len(linear) != d:
                raise WorkloadError(f"linear terms for {len(linear)} attributes, the domain has {d}")
            for i, terms in enumerate(linear):
                terms = np.asarray(terms, dtype=float).reshape(-1)
                if len(terms) != domain[i] or not np.all(np.isfinite(terms)):
                    raise WorkloadError(f"linear terms of attribute {i} must be {domain[i]} finite numbers")
                self.linear[self.offsets[i]:self.offsets[i + 1]] = terms
        self.constant = 0.0
        merged: dict[tuple[tuple[int, frozenset[int]], ...], float] = {}
        for q, c in zip(queries, weights):
            if not isinstance(q, Conjunction):
                raise WorkloadError(f"queries must be Conjunctions, got {type(q).__name__}")
            kept = []
            never = False
            for a, values in q.literals:
                if a >= d:
                    raise WorkloadError(f"a query mentions attribute {a} but the domain has {d} attributes")
                if values and max(values) >= domain[a]:
                    raise WorkloadError(f"a query allows value {max(values)} of attribute {a}, which has {domain[a]}")
                never = never or not values
                if len(values) < domain[a]:
                    kept.append((a, values))
            if c == 0.0 or never:
                continue
            if not kept:
                self.constant += float(c)
            elif len(kept) == 1:
                a, values = kept[0]
                self.linear[self.offsets[a] + np.fromiter(values, dtype=np.int64, count=len(values))] += c
            else:
                key = tuple(kept)
                merged[key] = merged.get(key, 0.0) + float(c)
        active = [(key, c) for key, c in merged.items() if c != 0.0]
        self.weights = np.array([c for _, c in active], dtype=float)
        self.arity = np.array([len(key) for key, _ in active], dtype=np.int64)
        lit_query, lit_attr, rows, cols = [], [], [], []
        for j, (key, _) in enumerate(active):
            for a, values in key:
                l = len(lit_query)
                lit_query.append(j)
                lit_attr.append(a)
                for v in values:
                    rows.append(l)
                    cols.append(self.offsets[a] + v)
        self.lit_query = np.array(lit_query, dtype=np.int64)
        self.lit_attr = np.array(lit_attr, dtype=np.int64)
        #: literal × one-hot column incidence: M[l, offset(i) + v] = 1 iff literal l (on attribute i) allows v.
        self.M = sp.csr_matrix((np.ones(len(rows)), (np.array(rows, dtype=np.int64), np.array(cols, dtype=np.int64))),
                               shape=(len(lit_query), len(self.linear)))
        # Per attribute: its literals, their queries, and their allowed-value masks as 0/1 blocks
        # (dense for speed, sparse CSC when a dense block would be large).
        self.attr_lits = [np.flatnonzero(self.lit_attr == i) for i in range(d)]
        self.attr_queries = [self.lit_query[ls] for ls in self.attr_lits]
        self.attr_masks: list[np.ndarray | sp.csc_matrix] = []
        for i, ls in enumerate(self.attr_lits):
            block = self.M[ls][:, self.offsets[i]:self.offsets[i + 1]]
            self.attr_masks.append(block.toarray() if len(ls) * domain[i] <= _DENSE_MASK_LIMIT else block.tocsc())

    @property
    def n_active(self) -> int:
        return len(self.weights)

    def unsatisfied(self, record: np.ndarray) -> np.ndarray:
        """How many literals of each active query ``record`` violates."""
        return _unsatisfied_many(self, np.asarray(record, dtype=np.int64)[None, :])[0]

    def value(self, record: Sequence[int] | np.ndarray) -> float:
        """The exact objective of one record."""
        return float(_values_many(self, self.linear[None, :], np.asarray(record, dtype=np.int64)[None, :])[0])

    def check_record(self, record: Sequence[int] | None) -> np.ndarray | None:
        if record is None:
            return None
        out = np.array([_index(v, "warm start value") for v in record], dtype=np.int64)
        if len(out) != len(self.domain) or np.any(out >= np.array(self.domain)):
            raise WorkloadError(f"warm start {tuple(record)} is not a record of the domain {self.domain}")
        return out


# --------------------------------------------------------------------------- heuristic


def _climb(problem: _Compiled, record: np.ndarray, rng: np.random.Generator, deadline: float) -> float:
    """Coordinate ascent from ``record`` (modified in place) to a local optimum
    (:func:`_climb_batch` on one record); returns its value."""
    _climb_batch(problem, problem.linear[None, :], record[None, :], rng, deadline)
    return problem.value(record)


def _heuristic(problem: _Compiled, rng: np.random.Generator, deadline: float, starts: Iterable[np.ndarray],
               restarts: int, kicks: int) -> tuple[np.ndarray, float, bool]:
    """Iterated local search: climb from each given start and from ``restarts``
    random records, then ``kicks`` times re-draw a few random attributes of the
    best record and climb again, keeping improvements. Returns the best
    record, its value, and whether it is one of ``starts`` unchanged."""
    best, best_value, from_start = None, -math.inf, False
    domain = np.array(problem.domain)
    candidates = [(np.array(s, dtype=np.int64), True) for s in starts]
    candidates.append((np.array([int(np.argmax(problem.linear[problem.offsets[i]:problem.offsets[i + 1]]))
                                 for i in range(len(domain))]), False))
    for _ in range(restarts):
        candidates.append((rng.integers(0, domain), False))
    for start, given in candidates:
        if best is not None and time.monotonic() >= deadline:
            break
        x = start.copy()
        value = _climb(problem, x, rng, deadline)
        if value > best_value:
            best, best_value, from_start = x, value, given and np.array_equal(x, start)
    d = len(domain)
    for _ in range(kicks):
        if time.monotonic() >= deadline:
            break
        x = best.copy()
        chosen = rng.choice(d, size=min(d, int(rng.integers(2, 4))), replace=False)
        x[chosen] = rng.integers(0, domain[chosen])
        value = _climb(problem, x, rng, deadline)
        if value > best_value + 1e-12 * (1.0 + abs(best_value)):
            best, best_value, from_start = x, value, False
    return best, best_value, from_start


def _climb_batch(problem: _Compiled, linear: np.ndarray, records: np.ndarray, rng: np.random.Generator,
                 deadline: float = math.inf) -> None:
    """Coordinate ascent for many records at once, record ``r`` under its own
    linear terms ``linear[r]`` (same queries), until no record improves or the
    deadline passes. ``records`` is modified in place.

    For attribute ``i`` the value of ``x_i = v`` given the others is the linear
    term plus the weights of the active queries whose *other* literals hold and
    whose literal on ``i`` allows ``v``: one small matrix product per
    attribute. A move is taken only when it strictly improves, so the loop ends.
    """
    unsat = _unsatisfied_many(problem, records)
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        for i in rng.permutation(len(problem.domain)):
            if problem.domain[i] == 1:
                continue
            lo, hi = problem.offsets[i], problem.offsets[i + 1]
            score = linear[:, lo:hi].copy()
            qs, mask = problem.attr_queries[i], problem.attr_masks[i]
            if len(qs):
                current = _allows_many(problem, i, records[:, i])
                others_hold = (unsat[:, qs] - ~current) == 0
                score += np.asarray((others_hold * problem.weights[qs]) @ mask)
            rows = np.arange(len(records))
            best = np.argmax(score, axis=1)
            now = score[rows, records[:, i]]
            better = score[rows, best] > now + 1e-12 * (1.0 + np.abs(now))
            if not better.any():
                continue
            if len(qs):
                moved = rows[better]
                unsat[np.ix_(moved, qs)] += (current[better].astype(np.int64)
                                             - _allows_many(problem, i, best[better]))
            records[better, i] = best[better]
            changed = True


def _allows_many(problem: _Compiled, i: int, values: np.ndarray) -> np.ndarray:
    """``allows(i, v)`` for each ``v`` of ``values``: a (records × literals on ``i``) boolean array."""
    mask = problem.attr_masks[i]
    block = mask[:, values] if isinstance(mask, np.ndarray) else mask[:, values].toarray()
    return block.T != 0


def perturbed_responses(domain: Sequence[int], queries: Sequence[Conjunction], weights: Sequence[float] | np.ndarray,
                        perturbations: np.ndarray, *, warm_starts: np.ndarray | None = None, restarts: int = 8,
                        seed: Seed = None) -> list[Response]:
    """Heuristic best responses to one objective under many linear perturbations at once.

    Record ``r`` approximately maximizes ``Σ_q weights[q]·q(x) +
    ⟨onehot(x), perturbations[r]⟩``, where ``perturbations`` has one row per
    response and one column per (attribute, value) in attribute order
    (``sum(domain)`` columns). This is the data player of FEM's
    follow-the-perturbed-leader step, which needs dozens of such responses per
    round: batched coordinate ascent from ``restarts`` random records, from
    the ``warm_starts`` rows (e.g. the previous round's records) and from the
    record best for the linear terms alone, keeping each
    response's best, is far faster than as many :func:`best_response` calls.
    Every response is labelled ``"heuristic"``.

    >>> q = [Conjunction.from_cell((0, 1), (1, 1))]
    >>> [r.record for r in perturbed_responses((2, 2), q, [3.0], np.array([[0, 0, 0, 0], [0, 1, 5, 0.0]]), seed=0)]
    [(1, 1), (1, 0)]
    """
    started = time.monotonic()
    problem = _Compiled(domain, queries, weights, None)
    perturbations = np.asarray(perturbations, dtype=float)
    if perturbations.ndim != 2 or perturbations.shape[1] != len(problem.linear):
        raise WorkloadError(f"perturbations must have one column per attribute value ({len(problem.linear)})")
    rng = np.random.default_rng(seed)
    linear = problem.linear[None, :] + perturbations
    sizes = np.array(problem.domain)
    greedy = np.stack([np.argmax(linear[:, problem.offsets[i]:problem.offsets[i + 1]], axis=1)
                       for i in range(len(sizes))], axis=1)  # best values ignoring the queries
    starts = [greedy] + [rng.integers(0, sizes, size=(len(linear), len(sizes))) for _ in range(restarts)]
    if warm_starts is not None:
        starts.append(np.array([problem.check_record(w) for w in np.asarray(warm_starts).reshape(len(linear), -1)]))
    best, best_value = None, None
    for records in starts:
        _climb_batch(problem, linear, records, rng)
        values = _values_many(problem, linear, records)
        if best is None:
            best, best_value = records, values
        else:
            take = values > best_value
            best[take], best_value[take] = records[take], values[take]
    seconds = (time.monotonic() - started) / len(linear) if len(linear) else 0.0
    return [Response(tuple(int(v) for v in rec), float(val), "heuristic", seconds) for rec, val in zip(best, best_value)]


def _values_many(problem: _Compiled, linear: np.ndarray, records: np.ndarray) -> np.ndarray:
    """The exact objective of each record under its own linear terms."""
    values = problem.constant + np.take_along_axis(linear, problem.offsets[:-1] + records, axis=1).sum(axis=1)
    if problem.n_active:
        values = values + (_unsatisfied_many(problem, records) == 0) @ problem.weights
    return values


def _unsatisfied_many(problem: _Compiled, records: np.ndarray) -> np.ndarray:
    """:meth:`_Compiled.unsatisfied` for each record: a (records × active queries) count array."""
    unsat = np.zeros((len(records), problem.n_active), dtype=np.int64)
    for i, qs in enumerate(problem.attr_queries):
        unsat[:, qs] += ~_allows_many(problem, i, records[:, i])
    return unsat


# --------------------------------------------------------------------------- MIP


def _mip(problem: _Compiled, seconds: float, mip_gap: float, start: np.ndarray | None,
         highs_seed: int | None) -> tuple[np.ndarray | None, str, float | None]:
    """Solve the integer program with HiGHS through CVXPY.

    Variables: one-hot binaries ``z`` (one block per attribute, summing to 1)
    and ``y_q ∈ [0, 1]`` per active query. ``y_q`` is pushed up when
    ``c_q > 0`` and down when ``c_q < 0``, so one side of the AND suffices:
    ``y_q ≤ Σ_{v∈S} z[i, v]`` for each literal of a positive query, and
    ``y_q ≥ Σ_literals Σ_{v∈S} z[i, v] − (k − 1)`` for a negative one. All
    constraints are sparse matrix blocks.

    Returns the record (None when HiGHS found no feasible point), the label
    ``mip-optimal`` / ``mip-gap`` / ``mip-time-limit``, and the upper bound on
    the optimum (objective dual bound plus the constant), if any.
    """
    import cvxpy as cp

    n_cols = len(problem.linear)
    d = len(problem.domain)
    z = cp.Variable(n_cols, boolean=True, name="z")
    onehot = sp.csr_matrix((np.ones(n_cols), (np.repeat(np.arange(d), problem.domain), np.arange(n_cols))),
                           shape=(d, n_cols))
    constraints = [onehot @ z == 1]
    obj = problem.linear @ z
    y = None
    if problem.n_active:
        Q = problem.n_active
        y = cp.Variable(Q, bounds=[0, 1], name="y")
        positive = problem.weights > 0
        lit_pos = positive[problem.lit_query]
        if lit_pos.any():
            rows = np.flatnonzero(lit_pos)
            select = sp.csr_matrix((np.ones(len(rows)), (np.arange(len(rows)), problem.lit_query[rows])),
                                   shape=(len(rows), Q))
            constraints.append(select @ y - problem.M[rows] @ z <= 0)
        if (~positive).any():
            negatives = np.flatnonzero(~positive)
            lits = np.flatnonzero(~lit_pos)
            position = np.full(Q, -1, dtype=np.int64)
            position[negatives] = np.arange(len(negatives))
            sum_lits = sp.csr_matrix((np.ones(len(lits)), (position[problem.lit_query[lits]], np.arange(len(lits)))),
                                     shape=(len(negatives), len(lits))) @ problem.M[lits]
            select = sp.csr_matrix((np.ones(len(negatives)), (np.arange(len(negatives)), negatives)),
                                   shape=(len(negatives), Q))
            constraints.append(sum_lits @ z - select @ y <= problem.arity[negatives] - 1)
        obj = obj + problem.weights @ y
    prob = cp.Problem(cp.Maximize(obj), constraints)

    options: dict[str, Any] = {"time_limit": float(max(seconds, _MIN_SOLVER_SECONDS)), "mip_rel_gap": float(mip_gap)}
    if mip_gap == 0.0:
        options["mip_abs_gap"] = 0.0
    if highs_seed is not None:
        options["random_seed"] = int(highs_seed)
    data, chain, inverse = prob.get_problem_data(cp.HIGHS)
    warm = False
    if start is not None:
        values = {z: _one_hot(problem, start)}
        if y is not None:
            values[y] = (problem.unsatisfied(start) == 0).astype(float)
        warm = _seed_highs(prob, data, values)
    raw = chain.solve_via_data(prob, data, warm_start=warm, verbose=False, solver_opts=options)
    info = raw["info"]
    status = raw["model_status"]
    bound = None
    if math.isfinite(info.mip_dual_bound):
        bound = problem.constant - float(info.mip_dual_bound)
    if info.primal_solution_status != 2:  # kSolutionStatusFeasible
        return None, "mip-time-limit", bound
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Solution may be inaccurate" on a time limit
        prob.unpack_results(raw, chain, inverse)
    zval = np.asarray(z.value, dtype=float)
    record = np.array([int(np.argmax(zval[problem.offsets[i]:problem.offsets[i + 1]])) for i in range(d)],
                      dtype=np.int64)
    if status == "kOptimal":
        label = "mip-optimal" if info.mip_gap <= _PROVEN_GAP else "mip-gap"
    else:
        label = "mip-time-limit"
    return record, label, bound


def _one_hot(problem: _Compiled, record: np.ndarray) -> np.ndarray:
    out = np.zeros(len(problem.linear))
    out[problem.offsets[:-1] + record] = 1.0
    return out


def _seed_highs(prob: Any, data: Mapping[str, Any], values: Mapping[Any, np.ndarray]) -> bool:
    """Hand HiGHS a MIP start through CVXPY's warm-start path.

    CVXPY's HiGHS interface ignores the variables' ``.value``; with
    ``warm_start=True`` it only passes HiGHS (``Highs.setSolution``) the
    solution cached from an earlier solve of the same ``Problem``. We put the
    start there, laid out in the solver's column order
    (``param_prob.var_id_to_col``). HiGHS checks the start ("MIP start
    solution is feasible" in its log) and uses it as the first incumbent.
    Returns False, leaving the solve cold, if CVXPY's internals differ.
    """
    try:
        import highspy

        columns = data["param_prob"].var_id_to_col
        x0 = np.zeros(len(data["c"]))
        for var, value in values.items():
            x0[columns[var.id]:columns[var.id] + var.size] = np.asarray(value, dtype=float).ravel(order="F")
        solution = highspy.HighsSolution()
        solution.col_value = x0
        solution.value_valid = True
        prob._solver_cache["HIGHS"] = (None, None, {"model_status": "kOptimal", "solution": solution})
        return True
    except Exception:  # pragma: no cover - depends on CVXPY internals
        return False


# --------------------------------------------------------------------------- entry points


def best_response(domain: Sequence[int], queries: Sequence[Conjunction], weights: Sequence[float] | np.ndarray,
                  linear: Sequence[Sequence[float] | np.ndarray] | None = None, *, time_limit: float = 10.0,
                  mip_gap: float = 1e-4, warm_start: Sequence[int] | None = None, method: str = "auto",
                  seed: Seed = None, restarts: int = 20, kicks: int = 200) -> Response:
    """The record maximizing ``Σ_q weights[q]·q(x) + Σ_i linear[i][x_i]``, exactly or approximately.

    ``domain`` lists the attribute sizes ``n_i``; ``linear`` (optional) is one
    array of ``n_i`` numbers per attribute.

    ``method``:

    * ``"mip"``: the integer program, solved by HiGHS through CVXPY;
    * ``"heuristic"``: local search only (``restarts`` random starting
      records, then ``kicks`` random perturbations of the best one);
    * ``"auto"``: the heuristic (well under a second for thousands of
      queries), then the MIP started from its record for what is left of
      ``time_limit``, keeping the better record. Small instances end proven
      optimal; on large ones, where the MIP's LP bound is weak and HiGHS
      rarely beats local search, the call still never does worse than the
      heuristic. On a tie the MIP's label is kept only when it certifies
      optimality (``mip-optimal`` / ``mip-gap``). Use ``"heuristic"`` when
      the time limit cannot be afforded.

    ``time_limit`` bounds the whole call in seconds (model building included;
    HiGHS gets what is left as its ``time_limit`` option and overshoots it by
    some tens of milliseconds). ``mip_gap`` is HiGHS's ``mip_rel_gap``; 0 also
    zeroes ``mip_abs_gap``, for proven optima. When a limit stops HiGHS its
    best feasible record is used. ``warm_start`` is a record: the heuristic
    climbs from it, HiGHS gets it as its MIP start, and it is returned
    (labelled ``"warm-start"``) when nothing better is found. With
    ``method="mip"``, if HiGHS finds no feasible record in time and there is
    no warm start, one coordinate-ascent climb supplies the record. ``seed``
    drives the heuristic's randomness and HiGHS's ``random_seed``.
    """
    started = time.monotonic()
    if method not in ORACLES:
        raise ValueError(f"method must be one of {ORACLES}, got {method!r}")
    if not (time_limit > 0) or not (0 <= mip_gap < 1):
        raise ValueError(f"need time_limit > 0 and 0 <= mip_gap < 1, got {time_limit} and {mip_gap}")
    deadline = started + time_limit
    problem = _Compiled(domain, queries, weights, linear)
    start = problem.check_record(warm_start)
    rng = np.random.default_rng(seed)
    highs_seed = int(rng.integers(0, 2**31 - 1)) if seed is not None else None

    def done(record: np.ndarray, label: str, bound: float | None = None) -> Response:
        return Response(tuple(int(v) for v in record), problem.value(record), label, time.monotonic() - started, bound)

    incumbent, incumbent_value, incumbent_label = None, -math.inf, "heuristic"
    if method in ("auto", "heuristic"):
        incumbent, incumbent_value, unchanged = _heuristic(problem, rng, deadline, [] if start is None else [start],
                                                           restarts, kicks)
        incumbent_label = "warm-start" if unchanged else "heuristic"
        if method == "heuristic":
            return done(incumbent, incumbent_label)
    elif start is not None:
        incumbent, incumbent_value, incumbent_label = start, problem.value(start), "warm-start"

    record, label, bound = None, "mip-time-limit", None
    remaining = deadline - time.monotonic()
    if remaining > _MIN_SOLVER_SECONDS or method == "mip":
        record, label, bound = _mip(problem, remaining, mip_gap, incumbent, highs_seed)
    if record is not None:
        value = problem.value(record)
        tol = 1e-12 * (1.0 + abs(incumbent_value)) if incumbent is not None else 0.0
        if incumbent is None or value > incumbent_value + tol or (
                value >= incumbent_value - tol and label != "mip-time-limit"):
            return done(record, label, bound)
    if incumbent is None:  # the MIP found nothing and there is no warm start: one climb
        incumbent = rng.integers(0, np.array(problem.domain))
        _climb(problem, incumbent, rng, math.inf)
        incumbent_label = "heuristic"
    return done(incumbent, incumbent_label, bound)


def _solve(job: tuple[OracleProblem, dict[str, Any]]) -> Response:
    """Worker of :func:`best_responses` (module level, so it pickles)."""
    problem, kwargs = job
    if problem.warm_start is not None:
        kwargs = {**kwargs, "warm_start": problem.warm_start}
    return best_response(problem.domain, problem.queries, problem.weights, problem.linear, **kwargs)


def best_responses(problems: Sequence[OracleProblem | tuple], processes: int | None = None,
                   **kwargs: Any) -> list[Response]:
    """Solve independent best-response problems, in parallel processes.

    ``problems`` holds :class:`OracleProblem`s or tuples of its fields
    ``(domain, queries, weights[, linear[, warm_start]])``; ``kwargs`` go to
    :func:`best_response` for every problem (a problem's own ``warm_start``
    wins). An integer ``seed`` is split into independent per-problem seeds, so
    results do not depend on ``processes``. ``processes=None`` uses every CPU
    (at most one per problem); ``processes=1`` runs inline. Workers are
    started with "spawn" (safe with the solver's threads; scripts calling this
    need the usual ``if __name__ == "__main__":`` guard) and cost about a
    second each to start, so parallelism pays for problems of more than a
    fraction of a second.

    >>> q = [Conjunction.from_cell((0, 1), (1, 1))]
    >>> problems = [((2, 2), q, [1.0]), ((2, 2), q, [-1.0], [[0.0, 0.5], [0.0, 0.3]], (1, 1))]
    >>> [(r.record, r.objective) for r in best_responses(problems, processes=1, method="mip")]
    [((1, 1), 1.0), ((1, 0), 0.5)]
    """
    if processes is not None and processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    jobs = [p if isinstance(p, OracleProblem) else OracleProblem(*p) for p in problems]
    seed = kwargs.pop("seed", None)
    if seed is not None and not isinstance(seed, np.random.SeedSequence):
        seed = np.random.SeedSequence(seed)
    seeds = seed.spawn(len(jobs)) if seed is not None else [None] * len(jobs)
    work = [(p, {**kwargs, "seed": s}) for p, s in zip(jobs, seeds)]
    workers = min(len(work), processes if processes is not None else (os.cpu_count() or 1))
    if workers <= 1:
        return [_solve(job) for job in work]
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_solve, work))
