"""Hostile and messy private data, resource limits and concurrency.

Oracles: with the same seeded noise, a query on a messy table must release
exactly the values the same query releases on the table with the messy rows
dropped (or each unit cut to ``max_rows``), as documented; the owner's
validation report must count exactly what ``Column.encode`` calls outside
the domain.
"""

from __future__ import annotations

import json
import multiprocessing
import threading
import time

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
from dpsql import limits
from dpsql.api.cli import main as cli_main
from dpsql.errors import MeasurementError, ResourceLimitError
from dpsql.hdmm.matrix import Identity, Ones
from dpsql.hdmm.strategy import KronStrategy
from dpsql.owner.validate import validate
from dpsql.privacy import Laplace
from dpsql.private.budget import Cost
from dpsql.private.kernel import PrivateTable
from dpsql.private.ledger import Ledger

SCHEMA = {"table": "t", "columns": {
    "age": {"type": "integer", "min": 0, "max": 99, "bounds": [0, 99]},
    "sex": {"type": "categorical", "values": ["F", "M"]}}}
QUERIES = ["SELECT sex, COUNT(*) AS n FROM t WHERE age >= 18 GROUP BY sex",
           "SELECT sex, SUM(age) AS n FROM t GROUP BY sex",
           "SELECT COUNT(*) AS n FROM t WHERE age BETWEEN 20 AND 29 AND sex = 'F'"]


def clean_frame(n=300):
    i = np.arange(n)
    return pd.DataFrame({"age": (i * 7) % 100, "sex": np.where(i % 3 == 0, "F", "M")})


def released(con, schema=SCHEMA, seed=11, cache=None):
    """Every value the QUERIES release, with seeded noise (same seed: same noise)."""
    db = dpsql.connect(con, schema=schema, budget=dpsql.Budget(epsilon=100.0), cache=cache,
                       source_of_noise=np.random.default_rng(seed))
    out = [db.query(q, epsilon=1.0, noise="laplace").df["n"].to_numpy() for q in QUERIES]
    db.close()
    return np.concatenate(out)


def table(sql_types: str, rows: list) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t ({sql_types})")
    con.executemany(f"INSERT INTO t VALUES ({', '.join('?' * len(rows[0]))})", rows)
    return con


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return str(tmp_path_factory.mktemp("strategies"))


@pytest.fixture(scope="module")
def clean_answers(cache):
    df = clean_frame()
    return released(table("age INTEGER, sex VARCHAR", list(df.itertuples(index=False))), cache=cache)


MESSY = {
    "integers": ("age BIGINT, sex VARCHAR",
                 [(-1, "F"), (100, "M"), (2 ** 62, "F"), (None, "M"), (30, None), (30, "X"), (30, ""), (30, "f"),
                  (30, "F "), (None, None)]),
    "floats": ("age DOUBLE, sex VARCHAR",
               [(float("nan"), "F"), (float("inf"), "M"), (float("-inf"), "F"), (30.5, "M"), (1e308, "F"),
                (-0.5, "M")]),
    "decimals": ("age DECIMAL(10, 3), sex VARCHAR", [(30.25, "F"), (99.001, "M"), (-0.001, "F")]),
}


@pytest.mark.parametrize("kind", sorted(MESSY))
def test_out_of_domain_rows_are_dropped_exactly(kind, cache, clean_answers):
    """NULLs where none are declared, NaN, ±inf, out-of-range and fractional numbers, unlisted
    categories: dropped, so the release equals the clean table's, value for value."""
    types, bad = MESSY[kind]
    rows = list(clean_frame().itertuples(index=False)) + bad
    rows = [rows[i] for i in np.random.default_rng(0).permutation(len(rows))]  # messy rows anywhere
    np.testing.assert_array_equal(released(table(types, rows), cache=cache), clean_answers)


def test_wrong_column_types_are_refused_when_connecting(tmp_path):
    """A column whose SQL type cannot hold the domain (VARCHAR ages, DATE sexes) has no row in the domain:
    it used to release noise over an empty table, with no error. Found from the catalog, it is refused
    when the owner connects, naming the column, before a ledger is written."""
    for types, rows, column in [("age VARCHAR, sex VARCHAR", [("30", "F"), ("x", "M")], "age"),
                                ("age INTEGER, sex DATE", [(30, "2020-01-01"), (40, None)], "sex")]:
        with pytest.raises(dpsql.SchemaError, match=rf"columns\.{column}: is .* in the table, which holds no value"):
            dpsql.connect(table(types, rows), schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), cache=False,
                          ledger=tmp_path / "ledger")
        assert not (tmp_path / "ledger").exists()


