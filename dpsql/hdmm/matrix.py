"""Implicit matrices: query sets that know their own linear algebra.

HDMM (§5) never writes a workload or strategy out as a dense
``queries × domain`` array. Every object here keeps a compact description and
computes what the mechanism needs from it directly:

* ``matvec`` / ``rmatvec``: ``A @ x`` and ``A.T @ y`` (``x`` may be a vector or
  a matrix whose columns are vectors; products act along axis 0);
* ``gram``: ``AᵀA``, itself implicit where the structure allows;
* ``column_norms`` / ``sensitivity``: the largest L1 or L2 column norm, which
  calibrates Laplace and Gaussian noise;
* ``trace``, ``pinv``, ``row_sums``, ``row_norms_sq``.

``dense()`` materializes, and refuses above :data:`DENSE_LIMIT` entries, so an
accidental densification of a census-sized product fails loudly instead of
exhausting memory.

>>> import numpy as np
>>> W = Kronecker([Prefix(3), Identity(2)])
>>> W.shape
(6, 6)
>>> bool(np.allclose(W.matvec(np.ones(6)), W.dense() @ np.ones(6)))
True
>>> float(W.sensitivity(1))
3.0
"""

from __future__ import annotations

import math
from functools import cached_property, reduce
from typing import Callable, Sequence

import numpy as np
import scipy.sparse as sp

from dpsql.errors import WorkloadError

#: Largest number of entries :meth:`Matrix.dense` will materialize.
DENSE_LIMIT = 50_000_000

#: Relative cut-off for singular values in a dense pseudo-inverse.
PINV_RCOND = 1e-10

#: Largest full domain on which a union's exact column norms are enumerated.
ENUMERATION_LIMIT = 20_000_000


def _as_2d(x: np.ndarray) -> tuple[np.ndarray, bool]:
    x = np.asarray(x, dtype=float)
    if x.ndim == 1:
        return x[:, None], True
    return x, False


def _restore(y: np.ndarray, was_vector: bool) -> np.ndarray:
    return y[:, 0] if was_vector else y


