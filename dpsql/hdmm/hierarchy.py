"""Hierarchical factors: one attribute measured at every level of a tree, estimated through the tree.

A geographic attribute (tracts within counties within states) is queried at several levels:
``GROUP BY state``, ``GROUP BY county``, ``WHERE state = '06'``. Each such factor of the
workload is a *partition matrix* over the attribute's cells (row ``r`` is the indicator of a
set of cells, the rows disjoint), and the sets of all of them are *laminar*: any two are nested
or disjoint. They form a :class:`Tree` whose leaves are the cells; the nation (a total) is its
root. HDMM's hierarchical strategy for such a workload (HDMM §7, p-Identity's special case for
trees) measures every level, level ``l`` with weight ``w_l``: :class:`HierarchyFactor`, the
rows ``w_l · 1_v`` for every node ``v`` of every level. Its sensitivity is the largest, over
cells, of ``(Σ_{v ∋ cell} w_v^p)^(1/p)``.

Everything the mechanism needs is computed on the tree in ``O(nodes)`` per column, never with a
matrix over all pairs of cells:

* the generalized least-squares estimate ``x̂ = (HᵀH)⁻¹Hᵀy`` (:meth:`Tree.estimate`): a
  bottom-up pass combines each node's own measurement with the sum of its children's estimates
  by inverse-variance weighting, and a top-down pass spreads each parent's final estimate's
  difference from its children's sum over the children, in proportion to their variances
  (Hay et al. 2010; Cumings-Menon et al. for the 2020 Census). The tree's sums hold exactly:
  every node's estimate is the sum of its children's;
* the variance of every node's estimate, ``1_vᵀ(HᵀH)⁻¹1_v`` (:meth:`Tree.node_variances`), by the
  same two passes on variances;
* ``(HᵀH)⁻¹ X`` for any matrix ``X`` (:class:`TreeInverse`), so that the hierarchy is one
  Kronecker factor among others (:class:`~dpsql.hdmm.strategy.KronStrategy` asks its factors
  for it): the estimate of a product strategy is a product of per-factor estimates;
* the level weights minimizing the workload's expected error (:func:`optimize_weights`): a
  handful of numbers, each trial ``O(nodes)``;
* values whose every sum is exact (:func:`exact_sums`): the leaves' estimates on one power-of-two
  grid, so that every level read from them adds up to the last digit in floating point;
* non-negative integer tables that add up across levels (:func:`topdown_integer`): from the
  root down, each node's children get the non-negative integers nearest their estimates that
  add up to the node's integer (TopDown's post-processing).

>>> import numpy as np
>>> t = Tree.from_labels(4, [np.array([0, 0, 1, 1])])   # two "states" of two cells each
>>> [len(lv) for lv in t.level_nodes], t.parent.tolist()
([1, 2, 4], [-1, 0, 0, 1, 1, 2, 2])
>>> H = HierarchyFactor(t, (1.0, 1.0, 1.0))
>>> x = np.array([3.0, 1.0, 4.0, 1.0])
>>> t.estimate(H.matvec(x), H.weights).round(6).tolist()
[3.0, 1.0, 4.0, 1.0]
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Sequence

import numpy as np
import scipy.sparse as sp
from scipy.optimize import minimize

from dpsql.errors import WorkloadError
from dpsql.hdmm.matrix import Dense, Identity, Matrix, Ones, Sparse

__all__ = ["Tree", "HierarchyFactor", "TreeInverse", "partition_labels", "optimize_weights", "topdown_integer",
           "hierarchy_of", "exact_sums", "sum_grid"]

#: Most ``rows × cells`` a variance of queries that are not nodes of the tree may cost.
GENERAL_CROSS_LIMIT = 200_000_000


def partition_labels(f: Matrix) -> np.ndarray | None:
    """For a partition matrix ``f`` (entries 0 or 1, each row a non-empty set of cells, the rows
    disjoint): each cell's row, ``-1`` for a cell in none; else None."""
    n = f.shape[1]
    if isinstance(f, Identity):
        return np.arange(n)
    if isinstance(f, Ones):
        return np.zeros(n, dtype=np.int64) if f.shape[0] == 1 else None
    if isinstance(f, Sparse):
        M = sp.csr_matrix(f.matrix)
    elif isinstance(f, Dense):
        M = sp.csr_matrix(f.dense())
    else:
        return None
    M.eliminate_zeros()
    if M.nnz == 0 or not np.all(M.data == 1.0) or np.any(np.diff(M.indptr) == 0):
        return None
    rows = np.repeat(np.arange(M.shape[0]), np.diff(M.indptr))
    if np.bincount(M.indices, minlength=n).max() > 1:
        return None
    labels = np.full(n, -1, dtype=np.int64)
    labels[M.indices] = rows
    return labels


