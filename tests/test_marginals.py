"""The marginal algebra (dpsql.hdmm.marginals) against dense numpy on small domains."""

from __future__ import annotations

import math
from functools import reduce

import numpy as np
import pytest

from dpsql.errors import WorkloadError
from dpsql.hdmm.marginals import (
    MAX_ATTRIBUTES,
    Helmert,
    Marginals,
    MarginalsGram,
    ResidualMarginals,
    complement_sizes,
    multiplicities,
    subset_sum,
    superset_sum,
    workload_eigen_weights,
)
from dpsql.hdmm.matrix import AllRange, Dense, Identity, Prefix, Total, WidthRange
from dpsql.hdmm.workload import Workload

DOMAINS = [(2, 3), (3, 2, 4), (2, 2, 3, 2)]


def kron(mats):
    return reduce(np.kron, mats)


def C_dense(domain, a):
    """C_a = ⊗ (I if i ∈ a else J)."""
    return kron([np.eye(n) if a >> i & 1 else np.ones((n, n)) for i, n in enumerate(domain)])


def marginal_dense(domain, a):
    return kron([np.eye(n) if a >> i & 1 else np.ones((1, n)) for i, n in enumerate(domain)])


def projector_dense(domain, t):
    """Π_t = ⊗ (I − J/n if i ∈ t else J/n)."""
    return kron([np.eye(n) - np.ones((n, n)) / n if t >> i & 1 else np.ones((n, n)) / n
                 for i, n in enumerate(domain)])


def contrast_dense(n):
    """An orthonormal basis of 1⊥ built independently of helmert(): QR of centred columns."""
    M = np.eye(n) - np.ones((n, n)) / n
    U, s, _ = np.linalg.svd(M)
    return U[:, : n - 1].T


@pytest.mark.parametrize("domain", DOMAINS)
def test_complement_sizes_and_multiplicities(domain):
    d = len(domain)
    for a in range(2**d):
        assert complement_sizes(domain)[a] == math.prod(n for i, n in enumerate(domain) if not a >> i & 1)
        assert multiplicities(domain)[a] == math.prod(n - 1 for i, n in enumerate(domain) if a >> i & 1)


@pytest.mark.parametrize("d", [1, 2, 3, 4])
def test_subset_superset_transforms(d):
    f = np.random.default_rng(d).normal(size=2**d)
    sub = np.array([sum(f[t] for t in range(2**d) if t & a == t) for a in range(2**d)])
    sup = np.array([sum(f[a] for a in range(2**d) if t & a == t) for t in range(2**d)])
    np.testing.assert_allclose(subset_sum(f, d), sub, atol=1e-12)
    np.testing.assert_allclose(superset_sum(f, d), sup, atol=1e-12)
    # the input is left untouched
    g = f.copy()
    superset_sum(f, d)
    np.testing.assert_array_equal(f, g)


@pytest.mark.parametrize("domain", DOMAINS)
def test_marginals_gram_dense_matvec_trace(domain):
    d = len(domain)
    u = np.random.default_rng(len(domain)).normal(size=2**d)
    X = MarginalsGram(domain, u)
    E = sum(u[a] * C_dense(domain, a) for a in range(2**d))
    np.testing.assert_allclose(X.dense(), E, atol=1e-10)
    x = np.random.default_rng(9).normal(size=(E.shape[0], 3))
    np.testing.assert_allclose(X.matvec(x), E @ x, atol=1e-10)
    np.testing.assert_allclose(X.rmatvec(x), E.T @ x, atol=1e-10)
    assert X.trace() == pytest.approx(np.trace(E))
    np.testing.assert_allclose(X.gram().dense(), E @ E, atol=1e-8)


@pytest.mark.parametrize("domain", DOMAINS)
def test_marginals_gram_eigenvalues(domain):
    d = len(domain)
    u = np.random.default_rng(1).random(2**d)
    X = MarginalsGram(domain, u)
    E = X.dense()
    lam = X.eigenvalues()
    mult = multiplicities(domain)
    # the multiset of eigenvalues matches numpy's
    expected = np.sort(np.linalg.eigvalsh(E))
    ours = np.sort(np.repeat(lam, mult.astype(int)))
    np.testing.assert_allclose(ours, expected, atol=1e-9)
    # and each λ_t belongs to its eigenspace: X Π_t = λ_t Π_t
    for t in range(2**d):
        P = projector_dense(domain, t)
        np.testing.assert_allclose(E @ P, lam[t] * P, atol=1e-9)


@pytest.mark.parametrize("domain", DOMAINS)
def test_from_eigenvalues_roundtrip(domain):
    d = len(domain)
    lam = np.random.default_rng(2).random(2**d) + 0.1
    X = MarginalsGram.from_eigenvalues(domain, lam)
    np.testing.assert_allclose(X.eigenvalues(), lam, atol=1e-12)
    E = sum(lam[t] * projector_dense(domain, t) for t in range(2**d))
    np.testing.assert_allclose(X.dense(), E, atol=1e-10)


