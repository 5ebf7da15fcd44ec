"""Planning MWEM, DualQuery and FEM (:mod:`dpsql.synth.mwem`, :mod:`dpsql.synth.dualquery`,
:mod:`dpsql.synth.fem`) within a request: the spend split into their steps, rounds and draws, the
noisy row count some of them measure first, and their time within ``max_seconds``, all fixed
before the charge.
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from typing import Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from dpsql import limits
from dpsql.errors import ArgumentError, PrivacyError, ResourceLimitError
from dpsql.limits import check_synthetic_cells, synthetic_rows_cap
from dpsql.privacy import Laplace
from dpsql.private.budget import MIN_EPSILON, Cost
from dpsql.private.kernel import PrivateTable
from dpsql.schema import Attribute
from dpsql.synth.accounting import (
    dualquery_epsilon,
    dualquery_eta,
    dualquery_eta_zcdp,
    dualquery_rho,
    exponential_rho,
    fem_rounds,
    fem_rounds_zcdp,
    largest_integer,
    zcdp_epsilon,
    zcdp_rho,
)
from dpsql.synth.dualquery import DEFAULT_ETA, DEFAULT_SAMPLES, MAX_ETA, dualquery
from dpsql.synth.factored import MAX_GROUP_CELLS
from dpsql.synth.fem import PUBLISHED_EPS0_FACTOR, PUBLISHED_NOISE, fem
from dpsql.synth.mwem import INITS, check_mwem, marginal_strategy, mwem, mwem_steps
from dpsql.synth.options import choice, flag, integer, option, real
from dpsql.synth.oracle import ORACLES
from dpsql.synth.plan.progress import round_progress
from dpsql.synth.plan.report import game_report, measured_report
from dpsql.synth.plan.request import Outcome, Request, Run, caller, check_cells, reworded
from dpsql.synth.work import (
    CELL,
    FEM_QUERY,
    FEM_ROUND,
    LOCAL_SEARCH,
    QUERY,
    READ,
    SOLVE,
    STEP,
    Work,
    fem_seconds,
    fitting,
    max_seconds,
)

#: The default share of the spend (DualQuery's and FEM's ``count_share``) for a noisy row count
#: (:func:`plan_count`).
COUNT_SHARE = 0.05

#: Most rounds and replays MWEM takes: each round reads the private table once and each replay
#: passes over every measurement so far, so more would run for days.
MWEM_MAX_ROUNDS = MWEM_MAX_REPLAYS = 10_000

#: MWEM's replays of its measurements a round (multiplicative-weights updates; post-processing) when
#: none are given: fewer when these may not fit in ``max_seconds``.
MWEM_REPLAYS = 100

#: Longest ``time_limit`` an oracle call may be given, in seconds (a day).
MAX_TIME_LIMIT = 86_400.0


def plan_mwem(private: PrivateTable, attributes: Sequence[Attribute], request: Request, options: dict) -> Run:
    """MWEM's ``2T + 1`` (or ``2T + 2``) equal steps of the request (:mod:`dpsql.synth.mwem`)."""
    total, budget = request.total, request.budget
    if total.delta > 0:
        raise PrivacyError(f"MWEM is pure epsilon-DP and would never use delta={total.delta!r}: leave delta out "
                           "(dualquery and fem use a delta)")
    rounds = integer("rounds", option(options, "rounds", 10), high=MWEM_MAX_ROUNDS)
    replays = integer("replays", option(options, "replays", MWEM_REPLAYS), high=MWEM_MAX_REPLAYS)
    init = choice("init", option(options, "init", "uniform"), INITS)
    average = flag("average", option(options, "average", False))
    limit = max_seconds(options)
    steps = mwem_steps(rounds, init)
    step_eps = math.sqrt(2.0 * total.rho / steps) if request.zcdp else total.epsilon / steps
    try:
        if step_eps < MIN_EPSILON:
            raise PrivacyError(f"epsilon={step_eps!r} is below the floor {MIN_EPSILON!r} of a measurement")
        step_cost = Cost.laplace(step_eps, budget)
        check_mwem(private, attributes, request.marginals, step_eps, rounds, replays, init, average)
    except PrivacyError as e:
        raise reworded(e, f"MWEM with rounds={rounds} splits {budget.describe(total)} into {steps} steps of "
                         f"epsilon={step_eps!r}, too small to measure; spend more or use fewer rounds") from None
    sizes = [math.prod(a.cells for a in (attributes[i] for i in m)) for m in request.marginals]
    touched = sorted((attributes[a].cells for a in set().union(*request.marginals)), reverse=True)
    k = max(len(m) for m in request.marginals)

    def group(r: int) -> int:
        """Cells of a replay in round ``r``: its ``r`` measurements, each on the group of attributes
        they merged, at most the ``r·k`` largest."""
        return min(MAX_GROUP_CELLS, math.prod(touched[:r * k]))

    reads = rounds * (2 * READ + CELL * sum(sizes))
    replay = sum(r * (STEP + CELL * group(r)) for r in range(1, rounds + 1))  # seconds of one replay of each round
    if "replays" not in options and reads + replays * replay > limit and reads + replay <= limit:
        fit = fitting(limit, reads, replay, replays)
        warnings.warn(f"MWEM's default of replays={replays} may not fit in max_seconds={limit:g} (about "
                      f"{reads + replays * replay:,.0f} s if its measurements merge the largest attributes): running "
                      f"replays={fit}, post-processing of the same measurements (give replays= to choose)")
        replays = fit
    updates = replays * rounds * (rounds + 1) // 2
    Work("MWEM", [(f"rounds={rounds}", reads),
                  (f"rounds={rounds} and replays={replays} ({updates:,} updates)", replays * replay)]).check(limit)
    cost = Cost(step_cost.epsilon * steps, 0.0, step_cost.rho * steps)

    def execute(bar: tqdm, rng: np.random.Generator) -> Outcome:
        bar.total = rounds
        learned = mwem(private, attributes, request.marginals, step_eps, step_cost, rounds=rounds,
                       replays=replays, init=init, average=average, progress=round_progress(bar))
        n = request.rows if request.rows is not None else request.default_rows(
            learned.distribution.total, "noisy row count", math.sqrt(Laplace(step_eps).variance(private.rows_per_unit)))
        records = learned.distribution.sample(n, rng)
        report = measured_report([(t, m, None) for t, m in learned.measurements], learned.distribution.total, records,
                                 attributes, n)
        return records, report, {}, cost

    return Run(cost, execute)


