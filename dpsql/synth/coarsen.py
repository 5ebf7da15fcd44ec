"""Wide columns: an ordered column of too many values is coarsened for the model, and only for it.

A model's marginals multiply its attributes' sizes: an integer column declared ``0..99999``
(ADULT's ``capital_gain``) makes every pair with it hundreds of thousands of cells, far more
than can be measured or fitted. Such a column (:func:`wide`: a single integer or date column of
more than :data:`WIDE_VALUES` values) is measured and modelled in public, data-independent bins
(:func:`bins`): the union of logarithmic bins from the low end of the declared domain (the
low value alone, then widths 1, 2, 4, ...: a skewed column such as a capital gain keeps its
zero apart) and :data:`EQUAL_BINS` equal-width ones (a spread column keeps its shape). The
model and every measurement but one count the bins; the column's one-way marginal is measured
at full resolution, and each sampled bin becomes one of its values drawn from that noisy
one-way distribution (:func:`coarsen`). Everything here is public or post-processing of
released counts.

Every method takes this one path. pgm (under Gaussian noise), aim and mst measure every one-way
marginal at full resolution anyway, and :func:`shrink` turns those counts into the model's domain:
compressed, with the wide columns in bins (they measure the wide columns' one-way marginals in their
bins too, :func:`~dpsql.synth.pgm.first_counts`). The methods that measure no one-way marginal
(mwem, fem, dualquery, and pgm under a pure ``ε``) run on the binned attributes, and
:data:`WIDE_SHARE` of the request measures the wide columns' one-way marginals at full resolution
beforehand (Laplace noise under a pure ``ε`` or an ``(ε, δ)`` spend, Gaussian under a ``ρ`` one),
which :func:`coarsen` turns into each bin's values (``dpsql.synth.synthesize``).

>>> bins(100_000)[:10].tolist(), int(bins(100_000).max()) + 1
([0, 1, 2, 2, 3, 3, 3, 3, 4, 4], 49)
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from dpsql.schema import Attribute, DateRange, IntegerRange, Schema
from dpsql.synth.compress import THRESHOLD, Compression, compress, merged_shares
from dpsql.synth.estimate import Observation

__all__ = ["WIDE_VALUES", "EQUAL_BINS", "WIDE_SHARE", "wide", "bins", "binned", "spikes", "coarsen", "shrink"]

#: An integer column of more values than this is modelled in bins (a pair of two such columns
#: would already be a million cells; the widest of the held-out tables' columns has 500).
WIDE_VALUES = 1024
#: The equal-width bins over a wide column's declared domain (besides the logarithmic ones).
EQUAL_BINS = 32
#: The share of a request that measures its wide columns' one-way marginals at full resolution,
#: for the methods that measure no one-way marginal of their own (the values drawn in each bin);
#: also those of the columns no workload marginal names, one bin each for those methods.
WIDE_SHARE = 0.1


def wide(attributes: Sequence[Attribute], schema: Schema) -> dict[int, np.ndarray]:
    """The attributes to coarsen, by position, each with its value's bin (:func:`bins`): those of
    one integer or date column of more than :data:`WIDE_VALUES` values (ten years of days are
    3,653). NULL, when the column has it, is a bin of its own."""
    out = {}
    for i, a in enumerate(attributes):
        column = schema.column(a.columns[0]) if len(a.columns) == 1 and not a.split else None
        if isinstance(column, (IntegerRange, DateRange)) and a.size > WIDE_VALUES:
            values = a.size - (1 if column.nullable else 0)
            labels = bins(values)
            out[i] = np.append(labels, labels[-1] + 1) if column.nullable else labels
    return out


def binned(attributes: Sequence[Attribute], wide: dict[int, np.ndarray]) -> list[Attribute]:
    """``attributes`` with the ``wide`` ones (by position, each value's bin) counted in their bins."""
    return [a.grouped(wide[i]) if i in wide else a for i, a in enumerate(attributes)]


def bins(size: int) -> np.ndarray:
    """Each of ``size`` ordered values' bin: edges at offsets ``0, 1, 2, 4, 8, ...`` from the low
    end and at every ``size / EQUAL_BINS``, numbered from 0 (data-independent)."""
    edges = {0} | {2**k for k in range(size.bit_length()) if 2**k < size} | \
        {size * k // EQUAL_BINS for k in range(EQUAL_BINS)}
    return np.searchsorted(np.array(sorted(edges)), np.arange(size), side="right") - 1


def spikes(values: int, laplace: bool = False) -> float:
    """How many noise standard deviations the noise on one of ``values`` empty cells exceeds with
    probability ``1/values`` (about one false value a column): ``√(2 ln m)`` for Gaussian noise,
    ``ln(m/2)/√2`` for Laplace noise (its tail ``½e^{−t/b}``, standard deviation ``√2·b``).
    At 3 standard deviations a Laplace-measured column of 100,000 values showed hundreds of
    values that were noise alone, and a fifth of the values drawn were among them.

    >>> round(spikes(100_000), 2), round(spikes(100_000, laplace=True), 2)
    (4.8, 7.65)
    """
    return math.sqrt(2 * math.log(values)) if not laplace else math.log(values / 2) / math.sqrt(2)


def coarsen(compression: Compression, binned: dict[int, np.ndarray], one_way: Sequence[Observation],
            threshold: float = THRESHOLD, laplace: bool = False) -> Compression:
    """``compression`` with the ``binned`` attributes' values grouped in their bins, each value's
    share of its bin from the noisy full-resolution one-way counts ``one_way`` (with ``laplace``
    noise, else Gaussian): the values counted above ``threshold`` noise standard deviations, or
    :func:`spikes` if more, in proportion to their counts; the others share their noisy total.

    * On a wide column (more than :data:`WIDE_VALUES` values), whose values below the threshold
      are mostly empty cells, they share it equally, and only when it is above ``threshold``
      standard deviations (of its summed noise), else nothing.
    * On a narrower one (binned whole because no workload marginal names it), they share it
      clipped at 0 as :func:`~dpsql.synth.compress.compress`'s merged values do
      (:func:`~dpsql.synth.compress.merged_shares`): a 4-value column counted
      ``250, 80, 90, 85`` with noise of standard deviation 70 keeps every value, where the
      wide rule drew the first alone.

    A bin of no such value draws its values uniformly. Post-processing.

    >>> from dpsql.synth.compress import compress
    >>> o = Observation((0,), np.array([90.0, 1.0, -1.0, 10.0, 2.0, 2.0, 2.0]), 1.0)
    >>> c = coarsen(compress((7,), []), {0: np.array([0, 0, 1, 1, 2, 2, 2])}, [o])
    >>> c.labels[0].tolist(), c.shares[0].round(3).tolist()
    ([0, 0, 1, 1, 2, 2, 2], [0.989, 0.011, 0.0, 1.0, 0.333, 0.333, 0.333])
    >>> wide = Observation((0,), np.concatenate([[90.0, 1.0, -1.0, 10.0], np.full(WIDE_VALUES, 2.0)]), 1.0)
    >>> c = coarsen(compress((WIDE_VALUES + 4,), []), {0: np.repeat([0, 1, 2], [2, 2, WIDE_VALUES])}, [wide])
    >>> c.shares[0][:6].round(3).tolist()
    [1.0, 0.0, 0.0, 1.0, 0.001, 0.001]
    """
    labels, shares = list(compression.labels), list(compression.shares)
    counts = {o.subset[0]: o for o in one_way if len(o.subset) == 1}
    for a, groups in binned.items():
        y = np.asarray(counts[a].values, dtype=float)
        above = y >= max(threshold, spikes(y.size, laplace)) * np.sqrt(counts[a].variances)
        sparse = y.size > WIDE_VALUES
        share = np.zeros(y.size)
        for g in range(int(groups.max()) + 1):
            members = groups == g
            below = members & ~above
            rest = float(y[below].sum())
            if sparse:  # their total, unless noise could make it up, shared equally
                rest = rest if rest >= threshold * np.sqrt(float(counts[a].variances[below].sum())) else 0.0
                spread = np.full(y.size, rest / max(int(below.sum()), 1))
            else:  # their total clipped at 0, shared as merged values are
                spread = np.zeros(y.size)
                if below.any():
                    variances = np.broadcast_to(counts[a].variances, y.shape)[below]
                    spread[below] = max(rest, 0.0) * merged_shares(y[below], variances)
            weight = np.where(above, y, spread)[members]
            share[members] = weight / weight.sum() if weight.sum() > 0 else 1.0 / members.sum()
        labels[a], shares[a] = np.asarray(groups, dtype=np.int64), share
    return Compression(tuple(labels), tuple(shares))


def shrink(domain: Sequence[int], one_way: Sequence[Observation], threshold: float | None,
           binned: dict[int, np.ndarray], compressible: Sequence[int] | None = None,
           laplace: bool = False, most: float = 1.0) -> Compression | None:
    """The model's domain from the noisy full-resolution one-way counts ``one_way`` (with
    ``laplace`` noise, else Gaussian) of every attribute of ``domain``: the ``compressible``
    attributes (None: all) but the ``binned`` ones compressed at ``threshold``, where the rare
    values hold at most ``most`` of the rows (:func:`~dpsql.synth.compress.compress`; None: not
    compressed), and the ``binned`` ones in
    their bins (:func:`coarsen`). None when nothing changes. Post-processing.

    >>> o = [Observation((0,), np.array([50.0, 0.0, 1.0, 40.0]), 1.0), Observation((1,), np.array([9.0, 1.0]), 1.0)]
    >>> c = shrink((4, 2), o, 3.0, {0: np.array([0, 0, 1, 1])})
    >>> c.domain, c.shares[0].round(3).tolist()
    ((2, 2), [1.0, 0.0, 0.024, 0.976])
    """
    which = range(len(domain)) if compressible is None else set(compressible)
    rare = [o for o in one_way if o.subset[0] in which and o.subset[0] not in binned]
    compression = None if threshold is None else compress(domain, rare, threshold, most)
    return coarsen(compression or compress(domain, []), binned, one_way, laplace=laplace) if binned else compression
