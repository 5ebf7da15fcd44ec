"""AIM: adaptive, iterative selection of marginals to measure, on a graphical model.

:func:`aim` follows AIM (McKenna, Mullins, Sheldon & Miklau, "AIM: An Adaptive and Iterative
Mechanism for Differentially Private Synthetic Data", VLDB 2022). Its candidates are every
marginal the workload's marginals contain (their downward closure), each weighted by how
much of the workload it covers: ``w_r = Σ_s |r ∩ s|`` over workload marginals ``s``. After
measuring every one-way marginal, each round

1. keeps the candidates the model can join within its size limit, which grows with the
   budget spent: ``(ρ_used / ρ)·max_cells`` cells (a candidate the model already holds
   always stays);
2. selects one by the exponential mechanism (:meth:`~dpsql.private.kernel.PrivateTable.select_marginal`)
   with score ``w_r (‖M_r(D) − M_r(p̂)‖₁ − √(2/π) σ n_r)``: how far the current model
   ``p̂`` is from the data on ``r``, less what measuring ``r`` with noise ``σ`` on its ``n_r``
   cells could not resolve;
3. measures it with Gaussian noise ``σ`` and refits the model to every measurement
   (:func:`~dpsql.synth.estimate.estimate`, warm-started from the previous model, in at most
   :data:`ROUND_CELL_STEPS` cell-steps: a model of a million cells takes 30 steps a round, not
   300, which halves the time of a 35-attribute table and leaves the error on ADULT as it was);
4. anneals: when the refit moved the model on ``r`` by less than the noise's expected L1,
   ``√(2/π) σ n_r``, the next rounds spend four times as much each (``σ/2``, ``2ε``).

Unlike the paper, while a round's noise is past :data:`COARSE_NOISE` (1%) of the noisy row count,
the candidates also include *coarse* versions: each pair of attributes with one of more than
:data:`COARSE_VALUES` (16) values, on that attribute's values grouped into 16 runs of neighbouring
values of about equal noisy one-way counts (:func:`coarse_groups`), scored the same way on its
fewer cells. At such noise AIM's score charges a pair with a 60-value column the noise of every
cell, so it is measured late or never; on 16 runs it can be measured sooner. The model stays on
the full domain: a coarse measurement is a linear function of the marginal on the pair
(:class:`~dpsql.synth.estimate.Observation`'s ``cells``), fitted through the clique that holds
it, as the pair itself would be; once the pair is measured either way, its coarse version is no
longer offered.

It starts from ``T = 16d`` rounds' shares (``σ = √(T/(2αρ))``, ``ε = √(8(1−α)ρ/T)``,
``α = 0.9``: 90% of each round's budget measures, 10% selects), and the round that would
leave less than two rounds' worth spends all that is left. So does the round that, with
another like the one before it, would pass the time the rounds may take: each round's work
(its reads, trial junction trees, estimates and refit) is priced as it runs by
:mod:`dpsql.synth.work`'s units, from the models selected (:func:`round_seconds`), since
scoring thousands of candidates a round on a wide table costs more than any plan made before
the first selection can know.

Unlike the paper, it may compress the domain first (:mod:`dpsql.synth.compress`, as MST does):
the one-way marginals then take a given share of ``ρ`` (``one_way_share``), each attribute's
values they count below ``threshold`` noise standard deviations are merged where together they
hold at most :data:`~dpsql.synth.compress.FEW_ROWS` of its rows (a merged value's records are
drawn back independent of every other column; on ADULT, 5 runs, max error / mean TV 0.0118 /
0.0606 at ε = 1 and 0.0384 / 0.1479 at ε = 0.1, against 0.0137 / 0.0608 and 0.0396 / 0.1521 with
every rare value merged; a salary-shaped table's mean TV at ε = 0.1 0.345 against 0.362), and every later
candidate is a marginal of the merged values (fewer, fuller cells). dpsql's synthesize does so
by default when an attribute has more than two values. A wide integer column is modelled in
public bins the same way (:mod:`dpsql.synth.coarsen`).

**Guarantee.** ``ρ``-zCDP with respect to adding or removing one privacy unit (of at most ``k``
rows), or ``(ε, δ)``-DP for the ``(ε, δ)`` that ``ρ`` stands for
(:func:`~dpsql.synth.accounting.zcdp_rho`). The whole spend is charged to the ledger before the
first read, as one :class:`~dpsql.private.kernel.Reservation`; each step draws on it and is
refused once it would exceed it. A measurement of one marginal (a coarse one too: each row still
counts once) has L2 sensitivity ``k`` and noise ``kσ``: ``1/(2σ²)``-zCDP (Bun & Steinke 2016,
Prop. 1.6); a selection has scores of sensitivity ``k·max w_r`` and is ``ε``-DP, hence
``ε²/8``-zCDP as the exponential mechanism is ε-bounded-range (Cesar & Rogers 2021); zCDP
composes adaptively (Bun & Steinke, Lemma 2.3), so the steps sum to at most ``ρ`` (the one-way
marginals, ``d`` of sensitivity ``k`` each, are one measurement of L2 sensitivity ``k√d``, and the
``b`` wide columns' in their bins another, of ``k√b``, the two splitting the one-way share
``d : b``). Which candidates are kept, the compression, the coarse groupings (from the released
one-way counts), the noise scales, the annealing and the rounds' priced time depend only on
released values (never a clock, which reads of the private table would move). Fitting and
sampling are post-processing.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from typing import Callable, Sequence

import numpy as np

from dpsql.privacy import Gaussian
from dpsql.private.kernel import PrivateTable, Reservation
from dpsql.private.measure import MAX_GROUPING_SETS
from dpsql.schema import Attribute
from dpsql.synth.coarsen import shrink
from dpsql.synth.compress import FEW_ROWS, Compression, compressible
from dpsql.synth.estimate import Observation, estimate, estimate_total, pool
from dpsql.synth.graphical import GraphicalModel
from dpsql.synth.junction import JunctionTree, junction_tree
from dpsql.synth.mwem import marginal_strategy
from dpsql.synth.pgm import PGMResult, first_counts, fit_cells
from dpsql.synth.work import READ, fit_seconds, scoring_seconds

__all__ = ["AIM_ITERATIONS", "ALPHA", "COARSE_NOISE", "COARSE_VALUES", "ROUND_CELL_STEPS", "MIN_ROUND_ITERATIONS",
           "TREE_NOISE", "candidates", "aim", "coarse_cells", "coarse_groups", "coarsened", "rounds_domain",
           "first_measurement", "first_share", "round_iterations", "round_noise", "round_seconds", "too_noisy"]

#: The share of each round's budget that measures (the rest selects).
ALPHA = 0.9
#: A refit between rounds takes at most this many cell-steps (mirror-descent steps × model cells)...
ROUND_CELL_STEPS = 3 * 10**7
#: ...but at least this many steps (:func:`round_iterations`).
MIN_ROUND_ITERATIONS = 30
#: The most steps of the last fit, warm-started from the rounds' refits: 10,000 bought no
#: accuracy on ADULT or KDD99 and took KDD99's runs at ε = 1 from 204 s to 400–870 s.
AIM_ITERATIONS = 1000
#: AIM's rounds are worth their noise while each round's measurement (of standard deviation
#: :func:`round_noise`, per privacy unit) is at most this share of the noisy row count; past it, a
#: table is too small for the budget, and a spanning tree of pairs, selected and measured as MST
#: does (:mod:`dpsql.synth.mst`), has less error (:func:`too_noisy`). Max error / mean TV on 64
#: random triples at ε = 0.1 (δ = 1/n²), MST against pgm's rounds, on the same triples:
#:
#: * past the line: at 37% of the rows (the passengers) 0.181 / 0.648 against 0.184 / 0.658; at
#:   12.7% (4,000 rows) 0.061 / 0.373 against 0.068 / 0.399; at 8% (8,000 rows) 0.060 / 0.385
#:   against 0.067 / 0.397; at 4.9% (12,000 rows) 0.040 / 0.327 against 0.045 / 0.351 (10 runs
#:   each); at 4.0–4.2% on 20,000 loan records with functional dependencies (state → region,
#:   sub-grade → grade), 0.039 / 0.387 against 0.058 / 0.363 (10 runs; dpmm's AIM 0.052 / 0.430 and
#:   MST 0.048 / 0.468: pgm's rounds had the higher max error of both), where the rounds measured
#:   one-way marginals again and small pairs, never the 245-cell function;
#: * also past it, both below dpmm's peers: ADULT's 20,000-row sample at 4.1–4.4%, MST 0.052 /
#:   0.239 against 0.061 / 0.230 (3 runs; dpmm's AIM 0.117 / 0.324, MST 0.073 / 0.279), and the
#:   passengers at ε = 1 (4.1–4.4%), 0.047 / 0.511 against 0.036 / 0.520 (dpmm's AIM 0.091 / 0.522);
#: * below it: at 3.5–3.6% (20,000 rows of 11 Dirichlet-drawn columns) 0.048 / 0.259 against
#:   0.041 / 0.257 (10 runs; MST's max error would be 1.2 times dpmm's AIM's there); at 2.1% (30,000
#:   rows) 0.024 / 0.289 against 0.025 / 0.266; on ADULT (1.8%) and a 136,000-row table (0.48%)
#:   pgm's max error and mean TV are both lower (3 and 5 runs).
#:
#: So the line falls between 3.6% and 4.0% (benchmarks/results/synthetic_issue42.txt, sessions 16,
#: 17 and 20; 4.5% before session 20).
TREE_NOISE = 0.038
#: AIM's rounds also offer each pair of attributes with one of more than this many values (on the
#: rounds' domain) on that attribute's values grouped into as many runs (:func:`coarse_groups`),
#: while the rounds' noise is past :data:`COARSE_NOISE`. 16 runs, not 8 nor both: max error / mean TV
#: over 64 random triples at ε = 0.1 (pairs and triples offered coarse) on ADULT 0.0348 / 0.1526 (6
#: runs; 0.0397 / 0.1526 with 8, 0.0428 / 0.1551 with both, 0.0396 / 0.1509 without) and on 20,000
#: rows of 11 Dirichlet-drawn columns 0.0343 / 0.2547 (8 runs; 0.0391 / 0.2529, 0.0404 / 0.2709,
#: 0.0446 / 0.2514), all in one hour. Pairs only: with every triple of ADULT as published as the
#: workload (the default) at ε = 0.1, coarse triples took the mean TV from 0.2513 to 0.2629 (6 runs
#: each), coarse pairs alone 0.2447 (3) (benchmarks/results/synthetic_issue42.txt, session 21).
COARSE_VALUES = 16
#: Coarse candidates are offered while a round's noise (per privacy unit, times the rows a unit may
#: hold) is past this share of the noisy row count. Below it, the rounds afford the full-resolution
#: marginals once they anneal, and coarse versions, cheaper to score well, take their rounds: on a
#: 136,000-row table at ε = 1 (0.05%) the mean TV rose from 0.182 to 0.210, on 20,000 loan records
#: with ordered relations at ε = 1 (0.44%) the max error from 0.0060 to 0.0076 (8 runs), and on
#: ADULT at ε = 1 (0.2%) from 0.0111 to 0.0121 (4 runs). Past it, at ε = 0.1, the change is within
#: the runs' spread but for the mean TV on 20,000 rows of 11 Dirichlet-drawn columns (3.6%): 0.0427 /
#: 0.2414 against 0.0433 / 0.2529 (20 and 28 runs); ADULT's 64 random triples (1.8%) 0.0375 / 0.1502
#: against 0.0352 / 0.1488 (20 and 26), ADULT as published given every pair (2.7%) 0.0425 / 0.2399
#: against 0.0456 / 0.2403 (9 each); on 8,000 rows at ε = 1 (0.89%), pairs and triples offered,
#: 0.0175 / 0.2069 against 0.0178 / 0.2029 (8 runs each). The line lies between 0.5% and 1.8%.
COARSE_NOISE = 0.01


def candidates(workload: Sequence[Sequence[int]]) -> dict[tuple[int, ...], float]:
    """Every nonempty marginal inside a workload marginal, with its weight ``Σ_s |r ∩ s|``: the
    sum over its attributes of the workload marginals holding each (the weight summed over the
    whole workload for each candidate took hours to plan every triple of 80 columns).

    >>> candidates([(0, 1), (1, 2)])
    {(0,): 1.0, (1,): 2.0, (0, 1): 3.0, (2,): 1.0, (1, 2): 3.0}
    """
    holding = Counter(a for s in workload for a in set(s))
    out: dict[tuple[int, ...], float] = {}
    for s in workload:
        for k in range(1, len(s) + 1):
            for r in itertools.combinations(sorted(s), k):
                if r not in out:
                    out[r] = float(sum(holding[a] for a in r))
    return out


def round_iterations(cap: int, cells: int) -> int:
    """The mirror-descent steps of a refit between rounds of a model of ``cells`` cells: ``cap``,
    or fewer on a large model, down to :data:`MIN_ROUND_ITERATIONS` (each step's cost grows with
    the cells; warm-started, a refit needs few). The model's size follows from released
    selections only, so this is post-processing.

    >>> round_iterations(300, 50_000), round_iterations(300, 500_000), round_iterations(300, 10**8)
    (300, 60, 30)
    """
    return max(MIN_ROUND_ITERATIONS, min(cap, ROUND_CELL_STEPS // max(cells, 1)))


def round_seconds(before: JunctionTree, homes: Sequence[int], trials: int, read: int,
                  after: JunctionTree, measured: Sequence[tuple[int, ...]], steps: int) -> float:
    """A round's work, priced by :mod:`dpsql.synth.work`'s units: a selection reading the ``read``
    candidates not read before (in queries of at most
    :data:`~dpsql.private.measure.MAX_GROUPING_SETS` marginals) and a measurement; ``trials`` trial
    junction trees over the model's attributes and the estimate of each candidate on the model
    of ``before``, from the clique of it that ``homes`` gives (or -1: from the whole model); and
    ``steps`` refit steps of the model of ``measured`` on ``after``. Released values only.

    >>> tree = junction_tree((2, 2, 2), [(0, 1), (2,)])
    >>> round(round_seconds(tree, [1, -1], 1, 2, tree, [(0, 1), (2,)], 10), 4)
    0.5011
    """
    sizes = before.sizes
    reads = [(sizes[h], 1) if h >= 0 else (before.size, len(sizes)) for h in homes]
    return READ * (1 + math.ceil(read / MAX_GROUPING_SETS)) + scoring_seconds(trials, len(before.domain), reads) + \
        fit_seconds(steps, fit_cells(after, measured))


def first_share(rounds: int, attributes: int) -> float:
    """The share of ``ρ`` that AIM's first measurement, every one-way marginal, takes as the paper
    has it: one round's ``σ`` for each of the ``d`` attributes, ``α·d/T`` of ``T`` rounds' shares.

    >>> first_share(16 * 7, 7)
    0.05625
    """
    return ALPHA * attributes / rounds


def round_noise(rounds: int, rho: float) -> float:
    """The noise standard deviation (per privacy unit) with which AIM's first rounds measure a
    marginal when ``rho`` starts in ``rounds`` shares: ``σ = √(T/(2αρ))``, 90% of a share's
    ``ρ/T``. Public: the plan's.

    >>> round(round_noise(160, 0.5), 3)
    13.333
    """
    return math.sqrt(rounds / (2 * ALPHA * rho))


def coarse_groups(domain: Sequence[int], one_way: Sequence[Observation], most: int = COARSE_VALUES
                  ) -> dict[int, np.ndarray]:
    """Per attribute of more than ``most`` values of ``domain``, its values grouped for AIM's coarse
    candidates: into at most ``most`` runs of neighbouring values, each value in the run that holds
    the middle of its share of the noisy counts ``one_way`` (pooled, clipped at 0; full-resolution
    one-way counts on ``domain``): runs of about equal rows, a value of more than two runs' share
    alone. Runs, not the ``most − 1`` largest values apart and the rest as one: within a group the
    model is uniform, and a run keeps an ordered relation's band (an interest rate by sub-grade),
    which one group of every smaller value spread over all its cells (20,000 loan records at ε = 1,
    coarse candidates offered whatever the noise: max error / mean TV 0.0099 / 0.1667 against
    0.0059 / 0.1528, 5 runs each). Post-processing of released counts.

    >>> counts = Observation((0,), np.array([5.0, 90.0, 1.0, 1.0, 3.0]), 1.0)
    >>> coarse_groups((5, 2), [counts], most=3)[0].tolist()
    [0, 1, 2, 2, 2]
    """
    out = {}
    for o in pool(one_way):
        a = o.subset[0] if len(o.subset) == 1 and o.cells is None else None
        if a is not None and domain[a] > most and o.values.size == domain[a]:
            share = np.maximum(np.asarray(o.values, dtype=float), 0.0)
            share = share / share.sum() if share.sum() > 0 else np.full(share.size, 1.0 / share.size)
            run = np.minimum((most * (np.cumsum(share) - share / 2)).astype(np.int64), most - 1)
            out[a] = np.unique(run, return_inverse=True)[1].astype(np.int64)
    return out


def coarse_cells(domain: Sequence[int], subset: tuple[int, ...], groups: dict[int, np.ndarray]) -> np.ndarray:
    """For each cell of the marginal on ``subset`` (flat, C order), its cell in the marginal on the
    attributes of ``subset`` not in ``groups`` then (grouped) those in it, each in order: the order
    in which the private kernel counts the coarse candidate over :func:`coarse_groups`' grouped
    attributes, placed after the others. Public.

    >>> coarse_cells((3, 2), (0, 1), {0: np.array([0, 1, 1])}).tolist()
    [0, 2, 1, 3, 1, 3]
    """
    grid = np.indices([domain[a] for a in subset]).reshape(len(subset), -1)
    order = _counted_order(subset, groups)
    coords = [groups[subset[i]][grid[i]] if subset[i] in groups else grid[i] for i in order]
    sizes = [int(groups[subset[i]].max()) + 1 if subset[i] in groups else domain[subset[i]] for i in order]
    return np.ravel_multi_index(coords, sizes)


def coarsened(domain: Sequence[int], subset: tuple[int, ...], groups: dict[int, np.ndarray],
              counts: np.ndarray) -> np.ndarray:
    """The counts of the marginal on ``subset`` (flat, C order) summed into its coarse cells, ordered
    as :func:`coarse_cells` orders them: each grouped attribute's runs of values summed along its
    axis. :func:`coarse_groups`' groups are runs, so no map of every cell is made (a triple of
    a wide table's candidates has up to millions). Public.

    >>> coarsened((3, 2), (0, 1), {0: np.array([0, 1, 1])}, np.arange(6.0)).tolist()
    [0.0, 6.0, 1.0, 8.0]
    """
    values = np.asarray(counts, dtype=float).reshape([domain[a] for a in subset])
    for i, a in enumerate(subset):
        if a in groups:
            values = np.add.reduceat(values, np.flatnonzero(np.diff(groups[a], prepend=-1)), axis=i)
    return np.transpose(values, _counted_order(subset, groups)).ravel()


def _counted_order(subset: tuple[int, ...], groups: dict[int, np.ndarray]) -> list[int]:
    """The positions in ``subset`` in the order the kernel counts a coarse candidate: its attributes
    not in ``groups``, then those grouped, each in order."""
    return [i for i, a in enumerate(subset) if a not in groups] + [i for i, a in enumerate(subset) if a in groups]


def _regrouped(attribute: Attribute, labels: np.ndarray) -> Attribute:
    """``attribute``, whose cells (its values, or its groups) are grouped further by ``labels``."""
    return attribute.grouped(labels if attribute.groups is None else labels[np.asarray(attribute.groups)])


def too_noisy(noise: float, one_way: Sequence[Observation]) -> bool:
    """Whether rounds measuring with noise of standard deviation ``noise`` (per count:
    :func:`round_noise` times the rows a privacy unit may hold) are past :data:`TREE_NOISE` of the
    row count the noisy one-way counts ``one_way`` give
    (:func:`~dpsql.synth.estimate.estimate_total`). Reads released counts only.

    >>> counts = [Observation((0,), np.array([600.0, 400.0]), 10.0)]
    >>> too_noisy(35.0, counts), too_noisy(40.0, counts)
    (False, True)
    """
    return noise > TREE_NOISE * estimate_total(one_way)


def first_measurement(table: PrivateTable, attributes: Sequence[Attribute], rho: float, reservation: Reservation,
                      rounds: int | None, one_way_share: float | None,
                      binned: dict[int, np.ndarray] | None) -> tuple[list[Observation], list[Observation]]:
    """AIM's first measurement, drawn from ``reservation``: every one-way marginal, at full resolution
    and (the ``binned`` ones) in bins (:func:`~dpsql.synth.pgm.first_counts`), with ``one_way_share``
    of ``rho``, or (None) :func:`first_share` of ``rounds`` shares (``16d`` when None)."""
    d = len(attributes)
    share = first_share(rounds or 16 * d, d) if one_way_share is None else one_way_share
    return first_counts(table, attributes, binned or {}, lambda part: Gaussian(rho=part), share * rho, reservation,
                        "AIM")


def rounds_domain(domain: Sequence[int], one_way: Sequence[Observation], threshold: float | None,
                  binned: dict[int, np.ndarray]) -> Compression | None:
    """The domain AIM's rounds run on, from the noisy full-resolution one-way counts ``one_way``:
    the :func:`~dpsql.synth.compress.compressible` attributes' values counted below ``threshold``
    noise standard deviations merged where together they hold at most
    :data:`~dpsql.synth.compress.FEW_ROWS` of the column's rows, and the ``binned`` ones in their
    bins (:func:`~dpsql.synth.coarsen.shrink`; None: no ``threshold`` and no ``binned``).
    Post-processing.

    >>> few = Observation((0,), np.array([900.0, 60.0, 1.0, 2.0, 0.0]), 1.0)  # 3 rare values: 3 of 963 rows
    >>> many = Observation((0,), np.array([500.0, 60.0, 50.0, 40.0, 45.0]), 20.0)  # 135 of 695 rows
    >>> rounds_domain((5,), [few], 3.0, {}).domain, rounds_domain((5,), [many], 3.0, {}).domain
    ((3,), (5,))
    """
    return shrink(domain, one_way, threshold, binned, compressible(domain), most=FEW_ROWS)


def aim(table: PrivateTable, attributes: Sequence[Attribute], workload: Sequence[tuple[int, ...]], rho: float,
        reservation: Reservation, max_cells: int, rounds: int | None = None, iterations: int = AIM_ITERATIONS,
        refit_iterations: int = 300, one_way_share: float | None = None, threshold: float | None = None,
        progress: Callable[[int], None] | None = None, binned: dict[int, np.ndarray] | None = None,
        seconds: Callable[[float], float] = lambda total: math.inf,
        warn: Callable[[str], None] | None = None,
        start: tuple[list[Observation], list[Observation]] | None = None) -> PGMResult:
    """Run AIM on ``table`` drawing ``rho`` from ``reservation`` (see the module docstring for the
    guarantee), for the workload's marginals (sorted attribute positions), with a model of at most
    ``max_cells`` cells. ``rounds`` is ``T`` (default ``16d``); each refit takes ``refit_iterations``
    mirror-descent steps, fewer on a large model (:func:`round_iterations`), and the last one
    ``iterations``. ``one_way_share``: the share of ``rho``
    the one-way marginals take (default: ``d`` rounds' measurement shares, as in the paper).
    ``threshold``: compress the domain (:func:`~dpsql.synth.compress.compress`) at this many
    standard deviations of the one-way noise (default: no compression). ``binned``: the attributes
    (by position, each value's bin) modelled in bins and drawn back to values by their one-way
    counts (:func:`~dpsql.synth.coarsen.shrink`). ``progress`` gets the percentage of ``rho`` spent.
    ``seconds``: the time the rounds may take, as :func:`round_seconds` prices them, given the
    noisy row count of the one-way marginals (the rows to sample after); the round that, with
    another like the one before, would pass it spends all that is left, and ``warn`` is told so.
    ``start``: every one-way marginal already measured, drawn from ``reservation``, at full
    resolution and (the ``binned`` ones) in bins, as :func:`~dpsql.synth.pgm.first_counts` gives
    them (pgm's first measurement, :func:`~dpsql.synth.pgm.pgm_compressed`), in place of AIM's own.
    Either way the rounds run on :func:`rounds_domain`.
    The result's ``work`` is the rounds' and the last fit's priced seconds."""
    domain = tuple(a.size for a in attributes)
    d, k = len(domain), table.rows_per_unit
    shares = rounds or 16 * d
    sigma, eps = round_noise(shares, rho), math.sqrt(8 * (1 - ALPHA) * rho / shares)
    raw, bins = start or first_measurement(table, attributes, rho, reservation, rounds, one_way_share, binned)
    compression = rounds_domain(domain, raw, threshold, binned or {})
    observations = (list(raw) if compression is None else [compression.observe(o) for o in raw]) + list(bins)
    if compression is not None:
        attributes, domain = compression.attributes(attributes), compression.domain
    weights = candidates(workload)
    # the coarse groupings, each grouped attribute counted as a copy placed after the attributes
    groups = coarse_groups(domain, [o for o in observations if len(o.subset) == 1])
    position = {a: d + i for i, a in enumerate(sorted(groups))}
    counted = list(attributes) + [_regrouped(attributes[a], groups[a]) for a in sorted(groups)]
    measured = [(a,) for a in range(d)]
    tree = junction_tree(domain, measured)
    model = estimate(domain, observations, tree=tree, iterations=round_iterations(refit_iterations, tree.size))
    allowed = seconds(model.total)

    sizes: dict[tuple[frozenset, tuple[int, ...]], int] = {}  # a model's size with one more set: public
    read: set[tuple[int, ...]] = set()  # the candidates whose exact marginals the kernel has counted
    spent, last = 0.0, 0.0  # the rounds' priced seconds so far, and the last round's

    def used() -> float:
        return reservation.used

    def refit(start: GraphicalModel, cap: int) -> tuple[GraphicalModel, int]:
        """The model refitted on ``tree`` in at most ``cap`` steps, and the steps it took (public:
        the fit reads released measurements only)."""
        taken = [0]
        fitted = estimate(domain, observations, tree=tree, start=start, iterations=cap,
                          progress=lambda done, _: taken.__setitem__(0, done))
        return fitted, taken[0]

    while used() < rho * (1 - 1e-9):
        remaining = rho - used()
        step = 1 / (2 * sigma**2) + eps**2 / 8
        late = spent + 2 * last > allowed
        if remaining < 2 * step or late:  # the last round: everything left
            if late and warn is not None:
                warn(f"AIM's rounds took about {spent:,.0f} s, priced from the models they selected "
                     f"(dpsql.synth.work): round {len(measured) - d + 1} is the last, spending the "
                     f"{remaining / rho:.0%} of rho left, so that the run ends within max_seconds")
            sigma, eps = math.sqrt(1 / (2 * ALPHA * remaining)), math.sqrt(8 * (1 - ALPHA) * remaining)
            step = remaining
        limit = (used() + step) / rho * max_cells
        graph, homes = frozenset(measured), {r: tree.home(r) for r in weights}
        trials = 0
        for r in weights:
            if homes[r] < 0 and (graph, r) not in sizes:
                sizes[(graph, r)] = junction_tree(domain, sorted(graph) + [r]).size
                trials += 1
        kept = [r for r in weights if homes[r] >= 0 or sizes[(graph, r)] <= limit]
        # each candidate (r, as counted, False), and while the noise is large its coarse version (r, as
        # counted, True), until r is measured either way
        noisy_rounds = k * sigma > COARSE_NOISE * model.total
        offered = [(r, r, False) for r in kept] + [
            (r, tuple(sorted(position.get(a, a) for a in r)), True) for r in kept
            if noisy_rounds and len(r) == 2 and r not in measured and any(a in groups for a in r)]
        before, unread = tree, len({at for _, at, _ in offered} - read)
        read.update(at for _, at, _ in offered)
        held = {r: model.marginal(r) for r in kept}
        estimates = [coarsened(domain, r, groups, held[r]) if c else held[r] for r, _, c in offered]
        noise_l1 = [math.sqrt(2 / math.pi) * k * sigma * e.size for e in estimates]
        j = table.select_marginal(counted, [at for _, at, _ in offered], estimates, eps, reservation,
                                  f"AIM round {len(measured) - d + 1}", weights=[weights[r] for r, _, _ in offered],
                                  offsets=[weights[r] * b for (r, _, _), b in zip(offered, noise_l1)])
        chosen, at, coarse = offered[j]
        noisy = table.measure(counted, marginal_strategy(tuple(a.cells for a in counted), at),
                              Gaussian(rho=1 / (2 * sigma**2)), reservation,
                              f"AIM round {len(measured) - d + 1}: marginal {chosen}"
                              f"{' (grouped)' if coarse else ''}")
        observations.append(Observation(chosen, noisy.values, noisy.noise_std,
                                        coarse_cells(domain, chosen, groups) if coarse else None))
        measured.append(chosen)
        if tree.home(chosen) < 0:
            tree = junction_tree(domain, measured)
            model = model.on_tree(tree)
        model, steps = refit(model, round_iterations(refit_iterations, tree.size))
        last = round_seconds(before, [homes[r] for r in kept], trials, unread, tree, measured, steps)
        spent += last
        now = coarsened(domain, chosen, groups, model.marginal(chosen)) if coarse else model.marginal(chosen)
        if np.abs(now - estimates[j]).sum() <= noise_l1[j]:
            sigma, eps = sigma / 2, eps * 2
        if progress is not None:
            progress(min(int(100 * used() / rho), 100))
    model, steps = refit(model, iterations)
    return PGMResult(model, observations, compression, spent + fit_seconds(steps, fit_cells(tree, measured)))
