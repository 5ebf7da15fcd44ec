"""Workload-based domain reduction: merge the domain values no query tells apart.

On attribute ``i``, two values whose columns are identical in every factor
of every workload term (for example the 99 values of ``hours`` that a
``CASE WHEN hours < 20 … END`` bucket maps to 3 groups) are never
distinguished by any query. Grouping them gives a partition matrix ``P_i``
(``m_i × n_i``, one 1 per column) and a reduced workload with
``W = W_red (P_1 ⊗ … ⊗ P_d)``, its factors being the distinct columns
(Ektelo's workload-based partitioning; HDMM's implicit representation).

Nothing is lost by optimizing on the reduced domain. For a reduced strategy
``A_red``, the expanded strategy ``A = A_red (⊗ P_i)`` has the same columns
(column ``j`` of ``A`` is column ``g(j)`` of ``A_red``), so the same L1 and L2
sensitivity, and since ``P = D^{1/2} Q`` with ``Q`` having orthonormal rows,
``W (AᵀA)⁺ Wᵀ = W_red (A_redᵀA_red)⁺ W_redᵀ``: every variance, the expected
error and the least-squares answers are those of the reduced problem. The
measurement is ``A_red (P x)``, so only the reduced cells are counted.
Attributes that shrink to one group under one-row factors (summed out
everywhere) are dropped from the reduced domain, their scalar folded into
the term weight.

>>> from dpsql.hdmm.matrix import Dense, Identity, Total
>>> from dpsql.hdmm.workload import Workload
>>> buckets = Dense([[1, 1, 0, 0, 0], [0, 0, 1, 1, 1]])      # two groups of five values
>>> W = Workload((5, 3, 4), [(1.0, (buckets, Identity(3), Total(4)))])
>>> r = reduce_domain(W)
>>> r.workload.domain, r.kept
((2, 3), (0, 1))
>>> [int(g) for g in r.labels[0]]      # groups numbered by their columns, not by position
[1, 1, 0, 0, 0]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Sequence

import numpy as np
import scipy.sparse as sp

from dpsql.errors import WorkloadError
from dpsql.hdmm.matrix import Dense, Identity, Kronecker, Matrix, Ones, Product, Sparse, VStack, Weighted, kron_terms
from dpsql.hdmm.strategy import Strategy
from dpsql.hdmm.workload import Workload

#: Implicit factors with more entries than this are not made dense to compare their columns;
#: their attribute is then left unreduced (always sound: a finer partition loses nothing).
#: Dense factors are compared whatever their size (a predicate on 5,000,000 coupled cells is
#: one row of them), as are sparse ones unless their distinct columns exceed it.
COMPARE_LIMIT = 1 << 22


class Partition(Sparse):
    """The ``m × n`` 0/1 matrix with ``P[labels[j], j] = 1``: ``P x`` sums ``x`` over each group."""

    def __init__(self, labels: np.ndarray) -> None:
        self.labels = np.asarray(labels, dtype=np.int64)
        n = self.labels.size
        super().__init__(sp.csr_matrix((np.ones(n), (self.labels, np.arange(n))), shape=(int(self.labels.max()) + 1, n)))


def _column_labels(f: Matrix) -> np.ndarray | None:
    """Equal labels for identical columns of ``f``, numbered in the lexicographic order of the
    columns (as ``np.unique(..., axis=1)`` numbers them), or None when ``f`` is too big to compare."""
    n = f.shape[1]
    if isinstance(f, Ones):
        return np.zeros(n, dtype=np.int64)
    if isinstance(f, Identity):
        return np.arange(n)
    if isinstance(f, Sparse):
        return _sparse_labels(f.matrix)
    if not isinstance(f, Dense) and f.shape[0] * n > COMPARE_LIMIT:  # a Dense factor is held already
        return None
    return _dense_labels(f.dense())


def _dense_labels(D: np.ndarray) -> np.ndarray:
    """The rank of every column of ``D`` among its distinct columns, in lexicographic order (row 0
    first): one sort of numbers per row, where ``np.unique(D, axis=1)`` compares whole columns
    (seconds for one row of a million values)."""
    n = D.shape[1]
    if D.shape[0] == 0 or n == 0:
        return np.zeros(n, dtype=np.int64)
    order = np.lexsort(D[::-1])
    S = D[:, order]
    ranks = np.cumsum(np.r_[True, np.any(S[:, 1:] != S[:, :-1], axis=0)]) - 1
    labels = np.empty(n, dtype=np.int64)
    labels[order] = ranks
    return labels


def _sparse_labels(M: sp.csr_matrix) -> np.ndarray | None:
    """:func:`_dense_labels` of a sparse matrix without densifying it: columns are grouped by
    their nonzero count and two fixed projections, each group is checked to hold one column
    exactly (None if not), and the groups are ranked on their representatives, densified (None
    when those would hold more than :data:`COMPARE_LIMIT` entries)."""
    C = sp.csc_matrix(M)
    C.sum_duplicates()
    C.eliminate_zeros()
    rows, n = C.shape
    probes = np.random.default_rng(0).random((rows, 2)) + 1.0
    candidate = _dense_labels(np.vstack([np.diff(C.indptr).astype(float), np.asarray(C.T @ probes).T]))
    _, reps = np.unique(candidate, return_index=True)
    if rows * reps.size > COMPARE_LIMIT or (C[:, reps[candidate]] != C).nnz:
        return None
    return _dense_labels(C[:, reps].toarray())[candidate]


def attribute_labels(factors: Sequence[Matrix]) -> np.ndarray:
    """The coarsest grouping of one attribute's values that every factor on it respects.

    Groups are numbered in the order of their columns' contents, so workloads that
    differ only in how the values are listed reduce to the same workload; an
    attribute with nothing to merge keeps its values in order."""
    n = factors[0].shape[1]
    seen: dict[int, np.ndarray] = {}
    for f in factors:
        if id(f) not in seen:
            labels = _column_labels(f)
            if labels is None:
                return np.arange(n)
            seen[id(f)] = labels
    labels = np.zeros(n, dtype=np.int64)
    for other in seen.values():  # ranks of (labels, other) pairs: lexicographic, as over the stacked rows
        labels = np.unique(labels * (int(other.max()) + 1) + other, return_inverse=True)[1].reshape(-1)
    return np.arange(n) if labels.max() + 1 == n else labels


def _reduced_factor(f: Matrix, labels: np.ndarray, m: int) -> Matrix:
    """``f`` restricted to one representative column per group (its columns within a group are equal)."""
    if m == f.shape[1]:
        return f
    if isinstance(f, Ones):
        return Ones(f.shape[0], m)
    _, reps = np.unique(labels, return_index=True)
    R = _columns(f, reps)
    if R.shape == (m, m) and np.array_equal(R, np.eye(m)):
        return Identity(m)
    if R.shape[0] == 1 and np.all(R == 1.0):
        return Ones(1, m)
    return Dense(R)


def _columns(f: Matrix, index: np.ndarray) -> np.ndarray:
    """Columns ``index`` of ``f``, dense (a sparse factor is not densified whole)."""
    return f.matrix[:, index].toarray() if isinstance(f, Sparse) else f.dense()[:, index]


def _same(f: Matrix, D: np.ndarray) -> bool:
    """Whether ``f`` equals the dense array ``D``."""
    return (f.matrix != sp.csr_matrix(D)).nnz == 0 if isinstance(f, Sparse) else np.array_equal(f.dense(), D)


@dataclass(frozen=True, eq=False)
class Reduction:
    """A workload's domain reduction.

    ``labels[i]`` gives the group of every value of attribute ``i`` of the full
    ``domain``; ``kept`` lists the attributes of the reduced domain (the others
    have one group and are summed out by every term); ``workload`` is the
    reduced workload, row for row the same queries as ``source``.
    """

    domain: tuple[int, ...]
    labels: tuple[np.ndarray, ...]
    kept: tuple[int, ...]
    workload: Workload
    source: Workload = field(repr=False)

    @cached_property
    def sizes(self) -> tuple[int, ...]:
        """Groups per attribute of the full domain."""
        return tuple(int(g.max()) + 1 for g in self.labels)

    @property
    def trivial(self) -> bool:
        """Whether nothing was merged or dropped."""
        return self.sizes == self.domain and len(self.kept) == len(self.domain)

    def partition(self, i: int) -> Partition:
        """``P_i`` for attribute ``i`` of the full domain."""
        return Partition(self.labels[i])

    def apply(self, workload: Workload) -> Workload:
        """``workload`` over the reduced domain. Refused (WorkloadError) for a workload whose
        factors tell apart values this reduction merged, since no reduced strategy answers it."""
        if workload is self.source:
            return self.workload
        if workload.domain != self.domain:
            raise WorkloadError(f"workload domain {workload.domain} does not match the reduction's {self.domain}")
        terms = []
        for w, fs in workload.terms:
            reduced = []
            for i, (f, g, m) in enumerate(zip(fs, self.labels, self.sizes)):
                r = _reduced_factor(f, g, m)
                if m != f.shape[1] and not _same(f, _columns(r, g)):
                    raise WorkloadError(f"attribute {i}: the workload distinguishes values the reduction merged")
                reduced.append(r)
            terms.append(_fold(w, reduced, self.kept))
        return Workload(self.workload.domain, terms)

    def expand(self, strategy: Strategy) -> Strategy:
        """The full-domain strategy measuring ``strategy`` on the reduced cells (itself if trivial)."""
        return strategy if self.trivial else ReducedStrategy(strategy, self)


def _fold(weight: float, reduced: Sequence[Matrix], kept: Sequence[int]) -> tuple[float, tuple[Matrix, ...]]:
    """A reduced term over the kept attributes, the dropped ones' single numbers folded into its weight."""
    for i, r in enumerate(reduced):
        if i not in kept:
            if r.shape != (1, 1):
                raise WorkloadError(f"attribute {i}: a factor with {r.shape[0]} rows on an attribute summed out")
            weight *= float(r.dense()[0, 0])
    return weight, tuple(reduced[i] for i in kept)


