"""The analyst/owner boundary: nothing handed to an analyst can read the private table or files.

An analyst holds a :class:`dpsql.Connection` (``db``) but not the owner's DuckDB connection.
Every object dpsql gives them (results, their relations, ``db.sql``, synthetic tables,
``db.released``) must live on a database that holds released data only, with no file access;
and a synthetic table must never replace an existing table.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
from dpsql.errors import WorkloadError
from dpsql.private.backend import Backend
from dpsql.private.kernel import PrivateTable

SCHEMA = {"table": "people", "columns": {
    "age": {"type": "integer", "min": 0, "max": 9},
    "sex": {"type": "categorical", "values": ["F", "M"]}}}

#: What an analyst might run on a relation handed to them to get at private data or files.
ATTACKS = ["SELECT * FROM people", "SELECT * FROM main.people", "SELECT * FROM read_csv('{path}')",
           "SELECT * FROM '{path}'", "COPY (SELECT 1) TO '{out}'", "ATTACH '{out}.db' AS x",
           "EXPORT DATABASE '{out}_dir'", "SET enable_external_access = true", "INSTALL httpfs",
           "SELECT * FROM glob('/*')"]


@pytest.fixture
def owner(tmp_path):
    con = duckdb.connect()
    con.execute("CREATE TABLE people AS SELECT i % 10 AS age, CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END AS sex "
                "FROM range(500) t(i)")
    secret = tmp_path / "secret.csv"
    secret.write_text("ssn\n123-45-6789\n")
    return con, secret


def _refused(con_or_rel, sql):
    with pytest.raises(duckdb.Error):
        run = con_or_rel.query("r", sql) if isinstance(con_or_rel, duckdb.DuckDBPyRelation) \
            else con_or_rel.sql(sql)
        if run is not None:
            run.fetchall()


def test_nothing_handed_out_can_read_the_private_table_or_files(owner, tmp_path):
    con, secret = owner
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=10.0), cache=False)
    res = db.query("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex", epsilon=1.0)
    rel = db.sql("SELECT age, COUNT(*) AS n FROM people GROUP BY age", epsilon=1.0)
    syn = db.synthesize("mwem", workload=1, epsilon=1.0, rounds=2, name="people_syn", seed=0)
    handed = {"result": res.relation, "db.sql": rel, "synthetic": syn.relation, "released": db.released}
    for what, target in handed.items():
        for attack in ATTACKS:
            sql = attack.format(path=secret, out=tmp_path / f"stolen_{what.replace('.', '_')}")
            _refused(target, sql)
    assert not list(tmp_path.glob("stolen*"))
    # what they may do: SQL over released data
    assert rel.query("r", "SELECT SUM(n) FROM r").fetchall()[0][0] == pytest.approx(rel.df()["n"].sum())
    assert db.released.sql("SELECT COUNT(*) FROM people_syn").fetchall()[0][0] == len(syn.df)
    # and the synthetic table is not on the owner's connection
    assert "people_syn" not in {r[0] for r in con.sql("SELECT table_name FROM duckdb_tables()").fetchall()}


def test_the_analysts_database_cannot_reach_duckdbs_temporary_directory(owner, tmp_path, monkeypatch):
    """DuckDB exempts its temporary directory (``.tmp`` in the working directory, where the owner's
    in-memory database spills the private table's blocks) and the database's own path from
    ``enable_external_access = false`` when that is set at connect time: an analyst could list
    and read the spilled blocks, write files there and create ``:memory:`` files on disk."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".tmp").mkdir()
    (tmp_path / ".tmp" / "duckdb_temp_storage-0.tmp").write_bytes(b"SSN-123-45-6789")  # a spilled block
    con, _ = owner
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), cache=False)
    released = db.released
    assert released.sql("SELECT value FROM duckdb_settings() WHERE name IN ('allowed_directories', "
                        "'allowed_paths', 'temp_directory') ORDER BY name").fetchall() == [("[]",), ("[]",), ("",)]
    for sql in [f"SELECT * FROM glob('{tmp_path}/.tmp/*')", f"SELECT content FROM read_blob('{tmp_path}/.tmp/*')",
                f"COPY (SELECT 1) TO '{tmp_path}/.tmp/written.csv'", f"ATTACH '{tmp_path}/:memory:' AS disk",
                "ATTACH ':memory:.db' AS disk2"]:
        _refused(released, sql)
    assert sorted(p.name for p in tmp_path.rglob("*")) == [".tmp", "duckdb_temp_storage-0.tmp", "secret.csv"]


