"""Strategy error analysis (dpsql.hdmm.strategy, dpsql.hdmm.error_analysis) against a dense oracle.

The oracle forms W and A densely, X⁺ = pinv(AᵀA), and computes
TSE = noise.variance(Δ(A)) · tr(W X⁺ Wᵀ) and the per-query variances
diag(W X⁺ Wᵀ). Unanswerable workloads (W X⁺X ≠ W) must report ``inf``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsql.errors import ResourceLimitError, WorkloadError
from dpsql.hdmm.error_analysis import expected_error, query_variances, rmse, svd_bound
from dpsql.hdmm.marginals import Marginals, ResidualMarginals
from dpsql.hdmm.matrix import (
    AllRange,
    Dense,
    GramFactored,
    Identity,
    IdentityTotal,
    Prefix,
    Total,
    Weighted,
    WidthRange,
)
from dpsql.hdmm.pidentity import PIdentity
from dpsql.hdmm.strategy import KronStrategy, MarginalStrategy, UnionStrategy
from dpsql.hdmm.workload import Workload, marginals_workload, products_workload
from dpsql.privacy import Gaussian, Laplace

NOISES = [Laplace(1.0), Gaussian(epsilon=1.0, delta=1e-6), Laplace(0.3), Gaussian(rho=0.5)]
NOISE_IDS = ["laplace", "gaussian", "laplace_eps0.3", "zcdp"]


def oracle(W: np.ndarray, A: np.ndarray, noise) -> tuple[float, np.ndarray]:
    """(expected TSE, per-query variances) by dense linear algebra; inf where unanswerable."""
    sens = (np.abs(A).sum(axis=0) if noise.norm == 1 else np.sqrt((A**2).sum(axis=0))).max()
    G = A.T @ A
    Xp = np.linalg.pinv(G, rcond=1e-10, hermitian=True)
    v = noise.variance(sens)
    resid = W @ Xp @ G - W
    answerable = np.abs(resid).max(axis=1) <= 1e-7 * max(1.0, np.abs(W).max())
    var = v * np.einsum("ij,jk,ik->i", W, Xp, W)
    var = np.where(answerable, var, np.inf)
    return float(var.sum()), var


def check(workload, strategy, noise, W=None, A=None, tse=None, var=None):
    W = workload.dense() if W is None else W
    if tse is None:
        tse, var = oracle(W, strategy.matrix.dense() if A is None else A, noise)
    got_tse = expected_error(workload, strategy, noise)
    got_var = query_variances(workload, strategy, noise)
    assert got_var.shape == (W.shape[0],)
    if math.isinf(tse):
        assert math.isinf(got_tse)
        assert np.all(np.isinf(got_var[np.isinf(var)]))
    else:
        assert got_tse == pytest.approx(tse, rel=1e-7)
        assert rmse(workload, strategy, noise) == pytest.approx(math.sqrt(tse / W.shape[0]), rel=1e-7)
    fin = np.isfinite(var)
    np.testing.assert_allclose(got_var[fin], var[fin], rtol=1e-7, atol=1e-9 * max(1.0, var[fin].max(initial=0)))
    # trace_error is per unit noise at unit sensitivity: no sensitivity factor
    sens = strategy.sensitivity(noise.norm)
    if not math.isinf(tse):
        assert strategy.trace_error(workload) == pytest.approx(tse / noise.variance(sens), rel=1e-7)


def workload_2d():
    return Workload(
        (4, 5),
        [
            (1.0, (AllRange(4), Identity(5))),
            (2.0, (Total(4), Prefix(5))),
            (-0.5, (IdentityTotal(4), WidthRange(5, 2))),
            (1.5, (Identity(4), Total(5))),
        ],
    )


def _theta(p, n, seed):
    return np.random.default_rng(seed).random((p, n))


def kron_strategies():
    rng = np.random.default_rng(11)
    B = rng.normal(size=(6, 5))
    out = {
        "identity": KronStrategy((Identity(4), Identity(5))),
        "pidentity": KronStrategy((PIdentity(_theta(2, 4, 1), 1), PIdentity(_theta(1, 5, 2), 2))),
        "prefix_range": KronStrategy((Prefix(4), AllRange(5))),
        "gram_factored": KronStrategy((GramFactored(B[:4, :4] + 3 * np.eye(4), np.linalg.inv(
            (B[:4, :4] + 3 * np.eye(4)).T @ (B[:4, :4] + 3 * np.eye(4)))), Dense(B))),
        "weighted": KronStrategy((Weighted(IdentityTotal(4), 0.5), Prefix(5))),
    }
    return out


KS = kron_strategies()


@pytest.mark.parametrize("noise", NOISES, ids=NOISE_IDS)
@pytest.mark.parametrize("name", list(KS))
def test_kron_strategy(name, noise):
    check(workload_2d(), KS[name], noise)


@pytest.mark.parametrize("noise", NOISES[:2], ids=NOISE_IDS[:2])
def test_kron_strategy_per_term(noise):
    W = workload_2d()
    S = KS["pidentity"]
    parts = S.query_variances(W)
    assert len(parts) == len(W.terms)
    _, var = oracle(W.dense(), S.matrix.dense(), noise)
    v = noise.variance(S.sensitivity(noise.norm))
    for k in range(len(W.terms)):
        np.testing.assert_allclose(v * parts[k], var[W.term_rows(k)], rtol=1e-8)


def test_kron_strategy_rank_deficient_but_supported():
    """A Total factor answers totals exactly; the error is finite and matches the oracle."""
    W = Workload((3, 4), [(1.0, (AllRange(3), Total(4))), (2.0, (Prefix(3), Weighted(Total(4), 3.0)))])
    S = KronStrategy((Identity(3), Total(4)))
    for noise in NOISES:
        check(W, S, noise)


def test_kron_strategy_unsupported_is_inf():
    W = Workload((3, 4), [(1.0, (AllRange(3), Total(4))), (1.0, (Identity(3), Identity(4)))])
    S = KronStrategy((Identity(3), Total(4)))
    tse, var = oracle(W.dense(), S.matrix.dense(), Laplace(1.0))
    assert math.isinf(tse) and np.isfinite(var[:6]).all() and np.isinf(var[6:]).all()
    check(W, S, Laplace(1.0))
    got = query_variances(W, S, Laplace(1.0))
    assert np.isfinite(got[:6]).all() and np.isinf(got[6:]).all()


def test_kron_strategy_partially_supported_term():
    """P(4)'s last row is the total, which a T(4) factor answers: those queries are finite."""
    W = Workload((3, 4), [(1.0, (Identity(3), Prefix(4)))])
    S = KronStrategy((Identity(3), Total(4)))
    tse, var = oracle(W.dense(), S.matrix.dense(), Laplace(1.0))
    assert np.isfinite(var).sum() == 3
    got = query_variances(W, S, Laplace(1.0))
    np.testing.assert_allclose(got[np.isfinite(var)], var[np.isfinite(var)])


