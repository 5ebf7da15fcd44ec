"""The DuckDB that compiles and post-processes: public values only, no file access, bounded cost.

:func:`cursor` opens a cursor on one process-wide in-memory DuckDB that
never holds private data: the compiler evaluates expressions on the declared
domain in it (:mod:`dpsql.sql.domain_eval`), and post-processing runs HAVING
and ORDER BY on noisy answers in it (:mod:`dpsql.sql.postprocess`). Like the
analyst's DuckDB (:mod:`dpsql.released`) it cannot read or write files, load
extensions or change those settings; its time zone is fixed (UTC), so a date
function gives the same value on every machine.

Its cost is bounded three ways, because post-processing runs after the charge
and must not fail then, and compiling must not take the machine:

* the database runs each query on one thread, under a ``memory_limit`` of
  :data:`dpsql.limits.MAX_EVAL_MEMORY_MIB`;
* :func:`limited` gives a cursor that is interrupted after
  :data:`dpsql.limits.MAX_EVAL_SECONDS` (DuckDB has no statement timeout) and
  turns a timeout or DuckDB's out-of-memory error into
  :class:`~dpsql.limits.EvaluationLimitError`;
* :func:`check_bounded` admits only functions whose result is no larger than
  their inputs, because DuckDB does not count a string or list it builds
  against ``memory_limit`` (``len(range(n))`` took 14 GB under a 500 MB
  limit). The rule is an allow-list: every DuckDB scalar function whose every
  overload returns a fixed-width type (a number, boolean, date, time,
  interval or UUID), plus :data:`LINEAR`, functions and operators whose result
  is at most the sum of their inputs' sizes plus a constant (``||``,
  ``lower``, ``substr``, ``trim``, ``list_value``...). So ``repeat``,
  ``lpad``, ``rpad``, ``range``, ``generate_series``, ``list_resize``,
  ``unnest``, ``format``, ``printf``, ``bar``, ``to_base``, ``hex``, ``bin``
  (which build a value from a number or multiply its length), ``replace``,
  ``regexp_replace`` and ``concat_ws`` (whose result can be a product of
  their inputs' sizes), lambdas and ``error()`` are refused. Nested allowed
  functions add up their inputs, so an expression's values are at most as
  long as its text times the longest domain value, whatever the noisy
  answers: an expression that fits when compiled fits when released.

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
>>> check_bounded("SELECT upper(c0) || '!' , abs(n) FROM answers")
>>> check_bounded("SELECT len(range(n::BIGINT * 100000)) FROM answers")
Traceback (most recent call last):
...
ValueError: range() can build a value larger than its arguments (from a number or by multiplying them), which dpsql does not evaluate
"""

from __future__ import annotations

import contextlib
import functools
import json
import threading
from typing import Any, Iterator

import duckdb

from dpsql import limits
from dpsql.released import locked_database

__all__ = ["cursor", "limited", "check_deterministic", "check_bounded", "bounded_names", "aggregate_names", "LINEAR"]

_LOCK = threading.Lock()
_DATABASE: list[duckdb.DuckDBPyConnection] = []
_NAMES: dict[str, frozenset[str]] = {}  # function names by their duckdb_functions() condition

#: Functions DuckDB does not mark volatile that still read the session or the clock.
_SESSION = frozenset({"getvariable", "in_search_path", "now", "today", "transaction_timestamp", "txid_current"})
_SESSION_PREFIXES = ("current_", "get_current_")

#: DuckDB's fixed-width result types: a function that returns only these cannot build large values.
_FIXED_TYPES = ("BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
                "UINTEGER", "UBIGINT", "UHUGEINT", "FLOAT", "DOUBLE", "DECIMAL", "DATE", "TIME", "TIME_NS",
                "TIMESTAMP", "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS", "TIMESTAMP WITH TIME ZONE",
                "TIMESTAMPTZ_NS", "TIME WITH TIME ZONE", "INTERVAL", "UUID")

#: Functions and operators (DuckDB's names) with a variable-size result no larger than the sum of
#: their inputs' sizes plus a constant: each input is used once, never repeated or padded to a
#: length given by a number. Reviewed one by one; anything not here or fixed-width is refused.
LINEAR = frozenset({
    "||", "concat", "+", "-", "add", "subtract", "&", "|", "<<", ">>", "xor", "~",  # BIT keeps its length
    "lower", "upper", "lcase", "ucase", "substr", "substring", "substring_grapheme", "left", "right",
    "left_grapheme", "right_grapheme", "trim", "ltrim", "rtrim", "reverse", "strip_accents", "nfc_normalize",
    "translate", "regexp_extract", "split_part", "md5", "sha1", "sha256", "monthname", "dayname", "strftime",
    "chr", "typeof", "greatest", "least", "nullif", "if", "fdiv", "date_part", "datepart", "date_add",
    "string_split", "str_split", "split", "string_to_array", "string_split_regex", "str_split_regex",
    "regexp_split_to_array", "list_value", "list_pack", "array_value", "struct_pack", "row", "list_extract",
    "list_element", "array_extract", "list_slice", "array_slice", "list_concat", "list_cat", "array_cat",
    "array_concat", "list_sort", "array_sort", "list_reverse_sort", "array_reverse_sort", "list_distinct",
    "array_distinct",
})