class Matrix:
    """An implicitly represented real matrix of shape ``(rows, cols)``.

    Subclasses implement ``_matmat``/``_rmatmat`` on 2-D arrays; everything
    else has a correct (if slower) default built on those or on ``dense()``.
    """

    shape: tuple[int, int]

    # -- products -----------------------------------------------------------
    def matvec(self, x: np.ndarray) -> np.ndarray:
        """``A @ x`` for a vector ``x`` of length ``cols`` or a ``(cols, k)`` array."""
        X, vec = _as_2d(x)
        if X.shape[0] != self.shape[1]:
            raise WorkloadError(f"matvec: expected {self.shape[1]} rows, got {X.shape[0]}")
        return _restore(self._matmat(X), vec)

    def rmatvec(self, y: np.ndarray) -> np.ndarray:
        """``A.T @ y`` for a vector of length ``rows`` or a ``(rows, k)`` array."""
        Y, vec = _as_2d(y)
        if Y.shape[0] != self.shape[0]:
            raise WorkloadError(f"rmatvec: expected {self.shape[0]} rows, got {Y.shape[0]}")
        return _restore(self._rmatmat(Y), vec)

    def __matmul__(self, x: np.ndarray) -> np.ndarray:
        return self.matvec(x)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self.dense() @ X

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return self.dense().T @ Y

    @property
    def T(self) -> "Matrix":
        """The transpose, implicitly."""
        return Transpose(self)

    # -- materialization ----------------------------------------------------
    def dense(self) -> np.ndarray:
        """The explicit array; refused when it would exceed :data:`DENSE_LIMIT` entries."""
        _check_dense(self.shape)
        return self._matmat(np.eye(self.shape[1]))

    # -- structure ----------------------------------------------------------
    def gram(self) -> "Matrix":
        """``AᵀA``. Structured subclasses return an implicit matrix; refused, as :meth:`dense` is,
        when its ``n × n`` entries would exceed :data:`DENSE_LIMIT` (one query on a column of
        500,000 values is a small matrix whose Gram is not)."""
        _check_dense((self.shape[1], self.shape[1]))
        D = self.dense()
        return Dense(D.T @ D)

    def column_norms(self, p: int) -> np.ndarray:
        """The L``p`` norm (p = 1 or 2) of every column."""
        D = np.abs(self.dense())
        return D.sum(axis=0) if p == 1 else np.sqrt((D**2).sum(axis=0))

    def sensitivity(self, p: int) -> float:
        """Largest L``p`` column norm: how much ``A x`` moves when one record is
        added to or removed from ``x`` (HDMM Definition 9)."""
        _check_norm(p)
        return float(np.max(self.column_norms(p)))

    def row_sums(self) -> np.ndarray:
        """``A @ 1``."""
        return self.matvec(np.ones(self.shape[1]))

    def row_norms_sq(self) -> np.ndarray:
        """Squared L2 norm of every row: ``diag(A Aᵀ)``."""
        return (self.dense() ** 2).sum(axis=1)

    def quadratic_diag(self, M: np.ndarray) -> np.ndarray:
        """``diag(A M Aᵀ)`` for a dense symmetric ``cols × cols`` matrix ``M``.

        With ``M = (BᵀB)⁺`` this is the per-query variance of answering ``A``
        from measurements of ``B``; it is computed without forming ``A M Aᵀ``.
        """
        D = self.dense()
        return np.einsum("ij,ij->i", D @ M, D)

    def trace(self) -> float:
        """Sum of the diagonal (square matrices only)."""
        _check_square(self)
        return float(np.trace(self.dense()))

    def pinv(self) -> "Matrix":
        """Moore–Penrose pseudo-inverse. Structured subclasses stay implicit.

        Singular values below ``PINV_RCOND`` times the largest count as zero,
        so rank-deficient matrices (a Gram of totals, say) are not inflated
        by rounding noise.
        """
        return Dense(np.linalg.pinv(self.dense(), rcond=PINV_RCOND))

    def __repr__(self) -> str:
        return f"{type(self).__name__}{self.shape}"


def _check_dense(shape: tuple[int, int]) -> None:
    if shape[0] * shape[1] > DENSE_LIMIT:
        raise WorkloadError(
            f"refusing to materialize a {shape[0]}x{shape[1]} matrix densely "
            f"(limit {DENSE_LIMIT} entries)"
        )


def _check_norm(p: int) -> None:
    if p not in (1, 2):
        raise WorkloadError(f"sensitivity norm must be 1 or 2, got {p!r}")


def _check_square(A: Matrix) -> None:
    if A.shape[0] != A.shape[1]:
        raise WorkloadError(f"trace of a non-square {A.shape[0]}x{A.shape[1]} matrix")


# ---------------------------------------------------------------------------
# Explicit matrices
# ---------------------------------------------------------------------------


class Dense(Matrix):
    """An explicit dense matrix, for small predicate sets and factor grams."""

    def __init__(self, array: np.ndarray) -> None:
        a = np.asarray(array, dtype=float)
        if a.ndim != 2:
            raise WorkloadError(f"Dense needs a 2-D array, got {a.ndim}-D")
        self.array = a
        self.shape = a.shape

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self.array @ X

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return self.array.T @ Y

    def dense(self) -> np.ndarray:
        return self.array

    def trace(self) -> float:
        _check_square(self)
        return float(np.trace(self.array))

    def row_norms_sq(self) -> np.ndarray:
        return (self.array**2).sum(axis=1)


