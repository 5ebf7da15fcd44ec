"""A synthesis request, validated (:class:`Request`), and the run a method's planner makes of
it (:class:`Run`): what every planner shares, from the spend's currency and the default rows to
the refusals of too many cells and the stack level that points a warning at the user's call.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
from tqdm.auto import tqdm

from dpsql import limits
from dpsql.errors import PrivacyError, ResourceLimitError
from dpsql.limits import MAX_MEASURED_CELLS, synthetic_rows_cap
from dpsql.private.budget import ZCDP, Budget, Cost
from dpsql.schema import Attribute
from dpsql.synth.accounting import gaussian_rho, zcdp_rho
from dpsql.synth.cells import MarginalCells

if TYPE_CHECKING:
    import pandas as pd


#: A default row count within this many noise standard deviations of 0 is warned about: noise
#: alone makes one that large with probability 0.1% (Gaussian) or 0.7% (Laplace).
NOISY_COUNT = 3.0

#: What a run yields: the records, the quality report, the oracle summary and the cost charged.
Outcome = tuple[np.ndarray, "pd.DataFrame", dict, Cost]


@dataclass(frozen=True)
class Run:
    """A validated synthesis: ``cost`` is the most it may charge, ``execute(bar, rng)`` draws and
    returns its :data:`Outcome` (it is only called once the whole ``cost`` has been checked)."""

    cost: Cost
    execute: Callable[[tqdm, np.random.Generator], Outcome]
    method: str = ""


@dataclass(frozen=True)
class Request:
    """What every method needs, validated: the budget, the requested ``total``, the workload's
    ``marginals``, ``rows`` (None: the method's default), and the synthetic table's ``columns``."""

    budget: Budget
    total: Cost
    marginals: list[tuple[int, ...]]
    rows: int | None
    columns: int
    seed: int | None
    wide: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)

    @property
    def zcdp(self) -> bool:
        return self.budget.currency == ZCDP

    def reservation(self, gaussian: bool = False) -> tuple[float, Cost]:
        """The ``ρ`` a zCDP mechanism may spend (the request's, or the most implying its ``(ε, δ)``:
        :func:`~dpsql.synth.accounting.gaussian_rho` for a mechanism of ``gaussian`` measurements
        alone, else :func:`~dpsql.synth.accounting.zcdp_rho`) and the cost to reserve for it in
        the ledger's currency."""
        total = self.total
        if self.zcdp:
            return total.rho, Cost(rho=total.rho)
        rho = (gaussian_rho if gaussian else zcdp_rho)(total.epsilon, total.delta)
        return rho, Cost(epsilon=total.epsilon, delta=total.delta)

    def default_rows(self, count: float, what: str, std: float, in_time: int | None = None) -> int:
        """``count`` rows (a noisy count of standard deviation ``std``: released), or the most
        :data:`~dpsql.limits.MAX_SYNTHETIC_CELLS` allows, or ``in_time``, the most the run has time
        to make within ``max_seconds``, with a warning: after the spend a too-large default is
        capped, never refused. A count within :data:`NOISY_COUNT` standard deviations of 0 is warned
        about too: at a tiny spend, a 300-row table's default was 84,000 rows (pgm) or 2.2 million
        (aim), though the count told nothing of the table's size."""
        cap = synthetic_rows_cap(self.columns)
        n = max(int(round(count)), 0)
        if n < NOISY_COUNT * std:
            warnings.warn(f"the {what} is {n:,}, less than {NOISY_COUNT:g} times its noise's standard deviation "
                          f"({std:,.0f}): at this spend the table's size is mostly noise (pass rows= to choose it)",
                          stacklevel=caller())
        if n > cap:
            warnings.warn(f"the {what} is {n:,} rows, more than a synthetic table of {self.columns} columns may "
                          f"hold ({limits.MAX_SYNTHETIC_CELLS:,} cells); sampling {cap:,} rows (pass rows= to choose)",
                          stacklevel=caller())
            n = cap
        if in_time is not None and n > in_time:
            warnings.warn(f"the {what} is {n:,} rows, more than the run has time to make within max_seconds; "
                          f"sampling {in_time:,} rows (pass rows= or a larger max_seconds to choose)",
                          stacklevel=caller())
            n = in_time
        return n


def check_cells(method: str, marginals: Sequence[tuple[int, ...]], attributes: Sequence[Attribute]) -> MarginalCells:
    """The game's cells, refused when counting them all at once would exceed
    :data:`~dpsql.limits.MAX_MEASURED_CELLS`."""
    domain = [a.cells for a in attributes]
    cells = sum(math.prod(domain[a] for a in m) for m in marginals)
    if cells > MAX_MEASURED_CELLS:
        widest = max((a for m in marginals for a in m), key=lambda a: domain[a])
        raise ResourceLimitError(f"{method} counts every cell of the workload's marginals at once: {cells:,} cells, "
                                 f"more than the limit of {MAX_MEASURED_CELLS:,}; the widest column, "
                                 f"{attributes[widest].name}, has {domain[widest]:,} values: bin it in the schema, "
                                 "or choose fewer or smaller marginals")
    return MarginalCells(domain, marginals)


def reworded(error: PrivacyError, what: str) -> PrivacyError:
    """``error`` (a noise floor) said in the terms of the request: ``what`` named its parameters."""
    return PrivacyError(f"{what}: {error}")


def unnamed_attributes(attributes: int, marginals: Sequence[tuple[int, ...]]) -> list[int]:
    """The positions of the ``attributes`` that no marginal names.

    >>> unnamed_attributes(4, [(0, 2)])
    [1, 3]
    """
    return [a for a in range(attributes) if not any(a in m for m in marginals)]


def caller() -> int:
    """The ``stacklevel`` at which a warning points at the user's call: the first frame, counted
    from the one calling :func:`warnings.warn`, outside the dpsql package (however many of its
    planners wrap one another)."""
    frame, level = sys._getframe(2), 2
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level


#: The dpsql package's folder: frames of files within it are dpsql's own (:func:`caller`).
_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))) + os.sep