@pytest.mark.parametrize("domain", DOMAINS)
@pytest.mark.parametrize("singular", [False, True])
def test_marginals_gram_pinv(domain, singular):
    d = len(domain)
    u = np.random.default_rng(3).random(2**d)
    if singular:
        u[-1] = 0.0  # no full-domain identity: some eigenspaces vanish
        u[1] = 0.0
    X = MarginalsGram(domain, u)
    P = X.pinv()
    assert isinstance(P, MarginalsGram)
    np.testing.assert_allclose(P.dense(), np.linalg.pinv(X.dense(), rcond=1e-10, hermitian=True), atol=1e-8)


@pytest.mark.parametrize("domain", DOMAINS)
def test_marginals_strategy(domain):
    d = len(domain)
    theta = np.random.default_rng(4).random(2**d)
    theta[0] = 0.0
    theta[2] = -0.5  # negative weights are allowed in the matrix itself
    A = Marginals(domain, theta)
    E = np.vstack([theta[a] * marginal_dense(domain, a) for a in range(2**d) if theta[a] != 0])
    np.testing.assert_allclose(A.dense(), E, atol=1e-12)
    np.testing.assert_allclose(A.gram().dense(), E.T @ E, atol=1e-10)
    x = np.random.default_rng(5).normal(size=E.shape[1])
    np.testing.assert_allclose(A.matvec(x), E @ x, atol=1e-10)
    y = np.random.default_rng(6).normal(size=E.shape[0])
    np.testing.assert_allclose(A.rmatvec(y), E.T @ y, atol=1e-10)
    for p, norms in [(1, np.abs(E).sum(axis=0)), (2, np.sqrt((E**2).sum(axis=0)))]:
        np.testing.assert_allclose(A.column_norms(p), norms, atol=1e-12)
        assert A.sensitivity(p) == pytest.approx(norms.max())
    np.testing.assert_allclose(A.row_sums(), E.sum(axis=1), atol=1e-10)
    np.testing.assert_allclose(A.row_norms_sq(), (E**2).sum(axis=1), atol=1e-10)
    np.testing.assert_allclose(A.pinv().dense(), np.linalg.pinv(E, rcond=1e-10), atol=1e-8)


def test_helmert():
    """The implicit contrast basis equals its defining formula, products and norms included,
    and stays implicit at 100,000 values, where ``HᵀH = I − J/n`` is checked on a vector."""
    rng = np.random.default_rng(0)
    for n in [2, 3, 5, 8]:
        explicit = np.zeros((n - 1, n))
        for k in range(1, n):
            explicit[k - 1, :k], explicit[k - 1, k] = 1.0, -k
            explicit[k - 1] /= math.sqrt(k * (k + 1))
        H = Helmert(n)
        np.testing.assert_allclose(H.dense(), explicit, atol=1e-12)
        np.testing.assert_allclose(H.dense() @ H.dense().T, np.eye(n - 1), atol=1e-12)
        X, Y = rng.normal(size=(n, 3)), rng.normal(size=(n - 1, 3))
        np.testing.assert_allclose(H._matmat(X), explicit @ X, atol=1e-12)
        np.testing.assert_allclose(H._rmatmat(Y), explicit.T @ Y, atol=1e-12)
        for p in (1, 2):
            np.testing.assert_allclose(H.column_norms(p), np.linalg.norm(explicit, ord=p, axis=0), atol=1e-12)
        np.testing.assert_allclose(H.row_sums(), 0.0, atol=1e-12)
        np.testing.assert_allclose(H.row_norms_sq(), 1.0, atol=1e-12)
    x = rng.normal(size=100_000)
    big = Helmert(100_000)
    assert np.sum(big.matvec(x) ** 2) == pytest.approx(x @ x - x.sum() ** 2 / x.size, rel=1e-9)
    np.testing.assert_allclose(big._rmatmat(big.matvec(x)[:, None])[:, 0], x - x.mean(), atol=1e-9)


