"""Parsing: SQL text to sqlglot syntax trees, with positions.

One public function, :func:`parse_statements`. It splits a text (one
statement, or a batch file of ``;``-separated statements) into statements,
strips BigQuery's ``WITH DIFFERENTIAL_PRIVACY OPTIONS(...)`` clause (keeping
its values), parses each statement with sqlglot's DuckDB dialect, and keeps
enough to turn any syntax-tree node back into a line and column of the
original text. A syntax error becomes :class:`dpsql.errors.ParseError`.

>>> [s.sql for s in parse_statements("SELECT COUNT(*) FROM t;\\nSELECT 1 FROM t")]
['SELECT COUNT(*) FROM t', 'SELECT 1 FROM t']
>>> parse_statements("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=0.5) COUNT(*) FROM t")[0].options
{'epsilon': 0.5}
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.dialects import Dialect
from sqlglot.errors import ParseError as _SqlglotParseError
from sqlglot.errors import TokenError as _SqlglotTokenError
from sqlglot.tokens import TokenType

from ..errors import ParseError, UnsupportedSQLError

__all__ = ["Source", "Statement", "parse_statements"]

DIALECT = "duckdb"

_DP_CLAUSE = re.compile(
    r"\bSELECT(\s+WITH\s+DIFFERENTIAL_PRIVACY\s+OPTIONS\s*\(([^()]*)\))", re.IGNORECASE
)
_DP_OPTIONS = {"epsilon", "delta"}


@dataclass
class Source:
    """The text being compiled, and its tokens, for turning offsets into
    1-based (line, column) positions."""

    text: str
    tokens: list = field(default_factory=list)

    def __post_init__(self) -> None:
        self._line_starts = [0] + [i + 1 for i, ch in enumerate(self.text) if ch == "\n"]

    def position(self, offset: int | None) -> tuple[int | None, int | None]:
        """1-based (line, column) of a character offset."""
        if offset is None:
            return None, None
        import bisect

        line = bisect.bisect_right(self._line_starts, offset) - 1
        return line + 1, offset - self._line_starts[line] + 1

    def token_before(self, offset: int, types: set) -> int | None:
        """Offset of the last token of one of ``types`` that starts before ``offset``."""
        best = None
        for tok in self.tokens:
            if tok.start >= offset:
                break
            if tok.token_type in types:
                best = tok.start
        return best

    def token_after(self, offset: int, types: set) -> int | None:
        """Offset of the first token of one of ``types`` at or after ``offset``."""
        for tok in self.tokens:
            if tok.start >= offset and tok.token_type in types:
                return tok.start
        return None


@dataclass
class Statement:
    """One parsed statement: its syntax tree, its SQL, the DP options given
    inline (``epsilon``, ``delta``), and its offset in the source text."""

    tree: exp.Expression
    sql: str
    options: dict[str, Any]
    source: Source
    offset: int

    def offset_of(self, node: exp.Expression) -> int | None:
        """Absolute offset of the earliest token inside ``node``."""
        best = None
        for sub in node.walk():
            meta = getattr(sub, "_meta", None)
            start = meta.get("start") if meta else None
            if start is not None and (best is None or start < best):
                best = start
        return None if best is None else best + self.offset

    def position(self, node: exp.Expression | None) -> tuple[int | None, int | None]:
        """1-based (line, column) of ``node`` in the source text."""
        if node is None:
            return self.source.position(self.offset)
        off = self.offset_of(node)
        if isinstance(node, exp.Join):
            kw = self.source.token_before(off if off is not None else 10**12,
                                          {TokenType.JOIN, TokenType.COMMA})
            off = kw if kw is not None else off
        elif isinstance(node, (exp.Subquery, exp.Select)) and node is not self.tree:
            kw = self.source.token_before(off if off is not None else 10**12, {TokenType.L_PAREN})
            off = kw if kw is not None else off
        elif isinstance(node, exp.Func) and not getattr(node, "_meta", None) and off is not None:
            # function nodes carry no position: use the last token spelling the name
            name = node.sql_name().upper() if not isinstance(node, exp.Anonymous) else str(node.this).upper()
            found = None
            for tok in self.source.tokens:
                if tok.start > off:
                    break
                if tok.start >= self.offset and tok.text.upper() == name:
                    found = tok.start
            off = found if found is not None else off
        elif isinstance(node, exp.Case) and off is not None:
            kw = self.source.token_before(off + 1, {TokenType.CASE})
            off = kw if kw is not None else off
        elif isinstance(node, exp.Placeholder):
            kw = self.source.token_after(self.offset, {TokenType.PLACEHOLDER})
            off = kw if kw is not None else off
        if off is None:
            off = self.offset
        return self.source.position(off)


def _blank(text: str, start: int, end: int) -> str:
    """Replace text[start:end] with spaces, keeping newlines (so offsets hold)."""
    middle = "".join(ch if ch == "\n" else " " for ch in text[start:end])
    return text[:start] + middle + text[end:]


def _parse_options(raw: str, source: Source, offset: int) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        m = re.fullmatch(r"([A-Za-z_]+)\s*=\s*([-+0-9.eE]+)", part)
        line, col = source.position(offset)
        if not m:
            raise UnsupportedSQLError(f"cannot read DIFFERENTIAL_PRIVACY option {part!r}; "
                                      "expected name=number", "DIFFERENTIAL_PRIVACY OPTIONS", line, col)
        name = m.group(1).lower()
        if name not in _DP_OPTIONS:
            raise UnsupportedSQLError(f"unknown DIFFERENTIAL_PRIVACY option {m.group(1)!r} "
                                      f"(supported: {', '.join(sorted(_DP_OPTIONS))})",
                                      "DIFFERENTIAL_PRIVACY OPTIONS", line, col)
        try:
            opts[name] = float(m.group(2))
        except ValueError:
            raise UnsupportedSQLError(f"option {name} must be a number", "DIFFERENTIAL_PRIVACY OPTIONS",
                                      line, col) from None
    return opts


def parse_statements(text: str) -> list[Statement]:
    """Split ``text`` into statements and parse each with sqlglot (DuckDB dialect).

    Empty statements (stray ``;``) and comments are skipped. Raises
    :class:`~dpsql.errors.ParseError` with the line and column of the first
    syntax error.
    """
    if not isinstance(text, str):
        raise TypeError(f"SQL must be a string, got {type(text).__name__}")
    original = Source(text)
    options_at: dict[int, dict[str, Any]] = {}
    work = text
    for m in _DP_CLAUSE.finditer(text):
        options_at[m.start()] = _parse_options(m.group(2), original, m.start(1))
        work = _blank(work, m.start(1), m.end(1))

    dialect = Dialect.get_or_raise(DIALECT)
    try:
        tokens = dialect.tokenize(work)
    except _SqlglotTokenError as exc:
        off = _bad_token_offset(work)
        line, col = original.position(off)
        raise ParseError(f"cannot read the SQL text ({_first_line(str(exc))}); "
                         "check for an unterminated string or quoted name", "token", line, col) from None
    original.tokens = tokens

    chunks: list[tuple[int, int]] = []
    start = None
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            if start is not None:
                chunks.append((start, tok.start))
            start = None
        elif start is None:
            start = tok.start
    if start is not None:
        chunks.append((start, len(work)))

    statements: list[Statement] = []
    for begin, end in chunks:
        chunk = work[begin:end]
        try:
            trees = sqlglot.parse(chunk, read=DIALECT)
        except _SqlglotParseError as exc:
            err = exc.errors[0] if exc.errors else {}
            line, col = _chunk_position(original, begin, chunk, err)
            desc = err.get("description") or _first_line(str(exc))
            desc = re.sub(r"<Token token_type: TokenType\.(\w+), text: ([^,]*),.*?>", r"\2", desc)
            raise ParseError(f"syntax error: {desc}", err.get("highlight") or "syntax", line, col) from None
        except RecursionError:
            line, col = original.position(begin)
            raise ParseError("this statement is nested too deeply to parse", "nesting", line, col) from None
        except _SqlglotTokenError as exc:  # pragma: no cover - caught above
            line, col = original.position(begin)
            raise ParseError(f"cannot read the SQL text ({_first_line(str(exc))})", "token", line, col) from None
        trees = [t for t in trees if t is not None]
        if not trees:
            continue
        tree = trees[0]
        opts = {}
        for at, o in options_at.items():
            if begin <= at < end:
                opts = o
        try:
            sql = tree.sql(dialect=DIALECT)
        except RecursionError:
            line, col = original.position(begin)
            raise ParseError("this statement is nested too deeply to parse", "nesting", line, col) from None
        statements.append(Statement(tree=tree, sql=sql, options=opts, source=original, offset=begin))
    return statements


def _chunk_position(source: Source, begin: int, chunk: str, err: dict) -> tuple[int | None, int | None]:
    line, col = err.get("line"), err.get("col")
    if line is None or col is None:
        return source.position(begin)
    lines = chunk.split("\n")
    line_off = sum(len(x) + 1 for x in lines[: line - 1])
    hl = err.get("highlight") or ""
    start_col = max(1, col - len(hl) + 1) if hl else col
    return source.position(begin + line_off + start_col - 1)


def _bad_token_offset(text: str) -> int | None:
    """Best guess at where tokenizing failed: an unclosed quote."""
    for quote in ("'", '"'):
        idx = [i for i, ch in enumerate(text) if ch == quote]
        if len(idx) % 2 == 1:
            return idx[-1]
    return None


def _first_line(msg: str) -> str:
    return msg.strip().split("\n")[0]
