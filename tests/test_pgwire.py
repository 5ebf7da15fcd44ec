"""The wire-protocol server (dpsql.server) against real PostgreSQL clients: psql, psycopg 3 (simple and extended
protocol, text and binary results), pg8000 (native and DB-API) and pandas.read_sql.

The sessions behind the server are plain in-memory DuckDB (tests/pgwire_duckdb.py), so every answer is checked
against the same SQL run on DuckDB directly. The fuzz tests write raw bytes to a socket (a fresh one, or one
that psycopg has authenticated) and check that every reply is a well-formed message or a close, and that the
server keeps serving a normal client.
"""

import datetime
import json
import math
import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import time
import warnings
from decimal import Decimal

import duckdb
import pg8000.dbapi
import pg8000.native
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pgwire_duckdb import DuckDBSession

from dpsql.server.pgwire import Limits, PgError, Server, ServerConfigError
from dpsql.server.scram import AuthFailed, ScramError, ScramExchange, VerifierError, make_verifier, parse_verifier

PASSWORD = "correct horse"
SECRET_TEXT = "private value 271828"
TABLE = """CREATE TABLE people AS SELECT * FROM (VALUES
    (1, 'Ann', 0.1, TRUE, DATE '1990-01-31', 9007199254740993, 12.50::DECIMAL(10,2)),
    (2, 'O''Brien "Bob"', 1.0 / 3, FALSE, DATE '2000-02-29', -9223372036854775808, -0.01::DECIMAL(10,2)),
    (3, 'Zoë 東京 🎉', 1e-300, NULL, NULL, NULL, NULL),
    (4, NULL, -0.0, TRUE, DATE '1970-01-01', 0, 0.00::DECIMAL(10,2)),
    (5, 'back\\slash;--', 'nan'::DOUBLE, FALSE, DATE '2024-12-31', 42, 99999999.99::DECIMAL(10,2)),
    (6, '', 'inf'::DOUBLE, TRUE, DATE '0001-01-01', 7, 1.00::DECIMAL(10,2)),
    (7, 'tab\tnew\nline', 123456789012345680000.0, FALSE, DATE '9999-12-31', -1, 3.14::DECIMAL(10,2))
) AS t(id, name, score, flag, born, big, amount)"""
QUERY = "SELECT id, name, score, flag, born, big, amount FROM people ORDER BY id"


class ScriptedSession(DuckDBSession):
    """DuckDB, except for a few statements that fail on purpose: ``SELECT boom`` raises a plain exception
    carrying private-looking text, anything mentioning ``pgerror`` raises a PgError pointing at that word."""

    def run(self, sql):
        if "boom" in sql:
            raise RuntimeError(SECRET_TEXT)
        if "pgerror" in sql:
            raise PgError("42601", 'syntax error at or near "pgerror"', position=sql.index("pgerror") + 1,
                          detail="some detail", hint="some hint")
        return super().run(sql)


@pytest.fixture(scope="module")
def database():
    con = duckdb.connect()
    con.execute("SET threads = 1")
    con.execute(TABLE)
    yield con
    con.close()


class Served:
    """A running server and what the tests need to reach it."""

    def __init__(self, database, **options):
        self.sessions = []
        self.verifiers = {"alice": parse_verifier(make_verifier(PASSWORD)),
                          "ix": parse_verifier(make_verifier("IX"))}

        def open_session(user, dbname, parameters):
            session = ScriptedSession(database.cursor())
            self.sessions.append((user, dbname, parameters))
            return session

        self.server = Server(host="127.0.0.1", port=0, authenticate=self.verifiers.get, open_session=open_session,
                             **options)
        self.thread = self.server.run_in_thread()
        self.port = self.thread.port

    def dsn(self, user="alice", password=PASSWORD, **extra):
        params = {"host": "127.0.0.1", "port": self.port, "user": user, "password": password, "dbname": "db",
                  "connect_timeout": 5} | extra
        return " ".join(f"{k}='{v}'" for k, v in params.items())

    def psycopg(self, autocommit=True, **extra):
        return psycopg.connect(self.dsn(**extra), autocommit=autocommit)

    def psql(self, *args, password=PASSWORD, **extra):
        env = dict(os.environ, PGPASSWORD=password, PGCONNECT_TIMEOUT="5")
        return subprocess.run(["psql", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d",
                               " ".join(f"{k}={v}" for k, v in ({"host": "127.0.0.1", "port": self.port,
                                                                  "user": "alice", "dbname": "db"} | extra).items()),
                               *args], env=env, capture_output=True, text=True, timeout=30)

    def stop(self):
        self.thread.stop()


