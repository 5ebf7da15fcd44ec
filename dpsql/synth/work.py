"""How long a synthesis run takes, estimated from public values before anything is spent.

Every synthesis method takes ``max_seconds`` (default :data:`DEFAULT_MAX_SECONDS`, at most
:data:`MAX_SECONDS`). Before the spend, each planner of :mod:`dpsql.synth.synthesize` counts
the work its options imply, from the schema's domain sizes, the workload's marginals and
the option values only (never the data), prices it with the per-unit costs below, and
refuses (:class:`~dpsql.errors.ResourceLimitError`, naming the option, its estimate and the
limit) a run whose estimate exceeds ``max_seconds``. What the spend itself decides (rounds
that the spend sets, the default row count, which is a noisy count) is capped after the
spend to what fits in ``max_seconds`` instead, spending less or sampling fewer rows, with a
warning: nothing is refused once a draw is taken.

The per-unit costs were measured on the development machine (2 cores shared by several
processes, so 2 to 3 times slower than a quiet one) on a 2,000-row table of 4 attributes (3
to 6 values) and on ``tests/sql_oracle.py``'s 300-row table of 7 attributes (2 to 22 values,
``benchmarks/limits_red_c.py``), and rounded up:

=========================  ==========  =====================================================
unit                       seconds     measured
=========================  ==========  =====================================================
:data:`READ`               0.25        MWEM, 1 replay: 10 rounds (2 reads each) 1.76 s, 16 rounds 7.8 s
:data:`STEP`               1e-4        MWEM: 40 rounds, 400 replays (328,000 updates): 36.6 s
:data:`FEM_ROUND`          0.1         FEM: 320 rounds of 10 records: 11.6 s; 90 of 50: 4.1 to 13.3 s
:data:`FEM_QUERY`          6e-6        FEM, local search: 1,200 rounds of 50 records over every triple of
                                       7 attributes, 294 s (load 3); a round's search took 23 ms with 24
                                       cells selected before, 50 ms with 440, 430 ms with 700 to 900. With
                                       the search in one BLAS thread (:mod:`dpsql.synth.oracle.heuristic`)
                                       they took 92 s (load 2), 21 ms a round and 83 µs more per cell
                                       selected; priced at 3e-6, the default on that table planned 2,212
                                       rounds and ran 692 s of its 600 at load 4, so the price stays
:data:`REFINE_STEP`        2e-4        PGM: 3,000 sweeps of 6 marginals, 1,000 rows: 2.68 s
:data:`REFINE_ROW`         1e-7        PGM: 300 sweeps of 6 marginals, 100,000 rows: 9.2 s
:data:`CELL`               2e-8        MWEM: 5 rounds, 2,283 replays on a group of 31,680 cells
                                       (34,245 updates): 23.0 s, 0.6 ms an update
:data:`SOLVE`              0.05        DualQuery, ``oracle="mip"``: 50 rounds of 10 draws: 2.17 s
:data:`LOCAL_SEARCH`       0.5         DualQuery, ``oracle="heuristic"``, 35 draws a round: 32 rounds
                                       20.6 s (10 draws: 50 rounds 11.8 s)
:data:`QUERY`              3e-3        ... and 100 rounds of 10 draws 29.9 s: rounds grow longer
:data:`TRIAL`              4e-6        PGM's greedy model of every pair of 24, 40 and 80 attributes
                                       (276, 780 and 3,160 candidates; 600, 2,378 and 7,817 trial
                                       junction trees): 2.0, 15 and 206 s
:data:`AIM_TRIAL`          1e-6        aim's default on 20 and 30 attributes of 5 to 20 values
                                       (20,000 rows; 40,650 and 209,831 trial junction trees of a
                                       set or two more a round): 16 and 160 s
:data:`ELIMINATION`        2e-5        ... and its 56,120 estimates of sets no clique held, on 20
                                       attributes: 0.35 ms each, 24 µs a clique (14 on average)
                                       and 4e-8 s a cell of the model
=========================  ==========  =====================================================

What each method counts (``T`` rounds, ``s`` records or draws a round):

* ``mwem``: ``rounds`` (two reads and a score per workload cell each) and ``replays`` (round ``r``
  replays ``r`` measurements, each on the group of attributes the measurements merged: at most the
  ``r·k`` largest attributes of the workload's ``k``-way marginals, and
  :data:`~dpsql.synth.factored.MAX_GROUP_CELLS`);
* ``fem``: ``rounds`` with ``samples`` (a round: :data:`FEM_ROUND`, every cell query, ``s`` records, each
  searched against the cells selected before, :func:`fem_seconds`);
* ``dualquery``: ``rounds`` with ``samples`` (a round: a read, one oracle solve, :data:`QUERY`
  more per earlier round with the local search);
* ``pgm``: ``iterations`` (fit steps over the model's cells: the measured marginals' and the
  one-way ones, at most ``max_model_size``), the greedy search for a model when one of every
  measured set is too large (:func:`~dpsql.synth.pgm.greedy_trials` trial junction trees, each
  :data:`TRIAL` per attribute squared: :func:`structure_seconds`) and ``sweeps`` (a step per
  measured marginal and sweep, over ``rows`` records);
* ``aim``: ``rounds`` (two reads and a refit each, at half the model's size on average),
  ``iterations`` of the last fit, and ``sweeps`` as for pgm. That plan leaves out the scoring of
  every candidate in every round (a trial junction tree and a model's estimate each,
  :func:`scoring_seconds`), whose cost depends on the models the rounds select, and it counts
  all ``T`` rounds, of which annealing leaves far fewer (43 of 320 on 20 columns). So aim also
  prices its rounds as they run, from the models they select (released values), and the round
  that, with another like the one before, would pass what the last fit and sampling the rows
  leave of ``max_seconds`` is its last, spending all that is left (:func:`~dpsql.synth.aim.aim`'s
  ``seconds``).

Not counted: the fixed costs of a request (about a second: planning, the noisy counts), reading
the private table beyond :data:`READ` a read (its time grows with the table's size, which is
private), and the work of a fit that converges before its ``iterations`` (the estimate is of the
most it may run).

>>> Work("mwem", [("rounds=10", 2.0), ("replays=100", 0.6)]).check(600.0)
>>> Work("pgm", [("sweeps=1000000000", 1.2e6)]).check(600.0)  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
dpsql.errors.ResourceLimitError: pgm with sweeps=1000000000 would run for about 1,200,000 s, more than max_seconds=600; ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from dpsql.errors import ResourceLimitError
from dpsql.synth.options import option, real

__all__ = ["DEFAULT_MAX_SECONDS", "MAX_SECONDS",
           "MIN_FIT_STEPS", "READ", "STEP", "FEM_ROUND", "FEM_QUERY", "REFINE_STEP", "REFINE_ROW",
           "CELL", "SOLVE", "LOCAL_SEARCH", "QUERY", "TRIAL", "AIM_TRIAL", "ELIMINATION", "Work", "max_seconds", "fitting",
           "refine_seconds", "fit_seconds", "fem_seconds", "structure_seconds", "estimate_seconds", "scoring_seconds"]

#: The time a synthesis run may take by default, in seconds (10 minutes).
DEFAULT_MAX_SECONDS = 600.0
#: The most ``max_seconds`` may be (a day).
MAX_SECONDS = 86_400.0

#: The fewest steps a model's fit is planned for (:meth:`dpsql.synth.plan.model.ModelOptions.fit_plan`):
#: on NLTCS's 560 triples at ε = 1, 100 steps left the max error at 0.009, 200 at 0.006.
MIN_FIT_STEPS = 200

#: One read of the private table by the kernel: a selection or a measurement.
READ = 0.25
#: One step of an iterative update, besides its cells: MWEM's multiplicative weights (one measurement
#: replayed once), a mirror-descent step of a graphical model's fit.
STEP = 1e-4
#: One FEM round: the private selection and the oracle's batch of records, besides its cells...
FEM_ROUND = 0.1
#: ...and, with the local-search oracle, per record and per cell selected in an earlier round (the
#: leader's loss the search climbs): 2,911 rounds priced at their first round's cost, 291 s, took
#: about 1,300 s (:func:`fem_seconds`).
FEM_QUERY = 6e-6
#: One refinement step (one measured marginal in one sweep, :mod:`dpsql.synth.refine`), besides its rows...
REFINE_STEP = 2e-4
#: ...and per record it moves among.
REFINE_ROW = 1e-7
#: One float64 cell of an array the work passes over (a marginal, a model's cliques, an oracle's weights).
CELL = 2e-8
#: One integer program of DualQuery's or FEM's oracle (``oracle="mip"`` or ``"auto"``), at most its time limit.
SOLVE = 0.05
#: One best response of DualQuery's local-search oracle (``oracle="heuristic"``).
LOCAL_SEARCH = 0.5
#: What each earlier round adds to a round of DualQuery with its local-search oracle (``T`` rounds
#: take ``QUERY · T²/2`` more than ``T`` equal rounds), whatever the draws a round.
QUERY = 3e-3
#: One trial junction tree of pgm's greedy model search (:func:`dpsql.synth.pgm.model_structure`),
#: per attribute squared.
TRIAL = 4e-6
#: One trial junction tree of aim's scoring (:func:`dpsql.synth.aim.aim`), per attribute squared: its
#: graphs, a set or two more a round, are sparser than pgm's search's.
AIM_TRIAL = 1e-6
#: One clique of a model's estimate of a set that no clique holds (variable elimination), besides
#: its cells (:func:`estimate_seconds`).
ELIMINATION = 2e-5


def max_seconds(options: dict) -> float:
    """The option ``max_seconds`` (a number of seconds in (0, :data:`MAX_SECONDS`]), or its default."""
    return real("max_seconds", option(options, "max_seconds", DEFAULT_MAX_SECONDS), high=MAX_SECONDS)


@dataclass(frozen=True)
class Work:
    """A run's estimated seconds, by the options that imply them: ``(what, seconds)`` pairs, ``what``
    naming the options and their values (e.g. ``"rounds=10, replays=100"``)."""

    method: str
    terms: Sequence[tuple[str, float]]

    @property
    def seconds(self) -> float:
        return sum(s for _, s in self.terms)

    def check(self, limit: float) -> None:
        """Refuse the run when its estimate exceeds ``limit`` seconds, naming its largest term."""
        if self.seconds <= limit:
            return
        what, seconds = max(self.terms, key=lambda t: t[1])
        others = f" ({_shown(self.seconds)} s in all)" if seconds < self.seconds else ""
        raise ResourceLimitError(f"{self.method} with {what} would run for about {_shown(seconds)} s{others}, more "
                                 f"than max_seconds={limit:g}; choose smaller options, or raise max_seconds "
                                 "(estimates: dpsql.synth.work)")


def _shown(seconds: float) -> str:
    """Seconds as an estimate reads: whole seconds, or two significant digits below 10 ("about 0 s,
    more than max_seconds=0.01" told nothing).

    >>> _shown(1234.5), _shown(0.0123), _shown(2.5)
    ('1,234', '0.012', '2.5')
    """
    return f"{seconds:,.0f}" if seconds >= 10 else f"{seconds:.2g}"


def fitting(limit: float, fixed: float, each: float, most: int) -> int:
    """The most units of ``each`` seconds, at most ``most``, that fit in ``limit`` seconds after
    ``fixed`` seconds (at least 1: a run's first unit is never cut)."""
    if each <= 0:
        return most
    return max(1, min(most, int((limit - fixed) / each)))


def fem_seconds(rounds: int, each: float, samples: int, cells: int, growth: float = FEM_QUERY) -> float:
    """``rounds`` FEM rounds of ``each`` seconds besides their search, ``samples`` records each
    searched against every cell the earlier rounds selected, at most ``cells`` distinct ones:
    ``growth`` seconds per record and cell (:data:`FEM_QUERY`; 0 for an oracle whose solves a
    time limit caps).

    >>> round(fem_seconds(1200, 0.1, 50, 10_000)), round(fem_seconds(1200, 0.1, 50, 100))
    (336, 154)
    """
    full = max(rounds - 1 - cells, 0)  # rounds after every cell was selected once
    earlier = min(rounds, cells + 1) * (min(rounds, cells + 1) - 1) / 2 + full * cells
    return rounds * each + growth * samples * earlier


def structure_seconds(trials: int, attributes: int) -> float:
    """pgm's greedy search for a model: ``trials`` trial junction trees over ``attributes`` attributes
    (:func:`dpsql.synth.pgm.greedy_trials`).

    >>> round(structure_seconds(3 * 3160, 80))
    243
    """
    return float(trials) * attributes ** 2 * TRIAL


def refine_seconds(sweeps: int, marginals: int, rows: int) -> float:
    """Refining ``rows`` records toward ``marginals`` measured marginals in ``sweeps`` sweeps."""
    return float(sweeps) * marginals * (REFINE_STEP + REFINE_ROW * rows)


def fit_seconds(steps: int, cells: int) -> float:
    """``steps`` mirror-descent steps of a model of ``cells`` cells."""
    return float(steps) * (STEP + CELL * cells)


def estimate_seconds(cells: int, cliques: int) -> float:
    """A model's estimate of one marginal from ``cliques`` of its cliques, ``cells`` cells in all:
    summed from the one clique that holds it, or by variable elimination over several (each
    divided by its separator and multiplied in: two passes over its cells).

    >>> estimate_seconds(1000, 1), round(estimate_seconds(6000, 14), 6)
    (2e-05, 0.00052)
    """
    return CELL * cells if cliques == 1 else cliques * ELIMINATION + 2 * CELL * cells


def scoring_seconds(trials: int, attributes: int, reads: Iterable[tuple[int, int]]) -> float:
    """aim's scoring of its candidates in a round: ``trials`` trial junction trees over ``attributes``
    attributes, and the model's estimate of each candidate from ``(cells, cliques)`` it reads
    (:func:`estimate_seconds`).

    >>> round(scoring_seconds(1000, 20, [(6000, 14)] * 1000), 2)
    0.92
    """
    return float(trials) * attributes ** 2 * AIM_TRIAL + sum(estimate_seconds(c, k) for c, k in reads)
