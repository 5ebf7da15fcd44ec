"""OPT_H+: OPT_H per group of statements, the groups reconciled across their shared hierarchy.

A workload whose terms read a hierarchical attribute (geography) together with disjoint sets of
other attributes (race by Hispanic origin; voting age; sex by age) is split into those groups:
two terms are in one group when they both read (other than as a total) some attribute besides the
hierarchy. Every group gets OPT_H's product strategy for its own terms
(:func:`~dpsql.hdmm.optimize.hier.opt_hier`), measuring the levels of the whole workload's tree, so
its marginal covers the hierarchy and the group's attributes only, not the product of every
attribute. The groups share the budget as OPT_+'s parts do
(:func:`~dpsql.hdmm.optimize.union.budget_weights`). The terms on the hierarchy alone (the totals
by level) are either optimized for in every group, their weight shared equally, or measured by a
product of their own; of the two, the one with the lower expected error is kept. They are answered
from the groups' combined estimate of the hierarchy
(:class:`~dpsql.hdmm.reconcile.ReconciledUnion`), so every level of every table adds up.

>>> import numpy as np, scipy.sparse as sp
>>> from dpsql.hdmm.matrix import Identity, Sparse, Total
>>> from dpsql.hdmm.workload import Workload
>>> from dpsql.privacy import Gaussian
>>> states = Sparse(sp.csr_matrix(np.kron(np.eye(3), np.ones(4))))
>>> W = Workload((12, 2, 3), [(1.0, (states, Identity(2), Total(3))), (1.0, (Identity(12), Total(2), Identity(3))),
...                           (1.0, (states, Total(2), Total(3)))])
>>> A = opt_hier_plus(W, Gaussian(1.0, 1e-6))
>>> A.groups, A.totals
([[0], [1]], [2])
"""

from __future__ import annotations

import math

import numpy as np

from dpsql.errors import WorkloadError
from dpsql.hdmm.hierarchy import Tree
from dpsql.hdmm.matrix import constant_row
from dpsql.hdmm.optimize.hier import hierarchies, opt_hier
from dpsql.hdmm.optimize.union import budget_weights
from dpsql.hdmm.reconcile import ReconciledUnion
from dpsql.hdmm.workload import Workload
from dpsql.privacy import NoiseModel

__all__ = ["opt_hier_plus", "split"]


def split(workload: Workload, trees: "list[Tree | None] | None" = None) -> tuple[int, Tree, list[list[int]],
                                                                              list[int]] | None:
    """The hierarchical attribute to split ``workload`` on and its tree, its groups of terms (each term in
    the group of the other attributes it reads) and its terms on the hierarchy alone; None unless there
    are two groups or more. Of several hierarchical attributes, the one giving the most groups.
    ``trees``: :func:`~dpsql.hdmm.optimize.hier.hierarchies` of ``workload``, if known."""
    best = None
    reads = [[constant_row(f) is None for f in fs] for _, fs in workload.terms]
    for h, tree in enumerate(hierarchies(workload) if trees is None else trees):
        if tree is None:
            continue
        parent = list(range(len(workload.domain)))  # attributes joined when a term reads them together

        def find(a: int) -> int:
            while parent[a] != a:
                parent[a] = parent[parent[a]]
                a = parent[a]
            return a

        totals, members = [], []
        for k, used in enumerate(reads):
            attrs = [i for i, u in enumerate(used) if u and i != h]
            if not attrs:
                totals.append(k)
                continue
            for i in attrs[1:]:
                parent[find(i)] = find(attrs[0])
            members.append((k, attrs[0]))
        groups: dict[int, list[int]] = {}
        for k, a in members:
            groups.setdefault(find(a), []).append(k)
        if len(groups) >= 2 and (best is None or len(groups) > len(best[2])):
            best = (h, tree, sorted(groups.values()), totals)
    return best


def opt_hier_plus(workload: Workload, noise: NoiseModel, restarts: int = 1, seed: int = 0) -> ReconciledUnion:
    """OPT_H+'s strategy for ``workload`` (see the module docstring); a
    :class:`~dpsql.errors.WorkloadError` when no hierarchical attribute splits it into two groups or more."""
    found = split(workload)
    if found is None:
        raise WorkloadError("no hierarchy splits this workload into groups of statements on disjoint attributes")
    h, tree, groups, totals = found
    folded = _union(workload, noise, h, tree, groups, totals, restarts, seed)
    if not totals:
        return folded
    alone = _union(workload, noise, h, tree, groups + [[]], totals, restarts, seed)
    return min((folded, alone), key=lambda A: A.trace_error(workload))


def _union(workload: Workload, noise: NoiseModel, h: int, tree: Tree, groups: list[list[int]], totals: list[int],
           restarts: int, seed: int) -> ReconciledUnion:
    """Each group's OPT_H product with the totals by level beside its own terms (their weight shared
    equally), or, for an empty group, the totals' own product; the budget split as OPT_+ splits it."""
    own = any(not terms for terms in groups)  # the totals have a product of their own
    share = 1.0 if own else 1.0 / math.sqrt(len(groups))
    parts, errors = [], []
    for g, terms in enumerate(groups):
        beside = [] if own and terms else [(w * share, fs) for w, fs in (workload.terms[k] for k in totals)]
        part_workload = Workload(workload.domain, [workload.terms[k] for k in terms] + beside)
        part = opt_hier(part_workload, noise, restarts=restarts, seed=seed + 104729 * g, shared={h: tree})
        parts.append(part)
        errors.append(part.trace_error(part_workload) * part.sensitivity(noise.norm) ** 2)
    weights = budget_weights(np.array(errors), noise.norm)
    return ReconciledUnion(parts, [float(c) / p.sensitivity(noise.norm) for c, p in zip(weights, parts)], groups,
                           totals, h)
