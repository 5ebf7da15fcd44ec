"""Term stacking against the dense workload: the same rows, so the same errors for any strategy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpsql.hdmm import stacking
from dpsql.hdmm.error_analysis import expected_error, query_variances
from dpsql.hdmm.matrix import Dense, Identity, Prefix, Total
from dpsql.hdmm.optimize import select
from dpsql.hdmm.optimize.union import opt_plus
from dpsql.hdmm.stacking import stack_terms
from dpsql.hdmm.strategy import KronStrategy, UnionStrategy
from dpsql.hdmm.workload import Workload, marginals_workload
from dpsql.privacy import Gaussian, Laplace

DOMAIN = (4, 3, 5)


def pool(n: int, rng: np.random.Generator) -> list:
    """Factors on an attribute of ``n`` values, shared among terms so that some terms agree."""
    return [Identity(n), Total(n), Prefix(n), Dense((rng.random((1, n)) < 0.5) + np.eye(1, n)),
            Dense(rng.integers(0, 3, (2, n)).astype(float)), Dense(np.arange(n, dtype=float)[None, :])]


@st.composite
def workloads(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    pools = [pool(n, rng) for n in DOMAIN]
    k = draw(st.integers(1, 9))
    return Workload(DOMAIN, [(draw(st.sampled_from([1.0, 0.5, 3.0])),
                              tuple(p[draw(st.integers(0, len(p) - 1))] for p in pools)) for _ in range(k)])


def sorted_rows(M: np.ndarray) -> np.ndarray:
    return M[np.lexsort(M.T[::-1])]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(W=workloads())
def test_stacking_keeps_every_row_and_every_error(W):
    s = stack_terms(W)
    S = s.workload
    assert sorted(k for o in s.origin for k in o) == list(range(len(W.terms)))
    assert len(S.terms) == len(s.origin) <= len(W.terms)
    dense = W.dense()
    for t, o in enumerate(s.origin):   # each stacked term holds exactly the rows of its original terms
        mine = np.vstack([dense[W.term_rows(k)] for k in o])
        assert np.allclose(sorted_rows(S.dense()[S.term_rows(t)]), sorted_rows(mine), atol=1e-12)
    rng = np.random.default_rng(0)
    strategies = [KronStrategy(tuple(Identity(n) for n in DOMAIN)),
                  KronStrategy(tuple(Dense(np.vstack([np.eye(n), rng.random((2, n))])) for n in DOMAIN))]
    for A in strategies:
        for noise in (Laplace(1.0), Gaussian(1.0, 1e-6)):
            assert expected_error(S, A, noise) == pytest.approx(expected_error(W, A, noise), rel=1e-9)
            mine = np.sort(query_variances(S, A, noise))
            assert np.allclose(mine, np.sort(query_variances(W, A, noise)), rtol=1e-9)


def test_terms_that_differ_in_one_predicate_become_one():
    lows = [Dense(np.eye(1, 4, j) + np.eye(1, 4, j + 1)) for j in range(3)]
    W = Workload((4, 3), [(w, (r, Identity(3))) for w, r in zip([1.0, 2.0, 0.5], lows)])
    s = stack_terms(W)
    (weight, (factor, rest)), = s.workload.terms
    assert s.origin == [[0, 1, 2]] and weight == 1.0 and isinstance(rest, Identity)
    assert np.array_equal(factor.dense(), np.vstack([w * r.dense() for w, r in zip([1.0, 2.0, 0.5], lows)]))


def test_marginal_algebra_factors_are_never_stacked():
    W = marginals_workload((3, 4, 5), k=2, lower=True)   # (I, I, T), (I, T, T), ... differ in one identity or total
    assert stack_terms(W).workload is W


def test_a_term_differing_in_two_factors_is_kept_apart():
    a, b = Dense([[1.0, 0.0, 1.0]]), Dense([[0.0, 1.0, 1.0]])
    W = Workload((3, 3), [(1.0, (a, a)), (1.0, (b, b)), (1.0, (a, b))])
    s = stack_terms(W)   # (a, a) joins (a, b) on attribute 1; (b, b) differs from both in one factor, but
    assert sorted(map(sorted, s.origin)) in ([[0, 2], [1]], [[0], [1, 2]])   # each term joins one group only


def test_stacked_factors_stay_within_the_limit(monkeypatch):
    monkeypatch.setattr(stacking, "STACK_LIMIT", 3 * 6)
    rows = [Dense(np.eye(1, 6, j)) for j in range(6)]
    W = Workload((6, 2), [(1.0, (r, Total(2))) for r in rows])
    s = stack_terms(W)
    assert s.origin == [[0, 1, 2], [3, 4, 5]]
    assert all(f.shape[0] * f.shape[1] <= 18 for _, fs in s.workload.terms for f in fs)


@pytest.mark.parametrize("noise", [Laplace(1.0), Gaussian(1.0, 1e-6)], ids=["laplace", "gaussian"])
def test_a_union_strategy_found_on_stacked_terms_answers_the_original_ones(noise):
    band = [Dense(np.eye(1, 5, j) + np.eye(1, 5, j + 1)) for j in range(4)]
    W = Workload((5, 4), [(1.0, (r, Identity(4))) for r in band] + [(2.0, (Identity(5), Total(4)))])
    s = stack_terms(W)
    U = opt_plus(s.workload, noise, restarts=1)
    back = s.unstack(U)
    assert isinstance(back, UnionStrategy) and sorted(k for g in back.groups for k in g) == list(range(5))
    assert expected_error(W, back, noise) == pytest.approx(expected_error(s.workload, U, noise), rel=1e-9)
    original = np.sort(query_variances(W, back, noise))
    assert np.allclose(original, np.sort(query_variances(s.workload, U, noise)), rtol=1e-9)


def test_selection_searches_a_batch_of_ranges_as_one_term():
    """Sliding ranges on one column: one stacked term, so OPT_+ (a search per range unstacked) does
    not apply, and OPT_0, which sees the workload through its Gram, finds the same strategy."""
    n = 300
    ranges = [Dense(((np.arange(n) >= i) & (np.arange(n) < i + 41)).astype(float)[None, :]) for i in range(0, 260, 7)]
    W = Workload((n,), [(1.0, (r,)) for r in ranges])
    sel = select(W, Laplace(1.0), restarts=1, progress=False)
    assert "OPT_plus" not in {c.operator for c in sel.candidates}
    assert {"OPT_0", "direct"} <= {c.operator for c in sel.candidates}
    assert sel.rmse <= min(c.rmse for c in sel.candidates) * (1 + 1e-12)
    plain = select(W, Laplace(1.0), restarts=1, progress=False, stack=False)
    assert "OPT_plus" in {c.operator for c in plain.candidates}
    both = [{c.operator: c.rmse for c in s.candidates} for s in (sel, plain)]
    assert both[0]["OPT_0"] == pytest.approx(both[1]["OPT_0"], rel=1e-9)
    assert both[0]["direct"] == pytest.approx(both[1]["direct"], rel=1e-12)
