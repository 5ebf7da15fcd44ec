"""The request path at census scale (issue 41): the workload fingerprint read from the factors'
structure, group labels listed column by column, and a product strategy's error analysis on
identity and total factors without dense matrices, each against the exact slow path."""

from __future__ import annotations

import gc
import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp

from dpsql.hdmm.cache import StrategyCache
from dpsql.hdmm.matrix import Dense, Identity, IdentityTotal, Ones, Prefix, Sparse, Total, VStack, Weighted
from dpsql.hdmm.optimize import select
from dpsql.hdmm.workload import Workload
from dpsql.privacy import Laplace
from dpsql.sql.compile import _group_labels, compile_batch

COUNTIES = 3142


def _no_dense(monkeypatch):
    """Make forming a large identity's or total's dense matrix (or Gram) fail."""
    for cls in (Identity, Ones):
        def refuse(self, _dense=cls.dense):
            if self.shape[1] > 1000:
                raise AssertionError(f"{self!r} was made dense")
            return _dense(self)
        monkeypatch.setattr(cls, "dense", refuse)


def _county_terms(weight: float = 2.0, entry: float = 1.0, sparse_entry: float = 3.0):
    rng = np.random.default_rng(0)
    buckets = rng.integers(0, 2, size=(4, 9)).astype(float)
    buckets[1, 2] = entry
    pred = sp.csr_matrix(np.diag([1.0, 0.0, sparse_entry, 1.0, 0.0, 1.0, 1.0]))
    return [(1.0, (Identity(COUNTIES), Dense(buckets), Total(7))),
            (weight, (Total(COUNTIES), Identity(9), Sparse(pred))),
            (1.0, (IdentityTotal(COUNTIES), Prefix(9), Identity(7)))]


def test_fingerprint_reads_identities_and_totals_from_their_type(monkeypatch):
    """A county key's identity and total were densified (two 3,142 x 3,142 Grams a term): 2.3 s a
    request on a busy machine. Now nothing n x n is formed."""
    W = Workload((COUNTIES, 9, 7), _county_terms())
    _no_dense(monkeypatch)
    assert len(W.fingerprint()) == 64


def test_fingerprint_changes_with_any_factor_entry_or_weight():
    base = Workload((COUNTIES, 9, 7), _county_terms()).fingerprint()
    assert Workload((COUNTIES, 9, 7), _county_terms()).fingerprint() == base  # rebuilt: the same
    changed = [
        Workload((COUNTIES, 9, 7), _county_terms(weight=2.5)),          # a weight
        Workload((COUNTIES, 9, 7), _county_terms(entry=0.5)),           # one dense entry
        Workload((COUNTIES, 9, 7), _county_terms(sparse_entry=2.0)),    # one sparse entry
        Workload((COUNTIES, 9, 7), [(w, (Identity(COUNTIES),) + fs[1:]) if k == 2 else (w, fs)  # IT -> I
                                    for k, (w, fs) in enumerate(_county_terms())]),
        Workload((COUNTIES, 9, 7), [(w, (Weighted(fs[0], 2.0),) + fs[1:]) if k == 0 else (w, fs)  # 2I
                                    for k, (w, fs) in enumerate(_county_terms())]),
        Workload((COUNTIES, 9, 7), _county_terms()[:2]),                # a term less
    ]
    prints = [W.fingerprint() for W in changed]
    assert base not in prints and len(set(prints)) == len(prints)


def test_equal_factors_built_differently_share_a_fingerprint():
    """The same Gram from another construction, and a sparse factor with explicit zeros or
    duplicate entries, are the same workload to selection."""
    M = sp.coo_matrix(([1.0, 0.0, 2.0, 1.0], ([0, 0, 1, 1], [0, 1, 2, 2])), shape=(2, 3))  # (1,2) twice
    clean = sp.csr_matrix(np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 3.0]]))
    assert Workload.of(Sparse(M)).fingerprint() == Workload.of(Sparse(clean)).fingerprint()
    n = COUNTIES
    same = [VStack([Identity(n)]), Weighted(Identity(n), -1.0)]
    assert {Workload.of(f).fingerprint() for f in same} == {Workload.of(Identity(n)).fingerprint()}
    assert Workload.of(Dense(np.eye(8))).fingerprint() == Workload.of(Identity(8)).fingerprint()
    assert Workload.of(Total(n)).fingerprint() != Workload.of(Ones(2, n)).fingerprint()


