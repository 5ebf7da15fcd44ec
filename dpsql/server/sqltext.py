"""Where the ``$n`` parameters of an extended-protocol statement are, and replacing them with SQL literals.

The protocol layer does not parse SQL, but it must find ``$1``, ``$2``, ... in a statement's text to put the
bound values in, and it must not touch a ``$1`` that is part of a string, a quoted identifier, a dollar-quoted
string or a comment, or a dollar inside an identifier (``a$1``). This scanner follows PostgreSQL's lexical rules
for those five constructs only: ``'...'`` with ``''`` escapes (and backslash escapes in ``E'...'``),
``"..."`` with ``""``, ``$tag$...$tag$``, ``-- ...`` to the end of the line and nested ``/* ... */``.
An unterminated one runs to the end of the text (the session's parser then reports it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dpsql.server.pgerror import PgError

MAX_PARAMETER = 65535  # the protocol counts parameters in an Int16
_PARAM = re.compile(r"\$(\d+)")
_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_\u0080-\U0010ffff][\w\u0080-\U0010ffff]*)?\$")


@dataclass(frozen=True)
class Placeholders:
    """The ``$n`` in a statement: ``spots`` are (start, end, n) in text order; ``empty`` is true when the text
    holds nothing but whitespace, semicolons and comments (PostgreSQL's empty query)."""

    spots: tuple[tuple[int, int, int], ...]
    empty: bool

    @property
    def count(self) -> int:
        """The highest parameter number used, 0 if none."""
        return max((n for _, _, n in self.spots), default=0)


def scan(sql: str) -> Placeholders:
    """Find the ``$n`` parameters of ``sql`` outside strings, quoted identifiers and comments."""
    spots = []
    empty = True
    i, end = 0, len(sql)
    while i < end:
        c = sql[i]
        if c == "'":
            escapes = i > 0 and sql[i - 1] in "eE" and (i < 2 or not _identifier_char(sql[i - 2]))
            i, empty = _after_quote(sql, i, "'", escapes), False
        elif c == '"':
            i, empty = _after_quote(sql, i, '"', False), False
        elif sql.startswith("--", i):
            newline = sql.find("\n", i)
            i = end if newline < 0 else newline + 1
        elif sql.startswith("/*", i):
            i = _after_comment(sql, i)
        elif c == "$" and not (i > 0 and _identifier_char(sql[i - 1])):
            empty = False
            if param := _PARAM.match(sql, i):
                digits = param.group(1)
                number = int(digits) if len(digits) <= 6 else MAX_PARAMETER + 1
                if not 1 <= number <= MAX_PARAMETER:
                    raise PgError("42P02", f"there is no parameter ${digits} (parameters are $1 to ${MAX_PARAMETER})",
                                  position=i + 1)
                spots.append((i, param.end(), number))
                i = param.end()
            elif tag := _DOLLAR_TAG.match(sql, i):
                close = sql.find(tag.group(0), tag.end())
                i = end if close < 0 else close + len(tag.group(0))
            else:
                i += 1
        else:
            if empty and not c.isspace() and c != ";":
                empty = False
            i += 1
    return Placeholders(tuple(spots), empty)


def substitute(sql: str, spots: Placeholders, literals: list[str], max_length: int) -> str:
    """``sql`` with each ``$n`` replaced by ``literals[n - 1]``; a :class:`PgError` (54000) if the result would
    be longer than ``max_length`` characters (a short statement repeating ``$1`` must not blow up memory)."""
    parts, length, last = [], 0, 0
    for start, stop, number in spots.spots:
        piece = sql[last:start] + literals[number - 1]
        length += len(piece)
        if length > max_length:
            raise PgError("54000", f"statement is longer than {max_length} characters after parameter substitution")
        parts.append(piece)
        last = stop
    parts.append(sql[last:])
    if length + len(parts[-1]) > max_length:
        raise PgError("54000", f"statement is longer than {max_length} characters after parameter substitution")
    return "".join(parts)


def original_position(spots: Placeholders, literals: list[str], position: int) -> int:
    """The 1-based position in the text the client sent of ``position`` in the substituted text (a position
    inside a substituted literal maps to its ``$n``)."""
    shift = 0
    for start, stop, number in spots.spots:
        new_start, size = start + shift, len(literals[number - 1])
        if position - 1 < new_start:
            break
        if position - 1 < new_start + size:
            return start + 1
        shift += size - (stop - start)
    return position - shift


def _identifier_char(c: str) -> bool:
    return c.isalnum() or c in "_$" or ord(c) >= 0x80


def _after_quote(sql: str, i: int, quote: str, backslash_escapes: bool) -> int:
    """The index just past the quoted run that opens at ``sql[i]``."""
    j, end = i + 1, len(sql)
    while j < end:
        if backslash_escapes and sql[j] == "\\":
            j += 2
        elif sql[j] == quote:
            if j + 1 < end and sql[j + 1] == quote:
                j += 2
            else:
                return j + 1
        else:
            j += 1
    return end


def _after_comment(sql: str, i: int) -> int:
    """The index just past the (nested) block comment that opens at ``sql[i]``."""
    depth, j, end = 0, i, len(sql)
    while j < end:
        if sql.startswith("/*", j):
            depth, j = depth + 1, j + 2
        elif sql.startswith("*/", j):
            depth, j = depth - 1, j + 2
            if depth == 0:
                return j
        else:
            j += 1
    return end
