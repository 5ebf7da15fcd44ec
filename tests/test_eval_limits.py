"""Bounded evaluation: expressions on the domain (compile time) and on the answers (after noise).

Issue 38, items 2 and 10. Post-processing runs after the charge, so what could make it run out of
memory or time (a function that builds a value from a noisy number) is refused while compiling,
and it runs under the sandbox's time and memory limits. Compile-time evaluation on the public
domain has the same limits; passing one is a refusal that spends nothing.
"""

from __future__ import annotations

import time

import duckdb
import numpy as np
import pytest

import dpsql
from dpsql import limits
from dpsql.errors import ResourceLimitError, SQLError, UnsupportedSQLError
from dpsql.private.budget import Budget
from dpsql.sql import compile_batch, sandbox
from dpsql.sql.postprocess import postprocess

EDUCATION = [f"Education-{i:02d}" for i in range(16)]
COUNTRY = [f"Country-{i:02d}" for i in range(42)]
SCHEMA = {"table": "adult", "columns": {
    "sex": {"type": "categorical", "values": ["Female", "Male"]},
    "education": {"type": "categorical", "values": EDUCATION},
    "native_country": {"type": "categorical", "values": COUNTRY},
    "age": {"type": "integer", "min": 0, "max": 99}}}


def _db() -> dpsql.Connection:
    """A connection over 200 rows with seeded noise and a budget of epsilon 10."""
    con = duckdb.connect()
    con.execute("CREATE TABLE adult AS SELECT CASE WHEN i % 3 = 0 THEN 'Female' ELSE 'Male' END AS sex, "
                "'Education-' || lpad((i % 16)::VARCHAR, 2, '0') AS education, "
                "'Country-' || lpad((i % 42)::VARCHAR, 2, '0') AS native_country, 20 + i % 50 AS age "
                "FROM range(200) r(i)")
    return dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=10.0), cache=False, progress=False,
                         source_of_noise=np.random.default_rng(0))


# -- item 2: post-processing cannot build data from a noisy number ------------------------------

def test_having_that_builds_a_list_from_an_answer_is_refused_before_the_charge():
    """The issue's probe: ``len(range(n * 100000))`` is cheap on the zero answers the compiler
    tried, and charged then took 22.8 GB on the released ones. Now refused; the ledger is untouched."""
    db = _db()
    with pytest.raises(UnsupportedSQLError, match=r"range\(\) can build a value larger than its arguments") as info:
        db.sql("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex HAVING len(range(n::BIGINT * 100000)) > 0",
               epsilon=1.0)
    assert info.value.construct == "post-processing"
    assert db.ledger.entries() == [] and db.spent().epsilon == 0.0


def test_bounded_post_processing_still_answers():
    db = _db()
    res = db.sql("SELECT sex, COUNT(*) AS n, upper(COUNT(*)::VARCHAR) || '!' AS loud, round(abs(COUNT(*)) / 2, 1) AS half FROM adult "
                 "GROUP BY sex HAVING len(lower(sex)) > 0 AND n > -1000 ORDER BY length(sex || 'x') DESC",
                 epsilon=1.0)
    df = res.df()
    assert df["sex"].tolist() == ["Female", "Male"]
    assert df["loud"].tolist() == [f"{n!r}!".upper() for n in df["n"]]
    assert np.allclose(df["half"], np.round(np.abs(df["n"]) / 2, 1))
    assert db.spent().epsilon == pytest.approx(1.0)


@pytest.mark.parametrize("clause, function", [
    ("SELECT sex, COUNT(*) AS n, repeat('ab', COUNT(*)::BIGINT) AS r FROM adult GROUP BY sex", "repeat"),
    ("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex ORDER BY lpad(sex, n::INTEGER, 'x')", "lpad"),
    ("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex HAVING rpad(sex, n::INTEGER, 'x') <> ''", "rpad"),
    ("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex HAVING len(generate_series(1, n::BIGINT)) > 0",
     "generate_series"),
    ("SELECT sex, COUNT(*) AS n, len(list_resize([1], COUNT(*)::BIGINT)) AS k FROM adult GROUP BY sex", "list_resize"),
    ("SELECT sex, COUNT(*) AS n, printf('%*d', COUNT(*)::INTEGER, 1) AS p FROM adult GROUP BY sex", "printf"),
    ("SELECT sex, COUNT(*) AS n, bar(COUNT(*), 0, 1, COUNT(*)) AS b FROM adult GROUP BY sex", "bar"),
    ("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex HAVING replace(sex, 'a', sex || sex) <> ''", "replace"),
])
def test_functions_that_build_data_are_refused_in_post_processing(clause, function):
    """Each compiles on the old code (zero answers make them cheap or harmless)."""
    with pytest.raises(UnsupportedSQLError, match=rf"{function}\(\) can build a value larger"):
        compile_batch(clause, SCHEMA)


