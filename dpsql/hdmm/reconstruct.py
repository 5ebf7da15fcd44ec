"""Reconstruction: workload answers from noisy strategy measurements.

Given noisy answers ``y = A x + z`` to a strategy ``A``, the least-squares
estimate of the workload is ``W x̂`` with ``x̂ = (AᵀA)⁺ Aᵀ y`` (HDMM §10).
Its covariance is ``σ² W (AᵀA)⁺ Wᵀ``, which :mod:`dpsql.hdmm.error_analysis` gives in
closed form, so each answer comes with an honest standard error. The estimate
is unbiased for every query in the row space of ``A``.

:func:`least_squares` forms ``x̂`` over the full domain only for a product strategy (OPT_0,
OPT_⊗, OPT_H) of at most :data:`NONNEGATIVE_LIMIT` cells, to read every answer from one vector on a
power-of-two grid, so that totals add up to the last digit (:func:`_one_vector_answers`). Otherwise it
never does: every strategy
here is a union of Kronecker blocks ``B_b = ⊗_i B_bi`` (with total rows on
the attributes a block does not measure) and its Gram pseudo-inverse is a sum
of Kronecker products ``Σ_s c_s ⊗_i K_si`` (one product for a Kronecker
strategy, the marginal algebra's ``Σ_a u_a ⊗ (I or J)`` for marginal
strategies, Theorem 8). So each Kronecker term ``W_k = ⊗_i W_ki`` of the
workload is answered by small per-attribute products::

    W_k x̂ = Σ_s Σ_b c_s (⊗_i W_ki K_si B_biᵀ) y_b

whose sizes are those of the queries and the measurements, never the domain.
A union strategy (OPT_+) answers each workload term from its own part,
"local least squares", matching :meth:`dpsql.hdmm.strategy.UnionStrategy.query_variances`.
A reconciled union (OPT_H+) answers every term by the generalized least squares of all its
parts, across their shared hierarchy (:meth:`dpsql.hdmm.reconcile.ReconciledUnion.answers`).

:func:`nonnegative` is the optional alternative for users who want
non-negative, mutually consistent answers: one ``x̂ ≥ 0`` minimizing
``‖A x − y‖²`` over the whole domain, and every answer read from it. It is
**biased**: clipping at zero pushes small counts up (their expected value
exceeds the truth), and the mass it adds is taken from elsewhere, so its
errors are not those the reported standard errors describe. Those remain the
least-squares ones, an approximation for this estimator.

>>> import numpy as np
>>> from dpsql.hdmm.matrix import Identity, Prefix, Total
>>> from dpsql.hdmm.strategy import KronStrategy
>>> from dpsql.hdmm.workload import Workload
>>> W = Workload((4, 3), [(1.0, (Prefix(4), Total(3)))])
>>> A = KronStrategy((Identity(4), Identity(3)))
>>> x = np.arange(12.0)
>>> bool(np.allclose(least_squares(W, A, A.matrix.matvec(x)), W.matvec(x)))
True
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from scipy.optimize import Bounds, minimize

from dpsql.errors import WorkloadError
from dpsql.hdmm.hierarchy import HierarchyFactor, Tree, exact_sums, topdown_integer
from dpsql.hdmm.matrix import Identity, Kronecker, Matrix, Ones, Product, Transpose, is_total, kron_terms
from dpsql.hdmm.reconcile import ReconciledUnion
from dpsql.hdmm.reduction import ReducedStrategy
from dpsql.hdmm.strategy import KronStrategy, MarginalStrategy, Strategy, UnionStrategy
from dpsql.hdmm.workload import Workload

__all__ = ["least_squares", "nonnegative", "topdown", "NONNEGATIVE_LIMIT", "NONNEGATIVE_SECONDS"]

#: Largest domain on which :func:`nonnegative` solves for a full data vector.
NONNEGATIVE_LIMIT = 20_000_000
#: Longest the non-negative fit runs before it stops with the vector it has (a census batch of
#: 448,000 cells took 0.7 s a step, and up to 2,000 steps).
NONNEGATIVE_SECONDS = 120.0


@dataclass(frozen=True)
class _System:
    """One least-squares system: measured blocks ``(weight, factors, rows)``
    with their rows of ``y``, and the Gram pseudo-inverse as
    ``[(coefficient, per-attribute factors)]``."""

    blocks: list[tuple[float, tuple[Matrix, ...], slice]]
    pinv: list[tuple[float, list[Matrix]]]


def _blocks(matrix: Matrix, offset: int, weight: float = 1.0) -> list[tuple[float, tuple[Matrix, ...], slice]]:
    terms = kron_terms(matrix)
    if terms is None:
        raise WorkloadError(f"cannot reconstruct from a {type(matrix).__name__} strategy")
    out = []
    for w, factors in terms:
        rows = math.prod(f.shape[0] for f in factors)
        out.append((weight * w, tuple(factors), slice(offset, offset + rows)))
        offset += rows
    return out


def _pinv_terms(strategy: KronStrategy | MarginalStrategy, scale: float = 1.0) -> list[tuple[float, list[Matrix]]]:
    """``scale · (AᵀA)⁺`` as a sum of Kronecker products ``[(c, factors)]``.

    A product strategy's is one product of dense factor pseudo-inverses; a
    marginal strategy's follows from the algebra (Theorem 8), one product per
    marginal, times the fixed factors' pseudo-inverses if it has any.
    """
    if isinstance(strategy, KronStrategy):
        return [(scale, list(strategy.factor_pinvs))]
    _, kron = strategy.fixed_part
    fixed = [] if kron is None else list(kron.factor_pinvs)
    domain = strategy.strategy.domain
    u = strategy.strategy.gram().pinv().weights
    return [
        (scale * float(u[a]),
         strategy.interleave(fixed, [Identity(n) if a >> j & 1 else Ones(n, n) for j, n in enumerate(domain)]))
        for a in np.flatnonzero(u)
    ]


def _systems(workload: Workload, strategy: Strategy) -> list[tuple[list[int], _System]]:
    """The least-squares systems of a strategy and the workload terms each answers."""
    all_terms = list(range(len(workload.terms)))
    if isinstance(strategy, (KronStrategy, MarginalStrategy)):
        return [(all_terms, _System(_blocks(strategy.matrix, 0), _pinv_terms(strategy)))]
    if isinstance(strategy, UnionStrategy):
        owner = {k: l for l, g in enumerate(strategy.groups) for k in g}
        if sorted(owner) != all_terms:
            raise WorkloadError("union strategy groups do not cover the workload's terms exactly once")
        out = []
        offset = 0
        for l, (part, c) in enumerate(zip(strategy.parts, strategy.weights)):
            system = _System(_blocks(part.matrix, offset, c), _pinv_terms(part, 1.0 / c**2))
            out.append(([k for k in all_terms if owner[k] == l], system))
            offset += part.matrix.shape[0]
        return out
    raise WorkloadError(f"no reconstruction for strategy type {type(strategy).__name__}")


def _merged_pinv(pinv: list[tuple[float, list[Matrix]]], W: Sequence[Matrix],
                 B: Sequence[Matrix]) -> list[tuple[float, list[Matrix]]]:
    """The Gram pseudo-inverse's terms for one workload term ``W`` and block ``B``,
    with the terms that act alike on them merged.

    A marginal strategy's pseudo-inverse has a term per attribute subset (up
    to ``2^d``), with factors ``I`` or ``J = 11ᵀ`` (and its fixed factors, if
    any, the same in every term). Where ``W_i`` or ``B_i`` is
    a total row, ``W_i J B_iᵀ = n_i · W_i I B_iᵀ`` (``J 1 = n 1``, ``1ᵀ J = n 1ᵀ``), so
    ``J`` there is ``I`` times ``n_i``: terms then differ only on the attributes
    both keep, and at most ``2^(that many)`` distinct products remain.
    """
    if len(pinv) == 1:
        return pinv
    merged: dict[tuple[bool, ...], float] = {}
    for c, K in pinv:
        key = []
        for W_i, K_i, B_i in zip(W, K, B):
            ones = isinstance(K_i, Ones)
            if ones and (is_total(W_i) or is_total(B_i)):
                c *= K_i.shape[0]
                ones = False
            key.append(ones)
        merged[tuple(key)] = merged.get(tuple(key), 0.0) + c
    return [(c, [_rebuilt(ones, K_i) for ones, K_i in zip(key, pinv[0][1])]) for key, c in merged.items()]


def _rebuilt(ones: bool, K_i: Matrix) -> Matrix:
    """A merged term's factor: ``J`` or ``I``, or the fixed factor (the same matrix in every term)."""
    if not isinstance(K_i, (Ones, Identity)):
        return K_i
    n = K_i.shape[0]
    return Ones(n, n) if ones else Identity(n)