class Tree:
    """A laminar family of sets of ``n`` cells, as levels: ``labels[l][cell]`` is the node of level
    ``l`` holding the cell (``-1``: none), levels ordered from the coarsest (a single root, all
    cells) to the leaves (every cell its own node). Nodes are numbered level by level;
    ``parent[v]`` is the node of the nearest coarser level containing ``v`` (``-1`` for the root).
    Build one with :meth:`from_labels`, which checks the family is laminar."""

    def __init__(self, n: int, labels: Sequence[np.ndarray], parent: np.ndarray) -> None:
        self.n = n
        self.labels = [np.asarray(lab, dtype=np.int64) for lab in labels]
        self.parent = parent
        sizes = [int(lab.max()) + 1 for lab in self.labels]
        self.offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        self.level_of = np.repeat(np.arange(len(sizes)), sizes)

    @property
    def level_nodes(self) -> list[range]:
        """The global node numbers of each level."""
        return [range(int(a), int(b)) for a, b in zip(self.offsets[:-1], self.offsets[1:])]

    @property
    def nodes(self) -> int:
        return int(self.offsets[-1])

    @classmethod
    def from_labels(cls, n: int, levels: Sequence[np.ndarray]) -> "Tree":
        """The tree of the partitions ``levels`` (each a cell → node array as :func:`partition_labels`
        gives), with the root (all cells) and the leaves (each cell) added, repeated partitions
        and partitions whose every set is already a set of another dropped, and the rest ordered
        from the largest sets to the smallest. Raises :class:`~dpsql.errors.WorkloadError` if the
        sets are not laminar (two sets that overlap without one holding the other)."""
        cand = [np.zeros(n, dtype=np.int64)] + [_renumbered(np.asarray(lab, dtype=np.int64)) for lab in levels]
        cand.append(np.arange(n, dtype=np.int64))
        # a partition whose sets are all sets of another is dropped (of two with the same sets, the later)
        kept = [lab for i, lab in enumerate(cand)
                if not any(j != i and _sets_within(lab, other) and (j < i or not _sets_within(other, lab))
                           for j, other in enumerate(cand))]
        kept.sort(key=lambda a: -_mean_size(a))
        parent_parts = []
        for i, lab in enumerate(kept):
            m = int(lab.max()) + 1
            par = np.full(m, -1, dtype=np.int64)
            for j in range(i - 1, -1, -1):
                coarse = kept[j]
                node_of = _containing(lab, coarse, m)
                if node_of is None:
                    raise WorkloadError("the groups of this attribute are not nested: a group overlaps another "
                                        "without either holding the other")
                off = sum(int(kept[k].max()) + 1 for k in range(j))
                fill = (par < 0) & (node_of >= 0)
                par[fill] = node_of[fill] + off
            parent_parts.append(par)
        return cls(n, kept, np.concatenate(parent_parts))

    # -- structure ------------------------------------------------------------------------------------
    @cached_property
    def _child_sums(self) -> list[sp.csr_matrix]:
        """Per level ``l > 0``: the ``nodes × level-l nodes`` matrix adding each node into its parent."""
        out = []
        for lv in self.level_nodes[1:]:
            m = len(lv)
            par = self.parent[lv.start:lv.stop]
            out.append(sp.csr_matrix((np.ones(m), (par, np.arange(m))), shape=(self.nodes, m)))
        return out

    @cached_property
    def aggregations(self) -> list[sp.csr_matrix]:
        """Per level: its ``nodes × cells`` 0/1 matrix (each row a node's cells)."""
        out = []
        for lab in self.labels:
            keep = lab >= 0
            out.append(sp.csr_matrix((np.ones(int(keep.sum())), (lab[keep], np.flatnonzero(keep))),
                                     shape=(int(lab.max()) + 1, self.n)))
        return out

    def node_ids(self, f: Matrix) -> np.ndarray | None:
        """For a workload factor whose every row is a node's indicator: the node of each row; else None."""
        lab = partition_labels(f)
        if lab is None:
            return None
        m = f.shape[0]
        ids = np.full(m, -1, dtype=np.int64)
        for level in range(len(self.labels) - 1, -1, -1):
            node_of = _containing(lab, self.labels[level], m)
            if node_of is None:
                continue
            sizes = np.bincount(self.labels[level][self.labels[level] >= 0])
            row_sizes = np.bincount(lab[lab >= 0], minlength=m)
            hit = (ids < 0) & (node_of >= 0)
            hit[hit] &= sizes[node_of[hit]] == row_sizes[hit]
            ids[hit] = node_of[hit] + self.offsets[level]
        return ids if np.all(ids >= 0) else None

    # -- the two passes ---------------------------------------------------------------------------------
    def _node_weights(self, weights: Sequence[float]) -> np.ndarray:
        w = np.asarray(weights, dtype=float)
        if w.shape != (len(self.labels),) or np.any(w < 0) or w[-1] <= 0:
            raise WorkloadError(f"a hierarchy of {len(self.labels)} levels needs as many non-negative weights, "
                                "the leaves' positive")
        return w[self.level_of]

    def _up(self, y: np.ndarray | None, w: np.ndarray) -> tuple:
        """Bottom-up: each node's estimate from its subtree (``z``), its variance, and per node the
        sum of its children's estimates (``S``) and variances (``V``)."""
        N = self.nodes
        k = 0 if y is None else y.shape[1]
        z = np.zeros((N, k))
        var = np.zeros(N)
        S = np.zeros((N, k))
        V = np.zeros(N)
        for l in range(len(self.labels) - 1, -1, -1):
            lv = slice(self.offsets[l], self.offsets[l + 1])
            wl = w[lv]
            if l == len(self.labels) - 1:
                var[lv] = 1.0 / wl**2
                if y is not None:
                    z[lv] = y[lv] / wl[:, None]
            else:
                prec = 1.0 / V[lv] + wl**2
                var[lv] = 1.0 / prec
                if y is not None:
                    z[lv] = (S[lv] / V[lv][:, None] + y[lv] * wl[:, None]) * var[lv][:, None]
            if l > 0:
                add = self._child_sums[l - 1]
                V += add @ var[lv]
                if y is not None:
                    S += add @ z[lv]
        return z, var, S, V

    def estimate_nodes(self, y: np.ndarray, weights: Sequence[float]) -> np.ndarray:
        """The least-squares estimate of every node's total from ``y``, the measurements of
        :class:`HierarchyFactor` ``(self, weights)`` (rows in node order; a 2-D ``y`` holds one column
        per other cell of a product). Every node's estimate is the sum of its children's."""
        y = np.asarray(y, dtype=float)
        vec = y.ndim == 1
        Y = y[:, None] if vec else y
        w = self._node_weights(weights)
        z, var, S, V = self._up(Y, w)
        final = z.copy()
        for l in range(1, len(self.labels)):
            lv = slice(self.offsets[l], self.offsets[l + 1])
            p = self.parent[lv]
            final[lv] = z[lv] + (var[lv] / V[p])[:, None] * (final[p] - S[p])
        return final[:, 0] if vec else final

    def estimate(self, y: np.ndarray, weights: Sequence[float]) -> np.ndarray:
        """The least-squares estimate of every cell (the leaves' rows of :meth:`estimate_nodes`)."""
        return self.estimate_nodes(y, weights)[self.offsets[-2]:]

    def node_variances(self, weights: Sequence[float]) -> np.ndarray:
        """``1_vᵀ(HᵀH)⁻¹1_v`` for every node ``v``: its estimate's variance per unit noise variance."""
        w = self._node_weights(weights)
        _, var, _, V = self._up(None, w)
        P = var.copy()
        for l in range(1, len(self.labels)):
            lv = slice(self.offsets[l], self.offsets[l + 1])
            p = self.parent[lv]
            r = var[lv] / V[p]
            P[lv] = var[lv] + r * r * (P[p] - V[p])
        return P

    def inverse_gram(self, X: np.ndarray, weights: Sequence[float]) -> np.ndarray:
        """``(HᵀH)⁻¹ X`` for ``X`` over the cells: the estimate from measurements that are ``X / w_leaf``
        on the leaves and zero elsewhere (whose ``Hᵀy`` is ``X``)."""
        X = np.asarray(X, dtype=float)
        vec = X.ndim == 1
        X2 = X[:, None] if vec else X
        Y = np.zeros((self.nodes, X2.shape[1]))
        Y[self.offsets[-2]:] = X2 / float(weights[-1])
        out = self.estimate(Y, weights)
        return out[:, 0] if vec else out

    def leaf_norms(self, weights: Sequence[float], p: int) -> np.ndarray:
        """Each cell's column norm in :class:`HierarchyFactor`: ``(Σ_{levels holding it} w_l^p)^(1/p)``."""
        total = np.zeros(self.n)
        for lab, w in zip(self.labels, weights):
            total += (lab >= 0) * float(w) ** p
        return total ** (1.0 / p)


