"""How much of the SQL analysts write does dpsql answer?

Three suites of statements, each run through ``db.query`` on a made-up table
(no real person) with a large budget:

* ``smartnoise``: single-table aggregates in SmartNoise SQL's style (its
  documentation's PUMS queries): expressions, CASE, HAVING, ORDER BY, LIMIT,
  variances, quantiles, string predicates, keys without aggregates;
* ``bigquery``: statements in BigQuery's differential-privacy style
  (``SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(...)``);
* ``census``: the 2010 Census SF1 tabulations of ``examples/sf1``;
* ``subqueries``: CTEs and FROM-subqueries as analysts write them: row-by-row
  filters, derived keys and renames, and outer queries over aggregates;
* ``tsql``: SmartNoise-style statements in T-SQL, SmartNoise's own validation
  dialect (``SELECT TOP 5 ...``, ``[name]``, ``ISNULL``, ``IIF``, ``STDEV``),
  read with ``dialect="tsql"``;
* ``tabulations``: GROUPING SETS, ROLLUP, CUBE, windows over aggregates, and
  answers that must stay in range;
* ``windows``: windows over aggregates as analysts use them: ranks, top-N per
  group (``QUALIFY``, or an outer ``WHERE rn <= 2``), running and partitioned
  sums, shares of the total, ``LAG``, and SUM/AVG of a public lookup column;
* ``dialects``: statements in PostgreSQL, BigQuery's plain SQL and Spark SQL
  (``COUNTIF``, ``SAFE_DIVIDE``, ``count(1)``, ``::``, integer division,
  Spark's ``GROUP BY ... GROUPING SETS``), each read with its ``dialect=``.

Each statement is ``answered``, ``refused`` (a ``dpsql.Error``, whose class
and reason are printed: a refusal names the construct it cannot answer) or a
``crash`` (any other exception, a bug). The script also times compiling the
first 50 answerable statements as one batch (target: under 1 s).

    python benchmarks/sql_coverage.py
    python benchmarks/sql_coverage.py --verbose   # every refusal's reason
    python benchmarks/sql_coverage.py --suite tsql --suite subqueries   # some suites only
    python benchmarks/sql_coverage.py --verbose --jobs 4   # the statements in 4 processes
"""

from __future__ import annotations

import argparse
import glob
import multiprocessing
import os
import sys
import time

import duckdb
import numpy as np
import pandas as pd

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

from census import load_persons  # noqa: E402

import dpsql  # noqa: E402
from dpsql.schema import load_schema  # noqa: E402
from dpsql.sql.parse import parse_statements  # noqa: E402

PUMS_SCHEMA = {
    "table": "pums",
    "privacy_unit": {"column": "id", "max_rows": 1},  # a person per row, named for BigQuery's privacy_unit_column
    "columns": {
        "age": {"type": "integer", "min": 0, "max": 99},
        "sex": {"type": "categorical", "values": ["F", "M"]},
        "educ": {"type": "integer", "min": 1, "max": 16},
        "race": {"type": "categorical", "values": [1, 2, 3, 4, 5, 6]},
        "income": {"type": "integer", "min": 0, "max": 500},
        "married": {"type": "boolean"},
        "state": {"type": "categorical", "values": ["CA", "NY", "TX", "WA", "MA"]},
        "name": {"type": "categorical", "values": ["Bach", "Bachelor", "Mozart", "Brahms"]},
    },
    "public_tables": {"regions": {"columns": ["state", "region"],
                                  "rows": [["CA", "West"], ["WA", "West"], ["NY", "East"], ["MA", "East"],
                                           ["TX", "South"]]},
                      "populations": {"columns": ["state", "millions"],  # a public numeric lookup column
                                      "rows": [["CA", 39], ["WA", 8], ["NY", 20], ["MA", 7], ["TX", 30]]}},
}

