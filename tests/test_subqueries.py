"""CTEs and FROM-subqueries (dpsql.sql.inline): answers equal DuckDB's, exactly, and what would
change whom a row weighs on is refused, naming the construct."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sql_oracle import SCHEMA, _py, compare, histogram, make_table

import dpsql.errors as E
from dpsql.sql import compile_batch
from dpsql.sql.postprocess import postprocess


@pytest.fixture(scope="module")
def con():
    c = make_table(400, seed=3)
    yield c
    c.close()


ROW_BY_ROW = [
    # a filter, a derived column as a key, a rename
    "WITH adults AS (SELECT * FROM people WHERE age >= 10) SELECT sex, COUNT(*) AS n FROM adults GROUP BY sex",
    "SELECT band, COUNT(*) AS n, SUM(age) AS s FROM (SELECT CASE WHEN age < 10 THEN 'young' ELSE 'old' END AS band, "
    "age FROM people) GROUP BY band",
    "SELECT g, AVG(a) AS m FROM (SELECT sex AS g, age AS a FROM people WHERE white) AS p WHERE a > 3 GROUP BY g",
    # chained CTEs, a derived column aggregated, WHERE at both levels, NULLs
    "WITH a AS (SELECT age, sex, region FROM people WHERE region <> 'N'), "
    "b AS (SELECT age + 1 AS older, age AS years, sex FROM a WHERE sex IS NOT NULL) "
    "SELECT sex, SUM(years) AS s, COUNT(years) AS c FROM b WHERE older < 15 GROUP BY sex",
    "SELECT COUNT(*) AS n FROM (SELECT black AS b FROM people) AS x WHERE x.b IS NOT TRUE",
    "WITH c(s, r) AS (SELECT sex, region FROM people) SELECT r, COUNT(s) AS n FROM c GROUP BY r",
    "SELECT k, COUNT(*) AS n FROM (SELECT age % 3 AS k FROM (SELECT age FROM people WHERE age IS NOT NULL) q) "
    "GROUP BY k",
    "SELECT older, COUNT(*) FROM (SELECT age + 1 AS older FROM people) GROUP BY older",
    "WITH people AS (SELECT * FROM people WHERE NOT white) SELECT region, COUNT(*) AS n FROM people GROUP BY region",
    "SELECT COUNT(*) AS n FROM ((SELECT age FROM people WHERE age > 3))",
    # a derived key and a derived column counted, NULLs included (NULLIF makes some)
    "SELECT k, COUNT(k) AS c, COUNT(*) FILTER (WHERE k > 1) AS big, COUNT(j) FILTER (WHERE sex = 'F') AS f "
    "FROM (SELECT NULLIF(age % 4, 3) AS k, age + score AS j, sex FROM people) GROUP BY k",
    "WITH c(s) AS (SELECT * FROM people) SELECT s, COUNT(*) AS n FROM c GROUP BY s",  # renames the first of *
    # a lookup join inside: the public table's columns as keys and summed
    "WITH j AS (SELECT p.sex, z.zone FROM people p JOIN zones z ON p.region = z.region) "
    "SELECT zone, COUNT(*) AS n FROM j GROUP BY zone",
    "SELECT s, AVG(km) AS k, COUNT(*) AS n FROM (SELECT p.sex AS s, z.km FROM people p LEFT JOIN zones z USING (region) "
    "WHERE p.age > 3) q WHERE q.s IS NOT NULL GROUP BY s",
]


@pytest.mark.parametrize("sql", ROW_BY_ROW)
def test_row_by_row_subqueries_are_exact(con, sql):
    batch = compile_batch(sql, SCHEMA)
    y = batch.workload.matvec(histogram(con, batch)) if batch.terms else np.zeros(0)
    compare(batch, 0, y, con, sql)


def released(con, sql: str) -> list[tuple]:
    """The statement's released table at a huge budget (the exact answers, post-processed)."""
    batch = compile_batch(sql, SCHEMA)
    y = batch.workload.matvec(histogram(con, batch))
    return [tuple(_py(v) for v in row) for row in postprocess(batch, y)[0].itertuples(index=False)]


