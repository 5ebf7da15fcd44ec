"""OPT_+: a weighted union of strategies, one per group of workload terms (HDMM Definition 19).

Each group of workload terms gets its own strategy ``A_l`` with error
``e_l``; the groups then share the budget through weights ``c_l`` chosen in
closed form by Lagrange multipliers. Laplace: minimize ``(Σ c_l)² Σ e_l/c_l²``,
giving ``c_l ∝ e_l^{1/3}`` and total error ``(Σ e_l^{1/3})³``. Gaussian:
minimize ``(Σ c_l²) Σ e_l/c_l²``, giving ``c_l ∝ e_l^{1/4}`` and total error
``(Σ e_l^{1/2})²``.

Grouping. HDMM's default clustering gives every product its own OPT_⊗
strategy (terms with identical factor Gram matrices, weights aside, share
one, since one strategy serves them all). HDMM leaves better clusterings
open (end of §6). Here, terms that agree on every *structured* factor (one
whose Gram matrix is not ``αI + βJ``: ranges, prefixes, predicate sets) and
differ only in marginal factors (identity, total, IT) form a cluster that
one strategy ``(⊗_{i∈S} A_i) ⊗ M`` can serve: OPT_⊗ factors on the
structured attributes ``S`` and an OPT_M marginal strategy on the others
(:class:`~dpsql.hdmm.strategy.MarginalStrategy` with fixed factors). The 2-way
products "prefix on age × identity on one of nine categorical attributes"
are one such cluster. Since the groups' errors add up as ``e_l^{1/3}``
(``e_l^{1/2}``) after the budget split, a cluster is kept whole exactly when
its error beats the sum over its default groups, so the result is never worse
than the default clustering.

>>> from dpsql.hdmm.matrix import Identity, Total
>>> from dpsql.privacy import Gaussian
>>> from dpsql.hdmm.workload import Workload
>>> W = Workload((4, 4), [(1.0, (Identity(4), Total(4))), (1.0, (Total(4), Identity(4)))])
>>> len(opt_plus(W, Gaussian(1.0, 1e-6)).parts)  # one marginal strategy for both 1-way marginals
1
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from dpsql.hdmm.marginals import in_algebra
from dpsql.hdmm.matrix import DENSE_LIMIT, Matrix, is_total
from dpsql.hdmm.optimize import symmetric
from dpsql.hdmm.optimize.kron import kron_search
from dpsql.hdmm.optimize.marginal import MAX_SEARCH_ATTRIBUTES, opt_marginal
from dpsql.hdmm.optimize.opt0 import deterministic
from dpsql.hdmm.strategy import KronStrategy, MarginalStrategy, UnionStrategy
from dpsql.hdmm.workload import Term, Workload, factor_key
from dpsql.privacy import NoiseModel


def budget_weights(errors: np.ndarray, norm: int) -> np.ndarray:
    """Optimal part weights for per-part errors ``e_l``, normalized to unit sensitivity."""
    c = errors ** (1.0 / 3.0) if norm == 1 else errors**0.25
    return c / (c.sum() if norm == 1 else np.sqrt((c**2).sum()))


def _share(error: float, norm: int) -> float:
    """A part's additive share of the union's error after the budget split: ``e^{1/3}`` or ``e^{1/2}``."""
    return error ** (1.0 / 3.0) if norm == 1 else math.sqrt(error)


def gram_key(f: Matrix) -> bytes:
    """Bytes equal for two factors exactly when their shapes and Gram matrices are (to 9 decimals):
    ``aI + bJ`` by its two coefficients, read from the factor's type
    (:func:`~dpsql.hdmm.optimize.symmetric.coefficients`: a GROUP BY on 3,142 counties is not
    densified, rounded and hashed, which took seconds per term), any other by its dense Gram, or
    where that is too large to hold by :func:`~dpsql.hdmm.workload.factor_key`."""
    c = symmetric.coefficients(f)
    if c is not None:
        return repr((f.shape, round(c[0], 9) + 0.0, round(c[1], 9) + 0.0)).encode()
    if f.shape[1] ** 2 > DENSE_LIMIT:
        return factor_key(f)
    return repr(f.shape).encode() + np.ascontiguousarray(np.round(f.gram().dense(), 9)).tobytes()


def _in_algebra(f: Matrix) -> bool:
    """:func:`~dpsql.hdmm.marginals.in_algebra`, read from the factor's type where it can be."""
    return symmetric.coefficients(f) is not None or in_algebra(f)


def product_groups(workload: Workload) -> list[list[int]]:
    """Workload terms grouped by identical factor Gram matrices (weights aside)."""
    keys: dict[bytes, list[int]] = {}
    for k, (_, fs) in enumerate(workload.terms):
        keys.setdefault(b"|".join(gram_key(f) for f in fs), []).append(k)
    return list(keys.values())


def marginal_clusters(workload: Workload, groups: Sequence[Sequence[int]]) -> list[list[int]]:
    """Indices of ``groups`` that agree on every structured factor and differ
    only in marginal ones, for each such cluster of two groups or more."""
    keys: dict[bytes, list[int]] = {}
    for l, g in enumerate(groups):
        fs = workload.terms[g[0]][1]
        keys.setdefault(b"|".join(b"M" if _in_algebra(f) else gram_key(f) for f in fs), []).append(l)
    return [c for c in keys.values() if len(c) > 1]


