"""``dpsql serve`` end to end: real PostgreSQL clients against the server, answers against the engine.

A module fixture writes a small private table (a DuckDB file), its schema and a server
configuration with two demo analysts, and starts the server on a free loopback port;
the clients are psql, psycopg 3 (simple and extended protocol) and pg8000.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dpsql
from dpsql.errors import ConfigError
from dpsql.private.ledger import Ledger
from dpsql.server.app import App
from dpsql.server.config import load_config
from dpsql.server.scram import make_verifier

psycopg = pytest.importorskip("psycopg")
pg8000 = pytest.importorskip("pg8000")

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = {"table": "people", "columns": {
    "sex": {"type": "categorical", "values": ["F", "M"]},
    "age": {"type": "integer", "min": 0, "max": 99},
    "smoker": {"type": "boolean"},
}}
HUGE = 1e9  # epsilon at which answers equal the exact ones to well under 1e-3
PASSWORDS = {"alice": "alice-demo", "bob": "bob-demo", "carol": "carol-demo", "dave": "dave-demo"}


def write_dataset(d: Path, rows: int = 500) -> None:
    con = duckdb.connect(str(d / "people.duckdb"))
    con.execute(f"""CREATE TABLE people AS SELECT CASE WHEN i % 3 = 0 THEN 'F' ELSE 'M' END AS sex,
                    (i * 37) % 100 AS age, i % 5 = 0 AS smoker FROM range({rows}) t(i)""")
    con.close()
    (d / "people.yaml").write_text(yaml.safe_dump(SCHEMA))


def write_config(d: Path, parts: dict[str, float], total: float, reads: dict[str, list[str]] | None = None,
                 **extra) -> Path:
    config = {
        "listen": {"host": "127.0.0.1", "port": 0},
        "datasets": {"people": {"source": "people.duckdb", "schema": "people.yaml", "ledger": "people.ledger",
                                "budget": {"epsilon": total}}},
        "analysts": {name: {"password": make_verifier(PASSWORDS[name]),
                            "budgets": {"people": {"epsilon": part}},
                            **({"reads": reads[name]} if reads and name in reads else {})}
                     for name, part in parts.items()},
        **extra,
    }
    path = d / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve")
    write_dataset(d)
    path = write_config(d, {"alice": 1e6 * HUGE, "bob": 1e6 * HUGE}, 1e7 * HUGE, reads={"bob": ["alice"]},
                        limits={"statements_per_second": 1000})
    app = App(load_config(path), cache=str(d / "cache"))
    thread = app.server(port=0).run_in_thread()
    yield d, thread.port, app
    thread.stop()
    app.close()


def dsn(port: int, user: str, password: str | None = None, **extra) -> str:
    parts = {"host": "127.0.0.1", "port": port, "user": user, "dbname": "people",
             "password": PASSWORDS.get(user, "x") if password is None else password, **extra}
    return " ".join(f"{k}={v}" for k, v in parts.items())


def exact(d: Path, sql: str) -> list[tuple]:
    con = duckdb.connect(str(d / "people.duckdb"), read_only=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def close_rows(got: list[tuple], want: list[tuple]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert len(g) == len(w)
        for a, b in zip(g, w):
            if isinstance(b, (int, float)) and not isinstance(b, bool):
                assert a is not None and abs(float(a) - float(b)) < 1e-3, (got, want)
            else:
                assert a == b, (got, want)


GROUPED = "SELECT sex, COUNT(*) AS n, SUM(age) AS total FROM people GROUP BY sex ORDER BY sex"
EXACT_GROUPED = "SELECT sex, COUNT(*), SUM(age) FROM people GROUP BY sex ORDER BY sex"


def test_psycopg_simple_and_extended_protocol_answer_as_the_engine(served):
    d, port, _ = served
    with psycopg.connect(dsn(port, "alice"), autocommit=True) as conn:
        conn.execute(f"SET dpsql.epsilon = {HUGE}")
        simple = conn.execute(GROUPED, prepare=False)
        names = [c.name for c in simple.description]
        rows = simple.fetchall()
        assert names == ["sex", "n", "n_std_error", "n_ci_low", "n_ci_high", "total", "total_std_error",
                         "total_ci_low", "total_ci_high"]
        close_rows([(r[0], r[1], r[5]) for r in rows], exact(d, EXACT_GROUPED))
        # the extended protocol, with a bound parameter and binary results
        cur = conn.cursor(binary=True)
        cur.execute("SELECT COUNT(*) AS n FROM people WHERE age >= %s", (50,), prepare=True)
        close_rows([cur.fetchone()[:1]], exact(d, "SELECT COUNT(*) FROM people WHERE age >= 50"))


def test_results_match_in_process_db_query_column_for_column(served):
    """The same statement through the server and in process: the same columns, keys and NULLs, and
    answers equal to the exact ones (at a huge epsilon) on both paths."""
    d, port, _ = served
    sql = "SELECT age // 10 AS decade, AVG(age) AS mean FROM people WHERE age < 30 GROUP BY decade ORDER BY decade"
    db = dpsql.connect(str(d / "people.duckdb"), schema=SCHEMA, budget=dpsql.Budget(epsilon=1e10), cache=False,
                       progress=False)
    local = db.query(sql, epsilon=HUGE).df
    with psycopg.connect(dsn(port, "alice"), autocommit=True) as conn:
        cur = conn.execute(sql.replace("SELECT", f"SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = {HUGE})", 1))
        assert [c.name for c in cur.description] == list(local.columns)
        remote = cur.fetchall()
    close_rows([r[:2] for r in remote], [tuple(r[:2]) for r in local.itertuples(index=False)])
    close_rows([r[:2] for r in remote], exact(d, "SELECT age // 10, AVG(age) FROM people WHERE age < 30 "
                                                 "GROUP BY 1 ORDER BY 1"))


def test_pg8000_answers(served):
    d, port, _ = served
    import pg8000.native

    conn = pg8000.native.Connection("alice", host="127.0.0.1", port=port, database="people",
                                    password=PASSWORDS["alice"])
    try:
        conn.run(f"SET dpsql.epsilon = {HUGE}")
        rows = conn.run("SELECT smoker, COUNT(*) AS n FROM people GROUP BY smoker ORDER BY smoker")
        close_rows([tuple(r[:2]) for r in rows], exact(d, "SELECT smoker, COUNT(*) FROM people GROUP BY 1 ORDER BY 1"))
    finally:
        conn.close()


@pytest.mark.skipif(shutil.which("psql") is None, reason="PostgreSQL's client psql is not installed")
def test_asyncpg_binds_typed_parameters(served):
    """asyncpg asks the server for each parameter's type and then sends its values in that type: the server
    infers a parameter compared with a column from the column's declared domain, as PostgreSQL would, so an
    int, a str and a bool bind where each column needs them (they failed as 'expected str' when every
    parameter was reported as text)."""
    import asyncio

    import asyncpg

    d, port, _ = served

    async def ask() -> tuple[list, list, str]:
        conn = await asyncpg.connect(host="127.0.0.1", port=port, user="alice", password=PASSWORDS["alice"],
                                     database="people", ssl=False)
        try:
            await conn.execute(f"SET dpsql.epsilon = {HUGE}")
            grouped = await conn.fetch("SELECT sex, COUNT(*) AS n FROM people WHERE age >= $1 AND smoker = $2 "
                                       "AND sex IN ($3, $4) GROUP BY sex ORDER BY sex", 50, True, "F", "M")
            ranged = await conn.fetch("SELECT COUNT(*) AS n FROM people WHERE age BETWEEN $1 AND $2", 10, 20)
            wrong = ""
            try:
                await conn.fetch("SELECT COUNT(*) AS n FROM people WHERE age >= $1", "fifty")
            except (asyncpg.PostgresError, asyncpg.exceptions.DataError) as e:
                wrong = type(e).__name__
            return grouped, ranged, wrong
        finally:
            await conn.close()

    grouped, ranged, wrong = asyncio.run(ask())
    close_rows([(r["sex"], r["n"]) for r in grouped],
               exact(d, "SELECT sex, COUNT(*) FROM people WHERE age >= 50 AND smoker GROUP BY sex ORDER BY sex"))
    close_rows([(r["n"],) for r in ranged], exact(d, "SELECT COUNT(*) FROM people WHERE age BETWEEN 10 AND 20"))
    assert wrong  # a str for an integer column is refused by the client, as against PostgreSQL


def test_psql_batch_in_one_message_is_one_spend(served):
    """Two statements in one simple-protocol message: one jointly optimized batch, one ledger entry."""
    d, port, app = served
    before = len(app.datasets["people"].ledger.entries())
    env = dict(os.environ, PGPASSWORD=PASSWORDS["alice"])
    out = subprocess.run(["psql", "-X", "-A", "-t", "-F", ",", "-v", "ON_ERROR_STOP=1",
                          f"host=127.0.0.1 port={port} user=alice dbname=people", "-c",
                          f"SET dpsql.epsilon = {HUGE}; SELECT COUNT(*) AS n FROM people; "
                          "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex ORDER BY sex"],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [line.split(",") for line in out.stdout.strip().splitlines() if line != "SET"]
    close_rows([(float(lines[0][0]),)], exact(d, "SELECT COUNT(*) FROM people"))
    close_rows([(r[0], float(r[1])) for r in lines[1:]], exact(d, "SELECT sex, COUNT(*) FROM people GROUP BY 1 "
                                                                  "ORDER BY 1"))
    entries = app.datasets["people"].ledger.entries()
    assert len(entries) == before + 1
    create = (f"CREATE TABLE listed AS SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = {HUGE}) sex, COUNT(*) "
              "AS n FROM people GROUP BY sex")
    listing = subprocess.run(["psql", "-X", "-A", "-t", f"host=127.0.0.1 port={port} user=alice dbname=people",
                              "-c", create, "-c", "\\d"], env=env, capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0, listing.stderr
    assert "main|listed|table|dpsql" in listing.stdout.splitlines()  # psql's \d lists the analyst's tables


def test_errors_carry_sqlstate_and_position(served):
    _, port, _ = served
    with psycopg.connect(dsn(port, "alice"), autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT sex, COUNT(*) FROM people GROUP BY sexx", prepare=False)
        assert e.value.diag.sqlstate == "42703"
        assert int(e.value.diag.statement_position) == len("SELECT sex, COUNT(*) FROM people GROUP BY ") + 1
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT COUNT(*) FROM people", prepare=False)  # no spend given
        assert e.value.diag.sqlstate.startswith(("DP", "22"))
        with pytest.raises(psycopg.Error) as e:
            conn.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 1e30) COUNT(*) FROM people",
                         prepare=False)
        assert e.value.diag.sqlstate == "DP001"
        assert conn.execute("SELECT 1 AS one").fetchall() == [(1,)]  # the connection is still usable


def test_explain_and_show_are_free(served):
    _, port, app = served
    ledger = app.datasets["people"].ledger
    before = ledger.spent()
    with psycopg.connect(dsn(port, "alice"), autocommit=True) as conn:
        cur = conn.execute("EXPLAIN SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 0.5) sex, COUNT(*) "
                           "FROM people GROUP BY sex")
        plan = [dict(zip([c.name for c in cur.description], row)) for row in cur.fetchall()]
        assert sorted(p["sex"] for p in plan) == ["F", "M"]
        for p in plan:  # two disjoint counts under Laplace noise at epsilon 0.5: sqrt(2) / 0.5 each
            assert p["mechanism"] == "laplace" and p["epsilon"] == pytest.approx(0.5)
            assert p["std_error"] == pytest.approx(math.sqrt(2) / 0.5, rel=1e-6)
        (budget,) = conn.execute("SHOW dpsql.remaining").fetchall()
        assert budget[:3] == ("alice", "people", "remaining")
    assert ledger.spent() == before


def test_released_tables_belong_to_their_analyst(served):
    """CREATE TABLE AS answers privately once; later reads are free; bob reads alice's table only
    as alice.x because the configuration lets him, and nobody else's under its bare name."""
    _, port, app = served
    ledger = app.datasets["people"].ledger
    with psycopg.connect(dsn(port, "alice"), autocommit=True) as alice:
        alice.execute(f"SET dpsql.epsilon = {HUGE}")
        alice.execute("CREATE TABLE by_sex AS SELECT sex, COUNT(*) AS n FROM people GROUP BY sex")
        spent = ledger.spent()
        assert len(alice.execute("SELECT * FROM by_sex").fetchall()) == 2
        assert ledger.spent() == spent
    with psycopg.connect(dsn(port, "bob"), autocommit=True) as bob:
        with pytest.raises(psycopg.Error) as e:
            bob.execute("SELECT * FROM by_sex")
        assert e.value.diag.sqlstate == "42P01"
        assert len(bob.execute("SELECT * FROM alice.by_sex").fetchall()) == 2