@pytest.mark.parametrize("sql_type", ["UHUGEINT", "UBIGINT", "UTINYINT"])
def test_an_unsigned_column_with_negative_domain_values_drops_large_values(sql_type):
    """DuckDB compares a UHUGEINT with a negative literal by casting it to BIGINT, which failed on a
    value of 2^63 or more: one such row failed every measurement, after its charge. An unsigned
    column is compared with the domain's non-negative values only."""
    schema = {"table": "t", "columns": {"c": {"type": "integer", "min": -5, "max": 5},
                                        "k": {"type": "categorical", "values": [-2, 0, 7]}}}
    clean = [(i % 6, [0, 7][i % 2]) for i in range(50)]
    big = {"UHUGEINT": [2 ** 64, 2 ** 127 + 1, 2 ** 128 - 1], "UBIGINT": [2 ** 63, 2 ** 64 - 1],
           "UTINYINT": [255]}[sql_type]
    hostile = clean[:25] + [(b, 0) for b in big] + [(1, b) for b in big] + clean[25:]

    def release(rows):
        db = dpsql.connect(table(f"c {sql_type}, k {sql_type}", rows), schema=schema, budget=dpsql.Budget(epsilon=10.0),
                           cache=False, source_of_noise=np.random.default_rng(3))
        return db.query("SELECT c, k, COUNT(*) AS n FROM t GROUP BY c, k", epsilon=1.0, noise="laplace").df["n"]

    np.testing.assert_array_equal(release(hostile), release(clean))


def test_a_unit_with_many_rows_counts_max_rows(cache):
    """One privacy unit with 200,000 rows moves the release by exactly max_rows rows."""
    schema = {**SCHEMA, "privacy_unit": {"column": "pid", "max_rows": 3}}
    base = clean_frame().assign(pid=[f"p{i}" for i in range(300)])
    con = duckdb.connect()
    con.register("base", base)
    con.execute("CREATE TABLE t AS SELECT * FROM base UNION ALL "
                "SELECT 40 AS age, 'F' AS sex, 'whale' AS pid FROM range(200000)")
    oracle = duckdb.connect()
    oracle.register("base", base)
    oracle.execute("CREATE TABLE t AS SELECT * FROM base UNION ALL SELECT 40, 'F', 'whale' FROM range(3)")
    np.testing.assert_array_equal(released(con, schema, cache=cache), released(oracle, schema, cache=cache))


def test_a_view_whose_cast_fails_on_one_row_answers_like_the_table_without_it(cache):
    """The owner's view casts a name to INTEGER: the row it fails on is out of the domain, so the
    release equals (same seeded noise) that of the neighbouring table without the row, and no
    error tells the two apart."""
    rows = [(str(a), s) for a, s in clean_frame().itertuples(index=False)]
    with_bad = duckdb.connect()
    with_bad.execute("CREATE TABLE raw (a VARCHAR, sex VARCHAR)")
    with_bad.executemany("INSERT INTO raw VALUES (?, ?)", rows + [("Alice Smith", "M")])
    with_bad.execute("CREATE VIEW t AS SELECT CAST(a AS INTEGER) AS age, sex FROM raw WHERE CAST(a AS INTEGER) >= 0")
    without = duckdb.connect()
    without.execute("CREATE TABLE t (age INTEGER, sex VARCHAR)")
    without.executemany("INSERT INTO t VALUES (?, ?)", [(int(a), s) for a, s in rows])
    np.testing.assert_array_equal(released(with_bad, cache=cache), released(without, cache=cache))


