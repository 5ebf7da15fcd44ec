"""The durable privacy-budget ledger.

A :class:`Ledger` records every release's privacy :class:`~dpsql.private.budget.Cost`
against the dataset's :class:`~dpsql.private.budget.Budget` in a SQLite file (stdlib
:mod:`sqlite3`). Its guarantees, which the rest of dpsql relies on:

* **Record before release.** :meth:`Ledger.spend` returns only after the
  entry is committed and fsynced (``PRAGMA synchronous=EXTRA``, i.e. FULL plus
  a sync of the directory after the rollback journal is removed, so a commit
  survives power loss; ``fullfsync`` on macOS). Callers release a noisy value
  only after ``spend`` has returned, so every released value is on disk.
* **No overspending, even across processes.** ``spend`` reads the total,
  checks it against the budget and inserts the entry in one
  ``BEGIN IMMEDIATE`` transaction. SQLite's write lock serializes these
  transactions across processes, and a lock serializes them between the
  threads of one process (which share one connection), so concurrent spenders cannot
  both see the same remaining budget. Waiting writers block for up to
  :data:`BUSY_TIMEOUT` seconds rather than fail.
* **All or nothing.** A crash (even ``kill -9``) in the middle of a
  transaction records nothing: SQLite rolls the hot journal back the next time
  the file is opened. A refused request (:class:`~dpsql.errors.BudgetExceededError`)
  records nothing either.
* **One budget per ledger.** The budget is stored when the ledger is
  created; opening it with a different budget raises
  :class:`~dpsql.errors.LedgerError`, as does a file that is corrupt or is not
  a dpsql ledger.
* **Analysts' accounts.** Several analysts may share a dataset's ledger, each
  through an :class:`Account` (:meth:`Ledger.account`) with a *part* of the
  budget from the caller's configuration (not stored: parts may add up to
  more than the budget). Each entry records its analyst (``''`` for the
  owner, who spends through the :class:`Ledger` itself). An account's spend
  checks, in the same transaction, both the analyst's own total against the
  part and the dataset's total, of everyone, against the budget, so the
  budget always holds.
* **Tamper evidence.** Deleting, truncating, editing or replacing the ledger
  would reset the budget, so dpsql detects it and refuses (``LedgerError``,
  nothing recorded) instead of granting the budget again:

  - A new ledger gets a random creation id (``nonce``) and a *fingerprint*,
    the SHA-256 of the nonce, the creation time and the budget. A stored
    budget that no longer matches the fingerprint is refused.
  - Each entry stores a *chain* hash: the SHA-256 of the previous entry's
    hash (the fingerprint for entry 1), its own id, time, exact cost
    (``repr`` of each float), mechanism, description, the fingerprint and
    its analyst (left out for the owner's entries, which thus hash as in
    version 2).
    Ids run 1, 2, 3, ... without gaps. A deleted, reordered or edited entry,
    or an edited budget, breaks the chain ("entry 3 does not chain to entry
    2").
  - Deleting the *last* entries leaves a valid chain, so the ledger also keeps
    a *head* in ``meta`` (the entry count and the last hash, updated in the
    same transaction as each insert) and checks SQLite's ``AUTOINCREMENT``
    counter (``sqlite_sequence``), which runs ahead of a truncated table.
  - An open :class:`Ledger` remembers the file's identity (``st_dev`` and
    ``st_ino``), the ledger's nonce and the last entry it has seen. If the
    file is later gone, is another file, holds another ledger, or no longer
    extends what this object saw, it refuses. A spend re-checks the file's
    identity after its commit, and raises rather than return if the file was
    replaced meanwhile (its record went to the old file: release nothing).

  All of this is checked when the ledger is opened and inside every
  transaction of :meth:`~Ledger.spend`, :meth:`~Ledger.check`,
  :meth:`~Ledger.spent`, :meth:`~Ledger.remaining` and
  :meth:`~Ledger.entries`, which read every entry anyway. Hashing costs a few
  microseconds per entry, so a :class:`Ledger` rehashes only entries that are
  new or differ from the ones it verified before (compared exactly, content
  and hash); an unchanged prefix is compared, not rehashed. And while SQLite's
  ``data_version`` shows that no other connection has committed to the file
  since a :class:`Ledger` last verified it, nothing has changed there but what
  this object recorded itself: it uses what it verified (and recorded) then,
  reading no entry. So a ledger with one writer, a server's or a script's, costs
  the same to check and spend on at its ten-thousandth entry as at its first;
  any other writer's commit, a spend or an edit, is verified as above.

Threat model: the hashes are unkeyed, so they detect, but cannot prevent, a
rewrite. Someone who can write the ledger file and recomputes the whole file
consistently (or swaps in a fresh ledger of the same budget while no
:class:`Ledger` has it open) is out of scope: nothing kept inside the file
can stop them. Keep the ledger where analysts cannot write it (the ``dpsql``
command line run as the data owner, or a service). What dpsql guarantees is
that a ledger that was truncated, had entries deleted, edited or reordered,
had its budget edited, or was deleted or replaced while open is refused
rather than silently used.

Format version 2 adds the chain; a version-1 file (no chain) is migrated when
it is opened: under the write lock, its chain is computed from its existing
entries, which are trusted as they are, unless their ids have gaps or
``sqlite_sequence`` shows deleted entries, in which case it is refused.
Version 3 adds the analyst; a version-2 file is migrated when it is opened,
under the write lock: its entries become the owner's, and its chain, which
they still match, is verified as in every transaction (an edited file is
refused and left unchanged). A version-1 file is migrated through both steps.

Totals are exact sums (:func:`math.fsum`) of the recorded costs.

>>> from dpsql.private.budget import Budget, Cost
>>> ledger = Ledger(None, Budget(epsilon=1.0))  # in memory; a path makes it durable
>>> ledger.spend(Cost(epsilon=0.75), description="count by age", mechanism="laplace")
1
>>> ledger.remaining()
Cost(epsilon=0.25, delta=0.0, rho=0.0)
>>> ledger.spend(Cost(epsilon=0.5))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
dpsql.errors.BudgetExceededError: privacy budget exceeded: the request costs epsilon=0.5, delta=0.0, ...
>>> alice = ledger.account("alice", Budget(epsilon=0.5))  # parts may add up to more than the budget
>>> alice.spend(Cost(epsilon=0.125), description="sum of income", mechanism="laplace")
2
>>> alice.spent(), alice.remaining()  # what is left of the dataset's budget binds her now
(Cost(epsilon=0.125, delta=0.0, rho=0.0), Cost(epsilon=0.125, delta=0.0, rho=0.0))
>>> [(e.id, e.cost.epsilon, e.mechanism, e.analyst) for e in ledger.entries()]
[(1, 0.75, 'laplace', ''), (2, 0.125, 'laplace', 'alice')]
>>> ledger.close()
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import sqlite3
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Optional, Tuple, TypeVar, Union

from dpsql.errors import BudgetExceededError, LedgerError, PrivacyError
from dpsql.private.budget import Budget, Cost

__all__ = ["Ledger", "Account", "Entry", "BUSY_TIMEOUT"]

_T = TypeVar("_T")

#: Seconds a spend waits for another process's transaction before failing.
BUSY_TIMEOUT = 60.0

_FORMAT = "dpsql-ledger"
_VERSION = "3"
#: The format without the chain, migrated on open.
_VERSION_1 = "1"
#: The format without analysts, migrated on open.
_VERSION_2 = "2"

#: The analyst of the owner's entries: spends through the :class:`Ledger` itself, and every entry from before
#: version 3.
_OWNER = ""
#: The longest analyst name accepted.
_MAX_NAME = 200

# ``chain`` and ``analyst`` have defaults, and come last, so that the schema of
# a new ledger and of a migrated older ledger are the same (SQLite can only add
# a NOT NULL column with a default, at the end). An entry inserted by anything
# but this module gets chain '' and breaks the chain.
_SCHEMA = """
CREATE TABLE meta (
    key TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);