def _best_kron(domain: Sequence[int], terms: Sequence[Term], norm: int, rng: np.random.Generator,
               memos: list[dict]) -> tuple[tuple[Matrix, ...], float]:
    runs = [kron_search(domain, terms, norm, rng, memo=m) for m in memos]
    return min(runs, key=lambda r: r[1])


def _factored_part(workload: Workload, terms: Sequence[Term], noise: NoiseModel, rng: np.random.Generator,
                   memos: list[dict], restarts: int, seed: int) -> tuple[MarginalStrategy, float] | None:
    """``(⊗_{i∈S} A_i) ⊗ M`` for a cluster and its error at unit sensitivity, or None
    when the marginal attributes are too many for OPT_M.

    Every term of a cluster has the same factors on ``S`` (its structured
    attributes, and those it only totals), so a term's error is
    ``w_k² · Π_{i∈S} tr(G_i X_i⁺) · err_k(M)`` with a common first factor and
    the sensitivity is the product of the two parts'. The fixed factors are
    thus OPT_⊗ for the shared factors alone, and ``M`` is OPT_M for the
    terms' marginal attributes.
    """
    d = len(workload.domain)
    R = [i for i in range(d) if _in_algebra(terms[0][1][i]) and not all(is_total(fs[i]) for _, fs in terms)]
    S = [i for i in range(d) if i not in R]
    if not R or len(R) > MAX_SEARCH_ATTRIBUTES:
        return None
    fixed: list[Matrix | None] = [None] * d
    if S:
        shared = [(1.0, tuple(terms[0][1][i] for i in S))]
        factors, _ = _best_kron([workload.domain[i] for i in S], shared, noise.norm, rng, memos)
        for i, f in zip(S, factors):
            fixed[i] = f
    marginal = Workload([workload.domain[i] for i in R], [(w, tuple(fs[i] for i in R)) for w, fs in terms])
    M = opt_marginal(marginal, noise, restarts=restarts, seed=seed)
    part = MarginalStrategy(M.strategy, operator="OPT_plus", fixed=tuple(fixed))
    error = part.trace_error(Workload(workload.domain, terms)) * part.sensitivity(noise.norm) ** 2
    return part, error


def opt_plus(
    workload: Workload, noise: NoiseModel, restarts: int = 1, seed: int = 0, clusters: bool = True
) -> UnionStrategy:
    """OPT_+ over the default clustering, with marginal clusters merged where
    that lowers the error (``clusters=False``: HDMM's default clustering alone)."""
    rng = np.random.default_rng(seed)
    groups = product_groups(workload)
    if deterministic(noise.norm, workload.domain):
        restarts = 1
    memos: list[dict] = [{} for _ in range(max(1, restarts))]  # restart r shares factors across groups
    parts: list[KronStrategy | MarginalStrategy] = []
    errors: list[float] = []
    for g in groups:
        factors, err = _best_kron(workload.domain, [workload.terms[k] for k in g], noise.norm, rng, memos)
        parts.append(KronStrategy(factors))
        errors.append(err)
    for cluster in marginal_clusters(workload, groups) if clusters else []:
        terms = [k for l in cluster for k in groups[l]]
        found = _factored_part(workload, [workload.terms[k] for k in terms], noise, rng, memos, restarts, seed)
        if found is not None and _share(found[1], noise.norm) < sum(_share(errors[l], noise.norm) for l in cluster):
            first = cluster[0]
            parts[first], errors[first], groups[first] = found[0], found[1], terms
            for l in cluster[1:]:
                groups[l] = []
    return weighted_union(parts, errors, groups, noise.norm, operator="OPT_plus")


def weighted_union(parts: Sequence[KronStrategy | MarginalStrategy], errors: Sequence[float],
                   groups: Sequence[Sequence[int]], norm: int, operator: str) -> UnionStrategy:
    """The union of ``parts`` (part ``l`` answering the workload terms ``groups[l]`` with error
    ``errors[l]`` at unit sensitivity) under the optimal budget split; empty groups are dropped."""
    groups = [list(g) for g in groups]
    # A group with zero error holds only all-zero queries (e.g. an impossible
    # WHERE): any part answers those exactly, so it needs no budget of its own.
    kept = [l for l, g in enumerate(groups) if g]
    live = [l for l in kept if errors[l] > 0] or kept[:1]
    for l in kept:
        if l not in live:
            groups[live[0]] = groups[live[0]] + groups[l]
    # errors are at unit sensitivity; OPT_M's Gaussian weights, for one, are not normalized
    sens = np.array([parts[l].sensitivity(norm) for l in live])
    errs = np.array([errors[l] for l in live])

    def union(weights: np.ndarray) -> UnionStrategy:
        return UnionStrategy([parts[l] for l in live], [float(c) for c in weights / sens], [groups[l] for l in live],
                             operator=operator)

    if len(live) == 1:
        return union(np.ones(1))
    # The split assumes the parts' sensitivities add up; parts on disjoint cells (statements whose
    # WHERE clauses never meet) do not add, and each may then take the whole budget. The union's
    # error is its exact sensitivity squared times Σ e_l / w_l²: the better of the two is kept.
    best: tuple[float, np.ndarray] | None = None
    for weights in (budget_weights(errs, norm), np.ones(len(live))):
        exact = union(weights).sensitivity(norm)
        error = exact**2 * float(np.sum(errs / weights**2))
        if best is None or error < best[0]:
            best = (error, weights / exact)
    return union(best[1])