class InvertibleGram(Dense):
    """A positive definite Gram matrix ``AᵀA`` whose inverse is known in closed form.

    Strategy optimizers produce the inverse as a by-product (Woodbury for
    p-Identity, an eigendecomposition for the Gaussian optimum); keeping it
    saves an ``O(n³)`` pseudo-inverse in every error evaluation.
    """

    def __init__(self, array: np.ndarray, inverse: np.ndarray) -> None:
        super().__init__(array)
        self._inverse = np.asarray(inverse, dtype=float)

    def inverse(self) -> np.ndarray:
        return self._inverse

    def pinv(self) -> Dense:
        return Dense(self._inverse)


class StructuredGram(Dense):
    """A Gram matrix kept dense for elementwise use, whose products exploit the
    structure of its query set: ``O(n)`` per vector instead of ``O(n²)``.

    Optimizers multiply Gram matrices by many vectors; for range and prefix
    workloads this is what makes a 4096-element domain cheap.
    """

    def __init__(self, array: np.ndarray, product: Callable[[np.ndarray], np.ndarray]) -> None:
        super().__init__(array)
        self._product = product

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self._product(X)

    _rmatmat = _matmat  # symmetric


class GramFactored(Dense):
    """An explicit strategy ``A`` stored with its Gram matrix's known inverse, ``gram_inverse``."""

    def __init__(self, array: np.ndarray, gram_inverse: np.ndarray) -> None:
        super().__init__(array)
        self.gram_inverse = gram_inverse

    def gram(self) -> InvertibleGram:
        return InvertibleGram(self.array.T @ self.array, self.gram_inverse)

    def pinv(self) -> Product:
        return Product(Dense(self.gram_inverse), Transpose(self))


class Sparse(Matrix):
    """An explicit sparse matrix (any ``scipy.sparse`` input, stored as CSR)."""

    def __init__(self, matrix: sp.spmatrix | sp.sparray) -> None:
        self.matrix = sp.csr_matrix(matrix, dtype=float)
        self.shape = self.matrix.shape

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return np.asarray(self.matrix @ X)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return np.asarray(self.matrix.T @ Y)

    def dense(self) -> np.ndarray:
        _check_dense(self.shape)
        return self.matrix.toarray()

    def gram(self) -> Sparse:
        """``AᵀA``, refused (WorkloadError) before it is formed when it could hold more than
        :data:`DENSE_LIMIT` entries: a row with ``k`` nonzeros adds up to ``k²`` (a bucketing of a
        column of 500,000 values into 101 groups has 2.5 billion)."""
        row_nonzeros = np.diff(self.matrix.indptr).astype(np.int64)
        bound = min(int(np.sum(row_nonzeros**2)), self.shape[1] ** 2)
        if bound > DENSE_LIMIT:
            raise WorkloadError(f"refusing to form the Gram matrix of a sparse {self.shape[0]}x{self.shape[1]} "
                                f"matrix: up to {bound:,} entries (limit {DENSE_LIMIT:,})")
        return Sparse((self.matrix.T @ self.matrix).tocsr())

    def column_norms(self, p: int) -> np.ndarray:
        A = abs(self.matrix)
        s = np.asarray(A.sum(axis=0)).ravel() if p == 1 else np.sqrt(np.asarray(A.multiply(A).sum(axis=0)).ravel())
        return s

    def row_norms_sq(self) -> np.ndarray:
        return np.asarray(self.matrix.multiply(self.matrix).sum(axis=1)).ravel()

    def trace(self) -> float:
        _check_square(self)
        return float(self.matrix.diagonal().sum())


class Identity(Matrix):
    """``I(n)``: one query per domain element (a GROUP BY on the attribute)."""

    def __init__(self, n: int) -> None:
        self.n = int(n)
        self.shape = (self.n, self.n)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return X.copy()

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return Y.copy()

    def dense(self) -> np.ndarray:
        _check_dense(self.shape)
        return np.eye(self.n)

    def gram(self) -> Identity:
        return self

    def column_norms(self, p: int) -> np.ndarray:
        return np.ones(self.n)

    def row_norms_sq(self) -> np.ndarray:
        return np.ones(self.n)

    def quadratic_diag(self, M: np.ndarray) -> np.ndarray:
        return np.diag(M).copy()

    def trace(self) -> float:
        return float(self.n)

    def pinv(self) -> Identity:
        return self