@pytest.mark.parametrize("name", list(KS))
def test_thin_factors_give_the_dense_oracles_errors_and_least_squares_answers(monkeypatch, name):
    """Where an attribute's ``n × n`` Gram is too large to hold, a factor's errors go through its
    ``n × r`` pseudo-inverse instead (``KronStrategy._thin``). With the limit lowered so that
    every factor here takes that path, every trace, variance, covariance and least-squares
    answer equals the dense oracle's, supported, partly supported and unsupported alike."""
    import dpsql.hdmm.strategy as strategy_module
    from dpsql.hdmm.reconstruct import least_squares

    monkeypatch.setattr(strategy_module, "DENSE_LIMIT", 3)
    sums = Dense(np.arange(4.0)[None, :])  # COUNT and SUM per group: AVG's two terms
    cases = [(workload_2d(), KronStrategy(KS[name].factors))]
    cases += [(Workload((3, 4), terms), KronStrategy((Identity(3), Total(4)))) for terms in (
        [(1.0, (AllRange(3), Total(4))), (2.0, (Prefix(3), Weighted(Total(4), 3.0)))],
        [(1.0, (AllRange(3), Total(4))), (1.0, (Identity(3), Identity(4)))],
        [(1.0, (Identity(3), Prefix(4)))])]
    avg = (Workload((3, 4), [(1.0, (Identity(3), Total(4))), (1.0, (Identity(3), sums))]),
           KronStrategy((Identity(3), Dense([[1.0, 1, 1, 1], [1, 2, 3, 4], [1, 0, 0, 0]]))))
    rng = np.random.default_rng(5)
    for W, S in cases + [avg]:
        # identities and totals take the sI + tJ path (KronStrategy._symmetric), the others the thin one
        assert all(t is not None or c is not None for t, c in zip(S._thin, S._symmetric))
        for noise in NOISES[:2]:
            check(W, S, noise)
        x = rng.random(math.prod(W.domain))
        if math.isfinite(S.trace_error(W)):
            np.testing.assert_allclose(least_squares(W, S, S.matrix.dense() @ x), W.dense() @ x, rtol=1e-8)
    W, S = avg
    A = S.matrix.dense()
    Xp = np.linalg.pinv(A.T @ A, rcond=1e-10, hermitian=True)
    counts, totals = W.dense()[W.term_rows(0)], W.dense()[W.term_rows(1)]
    expected = np.einsum("ij,jk,ik->i", counts, Xp, totals)
    assert np.all(np.abs(expected) > 0.1)  # SUM's row is the difference of two measured rows, COUNT's one of them
    np.testing.assert_allclose(S.cross_variances(W, 0, 1), expected, rtol=1e-8)


