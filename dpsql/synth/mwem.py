"""MWEM: the multiplicative weights exponential mechanism (Hardt, Ligett & McSherry 2012).

Over a workload of marginals (each a set of attributes whose every cell is a
counting query), MWEM keeps a public estimate of the data distribution and, for
``T`` rounds:

1. selects, with the exponential mechanism, a marginal the estimate answers
   badly (score: L1 distance between the true and the estimated marginal);
2. measures it with Laplace noise (one unit changes a marginal by at most
   ``k`` in L1);
3. moves the estimate toward the measurement by multiplicative weights.

The paper's practical improvements (its §2.3.2) are options: keep the final
estimate rather than the average (``average=False``, the default), replay
the multiplicative-weights update over all past measurements
(``replays``), and start from noisy one-way marginals instead of the uniform
distribution (``init="noisy"``). The estimate is a
:class:`~dpsql.synth.factored.FactoredDistribution` (the paper's §4), so it
never holds the full domain.

**Guarantee.** ε-DP with respect to adding or removing one privacy unit, by
sequential composition of ``S = 2T + 1`` (``2T + 2`` with the noisy
initialization) steps of ``ε/S``-DP each: a noisy total (the estimate's
scale ``n``), ``T`` exponential-mechanism selections and ``T`` Laplace
measurements; the initialization measures every one-way marginal together,
with L1 sensitivity ``k · d`` (one unit changes ``d`` one-way marginals).
Under a zCDP budget ρ each step is ``√(2ρ/S)``-DP, hence ``ρ/S``-zCDP
(Bun & Steinke, Prop. 1.4), ρ in all. Each step is recorded in the ledger as
it is taken; the whole run is checked against the budget before it starts,
and everything that could fail once it has begun is checked before that
(:func:`check_mwem`). MWEM spends no δ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from dpsql.errors import ResourceLimitError, WorkloadError
from dpsql.hdmm.matrix import Identity, Total
from dpsql.hdmm.strategy import KronStrategy, UnionStrategy
from dpsql.limits import MAX_MEASURED_CELLS
from dpsql.privacy import Laplace
from dpsql.private.budget import Cost
from dpsql.private.kernel import PrivateTable
from dpsql.schema import Attribute
from dpsql.synth.factored import MAX_GROUP_CELLS, FactoredDistribution
from dpsql.synth.options import choice, flag, integer

__all__ = ["MWEMResult", "check_mwem", "marginal_strategy", "mwem", "mwem_steps", "INITS"]

#: How MWEM's estimate starts: the uniform distribution, or the product of noisy one-way marginals.
INITS = ("uniform", "noisy")


@dataclass
class MWEMResult:
    """The learned distribution and every measurement MWEM released."""

    distribution: FactoredDistribution
    measurements: list[tuple[tuple[int, ...], np.ndarray]] = field(default_factory=list)
    selected: list[int] = field(default_factory=list)
    step_epsilon: float = 0.0


def check_mwem(table: PrivateTable, attributes: Sequence[Attribute], workload: Sequence[tuple[int, ...]],
               step_epsilon: float, rounds: int = 10, replays: int = 100, init: str = "uniform",
               average: bool = False) -> None:
    """Refuse, before anything is read or spent, every MWEM run that could fail once it has begun.

    The options' types and ranges (``rounds`` and ``replays`` integers >= 1, ``init`` one of
    :data:`INITS`, ``average`` a bool); a workload with a marginal MWEM can measure (at most
    :data:`~dpsql.synth.factored.MAX_GROUP_CELLS` cells; larger ones are never selected) and
    whose candidates the selection can count at once (:data:`~dpsql.limits.MAX_MEASURED_CELLS`);
    ``average=True`` only on a domain small enough to hold whole; and Laplace noise at
    ``step_epsilon`` for every measurement the run takes (the lattice noise has a floor on
    ``ε`` per changed coordinate, :func:`~dpsql.private.noise.laplace_lattice`).
    """
    integer("rounds", rounds)
    integer("replays", replays)
    choice("init", init, INITS)
    flag("average", average)
    domain = tuple(a.cells for a in attributes)
    workload = [tuple(sorted(q)) for q in workload]
    if not workload:
        raise WorkloadError("MWEM needs a non-empty workload of marginals")
    sizes = {q: math.prod(domain[a] for a in q) for q in workload}
    candidates = [q for q, cells in sizes.items() if cells <= MAX_GROUP_CELLS]
    if not candidates:
        raise WorkloadError(f"every marginal of the workload has more than {MAX_GROUP_CELLS:,} cells, which "
                            "MWEM never measures; choose smaller marginals")
    if sum(sizes[q] for q in candidates) > MAX_MEASURED_CELLS:
        raise ResourceLimitError(f"MWEM's selection counts every marginal of the workload, "
                                 f"{sum(sizes[q] for q in candidates):,} cells in all, more than the limit of "
                                 f"{MAX_MEASURED_CELLS:,}; choose fewer or smaller marginals")
    if average and math.prod(domain) > MAX_GROUP_CELLS:
        raise WorkloadError(f"averaging MWEM iterates needs the full domain of {math.prod(domain):,} cells, more "
                            f"than {MAX_GROUP_CELLS:,}; use average=False")
    noise = Laplace(step_epsilon)
    plans = [marginal_strategy(domain, ())] + ([_one_way_marginals(domain)] if init == "noisy" else [])
    for strategy in plans:  # a marginal measurement has the total's sensitivity and changed coordinates
        table.plan(strategy, noise)


def _one_way_marginals(domain: Sequence[int]) -> UnionStrategy:
    """Every one-way marginal, stacked into one measurement (the noisy start)."""
    d = len(domain)
    return UnionStrategy([marginal_strategy(domain, (a,)) for a in range(d)], [1.0] * d, [[a] for a in range(d)])


def mwem_steps(rounds: int, init: str = "uniform") -> int:
    """How many equal ε shares one run takes: the total, two per round, and one for a noisy start."""
    return 2 * rounds + 1 + (1 if init == "noisy" else 0)


def marginal_strategy(domain: Sequence[int], subset: Sequence[int]) -> KronStrategy:
    """The strategy measuring one marginal: identity on its attributes, totals elsewhere."""
    return KronStrategy(tuple(Identity(n) if a in subset else Total(n) for a, n in enumerate(domain)))


def mwem(table: PrivateTable, attributes: Sequence[Attribute], workload: Sequence[tuple[int, ...]],
         step_epsilon: float, step_cost: Cost, rounds: int = 10, replays: int = 100,
         init: str = "uniform", average: bool = False, progress: Callable[[int], None] | None = None) -> MWEMResult:
    """Run MWEM on a private table (see the module docstring for the guarantee).

    ``workload``: marginals as sorted tuples of attribute positions. Each of
    the :func:`mwem_steps` steps is ``step_epsilon``-DP and spends
    ``step_cost`` in the ledger's currency (``ε/steps`` each for a pure-DP
    budget of ε; ``√(2ρ/steps)``, costing ``ρ/steps``, for a zCDP budget of ρ).
    """
    check_mwem(table, attributes, workload, step_epsilon, rounds, replays, init, average)
    workload = [tuple(sorted(q)) for q in workload]
    domain = tuple(a.cells for a in attributes)
    eps, step = step_epsilon, step_cost
    table.check(_times(step, mwem_steps(rounds, init)))
    noise = Laplace(eps)

    def measure(subset: tuple[int, ...], what: str) -> np.ndarray:
        return table.measure(attributes, marginal_strategy(domain, subset), noise, step,
                             f"MWEM {what} {subset}").values

    total = max(float(measure((), "total")[0]), 1.0)
    dist = FactoredDistribution(domain, total)
    result = MWEMResult(dist, step_epsilon=eps)
    if init == "noisy":
        _noisy_start(table, attributes, dist, eps, step)
    history: list[FactoredDistribution] = []
    for r in range(rounds):
        candidates = [q for q in workload if dist.merged_cells(q) <= MAX_GROUP_CELLS]
        j = table.select_marginal(attributes, candidates, [dist.marginal(q) for q in candidates], eps, step,
                                  f"MWEM round {r + 1} selection")
        chosen = candidates[j]
        values = measure(chosen, f"round {r + 1} marginal")
        result.selected.append(workload.index(chosen))
        result.measurements.append((chosen, values))
        for _ in range(replays):
            for subset, m in result.measurements:
                dist.update(subset, m)
        if average:
            history.append(_copy(dist))
        if progress:
            progress(r + 1)
    if average:
        result.distribution = _average(history)
    return result


def _noisy_start(table: PrivateTable, attributes: Sequence[Attribute], dist: FactoredDistribution, eps: float,
                 step: Cost) -> None:
    """Measure every one-way marginal at once (L1 sensitivity d per unit) and start from their product."""
    union = _one_way_marginals(dist.domain)  # one stacked measurement
    values = table.measure(attributes, union, Laplace(eps), step, "MWEM noisy initialization").values
    offset = 0
    for a, n in enumerate(dist.domain):
        counts = np.clip(values[offset:offset + n], 0.0, None) + 1e-3 * dist.total / n
        dist.groups[a] = ((a,), np.log(counts / counts.sum()))
        offset += n


def _times(cost: Cost, k: int) -> Cost:
    return Cost(epsilon=cost.epsilon * k, delta=cost.delta * k, rho=cost.rho * k)


def _copy(dist: FactoredDistribution) -> FactoredDistribution:
    out = FactoredDistribution(dist.domain, dist.total)
    out.groups = [(attrs, t.copy()) for attrs, t in dist.groups]
    return out


def _average(history: list[FactoredDistribution]) -> FactoredDistribution:
    """The average of the iterates (the paper's theoretical output). Averages of
    product distributions are not products, so the groups of the last iterate
    are merged into one table; refused if that would be too large."""
    last = history[-1]
    cells = math.prod(last.domain)
    if cells > MAX_GROUP_CELLS:
        raise WorkloadError("averaging MWEM iterates needs the full domain; use average=False")
    out = FactoredDistribution(last.domain, last.total)
    mean = sum(h.marginal(tuple(range(len(h.domain)))) for h in history) / len(history)
    out.groups = [(tuple(range(len(last.domain))), np.log(np.maximum(mean, 1e-300)).reshape(last.domain))]
    return out
