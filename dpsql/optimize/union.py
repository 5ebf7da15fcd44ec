"""OPT_+: a weighted union of product strategies (HDMM Definition 19).

Each group of workload terms gets its own OPT_⊗ strategy ``A_l`` with error
``e_l``; the groups then share the budget through weights ``c_l`` chosen in
closed form by Lagrange multipliers. Laplace: minimize ``(Σ c_l)² Σ e_l/c_l²``,
giving ``c_l ∝ e_l^{1/3}``. Gaussian: minimize ``(Σ c_l²) Σ e_l/c_l²``, giving
``c_l ∝ e_l^{1/4}``. Terms with identical factor Gram matrices (up to weight)
share one group, since one strategy serves them all; otherwise each term is
its own group (HDMM's default clustering).

>>> from dpsql.matrix import Identity, Total
>>> from dpsql.privacy import Gaussian
>>> from dpsql.workload import Workload
>>> W = Workload((4, 4), [(1.0, (Identity(4), Total(4))), (1.0, (Total(4), Identity(4)))])
>>> len(opt_plus(W, Gaussian(1.0, 1e-6)).parts)
2
"""

from __future__ import annotations

import numpy as np

from ..privacy import NoiseModel
from ..strategy import KronStrategy, UnionStrategy
from ..workload import Workload, factor_key
from .kron import kron_search
from .opt0 import deterministic


def budget_weights(errors: np.ndarray, norm: int) -> np.ndarray:
    """Optimal part weights for per-part errors ``e_l``, normalized to unit sensitivity."""
    c = errors ** (1.0 / 3.0) if norm == 1 else errors**0.25
    return c / (c.sum() if norm == 1 else np.sqrt((c**2).sum()))


def product_groups(workload: Workload) -> list[list[int]]:
    """Workload terms grouped by identical factor Gram matrices (weights aside)."""
    keys: dict[bytes, list[int]] = {}
    for k, (_, fs) in enumerate(workload.terms):
        keys.setdefault(b"|".join(factor_key(f) for f in fs), []).append(k)
    return list(keys.values())


def opt_plus(workload: Workload, noise: NoiseModel, restarts: int = 1, seed: int = 0) -> UnionStrategy:
    """OPT_+ with one group per distinct product in the workload."""
    rng = np.random.default_rng(seed)
    groups = product_groups(workload)
    parts, errors = [], []
    if deterministic(noise.norm, workload.domain):
        restarts = 1
    memos: list[dict] = [{} for _ in range(max(1, restarts))]  # restart r shares factors across groups
    for g in groups:
        terms = [workload.terms[k] for k in g]
        runs = [kron_search(workload.domain, terms, noise.norm, rng, memo=m) for m in memos]
        factors, err = min(runs, key=lambda r: r[1])
        parts.append(KronStrategy(factors))
        errors.append(err)
    # A group with zero error holds only all-zero queries (e.g. an impossible
    # WHERE): any part answers those exactly, so it needs no budget of its own.
    live = [l for l, e in enumerate(errors) if e > 0] or [0]
    for l in range(len(groups)):
        if l not in live:
            groups[live[0]] = groups[live[0]] + groups[l]
    parts, errors, groups = [parts[l] for l in live], [errors[l] for l in live], [groups[l] for l in live]
    weights = budget_weights(np.array(errors), noise.norm) if len(live) > 1 else np.ones(1)
    return UnionStrategy(parts, [float(c) for c in weights], groups, operator="OPT_plus")
