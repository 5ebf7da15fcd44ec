"""``validate`` warns about every expression of the private table's view that can raise on a row.

Issue 38, item 13: a view that calls ``error()`` on some rows makes a charged request fail or not
depending on one row. Views must be total; the owner's report lists what is not.
"""

from __future__ import annotations

import duckdb

from dpsql.owner.validate import validate

SCHEMA = {"table": "people", "columns": {"age": {"type": "integer", "min": 0, "max": 99},
                                         "code": {"type": "categorical", "values": ["a", "b"]}}}


def _con() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE raw AS SELECT * FROM (VALUES ('30', 30, 'a'), ('x', 41, 'b')) v(s, n, code)")
    con.execute("CREATE MACRO twice(x) AS x * 2")
    return con


def test_each_expression_that_can_raise_is_named():
    con = _con()
    con.execute("CREATE VIEW inner_v AS SELECT CAST(s AS INTEGER) AS age, n::BIGINT AS n, code FROM raw")
    con.execute("CREATE VIEW people AS SELECT CASE WHEN code = 'zz' THEN error('secret') ELSE age END AS age, "
                "TRY_CAST(code AS INTEGER) AS t, CAST(n AS VARCHAR) AS text, CAST(n AS DOUBLE) AS d, "
                "twice(n) AS m, code FROM inner_v")
    report = validate(con, SCHEMA)
    assert sorted(report.view_warnings) == [
        "view inner_v: CAST(s AS INT) fails on a value that does not convert from VARCHAR to INT "
        "(TRY_CAST gives NULL)",
        "view people: \"ERROR\"('secret') raises on every row that reaches it",
        "view people: TWICE(n) calls the macro twice(), which dpsql cannot check",
    ]
    text = str(report)
    assert text.count("  warning: view ") == 3 and "a view must be total" in text
    assert (report.rows, report.clean_rows) == (2, 1)    # the counts are unchanged: 'x' is NULL there


def test_a_total_view_and_a_table_have_no_warnings():
    con = _con()
    con.execute("CREATE VIEW people AS SELECT TRY_CAST(s AS INTEGER) AS age, n::BIGINT AS n, n::VARCHAR AS v, "
                "CASE WHEN code = 'zz' THEN NULL ELSE code END AS code FROM raw")
    assert validate(con, SCHEMA).view_warnings == []
    con.execute("DROP VIEW people")
    con.execute("CREATE TABLE people AS SELECT n AS age, code FROM raw")
    report = validate(con, SCHEMA)
    assert report.view_warnings == [] and "warning" not in str(report)
