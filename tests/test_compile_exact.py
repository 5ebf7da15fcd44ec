"""Exactness: the compiled workload times the exact data vector equals
DuckDB's exact answer to the same SQL, group by group (tests/sql_oracle.py)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sql_oracle import SCHEMA, Generated, StatementGenerator, check_statements, histogram, make_table

from dpsql.schema import load_schema
from dpsql.sql import compile_batch, plan_statement
from dpsql.sql.postprocess import postprocess

SEEDS = range(40)   # 40 batches of 10 generated statements = 400 statements


@pytest.fixture(scope="module")
def con():
    c = make_table(n=600, seed=11)
    yield c
    c.close()


@pytest.mark.parametrize("seed", SEEDS)
def test_generated_statements_match_duckdb(con, seed):
    gen = StatementGenerator(seed)
    check_statements([gen.statement() for _ in range(10)], con)


def test_generator_covers_the_constructs():
    gens = [StatementGenerator(s) for s in SEEDS]  # the statements test_generated_statements_match_duckdb checks
    text = " ".join(g.statement().sql for g in gens for _ in range(10))
    for construct in [" OR ", "NOT (", "IS NULL", "IS NOT NULL", "CASE WHEN", "CASE region", "SUM(", "AVG(",
                      "COUNT(black)", " IN (", "NOT IN", "BETWEEN", "GROUP BY 1", "CAST(", "age < score",
                      "hours", "GROUP BY ALL", "FILTER (WHERE", "SUM(CASE WHEN", "THEN 1 ELSE 0 END", "VAR_SAMP(",
                      "STDDEV_POP(", "VARIANCE(score)", "MEDIAN(", "QUANTILE_DISC(", "WITHIN GROUP (ORDER BY age DESC)",
                      "LIKE", "age // 5", "COALESCE(", "regexp_matches(", "* 0.5", " JOIN zones USING (region)",
                      "LEFT JOIN zones z", ")::INT)", "AS DOUBLE))", "THEN 1 END)",
                      "WITH base AS (SELECT * FROM people WHERE", "FROM (SELECT * FROM people) AS p",
                      "SELECT * FROM (SELECT", "(km)", "GROUPING(", "ROLLUP (", "CUBE (", "GROUPING SETS (",
                      " OVER (", "MEDIAN(hours)", "QUANTILE_CONT(hours", "QUANTILE_DISC(hours",
                      "(ORDER BY hours DESC)"]:
        assert construct in text, construct


HAND_WRITTEN = [
    # cross-column disjunctions, NOT, NULLs
    "SELECT COUNT(*) AS n FROM people WHERE sex = 'F' OR age < 5",
    "SELECT region, COUNT(*) AS n FROM people WHERE NOT (white OR black) GROUP BY region",
    "SELECT sex, COUNT(*) AS n FROM people WHERE (white AND NOT black) OR (black IS NULL AND age > 10) GROUP BY sex",
    "SELECT COUNT(*) AS n FROM people WHERE NOT (sex = 'F' AND age IS NULL)",
    "SELECT COUNT(*) AS n FROM people WHERE sex IS NULL OR hours IS NULL OR score IS NULL",
    "SELECT COUNT(*) AS n FROM people WHERE NOT (sex <> 'F')",
    "SELECT COUNT(*) AS n FROM people WHERE age NOT IN (1, 2, 3) AND NOT age BETWEEN 10 AND 12",
    "SELECT COUNT(*) AS n FROM people WHERE sex IN ('F', NULL)",
    "SELECT COUNT(*) AS n FROM people WHERE sex NOT IN ('F', NULL)",
    "SELECT COUNT(*) AS n FROM people WHERE age = NULL",
    "SELECT COUNT(*) AS n FROM people WHERE TRUE AND age > 3",
    "SELECT COUNT(*) AS n FROM people WHERE FALSE OR age > 3",
    # CASE buckets, with and without ELSE, over one and several columns
    "SELECT CASE WHEN age < 10 THEN 'child' WHEN age < 18 THEN 'teen' END AS g, COUNT(*) AS n FROM people GROUP BY g",
    "SELECT CASE WHEN age IS NULL THEN 'unknown' ELSE 'known' END AS g, COUNT(*) AS n FROM people GROUP BY 1",
    "SELECT CASE WHEN sex = 'F' AND age >= 18 THEN 'woman' WHEN sex = 'F' THEN 'girl' ELSE 'other' END AS g, "
    "COUNT(*) AS n FROM people GROUP BY g",
    "SELECT CASE score WHEN 1 THEN 'low' WHEN 2 THEN 'low' WHEN 5 THEN 'mid' END AS g, AVG(age) AS a "
    "FROM people GROUP BY g",
    # SUM and AVG
    "SELECT sex, SUM(age) AS s, AVG(age) AS a, COUNT(age) AS c FROM people GROUP BY sex",
    "SELECT region, white, SUM(age) AS s FROM people WHERE black OR age > 15 GROUP BY region, white",
    "SELECT COUNT(*) AS n, COUNT(sex) AS c FROM people",
    # SUM and AVG of the binned column (measured by endpoint masses), also merged with age
    "SELECT sex, SUM(hours) AS s, AVG(hours) AS a, COUNT(hours) AS c FROM people GROUP BY sex",
    "SELECT region, SUM(hours) FILTER (WHERE age > 10) AS s, SUM(age) AS t FROM people WHERE hours IS NOT NULL "
    "GROUP BY region",
    "SELECT white, SUM(hours) AS s, AVG(hours) AS a FROM people WHERE hours < 10 OR age > 15 GROUP BY white",
    "SELECT SUM(hours) AS s FROM people WHERE hours >= 10 AND hours < 20",
    # keys: several in one attribute, position, expressions
    "SELECT white, black, COUNT(*) AS n FROM people WHERE white OR black GROUP BY white, black",
    "SELECT black, region, sex, COUNT(*) AS n FROM people GROUP BY 3, 2, 1",
    "SELECT age - score AS d, COUNT(*) AS n FROM people GROUP BY d",
    # GROUP BY ALL: every select item without an aggregate
    "SELECT sex, CASE WHEN age < 10 THEN 'child' ELSE 'adult' END AS g, COUNT(*) AS n, SUM(age) AS s "
    "FROM people WHERE region <> 'E' GROUP BY ALL",
    # FILTER, and CASE arguments that mean the same
    "SELECT sex, COUNT(*) FILTER (WHERE age > 3) AS a, COUNT(*) AS n, SUM(age) FILTER (WHERE region = 'E' OR white) AS s "
    "FROM people GROUP BY sex",
    "SELECT region, AVG(age) FILTER (WHERE sex = 'F') AS a, COUNT(score) FILTER (WHERE NOT black) AS c "
    "FROM people WHERE age < 15 GROUP BY region",
    "SELECT SUM(CASE WHEN age > 10 THEN 1 ELSE 0 END) AS a, SUM(CASE WHEN sex = 'F' THEN age ELSE 0 END) AS b, "
    "COUNT(CASE WHEN white THEN 'x' END) AS c, AVG(CASE WHEN region = 'N' THEN age END) AS d, "
    "SUM(CASE WHEN age > 10 THEN 1 END) AS e, SUM(CASE WHEN white THEN age END) AS f FROM people",
    "SELECT sex, SUM(CASE WHEN age > 3 THEN 1 ELSE 0 END) FILTER (WHERE white) AS a FROM people GROUP BY sex",
    # variances and standard deviations (from a SUM of squares, a SUM and a COUNT)
    "SELECT sex, VAR_POP(age) AS a, VAR_SAMP(age) AS b, VARIANCE(age) AS c, STDDEV(age) AS d, STDDEV_POP(age) AS e, "
    "STDDEV_SAMP(age) AS f, AVG(age) AS g FROM people GROUP BY sex",
    "SELECT region, VAR_SAMP(age) FILTER (WHERE white) AS a, STDDEV_POP(CASE WHEN sex = 'F' THEN age END) AS b "
    "FROM people WHERE age < 3 GROUP BY region",
    "SELECT age, VAR_SAMP(age) AS v, VAR_POP(age) AS p FROM people GROUP BY age",
]


def test_hand_written_statements_match_duckdb(con):
    check_statements([Generated(s, s) for s in HAND_WRITTEN], con)


def test_each_statement_alone_matches_duckdb(con):
    for s in HAND_WRITTEN[:8]:
        check_statements([Generated(s, s)], con)


def test_clamped_sum(con):
    """score's bounds [0, 8] clamp the value 10 to 8; its values start at 1, so the SUM's bounds are [1, 8]."""
    sql = "SELECT region, SUM(score) AS s, AVG(score) AS a FROM people GROUP BY region"
    clamp = "(CASE WHEN score > 8 THEN 8 ELSE score END)"
    check_statements([Generated(sql, f"SELECT region, SUM({clamp}) AS s, AVG({clamp}) AS a FROM people GROUP BY region")], con)
    agg = plan_statement(sql, load_schema(SCHEMA)).aggregates[0]
    assert agg.bounds == (1, 8) and agg.sensitivity == 8.0


def test_group_by_binned_column(con):
    from sql_oracle import HOURS_BIN_SQL
    check_statements([Generated("SELECT hours, COUNT(*) AS n FROM people WHERE hours >= 10 GROUP BY hours",
                                f"SELECT {HOURS_BIN_SQL} AS hours, COUNT(*) AS n FROM people WHERE hours >= 10 GROUP BY 1")], con)
    check_statements([Generated("SELECT hours, SUM(hours) AS s, AVG(hours) AS a, COUNT(*) AS n FROM people GROUP BY 1",
                                f"SELECT {HOURS_BIN_SQL} AS hours, SUM(hours) AS s, AVG(hours) AS a, COUNT(*) AS n "
                                "FROM people GROUP BY 1")], con)


def test_binned_sum_bounds_narrow_and_clamp(con):
    """hours' bins span [0, 40]; bounds [5, 25] clamp values below 5 and above 25, and bins
    [0, 10) and [20, 40] are measured between their clamped edges (5, 10 and 20, 25)."""
    narrowed = {**SCHEMA, "columns": {**SCHEMA["columns"], "hours": {**SCHEMA["columns"]["hours"], "bounds": [5, 25]}}}
    clamp = "(CASE WHEN hours < 5 THEN 5 WHEN hours > 25 THEN 25 ELSE hours END)"
    sql = "SELECT sex, SUM(hours) AS s, AVG(hours) AS a FROM people WHERE age > 2 GROUP BY sex"
    check_statements([Generated(sql, f"SELECT sex, SUM({clamp}) AS s, AVG({clamp}) AS a FROM people WHERE age > 2 "
                                     "GROUP BY sex")], con, schema=narrowed)
    agg = plan_statement(sql, load_schema(narrowed)).aggregates[0]
    assert agg.bounds == (5, 25) and agg.sensitivity == 25.0
    # only a batch that sums hours splits it: counts alone keep one cell per bin
    assert compile_batch("SELECT hours, COUNT(*) FROM people GROUP BY 1", SCHEMA).domain[2] == 4
    assert compile_batch("SELECT SUM(hours) FROM people", SCHEMA).domain[2] == 8


def test_groups_cover_the_declared_domain(con):
    batch = compile_batch("SELECT sex, region, COUNT(*) AS n FROM people WHERE age < 5 GROUP BY sex, region", SCHEMA)
    st = batch.statements[0]
    assert len(st.groups) == 3 * 4        # sex: F, M, NULL; region: E, N, S, W
    assert st.groups[0] == ("F", "E") and st.groups[-1] == (None, "W")


@pytest.mark.parametrize("sql, groups", [
    # WHERE on a key's own column keeps the groups it allows
    ("SELECT sex, age, COUNT(*) AS n FROM people WHERE age = 3 GROUP BY sex, age", [("F", 3), ("M", 3), (None, 3)]),
    ("SELECT region, COUNT(*) AS n FROM people WHERE region IN ('E', 'N') GROUP BY region", [("E",), ("N",)]),
    ("SELECT region, COUNT(*) AS n FROM people WHERE region <> 'E' AND age > 3 GROUP BY region",
     [("N",), ("S",), ("W",)]),
    # a condition across columns rules out only what no combination allows
    ("SELECT sex, COUNT(*) AS n FROM people WHERE sex = 'F' OR age = 3 GROUP BY sex", [("F",), ("M",), (None,)]),
    ("SELECT sex, COUNT(*) AS n FROM people WHERE sex = 'F' AND (age = 3 OR sex = 'M') GROUP BY sex", [("F",)]),
    # keys on one column: only the combinations a value has
    ("SELECT age, CASE WHEN age < 10 THEN 'a' ELSE 'b' END AS g, COUNT(*) AS n FROM people WHERE age < 12 GROUP BY age, g",
     [(a, "a" if a < 10 else "b") for a in range(12)]),
    # a WHERE no value of the domain satisfies (age is 0..20) leaves no group, as in DuckDB
    ("SELECT sex, COUNT(*) AS n FROM people WHERE age > 30 GROUP BY sex", []),
    ("SELECT sex, COUNT(*) AS n FROM people WHERE FALSE GROUP BY sex", []),
    # without GROUP BY there is always one row
    ("SELECT COUNT(*) AS n FROM people WHERE age > 30", [()]),
])
def test_groups_that_where_rules_out_on_the_domain_are_not_output(con, sql, groups):
    """Decided from the schema alone: the data (make_table) has rows in every group either way."""
    batch = compile_batch(sql, SCHEMA)
    assert list(batch.statements[0].groups) == groups
    check_statements([Generated(sql, sql)], con)


def test_hidden_group_key(con):
    batch = compile_batch("SELECT COUNT(*) AS n FROM people GROUP BY sex", SCHEMA)
    y = batch.workload.matvec(histogram(con, batch))
    want = dict(con.sql("SELECT sex, COUNT(*) FROM people GROUP BY sex").fetchall())
    table = batch.tables(y)[0]
    assert list(table.columns) == ["sex", "n"]
    for sex, n in zip(table["sex"], table["n"]):
        assert n == want.get(sex, 0)
    assert list(postprocess(batch, y)[0].columns) == ["n"]


def test_postprocessing_matches_duckdb(con):
    sql = ("SELECT sex, region, COUNT(*) AS n, AVG(age) AS a FROM people GROUP BY sex, region "
           "HAVING n > 0 AND AVG(age) > 5 ORDER BY n DESC, sex, region LIMIT 5 OFFSET 1")
    batch = compile_batch(sql, SCHEMA)
    y = batch.workload.matvec(histogram(con, batch))
    ours = postprocess(batch, y)[0]
    want = con.sql(sql.replace("ORDER BY n DESC, sex, region", "ORDER BY n DESC, sex NULLS LAST, region")).fetchall()
    assert list(ours.columns) == ["sex", "region", "n", "a"]
    assert len(ours) == len(want)
    for row, w in zip(ours.itertuples(index=False), want):
        assert (None if row.sex is None or row.sex != row.sex else row.sex) == w[0]
        assert row.region == w[1] and row.n == w[2] and math.isclose(row.a, w[3])


def test_having_on_hidden_aggregate(con):
    sql = "SELECT region, AVG(age) AS a FROM people GROUP BY region HAVING COUNT(*) >= 1 ORDER BY region"
    plan = plan_statement(sql, load_schema(SCHEMA))
    assert [a.name for a in plan.aggregates] == ["a", "COUNT(*)"]
    assert [a.visible for a in plan.aggregates] == [True, False]
    batch = compile_batch(sql, SCHEMA)
    y = batch.workload.matvec(histogram(con, batch))
    ours = postprocess(batch, y)[0]
    want = con.sql(sql).fetchall()
    got = [tuple(r) for r in ours.itertuples(index=False)]
    assert [r[0] for r in got] == [r[0] for r in want]
    assert [r[1] for r in got] == pytest.approx([r[1] for r in want])


def test_row_bookkeeping():
    batch = compile_batch([
        "SELECT sex, COUNT(*) AS n, AVG(age) AS a FROM people GROUP BY sex",
        "SELECT COUNT(*) FROM people WHERE white OR black",
        "SELECT region, SUM(age) AS s FROM people GROUP BY region",
    ], SCHEMA)
    rows = []
    for st in batch.statements:
        for b in st.blocks:
            assert b.stop - b.start == len(st.groups)
            rows.append((b.start, b.stop))
    covered = sorted(set(rows))
    assert covered[0][0] == 0 and covered[-1][1] == batch.workload.shape[0]
    assert all(a[1] == b[0] for a, b in zip(covered, covered[1:]))
    first = batch.statements[0]
    assert first.rows("a", "sum") != first.rows("a", "count")
    assert first.rows("n") != first.rows("a", "count")  # age is nullable: COUNT(age) is not COUNT(*)
    assert batch.workload.shape[1] == math.prod(batch.domain)
    # COUNT of a non-nullable column is COUNT(*): measured once
    shared = compile_batch("SELECT COUNT(*) AS n, COUNT(white) AS w FROM people", SCHEMA).statements[0]
    assert shared.rows("n") == shared.rows("w")


def test_merging_only_when_needed():
    s = load_schema(SCHEMA)
    b = compile_batch("SELECT COUNT(*) FROM people WHERE NOT (white OR black) AND (age < 3 OR age > 9)", s)
    assert [a.name for a in b.attributes] == list(s.names)
    b = compile_batch("SELECT COUNT(*) FROM people WHERE white OR black", s)
    assert [a.name for a in b.attributes] == ["sex", "age", "hours", "white+black", "region", "score"]
    b = compile_batch("SELECT COUNT(*) FROM people WHERE sex = 'F' OR score = 1", s, merge=[("age", "hours")])
    assert [a.columns for a in b.attributes] == [("sex", "score"), ("age", "hours"), ("white",), ("black",),
                                                  ("region",)]


def test_adjacent_merge_keeps_the_column_histogram(con):
    """Merging adjacent columns does not change the data vector."""
    plain = compile_batch("SELECT COUNT(*) FROM people", SCHEMA)
    merged = compile_batch("SELECT COUNT(*) FROM people WHERE white OR black", SCHEMA)
    assert np.array_equal(histogram(con, plain), histogram(con, merged))


def test_bigquery_options_inline():
    p = plan_statement("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=0.5, delta=1e-6)\n"
                       "  sex, COUNT(*) FROM people GROUP BY sex", load_schema(SCHEMA))
    assert p.options == {"epsilon": 0.5, "delta": 1e-6}
    assert [k.name for k in p.keys] == ["sex"]


def test_forty_statement_batch_compiles():
    """Timing lives in benchmarks/compile_batch.py; here, the batch's bookkeeping."""
    gen = StatementGenerator(1234)
    texts = [gen.statement().sql for _ in range(40)]
    batch = compile_batch(texts, SCHEMA)
    assert len(batch.statements) == 40
    covered = set()
    for s in batch.statements:
        for b in s.blocks:
            assert 0 <= b.start < b.stop <= batch.workload.num_queries or (b.start == b.stop and b.term is None)
            covered.update(range(b.start, b.stop))
    assert covered == set(range(batch.workload.num_queries))


def test_sql_file_text_batch(tmp_path, con):
    path = tmp_path / "batch.sql"
    path.write_text("-- two statements\nSELECT COUNT(*) AS n FROM people;\n\nSELECT sex, COUNT(*) AS n FROM people GROUP BY sex;\n")
    batch = compile_batch(path.read_text(), SCHEMA)
    assert len(batch.statements) == 2
    y = batch.workload.matvec(histogram(con, batch))
    assert y[0] == con.sql("SELECT COUNT(*) FROM people").fetchall()[0][0]


def test_hypothesis_chosen_statements(con):
    """The same oracle, with hypothesis choosing the generator seeds."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=25, deadline=None, database=None)
    @given(st.integers(min_value=0, max_value=2**32 - 1))
    def run(seed):
        gen = StatementGenerator(seed)
        check_statements([gen.statement() for _ in range(3)], con)

    run()
