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
by its own part, "local least squares") and :class:`MarginalStrategy` (OPT_M,
and with fixed factors on some attributes an OPT_+ part for a cluster of
marginal-like terms).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property, reduce
from typing import Sequence

import numpy as np

from dpsql.errors import WorkloadError
from dpsql.hdmm import symmetric_gram
from dpsql.hdmm.hierarchy import HierarchyFactor
from dpsql.hdmm.marginals import Marginals, ResidualMarginals, workload_eigen_weights
from dpsql.hdmm.matrix import (
    DENSE_LIMIT,
    PINV_RCOND,
    Dense,
    Identity,
    InvertibleGram,
    Kronecker,
    Matrix,
    Product,
    Transpose,
    VStack,
    Weighted,
    constant_row,
    kron_terms,
)
from dpsql.hdmm.workload import Term, Workload

#: Relative residual above which a workload factor counts as unsupported.
SUPPORT_TOL = 1e-8
#: Most entries :meth:`Strategy.cross_covariance` computes, per term pair and per factor.
CROSS_LIMIT = 4_000_000


class Strategy:
    """Base class: a measurement matrix plus error analysis for its structure."""

    operator: str = "?"

    @property
    def matrix(self) -> Matrix:
        raise NotImplementedError

    def sensitivity(self, p: int) -> float:
        """:attr:`matrix`'s L``p`` sensitivity, computed once per norm (like :attr:`matrix`, the
        strategy is not changed after it is built): a union over 85,000 tracts sorts its columns'
        norms for it, 0.2 s a time, and every error figure of a request asks for it."""
        known = self.__dict__.setdefault("_sensitivities", {})
        if p not in known:
            known[p] = self.matrix.sensitivity(p)
        return known[p]

    def trace_error(self, workload: Workload) -> float:
        raise NotImplementedError

    def query_variances(self, workload: Workload) -> list[np.ndarray]:
        raise NotImplementedError

    def cross_variances(self, workload: Workload, a: int, b: int) -> np.ndarray:
        """``diag(W_a (AᵀA)⁺ W_bᵀ)`` for two workload terms with equal row counts:
        the covariance of their answers row by row, per unit of noise variance
        (AVG = SUM / COUNT needs it for its standard error)."""
        raise NotImplementedError

    def cross_covariance(self, workload: Workload, a: int, b: int) -> np.ndarray:
        """``W_a (AᵀA)⁺ W_bᵀ``, every row of term ``a`` against every row of term ``b``, per unit
        of noise variance: what a linear combination of answers across groups (a window's
        ``SUM(COUNT(*)) OVER ()``) needs. NaN where a row is not answerable. Computed factor by
        factor, never over the full domain; refused (:class:`~dpsql.errors.WorkloadError`) past
        :data:`CROSS_LIMIT` entries."""
        raise WorkloadError(f"{type(self).__name__} gives no covariances between queries")

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
    def _symmetric(self) -> list[tuple[float, float] | None]:
        """Per factor, ``(s, t)`` where its Gram is ``sI + tJ`` as its type tells (an identity, a total,
        OPT_⊗'s closed-form factor on a group key), else ``None``: every trace and variance through
        such a factor is computed from the workload factors' row sums and norms
        (:mod:`~dpsql.hdmm.symmetric_gram`), nothing ``n × n`` (a county key of 3,142 values took
        most of OPT_⊗'s time; 85,000 tracts would not fit)."""
        found = [symmetric_gram.coefficients(f, dense_max=0) for f in self.factors]
        return [c if c is not None and max(c) > 0 else None for c in found]

    @cached_property
    def _grams(self) -> list[Matrix | None]:
        """``A_iᵀA_i`` per factor; ``None`` for a thin one (see :attr:`_thin`), whose Gram is not held,
        a hierarchy's and an ``sI + tJ`` one's (see :attr:`_symmetric`)."""
        return [None if T is not None or c is not None or isinstance(f, HierarchyFactor) else f.gram()
                for f, T, c in zip(self.factors, self._thin, self._symmetric)]

    @cached_property
    def _thin(self) -> list[np.ndarray | None]:
        """Per factor ``A_i``: its pseudo-inverse ``A_i⁺`` (``n × r``) where the ``n × n`` Gram is
        too large to hold (:data:`~dpsql.hdmm.matrix.DENSE_LIMIT`) or the factor has at most a
        quarter as many rows as columns, else ``None``. Such a factor has few rows (a SUM's
        values, a predicate or a total, measured as they are by the direct candidate), and
        ``(A_iᵀA_i)⁺ = A_i⁺A_i⁺ᵀ``, so every trace and variance below is computed through the
        ``n × r`` matrix ``A_i⁺`` instead, in ``O(n r²)`` where the Gram's pseudo-inverse takes
        ``O(n³)`` (the direct candidate of 138 one-range statements on 276 values: 0.2 s, against
        2.9 s); a factor too large for that too is refused. Singular values below
        ``√PINV_RCOND`` times the largest count as zero, as the Gram's below ``PINV_RCOND`` do."""
        return [np.linalg.pinv(f.dense(), rcond=math.sqrt(PINV_RCOND))
                if not isinstance(f, HierarchyFactor) and c is None
                and (f.shape[1] ** 2 > DENSE_LIMIT or 4 * f.shape[0] <= f.shape[1])
                else None for f, c in zip(self.factors, self._symmetric)]

    @cached_property
    def factor_pinvs(self) -> list[Matrix]:
        """``(A_iᵀA_i)⁺`` per factor (the exact inverse where it is known): dense, or
        ``A_i⁺A_i⁺ᵀ`` as a product for a factor on a domain too large for a dense Gram, and the
        tree's implicit inverse for a :class:`~dpsql.hdmm.hierarchy.HierarchyFactor`, ``(sI + tJ)⁺``'s
        for an ``sI + tJ`` factor."""
        return [
            f.inverse if isinstance(f, HierarchyFactor)
            else symmetric_gram.pinv(*c, f.shape[1]) if c is not None
            else Dense(X.inverse()) if isinstance(X, InvertibleGram)
            else Product(Dense(T), Transpose(Dense(T))) if T is not None else Dense(X.pinv().dense())
            for f, X, T, c in zip(self.factors, self._grams, self._thin, self._symmetric)
        ]

    @cached_property
    def _projectors(self) -> list[np.ndarray | None]:
        """``X_i⁺X_i`` per factor; ``None`` where ``A_i`` is known to have full column rank or
        is thin (its projector is then ``A_i⁺A_i``, never formed); a hierarchy's leaves are all measured."""
        return [
            None if X is None or isinstance(X, (InvertibleGram, Identity)) or T is not None else P.dense() @ X.dense()
            for P, X, T in zip(self.factor_pinvs, self._grams, self._thin)
        ]

    def factor_trace(self, i: int, f: Matrix) -> float:
        """``tr(fᵀf (A_iᵀA_i)⁺)`` for a workload factor ``f`` on attribute ``i``; ``inf`` if unsupported."""
        if isinstance(self.factors[i], HierarchyFactor):
            return self.factors[i].trace(f)
        if self._symmetric[i] is not None:
            v = self.factor_cross_diag(i, f, f)
            return float(np.sum(v)) if np.isfinite(v).all() else math.inf
        T = self._thin[i]
        if T is not None:
            return float(np.sum(f._matmat(T) ** 2)) if self._supported_rows(i, f).all() else math.inf
        G = f.gram().dense()
        if not self._supports(i, G):
            return math.inf
        return float(np.sum(G * self.factor_pinvs[i].dense()))

    def _supports(self, i: int, G: np.ndarray) -> bool:
        # W is answerable iff W X⁺X = W, i.e. tr(G) = tr(G X⁺X) for G = WᵀW.
        if self._projectors[i] is None:
            return True
        t = float(np.trace(G))
        return abs(t - float(np.sum(G * self._projectors[i].T))) <= SUPPORT_TOL * max(t, 1.0)

    def _supported_rows(self, i: int, W: Matrix) -> np.ndarray:
        """Which rows ``q`` of a factor satisfy ``q X_i⁺X_i = q`` (answerable rows); for a thin
        factor, ``‖q A_i⁺A_i‖² = ‖q‖²`` (an orthogonal projection only shortens rows)."""
        T = self._thin[i]
        if T is not None:
            kept = ((W._matmat(T) @ self.factors[i].dense()) ** 2).sum(axis=1)
            return W.row_norms_sq() - kept <= SUPPORT_TOL * np.maximum(W.row_norms_sq(), 1.0)
        P = self._projectors[i]
        residual = W._matmat(np.eye(P.shape[0]) - P.T)
        return (residual**2).sum(axis=1) <= SUPPORT_TOL * np.maximum(W.row_norms_sq(), 1.0)

    def term_traces(self, workload: Workload) -> np.ndarray:
        """``tr(G_ki X_i⁺)`` for every term ``k`` and attribute ``i``."""
        self._check_domain(workload, self.domain)
        return np.array([[self.factor_trace(i, f) for i, f in enumerate(fs)] for _, fs in workload.terms])

    def term_errors(self, workload: Workload) -> np.ndarray:
        """``Π_i tr(G_ki X_i⁺)`` per term, weights aside: ``inf`` if unsupported, and 0 for a
        term with a zero factor (its queries are all zero, with zero error)."""
        T = self.term_traces(workload)
        with np.errstate(invalid="ignore"):
            return np.where((T == 0).any(axis=1), 0.0, np.prod(T, axis=1))

    def trace_error(self, workload: Workload) -> float:
        w2 = np.array([w * w for w, _ in workload.terms])
        return float(np.sum(w2 * self.term_errors(workload)))

    def factor_cross_diag(self, i: int, x: Matrix, y: Matrix) -> np.ndarray:
        """``diag(x X_i⁺ yᵀ)`` for two factors on attribute ``i``; for ``x is y``, ``inf``
        on the rows this factor cannot answer."""
        v = self._cross(i, x, y)
        if x is not y:
            return v
        if self._symmetric[i] is not None:
            return np.where(symmetric_gram.supported_rows(*self._symmetric[i], self.domain[i], x), v, math.inf)
        if self._thin[i] is not None:
            return np.where(self._supported_rows(i, x), v, math.inf)
        if self._projectors[i] is not None and not self._supports(i, x.gram().dense()):
            v = np.where(self._supported_rows(i, x), v, math.inf)
        return v

    def _cross(self, i: int, x: Matrix, y: Matrix) -> np.ndarray:
        """``diag(x X_i⁺ yᵀ)``, through ``A_i⁺`` for a thin factor (``x A_i⁺ (y A_i⁺)ᵀ``)."""
        if isinstance(self.factors[i], HierarchyFactor):
            return self.factors[i].cross_diag(x, y)
        if self._symmetric[i] is not None:
            return symmetric_gram.cross_diag(*self._symmetric[i], self.domain[i], x, y)
        T = self._thin[i]
        if T is None:
            return _cross_diag(x, y, self.factor_pinvs[i].dense())
        xT = x._matmat(T)
        return np.einsum("ij,ij->i", xT, xT if x is y else y._matmat(T))

    def query_variances(self, workload: Workload) -> list[np.ndarray]:
        self._check_domain(workload, self.domain)
        out = []
        for w, fs in workload.terms:
            with np.errstate(invalid="ignore"):
                var = reduce(np.kron, [self.factor_cross_diag(i, f, f) for i, f in enumerate(fs)])
            # 0 · inf: an all-zero query row (answered exactly) times an unsupported factor row
            out.append(w * w * np.where(np.isnan(var), 0.0, var))
        return out

    def cross_variances(self, workload: Workload, a: int, b: int) -> np.ndarray:
        self._check_domain(workload, self.domain)
        (wa, fa), (wb, fb) = workload.terms[a], workload.terms[b]
        parts = [self._cross(i, x, y) for i, (x, y) in enumerate(zip(fa, fb))]
        return wa * wb * reduce(np.kron, parts)

    def factor_cross(self, i: int, x: Matrix, y: Matrix) -> np.ndarray:
        """``x X_i⁺ yᵀ`` for two factors on attribute ``i``, NaN on the rows this factor cannot answer."""
        _check_cross(x.shape[1], y.shape[0])
        out = x._matmat(self.factor_pinvs[i]._matmat(y.rmatvec(np.eye(y.shape[0]))))
        ok_x, ok_y = (np.isfinite(self.factor_cross_diag(i, f, f)) for f in (x, y))
        return np.where(np.outer(ok_x, ok_y), out, np.nan)

    def cross_covariance(self, workload: Workload, a: int, b: int) -> np.ndarray:
        self._check_domain(workload, self.domain)
        (wa, fa), (wb, fb) = workload.terms[a], workload.terms[b]
        _check_cross(math.prod(f.shape[0] for f in fa), math.prod(f.shape[0] for f in fb))
        return wa * wb * reduce(np.kron, [self.factor_cross(i, x, y) for i, (x, y) in enumerate(zip(fa, fb))])


