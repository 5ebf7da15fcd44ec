"""OPT_H: a product strategy whose factor on each hierarchical attribute measures every level.

An attribute is *hierarchical* when every workload factor on it is a partition matrix (a total,
GROUP BY groups of its cells, maybe filtered) and the groups of all of them are nested
(:func:`~dpsql.hdmm.hierarchy.hierarchy_of`), with at least one level between the total and
the cells, or when its domain is too large for a dense Gram (an identity and a total then form
a two-level tree). Its factor is a :class:`~dpsql.hdmm.hierarchy.HierarchyFactor`, whose level
weights are optimized (:func:`~dpsql.hdmm.hierarchy.optimize_weights`); the other attributes
get OPT_⊗'s per-attribute factors (OPT_0, or the single query a rank-one Gram asks). As in OPT_⊗
(Theorem 6), the error of a union of products is ``Σ_k w_k² Π_i tr_ki``, so the factors are
optimized in turn, each on its workload factors weighted by the others' traces, until the
error stops improving. No step forms a matrix over all pairs of a hierarchical attribute's cells.

>>> import numpy as np, scipy.sparse as sp
>>> from dpsql.hdmm.matrix import Identity, Sparse, Total
>>> from dpsql.hdmm.workload import Workload
>>> from dpsql.privacy import Gaussian
>>> states = Sparse(sp.csr_matrix(np.kron(np.eye(3), np.ones(4))))
>>> W = Workload((12, 2), [(1.0, (states, Identity(2))), (1.0, (Identity(12), Total(2)))])
>>> type(opt_hier(W, Gaussian(1.0, 1e-6)).factors[0]).__name__
'HierarchyFactor'
"""

from __future__ import annotations

import math

import numpy as np

from dpsql.errors import WorkloadError
from dpsql.hdmm.hierarchy import HierarchyFactor, Tree, hierarchy_of, optimize_weights
from dpsql.hdmm.matrix import DENSE_LIMIT, Matrix
from dpsql.hdmm.optimize.kron import MAX_SWEEPS, SWEEP_TOL, _gram_pinv
from dpsql.hdmm.optimize.opt0 import optimize_factor, rank_one, single_query
from dpsql.hdmm.strategy import KronStrategy
from dpsql.hdmm.workload import Workload
from dpsql.privacy import NoiseModel

__all__ = ["opt_hier", "hierarchies"]


def hierarchies(workload: Workload) -> list[Tree | None]:
    """Per attribute, its tree if it is hierarchical (see the module docstring), else None."""
    out = []
    for i, n in enumerate(workload.domain):
        tree = hierarchy_of([fs[i] for _, fs in workload.terms])
        out.append(tree if tree is not None and (len(tree.labels) > 2 or n * n > DENSE_LIMIT) else None)
    return out


def opt_hier(workload: Workload, noise: NoiseModel, restarts: int = 1, seed: int = 0,
             shared: "dict[int, Tree] | None" = None) -> KronStrategy:
    """OPT_H's strategy for ``workload``; a :class:`~dpsql.errors.WorkloadError` if no attribute is
    hierarchical, or another is too large for a dense Gram. ``shared``: trees to measure attributes on
    instead of the workload's own (each must hold every group of the attribute in the workload): the
    parts of a larger workload then all measure one tree (:mod:`~dpsql.hdmm.optimize.hierplus`)."""
    trees = hierarchies(workload)
    for i, tree in (shared or {}).items():
        trees[i] = tree
    if not any(t is not None for t in trees):
        raise WorkloadError("no attribute is queried at nested levels")
    for t, n in zip(trees, workload.domain):
        if t is None and n * n > DENSE_LIMIT:
            raise WorkloadError(f"an attribute of {n:,} values that is not a hierarchy needs a Gram too large to hold")
    rng = np.random.default_rng(seed)
    terms = workload.terms
    d = len(workload.domain)
    w2 = np.array([w * w for w, _ in terms])
    ids = [[t.node_ids(fs[i]) for _, fs in terms] if t is not None else None for i, t in enumerate(trees)]
    grams = [[fs[i].gram().dense() for _, fs in terms] if t is None else None for i, t in enumerate(trees)]
    factors: list[Matrix | None] = [None] * d
    traces = np.ones((len(terms), d))
    fixed = [False] * d
    for i in range(d):
        if trees[i] is None:
            v = rank_one(sum(grams[i]))
            if v is not None:
                fixed[i] = True
                factors[i] = single_query(v)
                P = _gram_pinv(factors[i])
                traces[:, i] = [float(np.sum(g * P)) for g in grams[i]]
            else:
                traces[:, i] = [float(np.trace(g)) for g in grams[i]]
    error = math.inf
    for _ in range(MAX_SWEEPS):
        for i in range(d):
            if fixed[i]:
                continue
            others = np.prod(np.delete(traces, i, axis=1), axis=1) * w2
            if trees[i] is not None:
                weights = optimize_weights(trees[i], list(zip(others, ids[i])), noise.norm)
                factor = HierarchyFactor(trees[i], weights)
                traces[:, i] = [float(np.sum(factor.node_variances[nodes])) for nodes in ids[i]]
            else:
                factor = optimize_factor(sum(c * g for c, g in zip(others, grams[i])), noise.norm, rng)[0]
                P = _gram_pinv(factor)
                traces[:, i] = [float(np.sum(g * P)) for g in grams[i]]
            factors[i] = factor
        new = float(np.sum(w2 * np.prod(traces, axis=1)))
        converged = error - new <= SWEEP_TOL * new
        error = new
        if converged or all(fixed[i] or trees[i] is not None for i in range(d)) and len(terms) == 1:
            break
    return KronStrategy(tuple(factors), operator="OPT_H")
