"""The obvious mechanisms, as strategy candidates that bound what selection returns.

HDMM's operators search a strategy space from a starting point and can end
worse than a mechanism any user would think of first. The selector therefore
also scores:

* :func:`identity`: count every cell of the (reduced) domain, sensitivity 1;
* :func:`direct`: measure the workload's own queries, each group of terms
  with equal factors (weights aside) as one Kronecker product, the groups
  sharing the budget optimally (``c_l ∝ e_l^{1/3}`` under Laplace,
  ``e_l^{1/4}`` under Gaussian, as in OPT_+). A single ``GROUP BY`` statement
  is a partition: one part of sensitivity 1, each answer its own measurement.

Since the selector keeps the lowest expected error among all candidates, the
result is never worse than either of these.

>>> from dpsql.hdmm.matrix import Dense, Identity
>>> from dpsql.privacy import Laplace
>>> from dpsql.hdmm.workload import Workload
>>> W = Workload((3, 2), [(1.0, (Identity(3), Identity(2)))])
>>> direct(W, Laplace(1.0)).sensitivity(1)
1.0
"""

from __future__ import annotations

import math

import numpy as np

from dpsql.errors import WorkloadError
from dpsql.hdmm.matrix import Identity
from dpsql.hdmm.optimize.union import product_groups, weighted_union
from dpsql.hdmm.stacking import STACK_LIMIT
from dpsql.hdmm.strategy import KronStrategy, UnionStrategy
from dpsql.hdmm.workload import Workload
from dpsql.limits import MAX_MEASURED_CELLS
from dpsql.privacy import NoiseModel

#: Largest factor (rows × columns) the direct candidate measures as it is: a stacked factor's
#: largest (:mod:`dpsql.hdmm.stacking`), so that stacking never changes whether it applies.
DIRECT_LIMIT = STACK_LIMIT

#: Largest attribute the identity candidate's error analysis takes (a dense ``n × n`` inverse).
IDENTITY_ATTRIBUTE_LIMIT = 1 << 12


def identity_applies(workload: Workload) -> bool:
    """Whether counting every cell is measurable and cheap to analyse."""
    return (math.prod(workload.domain) <= MAX_MEASURED_CELLS
            and max(workload.domain) <= IDENTITY_ATTRIBUTE_LIMIT)


def direct_applies(workload: Workload) -> bool:
    """Whether every factor is small enough to measure as it is, and some query is not zero."""
    return (all(f.shape[0] * f.shape[1] <= DIRECT_LIMIT for _, fs in workload.terms for f in fs)
            and any(all(np.any(f.dense()) for f in fs) for _, fs in workload.terms))


def identity(workload: Workload, noise: NoiseModel, restarts: int = 1, seed: int = 0) -> KronStrategy:
    """``I ⊗ … ⊗ I`` over the workload's domain."""
    return KronStrategy(tuple(Identity(n) for n in workload.domain), operator="identity")


def direct(workload: Workload, noise: NoiseModel, restarts: int = 1, seed: int = 0) -> UnionStrategy:
    """The workload's own queries, one Kronecker part per group of equal terms, budget split optimally."""
    groups = product_groups(workload)
    parts, errors = [], []
    for g in groups:
        part = KronStrategy(workload.terms[g[0]][1], operator="direct")
        sens = part.sensitivity(noise.norm)
        sub = Workload(workload.domain, [workload.terms[k] for k in g])
        errors.append(part.trace_error(sub) * sens**2 if sens > 0 else 0.0)
        parts.append(part)
    if all(p.sensitivity(noise.norm) == 0 for p in parts):
        raise WorkloadError("every query of this workload is zero; there is nothing to measure")
    return weighted_union(parts, errors, groups, noise.norm, operator="direct")
