"""The best-response problem compiled to arrays, shared by the heuristic and the MIP.

:class:`CompiledProblem` validates a problem, simplifies it exactly (drops
dead queries and literals, folds one-literal queries into linear terms, merges
duplicates) and lays the remaining *active* queries out as sparse incidence
matrices over the one-hot encoding of records. The vectorized evaluators
(:func:`values_many`, :func:`unsatisfied_many`, :func:`allows_many`) work on
that form; both solvers and the entry points score records through them, so
every reported objective comes from one place.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse as sp

from dpsql.errors import WorkloadError
from dpsql.synth.oracle.queries import Conjunction, as_index

__all__ = ["CompiledProblem", "values_many", "unsatisfied_many", "allows_many", "DENSE_MASK_LIMIT"]

#: Largest literals × values block the heuristic keeps dense (8 bytes each); larger ones are sparse.
DENSE_MASK_LIMIT = 1 << 21


class CompiledProblem:
    """The problem in array form, shared by the MIP and the heuristic.

    Simplifications, all exact: zero-weight and never-true queries are
    dropped, literals allowing every value are dropped, queries left with no
    literal become a constant, queries left with one literal become linear
    terms (``q(x) = [x_i ∈ S]`` is linear in the one-hot encoding), and
    identical conjunctions are merged by summing their weights. What remains
    are the *active* queries, each with at least two literals on distinct
    attributes.

    Attributes read by the solvers: ``domain`` (attribute sizes), ``offsets``
    (start of each attribute's block of one-hot columns), ``linear`` (linear
    term per column), ``constant``, ``weights`` and ``arity`` (per active
    query), ``lit_query`` and ``lit_attr`` (per literal of an active query),
    ``M`` (literal × column incidence), and per attribute ``attr_lits``,
    ``attr_queries`` and ``attr_masks``.
    """

    def __init__(self, domain: Sequence[int], queries: Sequence[Conjunction], weights: Sequence[float] | np.ndarray,
                 linear: Sequence[Sequence[float] | np.ndarray] | None) -> None:
        domain = tuple(as_index(n, "attribute size") for n in domain)
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
            self.attr_masks.append(block.toarray() if len(ls) * domain[i] <= DENSE_MASK_LIMIT else block.tocsc())

    @property
    def n_active(self) -> int:
        """The number of active queries."""
        return len(self.weights)

    def unsatisfied(self, record: np.ndarray) -> np.ndarray:
        """How many literals of each active query ``record`` violates."""
        return unsatisfied_many(self, np.asarray(record, dtype=np.int64)[None, :])[0]

    def value(self, record: Sequence[int] | np.ndarray) -> float:
        """The exact objective of one record."""
        return float(values_many(self, self.linear[None, :], np.asarray(record, dtype=np.int64)[None, :])[0])

    def check_record(self, record: Sequence[int] | None) -> np.ndarray | None:
        """``record`` (e.g. a warm start) validated as a record of the domain, as an int array; None stays None."""
        if record is None:
            return None
        out = np.array([as_index(v, "warm start value") for v in record], dtype=np.int64)
        if len(out) != len(self.domain) or np.any(out >= np.array(self.domain)):
            raise WorkloadError(f"warm start {tuple(record)} is not a record of the domain {self.domain}")
        return out


def values_many(problem: CompiledProblem, linear: np.ndarray, records: np.ndarray) -> np.ndarray:
    """The exact objective of each record under its own linear terms."""
    values = problem.constant + np.take_along_axis(linear, problem.offsets[:-1] + records, axis=1).sum(axis=1)
    if problem.n_active:
        values = values + (unsatisfied_many(problem, records) == 0) @ problem.weights
    return values


def unsatisfied_many(problem: CompiledProblem, records: np.ndarray) -> np.ndarray:
    """:meth:`CompiledProblem.unsatisfied` for each record: a (records × active queries) count array."""
    unsat = np.zeros((len(records), problem.n_active), dtype=np.int64)
    for i, qs in enumerate(problem.attr_queries):
        unsat[:, qs] += ~allows_many(problem, i, records[:, i])
    return unsat


def allows_many(problem: CompiledProblem, i: int, values: np.ndarray) -> np.ndarray:
    """``allows(i, v)`` for each ``v`` of ``values``: a (records × literals on ``i``) boolean array."""
    mask = problem.attr_masks[i]
    block = mask[:, values] if isinstance(mask, np.ndarray) else mask[:, values].toarray()
    return block.T != 0
