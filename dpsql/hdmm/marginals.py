"""The marginals family (HDMM §7): marginal query matrices and their Gram algebra.

A subset ``a`` of the ``d`` attributes is an integer bitmask (bit ``i`` set
means attribute ``i`` is kept). The marginal on ``a`` is the Kronecker product
with ``I(n_i)`` on kept attributes and ``T(n_i)`` elsewhere; its Gram matrix is
``C_a = ⊗ (I if i ∈ a else J)`` with ``J`` the all-ones matrix.

Weighted sums ``X = Σ_a u_a C_a`` form a commutative algebra (Theorem 7). All
its members share one set of eigenspaces (Theorem 9), indexed by subsets
``t``: on attribute ``i`` the space is the complement of the ones vector when
``i ∈ t`` and the ones vector itself otherwise. The eigenvalue of ``X`` there
is ``λ_t = Σ_{a ⊇ t} u_a m(a)`` with ``m(a) = Π_{i ∉ a} n_i`` and the
multiplicity is ``Π_{i ∈ t} (n_i − 1)``. So products, inverses and
pseudo-inverses (Theorem 8) reduce to ``O(d 2^d)`` transforms of weight
vectors, never touching the ``Π n_i`` full domain.

>>> import numpy as np
>>> X = MarginalsGram((2, 3), np.array([0.0, 1.0, 2.0, 0.5]))
>>> bool(np.allclose(X.pinv().dense(), np.linalg.pinv(X.dense())))
True
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from dpsql.errors import WorkloadError
from dpsql.hdmm.matrix import Identity, Kronecker, Matrix, Product, Total, Transpose, VStack, Weighted

#: Most attributes the marginal algebra handles (2^d weights).
MAX_ATTRIBUTES = 24

#: Relative size below which an eigenvalue counts as zero in a pseudo-inverse.
RANK_TOL = 1e-10


def _check_domain(domain: Sequence[int]) -> tuple[int, ...]:
    domain = tuple(int(n) for n in domain)
    if len(domain) > MAX_ATTRIBUTES:
        raise WorkloadError(
            f"the marginal algebra handles at most {MAX_ATTRIBUTES} attributes, got {len(domain)}"
        )
    return domain


def _per_subset(values_out: Sequence[float], values_in: Sequence[float]) -> np.ndarray:
    """``v[a] = Π_i (values_in[i] if bit i of a else values_out[i])``, for all ``a``."""
    v = np.ones(1)
    for o, i in zip(values_out, values_in):
        v = np.concatenate([v * o, v * i])
    return v


def _transform(f: np.ndarray, d: int, kind: str) -> np.ndarray:
    """Zeta/Möbius transforms over the subset lattice, one attribute at a time.

    ``superset``: ``g[t] = Σ_{a ⊇ t} f[a]``; ``superset_inverse`` undoes it;
    ``subset``: ``g[a] = Σ_{t ⊆ a} f[t]``.
    """
    g = np.array(f, dtype=float).reshape((2,) * d) if d else np.array(f, dtype=float)
    for i in range(d):
        axis = d - 1 - i  # bit i is axis d-1-i in C order
        lo = [slice(None)] * d
        hi = [slice(None)] * d
        lo[axis], hi[axis] = 0, 1
        lo, hi = tuple(lo), tuple(hi)
        if kind == "superset":
            g[lo] = g[lo] + g[hi]
        elif kind == "superset_inverse":
            g[lo] = g[lo] - g[hi]
        else:
            g[hi] = g[hi] + g[lo]
    return g.reshape(-1)


def marginal_factors(domain: Sequence[int], a: int) -> list[Matrix]:
    """The Kronecker factors of the marginal on subset ``a``."""
    return [Identity(n) if a >> i & 1 else Total(n) for i, n in enumerate(domain)]


class MarginalsGram(Matrix):
    """``X = Σ_a u_a C_a``: a Gram matrix of the marginal algebra (HDMM Theorem 7)."""

    def __init__(self, domain: Sequence[int], weights: np.ndarray) -> None:
        self.domain = _check_domain(domain)
        self.weights = np.asarray(weights, dtype=float)
        if self.weights.shape != (2 ** len(self.domain),):
            raise WorkloadError(f"need {2 ** len(self.domain)} marginal weights, got {self.weights.shape}")
        N = math.prod(self.domain)
        self.shape = (N, N)

    @classmethod
    def from_eigenvalues(cls, domain: Sequence[int], eigenvalues: np.ndarray) -> "MarginalsGram":
        """The member of the algebra with eigenvalue ``eigenvalues[t]`` on eigenspace ``t``."""
        domain = _check_domain(domain)
        u = _transform(eigenvalues, len(domain), "superset_inverse") / complement_sizes(domain)
        return cls(domain, u)

    def eigenvalues(self) -> np.ndarray:
        """``λ_t`` for every subset ``t`` (Theorem 9)."""
        return _transform(self.weights * complement_sizes(self.domain), len(self.domain), "superset")

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        k = X.shape[1]
        T = X.reshape(*self.domain, k)
        d = len(self.domain)
        out = np.zeros_like(T)
        for a in np.flatnonzero(self.weights):
            axes = tuple(i for i in range(d) if not a >> i & 1)
            out += self.weights[a] * np.broadcast_to(T.sum(axis=axes, keepdims=True), T.shape)
        return out.reshape(-1, k)

    _rmatmat = _matmat  # symmetric

    def gram(self) -> Product:
        return Product(self, self)

    def trace(self) -> float:
        return float(self.shape[0] * self.weights.sum())

    def pinv(self) -> "MarginalsGram":
        """Pseudo-inverse: invert the nonzero eigenvalues (Theorem 8)."""
        lam = self.eigenvalues()
        keep = np.abs(lam) > RANK_TOL * max(1.0, float(np.abs(lam).max()))
        inv = np.where(keep, 1.0 / np.where(keep, lam, 1.0), 0.0)
        return MarginalsGram.from_eigenvalues(self.domain, inv)


def complement_sizes(domain: Sequence[int]) -> np.ndarray:
    """``m(a) = Π_{i ∉ a} n_i`` for every subset ``a``."""
    return _per_subset(domain, [1.0] * len(domain))


def multiplicities(domain: Sequence[int]) -> np.ndarray:
    """Dimension ``Π_{i ∈ t} (n_i − 1)`` of every eigenspace ``t``."""
    return _per_subset([1.0] * len(domain), [n - 1 for n in domain])


class _MarginalStack(Matrix):
    """A strategy stored as a union of weighted Kronecker blocks whose Gram
    matrix lies in the marginal algebra; the pseudo-inverse follows from it."""

    stack: VStack

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self.stack._matmat(X)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return self.stack._rmatmat(Y)

    def row_sums(self) -> np.ndarray:
        return self.stack.row_sums()

    def row_norms_sq(self) -> np.ndarray:
        return self.stack.row_norms_sq()

    def pinv(self) -> Product:
        """``A⁺ = (AᵀA)⁺ Aᵀ``, with the Gram pseudo-inverse taken in the algebra."""
        return Product(self.gram().pinv(), Transpose(self))


class Marginals(_MarginalStack):
    """A weighted marginal query strategy (HDMM Definition 20): the union of the
    marginals ``a`` with ``θ_a ≠ 0``, each scaled by ``θ_a``.

    Every marginal query matrix has exactly one 1 in each column, so the L1
    sensitivity is ``Σ|θ_a|`` and the L2 sensitivity ``√Σθ_a²`` (Proposition 7).
    """

    def __init__(self, domain: Sequence[int], theta: np.ndarray) -> None:
        self.domain = _check_domain(domain)
        self.theta = np.asarray(theta, dtype=float)
        if self.theta.shape != (2 ** len(self.domain),):
            raise WorkloadError(f"need {2 ** len(self.domain)} marginal weights, got {self.theta.shape}")
        self.subsets = [int(a) for a in np.flatnonzero(self.theta)]
        self.stack = VStack(
            [Weighted(Kronecker(marginal_factors(self.domain, a)), self.theta[a]) for a in self.subsets]
        )
        self.shape = self.stack.shape

    def gram(self) -> MarginalsGram:
        return MarginalsGram(self.domain, self.theta**2)

    def column_norms(self, p: int) -> np.ndarray:
        return np.full(self.shape[1], self.sensitivity(p))

    def sensitivity(self, p: int) -> float:
        return float(np.abs(self.theta).sum() if p == 1 else math.sqrt((self.theta**2).sum()))


class Helmert(Matrix):
    """``n − 1`` orthonormal rows, each orthogonal to the ones vector (a contrast basis): row
    ``k − 1`` is ``(1, …, 1, −k, 0, …) / √(k(k + 1))`` with ``k`` ones. Implicit, so that a
    residual strategy on a column of 100,000 values does not hold a 10¹⁰-entry matrix: its
    products are cumulative sums.

    >>> H = Helmert(4).dense()
    >>> bool(np.allclose(H @ H.T, np.eye(3))), bool(np.allclose(H.sum(axis=1), 0))
    (True, True)
    """

    def __init__(self, n: int) -> None:
        self.n = int(n)
        self.shape = (self.n - 1, self.n)
        self._k = np.arange(1, self.n, dtype=float)  # row k − 1 holds k ones, then −k
        self._scale = 1.0 / np.sqrt(self._k * (self._k + 1.0))  # and is divided by this

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return (np.cumsum(X, axis=0)[:-1] - self._k[:, None] * X[1:]) * self._scale[:, None]

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        Z = Y * self._scale[:, None]
        out = np.zeros((self.n,) + Y.shape[1:])
        out[:-1] = np.cumsum(Z[::-1], axis=0)[::-1]  # column j: the rows k > j hold a 1 there
        out[1:] -= self._k[:, None] * Z  # column k: row k − 1 holds −k
        return out

    def column_norms(self, p: int) -> np.ndarray:
        ones = np.zeros(self.n)
        ones[:-1] = np.cumsum((self._scale**p)[::-1])[::-1]
        ones[1:] += (self._k * self._scale) ** p
        return ones if p == 1 else np.sqrt(ones)

    def row_sums(self) -> np.ndarray:
        return np.zeros(self.n - 1)

    def row_norms_sq(self) -> np.ndarray:
        return np.ones(self.n - 1)


class ResidualMarginals(_MarginalStack):
    """A marginal-algebra strategy built from residual (contrast) queries.

    For each subset ``t`` with weight ``c_t ≠ 0`` it measures ``c_t`` times the
    Kronecker product of a contrast basis on the attributes in ``t`` and
    totals elsewhere. These blocks are mutually orthogonal, and block ``t``
    contributes ``c_t² m(t)`` to eigenspace ``t`` only, so *any* member of the
    marginal algebra with nonnegative eigenvalues is the Gram matrix of such a
    strategy, including those whose marginal weights would be negative
    (HDMM's remark after Theorem 13). Each block is computed from the
    ``t``-marginal of the data, so measurement stays low-dimensional.

    Every column has the same L2 norm, ``√Σ_t c_t² Π_{i∈t}(n_i − 1)/n_i``.
    """

    def __init__(self, domain: Sequence[int], weights: np.ndarray) -> None:
        self.domain = _check_domain(domain)
        self.weights = np.asarray(weights, dtype=float)
        if self.weights.shape != (2 ** len(self.domain),):
            raise WorkloadError(f"need {2 ** len(self.domain)} residual weights, got {self.weights.shape}")
        self.subsets = [int(t) for t in np.flatnonzero(self.weights)]
        self.stack = VStack(
            [
                Weighted(
                    Kronecker([Helmert(n) if t >> i & 1 else Total(n) for i, n in enumerate(self.domain)]),
                    self.weights[t],
                )
                for t in self.subsets
            ]
        )
        self.shape = self.stack.shape

    @classmethod
    def from_eigenvalues(cls, domain: Sequence[int], eigenvalues: np.ndarray) -> "ResidualMarginals":
        """The residual strategy whose Gram matrix has the given eigenvalues (all ≥ 0)."""
        lam = np.asarray(eigenvalues, dtype=float)
        if np.any(lam < 0):
            raise WorkloadError("a Gram matrix needs nonnegative eigenvalues")
        return cls(domain, np.sqrt(lam / complement_sizes(_check_domain(domain))))

    def gram(self) -> MarginalsGram:
        return MarginalsGram.from_eigenvalues(self.domain, self.weights**2 * complement_sizes(self.domain))

    def column_norms(self, p: int) -> np.ndarray:
        if p == 2:
            return np.full(self.shape[1], self.sensitivity(2))
        return self.stack.column_norms(1)

    def sensitivity(self, p: int) -> float:
        if p == 2:
            frac = _per_subset([1.0] * len(self.domain), [(n - 1) / n for n in self.domain])
            return float(math.sqrt((self.weights**2 * frac).sum()))
        return self.stack.sensitivity(1)


def in_algebra(f: Matrix) -> bool:
    """Whether factor ``f``'s Gram matrix is ``αI + βJ``: an identity, a total,
    IT or a multiple, the factors for which a marginal strategy on that
    attribute is natural (a range or prefix set is not).

    >>> from dpsql.hdmm.matrix import IdentityTotal, Prefix
    >>> in_algebra(IdentityTotal(4)), in_algebra(Prefix(4))
    (True, False)
    """
    G = f.gram().dense()
    n = G.shape[0]
    if n == 1:
        return True
    tol = RANK_TOL * max(1.0, float(np.abs(G).max()))
    off_diagonal = G[~np.eye(n, dtype=bool)]
    return bool(np.ptp(off_diagonal) <= tol and np.ptp(np.diag(G)) <= tol)


def workload_eigen_weights(domain: Sequence[int], terms: Sequence[tuple[float, Sequence[Matrix]]]) -> np.ndarray:
    """``γ_t = tr(WᵀW Π_t)`` for every eigenspace ``t`` of the marginal algebra.

    For any strategy ``A`` whose Gram matrix is in the algebra,
    ``tr(WᵀW (AᵀA)⁺) = Σ_t γ_t / λ_t(AᵀA)``: the workload enters only through
    these ``2^d`` numbers, whatever its factors are (HDMM Theorem 10). For a
    Kronecker term with factor Grams ``G_i``, ``tr(G_i Π)`` is
    ``sum(G_i)/n_i`` on the ones vector and ``tr(G_i) − sum(G_i)/n_i`` on its
    complement.
    """
    domain = _check_domain(domain)
    gamma = np.zeros(2 ** len(domain))
    for w, factors in terms:
        tr = [float(f.row_norms_sq().sum()) for f in factors]
        sm = [float((f.row_sums() ** 2).sum()) for f in factors]
        ones_part = [s / n for s, n in zip(sm, domain)]
        rest_part = [max(t - o, 0.0) for t, o in zip(tr, ones_part)]
        gamma += w**2 * _per_subset(ones_part, rest_part)
    return gamma


def subset_sum(f: np.ndarray, d: int) -> np.ndarray:
    """``g[a] = Σ_{t ⊆ a} f[t]`` (used for gradients with respect to weights)."""
    return _transform(f, d, "subset")


def superset_sum(f: np.ndarray, d: int) -> np.ndarray:
    """``g[t] = Σ_{a ⊇ t} f[a]``."""
    return _transform(f, d, "superset")