def assert_same_rows(got: list[tuple], want: list[tuple], ordered: bool) -> None:
    want = [tuple(_py(v) for v in row) for row in want]
    if not ordered:
        got, want = sorted(got, key=repr), sorted(want, key=repr)
    assert len(got) == len(want), (got, want)
    for g, w in zip(got, want):
        for a, b in zip(g, w):
            if isinstance(b, float) or isinstance(a, float):
                assert a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9), (g, w)
            else:
                assert a == b, (g, w)


OVER_AGGREGATES = [
    ("WITH t AS (SELECT region, COUNT(*) AS n FROM people GROUP BY region) SELECT region, n FROM t WHERE n > 95 "
     "ORDER BY n DESC", True),
    ("SELECT r, n * 2 AS twice, n - 1 FROM (SELECT region AS r, COUNT(*) AS n FROM people GROUP BY region) "
     "ORDER BY r LIMIT 3", True),
    ("SELECT * FROM (SELECT sex, SUM(age) AS s, COUNT(*) AS n FROM people GROUP BY sex HAVING COUNT(*) > 10) "
     "WHERE s > 100", False),
    ("WITH rows AS (SELECT age AS a, region FROM people WHERE white AND age + 1 > 4), "
     "agg AS (SELECT region, AVG(a) AS m FROM rows GROUP BY region) SELECT region, m FROM agg WHERE m > 10 "
     "ORDER BY m", True),
    ("SELECT n FROM (SELECT COUNT(*) AS n FROM people WHERE age > 5)", False),
    ("SELECT region FROM (SELECT region, COUNT(*) AS n FROM people GROUP BY region ORDER BY n DESC LIMIT 2)", False),
    # a join of two aggregate results on their keys: each side's WHERE becomes its aggregates' FILTER
    ("WITH a AS (SELECT region, COUNT(*) AS n FROM people WHERE white GROUP BY region), "
     "b AS (SELECT region, SUM(age) AS s FROM people GROUP BY region) "
     "SELECT a.region, n, s, s / n AS m FROM a JOIN b ON a.region = b.region WHERE n > 3 ORDER BY m", True),
    ("SELECT region, n, s FROM (SELECT region, COUNT(*) AS n FROM people WHERE age > 3 GROUP BY region) AS a "
     "JOIN (SELECT region, AVG(age) AS s FROM people WHERE age > 3 GROUP BY 1) AS b USING (region)", False),
    ("SELECT x.sex, x.white, x.n - y.n AS d FROM (SELECT sex, white, COUNT(*) AS n FROM people GROUP BY sex, white) x "
     "INNER JOIN (SELECT sex, white, COUNT(black) AS n FROM people WHERE region <> 'N' GROUP BY sex, white) y "
     "ON x.sex = y.sex AND x.white = y.white", False),
    ("SELECT * FROM (SELECT sex x, COUNT(*) n FROM people GROUP BY x HAVING n > 2) a JOIN (SELECT sex x, SUM(age) m "
     "FROM people WHERE white GROUP BY 1 HAVING SUM(age) > 1) b USING (x)", False),
    # an outer WHERE over windows applies after them, to all the groups (a QUALIFY); top-N per group
    ("WITH r AS (SELECT region, COUNT(*) AS n, rank() OVER (ORDER BY COUNT(*) DESC) AS k FROM people "
     "GROUP BY region) SELECT region, n FROM r WHERE k <= 2 AND n > 1 ORDER BY k", True),
    ("SELECT * FROM (SELECT sex, region, COUNT(*) AS n, row_number() OVER (PARTITION BY sex ORDER BY COUNT(*) DESC, "
     "region) AS rn FROM people GROUP BY sex, region) WHERE rn = 1", False),
    ("SELECT sex, region, COUNT(*) AS n FROM people GROUP BY sex, region "
     "QUALIFY row_number() OVER (PARTITION BY sex ORDER BY COUNT(*), region) <= 2", False),
    ("SELECT n, s, s / n AS mean FROM (SELECT COUNT(*) AS n FROM people) AS a, "
     "(SELECT SUM(age) AS s FROM people WHERE white) AS b", False),
] + [
    # a share of the total: grouped results joined with a total, which is the sum of the groups' answers (a
    # window over them), NULL-key groups included; a HAVING or an outer WHERE applies after it (a QUALIFY)
    (f"WITH g AS (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex), t AS (SELECT COUNT(*) AS tot FROM people) "
     f"SELECT sex, 100.0 * n / tot AS pct FROM g {how}", False)
    for how in ("CROSS JOIN t", ", t", "JOIN t ON true", "JOIN t ON 1 = 1")
] + [
    ("SELECT tot, g.region, n, s * 1.0 / tot AS share FROM (SELECT SUM(age) AS tot, COUNT(age) AS c FROM people WHERE "
     "age > 3) t, (SELECT region, COUNT(*) AS n, SUM(age) AS s FROM people WHERE white GROUP BY region HAVING "
     "COUNT(*) > 40) g WHERE n < 60 ORDER BY share", True),
    ("SELECT a.sex, n, m, tot FROM (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex) a JOIN (SELECT sex, SUM(age) "
     "AS m FROM people WHERE white GROUP BY sex) b ON a.sex = b.sex CROSS JOIN (SELECT COUNT(*) - 1 AS tot, "
     "SUM(score) AS s FROM people WHERE age IS NULL) t", False),
    ("SELECT sex, white, n / tot AS f FROM (SELECT sex, white, COUNT(*) AS n FROM people WHERE age > 2 "
     "GROUP BY sex, white) g, (SELECT COUNT(*) AS tot FROM people WHERE age > 2) t ORDER BY f DESC LIMIT 4", True),
    # the same as a scalar subquery in the select list; its WHERE filters its aggregates, or is the outer one
    ("SELECT sex, COUNT(*) * 1.0 / (SELECT COUNT(*) FROM people) FROM people GROUP BY sex", False),
    ("SELECT region, COUNT(*) AS n, 100.0 * SUM(age) / (SELECT SUM(age) FROM people WHERE white) AS pct, "
     "(SELECT COUNT(*) - COUNT(age) FROM people p) AS missing FROM people GROUP BY region HAVING n > 95 ORDER BY pct",
     True),
    ("SELECT sex, COUNT(*) * 1.0 / (SELECT COUNT(*) FROM people WHERE age > 3) AS f FROM people WHERE age > 3 "
     "GROUP BY sex ORDER BY f LIMIT 2", True),
    ("SELECT COUNT(*) / (SELECT COUNT(*) FROM (SELECT * FROM people WHERE NOT white)) AS f FROM people WHERE NOT white",
     False),
    # over an aggregate subquery: its HAVING applies after the window, its LIMIT after it too, as in DuckDB
    ("SELECT sex, n * 1.0 / (SELECT COUNT(*) FROM people WHERE age > 2) AS f FROM (SELECT sex, COUNT(*) AS n "
     "FROM people WHERE age > 2 GROUP BY sex HAVING COUNT(*) > 60)", False),
    ("SELECT sex, n * 1.0 / (SELECT COUNT(*) FROM people) AS f FROM (SELECT sex, COUNT(*) AS n FROM people "
     "GROUP BY sex ORDER BY n DESC LIMIT 1)", True),
]