def plan_dualquery(private: PrivateTable, attributes: Sequence[Attribute], request: Request,
                   options: dict) -> Run:
    """DualQuery within the request: a noisy row count (``count_share`` of the spend; the
    formulas' public ``n``), then the run, whose cost ties ``eta``, ``rounds``, ``samples`` and
    ``n`` together. At most two of the three may be given, and not ``eta`` with ``rounds``, so
    that the third can always be set to fit once ``n`` is known: ``rounds`` (the most that fit,
    at least 1, whose draws are uniform and cost nothing) or, given ``rounds``, ``eta`` (the
    cost is continuous in ``eta``: the largest that fits, :func:`~dpsql.synth.accounting.dualquery_eta`).
    Nothing can be refused after the count is drawn."""
    given = [k for k in ("eta", "rounds", "samples") if options.get(k) is not None]
    if len(given) == 3 or {"eta", "rounds"} <= set(given):
        raise PrivacyError(f"DualQuery got {', '.join(f'{k}={options[k]!r}' for k in given)}, but its spend "
                           "depends on the noisy row count, so the spend must set one of eta, rounds and samples: "
                           "give rounds (the spend sets eta) or eta (the spend sets rounds), not both")
    eta = None if options.get("eta") is None else real("eta", options["eta"], high=MAX_ETA)
    rounds = None if options.get("rounds") is None else integer("rounds", options["rounds"])
    samples = DEFAULT_SAMPLES if options.get("samples") is None else integer("samples", options["samples"])
    share = real("count_share", option(options, "count_share", COUNT_SHARE), below_one=True)
    oracle = choice("oracle", option(options, "oracle", "auto"), ORACLES)
    time_limit = real("time_limit", option(options, "time_limit", 10.0), high=MAX_TIME_LIMIT)
    time_budget = max_seconds(options)
    if rounds is not None:
        check_synthetic_cells(rounds, request.columns, f"DualQuery makes one record a round: rounds={rounds}")
    if samples > limits.MAX_SYNTHETIC_CELLS:
        raise ResourceLimitError(f"samples={samples} query draws a round is more than the limit of "
                                 f"{limits.MAX_SYNTHETIC_CELLS:,}")
    cells = check_cells("DualQuery", request.marginals, attributes)
    # a round: the private draws, the multiplicative weights over every cell, and one oracle solve;
    # the local-search oracle's rounds take longer the more rounds came before (measured, QUERY)
    per_round = READ + CELL * (cells.size + samples) + \
        (LOCAL_SEARCH if oracle == "heuristic" else min(time_limit, SOLVE))
    growth = QUERY if oracle == "heuristic" else 0.0

    def seconds(t: int) -> float:
        return READ + t * per_round + growth * t * (t + 1) / 2

    if rounds is not None:
        Work("DualQuery", [(f"rounds={rounds} with samples={samples}", seconds(rounds))]).check(time_budget)
    max_rounds = synthetic_rows_cap(request.columns)  # one record a round
    count_cost, rest, count = plan_count(private, attributes, request, share, "DualQuery")

    def cost_of(eta: float, rounds: int, n: float) -> Cost:
        if rounds == 1:  # the first round's draws are uniform: 0-DP, whatever eta
            return Cost()
        if request.zcdp:
            return Cost(rho=dualquery_rho(eta, rounds, samples, n))
        return Cost(epsilon=dualquery_epsilon(eta, rounds, samples, n, rest.delta), delta=rest.delta)

    def schedule(n: float) -> tuple[float, int]:
        """(eta, rounds) for the public row count ``n``: always within ``rest``."""
        if rounds is None:
            step = DEFAULT_ETA if eta is None else eta
            limit = rest.rho if request.zcdp else rest.epsilon

            def fits(t: int) -> bool:  # within the records' cells, max_seconds and the spend
                if t > max_rounds or seconds(t) > time_budget:
                    return False
                return (dualquery_rho(step, t, samples, n) if request.zcdp
                        else dualquery_epsilon(step, t, samples, n, rest.delta)) <= limit
            return step, largest_integer(fits, "DualQuery rounds")  # 1 always fits
        if rounds == 1:
            return DEFAULT_ETA, 1
        if request.zcdp:
            return dualquery_eta_zcdp(rest.rho, rounds, samples, n, upper=MAX_ETA), rounds
        return dualquery_eta(rest.epsilon, rest.delta, rounds, samples, n, upper=MAX_ETA), rounds

    def execute(bar: tqdm, rng: np.random.Generator) -> Outcome:
        counted, std = count()
        n = max(counted, 1.0) / private.rows_per_unit
        step, run_rounds = schedule(n)
        cost = cost_of(step, run_rounds, n)
        if rounds is None and (cost.rho if request.zcdp else cost.epsilon) < (rest.rho if request.zcdp
                                                                              else rest.epsilon) / 2:
            warnings.warn(f"DualQuery runs {run_rounds:,} round{'s' if run_rounds > 1 else ''} at eta={step:g} on "
                          f"a noisy {n:,.0f} rows (one more would exceed the spend, the cells a synthetic table may "
                          f"hold or max_seconds): its rounds spend {request.budget.describe(cost)} of the "
                          f"{request.budget.describe(rest)} asked for them, and the rest is not charged",
                          stacklevel=caller())
        reservation = private.reserve(cost, f"DualQuery: eta={step!r}, T={run_rounds}, s={samples}, n={n!r}",
                                      "dualquery")
        bar.total = run_rounds
        try:
            learned = dualquery(private, attributes, cells.subsets, eta=step, rounds=run_rounds, samples=samples,
                                n=n, reservation=reservation, oracle=oracle, time_limit=time_limit,
                                seed=request.seed, progress=round_progress(bar))
        finally:
            reservation.close()
        records = resample(learned.records, request.rows if request.rows is not None else
                           request.default_rows(n * private.rows_per_unit, "noisy row count", std), request.rows,
                           rng)
        return records, game_report(learned, request.marginals, attributes), learned.oracle_summary(), \
            count_cost + cost

    return Run(count_cost + rest, execute)


