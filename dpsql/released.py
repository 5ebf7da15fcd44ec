"""The analyst's DuckDB: a database of its own that holds released data only.

Every DuckDB object that dpsql hands to an analyst (a result's
``relation``, ``db.sql(...)``, a synthetic table, ``db.released``) lives on a
:class:`ReleasedData` connection, never on the connection that holds the
private table. It is a separate in-memory DuckDB *database* (not a cursor of
the owner's), so no SQL run on it can name the private table, and it is
opened by :func:`locked_database`:

* ``enable_external_access = false``: no file is read or written
  (``read_csv``, ``COPY … TO``, ``ATTACH``, ``EXPORT DATABASE``), no extension
  is installed or loaded, and Python variables are not scanned by name;
* no temporary directory, and both settings made only once the database is
  open: DuckDB exempts from the first setting the temporary directory
  (``.tmp`` in the working directory, where an owner's in-memory database
  spills the private table's blocks) and the database's own path, when they
  are set at connect time;
* ``lock_configuration = true``: those settings cannot be changed back.

What it holds: the released answers of results (as relations made from
their DataFrames) and the synthetic tables registered by name. Everything in
it is post-processing of noisy values, so any SQL over it is free.

Threads. A DuckDB connection refuses a call while another thread's call runs
on it (``ResourceInUseException``), so the database is never used through one
shared connection: :attr:`ReleasedData.con` (``db.released``) is a cursor of
its own for each thread (the same database, so the same tables), and every
use by dpsql takes a fresh cursor. A request that spends can thus never fail
because an analyst is running SQL on ``db.released`` in another thread.
Closing ``db.released`` closes that thread's cursor only (the next
``db.released`` is a new one); ``db.close()`` closes the database.

Names. A synthetic table's name is claimed in the catalog before the spend,
by a placeholder view that raises when read (:meth:`ReleasedData.reserve`):
an analyst's ``CREATE TABLE`` of that name is refused on their side while the
table is made. The table itself is written under a private name and renamed
onto the placeholder in one transaction at the end. If the placeholder is no
longer dpsql's (the analyst dropped it and took the name), the charged table
is kept under that private name, ``<name>_<16 hex digits>``, and
:meth:`Slot.fill` returns it, so that a charged release is never lost.

>>> import pandas as pd
>>> released = ReleasedData()
>>> with released.reserve("answers") as slot:
...     slot.fill(pd.DataFrame({"n": [1.5, 2.5]}), {"n": "DOUBLE"})
'answers'
>>> released.con.sql("SELECT SUM(n) FROM answers").fetchall()
[(4.0,)]
>>> released.con.sql("SELECT * FROM read_csv('/etc/passwd')")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
_duckdb.PermissionException: Permission Error: ...
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from typing import TYPE_CHECKING, Iterator, Mapping

import duckdb

from dpsql.errors import ArgumentError, Error, WorkloadError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ReleasedData", "SYNTH_SCHEMA", "Slot", "locked_database"]

#: The schema on the analyst's DuckDB where each private table's latest synthetic table is a view
#: under the private table's own name (``synth.adult``).
SYNTH_SCHEMA = "synth"


def locked_database(*setup: str) -> duckdb.DuckDBPyConnection:
    """A new in-memory DuckDB that can reach no file, no extension and no Python variable by
    name, and whose configuration is locked, after the ``setup`` statements have run.

    >>> con = locked_database("SET TimeZone = 'UTC'")
    >>> con.sql("SELECT value FROM duckdb_settings() WHERE name IN ('allowed_directories', 'allowed_paths')").fetchall()
    [('[]',), ('[]',)]
    """
    con = duckdb.connect(":memory:", config={"temp_directory": "", "autoload_known_extensions": False,
                                             "autoinstall_known_extensions": False})
    for statement in (*setup, "SET enable_external_access = false", "SET lock_configuration = true"):
        con.execute(statement)
    return con


class ReleasedData:
    """A locked-down in-memory DuckDB database for released data (see the module docstring)."""

    def __init__(self, *setup: str) -> None:
        """``setup``: statements run before the database is locked (e.g. its memory limit)."""
        self._con = locked_database(*setup)  # never queried itself: only its cursors are
        self._lock = threading.Lock()  # over ``self._con.cursor()``, the one call made on the shared connection
        self._local = threading.local()  # each thread's ``con``

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """This thread's cursor of the database, for any SQL over released tables (no budget);
        a new one once the thread has closed its own. ArgumentError once the database is closed."""
        cursor = getattr(self._local, "cursor", None)
        if cursor is None or not _is_open(cursor):
            cursor = self._local.cursor = self._cursor()
        return cursor

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        """A new cursor of the database; ArgumentError if it is closed."""
        with self._lock, _as_dpsql_errors():
            return self._con.cursor()

    def check_open(self) -> None:
        """ArgumentError if the database is closed: called before a request spends whose
        answers are registered here, so that it fails before the spend, not after."""
        self._cursor().close()

    def relation(self, df: "pd.DataFrame") -> duckdb.DuckDBPyRelation:
        """``df`` (released values) as a relation on a cursor of its own (which it keeps open)."""
        cursor = self._cursor()
        with _as_dpsql_errors():
            return cursor.from_df(df)

    def table(self, name: str) -> duckdb.DuckDBPyRelation:
        """The registered table ``name`` (any characters: it is quoted) as a relation on a cursor of its own."""
        cursor = self._cursor()
        with _as_dpsql_errors():
            return cursor.sql(f"SELECT * FROM {_quote(name)}")

    def register(self, name: str, df: "pd.DataFrame", types: Mapping[str, str], schema: str | None = None) -> None:
        """Make ``df`` (released values) the new table ``name`` (in ``schema``, made if new), its
        columns cast to ``types`` (DuckDB types by column name); WorkloadError if the name is taken.
        For tables whose name is not held while they are made (the server's CREATE TABLE AS)."""
        frame = f"__dpsql_frame_{secrets.token_hex(8)}"
        items = ", ".join(f"CAST({_quote(c)} AS {types[c]}) AS {_quote(c)}" for c in df.columns)
        target = _quote(name) if schema is None else f"{_quote(schema)}.{_quote(name)}"
        cursor = self._cursor()
        with contextlib.closing(cursor), _as_dpsql_errors():
            cursor.register(frame, df)
            try:
                if schema is not None:
                    cursor.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote(schema)}")
                cursor.execute(f"CREATE TABLE {target} AS SELECT {items} FROM {_quote(frame)}")
            finally:
                cursor.unregister(frame)

    def alias(self, schema: str, alias: str, name: str) -> None:
        """Make ``schema.alias`` (the schema made if new) a view of the table ``name``, replacing
        an older view of that name there: a synthetic table under its private table's own name."""
        cursor = self._cursor()
        with contextlib.closing(cursor), _as_dpsql_errors():
            cursor.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote(schema)}")
            cursor.execute(f"CREATE OR REPLACE VIEW {_quote(schema)}.{_quote(alias)} AS SELECT * FROM "
                           f"main.{_quote(name)}")

    def under(self, alias: str, name: str) -> duckdb.DuckDBPyConnection:
        """A cursor of its own on which ``alias``, unqualified, is the table ``name`` (a temporary
        view, seen by this cursor alone): SQL written for a private table runs on its synthetic one."""
        cursor = self._cursor()
        with _as_dpsql_errors():
            cursor.execute(f"CREATE TEMP VIEW {_quote(alias)} AS SELECT * FROM main.{_quote(name)}")
        return cursor

    @contextlib.contextmanager
    def reserve(self, name: str) -> Iterator["Slot"]:
        """Claim ``name`` for a table about to be made here (a synthetic table, while it is learned)
        with a placeholder view, and yield the :class:`Slot` that makes the table. Refused
        (WorkloadError) if a table or view of that name, in any case, exists here, claimed or
        not: two requests for one name cannot both spend. The placeholder is dropped at the
        end of the block if the slot was not filled."""
        slot = Slot(self, name)
        slot.claim()
        try:
            yield slot
        finally:
            slot.release()

    def close(self) -> None:
        """Close the database and every cursor of it (relations made from it stop working)."""
        with self._lock:
            self._con.close()


