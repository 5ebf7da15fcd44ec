"""Window functions over aggregates: post-processing of the released groups, against DuckDB.
Windows over the table's rows stay refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sql_oracle import SCHEMA, _py, histogram, make_table

import dpsql
from dpsql.errors import UnsupportedSQLError
from dpsql.private.budget import Budget
from dpsql.sql import compile_batch
from dpsql.sql.postprocess import postprocess

# every group is present in the data (so dpsql's groups, which cover the keys' domain, are DuckDB's)
STATEMENTS = [
    "SELECT region, COUNT(*) AS n, ROUND(100.0 * COUNT(*) / SUM(COUNT(*)) OVER (), 1) AS pct FROM people "
    "GROUP BY region ORDER BY region",
    "SELECT sex, region, COUNT(*) AS n, rank() OVER (PARTITION BY sex ORDER BY COUNT(*) DESC) AS r, "
    "SUM(COUNT(*)) OVER (PARTITION BY sex) AS total FROM people WHERE sex IS NOT NULL GROUP BY sex, region "
    "HAVING COUNT(*) > 30 ORDER BY sex, r, region",
    "SELECT region, AVG(age) AS a, row_number() OVER (ORDER BY AVG(age) DESC) AS rn FROM people GROUP BY region "
    "ORDER BY rn",
    "SELECT region, COUNT(*) AS n, ntile(2) OVER (ORDER BY COUNT(*)) AS half, lag(COUNT(*), 1, 0) OVER "
    "(ORDER BY region) AS prev, dense_rank() OVER (ORDER BY region DESC) AS dr, percent_rank() OVER "
    "(ORDER BY COUNT(*)) AS pr, cume_dist() OVER (ORDER BY COUNT(*)) AS cd, SUM(COUNT(*)) OVER (ORDER BY region "
    "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS running FROM people GROUP BY region "
    "ORDER BY rank() OVER (ORDER BY COUNT(*) DESC)",
    "SELECT SUM(COUNT(*)) OVER () AS total, COUNT(*) AS n, AVG(SUM(age)) OVER () AS s FROM people WHERE age > 3",
    "SELECT sex, COUNT(*) AS n, GROUPING(sex) AS g, SUM(COUNT(*)) OVER (PARTITION BY GROUPING(sex)) AS t "
    "FROM people GROUP BY ROLLUP (sex) ORDER BY g, sex",
]


def _same_rows(got, want, context):
    assert len(got) == len(want), context
    for row, exact in zip(got, want):
        for g, w in zip(row, exact):
            g, w = _py(g), _py(w)
            if isinstance(w, float) or isinstance(g, float):
                assert g is not None and w is not None and math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-6), \
                    (context, row, exact)
            else:
                assert g == w, (context, row, exact)


@pytest.fixture(scope="module")
def con():
    c = make_table(n=300, seed=1)
    yield c
    c.close()


@pytest.mark.parametrize("sql", STATEMENTS)
def test_windows_over_exact_answers_are_duckdbs(con, sql):
    batch = compile_batch(sql, SCHEMA)
    table = postprocess(batch, batch.workload.matvec(histogram(con, batch)))[0]
    _same_rows(list(table.itertuples(index=False)), con.sql(sql).fetchall(), sql)


def test_released_windows_equal_duckdbs_at_a_huge_epsilon(con):
    db = dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=1e13), cache=False, progress=False)
    results = db.batch(STATEMENTS[:3], epsilon=1e12, noise="laplace")
    for sql, res in zip(STATEMENTS, results):
        got = res.df[[c for c in res.df.columns if not c.endswith(("std_error", "ci_low", "ci_high"))]]
        _same_rows(list(got.itertuples(index=False)), con.sql(sql).fetchall(), sql)


def test_a_window_has_no_standard_error_but_its_aggregates_do(con):
    db = dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=10), cache=False, progress=False)
    df = db.query(STATEMENTS[0], epsilon=1).df
    assert np.isfinite(df["n_std_error"]).all() and df["pct_std_error"].isna().all()


@pytest.mark.parametrize("sql,words", [
    ("SELECT COUNT(*) OVER () FROM people", "window functions over the table's rows"),
    ("SELECT sex, SUM(age) OVER (PARTITION BY sex) FROM people", "window functions over the table's rows"),
    ("SELECT row_number() OVER (ORDER BY age) FROM people", "window functions over the table's rows"),
    ("SELECT sex, COUNT(*) FROM people GROUP BY sex HAVING SUM(COUNT(*)) OVER () > 3", "not allowed in HAVING"),
    ("SELECT COUNT(*) FROM people WHERE row_number() OVER () > 1", "not allowed in WHERE"),
    ("SELECT sex, abs(COUNT(*)) OVER () FROM people GROUP BY sex", "window function ABS is not supported"),
])
def test_windows_over_rows_are_refused(sql, words):
    with pytest.raises(UnsupportedSQLError, match=words):
        compile_batch(sql, SCHEMA)


def test_within_group_read_after_noise_is_not_nested(con):
    """ORDER BY PERCENTILE_DISC(q) WITHIN GROUP (...) was refused as a nested aggregate."""
    sql = ("SELECT region, COUNT(*) AS n FROM people GROUP BY region "
           "ORDER BY PERCENTILE_DISC(0.3) WITHIN GROUP (ORDER BY age DESC), region")
    batch = compile_batch(sql, SCHEMA)
    table = postprocess(batch, batch.workload.matvec(histogram(con, batch)))[0]
    _same_rows(list(table.itertuples(index=False)), con.sql(sql).fetchall(), sql)
