"""Released results, kept so that a repeated request is answered again for free.

An analyst who sends the same request twice (the same statements, the same spend and
options, on the same workload) gets the first release again, exactly, and spends nothing:
the answers are already public to them, and measuring again would only spend budget to
average the noise away. :class:`Repeats` keeps each release of a request, per analyst
(the owner is ``''``), keyed by a digest of the request (:func:`request_key`).

Where it lives. Beside a ledger file ``L``, in the SQLite file ``L.released``, so that a
repeat is recognized across processes (``dpsql query`` run twice, a restarted server),
with the same durability as the ledger; with an in-memory ledger, in memory, for the
engine's lifetime. It is not part of the ledger's hash-chained format: it holds released
values only (no budget is granted or taken by it), and each release names its ledger entry
(id and time), which must still be the analyst's entry in the ledger for the release to be
served: a release kept for a ledger that was since replaced, or for another analyst, is
never served. It is created readable by its owner only (it holds every analyst's releases);
like the ledger, keep it where analysts cannot write it.

The answers are stored column by column with their dtypes: a plain numpy column (floats,
integers, booleans) as its bytes, any other as JSON values with every float as its exact
``repr`` (NaN and infinities as ``{"float": "nan"}``) and every day or time of day as
its ISO text (``{"date": "2024-02-29"}``, ``{"datetime": ...}``: a date column's groups and
quantiles, ``date_trunc``'s), so a repeat returns exactly the earlier table (checked when it
is stored). A table with a column this cannot hold exactly (a time in nanoseconds, for one)
is not kept: its repeat is measured anew.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import hashlib
import json
import math
import os
import sqlite3
import threading
from typing import TYPE_CHECKING, Any

import numpy as np

from dpsql.engine.answer import Answer, Release

if TYPE_CHECKING:
    import pandas as pd

    from dpsql.private.ledger import Account, Ledger

__all__ = ["Repeats", "request_key"]

_SCHEMA = """CREATE TABLE IF NOT EXISTS releases (
    analyst TEXT NOT NULL,
    key TEXT NOT NULL,
    entry INTEGER NOT NULL,
    time TEXT NOT NULL,
    answers TEXT NOT NULL,
    PRIMARY KEY (analyst, key)
)"""
_BUSY_TIMEOUT = 60.0


def request_key(*parts: Any) -> str:
    """The SHA-256 of ``parts`` (JSON-able: the statements, the spend and options, the workload)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=repr).encode("utf-8")).hexdigest()


def _encode(answers: "list[Answer]") -> str | None:
    """The answers as JSON that :func:`_decode` turns back into exactly the same tables (checked), or None
    when a column holds values that JSON cannot carry exactly (dates, timestamps)."""
    import pandas as pd

    tables = []
    for a in answers:
        columns = []
        for name in a.df.columns:
            series = a.df[name]
            if isinstance(series.dtype, np.dtype) and series.dtype.kind in "biuf":  # plain numpy: its bytes
                columns.append([name, series.dtype.str, {"bytes": base64.b64encode(series.to_numpy().tobytes())
                                                         .decode("ascii")}])
                continue
            values = [None if v is pd.NA or v is pd.NaT else _json_value(v) for v in series.tolist()]
            if not all(v is None or type(v) in (str, int, float, bool, dict) for v in values):
                return None
            columns.append([name, str(series.dtype), values])
        tables.append({"sql": a.sql, "columns": columns, "errors": a.errors, "notes": list(a.notes)})
    text = json.dumps({"release": dataclasses.asdict(answers[0].release), "tables": tables}, allow_nan=False)
    try:
        for a, b in zip(answers, _decode(text)):
            pd.testing.assert_frame_equal(a.df, b.df, check_exact=True)
    except (AssertionError, TypeError, ValueError):
        return None
    return text


