"""One analyst's connection to ``dpsql serve``: wire statements translated into engine requests.

A :class:`AnalystSession` is what the protocol layer (:mod:`dpsql.server.pgwire`) calls
for each message of an authenticated client. It only translates; the engine
(:mod:`dpsql.engine`) plans, spends and answers. What an analyst can say:

=====================================================  =========================================
statement                                              what happens
=====================================================  =========================================
``SELECT … FROM <private table> …`` (any number in     one jointly optimized private batch, one
one message, consecutive)                              spend, charged to the analyst's account
``CREATE TABLE x AS SELECT … FROM <private table>``    answered privately (in the batch), kept as
                                                       ``x`` in the analyst's own released schema
``SELECT …`` over released tables (``x``, ``bob.y``)   free: runs on the analyst's released DuckDB
``EXPLAIN SELECT …``                                   free: the spend, the strategy and every
                                                       answer's expected standard error
``SET dpsql.epsilon = 0.1`` (``delta``, ``rho``,       the spend (and answer options) of later
``std_error``, ``noise``, ``confidence``,              statements; ``WITH DIFFERENTIAL_PRIVACY
``objective``, ``nonnegative``, ``integer``);          OPTIONS(…)`` in a statement overrides it
``RESET dpsql.x``
``SHOW dpsql.remaining`` / ``dpsql.spent`` /           the analyst's own budget on this dataset
``dpsql.budget``
``BEGIN``, ``COMMIT``, ``ROLLBACK``, other ``SET``     accepted for clients' sake; they change
                                                       nothing (a spend is never rolled back)
=====================================================  =========================================

A private batch the analyst sent before (the same statements, spend and options) is answered
with its release again, for free (:mod:`dpsql.engine.repeats`), and each of its statements
comes with a NOTICE saying so.

Errors are PostgreSQL ErrorResponses (:data:`SQLSTATES`): ``42601`` a syntax
error, ``42703`` an unknown column, ``42P01`` an unknown table, ``0A000`` a
construct dpsql refuses, ``DP001`` an exceeded budget, ``DP002`` a refused spend
or noise setting, ``22023`` a bad option value, ``54000`` a request over a size
limit, ``53400`` over the analyst's statement rate. A statement's position is
given where dpsql knows it. Messages are dpsql's, built from public inputs only;
an unexpected failure is ``XX000`` with no text.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable

import duckdb
import numpy as np
import sqlglot
from sqlglot import exp
from sqlglot import tokens as sqlglot_tokens
from sqlglot.dialects.dialect import Dialect

from dpsql.engine import Engine, Explanation, Release, Request
from dpsql.errors import (
    ArgumentError,
    BudgetExceededError,
    Error,
    ParseError,
    PrivacyError,
    ResourceLimitError,
    SQLError,
    UnknownColumnError,
    UnsupportedSQLError,
    WorkloadError,
)
from dpsql.server.pgwire import Column, Command, Outcome, PgError, Rows

if TYPE_CHECKING:
    import pandas as pd

    from dpsql.released import ReleasedData
    from dpsql.server.config import Limits

__all__ = ["AnalystSession", "RateLimiter", "SQLSTATES", "Workspace"]

#: dpsql's errors as SQLSTATEs, most specific first.
SQLSTATES: list[tuple[type[Error], str]] = [
    (ParseError, "42601"),
    (UnknownColumnError, "42703"),
    (UnsupportedSQLError, "0A000"),
    (SQLError, "42000"),
    (BudgetExceededError, "DP001"),
    (PrivacyError, "DP002"),
    (ResourceLimitError, "54000"),
    (ArgumentError, "22023"),
    (Error, "XX000"),
]

_BOOLEANS = {"true": True, "on": True, "1": True, "false": False, "off": False, "0": False}
#: Session settings (``SET dpsql.<name> = value``) and how their values are read.
SETTINGS: dict[str, Callable[[str], Any]] = {
    "epsilon": float, "delta": float, "rho": float, "std_error": float, "confidence": float,
    "noise": str, "objective": str, "dialect": lambda v: _dialect(v),
    "nonnegative": lambda v: _BOOLEANS[v], "integer": lambda v: _BOOLEANS[v],
}

_DIALECT = Dialect.get_or_raise("duckdb")
# a schema column's DuckDB type -> the wire type its parameters are sent in (HUGEINT may exceed int8)
_WIRE_TYPES = {"BOOLEAN": "bool", "TINYINT": "int8", "SMALLINT": "int8", "INTEGER": "int8", "BIGINT": "int8",
               "HUGEINT": "numeric", "DOUBLE": "float8", "VARCHAR": "text", "DATE": "date"}


def _dialect(value: str) -> str:
    """``SET dpsql.dialect``'s value: a dialect sqlglot reads (ValueError for another)."""
    name = value.strip().lower()
    if not name:
        raise ValueError("no dialect named")
    Dialect.get_or_raise(name)
    return name