#: ``a``, except that it fails (division by zero) on the value 999.
FAILS = "a + 0 * (1 // (a - 999))"
#: Owner views in which the expression that fails on one row sits somewhere other than the top
#: SELECT's outputs (which alone were made safe before): each must drop that row and nothing else.
VIEWS = {
    "output": f"SELECT {FAILS} AS age, sex FROM raw",
    "subquery": f"SELECT age, sex FROM (SELECT {FAILS} AS age, sex FROM raw) s",
    "cte": f"WITH s AS (SELECT {FAILS} AS age, sex FROM raw) SELECT * FROM s",
    "union": f"SELECT {FAILS} AS age, sex FROM raw WHERE sex = 'F' UNION ALL SELECT {FAILS}, sex FROM raw "
             "WHERE sex <> 'F'",
    "where": f"SELECT a AS age, sex FROM raw WHERE {FAILS} >= 0",
    "join": f"SELECT r.a AS age, r.sex FROM raw r JOIN (SELECT DISTINCT sex FROM raw) q "
            f"ON {FAILS.replace('a', 'r.a')} >= 0 AND r.sex = q.sex",
    "group by and having": f"SELECT age, sex FROM (SELECT {FAILS} AS age, sex, COUNT(*) AS k FROM raw "
                           f"GROUP BY 1, 2 HAVING {FAILS} >= 0) g, range(k)",
    "unnest": f"SELECT u AS age, sex FROM raw, unnest([{FAILS}]) t(u)",
    "window": f"SELECT {FAILS} AS age, sex FROM raw QUALIFY row_number() OVER (PARTITION BY {FAILS}, sex) >= 1",
}


@pytest.mark.parametrize("view", VIEWS.values(), ids=VIEWS.keys())
def test_a_view_failing_on_one_row_anywhere_answers_like_the_table_without_it(cache, view):
    """Wherever in the owner's view a row's value makes DuckDB fail (a set operation, a subquery,
    a join condition, a grouping key, an UNNEST, a window), that row is out of the domain and
    the release equals (same seeded noise) that of the table without it. Only the top SELECT's
    outputs and WHERE were made safe before: each of these failed the measurement after the
    charge, so whether a request failed depended on the data."""
    rows = list(clean_frame().itertuples(index=False))
    with_bad = duckdb.connect()
    with_bad.execute("CREATE TABLE raw (a INTEGER, sex VARCHAR)")
    with_bad.executemany("INSERT INTO raw VALUES (?, ?)", [(int(a), s) for a, s in rows] + [(999, "M")])
    with_bad.execute(f"CREATE VIEW t AS {view}")
    without = duckdb.connect()
    without.execute("CREATE TABLE t (age INTEGER, sex VARCHAR)")
    without.executemany("INSERT INTO t VALUES (?, ?)", [(int(a), s) for a, s in rows])
    np.testing.assert_array_equal(released(with_bad, cache=cache), released(without, cache=cache))


def test_made_safe_views_keep_their_joins_and_groupings():
    """Wrapping a join's whole condition in TRY hid its equality from DuckDB, which then joined in a
    nested loop (hours on a million rows, after the charge), and hid an ASOF join's inequality;
    wrapping ROLLUP made it unparsable. Comparisons are wrapped side by side instead."""
    from dpsql.private.backend import safe_view

    con = duckdb.connect()
    con.execute("CREATE TABLE raw AS SELECT i AS id, i % 50 AS x FROM range(1000) r(i)")
    con.execute("CREATE TABLE lk AS SELECT i AS id, i % 7 AS z FROM range(0, 1000, 2) r(i)")
    views = {"SELECT raw.x FROM raw JOIN lk ON raw.id = lk.id AND raw.x // 2 >= lk.z": "hash join",
             "SELECT raw.x FROM raw ASOF JOIN lk ON raw.id >= lk.id": "asof join",
             "SELECT x % 5 AS x FROM raw GROUP BY ROLLUP (x % 5)": None}
    for view, operator in views.items():
        con.execute(f"CREATE OR REPLACE VIEW v AS {view}")
        safe = safe_view(con, "v").sql("duckdb")
        assert sorted(con.sql(f"SELECT * FROM {safe}").fetchall(), key=str) == \
            sorted(con.sql("SELECT * FROM v").fetchall(), key=str), view
        plan = "".join(str(r) for r in con.sql(f"EXPLAIN SELECT * FROM {safe}").fetchall())
        assert operator is None or operator in plan.lower().replace("_", " "), (view, plan)


