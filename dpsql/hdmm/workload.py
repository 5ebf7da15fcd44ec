"""Workloads: weighted unions of Kronecker products over a multi-attribute domain.

This is HDMM's Equation 3, ``W = [w₁ (W₁⁽¹⁾ ⊗ … ⊗ W₁⁽ᵈ⁾); …; w_k (W_k⁽¹⁾ ⊗ …)]``,
the form every SQL batch compiles to and every strategy operator consumes.
A :class:`Workload` is itself an implicit :class:`~dpsql.hdmm.matrix.Matrix`
over the flattened full domain (C order, attribute 0 slowest).

>>> W = marginals_workload((2, 3), k=1)
>>> W.shape
(5, 6)
>>> [len(t[1]) for t in W.terms]
[2, 2]
"""

from __future__ import annotations

import hashlib
import itertools
import math
from typing import Callable, Iterable, Sequence

import numpy as np

from dpsql.errors import WorkloadError
from dpsql.hdmm.matrix import DENSE_LIMIT, Identity, Kronecker, Matrix, Ones, Sparse, Total, VStack, Weighted
from dpsql.limits import check_measured_cells

Term = tuple[float, tuple[Matrix, ...]]


class Workload(VStack):
    """A weighted union of Kronecker products over ``domain``.

    ``terms`` is a list of ``(weight, factors)`` with one factor per attribute;
    factor ``i`` must have ``domain[i]`` columns. Rows are ordered term by
    term, and within a term in the Kronecker (C) order of the factors' rows.
    """

    def __init__(self, domain: Sequence[int], terms: Iterable[tuple[float, Sequence[Matrix]]]) -> None:
        self.domain = tuple(int(n) for n in domain)
        self.terms: list[Term] = []
        for k, (w, factors) in enumerate(terms):
            factors = tuple(factors)
            if len(factors) != len(self.domain):
                raise WorkloadError(f"term {k} has {len(factors)} factors for {len(self.domain)} attributes")
            for i, (f, n) in enumerate(zip(factors, self.domain)):
                if f.shape[1] != n:
                    raise WorkloadError(f"term {k}, attribute {i}: factor has {f.shape[1]} columns, domain has {n}")
            if not np.isfinite(w) or w == 0:
                raise WorkloadError(f"term {k} has weight {w!r}; weights must be finite and nonzero")
            self.terms.append((float(w), factors))
        if not self.terms:
            raise WorkloadError("a workload needs at least one term")
        super().__init__([Weighted(Kronecker(f), w) for w, f in self.terms])

    @classmethod
    def of(cls, matrix: Matrix) -> "Workload":
        """A one-attribute workload holding a single query matrix."""
        return cls((matrix.shape[1],), [(1.0, (matrix,))])

    @property
    def num_queries(self) -> int:
        return self.shape[0]

    def term_rows(self, k: int) -> slice:
        """Rows of term ``k`` within the stacked workload."""
        return slice(int(self.offsets[k]), int(self.offsets[k + 1]))

    def largest_marginal(self) -> int:
        """Cells of the largest marginal a term reads: the product of the domains of the
        attributes it does not sum out. Any strategy that answers the term measures at least
        that marginal."""
        return max((math.prod(f.shape[1] for f in factors if not isinstance(f, Ones)) for _, factors in self.terms),
                   default=1)

    def check_size(self) -> None:
        """Refuse (ResourceLimitError), before a strategy is selected, a workload whose
        :meth:`largest_marginal` has more than :data:`~dpsql.limits.MAX_MEASURED_CELLS` cells (the
        kernel checks the selected strategy's marginals again before reading data)."""
        check_measured_cells(self.largest_marginal(), "answering this workload means counting a marginal of")

    def fingerprint(self) -> str:
        """A stable hash of what strategy selection depends on.

        Selection sees each term's weight, its factors' Gram matrices and its
        row count, so two workloads that agree on those share a fingerprint
        however they were built.
        """
        h = hashlib.sha256()
        h.update(repr(self.domain).encode())
        for w, factors in self.terms:
            h.update(repr(round(w, 12)).encode())
            for f in factors:
                h.update(factor_key(f))
        return h.hexdigest()


def factor_key(f: Matrix) -> bytes:
    """Bytes identifying a factor up to what strategies see: its shape and Gram matrix, or the
    factor itself where the ``n × n`` Gram would be too large to hold and the factor is not (a
    predicate or a SUM's values on a column of 500,000 values: one row, where the Gram has
    250 billion entries; a bucketing of that column, held sparse)."""
    rows, n = f.shape
    if n * n > DENSE_LIMIT and isinstance(f, Identity):  # a GROUP BY on a column of many values
        return repr(f.shape).encode() + b"I"
    if n * n > DENSE_LIMIT and isinstance(f, Sparse):
        m = f.matrix.copy()
        m.sum_duplicates()
        m.eliminate_zeros()
        return repr(f.shape).encode() + b"S" + b"".join(
            np.ascontiguousarray(a).tobytes() for a in (m.indptr.astype(np.int64), m.indices.astype(np.int64),
                                                        np.round(m.data, 9)))
    G = f.dense() if n * n > DENSE_LIMIT and rows * n <= DENSE_LIMIT else f.gram().dense()
    return repr(f.shape).encode() + np.ascontiguousarray(np.round(G, 9)).tobytes()


def kway_subsets(d: int, k: int, lower: bool = False) -> list[tuple[int, ...]]:
    """All attribute subsets of size ``k`` (or of every size up to ``k`` if ``lower``)."""
    sizes = range(0, k + 1) if lower else [k]
    return [c for r in sizes for c in itertools.combinations(range(d), r)]


def products_workload(
    domain: Sequence[int],
    subsets: Iterable[Sequence[int]],
    block: Callable[[int, int], Matrix] = lambda i, n: Identity(n),
    weights: Sequence[float] | None = None,
) -> Workload:
    """One product per subset: ``block(i, n_i)`` on its attributes, ``T`` elsewhere.

    With the default block this is a marginal workload; with ``Prefix`` on
    some attributes it is HDMM's prefix-marginal family.
    """
    subsets = [tuple(s) for s in subsets]
    weights = [1.0] * len(subsets) if weights is None else list(weights)
    terms = [
        (w, tuple(block(i, n) if i in s else Total(n) for i, n in enumerate(domain)))
        for w, s in zip(weights, subsets)
    ]
    return Workload(domain, terms)


def marginals_workload(domain: Sequence[int], k: int, lower: bool = False) -> Workload:
    """All ``k``-way marginals (every size up to ``k`` when ``lower``)."""
    return products_workload(domain, kway_subsets(len(domain), k, lower))
