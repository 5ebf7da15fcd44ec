"""A dataset as its owner opens it: the private table, its public schema, its ledger and its strategies.

:meth:`Dataset.open` is what ``dpsql.connect`` and ``dpsql serve`` do with the owner's
arguments: open the source (a DuckDB connection or file, Parquet, CSV, a data frame, Spark), load the
schema, refuse a table whose columns cannot hold it, read the tables the owner declares
public, and open the durable ledger.
:meth:`Dataset.engine` then gives the :class:`~dpsql.engine.engine.Engine` that answers
for the owner (charging the whole ledger) or for one analyst (charging that analyst's
account of it, whose part of the budget holds beside the dataset's total). Every engine
of a dataset shares its table, its kernel lock (DuckDB connections are not thread-safe,
so the counting queries of all analysts run one at a time) and its strategy memo.

>>> import duckdb, dpsql
>>> con = duckdb.connect()
>>> _ = con.execute("CREATE TABLE t AS SELECT range % 3 AS a FROM range(30)")
>>> ds = Dataset.open(con, schema={"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 2}}},
...                   budget=dpsql.Budget(epsilon=1.0), cache=False, progress=False)
>>> ds.engine().budget.epsilon, ds.engine("alice", dpsql.Budget(epsilon=0.25)).budget.epsilon
(1.0, 0.25)
"""

from __future__ import annotations

import dataclasses
import os
import threading
import warnings
from typing import Any, Callable, Sequence

from dpsql.engine.engine import Engine, Strategies
from dpsql.errors import ArgumentError, PrivacyError
from dpsql.hdmm.cache import StrategyCache
from dpsql.limits import MAX_PUBLIC_ROWS
from dpsql.private.backend import CSV, Backend, open_source, public_table, scans_python_object
from dpsql.private.budget import Budget
from dpsql.private.columns import check_columns
from dpsql.private.kernel import PrivateTable
from dpsql.private.ledger import Ledger
from dpsql.private.measure import Snapshot, take_snapshot
from dpsql.private.noise import UniformSource
from dpsql.schema import Schema, load_schema, with_public_tables

__all__ = ["Dataset"]


class Dataset:
    """One private table with its schema, ledger and strategies (see the module docstring)."""

    def __init__(self, backend: Backend, schema: Schema, ledger: Ledger, strategies: Strategies,
                 source_of_noise: UniformSource | None = None, snapshot: Snapshot | None = None,
                 validation: Any = None) -> None:
        self._snapshot = snapshot
        self.schema = schema
        #: what the owner's check found when opening (``owner_check``): never part of a release
        self.validation = validation
        self.ledger = ledger
        self.strategies = strategies
        self._backend = backend
        self._source_of_noise = source_of_noise
        self._lock = threading.RLock()

    @classmethod
    def open(cls, source: Any, table: str | None = None, schema: "Schema | dict | str | os.PathLike | None" = None,
             budget: Budget | None = None, ledger: "str | os.PathLike | None" = None, *,
             cache: "bool | str | os.PathLike" = True, progress: bool | None = None,
             source_of_noise: UniformSource | None = None, public_tables: Sequence[str] = (),
             snapshot: bool | None = None,
             owner_check: "Callable[[Backend, str, Schema], Any] | None" = None) -> "Dataset":
        """Open the owner's private table (the arguments are :func:`dpsql.connect`'s).

        A table that lacks a declared column, or has one whose SQL type holds none of its domain's
        values, is refused here (:func:`~dpsql.private.columns.check_columns`, from the catalog),
        before the ledger is opened. ``owner_check(backend, table, schema)``, when given, then
        reads the table for its owner (:func:`dpsql.owner.validate.owner_report`: it may warn or
        refuse); what it returns is kept as :attr:`validation`, for the owner only. ``snapshot``:
        validate and index the table once now, so each measurement is a plain GROUP BY of small
        integers (:func:`~dpsql.private.measure.take_snapshot`; rows the owner changes later are not
        seen); None takes it when ``source`` is a file, whose data dpsql alone opened."""
        if schema is None:
            raise PrivacyError("connect needs the table's public schema (schema=...)")
        schema = load_schema(schema)
        name = table or schema.table
        if name != schema.table:
            schema = dataclasses.replace(schema, table=name)
        if isinstance(public_tables, str) or not all(isinstance(t, str) for t in public_tables):
            raise ArgumentError("public_tables must be a list of table names")
        if any(t.lower() == name.lower() for t in public_tables):
            raise ArgumentError(f"the private table {name!r} cannot be marked public")
        if ledger is not None and not isinstance(ledger, (str, os.PathLike)):
            raise ArgumentError(f"ledger must be a file path, or None to keep it in memory; got "
                                f"{type(ledger).__name__}")
        backend = open_source(source, name, schema)
        if scans_python_object(backend, name):
            warnings.warn(f"the private table {name!r} is a registered Python object (a DataFrame or Arrow table): "
                          "DuckDB types its object columns from a sample of rows, so one value after the sample can "
                          "fail every read or be converted into the domain; copy it into a table first "
                          "(CREATE TABLE ... AS SELECT * FROM the object), or pass the frame itself as the source, "
                          "which connect copies", stacklevel=3)
        check_columns(backend, name, schema)
        if public_tables:
            schema = with_public_tables(schema, {t: public_table(backend, t, MAX_PUBLIC_ROWS) for t in public_tables})
        validation = owner_check(backend, name, schema) if owner_check is not None else None
        if snapshot is None:
            snapshot = isinstance(source, (str, os.PathLike, CSV))
        indexed = take_snapshot(backend, name, schema) if snapshot else None
        book = Ledger(ledger, budget)
        # the cache's entries are signed with a key kept beside the ledger (dpsql.hdmm.cache)
        store = None if cache is False else StrategyCache(None if cache is True else cache, book.path)
        return cls(backend, schema, book, Strategies(store, progress), source_of_noise, indexed, validation)

    def engine(self, analyst: str | None = None, part: Budget | None = None) -> Engine:
        """The engine that answers for the owner (``analyst=None``: the whole ledger), or for
        ``analyst``, whose spends are charged to their account of the ledger and may not exceed
        ``part`` (None: only the dataset's total binds)."""
        ledger = self.ledger if analyst is None else self.ledger.account(analyst, part)
        private = PrivateTable(self._backend, self.schema.table, self.schema, ledger, self._source_of_noise,
                               lock=self._lock, snapshot=self._snapshot)
        return Engine(private, self.schema, ledger, self.strategies)

    def close(self) -> None:
        """Close the ledger."""
        self.ledger.close()