class Ones(Matrix):
    """An ``m × n`` matrix of ones. ``Ones(1, n)`` is HDMM's Total ``T(n)``:
    the attribute is not mentioned, so the query sums over it."""

    def __init__(self, m: int, n: int) -> None:
        self.shape = (int(m), int(n))

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return np.repeat(X.sum(axis=0, keepdims=True), self.shape[0], axis=0)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return np.repeat(Y.sum(axis=0, keepdims=True), self.shape[1], axis=0)

    def dense(self) -> np.ndarray:
        _check_dense(self.shape)
        return np.ones(self.shape)

    def gram(self) -> Weighted:
        return Weighted(Ones(self.shape[1], self.shape[1]), float(self.shape[0]))

    def column_norms(self, p: int) -> np.ndarray:
        m = self.shape[0]
        return np.full(self.shape[1], float(m) if p == 1 else math.sqrt(m))

    def row_norms_sq(self) -> np.ndarray:
        return np.full(self.shape[0], float(self.shape[1]))

    def quadratic_diag(self, M: np.ndarray) -> np.ndarray:
        return np.full(self.shape[0], float(M.sum()))

    def trace(self) -> float:
        _check_square(self)
        return float(self.shape[0])

    def pinv(self) -> Weighted:
        m, n = self.shape
        return Weighted(Ones(n, m), 1.0 / (m * n))


def Total(n: int) -> Ones:
    """HDMM's ``T(n)``: the single query that counts every element."""
    return Ones(1, n)


def is_total(M: Matrix) -> bool:
    """Whether ``M`` is a :func:`Total` row ``1ᵀ``: the factor of an attribute that is summed out."""
    return isinstance(M, Ones) and M.shape[0] == 1


def constant_row(f: Matrix) -> float | None:
    """``c`` when ``f`` is the single query ``c·1ᵀ`` (it sums its attribute out: a measurement or an
    answer over the other attributes' marginal), else None."""
    if f.shape[0] != 1:
        return None
    if isinstance(f, Ones):
        return 1.0
    row = f.dense().ravel()
    return float(row[0]) if np.all(row == row[0]) else None


def IdentityTotal(n: int) -> "VStack":
    """HDMM's ``IT(n) = [I(n); T(n)]``: the GROUP BY and the total."""
    return VStack([Identity(n), Total(n)])


class _Intervals(Matrix):
    """Interval (range) queries ``[lo, hi]`` answered from prefix sums."""

    lo: np.ndarray
    hi: np.ndarray
    n: int

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        c = np.vstack([np.zeros((1, X.shape[1])), np.cumsum(X, axis=0)])
        return c[self.hi + 1] - c[self.lo]

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        # Difference array: +y at lo, -y after hi, then a running sum.
        d = np.zeros((self.n + 1, Y.shape[1]))
        np.add.at(d, self.lo, Y)
        np.add.at(d, self.hi + 1, -Y)
        return np.cumsum(d[:-1], axis=0)

    def dense(self) -> np.ndarray:
        _check_dense(self.shape)
        j = np.arange(self.n)
        return ((j >= self.lo[:, None]) & (j <= self.hi[:, None])).astype(float)

    def _covers(self) -> np.ndarray:
        """How many intervals contain each element (the L1 and squared L2 column norm)."""
        return self._rmatmat(np.ones((len(self.lo), 1)))[:, 0]

    def column_norms(self, p: int) -> np.ndarray:
        c = self._covers()
        return c if p == 1 else np.sqrt(c)

    def row_norms_sq(self) -> np.ndarray:
        return (self.hi - self.lo + 1).astype(float)

    def quadratic_diag(self, M: np.ndarray) -> np.ndarray:
        # qᵀMq for q = 1[lo..hi] from the 2-D prefix sums of M.
        C = np.zeros((self.n + 1, self.n + 1))
        C[1:, 1:] = M.cumsum(axis=0).cumsum(axis=1)
        lo, hi = self.lo, self.hi + 1
        return C[hi, hi] - C[lo, hi] - C[hi, lo] + C[lo, lo]