def _answer_term(factors: Sequence[Matrix], weight: float, system: _System, y: np.ndarray) -> np.ndarray:
    out = np.zeros(math.prod(f.shape[0] for f in factors))
    for w_b, B, rows in system.blocks:
        for c, K in _merged_pinv(system.pinv, factors, B):
            M = [Product(W_i, Product(K_i, Transpose(B_i))) for W_i, K_i, B_i in zip(factors, K, B)]
            out += (weight * c * w_b) * Kronecker(M).matvec(y[rows])
    return out


def least_squares(workload: Workload, strategy: Strategy, y: np.ndarray) -> np.ndarray:
    """Least-squares answers to every workload query, in workload row order,
    from measurements ``y`` of ``strategy.matrix`` (in its row order)."""
    if isinstance(strategy, ReducedStrategy):  # the same answers, from the reduced problem
        return least_squares(strategy.reduction.apply(workload), strategy.inner, y)
    if isinstance(strategy, ReconciledUnion):
        return strategy.answers(workload, y)
    y = np.asarray(y, dtype=float)
    if y.shape != (strategy.matrix.shape[0],):
        raise WorkloadError(f"expected {strategy.matrix.shape[0]} measurements, got shape {y.shape}")
    if isinstance(strategy, KronStrategy) and strategy.matrix.shape[1] <= NONNEGATIVE_LIMIT:
        return _one_vector_answers(workload, strategy, y)
    answers: list[np.ndarray | None] = [None] * len(workload.terms)
    for terms, system in _systems(workload, strategy):
        for k in terms:
            w, factors = workload.terms[k]
            answers[k] = _answer_term(factors, w, system, y)
    return np.concatenate(answers)