def _json_value(v: Any) -> Any:
    """One value of an object column as JSON carries it exactly: NaN and infinities, which JSON has not, as
    ``{"float": "nan"}``; a day or a time of day as its ISO text."""
    if type(v) is float and not math.isfinite(v):
        return {"float": repr(v)}
    if isinstance(v, datetime.datetime):  # pandas' Timestamp too (a column of datetime64)
        return {"datetime": v.isoformat()}
    if isinstance(v, datetime.date):
        return {"date": v.isoformat()}
    return v


def _value(v: Any) -> Any:
    """A stored value back (see :func:`_json_value`)."""
    if not isinstance(v, dict):
        return v
    if "date" in v:
        return datetime.date.fromisoformat(v["date"])
    if "datetime" in v:
        return datetime.datetime.fromisoformat(v["datetime"])
    return float(v["float"])


def _decode(text: str) -> "list[Answer]":
    import pandas as pd

    data = json.loads(text)
    release = dataclasses.replace(Release(**data["release"]), repeated=True)
    out = []
    for t in data["tables"]:
        frame = pd.DataFrame({name: _column(dtype, values) for name, dtype, values in t["columns"]})
        out.append(Answer(t["sql"], frame, release, {k: tuple(v) for k, v in t["errors"].items()},
                          tuple(t.get("notes", ()))))
    return out


def _column(dtype: str, values: "list | dict") -> "pd.Series":
    """One stored column back: a plain numpy column from its bytes, any other from its JSON values."""
    import pandas as pd

    if isinstance(values, dict):
        return pd.Series(np.frombuffer(base64.b64decode(values["bytes"]), dtype=np.dtype(dtype)).copy())
    return pd.Series([_value(v) for v in values], dtype=dtype)


class Repeats:
    """The releases of one ledger's requests, by analyst and request key (see the module docstring)."""

    def __init__(self, ledger_path: str | None) -> None:
        self._path = None if ledger_path is None else f"{ledger_path}.released"
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def _connection(self, create: bool) -> sqlite3.Connection | None:
        if self._conn is None and (create or self._path is None or os.path.exists(self._path)):
            if self._path is not None:  # readable by its owner only: it holds every analyst's releases
                os.close(os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600))
            conn = sqlite3.connect(self._path or ":memory:", timeout=_BUSY_TIMEOUT, check_same_thread=False)
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute(_SCHEMA)
            conn.commit()
            self._conn = conn
        return self._conn

    def get(self, ledger: "Ledger | Account", key: str) -> "list[Answer] | None":
        """The answers released before for ``key`` to ``ledger``'s analyst, marked repeated; None when there
        are none, or when their ledger entry is no longer that analyst's in ``ledger``."""
        with self._lock:
            conn = self._connection(create=False)
            if conn is None:
                return None
            row = conn.execute("SELECT entry, time, answers FROM releases WHERE analyst = ? AND key = ?",
                               (_analyst(ledger), key)).fetchone()
        if row is None:
            return None
        entry, time, text = row
        recorded = ledger.entry(entry)  # that entry only, unless it changed since this ledger verified it
        if recorded is None or recorded.time != time or recorded.analyst != _analyst(ledger):
            return None
        return _decode(text)

    def put(self, ledger: "Ledger | Account", key: str, answers: "list[Answer]") -> None:
        """Keep ``answers`` (one request's, released under one ledger entry) for ``key``. Best effort: the
        answers are released whether or not they can be kept (a repeat is then measured anew). Their
        release names its ledger entry (id and time, from the kernel's spend): nothing is read from the ledger."""
        release = answers[0].release
        text = _encode(answers)
        if text is None:
            return
        with self._lock:
            try:
                conn = self._connection(create=True)
                assert conn is not None
                with conn:
                    conn.execute("INSERT OR REPLACE INTO releases VALUES (?, ?, ?, ?, ?)",
                                 (_analyst(ledger), key, release.entry, release.time, text))
            except (OSError, sqlite3.Error):
                return

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _analyst(ledger: "Ledger | Account") -> str:
    """Whose releases: an account's analyst, or the owner (``''``) for the ledger itself."""
    return getattr(ledger, "analyst", "")
