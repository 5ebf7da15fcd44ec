"""Date columns (``type: date``): every day from ``min`` to ``max``, read from a DATE, a TIMESTAMP
(its day) or ISO text, queried with DuckDB's own date semantics, drafted, validated and
synthesized like any other column."""

import datetime

import duckdb
import numpy as np
import pandas as pd
import pytest
import yaml
from sql_oracle import compare, histogram
from sqlglot import exp

import dpsql
from dpsql import Budget
from dpsql.errors import DomainError, SchemaError, UnsupportedSQLError
from dpsql.owner.draft import draft_schema
from dpsql.owner.validate import validate
from dpsql.private.backend import duckdb_type_family
from dpsql.private.measure import index_expression
from dpsql.schema import DateRange, load_schema
from dpsql.sql import compile_batch
from dpsql.sql.compile import schema_attributes
from dpsql.synth.coarsen import WIDE_VALUES, wide

D = datetime.date
SCHEMA = {"table": "ev", "columns": {
    "day": {"type": "date", "min": "2019-12-25", "max": "2021-01-10", "nullable": True},
    "k": {"type": "integer", "min": 0, "max": 2}}}


@pytest.fixture(scope="module")
def events():
    """600 rows over the declared days (a leap year among them), 10% NULL days."""
    rng = np.random.default_rng(3)
    days = [None if rng.random() < 0.1 else D(2019, 12, 25) + datetime.timedelta(days=int(d))
            for d in rng.integers(0, 383, 600)]
    con = duckdb.connect()
    con.register("f", pd.DataFrame({"day": pd.Series(days, dtype=object), "k": rng.integers(0, 3, 600)}))
    con.execute("CREATE TABLE ev AS SELECT CAST(day AS DATE) AS day, CAST(k AS INTEGER) AS k FROM f")
    return con


def test_a_date_column_is_every_day_between_its_ends():
    col = load_schema(SCHEMA).column("day")
    assert isinstance(col, DateRange) and col.sql_type == "DATE"
    assert col.size == 383 + 1 and col.values[0] == D(2019, 12, 25) and col.values[-1] == D(2021, 1, 10)
    assert col.index_of(D(2020, 3, 1)) == (D(2020, 3, 1) - D(2019, 12, 25)).days == 67  # 29 February counted
    assert col.index_of(datetime.datetime(2020, 3, 1, 23, 59)) == 67  # a time's day
    assert col.index_of(np.datetime64("2020-03-01")) == col.index_of("2020-03-01") == 67
    assert col.index_of(None) == 383
    for outside in (D(2019, 12, 24), "2021-01-11", "2020-3-1", 67, True):
        with pytest.raises(KeyError):
            col.index_of(outside)
    given = load_schema({"table": "t", "columns": {"d": {"type": "date", "min": D(2020, 1, 1), "max": D(2020, 1, 31)}}})
    assert given.column("d").size == 31


@pytest.mark.parametrize("spec, message", [
    ({"min": "2020-01-01"}, r"columns\.d\.max: is required \(a day written YYYY-MM-DD\)"),
    ({"min": "2020-1-01", "max": "2020-12-31"}, r"columns\.d\.min: '2020-1-01' is not a date written YYYY-MM-DD"),
    ({"min": "2020-02-30", "max": "2020-12-31"}, r"columns\.d\.min: '2020-02-30' is not a day of the calendar"),
    ({"min": 20200101, "max": "2020-12-31"}, r"columns\.d\.min: must be a day written YYYY-MM-DD, got 20200101"),
    ({"min": "2021-01-01", "max": "2020-12-31"}, r"columns\.d\.max: must be on or after min \(2021-01-01\)"),
    ({"min": "2020-01-01", "max": "2020-12-31", "bounds": [0, 1]}, r"columns\.d\.bounds: a date column cannot be summed"),
    ({"min": "2020-01-01", "max": "2020-12-31", "values": ["x"]}, r"columns\.d\.values: unknown key for a date column"),
    ({"min": "0001-01-01", "max": "9999-12-31"}, r"columns\.d: domain of 3,?652,?059 values is too large"),
])
def test_a_bad_date_declaration_is_named(spec, message):
    with pytest.raises(SchemaError, match=message):
        load_schema({"table": "t", "columns": {"d": {"type": "date", **spec}}})