def _renumbered(lab: np.ndarray) -> np.ndarray:
    """Labels renumbered 0, 1, ... in order of their first cell (``-1`` kept)."""
    out = np.full(lab.shape, -1, dtype=np.int64)
    keep = lab >= 0
    uniq, first = np.unique(lab[keep], return_index=True)
    order = np.argsort(first)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[order] = np.arange(len(uniq))
    out[keep] = rank[np.searchsorted(uniq, lab[keep])]
    return out


def _mean_size(lab: np.ndarray) -> float:
    covered = int(np.sum(lab >= 0))
    return covered / (int(lab.max()) + 1)


def _containing(fine: np.ndarray, coarse: np.ndarray, m: int) -> np.ndarray | None:
    """Per set of ``fine`` (``m`` of them): the set of ``coarse`` holding it, ``-1`` if it lies
    outside every coarse set; None if some fine set straddles (laminarity fails)."""
    keep = fine >= 0
    f, c = fine[keep], coarse[keep]
    lo = np.full(m, np.iinfo(np.int64).max)
    hi = np.full(m, np.iinfo(np.int64).min)
    np.minimum.at(lo, f, c)
    np.maximum.at(hi, f, c)
    if np.any(lo != hi):
        return None
    return lo


def _sets_within(lab: np.ndarray, other: np.ndarray) -> bool:
    """Whether every set of ``lab`` is also a set of ``other``."""
    m = int(lab.max()) + 1
    node_of = _containing(lab, other, m)
    if node_of is None or np.any(node_of < 0):
        return False
    mine = np.bincount(lab[lab >= 0], minlength=m)
    theirs = np.bincount(other[other >= 0])
    return bool(np.all(theirs[node_of] == mine))


