"""The memory a strategy operator needs, estimated from the workload's shape before it runs.

The selector (:mod:`dpsql.hdmm.optimize.selector`) skips an operator whose
estimate exceeds :data:`~dpsql.limits.MAX_CANDIDATE_BYTES`, so no candidate
asks numpy for more than the machine holds (OPT_0 on a column of 500,000
values would have formed a Gram of 2 TB). The estimates depend on the
workload's domain only, never on data.

* ``OPT_0``, ``OPT_kron`` and ``OPT_plus`` form a dense ``n × n`` Gram of
  every attribute and work on several copies of it: measured peaks
  (tracemalloc, Laplace and Gaussian, ranges and marginals) were 6 to 9 such
  matrices for one attribute, and up to 9 times the sum of the squares over
  three, so :data:`GRAM_COPIES` of each are counted. An attribute of more than
  :data:`~dpsql.hdmm.optimize.kron.SYMMETRIC_MIN` values that every term only
  groups by or totals is the exception: its factor is found in closed form and
  its error analysis is on vectors (:mod:`~dpsql.hdmm.optimize.symmetric`; OPT_0 still
  searches its dense Gram).
* ``direct`` measures the workload's own factors: it holds the Gram of each,
  or for a thin factor (few rows, or a Gram too large to hold: a SUM over a
  column of 500,000 values) its ``rows × n`` pseudo-inverse instead
  (:attr:`~dpsql.hdmm.strategy.KronStrategy._thin`), as many copies of either.
* ``identity``, ``OPT_M`` and ``OPT_M_max`` keep vectors over the reduced
  domain and ``4^d`` marginal coefficients at most.

>>> from dpsql.hdmm.matrix import AllRange
>>> from dpsql.hdmm.workload import Workload
>>> estimate_bytes("OPT_0", Workload.of(AllRange(1000)))
80000000
"""

from __future__ import annotations

import math

from dpsql.hdmm.matrix import DENSE_LIMIT, Matrix
from dpsql.hdmm.optimize.kron import symmetric_attribute
from dpsql.hdmm.workload import Workload

#: Dense ``n × n`` matrices an operator that works on Grams holds per attribute at its peak.
GRAM_COPIES = 10
#: Vectors over the domain the operators that avoid Grams hold at their peak.
VECTOR_COPIES = 8

GRAM_OPERATORS = frozenset({"OPT_0", "OPT_kron", "OPT_plus"})


def estimate_bytes(name: str, workload: Workload) -> int:
    """Bytes operator ``name`` needs at its peak on ``workload`` (float64 arrays)."""
    if name in GRAM_OPERATORS:  # OPT_⊗ and OPT_+ find the factor of an attribute only grouped by or totalled in closed form
        return 8 * sum(VECTOR_COPIES * n if name != "OPT_0" and
                       symmetric_attribute(n, [fs[i] for _, fs in workload.terms]) is not None
                       else GRAM_COPIES * n * n for i, n in enumerate(workload.domain))
    if name in ("OPT_H", "OPT_Hplus"):  # a tree's vectors for a hierarchy, Grams for the other attributes
        return sum(8 * GRAM_COPIES * n * n if n * n <= DENSE_LIMIT else 8 * VECTOR_COPIES * 4 * n for n in workload.domain)
    if name == "direct":
        return 8 * GRAM_COPIES * sum(_factor_entries(f) for _, fs in workload.terms for f in fs)
    return 8 * (VECTOR_COPIES * math.prod(workload.domain) + 4 ** len(workload.domain))


def _factor_entries(f: Matrix) -> int:
    """Entries of what the direct candidate's error analysis holds for factor ``f``: its ``rows × n``
    pseudo-inverse when it is thin, as :class:`~dpsql.hdmm.strategy.KronStrategy` decides, else its Gram."""
    rows, n = f.shape
    return rows * n if n * n > DENSE_LIMIT or 4 * rows <= n else n * n
