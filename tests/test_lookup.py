"""Lookup joins with public tables (dpsql.sql.lookup): DuckDB's exact join answers at a huge
epsilon, and the joins that are refused (not public, one-to-many, RIGHT/FULL, non-equality)."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
from dpsql.errors import SchemaError, UnsupportedSQLError
from dpsql.private.budget import Budget
from dpsql.schema import load_schema

REGIONS = [["CA", "West", 1], ["WA", "West", 2], ["NY", "East", 3], ["FL", "South", 4]]
PAIRS = [["CA", 1, "a"], ["CA", 2, "b"], ["NY", 1, "c"], ["TX", 3, "d"]]
SCHEMA = {
    "table": "people",
    "columns": {
        "state": {"type": "categorical", "values": ["CA", "NY", "TX", "WA"], "nullable": True},
        "age": {"type": "integer", "min": 0, "max": 29},
        "code": {"type": "categorical", "values": [1, 2, 3]},
    },
    "public_tables": {
        "regions": {"columns": ["state", "region", "rank"], "rows": REGIONS},
        "pairs": {"columns": ["state", "code", "label"], "rows": PAIRS},
        "dupes": {"columns": ["state", "x"], "rows": [["CA", 1], ["CA", 2]]},
    },
}


@pytest.fixture(scope="module")
def con():
    rng = np.random.default_rng(0)
    n = 600
    df = pd.DataFrame({"state": rng.choice(np.array(["CA", "NY", "TX", "WA", None], dtype=object), n),
                       "age": rng.integers(0, 30, n), "code": rng.choice([1, 2, 3], n)})
    c = duckdb.connect()
    c.register("df", df)
    c.execute("CREATE TABLE people AS SELECT state::VARCHAR AS state, age::BIGINT AS age, code::BIGINT AS code FROM df")
    for name, cols, rows in [("regions", "state VARCHAR, region VARCHAR, rank BIGINT", REGIONS),
                             ("pairs", "state VARCHAR, code BIGINT, label VARCHAR", PAIRS)]:
        c.execute(f"CREATE TABLE {name} ({cols})")
        c.executemany(f"INSERT INTO {name} VALUES ({', '.join('?' * len(rows[0]))})", rows)
    yield c
    c.close()


@pytest.fixture(scope="module")
def db(con):
    return dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=1e15), cache=False, progress=False)


JOINS = [
    "SELECT r.region, COUNT(*) AS n FROM people p JOIN regions r ON p.state = r.state GROUP BY r.region ORDER BY 1",
    "SELECT region, SUM(age) AS s, MEDIAN(age) AS m FROM people LEFT JOIN regions USING (state) GROUP BY ALL "
    "ORDER BY 1 NULLS LAST",
    "SELECT COUNT(*) AS n FROM people JOIN regions r ON r.state = people.state WHERE r.rank > 1",
    "SELECT r.region, p.code, COUNT(*) AS n FROM people AS p INNER JOIN regions AS r ON p.state = r.state "
    "WHERE region LIKE 'W%' GROUP BY 1, 2 ORDER BY 1, 2",
    "SELECT label, AVG(age) AS a FROM people p JOIN pairs q ON p.state = q.state AND p.code = q.code "
    "GROUP BY label ORDER BY label",
    "SELECT rank * 10 AS r10, COUNT(*) AS n FROM people LEFT OUTER JOIN regions USING (state) GROUP BY r10 "
    "ORDER BY 1 NULLS LAST",
    "SELECT COUNT(*) FILTER (WHERE region = 'West') AS west, COUNT(*) AS n FROM people LEFT JOIN regions USING (state)",
]


@pytest.mark.parametrize("sql", JOINS)
def test_lookup_joins_equal_duckdb(con, db, sql):
    got = db.query(sql, epsilon=1e9, noise="laplace").df
    want = con.sql(sql).df()
    assert len(got) == len(want), (got, want)
    for col in want.columns:
        if want[col].dtype.kind in "iuf":
            np.testing.assert_allclose(pd.to_numeric(got[col]).to_numpy(float), want[col].to_numpy(float),
                                       atol=1e-4, err_msg=col)
        else:
            assert [None if pd.isna(x) else x for x in got[col]] == [None if pd.isna(x) else x for x in want[col]]


@pytest.mark.parametrize("sql,message", [
    ("SELECT COUNT(*) FROM people JOIN people q ON people.state = q.state", "only a public lookup table"),
    ("SELECT COUNT(*) FROM people JOIN elsewhere e ON people.state = e.state", "only a public lookup table"),
    ("SELECT COUNT(*) FROM people JOIN dupes USING (state)", "not unique in public table 'dupes'"),
    ("SELECT COUNT(*) FROM people RIGHT JOIN regions USING (state)", "RIGHT JOIN is not supported"),
    ("SELECT COUNT(*) FROM people FULL OUTER JOIN regions USING (state)", "FULL OUTER JOIN is not supported"),
    ("SELECT COUNT(*) FROM people JOIN regions r ON people.age > r.rank", "must be equalities"),
    ("SELECT COUNT(*) FROM people JOIN regions r ON r.region = r.state", "must equal a column of the private table"),
    ("SELECT COUNT(*) FROM people CROSS JOIN regions", "CROSS JOIN is not supported"),
])
def test_joins_that_are_not_lookups_are_refused_before_spending(db, sql, message):
    spent = db.ledger.spent()
    with pytest.raises(UnsupportedSQLError, match=message) as info:
        db.query(sql, epsilon=1.0)
    assert info.value.line == 1 and info.value.column is not None
    assert db.ledger.spent() == spent


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(region) FROM people LEFT JOIN regions USING (state)",
    "SELECT state, VAR_POP(rank) AS s FROM people JOIN regions r USING (state) GROUP BY state"])  # SUM, AVG: answered
def test_an_aggregate_of_a_lookup_column_is_refused_naming_it(db, sql):
    """It was refused as "COUNT takes a column name" (it is one) at line 1, column 1: the message
    and the position now name the lookup column."""
    name = "region" if "COUNT" in sql else "rank"
    with pytest.raises(UnsupportedSQLError, match=f"\\({name}\\) reads a column of a public lookup table") as info:
        db.query(sql, epsilon=1.0)
    assert (info.value.line, info.value.column) == (1, sql.index(f"({name})") + 2)


@pytest.mark.parametrize("tables,where", [
    ({"people": {"columns": ["a"], "rows": []}}, "other than the private table's"),
    ({"r": {"columns": ["a", "a"], "rows": []}}, "distinct column names"),
    ({"r": {"columns": ["a", "b"], "rows": [[1]]}}, "rows of 2 values"),
    ({"r": {"columns": ["a"], "rows": [[[1]]]}}, "strings, numbers, booleans or null"),
    ({"r": {"columns": ["a"], "rows": [], "extra": 1}}, "'columns' and 'rows'"),
])
def test_public_tables_are_validated(tables, where):
    with pytest.raises(SchemaError, match=where):
        load_schema({**SCHEMA, "public_tables": tables})


# -- tables the owner marks public when connecting ------------------------------------------

OWNER_SCHEMA = {k: v for k, v in SCHEMA.items() if k != "public_tables"}


@pytest.fixture(scope="module")
def owner_db(con):
    return dpsql.connect(con, schema=OWNER_SCHEMA, budget=Budget(epsilon=1e15), cache=False, progress=False,
                         public_tables=["regions", "pairs"])


@pytest.mark.parametrize("sql", JOINS)
def test_tables_the_owner_marks_public_join_like_declared_ones(con, db, owner_db, sql):
    assert owner_db.schema.public_table("regions").rows == tuple(tuple(r) for r in REGIONS)
    got = owner_db.query(sql, epsilon=1e9, noise="laplace").df
    want = con.sql(sql).df()
    assert len(got) == len(want)
    for col in want.columns:
        a = [None if pd.isna(x) else x for x in got[col]]
        b = [None if pd.isna(x) else x for x in want[col]]
        if want[col].dtype.kind in "iuf":
            np.testing.assert_allclose(np.array(a, float), np.array(b, float), atol=1e-4, err_msg=col)
        else:
            assert a == b


def test_owner_marked_values_become_schema_values(con):
    con.execute("CREATE TABLE typed AS SELECT * FROM (VALUES ('CA', 1.50::DECIMAL(4,2), 3::DECIMAL(4,0), "
                "DATE '2020-01-02', 'nan'::DOUBLE, NULL::BIGINT, true)) t(state, d, whole, day, f, n, b)")
    db = dpsql.connect(con, schema=OWNER_SCHEMA, budget=Budget(epsilon=1.0), cache=False, progress=False,
                       public_tables=["typed"])
    table = db.schema.public_table("typed")
    assert table.columns == ("state", "d", "whole", "day", "f", "n", "b")
    assert table.rows == (("CA", 1.5, 3, "2020-01-02", None, None, True),)


def test_only_the_owner_marks_tables_and_what_is_marked_is_checked(con, tmp_path):
    from dpsql.private.backend import DuckDBBackend, public_table

    def connect(tables, schema=OWNER_SCHEMA):
        return dpsql.connect(con, schema=schema, budget=Budget(epsilon=1.0), cache=False, public_tables=tables)

    with pytest.raises(dpsql.ArgumentError, match="private table 'people' cannot be marked public"):
        connect(["PEOPLE"])
    with pytest.raises(dpsql.ArgumentError, match="list of table names"):
        connect("regions")
    with pytest.raises(dpsql.ArgumentError, match="public_tables: cannot read public table 'nowhere'"):
        connect(["nowhere"])
    with pytest.raises(SchemaError, match="already declared in the schema"):
        connect(["regions"], schema=SCHEMA)
    with pytest.raises(dpsql.ArgumentError, match="more than 3 rows"):
        public_table(DuckDBBackend(con), "regions", 3)
    assert len(public_table(DuckDBBackend(con), "regions", 4)["rows"]) == 4
    # the analyst's connection has no way to mark a table: nothing on it takes a table to publish
    db = connect([])
    assert not any("public" in name for name in dir(db) if not name.startswith("_"))
    with pytest.raises(UnsupportedSQLError, match="only a public lookup table"):
        db.query("SELECT COUNT(*) FROM people JOIN regions USING (state)", epsilon=1.0)
