"""Term stacking: join the workload terms that differ in one factor only.

Two Kronecker terms that agree on every factor but one are one product:
``[w₁ (A₁ ⊗ B); w₂ (A₂ ⊗ B)]`` has the rows of ``[w₁A₁; w₂A₂] ⊗ B``. A batch of
SQL statements compiles to one term per statement, so 320 ranges over one column
are 320 terms, and OPT_+, which searches a Kronecker strategy for each group of
equal terms, searched 320. Stacked, they are one term, and OPT_+, which needs
two, does not run: selection under Laplace noise took 261 s unstacked and 8.7 s
stacked, with the same strategy (``benchmarks/stacking.py``). The direct
candidate is given the unstacked terms all the same
(:data:`~dpsql.hdmm.optimize.selector.TERMWISE`): it stands for answering each
statement alone.

Nothing the selector scores changes. The stacked workload has the same rows
(in another order), so the same Gram matrix ``WᵀW``, the same number of queries
and the same variance for every query under any strategy: the expected error
and the largest variance of a strategy are those of the original workload, and
OPT_0, OPT_⊗ and OPT_M, which see the workload through its Gram, search the same
problem. Only OPT_+, which works group by group, sees fewer terms; a union strategy found on the stacked terms answers each original term
from the part that answered its stacked term (:meth:`Stacking.unstack`), with
the same errors.

Factors in the marginal algebra (an identity, a total: a ``GROUP BY`` or a
column summed out) are never stacked, so a marginal workload keeps its terms and
each ``GROUP BY`` remains one marginal to the max-variance operators; predicates,
ranges and a ``SUM``'s values are.

>>> from dpsql.hdmm.matrix import Dense, Identity
>>> lows = [Dense([[1, 1, 0, 0]]), Dense([[0, 1, 1, 0]]), Dense([[0, 0, 1, 1]])]
>>> W = Workload((4, 3), [(1.0, (r, Identity(3))) for r in lows])
>>> s = stack_terms(W)
>>> len(s.workload.terms), s.workload.terms[0][1][0].shape, s.origin
(1, (3, 4), [[0, 1, 2]])
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

import numpy as np

from dpsql.hdmm.marginals import in_algebra
from dpsql.hdmm.matrix import Dense, Identity, Matrix, Ones
from dpsql.hdmm.strategy import Strategy, UnionStrategy
from dpsql.hdmm.workload import Term, Workload

__all__ = ["STACK_LIMIT", "Stacking", "stack_terms"]

#: Most entries (rows × columns) of a stacked factor, which is held dense: terms beyond it
#: are stacked in several parts.
STACK_LIMIT = 1 << 20


@dataclass(frozen=True)
class Stacking:
    """The stacked ``workload`` and, for each of its terms, the original terms it holds (``origin``)."""

    workload: Workload
    origin: list[list[int]]

    @classmethod
    def alone(cls, workload: Workload) -> "Stacking":
        """``workload`` with every term left alone, for comparisons."""
        return cls(workload, [[k] for k in range(len(workload.terms))])

    def unstack(self, strategy: Strategy) -> Strategy:
        """``strategy`` (found on the stacked workload) for the original one: a union strategy's
        parts answer the original terms of the stacked terms they answered; others need no change."""
        if not isinstance(strategy, UnionStrategy):
            return strategy
        return dataclasses.replace(strategy, groups=[[k for s in g for k in self.origin[s]] for g in strategy.groups])


def stack_terms(workload: Workload) -> Stacking:
    """``workload`` with every group of terms that agree on all factors but one stacked into one
    term (see the module docstring), attribute by attribute until no two terms can be joined.
    The same rows, up to order: for selection (answers are read off the original workload)."""
    terms: list[Term] = list(workload.terms)
    origin = [[k] for k in range(len(terms))]
    seen: dict[int, tuple[Matrix, bytes, bool]] = {}  # by id, holding the factor so that no id is reused

    def look(f: Matrix) -> tuple[Matrix, bytes, bool]:
        if id(f) not in seen:
            seen[id(f)] = (f, *_describe(f))
        return seen[id(f)]

    joined = True
    while joined:
        joined = False
        for i in range(len(workload.domain)):
            groups: dict[bytes, list[int]] = {}
            for k, (_, fs) in enumerate(terms):
                if look(fs[i])[2]:
                    groups.setdefault(b"|".join(look(f)[1] for j, f in enumerate(fs) if j != i), []).append(k)
            parts = [part for g in groups.values() if len(g) > 1 for part in _parts(terms, g, i) if len(part) > 1]
            if not parts:
                continue
            joined = True
            first = {part[0]: part for part in parts}
            gone = {k for part in parts for k in part[1:]}
            kept = [k for k in range(len(terms)) if k not in gone]
            origin = [[o for j in first.get(k, [k]) for o in origin[j]] for k in kept]
            terms = [_stack(terms, first[k], i) if k in first else terms[k] for k in kept]
    return Stacking(workload if len(terms) == len(workload.terms) else Workload(workload.domain, terms), origin)


def _describe(f: Matrix) -> tuple[bytes, bool]:
    """A key equal for factors with equal rows, and whether ``f`` may be stacked: small enough to
    hold, and not in the marginal algebra (a one-row factor is unless constant; an identity or a
    total always is). A factor too large to compare cheaply has a key of its own (``stack_terms``
    holds every factor it describes, so no two share an ``id``)."""
    rows, n = f.shape
    if isinstance(f, (Identity, Ones)):
        return f"{type(f).__name__}{f.shape}".encode(), False
    if rows * n > STACK_LIMIT:
        return f"object {id(f)}".encode(), False
    dense = f.dense()
    key = hashlib.blake2b(repr(f.shape).encode() + dense.tobytes(), digest_size=16).digest()
    if n < 2:
        return key, False
    return key, bool(np.ptp(dense) > 0) if rows == 1 else n * n <= STACK_LIMIT and not in_algebra(f)


def _parts(terms: list[Term], group: list[int], i: int) -> list[list[int]]:
    """``group`` cut, in order, into runs whose stacked factor ``i`` holds at most :data:`STACK_LIMIT` entries."""
    parts: list[list[int]] = [[]]
    entries = 0
    for k in group:
        size = terms[k][1][i].shape[0] * terms[k][1][i].shape[1]
        if parts[-1] and entries + size > STACK_LIMIT:
            parts.append([])
            entries = 0
        parts[-1].append(k)
        entries += size
    return parts


def _stack(terms: list[Term], part: list[int], i: int) -> Term:
    """The terms ``part`` as one of weight 1: their factors ``i``, each times its term's weight,
    stacked; the other factors those of the first."""
    factor = Dense(np.vstack([terms[k][0] * terms[k][1][i].dense() for k in part]))
    factors = terms[part[0]][1]
    return 1.0, factors[:i] + (factor,) + factors[i + 1:]