@pytest.mark.parametrize("sql, ordered", OVER_AGGREGATES)
def test_outer_queries_over_aggregates_are_post_processing_and_exact(con, sql, ordered):
    assert_same_rows(released(con, sql), con.sql(sql).fetchall(), ordered)


def test_outer_query_costs_nothing_more():
    inner = "SELECT region, COUNT(*) AS n FROM people GROUP BY region"
    alone = compile_batch(inner, SCHEMA)
    over = compile_batch(f"SELECT region, n FROM ({inner}) WHERE n > 3 ORDER BY n LIMIT 2", SCHEMA)
    assert over.workload.shape == alone.workload.shape
    assert np.array_equal(over.workload.dense() if hasattr(over.workload, "dense") else over.workload.matrix(),
                          alone.workload.dense() if hasattr(alone.workload, "dense") else alone.workload.matrix())


def test_a_share_of_the_total_costs_the_grouped_query_alone():
    """The total is the sum of the groups' answers: the workload is the grouped query's, unchanged."""
    grouped = "SELECT sex, COUNT(*) AS n FROM people WHERE age > 2 GROUP BY sex"
    alone = compile_batch(grouped, SCHEMA)
    share = compile_batch(f"SELECT sex, n * 1.0 / tot AS f FROM ({grouped}) g, "
                          "(SELECT COUNT(*) AS tot FROM people WHERE age > 2) t", SCHEMA)
    assert np.array_equal(share.workload.dense() if hasattr(share.workload, "dense") else share.workload.matrix(),
                          alone.workload.dense() if hasattr(alone.workload, "dense") else alone.workload.matrix())


