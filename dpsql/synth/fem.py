"""FEM: follow-the-perturbed-leader with the exponential mechanism (Vietri, Tian, Bun, Steinke & Wu 2020).

Each of ``T`` rounds:

1. the data player draws ``s`` records by follow-the-perturbed-leader: each
   solves ``argmin_x Σ_{i<t} (q_i(D) − q_i(x)) + ⟨x, σ⟩`` over one-hot
   records ``x`` with fresh ``σ`` i.i.d. Exponential of scale ``m√T``,
   i.e. it maximizes ``Σ_{i<t} q_i(x) − ⟨x, σ⟩`` (the oracle of
   :mod:`dpsql.synth.oracle`); ``D_t`` is those ``s`` records;
2. the exponential mechanism picks the query, among every workload cell query
   and its negation, that ``D_t`` answers worst: score ``q(D) − q(D_t)``
   (the only private step, :meth:`~dpsql.private.kernel.PrivateTable.sample_cells`);
3. that query joins the leader's loss.

The output is the union of the ``D_t``.

**Guarantee.** Each round's selection is ``ε₀``-DP (one row moves every
score by at most 1; one privacy unit by at most its row bound ``k``, which
the kernel divides out), hence ``ε₀²/8``-zCDP (the exponential mechanism is
bounded-range; Cesar & Rogers 2021), or ``ε₀²/2`` by the generic conversion
the FEM paper used; ``T`` rounds compose to ``ρ = T·ρ₀``-zCDP, which is
``(ε, δ)``-DP for every δ with ε from Canonne, Kamath & Steinke's conversion (2020,
:func:`~dpsql.synth.accounting.zcdp_epsilon`), or
``Tε₀``-DP by basic composition (:mod:`dpsql.synth.accounting`). The records depend on the data only through
the selections (the perturbations are public randomness).
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from dpsql.errors import WorkloadError
from dpsql.private.kernel import PrivateTable, Reservation
from dpsql.schema import Attribute
from dpsql.synth.cells import MarginalCells
from dpsql.synth.game import GameResult
from dpsql.synth.oracle import ORACLES, OracleProblem, best_responses, perturbed_responses

__all__ = ["fem", "PUBLISHED_EPS0_FACTOR", "PUBLISHED_NOISE"]

#: ε₀ = c·√ε with this c in the published ADULT 3-way runs.
PUBLISHED_EPS0_FACTOR = 0.008
#: FTPL perturbation scale m√T with this m in the published runs.
PUBLISHED_NOISE = 0.16


def fem(table: PrivateTable, attributes: Sequence[Attribute], subsets: Sequence[tuple[int, ...]], *,
        eps0: float, rounds: int, reservation: Reservation, samples: int = 50, noise: float = PUBLISHED_NOISE,
        oracle: str = "heuristic", time_limit: float = 10.0, processes: int | None = 1, seed: int | None = None,
        progress: Callable[[int], None] | None = None) -> GameResult:
    """Run FEM for ``rounds`` rounds, each selection ``eps0``-DP, ``samples`` records a round.

    The caller must have reserved the run's cost in ``reservation``.
    ``oracle="heuristic"`` (the default) solves each round's ``samples``
    perturbed problems together by batched local search
    (:func:`~dpsql.synth.oracle.perturbed_responses`); ``"auto"`` or ``"mip"``
    solve each with :func:`~dpsql.synth.oracle.best_response` under
    ``time_limit`` seconds (HiGHS through CVXPY), in ``processes`` worker
    processes, warm-started from the same sample of the previous round.
    ``seed`` drives only public randomness (perturbations, oracle).
    """
    if rounds < 1 or samples < 1 or not eps0 > 0 or not noise > 0:
        raise WorkloadError("FEM needs rounds >= 1, samples >= 1, eps0 > 0 and noise > 0")
    if oracle != "heuristic" and oracle not in ORACLES:
        raise WorkloadError(f"oracle must be 'heuristic' or one of {ORACLES}, got {oracle!r}")
    domain = tuple(a.cells for a in attributes)
    cells = MarginalCells(domain, subsets)
    offsets = np.concatenate([[0], np.cumsum(domain)])
    rng = np.random.default_rng(seed)
    scale = noise * math.sqrt(rounds)
    loss = np.zeros(cells.size)  # Σ over selections of sign · q_cell: the leader maximizes loss · q(x)
    result = GameResult(np.zeros((0, len(domain)), dtype=np.int64))
    batches: list[np.ndarray] = []
    previous = None
    for t in range(1, rounds + 1):
        used = np.flatnonzero(loss)
        queries, weights = [cells.conjunction(j) for j in used], loss[used]
        perturbation = -rng.exponential(scale, size=(samples, int(offsets[-1])))
        if oracle == "heuristic":
            responses = perturbed_responses(domain, queries, weights, perturbation, warm_starts=previous,
                                            seed=int(rng.integers(0, 2**63 - 1)))
        else:
            problems = [OracleProblem(domain, queries, weights,
                                      [p[offsets[i]:offsets[i + 1]] for i in range(len(domain))],
                                      None if previous is None else previous[r])
                        for r, p in enumerate(perturbation)]
            responses = best_responses(problems, processes=processes, method=oracle, time_limit=time_limit,
                                       seed=int(rng.integers(0, 2**63 - 1)))
        batch = np.array([r.record for r in responses], dtype=np.int64)
        batches.append(batch)
        result.methods.extend(r.method for r in responses)
        j, sign = table.sample_cells(attributes, cells.subsets, cells.fractions(batch), eps0, 1, reservation)[0]
        result.selected.append((int(j), int(sign)))
        loss[j] += sign  # q_j(D) > q_j(D_t) picks +1 (raise q_j); its negation −1 (lower it)
        previous = batch
        if progress:
            progress(t)
    result.records = np.concatenate(batches)
    return result
