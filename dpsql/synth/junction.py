"""Junction trees: the cliques a graphical model over measured marginals needs, and their tree.

One public function, :func:`junction_tree`. A model whose potentials live on the
measured marginals' attribute sets has an interaction graph with an edge between
every two attributes measured together. Exact inference needs that graph
triangulated: attributes are eliminated one at a time, each time joining its
remaining neighbours, and each attribute with those neighbours is a clique. The
elimination order is chosen greedily, the attribute whose clique has the fewest
cells first (ties: the one adding the fewest edges), which keeps the model small
(finding the smallest is NP-hard). The maximal cliques, joined by a maximum
spanning tree on the number of attributes they share, form a junction tree: the
attributes two cliques share are in every clique on the path between them,
which is what lets belief propagation (:mod:`dpsql.synth.graphical`) compute
every clique's marginal exactly in two passes.

>>> tree = junction_tree((2, 3, 4, 5), [(0, 1), (1, 2), (2, 3), (0, 3)])
>>> tree.cliques, tree.size
(((0, 1, 2), (0, 2, 3)), 64)
>>> tree.edges
((0, 1),)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

__all__ = ["JunctionTree", "junction_tree"]


@dataclass(frozen=True)
class JunctionTree:
    """Cliques (sorted attribute tuples) over a ``domain`` and the tree joining them.

    ``edges`` are ``(parent, child)`` clique positions in an order where every parent
    comes before its children (clique 0 is the root); several components are joined
    through empty separators, so this is always one tree."""

    domain: tuple[int, ...]
    cliques: tuple[tuple[int, ...], ...]
    edges: tuple[tuple[int, int], ...]

    @property
    def sizes(self) -> list[int]:
        """Each clique's cells."""
        return [math.prod(self.domain[a] for a in c) for c in self.cliques]

    @property
    def size(self) -> int:
        """Cells over all cliques: the model's size in numbers."""
        return sum(self.sizes)

    def separator(self, edge: tuple[int, int]) -> tuple[int, ...]:
        """The attributes the two cliques of ``edge`` share."""
        parent, child = edge
        return tuple(sorted(set(self.cliques[parent]) & set(self.cliques[child])))

    def home(self, subset: Sequence[int]) -> int:
        """A clique containing every attribute of ``subset`` (the smallest), or -1."""
        fits = [i for i, c in enumerate(self.cliques) if set(subset) <= set(c)]
        return min(fits, key=lambda i: math.prod(self.domain[a] for a in self.cliques[i])) if fits else -1


def junction_tree(domain: Sequence[int], subsets: Sequence[Sequence[int]]) -> JunctionTree:
    """The junction tree of a model with a potential on each of ``subsets`` (attribute
    positions in ``domain``), and on every single attribute (so each is in some clique)."""
    domain = tuple(int(n) for n in domain)
    d = len(domain)
    neighbours: list[set[int]] = [set() for _ in range(d)]
    for s in subsets:
        for a in s:
            if not 0 <= a < d:
                raise ValueError(f"attribute {a} is not in a domain of {d} attributes")
            neighbours[a] |= set(s) - {a}
    remaining = set(range(d))

    def cost(v: int) -> tuple[int, int, int]:
        near = neighbours[v] & remaining
        fill = (len(near) * (len(near) - 1) - sum(len(neighbours[x] & near) for x in near)) // 2  # pairs not joined
        return math.prod(domain[a] for a in near | {v}), fill, v

    costs = {v: cost(v) for v in remaining}
    found: list[tuple[int, ...]] = []
    while remaining:
        v = min(remaining, key=costs.__getitem__)
        near = neighbours[v] & remaining
        for x in near:
            neighbours[x] |= near - {x}
        found.append(tuple(sorted(near | {v})))
        remaining.remove(v)
        del costs[v]
        # only the eliminated attribute's neighbours and theirs gained edges or lost a neighbour
        for u in set().union(near, *(neighbours[x] for x in near)) & remaining:
            costs[u] = cost(u)
    cliques = list(dict.fromkeys(c for c in found if not any(set(c) < set(o) for o in found)))
    return JunctionTree(domain, tuple(cliques), _spanning_tree(cliques))


def _spanning_tree(cliques: list[tuple[int, ...]]) -> tuple[tuple[int, int], ...]:
    """A maximum spanning tree on shared attributes (Prim's, from clique 0), as (parent, child)
    edges with parents first; components are joined with empty separators."""
    if not cliques:
        return ()
    sets = [set(c) for c in cliques]
    best = {j: (len(sets[0] & sets[j]), 0) for j in range(1, len(cliques))}
    edges = []
    while best:
        j = max(best, key=lambda k: (best[k][0], -k))
        edges.append((best.pop(j)[1], j))
        for k in best:
            shared = len(sets[j] & sets[k])
            if shared > best[k][0]:
                best[k] = (shared, j)
    return tuple(edges)