def plan_count(private: PrivateTable, attributes: Sequence[Attribute], request: Request, share: float,
               method: str) -> tuple[Cost, Cost, Callable[[], tuple[float, float]]]:
    """A noisy row count for ``method`` (DualQuery's public ``n``, FEM's default rows), planned
    within the request: ``share`` of its spend, a Laplace count of ``ε = share·ε`` (``ε``-DP), or
    of ``ε = √(2·share·ρ)`` under zCDP (``ε²/2 = share·ρ``-zCDP, Bun & Steinke 2016, Prop. 1.4).
    Returns the count's cost, the rest of the request (they compose by adding up), and the
    measurement, taken when called (the noisy count of rows and its noise's standard deviation)."""
    total, budget = request.total, request.budget
    epsilon = math.sqrt(2.0 * share * total.rho) if request.zcdp else share * total.epsilon
    strategy = marginal_strategy([a.cells for a in attributes], ())
    try:
        cost = Cost.laplace(epsilon, budget)
        private.plan(strategy, Laplace(epsilon))
    except PrivacyError as e:
        raise reworded(e, f"{method}'s noisy row count gets count_share={share!r} of {budget.describe(total)}, "
                         f"epsilon={epsilon!r}, too little to measure") from None
    rest = Cost(rho=(1.0 - share) * total.rho) if request.zcdp else \
        Cost(epsilon=(1.0 - share) * total.epsilon, delta=total.delta)

    def count() -> tuple[float, float]:
        measured = private.measure(attributes, strategy, Laplace(epsilon), cost, f"{method} noisy row count")
        return float(measured.values[0]), measured.noise_std

    return cost, rest, count