def test_a_sum_over_a_column_of_half_a_million_values_is_measured_as_itself():
    """SUM(income) on a 500,001-value column, and the COUNT beside it: the Gram of either is
    250 billion entries, so selection keeps the operators that never form it. The direct
    strategy's sensitivity is the largest value, its error the closed form, and least squares
    on exact measurements returns the exact answers."""
    from dpsql.hdmm.optimize.selector import select
    from dpsql.hdmm.reconstruct import least_squares

    n = 500_001
    values = Dense(np.arange(n, dtype=float)[None, :])
    W = Workload((n,), [(1.0, (values,)), (1.0, (Total(n),))])
    chosen = select(W, Laplace(1.0))
    assert chosen.operator == "direct"
    S = chosen.strategy
    x = np.random.default_rng(0).integers(0, 3, n).astype(float)
    np.testing.assert_allclose(least_squares(W, S, S.matrix.matvec(x)), [values.matvec(x)[0], x.sum()], rtol=1e-9)
    alone = select(Workload((n,), [(1.0, (values,))]), Laplace(1.0))
    assert alone.rmse == pytest.approx(math.sqrt(2.0) * (n - 1), rel=1e-9)  # Laplace at sensitivity max value
    with pytest.raises(ResourceLimitError, match=r"no strategy operator could answer this workload \(OPT_0: needs "
                                                 r"about 20,000,080,000,080 bytes of memory"):
        select(W, Laplace(1.0), operators=["OPT_0"])


def test_kron_strategy_domain_mismatch():
    with pytest.raises(WorkloadError):
        KS["identity"].trace_error(Workload((5, 4), [(1.0, (Identity(5), Identity(4)))]))


# ---------------------------------------------------------------------------
# UnionStrategy: local least squares per group
# ---------------------------------------------------------------------------


def union_case():
    W = Workload(
        (3, 4),
        [
            (1.0, (AllRange(3), Total(4))),
            (1.0, (Total(3), Prefix(4))),
            (2.0, (Prefix(3), Total(4))),
            (0.5, (Identity(3), Identity(4))),
        ],
    )
    parts = [
        KronStrategy((PIdentity(_theta(1, 3, 5), 1), Total(4))),
        KronStrategy((Total(3), Prefix(4))),
        KronStrategy((Identity(3), PIdentity(_theta(2, 4, 6), 2))),
    ]
    weights = [0.5, 0.3, 0.2]
    groups = [[0, 2], [1], [3]]
    return W, UnionStrategy(parts, weights, groups)


