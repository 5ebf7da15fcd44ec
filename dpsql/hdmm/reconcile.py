"""Reconciled unions: a product strategy per group of statements, one estimate across a shared hierarchy.

A census release tabulates several detail tables (race by Hispanic origin, voting age, sex by age)
at every level of one geography. A single product strategy over all of their attributes measures
the product of their domains (85,000 tracts × 63 races × 2 × 2 × 2 × 23 ages: 10⁹ cells), though
no statement reads more than one table's attributes. A :class:`ReconciledUnion` measures each group
of statements that share attributes besides the hierarchy with its own product strategy, whose
factor on the hierarchy measures the levels of one common tree (selected by
:mod:`dpsql.hdmm.optimize.hierplus`), and estimates all of them at once:

1. Part ``g`` (weight ``c_g``, hierarchy factor ``H_g`` with level weights ``h_gl``, factors
   ``R_gi`` on the other attributes) gives its own least-squares estimate ``x̂_g`` of its marginal:
   the hierarchy's cells by the cells of the attributes it measures (an attribute it sums out stays
   summed). Its covariance is ``G_g⁻¹ ⊗ K_g``, with ``G_g = H_gᵀH_g`` and ``K_g = ⊗_i (R_giᵀR_gi)⁺ / c_g²``.
2. Every part measures the hierarchy's node totals. Summing its other attributes out of
   ``(I ⊗ K_g R_gᵀ) y_g`` gives every node's total times its level's weight, with variance
   ``κ_g = 1ᵀK_g1``, independently across nodes. The parts' information adds up, so the combined
   estimate ``t`` of the hierarchy's cells is the tree's least squares
   (:class:`~dpsql.hdmm.hierarchy.Tree`, two passes) with level weights ``√(Σ_g h_gl² / κ_g)``.
   Its covariance is ``J⁻¹ = (Σ_g G_g / κ_g)⁻¹``.
3. Each part's cells are then moved to agree with ``t``: ``m_g = x̂_g + (t − t_g) ⊗ v_g``, where
   ``t_g`` is the part's own hierarchy margin and ``v_g = K_g 1 / κ_g``. This is ``x̂_g``'s
   conditional mean given its margin: the generalized least-squares correction.

The result is the generalized least-squares estimate from all the measurements. Two parts' marginals
share only the hierarchy's margin (their other attributes are disjoint), so part ``h``'s
measurements inform part ``g``'s cells through ``t`` alone. The tests check this against the dense
``(AᵀA)⁺Aᵀy`` on small domains. ``r_g = x̂_g − t_g ⊗ v_g`` is independent of ``t``, so::

    Cov(m_g, m_h) = δ_gh · G_g⁻¹ ⊗ (K_g − κ_g v_g v_gᵀ) + J⁻¹ ⊗ v_g v_hᵀ

Every variance is therefore a sum of three Kronecker products of per-attribute vectors (the tree's
node variances on the hierarchy), and no step forms a matrix over all the cells. Statements that
read only the hierarchy (totals by level) are answered from ``t``. Every answer is read from values
on one power-of-two grid (:func:`~dpsql.hdmm.hierarchy.exact_sums`), and each part's cells add up to
``t`` exactly. So every level of every table adds up to the last digit, across tables too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, reduce
from typing import Sequence

import numpy as np

from dpsql.errors import WorkloadError
from dpsql.hdmm.hierarchy import HierarchyFactor, Tree, exact_sums, sum_grid, topdown_integer
from dpsql.hdmm.matrix import Dense, Kronecker, Matrix, VStack, Weighted, constant_row
from dpsql.hdmm.strategy import CROSS_LIMIT, KronStrategy, Strategy
from dpsql.hdmm.workload import Workload

__all__ = ["ReconciledUnion"]


@dataclass
class ReconciledUnion(Strategy):
    """Parts measured with weights ``weights``; part ``l`` answers the workload terms ``groups[l]``,
    the terms ``totals`` (on the hierarchy alone) are answered from the combined margin, and every
    part's factor on attribute ``shared`` is a :class:`~dpsql.hdmm.hierarchy.HierarchyFactor` on one
    tree. See the module docstring for the estimate and its covariance."""

    parts: list[KronStrategy]
    weights: list[float]
    groups: list[list[int]]
    totals: list[int]
    shared: int
    operator: str = "OPT_Hplus"

    def __post_init__(self) -> None:
        factors = [p.factors[self.shared] for p in self.parts]
        if not factors or not all(isinstance(f, HierarchyFactor) for f in factors):
            raise WorkloadError("every part of a reconciled union measures the shared attribute's hierarchy")
        tree = factors[0].tree
        if not all(f.tree is tree or (f.tree.n == tree.n and len(f.tree.labels) == len(tree.labels) and all(
                np.array_equal(a, b) for a, b in zip(f.tree.labels, tree.labels))) for f in factors):
            raise WorkloadError("the parts of a reconciled union measure different trees")

    @cached_property
    def matrix(self) -> VStack:
        return VStack([Weighted(p.matrix, c) for p, c in zip(self.parts, self.weights)])

    @property
    def tree(self) -> Tree:
        return self.parts[0].factors[self.shared].tree

    @cached_property
    def _rest(self) -> list["_Rest"]:
        """Per part: ``κ_g`` and the directions ``v_g`` (see the module docstring)."""
        out = []
        for part, c in zip(self.parts, self.weights):
            kappa, full, marginal = 1.0 / c**2, [], []
            for i, (f, K) in enumerate(zip(part.factors, part.factor_pinvs)):
                if i == self.shared:
                    continue
                n = f.shape[1]
                scale = constant_row(f)
                if scale is not None:  # summed out: its marginal is one value, measured scale times
                    k, v, vm = 1.0 / scale**2, np.full(n, 1.0 / n), np.ones(1)
                else:
                    k1 = K.matvec(np.ones(n))
                    k = float(k1.sum())
                    if not k > 0 or not math.isfinite(part.factor_cross_diag(i, _total(n), _total(n))[0]):
                        raise WorkloadError("a part of a reconciled union cannot estimate an attribute's total")
                    v = vm = k1 / k
                kappa *= k
                full.append(v)
                marginal.append(vm)
            out.append(_Rest(kappa, full, reduce(np.kron, marginal, np.ones(1))))
        return out

    @cached_property
    def combined(self) -> HierarchyFactor:
        """The hierarchy factor whose Gram is ``J = Σ_g G_g / κ_g``: every part's node measurements."""
        weights = np.zeros(len(self.tree.labels))
        for part, rest in zip(self.parts, self._rest):
            weights += np.asarray(part.factors[self.shared].weights) ** 2 / rest.kappa
        return HierarchyFactor(self.tree, np.sqrt(weights))

    # -- which part answers which term ------------------------------------------------------------------
    def _roles(self, workload: Workload) -> list[int]:
        """Per workload term, the part answering it, ``-1`` for a term answered from the margin."""
        role = {k: g for g, terms in enumerate(self.groups) for k in terms}
        role.update({k: -1 for k in self.totals})
        if sorted(role) != list(range(len(workload.terms))) or len(role) != sum(map(len, self.groups)) + len(
                self.totals):
            raise WorkloadError("a reconciled union's groups do not cover the workload's terms exactly once")
        self._check_domain(workload, self.parts[0].domain)
        return [role[k] for k in range(len(workload.terms))]

    def _p(self, g: int, fs: Sequence[Matrix]) -> list[np.ndarray]:
        """``f_i v_gi`` per other attribute: a term's rows times the direction part ``g`` moves its cells
        in (for a term on the margin, ``-1``, its rows' constant: the term sums the attribute out)."""
        others = [f for i, f in enumerate(fs) if i != self.shared]
        if g < 0:
            return [f.row_sums() / f.shape[1] for f in others]
        return [f.matvec(v) for f, v in zip(others, self._rest[g].directions)]

    def _kron(self, at_shared: np.ndarray, rest: Sequence[np.ndarray]) -> np.ndarray:
        """The Kronecker product of per-attribute vectors (or matrices), the shared one in its place."""
        pieces = list(rest)
        pieces.insert(self.shared, at_shared)
        return reduce(np.kron, pieces)

    # -- variances ---------------------------------------------------------------------------------------
    def _cross_diag(self, g: int, fa: Sequence[Matrix], h: int, fb: Sequence[Matrix], same: bool) -> np.ndarray:
        s = self.shared
        pa, pb = self._p(g, fa), self._p(h, fb)
        pp = [x * y for x, y in zip(pa, pb)]
        out = self._kron(self.combined.cross_diag(fa[s], fb[s]), pp)
        if g == h and g >= 0:
            part, c, kappa = self.parts[g], self.weights[g], self._rest[g].kappa
            dG = part.factors[s].cross_diag(fa[s], fb[s])
            q = [part.factor_cross_diag(i, x, x if same else y) for i, (x, y) in enumerate(zip(fa, fb)) if i != s]
            with np.errstate(invalid="ignore"):
                out = out + self._kron(dG, q) / c**2 - kappa * self._kron(dG, pp)
        return out

    def query_variances(self, workload: Workload) -> list[np.ndarray]:
        roles = self._roles(workload)
        out = []
        for g, (w, fs) in zip(roles, workload.terms):
            var = self._cross_diag(g, fs, g, fs, True)
            out.append(w * w * np.where(np.isnan(var), 0.0, var))
        return out

    def trace_error(self, workload: Workload) -> float:
        return float(sum(v.sum() for v in self.query_variances(workload)))

    def cross_variances(self, workload: Workload, a: int, b: int) -> np.ndarray:
        roles = self._roles(workload)
        (wa, fa), (wb, fb) = workload.terms[a], workload.terms[b]
        return wa * wb * self._cross_diag(roles[a], fa, roles[b], fb, False)

    def cross_covariance(self, workload: Workload, a: int, b: int) -> np.ndarray:
        roles = self._roles(workload)
        (wa, fa), (wb, fb) = workload.terms[a], workload.terms[b]
        rows = [math.prod(f.shape[0] for f in fs) for fs in (fa, fb)]
        if rows[0] * rows[1] > CROSS_LIMIT:
            raise WorkloadError(f"a covariance of {rows[0]:,} by {rows[1]:,} answers is too large to form")
        s, g, h = self.shared, roles[a], roles[b]
        pp = [np.outer(x, y) for x, y in zip(self._p(g, fa), self._p(h, fb))]

        def hierarchy(H: HierarchyFactor) -> np.ndarray:
            return fa[s].matvec(self.tree.inverse_gram(fb[s].rmatvec(np.eye(fb[s].shape[0])), H.weights))

        out = self._kron(hierarchy(self.combined), pp)
        if g == h and g >= 0:
            part, c, kappa = self.parts[g], self.weights[g], self._rest[g].kappa
            G = hierarchy(part.factors[s])
            q = [part.factor_cross(i, x, y) for i, (x, y) in enumerate(zip(fa, fb)) if i != s]
            out = out + self._kron(G, q) / c**2 - kappa * self._kron(G, pp)
        return wa * wb * out

    # -- the estimate ------------------------------------------------------------------------------------
    def answers(self, workload: Workload, y: np.ndarray, nonnegative: bool = False, integer: bool = False) -> np.ndarray:
        """The generalized least-squares answers to every workload query, in workload row order, from
        measurements ``y`` of :attr:`matrix` (see the module docstring). ``nonnegative``: TopDown from
        that estimate instead, the hierarchy's nodes made non-negative values adding up from the root
        down, then each part's cells of every hierarchy cell made non-negative and adding up to it
        (:func:`~dpsql.hdmm.hierarchy.topdown_integer`); ``integer``: non-negative integers. Biased, as
        :func:`~dpsql.hdmm.reconstruct.nonnegative` is."""
        roles = self._roles(workload)
        y = np.asarray(y, dtype=float)
        if y.shape != (self.matrix.shape[0],):
            raise WorkloadError(f"expected {self.matrix.shape[0]} measurements, got shape {y.shape}")
        tree = self.tree
        nodes, cells = self._estimate(y)
        leaves = slice(tree.offsets[-2], None)
        if nonnegative or integer:
            t = topdown_integer(tree, nodes, rounded=integer)[leaves].astype(float)
            cells = [topdown_integer(Tree.from_labels(m.shape[1], []), np.vstack([t[None, :], m.T]),
                                     rounded=integer)[1:].T.astype(float) for m in cells]
        else:
            t = nodes[leaves]
        if not integer:  # every value on one grid, each part's cells adding up to t exactly
            step = sum_grid(max([float(np.abs(t).sum())] + [float(np.abs(m).sum()) for m in cells]))
            t = exact_sums(t, step)
            for m in cells:
                m[:] = exact_sums(m, step)
                m[np.arange(len(t)), np.argmax(m, axis=1)] += t - m.sum(axis=1)  # exact: multiples of the step
        return np.concatenate([w * self._term_answers(g, fs, t[:, None] if g < 0 else cells[g])
                               for g, (w, fs) in zip(roles, workload.terms)])

    def _estimate(self, y: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
        """The combined estimate of every node of the tree, and each part's cells (the hierarchy's cells
        by its marginal's) moved to agree with it."""
        tree, s = self.tree, self.shared
        own, margins = [], np.zeros((tree.nodes, len(self.parts)))
        offset = 0
        for g, (part, c) in enumerate(zip(self.parts, self.weights)):
            rows = part.matrix.shape[0]
            Z = self._cells_by_node(part, y[offset:offset + rows] / c)
            offset += rows
            margins[:, g] = Z.sum(axis=1)  # each node's total, times its level's weight, variance κ_g
            own.append(tree.estimate(Z, part.factors[s].weights))
        # the parts' node measurements combined: one per node, unit variance, weight √(Σ_g h_gl² / κ_g)
        kappas = np.array([r.kappa for r in self._rest])
        h = np.array([p.factors[s].weights for p in self.parts]).T[tree.level_of]  # nodes × parts
        combined = np.asarray(self.combined.weights)[tree.level_of]
        nodes = tree.estimate_nodes((margins * h / kappas).sum(axis=1) / combined, self.combined.weights)
        t = nodes[tree.offsets[-2]:]
        return nodes, [x + np.outer(t - x.sum(axis=1), r.direction) for x, r in zip(own, self._rest)]

    def _cells_by_node(self, part: KronStrategy, y: np.ndarray) -> np.ndarray:
        """A part's measurements with its other factors' least squares applied: nodes × marginal cells
        (an attribute the part sums out keeps its one summed value)."""
        Y = y.reshape([f.shape[0] for f in part.factors])
        for i, (f, K) in enumerate(zip(part.factors, part.factor_pinvs)):
            if i == self.shared:
                continue
            scale = constant_row(f)
            if scale is not None:
                Y = Y / scale
                continue
            Yi = np.moveaxis(Y, i, 0)
            Z = K.matvec(f.rmatvec(Yi.reshape(Yi.shape[0], -1)))
            Y = np.moveaxis(Z.reshape((f.shape[1],) + Yi.shape[1:]), 0, i)
        return np.moveaxis(Y, self.shared, 0).reshape(Y.shape[self.shared], -1)

    def _term_answers(self, g: int, fs: Sequence[Matrix], values: np.ndarray) -> np.ndarray:
        """A term's answers from cells ``values`` (the hierarchy's cells × a part's marginal cells, or the
        margin alone for ``g = -1``): its factors on attributes the marginal sums out act on that sum."""
        s = self.shared
        summed = [True] * len(fs) if g < 0 else [constant_row(f) is not None for f in self.parts[g].factors]
        factors, shape = [], []
        for i, f in enumerate(fs):
            if i != s and summed[i]:
                factors.append(Dense((f.row_sums() / f.shape[1])[:, None]))
                shape.append(1)
            else:
                factors.append(f)
                shape.append(f.shape[1])
        rest = values.reshape([values.shape[0]] + [n for i, n in enumerate(shape) if i != s])
        return Kronecker(factors).matvec(np.moveaxis(rest, 0, s).ravel())


@dataclass(frozen=True)
class _Rest:
    """A part's other attributes: ``κ_g``, ``v_gi`` per attribute over its cells, and ``v_g`` over the
    part's marginal cells (``[1]`` for an attribute the part sums out)."""

    kappa: float
    directions: list[np.ndarray]
    direction: np.ndarray


def _total(n: int) -> Matrix:
    return Dense(np.ones((1, n)))
