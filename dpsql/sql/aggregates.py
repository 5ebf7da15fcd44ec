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
sample one). Quantiles are read off the domain's values, so they are in range already.
Both rules are post-processing of released values: free, and clamping never moves an
answer away from the truth. At a huge epsilon every answer is DuckDB's, NULLs included.

>>> import numpy as np
>>> parts = {"count": np.array([4.0]), "sum": np.array([10.0]), "sumsq": np.array([30.0])}  # values 1, 2, 3, 4
>>> [float(value(f, parts)[0]) for f in ("avg", "var_pop", "var_samp")]
[2.5, 1.25, 1.6666666666666667]
"""

from __future__ import annotations

import numpy as np

__all__ = ["MEASURES", "QUANTILES", "measures", "value", "value_range", "gradient", "quantile", "quantile_interval"]

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
    smallest domain value (the last one counts every non-NULL value). That is the column's
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


def _read(cdf: np.ndarray, values: np.ndarray, func: str, q: float, descending: bool) -> np.ndarray:
    """The quantile per group from a CDF (thresholds × groups) over sorted ``values``, exactly
    as DuckDB defines it on the rows the CDF counts: QUANTILE_DISC is the value at 0-based rank
    max(0, ceil(q n) - 1) in the order asked; QUANTILE_CONT interpolates between ranks floor(h)
    and ceil(h), h = q (n - 1). NaN (NULL) for a group with no row."""
    n = cdf[-1]
    out = np.full(cdf.shape[1], np.nan)
    for g in range(cdf.shape[1]):
        if n[g] < 1:
            continue

        def at(rank: float, g: int = g) -> float:  # the value at 0-based ascending rank
            return float(values[min(int(np.searchsorted(cdf[:, g], rank + 1, side="left")), len(values) - 1)])

        size = n[g]
        if func == "quantile_disc":
            rank = max(0.0, np.ceil(q * size) - 1.0)
            out[g] = at(size - 1.0 - rank if descending else rank)
        else:
            h = (1.0 - q if descending else q) * (size - 1.0)
            lo, hi = np.floor(h), np.ceil(h)
            out[g] = at(lo) + (h - lo) * (at(hi) - at(lo))
    return out


def _prefix(parts: dict[str, np.ndarray], thresholds: int) -> np.ndarray:
    """The prefix counts ``parts['le{j}']`` as one array (thresholds × groups)."""
    return np.array([parts[f"le{j}"] for j in range(thresholds)], dtype=float)


def quantile(func: str, q: float, descending: bool, values: np.ndarray, parts: dict[str, np.ndarray]) -> np.ndarray:
    """A quantile per group from its noisy prefix counts ``parts['le{j}']`` over the column's
    sorted non-NULL domain ``values``: the counts are made a CDF (monotone, non-negative, whole),
    then read as DuckDB reads the sorted rows (:func:`_read`). Post-processing only.

    >>> parts = {"le0": np.array([1.2]), "le1": np.array([2.3]), "le2": np.array([3.9])}  # rows 0, 1, 2, 2
    >>> quantile("quantile_disc", 0.5, False, np.array([0, 1, 2]), parts).tolist()
    [1.0]
    >>> quantile("quantile_cont", 0.5, False, np.array([0, 1, 2]), parts).tolist()
    [1.5]
    """
    return _read(_cdf(_prefix(parts, len(values))), np.asarray(values), func, q, descending)


def quantile_interval(func: str, q: float, descending: bool, values: np.ndarray, parts: dict[str, np.ndarray],
                      se: dict[str, np.ndarray], z: float) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)`` per group: the quantile read from the CDF's error band, the prefix counts
    raised and lowered by ``z`` standard errors (a higher CDF reaches a rank at a lower value).
    The band is pointwise, so the interval is approximate; it is exact (the value) without noise."""
    prefix = _prefix(parts, len(values))
    width = _prefix(se, len(values)) * z
    total = _cdf(prefix)[-1:]
    bands = []
    for shift in (width, -width):
        band = _cdf(prefix + shift)
        band[-1] = total  # the count of rows is the estimate's: only where the ranks fall moves
        bands.append(_read(np.minimum(band, total), np.asarray(values), func, q, descending))
    low, high = (bands[1], bands[0]) if descending else (bands[0], bands[1])
    return np.minimum(low, high), np.maximum(low, high)