class HierarchyFactor(Matrix):
    """The strategy factor measuring every node of ``tree``, level ``l``'s nodes with weight
    ``weights[l]``: rows in node order (:class:`Tree`), ``nodes × cells``."""

    def __init__(self, tree: Tree, weights: Sequence[float]) -> None:
        self.tree = tree
        self.weights = tuple(float(w) for w in weights)
        tree._node_weights(self.weights)  # checks them
        self.shape = (tree.nodes, tree.n)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return np.concatenate([w * (A @ X) for A, w in zip(self.tree.aggregations, self.weights)])

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        out = np.zeros((self.tree.n, Y.shape[1]))
        for A, w, lv in zip(self.tree.aggregations, self.weights, self.tree.level_nodes):
            out += w * (A.T @ Y[lv.start:lv.stop])
        return out

    def dense(self) -> np.ndarray:
        return np.vstack([w * A.toarray() for A, w in zip(self.tree.aggregations, self.weights)])

    def column_norms(self, p: int) -> np.ndarray:
        return self.tree.leaf_norms(self.weights, p)

    def row_norms_sq(self) -> np.ndarray:
        sizes = np.concatenate([np.bincount(lab[lab >= 0]) for lab in self.tree.labels]).astype(float)
        return sizes * np.asarray(self.weights)[self.tree.level_of] ** 2

    @cached_property
    def inverse(self) -> "TreeInverse":
        """``(HᵀH)⁻¹``, implicit."""
        return TreeInverse(self)

    @cached_property
    def node_variances(self) -> np.ndarray:
        return self.tree.node_variances(self.weights)

    def cross_diag(self, x: Matrix, y: Matrix) -> np.ndarray:
        """``diag(x (HᵀH)⁻¹ yᵀ)`` for two workload factors with as many rows: from the nodes' variances
        where both are rows of nodes (the same node row by row), else through :class:`TreeInverse`."""
        ix = self.tree.node_ids(x)
        iy = ix if y is x else self.tree.node_ids(y)
        if ix is not None and iy is not None and np.array_equal(ix, iy):
            return self.node_variances[ix]
        if x.shape[0] * self.shape[1] > GENERAL_CROSS_LIMIT:
            raise WorkloadError(f"the variances of {x.shape[0]:,} queries that are not groups of the hierarchy over "
                                f"{self.shape[1]:,} values would take too long")
        out = np.empty(x.shape[0])
        step = max(1, GENERAL_CROSS_LIMIT // (50 * self.shape[1]))
        for a in range(0, x.shape[0], step):
            rows = _unit_columns(x.shape[0], a, step)
            xr = x.rmatvec(rows)          # cells × chunk
            yr = y.rmatvec(rows)
            out[a:a + step] = np.einsum("ij,ij->j", xr, self.tree.inverse_gram(yr, self.weights))
        return out

    def trace(self, f: Matrix) -> float:
        """``tr(fᵀf (HᵀH)⁻¹)``: the summed variances of workload factor ``f``'s queries."""
        return float(np.sum(self.cross_diag(f, f)))

    def __repr__(self) -> str:
        return f"HierarchyFactor({[len(lv) for lv in self.tree.level_nodes]}, weights={self.weights})"


def _unit_columns(m: int, start: int, step: int) -> np.ndarray:
    cols = np.arange(start, min(m, start + step))
    out = np.zeros((m, len(cols)))
    out[cols, np.arange(len(cols))] = 1.0
    return out


class TreeInverse(Matrix):
    """``(HᵀH)⁻¹`` of a :class:`HierarchyFactor`, applied by the tree's two passes (symmetric)."""

    def __init__(self, factor: HierarchyFactor) -> None:
        self.factor = factor
        self.shape = (factor.shape[1], factor.shape[1])

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self.factor.tree.inverse_gram(X, self.factor.weights)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return self._matmat(Y)


def hierarchy_of(factors: Sequence[Matrix]) -> Tree | None:
    """The tree of an attribute's workload factors, if every one is a partition matrix (a total, an
    identity, a GROUP BY over groups of cells, maybe filtered) and their groups are laminar; else None."""
    if not factors:
        return None
    labels = []
    n = factors[0].shape[1]
    for f in factors:
        lab = partition_labels(f)
        if lab is None:
            return None
        labels.append(lab)
    try:
        return Tree.from_labels(n, labels)
    except WorkloadError:
        return None


def optimize_weights(tree: Tree, costs: Sequence[tuple[float, np.ndarray]], p: int) -> tuple[float, ...]:
    """Level weights (sensitivity 1) minimizing ``Σ c · Σ_{v ∈ nodes} Var(v)``, for ``costs`` pairs
    ``(c, nodes)`` (the workload's factors on this attribute, as node ids, and the weight of each in
    the error: its term's weight and the other attributes' traces). The error scales with the
    sensitivity squared, so the objective is ``Δ_p(w)² · Σ c tr``; a few parameters (log-weights),
    each evaluation one pass over the tree."""
    L = len(tree.labels)
    counts = np.zeros(tree.nodes)
    for c, nodes in costs:
        np.add.at(counts, nodes, c)

    def error(theta: np.ndarray) -> float:
        w = np.exp(theta)
        sens = float(tree.leaf_norms(w, p).max())
        return sens * sens * float(counts @ tree.node_variances(w))

    start = np.zeros(L)
    used = np.bincount(tree.level_of, weights=counts, minlength=L) > 0
    start[~used] = -3.0  # levels no query asks for start small
    scale = error(start)
    if not scale > 0:
        return tuple(float(v) for v in np.exp(start) / tree.leaf_norms(np.exp(start), p).max())
    # relative error, by L-BFGS-B with finite differences (L + 1 passes a step; Nelder-Mead took ~1,000 passes)
    best = minimize(lambda th: error(th) / scale, start, method="L-BFGS-B", bounds=[(-12.0, 12.0)] * L,
                    options={"ftol": 1e-9, "gtol": 1e-7, "maxiter": 200})
    theta = best.x if best.fun <= 1.0 else start
    w = np.exp(theta)
    w = w / float(tree.leaf_norms(w, p).max())
    return tuple(float(v) for v in w)


def topdown_integer(tree: Tree, nodes: np.ndarray, rounded: bool = True) -> np.ndarray:
    """Non-negative integer node tables that add up, from consistent estimates ``nodes`` (node rows ×
    columns, as :meth:`Tree.estimate_nodes` gives): the root's is its estimate rounded and clipped at 0;
    then, level by level, the children of each node get the non-negative reals nearest their estimates
    that add up to the node's integer (a projection on the simplex), rounded by largest remainders so
    that they still add up. Each column is its own table (e.g. one cell of the other attributes).
    ``rounded=False`` skips the rounding: non-negative reals that add up."""
    est = np.asarray(nodes, dtype=float)
    vec = est.ndim == 1
    E = est[:, None] if vec else est
    out = np.zeros(E.shape, dtype=np.int64 if rounded else float)
    root = slice(tree.offsets[0], tree.offsets[1])
    out[root] = np.maximum(np.rint(E[root]) if rounded else E[root], 0)
    for l in range(1, len(tree.labels)):
        lv = slice(tree.offsets[l], tree.offsets[l + 1])
        par = tree.parent[lv]
        real = _simplex_projection(E[lv], par, out[par].astype(float))
        out[lv] = _round_to_totals(real, par, out, tree.nodes) if rounded else real
    return out[:, 0] if vec else out


def _simplex_projection(e: np.ndarray, group: np.ndarray, totals: np.ndarray, iterations: int = 60) -> np.ndarray:
    """Per group and column, ``max(e + τ, 0)`` with the shift ``τ`` that makes it add up to the group's
    total (``totals``, repeated on every member): the nearest non-negative vector with that sum."""
    ngroups = int(group.max()) + 1
    add = sp.csr_matrix((np.ones(len(group)), (group, np.arange(len(group)))), shape=(ngroups, len(group)))
    size = np.bincount(group, minlength=ngroups).astype(float)
    T = np.zeros((ngroups, e.shape[1]))
    T[group] = totals
    gmax = np.full((ngroups, e.shape[1]), -np.inf)
    np.maximum.at(gmax, group, e)
    lo = -gmax  # at τ = -max, the sum is 0
    hi = np.where(size[:, None] > 0, (T - np.asarray(add @ e)) / np.maximum(size, 1)[:, None], 0.0)
    hi = np.maximum(hi, lo)
    for _ in range(iterations):
        mid = (lo + hi) / 2
        s = np.asarray(add @ np.maximum(e + mid[group], 0.0))
        below = s < T
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    return np.maximum(e + hi[group], 0.0)


def _round_to_totals(real: np.ndarray, group: np.ndarray, out: np.ndarray, nodes: int) -> np.ndarray:
    """``real`` (adding up per group to its parent's integer ``out[group]``, up to rounding) as
    non-negative integers adding up exactly: floors, and one more for the largest remainders."""
    base = np.floor(real + 1e-9)
    ngroups = nodes
    add = sp.csr_matrix((np.ones(len(group)), (group, np.arange(len(group)))), shape=(ngroups, len(group)))
    # the floors add up to at most the parent's integer (the reals add up to it, within the bisection's
    # precision), and short of it by fewer than the children: one more for that many of them
    short = np.rint(out[:ngroups] - np.asarray(add @ base)).astype(np.int64)
    frac = real - base
    result = base.astype(np.int64)
    for j in range(real.shape[1]):
        order = np.lexsort((-frac[:, j], group))
        g_sorted = group[order]
        rank = np.arange(len(order)) - np.searchsorted(g_sorted, g_sorted, side="left")
        result[order[rank < short[g_sorted, j]], j] += 1
    return result


def sum_grid(total: float) -> float:
    """The power of two ``q`` with ``2⁵² q ≥ total``, the least such: values that are multiples of ``q``
    and whose magnitudes add up to at most ``total`` have exact floating-point sums (:func:`exact_sums`)."""
    return math.ldexp(1.0, math.frexp(total)[1] - 52)  # 2^e ≥ total with e = frexp's exponent


def exact_sums(x: np.ndarray, step: float | None = None) -> np.ndarray:
    """``x`` rounded to the nearest multiples of ``q``, the power of two with ``2⁵² q ≥ Σ|x|``
    (:func:`sum_grid`; or ``step``, a power of two at least that, to put several vectors on one grid).
    Every partial sum of the result is then a multiple of ``q`` of magnitude below ``2⁵³ q``, which a
    double holds exactly: any sum of any of its values, in any order (``math.fsum``, numpy, BLAS,
    DuckDB's ``SUM``), is the exact sum, so totals read from it add up to the last digit. Each value
    moves by at most ``q / 2`` (about ``10⁻¹⁶`` of the total; the noise is far larger).

    >>> v = exact_sums(np.array([0.1, 0.2, 0.3]))
    >>> float(v[0] + v[1] + v[2]) == float(v[2] + v[1] + v[0]) == math.fsum(v.tolist())
    True
    """
    x = np.asarray(x, dtype=float)
    total = float(np.abs(x).sum())
    if not total > 0 or not math.isfinite(total):
        return x.copy()
    q = sum_grid(total) if step is None else step
    return np.rint(x / q) * q