def test_a_total_over_groups_with_an_empty_group(con):
    """Every group of the key's domain is released, an empty one too (at a huge budget, a count of
    0, which DuckDB does not return): the total, their sum, is DuckDB's exactly."""
    sql = ("SELECT age, n, tot FROM (SELECT age, COUNT(*) AS n FROM people WHERE score > 9 AND white GROUP BY age) g, "
           "(SELECT COUNT(*) AS tot FROM people WHERE score > 9 AND white) t")
    got = {row[0]: row[1:] for row in released(con, sql)}
    want = {_py(row[0]): tuple(_py(v) for v in row[1:]) for row in con.sql(sql).fetchall()}
    empty = set(got) - set(want)
    assert empty and all(got[k][0] == 0 for k in empty)  # this table has one: age 18
    assert {k: got[k] for k in want} == want


@pytest.mark.parametrize("sql", [
    "WITH g AS (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex), "
    "t AS (SELECT COUNT(*) AS tot FROM people WHERE white) SELECT sex, 100.0 * n / tot AS pct FROM g, t",
    "SELECT sex, 100.0 * COUNT(*) / (SELECT COUNT(*) FROM people WHERE white) AS pct FROM people GROUP BY sex",
])
def test_a_share_of_the_total_at_a_huge_epsilon(con, sql):
    import dpsql
    from dpsql.private.budget import Budget

    db = dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=1e13), cache=False, progress=False)
    df = db.query(sql, epsilon=1e12, noise="laplace").df
    want = {_py(r[0]): float(r[1]) for r in con.sql(sql).fetchall()}
    assert {_py(k): v for k, v in zip(df["sex"], df["pct"])} == pytest.approx(want, rel=1e-6)
    assert (df["std_error"] > 0).all() and db.spent().epsilon == 1e12  # the windows' delta method


