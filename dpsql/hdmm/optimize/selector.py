"""Strategy selection: run every feasible HDMM operator and keep the best.

Selection is data-independent, so it spends no privacy budget and its result
can be cached (see :mod:`dpsql.hdmm.cache`). Each operator runs with ``restarts``
independent starts from a seed derived from ``seed``, so a selection is
deterministic given its inputs.

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
from dataclasses import dataclass, field
from typing import Callable, Sequence

from tqdm.auto import tqdm

from dpsql.errors import WorkloadError
from dpsql.hdmm.cache import StrategyCache
from dpsql.hdmm.error_analysis import rmse as expected_rmse
from dpsql.hdmm.optimize.kron import opt_kron
from dpsql.hdmm.optimize.marginal import MAX_SEARCH_ATTRIBUTES, opt_marginal
from dpsql.hdmm.optimize.opt0 import opt_0
from dpsql.hdmm.optimize.union import opt_plus, product_groups
from dpsql.hdmm.strategy import Strategy
from dpsql.hdmm.workload import Workload
from dpsql.privacy import NoiseModel

log = logging.getLogger("dpsql.hdmm.optimize")

#: Operators that take longer than this many seconds print a progress line.
PROGRESS_AFTER = 2.0

OPERATORS: dict[str, Callable[..., Strategy]] = {
    "OPT_0": opt_0,
    "OPT_kron": opt_kron,
    "OPT_plus": opt_plus,
    "OPT_M": opt_marginal,
}


def feasible(workload: Workload) -> list[str]:
    """The operators that apply to this workload's shape."""
    ops = []
    if len(workload.domain) == 1:
        ops.append("OPT_0")  # OPT_kron on one attribute is OPT_0 again
    else:
        ops.append("OPT_kron")
    if len(product_groups(workload)) > 1:
        ops.append("OPT_plus")
    if len(workload.domain) <= MAX_SEARCH_ATTRIBUTES:
        ops.append("OPT_M")
    return ops


@dataclass
class Candidate:
    """One operator's outcome."""

    operator: str
    strategy: Strategy
    rmse: float
    seconds: float


@dataclass
class Selection:
    """The chosen strategy and every candidate considered."""

    strategy: Strategy
    rmse: float
    candidates: list[Candidate] = field(default_factory=list)
    cached: bool = False

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
) -> Selection:
    """Run the feasible operators (or those named) and keep the lowest expected RMSE.

    ``progress``: ``True`` shows a progress bar and a line per operator on
    stderr, ``False`` never does, and ``None`` shows them only once the
    selection has run for :data:`PROGRESS_AFTER` seconds (bar) or for
    operators slower than that (lines). With a ``cache``, a selection already made
    for the same workload, noise family and settings is loaded instead of
    recomputed, and a new one is stored.
    """
    names = feasible(workload) if operators is None else list(operators)
    unknown = [n for n in names if n not in OPERATORS]
    if unknown:
        raise WorkloadError(f"unknown strategy operator(s) {unknown}; choose from {sorted(OPERATORS)}")
    key = None
    if cache is not None:
        key = cache.key(workload, noise, operators=names, restarts=restarts, seed=seed)
        hit = cache.get(key)
        if hit is not None:
            return Selection(hit, expected_rmse(workload, hit, noise), cached=True)
    candidates = []
    bar = tqdm(names, desc="[dpsql] selecting a strategy", unit="operator", file=sys.stderr, leave=False,
               disable=progress is False, delay=0 if progress else PROGRESS_AFTER)
    for i, name in enumerate(bar):
        bar.set_postfix_str(name, refresh=False)
        start = time.perf_counter()
        strategy = OPERATORS[name](workload, noise, restarts=restarts, seed=seed + 7919 * i)
        value = expected_rmse(workload, strategy, noise)
        seconds = time.perf_counter() - start
        candidates.append(Candidate(name, strategy, value, seconds))
        message = f"[dpsql] {name}: expected RMSE {value:.4g} ({seconds:.1f} s)"
        log.info(message)
        if progress or (progress is None and seconds > PROGRESS_AFTER):
            bar.write(message, file=sys.stderr)
    best = min(candidates, key=lambda c: (math.isnan(c.rmse), c.rmse))
    if not math.isfinite(best.rmse):
        raise WorkloadError("no strategy operator could answer this workload")
    if cache is not None:
        cache.put(key, best.strategy)
    return Selection(best.strategy, best.rmse, candidates)