class Prefix(_Intervals):
    """``P(n)``: the CDF queries ``[0, j]`` for every ``j`` (lower-triangular ones)."""

    def __init__(self, n: int) -> None:
        self.n = int(n)
        self.shape = (self.n, self.n)
        self.lo = np.zeros(self.n, dtype=int)
        self.hi = np.arange(self.n)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return np.cumsum(X, axis=0)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return np.cumsum(Y[::-1], axis=0)[::-1]

    def dense(self) -> np.ndarray:
        _check_dense(self.shape)
        return np.tril(np.ones((self.n, self.n)))

    def gram(self) -> StructuredGram:
        i = np.arange(self.n)
        return StructuredGram(self.n - np.maximum.outer(i, i), lambda X: self._rmatmat(self._matmat(X)))

    def trace(self) -> float:
        return float(self.n)


class AllRange(_Intervals):
    """``R(n)``: every interval ``[i, j]``, ``0 <= i <= j < n``, in row-major order."""

    def __init__(self, n: int) -> None:
        self.n = int(n)
        self.lo, self.hi = np.triu_indices(self.n)
        self.shape = (len(self.lo), self.n)

    def gram(self) -> StructuredGram:
        i = np.arange(self.n)
        return StructuredGram((np.minimum.outer(i, i) + 1.0) * (self.n - np.maximum.outer(i, i)), self._gram_product)

    def _gram_product(self, X: np.ndarray) -> np.ndarray:
        # G_ij = (min(i,j)+1)(n−max(i,j)), so (GX)_i = (n−i) Σ_{j≤i} (j+1) X_j + (i+1) Σ_{j>i} (n−j) X_j.
        j = np.arange(self.n, dtype=float)[:, None]
        below = np.cumsum((j + 1) * X, axis=0)
        tail = (self.n - j) * X
        above = tail.sum(axis=0, keepdims=True) - np.cumsum(tail, axis=0)
        return (self.n - j) * below + (j + 1) * above


class WidthRange(_Intervals):
    """Every interval of width ``k``: ``[i, i + k - 1]`` for ``0 <= i <= n - k``."""

    def __init__(self, n: int, k: int) -> None:
        if not 1 <= k <= n:
            raise WorkloadError(f"range width {k} outside [1, {n}]")
        self.n, self.k = int(n), int(k)
        self.lo = np.arange(self.n - self.k + 1)
        self.hi = self.lo + self.k - 1
        self.shape = (len(self.lo), self.n)

    def gram(self) -> StructuredGram:
        i = np.arange(self.n)
        first = np.maximum(0, np.maximum.outer(i, i) - self.k + 1)
        last = np.minimum(np.minimum.outer(i, i), self.n - self.k)
        return StructuredGram(np.maximum(0, last - first + 1).astype(float), lambda X: self._rmatmat(self._matmat(X)))


# ---------------------------------------------------------------------------
# Combinators
# ---------------------------------------------------------------------------


class Weighted(Matrix):
    """``w · A``: a query set whose answers count ``w`` times as much."""

    def __init__(self, base: Matrix, weight: float) -> None:
        self.base = base
        self.weight = float(weight)
        self.shape = base.shape

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self.weight * self.base._matmat(X)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return self.weight * self.base._rmatmat(Y)

    def dense(self) -> np.ndarray:
        return self.weight * self.base.dense()

    def gram(self) -> Weighted:
        return Weighted(self.base.gram(), self.weight**2)

    def column_norms(self, p: int) -> np.ndarray:
        return abs(self.weight) * self.base.column_norms(p)

    def sensitivity(self, p: int) -> float:
        return abs(self.weight) * self.base.sensitivity(p)

    def row_norms_sq(self) -> np.ndarray:
        return self.weight**2 * self.base.row_norms_sq()

    def quadratic_diag(self, M: np.ndarray) -> np.ndarray:
        return self.weight**2 * self.base.quadratic_diag(M)

    def trace(self) -> float:
        return self.weight * self.base.trace()

    def pinv(self) -> Weighted:
        if self.weight == 0:
            return Weighted(self.base.T, 0.0)
        return Weighted(self.base.pinv(), 1.0 / self.weight)