CREATE TABLE entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time TEXT NOT NULL,
    epsilon REAL NOT NULL CHECK (epsilon >= 0),
    delta REAL NOT NULL CHECK (delta >= 0),
    rho REAL NOT NULL CHECK (rho >= 0),
    mechanism TEXT NOT NULL,
    description TEXT NOT NULL,
    chain TEXT NOT NULL DEFAULT '',
    analyst TEXT NOT NULL DEFAULT ''
);
"""

_COLUMNS = "id, time, epsilon, delta, rho, mechanism, description, analyst"
# where an entry row (``_COLUMNS, chain``) holds its analyst and its hash
_ANALYST = 7
_CHAIN = 8

# One JSON encoder for every hash: a JSON list of strings and integers is an
# unambiguous encoding, so no two different field lists hash alike.
_ENCODER = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))


def _digest(*fields: Union[str, int]) -> str:
    """The SHA-256 (hex) of ``fields``, encoded unambiguously as a JSON list."""
    return hashlib.sha256(_ENCODER.encode(fields).encode("ascii")).hexdigest()


def _fingerprint(budget: Budget, nonce: str, created: str) -> str:
    """The hash binding a ledger's budget to its creation id and time: an
    edited budget no longer matches it, and every entry's hash includes it.
    The budget enters as its currency and the exact ``repr`` of each field
    (not :meth:`~dpsql.private.budget.Budget.to_dict`, whose layout may change)."""
    return _digest("dpsql-ledger budget", nonce, created, budget.currency,
                   repr(budget.epsilon), repr(budget.delta), repr(budget.rho))


def _entry_hash(previous: str, row: tuple, fingerprint: str) -> str:
    """The chain hash of the entry ``row`` (``id, time, epsilon, delta, rho,
    mechanism, description, analyst``) following the hash ``previous``. Costs
    enter as ``repr``, which is exact for a float. An analyst's name is the
    last field hashed; an owner's entry (analyst ``''``) hashes without it,
    exactly as in version 2, so that a version-2 chain stays valid as it is.
    The two kinds are lists of different lengths, so none hashes like the
    other: changing an entry's analyst, to or from the owner, breaks the chain."""
    entry_id, time, epsilon, delta, rho, mechanism, description, analyst = row[:_CHAIN]
    fields = ("dpsql-ledger entry", previous, entry_id, time, repr(epsilon), repr(delta), repr(rho),
              mechanism, description, fingerprint)
    return _digest(*fields, analyst) if analyst != _OWNER else _digest(*fields)


def _well_typed(row: tuple) -> bool:
    """Whether an entry row holds what this module writes (SQLite stores any
    type in any column, so an edited file may not)."""
    entry_id, time, epsilon, delta, rho, mechanism, description, analyst = row[:_CHAIN]
    return (type(entry_id) is int and all(isinstance(v, str) for v in (time, mechanism, description, analyst))
            and all(type(v) is float for v in (epsilon, delta, rho)))


def _analyst_name(name: object) -> str:
    """``name`` if it can name an analyst, else LedgerError: a nonempty printable string (it is printed, by
    ``dpsql budget`` among others) without surrounding whitespace (two names that look alike would be two
    accounts), of at most :data:`_MAX_NAME` characters. ``''`` is the owner, who spends through the ledger."""
    if (not isinstance(name, str) or not name or len(name) > _MAX_NAME or not name.isprintable()
            or name != name.strip()):
        raise LedgerError(f"an analyst's name must be a nonempty printable string of at most {_MAX_NAME} "
                          f"characters without surrounding whitespace, got {name!r:.80}")
    return name


@dataclass(frozen=True)
class Entry:
    """One recorded spend: its id (increasing, never reused), the UTC time
    it was recorded (ISO 8601), its cost, free-text labels, and the analyst
    charged (``''``: the owner, i.e. a spend through the :class:`Ledger`
    itself, or an entry from before analysts' accounts)."""

    id: int
    time: str
    cost: Cost
    mechanism: str
    description: str
    analyst: str