def resample(records: np.ndarray, n: int, rows: int | None, rng: np.random.Generator) -> np.ndarray:
    """``n`` of the learned ``records``: all of them, in order, when the default count equals theirs."""
    if rows is None and n == len(records):
        return records
    return records[rng.integers(0, len(records), size=n)]


def plan_fem(private: PrivateTable, attributes: Sequence[Attribute], request: Request, options: dict) -> Run:
    """FEM within the request: ``eps0`` per selection (default ``0.008·√ε``, the published
    ADULT setting; ``√ε`` is ``(2ρ)^{1/4}`` under zCDP) and the most rounds that fit, or the
    largest ``eps0`` that fits given ``rounds``, or both given (refused when they do not fit).
    ``bounded_range=False`` accounts each selection as ``ε₀²/2``-zCDP, as the paper did,
    instead of the exponential mechanism's ``ε₀²/8``. Derived rounds are capped so that the
    records fit :data:`~dpsql.limits.MAX_SYNTHETIC_CELLS` (spending less, with a warning)."""
    total, budget = request.total, request.budget
    tight = flag("bounded_range", option(options, "bounded_range", True))
    rounds = None if options.get("rounds") is None else integer("rounds", options["rounds"])
    eps0 = None if options.get("eps0") is None else real("eps0", options["eps0"])
    samples = integer("samples", option(options, "samples", 50))
    noise = real("noise", option(options, "noise", PUBLISHED_NOISE))
    oracle = choice("oracle", option(options, "oracle", "heuristic"), ORACLES)
    time_limit = real("time_limit", option(options, "time_limit", 10.0), high=MAX_TIME_LIMIT)
    # one process unless asked: spawned workers rerun a script's top level, spending again
    # where it lacks an ``if __name__ == "__main__":`` guard
    processes = min(integer("processes", option(options, "processes", 1)), os.cpu_count() or 1)
    width = sum(a.cells for a in attributes)
    if samples * width > limits.MAX_SYNTHETIC_CELLS:
        raise ResourceLimitError(f"FEM perturbs samples={samples} records of {width:,} attribute values a round, "
                                 f"{samples * width:,} numbers, more than the limit of {limits.MAX_SYNTHETIC_CELLS:,}")
    limit = max_seconds(options)
    max_rounds = synthetic_rows_cap(request.columns) // samples  # samples records a round
    if rounds is not None:
        check_synthetic_cells(rounds * samples, request.columns,
                              f"FEM makes samples records a round: rounds={rounds} with samples={samples}")
    elif max_rounds < 1:
        check_synthetic_cells(samples, request.columns, f"FEM makes samples records a round: samples={samples}")
    cells = check_cells("FEM", request.marginals, attributes)
    # a round: the selection over every cell query and its negation, samples perturbed best responses,
    # which the local search finds in time growing with the cells selected before (FEM_QUERY)
    round_seconds = FEM_ROUND + CELL * (2 * cells.size + samples * width) + \
        samples * (STEP if oracle == "heuristic" else min(time_limit, SOLVE) / processes)  # batched local search

    def seconds(t: int) -> float:
        return fem_seconds(t, round_seconds, samples, cells.size, FEM_QUERY if oracle == "heuristic" else 0.0)

    if rounds is not None:
        Work("FEM", [(f"rounds={rounds} with samples={samples}", seconds(rounds))]).check(limit)
    in_time = largest_integer(lambda t: t <= max(max_rounds, 1) and (t == 1 or seconds(t) <= limit), "FEM rounds")
    zcdp = request.zcdp
    rho = total.rho if zcdp else (zcdp_rho(total.epsilon, total.delta) if total.delta else None)
    if rounds is not None and eps0 is None:  # exponential_rho(eps0) = rho / rounds, rounded down
        eps0 = (1.0 - 1e-12) * (math.sqrt((8.0 if tight else 2.0) * rho / rounds) if rho is not None
                                else total.epsilon / rounds)
    if eps0 is None:
        eps0 = PUBLISHED_EPS0_FACTOR * math.sqrt(math.sqrt(2.0 * total.rho) if zcdp else total.epsilon)
    per_round = exponential_rho(eps0, tight)
    if per_round == 0.0 or not math.isfinite(per_round):
        raise PrivacyError(f"eps0={eps0!r} has no finite, nonzero zCDP cost eps0**2/{8 if tight else 2}: "
                           "choose eps0 between 1e-150 and 1e150")
    if rounds is None:
        rounds = fem_rounds_zcdp(rho, eps0, tight) if zcdp else fem_rounds(total.epsilon, total.delta, eps0, tight)
        if rounds > max_rounds:
            warnings.warn(f"FEM at eps0={eps0:g} fits {rounds:,} rounds of {samples} records, more than a synthetic "
                          f"table may hold ({limits.MAX_SYNTHETIC_CELLS:,} cells); running {max_rounds:,} rounds, "
                          "which spends less", stacklevel=caller())
            rounds = max_rounds
        if rounds > in_time:
            warnings.warn(f"FEM at eps0={eps0:g} fits {rounds:,} rounds of {samples} records, more than it has time "
                          f"for within max_seconds={limit:g} (about {seconds(rounds):,.0f} s); running {in_time:,} "
                          "rounds, which spends less", stacklevel=caller())
            rounds = in_time
    if not math.isfinite(noise * math.sqrt(rounds)):
        raise ArgumentError(f"noise={noise!r} times the square root of rounds={rounds} is not a finite number")
    if zcdp:
        cost = Cost(rho=rounds * per_round)
    elif total.delta:
        cost = Cost(epsilon=zcdp_epsilon(rounds * per_round, total.delta), delta=total.delta)
    else:
        cost = Cost(epsilon=rounds * eps0)
    if not cost.within(total):
        raise PrivacyError(f"FEM with eps0={eps0:g} and {rounds} rounds costs {budget.describe(cost)}, more than "
                           f"the {budget.describe(total)} asked for; give eps0 or rounds and the spend sets the other")
    notes = fem_warnings(eps0, cells.offsets[-1], [(a.name, a.cells) for a in attributes], request.marginals)
    for note in notes:  # up front: before anything is spent
        warnings.warn(note, stacklevel=caller())

    def execute(bar: tqdm, rng: np.random.Generator) -> Outcome:
        reservation = private.reserve(cost, f"FEM: eps0={eps0:g}, T={rounds}", "fem")
        bar.total = rounds
        try:
            learned = fem(private, attributes, cells.subsets, eps0=eps0, rounds=rounds, reservation=reservation,
                          samples=samples, noise=noise, oracle=oracle, time_limit=time_limit, processes=processes,
                          seed=request.seed, progress=round_progress(bar))
        finally:
            reservation.close()
        records = resample(learned.records, len(learned.records) if request.rows is None else request.rows,
                           request.rows, rng)
        report = game_report(learned, request.marginals, attributes)
        report.attrs["warnings"] = notes
        return records, report, learned.oracle_summary(), cost

    return Run(cost, execute)


