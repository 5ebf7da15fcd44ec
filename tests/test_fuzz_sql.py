"""Fuzzing the SQL front end with hypothesis (fixed seed, about 5,200 statements in all).

Every statement, valid or not, must end in a result or a ``dpsql.Error``:
never another exception, never a hang (each call is timed). A rejected
statement must leave the ledger exactly as it was; an accepted one spends
exactly what it asked for.
"""

from __future__ import annotations

import time

import duckdb
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import dpsql
from dpsql.engine import engine
from dpsql.hdmm.matrix import Identity
from dpsql.hdmm.optimize.selector import Selection
from dpsql.hdmm.strategy import KronStrategy
from dpsql.sql.compile import compile_batch

SCHEMA = {"table": "t", "columns": {
    "age": {"type": "integer", "min": 0, "max": 99, "bounds": [0, 99]},
    "sex": {"type": "categorical", "values": ["F", "M"], "nullable": True},
    "score": {"type": "numeric", "bins": [0, 10, 50, 100]},
    "ok": {"type": "boolean"},
    "city": {"type": "categorical", "values": ["Zürich", "東京", "o'brien", ""]}}}
COLUMNS = list(SCHEMA["columns"])

#: Seconds after which one statement counts as hung, compile and measurement included. A guard
#: against hangs, not a performance figure (those are in benchmarks/): most statements take
#: milliseconds and the largest texts the limits admit a few seconds, on an idle machine.
TIME_BOUND = 60.0

SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large, HealthCheck.filter_too_much])


def _identity_strategy(workload, noise, **_):
    """Measure the full 7,200-cell domain: a valid strategy for every workload, found instantly
    (HDMM's selection is data-independent and tested elsewhere; here it would dominate the time)."""
    return Selection(KronStrategy(tuple(Identity(n) for n in workload.domain)), 0.0)


@pytest.fixture(scope="module")
def db():
    patch = pytest.MonkeyPatch()
    patch.setattr(engine, "select", _identity_strategy)
    con = duckdb.connect()
    con.execute("""CREATE TABLE t AS SELECT i % 100 AS age, CASE i % 3 WHEN 0 THEN 'F' WHEN 1 THEN 'M' END AS sex,
                   (i * 7) % 100 + 0.5 AS score, i % 2 = 0 AS ok,
                   ['Zürich', '東京', 'o''brien', ''][i % 4 + 1] AS city FROM range(200) r(i)""")
    conn = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=1e12), cache=False)
    yield conn
    conn.close()
    patch.undo()


def run(db, sql: str) -> str:
    """Query; check the outcome and the ledger; return 'result' or the error class."""
    before = db.ledger.entries()
    start = time.perf_counter()
    try:
        result = db.query(sql, epsilon=0.5)
        outcome = "result"
    except dpsql.Error as e:
        outcome = type(e).__name__
    elapsed = time.perf_counter() - start
    assert elapsed < TIME_BOUND, f"{elapsed:.1f} s for {sql[:200]!r}"
    after = db.ledger.entries()
    if outcome == "result" and result.repeated:  # the same statement again: its release, nothing spent
        assert after == before
    elif outcome == "result" and result.release.queries:
        assert len(after) == len(before) + 1 and after[-1].cost.epsilon == 0.5
    elif outcome == "result":  # WHERE rules out the whole domain: no groups, or one over no rows; nothing spent
        assert after == before and len(result.df) <= 1
    else:
        assert after == before, f"{outcome} changed the ledger: {sql[:200]!r}"
    return outcome


# -- generators ----------------------------------------------------------------------

identifiers = st.one_of(st.sampled_from(COLUMNS + ["AGE", '"age"', "nope", "t.age", "x.age"]),
                        st.text(min_size=1, max_size=8))
literals = st.one_of(
    st.integers(-10**6, 10**6).map(str),
    st.integers(-10**400, 10**400).map(str),                    # huge integers
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(["NULL", "TRUE", "FALSE", "'F'", "'M'", "'Zürich'", "'東京'", "'o''brien'", "''",
                     "'nan'::DOUBLE", "'inf'::DOUBLE", "1e308", "1e309", "-0.0", "9" * 5000]),
    st.text(max_size=20).map(lambda s: "'" + s.replace("'", "''") + "'"),   # any unicode string
)
comparisons = st.sampled_from(["=", "<>", "<", "<=", ">", ">=", "!="])


@st.composite
def predicates(draw, depth: int = 0):
    kind = draw(st.integers(0, 6 if depth < 6 else 2))
    col = draw(st.sampled_from(COLUMNS))
    if kind == 0:
        return f"{col} {draw(comparisons)} {draw(literals)}"
    if kind == 1:
        return f"{col} IS {draw(st.sampled_from(['', 'NOT ']))}NULL"
    if kind == 2:
        lits = draw(st.lists(literals, min_size=1, max_size=4))
        return f"{col} {draw(st.sampled_from(['', 'NOT ']))}IN ({', '.join(lits)})"
    if kind == 3:
        return f"NOT ({draw(predicates(depth + 1))})"
    if kind == 4:
        return f"{col} BETWEEN {draw(literals)} AND {draw(literals)}"
    op = draw(st.sampled_from([" AND ", " OR "]))
    return "(" + op.join(draw(st.lists(predicates(depth + 1), min_size=2, max_size=3))) + ")"


