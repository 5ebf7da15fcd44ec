"""A PostgreSQL wire-protocol (version 3.0) server over asyncio, independent of what the statements mean.

The server authenticates a client, then hands each statement's text to a :class:`Session` that its owner
supplies (``open_session``) and sends back what the session returns (:class:`Rows`, :class:`Command`) or raises
(:class:`PgError`). Any PostgreSQL client works: psql, libpq-based drivers (psycopg), pure-Python ones (pg8000).

The subset spoken:

- Startup: SSLRequest (answered ``S`` and a TLS handshake when the server has an ``ssl_context``, else ``N``),
  GSSENCRequest (always ``N``), CancelRequest, and the 3.0 StartupMessage (a 3.x request with x > 0, or
  unknown ``_pq_.`` options, is answered by NegotiateProtocolVersion: the connection proceeds as 3.0).
- Authentication: SCRAM-SHA-256 only (:mod:`dpsql.server.scram`), without channel binding.
- Simple query (``Q``, possibly several statements: the session splits them) and the extended protocol
  (Parse, Bind, Describe, Execute with a row limit and PortalSuspended, Close, Sync, Flush). Bound parameters
  are substituted into the statement as SQL literals (:mod:`dpsql.server.sqltext`,
  :mod:`dpsql.server.wiretypes`) before the session sees it, so a session only ever gets plain SQL text.
  Describe of a statement (before its parameters are bound) asks the session to describe the text with NULL
  in place of each parameter, and reports a parameter of unspecified type as the session infers it
  (:meth:`Session.parameter_types`: ``age >= $1`` an integer where ``age`` is one), else as text. Describe of a portal runs
  its statement (a session cannot always know a statement's columns without running it) and Execute sends
  the outcome kept from then: a statement runs once.
- Result columns in text or binary format for the types of :data:`dpsql.server.wiretypes.TYPES`.
- NoticeResponse (severity NOTICE) for each notice a session attaches to an outcome (:attr:`Rows.notices`),
  before its results (on the extended protocol, before the first rows an Execute sends).

Not spoken (a message outside the subset ends the connection with 08P01): COPY, function calls (``F``),
replication, password and MD5 authentication, GSSAPI, channel binding, protocol 2. Text is UTF-8 whatever
``client_encoding`` a client asks for (the server reports UTF8). Transactions are whatever the session makes
of ``BEGIN``/``COMMIT``; the server only sets ReadyForQuery's status byte from the command tags.

Security choices:

- Nothing runs before authentication: ``open_session`` is called only after SCRAM succeeds, and before it the
  server accepts only startup packets of at most 10 KiB and SASL messages of at most 10 KiB, within
  ``Limits.auth_timeout`` seconds.
- An unknown user and a wrong password fail the same way (28P01, after the whole exchange, with a salt that is
  stable per user name): the server does not reveal which accounts exist.
- With an ``ssl_context``, plaintext connections are refused (28000) unless ``allow_plaintext_loopback`` and
  the peer is on the loopback interface; without one the server refuses to bind a non-loopback address.
  Unencrypted bytes that arrive pipelined after an SSLRequest are a protocol violation (the attack of
  CVE-2021-23214), not data for the TLS stream.
- An exception from the session other than :class:`PgError` reaches the client as XX000 "internal error"
  without its text (which might quote private data) and is logged by type name only; the connection stays
  usable.
- Oversized messages (54000), too many connections (53300), idle connections (57P05, after
  ``Limits.idle_timeout``), and malformed, truncated or unknown messages (08P01) end the connection without
  affecting any other. After an error in the extended protocol the server discards messages until Sync, as
  PostgreSQL does.
- ``run``, ``describe``, ``authenticate`` and ``open_session`` run in a pool of ``workers`` threads, never on
  the event loop, and one connection's messages are handled strictly in order. ``cancel`` runs outside that
  pool (its threads may all be busy with the statements to cancel), and only for a CancelRequest whose
  process ID and secret key match a connection's BackendKeyData.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import secrets
import ssl
import struct
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol

from dpsql.errors import ArgumentError
from dpsql.server import sqltext, wiretypes
from dpsql.server.pgerror import PgError
from dpsql.server.scram import MECHANISM, AuthFailed, ScramError, ScramExchange, Verifier

__all__ = ["Column", "Rows", "Command", "Outcome", "PgError", "Session", "Limits", "Server", "ServerThread",
           "ServerConfigError", "is_loopback"]

log = logging.getLogger(__name__)

SSL_REQUEST, GSSENC_REQUEST, CANCEL_REQUEST = 80877103, 80877104, 80877102
PROTOCOL_MAJOR = 3
MAX_STARTUP_BYTES = 10240  # startup packets and pre-authentication messages
ROWS_PER_WRITE = 4096  # rows encoded (in the pool) per write, so a large result streams with backpressure


@dataclass(frozen=True)
class Column:
    """A result column: its name and one of the types of :data:`dpsql.server.wiretypes.TYPES`."""

    name: str
    type: str

    def __post_init__(self) -> None:
        if self.type not in wiretypes.TYPES:
            raise ArgumentError(f"column {self.name!r} has type {self.type!r}; the wire types are "
                                f"{', '.join(wiretypes.TYPES)}")


@dataclass
class Rows:
    """A statement's rows: values are None, bool, int, float, str, Decimal, datetime.date or datetime.datetime,
    matching their column's type; ``tag`` is PostgreSQL's command tag (``"SELECT 3"``). ``notices`` are sent
    before them, each as a NoticeResponse (severity NOTICE), as PostgreSQL's ``RAISE NOTICE``."""

    columns: list[Column]
    rows: list[tuple]
    tag: str
    notices: list[str] = field(default_factory=list)


