"""One oracle call as data: the problem going in and the response coming out.

:class:`OracleProblem` bundles what differs between the independent problems
:func:`~dpsql.synth.oracle.best_responses` solves (it pickles, for the worker
processes); :class:`Response` is what every solver returns, with
:data:`RESULT_METHODS` naming what produced the record. They live apart from
the solvers so the heuristic, the MIP and the entry points share one
definition.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import numpy as np

from dpsql.synth.oracle.queries import Conjunction

__all__ = ["Response", "OracleProblem", "RESULT_METHODS", "Seed"]

#: Values of :attr:`Response.method`: what produced the returned record.
RESULT_METHODS = ("mip-optimal", "mip-gap", "mip-time-limit", "heuristic", "warm-start")

#: What a ``seed`` argument may be: an int, a :class:`numpy.random.SeedSequence`, or None for fresh entropy.
Seed = Union[int, np.random.SeedSequence, None]


@dataclass(frozen=True)
class Response:
    """A best response.

    ``record`` is the chosen record, ``objective`` its exact objective value
    (recomputed on the record), ``method`` what produced it (one of
    :data:`RESULT_METHODS`: ``"mip-optimal"`` proven optimal up to HiGHS's
    feasibility tolerances, ``"mip-gap"`` within the relative ``mip_gap`` of
    the optimum, ``"mip-time-limit"`` the MIP's incumbent when time ran out,
    ``"heuristic"`` local search, ``"warm-start"`` the caller's warm start,
    nothing found beat it), ``seconds`` the wall time of the call, and
    ``bound`` an upper bound on the optimum from the MIP's dual bound (None
    when no MIP ran to a bound).
    """

    record: tuple[int, ...]
    objective: float
    method: str
    seconds: float
    bound: float | None = None


@dataclass(frozen=True)
class OracleProblem:
    """One best-response problem for :func:`~dpsql.synth.oracle.best_responses` (the arguments of
    :func:`~dpsql.synth.oracle.best_response` that differ between problems)."""

    domain: tuple[int, ...]
    queries: tuple[Conjunction, ...]
    weights: tuple[float, ...]
    linear: tuple[tuple[float, ...], ...] | None = None
    warm_start: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "domain", tuple(int(n) for n in self.domain))
        object.__setattr__(self, "queries", tuple(self.queries))
        object.__setattr__(self, "weights", tuple(float(w) for w in np.asarray(self.weights, dtype=float).reshape(-1)))
        if self.linear is not None:
            object.__setattr__(self, "linear", tuple(tuple(float(v) for v in np.asarray(t, dtype=float).reshape(-1))
                                                    for t in self.linear))
        if self.warm_start is not None:
            object.__setattr__(self, "warm_start", tuple(int(v) for v in self.warm_start))