_T = sqlglot_tokens.TokenType


class RateLimiter:
    """A token bucket per analyst: a burst of ``rate`` statements, refilled at ``rate`` per second."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self._tokens = rate
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def take(self, n: int) -> None:
        """Take ``n`` statements' tokens, or refuse (53400) taking none."""
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self.rate, self._tokens + (now - self._at) * self.rate)
            self._at = now
            if n > self._tokens:
                raise PgError("53400", f"too many statements: this server answers at most {self.rate:g} statements "
                                       "per second per analyst; wait and send it again")
            self._tokens -= n


@dataclass
class Workspace:
    """What one analyst holds on one dataset, shared by their connections: the engine charging
    their account, their released DuckDB, their rate limiter, and the released databases of
    the analysts allowed to read their tables (``readers``: name -> released data)."""

    analyst: str
    dataset: str
    table: str
    engine: Engine
    released: "ReleasedData"
    limiter: RateLimiter
    readers: dict[str, "ReleasedData"] = field(default_factory=dict)


@dataclass(frozen=True)
class _Statement:
    text: str
    offset: int  # in the message, 0-based
    words: tuple[str, ...]  # the first keywords, upper case
    private: bool  # reads the private table
    target: str | None = None  # CREATE TABLE target


class AnalystSession:
    """One client connection of one analyst (see the module docstring)."""

    def __init__(self, workspace: Workspace, limits: "Limits") -> None:
        self._ws = workspace
        self._limits = limits
        self._settings: dict[str, Any] = {}
        self._con = workspace.released.con.cursor()
        self._closed = False

    # -- the protocol layer's interface ---------------------------------------------------
    def run(self, sql: str) -> list[Outcome]:
        """The outcome of each statement of one message, in order. A failure after some statements
        ran carries their outcomes (``PgError.done``), so that a batch that spent is answered."""
        statements = self._split(sql)
        self._ws.limiter.take(max(1, len(statements)))
        out: list[Outcome] = []
        batch: list[_Statement] = []
        try:
            for st in statements:
                if st.private:
                    batch.append(st)
                    continue
                if batch:
                    out += self._private(batch)
                    batch = []
                out.append(self._other(st))
            if batch:
                out += self._private(batch)
        except PgError as e:
            e.done = out + e.done
            raise
        except Exception:
            if not out:
                raise
            raise PgError("XX000", "internal error", done=out) from None  # no text: it may quote private data
        return out

    def describe(self, sql: str) -> list[Column] | None:
        statements = self._split(sql)
        if len(statements) != 1:
            return None
        st = statements[0]
        if st.private and st.target is None:
            frames = self._translate(lambda: self._ws.engine.describe(self._request([st])), [st])
            return _columns(frames[0])
        if st.words[:1] in (("SELECT",), ("WITH",), ("FROM",), ("VALUES",), ("TABLE",)):
            return self._translate(lambda: self._released_columns(st.text), [st])
        return None

    def parameter_types(self, sql: str) -> dict[int, str]:
        """The wire type of each ``$n`` parameter the text compares with a column of the private table
        (``age >= $1``, ``$1 < age``, ``sex IN ($1, $2)``, ``age BETWEEN $1 AND $2``), from the column's
        declared domain: public, like the text. Other parameters are left out (the client sends text)."""
        try:
            statements = self._split(sql)
            if len(statements) != 1 or not statements[0].private:
                return {}
            tree = sqlglot.parse_one(sql, dialect=_DIALECT)
        except Exception:  # noqa: BLE001 - unparsable text: the statement's own run reports it
            return {}
        columns = {c.name.lower(): c.sql_type for c in self._ws.engine.schema.columns}
        out: dict[int, str] = {}
        for spot in tree.find_all(exp.Placeholder):
            number, parent = spot.name, spot.parent
            if isinstance(parent, exp.In) and spot.arg_key == "expressions":
                other = parent.this
            elif isinstance(parent, exp.Between) and spot.arg_key in ("low", "high"):
                other = parent.this
            elif isinstance(parent, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)):
                other = parent.expression if spot.arg_key == "this" else parent.this
            else:
                continue
            if number.isdigit() and isinstance(other, exp.Column) and other.name.lower() in columns:
                out[int(number)] = _WIRE_TYPES.get(columns[other.name.lower()], "text")
        return out

    def cancel(self) -> None:
        """Interrupts a query on released data; a private request, once charged, runs to its answer."""
        self._con.interrupt()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._con.close()

    # -- statements -----------------------------------------------------------------------
    def _split(self, sql: str) -> list[_Statement]:
        """The message's statements with their offsets, classified from their tokens."""
        try:
            toks = _DIALECT.tokenize(sql)
        except Exception:  # an unterminated string, say: the engine's parser reports it with its position
            return [self._classify(sql, 0, [])] if sql.strip() else []
        out, start, current = [], 0, []
        for tok in toks:
            if tok.token_type == _T.SEMICOLON:
                if current:
                    out.append(self._classify(sql[start:tok.start], start, current))
                start, current = tok.end + 1, []
            else:
                current.append(tok)
        if current:
            out.append(self._classify(sql[start:], start, current))
        return out

    def _classify(self, text: str, offset: int, toks: list) -> _Statement:
        words = tuple(t.text.upper() for t in toks[:4])
        names = {t.text.lower() for t in toks if t.token_type in (_T.VAR, _T.IDENTIFIER)}
        private = self._ws.table.lower() in names and words[:1] not in (("SET",), ("SHOW",), ("EXPLAIN",))
        target = None
        if words[:2] == ("CREATE", "TABLE") and private:
            target, body = _create_target(toks, text, offset)
            return _Statement(body[0], body[1], ("SELECT",), True, target)
        return _Statement(text, offset, words, private, target)

    def _request(self, batch: list[_Statement]) -> Request:
        s = self._settings
        return Request([st.text for st in batch], s.get("epsilon"), s.get("delta"), s.get("rho"), s.get("noise"),
                       s.get("nonnegative", False), s.get("confidence", 0.95), s.get("objective", "total"),
                       s.get("std_error"), max_rows=self._limits.max_result_rows, default_spend=True,
                       dialect=s.get("dialect"), integer=s.get("integer", False))

    def _private(self, batch: list[_Statement]) -> list[Outcome]:
        """One private batch; a CREATE TABLE's name is held (a placeholder) before the spend, so
        that the table it pays for is always made."""
        with contextlib.ExitStack() as stack:
            slots = {}
            for st in batch:
                if st.target is not None:
                    slots[st.offset] = self._hold(stack, st)
            answers = self._translate(lambda: self._ws.engine.run(self._request(batch)), batch)
            out: list[Outcome] = []
            for st, answer in zip(batch, answers):
                notices = [_repeat_notice(answer.release)] if answer.release.repeated else []
                if st.target is None:
                    out.append(_rows(answer.df, "SELECT", notices))
                    continue
                types = {c: _duckdb_type(answer.df[c]) for c in answer.df.columns}
                slots[st.offset].fill(answer.df, types)
                for reader in self._ws.readers.values():  # a copy for each analyst allowed to read it
                    with contextlib.suppress(Error):  # (best effort: the reader's own schema may clash)
                        reader.register(st.target, answer.df, types, schema=self._ws.analyst)
                out.append(Command(f"SELECT {len(answer.df)}", notices))
        return out

    def _other(self, st: _Statement) -> Outcome:
        w = st.words
        if w[:1] == ("EXPLAIN",):
            plan = self._translate(lambda: self._ws.engine.run(replace(self._request([st]), statements=st.text)),
                                   [st])
            return _explanation(plan)
        if w[:1] in (("SET",), ("RESET",)):
            return self._set(st)
        if w[:1] == ("SHOW",):
            return self._show(st)
        if w[:1] in (("BEGIN",), ("START",), ("COMMIT",), ("END",), ("ROLLBACK",), ("ABORT",), ("DISCARD",),
                     ("DEALLOCATE",)):
            return Command({"START": "START TRANSACTION", "END": "COMMIT", "ABORT": "ROLLBACK"}.get(w[0], w[0]))
        if w[:1] in (("SELECT",), ("WITH",), ("FROM",), ("VALUES",), ("TABLE",)):
            return self._released_query(st)
        raise PgError("0A000", f"{' '.join(w[:2]) or 'this statement'} is not supported here: this server answers "
                               "SELECT statements (privately over the private table, freely over released tables), "
                               "CREATE TABLE … AS SELECT, EXPLAIN, SET and SHOW", position=st.offset + 1)

    def _set(self, st: _Statement) -> Outcome:
        toks = _DIALECT.tokenize(st.text)
        texts = [t.text for t in toks]
        if len(texts) >= 3 and texts[1].lower() == "dpsql" and texts[2] == ".":
            name = texts[3].lower() if len(texts) > 3 else ""
            if name not in SETTINGS:
                raise PgError("42704", f"unrecognized configuration parameter \"dpsql.{name}\" (dpsql's: "
                                       f"{', '.join('dpsql.' + k for k in SETTINGS)})", position=st.offset + 1)
            if texts[0].upper() == "RESET":
                self._settings.pop(name, None)
                return Command("RESET")
            rest = [t for t in toks[4:] if t.text.upper() not in ("=", "TO")]
            value = " ".join(t.text for t in rest).strip()
            if value.upper() == "DEFAULT":
                self._settings.pop(name, None)
                return Command("SET")
            try:
                parsed = SETTINGS[name](value.lower() if name in ("nonnegative", "integer") else value)
            except (ValueError, KeyError):
                raise PgError("22023", f"invalid value for dpsql.{name}: {value[:80]!r}",
                              position=st.offset + 1) from None
            if isinstance(parsed, float) and not math.isfinite(parsed):
                raise PgError("22023", f"dpsql.{name} must be finite", position=st.offset + 1)
            if name in ("epsilon", "rho", "std_error"):  # one way to state the spend at a time
                for other in ("epsilon", "rho", "std_error"):
                    self._settings.pop(other, None)
            self._settings[name] = parsed
            return Command("SET")
        return Command(texts[0].upper() if texts else "SET")  # a client's own setting: accepted, unused

    def _show(self, st: _Statement) -> Outcome:
        texts = [t.text.lower() for t in _DIALECT.tokenize(st.text)]
        name = "".join(texts[1:])
        ledger = self._ws.engine.ledger
        if name in ("dpsql.remaining", "dpsql.spent", "dpsql.budget"):
            remaining, spent, part = ledger.remaining(), ledger.spent(), ledger.budget
            rows = [("remaining", remaining), ("spent", spent), ("budget", part)]
            if name != "dpsql.budget":
                rows = [r for r in rows if r[0] == name.split(".")[1]]
            cols = [Column("analyst", "text"), Column("dataset", "text"), Column("what", "text")]
            cols += [Column(k, "float8") for k in ("epsilon", "delta", "rho")]
            return Rows(cols, [(self._ws.analyst, self._ws.dataset, what, c.epsilon or 0.0, c.delta or 0.0,
                                c.rho or 0.0) for what, c in rows], f"SELECT {len(rows)}")
        if name.startswith("dpsql."):
            key = name.split(".", 1)[1]
            if key not in SETTINGS:
                raise PgError("42704", f"unrecognized configuration parameter \"{name}\"", position=st.offset + 1)
            value = self._settings.get(key)
            return Rows([Column(name, "text")], [(None if value is None else str(value),)], "SHOW")
        known = {"server_version": "16.0", "server_encoding": "UTF8", "client_encoding": "UTF8",
                 "transaction_isolation": "read committed", "standard_conforming_strings": "on",
                 "timezone": "UTC", "datestyle": "ISO, MDY", "integer_datetimes": "on"}
        key = "transaction_isolation" if name == "transactionisolationlevel" else name
        if key not in known:
            raise PgError("42704", f"unrecognized configuration parameter \"{name}\"", position=st.offset + 1)
        return Rows([Column(key, "text")], [(known[key],)], "SHOW")

    # -- released data --------------------------------------------------------------------
    def _released_query(self, st: _Statement) -> Rows:
        limit = self._limits.max_result_rows
        try:
            rel = self._con.sql(_catalog_compatible(st.text))
            if rel is None:
                return Command("SELECT 0")
            df = rel.limit(limit + 1).df()
        except duckdb.Error as e:
            raise PgError(_duckdb_state(e), _duckdb_message(e), position=st.offset + 1) from None
        if len(df) > limit:
            raise PgError("54000", f"the result has more than {limit:,} rows, the most this server sends; add a "
                                   "LIMIT or aggregate further", position=st.offset + 1)
        return _rows(df, "SELECT")

    def _released_columns(self, sql: str) -> list[Column]:
        try:
            rel = self._con.sql(sql)
        except duckdb.Error as e:
            raise PgError(_duckdb_state(e), _duckdb_message(e)) from None
        return [] if rel is None else _columns(rel.limit(0).df())

    def _hold(self, stack: contextlib.ExitStack, st: _Statement) -> Any:
        """Hold ``st``'s new table name on the released database until ``stack`` ends (the slot
        that makes the table); 42P07 if the name is taken."""
        try:
            return stack.enter_context(self._ws.released.reserve(st.target))
        except WorkloadError as e:
            raise PgError("42P07", str(e), position=st.offset + 1) from None

    # -- errors ---------------------------------------------------------------------------
    def _translate(self, call: Callable[[], Any], batch: list[_Statement]) -> Any:
        """``call()``, with dpsql's errors as PgErrors positioned in the client's text."""
        try:
            return call()
        except PgError:
            raise
        except Error as e:
            state = next(code for cls, code in SQLSTATES if isinstance(e, cls))
            position = None
            if isinstance(e, SQLError) and e.line is not None:
                item = batch[(e.item or 1) - 1]  # e.item: the statement's place in the batch
                position = item.offset + _index(item.text, e.line, e.column or 1) + 1
                if state == "42703" and "table" in (e.construct or "").lower():
                    state = "42P01"
            raise PgError(state, e.reason if isinstance(e, SQLError) else str(e), position=position) from None


