"""Measurement strategies and how well they answer a workload.

A strategy is the matrix ``A`` whose noisy answers ``A x + noise`` are
released; every workload answer is then a least-squares estimate from them.
Each class here knows, for its structure, the two quantities error analysis
needs without ever forming ``WᵀW`` or ``(AᵀA)⁺`` over the full domain:

* ``trace_error(workload)``: ``Σ_k tr(W_kᵀW_k (AᵀA)⁺)`` over the workload's
  Kronecker terms, the expected total squared error per unit of noise
  variance at unit sensitivity (HDMM Theorems 4, 6 and 11);
* ``query_variances(workload)``: ``diag(W (AᵀA)⁺ Wᵀ)`` on the same scale,
  one array per term.

Both return ``inf`` where the strategy cannot answer some query (the query is
not in the row space of ``A``).

The shapes match the HDMM operators: :class:`KronStrategy` (OPT_0 and
OPT_⊗), :class:`UnionStrategy` (OPT_+, each group of workload terms answered
by its own product, "local least squares") and :class:`MarginalStrategy`
(OPT_M).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property, reduce
from typing import Sequence

import numpy as np

from .errors import WorkloadError
from .marginals import Marginals, ResidualMarginals, workload_eigen_weights
from .matrix import InvertibleGram, Kronecker, Matrix, VStack, Weighted
from .workload import Workload

#: Relative residual above which a workload factor counts as unsupported.
SUPPORT_TOL = 1e-8


class Strategy:
    """Base class: a measurement matrix plus error analysis for its structure."""

    operator: str = "?"

    @property
    def matrix(self) -> Matrix:
        raise NotImplementedError

    def sensitivity(self, p: int) -> float:
        return self.matrix.sensitivity(p)

    def trace_error(self, workload: Workload) -> float:
        raise NotImplementedError

    def query_variances(self, workload: Workload) -> list[np.ndarray]:
        raise NotImplementedError

    def cross_variances(self, workload: Workload, a: int, b: int) -> np.ndarray:
        """``diag(W_a (AᵀA)⁺ W_bᵀ)`` for two workload terms with equal row counts:
        the covariance of their answers row by row, per unit of noise variance
        (AVG = SUM / COUNT needs it for its standard error)."""
        raise NotImplementedError

    def _check_domain(self, workload: Workload, domain: Sequence[int]) -> None:
        if tuple(workload.domain) != tuple(domain):
            raise WorkloadError(f"strategy domain {tuple(domain)} does not match workload domain {workload.domain}")


@dataclass
class KronStrategy(Strategy):
    """A single Kronecker product ``A₁ ⊗ … ⊗ A_d`` (HDMM Definition 17).

    ``(AᵀA)⁺ = ⊗ (A_iᵀA_i)⁺``, so each term's error is a product of small
    per-attribute traces (Theorem 4).
    """

    factors: tuple[Matrix, ...]
    operator: str = "OPT_kron"

    @cached_property
    def matrix(self) -> Kronecker:
        return Kronecker(self.factors)

    @cached_property
    def domain(self) -> tuple[int, ...]:
        return tuple(f.shape[1] for f in self.factors)

    @cached_property
    def _grams(self) -> list[Matrix]:
        return [f.gram() for f in self.factors]

    @cached_property
    def _pinvs(self) -> list[np.ndarray]:
        return [
            X.inverse() if isinstance(X, InvertibleGram) else X.pinv().dense()
            for X in self._grams
        ]

    @cached_property
    def _projectors(self) -> list[np.ndarray | None]:
        """``X_i⁺X_i`` per factor; ``None`` where ``A_i`` has full column rank."""
        return [
            None if isinstance(X, InvertibleGram) else P @ X.dense() for P, X in zip(self._pinvs, self._grams)
        ]

    def factor_trace(self, i: int, G: np.ndarray) -> float:
        """``tr(G (A_iᵀA_i)⁺)`` for a factor-sized Gram ``G``; ``inf`` if unsupported."""
        if not self._supports(i, G):
            return math.inf
        return float(np.sum(G * self._pinvs[i]))

    def _supports(self, i: int, G: np.ndarray) -> bool:
        # W is answerable iff W X⁺X = W, i.e. tr(G) = tr(G X⁺X) for G = WᵀW.
        if self._projectors[i] is None:
            return True
        t = float(np.trace(G))
        return abs(t - float(np.sum(G * self._projectors[i].T))) <= SUPPORT_TOL * max(t, 1.0)

    def _supported_rows(self, i: int, W: Matrix) -> np.ndarray:
        """Which rows ``q`` of a factor satisfy ``q X_i⁺X_i = q`` (answerable rows)."""
        P = self._projectors[i]
        residual = W._matmat(np.eye(P.shape[0]) - P.T)
        return (residual**2).sum(axis=1) <= SUPPORT_TOL * np.maximum(W.row_norms_sq(), 1.0)

    def term_traces(self, workload: Workload) -> np.ndarray:
        """``tr(G_ki X_i⁺)`` for every term ``k`` and attribute ``i``."""
        self._check_domain(workload, self.domain)
        return np.array(
            [[self.factor_trace(i, f.gram().dense()) for i, f in enumerate(fs)] for _, fs in workload.terms]
        )

    def trace_error(self, workload: Workload) -> float:
        T = self.term_traces(workload)
        w2 = np.array([w * w for w, _ in workload.terms])
        # a zero factor trace means a zero factor: the term's queries are all zero, with zero error
        with np.errstate(invalid="ignore"):
            products = np.prod(T, axis=1)
        return float(np.sum(w2 * np.where((T == 0).any(axis=1), 0.0, products)))

    def query_variances(self, workload: Workload) -> list[np.ndarray]:
        self._check_domain(workload, self.domain)
        out = []
        for w, fs in workload.terms:
            parts = []
            for i, f in enumerate(fs):
                v = f.quadratic_diag(self._pinvs[i])
                if self._projectors[i] is not None and not self._supports(i, f.gram().dense()):
                    v = np.where(self._supported_rows(i, f), v, math.inf)
                parts.append(v)
            with np.errstate(invalid="ignore"):
                var = reduce(np.kron, parts)
            # 0 · inf: an all-zero query row (answered exactly) times an unsupported factor row
            out.append(w * w * np.where(np.isnan(var), 0.0, var))
        return out

    def cross_variances(self, workload: Workload, a: int, b: int) -> np.ndarray:
        self._check_domain(workload, self.domain)
        (wa, fa), (wb, fb) = workload.terms[a], workload.terms[b]
        parts = [_cross_diag(x, y, P) for x, y, P in zip(fa, fb, self._pinvs)]
        return wa * wb * reduce(np.kron, parts)


@dataclass
class UnionStrategy(Strategy):
    """A weighted union of Kronecker strategies (HDMM Definition 19).

    Part ``l`` is measured with weight ``c_l`` and answers exactly the workload
    terms in ``groups[l]`` by its own least squares, so term errors add up as
    ``Σ_l Σ_{k ∈ groups[l]} tr(G_k X_l⁺) / c_l²``: an upper bound on the error
    of joint least squares over the whole union.
    """

    parts: list[KronStrategy]
    weights: list[float]
    groups: list[list[int]]
    operator: str = "OPT_plus"

    @cached_property
    def matrix(self) -> VStack:
        return VStack([Weighted(p.matrix, c) for p, c in zip(self.parts, self.weights)])

    def _assignment(self, workload: Workload) -> list[tuple[int, KronStrategy, float]]:
        listed = sorted(k for g in self.groups for k in g)
        if listed != list(range(len(workload.terms))):
            raise WorkloadError("union strategy groups do not cover the workload's terms exactly once")
        owner = {k: l for l, g in enumerate(self.groups) for k in g}
        return [(k, self.parts[owner[k]], self.weights[owner[k]]) for k in range(len(workload.terms))]

    def _sub(self, workload: Workload, k: int) -> Workload:
        return Workload(workload.domain, [workload.terms[k]])

    def trace_error(self, workload: Workload) -> float:
        return float(
            sum(part.trace_error(self._sub(workload, k)) / c**2 for k, part, c in self._assignment(workload))
        )

    def query_variances(self, workload: Workload) -> list[np.ndarray]:
        return [part.query_variances(self._sub(workload, k))[0] / c**2 for k, part, c in self._assignment(workload)]

    def cross_variances(self, workload: Workload, a: int, b: int) -> np.ndarray:
        assignment = self._assignment(workload)
        (_, part_a, c), (_, part_b, _) = assignment[a], assignment[b]
        if part_a is not part_b:  # answered from different parts, whose noise is independent
            return np.zeros(math.prod(f.shape[0] for f in workload.terms[a][1]))
        pair = Workload(workload.domain, [workload.terms[a], workload.terms[b]])
        return part_a.cross_variances(pair, 0, 1) / c**2


@dataclass
class MarginalStrategy(Strategy):
    """A strategy whose Gram matrix lies in the marginal algebra (HDMM §8).

    Either weighted marginals (:class:`~dpsql.marginals.Marginals`) or the
    residual realization of the same Gram matrices
    (:class:`~dpsql.marginals.ResidualMarginals`). The error is
    ``Σ_t γ_t / λ_t`` (Theorem 11) with ``γ`` from
    :func:`~dpsql.marginals.workload_eigen_weights`.
    """

    strategy: Marginals | ResidualMarginals
    operator: str = "OPT_M"

    @property
    def matrix(self) -> Matrix:
        return self.strategy

    @cached_property
    def eigenvalues(self) -> np.ndarray:
        return self.strategy.gram().eigenvalues()

    def trace_error(self, workload: Workload) -> float:
        self._check_domain(workload, self.strategy.domain)
        return eigen_trace_error(workload_eigen_weights(workload.domain, workload.terms), self.eigenvalues)

    def query_variances(self, workload: Workload) -> list[np.ndarray]:
        """``diag(W_k X⁺ W_kᵀ)`` for every term (see :meth:`cross_variances`)."""
        return [self.cross_variances(workload, k, k) for k in range(len(workload.terms))]

    def cross_variances(self, workload: Workload, a: int, b: int) -> np.ndarray:
        """``diag(W_a X⁺ W_bᵀ) = Σ_t (1/λ_t) ⊗_i diag(W_ai Π_t,i W_biᵀ)``.

        On attribute ``i`` the projector onto the ones vector contributes
        ``row_sum_a · row_sum_b / n_i`` and its complement the rest of
        ``diag(W_ai W_biᵀ)``; only subsets of the attributes where a term is
        not constant contribute.
        """
        self._check_domain(workload, self.strategy.domain)
        lam = self.eigenvalues
        d = len(workload.domain)
        (wa, fa), (wb, fb) = workload.terms[a], workload.terms[b]
        ones = [x.row_sums() * y.row_sums() / n for x, y, n in zip(fa, fb, workload.domain)]
        full = [x.row_norms_sq() if a == b else _cross_diag(x, y, np.eye(n))
                for x, y, n in zip(fa, fb, workload.domain)]
        rest = [f - o for f, o in zip(full, ones)]
        if a == b:
            rest = [np.maximum(r, 0.0) for r in rest]
        active = [i for i in range(d) if np.abs(rest[i]).max() > SUPPORT_TOL * max(1.0, np.abs(ones[i]).max())]
        var = np.zeros(math.prod(f.shape[0] for f in fa))
        for r in range(len(active) + 1):
            for sub in itertools.combinations(active, r):
                t = sum(1 << i for i in sub)
                contrib = reduce(np.kron, [rest[i] if i in sub else ones[i] for i in range(d)])
                if lam[t] <= 0:
                    if np.abs(contrib).max() > 0:
                        var = var + np.where(contrib != 0, math.inf, 0.0)
                    continue
                var = var + contrib / lam[t]
        return wa * wb * var


def _cross_diag(A: Matrix, B: Matrix, M: np.ndarray) -> np.ndarray:
    """``diag(A M Bᵀ)`` for two factors with equal row counts."""
    if A is B:
        return A.quadratic_diag(M)
    return np.einsum("ij,ij->i", A._matmat(M), B.dense())


def eigen_trace_error(gamma: np.ndarray, lam: np.ndarray) -> float:
    """``Σ_t γ_t / λ_t``, infinite when some ``γ_t > 0`` meets ``λ_t = 0``."""
    scale = max(1.0, float(np.max(np.abs(lam))))
    zero = lam <= 1e-12 * scale
    if np.any(zero & (gamma > 1e-12 * max(1.0, float(gamma.max())))):
        return math.inf
    return float(np.sum(gamma[~zero] / lam[~zero]))