SMARTNOISE = [
    "SELECT COUNT(*) AS n FROM pums",
    "SELECT sex, COUNT(*) AS n FROM pums GROUP BY sex",
    "SELECT sex, AVG(age) AS age, AVG(income) AS income FROM pums GROUP BY sex",
    "SELECT married, SUM(income) AS total FROM pums GROUP BY married ORDER BY married",
    "SELECT educ, COUNT(*) AS n FROM pums WHERE age > 40 GROUP BY educ HAVING COUNT(*) > 10 ORDER BY n DESC LIMIT 5",
    "SELECT SUM(age) AS s FROM pums",
    "SELECT SUM(age) * 1 AS s FROM pums",
    "SELECT (SUM(age)) AS s FROM pums",
    "SELECT POWER(AVG(age), 2) AS sq FROM pums",
    "SELECT SUM(income) / COUNT(*) AS mean FROM pums",
    "SELECT 3 AS three, COUNT(*) AS n FROM pums",
    "SELECT VAR(age) AS v FROM pums",
    "SELECT STDDEV(income) AS sd, VAR_POP(income) AS v FROM pums",
    "SELECT MEDIAN(age) AS m FROM pums",
    "SELECT PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY income) AS p90 FROM pums",
    "SELECT MIN(age) AS youngest FROM pums",
    "SELECT COUNT(*) AS n FROM pums WHERE name LIKE 'Bach%'",
    "SELECT COUNT(*) AS n FROM pums WHERE lower(sex) = 'f'",
    "SELECT COUNT(*) FILTER (WHERE age > 65) AS seniors, COUNT(*) AS n FROM pums",
    "SELECT SUM(CASE WHEN married THEN 1 ELSE 0 END) AS married FROM pums",
    "SELECT CASE WHEN age < 18 THEN 'minor' WHEN age < 65 THEN 'adult' ELSE 'senior' END AS band, COUNT(*) AS n "
    "FROM pums GROUP BY band",
    "SELECT sex, race, COUNT(*) AS n FROM pums GROUP BY ALL",
    "SELECT educ FROM pums GROUP BY educ",
    "SELECT DISTINCT state FROM pums",
    "SELECT state, COUNT(*) AS n FROM pums WHERE state IN ('CA', 'NY') GROUP BY state",
    "SELECT age // 10 AS decade, COUNT(*) AS n FROM pums GROUP BY decade",
    "SELECT COUNT(DISTINCT educ) AS n FROM pums",
    "SELECT * FROM pums",
    "SELECT r.region, COUNT(*) AS n, AVG(p.income) AS income FROM pums p JOIN regions r ON p.state = r.state "
    "GROUP BY r.region ORDER BY n DESC",
]

BIGQUERY = [
    "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 1, delta = 1e-5) COUNT(*) AS n FROM pums",
    "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 1, delta = 1e-5) state, COUNT(*) AS n FROM pums GROUP BY state",
    "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 1, delta = 1e-5) state, AVG(income) AS avg_income "
    "FROM pums GROUP BY state",
    "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 0.5, delta = 1e-6) sex, SUM(income) AS total FROM pums "
    "GROUP BY sex",
    "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 1, delta = 1e-5) married, VAR_POP(age) AS v FROM pums "
    "GROUP BY married",
    "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 1, delta = 1e-5) state, "
    "PERCENTILE_CONT(income, 0.5) AS median_income FROM pums GROUP BY state",
    "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 1, delta = 1e-5, privacy_unit_column = id) COUNT(*) AS n "
    "FROM pums",
    "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 1, delta = 1e-5) COUNT(*) AS n FROM pums WHERE age BETWEEN 18 "
    "AND 64 AND married",
    "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 1, delta = 1e-5) educ, COUNT(*) AS n FROM pums GROUP BY educ "
    "ORDER BY educ",
    "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 1, delta = 1e-5) sex, STDDEV_POP(income) AS sd FROM pums "
    "GROUP BY sex",
]

#: Whole tabulations (issue 40): every margin in one statement, shares and ranks over the released groups,
#: and answers that must stay in range (NULL where too few rows, clamped to the bounds).
TABULATIONS = [
    "SELECT sex, state, COUNT(*) AS n, GROUPING(sex, state) AS margin FROM pums GROUP BY ROLLUP (sex, state)",
    "SELECT sex, married, AVG(income) AS income FROM pums GROUP BY CUBE (sex, married) ORDER BY ALL",
    "SELECT state, race, COUNT(*) AS n FROM pums GROUP BY GROUPING SETS ((state, race), (state), (race), ())",
    "SELECT sex, state, COUNT(*) AS n FROM pums GROUP BY sex, state WITH ROLLUP",
    "SELECT state, COUNT(*) AS n, ROUND(100.0 * COUNT(*) / SUM(COUNT(*)) OVER (), 1) AS pct FROM pums "
    "GROUP BY state ORDER BY pct DESC",
    "SELECT sex, state, COUNT(*) AS n, rank() OVER (PARTITION BY sex ORDER BY COUNT(*) DESC) AS place FROM pums "
    "GROUP BY sex, state",
    "SELECT educ, AVG(income) AS income, row_number() OVER (ORDER BY AVG(income) DESC) AS rn FROM pums GROUP BY educ",
    "SELECT state, SUM(income) AS total, SUM(SUM(income)) OVER (ORDER BY state ROWS BETWEEN UNBOUNDED PRECEDING "
    "AND CURRENT ROW) AS running FROM pums GROUP BY state",
    "SELECT age, STDDEV_SAMP(income) AS sd, AVG(income) AS mean FROM pums WHERE age > 95 GROUP BY age",
]


