"""The oracle's local search: coordinate ascent with random restarts and kicks.

Setting one attribute to its best value given the others is one small matrix
product over the queries mentioning it, so coordinate ascent is cheap even
with thousands of queries. :func:`local_search` iterates it from several
starts and random perturbations ("heuristic" and the first stage of "auto" in
:func:`~dpsql.synth.oracle.best_response`); :func:`perturbed_responses` runs it
batched over many linear perturbations of one objective, for FEM. It finds
good records fast but proves nothing; the MIP (:mod:`dpsql.synth.oracle.mip`)
certifies.

Those products are small (records × queries by queries × values), and BLAS runs them in one
thread each (:func:`~dpsql.hdmm.optimize.threads.blas_threads`): left to start one thread per
core, OpenBLAS split them once about 25 queries were active, and on two cores shared with other
work FEM's rounds took 20 to 50 times as long (0.5 s a round against 0.02 s, 2,000 rows of six
columns, one with 400 values), past the time it was priced at.
"""

from __future__ import annotations

import math
import time
from typing import Iterable, Sequence

import numpy as np

from dpsql.errors import WorkloadError
from dpsql.hdmm.optimize.threads import blas_threads
from dpsql.synth.oracle.compiled import CompiledProblem, allows_many, unsatisfied_many, values_many
from dpsql.synth.oracle.problem import Response, Seed
from dpsql.synth.oracle.queries import Conjunction

__all__ = ["climb", "local_search", "perturbed_responses"]


def climb(problem: CompiledProblem, record: np.ndarray, rng: np.random.Generator, deadline: float) -> float:
    """Coordinate ascent from ``record`` (modified in place) to a local optimum
    (:func:`_climb_batch` on one record); returns its value."""
    _climb_batch(problem, problem.linear[None, :], record[None, :], rng, deadline)
    return problem.value(record)


def local_search(problem: CompiledProblem, rng: np.random.Generator, deadline: float, starts: Iterable[np.ndarray],
                 restarts: int, kicks: int) -> tuple[np.ndarray, float, bool]:
    """Iterated local search: climb from each given start and from ``restarts``
    random records, then ``kicks`` times re-draw a few random attributes of the
    best record and climb again, keeping improvements. Returns the best
    record, its value, and whether it is one of ``starts`` unchanged."""
    best, best_value, from_start = None, -math.inf, False
    domain = np.array(problem.domain)
    candidates = [(np.array(s, dtype=np.int64), True) for s in starts]
    candidates.append((np.array([int(np.argmax(problem.linear[problem.offsets[i]:problem.offsets[i + 1]]))
                                 for i in range(len(domain))]), False))
    for _ in range(restarts):
        candidates.append((rng.integers(0, domain), False))
    for start, given in candidates:
        if best is not None and time.monotonic() >= deadline:
            break
        x = start.copy()
        value = climb(problem, x, rng, deadline)
        if value > best_value:
            best, best_value, from_start = x, value, given and np.array_equal(x, start)
    d = len(domain)
    for _ in range(kicks):
        if time.monotonic() >= deadline:
            break
        x = best.copy()
        chosen = rng.choice(d, size=min(d, int(rng.integers(2, 4))), replace=False)
        x[chosen] = rng.integers(0, domain[chosen])
        value = climb(problem, x, rng, deadline)
        if value > best_value + 1e-12 * (1.0 + abs(best_value)):
            best, best_value, from_start = x, value, False
    return best, best_value, from_start


