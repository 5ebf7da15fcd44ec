"""Uncertainty of released answers: each answer's standard error and confidence interval.

A result's error columns sit beside its aggregates (and beside computed select items
that read aggregates): ``std_error``, ``ci_low``, ``ci_high`` for a statement's one
such output, ``<name>_std_error``, ... when there are several. COUNT and SUM get the
exact closed-form standard error of their least-squares answer; other aggregates and
expressions over them get the delta method with the exact covariances. A SUM or AVG
window over aggregates (``SUM(COUNT(*)) OVER (PARTITION BY sex)``, a running sum) is a
linear function of the answers of other groups: its gradient is a matrix (row by
group), and its variance takes the covariances between groups,
``W_a (AᵀA)⁺ W_bᵀ`` (:meth:`dpsql.hdmm.strategy.Strategy.cross_covariance`), as does
an expression over it (``100.0 * COUNT(*) / SUM(COUNT(*)) OVER ()``). All of it is
public math over the strategy, the noise scale and the noisy answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np
from sqlglot import exp

from dpsql.errors import WorkloadError
from dpsql.sql.aggregates import QUANTILES, as_days, gradient, quantile_interval, value_range
from dpsql.sql.compile import Block, CompiledStatement
from dpsql.sql.delta import partials
from dpsql.sql.outputs import error_names, error_outputs
from dpsql.sql.plan import Aggregate
from dpsql.sql.postprocess import window_frames

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["error_columns", "ordered"]


#: An aggregate or expression as a function of measured queries: (block, ∂value/∂block answer) pairs,
#: per group (a vector: group ``r``'s value reads the block's answer of group ``r``) or, for a window,
#: per group and group (a matrix: row ``r``'s value reads the block's answers of the groups ``j``).
_Gradient = list[tuple[Block, np.ndarray]]
#: Most groups whose window gets a standard error (the covariances are groups × groups per block pair).
MAX_WINDOW_GROUPS = 500
#: A covariance callback: ``(term_a, term_b)`` row by row, or with ``full=True`` every row against every row.
Covariance = Callable[..., np.ndarray]


def _aggregate_gradient(st: CompiledStatement, aggregate: Aggregate, answers: np.ndarray) -> _Gradient | None:
    """None for a quantile, which is not a differentiable function of its measured queries."""
    if aggregate.func in QUANTILES:
        return None
    blocks = st.blocks_of(aggregate.name)
    if len(blocks) == 1:
        return [(blocks[0], np.ones(len(st.groups)))]
    grad = gradient(aggregate.func, st.parts(aggregate.name, answers))
    return [(b, grad[b.measure]) for b in blocks]


def _delta_method(pairs: _Gradient, se: np.ndarray, covariance: Covariance | None, size: int) -> np.ndarray:
    """``sqrt(g' Σ g)`` per group: the standard error of a function of measured queries with
    gradient ``pairs``, ``Σ`` their exact covariance (the variances ``se²`` and the
    least-squares answers' cross covariances). Two entries on one query add up."""
    if any(g.ndim == 2 for _, g in pairs):
        return _across_groups(pairs, covariance, size)
    merged: dict[tuple[int | None, int, int], tuple[Block, np.ndarray]] = {}
    for block, g in pairs:
        key = (block.term, block.start, block.stop)
        merged[key] = (block, merged[key][1] + g if key in merged else g)
    terms = list(merged.values())
    var = np.zeros(size)
    with np.errstate(invalid="ignore"):
        for i, (a, ga) in enumerate(terms):
            var = var + (ga * a.take(se, size)) ** 2
            for b, gb in terms[i + 1:]:
                # blocks of two grouping sets answer different groups: no common row to covary on
                if a.term is not None and b.term is not None and covariance is not None and a.part == b.part:
                    cov = covariance(a.term, b.term) * a.scale * b.scale
                    if a.part is not None:
                        cov = np.zeros(size)
                        cov[a.part] = covariance(a.term, b.term) * a.scale * b.scale
                    var = var + 2.0 * ga * gb * cov
    return np.sqrt(np.maximum(var, 0.0))


def _across_groups(pairs: _Gradient, covariance: Covariance | None, size: int) -> np.ndarray:
    """:func:`_delta_method` for gradients across groups: ``Σ_ab diag(M_a C_ab M_bᵀ)``, ``C_ab`` the
    covariances of block ``a``'s answers with block ``b``'s, every group against every group
    (two grouping sets' blocks covary too: a margin is a sum of the cells). NaN where they are
    not known (no covariances, too many groups, a query the strategy cannot answer)."""
    if covariance is None or size > MAX_WINDOW_GROUPS:
        return np.full(size, np.nan)
    merged: dict[tuple[int | None, int, int], tuple[Block, np.ndarray]] = {}
    for block, g in pairs:
        if block.term is None:  # measures nothing: an exact zero
            continue
        g = g if g.ndim == 2 else np.diag(g)
        key = (block.term, block.start, block.stop)
        merged[key] = (block, merged[key][1] + g if key in merged else g)
    var = np.zeros(size)
    try:
        for a, ma in merged.values():
            for b, mb in merged.values():
                cov = np.zeros((size, size))
                cov[a.part or slice(None), b.part or slice(None)] = (covariance(a.term, b.term, full=True)
                                                                     * a.scale * b.scale)
                with np.errstate(invalid="ignore"):
                    var = var + np.einsum("ij,ij->i", ma @ cov, mb)
    except WorkloadError:  # too many covariances to compute: no standard error rather than a wrong one
        return np.full(size, np.nan)
    return np.sqrt(np.maximum(var, 0.0))


def _windows(st: CompiledStatement, answers: np.ndarray, grads: dict[str, _Gradient | None],
             columns: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, _Gradient]]:
    """Per SUM or AVG window over aggregates (by hidden column): its value per group and its
    gradient across groups. Row ``r`` is the sum (or mean) of the window's argument over the
    groups of its frame (:func:`dpsql.sql.postprocess.window_frames`) where the argument is not
    NULL; the argument's own gradient (:mod:`dpsql.sql.delta`) is per group. A window whose
    argument is not differentiable, or reads a quantile, is left out (NULL)."""
    frames = window_frames(st, st.table(answers))
    size = len(st.groups)
    out: dict[str, tuple[np.ndarray, _Gradient]] = {}
    for name, window in st.plan.windows:
        if name not in frames:
            continue
        dual = partials(window.this.this, columns, set(grads))
        if dual is None or any(grads[a] is None for a in dual[1]):
            continue
        arg, d = np.broadcast_to(dual[0], (size,)), dual[1]
        weights = np.zeros((size, size))
        for r, members in enumerate(frames[name]):
            kept = members[~np.isnan(arg[members])] if members is not None else []
            if len(kept):
                weights[r, kept] += 1.0 / len(kept) if isinstance(window.this, exp.Avg) else 1.0
        value = weights @ np.nan_to_num(arg)
        value[~weights.any(axis=1)] = np.nan  # over no group, or none with a value: NULL
        pairs = [(b, weights * (np.broadcast_to(d[a], (size,)) * g)[None, :]) for a in d for b, g in grads[a]]
        out[name] = (value, pairs)
    return out


def error_columns(st: CompiledStatement, answers: np.ndarray, se: np.ndarray, z: float,
                   covariance: Covariance | None) -> dict[str, np.ndarray]:
    """Standard error and confidence interval of every visible aggregate, and of every computed
    select item that reads aggregates, per group.

    COUNT and SUM use their exact closed-form variance. The others (AVG,
    variances, standard deviations, and expressions such as ``SUM(a) / COUNT(*)``
    or ``POWER(AVG(x), 2)``) are functions of several measured queries
    (:mod:`dpsql.sql.aggregates`, :mod:`dpsql.sql.delta`) and use the delta method,
    ``Var f ≈ Σ_ab ∂_a f ∂_b f Cov(a, b)``, with the exact covariances
    ``covariance(term_a, term_b)`` of the least-squares answers: a first-order
    approximation, good when the noise is small beside the values. An expression
    :mod:`dpsql.sql.delta` cannot differentiate gets NULL: no standard error
    rather than a wrong one.
    """
    out: dict[str, np.ndarray] = {}
    size = len(st.groups)
    grads = {a.name: _aggregate_gradient(st, a, answers) for a in st.plan.aggregates}
    values = {a.name: st.values(a.name, answers) for a in st.plan.aggregates}
    for agg in st.plan.aggregates:
        if not agg.visible:
            continue
        name, lo, hi = error_names(st.plan, agg.name)
        if agg.func in QUANTILES and not st.measured(agg.name):  # NULL, exactly
            out[name] = out[lo] = out[hi] = np.full(size, np.nan)
            continue
        if agg.func in QUANTILES:  # an interval from the CDF's error band, no standard error
            parts = st.parts(agg.name, answers)
            spread = st.parts(agg.name, se)
            out[name] = np.full(size, np.nan)
            out[lo], out[hi] = quantile_interval(agg.func, agg.quantile, agg.descending,
                                                 np.array(st.thresholds[agg.name]), parts, spread, z)
            if agg.origin is not None:  # a date column's: days from its first, as days
                out[lo], out[hi] = (as_days(out[e], agg.origin, agg.func) for e in (lo, hi))
            continue
        err = _delta_method(grads[agg.name], se, covariance, size)
        err[np.isnan(values[agg.name])] = np.nan  # a NULL answer has no standard error
        out[name], out[lo], out[hi] = err, values[agg.name] - z * err, values[agg.name] + z * err
        span = value_range(agg.func, agg.bounds)
        if span is not None:  # the true value is in range: so is the interval (free, and it covers no less)
            out[lo], out[hi] = np.clip(out[lo], *span), np.clip(out[hi], *span)
    computed = dict(st.plan.computed)
    columns = {**values, **{k.name: np.array([g[i] for g in st.groups]) for i, k in enumerate(st.plan.keys)}}
    if st.plan.set_column is not None:
        columns[st.plan.set_column] = np.asarray(st.sets, dtype=np.int64)
    windows = _windows(st, answers, grads, columns) if covariance is not None and st.plan.windows else {}
    columns.update({w: value for w, (value, _) in windows.items()})
    for output in error_outputs(st.plan):
        if output not in computed:
            continue
        dual = partials(computed[output], columns, set(grads) | set(windows))
        name, lo, hi = error_names(st.plan, output)
        if dual is None or any(a not in windows and grads[a] is None for a in dual[1]):
            out[name] = out[lo] = out[hi] = np.full(size, np.nan)
            continue
        value, d = dual
        d = {a: np.broadcast_to(g, (size,)) for a, g in d.items()}
        pairs = [(b, g * d[a]) for a in d if a not in windows for b, g in grads[a]]
        pairs += [(b, m * d[w][:, None]) for w in d if w in windows for b, m in windows[w][1]]
        err = _delta_method(pairs, se, covariance, size)
        err[np.isnan(value)] = np.nan
        out[name], out[lo], out[hi] = err, value - z * err, value + z * err
    return out


def ordered(st: CompiledStatement, df: pd.DataFrame) -> pd.DataFrame:
    """Each aggregate's and computed item's error columns right after it."""
    order = []
    errors = set(error_outputs(st.plan))
    for col in st.plan.outputs:
        order.append(col)
        if col in errors:
            order.extend(c for c in error_names(st.plan, col) if c in df.columns)
    return df[order + [c for c in df.columns if c not in order]].reset_index(drop=True)
