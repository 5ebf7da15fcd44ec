"""Bounds on evaluating expressions (issue 38, items 2 and 10), measured on a small in-memory table.

:func:`rows` gives, for each bound, the largest request answered and the first refused, with the
seconds each took through ``db.sql`` (compile, and for an answered one the spend and release).
The time bounds are found by doubling the length of a string that ``levenshtein`` compares, so the
work grows four times per step, until :data:`dpsql.limits.MAX_EVAL_SECONDS` refuses it; the
allow-list bounds (:func:`dpsql.sql.sandbox.check_bounded`) refuse by function, whatever the size.

Run ``python benchmarks/limits_red-b.py`` to print them (about a minute on one core).
"""

from __future__ import annotations

import time
from typing import Callable

import duckdb

import dpsql
from dpsql.errors import Error, ResourceLimitError
from dpsql.private.budget import Budget

EDUCATION = [f"Education-{i:02d}" for i in range(16)]
COUNTRY = [f"Country-{i:02d}" for i in range(42)]
SCHEMA = {"table": "adult", "columns": {
    "sex": {"type": "categorical", "values": ["Female", "Male"]},
    "education": {"type": "categorical", "values": EDUCATION},
    "native_country": {"type": "categorical", "values": COUNTRY}}}


def _db() -> dpsql.Connection:
    con = duckdb.connect()
    con.execute("CREATE TABLE adult AS SELECT CASE WHEN i % 3 = 0 THEN 'Female' ELSE 'Male' END AS sex, "
                "'Education-' || lpad((i % 16)::VARCHAR, 2, '0') AS education, "
                "'Country-' || lpad((i % 42)::VARCHAR, 2, '0') AS native_country FROM range(1000) r(i)")
    return dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=1e6), cache=False, progress=False)


def _timed(db: dpsql.Connection, sql: str) -> tuple[bool, float]:
    """Whether ``sql`` was answered (False: refused with a dpsql error), and its seconds."""
    start = time.perf_counter()
    try:
        db.sql(sql, epsilon=1.0).df()
        answered = True
    except Error:
        answered = False
    return answered, time.perf_counter() - start


def _doubling(name: str, db: dpsql.Connection, sql: Callable[[int], str], describe: Callable[[int], str],
              start: int = 250) -> tuple[str, str, float, str, float]:
    """The bound ``name``: lengths ``start``, twice that, ... until ``sql(length)`` is refused."""
    length, last = start, ("(none)", 0.0)
    while True:
        answered, seconds = _timed(db, sql(length))
        if not answered:
            return name, last[0], last[1], describe(length), seconds
        last = (describe(length), seconds)
        length *= 2


def _pad(length: int, char: str) -> str:
    return "'" + char * length + "'"


def rows() -> list[tuple[str, str, float, str, float]]:
    """(bound, largest request answered, its seconds, first request refused, its seconds) per bound."""
    db = _db()
    out = [
        _doubling("domain evaluation time (MAX_EVAL_SECONDS)", db,
                  lambda n: f"SELECT COUNT(*) FROM adult WHERE levenshtein(education || {_pad(n, 'x')}, "
                            f"native_country || {_pad(n, 'y')}) > 0",
                  lambda n: f"WHERE levenshtein(education || <{n:,} chars>, native_country || <{n:,} chars>) > 0 "
                            "(672 cells)"),
        _doubling("post-processing time (MAX_EVAL_SECONDS)", db,
                  lambda n: f"SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex HAVING "
                            f"levenshtein({_pad(n, 'x')} || sex, {_pad(n, 'y')} || sex) > n",
                  lambda n: f"HAVING levenshtein(<{n:,} chars> || sex, <{n:,} chars> || sex) > n (2 groups)",
                  start=2000),
    ]
    for name, answered, refused in [
        ("domain functions (allow-list)", "WHERE levenshtein(education, native_country) > 3",
         "WHERE repeat(education, 100000000) <> ''"),
        ("post-processing functions (allow-list)", "HAVING len(lower(sex)) + n > 0",
         "HAVING len(range(n::BIGINT * 100000)) > 0"),
    ]:
        timings = []
        for clause in (answered, refused):
            sql = (f"SELECT COUNT(*) FROM adult {clause}" if clause.startswith("WHERE")
                   else f"SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex {clause}")
            timings.append(_timed(db, sql))
        assert timings[0][0] and not timings[1][0], (name, timings)
        out.append((name, answered, timings[0][1], refused, timings[1][1]))
    return out


if __name__ == "__main__":
    assert issubclass(ResourceLimitError, Error)
    for bound, answered, t_answered, refused, t_refused in rows():
        print(f"{bound}\n  answered: {answered} in {t_answered:.2f} s\n  refused:  {refused} in {t_refused:.2f} s")