def _create_target(toks: list, text: str, offset: int) -> tuple[str, tuple[str, int]]:
    """``CREATE TABLE name AS <select>``: the name and (the select's text, its offset)."""
    if len(toks) < 5 or toks[3].text.upper() != "AS":
        raise PgError("0A000", "CREATE TABLE over the private table takes the form CREATE TABLE name AS SELECT …",
                      position=offset + 1)
    name = toks[2].text
    start = toks[4].start
    return name, (text[start:], offset + start)


#: PostgreSQL catalog functions that clients' catalog queries (psql's ``\\d``) call and DuckDB's
#: ``pg_catalog`` lacks: each analyst's released database defines them as macros.
CATALOG_MACROS = ("CREATE MACRO pg_get_userbyid(oid) AS 'dpsql'",)


def _catalog_compatible(sql: str) -> str:
    """``sql`` calling the :data:`CATALOG_MACROS` by their unqualified names (DuckDB allows no
    macro in its system schema ``pg_catalog``)."""
    return sql.replace("pg_catalog.pg_get_userbyid(", "pg_get_userbyid(")


def _index(text: str, line: int, column: int) -> int:
    """The 0-based index of 1-based ``line``, ``column`` in ``text``."""
    lines = text.split("\n")
    return sum(len(x) + 1 for x in lines[:line - 1]) + column - 1