def test_authentication_refusals(served):
    _, port, _ = served
    for user, password in (("alice", "wrong"), ("mallory", "alice-demo")):
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            psycopg.connect(dsn(port, user, password))


def test_tls_is_required_when_configured(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    write_dataset(tmp_path, rows=50)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-keyout", str(tmp_path / "server.key"), "-out", str(tmp_path / "server.crt")],
                   check=True, capture_output=True)
    path = write_config(tmp_path, {"alice": 1.0}, 2.0, listen={"host": "127.0.0.1", "port": 0,
                                                              "tls": {"cert": "server.crt", "key": "server.key"}})
    app = App(load_config(path), cache=False)
    thread = app.server(port=0).run_in_thread()
    try:
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(dsn(thread.port, "alice", sslmode="disable"))
        with psycopg.connect(dsn(thread.port, "alice", sslmode="require")) as conn:
            assert conn.info.pgconn.ssl_in_use
            assert conn.execute("SHOW dpsql.remaining").fetchall()[0][3] == pytest.approx(1.0)
    finally:
        thread.stop()
        app.close()


def test_config_refuses_plain_passwords_and_open_plaintext(tmp_path):
    write_dataset(tmp_path, rows=10)
    path = write_config(tmp_path, {"alice": 1.0}, 2.0, listen={"host": "0.0.0.0", "port": 5433})
    config = yaml.safe_load(path.read_text())
    config["analysts"]["alice"]["password"] = "alice-demo"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError) as e:
        load_config(path)
    problems = dict(e.value.problems)
    assert "a plain password is refused" in problems["analysts.alice.password"]
    assert "needs listen.tls" in problems["listen.host"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(["SELECT", "COUNT(*)", "FROM", "people", "WHERE", "GROUP BY", "sex", "age", ",",
                                 "(", ")", ";", "'x'", "1e308", "OPTIONS", "WITH DIFFERENTIAL_PRIVACY",
                                 "SET dpsql.epsilon =", "SHOW", "CREATE TABLE t AS", "EXPLAIN", "$1", "--", "/*"]),
                max_size=12) | st.text(max_size=60))