def _reachable(obj, depth=3, seen=None):
    """Every object reachable from ``obj`` through public attributes (no leading underscore)."""
    seen = {} if seen is None else seen
    if id(obj) in seen or depth < 0 or isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return seen
    seen[id(obj)] = obj
    if isinstance(obj, (pd.DataFrame, pd.Series, np.ndarray)):
        return seen
    items = obj.items() if isinstance(obj, dict) else ()
    for name in dir(obj):
        if name.startswith("_"):
            continue
        try:
            value = getattr(obj, name)
        except Exception:  # a property that needs state (e.g. a closed connection)
            continue
        if callable(value) and not isinstance(value, (duckdb.DuckDBPyConnection, duckdb.DuckDBPyRelation)):
            continue
        _reachable(value, depth - 1, seen)
    for _, value in items:
        _reachable(value, depth - 1, seen)
    return seen


def test_no_public_attribute_leads_to_the_owners_connection(owner):
    con, _ = owner
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=10.0), cache=False)
    res = db.query("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex", epsilon=1.0)
    syn = db.synthesize("mwem", workload=1, epsilon=1.0, rounds=2, name="s", seed=0)
    for root in (db, res, syn):
        for obj in _reachable(root).values():
            assert obj is not con
            assert not isinstance(obj, (Backend, PrivateTable))
            if isinstance(obj, duckdb.DuckDBPyConnection):
                assert obj is db.released
    assert not hasattr(db, "backend")


def test_closing_db_released_closes_only_that_threads_cursor(owner):
    """``db.released`` was the database's one connection: closing it made ``db.sql`` spend and then fail.
    Now it is the thread's own cursor: closing it leaves the database, the results' relations and
    later requests working, and the next ``db.released`` is a new, open cursor."""
    con, _ = owner
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=10.0), cache=False, progress=False)
    res = db.query("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex", epsilon=1.0)
    db.released.close()
    # another spend than the first's: the same request again would be its release again, for free
    assert len(db.sql("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex", epsilon=0.5).fetchall()) == 2
    assert len(db.synthesize("mwem", workload=1, epsilon=1.0, rounds=2, rows=7, name="s", seed=0).relation) == 7
    assert res.relation.fetchall() == list(res.df.itertuples(index=False, name=None))
    assert db.released.sql("SELECT COUNT(*) FROM s").fetchall() == [(7,)]
    assert db.spent().epsilon == 2.5


def test_a_request_whose_answers_go_to_a_closed_released_database_is_refused_before_the_spend(owner):
    """Once the database is closed (``db.close()`` closes it), a request whose answers go there
    is refused before it spends, and handing out a relation is a dpsql error."""
    con, _ = owner
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=10.0), cache=False, progress=False)
    res = db.query("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex", epsilon=1.0)
    db._released.close()
    for request in (lambda: db.sql("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex", epsilon=1.0),
                    lambda: db.synthesize("mwem", workload=1, epsilon=1.0, rounds=2, name="s", seed=0),
                    lambda: res.relation, lambda: db.released):
        with pytest.raises(dpsql.ArgumentError, match=r"the released database \(db.released\) is closed"):
            request()
    assert db.spent().epsilon == 1.0
    assert len(db.query("SELECT COUNT(*) AS n FROM people", epsilon=1.0).df) == 1  # answers still come as frames


