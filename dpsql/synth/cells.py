"""The cells of a set of marginals, as counting queries over records.

DualQuery and FEM play their game over individual counting queries: every
cell of every workload marginal (and its negation). :class:`MarginalCells`
numbers those cells (marginal by marginal, each in C order, as
:meth:`dpsql.private.kernel.PrivateTable.sample_cells` does), turns a cell into an
oracle :class:`~dpsql.synth.oracle.Conjunction`, and answers every cell on a
set of records at once. Public math: it never sees private data.

>>> cells = MarginalCells((2, 3), [(0,), (0, 1)])
>>> cells.size, cells.locate(4)
(8, (1, (0, 2)))
>>> cells.fractions(np.array([[0, 2], [1, 2]])).tolist()
[0.5, 0.5, 0.0, 0.0, 0.5, 0.0, 0.0, 0.5]
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np

from dpsql.errors import WorkloadError
from dpsql.synth.oracle import Conjunction

__all__ = ["MarginalCells", "marginal_name", "random_marginals"]


class MarginalCells:
    """Every cell of the marginals ``subsets`` (tuples of attribute positions) over ``domain``."""

    def __init__(self, domain: Sequence[int], subsets: Sequence[Sequence[int]]) -> None:
        self.domain = tuple(int(n) for n in domain)
        self.subsets = tuple(tuple(int(a) for a in s) for s in subsets)
        if not self.subsets:
            raise WorkloadError("the workload needs at least one marginal")
        for s in self.subsets:
            if len(set(s)) != len(s) or any(not 0 <= a < len(self.domain) for a in s):
                raise WorkloadError(f"marginal {s} is not a set of attributes of a {len(self.domain)}-attribute domain")
        self.shapes = tuple(tuple(self.domain[a] for a in s) for s in self.subsets)
        sizes = [math.prod(shape) for shape in self.shapes]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

    @property
    def size(self) -> int:
        """The number of cell queries."""
        return int(self.offsets[-1])

    def locate(self, j: int) -> tuple[int, tuple[int, ...]]:
        """Cell ``j`` as (marginal index, cell values on that marginal's attributes)."""
        m = int(np.searchsorted(self.offsets, j, side="right")) - 1
        cell = np.unravel_index(int(j) - int(self.offsets[m]), self.shapes[m]) if self.shapes[m] else ()
        return m, tuple(int(v) for v in cell)

    def conjunction(self, j: int) -> Conjunction:
        """Cell ``j`` as the conjunction of its attribute values."""
        m, cell = self.locate(j)
        return Conjunction.from_cell(self.subsets[m], cell)

    def counts(self, records: np.ndarray) -> np.ndarray:
        """How many of ``records`` (an (r, d) int array) fall in each cell."""
        records = np.asarray(records, dtype=np.int64).reshape(-1, len(self.domain))
        parts = []
        for subset, shape in zip(self.subsets, self.shapes):
            flat = (np.ravel_multi_index(tuple(records[:, a] for a in subset), shape) if subset
                    else np.zeros(len(records), dtype=np.int64))
            parts.append(np.bincount(flat, minlength=math.prod(shape)))
        return np.concatenate(parts).astype(float)

    def fractions(self, records: np.ndarray) -> np.ndarray:
        """The fraction of ``records`` in each cell (all zeros for no records)."""
        records = np.asarray(records).reshape(-1, len(self.domain))
        return self.counts(records) / max(len(records), 1)


def marginal_name(attributes: Sequence, subset: Sequence[int]) -> str:
    """How reports name a marginal: its attributes' names joined by `` x ``; the row count, the
    marginal of no attribute, is ``(rows)`` (a report showed it as a blank name).

    >>> from types import SimpleNamespace as A
    >>> marginal_name([A(name="age"), A(name="sex")], (0, 1)), marginal_name([A(name="age")], ())
    ('age x sex', '(rows)')
    """
    return " x ".join(attributes[a].name for a in subset) or "(rows)"


def random_marginals(attributes: int, k: int, count: int | None = None, seed: int | None = None) -> list[tuple[int, ...]]:
    """``count`` distinct k-way marginals of ``attributes`` attributes drawn uniformly
    at random without replacement (all of them, in order, when ``count`` is None
    or at least their number). Public randomness: the choice is data-independent.

    >>> random_marginals(4, 2)
    [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    >>> len(random_marginals(15, 3, count=64, seed=0))
    64
    """
    if not 1 <= k <= attributes:
        raise WorkloadError(f"a {k}-way workload needs 1 <= k <= {attributes} attributes")
    every = list(itertools.combinations(range(attributes), k))
    if count is None or count >= len(every):
        return every
    if count < 1:
        raise WorkloadError(f"the workload needs at least one marginal, got count={count}")
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(every), size=count, replace=False)
    return [every[i] for i in sorted(picked)]
