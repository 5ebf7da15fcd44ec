"""What the engine hands its front ends: released answers and plans, never private data.

:class:`Answer` is one statement's released table with the :class:`Release` that made it
(the spend, the mechanism, the strategy and its expected error, shared by a batch);
:class:`Explanation` is what a request would do, before anything is read or spent. The
Python API wraps an Answer as a :class:`~dpsql.api.result.Result` (with a relation on the
analyst's DuckDB), the command line prints or writes it, the server sends it as rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

    from dpsql.private.budget import Cost

__all__ = ["Answer", "Explanation", "Release"]


@dataclass(frozen=True)
class Release:
    """What one measurement spent and how accurate it is (shared by a batch).

    ``epsilon``/``delta`` (approximate DP) or ``rho`` (zCDP) is the spend
    recorded in the ledger; ``rmse`` is the expected root mean squared error
    over every query of the batch; ``operator`` is the HDMM strategy operator.
    """

    mechanism: str
    epsilon: float
    delta: float
    rho: float
    rmse: float
    operator: str
    queries: int
    statements: int
    entry: int

    def describe(self) -> str:
        if not self.queries:
            return (f"nothing measured and nothing spent: {self.statements} statement"
                    f"{'s' if self.statements != 1 else ''} answered from the public schema alone (the keys' "
                    "declared domain, less the groups WHERE rules out on it)")
        spend = (f"rho={self.rho:g}" if self.rho else
                 f"epsilon={self.epsilon:g}" + (f", delta={self.delta:g}" if self.delta else ""))
        return (f"{self.mechanism} noise, {spend}; strategy {self.operator} for {self.queries} queries "
                f"in {self.statements} statement{'s' if self.statements != 1 else ''}; "
                f"expected RMSE {self.rmse:.4g}")


@dataclass(frozen=True, eq=False)
class Explanation:
    """What a request would do, before anything is read or spent (:meth:`Connection.explain`).

    ``mechanism`` and ``cost`` are the noise and what it would charge; ``operator`` and
    ``rmse`` the selected strategy and its expected root mean squared error over the
    batch's answers; ``statements[i]`` has statement ``i``'s groups (all of them: HAVING,
    ORDER BY and LIMIT run on the noisy answers) with each aggregate's expected standard
    error (NULL where it depends on the answers, as for AVG).
    """

    mechanism: str
    cost: "Cost"
    operator: str
    rmse: float
    statements: "list[pd.DataFrame]"

    def __repr__(self) -> str:
        c = self.cost
        spend = f"rho={c.rho:g}" if c.rho else f"epsilon={c.epsilon:g}" + (f", delta={c.delta:g}" if c.delta else "")
        head = (f"-- would spend {spend} with {self.mechanism} noise; strategy {self.operator}; "
                f"expected RMSE {self.rmse:.4g}" if self.mechanism != "none"
                else "-- nothing to measure: answered from the public schema alone, spending nothing")
        return "\n".join([head, *(df.to_string(index=False) for df in self.statements)])


@dataclass(frozen=True, eq=False)
class Answer:
    """One statement's released answers: ``df`` holds its SELECT columns and their error
    columns (post-processed noisy values only); ``release`` is its batch's measurement."""

    sql: str
    df: "pd.DataFrame"
    release: Release