REFUSED = [
    ("SELECT COUNT(*) FROM (SELECT DISTINCT region FROM people)", "SELECT DISTINCT", "DISTINCT"),
    ("SELECT COUNT(*) FROM (SELECT age FROM people LIMIT 10)", "LIMIT", "LIMIT"),
    ("SELECT COUNT(*) FROM (SELECT age, ROW_NUMBER() OVER () AS r FROM people) WHERE r < 5", "window function",
     "ROW_NUMBER"),
    ("SELECT COUNT(*) FROM (SELECT age FROM people UNION ALL SELECT age FROM people)", "UNION", "UNION"),
    ("SELECT SUM(n) FROM (SELECT region, COUNT(*) AS n FROM people GROUP BY region)", "aggregate of an aggregate",
     "SUM(n)"),
    ("WITH t AS (SELECT region, COUNT(*) AS n FROM people GROUP BY region) SELECT n, COUNT(*) FROM t GROUP BY n",
     "aggregate of an aggregate", "GROUP BY n"),
    ("SELECT COUNT(*) FROM (SELECT p.age FROM people p JOIN people q ON p.age = q.age)", "JOIN", "JOIN people q"),
    ("WITH RECURSIVE r AS (SELECT 1 AS x) SELECT COUNT(*) FROM r", "WITH RECURSIVE", "WITH"),
    ("SELECT COUNT(*) FROM (SELECT age AS a FROM people) WHERE hours > 3", "column 'hours'", "hours > 3"),
    ("SELECT region FROM (SELECT region, COUNT(*) AS n FROM people GROUP BY region LIMIT 2) WHERE n > 3", "WHERE",
     "WHERE n > 3"),
    ("SELECT * FROM (SELECT region, COUNT(*) AS n FROM people GROUP BY region) a LEFT JOIN "
     "(SELECT region, COUNT(*) AS m FROM people GROUP BY region) b USING (region)", "LEFT JOIN", "LEFT JOIN"),
    ("SELECT a.sex, n, m FROM (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex) a JOIN "
     "(SELECT region, COUNT(*) AS m FROM people GROUP BY region) b ON a.sex = b.region", "JOIN", "JOIN"),
    ("SELECT a.sex, n, m FROM (SELECT sex, region, COUNT(*) AS n FROM people GROUP BY sex, region) a JOIN "
     "(SELECT sex, region, COUNT(*) AS m FROM people GROUP BY sex, region) b ON a.sex = b.sex", "JOIN condition",
     "a.sex = b.sex"),
    ("SELECT n FROM (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex) a JOIN zones z ON a.sex = z.region",
     "JOIN", "JOIN zones"),
    ("WITH g AS (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex), t AS (SELECT AVG(age) AS m FROM people) "
     "SELECT sex, n, m FROM g CROSS JOIN t", "AVG", "AVG(age)"),
    ("WITH g AS (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex), t AS (SELECT COUNT(DISTINCT age) AS m FROM "
     "people) SELECT sex, n, m FROM g, t", "COUNT(DISTINCT)", "COUNT(DISTINCT"),
    ("WITH g AS (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex), t AS (SELECT COUNT(*) AS m FROM people "
     "HAVING COUNT(*) > 3) SELECT sex, n, m FROM g, t", "HAVING", "HAVING"),
    ("WITH g AS (SELECT sex, COUNT(*) AS n FROM people GROUP BY sex), t AS (SELECT COUNT(*) AS m FROM people) "
     "SELECT sex, n, m FROM g JOIN t ON g.n = t.m", "JOIN condition", "g.n = t.m"),
    ("SELECT sex, COUNT(*) * 1.0 / (SELECT COUNT(*) FROM people) AS f FROM people WHERE age > 3 GROUP BY sex",
     "subquery", "(SELECT"),
    ("SELECT sex, COUNT(*) / (SELECT AVG(age) FROM people) AS f FROM people GROUP BY sex", "AVG", "AVG"),
    ("SELECT sex, COUNT(*) / (SELECT COUNT(*) FROM people) AS f FROM people GROUP BY ROLLUP (sex)", "GROUP BY",
     "GROUP BY"),
    ("SELECT sex, COUNT(*) / (SELECT COUNT(*) FROM people LIMIT 1) AS f FROM people GROUP BY sex", "LIMIT", "LIMIT"),
    ("SELECT sex, COUNT(*) / (SELECT COUNT(*) FROM people GROUP BY sex) AS f FROM people GROUP BY sex", "subquery",
     "(SELECT"),
]


@pytest.mark.parametrize("sql, construct, marker", REFUSED)
def test_what_changes_sensitivity_is_refused_by_name(sql, construct, marker):
    with pytest.raises(E.SQLError) as info:
        compile_batch(sql, SCHEMA)
    assert info.value.construct == construct, str(info.value)
    off = sql.index(marker)
    assert (info.value.line, info.value.column) == (1, off + 1), str(info.value)


def test_docs_examples_run(capsys):
    import os
    import re

    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "sql.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    scope: dict = {}
    for code in blocks:
        exec(compile(code, "docs/sql.md", "exec"), scope)
    assert set(scope["adults"].df["band"]) == {"older", "young"}
    assert len(scope["common"].df) <= 3 and scope["db"].spent().epsilon == 1.0
    assert (scope["share"].df["pct_std_error"] > 0).all()
    assert list(scope["top"].df.columns[:2]) == ["smoker", "n"]


GEO = {"table": "p", "columns": {"geo": {"type": "hierarchy", "values": ["0601", "0602", "0701"],
                                         "levels": {"state": 2, "county": 4}},
                                 "age": {"type": "integer", "min": 0, "max": 9}}}


