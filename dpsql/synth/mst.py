"""MST: a spanning tree of pairwise marginals, selected privately, measured, and fitted.

:func:`mst` follows MST (McKenna, Miklau & Sheldon, "Winning the NIST Contest: A scalable and
general approach to differentially private synthetic data", Journal of Privacy and
Confidentiality 11(3), 2021). It scores no model per candidate, as AIM's rounds do, so it
selects among every pair of a table of any width in seconds:

1. a third of the budget measures every one-way marginal (all of it when there is no pair to
   pick), which also decides the compression (:mod:`dpsql.synth.compress`, as MST merges rare
   values), and a wide column's one-way marginal in its bins as well
   (:func:`~dpsql.synth.pgm.first_counts`);
2. a third selects pairs the way Kruskal's algorithm builds a maximum spanning tree: each pick is
   the exponential mechanism (:meth:`~dpsql.private.kernel.PrivateTable.select_marginal`) among
   the candidate pairs that join two parts of the forest picked so far, scored by
   ``‖M_ij(D) − n̂ p̂_i ⊗ p̂_j‖₁``, how far the pair's counts are from independence of the noisy
   one-way marginals (``p̂_i`` their shares, negative counts taken as 0, ``n̂`` their total);
   there are ``d − c`` picks (:func:`picks`), ``c`` the parts the candidate pairs leave (1 when
   every pair is a candidate);
3. the last third measures the chosen pairs (one measurement), and the graphical model
   of every measurement, a tree whose cliques are the pairs (:mod:`dpsql.synth.pgm`), is fitted.

The budget is the reservation's allowance: a zCDP ``ρ`` (Gaussian measurements, as the paper), or
a pure ``ε`` (Laplace measurements), for a ledger or a request with no ``δ``.

**Guarantee.** ``ρ``-zCDP, or ``ε``-DP, with respect to adding or removing one privacy unit (of
at most ``k`` rows); under ``ρ``, ``(ε, δ)``-DP for the ``(ε, δ)`` that ``ρ`` stands for
(:func:`~dpsql.synth.accounting.zcdp_rho`). The whole spend is charged to the ledger before the
first read, as one :class:`~dpsql.private.kernel.Reservation`; each step draws on it and is
refused once it would pass it. Each measurement (the ``d`` one-way marginals, the wide columns'
ones in their bins, the chosen pairs) counts each row once in each of its ``m`` marginals: L2
sensitivity ``k√m`` and Gaussian noise scaled to its share ``ρ'``, ``ρ'``-zCDP (Bun & Steinke
2016, Prop. 1.6); or L1 sensitivity ``km`` and Laplace noise of scale ``km/ε'``, ``ε'``-DP. The
one-way measurements take a third between them and the pairs' a third. Each pick's scores move
by at most ``k`` when a unit is added or removed, so a pick at ``ε_p`` is ``ε_p``-DP (McSherry & Talwar 2007), hence
``ε_p²/8``-zCDP as the exponential mechanism is ε-bounded-range (Cesar & Rogers 2021): the ``P``
picks spend a third, at ``ε_p = √(8ρ/(3P))``, or ``ε_p = ε/(3P)``. zCDP composes adaptively
(Bun & Steinke, Lemma 2.3) and pure ``ε`` by basic composition (Dwork & Roth 2014, Thm. 3.16):
``ρ``, or ``ε``, in all. Started from one-way marginals already measured (AIM's first
measurement, when pgm finds its rounds too noisy: :func:`~dpsql.synth.aim.too_noisy`), it measures
them again up to a third, each measurement Gaussian as above; when they drew more, the picks and
the pairs split what is left: ``ρ`` in all either way. The candidates, the compression and the
independent model depend on released values only; fitting and sampling are post-processing.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable, Sequence

import numpy as np

from dpsql.privacy import Gaussian, Laplace, NoiseModel
from dpsql.private.kernel import PrivateTable, Reservation
from dpsql.schema import Attribute
from dpsql.synth.coarsen import shrink
from dpsql.synth.estimate import Observation, estimate_total, pool
from dpsql.synth.pgm import (
    PGM_ITERATIONS,
    PGMResult,
    counts_again,
    first_counts,
    fit_model,
    unit_weights,
    weighted_counts,
)

__all__ = ["candidate_pairs", "picks", "mst"]


def candidate_pairs(workload: Sequence[Sequence[int]]) -> list[tuple[int, int]]:
    """Every pair of attributes inside a workload marginal (sorted attribute positions), sorted.

    >>> candidate_pairs([(0, 1, 2), (3,), (2, 4)])
    [(0, 1), (0, 2), (1, 2), (2, 4)]
    """
    return sorted({p for s in workload for p in itertools.combinations(sorted(set(s)), 2)})


def picks(attributes: int, pairs: Sequence[tuple[int, int]]) -> int:
    """The pairs a spanning forest of the graph of ``pairs`` over ``attributes`` attributes has:
    the attributes less the graph's connected components. Public: the schema and the workload.

    >>> picks(5, [(0, 1), (1, 2), (0, 2), (3, 4)]), picks(4, [])
    (3, 0)
    """
    parent = list(range(attributes))
    joined = 0
    for i, j in pairs:
        a, b = _root(parent, i), _root(parent, j)
        if a != b:
            parent[a] = b
            joined += 1
    return joined


def _shares(counts: np.ndarray) -> np.ndarray:
    """Noisy counts as a distribution: negative ones taken as 0 (uniform when none is positive).

    >>> _shares(np.array([3.0, -1.0, 1.0])).tolist(), _shares(np.array([-1.0, 0.0])).tolist()
    ([0.75, 0.0, 0.25], [0.5, 0.5])
    """
    kept = np.maximum(counts, 0.0)
    return kept / kept.sum() if kept.sum() > 0 else np.full(len(counts), 1.0 / len(counts))


def _root(parent: list[int], a: int) -> int:
    """The representative of ``a``'s part in a union-find forest (halving the path on the way)."""
    while parent[a] != a:
        parent[a] = parent[parent[a]]
        a = parent[a]
    return a


