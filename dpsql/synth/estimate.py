"""Estimation: the graphical model whose marginals best fit noisy marginal measurements.

One public function, :func:`estimate`, and the measurement it takes, :class:`Observation`.
Given noisy counts ``y_i`` on attribute sets ``S_i``, each with noise standard deviation
``σ_i``, it finds marginals ``μ`` of one distribution (times a total) minimizing the
weighted least squares

    L(μ) = ½ Σ_i ‖μ_{S_i} − y_i‖² / σ_i²,

which is the maximum-likelihood fit under Gaussian noise, with every measurement weighted
by its precision. Among the distributions with the best-fitting marginals, the one found
is a graphical model on the junction tree of the measured sets (:mod:`dpsql.synth.junction`):
the maximum-entropy one, as in Private-PGM (McKenna, Sheldon & Miklau, ICML 2019), whose
recipe this follows. The fit is entropic mirror descent in the space of marginals: the
model's log-potentials move against the loss's gradient, ``θ ← θ − α ∇L(μ(θ))``, with the
marginals ``μ(θ)`` computed exactly by belief propagation (:mod:`dpsql.synth.graphical`),
and ``α`` found by backtracking until the loss decreases enough (Armijo's condition).
The problem is convex in ``μ``, so this converges to the optimum. Everything here is
post-processing of released measurements: no private data, no privacy cost.

>>> import numpy as np
>>> obs = [Observation((0,), np.array([30.0, 70.0]), 1.0), Observation((0, 1), np.array([10.0, 20, 40, 30]), 1.0)]
>>> model = estimate((2, 2), obs)
>>> model.marginal((0, 1)).round(3).tolist(), round(model.total, 3)
([10.0, 20.0, 40.0, 30.0], 100.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from dpsql.synth.graphical import GraphicalModel, expand, project
from dpsql.synth.junction import JunctionTree, junction_tree

__all__ = ["Observation", "estimate", "estimate_total", "pool", "total_std", "uniform_std"]


@dataclass(frozen=True)
class Observation:
    """Noisy counts on the attribute set ``subset`` (sorted positions): ``values`` flat in C order,
    with independent noise of standard deviation ``std``: one for every cell, or one per cell
    (a cell that sums several noisy counts, as a merged value of a compressed domain does,
    is less precise than the others). ``cells``, for counts of a coarser grouping of the
    marginal on ``subset``: the counted cell of each of its cells (flat, C order), as AIM's
    coarse candidates measure them (:func:`~dpsql.synth.aim.coarse_cells`)."""

    subset: tuple[int, ...]
    values: np.ndarray
    std: float | np.ndarray
    cells: np.ndarray | None = None

    @property
    def key(self) -> tuple:
        """What identifies the counts observed: the attribute set, and the grouping of its cells."""
        return self.subset, None if self.cells is None else self.cells.tobytes()

    @property
    def variances(self) -> np.ndarray:
        """Every cell's noise variance, flat in C order."""
        return np.broadcast_to(np.square(np.asarray(self.std, dtype=float)), np.shape(self.values))


def estimate_total(observations: Sequence[Observation]) -> float:
    """The records' number from the observations: each one's sum is a noisy total of variance
    ``Σ σ²`` over its cells; their precision-weighted mean, at least 1."""
    precision = _total_precisions(observations)
    sums = np.array([float(np.sum(o.values)) for o in observations])
    return max(float(precision @ sums / precision.sum()), 1.0) if observations else 1.0


def total_std(observations: Sequence[Observation]) -> float:
    """The standard deviation of :func:`estimate_total`'s mean: ``(Σ 1/Σσ²)^-½``, the observations'
    totals being independent (infinite with no observation).

    >>> total_std([Observation((0,), np.array([5.0, 5.0]), 1.0), Observation((), np.array([10.0]), 2 ** 0.5)])
    1.0
    """
    precision = float(_total_precisions(observations).sum())
    return precision**-0.5 if precision > 0 else math.inf


def _total_precisions(observations: Sequence[Observation]) -> np.ndarray:
    return np.array([1.0 / float(o.variances.sum()) for o in observations])


def pool(observations: Sequence[Observation]) -> list[Observation]:
    """One observation per attribute set: the precision-weighted mean of its measurements, whose
    noise has the standard deviation ``(Σ 1/σ²)^-½`` (their least-squares combination), per cell.

    >>> [(o.values.tolist(), o.std) for o in pool([Observation((0,), np.array([1.0]), 1.0),
    ...                                             Observation((0,), np.array([4.0]), 1.0)])]
    [([2.5], 0.7071067811865476)]
    """
    sums: dict[tuple, list] = {}
    for o in observations:
        acc = sums.setdefault(o.key, [0.0, 0.0, o])
        acc[0] = acc[0] + 1.0 / o.variances
        acc[1] = acc[1] + np.asarray(o.values, dtype=float) / o.variances
    return [Observation(o.subset, total / precision, uniform_std(precision**-0.5), o.cells)
            for precision, total, o in sums.values()]


def uniform_std(std: np.ndarray) -> float | np.ndarray:
    """One standard deviation when every cell has the same, else the array."""
    return float(std.flat[0]) if np.all(std == std.flat[0]) else std