def test_random_sql_over_the_wire_only_ever_errors(served, words):
    """Random statements (hypothesis): the server answers or sends an ErrorResponse, never drops the
    connection or stops, and spends only what it answers."""
    _, port, app = served
    sql = words if isinstance(words, str) else " ".join(words)
    with psycopg.connect(dsn(port, "bob"), autocommit=True) as conn:
        before = len(app.datasets["people"].ledger.entries())
        try:
            cur = conn.execute(sql.replace("\x00", ""), prepare=False)
            answered = True
            while cur.nextset():
                pass
        except psycopg.errors.DatabaseError:
            answered = False
        after = len(app.datasets["people"].ledger.entries())
        assert after == before or answered
        assert conn.execute("SELECT 1 AS one").fetchall() == [(1,)]


def spend_concurrently(port: int, analysts: list[str], clients: int, each: int, epsilon: float,
                       stop: threading.Event | None = None) -> dict[str, list[str]]:
    """``clients`` connections round-robin over ``analysts``, each sending ``each`` charged statements,
    each statement unique (its alias); the statements whose answers came back, per analyst."""
    received: dict[str, list[str]] = {a: [] for a in analysts}
    lock = threading.Lock()

    def client(i: int) -> None:
        analyst = analysts[i % len(analysts)]
        try:
            with psycopg.connect(dsn(port, analyst), autocommit=True, connect_timeout=30) as conn:
                for j in range(each):
                    if stop is not None and stop.is_set():
                        return
                    alias = f"n_{i}_{j}"
                    try:
                        rows = conn.execute(f"SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = {epsilon}) "
                                            f"COUNT(*) AS {alias} FROM people", prepare=False).fetchall()
                    except psycopg.errors.DatabaseError as e:
                        if e.sqlstate == "DP001":  # over a part or the total: nothing charged
                            continue
                        raise
                    assert len(rows) == 1
                    with lock:
                        received[analyst].append(alias)
        except psycopg.OperationalError:
            if stop is None or not stop.is_set():
                raise

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return received


