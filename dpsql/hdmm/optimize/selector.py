"""Strategy selection: run every feasible HDMM operator and keep the best.

Selection is data-independent, so it spends no privacy budget and its result
can be cached (see :mod:`dpsql.hdmm.cache`). Each operator runs with ``restarts``
independent starts from a seed derived from ``seed``, so a selection is
deterministic given its inputs.

The workload is first reduced to the values its queries tell apart
(:mod:`dpsql.hdmm.reduction`), and its terms that differ in one factor only are
stacked into one (:mod:`dpsql.hdmm.stacking`: the same queries, fewer terms for
OPT_+ to search one by one); every operator runs on that workload (the direct
candidate on the unstacked terms) and the chosen strategy is expanded back, with
the same error. Its dense steps run with the BLAS threads :func:`~dpsql.hdmm.optimize.threads.dense_threads`
gives it, its share of the machine's free cores. Besides the HDMM operators, the obvious mechanisms
(:mod:`dpsql.hdmm.optimize.baseline`: identity on the reduced domain, the
workload's own queries) are candidates, so the result is never worse than
either.

Two objectives: ``"total"`` (HDMM's, the expected total squared error) and
``"max"``, the largest variance of any one query, for tabulations where every
published cell must meet an accuracy standard. Under ``"max"`` the candidates
are compared by their largest variance, Gaussian marginal workloads get the
certified optimum (:mod:`dpsql.hdmm.optimize.maxvar`), and the best candidate
is refined by reweighting the workload's terms toward those with the largest
variance (:func:`reweighted`), keeping every improvement.

>>> from dpsql.privacy import Laplace
>>> from dpsql.hdmm.workload import marginals_workload
>>> sel = select(marginals_workload((4, 5, 6), k=1), Laplace(1.0), restarts=1)
>>> sel.operator in {"OPT_kron", "OPT_plus", "OPT_M"}
True
"""

from __future__ import annotations

import logging
import math
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable, Sequence

from tqdm.auto import tqdm

from dpsql.errors import CacheError, ResourceLimitError, WorkloadError
from dpsql.hdmm.cache import Entry, StrategyCache, unit_error
from dpsql.hdmm.error_analysis import max_variance
from dpsql.hdmm.error_analysis import rmse as expected_rmse
from dpsql.hdmm.marginals import in_algebra
from dpsql.hdmm.optimize.baseline import direct, direct_applies, identity, identity_applies
from dpsql.hdmm.optimize.footprint import estimate_bytes
from dpsql.hdmm.optimize.hier import hierarchies, opt_hier
from dpsql.hdmm.optimize.hierplus import opt_hier_plus, split
from dpsql.hdmm.optimize.kron import opt_kron
from dpsql.hdmm.optimize.marginal import MAX_SEARCH_ATTRIBUTES, opt_marginal
from dpsql.hdmm.optimize.maxvar import opt_max_marginal
from dpsql.hdmm.optimize.opt0 import opt_0
from dpsql.hdmm.optimize.threads import dense_threads
from dpsql.hdmm.optimize.union import opt_plus, product_groups
from dpsql.hdmm.reduction import Reduction, reduce_domain
from dpsql.hdmm.stacking import Stacking, stack_terms
from dpsql.hdmm.strategy import Strategy, measured_cells
from dpsql.hdmm.workload import Workload
from dpsql.limits import MAX_CANDIDATE_BYTES, MAX_MEASURED_CELLS
from dpsql.privacy import NoiseModel

log = logging.getLogger("dpsql.hdmm.optimize")

#: Operators that take longer than this many seconds print a progress line.
PROGRESS_AFTER = 2.0

#: Reweighting rounds of the ``"max"`` objective.
REWEIGHT_ROUNDS = 6

OBJECTIVES = ("total", "max")

#: Operators given the workload's own terms, not stacked ones: the direct candidate stands for
#: answering each statement alone (its terms, the budget split among them), the bound it keeps.
TERMWISE = frozenset({"direct", "OPT_H", "OPT_Hplus"})


def opt_marginal_max(workload: Workload, noise: NoiseModel, restarts: int = 1, seed: int = 0) -> Strategy:
    """The certified max-variance optimum of a Gaussian marginal workload (:mod:`~dpsql.hdmm.optimize.maxvar`)."""
    return opt_max_marginal(workload, noise).strategy


