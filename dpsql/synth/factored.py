"""A distribution over a product domain, kept as a product of independent groups.

MWEM's Section 4: when no measured query spans two groups of attributes, the
multiplicative-weights distribution is a product of independent per-group
distributions. So the full domain (which may be astronomically large) is
never materialized: each group keeps a dense table over its own attributes
only, and a marginal spanning several groups is the outer product of theirs.
Measuring a marginal that spans groups merges them (their outer product
becomes one table), which is refused above :data:`MAX_GROUP_CELLS` cells.

Everything here is public math on released values: no private data.

>>> import numpy as np
>>> d = FactoredDistribution((2, 3, 4), total=24.0)
>>> d.marginal((0, 2)).shape, float(d.marginal(()).sum())
((8,), 24.0)
>>> d.update((0,), np.array([18.0, 6.0]))      # multiplicative weights toward a measurement
>>> bool(d.marginal((0,))[0] > d.marginal((0,))[1])
True
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from dpsql.errors import WorkloadError

#: Largest table a group of attributes may hold.
MAX_GROUP_CELLS = 20_000_000


class FactoredDistribution:
    """``n`` times a product of per-group distributions over ``domain``.

    ``groups`` is a list of ``(attributes, log_weights)``: a sorted tuple of
    attribute positions and an array of shape ``[domain[a] for a in
    attributes]`` holding unnormalized log-probabilities.
    """

    def __init__(self, domain: Sequence[int], total: float) -> None:
        self.domain = tuple(int(n) for n in domain)
        self.total = float(total)
        self.groups: list[tuple[tuple[int, ...], np.ndarray]] = [
            ((a,), np.zeros(n)) for a, n in enumerate(self.domain)]
        # each group's normalized probabilities, by the identity of its log-weight array
        # (every change to a group replaces that array, so a stale entry is never hit)
        self._cached: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    # -- structure -------------------------------------------------------------------
    def group_of(self, attribute: int) -> int:
        return next(g for g, (attrs, _) in enumerate(self.groups) if attribute in attrs)

    def merged_cells(self, subset: Sequence[int]) -> int:
        """Cells of the group that measuring ``subset`` would create."""
        touched = {self.group_of(a) for a in subset}
        return math.prod(self.groups[g][1].size for g in touched)

    def _merge(self, subset: Sequence[int]) -> int:
        """Join the groups ``subset`` touches into one; return its index."""
        touched = sorted({self.group_of(a) for a in subset})
        if len(touched) <= 1:
            return touched[0] if touched else 0
        if self.merged_cells(subset) > MAX_GROUP_CELLS:
            raise WorkloadError(f"measuring attributes {tuple(subset)} would join groups into more than "
                                f"{MAX_GROUP_CELLS:,} cells")
        attrs: tuple[int, ...] = ()
        table = np.zeros(())
        for g in touched:
            a, t = self.groups[g]
            attrs += a
            table = np.add.outer(table, t)
        order = np.argsort(attrs)
        merged = (tuple(int(attrs[i]) for i in order), np.transpose(table, order))
        self.groups = [grp for g, grp in enumerate(self.groups) if g not in touched] + [merged]
        self.groups.sort(key=lambda grp: grp[0][0])
        return self.group_of(subset[0])

    # -- queries ---------------------------------------------------------------------
    def _probabilities(self, g: int) -> np.ndarray:
        log_w = self.groups[g][1]
        hit = self._cached.get(id(log_w))
        if hit is not None and hit[0] is log_w:
            return hit[1]
        p = np.exp(log_w - log_w.max())
        p /= p.sum()
        self._cached = {id(t): (t, c) for t, c in self._cached.values() if any(t is w for _, w in self.groups)}
        self._cached[id(log_w)] = (log_w, p)
        return p

    def marginal(self, subset: Sequence[int]) -> np.ndarray:
        """Expected counts on ``subset`` (sorted attribute positions), flattened in C order."""
        subset = tuple(subset)
        out = np.ones(())
        axes: list[int] = []
        for g, (attrs, _) in enumerate(self.groups):
            keep = [a for a in attrs if a in subset]
            if not keep:
                continue
            p = self._probabilities(g)
            p = p.sum(axis=tuple(i for i, a in enumerate(attrs) if a not in subset))
            out = np.multiply.outer(out, p)
            axes += keep
        if not axes:
            return np.array([self.total])
        order = np.argsort(axes)
        return self.total * np.transpose(out, order).reshape(-1)

    # -- learning ----------------------------------------------------------------------
    def update(self, subset: Sequence[int], measured: np.ndarray) -> None:
        """One multiplicative-weights step toward a measured marginal (MWEM, Figure 1):
        each record's weight is multiplied by ``exp((m_c − e_c) / 2n)`` for its cell ``c``,
        ``e`` being the current estimate, then the total is kept at ``n``."""
        subset = tuple(sorted(subset))
        if not subset:
            return
        g = self._merge(subset)
        attrs, log_w = self.groups[g]
        error = (np.asarray(measured, dtype=float) - self.marginal(subset)) / (2.0 * self.total)
        shape = [self.domain[a] if a in subset else 1 for a in attrs]
        self.groups[g] = (attrs, log_w + error.reshape(shape))

    def sample(self, rows: int, rng: np.random.Generator) -> np.ndarray:
        """``rows`` records drawn from the distribution, as an ``(rows, d)`` int array."""
        out = np.zeros((rows, len(self.domain)), dtype=np.int64)
        for g, (attrs, log_w) in enumerate(self.groups):
            p = self._probabilities(g).reshape(-1)
            cells = rng.choice(p.size, size=rows, p=p)
            for a, idx in zip(attrs, np.unravel_index(cells, log_w.shape)):
                out[:, a] = idx
        return out
