"""The bounds of issue 38 items 8 and 9, measured: for each, the largest request answered and the
first refused, with the seconds each took, on a small in-memory table (3,000 rows).

* one column's domain (:data:`dpsql.schema.MAX_COLUMN_DOMAIN`): ``WHERE a % 7 = 0`` on an integer
  column of 0..999,999 is answered; a column of 0..1,000,000 is refused when the schema is loaded.
* the cells one condition couples (:data:`dpsql.sql.grid.MAX_ATTRIBUTE_SIZE`): ``WHERE
  (a * 1000 + b) % 7 = 0`` over 5,000 x 1,000 cells is answered; over 5,001 x 1,000 it is refused
  when the statement is compiled.
* one strategy operator's memory (:data:`dpsql.limits.MAX_CANDIDATE_BYTES`): OPT_0 alone (the only
  operator allowed) on 5,181 values is run; on 5,182 its estimate passes the limit and, with no
  other operator, the request is refused before any matrix is formed.

A refusal spends nothing; :func:`rows` checks the ledger after each.

    python benchmarks/limits_red_d.py
"""

from __future__ import annotations

import time

import duckdb

import dpsql
from dpsql.errors import Error
from dpsql.hdmm.matrix import Identity
from dpsql.hdmm.optimize import select
from dpsql.hdmm.workload import Workload
from dpsql.privacy import Laplace
from dpsql.private.budget import Budget

ROWS = 3000


def _query(columns: dict[str, int], sql: str) -> float:
    """Seconds to answer ``sql`` (ε = 1) over integer columns ``name: max`` (from 0); raises the
    refusal, after checking that it spent nothing."""
    con = duckdb.connect()
    made = ", ".join(f"(i * {7919 + 2 * k}) % {hi + 1} AS {name}" for k, (name, hi) in enumerate(columns.items()))
    con.execute(f"CREATE TABLE t AS SELECT {made} FROM range({ROWS}) r(i)")
    schema = {"table": "t", "columns": {name: {"type": "integer", "min": 0, "max": hi} for name, hi in columns.items()}}
    start = time.perf_counter()
    db = None
    try:
        db = dpsql.connect(con, schema=schema, budget=Budget(epsilon=10.0), cache=False, progress=False)
        db.query(sql, epsilon=1.0)
    except Error:
        assert db is None or db.spent().epsilon == 0.0
        raise
    return time.perf_counter() - start


def _opt0(n: int) -> float:
    start = time.perf_counter()
    select(Workload.of(Identity(n)), Laplace(1.0), operators=["OPT_0"], restarts=1, reduce=False, progress=False)
    return time.perf_counter() - start


def _refused(run, *args) -> float:
    start = time.perf_counter()
    try:
        run(*args)
    except Error:
        return time.perf_counter() - start
    raise AssertionError(f"{run.__name__}{args} was answered")


def rows() -> list[tuple[str, str, float, str, float]]:
    """(bound, largest request answered, its seconds, first request refused, its seconds) per bound."""
    predicate = "SELECT COUNT(*) AS n FROM t WHERE a % 7 = 0"
    coupled = "SELECT COUNT(*) AS n FROM t WHERE (a * 1000 + b) % 7 = 0"
    return [
        ("one column's domain (MAX_COLUMN_DOMAIN = 1,000,000 values)",
         "WHERE a % 7 = 0, a in 0..999,999", _query({"a": 999_999}, predicate),
         "a in 0..1,000,000 (schema refused)", _refused(_query, {"a": 1_000_000}, predicate)),
        ("cells one condition couples (MAX_ATTRIBUTE_SIZE = 5,000,000)",
         "WHERE (a*1000+b) % 7 = 0, 5,000 x 1,000 cells", _query({"a": 4999, "b": 999}, coupled),
         "5,001 x 1,000 cells", _refused(_query, {"a": 5000, "b": 999}, coupled)),
        ("one strategy operator's memory (MAX_CANDIDATE_BYTES = 2 GiB)",
         "OPT_0 alone on 5,181 values", _opt0(5181),
         "OPT_0 alone on 5,182 values", _refused(_opt0, 5182)),
    ]


if __name__ == "__main__":
    for bound, ok, ok_s, no, no_s in rows():
        print(f"{bound}\n  answered: {ok} ({ok_s:.2f} s)\n  refused:  {no} ({no_s:.3f} s)")