@st.composite
def statements(draw):
    keys = draw(st.lists(st.sampled_from(COLUMNS), max_size=2, unique=True))
    agg = draw(st.sampled_from(["COUNT(*)", "COUNT(sex)", "SUM(age)", "AVG(age)", "AVG(score)", "SUM(city)", "MAX(age)",
                                "COUNT(DISTINCT age)"]))
    sql = f"SELECT {', '.join(keys + [agg + ' AS n'])} FROM {draw(st.sampled_from(['t', 't', 'other', 't AS x']))}"
    if draw(st.booleans()):
        sql += f" WHERE {draw(predicates())}"
    if keys:
        sql += f" GROUP BY {', '.join(keys)}"
        if draw(st.booleans()):
            sql += f" HAVING n > {draw(literals)}"
        if draw(st.booleans()):
            sql += f" ORDER BY n {draw(st.sampled_from(['ASC', 'DESC']))} LIMIT {draw(st.integers(0, 10**20))}"
    return sql


@st.composite
def mutated(draw):
    """A generated statement with a few characters deleted, inserted or replaced."""
    sql = list(draw(statements()))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(sql)))
        action = draw(st.sampled_from(["delete", "insert", "replace"]))
        c = draw(st.characters())
        if action == "delete" and i < len(sql):
            del sql[i]
        elif action == "insert":
            sql.insert(i, c)
        elif i < len(sql):
            sql[i] = c
    return "".join(sql)


def _check_compile_only(sql: str) -> None:
    start = time.perf_counter()
    try:
        compile_batch(sql, SCHEMA)
    except dpsql.Error:
        pass
    assert time.perf_counter() - start < TIME_BOUND


# -- the fuzz tests: 800 + 1,000 + 1,500 + about 1,800 (900 batches of 1 to 3) + 100 + 6, about
#    5,200 statements in all (derandomized: the same ones every run; twice as many, run before, took
#    two minutes of the suite's ten) ---------------------------------------------------------

@seed(20261123)
@settings(max_examples=800, **SETTINGS)
@given(sql=statements())
def test_generated_statements(db, sql):
    run(db, sql)


@seed(20261124)
@settings(max_examples=1000, **SETTINGS)
@given(sql=mutated())
def test_mutated_statements(db, sql):
    run(db, sql)


@seed(20261125)
@settings(max_examples=1500, **SETTINGS)
@given(sql=st.text(max_size=200))
def test_random_unicode_text(db, sql):
    run(db, sql)


@seed(20261126)
@settings(max_examples=900, **SETTINGS)
@given(sql=st.lists(statements(), min_size=1, max_size=3).map("; ".join))
def test_generated_batches_compile_or_fail_cleanly(sql):
    _check_compile_only(sql)


@seed(20261127)
@settings(max_examples=100, **SETTINGS)
@given(depth=st.integers(1, 3000), kind=st.sampled_from(["parens", "not", "and", "or", "case", "plus"]))
def test_deeply_nested(db, depth, kind):
    if kind == "parens":
        where = "(" * depth + "age > 1" + ")" * depth
    elif kind == "not":
        where = "NOT " * depth + "age > 1"
    elif kind in ("and", "or"):
        where = f" {kind.upper()} ".join(f"age <> {i % 100}" for i in range(depth))
    elif kind == "case":
        where = "CASE WHEN age > 1 THEN " * depth + "TRUE" + " ELSE FALSE END" * depth
    else:
        where = " + ".join(["age"] * depth) + " > 5"
    run(db, f"SELECT COUNT(*) FROM t WHERE {where}")


def test_the_fuzzers_reach_both_outcomes(db):
    """The generators are not vacuous: valid statements give results, others each kind of error."""
    outcomes = {run(db, sql) for sql in [
        "SELECT sex, COUNT(*) AS n FROM t WHERE age BETWEEN 10 AND 20 GROUP BY sex",
        "SELECT COUNT(*) FROM t WHERE city = '東京'",
        "SELECT COUNT(*) FROM other", "SELEC COUNT(*) FROM t", "SELECT MAX(age) FROM t",
        "SELECT COUNT(*) FROM t WHERE age = " + "9" * 5000]}
    assert "result" in outcomes and {"UnknownColumnError", "ParseError", "UnsupportedSQLError"} <= outcomes


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) FROM t WHERE " + " AND ".join(f"age <> {i % 100}" for i in range(20_000)),
    "SELECT COUNT(*) FROM t WHERE age IN (" + ", ".join(map(str, range(50_000))) + ")",
    "SELECT COUNT(*) FROM t WHERE city = '" + "é" * 1_000_000 + "'",
    "SELECT COUNT(*) FROM t;" * 20_000,
], ids=["20k-conjuncts", "50k-in-list", "1M-char-literal", "20k-statements"])
def test_huge_statements_end_quickly(db, sql):
    run(db, sql)