@pytest.fixture(scope="module")
def served(database):
    served = Served(database)
    yield served
    served.stop()


@pytest.fixture
def serve(database):
    """Start servers with particular options; all stopped after the test."""
    started = []

    def start(**options):
        started.append(Served(database, **options))
        return started[-1]

    yield start
    for s in started:
        s.stop()


def same(a, b):
    """Exact equality of result rows, with NaN equal to itself and -0.0 told apart from 0.0."""
    def key(v):
        return ("float", repr(v)) if isinstance(v, float) else v
    return [tuple(map(key, r)) for r in a] == [tuple(map(key, r)) for r in b]


def expected(database, sql=QUERY, params=()):
    return database.execute(sql, params).fetchall()


# ---- psql


needs_psql = pytest.mark.skipif(shutil.which("psql") is None, reason="psql is not installed")


@needs_psql
def test_psql_prints_duckdb_rows(served, database):
    out = served.psql("-F", "|", "-c", "SELECT id, name, flag, born, big FROM people WHERE id <> 7 ORDER BY id")
    assert out.returncode == 0, out.stderr
    rows = expected(database, "SELECT id, name, flag, born, big FROM people WHERE id <> 7 ORDER BY id")
    text = {True: "t", False: "f", None: ""}
    lines = ["|".join(text[v] if v is None or isinstance(v, bool) else str(v) for v in row) for row in rows]
    assert out.stdout.splitlines() == lines


@needs_psql
def test_psql_runs_several_statements_in_one_command(served):
    out = served.psql("-c", "SELECT 1 AS a; SELECT 'x''y' AS b, NULL AS c; SELECT count(*) FROM people")
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["1", "x'y|", "7"]


@needs_psql
def test_psql_shows_the_error_position(served):
    out = served.psql("-c", "SELECT 1, pgerror")
    assert out.returncode != 0
    assert 'ERROR:  syntax error at or near "pgerror"' in out.stderr and "LINE 1: SELECT 1, pgerror" in out.stderr
    assert "DETAIL:  some detail" in out.stderr and "HINT:  some hint" in out.stderr


# ---- psycopg 3


def test_psycopg_simple_protocol_matches_duckdb(served, database):
    with served.psycopg() as conn:
        assert same(conn.execute(QUERY, prepare=False).fetchall(), expected(database))
        with psycopg.ClientCursor(conn) as cur:  # parameters merged client-side, sent as one simple Query
            cur.execute("SELECT id, name FROM people WHERE name = %s OR id = %s ORDER BY id", ["O'Brien \"Bob\"", 3])
            assert cur.fetchall() == [(2, "O'Brien \"Bob\""), (3, "Zoë 東京 🎉")]
        assert conn.execute("", prepare=False).pgresult.status == psycopg.pq.ExecStatus.EMPTY_QUERY


@pytest.mark.parametrize("prepare", [False, True])
@pytest.mark.parametrize("binary", [False, True])
def test_psycopg_extended_protocol_matches_duckdb(served, database, prepare, binary):
    sql = QUERY.replace("ORDER BY", "WHERE id >= $1 ORDER BY")
    with served.psycopg() as conn:
        for _ in range(3 if prepare else 1):  # a prepared statement is parsed once and executed again
            got = conn.cursor(binary=binary).execute(sql.replace("$1", "%s"), [2], prepare=prepare).fetchall()
            assert same(got, expected(database, sql, [2]))


PARAMETERS = [0, -1, 2**31, -(2**63), 2**63 - 1, 10**30, 0.1, -1e-300, math.inf, -math.inf, 1 / 3, True, False,
              Decimal("-12.3400"), Decimal("1e-20"), "it's", "'; DROP TABLE people; --",
              "back\\slash", "Zoë 東京 🎉", "", datetime.date(2024, 2, 29), datetime.datetime(1999, 12, 31, 23, 59, 59, 5),
              None]


