"""Other SQL dialects (parse_statements(dialect=...), connect(dialect=...), --dialect): statements are
read in the analyst's dialect, transpiled to DuckDB's, answered exactly, and refused by the
construct as written, where it was written."""

from __future__ import annotations

import duckdb
import pytest
from sql_oracle import SCHEMA, compare, histogram, make_table

import dpsql
import dpsql.errors as E
from dpsql.sql import compile_batch


@pytest.fixture(scope="module")
def con():
    c = make_table(300, seed=5)
    yield c
    c.close()


# (dialect, statement as written, the same statement in DuckDB's dialect)
SAME = [
    ("tsql", "SELECT TOP 5 region, COUNT(*) AS n FROM people WHERE ISNULL(age, 0) > 3 GROUP BY region ORDER BY n DESC",
     "SELECT region, COUNT(*) AS n FROM people WHERE COALESCE(age, 0) > 3 GROUP BY region ORDER BY n DESC LIMIT 5"),
    ("tsql", "SELECT [sex], SUM(age) AS [total] FROM people WHERE LEN(region) = 1 GROUP BY [sex]",
     'SELECT "sex", SUM(age) AS "total" FROM people WHERE length(region) = 1 GROUP BY "sex"'),
    ("postgres", "SELECT sex, COUNT(*) AS n FROM people WHERE age::int % 2 = 0 AND region ILIKE 'n' GROUP BY sex",
     "SELECT sex, COUNT(*) AS n FROM people WHERE age::int % 2 = 0 AND region ILIKE 'n' GROUP BY sex"),
    ("bigquery", "SELECT region, COUNT(*) AS n FROM people WHERE IFNULL(age, 0) > 10 GROUP BY region",
     "SELECT region, COUNT(*) AS n FROM people WHERE COALESCE(age, 0) > 10 GROUP BY region"),
    ("tsql", "SELECT region, VAR(age) AS v, VARP(age) AS p, STDEV(age) AS s, STDEVP(age) AS q FROM people "
     "GROUP BY region",
     "SELECT region, VAR_SAMP(age) AS v, VAR_POP(age) AS p, STDDEV_SAMP(age) AS s, STDDEV_POP(age) AS q FROM people "
     "GROUP BY region"),
    ("spark", "SELECT region, AVG(age) AS m FROM people WHERE NOT white GROUP BY region",
     "SELECT region, AVG(age) AS m FROM people WHERE NOT white GROUP BY region"),
    # Spark's GROUP BY list before GROUPING SETS only names the columns (DuckDB's would cross them)
    ("spark", "SELECT region, sex, COUNT(*) AS n, GROUPING(region, sex) AS gid FROM people GROUP BY region, sex "
     "GROUPING SETS ((region, sex), (region))",
     "SELECT region, sex, COUNT(*) AS n, GROUPING(region, sex) AS gid FROM people GROUP BY GROUPING SETS "
     "((region, sex), (region))"),
    # PostgreSQL and T-SQL divide integers truncating; a BIT compared with 1; COUNTIF; count(1)
    ("postgres", "SELECT age / 5 AS a5, COUNT(*) AS n FROM people WHERE age::int / 2 <> 3 GROUP BY 1",
     "SELECT age // 5 AS a5, COUNT(*) AS n FROM people WHERE age // 2 <> 3 GROUP BY 1"),
    ("tsql", "SELECT region, SUM(IIF(white = 1, 1, 0)) AS w FROM people WHERE 0 <> black GROUP BY region",
     "SELECT region, SUM(CASE WHEN white THEN 1 ELSE 0 END) AS w FROM people WHERE black GROUP BY region"),
    ("bigquery", "SELECT sex, COUNTIF(age > 10) AS old FROM people GROUP BY sex",
     "SELECT sex, COUNT(*) FILTER (WHERE age > 10) AS old FROM people GROUP BY sex"),
    ("spark", "SELECT region, count(1) AS n FROM people GROUP BY region",
     "SELECT region, COUNT(*) AS n FROM people GROUP BY region"),
]