def test_a_repeated_selection_still_hits_the_cache(tmp_path):
    W = Workload((300, 3), [(1.0, (Identity(300), Identity(3))), (1.0, (Total(300), Identity(3)))])
    cache = StrategyCache(tmp_path)
    first = select(W, Laplace(1.0), restarts=1, cache=cache, progress=False)
    again = select(Workload(W.domain, W.terms), Laplace(1.0), restarts=1, cache=cache, progress=False)
    assert not first.cached and again.cached and math.isclose(again.rmse, first.rmse, rel_tol=1e-12)


class _Keys:
    """A key's domain as :func:`_group_labels` reads it (its labels)."""

    def __init__(self, labels):
        self.labels = labels


def _labels_by_python(n_keys, parts):
    """The old path: one tuple per group from itertools.product over the attributes."""
    per_attr = []
    for keys, doms, kept in parts:
        combos = np.unravel_index(kept, [len(d.labels) for d in doms])
        per_attr.append([tuple((k, d.labels[i]) for k, d, i in zip(keys, doms, combo))
                         for combo in zip(*(c.tolist() for c in combos))])
    groups = []
    for combo in itertools.product(*per_attr):
        labels = [None] * n_keys
        for part in combo:
            for k, lab in part:
                labels[k] = lab
        groups.append(tuple(labels))
    return tuple(groups)


def test_group_labels_equal_the_python_product():
    rng = np.random.default_rng(7)
    pool = [["F", "M", None], [0, 1, 2, 3], [True, False], ["a", ("x", 1), 2.5, None], list(range(5))]
    for _ in range(60):
        n_attrs = int(rng.integers(1, 4))
        positions = rng.permutation(int(rng.integers(n_attrs, n_attrs + 3)))  # keys in any order
        cuts = np.sort(rng.choice(np.arange(1, len(positions)), n_attrs - 1, replace=False)) if n_attrs > 1 else []
        parts = []
        for keys in np.split(positions, cuts):
            doms = [_Keys(pool[int(rng.integers(len(pool)))]) for _ in keys]
            cells = math.prod(len(d.labels) for d in doms)
            kept = np.sort(rng.choice(cells, int(rng.integers(0, cells + 1)), replace=False))
            parts.append(([int(k) for k in keys], doms, kept))
        ours = _group_labels(len(positions), parts)
        expected = _labels_by_python(len(positions), parts)
        assert ours == expected
        assert [tuple(type(x) for x in g) for g in ours] == [tuple(type(x) for x in g) for g in expected]
    assert _group_labels(0, []) == ((),)


@pytest.mark.parametrize("enabled", [True, False])
def test_group_labels_leave_the_garbage_collector_as_they_found_it(enabled):
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        _group_labels(1, [([0], [_Keys([1, 2])], np.arange(2))])
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_a_compiled_batch_lists_its_groups_in_key_order():
    schema = {"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 2},
                                        "b": {"type": "categorical", "values": ["x", "y"]},
                                        "c": {"type": "boolean"}}}
    st = compile_batch("SELECT c, a, COUNT(*) FROM t WHERE a > 0 GROUP BY c, a", schema).statements[0]
    # attributes in schema order (a slowest), each key's labels in its place
    assert st.groups == tuple((c, a) for a in (1, 2) for c in (False, True))



def _strategy_factors(n: int) -> list:
    """Strategy factors whose Gram is sI + tJ, read from their type."""
    return [Identity(n), Weighted(Identity(n), 0.6), VStack([Weighted(Identity(n), 0.7), Weighted(Ones(1, n), 0.3)]),
            Weighted(Ones(1, n), 2.0), Ones(2, n)]


def _workload_factors(n: int, rng: np.random.Generator) -> list:
    rows = rng.integers(-1, 3, size=(3, n)).astype(float)
    rows[1] = 1.0  # a constant row: answerable from a total
    return [Identity(n), Total(n), IdentityTotal(n), Prefix(n), Dense(rows), Sparse(sp.csr_matrix(rows[:2])),
            Weighted(Ones(3, n), 2.0)]