def nonnegative(workload: Workload, strategy: Strategy, y: np.ndarray, max_iterations: int = 2000,
                seconds: float = NONNEGATIVE_SECONDS, integer: bool = False) -> np.ndarray:
    """Answers read from one non-negative data vector fitted to ``y``.

    Solves ``min ‖A x − y‖²`` subject to ``x ≥ 0`` (L-BFGS-B on the implicit
    strategy) and returns ``W x̂``: every answer is then consistent with every
    other (a total is the sum of its parts) and counts are never negative.
    Biased, see the module docstring. Refused above
    :data:`NONNEGATIVE_LIMIT` domain cells. A strategy on a reduced domain is fitted
    there: a non-negative ``x`` exists exactly when a non-negative ``P x`` does.

    A product strategy with a hierarchy factor (OPT_H) is fitted TopDown instead (:func:`topdown`).
    With ``integer``, the data vector is made non-negative integers (TopDown's tables; otherwise the
    fitted vector rounded to the integers nearest it that add up to its rounded total, by largest
    remainders): every COUNT is then a non-negative integer, and totals are the sums of their parts.

    The fit starts from the least-squares data vector with its negative cells set to 0 (from 0
    for a union strategy, whose parts each answer their own terms), and stops after
    ``max_iterations`` steps or ``seconds``, with a warning: the answers are then non-negative
    and consistent, but not the best fit.
    """
    if isinstance(strategy, ReducedStrategy):
        return nonnegative(strategy.reduction.apply(workload), strategy.inner, y, max_iterations, seconds, integer)
    if _hierarchical(strategy):
        return topdown(workload, strategy, y, integer)
    if isinstance(strategy, ReconciledUnion):
        return strategy.answers(workload, y, nonnegative=True, integer=integer)
    A = strategy.matrix
    N = A.shape[1]
    if N > NONNEGATIVE_LIMIT:
        raise WorkloadError(
            f"non-negative answers need a data vector over the full domain ({N:,} cells, at most "
            f"{NONNEGATIVE_LIMIT:,}); use least-squares answers for this batch")
    y = np.asarray(y, dtype=float)
    scale = max(1.0, float(np.abs(y).max(initial=0.0)))
    if isinstance(strategy, UnionStrategy):  # each part answers its own terms: no one data vector to start from
        start = np.zeros(N)
    else:
        cells = Workload(workload.domain, [(1.0, tuple(Identity(n) for n in workload.domain))])
        start = np.maximum(least_squares(cells, strategy, y / scale), 0.0)
    deadline = time.monotonic() + seconds

    def objective(x: np.ndarray) -> tuple[float, np.ndarray]:
        r = A.matvec(x) - y / scale
        return 0.5 * float(r @ r), A.rmatvec(r)

    stopped = []

    def stop_at_deadline(_: Any) -> None:
        if time.monotonic() > deadline:
            stopped.append(True)
            raise StopIteration

    res = minimize(objective, start, jac=True, method="L-BFGS-B", bounds=Bounds(0.0, np.inf), callback=stop_at_deadline,
                   options={"maxiter": max_iterations, "ftol": 1e-15, "gtol": 1e-10})
    if stopped:
        warnings.warn(f"the non-negative fit stopped after {seconds:g} s, before it converged ({res.nit} steps on "
                      f"{N:,} cells): its answers are non-negative and consistent but fit the measurements less "
                      "well than it could", RuntimeWarning, stacklevel=2)
    x = res.x * scale
    if integer:  # controlled rounding: integers nearest x (largest remainders) adding up to its rounded total
        cells = Tree.from_labels(N, [])
        x = topdown_integer(cells, np.concatenate([[x.sum()], x]))[1:].astype(float)
    return workload.matvec(x)


