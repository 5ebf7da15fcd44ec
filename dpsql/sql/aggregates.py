"""Aggregate functions as functions of the linear queries dpsql measures.

Every supported aggregate of a group is computed, after noise, from up to three
linear queries over the group's rows, each a weighted count over the public
domain and so one block of the batch's workload: ``count`` (of non-NULL
values, or of rows for ``COUNT(*)``), ``sum`` (of the values clamped to the
column's SUM bounds) and ``sumsq`` (of their squares). :data:`MEASURES` says
which each function needs; :func:`value` combines them exactly as DuckDB
defines the function; :func:`gradient` gives the partial derivatives that the
delta method turns into a standard error. Nothing here sees private data.

>>> import numpy as np
>>> parts = {"count": np.array([4.0]), "sum": np.array([10.0]), "sumsq": np.array([30.0])}  # values 1, 2, 3, 4
>>> [float(value(f, parts)[0]) for f in ("avg", "var_pop", "var_samp")]
[2.5, 1.25, 1.6666666666666667]
"""

from __future__ import annotations

import numpy as np

__all__ = ["MEASURES", "value", "gradient"]

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

#: Rows a variance needs beyond its degrees of freedom: DuckDB's VAR_SAMP of one row is NULL.
_DDOF = {"var_pop": 0, "var_samp": 1, "stddev_pop": 0, "stddev_samp": 1}


def value(func: str, parts: dict[str, np.ndarray]) -> np.ndarray:
    """The aggregate per group from its measured queries: NaN (shown as NULL) where the count
    is 0 for AVG, and where it is at most the degrees of freedom for a variance (DuckDB's NULL
    for VAR_POP of no rows and VAR_SAMP of at most one). A noisy variance below zero is 0."""
    if func in ("count", "sum"):
        return parts[func]
    n, s = parts["count"], parts["sum"]
    with np.errstate(divide="ignore", invalid="ignore"):
        if func == "avg":
            return np.where(n != 0, s / np.where(n != 0, n, 1.0), np.nan)
        ddof = _DDOF[func]
        ok = n > ddof
        safe = np.where(ok, n, ddof + 1.0)
        var = np.where(ok, np.maximum(parts["sumsq"] - s * s / safe, 0.0) / (safe - ddof), np.nan)
        return np.sqrt(var) if func.startswith("stddev") else var


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