OPERATORS: dict[str, Callable[..., Strategy]] = {
    "OPT_0": opt_0,
    "OPT_kron": opt_kron,
    "OPT_plus": opt_plus,
    "OPT_M": opt_marginal,
    "OPT_M_max": opt_marginal_max,
    "identity": identity,
    "direct": direct,
    "OPT_H": opt_hier,
    "OPT_Hplus": opt_hier_plus,
}


def feasible(workload: Workload, noise: NoiseModel | None = None, objective: str = "total",
             terms: Workload | None = None) -> list[str]:
    """The operators that apply to this workload's shape (and, for ``OPT_M_max``, to the
    ``"max"`` objective under Gaussian ``noise``). A workload that groups an attribute at two or more
    nested levels (state and county: its factors are laminar partitions, a tree) is answered by OPT_H,
    among others, from one data vector, so that its levels add up: the operators answering each term
    from its own measurements (OPT_+, direct) are left out. A filter and a total, or one GROUP BY and a
    total, are not such levels (OPT_⊗'s closed form covers them). Where one product over every attribute
    would count more than :data:`~dpsql.limits.MAX_MEASURED_CELLS` cells and a hierarchy splits the
    statements into groups on disjoint attributes, OPT_H+ measures each group on its own and reconciles
    them (:mod:`~dpsql.hdmm.optimize.hierplus`). ``terms``: the workload unstacked
    (:mod:`~dpsql.hdmm.stacking`), where the levels are seen (OPT_H and OPT_H+ run on it)."""
    ops = []
    unstacked = terms if terms is not None else workload
    trees = hierarchies(unstacked)
    nested = any(tree is not None and len({fs[i].shape[0] for _, fs in unstacked.terms if fs[i].shape[0] > 1}) > 1
                 for i, tree in enumerate(trees))
    if len(workload.domain) == 1:
        ops.append("OPT_0")  # OPT_kron on one attribute is OPT_0 again
    else:
        ops.append("OPT_kron")
    if len(product_groups(workload)) > 1 and not nested:
        ops.append("OPT_plus")
    if len(workload.domain) <= MAX_SEARCH_ATTRIBUTES:
        ops.append("OPT_M")
        if (objective == "max" and noise is not None and noise.norm == 2
                and all(in_algebra(f) for _, fs in workload.terms for f in fs)):
            ops.append("OPT_M_max")
    if identity_applies(workload):
        ops.append("identity")
    if direct_applies(workload) and not nested:
        ops.append("direct")
    if nested:
        ops.append("OPT_H")
    if math.prod(unstacked.domain) > MAX_MEASURED_CELLS and split(unstacked, trees) is not None:
        ops.append("OPT_Hplus")
    return ops


@dataclass
class Candidate:
    """One operator's outcome; ``rmse`` and ``max_variance`` are its expected errors (the latter
    under the ``"max"`` objective only, NaN otherwise)."""

    operator: str
    strategy: Strategy
    rmse: float
    seconds: float
    max_variance: float = math.nan


@dataclass
class Selection:
    """The chosen strategy (over the workload's full domain) and every candidate considered
    (over the reduced domain of ``reduction``, with the same errors)."""

    strategy: Strategy
    rmse: float
    candidates: list[Candidate] = field(default_factory=list)
    cached: bool = False
    max_variance: float = math.nan
    objective: str = "total"
    reduction: Reduction | None = None

    @property
    def operator(self) -> str:
        return self.strategy.operator


