"""Issue 38, items 1, 6, 11 and 12: results are named as DuckDB names them, no column overwrites
another, and what DuckDB refuses (a table called by its name after it was aliased, a constant it
cannot evaluate, a division by a constant zero) is refused before anything is spent. Every oracle
here is DuckDB itself, on the same statement over the same table."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

import dpsql
from dpsql.errors import BudgetExceededError, UnknownColumnError, UnsupportedSQLError
from dpsql.sql import compile_batch, parse_statements
from dpsql.sql.bind import deduplicated

SCHEMA = {"table": "adult", "columns": {
    "age": {"type": "integer", "min": 0, "max": 99, "bounds": [0, 99]},
    "sex": {"type": "categorical", "values": ["Female", "Male"]},
    "hours": {"type": "integer", "min": 0, "max": 9}}}


@pytest.fixture
def con():
    con = duckdb.connect()
    con.execute("CREATE TABLE adult AS SELECT (i * 7) % 100 AS age, CASE WHEN i % 3 = 0 THEN 'Female' ELSE 'Male' "
                "END AS sex, i % 10 AS hours FROM range(500) t(i)")
    yield con
    con.close()


@pytest.fixture
def db(con):
    return dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=10.0, delta=1e-6), cache=False,
                         progress=False)


def _duckdb_columns(con, sql: str) -> list[str]:
    cur = con.cursor()
    try:
        return list(cur.sql(sql).df().columns)
    finally:
        cur.close()


# -- item 12: DuckDB's output names ------------------------------------------------------------

NAMED = [
    "SELECT COUNT(*) FROM adult",
    "SELECT COUNT(*), COUNT(*), count(*) FROM adult",
    "SELECT sex, COUNT(*), SUM(age), AVG(Age), COUNT(*) FILTER (WHERE age > 30) FROM adult GROUP BY sex",
    "SELECT COUNT(*) AS n, COUNT(*) n, SUM(age) AS N FROM adult",
    "SELECT COUNT(*), COUNT(*) AS \"count_star()_1\", COUNT(*) FROM adult",
    "SELECT MEDIAN(age), QUANTILE_CONT(age, 0.25), VAR_SAMP(age), STDDEV(hours) FROM adult",
    "SELECT sex, COUNT(*) * 2, SUM(age) / COUNT(*), 7 FROM adult GROUP BY sex",
    "SELECT age // 10, COUNT(*) FROM adult GROUP BY 1",
    "SELECT SUM(CASE WHEN sex = 'Male' THEN 1 ELSE 0 END), hours FROM adult GROUP BY hours",
]


@pytest.mark.parametrize("sql", NAMED)
def test_output_columns_are_named_as_duckdb_names_them(con, sql):
    plan = compile_batch(sql, SCHEMA).statements[0].plan
    assert list(plan.outputs) == _duckdb_columns(con, sql)


def test_a_result_has_every_column_duckdb_has_none_overwritten(db, con):
    sql = "SELECT COUNT(*), COUNT(*) FILTER (WHERE sex = 'Male'), COUNT(*) FROM adult"
    res = db.query(sql, epsilon=1.0)
    truth = con.sql(sql).df()
    assert [c for c in res.df.columns if not c.endswith(("std_error", "ci_low", "ci_high"))] == list(truth.columns)
    # the noisy answers are near their own truths (Laplace noise of scale well below 40)
    for column in truth.columns:
        assert abs(res.df[column][0] - truth[column][0]) < 40


@pytest.mark.parametrize("names", [["n", "N", "n_1", "n"], ["x_1", "x", "x", "X_1"], ["a", "a", "a", "a_2", "a"]])
def test_duplicates_are_suffixed_as_duckdb_suffixes_them(con, names):
    sql = "SELECT " + ", ".join(f'1 AS "{n}"' for n in names)
    assert deduplicated(names) == _duckdb_columns(con, sql)


def test_a_table_called_by_its_name_after_its_alias_is_refused_as_duckdb_refuses_it(db, con):
    sql = "SELECT COUNT(*) FROM adult a WHERE adult.sex = 'Male'"
    with pytest.raises(duckdb.BinderException):
        con.sql(sql).df()
    with pytest.raises(UnknownColumnError, match=r"unknown table 'adult' in adult\.sex: FROM adult a calls the "
                                                  r"table 'a'") as info:
        db.query(sql, epsilon=1.0)
    assert (info.value.line, info.value.column) == (1, 36)
    assert db.spent().epsilon == 0
    assert db.query("SELECT COUNT(*) FROM adult a WHERE a.sex = 'Male'", epsilon=1.0).df.shape == (1, 4)


def test_a_statement_duckdbs_binder_refuses_is_refused_before_the_spend(db, con):
    """A public lookup table joined by a private table's name that its alias hides."""
    schema = dict(SCHEMA, public_tables={"r": {"columns": ["sex", "label"], "rows": [["Male", "m"], ["Female", "f"]]}})
    lookup = dpsql.connect(con, schema=schema, budget=dpsql.Budget(epsilon=1.0), cache=False, progress=False)
    sql = "SELECT r.label, COUNT(*) FROM adult p JOIN r ON adult.sex = r.sex GROUP BY 1"
    con.execute("CREATE TABLE r AS SELECT * FROM (VALUES ('Male', 'm'), ('Female', 'f')) v(sex, label)")
    with pytest.raises(duckdb.BinderException):
        con.sql(sql).df()
    with pytest.raises(dpsql.Error, match="adult"):
        lookup.query(sql, epsilon=0.5)
    assert lookup.spent().epsilon == 0


