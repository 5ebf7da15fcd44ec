"""Projected L-BFGS (dpsql.hdmm.optimize.lbfgs) against exact solutions, and the
large-attribute OPT_0 searches that use it against a dense error oracle."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.hdmm.error_analysis import expected_error, svd_bound
from dpsql.hdmm.matrix import Identity, Prefix
from dpsql.hdmm.optimize import opt0
from dpsql.hdmm.optimize.lbfgs import minimize_bounded
from dpsql.hdmm.strategy import KronStrategy
from dpsql.hdmm.workload import Workload
from dpsql.privacy import Laplace


def least_squares(A: np.ndarray, b: np.ndarray):
    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        r = A @ x - b
        return 0.5 * float(r @ r), A.T @ r
    return fun


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), m=st.integers(3, 40), n=st.integers(1, 25))
def test_nonnegative_least_squares_matches_nnls(seed, m, n):
    """A convex problem has one minimum: the search must reach NNLS's to high accuracy."""
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(m, n)) + 0.1 * np.eye(m, n)
    b = rng.normal(size=m) * 3
    fun = least_squares(A, b)
    r = minimize_bounded(fun, rng.random(n), 0.0, np.inf, 2000)
    x_star, _ = scipy.optimize.nnls(A, b)
    assert r.fun == pytest.approx(fun(x_star)[0], rel=1e-6, abs=1e-9)
    assert r.x.min() >= 0.0


def test_box_constrained_separable_quadratic_is_the_clipped_minimum():
    """With a diagonal Hessian the box-constrained minimum is the clipped unconstrained one."""
    rng = np.random.default_rng(0)
    c = rng.normal(size=200) * 2
    h = rng.uniform(0.1, 10.0, size=200)
    r = minimize_bounded(lambda x: (float(h @ (x - c) ** 2), 2 * h * (x - c)), np.zeros(200), -1.0, 1.0, 500)
    np.testing.assert_allclose(r.x, np.clip(c, -1.0, 1.0), atol=1e-6)


def test_stays_feasible_counts_evaluations_and_returns_the_best_point():
    rng = np.random.default_rng(1)
    A, b = rng.normal(size=(30, 20)), rng.normal(size=30)
    inner = least_squares(A, b)
    seen: list[tuple[float, np.ndarray]] = []

    def fun(x: np.ndarray) -> tuple[float, np.ndarray]:
        assert x.min() >= 0.0 and x.max() <= 0.5
        value, grad = inner(x)
        seen.append((value, x.copy()))
        return value, grad

    r = minimize_bounded(fun, rng.random(20), 0.0, 0.5, 7)
    assert r.evaluations == len(seen) == 7
    best = min(seen, key=lambda e: e[0])
    assert r.fun == best[0]
    np.testing.assert_array_equal(r.x, best[1])


def test_large_attribute_opt0_runs_projected_lbfgs_and_reports_its_true_error(monkeypatch):
    """Above MULTISTART_MAX, OPT_0 runs the searches of LARGE_SEARCHES with the
    projected method; the strategy's reported error must equal a dense
    ``tr(G (AᵀA)⁻¹)`` and beat the identity."""
    n = opt0.MULTISTART_MAX + 76
    calls = []
    original = opt0.minimize_bounded

    def spy(*args, **kwargs):
        calls.append(kwargs["memory"])
        return original(*args, **kwargs)

    monkeypatch.setattr(opt0, "minimize_bounded", spy)
    monkeypatch.setattr(opt0, "LARGE_SEARCHES", tuple((k, d, 60, m) for k, d, _, m in opt0.LARGE_SEARCHES))
    W = Workload.of(Prefix(n))
    noise = Laplace(1.0)
    S = opt0.opt_0(W, noise, seed=0)
    assert calls == [m for *_, m in opt0.LARGE_SEARCHES]
    A = S.matrix.dense()
    assert np.abs(A).sum(axis=0).max() == pytest.approx(1.0)  # unit L1 sensitivity
    WD = W.dense()
    G = WD.T @ WD
    dense = noise.variance(1.0) * float(np.trace(G @ np.linalg.inv(A.T @ A)))
    assert expected_error(W, S, noise) == pytest.approx(dense, rel=1e-6)
    assert dense < expected_error(W, KronStrategy((Identity(n),)), noise)
    assert expected_error(W, S, noise) >= svd_bound(W, noise) ** 2 * W.num_queries * (1 - 1e-9)

