"""The durable privacy-budget ledger.

A :class:`Ledger` records every release's privacy :class:`~dpsql.budget.Cost`
against the dataset's :class:`~dpsql.budget.Budget` in a SQLite file (stdlib
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

Totals are exact sums (:func:`math.fsum`) of the recorded costs.

>>> from dpsql.budget import Budget, Cost
>>> ledger = Ledger(None, Budget(epsilon=1.0))  # in memory; a path makes it durable
>>> ledger.spend(Cost(epsilon=0.75), description="count by age", mechanism="laplace")
1
>>> ledger.remaining()
Cost(epsilon=0.25, delta=0.0, rho=0.0)
>>> ledger.spend(Cost(epsilon=0.5))  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
dpsql.errors.BudgetExceededError: privacy budget exceeded: the request costs epsilon=0.5, delta=0.0, ...
>>> [(e.id, e.cost.epsilon, e.mechanism) for e in ledger.entries()]
[(1, 0.75, 'laplace')]
>>> ledger.close()
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Optional, Union

from .budget import Budget, Cost
from .errors import BudgetExceededError, LedgerError, PrivacyError

__all__ = ["Ledger", "Entry", "BUSY_TIMEOUT"]

#: Seconds a spend waits for another process's transaction before failing.
BUSY_TIMEOUT = 60.0

_FORMAT = "dpsql-ledger"
_VERSION = "1"

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
    description TEXT NOT NULL
);
"""


@dataclass(frozen=True)
class Entry:
    """One recorded spend: its id (increasing, never reused), the UTC time
    it was recorded (ISO 8601), its cost, and free-text labels."""

    id: int
    time: str
    cost: Cost
    mechanism: str
    description: str


