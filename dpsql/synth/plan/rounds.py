"""Planning AIM's rounds (:mod:`dpsql.synth.aim`) within a request: for ``method="aim"``, and for
pgm's adaptive path (:mod:`dpsql.synth.plan.pgm`), which gives a table too small for them MST.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from dpsql.errors import PrivacyError, ResourceLimitError
from dpsql.privacy import Gaussian
from dpsql.private.kernel import PrivateTable, Reservation
from dpsql.schema import Attribute
from dpsql.synth.aim import (
    AIM_ITERATIONS,
    ALPHA,
    TREE_NOISE,
    aim,
    first_measurement,
    first_share,
    round_iterations,
    round_noise,
    too_noisy,
)
from dpsql.synth.aim import candidates as aim_candidates
from dpsql.synth.coarsen import binned
from dpsql.synth.estimate import Observation, estimate_total
from dpsql.synth.mwem import marginal_strategy
from dpsql.synth.options import integer, option
from dpsql.synth.pgm import PGMResult, measurement
from dpsql.synth.plan.model import ModelOptions, compression_options, first_parts
from dpsql.synth.plan.progress import fit_progress, round_progress
from dpsql.synth.plan.request import Outcome, Request, Run, caller, check_cells
from dpsql.synth.plan.tree import MstTree, mst_tree
from dpsql.synth.work import READ, fit_seconds, fitting, refine_seconds

#: Most shares AIM's budget may start in (each round spends at least one).
AIM_MAX_ROUNDS = 1_000_000

#: The most candidate marginals AIM scores (every marginal within a workload marginal): each round
#: builds each one's model and estimates its marginal, 1 to 16 ms each on 30 to 80 columns. The
#: 4,525 candidates of 30 columns' triples (20,000 rows, 2 to 5 values) took 384 to 441 s at
#: (ε, δ) = (1, 10⁻⁶), 80% of it in that scoring; the 35,990 of 60 columns' take minutes a round.
#: With no workload on a wider table, mst picks a spanning tree of pairs instead
#: (:func:`~dpsql.synth.synthesize._default_target`).
AIM_MAX_CANDIDATES = 5_000

#: The fewest rounds per column AIM's default is cut to when 16 a column do not fit in
#: ``max_seconds`` (below it the one-way marginals would take more than half the budget).
AIM_MIN_ROUNDS = 2


def plan_aim(private: PrivateTable, attributes: Sequence[Attribute], request: Request, options: dict,
             tree: bool = False) -> Run:
    """AIM within the request (:mod:`dpsql.synth.aim`): the whole ``ρ`` (or ``(ε, δ)``) is reserved
    at once and spent in adaptive rounds (:func:`aim_rounds`; ``tree``: pgm's default target,
    which gives a table too small for them MST instead)."""
    rounds = aim_rounds(private, attributes, request, options, tree=tree)
    rounds.announce()
    rho, cost = request.reservation()

    def execute(bar: tqdm, rng: np.random.Generator) -> Outcome:
        reservation = private.reserve(cost, f"AIM: rho={rho!r}, T={rounds.rounds}", "aim", rho=rho)
        try:
            start, small = None, None
            if rounds.tree is not None:  # measured here, so that a table too small for the rounds gets MST
                start = first_measurement(private, attributes, rho, reservation, rounds.rounds, rounds.share,
                                          request.wide)
                small = rounds.instead(private, attributes, request, rho, reservation, bar, start)
            learned, ran = small or rounds.run(private, attributes, request, rho, reservation, bar, start)
        finally:
            reservation.close()
        return (*ran.table(learned, request, attributes, rng), {}, cost)

    return Run(cost, execute)


@dataclass(frozen=True)
class AimRounds:
    """AIM's rounds as planned before the spend (:func:`aim_rounds`), for aim and for pgm's
    adaptive path: ``rounds`` shares, the model's options, the one-way marginals' ``share`` of
    ``ρ`` and the compression's ``threshold`` (:func:`~dpsql.synth.plan.model.compression_options`), the ``seconds``
    the rounds may take given the noisy row count, the warnings to give of them (:meth:`announce`), and ``tree``, MST
    as planned for a table too small for the rounds (None: the rounds run whatever the table)."""

    rounds: int
    model: ModelOptions
    share: float | None
    threshold: float | None
    seconds: Callable[[float], float]
    notes: tuple[str, ...] = ()
    tree: MstTree | None = None

    def run(self, private: PrivateTable, attributes: Sequence[Attribute], request: Request, rho: float,
            reservation: Reservation, bar: tqdm,
            start: tuple[list[Observation], list[Observation]] | None = None) -> tuple[PGMResult, ModelOptions]:
        """The rounds drawing ``rho`` from ``reservation``, ``bar`` showing the share of it spent, and
        the options the model was fitted with; ``start``: the one-way marginals already measured
        (pgm's, :func:`~dpsql.synth.aim.aim`)."""
        bar.total, bar.unit = 100, "% of rho"
        return aim(private, attributes, request.marginals, rho, reservation, self.model.max_cells, rounds=self.rounds,
                   iterations=self.model.iterations, one_way_share=self.share, threshold=self.threshold,
                   progress=round_progress(bar), binned=request.wide, seconds=self.seconds,
                   warn=lambda note: warnings.warn(note, stacklevel=caller()), start=start), self.model

    def instead(self, private: PrivateTable, attributes: Sequence[Attribute], request: Request, rho: float,
                reservation: Reservation, bar: tqdm, start: tuple[list[Observation], list[Observation]],
                advance: Callable[[int, float], None] | None = None) -> tuple[PGMResult, ModelOptions] | None:
        """With a ``tree``, on a table whose noisy row count (from the one-way marginals ``start``,
        drawn from ``reservation``) makes the rounds' noise too large
        (:func:`~dpsql.synth.aim.too_noisy`, released counts only): MST from ``start``, drawing the
        rest of ``rho``, its fit on ``bar`` (through ``advance`` when the caller shows it there
        already), with a warning, and the options it was fitted with. Otherwise None, having drawn
        nothing."""
        if self.tree is None:
            return None
        noise, rows = private.rows_per_unit * round_noise(self.rounds, rho), estimate_total(start[0])
        if not too_noisy(noise, start[0]):
            return None
        note = (f"AIM's rounds would measure each marginal with noise of standard deviation {noise:,.1f}, "
                f"{noise / rows:.1%} of the noisy row count ({rows:,.0f}), past {TREE_NOISE:.1%} "
                "(dpsql.synth.aim.TREE_NOISE): MST's spanning tree of pairs is measured instead")
        warnings.warn(note, stacklevel=caller())
        if advance is not None:
            learned = self.tree.learn(private, attributes, request, reservation, advance, start)
        else:
            with fit_progress(bar, self.tree.model.iterations, []) as shown:
                learned = self.tree.learn(private, attributes, request, reservation, shown, start)
        return learned, dataclasses.replace(self.tree.model, estimate=f"{note}; {self.tree.model.estimate}")

    def announce(self) -> None:
        """Warn of what the plan changed (the default rounds cut to those that fit in time)."""
        for note in self.notes:
            warnings.warn(note, stacklevel=caller())


def aim_rounds(private: PrivateTable, attributes: Sequence[Attribute], request: Request, options: dict,
               share: float | None = None, tree: bool = False) -> AimRounds:
    """AIM's rounds within the request, from public values alone (``share``: the one-way
    marginals' share of ``ρ`` when pgm measured them, else :func:`~dpsql.synth.plan.model.compression_options`'s), and
    with ``tree`` (pgm's), MST planned for a table too small for them (:func:`~dpsql.synth.plan.tree.mst_tree`, after
    a first measurement of that share; none when it cannot be planned: the rounds run). Refused up front: a pure ``ε``
    spend (AIM is zCDP), a model of one-way marginals beyond ``max_model_size``, and noise the first round's share
    cannot add (the later rounds' shares are larger), more than :data:`AIM_MAX_ROUNDS` shares, and more than
    :data:`AIM_MAX_CANDIDATES` candidates. The default ``16d`` rounds are cut to those that fit in ``max_seconds``
    (from public values: the schema, the workload and the options), at least :data:`AIM_MIN_ROUNDS` ``d``: fewer
    rounds only spend more each. As the rounds run they price their own work (scoring every candidate included), and
    end, the last spending all that is left, within what the last fit and sampling the rows leave of
    ``max_seconds``."""
    total = request.total
    model = ModelOptions.of(options, AIM_ITERATIONS)
    model_attributes = binned(attributes, request.wide)
    domain = [a.cells for a in model_attributes]  # the model's: a wide column's bins (dpsql.synth.coarsen)
    given = option(options, "rounds", None) is not None
    rounds = integer("rounds", option(options, "rounds", 16 * len(domain)), high=AIM_MAX_ROUNDS)
    default, threshold = compression_options(options, domain, True)
    share = default if share is None else share
    if not (request.zcdp or total.delta > 0):
        raise PrivacyError("AIM is zCDP: give rho on a zCDP budget, or epsilon with a delta > 0 (method='pgm' "
                           "takes a pure epsilon)")
    rho, _ = request.reservation()
    model.check_one_ways(domain, "AIM's first model")
    scored = aim_candidates(request.marginals)
    if len(scored) > AIM_MAX_CANDIDATES:
        raise ResourceLimitError(f"AIM scores every marginal within the workload's, {len(scored):,} here, in every "
                                 f"round, and past {AIM_MAX_CANDIDATES:,} its rounds do not fit in minutes; give a "
                                 "workload of fewer marginals, or use method='pgm', which measures them all at once")
    fits = [m for m in scored if math.prod(domain[a] for a in m) <= model.max_cells]
    check_cells("AIM", fits, model_attributes)
    largest = max(fits, key=lambda m: math.prod(domain[a] for a in m))
    cells = min(model.max_cells, sum(math.prod(domain[a] for a in m) for m in fits))
    refit = fit_seconds(round_iterations(300, cells), cells) / 2  # the model grows from one-way marginals
    last = fit_seconds(model.iterations, cells)
    notes: list[str] = []
    if not given:  # the default, 16 a column, capped to the rounds that fit in time
        rows = request.rows or 1  # each round adds a marginal to the sweeps, as check_time counts them
        fit = fitting(model.max_seconds, last + refine_seconds(model.sweeps, len(domain), rows),
                      2 * READ + refit + refine_seconds(model.sweeps, 1, rows), rounds)
        if fit < rounds and fit >= AIM_MIN_ROUNDS * len(domain):
            notes.append(f"AIM's default of 16 rounds per column (rounds={rounds:,}) does not fit in "
                         f"max_seconds={model.max_seconds:g}: running rounds={fit:,}, whose rounds each spend more")
            rounds = fit
    planned = rounds * (2 * READ + refit)
    marginals = min(rounds, len(fits)) + len(domain)
    try:
        model = model.check_time("AIM", [(f"rounds={rounds}", planned), (f"iterations={model.iterations}", last)],
                                 marginals, request.rows)
    except ResourceLimitError as e:
        if given:
            raise
        raise ResourceLimitError(f"{e}; AIM's default rounds, 16 per column and at least {AIM_MIN_ROUNDS} in time, "
                                 "do not fit: give a workload of fewer marginals") from None

    def seconds(total: float) -> float:
        """The time the rounds may take, as they price it running: what the last fit and sampling
        the rows (the default: the noisy count ``total``) leave, and at least half of what one
        row would (the rows are then capped, :meth:`~dpsql.synth.plan.model.ModelOptions.table`)."""
        rows = request.rows if request.rows is not None else max(round(total), 1)
        left = [model.max_seconds - last - refine_seconds(model.sweeps, marginals, n) for n in (rows, 1)]
        return max(left[0], left[1] / 2)

    model = dataclasses.replace(model, estimate=f"{model.estimate}; the rounds end within what the last fit and the "
                                                "sampling leave of max_seconds, as they price their own work")
    private.plan(marginal_strategy(domain, largest), Gaussian(rho=ALPHA * rho / rounds))  # the smallest share
    for _, weighted, part, on in first_parts(attributes, request.wide, share) if share is not None else ():
        private.plan(measurement(on, weighted), Gaussian(rho=part * rho))

    small = None
    if tree:
        try:
            small = mst_tree(private, attributes, request, options,
                             first_share(rounds, len(domain)) if share is None else share)
        except (ResourceLimitError, PrivacyError):
            pass  # the rounds run whatever the table
    return AimRounds(rounds, model, share, threshold, seconds, tuple(notes), small)