@dataclass(frozen=True)
class _Snapshot:
    """What one transaction read and verified: the stored budget, the
    ledger's creation id and fingerprint, and every entry row (``id, time,
    epsilon, delta, rho, mechanism, description, analyst, chain``) in id
    order, whose ids are 1..n."""

    budget: Budget
    nonce: str
    fingerprint: str
    rows: list

    @property
    def head(self) -> str:
        """The last entry's hash, or the fingerprint when there is none."""
        return self.rows[-1][_CHAIN] if self.rows else self.fingerprint


class Ledger:
    """The privacy spends of one dataset, durable in a SQLite file.

    ``path=None`` (or ``":memory:"``) keeps the ledger in this process only;
    it still enforces the budget. A new file stores ``budget``; an existing
    one is opened with its stored budget when ``budget`` is None, and raises
    :class:`~dpsql.errors.LedgerError` when ``budget`` differs from it, or
    when the file was truncated, edited or replaced (see the module's
    "Tamper evidence").
    """

    def __init__(self, path: Union[str, "os.PathLike[str]", None], budget: Optional[Budget] = None) -> None:
        if budget is not None and not isinstance(budget, Budget):
            raise LedgerError(f"budget must be a dpsql.private.budget.Budget, got {type(budget).__name__}")
        memory = path is None or (isinstance(path, str) and path == ":memory:")
        self._path: Optional[str] = None if memory else os.fsdecode(os.fspath(path))
        # stat() the absolute path: SQLite keeps the file it opened even if the process changes directory
        self._abspath: Optional[str] = None if self._path is None else os.path.abspath(self._path)
        self._conn: Optional[sqlite3.Connection] = None
        # one SQLite connection shared by this process's threads: each transaction holds the lock
        self._lock = threading.RLock()
        # what this object has seen: the file, the ledger's creation id, and (count, hash) of its entries
        self._identity: Optional[Tuple[int, int]] = None
        self._nonce = ""
        self._fingerprint = ""
        self._seen: Tuple[int, str] = (0, "")
        # (fingerprint, rows) of the last verified read: rows identical to these need no rehashing
        self._verified: "Tuple[str, list]" = ("", [])
        # (SQLite's data_version, the ledger) when this object last verified all of it, grown from what it had
        # seen, plus what it recorded since: while data_version holds, no other connection has committed
        self._trusted: "Optional[Tuple[int, _Snapshot]]" = None
        if self._path is not None:
            if not self._path:  # SQLite would open a temporary database, deleted on close: a budget anew each time
                raise LedgerError("the ledger's path is empty: give a file's path, or None for a ledger kept in "
                                  "this process only")
            if os.path.isdir(self._path):
                raise LedgerError(f"{self._path}: is a directory, not a ledger file")
            if budget is None and not os.path.exists(self._path):
                raise LedgerError(f"{self._path}: no ledger exists here, and a new ledger needs a budget")
        try:
            conn = sqlite3.connect(self._path or ":memory:", timeout=BUSY_TIMEOUT, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as e:
            raise LedgerError(f"{self._where}: cannot open the ledger: {e}") from e
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")
            # EXTRA = FULL + a directory sync after the rollback journal is deleted,
            # which makes a commit durable against power loss. Fall back to FULL
            # on a SQLite that predates EXTRA (3.11).
            conn.execute("PRAGMA synchronous = EXTRA")
            if conn.execute("PRAGMA synchronous").fetchone()[0] < 3:
                conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA fullfsync = ON")  # macOS: flush the drive's cache too
            self._conn = conn
            if self._abspath is not None:
                # connect() has created or opened the file: this is the file SQLite holds
                self._identity = self._stat()
            snapshot = self._open(budget)
            self._budget = snapshot.budget
            self._nonce = snapshot.nonce
            self._fingerprint = snapshot.fingerprint
            self._seen = (len(snapshot.rows), snapshot.head)
        except LedgerError:
            conn.close()
            self._conn = None
            raise
        except sqlite3.Error as e:
            conn.close()
            self._conn = None
            raise LedgerError(f"{self._where}: not a usable dpsql ledger: {e}") from e
        except BaseException:
            conn.close()
            self._conn = None
            raise

    # -- opening -----------------------------------------------------------

    @property
    def _where(self) -> str:
        return self._path if self._path is not None else "<in-memory ledger>"

    def _open(self, budget: Optional[Budget]) -> _Snapshot:
        conn = self._conn
        assert conn is not None
        if not conn.execute("SELECT name FROM sqlite_master").fetchall():
            if budget is None:
                held = (f"{self._path}: the file holds no ledger" if self._path is not None
                        else "a ledger kept in memory (no ledger file) starts empty")
                raise LedgerError(f"{held}, and a new ledger needs a budget: pass "
                                  "budget=dpsql.Budget(epsilon=...) (or rho=...), or the path of a ledger file "
                                  "that holds one")
            # Create under the write lock; re-check in case another process
            # created the ledger since we looked.
            conn.execute("BEGIN IMMEDIATE")
            try:
                if not conn.execute("SELECT name FROM sqlite_master").fetchall():
                    # executescript() would COMMIT first; run the statements one by one.
                    for statement in _SCHEMA.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    created = datetime.now(timezone.utc).isoformat(timespec="microseconds")
                    nonce = os.urandom(16).hex()
                    fingerprint = _fingerprint(budget, nonce, created)
                    conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [
                        ("format", _FORMAT), ("version", _VERSION),
                        ("budget", json.dumps(budget.to_dict())), ("created", created),
                        ("nonce", nonce), ("fingerprint", fingerprint), ("head", _head(0, fingerprint))])
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"meta", "entries"} <= tables:
            raise LedgerError(f"{self._where}: not a dpsql ledger (it is a SQLite database "
                              f"with tables {sorted(tables)})")
        problems = [row[0] for row in conn.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            detail = "; ".join(" ".join(str(problem).split()) for problem in problems[:5])
            raise LedgerError(f"{self._where}: the ledger is corrupt: {detail}")
        meta = self._meta()
        if meta.get("format") == _FORMAT and meta.get("version") in (_VERSION_1, _VERSION_2):
            self._check_budget(budget, self._stored_budget(meta))  # refuse before changing the file
            if meta.get("version") == _VERSION_1:
                self._migrate_1()
            self._migrate_2()
        snapshot = self._transaction(self._verify)
        self._check_budget(budget, snapshot.budget)
        return snapshot

    def _check_budget(self, given: Optional[Budget], stored: Budget) -> None:
        if given is not None and given != stored:
            raise LedgerError(f"{self._where}: the ledger was created with the budget {stored}, "
                              f"not the budget {given} given; a dataset's budget cannot change "
                              "(open it with budget=None to use the stored one)")

    def _migrate_1(self) -> None:
        """Upgrade a version-1 ledger (no chain) to version 2 in one write
        transaction: add the chain column, a nonce, the fingerprint and the
        head, and chain the existing entries in id order. The entries are
        trusted as they are, except that ids with gaps or a ``sqlite_sequence``
        ahead of the last id show deleted entries, and are refused."""
        conn = self._connection()
        conn.execute("BEGIN IMMEDIATE")
        try:
            meta = self._meta()
            if meta.get("version") == _VERSION_1:  # else another process migrated it since we looked
                budget = self._stored_budget(meta)
                created = meta.get("created")
                if not isinstance(created, str):
                    raise LedgerError(f"{self._where}: the version-1 ledger has no creation time; "
                                      "refusing to migrate it")
                # every version-1 entry is the owner's
                rows = [(*row, _OWNER) for row in conn.execute(
                    "SELECT id, time, epsilon, delta, rho, mechanism, description FROM entries ORDER BY id")]
                for index, row in enumerate(rows, 1):
                    if not _well_typed(row):
                        raise LedgerError(f"{self._where}: entry {row[0]!r} of the version-1 ledger holds a "
                                          "value of the wrong type; refusing to migrate it")
                    if row[0] != index:
                        raise LedgerError(f"{self._where}: the version-1 ledger has no entry {index} (the next "
                                          f"is entry {row[0]}): entries were deleted; refusing to migrate it")
                sequence = self._sequence()
                if sequence != len(rows):
                    raise LedgerError(f"{self._where}: the version-1 ledger's id sequence is at {sequence} but "
                                      f"it holds {len(rows)} entries: entries were deleted; refusing to migrate it")
                columns = [row[1] for row in conn.execute("PRAGMA table_info(entries)")]
                if "chain" not in columns:
                    conn.execute("ALTER TABLE entries ADD COLUMN chain TEXT NOT NULL DEFAULT ''")
                nonce = os.urandom(16).hex()
                fingerprint = _fingerprint(budget, nonce, created)
                chain = fingerprint
                for row in rows:
                    chain = _entry_hash(chain, row, fingerprint)
                    conn.execute("UPDATE entries SET chain = ? WHERE id = ?", (chain, row[0]))
                conn.execute("DELETE FROM meta WHERE key IN ('nonce', 'fingerprint', 'head')")
                conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [
                    ("nonce", nonce), ("fingerprint", fingerprint), ("head", _head(len(rows), chain))])
                conn.execute("UPDATE meta SET value = ? WHERE key = 'version'", (_VERSION_2,))
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise

    def _migrate_2(self) -> None:
        """Upgrade a version-2 ledger (no analysts) to this version in one
        write transaction: add the analyst column, which makes every existing
        entry the owner's, and verify the result. An owner's entry hashes as
        in version 2 (:func:`_entry_hash`), so the chain is kept as it is and
        verified like any other: a version-2 ledger that was edited is refused,
        and left unchanged, rather than migrated."""
        conn = self._connection()

        def upgrade() -> None:
            if self._meta().get("version") == _VERSION_2:  # else another process migrated it since we looked
                conn.execute("ALTER TABLE entries ADD COLUMN analyst TEXT NOT NULL DEFAULT ''")
                conn.execute("UPDATE meta SET value = ? WHERE key = 'version'", (_VERSION,))
                self._verify()

        self._transaction(upgrade, "BEGIN IMMEDIATE")

    # -- verifying ---------------------------------------------------------

    def _meta(self) -> "dict[str, object]":
        return {key: value for key, value in self._connection().execute("SELECT key, value FROM meta")}

    def _stored_budget(self, meta: "dict[str, object]") -> Budget:
        try:
            return Budget.from_dict(json.loads(meta["budget"]))  # type: ignore[arg-type]
        except (KeyError, TypeError, ValueError, PrivacyError) as e:
            raise LedgerError(f"{self._where}: the ledger's stored budget is unreadable: {e}") from e

    def _sequence(self) -> object:
        """SQLite's AUTOINCREMENT counter of ``entries``: the largest id ever
        committed (0 before the first), which deleting entries does not lower."""
        row = self._connection().execute("SELECT seq FROM sqlite_sequence WHERE name = 'entries'").fetchone()
        return 0 if row is None else row[0]

    def _verify(self) -> _Snapshot:
        """Read the whole ledger inside the caller's transaction and check its
        integrity: format, budget against fingerprint, the entry chain, the
        head and the id sequence. Raises LedgerError naming the first problem."""
        where = self._where
        meta = self._meta()
        if meta.get("format") != _FORMAT:
            raise LedgerError(f"{where}: not a dpsql ledger (meta format is {meta.get('format')!r})")
        if meta.get("version") != _VERSION:
            raise LedgerError(f"{where}: unsupported ledger version {meta.get('version')!r} "
                              f"(this dpsql reads version {_VERSION}, and migrates versions {_VERSION_1} "
                              f"and {_VERSION_2})")
        budget = self._stored_budget(meta)
        nonce, created, fingerprint = meta.get("nonce"), meta.get("created"), meta.get("fingerprint")
        if not (isinstance(nonce, str) and isinstance(created, str) and isinstance(fingerprint, str)):
            raise LedgerError(f"{where}: the ledger's creation id, time or fingerprint is missing: "
                              "the ledger was edited")
        if _fingerprint(budget, nonce, created) != fingerprint:
            raise LedgerError(f"{where}: the stored budget {budget} (or the creation id or time) does not match "
                              "the ledger's fingerprint: the ledger's budget was edited")

        rows = self._connection().execute(f"SELECT {_COLUMNS}, chain FROM entries ORDER BY id").fetchall()
        # A row equal to one already verified under the same fingerprint, with all
        # the rows before it equal too, has the same (valid) hash: skip rehashing
        # that prefix. Any change to a row (its content or its hash) makes the
        # comparison fail, and then the whole chain is rehashed, naming the problem.
        # (Tuple equality treats 0.0 and -0.0 as equal, which changes no cost.)
        known_fingerprint, known = self._verified
        start = min(len(known), len(rows)) if known_fingerprint == fingerprint else 0
        if start and rows[:start] != known[:start]:
            start = 0
        chain = rows[start - 1][_CHAIN] if start else fingerprint
        for index, row in enumerate(rows[start:], start + 1):
            entry_id = row[0]
            if not _well_typed(row) or not isinstance(row[_CHAIN], str):
                raise LedgerError(f"{where}: entry {entry_id!r} holds a value of the wrong type: "
                                  "the ledger was edited")
            after = f"entry {index - 1}" if index > 1 else "the start of the ledger"
            if entry_id != index:
                raise LedgerError(f"{where}: entry {entry_id} does not chain to {after} (entry {index} is "
                                  "missing): the ledger was edited or truncated")
            if _entry_hash(chain, row, fingerprint) != row[_CHAIN]:
                raise LedgerError(f"{where}: entry {entry_id} does not chain to {after} (an entry was changed, "
                                  "deleted or reordered): the ledger was edited or truncated")
            chain = row[_CHAIN]

        count, head = _parse_head(meta.get("head"))
        if count is None:
            raise LedgerError(f"{where}: the ledger's head record is missing or unreadable: the ledger was edited")
        if len(rows) < count:
            raise LedgerError(f"{where}: the ledger ends at entry {len(rows)} but its head records {count} "
                              "entries: its last entries were deleted (the ledger was truncated)")
        if len(rows) > count:
            raise LedgerError(f"{where}: the ledger holds {len(rows)} entries but its head records only {count}: "
                              "entries were added outside dpsql (the ledger was edited)")
        if head != chain:
            raise LedgerError(f"{where}: the last entry does not match the ledger's head: the ledger was edited")
        sequence = self._sequence()
        if sequence != len(rows):
            what = ("its last entries were deleted (the ledger was truncated)" if type(sequence) is int
                    and sequence > len(rows) else "the ledger was edited")
            raise LedgerError(f"{where}: the ledger's id sequence is at {sequence!r} but its last entry is "
                              f"{len(rows)}: {what}")
        self._verified = (fingerprint, rows)
        return _Snapshot(budget=budget, nonce=nonce, fingerprint=fingerprint, rows=rows)

    def _data_version(self) -> int:
        """SQLite's count of commits by other connections, as seen by the caller's transaction."""
        return self._connection().execute("PRAGMA data_version").fetchone()[0]

    def _stat(self) -> Tuple[int, int]:
        assert self._abspath is not None
        try:
            st = os.stat(self._abspath)
        except FileNotFoundError:
            raise LedgerError(f"{self._where}: the ledger file was deleted while this Ledger had it open; "
                              "refusing to use it (a new file would grant the budget again): reopen the "
                              "ledger once it is restored") from None
        except OSError as e:
            raise LedgerError(f"{self._where}: cannot check the ledger file: {e}") from e
        return (st.st_dev, st.st_ino)

    def _check_file(self) -> None:
        """Refuse if the path no longer names the file this object opened."""
        if self._abspath is not None and self._stat() != self._identity:
            raise LedgerError(f"{self._where}: the ledger file was replaced by another file while this Ledger "
                              "had it open; refusing to use it (it may grant the budget again)")

    def _check_continues(self, snapshot: _Snapshot) -> None:
        """Refuse if ``snapshot`` is not this object's ledger, grown only by
        appending to what this object has already seen."""
        if snapshot.nonce != self._nonce:
            raise LedgerError(f"{self._where}: the file now holds a different ledger (another creation id) "
                              "than the one this Ledger opened: the ledger was replaced while open")
        if snapshot.fingerprint != self._fingerprint or snapshot.budget != self._budget:
            raise LedgerError(f"{self._where}: the ledger's budget changed from {self._budget} to "
                              f"{snapshot.budget} while open: the ledger was edited")
        count, head = self._seen
        if len(snapshot.rows) < count or (count and snapshot.rows[count - 1][_CHAIN] != head):
            raise LedgerError(f"{self._where}: the ledger no longer extends the {count} entries this Ledger has "
                              f"seen (it now holds {len(snapshot.rows)}): the ledger was truncated, edited "
                              "or replaced while open")

    def _transaction(self, body: Callable[[], _T], begin: str = "BEGIN") -> _T:
        """Run ``body()`` in one transaction (``begin``), committing after it
        returns and rolling back if it raises."""
        conn = self._connection()
        conn.execute(begin)
        try:
            result = body()
            conn.execute("COMMIT")
        except BaseException:
            _rollback(conn)
            raise
        return result

    def _snapshot(self) -> _Snapshot:
        """Every entry, read in one transaction and verified: the file is the
        one this object opened and the ledger extends what it has seen."""
        with self._lock:
            self._connection()
            self._check_file()

            try:
                snapshot = self._transaction(self._current)
            except sqlite3.Error as e:
                raise LedgerError(f"{self._where}: cannot read the ledger: {e}") from e
            self._seen = (len(snapshot.rows), snapshot.head)
            return snapshot

    def _current(self) -> _Snapshot:
        """The ledger, verified (:meth:`_verify`) inside the caller's transaction and extending what this object
        has seen (:meth:`_check_continues`); or, when SQLite's data_version shows that no other connection has
        committed to the file since this object last verified it so, that snapshot, with what it recorded since."""
        version = self._data_version()  # first: rows read after it are at least as new
        if self._trusted is not None and self._trusted[0] == version:
            return self._trusted[1]
        snapshot = self._verify()
        self._check_continues(snapshot)
        self._trusted = (version, snapshot)
        return snapshot

    # -- public API --------------------------------------------------------

    @property
    def budget(self) -> Budget:
        """The dataset's total budget, as stored in the ledger."""
        return self._budget

    @property
    def path(self) -> Optional[str]:
        """The ledger file, or None for an in-memory ledger."""
        return self._path

    def account(self, analyst: str, part: Optional[Budget] = None) -> "Account":
        """The :class:`Account` of ``analyst`` on this ledger: spends through it
        are recorded under the analyst's name and may not take the analyst's
        own total beyond ``part`` (None: only the dataset's budget binds), nor
        the dataset's total, of all analysts and the owner, beyond
        :attr:`budget`. ``part`` comes from the caller's configuration and is
        not stored: the parts of several analysts may add up to more than the
        dataset's budget. It must be in the budget's currency. Raises
        :class:`~dpsql.errors.LedgerError` for an invalid name or part."""
        name = _analyst_name(analyst)
        if part is not None:
            if not isinstance(part, Budget):
                raise LedgerError(f"analyst {name!r}'s part must be a dpsql.private.budget.Budget or None, "
                                  f"got {type(part).__name__}")
            if part.currency != self._budget.currency:
                raise LedgerError(f"analyst {name!r}'s part {part} is not in the currency of the dataset's "
                                  f"budget {self._budget}")
        return Account(self, name, part)

    def spend(self, cost: Cost, description: str = "", mechanism: str = "") -> int:
        """Record ``cost`` as the owner's and return the new entry's id, or
        raise :class:`~dpsql.errors.BudgetExceededError` and record nothing if
        the total would exceed the budget.

        Read, verify, check and insert happen in one ``BEGIN IMMEDIATE``
        transaction, and the commit is fsynced before this returns: release
        the noisy value only after ``spend`` has returned. A ledger that fails
        verification raises :class:`~dpsql.errors.LedgerError` and records
        nothing.
        """
        return self.record(cost, description, mechanism).id

    def record(self, cost: Cost, description: str = "", mechanism: str = "") -> Entry:
        """:meth:`spend`, returning the whole new :class:`Entry` (its id and time too), so that whoever
        records a spend knows its entry without reading the ledger again."""
        return self._record(cost, description, mechanism, _OWNER, None)

    def _record(self, cost: Cost, description: str, mechanism: str, analyst: str, part: Optional[Budget]) -> Entry:
        """:meth:`record`, charged to ``analyst`` (``''``: the owner), whose own total may not exceed ``part``."""
        self._validate(cost)
        if not isinstance(description, str) or not isinstance(mechanism, str):
            raise LedgerError("description and mechanism must be strings")
        with self._lock:
            return self._spend(cost, description, mechanism, analyst, part)

    def _spend(self, cost: Cost, description: str, mechanism: str, analyst: str, part: Optional[Budget]) -> Entry:
        conn = self._connection()
        self._check_file()

        def record() -> Tuple[_Snapshot, tuple, str]:
            snapshot = self._current()
            rows = snapshot.rows
            self._require_room(rows, cost, analyst, part)
            entry_id = len(rows) + 1  # ids are 1..n (verified), and so is the sequence
            time = datetime.now(timezone.utc).isoformat(timespec="microseconds")
            # + 0.0 turns -0.0 into 0.0: SQLite stores an integral REAL as an integer and reads back 0.0
            row = (entry_id, time, cost.epsilon + 0.0, cost.delta + 0.0, cost.rho + 0.0, mechanism, description,
                   analyst)
            chain = _entry_hash(snapshot.head, row, snapshot.fingerprint)
            cursor = conn.execute(f"INSERT INTO entries ({_COLUMNS}, chain) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                                  (*row, chain))
            if cursor.lastrowid != entry_id:  # cannot happen after _verify; refuse rather than guess
                raise LedgerError(f"{self._where}: the new entry got id {cursor.lastrowid}, not {entry_id}")
            conn.execute("UPDATE meta SET value = ? WHERE key = 'head'", (_head(entry_id, chain),))
            return snapshot, row, chain

        try:
            snapshot, row, chain = self._transaction(record, "BEGIN IMMEDIATE")
        except sqlite3.Error as e:
            raise LedgerError(f"{self._where}: the spend was not recorded: {e}") from e
        entry_id = row[0]
        self._seen = (entry_id, chain)
        # what was verified, and this entry, hashed here: the file now (its own commit leaves data_version)
        rows = [*snapshot.rows, (*row, chain)]
        self._verified = (snapshot.fingerprint, rows)
        assert self._trusted is not None  # set by _current
        self._trusted = (self._trusted[0], dataclasses.replace(snapshot, rows=rows))
        try:
            self._check_file()
        except LedgerError as e:
            raise LedgerError(f"{e} (the spend went to the file this Ledger opened, which is no longer the "
                              "ledger: do not release its result)") from e
        return self._entries([row])[0]

    def check(self, cost: Cost) -> None:
        """Raise :class:`~dpsql.errors.BudgetExceededError` if ``cost`` would
        not fit in the remaining budget now. Writes nothing; use it to refuse
        a query before any data is touched (``spend`` checks again)."""
        self._check(cost, _OWNER, None)

    def _check(self, cost: Cost, analyst: str, part: Optional[Budget]) -> None:
        """:meth:`check`, for ``analyst`` (``''``: the owner), whose own total may not exceed ``part``."""
        self._validate(cost)
        self._require_room(self._snapshot().rows, cost, analyst, part)

    def spent(self) -> Cost:
        """The total of every recorded cost, of all analysts and the owner (exact sums, :func:`math.fsum`)."""
        return self._sum(self._snapshot().rows)

    def remaining(self) -> Cost:
        """What the budget still allows: budget minus :meth:`spent`, floored at 0."""
        return self._budget.remaining(self.spent())

    def entries(self) -> "list[Entry]":
        """Every recorded spend, of all analysts and the owner, oldest first."""
        return self._entries(self._snapshot().rows)

    def entry(self, entry_id: int) -> "Entry | None":
        """The recorded spend ``entry_id`` (of any analyst or the owner), or None when the ledger has none; read
        and verified as :meth:`entries` (with one writer, reading no entry: see "Tamper evidence")."""
        rows = self._snapshot().rows
        return self._entries([rows[entry_id - 1]])[0] if type(entry_id) is int and 0 < entry_id <= len(rows) else None

    def afford(self, cost: Cost) -> "Tuple[bool, Cost]":
        """Whether ``cost`` fits in the remaining budget now (as :meth:`check`), and what remains (as
        :meth:`remaining`), from one read of the ledger. Writes nothing."""
        return self._afford(cost, _OWNER, None)

    def _afford(self, cost: Cost, analyst: str, part: Optional[Budget]) -> "Tuple[bool, Cost]":
        """:meth:`afford`, for ``analyst`` (``''``: the owner), whose own total may not exceed ``part``."""
        self._validate(cost)
        rows = self._snapshot().rows
        try:
            self._require_room(rows, cost, analyst, part)
            fits = True
        except BudgetExceededError:
            fits = False
        return fits, self._remaining(rows, analyst, part)

    def accounts(self) -> "dict[str, Cost]":
        """The total recorded per analyst (exact sums), by name, for each
        analyst with an entry; the owner's total is under ``''``, when the
        owner has an entry."""
        rows = self._snapshot().rows
        return {name: self._sum(_of(rows, name)) for name in sorted({row[_ANALYST] for row in rows})}

    def close(self) -> None:
        """Close the file (idempotent). An in-memory ledger is discarded."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "Ledger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({self._path!r}, {self._budget!r})"

    # -- helpers -----------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise LedgerError(f"{self._where}: the ledger is closed")
        return self._conn

    def _validate(self, cost: Cost) -> None:
        if not isinstance(cost, Cost):
            raise PrivacyError(f"expected a dpsql.private.budget.Cost, got {type(cost).__name__}")
        self._budget.admits(cost)  # raises PrivacyError on a currency mismatch

    def _entries(self, rows: list) -> "list[Entry]":
        try:
            return [Entry(id=r[0], time=r[1], cost=Cost(r[2], r[3], r[4]), mechanism=r[5], description=r[6],
                          analyst=r[_ANALYST]) for r in rows]
        except PrivacyError as e:
            raise LedgerError(f"{self._where}: the ledger holds an invalid entry: {e}") from e

    def _sum(self, rows: list, extra: Optional[Cost] = None) -> Cost:
        columns: "list[list[float]]" = [[row[2] for row in rows], [row[3] for row in rows], [row[4] for row in rows]]
        if extra is not None:
            columns[0].append(extra.epsilon)
            columns[1].append(extra.delta)
            columns[2].append(extra.rho)
        try:
            return Cost(*(math.fsum(column) for column in columns))
        except (TypeError, PrivacyError) as e:
            raise LedgerError(f"{self._where}: the ledger holds an invalid entry: {e}") from e

    def _fits(self, limit: Budget, rows: list, cost: Cost) -> bool:
        """Whether ``cost`` fits in ``limit`` beside ``rows``. A total beyond the largest float (a limit near
        it, and a request near it) does not fit."""
        try:
            return limit.admits(self._sum(rows, cost))
        except OverflowError:
            return False

    def _require_room(self, rows: list, cost: Cost, analyst: str, part: Optional[Budget]) -> None:
        """Raise :class:`~dpsql.errors.BudgetExceededError` unless ``cost`` fits both ``analyst``'s ``part``
        beside the analyst's own entries (no part: nothing to check) and the dataset's budget beside all
        ``rows``. The error names each limit it would exceed, the analyst's part first; its ``spent`` is
        what was spent against the first of them, and its ``remaining`` what is left under both."""
        over = []
        if part is not None:
            mine = _of(rows, analyst)
            if not self._fits(part, mine, cost):
                over.append((self._sum(mine), f"the part {part} given to analyst {analyst!r}"))
        if not self._fits(self._budget, rows, cost):
            whose = (f"the budget {self._budget}" if analyst == _OWNER
                     else f"the dataset's total budget {self._budget}, shared by all analysts,")
            over.append((self._sum(rows), whose))
        if over:
            show = self._budget.describe
            spent = " and ".join(f"{show(total)} of {what} is already spent" for total, what in over)
            remaining = self._remaining(rows, analyst, part)
            raise BudgetExceededError(
                f"privacy budget exceeded: the request costs {show(cost)}, but {spent} and only {show(remaining)} "
                "remains; nothing was recorded", requested=cost, spent=over[0][0], remaining=remaining)

    def _remaining(self, rows: list, analyst: str, part: Optional[Budget]) -> Cost:
        """What ``analyst`` may still spend beside ``rows``: what the dataset's budget allows, and, under a
        ``part``, no more in any field than what is left of the part (see :meth:`Account.remaining`)."""
        left = self._budget.remaining(self._sum(rows))
        if part is None:
            return left
        own = part.remaining(self._sum(_of(rows, analyst)))
        return Cost(*(min(getattr(left, f), getattr(own, f)) for f in ("epsilon", "delta", "rho")))


class Account:
    """One analyst's account on a dataset's :class:`Ledger`, made by
    :meth:`Ledger.account`; usable wherever a :class:`Ledger` is (the kernel's
    :class:`~dpsql.private.kernel.PrivateTable`, a connection), so that every
    spend made through it is charged to the analyst.

    A spend is recorded under the analyst's name, in one ``BEGIN IMMEDIATE``
    transaction that checks both limits: the analyst's own total against
    their part (if any), and the dataset's total, of every analyst and the
    owner, against the dataset's budget. It has the ledger's guarantees
    (durable before it returns, serialized across threads and processes,
    nothing recorded on a refusal, the ledger verified each time).
    :meth:`spent` and :meth:`entries` are the analyst's own;
    :attr:`dataset_budget`, :meth:`dataset_spent` and
    :meth:`dataset_remaining` are the dataset's. An account gives no public
    way to the :class:`Ledger` itself, through which one could spend as the
    owner or as another analyst.
    """

    def __init__(self, ledger: Ledger, analyst: str, part: Optional[Budget]) -> None:
        self._ledger = ledger
        self._name = analyst
        self._part = part
        self._closed = False

    @property
    def analyst(self) -> str:
        """The analyst's name, recorded with each of their entries."""
        return self._name

    @property
    def part(self) -> Optional[Budget]:
        """The analyst's part of the budget, or None when only the dataset's budget binds."""
        return self._part

    @property
    def budget(self) -> Budget:
        """The analyst's part, or the dataset's budget when they have none."""
        return self._part if self._part is not None else self._ledger.budget

    @property
    def dataset_budget(self) -> Budget:
        """The dataset's total budget, which all analysts and the owner draw on together."""
        return self._ledger.budget

    @property
    def path(self) -> Optional[str]:
        """The ledger file, or None for an in-memory ledger."""
        return self._ledger.path

    def spend(self, cost: Cost, description: str = "", mechanism: str = "") -> int:
        """Record ``cost`` under the analyst's name and return the new entry's
        id, or raise :class:`~dpsql.errors.BudgetExceededError`, naming the
        limit (the analyst's part, the dataset's total, or both) and what was
        asked, spent and left, and record nothing. As :meth:`Ledger.spend`:
        release the noisy value only after this has returned."""
        return self.record(cost, description, mechanism).id

    def record(self, cost: Cost, description: str = "", mechanism: str = "") -> Entry:
        """:meth:`spend`, returning the whole new :class:`Entry` (as :meth:`Ledger.record`)."""
        self._open()
        return self._ledger._record(cost, description, mechanism, self._name, self._part)

    def check(self, cost: Cost) -> None:
        """Raise :class:`~dpsql.errors.BudgetExceededError` if ``cost`` would
        not fit in both limits now. Writes nothing (``spend`` checks again)."""
        self._open()
        self._ledger._check(cost, self._name, self._part)

    def spent(self) -> Cost:
        """The total the analyst has spent (exact sums, :func:`math.fsum`)."""
        self._open()
        return self._ledger._sum(_of(self._ledger._snapshot().rows, self._name))

    def remaining(self) -> Cost:
        """What the analyst may still spend: in each field (``ε``, ``δ``,
        ``ρ``), the smaller of what is left of their part and what is left of
        the dataset's budget, which the other analysts and the owner draw on
        too. Both limits hold field by field, so a cost fits exactly when each
        of its fields fits under both, i.e. under this minimum, although the
        two minima may come from different limits (the part may leave less
        ``ε`` and the dataset less ``δ``). Floored at 0."""
        self._open()
        return self._ledger._remaining(self._ledger._snapshot().rows, self._name, self._part)

    def entries(self) -> "list[Entry]":
        """The analyst's recorded spends, oldest first."""
        self._open()
        return self._ledger._entries(_of(self._ledger._snapshot().rows, self._name))

    def entry(self, entry_id: int) -> "Entry | None":
        """The analyst's recorded spend ``entry_id``, or None when it is not theirs (as :meth:`Ledger.entry`)."""
        self._open()
        entry = self._ledger.entry(entry_id)
        return entry if entry is not None and entry.analyst == self._name else None

    def afford(self, cost: Cost) -> "Tuple[bool, Cost]":
        """Whether ``cost`` fits in both limits now (as :meth:`check`), and what the analyst may still spend
        (as :meth:`remaining`), from one read of the ledger. Writes nothing."""
        self._open()
        return self._ledger._afford(cost, self._name, self._part)

    def dataset_spent(self) -> Cost:
        """The dataset's total spend, of all analysts and the owner."""
        self._open()
        return self._ledger.spent()

    def dataset_remaining(self) -> Cost:
        """What the dataset's budget still allows, to all analysts and the owner together."""
        self._open()
        return self._ledger.remaining()

    def close(self) -> None:
        """Stop using this account (idempotent). The ledger stays open for its
        other accounts: whoever opened the :class:`Ledger` closes it."""
        self._closed = True

    def __enter__(self) -> "Account":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Account({self._ledger!r}, {self._name!r}, {self._part!r})"

    def _open(self) -> None:
        if self._closed:
            raise LedgerError(f"{self._ledger._where}: analyst {self._name!r}'s account is closed")


def _of(rows: list, analyst: str) -> list:
    """The entry rows of ``analyst``."""
    return [row for row in rows if row[_ANALYST] == analyst]


def _head(count: int, chain: str) -> str:
    """The ``head`` meta value: the entry count and the last entry's hash."""
    return json.dumps({"count": count, "hash": chain})


def _parse_head(value: object) -> "Tuple[Optional[int], str]":
    """``(count, hash)`` of a ``head`` meta value, or ``(None, "")`` if unreadable."""
    try:
        head = json.loads(value)  # type: ignore[arg-type]
        count, chain = head["count"], head["hash"]
    except (TypeError, ValueError, KeyError):
        return None, ""
    if type(count) is not int or count < 0 or not isinstance(chain, str):
        return None, ""
    return count, chain


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