# -- item 1: no column takes an error column's name --------------------------------------------

@pytest.mark.parametrize("sql, column, at", [
    ("SELECT COUNT(*) AS std_error FROM adult", "std_error", 8),
    ("SELECT sex AS ci_low, COUNT(*) AS n FROM adult GROUP BY sex", "ci_low", 8),
    ("SELECT COUNT(*) AS n, SUM(age) AS n_std_error FROM adult", "n_std_error", 23),
    ("SELECT COUNT(*) AS n, SUM(age) AS N_CI_HIGH FROM adult", "N_CI_HIGH", 23),
    ("SELECT sex AS CI_HIGH, AVG(age) FROM adult GROUP BY sex", "CI_HIGH", 8),
])
def test_a_column_named_as_an_error_column_is_refused_before_the_spend(db, sql, column, at):
    with pytest.raises(UnsupportedSQLError, match=f"the output column '{column}' .*error column") as info:
        db.query(sql, epsilon=1.0)
    assert (info.value.line, info.value.column) == (1, at)
    assert db.spent().epsilon == 0


def test_a_hidden_group_key_named_as_an_error_column_is_refused():
    """A key grouped on but not selected is a column of the table HAVING runs on: an error column
    of the same name would replace it there."""
    schema = {"table": "t", "columns": {"std_error": {"type": "integer", "min": 0, "max": 3}}}
    with pytest.raises(UnsupportedSQLError, match="'std_error' .*read by HAVING or ORDER BY only"):
        compile_batch("SELECT COUNT(*) FROM t GROUP BY std_error HAVING std_error > 1", schema)


def test_error_columns_that_do_not_clash_are_kept():
    plan = compile_batch("SELECT COUNT(*) AS std_err, SUM(age) AS ci FROM adult", SCHEMA).statements[0].plan
    assert plan.outputs == ("std_err", "ci")


# -- item 6: constants DuckDB cannot evaluate --------------------------------------------------

REFUSED_BY_DUCKDB = [
    "SELECT COUNT(*) FROM adult HAVING 'abc'::INTEGER > 1",
    "SELECT sex, COUNT(*) FROM adult GROUP BY sex HAVING 'abc'::INTEGER > 1",
    "SELECT sex, COUNT(*) FROM adult GROUP BY sex ORDER BY 'x'::INTEGER",
    "SELECT COUNT(*) // 0 FROM adult",
    "SELECT COUNT(*) % 0 FROM adult",
    "SELECT SUM(age) // (2 - 2) FROM adult",
    "SELECT AVG(age) // 0 FROM adult",
    "SELECT sex, COUNT(*) FROM adult GROUP BY sex HAVING COUNT(*) % 0.0 > 1",
    "SELECT COUNT(*) + CAST('x' AS DOUBLE) FROM adult",
]