def mst(table: PrivateTable, attributes: Sequence[Attribute], pairs: Sequence[tuple[int, int]],
        reservation: Reservation, max_cells: int, threshold: float | None, compressible: Sequence[int],
        iterations: int = PGM_ITERATIONS, progress: Callable[[int, float], None] | None = None,
        binned: dict[int, np.ndarray] | None = None,
        start: tuple[list[Observation], list[Observation]] | None = None) -> PGMResult:
    """Run MST on ``table`` drawing all of ``reservation``'s allowance, a zCDP ``ρ`` or a pure
    ``ε`` (see the module docstring for the guarantee), choosing among the candidate ``pairs``
    (sorted attribute positions), with a model of at most ``max_cells`` cells fitted in at most
    ``iterations`` steps (``progress`` gets them,
    :func:`~dpsql.synth.estimate.estimate`). ``threshold``: compress the ``compressible``
    attributes at this many standard deviations of the one-way noise (None: not compressed).
    ``binned``: the attributes (by position, each value's bin) modelled in bins and drawn back to
    values by their one-way counts (:func:`~dpsql.synth.coarsen.shrink`). ``start``: every one-way
    marginal already measured with Gaussian noise, drawn from ``reservation`` (full resolution, and
    the ``binned`` ones in bins, as :func:`~dpsql.synth.pgm.first_counts` gives them: AIM's first
    measurement, :func:`~dpsql.synth.aim.too_noisy`); they are measured again, pooled, until the
    one-way marginals have drawn the third of the allowance they take (the pooled counts are as
    precise as one measurement of it all, :func:`~dpsql.synth.estimate.pool`); a ``start`` that
    drew more leaves the picks and the pairs half each of what is left."""
    binned = binned or {}
    full = [a.size for a in attributes]
    count = picks(len(attributes), pairs)
    pure = reservation.rho is None
    budget = reservation.epsilon if pure else reservation.rho
    if budget is None:
        raise ValueError("MST draws on a reservation with an allowance: rho=... or epsilon=...")

    def noise(part: float) -> NoiseModel:
        return Laplace(part) if pure else Gaussian(rho=part)

    one_way = budget / 3 if count else budget
    if start is None:
        first, bins = first_counts(table, attributes, binned, noise, one_way, reservation, "MST")
    else:
        first, bins = start
        if one_way > reservation.used:
            first, bins = counts_again(table, attributes, binned, noise, one_way - reservation.used, reservation,
                                       "MST, the one-way marginals again", start)
    compression = shrink(full, first, threshold, binned, compressible, laplace=pure)
    if compression is not None:
        first = [compression.observe(o) for o in first]
        attributes = compression.attributes(attributes)
    first += bins
    domain = tuple(a.cells for a in attributes)
    total = estimate_total(first)
    shares = {o.subset[0]: _shares(o.values) for o in pool(first)}
    estimates = {(i, j): total * np.outer(shares[i], shares[j]).ravel() for i, j in pairs}
    part = (budget - reservation.used) / 2  # a third, or half of what a larger start left
    eps = (part / count if pure else math.sqrt(8 * part / count)) if count else 0.0
    parent = list(range(len(domain)))
    chosen: list[tuple[int, int]] = []
    for n in range(count):
        joining = [p for p in pairs if _root(parent, p[0]) != _root(parent, p[1])]
        j = table.select_marginal(attributes, joining, [estimates[p] for p in joining], eps, reservation,
                                  f"MST pick {n + 1} of {count}")
        a, b = joining[j]
        parent[_root(parent, a)] = _root(parent, b)
        chosen.append((a, b))
    observations = list(first)
    if chosen:
        observations += weighted_counts(table, attributes, unit_weights({p: 1.0 for p in chosen}),
                                        noise(budget - reservation.used), reservation,
                                        f"MST: the {len(chosen)} pairs picked")
    return fit_model(domain, observations, max_cells, iterations, progress, compression)