class Transpose(Matrix):
    """``Aᵀ`` without copying ``A``."""

    def __init__(self, base: Matrix) -> None:
        self.base = base
        self.shape = (base.shape[1], base.shape[0])

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self.base._rmatmat(X)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return self.base._matmat(Y)

    @property
    def T(self) -> Matrix:
        return self.base

    def dense(self) -> np.ndarray:
        return self.base.dense().T

    def trace(self) -> float:
        return self.base.trace()

    def pinv(self) -> Transpose:
        return Transpose(self.base.pinv())


class Product(Matrix):
    """``A @ B`` evaluated lazily, right to left."""

    def __init__(self, left: Matrix, right: Matrix) -> None:
        if left.shape[1] != right.shape[0]:
            raise WorkloadError(f"cannot multiply {left.shape} by {right.shape}")
        self.left, self.right = left, right
        self.shape = (left.shape[0], right.shape[1])

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self.left._matmat(self.right._matmat(X))

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return self.right._rmatmat(self.left._rmatmat(Y))


class ColumnPermuted(Matrix):
    """``A[:, perm]``: the same queries over a relabelled domain.

    Column ``j`` of the result is column ``perm[j]`` of ``A``.
    """

    def __init__(self, base: Matrix, perm: Sequence[int]) -> None:
        self.base = base
        self.perm = np.asarray(perm, dtype=int)
        if sorted(self.perm.tolist()) != list(range(base.shape[1])):
            raise WorkloadError("ColumnPermuted needs a permutation of the columns")
        self.shape = base.shape

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        Z = np.empty_like(X)
        Z[self.perm] = X
        return self.base._matmat(Z)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return self.base._rmatmat(Y)[self.perm]

    def dense(self) -> np.ndarray:
        return self.base.dense()[:, self.perm]

    def gram(self) -> Dense:
        base = self.base.gram()
        array = base.dense()[np.ix_(self.perm, self.perm)]
        if not isinstance(base, StructuredGram):
            return Dense(array)

        def product(X: np.ndarray) -> np.ndarray:
            Z = np.empty_like(X)
            Z[self.perm] = X
            return base._matmat(Z)[self.perm]

        return StructuredGram(array, product)

    def column_norms(self, p: int) -> np.ndarray:
        return self.base.column_norms(p)[self.perm]

    def row_sums(self) -> np.ndarray:
        return self.base.row_sums()

    def row_norms_sq(self) -> np.ndarray:
        return self.base.row_norms_sq()

    def quadratic_diag(self, M: np.ndarray) -> np.ndarray:
        inv = np.argsort(self.perm)
        return self.base.quadratic_diag(M[np.ix_(inv, inv)])


class Sum(Matrix):
    """``A₁ + A₂ + …`` of equally shaped matrices (the Gram matrix of a union)."""

    def __init__(self, terms: Sequence[Matrix]) -> None:
        terms = list(terms)
        if not terms or any(t.shape != terms[0].shape for t in terms):
            raise WorkloadError("Sum needs one or more matrices of equal shape")
        self.terms = terms
        self.shape = terms[0].shape

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return sum(t._matmat(X) for t in self.terms)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return sum(t._rmatmat(Y) for t in self.terms)

    def dense(self) -> np.ndarray:
        _check_dense(self.shape)
        return sum(t.dense() for t in self.terms)

    def trace(self) -> float:
        return float(sum(t.trace() for t in self.terms))


