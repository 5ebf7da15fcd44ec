"""Selection without OPT_0 for attributes used only as group key or total
(dpsql.hdmm.optimize.symmetric), and the BLAS threads a selection takes (threads)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import threadpoolctl

from dpsql.hdmm.matrix import Identity, IdentityTotal, Prefix, Total, VStack
from dpsql.hdmm.optimize import kron, selector, symmetric
from dpsql.hdmm.optimize.kron import kron_search
from dpsql.hdmm.optimize.opt0 import optimize_factor
from dpsql.hdmm.optimize.threads import thread_count
from dpsql.hdmm.strategy import KronStrategy
from dpsql.hdmm.workload import Workload
from dpsql.privacy import Gaussian

N = kron.SYMMETRIC_MIN + 1


def exact_error(factors, W: Workload, norm: int) -> float:
    S = KronStrategy(factors)
    return S.trace_error(W) * S.sensitivity(norm) ** 2


@pytest.mark.parametrize("a, b", [(1.0, 0.0), (1.0, 3.0), (2.0, 0.01)])
def test_closed_form_is_the_l2_optimum(a, b):
    """Gaussian noise: the closed form's error equals OPT_0's certified optimum on the dense Gram."""
    G = a * np.eye(N) + b * np.ones((N, N))
    s, t = symmetric.closed_form(a, b, N, norm=2)
    ours = float(symmetric.traces(np.array([[a, b]]), N, s, t)[0])
    A = symmetric.factor(s, t, N)
    assert math.isclose(A.sensitivity(2), 1.0, rel_tol=1e-12)
    assert math.isclose(ours, float(np.sum(G * np.linalg.inv(A.gram().dense()))), rel_tol=1e-9)
    best = optimize_factor(G, 2, np.random.default_rng(0))[1]
    assert ours <= best * (1 + 1e-6)


def test_closed_form_beats_the_opt0_search_under_laplace():
    G = np.eye(N) + 2.0 * np.ones((N, N))
    s, t = symmetric.closed_form(1.0, 2.0, N, norm=1)
    A = symmetric.factor(s, t, N)
    assert math.isclose(A.sensitivity(1), 1.0, rel_tol=1e-12) and t > 0
    ours = float(symmetric.traces(np.array([[1.0, 2.0]]), N, s, t)[0])
    assert ours < optimize_factor(G, 1, np.random.default_rng(0))[1]


@pytest.mark.parametrize("norm", [1, 2])
def test_kron_search_reports_its_strategys_exact_error(norm):
    terms = [(1.0, (IdentityTotal(N), Prefix(8))), (2.0, (Total(N), Identity(8))), (0.5, (Identity(N), Total(8)))]
    W = Workload((N, 8), terms)
    factors, error = kron_search(W.domain, W.terms, norm, np.random.default_rng(0))
    assert isinstance(factors[0], VStack)  # group-by and total: identity plus a total row
    assert math.isclose(error, exact_error(factors, W, norm), rel_tol=1e-9)


def test_a_large_group_key_forms_no_dense_gram():
    """100,000 values: the dense Gram alone would be 80 GB; the closed form answers at once."""
    n = 100_000
    W = Workload((n, 3), [(1.0, (Identity(n), Identity(3))), (1.0, (Identity(n), Total(3)))])
    factors, error = kron_search(W.domain, W.terms, 2, np.random.default_rng(0))
    assert isinstance(factors[0], Identity)
    # the identity on the key; on the 3 values, the Gaussian optimum for I + J (its closed form too)
    s, t = symmetric.closed_form(1.0, 1.0, 3, norm=2)
    expected = n * (float(symmetric.traces(np.array([[1.0, 0.0]]), 3, s, t)[0])
                    + float(symmetric.traces(np.array([[0.0, 1.0]]), 3, s, t)[0]))
    assert math.isclose(error, expected, rel_tol=1e-6)


def test_thread_count_shares_the_free_cores():
    assert thread_count(cores=2, load=0.0, active=1) == 2
    assert thread_count(cores=2, load=1.0, active=1) == 2   # its own load
    assert thread_count(cores=2, load=3.0, active=1) == 1   # two other busy processes
    assert thread_count(cores=16, load=2.0, active=2) == 8  # the load is its own two selections
    assert thread_count(cores=16, load=6.0, active=2) == 6  # other load 4: 12 cores for 2 selections
    assert thread_count(cores=2, load=0.0, active=5) == 1   # never 0


def test_selection_runs_within_its_thread_share(monkeypatch):
    seen = []

    def probe(workload, noise, restarts=1, seed=0):
        seen.append([p["num_threads"] for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"])
        return selector.identity(workload, noise)

    monkeypatch.setitem(selector.OPERATORS, "probe", probe)
    monkeypatch.setattr("dpsql.hdmm.optimize.threads._load", lambda: 50.0)  # a busy machine
    selector.select(Workload.of(Identity(4)), Gaussian(rho=1.0), operators=["probe"], progress=False)
    assert seen and all(n == [1] * len(n) for n in seen) and seen[0]


def test_terms_are_grouped_by_their_grams_without_densifying_large_keys():
    from dpsql.hdmm.matrix import Dense, Weighted
    from dpsql.hdmm.optimize.union import gram_key, product_groups

    n = 100_000  # a dense Gram would be 80 GB
    assert gram_key(Identity(n)) == gram_key(VStack([Identity(n)])) == gram_key(Weighted(Identity(n), -1.0))
    assert gram_key(Identity(n)) != gram_key(IdentityTotal(n)) != gram_key(Total(n))
    assert gram_key(Identity(8)) == gram_key(Dense(np.eye(8)))  # equal Grams, whatever the type
    W = Workload((n, 3), [(1.0, (Identity(n), Identity(3))), (2.0, (Identity(n), Identity(3))),
                          (1.0, (IdentityTotal(n), Identity(3)))])
    assert product_groups(W) == [[0, 1], [2]]