@pytest.mark.parametrize("domain", DOMAINS)
def test_residual_marginals(domain):
    d = len(domain)
    c = np.random.default_rng(7).random(2**d)
    c[1] = 0.0
    R = ResidualMarginals(domain, c)
    # independent construction with a different contrast basis: the Gram and
    # column norms do not depend on which orthonormal basis of 1⊥ is used
    blocks = [c[t] * kron([contrast_dense(n) if t >> i & 1 else np.ones((1, n)) for i, n in enumerate(domain)])
              for t in range(2**d) if c[t] != 0]
    E_any = np.vstack(blocks)
    E = R.dense()
    assert E.shape == E_any.shape
    np.testing.assert_allclose(R.gram().dense(), E_any.T @ E_any, atol=1e-10)
    np.testing.assert_allclose(E.T @ E, E_any.T @ E_any, atol=1e-10)
    np.testing.assert_allclose(R.column_norms(2), np.sqrt((E_any**2).sum(axis=0)), atol=1e-10)
    assert R.sensitivity(2) == pytest.approx(np.sqrt((E_any**2).sum(axis=0)).max())
    assert R.sensitivity(1) == pytest.approx(np.abs(E).sum(axis=0).max())
    np.testing.assert_allclose(R.column_norms(1), np.abs(E).sum(axis=0), atol=1e-10)
    x = np.random.default_rng(8).normal(size=E.shape[1])
    np.testing.assert_allclose(R.matvec(x), E @ x, atol=1e-10)
    np.testing.assert_allclose(R.row_sums(), E.sum(axis=1), atol=1e-10)
    np.testing.assert_allclose(R.row_norms_sq(), (E**2).sum(axis=1), atol=1e-10)
    np.testing.assert_allclose(R.pinv().dense(), np.linalg.pinv(E, rcond=1e-10), atol=1e-8)
    # the eigenvalues: block t lives in eigenspace t only, with c_t² m(t)
    np.testing.assert_allclose(R.gram().eigenvalues(), c**2 * complement_sizes(domain), atol=1e-10)


def test_residual_from_eigenvalues_with_negative_marginal_weights():
    """A Gram in the algebra whose marginal weights are negative is still realized."""
    domain = (3, 4)
    lam = np.array([5.0, 0.1, 0.1, 3.0])
    u = MarginalsGram.from_eigenvalues(domain, lam).weights
    assert np.any(u < 0)
    R = ResidualMarginals.from_eigenvalues(domain, lam)
    E = R.dense()
    target = sum(lam[t] * projector_dense(domain, t) for t in range(4))
    np.testing.assert_allclose(E.T @ E, target, atol=1e-10)
    with pytest.raises(WorkloadError):
        ResidualMarginals.from_eigenvalues(domain, np.array([1.0, -1.0, 1.0, 1.0]))


def _random_workload(domain, seed):
    rng = np.random.default_rng(seed)
    makers = [lambda n: Identity(n), lambda n: Total(n), lambda n: AllRange(n), lambda n: Prefix(n),
              lambda n: Dense(rng.normal(size=(2, n))), lambda n: WidthRange(n, min(2, n))]
    terms = []
    for k in range(3):
        fs = tuple(makers[rng.integers(len(makers))](n) for n in domain)
        terms.append((float(rng.uniform(0.5, 2.0)) * (-1) ** k, fs))
    return Workload(domain, terms)


@pytest.mark.parametrize("domain", DOMAINS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_workload_eigen_weights(domain, seed):
    """γ_t = tr(WᵀW Π_t), and tr(WᵀW X⁺) = Σ γ_t/λ_t for X in the algebra (any workload)."""
    d = len(domain)
    W = _random_workload(domain, seed)
    WD = W.dense()
    WtW = WD.T @ WD
    gamma = workload_eigen_weights(domain, W.terms)
    for t in range(2**d):
        assert gamma[t] == pytest.approx(np.trace(WtW @ projector_dense(domain, t)), rel=1e-9, abs=1e-9)
    lam = np.random.default_rng(seed + 10).random(2**d) + 0.05
    X = MarginalsGram.from_eigenvalues(domain, lam)
    expected = np.trace(WtW @ np.linalg.pinv(X.dense(), hermitian=True))
    assert np.sum(gamma / lam) == pytest.approx(expected, rel=1e-8)


def test_size_checks():
    with pytest.raises(WorkloadError):
        MarginalsGram((2, 3), np.ones(3))
    with pytest.raises(WorkloadError):
        Marginals((2, 3), np.ones(5))
    with pytest.raises(WorkloadError):
        ResidualMarginals((2, 3), np.ones(2))
    with pytest.raises(WorkloadError):
        MarginalsGram.from_eigenvalues((2,) * (MAX_ATTRIBUTES + 1), np.ones(2))


def test_large_domain_stays_implicit():
    """10 attributes of size 10 (10^10 cells): eigenvalues, pinv and sensitivity work."""
    domain = (10,) * 10
    theta = np.zeros(2**10)
    for a in range(2**10):
        if bin(a).count("1") == 2:
            theta[a] = 1.0
    A = Marginals(domain, theta)
    assert A.sensitivity(1) == pytest.approx(45.0)
    assert A.sensitivity(2) == pytest.approx(math.sqrt(45.0))
    X = A.gram()
    lam = X.eigenvalues()
    # λ_t = Σ_{a ⊇ t, |a|=2} m(a): for |t| = 0: 45·10^8, |t| = 1: 9·10^8, |t| = 2: 10^8
    assert lam[0] == pytest.approx(45e8)
    assert lam[1] == pytest.approx(9e8)
    assert lam[3] == pytest.approx(1e8)
    assert lam[7] == 0.0
    P = X.pinv()
    np.testing.assert_allclose(P.eigenvalues()[[0, 1, 3, 7]], [1 / 45e8, 1 / 9e8, 1e-8, 0.0], rtol=1e-9, atol=1e-20)
    with pytest.raises(WorkloadError):
        X.dense()