SUBQUERIES = [
    "WITH adults AS (SELECT * FROM pums WHERE age >= 18) SELECT sex, COUNT(*) AS n FROM adults GROUP BY sex",
    "WITH banded AS (SELECT CASE WHEN age < 30 THEN 'young' WHEN age < 60 THEN 'middle' ELSE 'old' END AS band, "
    "income FROM pums) SELECT band, AVG(income) AS income FROM banded GROUP BY band",
    "SELECT st, COUNT(*) AS n FROM (SELECT state AS st, married FROM pums WHERE income > 100) AS p WHERE married "
    "GROUP BY st",
    "WITH a AS (SELECT age, sex, educ FROM pums WHERE educ >= 12), b AS (SELECT age // 10 AS decade, sex FROM a) "
    "SELECT decade, sex, COUNT(*) AS n FROM b GROUP BY decade, sex",
    "WITH t AS (SELECT educ, COUNT(*) AS n FROM pums GROUP BY educ) SELECT educ, n FROM t WHERE n > 1000 "
    "ORDER BY n DESC",
    "SELECT state, total / n AS mean FROM (SELECT state, SUM(income) AS total, COUNT(*) AS n FROM pums "
    "GROUP BY state) ORDER BY mean DESC LIMIT 3",
    "SELECT * FROM (SELECT race, COUNT(*) AS n FROM pums GROUP BY race) WHERE n BETWEEN 1000 AND 5000",
    "WITH m AS (SELECT state, COUNT(*) AS n FROM pums WHERE married GROUP BY state), "
    "a AS (SELECT state, COUNT(*) AS n FROM pums GROUP BY state) "
    "SELECT a.state, m.n * 100.0 / a.n AS pct_married FROM a JOIN m ON a.state = m.state ORDER BY pct_married DESC",
    "SELECT AVG(n) AS mean FROM (SELECT race, COUNT(*) AS n FROM pums GROUP BY race)",
    "SELECT COUNT(*) AS n FROM (SELECT DISTINCT state FROM pums)",
    "WITH j AS (SELECT p.sex, r.region FROM pums p JOIN regions r ON p.state = r.state) "
    "SELECT region, COUNT(*) AS n FROM j GROUP BY region",
    "SELECT band, COUNT(*) AS n FROM (SELECT CASE WHEN income < 100 THEN 'low' ELSE 'high' END AS band, "
    "COALESCE(name, 'none') AS nm FROM pums WHERE upper(name) LIKE 'B%') GROUP BY band",
]

WINDOWS = [
    "SELECT state, COUNT(*) AS n, rank() OVER (ORDER BY COUNT(*) DESC) AS r FROM pums GROUP BY state QUALIFY r <= 3",
    "WITH r AS (SELECT sex, race, COUNT(*) AS n, row_number() OVER (PARTITION BY sex ORDER BY COUNT(*) DESC) AS rn "
    "FROM pums GROUP BY sex, race) SELECT sex, race, n FROM r WHERE rn <= 2 ORDER BY sex, n DESC",
    "SELECT race, COUNT(*) AS n, SUM(COUNT(*)) OVER (ORDER BY race) AS running FROM pums GROUP BY race",
    "SELECT state, sex, COUNT(*) * 1.0 / SUM(COUNT(*)) OVER (PARTITION BY state) AS share FROM pums "
    "GROUP BY state, sex",
    "SELECT educ, n, n - LAG(n) OVER (ORDER BY educ) AS change FROM (SELECT educ, COUNT(*) AS n FROM pums "
    "GROUP BY educ) ORDER BY educ",
    "WITH t AS (SELECT state, COUNT(*) AS n FROM pums GROUP BY state), tot AS (SELECT COUNT(*) AS total FROM pums) "
    "SELECT state, n * 1.0 / total AS share FROM t CROSS JOIN tot",
    "SELECT p.sex, SUM(m.millions) AS weighted, AVG(m.millions) AS mean_millions FROM pums p "
    "JOIN populations m ON p.state = m.state GROUP BY p.sex",
    "SELECT state, AVG(income) AS a, AVG(income) - AVG(AVG(income)) OVER () AS diff FROM pums GROUP BY state",
]

