"""Held-out analyst statements (issue 40): whole queries as analysts write them, in DuckDB's SQL and in
PostgreSQL, BigQuery, T-SQL and Spark, over one small private table.

Each statement is run through ``db.query`` at ε = 10¹² and must either equal DuckDB's own answer to it
(``OK``: NULLs included, row order where the statement orders its rows) or be refused with a
``dpsql.Error`` that spends nothing (``LEAK``: the answer would reveal rows, or depend on one person
beyond what noise can hide). A statement in another dialect is compared with the same statement written
in DuckDB's SQL. A DP engine answers every group of the declared domain: a group DuckDB does not return
(no rows) may be present with COUNT/SUM 0 and AVG/variances NULL, and nothing else.
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql

DATES = [f"{y}-{m:02d}-{d:02d}" for y in (2023, 2024) for m in range(1, 13) for d in (1, 15)]
REGIONS = ["North", "South", "East", "West"]

SCHEMA = {
    "table": "patients",
    "privacy_unit": {"column": "pid", "max_rows": 1},
    "columns": {
        "region": {"type": "categorical", "values": REGIONS},
        "sex": {"type": "categorical", "values": ["F", "M"], "nullable": True},
        "age": {"type": "integer", "min": 18, "max": 90},
        "income": {"type": "numeric", "bins": [0, 10000, 25000, 50000, 100000, 250000], "nullable": True},
        "smoker": {"type": "boolean", "nullable": True},
        "insured": {"type": "boolean"},
        "visits": {"type": "integer", "min": 0, "max": 12},
        "educ": {"type": "categorical", "values": ["HS", "College", "Graduate"], "nullable": True},
        "first_visit": {"type": "categorical", "values": DATES},
    },
    "public_tables": {
        "edu_years": {"columns": ["educ", "years"],
                      "rows": [["HS", 12], ["College", 16], ["Graduate", 18], ["PhD", 21]]},
        "region_info": {"columns": ["region", "division", "beds"],
                        "rows": [["North", "Northeast", 120], ["South", "South", 340], ["East", "Northeast", 95],
                                 ["West", "West", 210], ["Central", "Midwest", 50]]},
    },
}


def make_patients(rows: int = 1500, seed: int = 40) -> duckdb.DuckDBPyConnection:
    """A made-up table in which the groups the statements rank have distinct counts, visits 0..8 all
    occur, 9..11 never and 12 once (one person's STDDEV_SAMP is NULL, an empty group's AVG too)."""
    rng = np.random.default_rng(seed)

    def pick(values, p):
        return [values[i] for i in rng.choice(len(values), rows, p=p)]

    income = np.exp(rng.normal(10.6, 0.8, rows)).clip(0, 250000).round()
    visits = np.minimum(rng.poisson(2.2, rows), 8)
    visits[:9] = np.arange(9)  # every value 0..8 occurs
    visits[9] = 12  # one person
    df = pd.DataFrame({
        "pid": np.arange(rows),
        "region": pick(REGIONS, [0.36, 0.28, 0.21, 0.15]),
        "sex": pick(["F", "M", None], [0.5, 0.44, 0.06]),
        "age": rng.integers(18, 91, rows),
        "income": pd.array([None if rng.random() < 0.1 else float(v) for v in income], dtype="Float64"),
        "smoker": pd.array(pick([True, False, None], [0.22, 0.68, 0.10]), dtype="boolean"),
        "insured": rng.random(rows) < 0.85,
        "visits": visits,
        "educ": pick(["HS", "College", "Graduate", None], [0.46, 0.34, 0.15, 0.05]),
        "first_visit": pick(DATES, None),
    })
    con = duckdb.connect()
    con.register("df", df)
    con.execute("CREATE TABLE patients AS SELECT pid::INTEGER AS pid, region::VARCHAR AS region, sex::VARCHAR AS sex, "
                "age::INTEGER AS age, income::DOUBLE AS income, smoker::BOOLEAN AS smoker, insured::BOOLEAN AS insured, "
                "visits::INTEGER AS visits, educ::VARCHAR AS educ, first_visit::VARCHAR AS first_visit FROM df")
    con.unregister("df")
    for name, table in SCHEMA["public_tables"].items():
        cols = table["columns"]
        types = ["VARCHAR" if isinstance(v, str) else "INTEGER" for v in table["rows"][0]]
        con.execute(f"CREATE TABLE {name} ({', '.join(f'{c} {t}' for c, t in zip(cols, types))})")
        con.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(cols))})", table["rows"])
    return con


@dataclass
class Case:
    family: str
    sql: str
    valid: bool = True          # True: answered exactly; False: must be refused
    duck: str | None = None     # the same statement in DuckDB's SQL (for another dialect)
    dialect: str | None = None
    ordered: bool = False       # the statement orders its rows: compare them in order

    def param(self):
        name = f"{self.family}-{CASES.index(self)}"
        return pytest.param(self, id=name, marks=[pytest.mark.slow] if name in SLOW else [])


def OK(family, sql, **kw):
    return Case(family, sql, True, **kw)


def LEAK(family, sql, **kw):
    return Case(family, sql, False, **kw)


CASES = [
    # -- CTEs and FROM-subqueries that filter, derive or rename row by row, then aggregate ---------------
    OK("rows", "WITH seniors AS (SELECT * FROM patients WHERE age >= 65) "
               "SELECT region, COUNT(*) AS n FROM seniors GROUP BY region"),
    OK("rows", "WITH base AS (SELECT region, sex, age FROM patients WHERE insured), "
               "older AS (SELECT region, age FROM base WHERE age > 40) "
               "SELECT region, COUNT(*) AS n, AVG(age) AS mean_age FROM older GROUP BY region"),
    OK("rows", "SELECT age_band, COUNT(*) AS n FROM (SELECT CASE WHEN age < 30 THEN '18-29' WHEN age < 50 THEN '30-49' "
               "WHEN age < 65 THEN '50-64' ELSE '65+' END AS age_band FROM patients) t GROUP BY age_band "
               "ORDER BY age_band", ordered=True),
    OK("rows", "WITH p AS (SELECT COALESCE(educ, 'Unknown') AS education, visits FROM patients) "
               "SELECT education, SUM(visits) AS total_visits, COUNT(*) AS n FROM p GROUP BY education"),
    OK("rows", "WITH p AS (SELECT UPPER(LEFT(region, 1)) AS r1, age FROM patients) "
               "SELECT r1, AVG(age) AS avg_age FROM p GROUP BY r1 ORDER BY r1", ordered=True),
    OK("rows", "WITH v AS (SELECT CAST(first_visit AS DATE) AS d FROM patients) SELECT EXTRACT(year FROM d) AS yr, "
               "EXTRACT(quarter FROM d) AS q, COUNT(*) AS n FROM v GROUP BY yr, q ORDER BY yr, q", ordered=True),
    OK("rows", "SELECT month, COUNT(*) AS n FROM (SELECT strftime(CAST(first_visit AS DATE), '%Y-%m') AS month "
               "FROM patients WHERE smoker) GROUP BY month ORDER BY month", ordered=True),
    OK("rows", "WITH t AS (SELECT region AS area, sex AS gender, age AS years FROM patients) "
               "SELECT area, gender, SUM(years) AS s FROM t WHERE gender IS NOT NULL GROUP BY area, gender"),
    OK("rows", "WITH flagged AS (SELECT *, age >= 65 AS senior, visits > 3 AS frequent FROM patients) "
               "SELECT senior, frequent, COUNT(*) AS n FROM flagged GROUP BY senior, frequent"),
    OK("rows", "SELECT decade, COUNT(*) AS n, AVG(visits) AS v FROM (SELECT (age // 10) * 10 AS decade, visits "
               "FROM patients WHERE sex = 'F') GROUP BY decade ORDER BY decade", ordered=True),
    OK("rows", "WITH c AS (SELECT region, CASE WHEN smoker THEN 'smoker' WHEN NOT smoker THEN 'non-smoker' "
               "ELSE 'unknown' END AS status FROM patients) "
               "SELECT status, region, COUNT(*) AS n FROM c GROUP BY ALL ORDER BY status, region", ordered=True),
    OK("rows", "WITH a AS (SELECT * FROM patients WHERE region IN ('North', 'East')), "
               "b AS (SELECT * FROM a WHERE educ IS NOT NULL), "
               "c AS (SELECT educ, visits FROM b WHERE visits BETWEEN 1 AND 5) "
               "SELECT educ, COUNT(*) AS n, SUM(visits) AS s FROM c GROUP BY educ"),
    OK("rows", "SELECT COUNT(*) AS n FROM (SELECT * FROM patients WHERE income >= 50000) sub"),
    OK("rows", "WITH x AS (SELECT visits + 1 AS v1 FROM patients) SELECT SUM(v1) AS s FROM x"),
    OK("rows", "WITH x AS (SELECT NULLIF(educ, 'HS') AS e FROM patients) "
               "SELECT e, COUNT(e) AS ne, COUNT(*) AS n FROM x GROUP BY e"),
    OK("rows", "SELECT ins, AVG(age) AS m FROM (SELECT CASE WHEN insured THEN 'yes' ELSE 'no' END AS ins, age "
               "FROM patients) GROUP BY ins HAVING COUNT(*) > 10"),
    OK("rows", "WITH x AS (SELECT CASE WHEN income < 25000 THEN 'low' WHEN income < 100000 THEN 'mid' "
               "ELSE 'high' END AS bracket, region FROM patients WHERE region <> 'West') "
               "SELECT bracket, COUNT(*) AS n FROM x GROUP BY bracket"),
    OK("rows", "SELECT s.sex, COUNT(*) AS n FROM (SELECT sex, age FROM patients) AS s(sex, age) WHERE s.age < 30 "
               "GROUP BY s.sex"),
    OK("rows", "WITH w AS (SELECT age, region FROM patients WHERE first_visit LIKE '2024-%') "
               "SELECT region, MEDIAN(age) AS med FROM w GROUP BY region"),
    # -- outer queries over aggregates --------------------------------------------------------------------
    OK("outer", "WITH t AS (SELECT region, COUNT(*) AS n FROM patients GROUP BY region) "
                "SELECT region, n FROM t WHERE n > 300 ORDER BY n DESC", ordered=True),
    OK("outer", "SELECT * FROM (SELECT educ, AVG(age) AS avg_age FROM patients GROUP BY educ) s "
                "ORDER BY avg_age DESC LIMIT 2", ordered=True),
    OK("outer", "SELECT region, sex, n FROM (SELECT region, sex, COUNT(*) AS n FROM patients GROUP BY region, sex) "
                "WHERE n >= 50 AND sex IS NOT NULL ORDER BY region, sex", ordered=True),
    OK("outer", "WITH s AS (SELECT region, SUM(visits) AS tv, COUNT(*) AS n FROM patients GROUP BY region) "
                "SELECT region, tv, n, ROUND(tv * 1.0 / n, 2) AS per_person FROM s ORDER BY region", ordered=True),
    OK("outer", "WITH smokers AS (SELECT region, COUNT(*) AS n_smokers FROM patients WHERE smoker GROUP BY region), "
                "everyone AS (SELECT region, COUNT(*) AS n_all FROM patients GROUP BY region) "
                "SELECT e.region, n_smokers, n_all, 100.0 * n_smokers / n_all AS pct FROM everyone e "
                "JOIN smokers s ON e.region = s.region ORDER BY pct DESC", ordered=True),
    OK("outer", "SELECT a.educ, a.mean_age, b.mean_visits FROM (SELECT educ, AVG(age) AS mean_age FROM patients "
                "GROUP BY educ) a INNER JOIN (SELECT educ, AVG(visits) AS mean_visits FROM patients GROUP BY educ) b "
                "ON a.educ = b.educ"),
    OK("outer", "SELECT region, n FROM (SELECT region, COUNT(*) AS n FROM patients WHERE age BETWEEN 30 AND 49 "
                "GROUP BY region) q ORDER BY n LIMIT 1", ordered=True),
    OK("outer", "WITH t AS (SELECT sex, COUNT(*) FILTER (WHERE smoker) AS s, COUNT(*) AS n FROM patients "
                "GROUP BY sex) SELECT sex, s, n, n - s AS others FROM t WHERE sex IS NOT NULL"),
    OK("outer", "SELECT CASE WHEN n > 400 THEN 'large' ELSE 'small' END AS size, region FROM "
                "(SELECT region, COUNT(*) AS n FROM patients GROUP BY region) ORDER BY region", ordered=True),
    OK("outer", "WITH recent AS (SELECT * FROM patients WHERE first_visit >= '2024-01-01'), "
                "by_region AS (SELECT region, COUNT(*) AS n, AVG(age) AS a FROM recent GROUP BY region) "
                "SELECT region, n, a FROM by_region WHERE a > 40 ORDER BY n DESC", ordered=True),
    OK("outer", "SELECT total FROM (SELECT COUNT(*) AS total FROM patients)"),
    OK("outer", "SELECT f.n AS women, m.n AS men, f.n * 1.0 / m.n AS ratio FROM "
                "(SELECT COUNT(*) AS n FROM patients WHERE sex = 'F') f, "
                "(SELECT COUNT(*) AS n FROM patients WHERE sex = 'M') m"),
    OK("outer", "SELECT region, a.n, b.s FROM (SELECT region, COUNT(*) n FROM patients GROUP BY region) a "
                "JOIN (SELECT region, SUM(age) s FROM patients GROUP BY region) b USING (region) "
                "ORDER BY b.s / a.n DESC", ordered=True),
    OK("outer", "SELECT visits, COUNT(*) AS n FROM patients GROUP BY visits ORDER BY n DESC LIMIT 1", ordered=True),
    OK("outer", "WITH ranked AS (SELECT region, COUNT(*) AS n, RANK() OVER (ORDER BY COUNT(*) DESC) AS r "
                "FROM patients GROUP BY region) SELECT region, n FROM ranked WHERE r <= 2 ORDER BY r", ordered=True),
    OK("outer", "SELECT * FROM (SELECT region, educ, COUNT(*) AS n, ROW_NUMBER() OVER (PARTITION BY region "
                "ORDER BY COUNT(*) DESC) AS rn FROM patients WHERE educ IS NOT NULL GROUP BY region, educ) "
                "WHERE rn = 1 ORDER BY region", ordered=True),
    # -- shares of the total ------------------------------------------------------------------------------
    OK("share", "SELECT region, COUNT(*) AS n, ROUND(100.0 * COUNT(*) / SUM(COUNT(*)) OVER (), 1) AS pct "
                "FROM patients GROUP BY region ORDER BY pct DESC", ordered=True),
    OK("share", "SELECT region, sex, COUNT(*) * 1.0 / SUM(COUNT(*)) OVER (PARTITION BY region) AS share "
                "FROM patients WHERE sex IS NOT NULL GROUP BY region, sex ORDER BY region, sex", ordered=True),
    OK("share", "WITH t AS (SELECT educ, COUNT(*) AS n FROM patients GROUP BY educ) "
                "SELECT educ, n, n * 100.0 / SUM(n) OVER () AS pct FROM t ORDER BY educ NULLS LAST", ordered=True),
    OK("share", "WITH by_r AS (SELECT region, COUNT(*) AS n FROM patients GROUP BY region), "
                "tot AS (SELECT COUNT(*) AS total FROM patients) "
                "SELECT region, n, n * 1.0 / total AS share FROM by_r CROSS JOIN tot ORDER BY region",
       ordered=True),
    OK("share", "SELECT r.region, r.n * 100.0 / t.total AS pct FROM "
                "(SELECT region, COUNT(*) AS n FROM patients GROUP BY region) r, "
                "(SELECT COUNT(*) AS total FROM patients) t"),
    OK("share", "SELECT smoker, SUM(visits) AS v, SUM(visits) / SUM(SUM(visits)) OVER () AS share FROM patients "
                "GROUP BY smoker"),
    # -- GROUPING SETS, ROLLUP, CUBE, GROUPING() ------------------------------------------------------------
    OK("sets", "SELECT region, insured, COUNT(*) AS n FROM patients GROUP BY ROLLUP (region, insured) "
               "ORDER BY region NULLS LAST, insured NULLS LAST", ordered=True),
    OK("sets", "SELECT educ, sex, GROUPING(educ) AS g_e, GROUPING(sex) AS g_s, COUNT(*) AS n FROM patients "
               "GROUP BY CUBE (educ, sex)"),
    OK("sets", "SELECT region, smoker, AVG(age) AS a FROM patients GROUP BY GROUPING SETS ((region), (smoker), ())"),
    OK("sets", "SELECT CASE WHEN GROUPING(region) = 1 THEN 'All regions' ELSE region END AS region_label, "
               "SUM(visits) AS v FROM patients GROUP BY ROLLUP (region) ORDER BY GROUPING(region), region",
       ordered=True),
    OK("sets", "SELECT region, sex, insured, COUNT(*) AS n FROM patients GROUP BY region, ROLLUP (sex, insured)"),
    OK("sets", "WITH t AS (SELECT region, educ, COUNT(*) AS n, GROUPING(region, educ) AS lvl FROM patients "
               "GROUP BY CUBE (region, educ)) SELECT * FROM t WHERE lvl = 3 OR n > 100 ORDER BY lvl, region, educ",
       ordered=True),
    OK("sets", "SELECT age // 20 AS band, insured, COUNT(*) AS n, SUM(visits) AS v FROM patients "
               "GROUP BY GROUPING SETS ((age // 20, insured), (age // 20))"),
    OK("sets", "SELECT region, insured, COUNT(*) AS n FROM patients GROUP BY region, insured WITH ROLLUP",
       dialect="tsql", duck="SELECT region, insured, COUNT(*) AS n FROM patients GROUP BY ROLLUP (region, insured)"),
    OK("sets", "SELECT region, educ, COUNT(*) AS n FROM patients GROUP BY region, educ GROUPING SETS "
               "((region, educ), (region))", dialect="spark",
       duck="SELECT region, educ, COUNT(*) AS n FROM patients GROUP BY GROUPING SETS ((region, educ), (region))"),
    # -- windows over aggregates ----------------------------------------------------------------------------
    OK("window", "SELECT region, COUNT(*) AS n, RANK() OVER (ORDER BY COUNT(*) DESC) AS rnk FROM patients "
                 "GROUP BY region"),
    OK("window", "SELECT educ, AVG(age) AS a, ROW_NUMBER() OVER (ORDER BY AVG(age)) AS rn FROM patients "
                 "WHERE educ IS NOT NULL GROUP BY educ"),
    OK("window", "SELECT visits, COUNT(*) AS n, SUM(COUNT(*)) OVER (ORDER BY visits) AS cum FROM patients "
                 "WHERE visits <= 8 GROUP BY visits ORDER BY visits", ordered=True),
    OK("window", "SELECT region, sex, COUNT(*) AS n, SUM(COUNT(*)) OVER (PARTITION BY region) AS region_total "
                 "FROM patients GROUP BY region, sex"),
    OK("window", "WITH m AS (SELECT DATE_TRUNC('month', CAST(first_visit AS DATE)) AS mon, COUNT(*) AS n "
                 "FROM patients GROUP BY 1) SELECT mon, n, SUM(n) OVER (ORDER BY mon ROWS BETWEEN 2 PRECEDING "
                 "AND CURRENT ROW) AS rolling3 FROM m ORDER BY mon", ordered=True),
    OK("window", "SELECT sex, AVG(age) AS a, AVG(age) - AVG(AVG(age)) OVER () AS diff FROM patients "
                 "WHERE sex IS NOT NULL GROUP BY sex"),
    OK("window", "SELECT yr, n, n - LAG(n) OVER (ORDER BY yr) AS change FROM (SELECT year(CAST(first_visit AS DATE)) "
                 "AS yr, COUNT(*) AS n FROM patients GROUP BY yr) ORDER BY yr", ordered=True),
    OK("window", "SELECT region, COUNT(*) AS n, PERCENT_RANK() OVER (ORDER BY COUNT(*)) AS pr FROM patients "
                 "GROUP BY region"),
    OK("window", "SELECT region, COUNT(*) AS n, NTILE(2) OVER (ORDER BY COUNT(*) DESC) AS half FROM patients "
                 "GROUP BY region"),
    OK("window", "SELECT region, educ, COUNT(*) AS n FROM patients WHERE educ IS NOT NULL GROUP BY region, educ "
                 "QUALIFY ROW_NUMBER() OVER (PARTITION BY region ORDER BY COUNT(*) DESC) = 1"),
    # -- SUM/AVG of a public lookup table's column ------------------------------------------------------------
    OK("lookup", "SELECT AVG(e.years) AS avg_years FROM patients p JOIN edu_years e ON p.educ = e.educ"),
    OK("lookup", "SELECT p.region, SUM(e.years) AS total_years, COUNT(*) AS n FROM patients p "
                 "JOIN edu_years e ON p.educ = e.educ GROUP BY p.region"),
    OK("lookup", "SELECT r.division, COUNT(*) AS n, AVG(r.beds) AS beds FROM patients p "
                 "JOIN region_info r ON p.region = r.region GROUP BY r.division ORDER BY r.division", ordered=True),
    OK("lookup", "SELECT p.sex, AVG(e.years) AS y FROM patients p LEFT JOIN edu_years e USING (educ) GROUP BY p.sex"),
    OK("lookup", "WITH j AS (SELECT p.region, e.years FROM patients p JOIN edu_years e ON p.educ = e.educ) "
                 "SELECT region, AVG(years) AS y FROM j GROUP BY region"),
    OK("lookup", "SELECT e.years, COUNT(*) AS n FROM patients p JOIN edu_years e ON p.educ = e.educ "
                 "GROUP BY e.years ORDER BY e.years", ordered=True),
    # -- other dialects ---------------------------------------------------------------------------------------
    OK("dialect", "SELECT TOP 3 region, COUNT(*) AS n FROM patients GROUP BY region ORDER BY n DESC", dialect="tsql",
       duck="SELECT region, COUNT(*) AS n FROM patients GROUP BY region ORDER BY n DESC LIMIT 3", ordered=True),
    OK("dialect", "SELECT [region], AVG(CAST(age AS FLOAT)) AS [avg age] FROM patients "
                  "WHERE ISNULL(educ, 'none') <> 'none' GROUP BY [region]", dialect="tsql",
       duck='SELECT region, AVG(CAST(age AS DOUBLE)) AS "avg age" FROM patients WHERE COALESCE(educ, \'none\') '
            "<> 'none' GROUP BY region"),
    OK("dialect", "SELECT IIF(age >= 65, 'senior', 'adult') AS grp, COUNT(*) AS n FROM patients "
                  "GROUP BY IIF(age >= 65, 'senior', 'adult')", dialect="tsql",
       duck="SELECT CASE WHEN age >= 65 THEN 'senior' ELSE 'adult' END AS grp, COUNT(*) AS n FROM patients "
            "GROUP BY 1"),
    OK("dialect", "SELECT DATEPART(year, CAST(first_visit AS DATE)) AS yr, COUNT(*) AS n FROM patients "
                  "GROUP BY DATEPART(year, CAST(first_visit AS DATE))", dialect="tsql",
       duck="SELECT year(CAST(first_visit AS DATE)) AS yr, COUNT(*) AS n FROM patients GROUP BY 1"),
    OK("dialect", "SELECT sex, COUNT(*) AS n, STDEV(age) AS sd FROM patients GROUP BY sex", dialect="tsql",
       duck="SELECT sex, COUNT(*) AS n, STDDEV_SAMP(age) AS sd FROM patients GROUP BY sex"),
    OK("dialect", "WITH t AS (SELECT educ, COUNT(*) AS n FROM patients GROUP BY educ) "
                  "SELECT TOP 2 educ, n FROM t ORDER BY n DESC", dialect="tsql",
       duck="WITH t AS (SELECT educ, COUNT(*) AS n FROM patients GROUP BY educ) "
            "SELECT educ, n FROM t ORDER BY n DESC LIMIT 2", ordered=True),
    OK("dialect", "SELECT region, SUM(CASE WHEN smoker = 1 THEN 1 ELSE 0 END) AS smokers FROM patients "
                  "GROUP BY region", dialect="tsql",
       duck="SELECT region, SUM(CASE WHEN smoker THEN 1 ELSE 0 END) AS smokers FROM patients GROUP BY region"),
    OK("dialect", "SELECT LEFT(region, 1) AS initial, COUNT_BIG(*) AS n FROM patients GROUP BY LEFT(region, 1)",
       dialect="tsql", duck="SELECT LEFT(region, 1) AS initial, COUNT(*) AS n FROM patients GROUP BY 1"),
    OK("dialect", "SELECT IIF(smoker = 1, 'yes', 'no') AS s, COUNT(*) AS n FROM patients "
                  "GROUP BY IIF(smoker = 1, 'yes', 'no')", dialect="tsql",
       duck="SELECT CASE WHEN smoker THEN 'yes' ELSE 'no' END AS s, COUNT(*) AS n FROM patients GROUP BY 1"),
    OK("dialect", "SELECT region, COUNT(*) AS n FROM patients GROUP BY region HAVING COUNT(*) > 200 "
                  "ORDER BY region OFFSET 1 ROWS FETCH NEXT 2 ROWS ONLY", dialect="tsql",
       duck="SELECT region, COUNT(*) AS n FROM patients GROUP BY region HAVING COUNT(*) > 200 ORDER BY region "
            "LIMIT 2 OFFSET 1", ordered=True),
    OK("dialect", "SELECT age::int / 10 * 10 AS decade, COUNT(*)::float AS n FROM patients GROUP BY 1 ORDER BY 1",
       dialect="postgres",
       duck="SELECT age::INT // 10 * 10 AS decade, COUNT(*)::DOUBLE AS n FROM patients GROUP BY 1 ORDER BY 1",
       ordered=True),
    OK("dialect", "SELECT date_part('month', first_visit::date) AS m, COUNT(*) FILTER (WHERE smoker) AS s "
                  "FROM patients GROUP BY 1 ORDER BY 1", dialect="postgres", ordered=True,
       duck="SELECT date_part('month', first_visit::DATE) AS m, COUNT(*) FILTER (WHERE smoker) AS s "
            "FROM patients GROUP BY 1 ORDER BY 1"),
    OK("dialect", "SELECT region, percentile_cont(0.5) WITHIN GROUP (ORDER BY age) AS med FROM patients "
                  "GROUP BY region", dialect="postgres",
       duck="SELECT region, percentile_cont(0.5) WITHIN GROUP (ORDER BY age) AS med FROM patients GROUP BY region"),
    OK("dialect", "SELECT `region`, COUNTIF(smoker) AS smokers, COUNT(*) AS n FROM patients GROUP BY `region`",
       dialect="bigquery",
       duck="SELECT region, COUNT(*) FILTER (WHERE smoker) AS smokers, COUNT(*) AS n FROM patients GROUP BY region"),
    OK("dialect", "SELECT educ, SAFE_DIVIDE(SUM(visits), COUNT(*)) AS per_person FROM patients GROUP BY educ",
       dialect="bigquery",
       duck="SELECT educ, SUM(visits) / COUNT(*) AS per_person FROM patients GROUP BY educ"),
    OK("dialect", "SELECT EXTRACT(YEAR FROM CAST(first_visit AS DATE)) AS yr, IFNULL(sex, 'unknown') AS s, "
                  "COUNT(*) AS n FROM patients GROUP BY yr, s", dialect="bigquery",
       duck="SELECT year(CAST(first_visit AS DATE)) AS yr, COALESCE(sex, 'unknown') AS s, COUNT(*) AS n "
            "FROM patients GROUP BY yr, s"),
    OK("dialect", "WITH t AS (SELECT region, COUNT(*) AS n FROM `patients` GROUP BY region) "
                  "SELECT region, n FROM t ORDER BY n DESC LIMIT 2", dialect="bigquery", ordered=True,
       duck="WITH t AS (SELECT region, COUNT(*) AS n FROM patients GROUP BY region) "
            "SELECT region, n FROM t ORDER BY n DESC LIMIT 2"),
    OK("dialect", "SELECT region, count(*) AS n, avg(age) AS a FROM patients WHERE nvl(smoker, false) "
                  "GROUP BY region", dialect="spark",
       duck="SELECT region, COUNT(*) AS n, AVG(age) AS a FROM patients WHERE COALESCE(smoker, false) GROUP BY region"),
    OK("dialect", "SELECT `sex`, sum(visits) AS v FROM patients GROUP BY `sex`", dialect="spark",
       duck="SELECT sex, SUM(visits) AS v FROM patients GROUP BY sex"),
    OK("dialect", "SELECT year(to_date(first_visit)) AS yr, count(1) AS n FROM patients "
                  "GROUP BY year(to_date(first_visit))", dialect="spark",
       duck="SELECT year(CAST(first_visit AS DATE)) AS yr, COUNT(*) AS n FROM patients GROUP BY 1"),
    # -- answers in range ---------------------------------------------------------------------------------------
    OK("range", "SELECT visits, STDDEV_SAMP(age) AS sd FROM patients GROUP BY visits"),
    OK("range", "SELECT visits, AVG(age) AS a, COUNT(*) AS n FROM patients WHERE visits >= 9 GROUP BY visits"),
    OK("range", "SELECT AVG(age) AS a FROM patients WHERE visits = 10"),
    OK("range", "SELECT VAR_SAMP(age) AS v, STDDEV_POP(age) AS sp, AVG(age) AS a FROM patients WHERE visits = 12"),
    OK("range", "SELECT region, AVG(age) FILTER (WHERE visits = 12) AS a FROM patients GROUP BY region"),
    OK("range", "SELECT sex, region, STDDEV(age) AS sd, COUNT(*) AS n FROM patients WHERE visits > 6 "
                "GROUP BY sex, region"),
    OK("range", "SELECT DISTINCT region FROM patients"),
    # -- what would leak: refused ---------------------------------------------------------------------------------
    LEAK("leak", "SELECT * FROM patients WHERE age > 80"),
    LEAK("leak", "SELECT region, age FROM patients ORDER BY age DESC LIMIT 10"),
    LEAK("leak", "SELECT MAX(age) AS oldest FROM patients"),
    LEAK("leak", "SELECT region, MIN(income) AS lowest FROM patients GROUP BY region"),
    LEAK("leak", "SELECT region, MAX(age) - MIN(age) AS spread FROM patients GROUP BY region"),
    LEAK("leak", "SELECT COUNT(*) FROM (SELECT * FROM patients ORDER BY age LIMIT 100) t"),
    LEAK("leak", "SELECT age, ROW_NUMBER() OVER (PARTITION BY region ORDER BY age) AS rn FROM patients"),
    LEAK("leak", "SELECT COUNT(*) FROM (SELECT region, SUM(age) OVER (PARTITION BY region) AS s FROM patients) "
                 "WHERE s > 1000"),
    LEAK("leak", "SELECT region, AVG(age) OVER (PARTITION BY region) AS m FROM patients"),
    LEAK("leak", "SELECT DISTINCT pid FROM patients"),
    LEAK("leak", "SELECT COUNT(*) AS n FROM (SELECT DISTINCT region, sex FROM patients)"),
    LEAK("leak", "SELECT COUNT(DISTINCT pid) AS people FROM patients"),
    LEAK("leak", "SELECT p.region, COUNT(*) AS n FROM patients p JOIN patients q ON p.region = q.region "
                 "GROUP BY p.region"),
    LEAK("leak", "SELECT COUNT(*) AS n FROM patients WHERE age > (SELECT AVG(age) FROM patients)"),
    LEAK("leak", "SELECT COUNT(*) AS n FROM patients WHERE pid IN (SELECT pid FROM patients WHERE age > 80)"),
    LEAK("leak", "SELECT COUNT(*) AS n FROM patients p JOIN (SELECT region, AVG(age) AS a FROM patients "
                 "GROUP BY region) r ON p.region = r.region WHERE p.age > r.a"),
    LEAK("leak", "SELECT region, STRING_AGG(sex, ',') AS s FROM patients GROUP BY region"),
    LEAK("leak", "SELECT region, ANY_VALUE(age) AS a FROM patients GROUP BY region"),
    LEAK("leak", "SELECT TOP 10 * FROM patients", dialect="tsql"),
    LEAK("leak", "SELECT region, ARRAY_AGG(age) AS ages FROM patients GROUP BY region", dialect="bigquery"),
    LEAK("leak", "SELECT first_value(age) OVER (ORDER BY visits DESC) AS a FROM patients", dialect="spark"),
    LEAK("leak", "SELECT region, COUNT(*) AS n FROM patients GROUP BY region UNION ALL "
                 "SELECT 'all', COUNT(*) FROM patients"),
]


#: Statements over wide domains (age with visits or another key), each over 1.9 s on a loaded machine: `-m slow`.
SLOW = frozenset({
    "rows-1", "rows-3", "rows-4", "rows-7", "rows-9", "rows-15", "rows-18", "outer-20", "outer-22", "outer-23",
    "outer-24", "outer-28", "outer-31", "sets-41", "sets-42", "sets-43", "sets-44", "sets-45", "sets-46", "sets-47",
    "window-51", "window-55", "dialect-70", "dialect-76", "dialect-77", "dialect-78", "dialect-80", "dialect-83",
    "range-86", "range-87", "range-88", "range-89", "range-90", "range-91",
})


@pytest.fixture(scope="module")
def db():
    con = make_patients()
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=1e15), cache=False, progress=False)
    db.exact = con  # the test's own handle on the private table, for DuckDB's answers
    yield db
    con.close()


def _value(v):
    """A cell as a plain Python value: NULL as None, dates as their ISO text, integral floats as ints."""
    if v is None or (not isinstance(v, (str, bytes)) and pd.api.types.is_scalar(v) and pd.isna(v)):
        return None
    if isinstance(v, pd.Timestamp):
        v = v.to_pydatetime()
    if isinstance(v, datetime.datetime) and v.time() == datetime.time(0):
        v = v.date()
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    if hasattr(v, "item"):
        v = v.item()
    if hasattr(v, "as_integer_ratio") and not isinstance(v, (bool, int)):
        v = float(v)  # Decimal
    return v


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        if math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-4):
            return True
        # a standard deviation near 0 is the square root of a variance's rounding: releases are rounded
        # to 2^-24 of the sensitivity, which for a SUM of squares of ages is 4.8e-4 (sql_oracle allows 1e-3)
        return math.isclose(a * a, b * b, rel_tol=1e-6, abs_tol=1e-3)
    return a == b


def _empty_group(row) -> bool:
    """A row DuckDB has no group for: every answer (a float) 0 or NULL."""
    answers = [v for v in row if v is None or isinstance(v, float)]
    return bool(answers) and all(v is None or abs(v) < 1e-4 for v in answers)


def assert_same(got: list[tuple], want: list[tuple], ordered: bool) -> None:
    unmatched = list(range(len(got)))
    pairs = {}
    for j, w in enumerate(want):
        for i in unmatched:
            if all(_same(a, b) for a, b in zip(got[i], w)):
                pairs[j] = i
                unmatched.remove(i)
                break
        else:
            raise AssertionError(f"DuckDB's row {w} is not in dpsql's answer {got}")
    extra = [got[i] for i in unmatched]
    assert all(_empty_group(r) for r in extra), f"rows DuckDB does not have: {extra}\n(DuckDB: {want})"
    if ordered:
        order = [pairs[j] for j in range(len(want))]
        assert order == sorted(order), f"row order differs:\n{got}\n{want}"


@pytest.mark.parametrize("case", [c.param() for c in CASES])
def test_analyst_statement(db, case):
    before = db.spent().epsilon
    if not case.valid:
        with pytest.raises(dpsql.Error):
            db.query(case.sql, epsilon=1e12, dialect=case.dialect)
        assert db.spent().epsilon == before  # a refusal spends nothing
        return
    res = db.query(case.sql, epsilon=1e12, dialect=case.dialect)
    rel = db.exact.sql(case.duck or case.sql)
    names = rel.columns
    want = [tuple(_value(v) for v in row) for row in rel.fetchall()]
    df = res.df
    missing = [n for n in names if n not in df.columns]
    assert not missing, f"columns {missing} are not in dpsql's answer {list(df.columns)}"
    got = [tuple(_value(v) for v in row) for row in df[names].itertuples(index=False)]
    assert_same(got, want, case.ordered)


def test_the_median_of_a_binned_column_is_interpolated_within_the_bin_its_interval_covers(db):
    """A binned column's rows have no single value: its median is read at the bins' resolution, so it is
    not DuckDB's exactly; at a huge epsilon DuckDB's median lies in the released interval, which covers a
    whole bin, and the result says the answer is interpolated."""
    sql = "SELECT region, median(income) AS med FROM patients GROUP BY region"
    res = db.query(sql, epsilon=1e12)
    want = dict(db.exact.execute(sql).fetchall())
    edges = SCHEMA["columns"]["income"]["bins"]
    for region, low, high in res.df[["region", "ci_low", "ci_high"]].itertuples(index=False):
        assert low <= want[region] <= high
        assert any(low <= a and b <= high for a, b in zip(edges, edges[1:]))
    assert res.notes and "interpolated" in res.notes[0]