def _dense_oracle(W: Workload, A: np.ndarray, a: int, b: int):
    """Trace error, query variances and the cross variances of terms a and b, from dense matrices."""
    X = np.linalg.pinv(A.T @ A, rcond=1e-12)
    P = X @ (A.T @ A)
    out = []
    for w, fs in W.terms:
        Q = w * Kron(fs)
        norms = (Q**2).sum(axis=1)
        unsupported = ((Q - Q @ P) ** 2).sum(axis=1) > 1e-8 * np.maximum(norms, 1.0)
        out.append(np.where(unsupported, np.inf, np.einsum("ij,ij->i", Q @ X, Q)))
    total = sum(float(v.sum()) for v in out)
    (wa, fa), (wb, fb) = W.terms[a], W.terms[b]
    cross = np.einsum("ij,ij->i", wa * Kron(fa) @ X, wb * Kron(fb))
    return total, out, cross


def Kron(factors):
    out = np.ones((1, 1))
    for f in factors:
        out = np.kron(out, f.dense())
    return out


def test_symmetric_factors_error_analysis_equals_the_dense_one():
    """Every trace, variance and cross variance through an sI + tJ strategy factor (identity,
    weighted identity, identity plus a total row, a total) equals the dense computation, the
    rows a total cannot answer included (infinite)."""
    from dpsql.hdmm.strategy import KronStrategy

    rng = np.random.default_rng(11)
    n, m = 6, 3
    other = Dense(rng.normal(size=(4, m)))
    for S in _strategy_factors(n):
        strategy = KronStrategy((S, other))
        A = np.kron(S.dense(), other.dense())
        fs = _workload_factors(n, rng)
        for f in fs:
            for g in (Identity(m), Dense(rng.normal(size=(2, m)))):
                W = Workload((n, m), [(1.5, (f, g)), (0.5, (Dense(rng.normal(size=f.shape)), g))])
                total, variances, cross = _dense_oracle(W, A, 0, 1)
                assert strategy.trace_error(W) == pytest.approx(total, rel=1e-9)
                for ours, theirs in zip(strategy.query_variances(W), variances):
                    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12)
                if np.isfinite(cross).all():
                    np.testing.assert_allclose(strategy.cross_variances(W, 0, 1), cross, rtol=1e-9, atol=1e-12)


def test_a_tract_key_error_analysis_forms_nothing_dense(monkeypatch):
    """85,000 tracts: the dense pseudo-inverse of the identity factor would take 58 GB (it was
    refused, so OPT_⊗ and OPT_+ were skipped above 5,181 values)."""
    from dpsql.hdmm.strategy import KronStrategy

    n = 85_000
    W = Workload((n, 2), [(1.0, (Identity(n), Identity(2))), (1.0, (Identity(n), Total(2))),
                          (1.0, (Total(n), Identity(2)))])
    _no_dense(monkeypatch)
    strategy = KronStrategy((Identity(n), Dense(np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]))))
    G = np.linalg.inv(np.array([[2.0, 1.0], [1.0, 2.0]]))  # the 2-value factor's Gram inverse
    expected = n * np.trace(G) + n * G.sum() + n * np.trace(G)
    assert strategy.trace_error(W) == pytest.approx(expected, rel=1e-12)
    assert strategy.query_variances(W)[2] == pytest.approx(n * np.diag(G), rel=1e-12)


def test_a_closed_form_factor_is_cached_implicitly(tmp_path):
    """OPT_⊗'s factor on a tract key, identity plus a total row: stored as its two blocks (it could
    not be stored: its dense form, 85,001 x 85,000, exceeds the limit), and read back equal."""
    from dpsql.hdmm.cache import unit_error
    from dpsql.hdmm.strategy import KronStrategy

    n = 85_000
    factor = VStack([Weighted(Identity(n), 0.8), Weighted(Ones(1, n), 0.2)])
    S = KronStrategy((factor, Identity(2)))
    W = Workload((n, 2), [(1.0, (Identity(n), Identity(2))), (1.0, (Total(n), Total(2)))])
    cache = StrategyCache(tmp_path)
    error = unit_error(W, S, 1)
    path = cache.put("k", S, error)
    assert path.stat().st_size < 10_000
    entry = cache.get("k")
    assert entry is not None and unit_error(W, entry.strategy, 1) == error
    back = entry.strategy.factors[0].blocks
    assert [(type(b.base), b.base.shape, b.weight) for b in back] == [(type(b.base), b.base.shape, b.weight)
                                                                      for b in factor.blocks]
