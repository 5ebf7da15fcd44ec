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

>>> import pandas as pd
>>> released = ReleasedData()
>>> with released.reserve("answers"):
...     released.register("answers", pd.DataFrame({"n": [1.5, 2.5]}), {"n": "DOUBLE"})
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

from dpsql.errors import ArgumentError, WorkloadError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ReleasedData", "locked_database"]


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
        self._con = locked_database(*setup)
        # DuckDB connections are not safe to share between threads: one call at a time
        self._lock = threading.Lock()
        self._reserved: set[str] = set()  # names held by :meth:`reserve`, case-folded

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The connection itself, for any SQL over released tables (no budget)."""
        return self._con

    @contextlib.contextmanager
    def _using(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """The connection, one caller at a time; ArgumentError if the analyst has closed it."""
        with self._lock:
            try:
                yield self._con
            except duckdb.ConnectionException:
                raise ArgumentError("the released database (db.released) is closed: connect again") from None

    def check_open(self) -> None:
        """ArgumentError if the database is closed: called before a request spends whose
        answers are registered here, so that it fails before the spend, not after."""
        with self._using() as con:
            con.execute("SELECT 1").fetchall()

    def relation(self, df: "pd.DataFrame") -> duckdb.DuckDBPyRelation:
        """``df`` (released values) as a relation on this database."""
        with self._using() as con:
            return con.from_df(df)

    @contextlib.contextmanager
    def reserve(self, name: str) -> Iterator[None]:
        """Hold ``name`` for a table about to be made here (a synthetic table, while it is learned).
        Refused (WorkloadError) if a table or view of that name, in any case, exists here or is held
        already: two requests for one name cannot both spend. Held until the block ends."""
        key = name.casefold()
        with self._using() as con:
            taken = key in self._reserved or con.execute(
                "SELECT count(*) FROM (SELECT table_name AS name FROM duckdb_tables() UNION ALL "
                "SELECT view_name FROM duckdb_views() WHERE NOT internal) WHERE lower(name) = lower(?)",
                [name]).fetchall()[0][0] > 0
            if taken:
                raise WorkloadError(f"a table or view named {name!r} already exists; choose a new name for the "
                                    "synthetic table (it never replaces an existing one)")
            self._reserved.add(key)
        try:
            yield
        finally:
            with self._lock:
                self._reserved.discard(key)

    def register(self, name: str, df: "pd.DataFrame", types: Mapping[str, str], schema: str | None = None) -> None:
        """Make ``df`` (released values) the table ``name`` (in ``schema``, made if new), its columns
        cast to ``types`` (DuckDB types by column name): the schema's, not what DuckDB would infer
        from these rows (no type at all for a column of NULLs only, the narrowest integer type the
        values fit)."""
        hidden = f"__dpsql_frame_{secrets.token_hex(8)}"
        items = ", ".join(f"CAST({_quote(c)} AS {types[c]}) AS {_quote(c)}" for c in df.columns)
        target = _quote(name) if schema is None else f"{_quote(schema)}.{_quote(name)}"
        with self._using() as con:
            con.register(hidden, df)
            try:
                if schema is not None:
                    con.execute(f"CREATE SCHEMA IF NOT EXISTS {_quote(schema)}")
                con.execute(f"CREATE TABLE {target} AS SELECT {items} FROM {_quote(hidden)}")
            finally:
                con.unregister(hidden)

    def table(self, name: str) -> duckdb.DuckDBPyRelation:
        """The registered table ``name`` (any characters: it is quoted) as a relation."""
        with self._using() as con:
            return con.sql(f"SELECT * FROM {_quote(name)}")

    def close(self) -> None:
        """Close the database (relations made from it stop working)."""
        with self._lock:
            self._con.close()


def _quote(name: str) -> str:
    """``name`` as a quoted DuckDB identifier (any characters)."""
    return '"' + name.replace('"', '""') + '"'