@pytest.mark.parametrize("sql", [
    # a CTE's * holds the levels, as DuckDB binds the table (they were unknown columns there)
    "WITH c AS (SELECT * FROM p WHERE age > 3) SELECT state, COUNT(*) AS n FROM c GROUP BY state",
    "SELECT county, state, SUM(age) AS s FROM (SELECT * FROM p) GROUP BY county, state",
    "WITH c AS (SELECT county, COUNT(*) AS n FROM p GROUP BY county) SELECT * FROM c WHERE n > 5",
    "WITH c AS (SELECT state AS st, age FROM p) SELECT st, COUNT(*) AS n FROM c WHERE age < 7 GROUP BY st",
])
def test_a_subquery_names_a_hierarchy_level(sql):
    import duckdb

    rng = np.random.default_rng(2)
    con = duckdb.connect()
    con.execute("CREATE TABLE p AS SELECT * FROM (VALUES " + ", ".join(
        f"('{g}', {a}, '{g[:2]}', '{g}')" for g, a in zip(rng.choice(["0601", "0602", "0701"], 60),
                                                           rng.integers(0, 10, 60))) + ") t(geo, age, state, county)")
    batch = compile_batch(sql, GEO)
    assert batch.domain == (3, 10)  # geo's codes, then age
    x = np.zeros(30)
    for geo, age in con.sql("SELECT geo, age FROM p").fetchall():
        x[["0601", "0602", "0701"].index(geo) * 10 + age] += 1
    assert_same_rows([tuple(_py(v) for v in r) for r in
                      postprocess(batch, batch.workload.matvec(x))[0].itertuples(index=False)],
                     con.sql(sql).fetchall(), False)
    con.close()


AFFINE = [
    "SELECT SUM(age + 1) AS s FROM people",
    "SELECT sex, AVG(2 * age - 3) AS a, SUM(age / 2 + 1) AS h, SUM(-(age - 10) * 3) AS n FROM people GROUP BY sex",
    "WITH t AS (SELECT age + 1 AS a1, sex FROM people) SELECT sex, SUM(a1) AS s, AVG(a1) AS m FROM t GROUP BY sex",
    "SELECT region, SUM(1 - age) FILTER (WHERE white) AS s FROM people GROUP BY region HAVING SUM(age + 1) > 10 "
    "ORDER BY region",
    # no value to sum: NULL, as DuckDB's
    "SELECT sex, SUM(age + 1) AS s, AVG(age * 2) AS m FROM people WHERE age IS NULL GROUP BY sex",
    "SELECT SUM(hours * 2 + 1) AS s, AVG(hours - 1) AS m FROM people",
    # a cast of an integer column to a type holding each of its values exactly (T-SQL's AVG(CAST(age AS FLOAT)))
    "SELECT sex, AVG(CAST(age AS DOUBLE)) AS a, SUM(age::FLOAT) AS s, AVG(2 * CAST(age AS REAL) + 1) AS m "
    "FROM people GROUP BY sex",
]


@pytest.mark.parametrize("sql", AFFINE)
def test_sum_and_avg_of_an_affine_column_are_exact(con, sql):
    """They were refused ("SUM takes a column name")."""
    assert_same_rows(released(con, sql), con.sql(sql).fetchall(), "ORDER BY" in sql)


def test_sum_of_an_affine_column_at_a_huge_epsilon(con):
    import dpsql
    from dpsql.private.budget import Budget

    db = dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=1e13), cache=False, progress=False)
    df = db.query(AFFINE[2], epsilon=1e12, noise="laplace").df
    want = {r[0]: r[1:] for r in con.sql(AFFINE[2]).fetchall()}
    for sex, s, m in df[["sex", "s", "m"]].itertuples(index=False):
        assert np.allclose([s, m], [float(v) for v in want[_py(sex)]], rtol=1e-6), (sex, s, m, want)
    assert list(df.columns) == ["sex", "s", "s_std_error", "s_ci_low", "s_ci_high", "m", "m_std_error", "m_ci_low",
                                "m_ci_high"]