@dataclass
class UnionStrategy(Strategy):
    """A weighted union of strategies (HDMM Definition 19): Kronecker products,
    or marginal strategies with fixed factors for clusters of marginal-like terms.

    Part ``l`` is measured with weight ``c_l`` and answers exactly the workload
    terms in ``groups[l]`` by its own least squares, so term errors add up as
    ``Σ_l Σ_{k ∈ groups[l]} tr(G_k X_l⁺) / c_l²``: an upper bound on the error
    of joint least squares over the whole union.
    """

    parts: list[KronStrategy | MarginalStrategy]
    weights: list[float]
    groups: list[list[int]]
    operator: str = "OPT_plus"

    @cached_property
    def matrix(self) -> VStack:
        return VStack([Weighted(p.matrix, c) for p, c in zip(self.parts, self.weights)])

    def _assignment(self, workload: Workload) -> list[tuple[int, KronStrategy | MarginalStrategy, float]]:
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

    def cross_covariance(self, workload: Workload, a: int, b: int) -> np.ndarray:
        assignment = self._assignment(workload)
        (_, part_a, c), (_, part_b, _) = assignment[a], assignment[b]
        rows = [math.prod(f.shape[0] for f in workload.terms[k][1]) for k in (a, b)]
        _check_cross(*rows)
        if part_a is not part_b:
            return np.zeros(rows)
        pair = Workload(workload.domain, [workload.terms[a], workload.terms[b]])
        return part_a.cross_covariance(pair, 0, 1) / c**2


