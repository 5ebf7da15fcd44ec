"""Wide columns, and columns no workload marginal names, for the methods that measure no one-way
marginal (mwem, dualquery, fem; pgm under a pure epsilon): those columns' one-way marginals
measured at full resolution, the method run on the attributes with them in bins.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from dpsql.errors import PrivacyError
from dpsql.privacy import Gaussian, Laplace, NoiseModel
from dpsql.private.budget import Cost
from dpsql.private.kernel import PrivateTable
from dpsql.schema import Attribute
from dpsql.synth.coarsen import WIDE_SHARE, binned, coarsen
from dpsql.synth.compress import compress
from dpsql.synth.pgm import measurement, one_way_counts, one_way_weights
from dpsql.synth.plan.report import note_alone
from dpsql.synth.plan.request import Outcome, Request, Run, reworded


def plan_binned(private: PrivateTable, attributes: Sequence[Attribute], request: Request,
                planner: Callable[[PrivateTable, Sequence[Attribute], Request, dict], Run], options: dict,
                alone: Sequence[int] = ()) -> Run:
    """A method that measures no one-way marginal (mwem, fem, dualquery; pgm under a pure ``ε``)
    on a request with wide columns (:mod:`dpsql.synth.coarsen`), or with columns no workload
    marginal names (``alone``, each one bin): :data:`~dpsql.synth.coarsen.WIDE_SHARE` of the
    request measures those columns' one-way marginals at full resolution (Laplace noise
    under a pure ``ε`` or an ``(ε, δ)`` spend, Gaussian under a ``ρ`` one), the method runs with
    the rest on the attributes with those columns in bins, and each sampled bin becomes one of
    its values, drawn by those counts (:func:`~dpsql.synth.coarsen.coarsen`): a column ``alone``
    keeps its distribution, not its relation to the others, and the report lists it. The two
    spends compose: they add up (basic composition; zCDP's, Bun & Steinke 2016, Lemma 2.3)."""
    total, budget = request.total, request.budget
    which = sorted(request.wide)
    names = ", ".join(attributes[a].name for a in which)
    what = "wide columns" if not alone else "columns no workload marginal names" if len(alone) == len(which) \
        else "wide columns and those no workload marginal names"
    if request.zcdp:
        noise: NoiseModel = Gaussian(rho=WIDE_SHARE * total.rho)
        cost, rest = Cost.gaussian(budget, rho=WIDE_SHARE * total.rho), Cost(rho=(1 - WIDE_SHARE) * total.rho)
    else:
        noise, cost = Laplace(WIDE_SHARE * total.epsilon), Cost.laplace(WIDE_SHARE * total.epsilon, budget)
        rest = Cost(epsilon=(1 - WIDE_SHARE) * total.epsilon, delta=total.delta)
    full = [a.size for a in attributes]
    try:
        private.plan(measurement(full, one_way_weights(which)), noise)
    except PrivacyError as e:
        raise reworded(e, f"the one-way marginals of the {what} ({names}) get {WIDE_SHARE:g} of "
                         f"{budget.describe(total)}, too little") from None
    inner = planner(private, binned(attributes, request.wide), dataclasses.replace(request, total=rest, wide={}),
                    options)

    def execute(bar: tqdm, rng: np.random.Generator) -> Outcome:
        one_way = one_way_counts(private, attributes, which, noise, cost, f"one-way marginals of {names}")
        records, report, oracle, spent = inner.execute(bar, rng)
        laplace = isinstance(noise, Laplace)
        values = coarsen(compress(full, []), request.wide, one_way, laplace=laplace).expand(records, rng)
        if alone:
            note_alone(report, [attributes[a] for a in alone])
        return values, report, oracle, cost + spent

    return Run(cost + inner.cost, execute)