def plan_fem_rows(private: PrivateTable, attributes: Sequence[Attribute], request: Request,
                  options: dict) -> Run:
    """FEM (:func:`plan_fem`) whose default rows are a noisy row count (``count_share`` of the
    spend, 0.05, :func:`plan_count`) instead of the records it made (``rounds × samples``, 68,000
    for 3,000 rows: ``COUNT(*)`` on the synthetic table was 23 times the private one's); FEM
    runs with the rest, and its records are resampled to that count. With ``rows`` given, no
    count is measured."""
    share = real("count_share", option(options, "count_share", COUNT_SHARE), below_one=True)
    if request.rows is not None:
        return plan_fem(private, attributes, request, options)
    count_cost, rest, count = plan_count(private, attributes, request, share, "FEM")
    inner = plan_fem(private, attributes, dataclasses.replace(request, total=rest), options)

    def execute(bar: tqdm, rng: np.random.Generator) -> Outcome:
        n, std = count()
        records, report, oracle, spent = inner.execute(bar, rng)
        return resample(records, request.default_rows(n, "noisy row count", std), None, rng), report, oracle, \
            count_cost + spent

    return Run(count_cost + inner.cost, execute)


#: Columns with more values than this make FEM's oracle slow (it weighs every value of each attribute).
FEM_SLOW_VALUES = 100