@dataclass
class MarginalStrategy(Strategy):
    """A strategy whose Gram matrix lies in the marginal algebra (HDMM §8),
    optionally in Kronecker product with fixed factors on some attributes.

    ``strategy`` is weighted marginals (:class:`~dpsql.hdmm.marginals.Marginals`)
    or the residual realization of the same Gram matrices
    (:class:`~dpsql.hdmm.marginals.ResidualMarginals`). The error is
    ``Σ_t γ_t / λ_t`` (Theorem 11) with ``γ`` from
    :func:`~dpsql.hdmm.marginals.workload_eigen_weights`.

    ``fixed``, when given, has one entry per attribute of the full domain: a
    factor matrix ``A_i`` on the attributes ``S`` it names, None on the
    attributes ``strategy`` spans (in domain order). The strategy is then
    ``(⊗_{i∈S} A_i) ⊗ M`` with the attributes in domain order, and since
    ``(AᵀA)⁺ = ⊗_{i∈S} X_i⁺ ⊗ X_M⁺`` a term's error is
    ``Π_{i∈S} tr(G_i X_i⁺) · Σ_t γ_t / λ_t``, the eigen weights taken over the
    marginal attributes. OPT_+ uses it for a group of workload terms that
    share their structured factors (ranges, prefixes) and differ only in
    marginal ones (identities, totals).
    """

    strategy: Marginals | ResidualMarginals
    operator: str = "OPT_M"
    fixed: tuple[Matrix | None, ...] | None = None

    def __post_init__(self) -> None:
        if self.fixed is not None and all(f is None for f in self.fixed):
            self.fixed = None
        if self.fixed is not None:
            free = sum(f is None for f in self.fixed)
            if free != len(self.strategy.domain):
                raise WorkloadError(f"a marginal strategy over {len(self.strategy.domain)} attributes needs as many "
                                    f"None entries in fixed, got {free}")

    @cached_property
    def marginal_attributes(self) -> list[int]:
        """Positions, in the full domain, of the attributes ``strategy`` spans."""
        if self.fixed is None:
            return list(range(len(self.strategy.domain)))
        return [i for i, f in enumerate(self.fixed) if f is None]

    @cached_property
    def fixed_part(self) -> tuple[list[int], KronStrategy | None]:
        """The fixed attributes and their product (None when there are none)."""
        if self.fixed is None:
            return [], None
        S = [i for i, f in enumerate(self.fixed) if f is not None]
        return S, KronStrategy(tuple(self.fixed[i] for i in S))

    @cached_property
    def domain(self) -> tuple[int, ...]:
        if self.fixed is None:
            return tuple(self.strategy.domain)
        sizes = iter(self.strategy.domain)
        return tuple(next(sizes) if f is None else f.shape[1] for f in self.fixed)

    def interleave(self, fixed: Sequence, marginal: Sequence) -> list:
        """One entry per attribute: ``fixed[j]`` on the j-th fixed attribute,
        ``marginal[j]`` on the j-th marginal one."""
        if self.fixed is None:
            return list(marginal)
        f, m = iter(fixed), iter(marginal)
        return [next(m) if x is None else next(f) for x in self.fixed]

    @cached_property
    def matrix(self) -> Matrix:
        if self.fixed is None:
            return self.strategy
        _, kron = self.fixed_part
        return VStack([Weighted(Kronecker(self.interleave(kron.factors, fs)), w)
                       for w, fs in kron_terms(self.strategy)])

    @cached_property
    def eigenvalues(self) -> np.ndarray:
        return self.strategy.gram().eigenvalues()

    def _split(self, terms: Sequence[Term]) -> tuple[np.ndarray, list[Term]]:
        """Per term, the product of the fixed attributes' traces ``Π_{i∈S} tr(G_i X_i⁺)``
        (0 for a zero factor, ``inf`` if unsupported), and the terms' marginal-attribute parts."""
        R = self.marginal_attributes
        marginal = [(w, tuple(fs[i] for i in R)) for w, fs in terms]
        S, kron = self.fixed_part
        if kron is None:
            return np.ones(len(terms)), marginal
        return kron.term_errors(Workload(kron.domain, [(1.0, tuple(fs[i] for i in S)) for _, fs in terms])), marginal

    def trace_error(self, workload: Workload) -> float:
        self._check_domain(workload, self.domain)
        scale, marginal = self._split(workload.terms)
        sub = self.strategy.domain
        if self.fixed is None:
            return eigen_trace_error(workload_eigen_weights(sub, marginal), self.eigenvalues)
        total = 0.0
        for c, term in zip(scale, marginal):
            e = eigen_trace_error(workload_eigen_weights(sub, [term]), self.eigenvalues) if c > 0 else 0.0
            if e > 0:  # a term whose marginal part is zero has no error, whatever its fixed part
                total += c * e
        return float(total)

    def query_variances(self, workload: Workload) -> list[np.ndarray]:
        """``diag(W_k X⁺ W_kᵀ)`` for every term (see :meth:`cross_variances`)."""
        return [self.cross_variances(workload, k, k) for k in range(len(workload.terms))]

    def cross_variances(self, workload: Workload, a: int, b: int) -> np.ndarray:
        """``diag(W_a X⁺ W_bᵀ) = Σ_t (1/λ_t) ⊗_i diag(W_ai Π_t,i W_biᵀ)``.

        On a marginal attribute ``i`` the projector onto the ones vector
        contributes ``row_sum_a · row_sum_b / n_i`` and its complement the rest
        of ``diag(W_ai W_biᵀ)``; only subsets of the attributes where a term is
        not constant contribute. A fixed attribute contributes
        ``diag(W_ai X_i⁺ W_biᵀ)`` to every subset.
        """
        self._check_domain(workload, self.domain)
        lam = self.eigenvalues
        (wa, fa), (wb, fb) = workload.terms[a], workload.terms[b]
        R = self.marginal_attributes
        S, kron = self.fixed_part
        pinned = [kron.factor_cross_diag(j, fa[i], fb[i]) for j, i in enumerate(S)]
        sizes = self.strategy.domain
        ones = [fa[i].row_sums() * fb[i].row_sums() / n for i, n in zip(R, sizes)]
        full = [fa[i].row_norms_sq() if a == b else np.einsum("ij,ij->i", fa[i].dense(), fb[i].dense()) for i in R]
        rest = [f - o for f, o in zip(full, ones)]
        if a == b:
            rest = [np.maximum(r, 0.0) for r in rest]
        active = [j for j in range(len(R)) if np.abs(rest[j]).max() > SUPPORT_TOL * max(1.0, np.abs(ones[j]).max())]
        var = np.zeros(math.prod(f.shape[0] for f in fa))
        with np.errstate(invalid="ignore"):
            for r in range(len(active) + 1):
                for sub in itertools.combinations(active, r):
                    t = sum(1 << j for j in sub)
                    contrib = reduce(np.kron, self.interleave(
                        pinned, [rest[j] if j in sub else ones[j] for j in range(len(R))]))
                    if lam[t] <= 0:
                        if np.abs(np.nan_to_num(contrib)).max() > 0:
                            var = var + np.where(contrib != 0, math.inf, 0.0)
                        continue
                    var = var + contrib / lam[t]
        # 0 · inf: an all-zero query row (answered exactly) times an unsupported fixed-factor row
        return wa * wb * np.where(np.isnan(var), 0.0, var)

    def cross_covariance(self, workload: Workload, a: int, b: int) -> np.ndarray:
        """``W_a X⁺ W_bᵀ = Σ_t (1/λ_t) ⊗_i (W_ai Π_t,i W_biᵀ)``, as :meth:`cross_variances` with
        every row against every row."""
        self._check_domain(workload, self.domain)
        lam = self.eigenvalues
        (wa, fa), (wb, fb) = workload.terms[a], workload.terms[b]
        _check_cross(math.prod(f.shape[0] for f in fa), math.prod(f.shape[0] for f in fb))
        R = self.marginal_attributes
        S, kron = self.fixed_part
        pinned = [kron.factor_cross(j, fa[i], fb[i]) for j, i in enumerate(S)]
        ones = [np.outer(fa[i].row_sums(), fb[i].row_sums()) / n for i, n in zip(R, self.strategy.domain)]
        rest = [fa[i]._matmat(fb[i].rmatvec(np.eye(fb[i].shape[0]))) - o for i, o in zip(R, ones)]
        active = [j for j in range(len(R)) if np.abs(rest[j]).max() > SUPPORT_TOL * max(1.0, np.abs(ones[j]).max())]
        cov = np.zeros((math.prod(f.shape[0] for f in fa), math.prod(f.shape[0] for f in fb)))
        for r in range(len(active) + 1):
            for sub in itertools.combinations(active, r):
                t = sum(1 << j for j in sub)
                contrib = reduce(np.kron, self.interleave(pinned, [rest[j] if j in sub else ones[j]
                                                                   for j in range(len(R))]))
                cov = cov + (np.where(contrib != 0, np.nan, 0.0) if lam[t] <= 0 else contrib / lam[t])
        return wa * wb * cov


def measured_cells(strategy: Strategy) -> int:
    """How big a measurement of ``strategy`` is: its rows, or the cells of the largest marginal it is
    computed from if more (a block's marginal spans the attributes whose factor is not ``c·1ᵀ``, which
    sum their attribute out), from public shapes only."""
    largest = 0
    for _, factors in kron_terms(strategy.matrix):
        largest = max(largest, math.prod(f.shape[1] for f in factors if constant_row(f) is None))
    return max(largest, strategy.matrix.shape[0])


def _check_cross(*sizes: int) -> None:
    if math.prod(sizes) > CROSS_LIMIT:
        raise WorkloadError(f"the covariances of {' × '.join(f'{n:,}' for n in sizes)} queries would take too long")


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