@dataclass
class Command:
    """A statement without rows, reported by its command tag (``"SET"``, ``"BEGIN"``, ``"CREATE TABLE"``), and
    its ``notices``, as :class:`Rows`'s."""

    tag: str
    notices: list[str] = field(default_factory=list)


Outcome = Rows | Command


class Session(Protocol):
    """What the server needs of one authenticated connection's session. The methods block (they may run
    queries): the server calls them from its worker threads, one at a time per connection, except
    :meth:`cancel`, which may arrive while :meth:`run` is running."""

    def run(self, sql: str) -> list[Outcome]:
        """Run one simple-Query text (possibly several statements) or one extended-protocol statement with its
        parameters substituted; raise :class:`PgError` for an error the client may see."""

    def describe(self, sql: str) -> list[Column] | None:
        """The columns :meth:`run` would return, without running it (None: no rows). Cheap, no side effects."""

    def parameter_types(self, sql: str) -> dict[int, str]:
        """For an extended-protocol statement with ``$n`` parameters: the type (a :data:`wiretypes.TYPES` name)
        of each parameter ``n`` the session can tell from the text, as PostgreSQL infers ``age >= $1`` to be an
        integer. The others are reported as text. No side effects; never raises."""

    def cancel(self) -> None:
        """A CancelRequest for this connection arrived: stop the running statement if there is one."""

    def close(self) -> None:
        """The connection ended."""


@dataclass
class Limits:
    """Resource bounds: message size in bytes, concurrent connections, seconds to authenticate, seconds a
    connection may wait between messages, and prepared statements plus portals held per connection."""

    max_message_bytes: int = 1 << 20
    max_connections: int = 64
    auth_timeout: float = 10.0
    idle_timeout: float = 3600.0
    max_prepared: int = 1000


class ServerConfigError(ArgumentError, ValueError):
    """The server cannot start as configured (e.g. a non-loopback address without TLS)."""


class _Fatal(Exception):
    """End the connection after sending this error with severity FATAL."""

    def __init__(self, error: PgError) -> None:
        super().__init__(error.message)
        self.error = error


class _Violation(Exception):
    """A message body is truncated or malformed."""