@pytest.mark.parametrize("dialect, sql, duck", SAME)
def test_statements_in_other_dialects_are_exact(con, dialect, sql, duck):
    batch = compile_batch(sql, SCHEMA, dialect=dialect)
    compare(batch, 0, batch.workload.matvec(histogram(con, batch)), con, duck)
    plan, ref = batch.statements[0].plan, compile_batch(duck, SCHEMA).statements[0].plan
    assert (plan.outputs, plan.limit, plan.order_by and plan.order_by[0][1]) == \
        (ref.outputs, ref.limit, ref.order_by and ref.order_by[0][1])


@pytest.mark.parametrize("dialect, sql, construct, marker", [
    ("tsql", "SELECT TOP 5 region, MAX(age) AS m FROM people GROUP BY region", "aggregate MAX", "MAX"),
    ("tsql", "SELECT TOP 5 region, COUNT(*) FROM people WHERE [zone] = 1 GROUP BY region", "column 'zone'", "[zone]"),
    ("postgres", "SELECT sex,\n  COUNT(DISTINCT age) FROM people GROUP BY sex", "COUNT(DISTINCT)", "COUNT"),
])
def test_refusals_name_the_construct_where_it_was_written(dialect, sql, construct, marker):
    with pytest.raises(E.SQLError) as info:
        compile_batch(sql, SCHEMA, dialect=dialect)
    off = sql.index(marker)
    line = sql.count("\n", 0, off) + 1
    assert (info.value.construct, info.value.line, info.value.column) == \
        (construct, line, off - (sql.rfind("\n", 0, off) + 1) + 1), str(info.value)


def test_an_unknown_dialect_is_an_argument_error():
    with pytest.raises(E.ArgumentError, match="unknown SQL dialect 'klingon'"):
        compile_batch("SELECT COUNT(*) FROM people", SCHEMA, dialect="klingon")


def test_connection_reads_its_dialect_and_a_call_overrides_it(con):
    db = dpsql.connect(con, table="people", schema=SCHEMA, budget=dpsql.Budget(epsilon=1e12), cache=False,
                       progress=False, dialect="tsql")
    top = "SELECT TOP 2 region, COUNT(*) AS n FROM people GROUP BY region ORDER BY n DESC"
    got = db.query(top, epsilon=1e10).df
    want = con.sql("SELECT region, COUNT(*) AS n FROM people GROUP BY region ORDER BY n DESC LIMIT 2").fetchall()
    assert list(got["region"]) == [r[0] for r in want]
    assert [round(v) for v in got["n"]] == [r[1] for r in want]
    with pytest.raises(E.ParseError):
        db.query(top, epsilon=1e10, dialect="duckdb")  # DuckDB's dialect has no TOP
    with pytest.raises(E.ArgumentError):
        dpsql.connect(con, table="people", schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), cache=False,
                      progress=False, dialect="klingon")


def test_cli_dialect(tmp_path, capsys):
    from dpsql.api.cli import main

    path = tmp_path / "people.duckdb"
    c = duckdb.connect(str(path))
    c.execute("CREATE TABLE people AS SELECT range % 4 AS age FROM range(40)")
    c.close()
    schema = tmp_path / "s.yaml"
    schema.write_text("table: people\ncolumns:\n  age: {type: integer, min: 0, max: 3}\n")
    args = ["query", "SELECT TOP 1 age, COUNT(*) AS n FROM people GROUP BY age ORDER BY age DESC", "--data",
            str(path), "--schema", str(schema), "--ledger", str(tmp_path / "l"), "--budget-epsilon", "1e12",
            "--epsilon", "1e10", "--dialect", "tsql"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "3,10" in out.replace(" ", "").replace(".0", "") or " 3 " in out, out


def test_tsql_order_by_puts_nulls_first_as_tsql_does(con):
    from dpsql.sql.postprocess import postprocess
    from tests.sql_oracle import _py

    sql = "SELECT TOP 2 sex, COUNT(*) AS n FROM people GROUP BY sex ORDER BY 1"
    batch = compile_batch(sql, SCHEMA, dialect="tsql")
    got = postprocess(batch, batch.workload.matvec(histogram(con, batch)))[0]
    want = con.sql("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex ORDER BY sex NULLS FIRST LIMIT 2").fetchall()
    assert [(_py(a), _py(b)) for a, b in got.itertuples(index=False)] == [(a, b) for a, b in want]
    assert want[0][0] is None  # the test reads a NULL key