def test_a_yaml_schema_reads_unquoted_days(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("table: t\ncolumns:\n  d: {type: date, min: 2020-01-01, max: 2020-12-31}\n")
    assert load_schema(str(path)).column("d").max == D(2020, 12, 31)


STATEMENTS = [
    "SELECT COUNT(*) AS n FROM ev WHERE day >= '2020-02-29'",
    "SELECT COUNT(*) AS n FROM ev WHERE day BETWEEN DATE '2020-01-01' AND DATE '2020-06-30' AND k = 1",
    "SELECT COUNT(*) AS n FROM ev WHERE day IN ('2020-01-01', '2020-07-04') OR day IS NULL",
    "SELECT year(day) AS y, COUNT(*) AS n FROM ev GROUP BY y",
    "SELECT date_trunc('month', day) AS m, k, COUNT(*) AS n FROM ev WHERE day < '2020-04-01' GROUP BY m, k",
    "SELECT dayofweek(day) AS w, AVG(k) AS a FROM ev GROUP BY w",
    "SELECT day, COUNT(*) AS n FROM ev WHERE day <= '2019-12-31' GROUP BY day",
    "SELECT COUNT(*) AS n FROM ev WHERE day + INTERVAL 10 DAY > DATE '2021-01-01'",
    "SELECT CASE WHEN day < '2020-03-20' THEN 'winter' ELSE 'later' END AS s, SUM(k) AS t FROM ev GROUP BY s",
    "SELECT COUNT(*) AS n FROM ev WHERE strftime(day, '%m-%d') = '02-29'",
]


def test_statements_on_days_equal_duckdb_exactly(events):
    """The compiled workload times the exact data vector is DuckDB's answer, group by group."""
    batch = compile_batch(STATEMENTS, SCHEMA)
    y = batch.workload.matvec(histogram(events, batch, table="ev"))
    for i, sql in enumerate(STATEMENTS):
        compare(batch, i, y, events, sql)


@pytest.mark.parametrize("sql, error, message", [
    ("SELECT SUM(day) FROM ev", DomainError, "cannot SUM the date column 'day'"),
    ("SELECT AVG(day) FROM ev", DomainError, "cannot AVG the date column 'day'"),
    ("SELECT COUNT(*) FROM ev WHERE day = '2020-02-30'", UnsupportedSQLError, "date field value out of range"),
    ("SELECT COUNT(*) FROM ev WHERE day > 5", UnsupportedSQLError, "Cannot compare values of type DATE"),
])
def test_what_a_day_cannot_do_is_refused_before_any_spend(events, sql, error, message):
    db = dpsql.connect(events, schema=SCHEMA, budget=Budget(epsilon=1.0), cache=False, progress=False)
    with pytest.raises(error, match=message):
        db.query(sql, epsilon=0.5)
    assert db.ledger.entries() == []


def _key(values) -> tuple:
    """A group's key as data frames of DuckDB and dpsql both give it: NULL as None, days as timestamps."""
    return tuple(None if pd.isna(v) else pd.Timestamp(v) if isinstance(v, (datetime.date, np.datetime64)) else v
                 for v in values)


def test_private_answers_over_days(events):
    """Measured on the table itself (the index of each row's day, computed by DuckDB), at a spend
    large enough that the noise is far below one row."""
    db = dpsql.connect(events, schema=SCHEMA, budget=Budget(epsilon=1e12), cache=False, progress=False)
    for sql in STATEMENTS[:5]:
        got = db.query(sql, epsilon=1e9).df
        want = events.sql(sql).df()
        keys = [c for c in want.columns if c != "n"]
        assert len(got) >= len(want)  # every group of the domain, those of no row too
        rows = {_key(r[:-1]): r[-1] for r in got[keys + ["n"]].itertuples(index=False)}
        for r in want[keys + ["n"]].itertuples(index=False):
            assert rows[_key(r[:-1])] == pytest.approx(r[-1], abs=1e-3), (sql, r)
    for clauses in ("", "HAVING n >= 0 ORDER BY day DESC"):  # post-processed in DuckDB or not: days stay dates
        got = db.query(f"SELECT day, COUNT(*) AS n FROM ev WHERE day < '2020-01-01' GROUP BY day {clauses}", epsilon=1e9)
        assert {type(v) for v in got.df["day"]} == {datetime.date}, clauses


QUANTILES = [
    "SELECT MEDIAN(day) AS m, QUANTILE_DISC(day, 0.9) AS q FROM ev",
    "SELECT k, QUANTILE_CONT(day, 0.3) AS c, PERCENTILE_DISC(0.2) WITHIN GROUP (ORDER BY day DESC) AS p FROM ev GROUP BY k",
    "SELECT k, MEDIAN(day) FILTER (WHERE day >= '2020-06-01') AS m FROM ev GROUP BY k HAVING m > '2020-01-01' ORDER BY m",
    "SELECT MEDIAN(day) + INTERVAL 1 DAY AS later, date_diff('day', QUANTILE_DISC(day, 0.1), QUANTILE_DISC(day, 0.9)) AS span "
    "FROM ev",
    "SELECT MEDIAN(day) AS m FROM ev WHERE k > 5",
]


def test_quantiles_of_days_are_days_as_duckdb_gives_them(events):
    """MEDIAN and QUANTILE_CONT interpolate to a time (TIMESTAMP), QUANTILE_DISC is a day (DATE): at a
    huge spend, DuckDB's answers exactly, group by group, with or without HAVING and ORDER BY."""
    db = dpsql.connect(events, schema=SCHEMA, budget=Budget(epsilon=1e12), cache=False, progress=False)
    for sql in QUANTILES:
        got = db.query(sql, epsilon=1e9).df
        want = events.sql(sql).df(date_as_object=True)
        for name in want.columns:
            assert [_key([v]) for v in got[name]] == [_key([v]) for v in want[name]], (sql, name)
    first = db.query(QUANTILES[0], epsilon=1e9).df
    assert isinstance(first["m"][0], datetime.datetime) and type(first["q"][0]) is datetime.date


def test_a_noisy_quantile_of_days_lies_in_its_interval(events):
    db = dpsql.connect(events, schema=SCHEMA, budget=Budget(epsilon=10.0), cache=False, progress=False)
    got = db.query("SELECT k, QUANTILE_DISC(day, 0.5) AS q FROM ev GROUP BY k", epsilon=1.0).df
    for q, lo, hi in zip(got["q"], got["ci_low"], got["ci_high"]):
        assert D(2019, 12, 25) <= lo <= q <= hi <= D(2021, 1, 10)


@pytest.mark.parametrize("sql_type", ["DATE", "TIMESTAMP", "TIMESTAMP_NS", "TIMESTAMP_MS", "VARCHAR"])
def test_each_row_is_counted_at_its_day(sql_type):
    """The measurement's index of a DATE, a TIMESTAMP (its day: the time of day dropped) or ISO text is
    the schema's index of that day; a day outside the domain, text that is no date and an infinite
    date are outside."""
    col = DateRange("d", nullable=True, min=D(2020, 2, 27), max=D(2020, 3, 2))
    cases = [("2020-02-27", 0), ("2020-02-29", 2), ("2020-03-02", 4), ("2020-02-26", -1), ("2020-03-03", -1),
             (None, 5)]
    if sql_type != "DATE":
        cases += [("2020-02-29 23:59:59", 2), ("2020-03-02 00:00:01", 4), ("2020-02-26 23:59:59", -1)]
    if sql_type == "VARCHAR":
        cases += [("junk", -1), ("", -1)]
    else:
        cases += [("infinity", -1), ("-infinity", -1)]
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t (v {sql_type})")
    con.executemany("INSERT INTO t VALUES (?)", [[v] for v, _ in cases])
    assert duckdb_type_family(sql_type) == ("string" if sql_type == "VARCHAR" else "date")
    index = index_expression(col, exp.column("v"), sql_type, outside=-1).sql("duckdb")
    got = [r[0] for r in con.execute(f"SELECT {index} FROM t").fetchall()]
    assert got == [i for _, i in cases]


def test_a_csv_of_iso_dates_is_drafted_validated_and_answered(tmp_path):
    path = tmp_path / "visits.csv"
    lines = ["day,site"] + [f"2020-{m:02d}-{d:02d},{'ab'[(m + d) % 2]}" for m in range(1, 13) for d in (1, 15, 28)]
    path.write_text("\n".join(lines + ["2019-12-31,a", ",a"]) + "\n")
    assert "  day: {type: date, min: '2019-12-31', max: '2020-12-28', nullable: true}\n" in draft_schema(str(path))
    with open(path, "a") as f:
        f.write("not a day,b\n")  # text: no longer a column of dates
    assert "  day: {type: categorical, values: ['2019-12-31'," in draft_schema(str(path))
    schema = {"table": "visits", "columns": {"day": {"type": "date", "min": "2020-01-01", "max": "2020-12-31",
                                                      "nullable": True},
                                              "site": {"type": "categorical", "values": ["a", "b"]}}}
    report = validate(str(path), schema)  # a field that is no date reads as NULL, as one that is no number does
    assert report.clean_rows == 36 + 2 and report.columns[0].counts == {"outside": 1}
    db = dpsql.connect(str(path), schema=schema, budget=Budget(epsilon=1e12), cache=False, progress=False)
    got = db.query("SELECT month(day) AS m, COUNT(*) AS n FROM visits WHERE day IS NOT NULL GROUP BY m", epsilon=1e9).df
    assert np.allclose(got.sort_values("m")["n"].astype(float), 3.0, atol=1e-3)


def test_the_draft_declares_date_and_timestamp_columns():
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT DATE '2021-03-01' + CAST(range % 40 AS INTEGER) AS d, "
                "TIMESTAMP '2021-05-01 22:30:00' + INTERVAL (range) HOUR AS ts, "
                "CASE WHEN range > 0 THEN DATE '2021-01-01' END AS n, range % 2 AS k FROM range(100)")
    body = draft_schema(con, "t").split("columns:\n", 1)[1]
    assert "  d: {type: date, min: '2021-03-01', max: '2021-04-09'}" in body
    assert ("  ts: {type: date, min: '2021-05-01', max: '2021-05-06'}  # its times of day are read as their day; "
            "for the hour, add a column of hour(ts) in a view\n") in body  # 22:30 plus 99 hours: 6 May, 01:30
    assert "  d: {type: date, min: '2021-03-01', max: '2021-04-09'}\n" in body  # a DATE has no time of day
    assert "  n: {type: date, min: '2021-01-01', max: '2021-01-01', nullable: true}" in body
    schema = load_schema(("table: t\nprivacy_unit: row\ncolumns:\n" + body))  # the draft reads back
    assert [c.name for c in schema.columns] == ["d", "ts", "n", "k"]