def test_post_processing_stops_at_the_time_limit(monkeypatch):
    """A slow branch that zero answers skip runs after the release: it is interrupted at the limit
    and raised as a dpsql error (EvaluationLimitError), not left to run."""
    pad = "x" * 20000
    batch = compile_batch(f"SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex HAVING CASE WHEN n > 0.5 THEN "
                          f"levenshtein('{pad}' || sex, '{pad.replace('x', 'y')}' || sex) > 0 ELSE TRUE END", SCHEMA)
    monkeypatch.setattr(limits, "MAX_EVAL_SECONDS", 0.2)
    start = time.perf_counter()
    with pytest.raises(limits.EvaluationLimitError, match="took more than the limit of 0.2 seconds") as info:
        postprocess(batch, np.array([1000.0, 2000.0]))
    assert time.perf_counter() - start < 5
    assert isinstance(info.value, ResourceLimitError) and info.value.construct == "post-processing"


def test_the_sandbox_runs_one_thread_under_the_memory_limit():
    con = sandbox.cursor()
    try:
        threads, memory = con.execute("SELECT current_setting('threads'), current_setting('memory_limit')").fetchone()
    finally:
        con.close()
    assert threads == 1
    assert memory == f"{limits.MAX_EVAL_MEMORY_MIB / 1024:.1f} GiB"


# -- item 10: compile-time evaluation on the domain is bounded ---------------------------------

@pytest.mark.parametrize("where", [
    "levenshtein(repeat(education, 3000), repeat(native_country, 3000)) > 0",   # ran for minutes
    "repeat(education, 100000000) <> ''",                                        # asked for 14 GB
])
def test_domain_expressions_that_build_large_values_are_refused_quickly(where):
    db = _db()
    start = time.perf_counter()
    with pytest.raises(UnsupportedSQLError, match=r"repeat\(\) can build a value larger than its arguments") as info:
        db.sql(f"SELECT COUNT(*) FROM adult WHERE {where}", epsilon=1.0)
    assert time.perf_counter() - start < 5
    assert info.value.construct == "function REPEAT" and info.value.line == 1
    assert db.ledger.entries() == []


def test_domain_evaluation_stops_at_the_time_limit_and_spends_nothing(monkeypatch):
    """Allowed functions on long strings: slow, not large. Interrupted at the limit, refused."""
    db = _db()
    monkeypatch.setattr(limits, "MAX_EVAL_SECONDS", 0.2)
    pad = "x" * 1500
    where = f"levenshtein(education || '{pad}', native_country || '{pad.replace('x', 'y')}') > 0"
    start = time.perf_counter()
    with pytest.raises(limits.EvaluationLimitError, match="on the declared domain took more than the limit") as info:
        db.sql(f"SELECT COUNT(*) FROM adult WHERE {where}", epsilon=1.0)
    assert time.perf_counter() - start < 5
    assert isinstance(info.value, ResourceLimitError) and isinstance(info.value, SQLError)
    assert (info.value.line, info.value.column) == (1, len("SELECT COUNT(*) FROM adult WHERE ") + 1)
    assert db.ledger.entries() == [] and db.spent().epsilon == 0.0


def test_bounded_domain_expressions_still_compile():
    db = _db()
    res = db.sql("SELECT COUNT(*) AS n FROM adult WHERE lower(education) || '-' || substr(native_country, 9) "
                 "LIKE '%-0_' AND levenshtein(education, native_country) > 3", epsilon=1.0)
    assert len(res.df()) == 1 and db.spent().epsilon == pytest.approx(1.0)


def test_the_allow_list_names_real_functions_and_is_not_everything():
    """LINEAR lists DuckDB functions (a misspelling would silently allow nothing), and the
    builders the issue names are outside the allow-list."""
    con = sandbox.cursor()
    try:
        names = {r[0] for r in con.execute("SELECT function_name FROM duckdb_functions()").fetchall()}
    finally:
        con.close()
    assert sandbox.LINEAR <= names
    allowed = sandbox.bounded_names()
    for builder in ["range", "generate_series", "repeat", "lpad", "rpad", "list_resize", "array_resize", "unnest",
                    "format", "printf", "to_base", "bar", "replace", "regexp_replace", "error", "sleep_ms"]:
        assert builder not in allowed
    for plain in ["abs", "round", "length", "lower", "||", "levenshtein", "date_trunc", "+", "*", "//"]:
        assert plain in allowed



@pytest.mark.parametrize("clause", ["HAVING len(repeat('y', 2000000000)) > 0",
                                    "HAVING COUNT(*) > len(range(2000000000))"])
def test_a_constant_that_builds_a_huge_value_is_refused_quickly_before_the_charge(clause):
    """Constants are evaluated when compiling (DuckDB must be able to evaluate them), and with the
    same allow-list and limits as the rest: a constant building gigabytes is refused at once."""
    db = _db()
    start = time.perf_counter()
    with pytest.raises(SQLError, match="larger than its arguments"):
        db.query(f"SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex {clause}", epsilon=1.0)
    assert time.perf_counter() - start < 5.0
    assert db.ledger.entries() == []
