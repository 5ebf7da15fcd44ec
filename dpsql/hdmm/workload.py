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
import scipy.sparse as sp

from dpsql.errors import WorkloadError
from dpsql.hdmm.matrix import DENSE_LIMIT, Identity, Kronecker, Matrix, Ones, Sparse, Total, VStack, Weighted
from dpsql.hdmm.symmetric_gram import coefficients
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
        """A stable hash of what strategy selection depends on: the domain, and each term's weight
        and factors (:func:`factor_key`). Two workloads with equal fingerprints have equal weights,
        row counts and factor Gram matrices (to 9 decimals), so one's strategy serves the other."""
        h = hashlib.sha256()
        h.update(repr(self.domain).encode())
        for w, factors in self.terms:
            h.update(repr(round(w, 12)).encode())
            for f in factors:
                key = factor_key(f)
                h.update(len(key).to_bytes(8, "little") + key)
        return h.hexdigest()


def factor_key(f: Matrix) -> bytes:
    """Bytes identifying a factor up to what strategies see (its shape and Gram matrix), read from
    its structure: ``aI + bJ`` by its two coefficients where the factor's type tells them (a GROUP
    BY on 3,142 counties or a total: no ``n × n`` Gram formed, which took seconds a request), a
    sparse factor by its entries, any other by its dense entries when it has fewer rows than
    columns (a bucketing, a predicate, a SUM's values) and else by its dense Gram; above
    :data:`~dpsql.hdmm.matrix.DENSE_LIMIT`, whichever of the two fits. Equal keys mean equal
    shapes and Grams (to 9 decimals); equal Grams may have different keys when their factors
    are built differently, which costs only a cache miss."""
    rows, n = f.shape
    head = repr(f.shape).encode()
    c = coefficients(f)
    if c is not None:
        return head + b"C" + repr((round(c[0], 9) + 0.0, round(c[1], 9) + 0.0)).encode()
    if isinstance(f, Sparse):
        m = sp.csr_matrix(f.matrix, copy=True)
        m.sum_duplicates()
        m.eliminate_zeros()
        m.sort_indices()
        return head + b"S" + b"".join(
            np.ascontiguousarray(a).tobytes() for a in (m.indptr.astype(np.int64), m.indices.astype(np.int64),
                                                        np.round(m.data, 9) + 0.0))
    if rows < n and rows * n <= DENSE_LIMIT or n * n > DENSE_LIMIT:
        return head + b"D" + np.ascontiguousarray(np.round(f.dense(), 9) + 0.0).tobytes()
    return head + b"G" + np.ascontiguousarray(np.round(f.gram().dense(), 9) + 0.0).tobytes()


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
