"""Proportions: AVG of a condition made 1, 0 or NULL is the ratio of two counts, exact against
DuckDB (its NULLs skipped, NULL for a group with nothing to average), with the delta method's
standard error of that ratio."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sql_oracle import SCHEMA, Generated, _py, assert_released_near_exact, check_statements, make_table

import dpsql
import dpsql.errors as E
from dpsql.private.budget import Budget

PROPORTIONS = [
    # every row counts: a NULL condition is 0
    "SELECT sex, AVG(CASE WHEN white THEN 1 ELSE 0 END) AS p FROM people GROUP BY sex",
    "SELECT region, AVG(CASE WHEN black THEN 1.0 ELSE 0 END) AS p FROM people GROUP BY region",
    # NULL where the condition is NULL: skipped by AVG
    "SELECT region, AVG(black::INT) AS p FROM people GROUP BY region",
    "SELECT region, AVG(CAST(black AS DOUBLE)) AS p FROM people GROUP BY region",
    "SELECT sex, AVG((age > 10)::INTEGER) AS p FROM people GROUP BY sex",
    "SELECT sex, AVG(TRY_CAST(hours < 20 AS BIGINT)) AS p FROM people GROUP BY sex",
    # 1 or NULL: 1 where any row holds, NULL where none does
    "SELECT age, AVG(CASE WHEN black THEN 1 END) AS p FROM people GROUP BY age",
    "SELECT age, AVG(CASE WHEN sex = 'F' THEN 1 ELSE NULL END) AS p FROM people GROUP BY age",
    # the NULL group of the condition's own column has nothing to average: NULL
    "SELECT black, AVG(black::INT) AS p FROM people GROUP BY black",
    # conditions over several columns, a binned column's cut, FILTER, WHERE, a CASE around it
    "SELECT age, AVG(CASE WHEN black OR sex = 'F' THEN 1 ELSE 0 END) AS p FROM people WHERE age < 4 GROUP BY age",
    "SELECT sex, AVG((hours >= 20)::INT) FILTER (WHERE white) AS p FROM people GROUP BY sex",
    "SELECT sex, AVG(CASE WHEN region = 'E' THEN CAST(black AS INT) END) AS p FROM people GROUP BY sex",
    "SELECT region, AVG(COALESCE(CAST(score > 2 AS INT), 1)) AS p, AVG(CASE WHEN age > 5 THEN 0 ELSE 1 END) AS q "
    "FROM people GROUP BY region",
    # groups of the domain no row falls in (DuckDB returns none): undefined, as for AVG
    "SELECT age, region, AVG(white::INT) AS p FROM people WHERE age > 18 GROUP BY age, region",
    "SELECT AVG(CASE WHEN white THEN 1 ELSE 0 END) AS p, AVG(black::INT) AS q FROM people",
]


@pytest.fixture(scope="module")
def con():
    c = make_table(300, seed=5)
    yield c
    c.close()


@pytest.mark.parametrize("sql", PROPORTIONS)
def test_proportions_equal_duckdb(con, sql):
    check_statements([Generated(sql, sql)], con)


def test_a_group_without_rows_to_average_is_null(con):
    """The NULL group of black has no row where black::INT is not NULL: DuckDB's AVG is NULL there, and so is ours."""
    sql = "SELECT black, AVG(black::INT) AS p FROM people GROUP BY black"
    assert (None, None) in con.sql(sql).fetchall()
    batch = dpsql.compile_batch(sql, SCHEMA)
    check_statements([Generated(sql, sql)], con)
    assert batch.statements[0].groups[-1] == (None,)


def test_released_proportions_equal_duckdb_at_huge_epsilon(con):
    db = dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=1e12, delta=0.5), cache=False)
    sql = ("SELECT age, AVG(CASE WHEN white THEN 1 ELSE 0 END) AS p, AVG(black::INT) AS q, "
           "AVG(CASE WHEN sex = 'F' THEN 1 END) AS r FROM people GROUP BY age")
    res = db.query(sql, epsilon=1e9)
    exact = {_py(row[0]): row for row in con.sql(sql).fetchall()}
    assert len(res.df) == 22  # every age and NULL
    for _, row in res.df.iterrows():
        want = exact.get(_py(row["age"]))
        for i, name in enumerate(["p", "q", "r"], start=1):
            assert_released_near_exact("avg", row[name], None if want is None else want[i], (sql, row["age"]))
            if want is None or want[i] is None:
                assert math.isnan(row[name]) and math.isnan(row[f"{name}_std_error"])


def test_the_standard_error_is_that_of_the_ratio_of_the_two_counts(con):
    """AVG(CASE WHEN c THEN 1 ELSE 0 END) is SUM(CASE WHEN c THEN 1 ELSE 0 END) / COUNT(*): the same
    value and, by the delta method over the two counts' covariance, the same standard error."""
    db = dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=100.0), cache=False)
    res = db.query("SELECT region, AVG(CASE WHEN white THEN 1 ELSE 0 END) AS p, AVG(black::INT) AS q, "
                   "SUM(CASE WHEN white THEN 1 ELSE 0 END) / COUNT(*) AS r, "
                   "COUNT(*) FILTER (WHERE black) / COUNT(black) AS s FROM people GROUP BY region", epsilon=1.0)
    df = res.df
    assert np.allclose(df["p"], df["r"], rtol=1e-9) and np.allclose(df["q"], df["s"], rtol=1e-9)
    assert np.allclose(df["p_std_error"], df["r_std_error"], rtol=1e-6)
    assert np.allclose(df["q_std_error"], df["s_std_error"], rtol=1e-6)
    assert (df["p_std_error"] > 0).all() and (df["p_std_error"] < 0.2).all()


@pytest.mark.parametrize("sql", [
    "SELECT AVG(CASE WHEN age > 3 THEN 2 ELSE 0 END) FROM people",  # 2 and 0: not a proportion
    "SELECT AVG(CASE WHEN age > 3 THEN age ELSE 0 END) FROM people",
    "SELECT AVG(score::INT) FROM people",  # 1, 2, 5, 10
    "SELECT AVG(white) FROM people",  # DuckDB has no AVG(BOOLEAN)
])
def test_averages_of_other_values_are_still_refused(sql):
    with pytest.raises(E.SQLError):
        dpsql.compile_batch(sql, SCHEMA)