def cursor() -> duckdb.DuckDBPyConnection:
    """A new cursor on the process-wide sandbox DuckDB (a cursor is ten times cheaper than a
    connection; each has its own registered views, so threads do not share state). Close it
    after use."""
    with _LOCK:
        if not _DATABASE:
            _DATABASE.append(locked_database("SET TimeZone = 'UTC'", "SET threads = 1",
                                             f"SET memory_limit = '{limits.MAX_EVAL_MEMORY_MIB}MiB'"))
        return _DATABASE[0].cursor()


@contextlib.contextmanager
def limited(what: str, construct: str = "evaluation", line: "int | None" = None,
            column: "int | None" = None) -> Iterator[duckdb.DuckDBPyConnection]:
    """A new sandbox cursor, interrupted once the block has run :data:`dpsql.limits.MAX_EVAL_SECONDS`
    and closed at its end. DuckDB's interruption or its out-of-memory error in the block becomes
    :func:`dpsql.limits.evaluation_error` about ``what`` (placed at ``construct``, ``line``,
    ``column``); any other error passes through."""
    con = cursor()
    guard = threading.Lock()
    state = {"open": True, "fired": False}

    def interrupt() -> None:
        with guard:
            if state["open"]:
                state["fired"] = True
                con.interrupt()

    timer = threading.Timer(limits.MAX_EVAL_SECONDS, interrupt)
    timer.daemon = True
    timer.start()
    try:
        yield con
    except duckdb.InterruptException:
        if not state["fired"]:
            raise
        raise limits.evaluation_error(what, "time", construct, line, column) from None
    except duckdb.OutOfMemoryException:
        raise limits.evaluation_error(what, "memory", construct, line, column) from None
    finally:
        with guard:
            state["open"] = False
        timer.cancel()
        con.close()


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


def function_names() -> frozenset[str]:
    """The names (lower case) of every function and macro DuckDB knows: a call of another name is
    a misspelling, refused before anything else is checked."""
    return _function_names("TRUE")


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


@functools.lru_cache(maxsize=2)  # check_bounded and check_deterministic of one expression parse it once
def _parsed(sql: str) -> str:
    """DuckDB's serialized parse tree of ``sql`` (JSON text, immutable)."""
    con = cursor()
    try:
        return con.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0]
    finally:
        con.close()


def bounded_names() -> frozenset[str]:
    """The names (lower case) of the functions :func:`check_bounded` admits: the fixed-width
    scalar functions, read from ``duckdb_functions()``, and :data:`LINEAR`."""
    types = ", ".join(f"'{t}'" for t in _FIXED_TYPES)
    fixed = _function_names(f"function_type = 'scalar' AND function_name NOT IN (SELECT function_name FROM "
                            f"duckdb_functions() WHERE function_type <> 'scalar' OR return_type IS NULL "
                            f"OR return_type NOT IN ({types}))")
    return fixed | LINEAR


def check_bounded(sql: str) -> None:
    """Raise ValueError, naming the function, unless every function and operator the statement
    ``sql`` (DuckDB's dialect) calls is admitted by the allow-list (see the module docstring):
    none can build a value larger than its inputs, so the statement costs the same whatever
    values it reads."""
    tree = json.loads(_parsed(sql))
    if tree.get("error"):
        raise ValueError(f"DuckDB cannot parse it ({str(tree.get('error_message', ''))[:200]})")
    allowed = bounded_names()
    for cls, name in _functions(tree.get("statements", [])):
        if cls == "LAMBDA":
            raise ValueError("a lambda (x -> ...) runs an expression per list element, which dpsql does not evaluate")
        if cls == "FUNCTION" and name.lower() not in allowed:
            raise ValueError(f"{name}() can build a value larger than its arguments (from a number or by "
                             "multiplying them), which dpsql does not evaluate")


def check_deterministic(sql: str, columns: set[str]) -> None:
    """Raise ValueError, naming the function, unless the scalar expression ``sql`` (DuckDB's
    dialect) calls deterministic functions only, reads no subquery and names no column but
    ``columns`` (lower case). DuckDB's own parser names the functions, so a spelling sqlglot does not know
    is still caught."""
    text = _parsed(f"SELECT {sql}")
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