def select(
    workload: Workload,
    noise: NoiseModel,
    operators: Sequence[str] | None = None,
    restarts: int = 3,
    seed: int = 0,
    progress: bool | None = None,
    cache: StrategyCache | None = None,
    objective: str = "total",
    reduce: bool = True,
    stack: bool = True,
) -> Selection:
    """Run the feasible operators (or those named) and keep the best under ``objective``. An
    operator that refuses the workload (a :class:`~dpsql.errors.WorkloadError`: it would form a
    matrix too large to hold, as OPT_0 would the Gram of a column of 500,000 values) is left
    out, and so is one whose memory, estimated from the workload's shape before it runs
    (:mod:`~dpsql.hdmm.optimize.footprint`), exceeds :data:`~dpsql.limits.MAX_CANDIDATE_BYTES`
    or that runs out of memory all the same; if every one is, their reasons are raised together
    (a :class:`~dpsql.errors.ResourceLimitError` when memory was every reason). The refusals
    depend on the workload's shape only, never on data.

    ``objective="total"`` keeps the lowest expected RMSE, ``"max"`` the lowest
    largest per-query variance. ``stack=False`` runs the operators on the workload's
    own terms, unstacked (:mod:`~dpsql.hdmm.stacking`), and ``reduce=False`` skips the
    domain reduction, both for comparisons: reduction loses nothing in principle
    (averaging a strategy's columns within each group keeps or lowers both its
    sensitivity and its error, so some reduced strategy is at least as good as any unreduced one) and is
    much faster, though the non-convex Laplace searches may still end in other
    local optima on either domain. ``progress``: ``True`` shows a
    progress bar and a line per operator on stderr, ``False`` never does, and
    ``None`` shows them only once the selection has run for
    :data:`PROGRESS_AFTER` seconds (bar) or for operators slower than that
    (lines). With a ``cache``, a selection already made for the same reduced
    workload, noise family, objective and settings is loaded instead of
    recomputed, if it answers the workload with the finite error recorded with
    it (else it is selected anew), and a new one is stored.
    """
    if objective not in OBJECTIVES:
        raise WorkloadError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    reduction = reduce_domain(workload) if reduce else None
    W = reduction.workload if reduction is not None else workload
    stacking = _stacking(W, stack)
    names = feasible(stacking.workload, noise, objective, W) if operators is None else list(operators)
    unknown = [n for n in names if n not in OPERATORS]
    if unknown:
        raise WorkloadError(f"unknown strategy operator(s) {unknown}; choose from {sorted(OPERATORS)}")

    def finish(strategy: Strategy, candidates: list[Candidate], cached: bool) -> Selection:
        return Selection(strategy if reduction is None else reduction.expand(strategy),
                         expected_rmse(W, strategy, noise), candidates, cached, max_variance(W, strategy, noise),
                         objective, reduction)

    key = None
    if cache is not None:
        key = cache.key(W, noise, operators=names, restarts=restarts, seed=seed, objective=objective)
        hit = cache.get(key)
        if hit is not None and _answers(W, hit, noise):
            return finish(hit.strategy, [], True)
    with dense_threads():
        return _select(W, stacking, noise, names, restarts, seed, progress, cache, key, objective, stack, finish)


def _select(W: Workload, stacking: Stacking, noise: NoiseModel, names: Sequence[str], restarts: int, seed: int,
            progress: bool | None, cache: StrategyCache | None, key: "str | None", objective: str, stack: bool,
            finish: Callable[[Strategy, list[Candidate], bool], Selection]) -> Selection:
    """:func:`select`'s search, once the cache has missed: every operator named, the best kept."""
    candidates, refused = [], []
    bar = tqdm(names, desc="[dpsql] selecting a strategy", unit="operator", file=sys.stderr, leave=False,
               disable=progress is False, delay=0 if progress else PROGRESS_AFTER)
    too_large = 0
    for i, name in enumerate(bar):
        bar.set_postfix_str(name, refresh=False)
        need = estimate_bytes(name, stacking.workload if name not in TERMWISE else W)
        if need > MAX_CANDIDATE_BYTES:  # skipped before it allocates anything
            refused.append(f"{name}: needs about {need:,} bytes of memory, more than the limit of "
                           f"{MAX_CANDIDATE_BYTES:,}")
            too_large += 1
            continue
        start = time.perf_counter()
        try:
            strategy = run(name, W, stacking, noise, restarts, seed + 7919 * i)
            cells = measured_cells(strategy)
            if cells > MAX_MEASURED_CELLS:  # the kernel would refuse to count it
                refused.append(f"{name}: its measurement counts {cells:,} cells, more than the limit of "
                               f"{MAX_MEASURED_CELLS:,}")
                too_large += 1
                continue
            candidates.append(_candidate(name, strategy, W, noise, start, objective))
        except WorkloadError as e:  # beyond this operator (a Gram too large to hold, say): the others may answer
            refused.append(f"{name}: {e}")
            continue
        except MemoryError:  # an estimate short of the truth: still a refusal, never numpy's error
            refused.append(f"{name}: ran out of memory")
            too_large += 1
            continue
        message = f"[dpsql] {name}: expected RMSE {candidates[-1].rmse:.4g} ({candidates[-1].seconds:.1f} s)"
        log.info(message)
        if progress or (progress is None and candidates[-1].seconds > PROGRESS_AFTER):
            bar.write(message, file=sys.stderr)
    if not candidates:
        error = ResourceLimitError if too_large == len(refused) else WorkloadError
        raise error("no strategy operator could answer this workload (" + "; ".join(refused) + ")")
    score = _score(objective)
    best = min(candidates, key=score)
    if objective == "max" and math.isfinite(best.max_variance) and best.operator != "OPT_M_max":
        start = time.perf_counter()
        refined = reweighted(W, noise, best, restarts=restarts, seed=seed, stack=stack)
        candidates.append(_candidate(f"{best.operator}:reweighted", refined, W, noise, start, objective))
        best = min(candidates, key=score)
    if not math.isfinite(best.rmse):
        raise WorkloadError("no strategy operator could answer this workload")
    if cache is not None:
        try:
            cache.put(key, best.strategy, unit_error(W, best.strategy, noise.norm))
        except CacheError as e:  # a cache that cannot be written (a read-only home, say) costs only the reuse
            warnings.warn(f"{e}; the strategy is used, not cached", RuntimeWarning, stacklevel=2)
    return finish(best.strategy, candidates, False)


