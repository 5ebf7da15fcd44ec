"""p-Identity strategies (HDMM Definition 13).

``A(Θ) = [I; Θ] D``: the ``n`` identity queries plus ``p`` nonnegative
queries ``Θ``, with the diagonal ``D`` rescaling every column to norm 1. For
Laplace noise the columns are normalized in L1 (``D_jj = 1/(1 + Σ_i Θ_ij)``),
for Gaussian noise in L2 (``D_jj = 1/√(1 + Σ_i Θ_ij²)``). So the sensitivity
is exactly 1 in the norm that calibrates the noise, and the strategy is
always full rank: it can answer any workload.

Its Gram matrix ``D (I + ΘᵀΘ) D`` is inverted with the Woodbury identity in
``O(n²p)`` rather than ``O(n³)``.

>>> import numpy as np
>>> A = PIdentity(np.array([[1.0, 1.0, 0.0]]), norm=1)
>>> A.shape
(4, 3)
>>> bool(np.allclose(A.column_norms(1), 1.0))
True
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from dpsql.errors import WorkloadError
from dpsql.hdmm.matrix import Dense, InvertibleGram, Matrix, Product, Transpose


def column_scale(theta: np.ndarray, norm: int) -> np.ndarray:
    """``s_j = 1/D_jj``: the L1 or L2 norm of column ``j`` of ``[I; Θ]``."""
    if norm == 1:
        return 1.0 + theta.sum(axis=0)
    return np.sqrt(1.0 + (theta**2).sum(axis=0))


class PIdentity(Matrix):
    """The p-Identity strategy ``[I; Θ] D`` with unit column norms in ``norm``."""

    def __init__(self, theta: np.ndarray, norm: int) -> None:
        theta = np.asarray(theta, dtype=float)
        if theta.ndim != 2 or np.any(theta < 0):
            raise WorkloadError("p-Identity parameters must be a nonnegative p×n matrix")
        if norm not in (1, 2):
            raise WorkloadError(f"norm must be 1 or 2, got {norm!r}")
        self.theta, self.norm = theta, norm
        p, n = theta.shape
        self.n = n
        self.scale = column_scale(theta, norm)
        self.shape = (n + p, n)

    def _matmat(self, X: np.ndarray) -> np.ndarray:
        Z = X / self.scale[:, None]
        return np.vstack([Z, self.theta @ Z])

    def _rmatmat(self, Y: np.ndarray) -> np.ndarray:
        n = self.n
        return (Y[:n] + self.theta.T @ Y[n:]) / self.scale[:, None]

    def dense(self) -> np.ndarray:
        return np.vstack([np.eye(self.n), self.theta]) / self.scale

    def gram(self) -> "PIdentityGram":
        return PIdentityGram(self)

    def column_norms(self, p: int) -> np.ndarray:
        return column_scale(np.abs(self.theta), p) / self.scale

    def row_norms_sq(self) -> np.ndarray:
        return np.concatenate([1.0 / self.scale**2, ((self.theta / self.scale) ** 2).sum(axis=1)])

    def pinv(self) -> Product:
        return Product(Dense(self.gram().inverse()), Transpose(self))


class PIdentityGram(InvertibleGram):
    """``AᵀA`` of a p-Identity strategy, inverted with the Woodbury identity:
    ``(AᵀA)⁻¹ = S (I − Θᵀ (I + ΘΘᵀ)⁻¹ Θ) S`` with ``S = D⁻¹``."""

    def __init__(self, A: PIdentity) -> None:
        B = A.theta / A.scale
        T = A.theta
        R = np.eye(T.shape[0]) + T @ T.T
        Minv = np.eye(A.n) - T.T @ np.linalg.solve(R, T)
        super().__init__(np.diag(1.0 / A.scale**2) + B.T @ B, A.scale[:, None] * Minv * A.scale[None, :])


def pidentity_objective(
    theta: np.ndarray, G: np.ndarray, norm: int, product: Callable[[np.ndarray], np.ndarray] | None = None
) -> tuple[float, np.ndarray]:
    """``tr(G (AᵀA)⁻¹)`` for ``A = PIdentity(Θ)`` and its gradient in ``Θ``.

    With ``S = diag(s)``, ``M = I + ΘᵀΘ`` and ``R = I + ΘΘᵀ``, the objective is
    ``tr(S G S M⁻¹) = Σ_j G_jj s_j² − tr(R⁻¹ Y Zᵀ)`` where ``Z = Θ S`` and
    ``Y = Z G``. Because ``A`` has unit sensitivity, this is the expected
    total squared error per unit of noise variance. ``product(Z)`` may supply
    ``Z @ G`` faster than the dense ``p × n × n`` product (see
    :class:`~dpsql.hdmm.matrix.StructuredGram`); the rest costs four
    ``p × p × n`` products (``ΘΘᵀ``, ``Y Zᵀ``, ``R⁻¹Y``, ``(R⁻¹ Y Zᵀ R⁻¹) Θ``),
    the symmetry of ``R⁻¹`` and ``Y Zᵀ = Z G Zᵀ`` saving the fifth, ``R⁻¹Θ``.
    """
    s = column_scale(theta, norm)
    Z = theta * s
    Y = Z @ G if product is None else product(Z)
    R = theta @ theta.T
    R[np.diag_indices_from(R)] += 1.0
    K = np.linalg.inv(R)
    YZ = theta @ (Y * s).T
    diagG = np.diag(G)
    loss = float(diagG @ s**2 - np.sum(K * YZ))
    KY = K @ Y
    # dL/dΘ holding s fixed: −2 R⁻¹ (Θ C − Θ C Θᵀ R⁻¹ Θ), with Θ C = Y S and Θ C Θᵀ = Y Zᵀ.
    grad = -2.0 * (KY * s - (K @ YZ @ K) @ theta)
    # dL/ds_j = 2 (G_jj s_j − Σ_i Y_ij (R⁻¹Θ)_ij), and Σ_i Y_ij (R⁻¹Θ)_ij = Σ_i (R⁻¹Y)_ij Θ_ij; then the
    # chain rule through s(Θ).
    gs = 2.0 * (diagG * s - np.sum(KY * theta, axis=0))
    grad += gs if norm == 1 else gs * theta / s
    return loss, grad
