"""Large allowed domains answer in bounded time and memory, or are refused cleanly (issue 38, items 8 and 9).

A bucketing of a column of 500,000 values (``a // 5000``) asked numpy for 18.6 GiB (the Gram of
its sparse factor, formed to fingerprint and reduce the workload); ``WHERE a % 7 = 0`` on a
million values built a CASE of 285,715 runs and ran for minutes, then out of memory, after the
charge. Each answer here is checked against DuckDB's exact count at an ε whose noise is far below 0.5.
"""

from __future__ import annotations

import time

import duckdb
import numpy as np
import pytest
import scipy.sparse as sp

import dpsql
import dpsql.hdmm.optimize.selector as selector
from dpsql.errors import ResourceLimitError
from dpsql.hdmm.matrix import AllRange, Dense, Sparse
from dpsql.hdmm.optimize import select
from dpsql.hdmm.reduction import COMPARE_LIMIT, _column_labels, reduce_domain
from dpsql.hdmm.workload import Workload
from dpsql.privacy import Laplace
from dpsql.private.budget import Budget

EPSILON = 1e6  # Laplace noise of standard deviation 1.4e-6 on a count


def _db(hi: int) -> tuple[dpsql.Connection, duckdb.DuckDBPyConnection]:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t AS SELECT (i * 7919) % {hi + 1} AS a FROM range(3000) r(i)")
    schema = {"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": hi}}}
    db = dpsql.connect(con, schema=schema, budget=Budget(epsilon=10 * EPSILON), cache=False, progress=False,
                       source_of_noise=np.random.default_rng(0))
    return db, con


def _answers_exactly(sql: str, hi: int, seconds: float) -> None:
    """``sql`` answers within ``seconds``, its counts within 0.01 of DuckDB's, for exactly ε = EPSILON."""
    db, con = _db(hi)
    start = time.perf_counter()
    result = db.query(sql, epsilon=EPSILON)
    elapsed = time.perf_counter() - start
    got = result.relation.df()
    exact = con.execute(sql + (" ORDER BY 1" if "GROUP BY" in sql else "")).df()
    keys = list(exact.columns[:-1])
    counts = {tuple(row[:-1]): row[-1] for row in exact.itertuples(index=False)}
    answered = {tuple(row[:-1]): row[-1] for row in got[keys + ["n"]].itertuples(index=False)}
    assert set(counts) <= set(answered)  # every group the data holds, and the empty ones of the domain
    np.testing.assert_allclose([answered[k] for k in sorted(answered)], [counts.get(k, 0) for k in sorted(answered)],
                               atol=0.01)
    assert db.spent().epsilon == EPSILON
    assert elapsed < seconds, f"{sql!r} took {elapsed:.1f} s"


@pytest.mark.parametrize("width", [5000, 50000])
def test_a_bucketing_of_a_large_column_answers_without_forming_its_gram(width):
    """Was numpy's MemoryError (18.6 GiB for // 5000, 186 GiB for // 50000), nothing spent."""
    _answers_exactly(f"SELECT a // {width} AS k, COUNT(*) AS n FROM t GROUP BY k", 500_000, seconds=30)


def test_a_predicate_on_a_million_values_costs_seconds():
    """Was minutes, then out of memory after the charge: one CASE branch per run of 285,715."""
    _answers_exactly("SELECT COUNT(*) AS n FROM t WHERE a % 7 = 0", 999_999, seconds=30)


def test_a_hundred_groups_in_a_million_runs_are_counted_exactly():
    """Labels of two digits, looked up in a string of a million of them."""
    _answers_exactly("SELECT a % 100 AS r, COUNT(*) AS n FROM t GROUP BY r", 999_999, seconds=30)


def test_sparse_factors_reduce_as_their_dense_form_does():
    """Equal columns of a sparse factor get the labels np.unique gives its dense form, without densifying it."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        distinct = rng.integers(-2, 3, size=(6, rng.integers(1, 6))) * (rng.random((6, 1)) < 0.7)
        D = distinct[:, rng.integers(0, distinct.shape[1], size=40)].astype(float)
        expected = np.unique(D, axis=1, return_inverse=True)[1].reshape(-1)
        np.testing.assert_array_equal(_column_labels(Sparse(sp.csr_matrix(D))), expected)
    # a bucketing of 500,000 values into 101 groups: the workload reduces to them
    buckets = Sparse(sp.csr_matrix((np.ones(500_001), (np.arange(500_001) // 5000, np.arange(500_001)))))
    W = Workload.of(buckets)
    assert reduce_domain(W).workload.domain == (101,)
    assert len(W.fingerprint()) == 64


def test_an_operator_beyond_the_memory_limit_is_skipped_before_it_runs(monkeypatch):
    W = Workload.of(AllRange(64))  # OPT_0 estimated at 10 Grams of 64 x 64: 327,680 bytes
    ran = []
    for name, fn in list(selector.OPERATORS.items()):
        monkeypatch.setitem(selector.OPERATORS, name,
                            lambda *a, _fn=fn, _name=name, **k: ran.append(_name) or _fn(*a, **k))
    monkeypatch.setattr(selector, "MAX_CANDIDATE_BYTES", 300_000)
    sel = select(W, Laplace(1.0), restarts=1)
    assert "OPT_0" not in ran and ran  # the others ran
    assert "OPT_0" not in {c.operator for c in sel.candidates} and np.isfinite(sel.rmse)
    monkeypatch.setattr(selector, "MAX_CANDIDATE_BYTES", 0)
    with pytest.raises(ResourceLimitError, match=r"OPT_0: needs about 327,680 bytes of memory, more than the limit of 0"):
        select(W, Laplace(1.0), restarts=1)


def test_an_operator_that_runs_out_of_memory_is_a_refusal_not_a_memory_error(monkeypatch):
    def exhausted(*args, **kwargs):
        raise MemoryError("Unable to allocate 18.6 GiB")

    monkeypatch.setitem(selector.OPERATORS, "OPT_0", exhausted)
    W = Workload.of(AllRange(16))
    sel = select(W, Laplace(1.0), restarts=1)
    assert "OPT_0" not in {c.operator for c in sel.candidates} and np.isfinite(sel.rmse)
    with pytest.raises(ResourceLimitError, match="OPT_0: ran out of memory"):
        select(W, Laplace(1.0), operators=["OPT_0"], restarts=1)


def test_a_dense_predicate_beyond_the_compare_limit_still_reduces():
    """One row over more values than COMPARE_LIMIT (a condition coupling columns of 5,000,000 cells)
    was left unreduced: selection then ran on every value, and OPT_M answered one count with an
    expected RMSE of 1,112 instead of 1.41."""
    n = COMPARE_LIMIT + 1
    W = Workload.of(Dense((np.arange(n) % 7 == 0)[None, :].astype(float)))
    reduction = reduce_domain(W)
    assert reduction.workload.domain == (2,)
    np.testing.assert_array_equal(reduction.labels[0], (np.arange(n) % 7 == 0).astype(int))