def _climb_batch(problem: CompiledProblem, linear: np.ndarray, records: np.ndarray, rng: np.random.Generator,
                 deadline: float = math.inf) -> None:
    """Coordinate ascent for many records at once, record ``r`` under its own
    linear terms ``linear[r]`` (same queries), until no record improves or the
    deadline passes. ``records`` is modified in place.

    For attribute ``i`` the value of ``x_i = v`` given the others is the linear
    term plus the weights of the active queries whose *other* literals hold and
    whose literal on ``i`` allows ``v``: one small matrix product per
    attribute. A move is taken only when it strictly improves, so the loop ends.
    """
    with blas_threads(1):  # small products: threads only add their overhead (see the module docstring)
        unsat = unsatisfied_many(problem, records)
        changed = True
        while changed and time.monotonic() < deadline:
            changed = False
            for i in rng.permutation(len(problem.domain)):
                if problem.domain[i] == 1:
                    continue
                lo, hi = problem.offsets[i], problem.offsets[i + 1]
                score = linear[:, lo:hi].copy()
                qs, mask = problem.attr_queries[i], problem.attr_masks[i]
                if len(qs):
                    current = allows_many(problem, i, records[:, i])
                    others_hold = (unsat[:, qs] - ~current) == 0
                    score += np.asarray((others_hold * problem.weights[qs]) @ mask)
                rows = np.arange(len(records))
                best = np.argmax(score, axis=1)
                now = score[rows, records[:, i]]
                better = score[rows, best] > now + 1e-12 * (1.0 + np.abs(now))
                if not better.any():
                    continue
                if len(qs):
                    moved = rows[better]
                    unsat[np.ix_(moved, qs)] += (current[better].astype(np.int64)
                                                 - allows_many(problem, i, best[better]))
                records[better, i] = best[better]
                changed = True


def perturbed_responses(domain: Sequence[int], queries: Sequence[Conjunction], weights: Sequence[float] | np.ndarray,
                        perturbations: np.ndarray, *, warm_starts: np.ndarray | None = None, restarts: int = 8,
                        seed: Seed = None) -> list[Response]:
    """Heuristic best responses to one objective under many linear perturbations at once.

    Record ``r`` approximately maximizes ``Σ_q weights[q]·q(x) +
    ⟨onehot(x), perturbations[r]⟩``, where ``perturbations`` has one row per
    response and one column per (attribute, value) in attribute order
    (``sum(domain)`` columns). This is the data player of FEM's
    follow-the-perturbed-leader step, which needs dozens of such responses per
    round: batched coordinate ascent from ``restarts`` random records, from
    the ``warm_starts`` rows (e.g. the previous round's records) and from the
    record best for the linear terms alone, keeping each
    response's best, is far faster than as many :func:`~dpsql.synth.oracle.best_response` calls.
    Every response is labelled ``"heuristic"``.

    >>> q = [Conjunction.from_cell((0, 1), (1, 1))]
    >>> [r.record for r in perturbed_responses((2, 2), q, [3.0], np.array([[0, 0, 0, 0], [0, 1, 5, 0.0]]), seed=0)]
    [(1, 1), (1, 0)]
    """
    started = time.monotonic()
    problem = CompiledProblem(domain, queries, weights, None)
    perturbations = np.asarray(perturbations, dtype=float)
    if perturbations.ndim != 2 or perturbations.shape[1] != len(problem.linear):
        raise WorkloadError(f"perturbations must have one column per attribute value ({len(problem.linear)})")
    rng = np.random.default_rng(seed)
    linear = problem.linear[None, :] + perturbations
    sizes = np.array(problem.domain)
    greedy = np.stack([np.argmax(linear[:, problem.offsets[i]:problem.offsets[i + 1]], axis=1)
                       for i in range(len(sizes))], axis=1)  # best values ignoring the queries
    starts = [greedy] + [rng.integers(0, sizes, size=(len(linear), len(sizes))) for _ in range(restarts)]
    if warm_starts is not None:
        starts.append(np.array([problem.check_record(w) for w in np.asarray(warm_starts).reshape(len(linear), -1)]))
    best, best_value = None, None
    for records in starts:
        _climb_batch(problem, linear, records, rng)
        values = values_many(problem, linear, records)
        if best is None:
            best, best_value = records, values
        else:
            take = values > best_value
            best[take], best_value[take] = records[take], values[take]
    seconds = (time.monotonic() - started) / len(linear) if len(linear) else 0.0
    return [Response(tuple(int(v) for v in rec), float(val), "heuristic", seconds) for rec, val in zip(best, best_value)]
