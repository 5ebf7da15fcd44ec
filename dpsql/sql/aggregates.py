"""Aggregate functions as functions of the linear queries dpsql measures.

Every supported aggregate of a group is computed, after noise, from up to three
linear queries over the group's rows, each a weighted count over the public
domain and so one block of the batch's workload: ``count`` (of non-NULL
values, or of rows for ``COUNT(*)``), ``sum`` (of the values clamped to the
column's SUM bounds) and ``sumsq`` (of their squares). :data:`MEASURES` says
which each function needs; :func:`value` combines them exactly as DuckDB
defines the function; :func:`gradient` gives the partial derivatives that the
delta method turns into a standard error. Nothing here sees private data.

A proportion, the AVG of a condition made 1, 0 or NULL (``AVG(CASE WHEN c THEN 1 ELSE 0 END)``,
``AVG(c::INT)``), is an ``avg`` whose ``sum`` counts the rows where the value is 1 and whose
``count`` counts those where it is not NULL (:attr:`dpsql.sql.plan.Aggregate.indicator`): the
same value, NULL over no rows, and the same delta-method standard error of a ratio of two counts.

Answers stay in range (:func:`value`, :func:`value_range`): an AVG is NULL where the
noisy count, rounded to a whole number, is 0 or less, a sample variance or standard
deviation where it is below 2 (a population one below 1), as DuckDB's are for too few
rows; and AVG, variances and standard deviations are clamped to what the column's
bounds allow (AVG within [lo, hi], a variance within [0, (hi - lo)² / 4], or / 2 for a
sample one). Quantiles are read off the domain's values, or within a binned column's bins, so
they are in range already.
Both rules are post-processing of released values: free, and clamping never moves an
answer away from the truth. At a huge epsilon every answer is DuckDB's, NULLs included.

>>> import numpy as np
>>> parts = {"count": np.array([4.0]), "sum": np.array([10.0]), "sumsq": np.array([30.0])}  # values 1, 2, 3, 4
>>> [float(value(f, parts)[0]) for f in ("avg", "var_pop", "var_samp")]
[2.5, 1.25, 1.6666666666666667]
"""

from __future__ import annotations

import datetime
from typing import Callable

import numpy as np

__all__ = ["MEASURES", "QUANTILES", "measures", "value", "value_range", "gradient", "quantile", "quantile_interval", "as_days"]

#: The quantile functions: read from the column's CDF (see :func:`quantile`).
QUANTILES = ("quantile_cont", "quantile_disc")

#: The measured queries each aggregate function is computed from.
MEASURES: dict[str, tuple[str, ...]] = {
    "count": ("count",),
    "sum": ("sum",),
    "avg": ("sum", "count"),
    "var_pop": ("sum", "sumsq", "count"),
    "var_samp": ("sum", "sumsq", "count"),
    "stddev_pop": ("sum", "sumsq", "count"),
    "stddev_samp": ("sum", "sumsq", "count"),
}

def measures(func: str, thresholds: int = 0) -> tuple[str, ...]:
    """The measured queries of an aggregate function: :data:`MEASURES`, or for a quantile one
    prefix count ``le{j}`` per threshold: the rows whose value is at most the column's ``j``-th
    smallest domain value, or, for a binned column, in its first ``j + 1`` bins (the last one
    counts every non-NULL value). That is the column's
    cumulative distribution, a set of linear queries HDMM optimizes with the rest of the batch."""
    if func in QUANTILES:
        return tuple(f"le{j}" for j in range(thresholds))
    return MEASURES[func]


#: Rows a variance needs beyond its degrees of freedom: DuckDB's VAR_SAMP of one row is NULL.
_DDOF = {"var_pop": 0, "var_samp": 1, "stddev_pop": 0, "stddev_samp": 1}


