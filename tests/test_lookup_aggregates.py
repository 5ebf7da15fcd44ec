"""SUM and AVG of a public lookup table's numeric column joined on the private key: a weighted
count over the key's domain, against DuckDB's join."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pandas as pd
import pytest
from sql_oracle import _py, histogram

import dpsql
from dpsql.errors import UnsupportedSQLError
from dpsql.private.budget import Budget
from dpsql.sql import compile_batch

SCHEMA = {"table": "p", "columns": {"sex": {"type": "categorical", "values": ["F", "M"], "nullable": True},
                                    "educ": {"type": "categorical", "values": ["HS", "BA", "MA", "PhD"],
                                             "nullable": True},
                                    "age": {"type": "integer", "min": 0, "max": 9}},
          # PhD has no row (NULL in a LEFT join), XX is not a value of educ
          "public_tables": {"yrs": {"columns": ["educ", "years", "label"],
                                    "rows": [["HS", 12, "a"], ["BA", 16, "b"], ["MA", 18.5, "c"], ["XX", 99, "d"]]}}}

STATEMENTS = [
    "SELECT sex, AVG(l.years) AS a, SUM(l.years) AS s, COUNT(*) AS n FROM p JOIN yrs l USING (educ) GROUP BY sex",
    "SELECT sex, AVG(years) AS a, SUM(years) AS s, AVG(age) AS aa FROM p LEFT JOIN yrs USING (educ) GROUP BY sex",
    "SELECT AVG(l.years) FILTER (WHERE age > 3) AS a, SUM(CASE WHEN sex = 'F' THEN l.years END) AS f "
    "FROM p AS q LEFT JOIN yrs AS l ON q.educ = l.educ",
    "SELECT age > 4 AS old, AVG(years) AS a FROM p LEFT JOIN yrs USING (educ) GROUP BY old HAVING AVG(years) > 0",
]


@pytest.fixture(scope="module")
def con():
    rng = np.random.default_rng(0)
    n = 200
    df = pd.DataFrame({"sex": [None if rng.random() < .1 else x for x in rng.choice(["F", "M"], n)],
                       "educ": [None if rng.random() < .1 else x for x in rng.choice(["HS", "BA", "MA", "PhD"], n)],
                       "age": rng.integers(0, 10, n)})
    c = duckdb.connect()
    c.register("df", df)
    c.execute("CREATE TABLE p AS SELECT sex::VARCHAR AS sex, educ::VARCHAR AS educ, age::INTEGER AS age FROM df")
    c.execute("CREATE TABLE yrs (educ VARCHAR, years DOUBLE, label VARCHAR)")
    c.executemany("INSERT INTO yrs VALUES (?, ?, ?)", SCHEMA["public_tables"]["yrs"]["rows"])
    yield c
    c.close()


def _rows(df):
    return sorted([tuple(_py(v) for v in r) for r in df.itertuples(index=False)], key=str)


def _same(got, want, sql):
    assert len(got) == len(want), sql
    for g_row, w_row in zip(got, sorted([tuple(_py(v) for v in r) for r in want], key=str)):
        for g, w in zip(g_row, w_row):
            if isinstance(w, float) or isinstance(g, float):
                assert math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-6), (sql, g_row, w_row)
            else:
                assert g == w, (sql, g_row, w_row)


@pytest.mark.parametrize("sql", STATEMENTS)
def test_lookup_sums_are_exact(con, sql):
    batch = compile_batch(sql, SCHEMA)
    y = batch.workload.matvec(histogram(con, batch, table="p"))
    from dpsql.sql.postprocess import postprocess
    _same(_rows(postprocess(batch, y)[0]), con.sql(sql).fetchall(), sql)


def test_bounds_come_from_the_public_values():
    plan = compile_batch(STATEMENTS[0], SCHEMA).statements[0].plan
    assert plan.aggregates[0].bounds == (12.0, 18.5)  # XX matches no value of educ


def test_released_lookup_averages_equal_duckdbs_at_a_huge_epsilon(con):
    db = dpsql.connect(con, table="p", schema=SCHEMA, budget=Budget(epsilon=1e13), cache=False, progress=False)
    for sql, res in zip(STATEMENTS[:2], db.batch(STATEMENTS[:2], epsilon=1e12, noise="laplace")):
        got = res.df[[c for c in res.df.columns if not c.endswith(("std_error", "ci_low", "ci_high"))]]
        assert len(got) == len(con.sql(sql).fetchall())
        for g_row, w_row in zip(_rows(got), sorted([tuple(_py(v) for v in r) for r in con.sql(sql).fetchall()],
                                                   key=str)):
            for g, w in zip(g_row, w_row):
                assert (g == w) if isinstance(w, str) or w is None else math.isclose(g, w, rel_tol=1e-5,
                                                                                     abs_tol=1e-5), (sql, g, w)


@pytest.mark.parametrize("sql,words", [
    ("SELECT SUM(l.label) FROM p JOIN yrs l USING (educ)", "its values are not numbers"),
    ("SELECT VAR_POP(l.years) FROM p JOIN yrs l USING (educ)", "reads a column of a public lookup table"),
])
def test_what_a_lookup_aggregate_cannot_read_is_refused(sql, words):
    with pytest.raises(UnsupportedSQLError, match=words):
        compile_batch(sql, SCHEMA)
