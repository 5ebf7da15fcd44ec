"""Planning MST (:mod:`dpsql.synth.mst`) within a request: for ``method="mst"``, and for a
table too small for AIM's rounds (:meth:`~dpsql.synth.plan.rounds.AimRounds.instead`).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Callable, Sequence

from dpsql.errors import PrivacyError
from dpsql.privacy import Gaussian, Laplace
from dpsql.private.budget import Cost
from dpsql.private.kernel import PrivateTable, Reservation
from dpsql.private.measure import MAX_GROUPING_SETS
from dpsql.schema import Attribute
from dpsql.synth.coarsen import binned
from dpsql.synth.compress import compressible
from dpsql.synth.estimate import Observation
from dpsql.synth.mst import candidate_pairs as mst_candidates
from dpsql.synth.mst import mst, picks
from dpsql.synth.pgm import PGM_ITERATIONS, PGMResult, measurement, unit_weights
from dpsql.synth.plan.model import ModelOptions, compression_options, first_parts, reserved_fit
from dpsql.synth.plan.request import Request, Run, check_cells, reworded
from dpsql.synth.work import READ, fit_seconds, refine_seconds


def plan_mst(private: PrivateTable, attributes: Sequence[Attribute], request: Request, options: dict) -> Run:
    """MST within the request (:mod:`dpsql.synth.mst`): the whole ``ρ`` (or ``(ε, δ)``), or a pure
    ``ε`` (Laplace measurements), reserved at once, a third each for the one-way marginals (and the
    wide columns' in their bins: :func:`~dpsql.synth.pgm.full_share`), the picks among the pairs
    within the workload's marginals, and the measurement of the pairs picked (:func:`mst_tree`)."""
    tree = mst_tree(private, attributes, request, options)
    return reserved_fit(private, request, attributes, tree.model, tree.cost, {tree.name: tree.budget}, "mst",
                        f"MST: {tree.name}={tree.budget!r}, {tree.count} picks",
                        lambda reservation, advance, bar: (tree.learn(private, attributes, request, reservation,
                                                                       advance), tree.model))


@dataclass(frozen=True)
class MstTree:
    """MST as planned before the spend (:func:`mst_tree`), for mst and for AIM's rounds on a table too
    small for them (:meth:`~dpsql.synth.plan.rounds.AimRounds.instead`): the candidate ``pairs`` and the ``count`` of
    picks, the model's options, the compression's ``threshold``, and the ``budget`` (``name``: ``rho`` or a pure
    ``epsilon``) with its ``cost`` in the ledger."""

    pairs: list[tuple[int, int]]
    count: int
    model: ModelOptions
    threshold: float | None
    budget: float
    name: str
    cost: Cost

    def learn(self, private: PrivateTable, attributes: Sequence[Attribute], request: Request,
              reservation: Reservation, advance: Callable[[int, float], None],
              start: tuple[list[Observation], list[Observation]] | None = None) -> PGMResult:
        """MST drawing the whole allowance of ``reservation``, its fit shown by ``advance``; ``start``:
        the one-way marginals already measured (:func:`~dpsql.synth.mst.mst`)."""
        return mst(private, attributes, self.pairs, reservation, self.model.max_cells, self.threshold,
                   compressible([a.size for a in attributes]), iterations=self.model.iterations, progress=advance,
                   binned=request.wide, start=start)


def mst_tree(private: PrivateTable, attributes: Sequence[Attribute], request: Request, options: dict,
             spent: float = 0.0) -> MstTree:
    """MST within the request, from public values alone. Refused up front: noise either
    measurement's share cannot add (a third each, or, after a first measurement of the one-way
    marginals that may take ``spent`` of the budget, half each of what it leaves), and a run whose
    fit cannot take :data:`~dpsql.synth.work.MIN_FIT_STEPS` steps in ``max_seconds`` (priced on a
    forest of the largest pairs, which any the picks make is at most:
    :meth:`~dpsql.synth.plan.model.ModelOptions.forest_plan`)."""
    total = request.total
    pure = not (request.zcdp or total.delta > 0)
    model = ModelOptions.of(options, PGM_ITERATIONS)
    model_attributes = binned(attributes, request.wide)
    domain = [a.cells for a in model_attributes]  # the model's: a wide column's bins (dpsql.synth.coarsen)
    _, threshold = compression_options(options, domain, True)
    if pure:
        budget, cost, name = total.epsilon, Cost.laplace(total.epsilon, request.budget), "epsilon"
    else:
        (budget, cost), name = request.reservation(), "rho"
    model.check_one_ways(domain, "MST's model")
    pairs = mst_candidates(request.marginals)
    if pairs:
        check_cells("MST", pairs, model_attributes)
    count = picks(len(domain), pairs)
    size = {p: math.prod(domain[a] for a in p) for p in pairs}
    largest = heapq.nlargest(count, pairs, key=size.__getitem__)  # any forest the picks make is at most these
    one_way = max(1 / 3, spent) if count else 1
    # the pairs' noise, their weights scaled to L2 norm 1, is the same whichever are picked
    for what, weighted, part, on in (*first_parts(attributes, request.wide, one_way),
                                     ("picked", unit_weights({p: 1.0 for p in largest}), (1 - one_way) / 2, domain)):
        try:
            if weighted:
                private.plan(measurement(on, weighted), Laplace(part * budget) if pure else Gaussian(rho=part * budget))
        except PrivacyError as e:
            raise reworded(e, f"MST's {what} marginals get {part:.3g} of {name}={budget:g}, too little") from None
    marginals = count + len(domain)
    model.check_time("MST", [], marginals, request.rows)
    # two measurements and the first pick's counting; each pick a pass over the pairs' cells
    picking = READ * (2 + math.ceil(len(pairs) / MAX_GROUPING_SETS)) + count * fit_seconds(1, sum(size.values()))
    model = model.forest_plan("MST", sum(size[p] for p in largest) + sum(domain), marginals,
                              picking + refine_seconds(model.sweeps, marginals, request.rows or 1))
    return MstTree(pairs, count, model, threshold, budget, name, cost)
