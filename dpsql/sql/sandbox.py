"""The DuckDB that compiles and post-processes: public values only, no file access.

Two public functions. :func:`cursor` opens a cursor on one process-wide in-memory
DuckDB that never holds private data: the compiler evaluates expressions on the
declared domain in it (:mod:`dpsql.sql.domain_eval`), and post-processing runs
HAVING and ORDER BY on noisy answers in it (:mod:`dpsql.sql.postprocess`). Like
the analyst's DuckDB (:mod:`dpsql.released`) it cannot read or write files,
load extensions or change those settings; its time zone is fixed (UTC), so a
date function gives the same value on every machine.

:func:`check_deterministic` refuses SQL whose value could change from one run
to the next: a function DuckDB marks volatile (``random()``, ``uuid()``,
``nextval``) or one that reads the session (``now()``, ``current_date``,
``current_setting``), or a name other than the expected columns (DuckDB reads
``current_date`` or ``localtime`` as a name and binds it to the clock). A compiled query is a matrix over the domain, fixed once
compiled, so its expressions must be functions of their arguments alone.

>>> check_deterministic("lower(c0) LIKE 'b%'", {"c0"})
>>> check_deterministic("random() < 0.5", set())
Traceback (most recent call last):
...
ValueError: random() is not deterministic: DuckDB may give it a different value on every call
"""

from __future__ import annotations

import json
import threading
from typing import Any, Iterator

import duckdb

from dpsql.released import locked_database

__all__ = ["cursor", "check_deterministic", "aggregate_names"]

_LOCK = threading.Lock()
_DATABASE: list[duckdb.DuckDBPyConnection] = []
_NAMES: dict[str, frozenset[str]] = {}  # function names by their duckdb_functions() condition

#: Functions DuckDB does not mark volatile that still read the session or the clock.
_SESSION = frozenset({"getvariable", "in_search_path", "now", "today", "transaction_timestamp", "txid_current"})
_SESSION_PREFIXES = ("current_", "get_current_")


def cursor() -> duckdb.DuckDBPyConnection:
    """A new cursor on the process-wide sandbox DuckDB (a cursor is ten times cheaper than a
    connection; each has its own registered views, so threads do not share state). Close it
    after use."""
    with _LOCK:
        if not _DATABASE:
            _DATABASE.append(locked_database("SET TimeZone = 'UTC'"))
        return _DATABASE[0].cursor()


def _function_names(condition: str) -> frozenset[str]:
    """The names (lower case) of DuckDB's functions that meet ``condition`` on
    ``duckdb_functions()``, read once per process."""
    with _LOCK:
        cached = _NAMES.get(condition)
    if cached is None:
        con = cursor()
        try:
            rows = con.execute(f"SELECT DISTINCT function_name FROM duckdb_functions() WHERE {condition}").fetchall()
        finally:
            con.close()
        with _LOCK:
            cached = _NAMES.setdefault(condition, frozenset(r[0].lower() for r in rows))
    return cached


def aggregate_names() -> frozenset[str]:
    """The names (lower case) of DuckDB's aggregate functions, such as ``mode`` or ``string_agg``:
    a call sqlglot does not know is still recognized as an aggregate."""
    return _function_names("function_type = 'aggregate'")


def _functions(tree: Any) -> Iterator[tuple[str, str]]:
    """``(class, function name)`` of every node of DuckDB's serialized parse tree (a loop, not
    recursion: a deep expression does not overflow the stack)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "class" in node:
                names = node.get("column_names") or [node.get("function_name", "")]
                yield str(node["class"]), ".".join(str(n) for n in names)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def check_deterministic(sql: str, columns: set[str]) -> None:
    """Raise ValueError, naming the function, unless the scalar expression ``sql`` (DuckDB's
    dialect) calls deterministic functions only, reads no subquery and names no column but
    ``columns`` (lower case). DuckDB's own parser names the functions, so a spelling sqlglot does not know
    is still caught."""
    con = cursor()
    try:
        text = con.execute("SELECT json_serialize_sql(?)", [f"SELECT {sql}"]).fetchone()[0]
    finally:
        con.close()
    refused = _function_names("stability = 'VOLATILE'") | _SESSION
    tree = json.loads(text)
    if tree.get("error"):
        raise ValueError(f"DuckDB cannot parse it ({str(tree.get('error_message', ''))[:200]})")
    for cls, name in _functions(tree.get("statements", [])):
        if cls == "SUBQUERY":
            raise ValueError("a subquery reads a table")
        if cls == "COLUMN_REF":
            if name.lower() not in columns:
                raise ValueError(f"{name} is not a column of the domain (DuckDB would read it from the session "
                                 "or the clock)")
            continue  # a column, even one named like a session function ("current_date")
        lowered = name.lower()
        if lowered in refused or lowered.startswith(_SESSION_PREFIXES):
            raise ValueError(f"{name}() is not deterministic: DuckDB may give it a different value on every call")