def test_32_clients_of_4_analysts_spend_exactly_what_they_receive(tmp_path):
    """The ledger equals the answers received, charge for charge; no analyst exceeds their part, and the
    dataset never exceeds its total (the parts add up to more than it)."""
    write_dataset(tmp_path, rows=200)
    parts = {"alice": 0.5, "bob": 0.5, "carol": 0.3, "dave": 1.0}
    path = write_config(tmp_path, parts, 1.5, limits={"statements_per_second": 1000})
    app = App(load_config(path), cache=str(tmp_path / "cache"))
    thread = app.server(port=0).run_in_thread()
    try:
        received = spend_concurrently(thread.port, list(parts), clients=32, each=3, epsilon=0.05)
    finally:
        thread.stop()
        app.close()
    ledger = Ledger(tmp_path / "people.ledger")
    entries = ledger.entries()
    for analyst, part in parts.items():
        mine = [e for e in entries if e.analyst == analyst]
        assert sorted(re.search(r"AS (n_\d+_\d+)", e.description).group(1) for e in mine) == sorted(received[analyst])
        assert math.fsum(e.cost.epsilon for e in mine) <= part + 1e-12
    assert math.fsum(e.cost.epsilon for e in entries) <= 1.5 + 1e-12
    assert math.fsum(e.cost.epsilon for e in entries) >= 1.5 - 0.05 - 1e-9  # the total was reached: contention


