"""Fuzzing the public surface (not only SQL): random parameter values and types.

``db.query``, ``db.batch``, ``db.sql`` and the ``dpsql`` command line are called with random
values of random types for every parameter. Three properties hold for every call:

* it returns a result or raises a ``dpsql.Error`` (the CLI: exits 0, or 2 with one line), never
  another exception;
* when it raises, the ledger is exactly as it was;
* nothing it returns exposes a DuckDB connection that can read the private table.
"""

from __future__ import annotations

import math

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpsql
from dpsql.api.cli import main as cli_main
from dpsql.engine import engine
from dpsql.hdmm.matrix import Identity
from dpsql.hdmm.optimize.selector import Selection
from dpsql.hdmm.strategy import KronStrategy

SCHEMA = {"table": "t", "columns": {
    "age": {"type": "integer", "min": 0, "max": 9, "bounds": [0, 9]},
    "sex": {"type": "categorical", "values": ["F", "M"]}}}
GOOD_SQL = "SELECT sex, COUNT(*) AS n FROM t GROUP BY sex"

SETTINGS = dict(deadline=None, derandomize=True, database=None, max_examples=150,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

#: Any value of any type a caller might pass.
ANYTHING = st.one_of(
    st.none(), st.booleans(), st.integers(-10**20, 10**20), st.sampled_from([0, 1, -1, 2**63, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([1e-320, 5e-14, 1e-7, 1e-6, 0.5, 1e300]),
    st.text(max_size=8), st.sampled_from(["laplace", "gaussian", "LAPLACE", "", "0.5"]),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
SPEND = st.one_of(st.none(), st.sampled_from([0.5, 1.0, 1e-3]), ANYTHING)


def _identity_strategy(workload, noise, **_):
    """Measure the full domain: valid for every workload and instant (selection is tested elsewhere)."""
    return Selection(KronStrategy(tuple(Identity(n) for n in workload.domain)), 0.0)


@pytest.fixture(scope="module")
def owner():
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i % 10 AS age, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END AS sex "
                "FROM range(300) r(i)")
    return con


@pytest.fixture(scope="module", params=[dpsql.Budget(epsilon=1e6, delta=1e-3), dpsql.Budget(epsilon=1e6),
                                        dpsql.Budget(rho=1e6)], ids=["approx", "pure", "zcdp"])
def db(request, owner):
    patch = pytest.MonkeyPatch()
    patch.setattr(engine, "select", _identity_strategy)
    conn = dpsql.connect(owner, schema=SCHEMA, budget=request.param, cache=False)
    yield conn
    conn.close()
    patch.undo()


def _can_read_private(obj) -> bool:
    """Whether ``obj`` is, or is a relation on, a DuckDB connection that can see table ``t``."""
    try:
        if isinstance(obj, duckdb.DuckDBPyRelation):
            obj.query("r", "SELECT COUNT(*) FROM t").fetchall()
        elif isinstance(obj, duckdb.DuckDBPyConnection):
            obj.sql("SELECT COUNT(*) FROM t").fetchall()
        else:
            return False
    except duckdb.Error:
        return False
    return True


def _check_call(db, call):
    before = db.ledger.entries()
    try:
        out = call()
    except dpsql.Error:
        assert db.ledger.entries() == before
        return
    results = out if isinstance(out, list) else [out]
    for r in results:
        handed = [r] if isinstance(r, duckdb.DuckDBPyRelation) else [r.relation, getattr(r, "_released", None)]
        assert not any(_can_read_private(h) for h in handed)
    assert len(db.ledger.entries()) == len(before) + 1


@given(epsilon=SPEND, delta=SPEND, rho=SPEND, noise=st.one_of(st.none(), ANYTHING),
       nonnegative=st.one_of(st.booleans(), ANYTHING), confidence=st.one_of(st.just(0.95), ANYTHING))
@settings(**SETTINGS)
def test_query_with_random_parameters(db, epsilon, delta, rho, noise, nonnegative, confidence):
    _check_call(db, lambda: db.query(GOOD_SQL, epsilon=epsilon, delta=delta, rho=rho, noise=noise,
                                     nonnegative=nonnegative, confidence=confidence))


@given(statements=st.one_of(ANYTHING, st.lists(st.one_of(st.just(GOOD_SQL), ANYTHING), max_size=3)),
       epsilon=SPEND)
@settings(**SETTINGS)
def test_batch_with_random_statements(db, statements, epsilon):
    _check_call(db, lambda: db.batch(statements, epsilon=epsilon, rho=epsilon if db.budget.rho else None)
                if db.budget.rho is None else db.batch(statements, rho=epsilon))


@given(sql=st.one_of(ANYTHING, st.just(GOOD_SQL)), kwargs=st.dictionaries(
    st.sampled_from(["epsilon", "delta", "rho", "noise", "confidence", "nonnegative"]), ANYTHING, max_size=3))
@settings(**SETTINGS)
def test_sql_with_random_arguments(db, sql, kwargs):
    _check_call(db, lambda: db.sql(sql, **kwargs))


ARGS = st.lists(st.sampled_from(["--epsilon", "--delta", "--rho", "--noise", "--out", "--budget-epsilon",
                                 "--budget-rho", "--budget-delta", "--format", "--table", "0.5", "-1", "nan",
                                 "inf", "1e-320", "abc", "laplace", "x.csv", "/nonexistent/dir/x.csv",
                                 "/proc/x.parquet", ""]), max_size=6)


@given(args=ARGS)
@settings(**{**SETTINGS, "max_examples": 60})
def test_cli_with_random_arguments(tmp_path_factory, owner, args):
    tmp = tmp_path_factory.mktemp("cli")
    data = tmp / "t.parquet"
    owner.sql("SELECT * FROM t").write_parquet(str(data))
    schema = tmp / "s.json"
    schema.write_text(__import__("json").dumps(SCHEMA))
    ledger = tmp / "l.ledger"
    base = ["query", GOOD_SQL, "--data", str(data), "--schema", str(schema), "--ledger", str(ledger),
            "--budget-epsilon", "10"]
    try:
        status = cli_main(base + args)
    except SystemExit as e:  # argparse's own usage errors exit 2 before anything is opened
        status = e.code
    assert status in (0, 1, 2)
    if status != 0 and ledger.exists():
        with dpsql.Ledger(ledger) as led:
            assert led.entries() == []
    assert not math.isnan(float(status))
