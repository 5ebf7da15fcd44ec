"""PGM synthesis: measure the workload's marginals once, fit a graphical model, sample it.

:func:`pgm` takes one measurement of the workload's marginals, weighted by
:func:`marginal_weights`: OPT_M's weights when OPT_M is weighted marginals (HDMM §8; always
under Laplace noise, whose OPT_M searches nonnegative weights), else equal weights. Under
Gaussian noise, OPT_M's optimum (at the SVD bound) mostly needs negative marginal weights (all
k-way marginals, random sets of 3-way marginals), which only residual queries realize, while
a graphical model is fitted to marginals. The best nonnegative weights, with 5 to 34% less
total variance than equal ones on NLTCS's and ADULT's random triples, made the tables no
better (NLTCS at ε = 1, 5 runs: max error 0.0040 against 0.0039) or worse (ADULT at
ε = 0.1: 0.033 against 0.027). It then fits the maximum-entropy graphical model to the noisy
marginals (:func:`~dpsql.synth.estimate.estimate`, each weighted by its noise) and returns it
for sampling; the sampled records are then refined toward every measured marginal
(:mod:`dpsql.synth.refine`), which matters when the model, kept within a size limit, cannot
join every measured attribute set.

:func:`pgm_compressed` first measures the one-way marginals of the attributes with more than
two values, merges each one's rarely seen values (:mod:`dpsql.synth.compress`, as MST does)
and measures the weighted marginals on the smaller domain: on sparse data a marginal of
thousands of mostly empty cells otherwise loses much of its mass to their noise. Under
Gaussian noise it is the default (on ADULT at ε = 0.1 it takes the max error from 0.17 to
0.04; see the README).

Guarantee: the only access to the data is that one measurement (two for
:func:`pgm_compressed`, whose guarantee is in its docstring), through the private kernel
(:meth:`~dpsql.private.kernel.PrivateTable.measure`), which charges the ledger before reading:
Gaussian noise of ``σ = Δ₂/√(2ρ)`` is ``ρ``-zCDP (Bun & Steinke 2016, Proposition 1.6), or
calibrated to ``(ε, δ)`` by the analytic Gaussian mechanism (Balle & Wang 2018); Laplace
noise of scale ``Δ₁/ε`` is ``ε``-DP. ``Δ`` is the strategy's sensitivity, ``√Σθ²`` (L2)
or ``Σθ`` (L1) for weights ``θ``, times the rows a privacy unit may hold. Estimation and
sampling are post-processing.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

from dpsql.hdmm.marginals import MAX_ATTRIBUTES, Marginals
from dpsql.hdmm.matrix import Identity, Total
from dpsql.hdmm.optimize.marginal import opt_marginal
from dpsql.hdmm.strategy import UnionStrategy
from dpsql.hdmm.workload import Workload
from dpsql.privacy import Gaussian, NoiseModel
from dpsql.private.budget import Cost
from dpsql.private.kernel import PrivateTable, Reservation
from dpsql.schema import Attribute
from dpsql.synth.coarsen import shrink
from dpsql.synth.compress import Compression
from dpsql.synth.estimate import Observation, estimate, estimate_total, pool, uniform_std
from dpsql.synth.graphical import GraphicalModel
from dpsql.synth.junction import JunctionTree, junction_tree
from dpsql.synth.mwem import marginal_strategy
from dpsql.synth.refine import refine

__all__ = ["GAIN_THRESHOLD", "GREEDY_CELLS", "RETRY_CANDIDATES", "LAPLACE_SEARCH_ATTRIBUTES", "PGM_ITERATIONS", "PGMResult",
           "ONE_WAY_NOISE", "RELATIVE_TOLERANCE",
           "marginal_weights", "measurement", "model_limit", "model_structure", "one_way_counts", "first_counts",
           "counts_again", "full_share", "Rounds",
           "planned_model", "fit_cells", "greedy_trials", "one_way_top_up", "one_way_weights", "pgm",
           "pgm_compressed", "unit_weights", "weighted_counts", "fit_model"]


#: A set's gain toward the model (:func:`model_structure`) counts its cells' distance from the
#: model's prediction beyond this many noise standard deviations, which noise alone seldom
#: reaches (``0.0008σ`` a cell on average). The L1 distance less the noise's expected L1 over
#: all the cells, AIM's score, lost a strong dependence confined to a few cells among a set's
#: many (on ADULT, unknown workclass and unknown occupation share 2,500 rows in one cell of
#: 112): the model left it out and missed that cell by 2,400 rows. Measured on ADULT, 64
#: random 3-way marginals, 10 runs: max error 0.0275 against 0.0326 at ε = 0.1 (mean
#: total variation 0.19 against 0.17), 0.0098 against 0.0117 at ε = 1 (3 runs). That score,
#: less this many standard deviations of the noise's L1, is the gain's second measure, for a
#: dependence spread over many cells, none beyond this threshold (:func:`_gain`).
GAIN_THRESHOLD = 3.0
#: The most cells a model (:func:`model_structure`) may have, within ``max_model_size``: past
#: it, the sets added gain little and the fit slows (on ADULT at ε = 0.1, 0.028 at 200,000
#: cells and 0.031 at 20,000; at 10 MB, 130 to 220 s a run against 20 s). A model of every
#: measured set larger than this is built greedily too: every pair of 20 binary columns makes
#: one clique of 2^20 cells, whose fit took seconds a step, hours in all.
GREEDY_CELLS = 2**16
#: Up to this many candidate sets, :func:`model_structure`'s greedy steps try afresh the sets near
#: the one added, about 12 trial junction trees a candidate in all; beyond, about 3 (and no retry).
RETRY_CANDIDATES = 1_000
#: The most attributes on which OPT_M's Laplace weights are searched for (L-BFGS over ``2^d``
#: weights, from several starts): all pairs of 12 binary columns took 16 s, of 14 five minutes,
#: of 20 hours. Beyond, and beyond :data:`~dpsql.hdmm.marginals.MAX_ATTRIBUTES` for the Gaussian
#: closed form, each workload marginal has weight 1.
LAPLACE_SEARCH_ATTRIBUTES = 12
#: The most steps of the model's fit, which stops sooner once it converges
#: (:func:`~dpsql.synth.estimate.estimate`).
PGM_ITERATIONS = 10_000
#: The fit has converged once its last 100 steps together reduced the loss (in squared noise
#: standard deviations) by less than this fraction of it, or by less than 1
#: (:func:`~dpsql.synth.estimate.estimate`). On NLTCS's 560 triples at ε = 1 (a model of 65,536
#: cells, 0.4 to 0.8 s a step on 2 shared cores) the max error was 0.0091 after 100 steps,
#: 0.0053 after 250 and 0.0049 after 300, whose last 100 steps reduced the loss by 1.7%: the
#: steps past this tolerance buy little, and the absolute 1 alone ran 10,000 steps (hours).
RELATIVE_TOLERANCE = 5e-3
#: Before AIM's rounds (:func:`pgm_compressed`), the one-way marginals are measured again until
#: each count's noise standard deviation is at most this share of the noisy row count, within
#: pgm's one-way share (:func:`one_way_top_up`). A round measures a marginal with the noise AIM's
#: first measurement gave every one-way count, so the rounds seldom measure one again, and on a
#: small table those counts stay noisy under every marginal the model infers: on ADULT at
#: ε = 0.1 (a count's noise 1.8% of the rows) the mean TV was 0.148 against 0.165, the max error
#: 0.036 against 0.049 (5 runs). Where the rows are many the share is better spent in the
#: rounds: on a 136,000-row table at ε = 1 (0.05%), pgm's whole share raised the max error from
#: 0.0009 to 0.0022; at 0.1% this took most of it on ADULT at ε = 1 (0.2%), whose max error was
#: 0.0125 against 0.0111 (10 runs; benchmarks/results/synthetic_issue42.txt, session 15).
ONE_WAY_NOISE = 2e-3


@dataclass(frozen=True)
class PGMResult:
    """The fitted model and the noisy measurements it was fitted to (released values), on the
    domain that ``compression`` made (:mod:`dpsql.synth.compress`), if any, and ``work``, the
    seconds the fit took as :mod:`dpsql.synth.work` prices them, when it priced them as it ran
    (:func:`~dpsql.synth.aim.aim`)."""

    model: GraphicalModel
    observations: list[Observation]
    compression: Compression | None = None
    work: float | None = None

    def sample(self, n: int, rng: np.random.Generator, sweeps: int = 30) -> np.ndarray:
        """``n`` records drawn from the model, then refined (:func:`~dpsql.synth.refine.refine`,
        ``sweeps`` sweeps) toward every measured marginal: the model's own counts on the sets
        it holds (which fuse every measurement), the precision-weighted mean of the noisy
        measurements on the others, which a model of bounded size could not join, each scaled
        from the model's total to ``n`` records. A cell is left alone within twice its
        target's standard deviation: the noise's on a measurement, the drawing's chance
        (:func:`_drawn`) on the model's counts. Over the full domain: a compressed domain's
        merged values are expanded."""
        records = self.model.sample(n, rng)
        held = self.model.tree.home
        scale = n / self.model.total if self.model.total > 0 else 0.0
        targets = []
        for o in pool(self.observations):
            if o.cells is not None:  # a coarser grouping of a set the model holds (AIM's rounds)
                continue
            if held(o.subset) >= 0:
                counts = scale * self.model.marginal(o.subset)
                targets.append((o.subset, counts, _drawn(counts)))
            else:
                targets.append((o.subset, scale * o.values, scale * o.std))
        records = refine(records, self.model.tree.domain, targets, rng, sweeps) if sweeps else records
        return records if self.compression is None else self.compression.expand(records, rng)


def _drawn(counts: np.ndarray) -> np.ndarray:
    """How far records drawn from the model (:meth:`~dpsql.synth.graphical.GraphicalModel.sample`)
    may miss its own counts ``c`` by the drawing's chance alone: ``max(c, 1)^¼``, the standard
    deviation by which :meth:`PGMResult.sample` lets them. The drawing rounds each clique's
    counts, so it misses by far less than a binomial count's ``√c``: on ADULT (a fit to every
    pair) and the salary-shaped proxy, by 0.1 to 0.3 records on average on cells of counts below
    1, 0.7 to 0.8 from 1 to 10, 1.1 to 1.3 to 100, 1.9 to 2.8 to 1,000, and 3.4 to 5.9 above,
    within ``c^¼`` (1 to 1.6 of its standard deviations). Refining toward the model's counts with
    no slack moved records by that chance alone, many into cells the drawing had left empty (each
    taking the cell's values beside the rest of an unrelated record's). On the same fits sampled
    both ways (three; two on ADULT's triples), the mean total variation fell from 0.267 to 0.250
    (the salary proxy, ε = 1), 0.134 to 0.124 (ADULT as published, workload=2, ε = 1), 0.071 to
    0.068 and 0.187 to 0.185 (ADULT, 64 triples, ε = 1 and 0.1), with the max error as it was
    (0.0014 to 0.0015, 0.0121 to 0.0112, 0.0091 to 0.0087, 0.034 to 0.034). A slack of ``√c``
    took the mean total variation lower still (0.247, 0.121), but the max error up (0.0019 on
    the salary proxy)."""
    return np.maximum(counts, 1.0) ** 0.25


def marginal_weights(domain: Sequence[int], marginals: Sequence[tuple[int, ...]],
                     noise: NoiseModel) -> dict[tuple[int, ...], float]:
    """The marginals (sorted attribute positions) that measure ``marginals``, with their weights:
    OPT_M's for ``noise``'s norm when OPT_M is weighted marginals (at most
    :data:`~dpsql.hdmm.marginals.MAX_ATTRIBUTES` attributes, the marginal algebra's ``2^d``
    weights, or :data:`LAPLACE_SEARCH_ATTRIBUTES` under Laplace noise, whose weights are
    searched for), else 1 on each workload marginal. Data-independent.

    >>> from dpsql.privacy import Gaussian
    >>> sorted(marginal_weights((2, 2, 2), [(0, 1), (1, 2)], Gaussian(rho=1.0)))
    [(0, 1), (1, 2)]
    """
    d = len(domain)
    if d <= (MAX_ATTRIBUTES if noise.norm == 2 else LAPLACE_SEARCH_ATTRIBUTES):
        terms = [(1.0, tuple(Identity(n) if a in m else Total(n) for a, n in enumerate(domain))) for m in marginals]
        strategy = opt_marginal(Workload(tuple(domain), terms), noise).strategy
        if isinstance(strategy, Marginals):
            theta = np.abs(strategy.theta)
            return {tuple(a for a in range(d) if mask >> a & 1): float(theta[mask])
                    for mask in np.flatnonzero(theta > 1e-9 * theta.max())}
    return {tuple(sorted(m)): 1.0 for m in marginals}


def unit_weights(weights: dict[tuple[int, ...], float]) -> dict[tuple[int, ...], float]:
    """``weights`` scaled to L2 norm 1, so that their :func:`measurement` has L2 sensitivity 1
    (each row counts once in every marginal) and its noise does not depend on them.

    >>> unit_weights({(0,): 3.0, (1,): 4.0})
    {(0,): 0.6, (1,): 0.8}
    """
    norm = math.sqrt(sum(w * w for w in weights.values()))
    return {s: w / norm for s, w in weights.items()}


def measurement(domain: Sequence[int], weights: dict[tuple[int, ...], float]) -> UnionStrategy:
    """The strategy measuring each weighted marginal: every row of the table counts once in each
    marginal, so its sensitivity is ``√Σθ²`` (L2) or ``Σθ`` (L1) for weights ``θ``."""
    return UnionStrategy([marginal_strategy(domain, s) for s in weights], list(weights.values()),
                         [[i] for i in range(len(weights))])


def model_structure(domain: Sequence[int], observations: Sequence[Observation],
                    max_cells: int) -> tuple[JunctionTree, list[Observation]]:
    """A junction tree of at most ``max_cells`` cells for a model of ``observations``, and the
    observations it can be fitted to. Chosen from the released measurements alone (free).

    When a model of every measured set fits within ``max_cells`` and :data:`GREEDY_CELLS`, that
    is the tree. Otherwise the candidates are the measured sets and their subsets of two or
    more attributes (each with the counts of its most precise measured superset, summed down).
    A set's gain is how far its noisy counts lie, beyond their noise, from the maximum-entropy
    table with their projections on the attribute sets the model already joins (what the model
    predicts there, locally): :func:`_gain`. The model starts as a spanning forest of the pairs
    of most gain (:func:`_spanning_tree`, as MST), then each step adds the set with the most
    gain per cell it adds to the model, among those that keep it within ``max_cells`` and
    :data:`GREEDY_CELLS`. Lazily, as greedy submodular maximization is (Minoux's accelerated
    greedy): each step tries the sets in order of their gain per cell added when last tried (at
    first, per cell of their own), builds each one's trial model, and stops at the first set whose
    last ratio cannot beat the best found; a set once past the limit ranks last until its parts
    change. Up to :data:`RETRY_CANDIDATES` candidates, the sets that share an attribute with the
    one a step added are tried afresh (the cells they add change most): on the salary proxy's
    triples the model is then the one trying every set at every step builds, and every pair of 24
    columns takes 3,023 trial models, not 16,581. Beyond, on every pair of 60 or 80 columns, their
    last ratios stand (80 columns: 7,817 trial models, 206 s). A measured set the model cannot
    hold is fitted through its projections on the largest parts it can, each with the noise of
    the cells it sums.
    """
    domain = tuple(domain)
    full = junction_tree(domain, [o.subset for o in observations])
    if full.size <= model_limit(max_cells):
        return full, list(observations)
    candidates: dict[tuple[int, ...], Observation] = {}
    for o in observations:
        for k in range(2, len(o.subset) + 1):
            for part in itertools.combinations(o.subset, k):
                projected = _projection(domain, o, part)
                if part not in candidates or projected.variances.sum() < candidates[part].variances.sum():
                    candidates[part] = projected
    limit = model_limit(max_cells)
    tree = _spanning_tree(domain, candidates, limit)
    cache: dict[tuple, float] = {}
    tried: dict[tuple, float] = {}  # a set's gain per cell added when last tried, by its parts
    while True:
        ranked = []
        for part, o in candidates.items():
            if tree.home(part) >= 0:
                continue
            key = (part, tuple(_parts(part, tree)))
            if key not in cache:
                cache[key] = _gain(domain, o, tree)
            if cache[key] > 0:
                ranked.append((tried.get(key, cache[key] / math.prod(domain[a] for a in part)), part, key))
        best: tuple[float, JunctionTree, set[int]] | None = None
        for priority, part, key in sorted(ranked, reverse=True):
            if best is not None and priority <= best[0]:
                break
            trial = junction_tree(domain, list(tree.cliques) + [part])
            tried[key] = cache[key] / max(trial.size - tree.size, 1) if trial.size <= limit else 0.0
            if trial.size <= limit and (best is None or tried[key] > best[0]):
                best = (tried[key], trial, set(part))
        if best is None:
            break
        if len(candidates) <= RETRY_CANDIDATES:  # those near the set added: afresh
            tried = {key: ratio for key, ratio in tried.items() if best[2].isdisjoint(key[0])}
        tree = best[1]
    fitted = [o for o in observations if tree.home(o.subset) >= 0]
    for o in observations:
        if tree.home(o.subset) < 0:
            fitted.extend(_projection(domain, o, part) for part in _parts(o.subset, tree))
    return tree, fitted


def _spanning_tree(domain: tuple[int, ...], candidates: dict[tuple[int, ...], Observation],
                   limit: int) -> JunctionTree:
    """MST's first step (McKenna, Miklau & Sheldon 2021): the pairs of attributes joined in a
    spanning forest of the largest :func:`_gain` over independence (Kruskal's algorithm, each
    pair kept while the model stays within ``limit`` cells). A forest's model is the sum of its
    pairs' cells, with no clique larger than a pair: the strongest relations are joined before
    the greedy steps' sets of small attributes grow cliques that a wide attribute can no longer
    join (on a salary table of 136,000 rows, sets of five 2- to 20-value columns took the
    cells that the 500-value column's relations to its 20- and 10-value ones needed)."""
    tree = junction_tree(domain, [])
    gains = {p: _gain(domain, o, tree) for p, o in candidates.items() if len(p) == 2}
    component = list(range(len(domain)))

    def root(a: int) -> int:
        while component[a] != a:
            a = component[a]
        return a

    for pair in sorted((p for p in gains if gains[p] > 0), key=lambda p: -gains[p]):
        a, b = root(pair[0]), root(pair[1])
        if a != b:
            trial = junction_tree(domain, [*tree.cliques, pair])
            if trial.size <= limit:
                component[a], tree = b, trial
    return tree


def model_limit(max_cells: int) -> int:
    """The most cells a model of :func:`model_structure` may have under ``max_cells``: also
    :data:`GREEDY_CELLS`, past which a model of every measured set is not fitted whole.

    >>> model_limit(10**9) == GREEDY_CELLS, model_limit(100)
    (True, 100)
    """
    return min(max_cells, GREEDY_CELLS)


def planned_model(domain: Sequence[int], subsets: Sequence[tuple[int, ...]],
                  max_cells: int) -> tuple[int, int, int]:
    """From public values alone, the size of the model :func:`model_structure` will fit to
    measurements of ``subsets`` within ``max_cells``, the cells one step of its fit passes over
    (the model's cliques, and each measured set summed from the clique that holds it), and the
    trial junction trees its search builds: exact, and no search, for the model of every measured
    set; for a greedy one, an upper bound (each set summed from a clique of the whole limit) and
    :func:`greedy_trials`.

    >>> planned_model((2, 2, 2), [(0, 1), (1, 2)], 100), planned_model((9, 9, 9), [(0, 1, 2)], 100)
    ((8, 16, 0), (100, 200, 48))
    """
    full = junction_tree(domain, subsets)
    limit = model_limit(max_cells)
    if full.size <= limit:
        return full.size, fit_cells(full, subsets), 0
    return limit, limit * (1 + len(set(subsets))), greedy_trials(subsets)


def fit_cells(tree: JunctionTree, subsets: Iterable[tuple[int, ...]]) -> int:
    """The cells one step of a fit on ``tree`` passes over: its cliques, and each measured set (one
    the tree cannot hold, each of its parts: :func:`model_structure`) summed from a clique holding it.

    >>> fit_cells(junction_tree((2, 2, 2), [(0, 1), (1, 2)]), [(0, 1), (1, 2), (0, 2)])  # (0, 2) in two parts
    24
    """
    sizes = tree.sizes
    held = [p for s in set(subsets) for p in ([s] if tree.home(s) >= 0 else _parts(s, tree))]
    return tree.size + sum(sizes[tree.home(p)] for p in held)


def greedy_trials(subsets: Sequence[tuple[int, ...]]) -> int:
    """About how many trial junction trees :func:`model_structure`'s greedy search builds for a
    model of measurements of ``subsets``: for ``K`` candidate sets (every set of two or more
    attributes within a measured one), ``12 K`` up to :data:`RETRY_CANDIDATES` and ``3 K`` beyond
    (measured: 11 to 12 and 2 to 3 a candidate on every pair of 24 to 80 columns).

    >>> greedy_trials([(0, 1, 2)])
    48
    """
    k = len({part for s in subsets for n in range(2, len(s) + 1) for part in itertools.combinations(sorted(s), n)})
    return (12 if k <= RETRY_CANDIDATES else 3) * k


def _projection(domain: tuple[int, ...], o: Observation, part: tuple[int, ...]) -> Observation:
    """``o`` summed down to the attributes ``part``: each count sums independent noise of ``o``'s cells."""
    if part == o.subset:
        return o
    shape = [domain[a] for a in o.subset]
    axes = tuple(i for i, a in enumerate(o.subset) if a not in part)
    values = o.values.reshape(shape).sum(axis=axes).ravel()
    return Observation(part, values, uniform_std(np.sqrt(o.variances.reshape(shape).sum(axis=axes).ravel())))


def _parts(subset: tuple[int, ...], tree: JunctionTree) -> list[tuple[int, ...]]:
    """The largest parts of ``subset`` that lie in one clique of ``tree`` (each attribute is in one)."""
    parts = {tuple(a for a in subset if a in c) for c in tree.cliques} - {()}
    return [p for p in parts if not any(set(p) < set(q) for q in parts)]


def _gain(domain: tuple[int, ...], o: Observation, tree: JunctionTree, sweeps: int = 20) -> float:
    """How far ``o``'s noisy counts are from the maximum-entropy table that matches their
    projections on the parts ``tree`` already joins (:func:`_independent`), beyond what noise of
    standard deviations ``σ`` explains: the larger of two measures (see :func:`model_structure`).

    * Concentrated: ``Σ max(|y − q| − 3σ, 0)`` over the cells ``y`` of ``o`` (negative counts
      clipped) and ``q`` of that table, the cells beyond :data:`GAIN_THRESHOLD` standard
      deviations: a strong dependence in a few cells among many.
    * Spread: ``Σ|y − q| − √(2/π)·Σσ`` (the L1 distance less noise's expected L1, AIM's score)
      less :data:`GAIN_THRESHOLD` standard deviations of that noise L1, ``√((1 − 2/π)·Σσ²)``:
      a dependence spread over many cells each below ``3σ``. A 276-value column's relation to a
      20-value one (a salary table of 136,000 rows, 5,520 cells at ``σ ≈ 60``) lies there: the
      first measure alone gave it a tenth of its distance (5,162 against 39,106) and the model
      left it out."""
    shape = [domain[a] for a in o.subset]
    y = o.values.reshape(shape)
    std = np.sqrt(o.variances).reshape(shape)
    parts = _parts(o.subset, tree)
    clipped = np.maximum(y, 0.0)
    if clipped.sum() <= 0:
        return -math.inf
    beyond = np.maximum(np.abs(clipped - _independent(clipped, o.subset, parts, sweeps)) - GAIN_THRESHOLD * std, 0.0)
    noise = math.sqrt(2 / math.pi) * float(std.sum()) + \
        GAIN_THRESHOLD * math.sqrt((1 - 2 / math.pi) * float((std ** 2).sum()))
    spread = float(np.abs(y - _independent(y, o.subset, parts, sweeps)).sum()) - noise
    return max(float(beyond.sum()), spread)


def _independent(y: np.ndarray, subset: tuple[int, ...], parts: list[tuple[int, ...]], sweeps: int) -> np.ndarray:
    """The maximum-entropy table on ``subset``'s cells (shaped as ``y``) whose projections on
    ``parts`` are ``y``'s, negative sums taken as 0 (iterative proportional fitting)."""
    q = np.full(y.shape, max(float(y.sum()), 0.0) / y.size)
    for _ in range(sweeps if any(len(set(p) & set(r)) for p in parts for r in parts if p != r) else 1):
        for p in parts:
            axes = tuple(i for i, a in enumerate(subset) if a not in p)
            want, have = np.maximum(y.sum(axis=axes, keepdims=True), 0.0), q.sum(axis=axes, keepdims=True)
            q = q * np.divide(want, have, out=np.zeros_like(want), where=have > 0)
    return q


def pgm(table: PrivateTable, attributes: Sequence[Attribute], weights: dict[tuple[int, ...], float],
        noise: NoiseModel, cost: Cost, max_cells: int, iterations: int = PGM_ITERATIONS,
        progress: Callable[[int, float], None] | None = None, tolerance: float = RELATIVE_TOLERANCE) -> PGMResult:
    """Measure the weighted marginals (``weights`` from :func:`marginal_weights`) once with
    ``noise`` (spending ``cost``, its price in the ledger's currency), and fit a model of at
    most ``max_cells`` cells (:func:`model_structure`; see the module docstring for the guarantee),
    on the attributes' cells (their groups, when grouped)."""
    domain = tuple(a.cells for a in attributes)
    observations = weighted_counts(table, attributes, weights, noise, cost, f"PGM: {len(weights)} weighted marginals")
    return fit_model(domain, observations, max_cells, iterations, progress, tolerance=tolerance)


@dataclass(frozen=True)
class Rounds:
    """AIM's rounds as :func:`pgm_compressed`'s adaptive path takes them: the ``share`` of ``rho``
    that its first measurement of every one-way marginal takes (AIM's own:
    :func:`~dpsql.synth.aim.first_share`), ``run``, the rounds spending the rest of ``rho``
    from the one-way counts, at full resolution and the wide columns' in their bins
    (:func:`first_counts`), and ``small``, MST spending it from those counts instead when they
    show a table too small for the rounds (:func:`~dpsql.synth.aim.too_noisy`), else None."""

    share: float
    run: Callable[[list[Observation], list[Observation]], PGMResult]
    small: Callable[[list[Observation], list[Observation]], PGMResult | None]


def pgm_compressed(table: PrivateTable, attributes: Sequence[Attribute], marginals: Sequence[tuple[int, ...]],
                   rho: float, reservation: Reservation, max_cells: int, one_way_share: float,
                   threshold: float | None, compressible: Sequence[int], iterations: int = PGM_ITERATIONS,
                   progress: Callable[[int, float], None] | None = None,
                   tolerance: float = RELATIVE_TOLERANCE, binned: dict[int, np.ndarray] | None = None,
                   adaptive: Rounds | None = None) -> PGMResult:
    """PGM in two steps drawn from ``reservation``: every attribute's one-way marginal with
    ``one_way_share · rho`` (:func:`first_counts`: the wide ones' in their bins as well), so that
    a column no workload marginal names keeps its distribution, and the ``compressible``
    attributes' decide the compression (:func:`~dpsql.synth.compress.compress` at
    ``threshold``; None: none), then the weighted marginals for ``marginals`` on the compressed
    domain (:func:`marginal_weights` there, scaled to L2 sensitivity 1) with the rest of
    ``rho``; the model is fitted to both.
    ``ρ``-zCDP: the two Gaussian
    measurements' ``ρ`` add up (Bun & Steinke 2016, Lemma 2.3), and the compression, the
    weights and the fit depend on released values only. Being Gaussian alone, the two are also
    one ``√(2ρ)``-GDP mechanism (Dong, Roth & Su 2022, Corollary 3.3), so ``(ε, δ)``-DP for
    the ``(ε, δ)`` whose :func:`~dpsql.synth.accounting.gaussian_rho` is ``rho``. The ``binned``
    attributes (by position, each value's bin) are modelled in their bins, each drawn back to a
    value by its full-resolution one-way counts (:func:`~dpsql.synth.coarsen.coarsen`).

    ``adaptive``: AIM's rounds (:func:`~dpsql.synth.aim.aim`) may spend the rest of ``rho`` instead,
    or, on a table too small for them (``adaptive.small``, from the first one-way counts, whether
    or not one model would hold ``marginals``), MST (:func:`~dpsql.synth.mst.mst`):
    measuring every marginal once leaves each too noisy for a model that must choose among them,
    while selecting them one at a time measures the ones the data says matter (mean TV on ADULT's 64
    random triples at ε = 1: 0.0585 against 0.0700). The one-way marginals are then measured first
    with the rounds' share only (``adaptive.share``, when less than ``one_way_share``). When the
    compression those counts make leaves ``marginals`` too large for one model of at most
    :func:`model_limit` cells, the one-way marginals are measured again where their noise is large
    against the noisy row count (:func:`one_way_top_up`, within ``one_way_share``, pooled with the
    first), and the rounds run from those counts, on a domain where a column's rare values are
    merged only if together they hold at most :data:`~dpsql.synth.compress.FEW_ROWS` of its rows
    (the wide columns still in bins; :func:`~dpsql.synth.aim.rounds_domain`). AIM's score charges
    a candidate the noise of every cell, nearly empty or not: unmerged, ADULT's ``capital_gain``
    (26 of its 32 values hold 0.6% of the rows) made every pair with it too costly to select, and
    its pair with ``marital_status`` was off by 1.5–2% of the rows in one cell. But a merged
    value's records are drawn back independent of every other column: merged whatever they hold, a
    500-value column's 303 rare values (14.5% of the rows at ε = 1, 93% at ε = 0.1) raised a
    salary-shaped table's mean TV at ε = 0.1 from 0.346 to 0.425
    (benchmarks/results/synthetic_issue42.txt, sessions 13 and 14). Otherwise the rest of
    ``one_way_share`` measures the one-way marginals again, the two pooled into one observation
    as precise as a single measurement of the whole share (:func:`~dpsql.synth.estimate.pool`),
    and pgm goes on as without ``adaptive`` (their less noisy counts merge fewer values, so the
    model may then be greedy, :func:`model_structure`).
    On a 136,000-row table with a 500- and a 200-value column, 64 random triples, 3 runs: max error
    0.0010 and mean TV 0.182 at ε = 1 (compressed rounds after pgm's whole one-way share: 0.0022 and
    0.187; dpmm's AIM: 0.0013 and 0.192). The choice reads released counts only; the whole is then
    ``ρ``-zCDP (the Gaussian measurements and AIM's picks, composed adaptively), not Gaussian alone,
    so it is ``(ε, δ)``-DP only for the ``(ε, δ)`` whose :func:`~dpsql.synth.accounting.zcdp_rho` is
    ``rho``: with ``adaptive``, the caller must reserve that ``rho``."""
    binned = binned or {}
    full = [a.size for a in attributes]
    share = one_way_share if adaptive is None else min(adaptive.share, one_way_share)

    def gaussian(part: float) -> NoiseModel:
        return Gaussian(rho=part)

    raw, bins = first_counts(table, attributes, binned, gaussian, share * rho, reservation, "PGM")
    compression = shrink(full, raw, threshold, binned, compressible)
    domain = tuple(full) if compression is None else compression.domain

    def again(part: float, description: str) -> tuple[list[Observation], list[Observation]]:
        """The one-way marginals measured again with ``part`` of ``rho``, pooled with those before."""
        return counts_again(table, attributes, binned, gaussian, part * rho, reservation, description, (raw, bins))

    if adaptive is not None:
        tree = adaptive.small(raw, bins)
        if tree is not None:
            return tree
        if junction_tree(domain, [*marginals, *((a,) for a in range(len(domain)))]).size > model_limit(max_cells):
            more = one_way_top_up(raw, share, one_way_share)
            if more > 0:
                raw, bins = again(more, "PGM, the one-way marginals again before AIM's rounds")
            return adaptive.run(raw, bins)
        if share < one_way_share:
            raw, bins = again(one_way_share - share, "PGM, the rest of the one-way share")
            compression = shrink(full, raw, threshold, binned, compressible)
            domain = tuple(full) if compression is None else compression.domain
    counted = attributes if compression is None else compression.attributes(attributes)
    first = (raw if compression is None else [compression.observe(o) for o in raw]) + bins
    rest = Gaussian(rho=rho - reservation.used)
    weights = unit_weights(marginal_weights(domain, marginals, rest))
    observations = first + weighted_counts(table, counted, weights, rest, reservation,
                                           f"PGM: {len(weights)} weighted marginals")
    return fit_model(domain, observations, max_cells, iterations, progress, compression, tolerance)


def one_way_top_up(observations: Sequence[Observation], share: float, most: float) -> float:
    """The share of ``rho`` with which to measure every one-way marginal again before AIM's rounds,
    given ``observations``, the one-way counts a first measurement with ``share`` of it made:
    none when each count's noise standard deviation is at most :data:`ONE_WAY_NOISE` of their
    noisy row count (:func:`~dpsql.synth.estimate.estimate_total`), else what brings it there
    once the two are pooled (the pooled noise variance is the first's times ``share / (share +
    more)``), the two together at most ``most``. It reads released counts only.

    >>> round(one_way_top_up([Observation((0,), np.array([600.0, 400.0]), 4.0)], 0.05, 0.3), 6)  # sd 4, not 2
    0.15
    >>> one_way_top_up([Observation((0,), np.array([600.0, 400.0]), 1.5)], 0.05, 0.3)
    0.0
    """
    rows = estimate_total(observations)
    std = max(float(np.sqrt(np.max(o.variances))) for o in observations)
    return max(0.0, min(most, share * (std / (ONE_WAY_NOISE * rows)) ** 2) - share)


def one_way_weights(which: Iterable[int]) -> dict[tuple[int, ...], float]:
    """The one-way marginals of the attributes ``which``, each with weight 1: as a
    :func:`measurement`, each row counts once in each (L2 sensitivity ``√|which|``). What
    :func:`first_counts` measures, for planners to check before the spend.

    >>> one_way_weights([0, 2])
    {(0,): 1.0, (2,): 1.0}
    """
    return {(a,): 1.0 for a in which}


def full_share(attributes: int, binned: int) -> float:
    """The share of the one-way marginals' budget that measures every attribute at full resolution
    when ``binned`` of the ``attributes`` are wide columns modelled in bins (the rest measures those
    in their bins, :func:`first_counts`): ``d/(d + b)``, so that each of the ``d + b`` marginals
    gets the noise it would in one measurement of them all.

    >>> full_share(15, 3), full_share(4, 0)
    (0.8333333333333334, 1.0)
    """
    return attributes / (attributes + binned)


def first_counts(table: PrivateTable, attributes: Sequence[Attribute], binned: dict[int, np.ndarray],
                 noise: Callable[[float], NoiseModel], budget: float, reservation: Reservation,
                 description: str) -> tuple[list[Observation], list[Observation]]:
    """The first measurement of pgm, aim and mst, drawing ``budget`` (a ``ρ`` or a pure ``ε``,
    ``noise`` of a part of it) from ``reservation``: every attribute's one-way marginal at full
    resolution (:func:`full_share` of it), whose counts decide the compression and each bin's
    values (:func:`~dpsql.synth.coarsen.shrink`), and the ``binned`` attributes' (by position,
    each value's bin) in their bins (the rest). A wide column's bins summed from its
    full-resolution counts carry the noise of every value in them (ADULT's ``fnlwgt``: about
    19,000 values a bin, noise of standard deviation about 6,000 on bins of about 600 rows), so
    every pair with it looked far from independence to MST's and AIM's selections, and the model
    followed that noise."""
    part = budget * full_share(len(attributes), len(binned))
    full = one_way_counts(table, attributes, range(len(attributes)), noise(part), reservation,
                          f"{description}: every one-way marginal")
    if not binned:
        return full, []
    return full, one_way_counts(table, [a.grouped(binned[i]) if i in binned else a for i, a in enumerate(attributes)],
                                sorted(binned), noise(budget - part), reservation,
                                f"{description}: the wide columns' one-way marginals in their bins")


def counts_again(table: PrivateTable, attributes: Sequence[Attribute], binned: dict[int, np.ndarray],
                 noise: Callable[[float], NoiseModel], budget: float, reservation: Reservation, description: str,
                 before: tuple[list[Observation], list[Observation]]) -> tuple[list[Observation], list[Observation]]:
    """:func:`first_counts` measured again with ``budget`` and pooled with those ``before`` (full
    resolution, and the ``binned`` ones in bins): each one-way marginal's precision-weighted mean
    (:func:`~dpsql.synth.estimate.pool`), as precise as one measurement of both budgets."""
    more, more_bins = first_counts(table, attributes, binned, noise, budget, reservation, description)
    return pool(before[0] + more), pool(before[1] + more_bins)


def one_way_counts(table: PrivateTable, attributes: Sequence[Attribute], which: Sequence[int], noise: NoiseModel,
                   spend: "Cost | Reservation", description: str) -> list[Observation]:
    """The one-way marginals of the attributes ``which`` (:func:`one_way_weights`) on their
    cells, measured at once with ``noise``, spending ``spend`` (a cost, or drawn from a reservation)."""
    return weighted_counts(table, attributes, one_way_weights(which), noise, spend, description)


def weighted_counts(table: PrivateTable, attributes: Sequence[Attribute], weights: dict[tuple[int, ...], float],
                    noise: NoiseModel, spend: "Cost | Reservation", description: str) -> list[Observation]:
    """The weighted marginals ``weights`` (attribute sets of ``attributes``, on their cells) measured
    at once with ``noise`` (:func:`measurement`), spending ``spend``: each marginal's noisy counts
    divided by its weight, an observation each."""
    domain = tuple(a.cells for a in attributes)
    measured = table.measure(attributes, measurement(domain, weights), noise, spend, description)
    observations, start = [], 0
    for subset, w in weights.items():
        size = math.prod(domain[a] for a in subset)
        observations.append(Observation(subset, measured.values[start:start + size] / w, measured.noise_std / w))
        start += size
    return observations


def fit_model(domain: tuple[int, ...], observations: list[Observation], max_cells: int, iterations: int,
              progress: Callable[[int, float], None] | None, compression: Compression | None = None,
              tolerance: float = RELATIVE_TOLERANCE) -> PGMResult:
    """The model of at most ``max_cells`` cells fitted to ``observations`` (:func:`model_structure`),
    until it converges to the relative ``tolerance`` (:func:`~dpsql.synth.estimate.estimate`)."""
    tree, fitted = model_structure(domain, observations, max_cells)
    model = estimate(domain, fitted, tree=tree, iterations=iterations, relative=tolerance, progress=progress)
    return PGMResult(model, observations, compression)