def union_oracle(W, U, noise):
    A = np.vstack([c * p.matrix.dense() for p, c in zip(U.parts, U.weights)])
    sens = (np.abs(A).sum(axis=0) if noise.norm == 1 else np.sqrt((A**2).sum(axis=0))).max()
    v = noise.variance(sens)
    var = np.zeros(W.shape[0])
    for l, g in enumerate(U.groups):
        Al = U.parts[l].matrix.dense()
        Xp = np.linalg.pinv(Al.T @ Al, rcond=1e-10, hermitian=True)
        for k in g:
            Wk = W.dense()[W.term_rows(k)]
            var[W.term_rows(k)] = v * np.einsum("ij,jk,ik->i", Wk, Xp, Wk) / U.weights[l] ** 2
    return float(var.sum()), var, sens


@pytest.mark.parametrize("noise", NOISES, ids=NOISE_IDS)
def test_union_strategy(noise):
    W, U = union_case()
    tse, var, sens = union_oracle(W, U, noise)
    assert U.sensitivity(noise.norm) == pytest.approx(sens, rel=1e-12)
    check(W, U, noise, tse=tse, var=var)


def test_union_strategy_is_upper_bound_on_joint_least_squares():
    W, U = union_case()
    noise = Gaussian(epsilon=1.0, delta=1e-6)
    joint, _ = oracle(W.dense(), U.matrix.dense(), noise)
    assert expected_error(W, U, noise) >= joint * (1 - 1e-9)


def test_union_strategy_missing_group():
    W, U = union_case()
    bad = UnionStrategy(U.parts[:2], U.weights[:2], [[0, 2], [1]])
    with pytest.raises(WorkloadError):
        bad.trace_error(W)


def test_union_strategy_duplicate_group():
    W, U = union_case()
    dup = UnionStrategy(U.parts, U.weights, [[0, 2], [1, 2], [3]])
    with pytest.raises(WorkloadError):
        dup.trace_error(W)


# ---------------------------------------------------------------------------
# MarginalStrategy
# ---------------------------------------------------------------------------

MDOM = (2, 3, 4)


def marginal_workloads():
    return {
        "2way": marginals_workload(MDOM, 2),
        "upto1": marginals_workload(MDOM, 1, lower=True),
        # a non-marginal workload is still evaluated exactly (Theorem 10)
        "ranges": products_workload(MDOM, [(0, 2), (1,), (0, 1, 2)], block=lambda i, n: AllRange(n),
                                    weights=[1.0, 2.0, 0.5]),
        "mixed": Workload(MDOM, [(1.0, (Prefix(2), Identity(3), Total(4))),
                                 (0.7, (Total(2), WidthRange(3, 2), IdentityTotal(4)))]),
    }


MW = marginal_workloads()


def _theta_full(seed, zero=()):
    t = np.random.default_rng(seed).random(8) + 0.1
    for a in zero:
        t[a] = 0.0
    return t


MSTRATS = {
    "marginals_full": MarginalStrategy(Marginals(MDOM, _theta_full(1))),
    "marginals_sparse": MarginalStrategy(Marginals(MDOM, _theta_full(2, zero=(0, 1, 2, 4)))),
    "residual_full": MarginalStrategy(ResidualMarginals(MDOM, _theta_full(3))),
    "residual_from_eig": MarginalStrategy(ResidualMarginals.from_eigenvalues(MDOM, _theta_full(4) * 10)),
}


@pytest.mark.parametrize("noise", NOISES[:2], ids=NOISE_IDS[:2])
@pytest.mark.parametrize("wname", list(MW))
@pytest.mark.parametrize("sname", list(MSTRATS))
def test_marginal_strategy(sname, wname, noise):
    check(MW[wname], MSTRATS[sname], noise)