def topdown(workload: Workload, strategy: KronStrategy, y: np.ndarray, integer: bool = False) -> np.ndarray:
    """Answers read from one non-negative data vector that adds up across the hierarchy: the
    least-squares estimate of every node of the hierarchy factor's tree by every cell of the other
    attributes (:func:`_tree_estimate`), then, from the root down, each node's children made the
    nearest non-negative values adding up to it (:func:`~dpsql.hdmm.hierarchy.topdown_integer`;
    non-negative integers with ``integer``). Every level of the tree then adds up exactly, for each
    cell of the other attributes. Biased as :func:`nonnegative` is (see the module docstring);
    ``O(nodes × other cells)``."""
    h, tree, shape, nodes = _tree_estimate(strategy, y)
    table = topdown_integer(tree, nodes, rounded=integer)[tree.offsets[-2]:]
    return workload.matvec(_cells(h, shape, table if integer else exact_sums(table)))


def _one_vector_answers(workload: Workload, strategy: KronStrategy, y: np.ndarray) -> np.ndarray:
    """The least-squares answers of a product strategy read from its data vector ``x̂ = (AᵀA)⁺Aᵀy``
    with every value on one power-of-two grid (:func:`~dpsql.hdmm.hierarchy.exact_sums`): every count
    is then an exact floating-point sum of cells, so totals add up to the last digit, in any order of
    summation (a state is the sum of its counties as released)."""
    return workload.matvec(exact_sums(_along_axes(strategy, np.asarray(y, dtype=float), None).ravel()))


def _along_axes(strategy: KronStrategy, y: np.ndarray, skip: int | None) -> np.ndarray:
    """``y`` as an array over the factors' rows with ``(A_iᵀA_i)⁺A_iᵀ`` applied along every axis but
    ``skip``: the least-squares estimate of the cells along those axes."""
    Y = y.reshape([f.shape[0] for f in strategy.factors])
    for i, (f, P) in enumerate(zip(strategy.factors, strategy.factor_pinvs)):
        if i != skip:
            Yi = np.moveaxis(Y, i, 0)
            Z = Product(P, Transpose(f)).matvec(Yi.reshape(Yi.shape[0], -1))
            Y = np.moveaxis(Z.reshape((f.shape[1],) + Yi.shape[1:]), 0, i)
    return Y


def _tree_estimate(strategy: KronStrategy, y: np.ndarray) -> tuple[int, Tree, tuple[int, ...], np.ndarray]:
    """The hierarchy factor's axis, its tree, the shape of the cells with its axis first, and the
    least-squares estimate of every node of the tree (the tree's two passes) by every cell of the other
    attributes, nodes × cells."""
    h = next(i for i, f in enumerate(strategy.factors) if isinstance(f, HierarchyFactor))
    H = strategy.factors[h]
    rest = np.moveaxis(_along_axes(strategy, np.asarray(y, dtype=float), h), h, 0)
    return h, H.tree, (H.shape[1],) + rest.shape[1:], H.tree.estimate_nodes(rest.reshape(rest.shape[0], -1),
                                                                             H.weights)


def _cells(h: int, shape: tuple[int, ...], leaves: np.ndarray) -> np.ndarray:
    """The data vector from the tree's leaves by the other cells (the hierarchy's axis first)."""
    return np.moveaxis(leaves.astype(float).reshape(shape), 0, h).ravel()


def _hierarchical(strategy: Strategy) -> bool:
    return isinstance(strategy, KronStrategy) and any(isinstance(f, HierarchyFactor) for f in strategy.factors)