class Kronecker(Matrix):
    """``A₁ ⊗ A₂ ⊗ …``: a product of per-attribute query sets (HDMM Definition 16).

    Rows and columns follow C order: the first factor's index varies slowest.
    All operations work factor by factor (Proposition 6, Theorem 3).
    """

    def __init__(self, factors: Sequence[Matrix]) -> None:
        self.factors = tuple(factors)
        if not self.factors:
            raise WorkloadError("Kronecker needs at least one factor")
        self.shape = (
            math.prod(f.shape[0] for f in self.factors),
            math.prod(f.shape[1] for f in self.factors),
        )

    def _apply(self, X: np.ndarray, transpose: bool) -> np.ndarray:
        k = X.shape[1]
        sizes = [f.shape[0 if transpose else 1] for f in self.factors]
        T = X.reshape(*sizes, k)
        # Factors that shrink their axis go first and those that grow it last, so no
        # intermediate is larger than the input or the output (a marginal's expansion of
        # summed-out attributes would otherwise blow up before the other axes are summed).
        growth = [f.shape[1 if transpose else 0] / f.shape[0 if transpose else 1] for f in self.factors]
        for axis in sorted(range(len(self.factors)), key=growth.__getitem__):
            f = self.factors[axis]
            T = np.moveaxis(T, axis, 0)
            shape = T.shape
            M = T.reshape(shape[0], -1)
            M = f._rmatmat(M) if transpose else f._matmat(M)
            T = np.moveaxis(M.reshape(M.shape[0], *shape[1:]), 0, axis)
        return T.reshape(-1, k)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return self._apply(X, transpose=False)

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        return self._apply(Y, transpose=True)

    def dense(self) -> np.ndarray:
        _check_dense(self.shape)
        return reduce(np.kron, [f.dense() for f in self.factors])

    def gram(self) -> Kronecker:
        return Kronecker([f.gram() for f in self.factors])

    def column_norms(self, p: int) -> np.ndarray:
        _check_dense((1, self.shape[1]))
        return reduce(np.kron, [f.column_norms(p) for f in self.factors])

    def sensitivity(self, p: int) -> float:
        _check_norm(p)
        return math.prod(f.sensitivity(p) for f in self.factors)

    def row_sums(self) -> np.ndarray:
        return reduce(np.kron, [f.row_sums() for f in self.factors])

    def row_norms_sq(self) -> np.ndarray:
        return reduce(np.kron, [f.row_norms_sq() for f in self.factors])

    def trace(self) -> float:
        _check_square(self)
        if all(f.shape[0] == f.shape[1] for f in self.factors):
            return math.prod(f.trace() for f in self.factors)
        return super().trace()

    def pinv(self) -> Kronecker:
        return Kronecker([f.pinv() for f in self.factors])


def kron_terms(A: Matrix) -> list[tuple[float, tuple[Matrix, ...]]] | None:
    """``A`` as a list of ``(weight, factors)`` Kronecker terms, or ``None``.

    Recognizes ``Kronecker``, ``Weighted`` Kronecker products, unions
    (``VStack``) of those, and matrices that keep such a union as their
    ``stack`` (the marginal strategies): the "union of products" form of HDMM
    Equation 3. Terms come in row order, so a vector of answers to ``A``
    splits into consecutive per-term pieces.
    """
    if isinstance(getattr(A, "stack", None), VStack):
        return kron_terms(A.stack)
    if isinstance(A, Kronecker):
        return [(1.0, A.factors)]
    if isinstance(A, Weighted):
        inner = kron_terms(A.base)
        return None if inner is None else [(A.weight * w, f) for w, f in inner]
    if isinstance(A, VStack):
        out: list[tuple[float, tuple[Matrix, ...]]] = []
        for b in A.blocks:
            inner = kron_terms(b)
            if inner is None:
                return None
            out.extend(inner)
        return out
    return None