#: Statements in other dialects: (dialect, statement).
DIALECTS = [
    ("postgres", "SELECT age / 10 AS decade, COUNT(*) AS n FROM pums GROUP BY 1 ORDER BY 1"),
    ("postgres", "SELECT sex, percentile_cont(0.5) WITHIN GROUP (ORDER BY income) AS med FROM pums GROUP BY sex"),
    ("postgres", "SELECT state, COUNT(*) FILTER (WHERE married) AS m, COUNT(*)::float AS n FROM pums GROUP BY state"),
    ("bigquery", "SELECT state, COUNTIF(married) AS m, SAFE_DIVIDE(SUM(income), COUNT(*)) AS mean FROM pums "
     "GROUP BY state"),
    ("bigquery", "SELECT IF(age >= 65, 'senior', 'adult') AS band, COUNT(*) AS n FROM `pums` GROUP BY band"),
    ("spark", "SELECT race, count(1) AS n FROM pums GROUP BY race"),
    ("spark", "SELECT sex, race, count(*) AS n FROM pums GROUP BY sex, race GROUPING SETS ((sex, race), (sex))"),
    ("spark", "SELECT sex, avg(income) AS a FROM pums WHERE nvl(married, false) GROUP BY sex"),
]

TSQL = [
    "SELECT COUNT(*) AS n FROM pums",
    "SELECT TOP 5 educ, COUNT(*) AS n FROM pums WHERE age > 40 GROUP BY educ HAVING COUNT(*) > 10 ORDER BY n DESC",
    "SELECT [sex], AVG([age]) AS [age], AVG(income) AS income FROM pums GROUP BY [sex]",
    "SELECT TOP 3 married, SUM(income) AS total FROM pums GROUP BY married ORDER BY married",
    "SELECT COUNT(*) AS n FROM pums WHERE ISNULL(educ, 0) > 8 AND LEN(name) > 4",
    "SELECT SUM(IIF(married = 1, 1, 0)) AS married FROM pums",
    "SELECT STDEV(income) AS sd, VARP(income) AS v FROM pums",
    "SELECT sex, VAR(age) AS v FROM pums GROUP BY sex",
    "SELECT CASE WHEN age < 18 THEN 'minor' WHEN age < 65 THEN 'adult' ELSE 'senior' END AS band, COUNT(*) AS n "
    "FROM pums GROUP BY CASE WHEN age < 18 THEN 'minor' WHEN age < 65 THEN 'adult' ELSE 'senior' END",
    "SELECT TOP 10 state, COUNT(*) AS n FROM pums WHERE name LIKE 'Bach%' GROUP BY state ORDER BY 2 DESC",
    "SELECT COUNT(*) AS n FROM pums WHERE CAST(age AS VARCHAR(3)) LIKE '1%'",
    "SELECT educ / 4 AS q, COUNT(*) AS n FROM pums GROUP BY educ / 4",
    "SELECT TOP 5 * FROM pums",
    "SELECT sex, married, COUNT_BIG(*) AS n FROM pums GROUP BY sex, married WITH ROLLUP",
    "SELECT TOP 3 state, COUNT(*) AS n, RANK() OVER (ORDER BY COUNT(*) DESC) AS r FROM pums GROUP BY state "
    "ORDER BY r",
    "SELECT SUM(income) / COUNT(*) AS mean FROM pums",
]


def census() -> list[str]:
    """The SF1 tabulations of examples/sf1, one statement each."""
    out = []
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "sf1", "*.sql"))):
        with open(path) as f:
            out += [st.sql for st in parse_statements(f.read())]
    return out


def pums(rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "age": rng.integers(0, 100, rows), "sex": rng.choice(["F", "M"], rows),
        "educ": rng.integers(1, 17, rows), "race": rng.integers(1, 7, rows),
        "income": rng.integers(0, 501, rows), "married": rng.random(rows) < 0.5,
        "state": rng.choice(["CA", "NY", "TX", "WA", "MA"], rows),
        "name": rng.choice(["Bach", "Bachelor", "Mozart", "Brahms"], rows), "id": np.arange(rows)})