@pytest.mark.parametrize("sql", REFUSED_BY_DUCKDB)
def test_a_constant_duckdb_cannot_evaluate_is_refused_before_the_spend(db, con, sql):
    with pytest.raises(duckdb.Error):
        con.sql(sql).df()
    with pytest.raises(UnsupportedSQLError, match="cannot be evaluated"):
        db.query(sql, epsilon=1.0)
    assert db.spent().epsilon == 0


@pytest.mark.parametrize("sql", [
    "SELECT COUNT(*) / 0 FROM adult",
    "SELECT -SUM(age) / 0 FROM adult",
    "SELECT sex, COUNT(*) FROM adult GROUP BY sex HAVING COUNT(*) > '5'::INTEGER",
    "SELECT COUNT(*) // 2 FROM adult",
])
def test_constants_duckdb_evaluates_are_answered_as_duckdb_answers(db, con, sql):
    truth = con.sql(sql).df()
    res = db.query(sql, epsilon=5.0)
    assert len(res.df) == len(truth)
    value = truth.iloc[0, -1]
    if np.isinf(value):  # a division of an aggregate by 0 is infinite, of the aggregate's sign
        assert res.df[truth.columns[-1]][0] == value


@pytest.mark.parametrize("item", [
    "CASE WHEN COUNT(*) > 1000 THEN 9223372036854775807 * 2 ELSE 0 END",  # a branch no row takes here
    "CASE WHEN COUNT(*) > 1000 THEN 1 WHEN 'abc'::INT > 1 THEN 2 END",    # every WHEN is evaluated
    "CASE 'abc'::INT WHEN COUNT(*) THEN 1 END",
    "CASE WHEN COUNT(*) < 1000 THEN 0 ELSE COUNT(*) // 0 END",
    "IF(COUNT(*) > 1000, 'abc'::INT, 0)", "COALESCE(COUNT(*), 'abc'::INT)", "greatest(COUNT(*), 'abc'::INT)",
    "COUNT(*) > 1000 AND 'abc'::INT > 1", "COUNT(*) < 1000 OR 1 // 0 > 1", "COUNT(*) + 9223372036854775807 * 2",
])
def test_refused_exactly_when_duckdb_refuses_whatever_the_data(con, item):
    """A constant in a CASE or IF branch, or a later COALESCE argument, fails only on the rows
    that reach it: DuckDB answers when none does, and so does dpsql (NULL where one would)."""
    sql = f"SELECT sex, {item} AS x FROM adult GROUP BY sex"
    try:
        con.sql(sql).fetchall()
        duckdb_refuses = False
    except duckdb.Error:
        duckdb_refuses = True
    try:
        compile_batch(sql, SCHEMA)
        dpsql_refuses = False
    except UnsupportedSQLError:
        dpsql_refuses = True
    assert dpsql_refuses == duckdb_refuses


# -- item 11: DIFFERENTIAL_PRIVACY OPTIONS take every numeric literal DuckDB reads ---------------

@pytest.mark.parametrize("literal", [".01", "1e-2", "0.5", "5.", "1_000", "1_000.5", "1E+2", ".5e-1", "00.5", "5.e1",
                                     "0.000_1", "1e1_0"])
def test_options_read_every_number_duckdb_reads(literal):
    want = float(duckdb.connect().execute(f"SELECT {literal}").fetchall()[0][0])
    [stmt] = parse_statements(f"SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon={literal}) COUNT(*) FROM t")
    assert stmt.options == {"epsilon": want}


def test_options_epsilon_dot_01_is_spent(db):
    db.query("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=.01) COUNT(*) FROM adult")
    assert db.spent().epsilon == pytest.approx(0.01)


@pytest.mark.parametrize("spend", ["OPTIONS", "argument"])
def test_an_epsilon_beyond_the_whole_budget_is_refused_naming_epsilon(db, spend):
    with pytest.raises(BudgetExceededError, match=r"^epsilon=1e\+308 is more than the whole budget") as info:
        if spend == "OPTIONS":
            db.query("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=1e308) COUNT(*) FROM adult")
        else:
            db.query("SELECT COUNT(*) FROM adult", epsilon=1e308)
    assert "delta" not in str(info.value).split("budget (")[0]
    assert db.spent().epsilon == 0