def test_marginal_strategy_unsupported_is_inf():
    # only the 1-way marginal on attribute 0 and the total are measured
    S = MarginalStrategy(Marginals(MDOM, np.array([1.0, 1.0, 0, 0, 0, 0, 0, 0])))
    W = MW["2way"]
    tse, var = oracle(W.dense(), S.matrix.dense(), Laplace(1.0))
    assert math.isinf(tse)
    check(W, S, Laplace(1.0))
    # and a supported workload on the same strategy is finite
    W1 = products_workload(MDOM, [(0,), ()])
    check(W1, S, Laplace(1.0))
    assert math.isfinite(expected_error(W1, S, Laplace(1.0)))


def test_residual_strategy_unsupported_is_inf():
    lam = np.array([1.0, 2.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0])  # eigenspaces 2, 4, ... missing
    S = MarginalStrategy(ResidualMarginals.from_eigenvalues(MDOM, lam))
    W = MW["2way"]
    tse, var = oracle(W.dense(), S.matrix.dense(), Gaussian(epsilon=1.0, delta=1e-6))
    assert math.isinf(tse)
    assert math.isinf(expected_error(W, S, Gaussian(epsilon=1.0, delta=1e-6)))
    got = query_variances(W, S, Gaussian(epsilon=1.0, delta=1e-6))
    assert np.all(np.isinf(got[np.isinf(var)]))


# ---------------------------------------------------------------------------
# The SVD bound and the published conventions
# ---------------------------------------------------------------------------


def svd_oracle(W, noise):
    lam = np.clip(np.linalg.eigvalsh(W.T @ W), 0, None)
    tse = noise.variance(1.0) * np.sqrt(lam).sum() ** 2 / W.shape[1]
    return math.sqrt(tse / W.shape[0])


@pytest.mark.parametrize("noise", NOISES[:2], ids=NOISE_IDS[:2])
@pytest.mark.parametrize(
    "W",
    [
        Workload.of(AllRange(12)),
        Workload((3, 5), [(2.0, (Prefix(3), AllRange(5)))]),  # single product (Theorem 5)
        marginals_workload((2, 3, 4), 2),  # marginal algebra
        Workload((2, 3), [(1.0, (Identity(2), Total(3))), (0.5, (IdentityTotal(2), Identity(3)))]),
        workload_2d(),  # general: dense eigenvalues
    ],
    ids=["1d", "product", "marginals", "algebra_it", "general"],
)
def test_svd_bound(W, noise):
    assert svd_bound(W, noise) == pytest.approx(svd_oracle(W.dense(), noise), rel=1e-8)


@pytest.mark.parametrize("name", list(KS))
def test_svd_bound_is_a_lower_bound(name):
    W = workload_2d()
    for noise in NOISES[:2]:
        assert rmse(W, KS[name], noise) >= svd_bound(W, noise) * (1 - 1e-9)


def test_published_conventions():
    W = Workload.of(AllRange(64))
    I = KronStrategy((Identity(64),))
    lap, gau = Laplace(1.0), Gaussian(epsilon=1.0, delta=1e-6)
    assert round(rmse(W, I, lap), 2) == 6.63
    assert round(rmse(W, I, gau), 2) == 19.82
    assert round(svd_bound(W, lap), 2) == 3.22
    assert round(svd_bound(W, gau), 2) == 9.62
    # and the same through the dense oracle
    assert math.sqrt(oracle(W.dense(), np.eye(64), lap)[0] / W.shape[0]) == pytest.approx(rmse(W, I, lap))


# ---------------------------------------------------------------------------
# MarginalStrategy with fixed factors: (⊗_{i∈S} A_i) ⊗ M, attributes interleaved
# ---------------------------------------------------------------------------

FDOM = (4, 3, 5, 2)


def fixed_workloads():
    return {
        # the OPT_+ cluster shape: a structured factor shared, marginals elsewhere
        "prefix_marginals": Workload(FDOM, [
            (1.0, (Prefix(4), Identity(3), Total(5), Total(2))),
            (2.0, (Prefix(4), Total(3), Identity(5), Total(2))),
            (0.5, (Prefix(4), Identity(3), Total(5), Identity(2))),
        ]),
        # any conjunctive workload is still evaluated exactly
        "general": Workload(FDOM, [
            (1.0, (AllRange(4), IdentityTotal(3), Prefix(5), Total(2))),
            (-0.7, (Identity(4), Total(3), WidthRange(5, 2), Identity(2))),
        ]),
    }