def test_sql_on_db_released_in_another_thread_never_fails_a_charged_request(owner):
    """One thread looped ``db.released.sql(...)`` while another looped ``db.sql(..., epsilon=0.01)``:
    both used the one connection, which DuckDB refuses to share between concurrent calls, so
    charged requests raised ``ResourceInUseException`` (46 in 6 s), and so did the analyst's SQL."""
    import threading

    con, _ = owner
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=10.0), cache=False, progress=False)
    db.query("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex", epsilon=0.01)  # the strategy, selected once
    done = threading.Event()
    failures, answers, looked = [], [], []

    def analyst():
        while not done.is_set():
            try:
                looked.append(db.released.sql("SELECT sum(i) FROM range(20000) t(i)").fetchall()[0][0])
            except Exception as e:  # noqa: BLE001 - any failure is the finding
                failures.append(("analyst", repr(e)))

    def spender():
        try:
            for i in range(15):  # each a new spend: a repeated request would be answered from its release
                try:
                    epsilon = 0.01 + (i + 1) / 10000
                    answers.append(db.sql("SELECT sex, COUNT(*) AS n FROM people GROUP BY sex", epsilon=epsilon).df())
                    answers.append(db.query("SELECT COUNT(*) AS n FROM people", epsilon=epsilon).relation.df())
                except Exception as e:  # noqa: BLE001
                    failures.append(("spender", repr(e)))
        finally:
            done.set()

    threads = [threading.Thread(target=analyst), threading.Thread(target=spender)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert failures == []
    assert len(answers) == 30 and len(db.ledger.entries()) == 1 + len(answers)
    assert looked and set(looked) == {sum(range(20000))}


@pytest.mark.parametrize("name", ["people", "PEOPLE", "taken", "existing_view"])
def test_a_synthetic_table_never_replaces_an_existing_one(owner, name):
    con, _ = owner
    con.execute("CREATE VIEW existing_view AS SELECT * FROM people")
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=10.0), cache=False)
    db.synthesize("mwem", workload=1, epsilon=1.0, rounds=2, name="taken", seed=0)
    spent = db.spent()
    with pytest.raises(WorkloadError, match="already exists"):
        db.synthesize("mwem", workload=1, epsilon=1.0, rounds=2, name=name, seed=0)
    assert db.spent() == spent
    assert con.sql("SELECT COUNT(*) FROM people").fetchall()[0][0] == 500


def test_two_requests_for_one_synthetic_name_spend_once(owner, monkeypatch):
    """The name was checked before the run and registered after it: two threads both spent, and
    the second table silently replaced the first under the first's feet."""
    import threading

    import dpsql.synth.synthesize as synthesize

    con, _ = owner
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=10.0), cache=False, progress=False)
    inside = threading.Barrier(2, timeout=60)
    plan = synthesize._plan

    def slow_plan(*args, **kwargs):  # both requests pass their checks before either registers
        run = plan(*args, **kwargs)
        inside.wait()
        return run

    monkeypatch.setattr(synthesize, "_plan", slow_plan)
    outcomes = []

    def request(rows):
        try:
            outcomes.append(len(db.synthesize("mwem", workload=1, epsilon=1.0, rounds=2, rows=rows, name="same").df))
        except WorkloadError as e:
            outcomes.append(str(e))

    threads = [threading.Thread(target=request, args=(rows,)) for rows in (100, 101)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    refused = [o for o in outcomes if isinstance(o, str)]
    made = [o for o in outcomes if isinstance(o, int)]
    assert len(made) == 1 and len(refused) == 1 and "a table or view named 'same' already exists" in refused[0]
    assert db.spent().epsilon == 1.0
    assert db.released.sql("SELECT count(*) FROM same").fetchall()[0][0] == made[0]


def _run_after_the_spend(monkeypatch, action):
    """Make ``action()`` run inside every synthesis run, right after its spend is recorded."""
    import dpsql.synth.synthesize as synthesize
    from dpsql.synth.plan.request import Run

    plan = synthesize._plan

    def plan_then_act(*args, **kwargs):
        run = plan(*args, **kwargs)

        def execute(bar, rng):
            outcome = run.execute(bar, rng)
            action()
            return outcome
        return Run(run.cost, execute)

    monkeypatch.setattr(synthesize, "_plan", plan_then_act)


@pytest.mark.parametrize("create", ["CREATE TABLE {} AS SELECT 1 AS x", "CREATE OR REPLACE TABLE {} AS SELECT 1 AS x",
                                    "CREATE VIEW {} AS SELECT 1 AS x", "CREATE TABLE {} (x INTEGER)"])
def test_the_analyst_cannot_take_a_synthetic_tables_name_while_it_is_made(owner, monkeypatch, create):
    """Another thread created the name on ``db.released`` right after the spend: ``synthesize`` raised
    ``CatalogException`` with the spend recorded and no table. The name is now claimed in the catalog
    before the spend, so the analyst's CREATE fails on their side, and reading the name says why."""
    import threading

    con, _ = owner
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=10.0), cache=False, progress=False)
    seen = []

    def analyst():  # in another thread, on its own db.released
        try:
            db.released.execute(create.format("syn"))
            seen.append("created")
        except duckdb.CatalogException:
            seen.append("refused")
        with pytest.raises(duckdb.InvalidInputException, match="dpsql is still making the synthetic table 'syn'"):
            db.released.sql("SELECT * FROM syn").fetchall()

    def in_a_thread():
        thread = threading.Thread(target=analyst)
        thread.start()
        thread.join(timeout=60)

    _run_after_the_spend(monkeypatch, in_a_thread)
    syn = db.synthesize("mwem", workload=1, epsilon=0.5, rounds=2, rows=40, name="syn", seed=0)
    assert seen == ["refused"] and syn.name == "syn" and db.spent().epsilon == 0.5
    assert db.released.sql("SELECT COUNT(*) FROM syn").fetchall() == [(40,)]


