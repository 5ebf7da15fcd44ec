"""The oracle's query language: conjunctions of attribute literals, and the objective.

A best-response problem is a weighted sum of :class:`Conjunction` queries
(plus per-attribute linear terms) over a finite product domain; this module
holds that representation and :func:`objective`, the objective evaluated
straight from its definition (a reference for callers and tests; the solvers
score records on the compiled form, :mod:`dpsql.synth.oracle.compiled`). It
is plain data with validation and knows nothing of how the maximum is found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from dpsql.errors import WorkloadError

__all__ = ["Conjunction", "objective", "as_index"]


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
            attribute = as_index(attribute, "attribute")
            values = frozenset(as_index(v, "value") for v in values)
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


def as_index(value: Any, what: str) -> int:
    """``value`` as an int if it is a non-negative integer (not a bool), else a WorkloadError naming ``what``."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 0:
        raise WorkloadError(f"{what} must be a non-negative int, got {value!r}")
    return int(value)