def test_a_view_that_cannot_be_planned_is_refused_before_the_charge(monkeypatch):
    """What fails whatever the rows hold (here a made-safe view DuckDB cannot bind) fails while the
    query is planned, before the kernel charges the budget, and the message quotes no SQL of the
    view (whose literals may be the owner's secrets)."""
    from dpsql.private import backend

    def unbindable(query):  # what wrapping UNNEST in TRY used to make of a view
        for column in list(query.find_all(backend.exp.Column)):
            column.replace(backend.exp.Try(this=backend.exp.Explode(this=column.copy())))
    monkeypatch.setattr(backend, "_guard_query", unbindable)
    con = duckdb.connect()
    con.execute("CREATE TABLE raw AS SELECT (i % 90)::INTEGER AS a, 'F' AS sex, 'dx:secret' AS note "
                "FROM range(50) r(i)")
    con.execute("CREATE VIEW t AS SELECT a AS age, sex FROM raw WHERE note <> 'dx:other-secret'")
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), cache=False)
    with pytest.raises(MeasurementError) as info:
        db.query("SELECT sex, COUNT(*) FROM t GROUP BY sex", epsilon=0.5)
    assert "secret" not in str(info.value) and "LINE" not in str(info.value), str(info.value)
    assert db.ledger.entries() == [] and "spend" not in str(info.value)


#: A hostile CSV line holding line breaks, and the clean line(s) it must read as ("" for none): \n, \r\n
#: and a lone \r each end a line, whatever ends the file's other lines, and quotes never join lines.
LINE_BREAKS = [("31,F\r\n", "31,F"), ("31,F\n", "31,F"), ("\r", ""), ("31,F\r\r", "31,F"), ("\r31,F", "31,F"),
               ("31,\rF", ""), ('31,"F\nM"', ""), ('31,"F\r\nM"', ""), ("4,F,", "")]


@pytest.mark.parametrize("eol", ["\n", "\r\n"], ids=["lf", "crlf"])
@pytest.mark.parametrize("hostile,reads_as", LINE_BREAKS, ids=[repr(h) for h, _ in LINE_BREAKS])
def test_a_csv_line_break_changes_no_other_row(tmp_path, cache, eol, hostile, reads_as):
    """A line break in a CSV line (a quoted one, a \r\n line in a \n file or the reverse, a lone \r)
    ends a line there and nowhere else: the hostile text reads as the clean lines it splits into
    (dropped when they have the wrong number of fields or are out of the domain), and no other
    line changes. It used to fail every measurement after the charge (DuckDB's CSV state machine
    rejects a line end other than the one it sniffed), so failing depended on the data. The line
    is put first (where a sniffer looks) and in the middle."""
    rows = [f"{a},{s}" for a, s in clean_frame().itertuples(index=False)]

    def csv(path, line):
        put = [line] if line else []
        path.write_bytes(("age,sex" + eol + eol.join(put + rows[:150] + put + rows[150:]) + eol).encode())
        return path

    dirty, oracle = csv(tmp_path / "dirty.csv", hostile), csv(tmp_path / "oracle.csv", reads_as)
    np.testing.assert_array_equal(released(dirty, cache=cache), released(oracle, cache=cache))


def test_a_read_that_fails_after_the_charge_keeps_it():
    """A failure that no rewrite can prevent (the owner's view calls error() on one value) happens
    after the spend is recorded: the charge stays, the error says so and quotes no data."""
    con = duckdb.connect()
    con.execute("CREATE TABLE raw AS SELECT * FROM (VALUES (31, 'F'), (40, 'Alice Smith')) v(age, name)")
    con.execute("CREATE VIEW t AS SELECT age, CASE WHEN name = 'Alice Smith' THEN error('Alice Smith') "
                "ELSE 'F' END AS sex FROM raw")
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), cache=False)
    with pytest.raises(MeasurementError) as info:
        db.query("SELECT sex, COUNT(*) FROM t GROUP BY sex", epsilon=0.5)
    assert "Alice" not in str(info.value) and "InvalidInputException" in str(info.value)
    assert "ledger entry 1" in str(info.value) and "is kept" in str(info.value)
    assert [e.cost.epsilon for e in db.ledger.entries()] == [0.5]