def _explanation(plan: Explanation) -> Rows:
    """The statement's groups with each answer's expected standard error, and on every row what
    the request would spend, with which noise and strategy (one result per statement, as clients
    expect)."""
    c = plan.cost
    df = plan.statements[0].copy()
    for name, value in (("mechanism", plan.mechanism), ("epsilon", c.epsilon or 0.0), ("delta", c.delta or 0.0),
                        ("rho", c.rho or 0.0), ("strategy", plan.operator), ("expected_rmse", float(plan.rmse))):
        df[name] = value
    return _rows(df, "EXPLAIN")


_TYPES = {"b": "bool", "i": "int8", "u": "int8", "f": "float8", "M": "timestamp"}


def _column_type(series: "pd.Series") -> str:
    kind = series.dtype.kind
    if kind in _TYPES:
        return _TYPES[kind]
    sample = series.dropna()
    first = sample.iloc[0] if len(sample) else None
    if isinstance(first, bool):
        return "bool"
    if isinstance(first, datetime.datetime):
        return "timestamp"
    if isinstance(first, datetime.date):
        return "date"
    return "text"


def _columns(df: "pd.DataFrame") -> list[Column]:
    return [Column(str(c), _column_type(df[c])) for c in df.columns]


def _value(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, np.generic):
        return _value(v.item())
    if hasattr(v, "to_pydatetime"):
        return v.to_pydatetime()
    return v