def test_sigkill_under_load_loses_no_received_answer(tmp_path):
    """The server, a separate process, killed with SIGKILL while 8 clients spend: after a restart,
    every answer a client received is in the ledger."""
    write_dataset(tmp_path, rows=200)
    path = write_config(tmp_path, {"alice": 100.0, "bob": 100.0}, 1000.0, limits={"statements_per_second": 1000})
    env = dict(os.environ, PYTHONPATH=str(ROOT), DPSQL_CACHE_DIR=str(tmp_path / "cache"))
    server = subprocess.Popen([sys.executable, "-m", "dpsql", "serve", str(path), "--port", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        line = server.stdout.readline()
        port = int(re.search(r":(\d+) ", line).group(1))
        stop = threading.Event()
        results: dict[str, list[str]] = {}
        load = threading.Thread(target=lambda: results.update(
            spend_concurrently(port, ["alice", "bob"], clients=8, each=1000, epsilon=0.01, stop=stop)))
        load.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(Ledger(tmp_path / "people.ledger").entries()) < 20:
            time.sleep(0.2)
        stop.set()  # the clients stop after their statement in flight, which the kill interrupts
        os.kill(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
        load.join(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
    received = [a for names in results.values() for a in names]
    assert received  # some answers arrived before the kill (and some charges may have none)
    recorded = {re.search(r"AS (n_\d+_\d+)", e.description).group(1)
                for e in Ledger(tmp_path / "people.ledger").entries()}
    assert set(received) <= recorded


def test_passwd_makes_a_verifier_the_server_accepts(tmp_path, monkeypatch, capsys):
    """`dpsql passwd --stdin` prints a SCRAM verifier (never the password) that a config takes."""
    import io

    from dpsql.api.cli import main

    monkeypatch.setattr(sys, "stdin", io.StringIO("s3cret-pass\n"))
    assert main(["passwd", "--stdin"]) == 0
    verifier = capsys.readouterr().out.strip()
    assert verifier.startswith("SCRAM-SHA-256$4096:") and "s3cret" not in verifier
    write_dataset(tmp_path, rows=10)
    path = write_config(tmp_path, {"alice": 1.0}, 2.0)
    config = yaml.safe_load(path.read_text())
    config["analysts"]["alice"]["password"] = verifier
    path.write_text(yaml.safe_dump(config))
    app = App(load_config(path), cache=False)
    thread = app.server(port=0).run_in_thread()
    try:
        with psycopg.connect(dsn(thread.port, "alice", "s3cret-pass")) as conn:
            assert conn.execute("SHOW dpsql.budget").fetchall()[-1][2:4] == ("budget", 1.0)
    finally:
        thread.stop()
        app.close()


def test_serve_refuses_a_bad_config_with_every_problem(tmp_path, capsys):
    from dpsql.api.cli import main

    write_dataset(tmp_path, rows=10)
    path = write_config(tmp_path, {"alice": 1.0}, 2.0, limits={"max_connections": 0})
    config = yaml.safe_load(path.read_text())
    config["datasets"]["people"]["schema"] = "missing.yaml"
    config["analysts"]["alice"]["budgets"]["nope"] = {"epsilon": 1}
    path.write_text(yaml.safe_dump(config))
    assert main(["serve", str(path), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "3 configuration problems" in err
    for where in ("limits.max_connections", "datasets.people.schema", "analysts.alice.budgets.nope"):
        assert where in err


def test_a_table_name_taken_is_refused_before_the_spend(served):
    _, port, app = served
    ledger = app.datasets["people"].ledger
    with psycopg.connect(dsn(port, "alice"), autocommit=True) as conn:
        conn.execute(f"SET dpsql.epsilon = {HUGE}")
        conn.execute("CREATE TABLE taken AS SELECT COUNT(*) AS n FROM people")
        before = len(ledger.entries())
        with pytest.raises(psycopg.Error) as e:
            conn.execute("CREATE TABLE taken AS SELECT COUNT(*) AS n FROM people")
        assert e.value.diag.sqlstate == "42P07"
        assert len(ledger.entries()) == before


def test_budget_command_reads_the_config_and_shows_an_analysts_spend(served, capsys):
    """`dpsql budget --config F --dataset D --analyst A`: the server's ledger, who spent what, the part."""
    from dpsql.api.cli import main

    d, port, app = served
    with psycopg.connect(dsn(port, "bob"), autocommit=True) as conn:
        conn.execute(f"SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = {HUGE}) COUNT(*) AS bobs FROM people")
    assert main(["budget", "--config", str(d / "serve.yaml"), "--dataset", "people", "--analyst", "bob"]) == 0
    out = capsys.readouterr().out
    spent = app.datasets["people"].ledger.account("bob").spent()
    assert f"spent by 'bob': epsilon={spent.epsilon:.12g}, delta=0 of a part of epsilon={1e6 * HUGE:.12g}" in out
    assert "AS bobs FROM people" in out


@pytest.mark.skipif(shutil.which("psql") is None, reason="PostgreSQL's client psql is not installed")
def test_a_charged_statement_is_answered_though_a_later_one_fails(served):
    """One message: a private SELECT (charged), then a statement that fails. The client gets the
    answer it paid for, then the error, as PostgreSQL sends a simple query's results."""
    d, port, app = served
    before = len(app.datasets["people"].ledger.entries())
    env = dict(os.environ, PGPASSWORD=PASSWORDS["alice"])
    out = subprocess.run(["psql", "-X", "-A", "-t", f"host=127.0.0.1 port={port} user=alice dbname=people", "-c",
                          f"SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = {HUGE}) COUNT(*) AS paid FROM people; "
                          "SELECT * FROM no_such_table"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "no_such_table" in out.stderr
    close_rows([(float(out.stdout.strip().split("|")[0]),)], exact(d, "SELECT COUNT(*) FROM people"))
    assert len(app.datasets["people"].ledger.entries()) == before + 1


def test_rate_and_result_size_are_limited_before_the_spend(tmp_path):
    """statements_per_second (a burst of that many, refilled at that rate) and max_result_rows: each
    refusal has its SQLSTATE and spends nothing."""
    write_dataset(tmp_path, rows=50)
    path = write_config(tmp_path, {"alice": 10.0}, 20.0, limits={"statements_per_second": 2, "max_result_rows": 1})
    app = App(load_config(path), cache=False)
    thread = app.server(port=0).run_in_thread()
    try:
        with psycopg.connect(dsn(thread.port, "alice"), autocommit=True) as conn:
            with pytest.raises(psycopg.Error) as e:  # 2 groups, more rows than 1
                conn.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 0.1) sex, COUNT(*) FROM people "
                             "GROUP BY sex")
            assert e.value.diag.sqlstate == "54000"
            with pytest.raises(psycopg.Error) as e:  # the burst of 2 is spent
                for _ in range(3):
                    conn.execute("SELECT 1 AS one")
            assert e.value.diag.sqlstate == "53400"
        assert app.datasets["people"].ledger.entries() == []
    finally:
        thread.stop()
        app.close()


def test_a_statements_own_spend_overrides_the_sessions(served):
    """SET dpsql.epsilon is the default spend: a statement's OPTIONS replace it (one spend, the
    statement's), and a statement that only mentions the words in a comment spends the session's."""
    _, port, app = served
    ledger = app.datasets["people"].ledger
    with psycopg.connect(dsn(port, "alice"), autocommit=True) as conn:
        conn.execute("SET dpsql.epsilon = 2")
        conn.execute("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 0.5) COUNT(*) AS n FROM people")
        assert ledger.entries()[-1].cost.epsilon == 0.5
        conn.execute("SELECT COUNT(*) AS n FROM people -- no WITH DIFFERENTIAL_PRIVACY OPTIONS here")
        assert ledger.entries()[-1].cost.epsilon == 2.0


def test_set_dpsql_integer_gives_non_negative_integer_counts_that_add_up(served):
    _, port, _ = served
    with psycopg.connect(dsn(port, "alice"), autocommit=True) as conn:
        conn.execute("SET dpsql.epsilon = 0.05")  # noisy enough that the least-squares counts are not integers
        with pytest.raises(psycopg.Error, match="invalid value for dpsql.integer"):
            conn.execute("SET dpsql.integer = maybe")
        conn.execute("SET dpsql.integer = on")
        cur = conn.execute("SELECT COUNT(*) AS n FROM people; SELECT sex, COUNT(*) AS n FROM people GROUP BY sex",
                           prepare=False)
        total = cur.fetchall()[0][0]
        assert cur.nextset()
        counts = [r[1] for r in cur.fetchall()]
        assert all(c >= 0 and c == round(c) for c in counts + [total]) and sum(counts) == total


def test_set_dpsql_dialect_reads_later_statements_in_that_dialect(served):
    d, port, _ = served
    with psycopg.connect(dsn(port, "alice"), autocommit=True) as conn:
        conn.execute(f"SET dpsql.epsilon = {HUGE}")
        top = "SELECT TOP 1 sex, COUNT(*) AS n FROM people GROUP BY sex ORDER BY n DESC"
        with pytest.raises(psycopg.Error):  # DuckDB's dialect has no TOP
            conn.execute(top, prepare=False)
        conn.execute("SET dpsql.dialect = 'tsql'")
        rows = conn.execute(top, prepare=False).fetchall()
        close_rows([r[:2] for r in rows], exact(d, "SELECT sex, COUNT(*) FROM people GROUP BY sex ORDER BY 2 DESC LIMIT 1"))
        with pytest.raises(psycopg.Error, match="invalid value for dpsql.dialect"):
            conn.execute("SET dpsql.dialect = 'klingon'")


def test_a_repeated_answer_comes_with_a_notice_and_spends_nothing(served):
    """A request the analyst sent before is answered with its release again, for free; the client is told so by
    a NOTICE (as PostgreSQL's RAISE NOTICE), on the simple and the extended protocol, and only then."""
    _, port, app = served
    ledger = app.datasets["people"].ledger
    sql = "SELECT smoker, COUNT(*) AS n FROM people WHERE age < 40 GROUP BY smoker ORDER BY smoker"
    with psycopg.connect(dsn(port, "alice"), autocommit=True) as conn:
        notices = []
        conn.add_notice_handler(lambda d: notices.append((d.severity, d.sqlstate, d.message_primary)))  # valid now
        conn.execute("SET dpsql.epsilon = 0.5")
        first = conn.execute(sql, prepare=False).fetchall()
        entry = ledger.entries()[-1]
        assert notices == [] and entry.analyst == "alice"
        for prepare in (False, True):
            assert conn.execute(sql, prepare=prepare).fetchall() == first
            assert notices == [("NOTICE", "00000", f"this answer repeats an earlier release (ledger entry {entry.id}): "
                                "the same request was answered before, and its answers are sent again; nothing "
                                "was spent now")]
            notices.clear()
        assert ledger.entries()[-1] == entry
        conn.execute("SET dpsql.epsilon = 0.25")  # another spend: measured anew, no notice
        conn.execute(sql, prepare=False).fetchall()
        assert notices == [] and ledger.entries()[-1].id > entry.id