def run(db: dpsql.Connection, sql: str | tuple[str, str], dialect: str | None = None) -> tuple[str, str]:
    if isinstance(sql, tuple):  # (dialect, statement)
        dialect, sql = sql
    try:
        db.query(sql, epsilon=None if "DIFFERENTIAL_PRIVACY" in sql else 1.0, dialect=dialect)
        return "answered", ""
    except dpsql.Error as e:
        return "refused", f"{type(e).__name__}: {str(e).splitlines()[0][:150]}"
    except Exception as e:  # noqa: BLE001 - a crash is what this benchmark counts
        return "crash", f"{type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}"


def connections() -> dict[str, dpsql.Connection]:
    """The made-up tables, each behind a connection with a large budget."""
    con = duckdb.connect()
    con.register("pums_df", pums(20_000, seed=0))
    con.execute("CREATE TABLE pums AS SELECT * FROM pums_df")
    load_persons(con, rows=50_000, seed=0)
    budget = dpsql.Budget(epsilon=1e6, delta=1e-3)
    return {"pums": dpsql.connect(con, table="pums", schema=PUMS_SCHEMA, budget=budget, cache=False, progress=False),
            "persons": dpsql.connect(con, table="persons", schema=os.path.join(ROOT, "examples", "sf1", "persons.yaml"),
                                     budget=budget, cache=False, progress=False)}


_DBS: dict[str, dpsql.Connection] = {}


def run_one(item: tuple[str, str | tuple[str, str], str | None]) -> tuple[str, str]:
    """One statement's outcome, on the connections of this process (made once per process)."""
    table, sql, dialect = item
    if not _DBS:
        _DBS.update(connections())
    return run(_DBS[table], sql, dialect)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--verbose", action="store_true", help="print every refusal's reason")
    ap.add_argument("--suite", action="append", choices=("smartnoise", "bigquery", "census", "subqueries", "tsql",
                                                        "tabulations", "windows", "dialects"),
                    help="run this suite only (repeatable; default: all)")
    ap.add_argument("--jobs", type=int, default=1, help="run the statements in this many processes")
    args = ap.parse_args(argv)
    suites = [("smartnoise", "pums", SMARTNOISE, None), ("bigquery", "pums", BIGQUERY, None),
              ("census", "persons", census(), None), ("subqueries", "pums", SUBQUERIES, None),
              ("tsql", "pums", TSQL, "tsql"), ("tabulations", "pums", TABULATIONS, None),
              ("windows", "pums", WINDOWS, None), ("dialects", "pums", DIALECTS, None)]
    suites = [s for s in suites if not args.suite or s[0] in args.suite]
    items = [(table, sql, dialect) for _, table, statements, dialect in suites for sql in statements]
    if args.jobs > 1:
        with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
            flat = pool.map(run_one, items, chunksize=1)
    else:
        flat = [run_one(item) for item in items]
    results, start = [], 0
    for _, _, statements, _ in suites:
        results.append(flat[start:start + len(statements)])
        start += len(statements)
    print(f"{'suite':12} {'statements':>10} {'answered':>9} {'refused':>8} {'crash':>6}")
    answerable: list[tuple[str, str]] = []
    crashes = 0
    details = []
    for (name, table, statements, _), outcomes in zip(suites, results):
        counts = {k: sum(o == k for o, _ in outcomes) for k in ("answered", "refused", "crash")}
        crashes += counts["crash"]
        print(f"{name:12} {len(statements):10} {counts['answered']:9} {counts['refused']:8} {counts['crash']:6}")
        answerable += [(table, sql) for sql, (o, _) in zip(statements, outcomes) if o == "answered"]
        details += [(name, sql, o, why) for sql, (o, why) in zip(statements, outcomes) if o != "answered"]
    print("\nNot answered:" if details else "")
    for name, sql, outcome, why in details:
        if args.verbose or outcome == "crash":
            print(f"  [{name}] {outcome}: {str(sql)[:90]}\n      {why}")
        else:
            print(f"  [{name}] {why[:110]}")
    census_batch = [sql for table, sql in answerable if table == "persons"][:50]
    if not census_batch:
        return 1 if crashes else 0
    schema = load_schema(os.path.join(ROOT, "examples", "sf1", "persons.yaml"))
    start = time.perf_counter()
    dpsql.compile_batch(census_batch, schema).workload
    seconds = time.perf_counter() - start
    print(f"\ncompiling {len(census_batch)} answerable Census statements as one batch: {seconds:.3f} s "
          f"(target 1 s: {seconds / 1.0:.2f}x)")
    return 1 if crashes else 0


if __name__ == "__main__":
    sys.exit(main())
