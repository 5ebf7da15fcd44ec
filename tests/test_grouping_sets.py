"""GROUPING SETS, ROLLUP, CUBE and GROUPING(): every margin of a tabulation in one statement,
against DuckDB: the compiled queries exactly, and the released rows at a huge epsilon."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sql_oracle import HOURS_BIN_SQL, SCHEMA, SCORE_CLAMPED, Generated, _py, check_statements, make_table

import dpsql
from dpsql.errors import GroupingError
from dpsql.private.budget import Budget
from dpsql.sql import compile_batch


@pytest.fixture(scope="module")
def con():
    c = make_table(n=400, seed=5)
    yield c
    c.close()


def same(sql: str, oracle: str | None = None) -> Generated:
    return Generated(sql, oracle or sql)


# Each selects GROUPING(every key, in GROUP BY order) AS gid: the oracle tells the sets apart by it.
STATEMENTS = [
    same("SELECT sex, region, COUNT(*) AS n, AVG(age) AS a, GROUPING(sex, region) AS gid FROM people "
         "GROUP BY ROLLUP (sex, region)"),
    Generated("SELECT sex, white, SUM(score) AS s, VAR_SAMP(age) AS v, GROUPING(sex, white) AS gid FROM people "
              "WHERE age > 3 GROUP BY CUBE (sex, white)",
              f"SELECT sex, white, SUM({SCORE_CLAMPED}) AS s, VAR_SAMP(age) AS v, GROUPING(sex, white) AS gid "
              "FROM people WHERE age > 3 GROUP BY CUBE (sex, white)"),
    same("SELECT region, age // 5 AS a5, MEDIAN(age) AS m, COUNT(black) AS nb, GROUPING(region, age // 5) AS gid "
         "FROM people GROUP BY GROUPING SETS ((region, a5), (a5), ())"),
    same("SELECT sex, region, black, COUNT(*) AS n, GROUPING(sex, region, black) AS gid FROM people "
         "GROUP BY sex, ROLLUP (region, black)"),
    same("SELECT sex, region, COUNT(*) AS n, GROUPING(sex, region) AS gid FROM people "
         "GROUP BY ROLLUP ((sex, region))"),
    same("SELECT region, COUNT(*) FILTER (WHERE white) AS n, GROUPING(region) AS gid FROM people "
         "WHERE age > 100 GROUP BY ROLLUP (region)"),  # no row can be kept: only the grand total, 0
    Generated("SELECT hours, sex, SUM(hours) AS s, GROUPING(hours, sex) AS gid FROM people GROUP BY CUBE (1, 2)",
              f"SELECT {HOURS_BIN_SQL} AS hours, sex, SUM(hours) AS s, GROUPING({HOURS_BIN_SQL}, sex) AS gid "
              "FROM people GROUP BY CUBE (1, 2)"),
    Generated("SELECT sex, region, COUNT(*) AS n, GROUPING(sex, region) AS gid FROM people "
              "GROUP BY sex, region WITH ROLLUP",
              "SELECT sex, region, COUNT(*) AS n, GROUPING(sex, region) AS gid FROM people "
              "GROUP BY ROLLUP (sex, region)"),
]


def test_every_set_is_exact(con):
    check_statements(STATEMENTS, con)


def test_sets_are_expanded_as_the_sql_standard_does():
    def sets(group_by):
        batch = compile_batch(f"SELECT COUNT(*) FROM people GROUP BY {group_by}", SCHEMA)
        plan = batch.statements[0].plan
        return [tuple(plan.keys[k].name for k in s) for s in plan.grouping_sets]

    assert sets("ROLLUP (sex, region, white)") == [("sex", "region", "white"), ("sex", "region"), ("sex",), ()]
    assert sets("CUBE (sex, region)") == [("sex", "region"), ("sex",), ("region",), ()]
    assert sets("sex, CUBE (region)") == [("sex", "region"), ("sex",)]
    assert sets("ROLLUP (sex), ROLLUP (region)") == [("sex", "region"), ("sex",), ("region",), ()]
    assert sets("GROUPING SETS (sex, ROLLUP (region), ())") == [("sex",), ("region",), (), ()]
    assert sets("sex, ROLLUP (sex, region)") == [("sex", "region"), ("sex",), ("sex",)]


def test_grouping_names_keys_only():
    with pytest.raises(GroupingError, match="GROUPING takes group keys: age in SELECT"):
        compile_batch("SELECT sex, COUNT(*), GROUPING(age) FROM people GROUP BY ROLLUP (sex)", SCHEMA)


def test_released_rows_equal_duckdbs_row_for_row(con):
    """At a huge epsilon the result is DuckDB's, NULL keys of the margins, GROUPING(), HAVING and
    ORDER BY included, and duplicate sets giving duplicate rows, as DuckDB's do; every set is
    measured in one release."""
    db = dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=1e13), cache=False, progress=False)
    texts = [
        "SELECT sex, region, COUNT(*) AS n, AVG(age) AS a, GROUPING(sex, region) AS g FROM people "
        "GROUP BY ROLLUP (sex, region) HAVING n > 0.5 ORDER BY g, sex, region",
        "SELECT white, score, SUM(age) AS s, STDDEV_SAMP(age) AS sd FROM people GROUP BY CUBE (white, score) "
        "HAVING COUNT(*) > 0.5 AND GROUPING(score) = 1 ORDER BY ALL",
        "SELECT region, COUNT(*) AS n FROM people GROUP BY GROUPING SETS ((region), (region), ()) "
        "HAVING n > 0.5 ORDER BY GROUPING(region) DESC, region",
    ]
    results = db.batch(texts, epsilon=1e12, noise="laplace")
    assert len(db.ledger.entries()) == 1
    for text, res in zip(texts, results):
        want = con.sql(text).fetchall()
        got = res.df[[c for c in res.df.columns if not c.endswith(("std_error", "ci_low", "ci_high"))]]
        assert len(got) == len(want), text
        for row, exact in zip(got.itertuples(index=False), want):
            for g, w in zip(row, exact):
                g, w = _py(g), _py(w)
                if isinstance(w, float) or isinstance(g, float):
                    assert g is not None and w is not None and math.isclose(g, w, rel_tol=1e-3, abs_tol=1e-3), \
                        (text, row, exact)
                else:
                    assert g == w, (text, row, exact)


def test_margins_have_standard_errors(con):
    db = dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=10), cache=False, progress=False)
    df = db.query("SELECT sex, COUNT(*) AS n, AVG(age) AS a FROM people GROUP BY ROLLUP (sex)", epsilon=1).df
    assert len(df) == 4 and df["sex"].tolist()[:3] == ["F", "M", None]
    assert np.isfinite(df["n_std_error"]).all() and np.isfinite(df["a_std_error"]).all()
    plan = db.query("EXPLAIN SELECT sex, COUNT(*) AS n FROM people GROUP BY ROLLUP (sex)", epsilon=1).statements[0]
    assert np.isfinite(plan["std_error"]).all() and len(plan) == 4