def value_range(func: str, bounds: tuple[float, float] | None) -> tuple[float, float] | None:
    """The values an AVG, variance or standard deviation can take on any table, for a column whose
    summed values are clamped into ``bounds`` = (lo, hi): [lo, hi] for AVG, [0, (hi - lo)² / 4] for a
    population variance, [0, (hi - lo)² / 2] for a sample one (two rows, at lo and hi), their square
    roots for the standard deviations. None for another function, or without bounds."""
    if bounds is None or func not in MEASURES or func in ("count", "sum"):
        return None
    if func == "avg":
        return float(bounds[0]), float(bounds[1])
    span = float(bounds[1]) - float(bounds[0])
    top = span * span / (4.0 if _DDOF[func] == 0 else 2.0)
    return 0.0, (float(np.sqrt(top)) if func.startswith("stddev") else top)


def value(func: str, parts: dict[str, np.ndarray], bounds: tuple[float, float] | None = None) -> np.ndarray:
    """The aggregate per group from its measured queries, kept in range.

    NULL (NaN) where the noisy count, rounded to the nearest whole number, is below the rows
    DuckDB needs for a value: 1 for AVG and the population variances, 2 for the sample ones
    (DuckDB's NULL for AVG of no rows and VAR_SAMP of one). Rounding makes the rule exact at a
    huge epsilon: a count of 1 plus noise is never read as more than one row.

    With ``bounds``, the range a summed value is clamped into, the answer is clamped to
    :func:`value_range`. The true value lies in that range, so clamping is free post-processing
    and never moves an answer further from it. A noisy variance below zero is 0.
    """
    if func in ("count", "sum"):
        return parts[func]
    n, s = parts["count"], parts["sum"]
    with np.errstate(divide="ignore", invalid="ignore"):
        if func == "avg":
            out = np.where(n >= 0.5, s / n, np.nan)
        else:
            ddof = _DDOF[func]
            ok = n >= ddof + 0.5
            safe = np.where(ok, n, ddof + 1.0)
            out = np.where(ok, np.maximum(parts["sumsq"] - s * s / safe, 0.0) / (safe - ddof), np.nan)
            out = np.sqrt(out) if func.startswith("stddev") else out
    allowed = value_range(func, bounds)
    return out if allowed is None else np.clip(out, *allowed)