def test_a_date_declared_on_another_type_is_refused_with_the_fix():
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT 1 AS a, DATE '2020-01-01' AS b")
    with pytest.raises(SchemaError, match=r"columns\.a: is an integer column in the table.*casts it to DATE"):
        dpsql.connect(con, schema={"table": "t", "columns": {"a": {"type": "date", "min": "2020-01-01",
                                                                     "max": "2020-12-31"}}})
    with pytest.raises(SchemaError, match=r"columns\.b: is a DATE or TIMESTAMP column.*declare it \{type: date"):
        dpsql.connect(con, schema={"table": "t", "columns": {"b": {"type": "integer", "min": 0, "max": 9}}})


def test_a_wide_date_column_is_synthesized_in_bins_as_days():
    """Ten years of days (3,653 values) are binned for the model only; each synthetic row is a day of
    the domain, its years and their relation to k as the table's, a NULL day drawn as NULL."""
    rng = np.random.default_rng(0)
    n = 20_000
    start = D(2014, 1, 1)
    offsets = rng.integers(0, 3653, n)
    k = np.where(offsets < 1826, rng.integers(0, 2, n), 2)  # k is 2 exactly in the later five years
    days = pd.Series([start + datetime.timedelta(days=int(o)) for o in offsets], dtype=object)
    days[rng.random(n) < 0.05] = None
    con = duckdb.connect()
    con.register("f", pd.DataFrame({"d": days, "k": k}))
    con.execute("CREATE TABLE ev AS SELECT CAST(d AS DATE) AS d, CAST(k AS INTEGER) AS k FROM f")
    schema = {"table": "ev", "columns": {"d": {"type": "date", "min": "2014-01-01", "max": "2023-12-31", "nullable": True},
                                         "k": {"type": "integer", "min": 0, "max": 2}}}
    db = dpsql.connect(con, schema=schema, budget=Budget(rho=100.0), cache=False, progress=False)
    assert list(wide(schema_attributes(schema), load_schema(schema))) == [0] and 3653 > WIDE_VALUES
    syn = db.synthesize("pgm", workload=[("d", "k")], rho=50.0, seed=0, name="s")
    assert syn.sql("SELECT typeof(d) FROM ev LIMIT 1").fetchall() == [("DATE",)]
    lo, hi, nulls = syn.sql("SELECT min(d), max(d), count(*) - count(d) FROM ev").fetchall()[0]
    assert start <= lo and hi <= D(2023, 12, 31)
    assert nulls / len(syn.df) == pytest.approx(float(days.isna().mean()), abs=0.01)
    query = "SELECT year(d) >= 2019 AS late, k, COUNT(*) AS n FROM ev WHERE d IS NOT NULL GROUP BY ALL"
    truth = con.sql(query).df().set_index(["late", "k"])["n"]
    made = syn.sql(query).df().set_index(["late", "k"])["n"].reindex(truth.index, fill_value=0)
    assert np.abs(made / made.sum() - truth / truth.sum()).max() < 0.02


