"""Implicit matrices (dpsql.hdmm.matrix) against dense numpy on small domains.

Every expected array is built here independently (loops, ``np.kron``,
``np.vstack``), never through the class under test, and each implicit
operation is compared with the same operation on that array.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

import dpsql.hdmm.matrix as mx
from dpsql.errors import WorkloadError
from dpsql.hdmm.matrix import (
    AllRange,
    ColumnPermuted,
    Dense,
    GramFactored,
    Identity,
    IdentityTotal,
    InvertibleGram,
    Kronecker,
    Ones,
    Prefix,
    Product,
    Sparse,
    Sum,
    Total,
    Transpose,
    VStack,
    Weighted,
    WidthRange,
    kron_terms,
)

RCOND = 1e-10


# ---------------------------------------------------------------------------
# Independent dense references
# ---------------------------------------------------------------------------


def prefix_dense(n):
    E = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1):
            E[i, j] = 1
    return E


def allrange_dense(n):
    rows = []
    for i in range(n):
        for j in range(i, n):
            r = np.zeros(n)
            r[i : j + 1] = 1
            rows.append(r)
    return np.array(rows)


def width_dense(n, k):
    rows = []
    for s in range(n - k + 1):
        r = np.zeros(n)
        r[s : s + k] = 1
        rows.append(r)
    return np.array(rows)


def _rand(shape, seed):
    return np.random.default_rng(seed).normal(size=shape)


def _cases():
    """(name, implicit matrix, independently built dense array)."""
    rng = np.random.default_rng(1234)
    cases = []
    D = rng.normal(size=(4, 3))
    cases.append(("dense", Dense(D), D.copy()))
    # InvertibleGram: positive definite with its inverse
    B = rng.normal(size=(6, 4))
    G = B.T @ B + 0.5 * np.eye(4)
    cases.append(("invertible_gram", InvertibleGram(G, np.linalg.inv(G)), G.copy()))
    # GramFactored: full-column-rank A with (AᵀA)⁻¹
    A = rng.normal(size=(6, 4))
    cases.append(("gram_factored", GramFactored(A, np.linalg.inv(A.T @ A)), A.copy()))
    S = sp.random(5, 6, density=0.4, random_state=7, format="coo") * 3.0 - sp.eye(5, 6)
    cases.append(("sparse", Sparse(S), S.toarray()))
    cases.append(("identity", Identity(5), np.eye(5)))
    cases.append(("ones", Ones(3, 5), np.ones((3, 5))))
    cases.append(("ones_square", Ones(4, 4), np.ones((4, 4))))
    cases.append(("total", Total(5), np.ones((1, 5))))
    cases.append(("identity_total", IdentityTotal(4), np.vstack([np.eye(4), np.ones((1, 4))])))
    cases.append(("prefix", Prefix(6), prefix_dense(6)))
    cases.append(("allrange", AllRange(5), allrange_dense(5)))
    cases.append(("allrange1", AllRange(1), np.ones((1, 1))))
    cases.append(("width", WidthRange(7, 3), width_dense(7, 3)))
    cases.append(("width_full", WidthRange(4, 4), np.ones((1, 4))))
    cases.append(("weighted", Weighted(AllRange(4), -2.5), -2.5 * allrange_dense(4)))
    cases.append(("weighted_zero", Weighted(Prefix(3), 0.0), np.zeros((3, 3))))
    cases.append(("transpose", Transpose(AllRange(4)), allrange_dense(4).T))
    cases.append(("dot_T", Prefix(4).T, prefix_dense(4).T))
    L = rng.normal(size=(3, 5))
    cases.append(("product", Product(Dense(L), Prefix(5)), L @ prefix_dense(5)))
    perm = [3, 0, 4, 1, 2]
    cases.append(("permuted", ColumnPermuted(AllRange(5), perm), allrange_dense(5)[:, perm]))
    cases.append(
        (
            "sum",
            Sum([Prefix(5), Identity(5), Weighted(Ones(5, 5), 0.5)]),
            prefix_dense(5) + np.eye(5) + 0.5 * np.ones((5, 5)),
        )
    )
    cases.append(
        (
            "kron3",
            Kronecker([Prefix(3), AllRange(3), Total(2)]),
            np.kron(np.kron(prefix_dense(3), allrange_dense(3)), np.ones((1, 2))),
        )
    )
    K = rng.normal(size=(3, 2))
    cases.append(
        ("kron_weighted", Kronecker([Weighted(Identity(2), 2.0), Dense(K)]), np.kron(2.0 * np.eye(2), K))
    )
    cases.append(("kron1", Kronecker([WidthRange(5, 2)]), width_dense(5, 2)))
    # Union of Kronecker products with mixed weights (signature sensitivity path)
    cases.append(
        (
            "vstack_kron",
            VStack(
                [
                    Kronecker([AllRange(3), Total(4)]),
                    Weighted(Kronecker([Identity(3), Prefix(4)]), -0.7),
                    Weighted(Kronecker([Total(3), WidthRange(4, 2)]), 1.9),
                ]
            ),
            np.vstack(
                [
                    np.kron(allrange_dense(3), np.ones((1, 4))),
                    -0.7 * np.kron(np.eye(3), prefix_dense(4)),
                    1.9 * np.kron(np.ones((1, 3)), width_dense(4, 2)),
                ]
            ),
        )
    )
    R = rng.normal(size=(2, 4))
    cases.append(
        ("vstack_mixed", VStack([Dense(R), Prefix(4), Weighted(Ones(2, 4), 3.0)]),
         np.vstack([R, prefix_dense(4), 3.0 * np.ones((2, 4))]))
    )
    # a nested union: VStack of VStacks of Kronecker products
    cases.append(
        (
            "vstack_nested",
            VStack([Weighted(VStack([Kronecker([Identity(2), Total(3)]), Kronecker([Total(2), Prefix(3)])]), 2.0),
                    Kronecker([Prefix(2), Identity(3)])]),
            np.vstack([2 * np.kron(np.eye(2), np.ones((1, 3))), 2 * np.kron(np.ones((1, 2)), prefix_dense(3)),
                       np.kron(prefix_dense(2), np.eye(3))]),
        )
    )
    return cases


CASES = _cases()
IDS = [c[0] for c in CASES]


def _sym(n, seed):
    M = _rand((n, n), seed)
    return M + M.T


@pytest.mark.parametrize("name,A,E", CASES, ids=IDS)
def test_shape_and_dense(name, A, E):
    assert A.shape == E.shape
    np.testing.assert_allclose(A.dense(), E, atol=1e-12)


@pytest.mark.parametrize("name,A,E", CASES, ids=IDS)
def test_products(name, A, E):
    m, n = E.shape
    x = _rand(n, 1)
    X = _rand((n, 3), 2)
    y = _rand(m, 3)
    Y = _rand((m, 4), 4)
    np.testing.assert_allclose(A.matvec(x), E @ x, atol=1e-10)
    assert A.matvec(x).shape == (m,)
    np.testing.assert_allclose(A.matvec(X), E @ X, atol=1e-10)
    np.testing.assert_allclose(A @ X, E @ X, atol=1e-10)
    np.testing.assert_allclose(A.rmatvec(y), E.T @ y, atol=1e-10)
    assert A.rmatvec(y).shape == (n,)
    np.testing.assert_allclose(A.rmatvec(Y), E.T @ Y, atol=1e-10)
    # the inputs are not modified in place
    x0 = x.copy()
    A.matvec(x)
    np.testing.assert_array_equal(x, x0)


@pytest.mark.parametrize("name,A,E", CASES, ids=IDS)
def test_transpose(name, A, E):
    At = A.T
    assert At.shape == E.T.shape
    np.testing.assert_allclose(At.dense(), E.T, atol=1e-12)
    y = _rand(E.shape[0], 5)
    np.testing.assert_allclose(At.matvec(y), E.T @ y, atol=1e-10)
    np.testing.assert_allclose(At.column_norms(1), np.abs(E).sum(axis=1), atol=1e-10)
    np.testing.assert_allclose(At.T.dense(), E, atol=1e-12)


@pytest.mark.parametrize("name,A,E", CASES, ids=IDS)
def test_gram(name, A, E):
    G = A.gram()
    EG = E.T @ E
    assert G.shape == EG.shape
    np.testing.assert_allclose(G.dense(), EG, atol=1e-9)
    x = _rand(E.shape[1], 6)
    np.testing.assert_allclose(G.matvec(x), EG @ x, atol=1e-9)
    assert G.trace() == pytest.approx(np.trace(EG), rel=1e-10, abs=1e-12)


@pytest.mark.parametrize("name,A,E", CASES, ids=IDS)
def test_norms_and_sensitivity(name, A, E):
    l1 = np.abs(E).sum(axis=0)
    l2 = np.sqrt((E**2).sum(axis=0))
    np.testing.assert_allclose(A.column_norms(1), l1, atol=1e-10)
    np.testing.assert_allclose(A.column_norms(2), l2, atol=1e-10)
    assert A.sensitivity(1) == pytest.approx(l1.max(), rel=1e-10, abs=1e-12)
    assert A.sensitivity(2) == pytest.approx(l2.max(), rel=1e-10, abs=1e-12)
    with pytest.raises(WorkloadError):
        A.sensitivity(3)


@pytest.mark.parametrize("name,A,E", CASES, ids=IDS)
def test_row_quantities(name, A, E):
    np.testing.assert_allclose(A.row_sums(), E.sum(axis=1), atol=1e-10)
    np.testing.assert_allclose(A.row_norms_sq(), (E**2).sum(axis=1), atol=1e-10)
    M = _sym(E.shape[1], 8)
    np.testing.assert_allclose(A.quadratic_diag(M), np.diag(E @ M @ E.T), atol=1e-9)


@pytest.mark.parametrize("name,A,E", [c for c in CASES if c[0] != "kron3"], ids=[i for i in IDS if i != "kron3"])
def test_trace(name, A, E):
    if E.shape[0] != E.shape[1]:
        with pytest.raises(WorkloadError):
            A.trace()
    else:
        assert A.trace() == pytest.approx(np.trace(E), abs=1e-10)


@pytest.mark.parametrize("name,A,E", CASES, ids=IDS)
def test_pinv(name, A, E):
    P = A.pinv()
    np.testing.assert_allclose(P.dense(), np.linalg.pinv(E, rcond=RCOND), atol=1e-8)


@pytest.mark.parametrize("name,A,E", CASES, ids=IDS)
def test_gram_pinv(name, A, E):
    """(AᵀA)⁺: the quantity every error computation needs."""
    EG = E.T @ E
    P = A.gram().pinv()
    np.testing.assert_allclose(P.dense(), np.linalg.pinv(EG, rcond=RCOND, hermitian=True), atol=1e-7)


def test_trace_kronecker_square_product_of_nonsquare_factors():
    """P(3) ⊗ R(3) ⊗ T(2) is 18 x 18 although no factor past the first is square."""
    K = Kronecker([Prefix(3), AllRange(3), Total(2)])
    E = np.kron(np.kron(prefix_dense(3), allrange_dense(3)), np.ones((1, 2)))
    assert K.shape == (18, 18)
    assert K.trace() == pytest.approx(np.trace(E))


def test_gram_inverse_helpers():
    rng = np.random.default_rng(3)
    A = rng.normal(size=(7, 4))
    GF = GramFactored(A, np.linalg.inv(A.T @ A))
    G = GF.gram()
    assert isinstance(G, InvertibleGram)
    np.testing.assert_allclose(G.inverse() @ (A.T @ A), np.eye(4), atol=1e-9)
    np.testing.assert_allclose(GF.pinv().dense(), np.linalg.pinv(A), atol=1e-9)


def test_structured_results_stay_implicit():
    """The structured classes return structured Grams / pseudo-inverses."""
    assert isinstance(Kronecker([Prefix(3), Identity(2)]).gram(), Kronecker)
    assert isinstance(Kronecker([Prefix(3), Identity(2)]).pinv(), Kronecker)
    assert isinstance(VStack([Prefix(3), Identity(3)]).gram(), Sum)
    assert isinstance(Identity(4).pinv(), Identity)
    assert isinstance(Ones(2, 3).pinv(), Weighted)


def test_kron_terms():
    a = Kronecker([Prefix(2), Identity(3)])
    b = Kronecker([Identity(2), Total(3)])
    terms = kron_terms(VStack([Weighted(VStack([a, Weighted(b, 3.0)]), -2.0), b]))
    assert [w for w, _ in terms] == [-2.0, -6.0, 1.0]
    assert terms[0][1] == a.factors and terms[1][1] == b.factors
    assert kron_terms(Dense(np.eye(2))) is None
    assert kron_terms(VStack([a, Dense(np.ones((1, 6)))])) is None


# ---------------------------------------------------------------------------
# Errors on malformed input
# ---------------------------------------------------------------------------


def test_malformed_inputs_raise():
    with pytest.raises(WorkloadError):
        WidthRange(4, 5)
    with pytest.raises(WorkloadError):
        WidthRange(4, 0)
    with pytest.raises(WorkloadError):
        Dense(np.ones(3))
    with pytest.raises(WorkloadError):
        ColumnPermuted(Identity(3), [0, 0, 1])
    with pytest.raises(WorkloadError):
        Product(Identity(3), Identity(4))
    with pytest.raises(WorkloadError):
        Sum([Identity(3), Identity(4)])
    with pytest.raises(WorkloadError):
        Sum([])
    with pytest.raises(WorkloadError):
        VStack([Identity(3), Identity(4)])
    with pytest.raises(WorkloadError):
        Kronecker([])
    with pytest.raises(WorkloadError):
        Prefix(4).matvec(np.ones(5))
    with pytest.raises(WorkloadError):
        AllRange(4).rmatvec(np.ones(4))


# ---------------------------------------------------------------------------
# Unions: exact sensitivity by column signatures, and the fallback bound
# ---------------------------------------------------------------------------


def _covers(n):
    """How many intervals of AllRange(n) contain each element, by brute force."""
    return allrange_dense(n).sum(axis=0)


def test_union_sensitivity_large_domain_exact():
    """All one-attribute range marginals on 6 attributes of size 64 (domain 64^6):
    a column (i_1..i_6) has L1 norm Σ_k covers(i_k); the maximum is 6·max covers."""
    d, n = 6, 64
    blocks = [Kronecker([AllRange(n) if i == k else Total(n) for i in range(d)]) for k in range(d)]
    U = VStack(blocks)
    c = _covers(n).max()
    assert c == 32 * 33
    assert U.sensitivity(1) == pytest.approx(d * c, rel=1e-12)
    assert U.sensitivity(2) == pytest.approx(math.sqrt(d * c), rel=1e-12)


def test_union_sensitivity_exact_not_sum_bound():
    """Terms whose heavy columns do not coincide: exact value below the naive sum."""
    n = 8
    # term 1 is heavy at the left edge of attribute 0, term 2 heavy at right edge
    left = Dense(np.diag(np.linspace(3, 1, n)))
    right = Dense(np.diag(np.linspace(1, 3, n)))
    U = VStack([Kronecker([left, Identity(2)]), Weighted(Kronecker([right, Identity(2)]), 2.0)])
    E = np.vstack([np.kron(np.diag(np.linspace(3, 1, n)), np.eye(2)),
                   2 * np.kron(np.diag(np.linspace(1, 3, n)), np.eye(2))])
    exact1 = np.abs(E).sum(axis=0).max()
    exact2 = np.sqrt((E**2).sum(axis=0)).max()
    assert U.sensitivity(1) == pytest.approx(exact1)
    assert U.sensitivity(2) == pytest.approx(exact2)
    assert exact1 < 3 + 2 * 3 - 1e-6  # the sum bound would be 9


def test_union_sensitivity_fallback_is_upper_bound(monkeypatch):
    n = 8
    left = Dense(np.diag(np.linspace(3, 1, n)))
    right = Dense(np.diag(np.linspace(1, 3, n)))
    U = VStack([Kronecker([left, Identity(2)]), Weighted(Kronecker([right, Identity(2)]), 2.0)])
    exact1, exact2 = U.sensitivity(1), U.sensitivity(2)
    monkeypatch.setattr(mx, "ENUMERATION_LIMIT", 1)
    b1, b2 = U.sensitivity(1), U.sensitivity(2)
    assert b1 == pytest.approx(3 + 2 * 3)
    assert b2 == pytest.approx(math.sqrt(3**2 + 6**2))
    assert b1 >= exact1 and b2 >= exact2


def test_union_nonkron_fallback_when_domain_huge(monkeypatch):
    """A non-Kronecker union over a huge domain must still report an upper bound."""
    R = np.random.default_rng(0).normal(size=(2, 6))
    U = VStack([Dense(R), Prefix(6)])
    exact = np.abs(np.vstack([R, prefix_dense(6)])).sum(axis=0).max()
    monkeypatch.setattr(mx, "ENUMERATION_LIMIT", 3)
    bound = U.sensitivity(1)
    assert bound >= exact - 1e-12
    assert bound == pytest.approx(np.abs(R).sum(axis=0).max() + 6)


# ---------------------------------------------------------------------------
# Large implicit objects are never densified
# ---------------------------------------------------------------------------


def _einsum_kron_apply(factors, x):
    """Reference ``(⊗ F_i) x`` by tensor contraction with dense factors."""
    T = x.reshape([f.shape[1] for f in factors])
    for i, F in enumerate(factors):
        T = np.moveaxis(np.tensordot(F, T, axes=([1], [i])), 0, i)
    return T.reshape(-1)


def test_huge_kronecker_structural_ops():
    n = 64
    K = Kronecker([AllRange(n)] * 6)
    assert K.shape == ((n * (n + 1) // 2) ** 6, n**6)
    c = _covers(n)
    assert K.sensitivity(1) == pytest.approx(c.max() ** 6, rel=1e-12)
    assert K.sensitivity(2) == pytest.approx(math.sqrt(c.max()) ** 6, rel=1e-12)
    # tr(KᵀK) = (Σ covers)^6, through the implicit Gram
    assert K.gram().trace() == pytest.approx(c.sum() ** 6, rel=1e-12)
    assert isinstance(K.gram(), Kronecker)
    Xp = K.gram().pinv()  # (KᵀK)⁺ = ⊗ (RᵀR)⁺, each 64 x 64
    assert isinstance(Xp, Kronecker)
    R = allrange_dense(n)
    assert Xp.trace() == pytest.approx(np.trace(np.linalg.inv(R.T @ R)) ** 6, rel=1e-8)
    with pytest.raises(WorkloadError):
        K.dense()
    with pytest.raises(WorkloadError):
        K.gram().dense()
    with pytest.raises(WorkloadError):
        K.column_norms(1)  # a 64^6 vector is refused too


def test_large_kronecker_matvec_without_dense(monkeypatch):
    """Products on a 65,536-column product (4.3e9 dense entries) stay implicit."""
    factors = [Prefix(16), AllRange(16), WidthRange(16, 5), Identity(16)]
    K = Kronecker(factors)
    assert K.shape[0] * K.shape[1] > mx.DENSE_LIMIT

    def boom(self):  # any densification of the big product would call this
        raise AssertionError("densified")

    monkeypatch.setattr(Kronecker, "dense", boom)
    rng = np.random.default_rng(5)
    x = rng.normal(size=K.shape[1])
    dense_factors = [prefix_dense(16), allrange_dense(16), width_dense(16, 5), np.eye(16)]
    np.testing.assert_allclose(K.matvec(x), _einsum_kron_apply(dense_factors, x), rtol=1e-10, atol=1e-8)
    y = rng.normal(size=K.shape[0])
    np.testing.assert_allclose(
        K.rmatvec(y), _einsum_kron_apply([F.T for F in dense_factors], y), rtol=1e-10, atol=1e-8
    )
    assert K.sensitivity(1) == pytest.approx(16 * _covers(16).max() * 5 * 1)
    np.testing.assert_allclose(K.row_sums(), _einsum_kron_apply(dense_factors, np.ones(K.shape[1])), rtol=1e-12)


def test_kronecker_products_never_grow_past_input_or_output():
    """Summing factors run before expanding ones: a marginal's least-squares answer expands
    attributes its measurement summed out, and expanding first would build a 30^4 intermediate
    on the way from 30^2 measurements to 30^2 answers."""
    seen = []

    class Spy(Ones):
        def _matmat(self, X):
            out = super()._matmat(X)
            seen.append(max(X.size, out.size))
            return out

        def _rmatmat(self, Y):
            out = super()._rmatmat(Y)
            seen.append(max(Y.size, out.size))
            return out

    K = Kronecker([Spy(30, 1), Spy(30, 1), Spy(1, 30), Spy(1, 30)])
    x = np.random.default_rng(0).normal(size=K.shape[1])
    np.testing.assert_allclose(K.matvec(x), K.dense() @ x)
    np.testing.assert_allclose(K.rmatvec(x), K.dense().T @ x)
    assert max(seen) <= 900


def test_dense_limit_enforced_everywhere():
    big = 8000  # 64e6 entries > DENSE_LIMIT
    for A in [Identity(big), Ones(big, big), Prefix(big), Weighted(Identity(big), 2.0),
              Sum([Identity(big), Identity(big)]), VStack([Identity(big), Total(big)]),
              Kronecker([Identity(100), Identity(80)])]:
        with pytest.raises(WorkloadError):
            A.dense()
    # the implicit operations of the same objects are fine
    assert Prefix(big).sensitivity(1) == big
    assert Identity(big).pinv().trace() == big
    assert VStack([Identity(big), Total(big)]).sensitivity(1) == 2


@pytest.mark.parametrize("make", [
    lambda: AllRange(13), lambda: Prefix(13), lambda: WidthRange(13, 4),
    lambda: ColumnPermuted(AllRange(13), np.random.default_rng(3).permutation(13)),
    lambda: ColumnPermuted(WidthRange(13, 5), np.random.default_rng(4).permutation(13)),
], ids=["allrange", "prefix", "width", "permuted-allrange", "permuted-width"])
def test_structured_gram_products_match_dense(make):
    """Range Grams multiply in O(n) per vector; the result must equal WᵀW X exactly."""
    from dpsql.hdmm.matrix import StructuredGram
    W = make()
    G = W.gram()
    assert isinstance(G, StructuredGram)
    D = W.dense()
    X = np.random.default_rng(0).normal(size=(13, 5))
    np.testing.assert_allclose(G.matvec(X), D.T @ D @ X, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(G.rmatvec(X[:, 0]), D.T @ D @ X[:, 0], rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(G.dense(), D.T @ D)