def _answers(workload: Workload, entry: Entry, noise: NoiseModel) -> bool:
    """Whether a cached strategy answers ``workload`` with a finite error equal to the one recorded
    with it; an entry that does not (a strategy for another workload) is selected anew."""
    try:
        error = unit_error(workload, entry.strategy, noise.norm)
    except WorkloadError:  # another domain
        return False
    if math.isfinite(error) and math.isclose(error, entry.error, rel_tol=1e-9, abs_tol=1e-300):
        return True
    log.warning("a cached strategy does not answer its workload (error %r, recorded %r); selecting anew",
                error, entry.error)
    return False


def _stacking(workload: Workload, stack: bool) -> Stacking:
    """``workload``'s terms stacked, or each left alone if not ``stack``."""
    return stack_terms(workload) if stack else Stacking.alone(workload)


def run(name: str, workload: Workload, stacking: Stacking, noise: NoiseModel, restarts: int, seed: int) -> Strategy:
    """Operator ``name``'s strategy for ``workload``, searched on its terms as ``stacking`` stacks
    them unless the operator is :data:`TERMWISE`."""
    if name in TERMWISE:
        return OPERATORS[name](workload, noise, restarts=restarts, seed=seed)
    return stacking.unstack(OPERATORS[name](stacking.workload, noise, restarts=restarts, seed=seed))


def _candidate(name: str, strategy: Strategy, W: Workload, noise: NoiseModel, start: float,
               objective: str) -> Candidate:
    """A scored candidate; its largest variance is computed only when the objective needs it
    (every query's variance: seconds for the millions of ranges of a large 1-D domain)."""
    worst = max_variance(W, strategy, noise) if objective == "max" else math.nan
    return Candidate(name, strategy, expected_rmse(W, strategy, noise), time.perf_counter() - start, worst)


def _score(objective: str) -> Callable[[Candidate], tuple[bool, float]]:
    def score(c: Candidate) -> tuple[bool, float]:
        value = c.rmse if objective == "total" else c.max_variance
        return (math.isnan(value), value)
    return score


def reweighted(workload: Workload, noise: NoiseModel, start: Candidate, rounds: int = REWEIGHT_ROUNDS,
               restarts: int = 1, seed: int = 0, stack: bool = True) -> Strategy:
    """``start``'s operator rerun on the workload with its terms reweighted toward the largest
    variances (multiplicative weights on the dual of ``min max``); the strategy with the lowest
    largest variance on ``workload`` is returned, ``start``'s own if no round beats it. ``stack``:
    as for :func:`select`."""
    operator = start.operator
    best, best_value = start.strategy, start.max_variance
    scale = [1.0] * len(workload.terms)
    current = start.strategy
    for r in range(rounds):
        worst = [float(v.max()) if v.size else 0.0 for v in current.query_variances(workload)]
        top = max(worst)
        if not top > 0 or not math.isfinite(top):
            break
        scale = [s * math.sqrt(v / top) if v > 0 else s for s, v in zip(scale, worst)]
        terms = [(w * s, fs) for (w, fs), s in zip(workload.terms, scale)]
        scaled = Workload(workload.domain, terms)
        current = run(operator, scaled, _stacking(scaled, stack), noise, restarts, seed + r)
        value = max_variance(workload, current, noise)
        if value < best_value:
            best, best_value = current, value
    return best