def _repeat_notice(release: Release) -> str:
    """What a client is told of an answer served again from its release (:mod:`dpsql.engine.repeats`)."""
    return (f"this answer repeats an earlier release (ledger entry {release.entry}): the same request was answered "
            "before, and its answers are sent again; nothing was spent now")


def _rows(df: "pd.DataFrame", verb: str, notices: "list[str] | None" = None) -> Rows:
    """``df`` as wire rows, after ``notices``; a NaN (dpsql's NULL answer) is NULL."""
    rows = [tuple(_value(v) for v in row) for row in df.itertuples(index=False, name=None)]
    return Rows(_columns(df), rows, f"{verb} {len(rows)}", list(notices or []))


def _duckdb_type(series: "pd.Series") -> str:
    return {"bool": "BOOLEAN", "int8": "BIGINT", "float8": "DOUBLE", "timestamp": "TIMESTAMP", "date": "DATE",
            "text": "VARCHAR"}[_column_type(series)]


def _duckdb_state(e: duckdb.Error) -> str:
    name = type(e).__name__
    return {"ParserException": "42601", "CatalogException": "42P01", "BinderException": "42703",
            "InterruptException": "57014", "OutOfMemoryException": "53200"}.get(name, "42000")


def _duckdb_message(e: duckdb.Error) -> str:
    """DuckDB's own message: released data only, so it quotes nothing private."""
    return str(e).split("\n")[0][:500]
