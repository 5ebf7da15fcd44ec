"""DualQuery (Gaboardi, Gallego Arias, Hsu, Roth & Wu 2014, Algorithm 2).

The query player keeps multiplicative weights over every workload cell query
and its negation; each round it *samples* ``s`` queries from its
distribution (the only private step), the data player best-responds with the
one record that minimizes the sampled queries' average answer (an integer
program, :mod:`dpsql.synth.oracle`), and the query player moves weight
towards queries the records answer worse than the data:
``Q^{t+1}_q ∝ exp(−η (q(D) − q(x_t))) Q^t_q``. The output is the multiset of
the ``T`` best responses.

**Guarantee.** Sampling from ``Q^t`` is the exponential mechanism with the
score ``Σ_{i<t}(q(D) − q(x_i))``, whose sensitivity is ``(t − 1)/n``, so each
draw of round ``t`` is ``2η(t − 1)/n``-DP and the run is ε-DP with
Theorem 4.2's ε, or (ε, δ)-DP with Theorem 4.3's
(:mod:`dpsql.synth.accounting`). Here ``n`` is a *public* row count (a noisy
count the caller released), and the kernel scores with
``c_q − n_D·q̂``, which one row moves by at most 1 whatever the true ``n_D``
is (:meth:`~dpsql.private.kernel.PrivateTable.sample_cells`), so the theorems hold
with the public ``n`` divided by the unit's row bound ``k``. The records
depend on the data only through the sampled queries (post-processing).

**Parameters.** The cost ties ``η``, ``T``, ``s`` and ``n`` together, and
``n`` is only known once its noisy count is drawn. So
:func:`dpsql.synth.synthesize.synthesize` takes at most two of ``eta``,
``rounds`` and ``samples`` (never ``eta`` with ``rounds``) and lets the spend
set the third, which always has a value that fits: without ``rounds``, the
most rounds that fit (at least one, whose draws are uniform and free); with
``rounds``, the largest ``η`` that fits (the cost is continuous in ``η``:
:func:`~dpsql.synth.accounting.dualquery_eta`), ``s`` defaulting to
:data:`DEFAULT_SAMPLES`. Nothing is refused after the count is drawn.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from dpsql.errors import WorkloadError
from dpsql.private.kernel import PrivateTable, Reservation
from dpsql.schema import Attribute
from dpsql.synth.cells import MarginalCells
from dpsql.synth.game import GameResult
from dpsql.synth.oracle import best_response

__all__ = ["dualquery", "DEFAULT_ETA", "DEFAULT_SAMPLES", "MAX_ETA"]

#: The step size η when neither it nor ``rounds`` is given (the paper's ADULT setting).
DEFAULT_ETA = 0.4
#: Query samples s per round when not given (the paper's setting).
DEFAULT_SAMPLES = 35
#: The largest step size: at η beyond it the query player's distribution is a point mass in
#: all but name, and capping it keeps every per-draw ε a finite double.
MAX_ETA = 1e6


def dualquery(table: PrivateTable, attributes: Sequence[Attribute], subsets: Sequence[tuple[int, ...]], *,
              eta: float, rounds: int, samples: int, n: float, reservation: Reservation, oracle: str = "auto",
              time_limit: float = 10.0, seed: int | None = None,
              progress: Callable[[int], None] | None = None) -> GameResult:
    """Run DualQuery for ``rounds`` rounds of ``samples`` draws with step size ``eta``.

    ``n`` is the public row count the privacy formulas use; the caller must
    have reserved (at least) their cost in ``reservation``. ``oracle`` and
    ``time_limit`` go to :func:`~dpsql.synth.oracle.best_response` (each
    round's record warm-starts the next round's solve). ``seed`` drives only
    public randomness (the first round's uniform draws and the oracle).
    """
    if rounds < 1 or samples < 1 or not eta > 0 or not n > 0:
        raise WorkloadError("DualQuery needs rounds >= 1, samples >= 1, eta > 0 and n > 0")
    domain = tuple(a.cells for a in attributes)
    cells = MarginalCells(domain, subsets)
    rng = np.random.default_rng(seed)
    answered = np.zeros(cells.size)  # Σ over past records of each cell's answer
    records: list[tuple[int, ...]] = []
    result = GameResult(np.zeros((0, len(domain)), dtype=np.int64))
    for t in range(1, rounds + 1):
        per_draw = 2.0 * eta * (t - 1) * table.rows_per_unit / n
        if t == 1 or per_draw == 0.0:  # Q^1 is uniform (so is a 0-DP draw): these do not look at the data
            flat = rng.integers(0, 2 * cells.size, size=samples)
            draws = np.stack([flat % cells.size, np.where(flat < cells.size, 1, -1)], axis=1)
        else:
            draws = table.sample_cells(attributes, cells.subsets, answered / (t - 1), per_draw, samples, reservation)
        result.selected.extend((int(j), int(s)) for j, s in draws)
        # The data player minimizes the sampled queries' mean answer: a draw (j, −1) is the cell
        # query q_j (weight −1 on q_j), a draw (j, +1) its negation 1 − q_j (weight +1 on q_j).
        weights = np.zeros(cells.size)
        np.add.at(weights, draws[:, 0], draws[:, 1] / samples)
        used = np.flatnonzero(weights)
        response = best_response(domain, [cells.conjunction(j) for j in used], weights[used],
                                 method=oracle, time_limit=time_limit,
                                 warm_start=records[-1] if records else None,
                                 seed=int(rng.integers(0, 2**63 - 1)))
        records.append(response.record)
        result.methods.append(response.method)
        answered += cells.counts(np.array([response.record]))
        if progress:
            progress(t)
    result.records = np.array(records, dtype=np.int64)
    return result
