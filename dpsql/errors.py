"""The dpsql error hierarchy.

Every error dpsql raises on purpose derives from :class:`Error`, so callers can
catch one class. Messages are built only from public inputs (SQL text, schema,
workload shapes, budgets) and never from the private data.
"""

from __future__ import annotations

import difflib
from typing import Iterable


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean hours_per_week?)``, naming the one of the ``known`` names nearest to
    ``name``, ignoring case: the closest spelling (:func:`difflib.get_close_matches`), else the
    shortest name one of whose ``_``-separated words starts with ``name``; '' when none is near.
    Messages call it with public names only (the schema's, DuckDB's functions), never data.

    >>> did_you_mean("hours", ["age", "hours_per_week"]), did_you_mean("agee", ["age", "sex"])
    (' (did you mean hours_per_week?)', ' (did you mean age?)')
    >>> did_you_mean("zip", ["age", "sex"])
    ''
    """
    names = {k.lower(): k for k in known}
    wanted = name.lower()
    if not wanted or wanted in names:
        return ""
    close = difflib.get_close_matches(wanted, list(names), n=1, cutoff=0.7)
    if not close and len(wanted) >= 3:
        close = sorted((k for k in names if any(word.startswith(wanted) for word in k.split("_"))), key=len)[:1]
    return f" (did you mean {names[close[0]]}?)" if close else ""


class Error(Exception):
    """Base class of every dpsql error."""


class ArgumentError(Error):
    """An argument of a dpsql call has the wrong type or value (e.g. ``confidence=2``), found
    before anything is read or spent."""


class WorkloadError(Error):
    """A workload or strategy is malformed: shapes that do not line up, a
    strategy that cannot answer the workload, an unknown operator."""


class PrivacyError(Error):
    """Invalid privacy parameters (epsilon, delta, rho) or noise settings."""


class CacheError(Error):
    """The strategy cache could not be read or written."""


class _FileProblems(Error):
    """Every mistake of one file, as ``(path, message)`` pairs, so a user can fix them all in one pass."""

    what = "file"

    def __init__(self, problems: "list[tuple[str, str]]", source: "str | None" = None) -> None:
        self.problems = list(problems)
        self.source = source
        head = f"{source}: " if source else ""
        count = len(self.problems)
        lines = [f"{head}{count} {self.what} problem{'s' if count != 1 else ''}:"]
        lines += [f"  {path or '<root>'}: {message}" for path, message in self.problems]
        super().__init__("\n".join(lines))


class SchemaError(_FileProblems):
    """A schema file or dict is invalid. ``problems`` lists every mistake as
    ``(path, message)`` pairs, e.g. ``("columns.age.max", "must be >= min")``,
    so a user can fix them all in one pass."""

    what = "schema"


class ConfigError(_FileProblems):
    """A ``dpsql serve`` configuration file is invalid; ``problems`` as for :class:`SchemaError`."""

    what = "configuration"


class SQLError(Error):
    """A SQL statement cannot be compiled. ``construct`` names the offending
    piece of SQL (``"JOIN"``, ``"column 'foo'"``), ``line`` and ``column`` are
    1-based positions in the text that was compiled (a whole batch file, when
    compiling a file), or None when no position is known; ``item`` is that
    text's 1-based place in a batch given as a list of several texts."""

    def __init__(self, message: str, construct: "str | None" = None,
                 line: "int | None" = None, column: "int | None" = None, item: "int | None" = None) -> None:
        self.reason = message
        self.construct = construct
        self.line = line
        self.column = column
        self.item = item
        where = f" at line {line}, column {column}" if line is not None else ""
        if item is not None:
            where += f" {'of' if line is not None else 'in'} item {item} of the batch"
        super().__init__(f"{message}{where}")

    def in_item(self, item: int) -> "SQLError":
        """The same error, placed in item ``item`` of a batch given as a list of texts."""
        err = type(self).__new__(type(self))
        SQLError.__init__(err, self.reason, self.construct, self.line, self.column, item)
        return err


class ParseError(SQLError):
    """The text is not valid SQL at all (a syntax error)."""


class UnsupportedSQLError(SQLError):
    """Valid SQL, but outside dpsql's grammar (see ``grammar/dpsql.ebnf``):
    JOIN, subquery, window function, a second table, an unsupported function."""


class UnknownColumnError(SQLError):
    """A column or table that the schema does not declare."""


class DomainError(SQLError):
    """A literal outside the declared domain of its column, a literal of the
    wrong type, or a predicate that the public domain cannot express exactly
    (e.g. a cut inside a numeric bin)."""


class GroupingError(SQLError):
    """A non-aggregate select item that is not a GROUP BY key, or a bad
    GROUP BY / ORDER BY reference."""


class BudgetExceededError(PrivacyError):
    """A spend would exceed the privacy budget; nothing was recorded.

    ``requested``, ``spent`` and ``remaining`` are the :class:`dpsql.private.budget.Cost`
    of the refused request, the total already recorded, and what the budget
    still allows (None when not known)."""

    def __init__(self, message: str, requested: object = None, spent: object = None,
                 remaining: object = None) -> None:
        self.requested = requested
        self.spent = spent
        self.remaining = remaining
        super().__init__(message)


class ResourceLimitError(Error):
    """A request too large to answer within dpsql's memory and time limits
    (:mod:`dpsql.limits`), refused before anything is read or spent. The
    message estimates the size from public inputs (SQL text, schema) only."""


class LedgerError(Error):
    """The privacy-budget ledger file is unusable, corrupt, not a dpsql
    ledger, or was created with a different budget."""


class MeasurementError(Error):
    """Counting the private table failed (a missing table or column, or a
    database error). The message names the table and, for schema-level
    problems only, repeats the database's message; it never holds data values."""


class DependencyError(Error, ImportError):
    """An optional package that a call needs is not installed; the message names it and the
    ``pip install`` that adds it."""