def test_a_synthetic_tables_name_taken_anyway_keeps_the_table_under_a_fresh_name(owner, monkeypatch):
    """An analyst who drops the placeholder and takes the name loses it to nothing: the spend is
    recorded and the table is registered under a fresh name, which the error names and carries."""
    from dpsql.synth import NameTakenError

    con, _ = owner
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=10.0), cache=False, progress=False)
    _run_after_the_spend(monkeypatch, lambda: db.released.execute("DROP VIEW syn; CREATE TABLE syn AS SELECT 1 AS x"))
    with pytest.raises(NameTakenError, match=r"the name 'syn' was taken on db.released .* registered as 'syn_[0-9a-f]{16}'") as err:
        db.synthesize("mwem", workload=1, epsilon=0.5, rounds=2, rows=40, name="syn", seed=0)
    table = err.value.table
    assert isinstance(err.value, dpsql.WorkloadError) and db.spent().epsilon == 0.5
    assert db.released.sql(f'SELECT COUNT(*) FROM "{table.name}"').fetchall() == [(40,)] == [(len(table.relation),)]
    assert db.released.sql("SELECT * FROM syn").fetchall() == [(1,)]  # the analyst's own table is left alone


def test_a_refused_or_failed_synthesis_leaves_its_name_free(owner, monkeypatch):
    """The placeholder that claims the name goes when nothing is made: the name can be used again."""
    con, _ = owner
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), cache=False, progress=False)
    db.query("SELECT COUNT(*) AS n FROM people", epsilon=0.8)
    with pytest.raises(dpsql.BudgetExceededError):
        db.synthesize("mwem", workload=1, epsilon=0.5, rounds=2, name="syn", seed=0)
    assert db.released.sql("SELECT COUNT(*) FROM duckdb_views() WHERE NOT internal").fetchall() == [(0,)]
    db.released.execute("CREATE TABLE syn AS SELECT 1 AS x")


def test_a_synthetic_table_has_the_schemas_column_types(owner):
    """Types were inferred from the sampled rows: bins as text labels (``WHERE score >= 50``
    failed where the private table answers it), no type at all for 0 rows or only NULLs."""
    con, _ = owner
    con.execute("CREATE TABLE scored AS SELECT i % 100 + 0.5 AS score, i % 2 = 0 AS flag, i % 7 AS k, "
                "CASE WHEN i % 3 = 0 THEN 'a' END AS tag, i % 3 AS code FROM range(2000) t(i)")
    schema = {"table": "scored", "columns": {
        "score": {"type": "numeric", "bins": [0, 25, 50, 75, 100]}, "flag": {"type": "boolean"},
        "k": {"type": "integer", "min": 0, "max": 6}, "tag": {"type": "categorical", "values": ["a"], "nullable": True},
        "code": {"type": "categorical", "values": [0, 1.5, 2]}}}
    db = dpsql.connect(con, schema=schema, budget=dpsql.Budget(epsilon=1e6), cache=False, progress=False)
    want = {"score": "DOUBLE", "flag": "BOOLEAN", "k": "BIGINT", "tag": "VARCHAR", "code": "DOUBLE"}
    for rows in (0, 300):
        name = f"syn{rows}"
        db.synthesize("mwem", workload=1, epsilon=1e4, rounds=5, rows=rows, name=name, seed=1)
        assert {c: t for c, t, *_ in db.released.sql(f"DESCRIBE {name}").fetchall()} == want
    scores = db.released.sql("SELECT DISTINCT score FROM syn300 ORDER BY score").fetchall()
    assert {s for (s,) in scores} == {12.5, 37.5, 62.5, 87.5}  # each bin's midpoint
    sql = "SELECT flag, COUNT(*) FROM {} WHERE score >= 50 GROUP BY flag"
    assert len(db.released.sql(sql.format("syn300")).fetchall()) == 2


