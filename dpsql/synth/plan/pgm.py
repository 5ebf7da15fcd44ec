"""Planning PGM (:mod:`dpsql.synth.pgm`) within a request: one Laplace measurement under a pure
epsilon, two Gaussian ones otherwise, with AIM's rounds when the measured marginals are too
large for one model (:mod:`dpsql.synth.plan.rounds`).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from dpsql.errors import ArgumentError, PrivacyError, ResourceLimitError
from dpsql.privacy import Gaussian, Laplace, NoiseModel
from dpsql.private.budget import Cost
from dpsql.private.kernel import PrivateTable, Reservation
from dpsql.schema import Attribute
from dpsql.synth.aim import first_share
from dpsql.synth.coarsen import binned
from dpsql.synth.compress import FEW_ROWS, compressible
from dpsql.synth.estimate import Observation
from dpsql.synth.junction import junction_tree
from dpsql.synth.options import choice, flag, option
from dpsql.synth.pgm import (
    PGM_ITERATIONS,
    PGMResult,
    Rounds,
    marginal_weights,
    measurement,
    model_limit,
    pgm,
    pgm_compressed,
    unit_weights,
)
from dpsql.synth.plan.model import ONE_WAY_SHARE, ModelOptions, compression_options, first_parts, reserved_fit
from dpsql.synth.plan.progress import fit_progress
from dpsql.synth.plan.request import Outcome, Request, Run, check_cells, reworded, unnamed_attributes
from dpsql.synth.plan.rounds import aim_rounds
from dpsql.synth.work import refine_seconds

#: What pgm measures: the workload's marginals, or only their two-way marginals.
PGM_MEASURES = ("workload", "pairs")

#: The least share of pgm's budget for every one-way marginal, measured always (about AIM's: its
#: ``d`` first rounds of ``16d`` take 0.9/16 of its budget).
MIN_ONE_WAY_SHARE = 0.05


def plan_pgm(private: PrivateTable, attributes: Sequence[Attribute], request: Request, options: dict) -> Run:
    """PGM within the request (:mod:`dpsql.synth.pgm`). Under Gaussian noise (a zCDP or an
    ``(ε, δ)`` spend) two measurements: every attribute's one-way marginal with ``one_way_share``
    of the budget (:func:`default_one_way_share`), which also decides the compression, then the
    workload's marginals, weighted by :func:`~dpsql.synth.pgm.marginal_weights`. Under a pure
    ``ε`` one Laplace measurement of the workload's marginals and the one-way marginal of every
    attribute they leave out. Either way a column the workload never names keeps its
    distribution. The model and its fit are sized before anything is spent, from public values
    alone, to ``max_model_size`` and ``max_seconds`` (:meth:`~dpsql.synth.plan.model.ModelOptions.fit_plan`); a run
    that cannot fit in time is refused then. A workload marginal larger than the model is
    measured all the same, and the sampled records follow it
    (:meth:`~dpsql.synth.pgm.PGMResult.sample`)."""
    total, budget = request.total, request.budget
    model = ModelOptions.of(options, PGM_ITERATIONS)
    measure = choice("measure", option(options, "measure", "workload"), PGM_MEASURES)
    adaptive = flag("adaptive", option(options, "adaptive", True))
    gaussian = request.zcdp or total.delta > 0
    if request.zcdp:
        noise: NoiseModel = Gaussian(rho=total.rho)
        cost = Cost.gaussian(budget, rho=total.rho)
    elif gaussian:
        noise, cost = Gaussian(epsilon=total.epsilon, delta=total.delta), \
            Cost.gaussian(budget, epsilon=total.epsilon, delta=total.delta)
    else:
        noise, cost = Laplace(total.epsilon), Cost.laplace(total.epsilon, budget)
    model_attributes = binned(attributes, request.wide)  # (under a pure epsilon, plan_binned has binned them)
    domain = [a.cells for a in model_attributes]  # the model's: a wide column's bins (dpsql.synth.coarsen)
    measured = request.marginals if measure == "workload" else \
        sorted({p for m in request.marginals for p in itertools.combinations(m, min(len(m), 2))})
    given = option(options, "one_way_share", None)
    share, threshold = compression_options(options, domain, gaussian)
    unnamed = unnamed_attributes(len(domain), measured)
    if not gaussian:
        if share is not None:
            raise ArgumentError("one_way_share is the one-way marginals' share of a Gaussian measurement: give rho "
                                "on a zCDP budget, or epsilon with a delta > 0")
        measured = [*measured, *((a,) for a in unnamed)]
    check_cells("PGM", measured, model_attributes)  # before the weights, whose search takes seconds
    weights = marginal_weights(domain, measured, noise)
    model.check_one_ways(domain, "PGM's smallest model")
    try:
        private.plan(measurement(domain, weights), noise)
    except PrivacyError as e:
        raise reworded(e, f"PGM measures the workload's marginals with {budget.describe(total)}, too little") from None
    subsets = [*weights, *((a,) for a in range(len(domain)))]
    sweeps = len(set(subsets))
    model.check_time("PGM", [], sweeps, request.rows)
    model = model.fit_plan("PGM", domain, subsets, refine_seconds(model.sweeps, sweeps, request.rows or 1))
    if gaussian:
        share = default_one_way_share(domain, unnamed, threshold) if given is None else share
        return plan_pgm_two(private, attributes, request, model, measured, weights, share, threshold,
                            options if adaptive else None)

    def execute(bar: tqdm, rng: np.random.Generator) -> Outcome:
        taken: list[int] = []
        with fit_progress(bar, model.iterations, taken) as advance:
            learned = pgm(private, attributes, weights, noise, cost, model.max_cells, iterations=model.iterations,
                          progress=advance)
        return (*model.table(learned, request, attributes, rng, taken), {}, cost)

    return Run(cost, execute)


def default_one_way_share(domain: Sequence[int], unnamed: Sequence[int], threshold: float | None) -> float:
    """The default share of PGM's budget for every one-way marginal: :data:`~dpsql.synth.plan.model.ONE_WAY_SHARE` times
    the attributes' fraction that the one-way counts alone decide (those of more than two values
    when compressing, and those no workload marginal names), and at least :data:`MIN_ONE_WAY_SHARE`.

    >>> default_one_way_share([2, 2, 2, 2], [], None), default_one_way_share([2, 5, 2, 2], [3], 3.0)
    (0.05, 0.15)
    """
    decided = set(unnamed) | (set(compressible(domain)) if threshold is not None else set())
    return max(MIN_ONE_WAY_SHARE, ONE_WAY_SHARE * len(decided) / len(domain))


def plan_pgm_two(private: PrivateTable, attributes: Sequence[Attribute], request: Request,
                 model: ModelOptions, measured: Sequence[tuple[int, ...]],
                 weights: dict[tuple[int, ...], float], share: float, threshold: float | None,
                 adaptive: dict | None) -> Run:
    """PGM's two Gaussian measurements (:func:`~dpsql.synth.pgm.pgm_compressed`): the whole ``ρ``
    reserved at once, ``share`` of it for every one-way marginal and the rest for the weighted
    marginals, on a domain compressed at ``threshold`` (None: not compressed) and with the
    request's wide columns in bins (:mod:`dpsql.synth.coarsen`). Both
    measurements' noise is planned before the spend: the second's, scaled to L2 sensitivity 1,
    does not depend on the compression.

    Given the request's options as ``adaptive`` (None: ``adaptive=False``), unless one model holds
    every measured marginal on the uncompressed domain already, AIM's rounds are planned too
    (:func:`~dpsql.synth.plan.rounds.aim_rounds`; when they cannot be, as on a workload of more than
    :data:`~dpsql.synth.plan.rounds.AIM_MAX_CANDIDATES` candidates, pgm measures them all). The one-way marginals are
    then measured first with AIM's share (:func:`~dpsql.synth.aim.first_share`, unless ``one_way_share`` is given);
    when their compression leaves the marginals too large for one model, they are measured again, within ``share``, as
    far as their noise is large against the noisy row count (:func:`~dpsql.synth.pgm.one_way_top_up`), and the rest of
    ``ρ`` is spent in those rounds, on a domain where only the rare values that hold at most
    :data:`~dpsql.synth.compress.FEW_ROWS` of a column's rows are merged, else the rest of ``share`` measures the
    one-way marginals again (:class:`~dpsql.synth.pgm.Rounds`). Whether or not one model holds the marginals, a table
    whose first one-way counts show it too small for those rounds gets MST from them instead
    (:meth:`~dpsql.synth.plan.rounds.AimRounds.instead`, planned with them). The ``ρ`` standing for an ``(ε, δ)`` is
    then the one for any zCDP mechanism (AIM's and MST's selections are not Gaussian), otherwise the exact one for
    Gaussian measurements alone."""
    domain = [a.cells for a in binned(attributes, request.wide)]
    tree = junction_tree(domain, [*measured, *((a,) for a in range(len(attributes)))])
    rounds = None
    if adaptive is not None and tree.size > model_limit(model.max_cells):
        try:
            rounds = aim_rounds(private, attributes, request, adaptive, share, tree=True)
        except (ResourceLimitError, PrivacyError):
            pass  # measured all at once, as without adaptive
    rho, cost = request.reservation(gaussian=rounds is None)
    full = [a.size for a in attributes]
    first = share  # the one-way marginals' first measurement: AIM's share when its rounds may follow
    if rounds is not None and option(adaptive, "one_way_share", None) is None:
        first = min(share, first_share(rounds.rounds, len(domain)))
    for what, weighted, part, on in (*first_parts(attributes, request.wide, first),
                                     *first_parts(attributes, request.wide, share - first),
                                     ("weighted", unit_weights(weights), 1 - share, domain)):
        try:
            if part > 0:
                private.plan(measurement(on, weighted), Gaussian(rho=part * rho))
        except PrivacyError as e:
            raise reworded(e, f"PGM's {what} marginals get {part:g} of rho={rho:g}, too little") from None

    def learn(reservation: Reservation, advance: Callable[[int, float], None],
              bar: tqdm) -> tuple[PGMResult, ModelOptions]:
        ran = [model]

        def select(raw: list[Observation], bins: list[Observation]) -> PGMResult:
            ran[0] = dataclasses.replace(rounds.model, estimate="the measured marginals are too large for one model "
                                         "once compressed: AIM's rounds select among them, merging only the rare "
                                         f"values that hold at most {FEW_ROWS:.0%} of a column's rows; "
                                         f"{rounds.model.estimate}")
            rounds.announce()
            return rounds.run(private, attributes, request, rho, reservation, bar, start=(raw, bins))[0]

        def small(raw: list[Observation], bins: list[Observation]) -> PGMResult | None:
            tree = rounds.instead(private, attributes, request, rho, reservation, bar, (raw, bins), advance)
            if tree is None:
                return None
            ran[0] = tree[1]
            return tree[0]

        learned = pgm_compressed(private, attributes, measured, rho, reservation, model.max_cells, share, threshold,
                                 compressible(full), iterations=model.iterations, progress=advance,
                                 binned=request.wide, adaptive=None if rounds is None else Rounds(first, select, small))
        return learned, ran[0]

    return reserved_fit(private, request, attributes, model, cost, {"rho": rho}, "pgm", f"PGM: rho={rho!r}", learn)