@pytest.mark.parametrize("placeholder", ["%s", "%b"])
def test_psycopg_parameters_round_trip(served, placeholder):
    with served.psycopg() as conn:
        for value, binary in ((v, b) for v in PARAMETERS for b in (False, True)):  # results in text, binary
            got = conn.execute(f"SELECT {placeholder} AS v", [value], binary=binary).fetchone()[0]
            if isinstance(value, float):
                assert repr(float(got)) == repr(float(value)), value
            else:
                assert got == value, (value, got)
                if isinstance(value, (bool, str, datetime.date)):
                    assert type(got) is type(value), (value, got)
        # a negative parameter after a minus must not become a comment; $1 in strings and comments is text
        assert conn.execute("SELECT 10-%s, '$1', $$ $1 $$, 1 /* $1 */ -- $1", [-5]).fetchone() == (15, "$1", " $1 ", 1)


class Claimed(str):
    """A text that the client declares to be of another type (to test the server's validation)."""


def claiming(type_name):
    class ClaimingDumper(psycopg.adapt.Dumper):
        oid = psycopg.postgres.types[type_name].oid

        def dump(self, obj):
            return obj.encode()
    return ClaimingDumper


@pytest.mark.parametrize("type_name, text, error", [
    ("int4", "1; DROP TABLE people", psycopg.errors.InvalidTextRepresentation),
    ("int2", "70000", psycopg.errors.NumericValueOutOfRange),
    ("int8", "9" * 5000, psycopg.errors.NumericValueOutOfRange),
    ("float8", "1) OR (1=1", psycopg.errors.InvalidTextRepresentation),
    ("numeric", "1e999999999", psycopg.errors.NumericValueOutOfRange),
    ("bool", "maybe", psycopg.errors.InvalidTextRepresentation),
])
def test_parameters_declared_numeric_are_validated(served, type_name, text, error):
    with served.psycopg() as conn:
        conn.adapters.register_dumper(Claimed, claiming(type_name))
        with pytest.raises(error):
            conn.execute("SELECT %s", [Claimed(text)])
        assert conn.execute("SELECT count(*) FROM people").fetchone() == (7,)
        assert conn.execute("SELECT %s", [Claimed(" 12 " if type_name != "bool" else "on")]).fetchone()[0] in (
            12, Decimal(12), True)


DESCRIBING_CLIENT = """
import json, struct, sys, psycopg
pgconn = psycopg.connect(sys.argv[1], autocommit=True).pgconn
status = psycopg.pq.ExecStatus
out = [status(pgconn.prepare(b"s1", b"SELECT id, name FROM people WHERE id > $1 AND name <> $2", [23]).status).name]
described = pgconn.describe_prepared(b"s1")
out.append([described.param_type(i) for i in range(described.nparams)])
out.append([[described.fname(i).decode(), described.ftype(i)] for i in range(described.nfields)])
pgconn.prepare(b"s2", b"SET threads = 1")
out.append(pgconn.describe_prepared(b"s2").nfields)
result = pgconn.exec_prepared(b"s1", [b"5", b"x"], [0, 0], result_format=1)
out.append([struct.unpack(">i", result.get_value(i, 0))[0] for i in range(result.ntuples)])
out.append(status(pgconn.prepare(b"s1", b"SELECT 1").status).name)
print(json.dumps(out))
"""


def test_libpq_describes_a_prepared_statement(served):
    # libpq's blocking calls hold the GIL while they wait for the server: the client runs in its own process
    out = subprocess.run([sys.executable, "-c", DESCRIBING_CLIENT, served.dsn()], capture_output=True, text=True,
                         timeout=60)
    int4, text = 23, 25
    assert json.loads(out.stdout) == ["COMMAND_OK", [int4, text], [["id", int4], ["name", text]], 0, [6, 7],
                                      "FATAL_ERROR"], out.stderr


def test_an_extended_statement_runs_once_though_described_and_executed(served, database):
    database.execute("CREATE TABLE runs (n INTEGER)")
    with served.psycopg() as conn:
        conn.execute("INSERT INTO runs VALUES (%s)", [1])  # psycopg sends Parse, Bind, Describe portal, Execute
        for _ in range(3):
            conn.execute("INSERT INTO runs VALUES (%s)", [2], prepare=True)
    assert database.execute("SELECT n, count(*) FROM runs GROUP BY n ORDER BY n").fetchall() == [(1, 1), (2, 3)]


