"""The best-response oracle of DualQuery and FEM.

Both algorithms play a zero-sum game between a query player and a data
player, and both repeatedly need the data player's *best response*: over a
finite product domain (attribute ``i`` takes one value in ``0..n_i-1``) find
the record ``x`` maximizing

    ``Σ_q c_q · q(x) + Σ_i l_i[x_i]``

where every query ``q`` is a :class:`Conjunction` (``x_i`` must lie in an
allowed set for every attribute ``i`` it mentions; a k-way marginal cell
allows one value per mentioned attribute) and the optional ``l_i`` are
per-attribute linear terms (FEM's follow-the-perturbed-leader noise).
DualQuery sums the ``s`` queries it sampled, FEM the losses of the earlier
rounds. Negated queries are the caller's business: ``1 − q`` is the
coefficient ``−1`` plus a constant, so coefficients may be negative.

The problem is NP-hard in general (it contains MAX-CSP), but neither
algorithm needs an exact answer: DualQuery's accuracy theorem only asks for an
approximate best response, and the paper stops CPLEX at a timeout and takes
its best solution. :func:`best_response` therefore offers

* ``"mip"``: the integer program of DualQuery §5 generalized to non-binary
  attributes, modeled in CVXPY and solved by HiGHS under a time limit and a
  relative gap, returning the best feasible record when a limit is hit;
* ``"heuristic"``: coordinate ascent (set one attribute to its best value
  given the others, vectorized over the queries) with random restarts and
  random perturbations, fast on instances the MIP cannot finish;
* ``"auto"`` (the default): the heuristic first, then the MIP started from the
  heuristic's record for what remains of the time limit, keeping the better.
  Easy instances end with a proven optimum; hard ones never end worse than
  the heuristic.

The reported objective is always recomputed on the returned record, never
taken from the solver. :func:`best_responses` solves independent problems
(DualQuery's or FEM's samples of one round) in parallel processes.

The package's parts: :mod:`~dpsql.synth.oracle.queries` (conjunctions and
the objective), :mod:`~dpsql.synth.oracle.problem` (a problem and its
response as data), :mod:`~dpsql.synth.oracle.compiled` (the array form both
solvers share), :mod:`~dpsql.synth.oracle.heuristic` (local search) and
:mod:`~dpsql.synth.oracle.mip` (the integer program). This module holds the
entry points and re-exports the public names.

>>> from dpsql.synth.oracle import Conjunction, best_response
>>> queries = [Conjunction.from_cell((0, 1), (1, 2)),         # x0 = 1 and x1 = 2
...            Conjunction(((1, frozenset({0, 2})),))]         # x1 in {0, 2}
>>> r = best_response((2, 3), queries, [1.0, 0.5], method="mip")
>>> r.record, r.objective, r.method
((1, 2), 1.5, 'mip-optimal')
>>> best_response((2, 3), queries, [-1.0, 0.5], method="heuristic", seed=0).objective
0.5
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Sequence

import numpy as np

from dpsql.synth.oracle.compiled import CompiledProblem
from dpsql.synth.oracle.heuristic import climb, local_search, perturbed_responses
from dpsql.synth.oracle.mip import MIN_SOLVER_SECONDS, solve_mip
from dpsql.synth.oracle.problem import RESULT_METHODS, OracleProblem, Response, Seed
from dpsql.synth.oracle.queries import Conjunction, objective

__all__ = [
    "Conjunction", "Response", "OracleProblem", "best_response", "best_responses", "perturbed_responses", "objective",
    "ORACLES", "RESULT_METHODS",
]

#: Values of ``method`` accepted by :func:`best_response`.
ORACLES = ("auto", "mip", "heuristic")


def best_response(domain: Sequence[int], queries: Sequence[Conjunction], weights: Sequence[float] | np.ndarray,
                  linear: Sequence[Sequence[float] | np.ndarray] | None = None, *, time_limit: float = 10.0,
                  mip_gap: float = 1e-4, warm_start: Sequence[int] | None = None, method: str = "auto",
                  seed: Seed = None, restarts: int = 20, kicks: int = 200) -> Response:
    """The record maximizing ``Σ_q weights[q]·q(x) + Σ_i linear[i][x_i]``, exactly or approximately.

    ``domain`` lists the attribute sizes ``n_i``; ``linear`` (optional) is one
    array of ``n_i`` numbers per attribute.

    ``method``:

    * ``"mip"``: the integer program, solved by HiGHS through CVXPY;
    * ``"heuristic"``: local search only (``restarts`` random starting
      records, then ``kicks`` random perturbations of the best one);
    * ``"auto"``: the heuristic (well under a second for thousands of
      queries), then the MIP started from its record for what is left of
      ``time_limit``, keeping the better record. Small instances end proven
      optimal; on large ones, where the MIP's LP bound is weak and HiGHS
      rarely beats local search, the call still never does worse than the
      heuristic. On a tie the MIP's label is kept only when it certifies
      optimality (``mip-optimal`` / ``mip-gap``). Use ``"heuristic"`` when
      the time limit cannot be afforded.

    ``time_limit`` bounds the whole call in seconds (model building included;
    HiGHS gets what is left as its ``time_limit`` option and overshoots it by
    some tens of milliseconds). ``mip_gap`` is HiGHS's ``mip_rel_gap``; 0 also
    zeroes ``mip_abs_gap``, for proven optima. When a limit stops HiGHS its
    best feasible record is used. ``warm_start`` is a record: the heuristic
    climbs from it, HiGHS gets it as its MIP start, and it is returned
    (labelled ``"warm-start"``) when nothing better is found. With
    ``method="mip"``, if HiGHS finds no feasible record in time and there is
    no warm start, one coordinate-ascent climb supplies the record. ``seed``
    drives the heuristic's randomness and HiGHS's ``random_seed``.
    """
    started = time.monotonic()
    if method not in ORACLES:
        raise ValueError(f"method must be one of {ORACLES}, got {method!r}")
    if not (time_limit > 0) or not (0 <= mip_gap < 1):
        raise ValueError(f"need time_limit > 0 and 0 <= mip_gap < 1, got {time_limit} and {mip_gap}")
    deadline = started + time_limit
    problem = CompiledProblem(domain, queries, weights, linear)
    start = problem.check_record(warm_start)
    rng = np.random.default_rng(seed)
    highs_seed = int(rng.integers(0, 2**31 - 1)) if seed is not None else None

    def done(record: np.ndarray, label: str, bound: float | None = None) -> Response:
        return Response(tuple(int(v) for v in record), problem.value(record), label, time.monotonic() - started, bound)

    incumbent, incumbent_value, incumbent_label = None, -math.inf, "heuristic"
    if method in ("auto", "heuristic"):
        incumbent, incumbent_value, unchanged = local_search(problem, rng, deadline, [] if start is None else [start],
                                                             restarts, kicks)
        incumbent_label = "warm-start" if unchanged else "heuristic"
        if method == "heuristic":
            return done(incumbent, incumbent_label)
    elif start is not None:
        incumbent, incumbent_value, incumbent_label = start, problem.value(start), "warm-start"

    record, label, bound = None, "mip-time-limit", None
    remaining = deadline - time.monotonic()
    if remaining > MIN_SOLVER_SECONDS or method == "mip":
        record, label, bound = solve_mip(problem, remaining, mip_gap, incumbent, highs_seed)
    if record is not None:
        value = problem.value(record)
        tol = 1e-12 * (1.0 + abs(incumbent_value)) if incumbent is not None else 0.0
        if incumbent is None or value > incumbent_value + tol or (
                value >= incumbent_value - tol and label != "mip-time-limit"):
            return done(record, label, bound)
    if incumbent is None:  # the MIP found nothing and there is no warm start: one climb
        incumbent = rng.integers(0, np.array(problem.domain))
        climb(problem, incumbent, rng, math.inf)
        incumbent_label = "heuristic"
    return done(incumbent, incumbent_label, bound)


def _solve(job: tuple[OracleProblem, dict[str, Any]]) -> Response:
    """Worker of :func:`best_responses` (module level, so it pickles)."""
    problem, kwargs = job
    if problem.warm_start is not None:
        kwargs = {**kwargs, "warm_start": problem.warm_start}
    return best_response(problem.domain, problem.queries, problem.weights, problem.linear, **kwargs)


def best_responses(problems: Sequence[OracleProblem | tuple], processes: int | None = None,
                   **kwargs: Any) -> list[Response]:
    """Solve independent best-response problems, in parallel processes.

    ``problems`` holds :class:`OracleProblem`s or tuples of its fields
    ``(domain, queries, weights[, linear[, warm_start]])``; ``kwargs`` go to
    :func:`best_response` for every problem (a problem's own ``warm_start``
    wins). An integer ``seed`` is split into independent per-problem seeds, so
    results do not depend on ``processes``. ``processes=None`` uses every CPU
    (at most one per problem); ``processes=1`` runs inline. Workers are
    started with "spawn" (safe with the solver's threads; scripts calling this
    need the usual ``if __name__ == "__main__":`` guard) and cost about a
    second each to start, so parallelism pays for problems of more than a
    fraction of a second.

    >>> q = [Conjunction.from_cell((0, 1), (1, 1))]
    >>> problems = [((2, 2), q, [1.0]), ((2, 2), q, [-1.0], [[0.0, 0.5], [0.0, 0.3]], (1, 1))]
    >>> [(r.record, r.objective) for r in best_responses(problems, processes=1, method="mip")]
    [((1, 1), 1.0), ((1, 0), 0.5)]
    """
    if processes is not None and processes < 1:
        raise ValueError(f"processes must be >= 1, got {processes}")
    jobs = [p if isinstance(p, OracleProblem) else OracleProblem(*p) for p in problems]
    seed = kwargs.pop("seed", None)
    if seed is not None and not isinstance(seed, np.random.SeedSequence):
        seed = np.random.SeedSequence(seed)
    seeds = seed.spawn(len(jobs)) if seed is not None else [None] * len(jobs)
    work = [(p, {**kwargs, "seed": s}) for p, s in zip(jobs, seeds)]
    workers = min(len(work), processes if processes is not None else (os.cpu_count() or 1))
    if workers <= 1:
        return [_solve(job) for job in work]
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(_solve, work))
