"""p-Identity strategies (dpsql.hdmm.pidentity) against dense numpy."""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.errors import WorkloadError
from dpsql.hdmm.matrix import AllRange, InvertibleGram
from dpsql.hdmm.pidentity import PIdentity, PIdentityGram, pidentity_objective


def dense_pidentity(theta, norm):
    B = np.vstack([np.eye(theta.shape[1]), theta])
    scale = np.abs(B).sum(axis=0) if norm == 1 else np.sqrt((B**2).sum(axis=0))
    return B / scale


def _theta(p, n, seed, sparse=False):
    rng = np.random.default_rng(seed)
    T = rng.random((p, n)) * 2
    if sparse:
        T[rng.random((p, n)) < 0.4] = 0.0
    return T


@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize("p,n,sparse", [(1, 5, False), (3, 7, True), (2, 1, False), (4, 6, False)])
def test_pidentity_against_dense(norm, p, n, sparse):
    theta = _theta(p, n, 10 * p + n, sparse)
    A = PIdentity(theta, norm)
    E = dense_pidentity(theta, norm)
    assert A.shape == E.shape == (n + p, n)
    np.testing.assert_allclose(A.dense(), E, atol=1e-12)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 3))
    Y = rng.normal(size=(n + p, 2))
    np.testing.assert_allclose(A.matvec(X), E @ X, atol=1e-12)
    np.testing.assert_allclose(A.matvec(X[:, 0]), E @ X[:, 0], atol=1e-12)
    np.testing.assert_allclose(A.rmatvec(Y), E.T @ Y, atol=1e-12)
    # unit sensitivity in its own norm, the right value in the other one
    for q in (1, 2):
        norms = np.abs(E).sum(axis=0) if q == 1 else np.sqrt((E**2).sum(axis=0))
        np.testing.assert_allclose(A.column_norms(q), norms, atol=1e-12)
        assert A.sensitivity(q) == pytest.approx(norms.max())
    np.testing.assert_allclose(A.column_norms(norm), 1.0, atol=1e-12)
    np.testing.assert_allclose(A.row_norms_sq(), (E**2).sum(axis=1), atol=1e-12)
    np.testing.assert_allclose(A.row_sums(), E.sum(axis=1), atol=1e-12)
    G = A.gram()
    assert isinstance(G, PIdentityGram) and isinstance(G, InvertibleGram)
    np.testing.assert_allclose(G.dense(), E.T @ E, atol=1e-12)
    np.testing.assert_allclose(G.inverse(), np.linalg.inv(E.T @ E), rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(G.pinv().dense(), np.linalg.inv(E.T @ E), rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(A.pinv().dense(), np.linalg.pinv(E), atol=1e-9)
    M = rng.normal(size=(n, n))
    M = M + M.T
    np.testing.assert_allclose(A.quadratic_diag(M), np.diag(E @ M @ E.T), atol=1e-10)


def test_pidentity_zero_theta_is_identity():
    A = PIdentity(np.zeros((2, 4)), 1)
    np.testing.assert_allclose(A.dense(), np.vstack([np.eye(4), np.zeros((2, 4))]))
    np.testing.assert_allclose(A.gram().inverse(), np.eye(4))


def test_pidentity_invalid():
    with pytest.raises(WorkloadError):
        PIdentity(-np.ones((1, 3)), 1)
    with pytest.raises(WorkloadError):
        PIdentity(np.ones(3), 1)
    with pytest.raises(WorkloadError):
        PIdentity(np.ones((1, 3)), 3)


def _objective_dense(theta, G, norm):
    E = dense_pidentity(theta, norm)
    return float(np.trace(G @ np.linalg.inv(E.T @ E)))


@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize("p,n", [(1, 4), (3, 6), (2, 9)])
def test_objective_value(norm, p, n):
    theta = _theta(p, n, p * n)
    W = AllRange(n).dense()
    G = W.T @ W
    loss, grad = pidentity_objective(theta, G, norm)
    assert grad.shape == theta.shape
    assert loss == pytest.approx(_objective_dense(theta, G, norm), rel=1e-10)


@pytest.mark.parametrize("norm", [1, 2])
@pytest.mark.parametrize("p,n,general", [(1, 4, False), (3, 6, False), (2, 5, True)])
def test_objective_gradient_finite_differences(norm, p, n, general):
    theta = _theta(p, n, 7 * p + n) + 0.05  # interior point
    if general:  # an arbitrary symmetric positive semidefinite G
        B = np.random.default_rng(n).normal(size=(n + 2, n))
        G = B.T @ B
    else:
        W = AllRange(n).dense()
        G = W.T @ W
    _, grad = pidentity_objective(theta, G, norm)
    h = 1e-6
    fd = np.zeros_like(theta)
    for idx in np.ndindex(*theta.shape):
        tp, tm = theta.copy(), theta.copy()
        tp[idx] += h
        tm[idx] -= h
        fd[idx] = (_objective_dense(tp, G, norm) - _objective_dense(tm, G, norm)) / (2 * h)
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-6 * np.abs(fd).max())


@pytest.mark.parametrize("norm", [1, 2])
def test_objective_with_structured_product_equals_dense(norm):
    from dpsql.hdmm.matrix import AllRange
    G = AllRange(20).gram()
    theta = np.random.default_rng(5).random((3, 20))
    dense = pidentity_objective(theta, G.dense(), norm)
    fast = pidentity_objective(theta, G.dense(), norm, lambda Z: G.matvec(Z.T).T)
    assert dense[0] == pytest.approx(fast[0], rel=1e-12)
    np.testing.assert_allclose(dense[1], fast[1], rtol=1e-9, atol=1e-12)