def test_after_an_error_messages_are_skipped_until_sync(served):
    conn, sock = authenticated_socket(served)
    with conn, sock:
        sock.sendall(frame(b"P", b"\x00SELECT boom\x00\x00\x00") + frame(b"B", b"\x00\x00" + b"\x00" * 6)
                     + frame(b"D", b"P\x00") + frame(b"E", b"\x00" + b"\x00" * 4) + frame(b"S", b"")
                     + frame(b"Q", b"SELECT 1\x00") + frame(b"X", b""))
        replies = messages(read_all(sock))
    assert b"".join(k for k, _ in replies) == b"12EZTDCZ"
    assert error_fields(replies[2][1])["C"] == "XX000"


def test_pgerror_reaches_psycopg_with_sqlstate_and_position(served):
    with served.psycopg() as conn:
        for prepare in (False, True):
            with pytest.raises(psycopg.errors.SyntaxError) as caught:
                conn.execute("SELECT 1, pgerror", prepare=prepare)
            diag = caught.value.diag
            assert (diag.sqlstate, diag.statement_position, diag.message_detail, diag.message_hint) == (
                "42601", "11", "some detail", "some hint")
        # the session saw the text with the parameter substituted: the position is mapped back to what was sent
        with pytest.raises(psycopg.errors.SyntaxError) as caught:
            conn.execute("SELECT %s, %s, pgerror", ["a long string parameter", -7])
        assert caught.value.diag.statement_position == str(len("SELECT $1, $2, ") + 1)
        assert conn.execute("SELECT 2").fetchone() == (2,)


def test_a_session_exception_is_an_internal_error_without_its_text(served):
    with served.psycopg() as conn:
        for prepare in (False, True):
            with pytest.raises(psycopg.errors.InternalError_) as caught:
                conn.execute("SELECT boom", prepare=prepare)
            assert caught.value.diag.sqlstate == "XX000" and caught.value.diag.message_primary == "internal error"
            assert SECRET_TEXT not in str(caught.value)
            assert conn.execute("SELECT 3").fetchone() == (3,)


CANCELLING_CLIENT = """
import sys, threading, time, psycopg
conn = psycopg.connect(sys.argv[1], autocommit=True)
threading.Timer(0.3, conn.cancel).start()
start = time.monotonic()
try:
    conn.execute("SELECT sum(range % 7) FROM range(100000000000)")
except psycopg.Error as e:
    print(e.sqlstate, time.monotonic() - start < 10, conn.execute("SELECT 4").fetchone()[0])
"""


