"""The graphical model's options shared by pgm, aim and mst (:class:`ModelOptions`): its size
limit, its fit's steps and time within ``max_seconds`` (priced from public values before the
charge), the domain's compression, and the run whose whole budget is reserved at once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from dpsql.errors import ArgumentError, ResourceLimitError
from dpsql.private.budget import Cost
from dpsql.private.kernel import PrivateTable, Reservation
from dpsql.schema import Attribute
from dpsql.synth.coarsen import binned
from dpsql.synth.compress import THRESHOLD, compressible
from dpsql.synth.estimate import pool, total_std
from dpsql.synth.options import integer, option, real
from dpsql.synth.pgm import PGMResult, fit_cells, full_share, one_way_weights, planned_model
from dpsql.synth.plan.progress import fit_progress
from dpsql.synth.plan.report import measured_report, note_alone
from dpsql.synth.plan.request import Outcome, Request, Run
from dpsql.synth.work import (
    MIN_FIT_STEPS,
    REFINE_ROW,
    Work,
    fit_seconds,
    fitting,
    max_seconds,
    refine_seconds,
    structure_seconds,
)

if TYPE_CHECKING:
    import pandas as pd


#: The default share of the budget (pgm's and aim's) for the one-way marginals that decide a
#: compressed domain, when every attribute has more than two values (else in proportion to the
#: attributes that do).
ONE_WAY_SHARE = 0.3


@dataclass(frozen=True)
class ModelOptions:
    """The graphical model's options, shared by pgm, aim and mst: fit ``iterations``, refinement
    ``sweeps``, the model's size limit, ``megabytes`` of float64 cells, and ``max_seconds``;
    ``fit`` is the estimated seconds of the run before the sampling (:mod:`dpsql.synth.work`)."""

    iterations: int
    sweeps: int
    megabytes: float
    max_seconds: float
    fit: float = 0.0
    cells: int | None = None
    estimate: str = ""
    besides: float = 0.0

    @classmethod
    def of(cls, options: dict, iterations: int) -> "ModelOptions":
        """The options given, with ``iterations`` the method's default most fit steps."""
        return cls(integer("iterations", option(options, "iterations", iterations)),
                   integer("sweeps", option(options, "sweeps", 30), low=0),
                   real("max_model_size", option(options, "max_model_size", 10.0)), max_seconds(options))

    def check_time(self, method: str, fit: list[tuple[str, float]], marginals: int,
                   rows: int | None) -> "ModelOptions":
        """Refuse a run whose ``fit`` terms and refinement of ``rows`` records (at least one; the
        default rows are capped after the spend, :meth:`table`) toward ``marginals`` measured
        marginals exceed ``max_seconds``; these options with the fit's estimate."""
        sweeps = (f"sweeps={self.sweeps} of {marginals} marginals" + (f" over rows={rows}" if rows else ""),
                  refine_seconds(self.sweeps, marginals, rows or 1))
        Work(method, [*fit, sweeps]).check(self.max_seconds)
        estimate = "; ".join(f"{what}: about {seconds:,.0f} s" for what, seconds in fit)
        return dataclasses.replace(self, fit=sum(s for _, s in fit), estimate=estimate)

    def fit_plan(self, method: str, domain: Sequence[int], subsets: Sequence[tuple[int, ...]],
                 fixed: float) -> "ModelOptions":
        """These options with the model and the fit that ``max_seconds`` allows after ``fixed``
        seconds of other work, from public values alone (:func:`~dpsql.synth.pgm.planned_model`):
        the model of ``subsets`` within ``max_model_size``, or, when its fit could not take
        :data:`~dpsql.synth.work.MIN_FIT_STEPS` steps in time, a smaller one (the limit halved
        until they fit: the model is then selected under it, :func:`~dpsql.synth.pgm.model_structure`),
        and at most the steps that fit in half the time left (the rest samples the default rows,
        whose number is a noisy count). The search for a model is priced at each limit tried
        (:func:`~dpsql.synth.pgm.planned_model`): a model of every measured set may fit the
        limit given and not a halved one. Refused, before anything is charged, when not even a
        model of the one-way marginals fits."""
        least = min(MIN_FIT_STEPS, self.iterations)
        limit, other = self.max_cells, fixed
        while True:
            cells, passes, trials = planned_model(domain, subsets, limit)
            fixed = other + structure_seconds(trials, len(domain))
            each = fit_seconds(1, passes)
            if fixed + least * each <= self.max_seconds or cells <= sum(domain):
                break
            limit = max(cells // 2, sum(domain))
        return self._steps(f"{method}'s model of {len(subsets)} marginals, even at its smallest ({cells:,} cells),",
                           cells, limit, each, fixed)

    def forest_plan(self, method: str, cells: int, marginals: int, fixed: float) -> "ModelOptions":
        """These options with the fit that ``max_seconds`` allows after ``fixed`` seconds of other
        work of a model of at most ``cells`` cells whose cliques hold each of its ``marginals``
        measured sets (a forest of pairs, and the one-way marginals): each step passes over the
        cliques and each set once. Refused, before anything is charged, when it cannot take
        :data:`~dpsql.synth.work.MIN_FIT_STEPS` steps in time."""
        return self._steps(f"{method}'s model of {marginals} marginals ({cells:,} cells at most)", cells,
                           self.max_cells, fit_seconds(1, 2 * cells), fixed)

    def _steps(self, model: str, cells: int, limit: int, each: float, fixed: float) -> "ModelOptions":
        """These options with a fit of ``each`` seconds a step, after ``fixed`` seconds of other work,
        of a ``model`` of ``cells`` cells within ``limit``: at most the steps that fit in half the
        time left (the rest samples the default rows, whose number is a noisy count), and at least
        :data:`~dpsql.synth.work.MIN_FIT_STEPS`, else refused."""
        least = min(MIN_FIT_STEPS, self.iterations)
        if fixed + least * each > self.max_seconds:
            raise ResourceLimitError(f"{model} takes about {each:.2g} s a fit step: {least} steps and the rest of the "
                                     f"run ({fixed:,.0f} s) exceed max_seconds={self.max_seconds:g}; choose fewer "
                                     "marginals, or raise max_seconds (estimates: dpsql.synth.work)")
        steps = max(least, fitting(self.max_seconds - (self.max_seconds - fixed) / 2, fixed, each, self.iterations))
        estimate = (f"a model of {cells:,} cells (within {limit:,}), about {each:.2g} s a fit step; at most "
                    f"{steps:,} steps ({steps * each:,.0f} s), stopping once converged; about {fixed:,.0f} s besides")
        return dataclasses.replace(self, iterations=steps, cells=limit, fit=fixed + steps * each, estimate=estimate,
                                   besides=fixed)

    @property
    def max_cells(self) -> int:
        return self.cells if self.cells is not None else int(self.megabytes * 2**20 / 8)

    @property
    def limit(self) -> str:
        return f"max_model_size={self.megabytes:g} MB ({self.max_cells:,} float64 cells)"

    def check_one_ways(self, domain: Sequence[int], model: str) -> None:
        """Refuse a limit that cannot hold ``model``, a model of every one-way marginal."""
        if sum(domain) > self.max_cells:
            raise ResourceLimitError(f"{model} holds every one-way marginal, {sum(domain):,} cells, more than "
                                     f"{self.limit} holds")

    def table(self, learned: PGMResult, request: Request, attributes: Sequence[Attribute],
              rng: np.random.Generator, taken: Sequence[int] = ()) -> tuple[np.ndarray, "pd.DataFrame"]:
        """The records sampled from a fitted model (``request.rows``, or its noisy total, as many as
        the time left allows) and their report. The time left counts the fit's steps ``taken`` (its
        last, when given), not the most planned: a fit that converged early left the default rows
        of 24 binary columns capped at 6,325 of 10,043 by the 200 steps planned (537 s), in a run
        of 26 s. And it prices them on the model fitted (released values), not the plan's bound for
        a greedy one (each set summed from a clique of the whole limit): on every pair of 60
        columns, 0.1 s a step, not 2.4 s, and the default 19,999 rows, not 3,928."""
        total = learned.model.total
        marginals = len({o.subset for o in learned.observations})
        fit = self.fit if learned.work is None else learned.work
        if taken:
            each = fit_seconds(1, fit_cells(learned.model.tree, [o.subset for o in learned.observations]))
            fit = self.besides + min(taken[-1], self.iterations) * each
        in_time = fitting(self.max_seconds, fit + refine_seconds(self.sweeps, marginals, 0),
                          self.sweeps * marginals * REFINE_ROW, 2**62)
        n = request.rows if request.rows is not None else \
            request.default_rows(total, "noisy row count", total_std(learned.observations), in_time)
        records = learned.sample(n, rng, self.sweeps)
        c = learned.compression  # the report compares on the domain the measurements counted
        counted, axes = (records, attributes) if c is None else (c.apply(records), c.attributes(attributes))
        # one row a measured set: its measurements' precision-weighted mean (aim re-measures sets)
        report = measured_report([(o.subset, o.values, o.cells) for o in pool(learned.observations)], total, counted,
                                 axes, n)
        # joined: measured with another column of more than one value (one of a single value, which
        # OPT_M's Laplace weights add to a marginal for free, relates nothing)
        varied = [{a for a in o.subset if attributes[a].size > 1} for o in learned.observations]
        joined = set().union(*(v for v in varied if len(v) > 1))
        report.attrs["estimate"] = self.estimate
        note_alone(report, [a for i, a in enumerate(attributes) if i not in joined])
        return records, report


def compression_options(options: dict, domain: Sequence[int], first: bool) -> tuple[float | None, float | None]:
    """The options ``one_way_share`` (in (0, 1)) and ``compress`` (a threshold in standard deviations,
    or False), with their defaults: when the method measures the one-way marginals ``first`` (aim,
    mst, and pgm under Gaussian noise), compression at :data:`~dpsql.synth.compress.THRESHOLD` with the one-way
    marginals taking :data:`ONE_WAY_SHARE` times the attributes' fraction that has more than two values. None for no
    compression: when it is off, or no attribute is :func:`~dpsql.synth.compress.compressible`."""
    share = option(options, "one_way_share", None)
    share = None if share is None else real("one_way_share", share, below_one=True)
    threshold = option(options, "compress", THRESHOLD if first else False)
    threshold = None if threshold is False else real("compress", threshold)
    if threshold is not None and not first:
        raise ArgumentError("pgm compresses under Gaussian noise only, whose one-way marginals it measures first: "
                            "give rho on a zCDP budget, or epsilon with a delta > 0 (mst compresses under either)")
    merged = compressible(domain)
    if threshold is None or not merged:
        return share, None
    return (ONE_WAY_SHARE * len(merged) / len(domain) if share is None else share), threshold


def first_parts(attributes: Sequence[Attribute], wide: dict[int, np.ndarray],
                part: float) -> list[tuple[str, dict[tuple[int, ...], float], float, list[int]]]:
    """The measurements of :func:`~dpsql.synth.pgm.first_counts` at ``part`` of the budget, for a
    planner to plan before the spend: what each counts, its weights, its part, and its domain."""
    share = full_share(len(attributes), len(wide))
    parts = [("one-way", one_way_weights(range(len(attributes))), part * share, [a.size for a in attributes])]
    if wide:
        parts.append(("wide columns' binned one-way", one_way_weights(wide), part * (1 - share),
                      [a.cells for a in binned(attributes, wide)]))
    return parts


def reserved_fit(private: PrivateTable, request: Request, attributes: Sequence[Attribute], model: ModelOptions,
                 cost: Cost, allowance: dict[str, float], mechanism: str, description: str,
                 learn: Callable[[Reservation, Callable[[int, float], None], tqdm],
                                  tuple[PGMResult, ModelOptions]]) -> Run:
    """The run of a graphical-model method (pgm's two measurements, mst) whose whole budget is
    reserved at once (``cost`` in the ledger, ``allowance`` its ``rho`` or pure ``epsilon``:
    :meth:`~dpsql.private.kernel.PrivateTable.reserve`) before ``learn`` draws on the reservation
    and fits the model, its fit shown converging; the table is sampled from the model fitted,
    with the options ``learn`` ran it with (``model``'s, or aim's rounds' for pgm's adaptive path)."""

    def execute(bar: tqdm, rng: np.random.Generator) -> Outcome:
        reservation = private.reserve(cost, description, mechanism, **allowance)
        taken: list[int] = []
        try:
            with fit_progress(bar, model.iterations, taken) as advance:
                learned, ran = learn(reservation, advance, bar)
        finally:
            reservation.close()
        return (*ran.table(learned, request, attributes, rng, taken), {}, cost)

    return Run(cost, execute)
