"""The analyst's DuckDB: a database of its own that holds released data only.

Every DuckDB object that dpsql hands to an analyst (a result's
``relation``, ``db.sql(...)``, a synthetic table, ``db.released``) lives on a
:class:`ReleasedData` connection, never on the connection that holds the
private table. It is a separate in-memory DuckDB *database* (not a cursor of
the owner's), so no SQL run on it can name the private table, and it is
opened with

* ``enable_external_access = false``: no file is read or written
  (``read_csv``, ``COPY … TO``, ``ATTACH``, ``EXPORT DATABASE``), no extension
  is installed or loaded, and Python variables are not scanned by name;
* ``lock_configuration = true``: those settings cannot be changed back.

What it holds: the released answers of results (as relations made from
their DataFrames) and the synthetic tables registered by name. Everything in
it is post-processing of noisy values, so any SQL over it is free.

>>> import pandas as pd
>>> released = ReleasedData()
>>> released.register("answers", pd.DataFrame({"n": [1.5, 2.5]}))
>>> released.con.sql("SELECT SUM(n) FROM answers").fetchall()
[(4.0,)]
>>> released.con.sql("SELECT * FROM read_csv('/etc/passwd')")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
_duckdb.PermissionException: Permission Error: ...
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import duckdb

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ReleasedData", "SETTINGS"]

#: The configuration every analyst-facing DuckDB connection is opened with.
SETTINGS = {"enable_external_access": False, "lock_configuration": True}


class ReleasedData:
    """A locked-down in-memory DuckDB database for released data (see the module docstring)."""

    def __init__(self) -> None:
        self._con = duckdb.connect(":memory:", config=dict(SETTINGS))
        # DuckDB connections are not safe to share between threads: one call at a time
        self._lock = threading.Lock()

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The connection itself, for any SQL over released tables (no budget)."""
        return self._con

    def relation(self, df: "pd.DataFrame") -> duckdb.DuckDBPyRelation:
        """``df`` (released values) as a relation on this database."""
        with self._lock:
            return self._con.from_df(df)

    def has(self, name: str) -> bool:
        """Whether a table or view called ``name`` (any case) exists here."""
        with self._lock:
            return self._con.execute(
                "SELECT count(*) FROM (SELECT table_name AS name FROM duckdb_tables() UNION ALL "
                "SELECT view_name FROM duckdb_views() WHERE NOT internal) WHERE lower(name) = lower(?)",
                [name]).fetchall()[0][0] > 0

    def register(self, name: str, df: "pd.DataFrame") -> None:
        """Make ``df`` (released values) queryable as ``name``."""
        with self._lock:
            self._con.register(name, df)

    def table(self, name: str) -> duckdb.DuckDBPyRelation:
        """The registered table ``name`` as a relation."""
        with self._lock:
            return self._con.table(name)

    def close(self) -> None:
        """Close the database (relations made from it stop working)."""
        with self._lock:
            self._con.close()