FW = fixed_workloads()


def _fixed_strategies():
    p1 = PIdentity(_theta(1, 4, 11), 1)
    p2 = PIdentity(_theta(2, 5, 12), 2)
    return {
        # fixed on attribute 0, marginals on attributes 1-3
        "one_fixed": MarginalStrategy(Marginals((3, 5, 2), _theta_full(5)), fixed=(p1, None, None, None)),
        # fixed on attributes 0 and 2 (not contiguous), residual marginals on 1 and 3
        "two_fixed_residual": MarginalStrategy(ResidualMarginals((3, 2), np.array([0.4, 1.0, 0.7, 1.3])),
                                               fixed=(p1, None, p2, None)),
        # a sparse marginal part: only some subsets measured
        "sparse": MarginalStrategy(Marginals((3, 5, 2), _theta_full(6, zero=(0, 2, 4, 6))),
                                   fixed=(Prefix(4), None, None, None)),
    }


FSTRATS = _fixed_strategies()


@pytest.mark.parametrize("noise", NOISES[:2], ids=NOISE_IDS[:2])
@pytest.mark.parametrize("wname", list(FW))
@pytest.mark.parametrize("sname", list(FSTRATS))
def test_marginal_strategy_with_fixed_factors(sname, wname, noise):
    S = FSTRATS[sname]
    A = S.matrix.dense()
    assert A.shape[1] == math.prod(FDOM) and S.domain == FDOM
    sens = (np.abs(A).sum(axis=0) if noise.norm == 1 else np.sqrt((A**2).sum(axis=0))).max()
    assert S.sensitivity(noise.norm) == pytest.approx(sens, rel=1e-12)
    check(FW[wname], S, noise)


def test_marginal_strategy_fixed_factor_matrix_is_the_kronecker_product():
    """Up to row order, the stacked blocks are ``A_0 ⊗ M`` for a fixed first attribute."""
    S = FSTRATS["one_fixed"]
    A0 = S.fixed[0].dense()
    M = S.strategy.dense()
    np.testing.assert_allclose(S.matrix.gram().dense(), np.kron(A0.T @ A0, M.T @ M), atol=1e-12)


def test_marginal_strategy_fixed_factor_unsupported_is_inf():
    # a total on attribute 0 cannot answer a prefix there; the other terms stay finite
    S = MarginalStrategy(Marginals((3, 5, 2), _theta_full(7)), fixed=(Total(4), None, None, None))
    W = FW["prefix_marginals"]
    check(W, S, Laplace(1.0))
    assert math.isinf(expected_error(W, S, Laplace(1.0)))
    W_total = Workload(FDOM, [(1.0, (Total(4), Identity(3), Total(5), Identity(2)))])
    check(W_total, S, Laplace(1.0))
    assert math.isfinite(expected_error(W_total, S, Laplace(1.0)))


@pytest.mark.parametrize("sname", list(FSTRATS))
def test_marginal_strategy_with_fixed_factors_cross_variances(sname):
    S = FSTRATS[sname]
    W = Workload(FDOM, [(1.0, (Prefix(4), Identity(3), Total(5), Identity(2))),
                        (-2.0, (Identity(4), Identity(3), Dense(np.array([[1.0, 0, 1, 1, 0]])), Identity(2)))])
    A = S.matrix.dense()
    Xp = np.linalg.pinv(A.T @ A, rcond=1e-10, hermitian=True)
    Wa, Wb = W.dense()[W.term_rows(0)], W.dense()[W.term_rows(1)]
    np.testing.assert_allclose(S.cross_variances(W, 0, 1), np.einsum("ij,jk,ik->i", Wa, Xp, Wb), rtol=1e-9, atol=1e-12)


def test_marginal_strategy_fixed_factors_must_match_the_marginal_domain():
    with pytest.raises(WorkloadError):
        MarginalStrategy(Marginals((3, 5), np.ones(4)), fixed=(Prefix(4), None, None, None))