def gradient(func: str, parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``∂ value / ∂ part`` for each of the function's measured queries, per group.

    For COUNT and SUM the value is the query itself (gradient 1), so the delta
    method gives their exact variance; for the others it is first order, good
    where the noisy count is far from the degrees of freedom.
    """
    if func in ("count", "sum"):
        return {func: np.ones_like(parts[func])}
    n, s = parts["count"], parts["sum"]
    with np.errstate(divide="ignore", invalid="ignore"):
        if func == "avg":
            return {"sum": 1.0 / n, "count": -s / n**2}
        d = n - _DDOF[func]
        centered = parts["sumsq"] - s * s / n
        grad = {"sumsq": 1.0 / d, "sum": -2.0 * s / (n * d), "count": s * s / (n * n * d) - centered / d**2}
        if func.startswith("stddev"):
            scale = 0.5 / value(func, parts)
            grad = {k: g * scale for k, g in grad.items()}
        return grad


def _monotone(p: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence closest to ``p`` in least squares (pool adjacent violators)."""
    values: list[float] = []
    sizes: list[int] = []
    for x in p:
        values.append(float(x))
        sizes.append(1)
        while len(values) > 1 and values[-2] > values[-1]:
            size = sizes[-2] + sizes[-1]
            values[-2] = (values[-2] * sizes[-2] + values[-1] * sizes[-1]) / size
            sizes[-2] = size
            values.pop()
            sizes.pop()
    return np.repeat(values, sizes)


def _cdf(prefix: np.ndarray) -> np.ndarray:
    """Noisy prefix counts (thresholds × groups) made a CDF: non-decreasing (the closest such in
    least squares), at least 0, and whole counts, group by group."""
    out = np.empty_like(prefix, dtype=float)
    for g in range(prefix.shape[1]):
        out[:, g] = np.maximum(np.rint(_monotone(prefix[:, g])), 0.0)
    return out


def _ranks(n: np.ndarray, func: str, q: float, descending: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group of ``n`` rows, the 0-based ascending ranks ``(lo, hi)`` of the rows DuckDB reads a
    quantile from and the weight ``w`` of the higher: the quantile is ``x[lo] + w (x[hi] - x[lo])``.
    QUANTILE_DISC is the row at rank max(0, ceil(q n) - 1) in the order asked; QUANTILE_CONT
    interpolates between ranks floor(h) and ceil(h), h = q (n - 1) (1 - q for a descending order)."""
    if func == "quantile_disc":
        rank = np.maximum(0.0, np.ceil(q * n) - 1.0)
        rank = n - 1.0 - rank if descending else rank
        return rank, rank, np.zeros_like(n)
    h = (1.0 - q if descending else q) * (n - 1.0)
    lo = np.floor(h)
    return lo, np.ceil(h), h - lo


def _level(cdf: np.ndarray, rank: float) -> int:
    """The threshold a 0-based ascending rank falls at, on one group's CDF: the first whose
    count exceeds the rank."""
    return min(int(np.searchsorted(cdf, rank + 1, side="left")), len(cdf) - 1)


def _at_value(values: np.ndarray) -> Callable[[np.ndarray, float], float]:
    """The value at a rank of a column whose thresholds are its values: the threshold's."""
    return lambda cdf, rank: float(values[_level(cdf, rank)])


def _at_bin(bins: np.ndarray) -> Callable[[np.ndarray, float], float]:
    """The value at a rank of a binned column (``bins`` its (lo, hi) rows): the rows of a bin
    taken as spread evenly within it, the k-th of its f rows (0-based) at a fraction (k + 1/2) / f
    of the way from its lower edge to its upper one."""
    def at(cdf: np.ndarray, rank: float) -> float:
        j = _level(cdf, rank)
        below = cdf[j - 1] if j else 0.0
        lo, hi = bins[j]
        return float(lo + (rank - below + 0.5) / (cdf[j] - below) * (hi - lo))
    return at


def _read(cdf: np.ndarray, at: Callable[[np.ndarray, float], float], func: str, q: float,
          descending: bool) -> np.ndarray:
    """The quantile per group from a CDF (thresholds × groups), exactly as DuckDB defines it
    (:func:`_ranks`) on rows whose value at each rank is ``at(group's CDF, rank)``. NaN (NULL)
    for a group with no row: one whose count, a whole number, is 0."""
    n = cdf[-1]
    lo, hi, w = _ranks(n, func, q, descending)
    out = np.full(cdf.shape[1], np.nan)
    for g in np.nonzero(n >= 1)[0]:
        low = at(cdf[:, g], lo[g])
        out[g] = low + w[g] * (at(cdf[:, g], hi[g]) - low)
    return out


def _reader(values: np.ndarray) -> Callable[[np.ndarray, float], float]:
    """How a column's ranks are read: off its sorted values (1-D), or within its bins (rows (lo, hi))."""
    return _at_bin(values) if values.ndim == 2 else _at_value(values)


def _prefix(parts: dict[str, np.ndarray], thresholds: int) -> np.ndarray:
    """The prefix counts ``parts['le{j}']`` as one array (thresholds × groups)."""
    return np.array([parts[f"le{j}"] for j in range(thresholds)], dtype=float)


def quantile(func: str, q: float, descending: bool, values: np.ndarray, parts: dict[str, np.ndarray]) -> np.ndarray:
    """A quantile per group from its noisy prefix counts ``parts['le{j}']``: the counts are made a
    CDF (monotone, non-negative, whole), then read as DuckDB reads the sorted rows (:func:`_read`).
    Post-processing only.

    ``values`` are the thresholds: the column's sorted non-NULL domain values, read exactly; or,
    for a binned column, its bins as rows ``(lo, hi)``, in order, read at the bins' resolution: a
    bin's f rows are taken as spread evenly within it (the k-th at (k + 1/2) / f of the way), so
    the answer is DuckDB's quantile of those rows, interpolated linearly within the bin.

    >>> parts = {"le0": np.array([1.2]), "le1": np.array([2.3]), "le2": np.array([3.9])}  # rows 0, 1, 2, 2
    >>> quantile("quantile_disc", 0.5, False, np.array([0, 1, 2]), parts).tolist()
    [1.0]
    >>> quantile("quantile_cont", 0.5, False, np.array([0, 1, 2]), parts).tolist()
    [1.5]
    >>> bins = np.array([[0, 10], [10, 20], [20, 40]])  # one row in [0, 10), one in [10, 20), two in [20, 40]
    >>> quantile("quantile_cont", 0.5, False, bins, parts).tolist()  # halfway from 15 (of [10, 20)) to 25
    [20.0]
    """
    values = np.asarray(values)
    return _read(_cdf(_prefix(parts, len(values))), _reader(values), func, q, descending)


def as_days(offsets: np.ndarray, origin: datetime.date, func: str) -> np.ndarray:
    """A date column's quantiles, read as days from its first day ``origin`` (:func:`quantile`), as
    DuckDB gives them: QUANTILE_DISC's a day (DATE), MEDIAN's and QUANTILE_CONT's a time, which
    interpolates between two days (TIMESTAMP); NaN (NULL) is None. Post-processing.

    >>> as_days(np.array([0.0, 1.5, np.nan]), datetime.date(2024, 2, 28), "quantile_cont").tolist()
    [datetime.datetime(2024, 2, 28, 0, 0), datetime.datetime(2024, 2, 29, 12, 0), None]
    >>> as_days(np.array([1.0]), datetime.date(2024, 2, 28), "quantile_disc").tolist()
    [datetime.date(2024, 2, 29)]
    """
    start = origin if func == "quantile_disc" else datetime.datetime.combine(origin, datetime.time())
    out = np.empty(len(offsets), dtype=object)
    out[:] = [None if np.isnan(d) else start + datetime.timedelta(days=float(d)) for d in offsets]
    return out


def quantile_interval(func: str, q: float, descending: bool, values: np.ndarray, parts: dict[str, np.ndarray],
                      se: dict[str, np.ndarray], z: float) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)`` per group, from the CDF's error band: the prefix counts raised and lowered by
    ``z`` standard errors (a higher CDF reaches a rank at a lower value). The band is pointwise, so
    the interval is approximate. For a column read off its values it is the quantile read from
    each side of the band: exact (the value) without noise. For a binned column (``values`` its
    bins, see :func:`quantile`) it is the lower edge of the bin of the lowest rank read (on the
    raised CDF) to the upper edge of the bin of the highest (on the lowered one): without noise,
    the bins that hold the rows DuckDB reads, so it covers both the answer and the true quantile,
    whatever the rows' values within their bins."""
    values = np.asarray(values)
    prefix = _prefix(parts, len(values))
    width = _prefix(se, len(values)) * z
    total = _cdf(prefix)[-1:]
    raised, lowered = (_band(prefix + shift, total) for shift in (width, -width))
    if values.ndim == 2:
        return _bin_edges(raised, total[0], values, func, q, descending, 0), \
            _bin_edges(lowered, total[0], values, func, q, descending, 1)
    bands = [_read(band, _at_value(values), func, q, descending) for band in (raised, lowered)]
    low, high = (bands[1], bands[0]) if descending else (bands[0], bands[1])
    return np.minimum(low, high), np.maximum(low, high)


def _band(shifted: np.ndarray, total: np.ndarray) -> np.ndarray:
    """One side of the CDF's error band: the shifted prefix counts made a CDF that ends at, and stays
    within, the estimate's count of rows ``total``: only where the ranks fall moves."""
    band = _cdf(shifted)
    band[-1] = total
    return np.minimum(band, total)


def _bin_edges(cdf: np.ndarray, n: np.ndarray, bins: np.ndarray, func: str, q: float, descending: bool,
               side: int) -> np.ndarray:
    """Per group, the lower edge (``side`` 0) of the bin holding the lower rank DuckDB reads, or
    the upper edge (1) of the bin holding the higher one, on ``cdf``; NaN for a group with no row."""
    ranks = _ranks(n, func, q, descending)[side]
    out = np.full(cdf.shape[1], np.nan)
    for g in np.nonzero(n >= 1)[0]:
        out[g] = bins[_level(cdf[:, g], ranks[g]), side]
    return out