class VStack(Matrix):
    """``[A₁; A₂; …]``: the union of query sets over one domain."""

    def __init__(self, blocks: Sequence[Matrix]) -> None:
        self.blocks = list(blocks)
        if not self.blocks or any(b.shape[1] != self.blocks[0].shape[1] for b in self.blocks):
            raise WorkloadError("VStack needs one or more matrices with equal column counts")
        self.shape = (sum(b.shape[0] for b in self.blocks), self.blocks[0].shape[1])

    @cached_property
    def offsets(self) -> np.ndarray:
        """Row offset of every block; block ``i`` is rows ``offsets[i]:offsets[i+1]``."""
        return np.cumsum([0] + [b.shape[0] for b in self.blocks])

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        return np.vstack([b._matmat(X) for b in self.blocks])

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        o = self.offsets
        return sum(b._rmatmat(Y[o[i] : o[i + 1]]) for i, b in enumerate(self.blocks))

    def dense(self) -> np.ndarray:
        _check_dense(self.shape)
        return np.vstack([b.dense() for b in self.blocks])

    def gram(self) -> Sum:
        return Sum([b.gram() for b in self.blocks])

    def column_norms(self, p: int) -> np.ndarray:
        _check_norm(p)
        if p == 1:
            return sum(b.column_norms(1) for b in self.blocks)
        return np.sqrt(sum(b.column_norms(2) ** 2 for b in self.blocks))

    def sensitivity(self, p: int) -> float:
        """Exact largest column norm of the union.

        For a union of Kronecker products the full domain may be far too large
        to enumerate, but columns that look alike in every factor of every
        term have the same norm. The maximum is therefore taken over the
        product of *distinct* per-attribute column signatures, which is
        usually tiny. Only if even that is too large does it fall back to the
        sum of per-term sensitivities, an upper bound (never an
        underestimate, so noise calibrated to it stays private).
        """
        _check_norm(p)
        terms = kron_terms(self)
        if terms is None or len({len(f) for _, f in terms}) != 1:
            if self.shape[1] > ENUMERATION_LIMIT:
                return _union_bound(self.blocks, p)
            return float(np.max(self.column_norms(p)))
        return _union_kron_sensitivity(terms, p)

    def row_sums(self) -> np.ndarray:
        return np.concatenate([b.row_sums() for b in self.blocks])

    def row_norms_sq(self) -> np.ndarray:
        return np.concatenate([b.row_norms_sq() for b in self.blocks])

    def quadratic_diag(self, M: np.ndarray) -> np.ndarray:
        return np.concatenate([b.quadratic_diag(M) for b in self.blocks])


def _union_bound(blocks: Sequence[Matrix], p: int) -> float:
    s = [b.sensitivity(p) for b in blocks]
    return float(sum(s) if p == 1 else math.sqrt(sum(v * v for v in s)))


def _union_kron_sensitivity(terms: list[tuple[float, tuple[Matrix, ...]]], p: int) -> float:
    d = len(terms[0][1])
    # per attribute: (n_i, K) matrix of column norms (squared for L2), deduplicated rows
    signatures = []
    for i in range(d):
        cols = np.column_stack([f[i].column_norms(p) ** p for _, f in terms])
        signatures.append(np.unique(cols, axis=0))
    if math.prod(len(s) for s in signatures) * len(terms) > ENUMERATION_LIMIT:
        return _union_bound([Weighted(Kronecker(f), w) for w, f in terms], p)
    weights = np.array([abs(w) ** p for w, _ in terms])
    # value(column) = sum_k weight_k * prod_i sig_i[col_i, k]; build the product over attributes.
    acc = signatures[0] * weights  # (u_0, K)
    for s in signatures[1:]:
        acc = (acc[:, None, :] * s[None, :, :]).reshape(-1, len(terms))
    best = float(acc.sum(axis=1).max())
    return best if p == 1 else math.sqrt(best)