def estimate(domain: Sequence[int], observations: Sequence[Observation], *, tree: JunctionTree | None = None,
             total: float | None = None, start: GraphicalModel | None = None, iterations: int = 10_000,
             tolerance: float = 1.0, relative: float = 0.0, window: int = 100,
             progress: Callable[[int, float], None] | None = None) -> GraphicalModel:
    """The graphical model fitted to ``observations`` (see the module docstring).

    ``tree``: the model's junction tree (default: the junction tree of the observed sets; every
    observed set must lie in one of its cliques). ``total``: the records' number (default
    :func:`estimate_total`). ``start``: a model on the same tree to start from (warm start).
    Stops after ``iterations`` steps, once a step improves nothing, or once ``window`` steps
    together improve the loss by less than ``tolerance`` or ``relative`` times the loss, whichever
    is more (convergence). The loss is in units of squared
    standard errors (½ per cell a standard deviation off), so the default, 1, stops when the
    fit still moves but by less than its measurements' noise could tell: a fixed number of
    steps is too few where the fit is slow (KDD99: 1,000 steps left the loss at 6 times
    the 10,000 steps' one) and wasted where it is fast. ``progress`` gets the steps done and
    the last ``window`` steps' improvement over the one that stops the fit (inf before
    ``window`` steps): the fit has converged once it is below 1.
    """
    domain = tuple(int(n) for n in domain)
    observations = [o for o in observations if np.all(o.variances > 0) and np.all(np.isfinite(o.variances))]
    if tree is None:
        tree = junction_tree(domain, [o.subset for o in observations])
    fit = _Lattice(domain, tree, observations)
    total = estimate_total(observations) if total is None else float(total)
    model = GraphicalModel(tree, None if start is None else start.theta, total)

    def loss_and_gradient(m: GraphicalModel) -> tuple[float, list[np.ndarray]]:
        return fit.loss_and_gradient(m.beliefs())

    if not observations:
        return model
    loss, grads = loss_and_gradient(model)
    alpha = 1.0 / (total * sum(float(np.max(1.0 / o.variances)) for o in observations))
    losses = [loss]
    for step in range(iterations):
        mu = model.beliefs()
        while True:
            trial = model.with_potentials([t - alpha * g for t, g in zip(model.theta, grads)])
            trial_loss, trial_grads = loss_and_gradient(trial)
            decrease = sum(float(np.sum(g * (m - b))) for g, m, b in zip(grads, mu, trial.beliefs()))
            if trial_loss <= loss - 0.5 * decrease or alpha < 1e-300:
                break
            alpha *= 0.5
        improved = loss - trial_loss
        model, loss, grads = trial, trial_loss, trial_grads
        alpha *= 1.5
        losses.append(loss)
        ratio = (losses[-window - 1] - loss) / max(tolerance, relative * loss) if step >= window else math.inf
        if progress is not None:
            progress(step + 1, ratio)
        if improved <= 0 or not math.isfinite(loss) or ratio < 1:
            break
    return model


class _Lattice:
    """The observations pooled per attribute set (the precision-weighted mean of its measurements
    differs from the loss by a constant), each set placed in the smallest clique holding it and
    computed from its smallest pooled superset there: marginals are summed down these chains
    and gradients pushed back up them, instead of every set being summed from its clique."""

    def __init__(self, domain: tuple[int, ...], tree: JunctionTree, observations: Sequence[Observation]) -> None:
        every = pool(observations)
        pooled = {o.subset: o for o in every if o.cells is None}
        self.coarse = [o for o in every if o.cells is not None]
        self.shapes = {o.subset: [domain[a] for a in o.subset] for o in self.coarse}
        self.tree = tree
        self.precision = {t: (1.0 / o.variances).reshape([domain[a] for a in t]) for t, o in pooled.items()}
        self.target = {t: o.values.reshape([domain[a] for a in t]) for t, o in pooled.items()}
        # every observed set's clique, found once: each step of the fit reads them
        self.home = {t: tree.home(t) for t in [*pooled, *(o.subset for o in self.coarse)]}
        if any(h < 0 for h in self.home.values()):
            raise ValueError("every observed attribute set must lie in a clique of the junction tree")
        cells = {t: math.prod(domain[a] for a in t) for t in pooled}
        self.order = sorted(pooled, key=lambda t: (-cells[t], t))  # supersets first
        self.parent: dict[tuple[int, ...], tuple[int, ...] | None] = {}
        for i, t in enumerate(self.order):
            above = [u for u in self.order[:i] if self.home[u] == self.home[t] and set(t) < set(u)]
            self.parent[t] = min(above, key=lambda u: cells[u]) if above else None

    def loss_and_gradient(self, beliefs: Sequence[np.ndarray]) -> tuple[float, list[np.ndarray]]:
        cliques = self.tree.cliques
        marginal: dict[tuple[int, ...], np.ndarray] = {}
        for t in self.order:
            up = self.parent[t]
            marginal[t] = (project(marginal[up], up, t) if up is not None
                           else project(beliefs[self.home[t]], cliques[self.home[t]], t))
        grad = {t: self.precision[t] * (marginal[t] - self.target[t]) for t in self.order}
        loss = sum(0.5 * float(np.sum(g * (marginal[t] - self.target[t]))) for t, g in grad.items())
        grads = [np.zeros(b.shape) for b in beliefs]
        for o in self.coarse:  # a coarser grouping: its cells summed from the set's, the gradient spread back
            home = self.home[o.subset]
            full = marginal[o.subset] if o.subset in marginal else project(beliefs[home], cliques[home], o.subset)
            miss = np.bincount(o.cells, weights=full.ravel(), minlength=o.values.size) - o.values
            loss += 0.5 * float(np.sum(miss * miss / o.variances))
            grads[home] += expand((miss / o.variances)[o.cells].reshape(self.shapes[o.subset]), o.subset,
                                  cliques[home])
        for t in reversed(self.order):  # subsets first: each gradient joins its parent's
            up = self.parent[t]
            if up is not None:
                grad[up] = grad[up] + expand(grad[t], t, up)
            else:
                grads[self.home[t]] += expand(grad[t], t, cliques[self.home[t]])
        return loss, grads