def _message(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack(">I", len(body) + 4) + body


def _cstring(text: str) -> bytes:
    return text.encode() + b"\x00"


def error_response(error: PgError, severity: str = "ERROR") -> bytes:
    """The ErrorResponse message for ``error``."""
    fields = [(b"S", severity), (b"V", severity), (b"C", error.sqlstate), (b"M", error.message)]
    fields += [(b"D", error.detail), (b"H", error.hint)]
    if error.position is not None:
        fields.append((b"P", str(error.position)))
    return _message(b"E", _fields(fields))


def notice_response(message: str) -> bytes:
    """The NoticeResponse message (severity NOTICE, SQLSTATE 00000) saying ``message``."""
    return _message(b"N", _fields([(b"S", "NOTICE"), (b"V", "NOTICE"), (b"C", "00000"), (b"M", message)]))


def _fields(fields: "list[tuple[bytes, str | None]]") -> bytes:
    """An ErrorResponse's or NoticeResponse's body: each field given, then the terminator."""
    return b"".join(code + _cstring(value.replace("\x00", "")) for code, value in fields if value is not None) + b"\x00"


def _row_description(columns: list[Column], formats: list[int]) -> bytes:
    body = struct.pack(">h", len(columns))
    for column, fmt in zip(columns, formats):
        oid, size = wiretypes.TYPES[column.type]
        body += _cstring(column.name.replace("\x00", "")) + struct.pack(">ihihih", 0, 0, oid, size, -1, fmt)
    return _message(b"T", body)


class _Body:
    """Reads the fields of one message body; :class:`_Violation` if it is too short or has bytes left over."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise _Violation("message is shorter than its fields")
        out = self.data[self.pos:self.pos + size]
        self.pos += size
        return out

    def int16(self) -> int:
        return struct.unpack(">h", self.take(2))[0]

    def int32(self) -> int:
        return struct.unpack(">i", self.take(4))[0]

    def string(self) -> str:
        end = self.data.find(b"\x00", self.pos)
        if end < 0:
            raise _Violation("string field is not terminated")
        raw = self.take(end - self.pos)
        self.pos += 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _Violation("string field is not valid UTF-8") from None

    def int16s(self) -> list[int]:
        return [self.int16() for _ in range(self.int16())]

    def end(self) -> None:
        if self.pos != len(self.data):
            raise _Violation("message has bytes after its last field")


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is a loopback address."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class _Statement:
    sql: str
    spots: sqltext.Placeholders
    oids: list[int]


@dataclass
class _Portal:
    sql: str
    statement: _Statement
    literals: list[str]
    formats: list[int]
    outcome: Outcome | None = None
    sent: int = 0  # rows already sent by earlier Executes
    done: bool = False


@dataclass
class _Pending:
    """What a connection keeps between messages of the extended protocol."""

    statements: dict[str, _Statement] = field(default_factory=dict)
    portals: dict[str, _Portal] = field(default_factory=dict)


class Server:
    """A PostgreSQL wire-protocol server: ``authenticate(user)`` gives a user's verifier (None: no such user)
    and ``open_session(user, database, startup_parameters)`` makes the session of an authenticated connection.
    See the module docstring for what the server speaks and refuses."""

    def __init__(self, *, host: str, port: int, authenticate: Callable[[str], Verifier | None],
                 open_session: Callable[[str, str, dict[str, str]], Session],
                 ssl_context: ssl.SSLContext | None = None, allow_plaintext_loopback: bool = True,
                 limits: Limits | None = None, server_version: str = "16.0 (dpsql)", workers: int = 4) -> None:
        if ssl_context is None and not is_loopback(host):
            raise ServerConfigError(f"refusing to serve {host!r} without TLS: give an ssl_context, or bind a loopback "
                                "address (127.0.0.1, ::1, localhost)")
        self.host = host
        self.port = port
        self.authenticate = authenticate
        self.open_session = open_session
        self.ssl_context = ssl_context
        self.allow_plaintext_loopback = allow_plaintext_loopback
        self.limits = limits or Limits()
        self.server_version = server_version
        self.workers = workers
        self._mock_key = secrets.token_bytes(32)
        self._listener: asyncio.AbstractServer | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._connections: dict[int, _Connection] = {}
        self._tasks: set[asyncio.Task] = set()
        self._starting = 0  # connections counted against max_connections

    async def start(self) -> None:
        """Bind and listen; ``self.port`` is then the bound port (useful with port 0)."""
        self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="pgwire")
        self._listener = await asyncio.start_server(self._accept, self.host, self.port)
        self.port = self._listener.sockets[0].getsockname()[1]

    async def serve_forever(self) -> None:
        """Serve until :meth:`close` (starts the server first if needed)."""
        if self._listener is None:
            await self.start()
        await self._listener.serve_forever()

    async def close(self) -> None:
        """Stop listening, end every connection, and stop the worker threads."""
        if self._listener is not None:
            self._listener.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def run_in_thread(self) -> ServerThread:
        """Start on an event loop in a background thread (for tests and tools); ``.stop()`` ends it."""
        return ServerThread(self)

    def mock_salt(self, user: str) -> bytes:
        """The salt shown for an unknown ``user``: the same on every attempt, as a real account's is."""
        return hmac.digest(self._mock_key, user.encode(), "sha256")[:16]

    async def call(self, fn: Callable, *args: object) -> object:
        """``fn(*args)`` in the worker pool; an exception other than :class:`PgError` becomes XX000."""
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)
        except PgError:
            raise
        except Exception as e:  # noqa: BLE001 - its text may quote private data: only the type is logged
            log.error("session call %s raised %s", getattr(fn, "__name__", fn), type(e).__name__)
            raise PgError("XX000", "internal error") from None

    def register(self, connection: _Connection) -> None:
        self._connections[connection.pid] = connection

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        connection = _Connection(self, reader, writer)
        try:
            await connection.serve()
        except asyncio.CancelledError:
            pass  # the server is closing; asyncio would log a cancelled connection task as an error
        finally:
            self._tasks.discard(task)
            self._connections.pop(connection.pid, None)
            if connection.counted:
                self._starting -= 1
            connection.writer.close()

    async def cancel(self, pid: int, secret: int) -> None:
        """A CancelRequest: cancel the matching connection's session, if the secret matches."""
        target = self._connections.get(pid)
        if target is not None and target.session is not None and hmac.compare_digest(
                struct.pack(">i", target.secret), struct.pack(">i", secret)):
            try:  # not in the worker pool: its threads may all be busy running the statements to cancel
                await asyncio.to_thread(target.session.cancel)
            except Exception as e:  # noqa: BLE001 - a failed cancel is not the canceller's business
                log.error("session cancel raised %s", type(e).__name__)

    def admit(self) -> bool:
        """Count a new connection against ``max_connections``; False if it is over the limit."""
        if self._starting >= self.limits.max_connections:
            return False
        self._starting += 1
        return True