def reduce_domain(workload: Workload) -> Reduction:
    """Merge, on every attribute, the values that no factor of ``workload`` distinguishes."""
    d = len(workload.domain)
    labels = tuple(attribute_labels([fs[i] for _, fs in workload.terms]) for i in range(d))
    sizes = [int(g.max()) + 1 for g in labels]
    reduced = [[_reduced_factor(fs[i], labels[i], sizes[i]) for i in range(d)] for _, fs in workload.terms]
    # an attribute with one group whose every factor is a single nonzero number is summed out everywhere
    scalar = [sizes[i] == 1 and all(r[i].shape[0] == 1 and r[i].dense()[0, 0] != 0 for r in reduced)
              for i in range(d)]
    kept = tuple(i for i in range(d) if not scalar[i]) or (0,)
    terms = [_fold(w, r, kept) for (w, _), r in zip(workload.terms, reduced)]
    return Reduction(workload.domain, labels, kept, Workload([sizes[i] for i in kept], terms), workload)


@dataclass(eq=False)
class ReducedStrategy(Strategy):
    """A strategy on a reduced domain, expanded to the full one: ``A = A_red (⊗ P_i)``.

    Same sensitivity, variances and least-squares answers as ``inner`` on the
    reduced workload (see the module docstring); the private kernel measures
    ``inner`` on the reduced cells.
    """

    inner: Strategy
    reduction: Reduction

    @property
    def operator(self) -> str:  # type: ignore[override]
        return self.inner.operator

    @cached_property
    def matrix(self) -> Matrix:
        r = self.reduction
        blocks = []
        for w, fs in kron_terms(self.inner.matrix):
            by_attribute = dict(zip(r.kept, fs))
            expanded = [Product(by_attribute[i], r.partition(i)) if i in by_attribute else Ones(1, n)
                        for i, n in enumerate(r.domain)]
            blocks.append(Weighted(Kronecker(expanded), w))
        return VStack(blocks)

    def sensitivity(self, p: int) -> float:
        return self.inner.sensitivity(p)

    def trace_error(self, workload: Workload) -> float:
        return self.inner.trace_error(self.reduction.apply(workload))

    def query_variances(self, workload: Workload) -> list[np.ndarray]:
        return self.inner.query_variances(self.reduction.apply(workload))

    def cross_variances(self, workload: Workload, a: int, b: int) -> np.ndarray:
        return self.inner.cross_variances(self.reduction.apply(workload), a, b)

    def cross_covariance(self, workload: Workload, a: int, b: int) -> np.ndarray:
        return self.inner.cross_covariance(self.reduction.apply(workload), a, b)