def test_a_synthetic_name_that_is_not_unicode_text_is_a_dpsql_error(owner):
    con, _ = owner
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=10.0), cache=False, progress=False)
    with pytest.raises(WorkloadError, match="holds a lone surrogate"):
        db.synthesize("mwem", workload=1, epsilon=1.0, rounds=2, name="\ud800")
    assert db.spent().epsilon == 0.0


@pytest.mark.parametrize("name", ['my "synth"', "with space", "select"])
def test_a_synthetic_table_of_any_name_is_a_relation(owner, name):
    """A name that must be quoted in SQL: its relation is the table (it was a raw DuckDB
    CatalogException after the run had spent)."""
    con, _ = owner
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=10.0), cache=False)
    syn = db.synthesize("mwem", workload=1, epsilon=1.0, rounds=2, name=name, seed=0)
    assert syn.relation.aggregate("COUNT(*)").fetchall()[0][0] == len(syn.df) > 0


def _release(source, seed=5):
    db = dpsql.connect(source, schema=SCHEMA, budget=dpsql.Budget(epsilon=10.0), cache=False,
                       source_of_noise=np.random.default_rng(seed))
    out = db.query("SELECT age, sex, COUNT(*) AS n FROM people GROUP BY age, sex", epsilon=1.0,
                   noise="laplace").df["n"].to_numpy()
    db.close()
    return out


@pytest.mark.parametrize("hostile", ["abc,F", '3,"M', "4,F,extra", "5", '"6","F', "7;F", "7.5,F", "1.9e0,M", "0x1,F"])
def test_one_hostile_csv_line_changes_no_other_row(tmp_path, hostile):
    """A CSV file is read line by line with no sniffing: a hostile line (a text age, an unclosed
    quote, a wrong field count, an age that is not an integer) is at most dropped itself. Sniffed,
    'abc' would have made every age text (so every row out of domain), and an unclosed quote would
    swallow the lines after it; DuckDB's text-to-integer cast counted 7.5 as 8 and 1.9e0 as 2."""
    rows = [f"{i % 10},{'F' if i % 3 == 0 else 'M'}" for i in range(200)]
    clean, dirty = tmp_path / "clean.csv", tmp_path / "dirty.csv"
    clean.write_text("age,sex\n" + "\n".join(rows) + "\n")
    dirty.write_text("age,sex\n" + "\n".join(rows[:100] + [hostile] + rows[100:]) + "\n")
    np.testing.assert_array_equal(_release(dirty), _release(clean))


def test_quoted_csv_fields_are_read(tmp_path):
    """Fields quoted by a writer (e.g. QUOTE_ALL) are unquoted, so they stay in the domain."""
    plain, quoted = tmp_path / "plain.csv", tmp_path / "quoted.csv"
    rows = [(i % 10, "F" if i % 3 == 0 else "M") for i in range(100)]
    plain.write_text("age,sex\n" + "".join(f"{a},{s}\n" for a, s in rows))
    quoted.write_text('"age","sex"\n' + "".join(f'"{a}","{s}"\n' for a, s in rows))
    np.testing.assert_array_equal(_release(quoted), _release(plain))
    exact = dpsql.connect(quoted, schema=SCHEMA, budget=dpsql.Budget(epsilon=1e12), cache=False)
    assert exact.query("SELECT COUNT(*) AS n FROM people", epsilon=1e9).df["n"][0] == pytest.approx(100, abs=1e-3)


def test_the_connection_reads_no_file(owner, tmp_path):
    """A text handed to query/batch/synthesize is SQL, never a file name: a Connection cannot be
    made to read (and echo in an error) a file of the analyst's choosing."""
    con, secret = owner
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=10.0), cache=False)
    path = tmp_path / "count.sql"
    path.write_text("SELECT COUNT(*) FROM people")
    for call in (lambda: db.batch(str(path), epsilon=1.0), lambda: db.batch([str(path)], epsilon=1.0),
                 lambda: db.query(str(secret), epsilon=1.0),
                 lambda: db.synthesize("mwem", workload=str(path), epsilon=1.0, name="x")):
        with pytest.raises(dpsql.SQLError) as info:
            call()
        assert "123-45" not in str(info.value)
    assert db.ledger.entries() == []
    with pytest.raises(dpsql.ArgumentError, match="item 2 of the batch is of type int"):
        db.batch(["SELECT COUNT(*) FROM people", 5], epsilon=1.0)