class ServerThread:
    """A :class:`Server` running on its own event loop in a daemon thread."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="pgwire-server", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._error is not None:
            raise self._error

    @property
    def port(self) -> int:
        return self.server.port

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.server.start())
        except BaseException as e:  # noqa: BLE001 - reported to the starting thread
            self._error = e
            self._started.set()
            self._loop.close()
            return
        self._started.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self.server.close())
        self._loop.close()

    def stop(self) -> None:
        """Close the server and wait for its thread."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()


class _Connection:
    """One client connection: startup, authentication, then messages in order until the client leaves."""

    def __init__(self, server: Server, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.pid = secrets.randbits(31)
        while self.pid in server._connections or not self.pid:
            self.pid = secrets.randbits(31)
        self.secret = secrets.randbits(32) - (1 << 31)
        self.session: Session | None = None
        self.counted = False
        self.status = b"I"
        self.pending = _Pending()
        self.skipping = False  # after an error in the extended protocol, until Sync

    async def serve(self) -> None:
        limits = self.server.limits
        try:
            try:
                startup = await asyncio.wait_for(self._authenticate(), limits.auth_timeout)
            except asyncio.TimeoutError:
                raise _Fatal(PgError("08006", "authentication timed out")) from None
            if startup is None:
                return
            await self._open(*startup)
            await self._loop()
        except _Fatal as fatal:
            await self._send(error_response(fatal.error, "FATAL"))
        except _Violation as violation:
            await self._send(error_response(PgError("08P01", f"protocol violation: {violation}"), "FATAL"))
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        except Exception as e:  # noqa: BLE001 - a bug must end this connection only, and say nothing more
            log.error("connection ended by %s", type(e).__name__)
            await self._send(error_response(PgError("XX000", "internal error"), "FATAL"))
        finally:
            if self.session is not None:
                try:
                    self.session.close()
                except Exception as e:  # noqa: BLE001 - the connection is gone either way
                    log.error("session close raised %s", type(e).__name__)

    async def _send(self, data: bytes) -> None:
        try:
            self.writer.write(data)
            await self.writer.drain()
        except (ConnectionError, RuntimeError, ssl.SSLError):
            pass

    # ---- startup and authentication

    async def _startup_packet(self) -> _Body:
        length = struct.unpack(">i", await self.reader.readexactly(4))[0]
        if not 8 <= length <= MAX_STARTUP_BYTES:
            raise _Fatal(PgError("08P01", "invalid length of startup packet"))
        return _Body(await self.reader.readexactly(length - 4))

    async def _authenticate(self) -> tuple[str, str, dict[str, str]] | None:
        """Startup and SCRAM; the (user, database, parameters) of an authenticated client, None after a cancel."""
        tls = asked_ssl = asked_gss = False
        while True:
            body = await self._startup_packet()
            code = body.int32()
            if code == SSL_REQUEST and not asked_ssl and len(body.data) == 4:
                asked_ssl = True
                tls = await self._ssl_answer()
            elif code == GSSENC_REQUEST and not asked_gss and len(body.data) == 4:
                asked_gss = True
                self.writer.write(b"N")
            elif code == CANCEL_REQUEST and len(body.data) == 12:
                pid, secret = body.int32(), body.int32()
                await self.server.cancel(pid, secret)
                return None
            else:
                break
        major, minor = code >> 16, code & 0xFFFF
        if major != PROTOCOL_MAJOR:
            raise _Fatal(PgError("0A000", f"unsupported frontend protocol {major}.{minor}: "
                                          "this server supports 3.0"))
        parameters = {}
        while (name := body.string()) != "":
            parameters[name] = body.string()
        body.end()
        self._check_tls(tls)
        user = parameters.get("user", "")
        if not user:
            raise _Fatal(PgError("28000", "no PostgreSQL user name specified in startup packet"))
        options = sorted(name for name in parameters if name.startswith("_pq_."))
        if minor > 0 or options:
            body = struct.pack(">ii", 0, len(options)) + b"".join(_cstring(name) for name in options)
            self.writer.write(_message(b"v", body))
        if not self.server.admit():
            raise _Fatal(PgError("53300", "sorry, too many clients already (too many connections)"))
        self.counted = True
        await self._scram(user)
        settings = {k: v for k, v in parameters.items() if k not in ("user", "database") and k not in options}
        return user, parameters.get("database") or user, settings

    async def _ssl_answer(self) -> bool:
        """Answer an SSLRequest: ``S`` and the TLS handshake if the server has a context, else ``N``."""
        context = self.server.ssl_context
        if context is None:
            self.writer.write(b"N")
            return False
        # bytes already buffered were sent in plaintext before the handshake (CVE-2021-23214); StreamReader
        # has no public way to ask for them
        if getattr(self.reader, "_buffer", b""):
            raise _Fatal(PgError("08P01", "received unencrypted data after SSL request"))
        self.writer.write(b"S")
        await self.writer.drain()
        loop = asyncio.get_running_loop()
        transport = await loop.start_tls(self.writer.transport, self.writer.transport.get_protocol(), context,
                                         server_side=True)
        self.writer = asyncio.StreamWriter(transport, transport.get_protocol(), self.reader, loop)
        return True

    def _check_tls(self, tls: bool) -> None:
        if tls or self.server.ssl_context is None:
            return
        peer = self.writer.get_extra_info("peername")
        if self.server.allow_plaintext_loopback and peer and is_loopback(peer[0]):
            return
        raise _Fatal(PgError("28000", "TLS is required: connect with sslmode=require"))

    async def _sasl_message(self) -> bytes:
        kind, body = await self._read(MAX_STARTUP_BYTES)
        if kind != b"p":
            raise _Violation(f"expected a SASL response, got message type {kind!r}")
        return body

    async def _scram(self, user: str) -> None:
        verifier = await self.server.call(self.server.authenticate, user)
        self.writer.write(_message(b"R", struct.pack(">i", 10) + _cstring(MECHANISM) + b"\x00"))
        await self.writer.drain()
        body = _Body(await self._sasl_message())
        mechanism = body.string()
        size = body.int32()
        first = body.take(size) if size >= 0 else b""
        body.end()
        if mechanism != MECHANISM:
            raise _Fatal(PgError("08P01", "client selected an invalid SASL authentication mechanism"))
        exchange = ScramExchange(verifier, mock_salt=self.server.mock_salt(user))
        try:
            self.writer.write(_message(b"R", struct.pack(">i", 11) + exchange.first(first)))
            await self.writer.drain()
            final = exchange.final(await self._sasl_message())
        except AuthFailed:
            raise _Fatal(PgError("28P01", f'password authentication failed for user "{user}"')) from None
        except ScramError as e:
            raise _Fatal(PgError("08P01", str(e))) from None
        self.writer.write(_message(b"R", struct.pack(">i", 12) + final) + _message(b"R", struct.pack(">i", 0)))

    async def _open(self, user: str, database: str, settings: dict[str, str]) -> None:
        try:
            self.session = await self.server.call(self.server.open_session, user, database, dict(settings))
        except PgError as e:
            raise _Fatal(e) from None
        self.server.register(self)
        status = {"server_version": self.server.server_version, "server_encoding": "UTF8",
                  "client_encoding": "UTF8", "DateStyle": "ISO, MDY", "integer_datetimes": "on",
                  "standard_conforming_strings": "on", "TimeZone": "UTC",
                  "application_name": settings.get("application_name", ""), "is_superuser": "off",
                  "session_authorization": user, "IntervalStyle": "postgres"}
        out = b"".join(_message(b"S", _cstring(k) + _cstring(v)) for k, v in status.items())
        out += _message(b"K", struct.pack(">ii", self.pid, self.secret))
        await self._send(out + self._ready())

    # ---- messages

    async def _read(self, limit: int) -> tuple[bytes, bytes]:
        header = await self.reader.readexactly(5)
        kind, length = header[:1], struct.unpack(">i", header[1:])[0]
        if length < 4:
            raise _Violation(f"invalid message length {length}")
        if length - 4 > limit:
            raise _Fatal(PgError("54000", f"message of {length - 4} bytes is longer than the limit of {limit}"))
        return kind, await self.reader.readexactly(length - 4)

    def _ready(self) -> bytes:
        return _message(b"Z", self.status)

    async def _loop(self) -> None:
        handlers = {b"Q": self._query, b"P": self._parse, b"B": self._bind, b"D": self._describe,
                    b"E": self._execute, b"C": self._close, b"S": self._sync, b"H": self._flush}
        limits = self.server.limits
        while True:
            try:
                kind, data = await asyncio.wait_for(self._read(limits.max_message_bytes), limits.idle_timeout)
            except asyncio.TimeoutError:
                raise _Fatal(PgError("57P05", "terminating connection due to idle-session timeout")) from None
            if kind == b"X":
                return
            handler = handlers.get(kind)
            if handler is None:
                raise _Violation(f"unsupported frontend message type {kind!r}")
            if self.skipping and kind != b"S":
                continue
            body = _Body(data)
            try:
                await handler(body)
            except PgError as e:
                self.writer.write(error_response(e))
                if kind == b"Q":
                    self.writer.write(self._ready())
                    await self.writer.drain()
                else:
                    self.skipping = True

    async def _query(self, body: _Body) -> None:
        sql = body.string()
        body.end()
        self.pending.statements.pop("", None)
        self.pending.portals.pop("", None)
        try:
            outcomes = [] if sqltext.scan(sql).empty else await self.server.call(self.session.run, sql)
        except PgError as e:
            await self._send_outcomes(e.done)  # the statements before the failing one, then the error
            raise
        if not outcomes:
            self.writer.write(_message(b"I"))
        await self._send_outcomes(outcomes)
        self.writer.write(self._ready())
        await self.writer.drain()

    async def _send_outcomes(self, outcomes: "list[Outcome]") -> None:
        """Each outcome of a simple query, in text format."""
        for outcome in outcomes:
            self.writer.write(b"".join(notice_response(n) for n in outcome.notices))
            if isinstance(outcome, Rows):
                self.writer.write(_row_description(outcome.columns, [0] * len(outcome.columns)))
                await self._rows(outcome, [0] * len(outcome.columns), 0, len(outcome.rows))
            self._complete(outcome.tag)

    def _complete(self, tag: str) -> None:
        verb = tag.split(" ", 1)[0].upper()
        if verb in ("BEGIN", "START"):
            self.status = b"T"
        elif verb in ("COMMIT", "ROLLBACK", "END", "ABORT"):
            self.status = b"I"
        self.writer.write(_message(b"C", _cstring(tag)))

    async def _rows(self, rows: Rows, formats: list[int], start: int, stop: int) -> None:
        coders = wiretypes.encoders([c.type for c in rows.columns], formats)
        for begin in range(start, stop, ROWS_PER_WRITE):
            chunk = rows.rows[begin:min(stop, begin + ROWS_PER_WRITE)]
            self.writer.write(await self.server.call(wiretypes.data_rows, chunk, coders))
            await self.writer.drain()

    def _room(self) -> None:
        if len(self.pending.statements) + len(self.pending.portals) >= self.server.limits.max_prepared:
            raise PgError("54000", f"too many prepared statements and portals (the limit is "
                                   f"{self.server.limits.max_prepared}): close some")

    async def _parse(self, body: _Body) -> None:
        name, sql = body.string(), body.string()
        oids = [body.int32() for _ in range(body.int16())]
        body.end()
        if name and name in self.pending.statements:
            raise PgError("42P05", f'prepared statement "{name}" already exists')
        if name:
            self._room()
        spots = sqltext.scan(sql)
        oids += [0] * (spots.count - len(oids))
        if wiretypes.UNKNOWN in oids:  # clients such as asyncpg then send each value in the type reported
            inferred = await self.server.call(self.session.parameter_types, sql)
            oids = [wiretypes.TYPES[inferred[n + 1]][0] if oid == wiretypes.UNKNOWN and n + 1 in inferred else oid
                    for n, oid in enumerate(oids)]
        self.pending.statements[name] = _Statement(sql, spots, oids)
        self.writer.write(_message(b"1"))

    def _statement(self, name: str) -> _Statement:
        statement = self.pending.statements.get(name)
        if statement is None:
            raise PgError("26000", f'prepared statement "{name}" does not exist')
        return statement

    def _portal(self, name: str) -> _Portal:
        portal = self.pending.portals.get(name)
        if portal is None:
            raise PgError("34000", f'portal "{name}" does not exist')
        return portal

    async def _bind(self, body: _Body) -> None:
        portal_name, statement_name = body.string(), body.string()
        formats = body.int16s()
        values = []
        for _ in range(body.int16()):
            size = body.int32()
            values.append(None if size == -1 else body.take(size))
        result_formats = body.int16s()
        body.end()
        statement = self._statement(statement_name)
        if portal_name and portal_name in self.pending.portals:
            raise PgError("42P03", f'cursor "{portal_name}" already exists')
        if portal_name:
            self._room()
        if len(values) != len(statement.oids):
            raise PgError("08P01", f"bind message supplies {len(values)} parameters, but prepared statement "
                                   f'"{statement_name}" requires {len(statement.oids)}')
        if len(formats) not in (0, 1, len(values)) or any(f not in (0, 1) for f in formats + result_formats):
            raise PgError("08P01", f"bind message has {len(formats)} parameter formats for {len(values)} "
                                   "parameters, or a format code other than 0 (text) and 1 (binary)")
        binary = [bool((formats or [0])[i if len(formats) > 1 else 0]) for i in range(len(values))]
        literals = [wiretypes.literal(oid, b, v) for oid, b, v in zip(statement.oids, binary, values)]
        limit = 4 * self.server.limits.max_message_bytes
        sql = sqltext.substitute(statement.sql, statement.spots, literals, limit)
        self.pending.portals[portal_name] = _Portal(sql, statement, literals, result_formats)
        self.writer.write(_message(b"2"))

    async def _describe(self, body: _Body) -> None:
        kind, name = body.take(1), body.string()
        body.end()
        if kind == b"S":
            statement = self._statement(name)
            oids = [wiretypes.parameter_oid(oid) for oid in statement.oids]
            description = _message(b"t", struct.pack(f">h{len(oids)}i", len(oids), *oids))
            columns = None
            if not statement.spots.empty:
                nulls = ["NULL"] * len(oids)
                sql = sqltext.substitute(statement.sql, statement.spots, nulls, 2 * len(statement.sql))
                columns = await self._session_call(self.session.describe, sql, statement, nulls)
            self.writer.write(description)
            self.writer.write(_row_description(columns, [0] * len(columns)) if columns else _message(b"n"))
        elif kind == b"P":
            portal = self._portal(name)
            outcome = await self._outcome(portal)
            if isinstance(outcome, Rows):
                formats = self._formats(portal, outcome)
                self.writer.write(_row_description(outcome.columns, formats))
            else:
                self.writer.write(_message(b"n"))
        else:
            raise _Violation(f"invalid Describe target {kind!r}")

    async def _outcome(self, portal: _Portal) -> Outcome | None:
        """The portal's outcome, running its statement the first time it is needed (Describe or Execute)."""
        if portal.outcome is None and not portal.statement.spots.empty:
            outcomes = await self._session_call(self.session.run, portal.sql, portal.statement, portal.literals)
            if len(outcomes) != 1:
                raise PgError("42601", "cannot insert multiple commands into a prepared statement")
            portal.outcome = outcomes[0]
        return portal.outcome

    async def _session_call(self, fn: Callable, sql: str, statement: _Statement, literals: list[str]) -> object:
        """``fn(sql)`` for a statement with substituted parameters; an error's position is mapped back to the
        text the client sent."""
        try:
            return await self.server.call(fn, sql)
        except PgError as e:
            if e.position is not None:
                e.position = sqltext.original_position(statement.spots, literals, e.position)
            raise

    @staticmethod
    def _formats(portal: _Portal, rows: Rows) -> list[int]:
        count = len(rows.columns)
        if len(portal.formats) in (0, 1):
            return (portal.formats or [0]) * count
        if len(portal.formats) != count:
            raise PgError("08P01", f"bind message has {len(portal.formats)} result formats but query has "
                                   f"{count} columns")
        return portal.formats

    async def _execute(self, body: _Body) -> None:
        name, limit = body.string(), body.int32()
        body.end()
        portal = self._portal(name)
        outcome = await self._outcome(portal)
        if outcome is not None and not portal.done and portal.sent == 0:  # once, before its first rows
            self.writer.write(b"".join(notice_response(n) for n in outcome.notices))
        if outcome is None:
            self.writer.write(_message(b"I"))
        elif isinstance(outcome, Command) or portal.done:
            self._complete(outcome.tag if isinstance(outcome, Command) else "SELECT 0")
            portal.done = True
        else:
            formats = self._formats(portal, outcome)
            stop = len(outcome.rows) if limit <= 0 else min(len(outcome.rows), portal.sent + limit)
            await self._rows(outcome, formats, portal.sent, stop)
            sent, portal.sent = stop - portal.sent, stop
            if stop < len(outcome.rows):
                self.writer.write(_message(b"s"))
            else:
                portal.done = True
                whole = sent == len(outcome.rows)
                self._complete(outcome.tag if whole or not outcome.tag.startswith("SELECT ") else f"SELECT {sent}")

    async def _close(self, body: _Body) -> None:
        kind, name = body.take(1), body.string()
        body.end()
        if kind == b"S":
            self.pending.statements.pop(name, None)
        elif kind == b"P":
            self.pending.portals.pop(name, None)
        else:
            raise _Violation(f"invalid Close target {kind!r}")
        self.writer.write(_message(b"3"))

    async def _sync(self, body: _Body) -> None:
        body.end()
        self.skipping = False
        if self.status == b"I":
            self.pending.portals.clear()
        self.writer.write(self._ready())
        await self.writer.drain()

    async def _flush(self, body: _Body) -> None:
        body.end()
        await self.writer.drain()
