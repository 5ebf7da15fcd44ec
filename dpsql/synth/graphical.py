"""A graphical model on a junction tree: exact marginals by belief propagation, and sampling.

:class:`GraphicalModel` holds one log-potential array per clique of a
:class:`~dpsql.synth.junction.JunctionTree` (axes in the clique's attribute order)
and a total. Its distribution is ``p(x) ∝ exp(Σ_C θ_C(x_C))``; its "counts" are the
total times ``p``. Nothing here touches private data: the potentials are fitted
to noisy, released measurements by :mod:`dpsql.synth.estimate`.

* :meth:`GraphicalModel.beliefs` calibrates the tree (sum-product, one pass up to the
  root and one down) and returns every clique's counts;
  :meth:`GraphicalModel.marginal` sums one down to any attribute set it contains, and
  eliminates variables across cliques for a set no clique holds (AIM scores such sets).
* :meth:`GraphicalModel.sample` draws records clique by clique from the root, each
  clique's new attributes given its separator with the parent. Counts are allotted by
  randomized rounding (each cell gets the floor of its expected count, and the
  remainders are drawn without replacement in proportion to their fractions), so the
  table's marginals on every clique are within one record of the model's per cell,
  instead of the ``√n`` of independent draws.

>>> import numpy as np
>>> from dpsql.synth.junction import junction_tree
>>> tree = junction_tree((2, 2), [(0, 1)])
>>> model = GraphicalModel(tree, [np.log(np.array([[1.0, 3.0], [2.0, 4.0]]))], total=10.0)
>>> model.marginal((1,)).round(12).tolist()
[3.0, 7.0]
>>> np.bincount(model.sample(10, np.random.default_rng(0))[:, 0], minlength=2).tolist()
[4, 6]
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from dpsql.synth.junction import JunctionTree

__all__ = ["GraphicalModel", "allot", "expand", "project"]


def expand(values: np.ndarray, attrs: Sequence[int], target: Sequence[int]) -> np.ndarray:
    """``values`` over ``attrs`` viewed over ``target`` (a sorted superset): size-1 axes for the
    attributes it lacks, so it broadcasts against arrays over ``target``."""
    shape = [values.shape[list(attrs).index(a)] if a in attrs else 1 for a in target]
    return values.reshape(shape)


def project(values: np.ndarray, attrs: Sequence[int], keep: Sequence[int]) -> np.ndarray:
    """``values`` over ``attrs`` summed down to ``keep`` (sorted)."""
    axes = tuple(i for i, a in enumerate(attrs) if a not in keep)
    return values.sum(axis=axes) if axes else values


class GraphicalModel:
    """Log-potentials ``theta`` on the cliques of ``tree`` and a ``total`` (see the module docstring)."""

    def __init__(self, tree: JunctionTree, theta: Sequence[np.ndarray] | None = None, total: float = 1.0) -> None:
        self.tree = tree
        self.total = float(total)
        shapes = [tuple(tree.domain[a] for a in c) for c in tree.cliques]
        self.theta = [np.zeros(s) for s in shapes] if theta is None else [np.asarray(t, float) for t in theta]
        if [t.shape for t in self.theta] != shapes:
            raise ValueError(f"potentials of shapes {[t.shape for t in self.theta]} for cliques of shapes {shapes}")
        self._beliefs: list[np.ndarray] | None = None
        self._separators = {e: tree.separator(e) for e in tree.edges}

    def with_potentials(self, theta: Sequence[np.ndarray]) -> "GraphicalModel":
        """The same tree and total with other potentials."""
        return GraphicalModel(self.tree, theta, self.total)

    def beliefs(self) -> list[np.ndarray]:
        """Every clique's counts (total times its marginal), by belief propagation."""
        if self._beliefs is None:
            self._beliefs = self._calibrate()
        return self._beliefs

    def _calibrate(self) -> list[np.ndarray]:
        # sum-product on exp(θ - max θ), each message rescaled to a largest entry of 1: as exact
        # as log space (the scales cancel in the normalized beliefs) at a fraction of its cost,
        # unless a clique's product underflows in every cell: potentials hundreds apart, which only
        # a line-search step far too long makes. Its beliefs are then NaN, silently: the fit's
        # line search rejects the step on its NaN loss (dpsql.synth.estimate).
        # Edges with an empty separator (between independent parts) carry the message 1: skipped.
        # A clique's message to each of its m children multiplies all its other messages, taken
        # from products kept from either end of the list: 3m products rather than m², which
        # matters for the hubs that many small cliques hang from in a wide model.
        cliques, separators = self.tree.cliques, self._separators
        edges = [e for e in self.tree.edges if separators[e]]
        children: dict[int, list[int]] = {i: [] for i in range(len(cliques))}
        for p, c in edges:
            children[p].append(c)

        def message(values: np.ndarray, source: int, target: int, edge: tuple[int, int]) -> np.ndarray:
            """``values`` over clique ``source`` summed to the separator ``edge`` and rescaled,
            over clique ``target``'s axes."""
            m = project(values, cliques[source], separators[edge])
            top = m.max()
            return expand(m / top if top > 0 else m, separators[edge], cliques[target])

        factors = [np.exp(t - t.max()) for t in self.theta]
        up: dict[int, np.ndarray] = {}  # child -> its message to its parent
        for p, c in reversed(edges):  # leaves first
            gathered = factors[c]
            for g in children[c]:
                gathered = gathered * up[g]
            up[c] = message(gathered, c, p, (p, c))
        beliefs = list(factors)
        down: dict[int, np.ndarray] = {}  # child -> the message from its parent
        for p in dict.fromkeys(p for p, _ in edges):  # root first: a clique's own message comes first
            ups = [up[c] for c in children[p]]
            after: list[np.ndarray | None] = [None] * len(ups)  # the product of the messages after each
            for j in range(len(ups) - 1, 0, -1):
                after[j - 1] = ups[j] if after[j] is None else ups[j] * after[j]
            before = factors[p] * down[p] if p in down else factors[p]
            for j, c in enumerate(children[p]):
                down[c] = message(before if after[j] is None else before * after[j], p, c, (p, c))
                before = before * ups[j]
            beliefs[p] = before
        for c, m in down.items():
            if not children[c]:
                beliefs[c] = factors[c] * m
        with np.errstate(invalid="ignore"):
            return [self.total * b / b.sum() for b in beliefs]

    def marginal(self, subset: Sequence[int]) -> np.ndarray:
        """The model's counts on ``subset`` (sorted attribute positions), flat in C order.

        Summed from a clique's beliefs when one holds ``subset``; otherwise by variable
        elimination on the smallest subtree whose cliques hold its attributes: on a calibrated
        tree the joint of that subtree's attributes is ``Π μ_C / Π μ_S`` (cliques over
        separators), so each clique, conditioned on its separator with its parent in the
        subtree, is multiplied in from the leaves up, summing out every attribute as soon
        as no factor still to come and not ``subset`` holds it."""
        subset = tuple(subset)
        home = self.tree.home(subset)
        if home >= 0:
            return project(self.beliefs()[home], self.tree.cliques[home], subset).ravel()
        return self._eliminate(subset).ravel()

    def _eliminate(self, subset: tuple[int, ...]) -> np.ndarray:
        tree, beliefs = self.tree, self.beliefs()
        cliques = [set(c) for c in tree.cliques]
        neighbours: dict[int, set[int]] = {i: set() for i in range(len(cliques))}
        for p, c in tree.edges:
            neighbours[p].add(c)
            neighbours[c].add(p)
        wanted = set(subset)
        needed = {min((i for i in range(len(cliques)) if a in cliques[i]),
                      key=lambda i: (-len(cliques[i] & wanted), i)) for a in subset}
        nodes = set(neighbours)  # prune leaves no attribute needs, down to the Steiner subtree
        leaves = [i for i in nodes if len(neighbours[i] & nodes) <= 1 and i not in needed]
        while leaves:
            i = leaves.pop()
            nodes.discard(i)
            leaves.extend(j for j in neighbours[i] & nodes if len(neighbours[j] & nodes) <= 1 and j not in needed)
        root = min(needed)

        def upward(i: int, parent: int | None) -> tuple[np.ndarray, tuple[int, ...]]:
            """Clique i's subtree summed down to ``subset`` and i's separator with its parent."""
            attrs = tree.cliques[i]
            sep = tuple(sorted(cliques[i] & cliques[parent])) if parent is not None else ()
            factor = beliefs[i] / self.total
            if sep:
                below = expand(project(beliefs[i], attrs, sep) / self.total, sep, attrs)
                factor = np.divide(factor, below, out=np.zeros_like(factor), where=below > 0)
            children = [upward(j, i) for j in sorted(neighbours[i] & nodes) if j != parent]
            keep = wanted | set(sep) | {a for _, carried in children for a in carried}
            kept = tuple(a for a in attrs if a in keep)
            factor, attrs = project(factor, attrs, kept), kept
            for k, (message, carried) in enumerate(children):
                keep = wanted | set(sep) | {a for _, later in children[k + 1:] for a in later}
                factor, attrs = _product(factor, attrs, message, carried, keep)
            return factor, attrs

        factor, attrs = upward(root, None)
        return self.total * np.transpose(factor, [attrs.index(a) for a in subset])

    def on_tree(self, tree: JunctionTree) -> "GraphicalModel":
        """A model on ``tree`` (same domain) with this model's marginals on its cliques: potentials
        ``log μ_C`` less ``log μ_S`` on each separator with the parent, so that its distribution is
        ``Π μ_C / Π μ_S`` (the maximum-entropy one with those marginals, equal to this model's
        when it factorizes on ``tree``). A warm start when a model gains measured sets."""
        floor = 1e-300
        theta = [np.log(np.maximum(self.marginal(c).reshape([tree.domain[a] for a in c]), floor))
                 for c in tree.cliques]
        for p, c in tree.edges:
            sep = tree.separator((p, c))
            theta[c] = theta[c] - expand(np.log(np.maximum(self.marginal(sep).reshape(
                [tree.domain[a] for a in sep]), floor)), sep, tree.cliques[c])
        return GraphicalModel(tree, theta, self.total)

    def sample(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` records (an ``n × d`` array of domain indices) drawn from the model, clique by
        clique from the root with randomized rounding (see the module docstring)."""
        tree, beliefs = self.tree, self.beliefs()
        records = np.zeros((n, len(tree.domain)), dtype=np.int64)
        if n == 0 or not tree.cliques:
            return records
        root = tree.cliques[0]
        cells = allot(beliefs[0].ravel(), n, rng)
        records[:, list(root)] = np.column_stack(np.unravel_index(rng.permutation(cells), beliefs[0].shape))
        for p, c in tree.edges:
            sep = tree.separator((p, c))
            new = [a for a in tree.cliques[c] if a not in sep]
            if not new:
                continue
            # the child's counts as (separator cell, new cells), separator attributes first
            order = [tree.cliques[c].index(a) for a in sep + tuple(new)]
            table = np.transpose(beliefs[c], order).reshape(-1, int(np.prod([tree.domain[a] for a in new])))
            key = (np.ravel_multi_index(records[:, list(sep)].T, [tree.domain[a] for a in sep]) if sep
                   else np.zeros(n, dtype=np.int64))
            rows = np.argsort(key, kind="stable")
            starts = np.searchsorted(key[rows], np.arange(table.shape[0] + 1))
            drawn = np.empty(n, dtype=np.int64)
            for s in np.flatnonzero(np.diff(starts)):
                group = rows[starts[s]:starts[s + 1]]
                drawn[group] = rng.permutation(allot(table[s], len(group), rng))
            records[:, new] = np.column_stack(np.unravel_index(drawn, [tree.domain[a] for a in new]))
        return records


def _product(a: np.ndarray, a_attrs: Sequence[int], b: np.ndarray, b_attrs: Sequence[int],
             keep: set[int]) -> tuple[np.ndarray, tuple[int, ...]]:
    """``a × b`` (each over sorted attributes) over the union of their attributes, summed down to
    those in ``keep``."""
    union = tuple(sorted(set(a_attrs) | set(b_attrs)))
    kept = tuple(x for x in union if x in keep)
    return project(expand(a, a_attrs, union) * expand(b, b_attrs, union), union, kept), kept


def allot(weights: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` cell indices in proportion to ``weights`` (non-negative), by randomized rounding: each
    cell gets the floor of its share ``n w / Σw``, and the remaining records go one each to cells
    picked by systematic sampling over the fractional parts in random order, so that a cell gets
    one more with probability exactly its fraction (the expected count is its share). Uniform
    when every weight is 0."""
    w = np.maximum(np.asarray(weights, dtype=float), 0.0)
    if not w.sum() > 0 or not np.isfinite(w.sum()):
        w = np.ones_like(w)
    share = n * w / w.sum()
    counts = np.floor(share).astype(np.int64)
    short = n - int(counts.sum())
    if short > 0:
        order = rng.permutation(w.size)
        reach = np.cumsum((share - counts)[order])
        picks = np.searchsorted(reach, rng.random() + np.arange(short), side="right")
        np.add.at(counts, order[np.minimum(picks, w.size - 1)], 1)
    return np.repeat(np.arange(w.size), counts)