def test_a_missing_column_is_refused_before_the_charge(tmp_path):
    """What the catalog alone shows (a schema column the table lacks) is refused when the owner
    connects (it used to connect and fail at the first query), before a ledger is written."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t (age INTEGER)")
    with pytest.raises(dpsql.SchemaError, match=r"columns\.sex: the table has no such column; its columns are age$"):
        dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), cache=False, ledger=tmp_path / "ledger")
    assert not (tmp_path / "ledger").exists()


# -- the data owner's report ---------------------------------------------------------------

def test_validate_counts_what_encode_rejects(tmp_path, capsys):
    types, bad = MESSY["integers"]
    rows = list(clean_frame(50).itertuples(index=False)) + bad
    path = tmp_path / "messy.duckdb"
    con = duckdb.connect(str(path))
    con.execute(f"CREATE TABLE t ({types})")
    con.executemany("INSERT INTO t VALUES (?, ?)", rows)
    con.close()
    schema = dpsql.load_schema(SCHEMA)
    report = validate(str(path), SCHEMA)
    age, sex = (schema.column(c).encode([r[i] for r in rows]) for i, c in enumerate(("age", "sex")))
    assert report.rows == len(rows)
    assert report.clean_rows == int(np.sum((age >= 0) & (sex >= 0)))
    by_name = {c.name: c for c in report.columns}
    assert by_name["age"].dropped == int(np.sum(age < 0)) == 5
    assert by_name["age"].counts == {"null": 2, "outside": 3}
    assert by_name["sex"].counts == {"null": 2, "outside": 4}
    assert by_name["sex"].examples == ["", "F ", "X", "f"]
    # the command line: exit status 3 for problems, JSON on request
    schema_file = tmp_path / "schema.json"
    schema_file.write_text(json.dumps(SCHEMA))
    assert cli_main(["validate", "--data", str(path), "--schema", str(schema_file)]) == 3
    out = capsys.readouterr().out
    assert "age (BIGINT): 5 rows outside the domain: 2 null, 3 outside" in out and "data owner only" in out
    assert cli_main(["validate", "--data", str(path), "--schema", str(schema_file), "--json"]) == 3
    assert json.loads(capsys.readouterr().out)["clean_rows"] == report.clean_rows


def test_validate_floats_types_and_units():
    con = table("age DOUBLE, sex INTEGER, pid VARCHAR",
                [(1.0, 1, "a"), (float("nan"), 1, "a"), (float("inf"), 2, "a"), (-float("inf"), 3, None), (5.5, 4, "b")])
    schema = {**SCHEMA, "privacy_unit": {"column": "pid", "max_rows": 2}}
    report = validate(con, schema)
    by_name = {c.name: c for c in report.columns}
    assert by_name["age"].counts == {"nan": 1, "inf": 2, "outside": 1}
    assert by_name["sex"].counts == {"type": 5} and "INTEGER" in by_name["sex"].type_problem
    assert report.clean_rows == 0
    u = report.unit
    assert (u.units, u.largest, u.units_over, u.rows_over, u.null_rows) == (2, 3, 1, 1, 1)
    clean = validate(table("age INTEGER, sex VARCHAR", [(1, "F")]), SCHEMA)
    assert clean.problems() == 0 and "problems: none" in str(clean)


# -- resource limits -----------------------------------------------------------------------

BIG = {"table": "t", "columns": {f"c{i}": {"type": "integer", "min": 0, "max": 999} for i in range(4)}}


@pytest.fixture
def big():
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i % 1000 c0, i % 999 c1, i % 998 c2, i % 997 c3 FROM range(100) r(i)")
    db = dpsql.connect(con, schema=BIG, budget=dpsql.Budget(epsilon=10.0), cache=False)
    yield db
    db.close()


@pytest.mark.parametrize("sql", [
    "SELECT c0, c1, c2, c3, COUNT(*) FROM t GROUP BY c0, c1, c2, c3",                 # 1e12 cells
    ["SELECT COUNT(*) FROM t WHERE c0 > %d" % (i % 999) for i in range(100_000)],   # 100,000 statements
    "SELECT COUNT(*) FROM t WHERE c0 > 5;\n" * 100_000,
])
def test_oversized_requests_are_refused_up_front(big, sql):
    start = time.perf_counter()
    with pytest.raises(ResourceLimitError) as info:
        big.batch(sql, epsilon=1.0)
    assert time.perf_counter() - start < 60.0  # a hang guard: counting 10^12 cells would take hours
    message = str(info.value)
    assert ("1,000,000,000,000" in message or "100,000 statements" in message) and "synthesize" in message
    assert big.ledger.entries() == []


def test_measurement_size_is_checked_before_reading(monkeypatch):
    """A strategy whose marginal exceeds the limit is refused by the kernel before the table is read."""
    monkeypatch.setattr(limits, "MAX_MEASURED_CELLS", 500_000)
    read = []
    monkeypatch.setattr("dpsql.private.kernel.prepare_counting", lambda *a, **k: read.append(1))
    ledger = Ledger(None, dpsql.Budget(epsilon=1.0))
    private = PrivateTable(None, "t", dpsql.load_schema(BIG), ledger)
    strategy = KronStrategy((Identity(1000), Identity(1000), Ones(1, 1000), Ones(1, 1000)))
    with pytest.raises(ResourceLimitError, match="this measurement needs 1,000,000 cells to count"):
        private.measure([], strategy, Laplace(1.0), Cost(epsilon=1.0))
    assert read == [] and ledger.entries() == []


def test_workload_with_a_huge_term_is_refused_before_selection(monkeypatch):
    monkeypatch.setattr(limits, "MAX_MEASURED_CELLS", 500_000)
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT 1 c0, 2 c1, 3 c2, 4 c3")
    db = dpsql.connect(con, schema=BIG, budget=dpsql.Budget(epsilon=10.0), cache=False)
    # the size that counts is that of the values the queries tell apart: c1 > 3 splits c1's 1,000 values in
    # two, so 2,000 cells are counted, not 1,000,000 (this was refused)
    assert len(db.query("SELECT c0, COUNT(*) FROM t WHERE c1 > 3 GROUP BY c0", epsilon=1.0).df) == 1000
    spent = db.ledger.entries()
    selected = []
    monkeypatch.setattr("dpsql.engine.engine.select", lambda *a, **k: selected.append(1))
    with pytest.raises(ResourceLimitError, match="1,000,000 cells to count"):
        db.query("SELECT c0, c1, COUNT(*) FROM t GROUP BY c0, c1", epsilon=1.0)
    assert selected == [] and db.ledger.entries() == spent


# -- concurrency ---------------------------------------------------------------------------

def test_threads_share_one_connection_safely(tmp_path):
    con = table("age INTEGER, sex VARCHAR", list(clean_frame().itertuples(index=False)))
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=3.0), ledger=str(tmp_path / "l.ledger"),
                       cache=str(tmp_path))
    db.query(QUERIES[0], epsilon=0.1)  # select the strategy once
    outcomes: list[str] = []

    def work(k: int):
        for i in range(10):
            try:  # each a new request (a confidence of its own): a repeated one is answered free from its release
                db.query(QUERIES[0], epsilon=0.1, confidence=0.5 + (10 * k + i + 1) / 1000)
                outcomes.append("ok")
            except dpsql.BudgetExceededError:
                outcomes.append("refused")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("ok") == 29 and outcomes.count("refused") == 11   # 3.0 / 0.1 = 30 spends in all
    assert db.spent().epsilon == pytest.approx(3.0) and len(db.ledger.entries()) == 30
    db.close()


def _spend_in_process(args):
    data, ledger, cache, k = args
    db = dpsql.connect(data, schema=SCHEMA, ledger=ledger, cache=cache)
    ok = 0
    for i in range(8):
        try:  # each a new request (a confidence of its own): a repeated one is answered free from its release
            db.query(QUERIES[0], epsilon=0.25, confidence=0.5 + (8 * k + i + 1) / 1000)
            ok += 1
        except dpsql.BudgetExceededError:
            pass
    db.close()
    return ok


def test_processes_share_one_database_and_ledger(tmp_path):
    data = tmp_path / "people.duckdb"
    con = duckdb.connect(str(data))
    con.register("df", clean_frame())
    con.execute("CREATE TABLE t AS SELECT * FROM df")
    con.close()
    ledger = str(tmp_path / "people.ledger")
    db = dpsql.connect(str(data), schema=SCHEMA, budget=dpsql.Budget(epsilon=4.0), ledger=ledger, cache=str(tmp_path))
    db.query(QUERIES[0], epsilon=0.25)
    db.close()
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        done = pool.map(_spend_in_process, [(str(data), ledger, str(tmp_path), k) for k in range(3)])
    assert sum(done) == 15   # 4.0 / 0.25 = 16 spends, one made before
    with dpsql.Ledger(ledger) as check:
        assert check.spent().epsilon == pytest.approx(4.0) and len(check.entries()) == 16