def test_a_repeated_query_over_days_is_answered_again_for_free(events):
    """A release whose groups are days (or date_trunc's times), or whose answers are quantiles of days,
    is kept, so its repeat spends nothing."""
    db = dpsql.connect(events, schema=SCHEMA, budget=Budget(epsilon=2.0), cache=False, progress=False)
    for sql in ("SELECT day, date_trunc('week', day) AS w, COUNT(*) AS n FROM ev WHERE day < '2020-01-10' GROUP BY ALL",
                QUANTILES[0], QUANTILES[2]):
        first = db.query(sql, epsilon=0.5)
        again = db.query(sql, epsilon=0.5)
        pd.testing.assert_frame_equal(again.df, first.df, check_exact=True)
    assert db.remaining().epsilon == pytest.approx(0.5)


def test_a_postgresql_client_reads_days_and_binds_them(tmp_path):
    """Through ``dpsql serve``: a date key arrives as a PostgreSQL date (text and binary), and a date
    bound as a parameter compares with the column."""
    psycopg = pytest.importorskip("psycopg")
    from test_server import HUGE, dsn, write_config

    from dpsql.server.app import App
    from dpsql.server.config import load_config

    con = duckdb.connect(str(tmp_path / "people.duckdb"))
    con.execute("CREATE TABLE people AS SELECT DATE '2020-02-27' + CAST(range % 5 AS INTEGER) AS day FROM range(50)")
    con.close()
    schema = {"table": "people", "columns": {"day": {"type": "date", "min": "2020-02-27", "max": "2020-03-02"}}}
    (tmp_path / "people.yaml").write_text(yaml.safe_dump(schema))
    app = App(load_config(write_config(tmp_path, {"alice": 1e6 * HUGE}, 1e7 * HUGE)), cache=str(tmp_path / "cache"))
    thread = app.server(port=0).run_in_thread()
    try:
        with psycopg.connect(dsn(thread.port, "alice"), autocommit=True) as conn:
            conn.execute(f"SET dpsql.epsilon = {HUGE}")
            for binary in (False, True):
                cur = conn.cursor(binary=binary)
                cur.execute("SELECT day, COUNT(*) AS n FROM people WHERE day >= %s GROUP BY day ORDER BY day",
                            (D(2020, 2, 29),))
                rows = cur.fetchall()
                assert [r[0] for r in rows] == [D(2020, 2, 29), D(2020, 3, 1), D(2020, 3, 2)]
                assert [round(r[1]) for r in rows] == [10, 10, 10]
    finally:
        thread.stop()
        app.close()


def test_validate_names_the_fix_for_text_of_another_date_form():
    """Text such as ``01/31/2020`` is no date DuckDB reads: the owner's report counts it and names
    strptime; ISO text and NULL are not counted."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT CASE WHEN range < 90 THEN strftime(DATE '2020-01-01' + CAST(range AS INTEGER), "
                "'%m/%d/%Y') WHEN range < 95 THEN '2020-03-01' END AS \"day{0}\" FROM range(100)")
    schema = {"table": "t", "columns": {"day{0}": {"type": "date", "min": "2020-01-01", "max": "2020-12-31",
                                                    "nullable": True}}}
    (column,) = validate(con, schema).columns
    assert column.counts == {"outside": 90}
    assert column.hint == ("90 of them are text that is no date DuckDB reads (YYYY-MM-DD): read the column in a view "
                           "that parses its form, such as strptime(\"day{0}\", '%m/%d/%Y')::DATE")