def test_psycopg_cancel_reaches_the_session(served):
    # the client runs in its own process: psycopg's cancel() holds the GIL while it waits for the server
    out = subprocess.run([sys.executable, "-c", CANCELLING_CLIENT, served.dsn()], capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.split() == ["57014", "True", "4"], out.stderr


def test_transaction_status_follows_begin_and_commit(served):
    with served.psycopg(autocommit=False) as conn:
        conn.execute("SELECT 1")
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        conn.commit()
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


# ---- pg8000 and pandas


def test_pg8000_native_and_dbapi_match_duckdb(served, database):
    conn = pg8000.native.Connection("alice", host="127.0.0.1", port=served.port, password=PASSWORD, database="db")
    try:
        got = conn.run("SELECT id, name, score, flag, born, big, amount FROM people WHERE id >= :low ORDER BY id",
                       low=2)
        assert same([tuple(r) for r in got], expected(database, QUERY.replace("ORDER", "WHERE id >= 2 ORDER")))
        assert conn.run("SELECT 'é', NULL") == [["é", None]]
    finally:
        conn.close()
    with pg8000.dbapi.connect("alice", host="127.0.0.1", port=served.port, password=PASSWORD) as dbapi:
        cur = dbapi.cursor()
        cur.execute("SELECT id, name FROM people WHERE name = %s", ["it's not there"])
        assert cur.fetchall() == ()
        cur.execute(QUERY)
        assert same([tuple(r) for r in cur.fetchall()], expected(database))


def test_pandas_read_sql_matches_duckdb(served, database):
    sql = "SELECT id, name, score, flag, big FROM people ORDER BY id"
    with served.psycopg() as conn, warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # pandas prefers SQLAlchemy but supports DB-API connections
        import pandas
        frame = pandas.read_sql(sql, conn)
    direct = database.execute(sql)
    columns = [d[0] for d in direct.description]
    # read_sql builds its frame from the driver's records this way: the same records must give the same frame
    want = pandas.DataFrame.from_records(direct.fetchall(), columns=columns, coerce_float=True)
    pandas.testing.assert_frame_equal(frame, want)


# ---- authentication and TLS


def test_wrong_password_and_unknown_user_fail_the_same_way(served):
    opened = len(served.sessions)
    errors = {}
    for user, password in (("alice", "wrong"), ("mallory", PASSWORD)):
        with pytest.raises(pg8000.exceptions.DatabaseError) as caught:
            pg8000.native.Connection(user, host="127.0.0.1", port=served.port, password=password)
        fields = caught.value.args[0]
        assert fields["M"] == f'password authentication failed for user "{user}"'
        errors[user] = {k: v.replace(user, "<user>") for k, v in fields.items()}
    assert errors["alice"] == errors["mallory"] and errors["alice"]["C"] == "28P01"
    with pytest.raises(psycopg.OperationalError, match='password authentication failed for user "alice"'):
        served.psycopg(password="wrong")
    assert len(served.sessions) == opened  # no session is opened for a client that did not authenticate


def test_unknown_users_see_a_salt_stable_per_name(served):
    server = served.server
    assert server.mock_salt("mallory") == server.mock_salt("mallory") != server.mock_salt("eve")
    first = [ScramExchange(None, mock_salt=server.mock_salt("mallory")).first(b"n,,n=,r=abc").split(b",")[1]
             for _ in range(2)]
    assert first[0] == first[1]


def test_saslprep_lets_equivalent_unicode_passwords_in(served):
    with served.psycopg(user="ix", password="\u2168") as conn:  # ROMAN NUMERAL NINE normalizes to "IX"
        assert conn.execute("SELECT 1").fetchone() == (1,)


@pytest.fixture
def certificate(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-subj", "/CN=localhost", "-days", "1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


def test_tls_is_required_and_works(serve, certificate):
    served = serve(ssl_context=certificate, allow_plaintext_loopback=False)
    with served.psycopg(sslmode="require") as conn:
        assert conn.pgconn.ssl_in_use and conn.execute("SELECT 5").fetchone() == (5,)
    with pytest.raises(psycopg.OperationalError, match="TLS is required"):
        served.psycopg(sslmode="disable")
    if shutil.which("psql"):
        out = served.psql("-c", "SELECT 6", sslmode="require")
        assert out.returncode == 0 and out.stdout.strip() == "6", out.stderr
        out = served.psql("-c", "SELECT 6", sslmode="disable")
        assert out.returncode != 0 and "TLS is required" in out.stderr


def test_plaintext_sent_after_an_ssl_request_is_refused(serve, certificate):
    served = serve(ssl_context=certificate)
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.settimeout(5)
        sock.sendall(struct.pack(">ii", 8, 80877103) + startup_packet())  # CVE-2021-23214's buffer stuffing
        replies = messages(read_all(sock))
    assert [error_fields(body)["C"] for _, body in replies] == ["08P01"]


def test_plaintext_loopback_is_allowed_when_configured(serve, certificate):
    served = serve(ssl_context=certificate)
    with served.psycopg(sslmode="disable") as conn:
        assert not conn.pgconn.ssl_in_use and conn.execute("SELECT 7").fetchone() == (7,)


def test_no_tls_means_loopback_only():
    with pytest.raises(ServerConfigError, match="without TLS") as caught:
        Server(host="0.0.0.0", port=0, authenticate=dict().get, open_session=None)
    assert isinstance(caught.value, ValueError)


# ---- SCRAM on its own: RFC 7677's example exchange


class RFC7677Exchange(ScramExchange):
    def _server_nonce(self):
        return "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"


def test_scram_reproduces_the_rfc_7677_example():
    import base64
    verifier = parse_verifier(make_verifier("pencil", salt=base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")))
    exchange = RFC7677Exchange(verifier)
    assert exchange.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO") == (
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    final = (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
             b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert exchange.final(final) == b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
    wrong = RFC7677Exchange(parse_verifier(make_verifier("pencil2", salt=b"salt")))
    wrong.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    with pytest.raises(AuthFailed):
        wrong.final(final)
    unknown = RFC7677Exchange(None)
    unknown.first(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    with pytest.raises(AuthFailed):
        unknown.final(final)


@pytest.mark.parametrize("message", [b"p=tls-server-end-point,,n=,r=abc", b"n,a=admin,n=,r=abc", b"n,,r=abc",
                                     b"n,,n=,r=", b"\xff", b"n,,n=,r=abc,m=ext"])
def test_scram_refuses_malformed_client_first_messages(message):
    with pytest.raises(ScramError):
        ScramExchange(None).first(message)


@pytest.mark.parametrize("text", ["correct horse", "md5abcdef", "SCRAM-SHA-256$x:c2FsdA==$a:b",
                                  "SCRAM-SHA-256$4096:c2FsdA==$YQ==:YQ==", "SCRAM-SHA-256$4096:***$a:b"])
def test_parse_verifier_refuses_plain_passwords_and_malformed_text(text):
    with pytest.raises(VerifierError) as caught:
        parse_verifier(text)
    assert isinstance(caught.value, ValueError) and "verifier" in str(caught.value)


def test_verifier_text_round_trips():
    text = make_verifier("s3cret", iterations=100)
    assert str(parse_verifier(text)) == text and text.startswith("SCRAM-SHA-256$100:")


# ---- limits


def authenticated_socket(served):
    """A socket that psycopg has authenticated (psycopg must not use its connection afterwards)."""
    conn = served.psycopg()
    sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
    sock.settimeout(5)
    return conn, sock


def read_all(sock):
    """Every byte the server sends until it closes the connection, which it must do within the socket's timeout."""
    out = b""
    try:
        while chunk := sock.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return out


BACKEND_TYPES = set(b"RSKZTDCIEN123ntsv")


def messages(data):
    """Split backend bytes into (type, body); AssertionError if they are not well-formed messages."""
    out, pos = [], 0
    while pos < len(data):
        assert pos + 5 <= len(data), f"truncated message header {data[pos:]!r}"
        kind, length = data[pos], struct.unpack(">i", data[pos + 1:pos + 5])[0]
        assert kind in BACKEND_TYPES and 4 <= length <= len(data) - pos - 1, data[pos:pos + 40]
        out.append((bytes([kind]), data[pos + 5:pos + 1 + length]))
        pos += 1 + length
    return out


def error_fields(body):
    return {f[:1].decode(): f[1:].decode() for f in body.split(b"\x00") if f}


def test_oversize_message_is_refused_and_the_connection_closed(serve):
    served = serve(limits=Limits(max_message_bytes=1000))
    conn, sock = authenticated_socket(served)
    with conn, sock:
        sock.sendall(b"Q" + struct.pack(">i", 1005))  # the body is never sent: the header alone is refused
        replies = messages(read_all(sock))
    assert [k for k, _ in replies] == [b"E"] and error_fields(replies[0][1])["C"] == "54000"
    with served.psycopg() as again:
        assert again.execute("SELECT 'x' || repeat('y', 900)").fetchone()[0] == "x" + "y" * 900


def test_too_many_connections(serve):
    served = serve(limits=Limits(max_connections=2))
    first, second = served.psycopg(), served.psycopg()
    with pytest.raises(psycopg.OperationalError, match="too many connections"):
        served.psycopg()
    first.close()
    time.sleep(0.1)
    with served.psycopg() as third:
        assert third.execute("SELECT 8").fetchone() == (8,)
    second.close()


def test_silent_clients_time_out(serve):
    served = serve(limits=Limits(auth_timeout=0.3, idle_timeout=0.3))
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.settimeout(5)
        start = time.monotonic()
        replies = messages(read_all(sock))
        assert time.monotonic() - start < 3 and [error_fields(body)["C"] for _, body in replies] == ["08006"]
    conn, sock = authenticated_socket(served)
    with conn, sock:
        replies = messages(read_all(sock))
    assert [error_fields(body)["C"] for kind, body in replies] == ["57P05"]


def test_execute_with_a_row_limit_suspends_the_portal(served):
    conn, sock = authenticated_socket(served)
    execute = frame(b"E", b"\x00" + struct.pack(">i", 3))
    with conn, sock:
        sock.sendall(frame(b"P", b"\x00SELECT id FROM people WHERE id > $1 ORDER BY id\x00" + struct.pack(">hi", 1, 20))
                     + frame(b"B", b"\x00\x00" + struct.pack(">hhi", 0, 1, 1) + b"0" + struct.pack(">h", 0))
                     + execute * 4 + frame(b"S", b"") + frame(b"X", b""))
        replies = messages(read_all(sock))
    kinds = b"".join(k for k, _ in replies)
    assert kinds == b"12DDDsDDDsDCCZ"
    rows = [body[6:] for k, body in replies if k == b"D"]
    assert rows == [str(i).encode() for i in range(1, 8)]
    tags = [body for k, body in replies if k == b"C"]
    assert tags == [b"SELECT 1\x00", b"SELECT 0\x00"]


def test_terminate_closes_cleanly_and_startup_is_bounded(served):
    conn, sock = authenticated_socket(served)
    with conn, sock:
        sock.sendall(b"X" + struct.pack(">i", 4))
        assert read_all(sock) == b""
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.settimeout(5)
        sock.sendall(struct.pack(">ii", 1 << 20, 196608))
        replies = messages(read_all(sock))
    assert [error_fields(body)["C"] for _, body in replies] == ["08P01"]


def test_newer_protocol_minor_versions_are_negotiated_down(served):
    body = struct.pack(">i", (3 << 16) | 2) + b"user\x00alice\x00_pq_.future\x00on\x00\x00"
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.settimeout(5)
        sock.sendall(struct.pack(">ii", 8, 80877104))  # GSSENCRequest: refused with a single N
        assert sock.recv(1) == b"N"
        sock.sendall(struct.pack(">i", len(body) + 4) + body)
        sock.shutdown(socket.SHUT_WR)
        replies = messages(read_all(sock))
    assert replies[0] == (b"v", struct.pack(">ii", 0, 1) + b"_pq_.future\x00")
    assert replies[1] == (b"R", struct.pack(">i", 10) + b"SCRAM-SHA-256\x00\x00")


# ---- fuzz


def startup_packet(user="alice"):
    body = struct.pack(">i", 196608) + b"user\x00" + user.encode() + b"\x00database\x00db\x00\x00"
    return struct.pack(">i", len(body) + 4) + body


def frame(kind, body):
    return kind + struct.pack(">i", len(body) + 4) + body


FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def check_still_serving(served, watcher):
    assert watcher.execute("SELECT 9").fetchone() == (9,)


@pytest.fixture(scope="module")
def watcher(served):
    with served.psycopg() as conn:
        yield conn


@FUZZ
@given(data=st.one_of(st.binary(max_size=64),
                      st.integers(0, 40).map(lambda n: startup_packet()[:n]),
                      st.binary(max_size=32).map(lambda b: startup_packet() + b)))
def test_fuzz_before_authentication(served, watcher, data):
    with socket.create_connection(("127.0.0.1", served.port)) as sock:
        sock.settimeout(5)
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        replies = read_all(sock)
    if replies[:1] != b"N":  # 'N' alone answers an SSL or GSS request
        messages(replies)
    check_still_serving(served, watcher)


def extended_message(draw_kind, text, number, raw):
    return {
        b"P": b"s\x00" + text + b"\x00" + struct.pack(">h", number % 3) + raw[:4 * (number % 3)],
        b"B": b"\x00s\x00" + raw,
        b"D": b"S" + text + b"\x00",
        b"E": b"\x00" + struct.pack(">i", number),
        b"C": b"P" + text + b"\x00",
        b"Q": text + b"\x00",
    }.get(draw_kind, raw)


MESSAGE = st.builds(
    lambda kind, text, number, raw, truncate: frame(kind, extended_message(kind, text, number, raw))[:truncate],
    st.sampled_from([b"P", b"B", b"D", b"E", b"C", b"S", b"H", b"Q", b"F", b"d", b"p", b"\x00"]),
    st.sampled_from([b"", b"SELECT 1", b"SELECT $1", b"SELECT pgerror", b"SELECT boom", b"s", b"\xff\xfe"]),
    st.integers(-3, 70000), st.binary(max_size=24), st.one_of(st.none(), st.integers(0, 12)))


@FUZZ
@given(sequence=st.lists(MESSAGE, max_size=6))
def test_fuzz_after_authentication(served, watcher, sequence):
    conn, sock = authenticated_socket(served)
    with conn, sock:
        sock.sendall(b"".join(sequence))
        sock.shutdown(socket.SHUT_WR)
        messages(read_all(sock))
    check_still_serving(served, watcher)