def fem_warnings(eps0: float, cells: int, attributes: Sequence[tuple[str, int]],
                 marginals: Sequence[tuple[int, ...]]) -> list[str]:
    """FEM's known weak spots for this request, from public values only (never the table's size).

    Each selection picks among the ``Q = 2 · cells`` workload cell queries and negations with
    probability ``∝ exp(ε₀ · score / 2)``, the score a count: it finds a cell off by a
    fraction ``τ`` of the rows only once ``ε₀ τ n / 2`` exceeds ``ln Q``, so on a table of
    ``n`` rows its error stays above about ``τ(n) = 2 ln Q / (ε₀ n)``. The note gives the
    rows needed for ``τ = 5%`` (ADULT's 48,842 rows sit near it at the published ε₀; on a
    1,300-row table FEM's output was near-uniform, mean TV 0.79). Its oracle weighs every
    value of each attribute per record: a column of more than :data:`FEM_SLOW_VALUES`
    values makes rounds slow (a 501-value column took 28 minutes on a 135k-row table).

    >>> fem_warnings(0.008, 50_000, [("a", 9), ("b", 501)], [(0, 1)])[0][:80]
    'FEM finds a cell off by 5% of the rows only on tables of more than about 57,565 '
    """
    q = 2 * cells
    rows = 2.0 * math.log(q) / (eps0 * 0.05)
    notes = [f"FEM finds a cell off by 5% of the rows only on tables of more than about {rows:,.0f} rows at "
             f"eps0={eps0:g} among {q:,} cell queries (its error is about 2 ln(Q) / (eps0 n) of the rows); "
             "on smaller tables expect a table near uniform: method='pgm' measures the marginals instead"]
    used = sorted({a for m in marginals for a in m})
    wide = [(attributes[a][0], attributes[a][1]) for a in used if attributes[a][1] > FEM_SLOW_VALUES]
    if wide:
        names = ", ".join(f"{name} ({size} values)" for name, size in wide)
        notes.append(f"FEM's oracle weighs every value of each attribute: {names} will make its rounds slow "
                     "(bin them, or use method='pgm')")
    return notes