class Ledger:
    """The privacy spends of one dataset, durable in a SQLite file.

    ``path=None`` (or ``":memory:"``) keeps the ledger in this process only;
    it still enforces the budget. A new file stores ``budget``; an existing
    one is opened with its stored budget when ``budget`` is None, and raises
    :class:`~dpsql.errors.LedgerError` when ``budget`` differs from it.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]", None], budget: Optional[Budget] = None) -> None:
        if budget is not None and not isinstance(budget, Budget):
            raise LedgerError(f"budget must be a dpsql.budget.Budget, got {type(budget).__name__}")
        memory = path is None or (isinstance(path, str) and path == ":memory:")
        self._path: Optional[str] = None if memory else os.fsdecode(os.fspath(path))
        self._conn: Optional[sqlite3.Connection] = None
        # one SQLite connection shared by this process's threads: each transaction holds the lock
        self._lock = threading.RLock()
        if self._path is not None:
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
            self._budget = self._open(budget)
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

    def _open(self, budget: Optional[Budget]) -> Budget:
        conn = self._conn
        assert conn is not None
        if not conn.execute("SELECT name FROM sqlite_master").fetchall():
            if budget is None:
                raise LedgerError(f"{self._where}: the file holds no ledger, and a new ledger needs a budget")
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
                    conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [
                        ("format", _FORMAT), ("version", _VERSION),
                        ("budget", json.dumps(budget.to_dict())), ("created", created)])
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
        stored = self._read_meta()
        if budget is not None and budget != stored:
            raise LedgerError(f"{self._where}: the ledger was created with the budget {stored}, "
                              f"not the budget {budget} given; a dataset's budget cannot change "
                              "(open it with budget=None to use the stored one)")
        return stored

    def _read_meta(self) -> Budget:
        conn = self._conn
        assert conn is not None
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"meta", "entries"} <= tables:
            raise LedgerError(f"{self._where}: not a dpsql ledger (it is a SQLite database "
                              f"with tables {sorted(tables)})")
        problems = [row[0] for row in conn.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            detail = "; ".join(" ".join(str(problem).split()) for problem in problems[:5])
            raise LedgerError(f"{self._where}: the ledger is corrupt: {detail}")
        meta = {}
        for key, value in conn.execute("SELECT key, value FROM meta"):
            meta[key] = value
        if meta.get("format") != _FORMAT:
            raise LedgerError(f"{self._where}: not a dpsql ledger (meta format is {meta.get('format')!r})")
        if meta.get("version") != _VERSION:
            raise LedgerError(f"{self._where}: unsupported ledger version {meta.get('version')!r} "
                              f"(this dpsql reads version {_VERSION})")
        try:
            return Budget.from_dict(json.loads(meta["budget"]))
        except (KeyError, TypeError, ValueError, PrivacyError) as e:
            raise LedgerError(f"{self._where}: the ledger's stored budget is unreadable: {e}") from e

    # -- public API --------------------------------------------------------

    @property
    def budget(self) -> Budget:
        """The dataset's total budget, as stored in the ledger."""
        return self._budget

    @property
    def path(self) -> Optional[str]:
        """The ledger file, or None for an in-memory ledger."""
        return self._path

    def spend(self, cost: Cost, description: str = "", mechanism: str = "") -> int:
        """Record ``cost`` and return the new entry's id, or raise
        :class:`~dpsql.errors.BudgetExceededError` and record nothing if the
        total would exceed the budget.

        Read, check and insert happen in one ``BEGIN IMMEDIATE`` transaction,
        and the commit is fsynced before this returns: release the noisy
        value only after ``spend`` has returned.
        """
        self._validate(cost)
        if not isinstance(description, str) or not isinstance(mechanism, str):
            raise LedgerError("description and mechanism must be strings")
        with self._lock:
            return self._spend(cost, description, mechanism)

    def _spend(self, cost: Cost, description: str, mechanism: str) -> int:
        conn = self._connection()
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                rows = conn.execute("SELECT epsilon, delta, rho FROM entries").fetchall()
                total = self._sum(rows, cost)
                if not self._budget.admits(total):
                    spent = self._sum(rows)
                    conn.execute("ROLLBACK")
                    raise self._exceeded(cost, spent)
                time = datetime.now(timezone.utc).isoformat(timespec="microseconds")
                cursor = conn.execute(
                    "INSERT INTO entries (time, epsilon, delta, rho, mechanism, description) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (time, cost.epsilon, cost.delta, cost.rho, mechanism, description))
                entry_id = cursor.lastrowid
                conn.execute("COMMIT")
            except BaseException:
                _rollback(conn)
                raise
        except sqlite3.Error as e:
            raise LedgerError(f"{self._where}: the spend was not recorded: {e}") from e
        assert entry_id is not None
        return entry_id

    def check(self, cost: Cost) -> None:
        """Raise :class:`~dpsql.errors.BudgetExceededError` if ``cost`` would
        not fit in the remaining budget now. Writes nothing; use it to refuse
        a query before any data is touched (``spend`` checks again)."""
        self._validate(cost)
        rows = self._rows()
        if not self._budget.admits(self._sum(rows, cost)):
            raise self._exceeded(cost, self._sum(rows))

    def spent(self) -> Cost:
        """The total of every recorded cost (exact sums, :func:`math.fsum`)."""
        return self._sum(self._rows())

    def remaining(self) -> Cost:
        """What the budget still allows: budget minus :meth:`spent`, floored at 0."""
        return self._budget.remaining(self.spent())

    def entries(self) -> "list[Entry]":
        """Every recorded spend, oldest first."""
        with self._lock:
            return self._entries()

    def _entries(self) -> "list[Entry]":
        conn = self._connection()
        try:
            rows = conn.execute("SELECT id, time, epsilon, delta, rho, mechanism, description "
                                "FROM entries ORDER BY id").fetchall()
            return [Entry(id=r[0], time=r[1], cost=Cost(r[2], r[3], r[4]), mechanism=r[5], description=r[6])
                    for r in rows]
        except sqlite3.Error as e:
            raise LedgerError(f"{self._where}: cannot read the ledger: {e}") from e
        except PrivacyError as e:
            raise LedgerError(f"{self._where}: the ledger holds an invalid entry: {e}") from e

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
            raise PrivacyError(f"expected a dpsql.budget.Cost, got {type(cost).__name__}")
        self._budget.admits(cost)  # raises PrivacyError on a currency mismatch

    def _rows(self) -> list:
        try:
            with self._lock:
                return self._connection().execute("SELECT epsilon, delta, rho FROM entries").fetchall()
        except sqlite3.Error as e:
            raise LedgerError(f"{self._where}: cannot read the ledger: {e}") from e

    def _sum(self, rows: list, extra: Optional[Cost] = None) -> Cost:
        columns = [list(column) for column in zip(*rows)] if rows else [[], [], []]
        if extra is not None:
            columns[0].append(extra.epsilon)
            columns[1].append(extra.delta)
            columns[2].append(extra.rho)
        try:
            return Cost(*(math.fsum(column) for column in columns))
        except (TypeError, PrivacyError) as e:
            raise LedgerError(f"{self._where}: the ledger holds an invalid entry: {e}") from e

    def _exceeded(self, cost: Cost, spent: Cost) -> BudgetExceededError:
        remaining = self._budget.remaining(spent)
        show = self._budget.describe
        return BudgetExceededError(
            f"privacy budget exceeded: the request costs {show(cost)}, but {show(spent)} of the budget "
            f"{self._budget} is already spent and only {show(remaining)} remains; nothing was recorded",
            requested=cost, spent=spent, remaining=remaining)


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