class Slot:
    """A name claimed on a :class:`ReleasedData` by a placeholder view that raises when read, and
    the private name ``<name>_<token>`` its table is written under (see the module docstring)."""

    def __init__(self, released: ReleasedData, name: str) -> None:
        self.name = name
        self._released = released
        self._token = secrets.token_hex(8)
        self.private_name = f"{name}_{self._token}"
        self._filled: str | None = None

    def _holders(self, con: duckdb.DuckDBPyConnection) -> list[str]:
        """The SQL of every table and view named ``name``, in any case and schema (temporary ones too)."""
        return [sql for (sql,) in con.execute(
            "SELECT sql FROM (SELECT table_name AS name, sql FROM duckdb_tables() UNION ALL "
            "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal) WHERE lower(name) = lower(?)",
            [self.name]).fetchall()]

    def _owned(self, con: duckdb.DuckDBPyConnection) -> bool:
        """Whether the name's one holder is this slot's placeholder."""
        holders = self._holders(con)
        return len(holders) == 1 and self._token in (holders[0] or "")

    def claim(self) -> None:
        """Create the placeholder; WorkloadError if the name is taken (checked and created on one
        cursor: a name taken in between makes the CREATE fail, and is refused the same way)."""
        taken = WorkloadError(f"a table or view named {self.name!r} already exists; choose a new name for the "
                              "synthetic table (it never replaces an existing one)")
        notice = (f"dpsql is still making the synthetic table {self.name!r} (db.synthesize); it is registered "
                  f"here when the run ends [{self._token}]")
        cursor = self._released._cursor()
        with contextlib.closing(cursor), _as_dpsql_errors():
            if self._holders(cursor):
                raise taken
            try:
                cursor.execute(f"CREATE VIEW {_quote(self.name)} AS SELECT error({_literal(notice)}) AS making")
            except (duckdb.CatalogException, duckdb.TransactionException):  # taken, or being taken concurrently
                raise taken from None

    def fill(self, df: "pd.DataFrame", types: Mapping[str, str]) -> str:
        """Make ``df`` (released values) the claimed table, its columns cast to ``types`` (DuckDB
        types by column name): the schema's, not what DuckDB would infer from these rows (no
        type at all for a column of NULLs only, the narrowest integer type the values fit).
        Returns the table's name: ``name``, or :attr:`private_name` when the placeholder is no
        longer this slot's (the table is kept there, never dropped)."""
        frame = f"__dpsql_frame_{self._token}"
        items = ", ".join(f"CAST({_quote(c)} AS {types[c]}) AS {_quote(c)}" for c in df.columns)
        cursor = self._released._cursor()
        with contextlib.closing(cursor), _as_dpsql_errors():
            cursor.register(frame, df)
            try:
                cursor.execute(f"CREATE TABLE {_quote(self.private_name)} AS SELECT {items} FROM {_quote(frame)}")
            finally:
                cursor.unregister(frame)
            self._filled = self.private_name
            try:  # the placeholder's DROP and the RENAME commit together, or neither does
                cursor.execute("BEGIN TRANSACTION")
                if self._owned(cursor):
                    cursor.execute(f"DROP VIEW {_quote(self.name)}")
                    cursor.execute(f"ALTER TABLE {_quote(self.private_name)} RENAME TO {_quote(self.name)}")
                    cursor.execute("COMMIT")
                    self._filled = self.name
                else:
                    cursor.execute("ROLLBACK")
            except duckdb.Error:  # e.g. a conflict with an analyst's DDL on the name: the table stays private
                with contextlib.suppress(duckdb.Error):
                    cursor.execute("ROLLBACK")
        return self._filled

    def release(self) -> None:
        """Drop the placeholder if the slot was never filled and it is still this slot's."""
        if self._filled is not None:
            return
        with contextlib.suppress(Error, duckdb.Error):
            cursor = self._released._cursor()
            with contextlib.closing(cursor):
                cursor.execute("BEGIN TRANSACTION")
                if self._owned(cursor):
                    cursor.execute(f"DROP VIEW {_quote(self.name)}")
                cursor.execute("COMMIT")


def _is_open(cursor: duckdb.DuckDBPyConnection) -> bool:
    """Whether ``cursor`` is open, without running anything on it (its pending result stays)."""
    try:
        cursor.cursor().close()
    except duckdb.Error:
        return False
    return True


@contextlib.contextmanager
def _as_dpsql_errors() -> Iterator[None]:
    """DuckDB's errors as dpsql's: ArgumentError for a closed database, WorkloadError otherwise."""
    try:
        yield
    except duckdb.ConnectionException:
        raise ArgumentError("the released database (db.released) is closed: connect again") from None
    except duckdb.Error as e:
        raise WorkloadError(f"the released database (db.released) refused: {e}") from None


def _quote(name: str) -> str:
    """``name`` as a quoted DuckDB identifier (any characters)."""
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    """``text`` as a DuckDB string literal."""
    return "'" + text.replace("'", "''") + "'"
