"""Refining sampled records toward measured marginals: PrivSyn's gradually-update method.

One public function, :func:`refine`. A table sampled from a graphical model has the model's
marginals, and a model small enough to hold cannot join every measured attribute set. The
records are then moved, a few at a time, toward every measured marginal in turn (Zhang et
al., "PrivSyn", USENIX Security 2021, §5): for one marginal, a share ``α`` of each cell's
excess over its target leaves it, and the records taken out go to the cells short of
their target, in proportion to the shortfall; differences within twice the target's noise
are left alone, so that the records follow what the measurements show, not their noise.
A record sent to a cell becomes a copy of a record already there, so that its other
attributes stay consistent with that cell (taking only the marginal's values, which PrivSyn
does for part of the records, broke deterministic pairs such as ADULT's education and
education-num, and doubled the max error); a record sent to an empty cell takes the cell's
values. Sweeps over all the marginals repeat with ``α`` shrinking, so the table settles near
all of them at once. Targets are released values (noisy counts, with their noise's standard
deviation): this is post-processing, at no privacy cost.

>>> import numpy as np
>>> records = np.zeros((100, 2), dtype=np.int64)                     # every record in cell (0, 0)
>>> target = np.array([10.0, 20.0, 30.0, 40.0])                        # counts on attributes (0, 1)
>>> out = refine(records, (2, 2), [((0, 1), target, 0.0)], np.random.default_rng(0))
>>> np.bincount(out[:, 0] * 2 + out[:, 1], minlength=4).tolist()
[10, 20, 30, 40]
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from dpsql.synth.graphical import allot

__all__ = ["refine"]


def refine(records: np.ndarray, domain: Sequence[int], targets: Sequence[tuple[tuple[int, ...], np.ndarray, "float | np.ndarray"]],
           rng: np.random.Generator, sweeps: int = 30, start: float = 1.0, decay: float = 0.9,
           tolerance: float = 2.0) -> np.ndarray:
    """``records`` (an ``n × d`` array of domain indices, not modified) moved toward the marginal
    ``targets`` (``(attributes, counts flat in C order, their noise's standard deviation σ: one,
    or one per cell)``) in
    ``sweeps`` sweeps, the share moved starting at ``start`` and multiplied by ``decay`` after
    each (see the module docstring). A cell is off only by what exceeds ``tolerance · σ``: a
    difference noise alone could make is left alone, so the records do not learn the noise."""
    records = np.array(records, dtype=np.int64, copy=True)
    if len(records) == 0 or not targets:
        return records
    goals = [(tuple(s), np.asarray(t, dtype=float), tolerance * np.asarray(sd, dtype=float)) for s, t, sd in targets if s]
    alpha = start
    for _ in range(sweeps):
        for k in rng.permutation(len(goals)):
            _step(records, domain, *goals[k], alpha, rng)
        alpha *= decay
    return records


def _step(records: np.ndarray, domain: Sequence[int], subset: tuple[int, ...], target: np.ndarray, slack: float,
          alpha: float, rng: np.random.Generator) -> None:
    """Move a share ``alpha`` of each cell's excess over ``target`` (beyond ``slack``) to the cells
    short of it (beyond ``slack``), in place."""
    shape = [domain[a] for a in subset]
    cells = np.ravel_multi_index(records[:, list(subset)].T, shape)
    counts = np.bincount(cells, minlength=target.size)
    excess = counts - target
    over, short = np.maximum(excess - slack, 0.0), np.maximum(-excess - slack, 0.0)
    budget = min(over.sum(), short.sum())
    if budget <= 0:
        return
    over *= budget / over.sum()
    leave = np.minimum(np.floor(alpha * over + rng.random(target.size)).astype(np.int64), counts)
    moved = int(leave.sum())
    if moved == 0:
        return
    dest = rng.permutation(allot(short, moved, rng))
    # the records of the cells that lose or gain records (often a tenth of a large table: only
    # those are sorted), each cell's in random order: the first leave[c] of cell c go
    involved = leave > 0
    involved[dest] = True
    pool = np.flatnonzero(involved[cells])
    pool = pool[rng.permutation(len(pool))]
    by_cell = pool[np.argsort(_sort_key(cells[pool], target.size), kind="stable")]
    first = np.concatenate([[0], np.cumsum(np.where(involved, counts, 0))])
    rank = np.arange(len(by_cell)) - first[cells[by_cell]]
    going = by_cell[rank < leave[cells[by_cell]]]
    # records become copies of a record already in their new cell, or take the values of an empty one
    members = counts[dest]
    copy = members > 0
    source = by_cell[first[dest[copy]] + (rng.random(int(copy.sum())) * members[copy]).astype(np.int64)]
    records[going[copy]] = records[source]
    records[np.ix_(going[~copy], list(subset))] = np.column_stack(np.unravel_index(dest[~copy], shape))


def _sort_key(cells: np.ndarray, size: int) -> np.ndarray:
    """``cells`` (indices below ``size``) as 16-bit keys when they fit: numpy's stable sort of
    16-bit integers is a radix sort, 7 times faster on a million records than its merge sort of
    64-bit ones, in the same order."""
    return cells.astype(np.uint16) if size <= 2**16 else cells
