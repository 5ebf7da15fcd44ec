"""Parsing: SQL text to sqlglot syntax trees, with positions.

One public function, :func:`parse_statements`. It tokenizes a text (one
statement, or a batch file of ``;``-separated statements) with sqlglot's
DuckDB tokenizer, splits it into statements, reads and removes BigQuery's
``WITH DIFFERENTIAL_PRIVACY OPTIONS(...)`` clause (keeping its values), refuses
a statement nested deeper than :data:`dpsql.limits.MAX_SQL_DEPTH` (measured on
its tokens by :func:`nesting_depth`, before the recursive-descent parser sees
it), parses each statement, and keeps enough to turn any syntax-tree node back
into a line and column of the original text. A syntax error becomes
:class:`dpsql.errors.ParseError`, a bad option
:class:`dpsql.errors.UnsupportedSQLError`, too deep a nesting
:class:`dpsql.limits.NestingLimitError`.

The clause is recognised on tokens only, right after a statement's first
``SELECT``: text inside comments and string literals is never read as options
(sqlglot's parser does not know the clause in any dialect).

>>> [s.sql for s in parse_statements("SELECT COUNT(*) FROM t;\\nSELECT 1 FROM t")]
['SELECT COUNT(*) FROM t', 'SELECT 1 FROM t']
>>> parse_statements("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=0.5) COUNT(*) FROM t")[0].options
{'epsilon': 0.5}
>>> parse_statements("SELECT /* WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=9) */ COUNT(*) FROM t")[0].options
{}
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import sqlglot
from sqlglot import exp
from sqlglot.dialects import Dialect
from sqlglot.errors import ParseError as _SqlglotParseError
from sqlglot.errors import TokenError as _SqlglotTokenError
from sqlglot.tokens import Token, TokenType

from dpsql import limits
from dpsql.errors import ArgumentError, ParseError, UnsupportedSQLError

__all__ = ["Source", "Statement", "parse_statements", "nesting_depth", "explained", "transpiled", "read_dialect"]

DIALECT = "duckdb"

_DP_OPTIONS = {"epsilon", "delta", "privacy_unit_column"}
_DP = "DIFFERENTIAL_PRIVACY OPTIONS"


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
    inline (``epsilon``, ``delta``), its offset in the source text, and its text
    as written there, the DP clause blanked out (what DuckDB would read)."""

    tree: exp.Expression
    sql: str
    options: dict[str, Any]
    source: Source
    offset: int
    text: str = ""
    #: the statement in DuckDB's dialect, when it was written in another (``text`` is as written)
    transpiled: str | None = None

    @property
    def head(self) -> str:
        """:attr:`text` up to its first HAVING, ORDER BY, LIMIT, OFFSET, QUALIFY or WINDOW outside
        brackets: the clauses that say which columns the statement returns and what they read.

        >>> parse_statements("SELECT a, QUANTILE_CONT(x, 0.5 ORDER BY x) FROM t GROUP BY a HAVING a > 1")[0].head
        'SELECT a, QUANTILE_CONT(x, 0.5 ORDER BY x) FROM t GROUP BY a '
        """
        if self.transpiled is not None:  # DuckDB reads the transpiled text
            return _head(self.transpiled, Dialect.get_or_raise(DIALECT).tokenize(self.transpiled), 0)
        end = self.offset + len(self.text)
        return _head(self.text, [t for t in self.source.tokens if self.offset <= t.start < end], self.offset)

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
        if node is self.tree and not isinstance(node, exp.Select):  # a statement of another kind
            # a set operation at its keyword (its tokens start at its first SELECT's columns); any
            # other (EXPLAIN, a sqlglot Command) at its start
            kw = (self.source.token_after(self.offset, {TokenType.UNION, TokenType.EXCEPT, TokenType.INTERSECT})
                  if isinstance(node, exp.SetOperation) else None)
            off = kw if kw is not None else self.offset
        elif isinstance(node, exp.Join):
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
        elif isinstance(node, exp.TableSample) and off is not None:
            # point at TABLESAMPLE, or at USING of USING SAMPLE
            kw = self.source.token_before(off, {TokenType.TABLE_SAMPLE, TokenType.USING})
            off = kw if kw is not None else off
        elif isinstance(node, exp.Placeholder):
            kw = self.source.token_after(self.offset, {TokenType.PLACEHOLDER})
            off = kw if kw is not None else off
        if off is None:
            off = self.offset
        return self.source.position(off)


def _head(text: str, tokens: Sequence, offset: int) -> str:
    """``text`` (whose tokens are ``tokens``, at ``offset`` in theirs) up to its first tail clause
    outside brackets (see :attr:`Statement.head`)."""
    depth = 0
    for tok in tokens:
        if tok.token_type in _OPENERS:
            depth += 1
        elif tok.token_type in _CLOSERS:
            depth -= 1
        elif depth == 0 and tok.token_type in _TAIL:
            return text[:tok.start - offset]
    return text


def _blank(text: str, start: int, end: int) -> str:
    """Replace text[start:end] with spaces, keeping newlines (so offsets hold)."""
    middle = "".join(ch if ch == "\n" else " " for ch in text[start:end])
    return text[:start] + middle + text[end:]


# -- WITH DIFFERENTIAL_PRIVACY OPTIONS(...) ---------------------------------------------------

@dataclass
class _Clause:
    """One ``WITH DIFFERENTIAL_PRIVACY OPTIONS(...)`` clause: the index of the SELECT token it
    follows, the indices of its first and last tokens, and the options it gives."""

    select: int
    first: int
    last: int
    options: dict[str, Any]


def _is_clause_start(tokens: Sequence, i: int) -> bool:
    """Whether tokens[i] is a SELECT followed by ``WITH DIFFERENTIAL_PRIVACY``."""
    return (tokens[i].token_type == TokenType.SELECT and i + 2 < len(tokens)
            and tokens[i + 1].token_type == TokenType.WITH
            and tokens[i + 2].text.upper() == "DIFFERENTIAL_PRIVACY")


def _dp_clauses(tokens: Sequence, source: Source) -> list[_Clause]:
    """Every ``SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(name = number, ...)`` in the token stream,
    its options checked: only epsilon and delta, each once, epsilon finite and positive, delta
    finite in [0, 1). Tokens are sqlglot's, so comments and string literals are never read."""

    def fail(message: str, tok: Token) -> UnsupportedSQLError:
        line, col = source.position(tok.start)
        return UnsupportedSQLError(message, _DP, line, col)

    clauses = []
    for i in range(len(tokens)):
        if not _is_clause_start(tokens, i):
            continue
        j = i + 3
        if j + 1 >= len(tokens) or tokens[j].text.upper() != "OPTIONS" or tokens[j + 1].token_type != TokenType.L_PAREN:
            raise fail("WITH DIFFERENTIAL_PRIVACY must be followed by OPTIONS(epsilon = ..., delta = ...)",
                       tokens[min(j, len(tokens) - 1)])
        j += 2
        options: dict[str, Any] = {}
        while True:
            name_at = j
            j, name, value = _dp_option(tokens, j, fail)
            if name in options:
                raise fail(f"DIFFERENTIAL_PRIVACY option {name} is given twice", tokens[name_at])
            options[name] = value
            if j < len(tokens) and tokens[j].token_type == TokenType.COMMA:
                j += 1
                continue
            if j < len(tokens) and tokens[j].token_type == TokenType.R_PAREN:
                break
            raise fail("cannot read DIFFERENTIAL_PRIVACY OPTIONS: expected ',' or ')' after an option",
                       tokens[min(j, len(tokens) - 1)])
        clauses.append(_Clause(select=i, first=i + 1, last=j, options=options))
    return clauses


def _dp_option(tokens: Sequence, j: int, fail: Callable[[str, Token], UnsupportedSQLError]) -> tuple[int, str, Any]:
    """Read ``name = [sign] number`` (or ``privacy_unit_column = name``) at tokens[j]; return the
    next index, the name and the value. A number is any numeric literal DuckDB reads (``0.5``,
    ``.5``, ``5.``, ``5e-1``, ``1_000``)."""
    end = len(tokens)
    if j >= end or tokens[j].token_type not in (TokenType.VAR, TokenType.IDENTIFIER):
        raise fail("cannot read DIFFERENTIAL_PRIVACY option; expected name=number", tokens[min(j, end - 1)])
    name_tok = tokens[j]
    name = name_tok.text.lower()
    if name not in _DP_OPTIONS:
        raise fail(f"unknown DIFFERENTIAL_PRIVACY option {name_tok.text!r} "
                   f"(supported: {', '.join(sorted(_DP_OPTIONS))})", name_tok)
    if j + 1 >= end or tokens[j + 1].token_type != TokenType.EQ:
        raise fail(f"cannot read DIFFERENTIAL_PRIVACY option {name}; expected {name}=number", name_tok)
    if name == "privacy_unit_column":  # BigQuery's: checked against the schema's unit by the analyzer
        if j + 2 >= end or tokens[j + 2].token_type not in (TokenType.VAR, TokenType.IDENTIFIER):
            raise fail("DIFFERENTIAL_PRIVACY option privacy_unit_column must name a column", tokens[min(j + 2, end - 1)])
        return j + 3, name, tokens[j + 2].text
    k = j + 2
    sign = 1.0
    if k < end and tokens[k].token_type in (TokenType.DASH, TokenType.PLUS):
        sign = -1.0 if tokens[k].token_type == TokenType.DASH else 1.0
        k += 1
    text = ""
    if (k + 1 < end and tokens[k].token_type == TokenType.DOT and tokens[k + 1].token_type == TokenType.NUMBER
            and tokens[k + 1].start == tokens[k].end + 1 and tokens[k + 1].text[:1].isdigit()):
        text, k = ".", k + 1  # .01: sqlglot reads a dot and the number 01; DuckDB reads one literal
    if k >= end or tokens[k].token_type != TokenType.NUMBER:
        raise fail(f"DIFFERENTIAL_PRIVACY option {name} must be a number", tokens[min(k, end - 1)])
    value_tok = tokens[j + 2]
    text += tokens[k].text  # the tokenizer has dropped a literal's digit separators (1_000)
    try:
        value = sign * float(text)
    except ValueError:
        raise fail(f"DIFFERENTIAL_PRIVACY option {name} must be a number, not {text!r}", value_tok) from None
    if not math.isfinite(value):
        raise fail(f"DIFFERENTIAL_PRIVACY option {name} must be finite, not {value}", value_tok)
    if name == "epsilon" and value <= 0:
        raise fail(f"DIFFERENTIAL_PRIVACY option epsilon must be positive, not {_show_number(value)}", value_tok)
    if name == "delta" and not 0 <= value < 1:
        raise fail(f"DIFFERENTIAL_PRIVACY option delta must be at least 0 and less than 1, not "
                   f"{_show_number(value)}", value_tok)
    return k + 1, name, value


def _show_number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


# -- nesting -----------------------------------------------------------------------------------

def _parser_tokens(name: str) -> frozenset:
    """The keys of one of the DuckDB parser's operator tables (e.g. ``"COMPARISON"``)."""
    return frozenset(getattr(Dialect.get_or_raise(DIALECT).parser_class, name, None) or ())


_OPENERS = {TokenType.L_PAREN: TokenType.R_PAREN, TokenType.L_BRACKET: TokenType.R_BRACKET,
            TokenType.L_BRACE: TokenType.R_BRACE, TokenType.CASE: TokenType.END}
_CLOSERS = frozenset(_OPENERS.values())
#: The clauses after GROUP BY (see :attr:`Statement.head`).
_TAIL = frozenset({TokenType.HAVING, TokenType.ORDER_BY, TokenType.LIMIT, TokenType.OFFSET, TokenType.QUALIFY,
                   TokenType.WINDOW})
#: Operators whose operand reaches to the next AND / OR / "," / THEN ...: the parser (and every
#: tree walk after it) is one level deeper until then; a chain of them (a = b = c) nests.
_PREDICATE_OPS = (_parser_tokens("EQUALITY") | _parser_tokens("COMPARISON") | _parser_tokens("RANGE_PARSERS")
                  | {TokenType.NOT, TokenType.NOTNULL, TokenType.ISNULL, TokenType.MOD}
                  | _parser_tokens("EXPONENT"))
#: Operators that bind tightest (unary minus, ``::``, ``.``, INTERVAL): their level ends at the next
#: binary operator.
_UNARY_OPS = _parser_tokens("UNARY_PARSERS") - {TokenType.NOT}
_POSTFIX_OPS = _parser_tokens("COLUMN_OPERATORS") | {TokenType.INTERVAL}
#: Right-recursive operators (``x -> body``, ``a := b``): their level ends at "," or a closing bracket.
_RIGHT_OPS = _parser_tokens("ASSIGNMENT") | _parser_tokens("LAMBDAS")
_BINARY_OPS = (_parser_tokens("TERM") | _parser_tokens("FACTOR") | _parser_tokens("BITWISE")
               | _parser_tokens("JSON_OPERATORS") | {TokenType.DPIPE} | _PREDICATE_OPS)
_ENDS_PREDICATE = (_parser_tokens("CONJUNCTION") | _parser_tokens("DISJUNCTION")
                   | {TokenType.XOR, TokenType.COMMA, TokenType.THEN, TokenType.WHEN, TokenType.ELSE,
                      TokenType.ALIAS, TokenType.FROM, TokenType.WHERE, TokenType.GROUP_BY, TokenType.HAVING,
                      TokenType.ORDER_BY, TokenType.LIMIT, TokenType.OFFSET, TokenType.QUALIFY, TokenType.WINDOW,
                      TokenType.UNION, TokenType.EXCEPT, TokenType.INTERSECT, TokenType.FETCH})
#: Tokens after which a "-" is binary (they end an operand); after anything else it is unary.
_ENDS_OPERAND = frozenset({TokenType.NUMBER, TokenType.STRING, TokenType.VAR, TokenType.IDENTIFIER,
                           TokenType.NULL, TokenType.TRUE, TokenType.FALSE, TokenType.STAR}) | _CLOSERS


class _Level:
    """Operators waiting for their operand inside one bracket (see :func:`nesting_depth`)."""

    __slots__ = ("tight", "predicate", "right", "between")

    def __init__(self) -> None:
        self.tight = self.predicate = self.right = self.between = 0

    @property
    def open(self) -> int:
        return self.tight + self.predicate + self.right


def nesting_depth(tokens: Sequence, limit: int | None = None) -> tuple[int, int | None]:
    """How deeply a statement nests, from its tokens: at each token, the number of open brackets
    (parentheses, ``[]``, ``{}``, CASE ... END) plus the operators still waiting for their operand
    (NOT, comparisons, IS, IN, BETWEEN, LIKE, ``%``, ``^``, unary minus, ``::``, ``.``, lambdas).

    Returns the largest depth and, when it passes ``limit``, the index of the first token that
    passes it (else None; the count then stops there). The count takes one pass and no recursion;
    it bounds the recursion of sqlglot's recursive-descent parser and generator and of every tree
    walk that follows (about 25 Python frames a level at worst), while chains that these handle
    in a loop (AND, OR, ``+``, ``-``, ``*``, ``||``) do not add to it.

    >>> from sqlglot.dialects import Dialect
    >>> tok = Dialect.get_or_raise("duckdb").tokenize
    >>> nesting_depth(tok("SELECT COUNT(*) FROM t WHERE NOT (a = 1 OR (b = 2 AND c < 3))"))
    (4, None)
    >>> nesting_depth(tok("SELECT COUNT(*) FROM t WHERE a = 1 AND b = 2 AND c + d + e > 3"))
    (1, None)
    """
    levels = [_Level()]
    waiting = 0  # operators waiting in the levels below the current one
    best = 0
    prev = None
    for i, tok in enumerate(tokens):
        tt = tok.token_type
        level = levels[-1]
        prefix = prev is None or prev.token_type not in _ENDS_OPERAND
        if tt == TokenType.L_BRACKET and not prefix:
            level.tight += 1  # a subscript x[1]: chains of them nest
        if tt in _OPENERS:
            waiting += level.open
            levels.append(_Level())
        elif tt in _CLOSERS:
            if len(levels) > 1:
                levels.pop()
                waiting -= levels[-1].open
        elif (tt in _UNARY_OPS and prefix) or tt in _POSTFIX_OPS:
            level.tight += 1
        elif tt in _RIGHT_OPS:
            level.right += 1
        else:
            if tt in _BINARY_OPS or tt in _ENDS_PREDICATE:
                level.tight = 0
            if tt == TokenType.AND and level.between:
                level.between -= 1  # x BETWEEN a AND b: the AND belongs to BETWEEN
            elif tt in _ENDS_PREDICATE:
                level.predicate = 0
                if tt == TokenType.COMMA:
                    level.right = 0
            if tt in _PREDICATE_OPS:
                level.predicate += 1
                if tt == TokenType.BETWEEN:
                    level.between += 1
        depth = len(levels) - 1 + waiting + levels[-1].open
        if depth > best:
            best = depth
            if limit is not None and depth > limit:
                return best, i
        prev = tok
    return best, None


def _check_nesting(tokens: Sequence, source: Source) -> None:
    """Refuse, before parsing, a statement nested deeper than :data:`~dpsql.limits.MAX_SQL_DEPTH`."""
    _, at = nesting_depth(tokens, limits.MAX_SQL_DEPTH)
    if at is not None:
        line, col = source.position(tokens[at].start)
        raise limits.nesting_error(line, col)


def _too_deep(source: Source, offset: int) -> Exception:
    """The error for a syntax tree too deep for Python's stack (a safety net behind the token count)."""
    line, col = source.position(offset)
    return limits.nesting_error(line, col, ", or its syntax tree is too deep for the Python stack left")


# -- statements --------------------------------------------------------------------------------

def explained(text: str) -> str | None:
    """The statements after a leading ``EXPLAIN`` keyword, or None if ``text`` does not start with
    one (comments aside). ``EXPLAIN ANALYZE`` would run the query, so it is refused.

    >>> explained("/* plan */ EXPLAIN SELECT COUNT(*) FROM t"), explained("SELECT 1")
    ('SELECT COUNT(*) FROM t', None)
    """
    if not isinstance(text, str) or "explain" not in text.lower():  # no need to tokenize twice
        return None
    try:
        tokens = Dialect.get_or_raise(DIALECT).tokenize(text)
    except _SqlglotTokenError:
        return None  # parse_statements reports it
    if not tokens or tokens[0].text.upper() != "EXPLAIN":
        return None
    rest = text[tokens[0].end + 1:]
    words = rest.split(None, 1)  # sqlglot reads all that follows EXPLAIN as one token
    if words and words[0].upper() == "ANALYZE":
        line, col = Source(text).position(tokens[1].start)
        raise UnsupportedSQLError("EXPLAIN ANALYZE is not supported: it would measure; EXPLAIN shows the plan "
                                  "and the expected errors without reading data", "EXPLAIN ANALYZE", line, col)
    return rest.strip()


_SURROGATE = re.compile("[\ud800-\udfff]")


def lone_surrogate(text: str) -> int | None:
    """The offset of the first lone surrogate in ``text`` (not Unicode text: what Python makes of a
    byte that is not UTF-8 in a command-line argument), or None.

    >>> lone_surrogate("caf\\udce9"), lone_surrogate("café")
    (3, None)
    """
    found = _SURROGATE.search(text)
    return found.start() if found else None


def parse_statements(text: str, dialect: str | None = None, types: Mapping[str, str] | None = None
                     ) -> list[Statement]:
    """Split ``text`` into statements and parse each with sqlglot (DuckDB dialect).

    With ``dialect`` (a sqlglot dialect: ``"postgres"``, ``"bigquery"``, ``"tsql"``,
    ``"spark"``...), each statement is read in that dialect and transpiled to DuckDB's
    (:func:`transpiled`): its tree is DuckDB's reading of the transpiled text, its nodes placed
    where the user wrote them when sqlglot's two readings match, and ``text`` stays as written.
    ``types`` maps the table's columns (lower case) to their DuckDB types, so that a dialect's
    division of two integers truncates and its ``bit_column = 1`` reads a boolean, as they do there.

    Empty statements (stray ``;``) and comments are skipped. Raises
    :class:`~dpsql.errors.ParseError` with the line and column of the first
    syntax error, :class:`~dpsql.errors.UnsupportedSQLError` for a bad
    ``DIFFERENTIAL_PRIVACY`` option and :class:`~dpsql.limits.NestingLimitError`
    for a statement nested too deeply.
    """
    if not isinstance(text, str):
        raise TypeError(f"SQL must be a string, got {type(text).__name__}")
    original = Source(text)
    bad = lone_surrogate(text)
    if bad is not None:
        line, col = original.position(bad)
        raise ParseError(f"the SQL text holds a lone surrogate (U+{ord(text[bad]):04X}), which is not Unicode text; "
                         "was it read from bytes that are not UTF-8?", f"U+{ord(text[bad]):04X}", line, col)
    read = read_dialect(dialect)
    try:
        tokens = Dialect.get_or_raise(read).tokenize(text)
    except _SqlglotTokenError as exc:
        off = _bad_token_offset(text)
        line, col = original.position(off)
        raise ParseError(f"cannot read the SQL text ({_first_line(str(exc))}); "
                         "check for an unterminated string or quoted name", "token", line, col) from None

    clauses = _dp_clauses(tokens, original)
    work = text
    dropped: set[int] = set()
    for c in clauses:
        work = _blank(work, tokens[c.first].start, tokens[c.last].end + 1)
        dropped.update(range(c.first, c.last + 1))
    options_of = {c.select: c.options for c in clauses}
    kept = [i for i in range(len(tokens)) if i not in dropped]
    original.tokens = [tokens[i] for i in kept]

    chunks: list[tuple[list[int], int]] = []  # each statement's token indices, and where it ends
    current: list[int] = []
    for i in kept:
        if tokens[i].token_type == TokenType.SEMICOLON:
            if current:
                chunks.append((current, tokens[i].start))
            current = []
        else:
            current.append(i)
    if current:
        chunks.append((current, len(work)))

    statements: list[Statement] = []
    for chunk_tokens, end in chunks:
        begin = tokens[chunk_tokens[0]].start
        for i in chunk_tokens[1:]:
            if i in options_of:
                line, col = original.position(tokens[i].start)
                raise UnsupportedSQLError("WITH DIFFERENTIAL_PRIVACY OPTIONS must follow the first SELECT of "
                                          "a statement", _DP, line, col)
        _check_nesting([tokens[i] for i in chunk_tokens], original)
        chunk = work[begin:end]
        try:
            with _no_command_fallback_warning():
                trees = sqlglot.parse(chunk, read=read)
        except _SqlglotParseError as exc:
            err = exc.errors[0] if exc.errors else {}
            line, col = _chunk_position(original, begin, chunk, err)
            desc = err.get("description") or _first_line(str(exc))
            raise _syntax_error([tokens[i] for i in chunk_tokens], original, line, col, desc) from None
        except RecursionError:
            raise _too_deep(original, begin) from None
        except _SqlglotTokenError as exc:  # pragma: no cover - caught above
            line, col = original.position(begin)
            raise ParseError(f"cannot read the SQL text ({_first_line(str(exc))})", "token", line, col) from None
        trees = [t for t in trees if t is not None]
        if not trees:
            continue
        tree = trees[0]
        if isinstance(tree, (exp.Condition, exp.Alias)):  # sqlglot reads any expression: "SELEC x" too
            raise _not_a_statement(tokens[chunk_tokens[0]], original)
        try:
            if read != DIALECT:
                tree, sql = transpiled(tree, original, begin, read, types or {})
            else:
                sql = tree.sql(dialect=DIALECT)
        except RecursionError:
            raise _too_deep(original, begin) from None
        opts = dict(options_of.get(chunk_tokens[0], {}))
        statements.append(Statement(tree=tree, sql=sql, options=opts, source=original, offset=begin, text=chunk,
                                    transpiled=sql if read != DIALECT else None))
    return statements


def read_dialect(name: str | None) -> str:
    """The sqlglot dialect to read, checked: DuckDB's by default."""
    if name is None:
        return DIALECT
    if not isinstance(name, str):
        raise ArgumentError(f"dialect must be a dialect's name, got {type(name).__name__}")
    try:
        Dialect.get_or_raise(name.lower())
    except ValueError:
        known = ", ".join(sorted(str(d.value) for d in sqlglot.Dialects if d.value))
        raise ArgumentError(f"unknown SQL dialect {name[:40]!r}; known: {known}") from None
    return name.lower()


#: Aggregates of other dialects that sqlglot reads as unknown functions, by dialect (T-SQL's VAR is
#: the sample variance, VARP the population variance, STDEVP the population standard deviation).
_AGGREGATE_NAMES: dict[str, dict[str, type[exp.Expression]]] = {
    "tsql": {"VAR": exp.Variance, "VARP": exp.VariancePop, "STDEVP": exp.StddevPop}}


#: Dialects whose ``GROUP BY a, b GROUPING SETS (...)`` groups by the sets alone (the list before
#: them only names the columns), where DuckDB's ``GROUP BY a, b, GROUPING SETS (...)`` crosses them.
_HIVE_GROUPING_SETS = frozenset({"spark", "spark2", "hive", "databricks"})


def transpiled(tree: exp.Expression, source: Source, begin: int, read: str,
               types: Mapping[str, str] | None = None) -> tuple[exp.Expression, str]:
    """A statement read in dialect ``read``, as DuckDB's: sqlglot writes ``tree`` in DuckDB's
    dialect and reads that back, so what is analyzed is what DuckDB would run. The positions of
    the nodes (offsets into the text as written) are carried over from ``tree``, node by node
    when the two readings have the same shape, else by identifier (the k-th ``x`` is the k-th
    ``x``); a node left without one is placed at the statement's start.

    >>> st = parse_statements("SELECT TOP 2 [a], COUNT(*) AS n FROM t GROUP BY [a]", dialect="tsql")[0]
    >>> st.sql, st.position(st.tree.find(exp.Identifier))
    ('SELECT "a", COUNT(*) AS n FROM t GROUP BY "a" LIMIT 2', (1, 14))
    """
    for node in list(tree.find_all(exp.Anonymous)):
        known = _AGGREGATE_NAMES.get(read, {}).get(str(node.this).upper())
        if known is not None and len(node.expressions) == 1:
            node.replace(known(this=node.expressions[0]))
    if read in _HIVE_GROUPING_SETS:
        for group in tree.find_all(exp.Group):
            if group.args.get("grouping_sets") and group.expressions:
                group.set("expressions", [])
    types = _table_columns(tree, types or {})
    _integer_division(tree, frozenset(c for c, t in types.items() if "INT" in t))
    _bit_comparisons(tree, frozenset(c for c, t in types.items() if t == "BOOLEAN"))
    sql = tree.sql(dialect=DIALECT)
    try:
        with _no_command_fallback_warning():
            duck = sqlglot.parse_one(sql, read=DIALECT)
    except (_SqlglotParseError, _SqlglotTokenError) as exc:
        line, col = source.position(begin)
        raise ParseError(f"the statement does not transpile to DuckDB's dialect ({_first_line(str(exc))[:200]})",
                         "dialect", line, col) from None
    theirs, ours = list(tree.walk()), list(duck.walk())
    for node in ours:
        node._meta = None
    if len(theirs) == len(ours) and all(type(a) is type(b) for a, b in zip(theirs, ours)):
        for a, b in zip(theirs, ours):
            if a._meta:
                b._meta = dict(a._meta)
    else:
        seen: dict[str, list[dict]] = {}
        for a in theirs:
            if isinstance(a, exp.Identifier) and a._meta:
                seen.setdefault(a.name.lower(), []).append(a._meta)
        for b in ours:
            if isinstance(b, exp.Identifier) and seen.get(b.name.lower()):
                b._meta = dict(seen[b.name.lower()].pop(0))
    _nulls_first(duck)
    return duck, sql


def _table_columns(tree: exp.Expression, types: Mapping[str, str]) -> dict[str, str]:
    """``types`` less the names a subquery or CTE of ``tree`` gives to a select item of its own."""
    renamed = {a.alias.lower() for a in tree.find_all(exp.Alias) if a.find_ancestor(exp.Select) is not tree}
    return {c: t for c, t in types.items() if c not in renamed}


def _bit_comparisons(tree: exp.Expression, booleans: frozenset[str]) -> None:
    """A boolean column compared with 1 or 0 (T-SQL's BIT idiom, ``smoker = 1``) as compared with TRUE
    or FALSE, which is what DuckDB's cast of the column to an integer does for these two values.

    >>> parse_statements("SELECT COUNT(*) FROM t WHERE b = 1 OR 0 <> b", "tsql", {"b": "BOOLEAN"})[0].sql
    'SELECT COUNT(*) FROM t WHERE b = TRUE OR FALSE <> b'
    """
    for cmp in list(tree.find_all(exp.EQ, exp.NEQ)):
        for side, other in (("this", "expression"), ("expression", "this")):
            col, lit = cmp.args.get(side), cmp.args.get(other)
            if isinstance(col, exp.Column) and col.name.lower() in booleans and isinstance(lit, exp.Literal) \
                    and not lit.is_string and lit.this in ("0", "1"):
                lit.replace(exp.Boolean(this=lit.this == "1"))


def _integer_division(tree: exp.Expression, integers: frozenset[str]) -> None:
    """Spell out a division of two integers as the dialect read defines it (sqlglot marks it
    ``typed``: T-SQL, PostgreSQL, Trino, SQLite...): it truncates, where DuckDB's ``/`` does not, so
    it is written ``CAST(TRUNC(a / b) AS BIGINT)``. An operand is an integer if it is an integer
    literal, a cast to an integer type, a COUNT, a SUM of integers, arithmetic of integers, or one
    of the table's ``integers`` columns. Innermost divisions first.

    >>> parse_statements("SELECT age / 10 AS d, COUNT(*) FROM t GROUP BY 1", "postgres", {"age": "INTEGER"})[0].sql
    'SELECT CAST(TRUNC(age / 10) AS BIGINT) AS d, COUNT(*) FROM t GROUP BY 1'
    """
    divisions = [d for d in tree.find_all(exp.Div) if d.args.get("typed")]

    def integral(node: exp.Expression) -> bool:
        if isinstance(node, (exp.Paren, exp.Neg)):
            return integral(node.this)
        if isinstance(node, exp.Literal):
            return not node.is_string and node.this.isdigit()
        if isinstance(node, (exp.Cast, exp.TryCast)):
            return node.to.this in exp.DataType.INTEGER_TYPES
        if isinstance(node, exp.Column):
            return node.name.lower() in integers
        if isinstance(node, exp.Count):
            return True
        if isinstance(node, exp.Sum):
            return integral(node.this)
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Mod)):
            return integral(node.this) and integral(node.expression)
        return False

    for div in reversed(divisions):  # a child before its parent, which then copies it rewritten
        if integral(div.this) and integral(div.expression):
            whole = exp.Div(this=div.this.copy(), expression=div.expression.copy())
            div.replace(exp.Cast(this=exp.func("TRUNC", whole), to=exp.DataType.build("BIGINT")))


def _nulls_first(tree: exp.Expression) -> None:
    """Spell out the NULLS FIRST that another dialect's ORDER BY implies (T-SQL, MySQL, Spark sort
    NULLs first by default; sqlglot writes it out for DuckDB): ``ORDER BY x NULLS FIRST`` is
    ``ORDER BY (x) IS NULL DESC, x``, which post-processing runs. In a quantile's ``WITHIN
    GROUP (ORDER BY x)`` NULLs are skipped, so the order of NULLs is dropped."""
    for ordered in list(tree.find_all(exp.Ordered)):
        if not ordered.args.get("nulls_first"):
            continue
        ordered.set("nulls_first", False)
        order = ordered.parent
        select = order.parent if isinstance(order, exp.Order) else None
        if not isinstance(select, exp.Select) or select.args.get("order") is not order:
            continue
        term = ordered.this
        if isinstance(term, exp.Literal) and not term.is_string and term.this.isdigit() \
                and 1 <= int(term.this) <= len(select.expressions):  # ORDER BY 2: the select item
            item = select.expressions[int(term.this) - 1]
            term = item.this if isinstance(item, exp.Alias) else item
        first = exp.Ordered(this=exp.Is(this=exp.Paren(this=term.copy()), expression=exp.Null()), desc=True,
                            nulls_first=False)
        order.set("expressions", [e for o in order.expressions for e in ((first, o) if o is ordered else (o,))])


class _CommandFallback(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Falling back to parsing as a 'Command'" not in record.getMessage()


@contextlib.contextmanager
def _no_command_fallback_warning() -> Iterator[None]:
    """Keep sqlglot from logging that it reads a statement it does not know (EXPLAIN ANALYZE,
    PRAGMA...) as a 'Command': dpsql refuses that statement with its own message and position."""
    logger = logging.getLogger("sqlglot")
    quiet = _CommandFallback()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


#: The words a statement may start with, for the message when it starts with another.
_STARTS = ("SELECT", "WITH", "EXPLAIN")
#: Keywords a misspelt word may have meant (a word that is not a keyword reads as a name in SQL).
_KEYWORDS = ("SELECT", "FROM", "WHERE", "GROUP", "ORDER", "BY", "HAVING", "LIMIT", "OFFSET", "AS", "AND", "OR",
             "NOT", "IN", "IS", "NULL", "BETWEEN", "LIKE", "CASE", "WHEN", "THEN", "ELSE", "END", "DISTINCT",
             "FILTER", "JOIN", "USING", "WITH", "EXPLAIN", "ASC", "DESC", "CAST", "TRUE", "FALSE")
_NAMES = frozenset({TokenType.VAR, TokenType.IDENTIFIER})
#: Tokens that begin an operand (a name, a literal): after another operand, something is missing between them.
_OPERAND = _NAMES | {TokenType.NUMBER, TokenType.STRING}


def _quoted(tok: Token) -> str:
    text = tok.text if tok.token_type != TokenType.STRING else f"'{tok.text}'"
    return repr(text[:40])


def _not_a_statement(first: Token, source: Source) -> ParseError:
    """The error for a statement whose first word cannot start one (``SELEC ...``)."""
    line, col = source.position(first.start)
    hint = difflib.get_close_matches(first.text.upper(), _STARTS, n=1, cutoff=0.6)
    mean = f" (did you mean {hint[0]}?)" if hint and first.token_type in _NAMES else ""
    return ParseError(f"syntax error: unexpected {_quoted(first)}; a statement starts with "
                      f"{', '.join(_STARTS[:-1])} or {_STARTS[-1]}{mean}", first.text[:40], line, col)


def _keyword_hint(tok: Token) -> str | None:
    """``did you mean FROM?`` for a word that is not a keyword but is spelt like one (``FORM``), and
    ``GROUP BY`` for a lone GROUP or ORDER."""
    if tok.token_type != TokenType.VAR:
        return None
    word = tok.text.upper()
    if word in ("GROUP", "ORDER"):
        return f"did you mean {word} BY?"
    hint = difflib.get_close_matches(word, _KEYWORDS, n=1, cutoff=0.75)
    return f"did you mean {hint[0]}?" if hint and hint[0] != word else None


def _syntax_error(tokens: Sequence[Token], source: Source, line: int | None, col: int | None,
                  description: str) -> ParseError:
    """A syntax error that names the token found where sqlglot stopped (or the end of the
    statement) and what could come there, from sqlglot's ``description`` of what it expected."""
    if tokens and tokens[0].token_type in _OPERAND:  # "SELEC COUNT(*) ...": not a statement at all
        return _not_a_statement(tokens[0], source)
    at = None
    if line is not None and col is not None:
        for i, tok in enumerate(tokens):
            if source.position(tok.start) == (line, col):
                at = i
    if at is None:  # pragma: no cover - sqlglot points at one of the statement's tokens
        return ParseError(f"syntax error: {description}", "syntax", line, col)
    found, prev = tokens[at], (tokens[at - 1] if at else None)
    missing = description.startswith(("Expecting", "Required keyword", "Expected"))
    if missing and at == len(tokens) - 1:  # sqlglot points at the last token when the text ends too early
        what, prev = f"the statement ends after {_quoted(found)}", found
    else:
        what = f"unexpected {_quoted(found)}" + (f" after {_quoted(prev)}" if prev is not None else "")
    expecting = re.match(r"Expecting (.+)$", description)
    before = tokens[at - 2] if at >= 2 else None
    if expecting:
        hint = f"expected {expecting.group(1)!r}"
        if found.token_type in _OPERAND and prev is not None and prev.token_type in _ENDS_OPERAND and what[0] == "u":
            hint += f", or is a comma missing before {_quoted(found)}?"
    elif description.startswith("Expected table name"):
        hint = f"a table name must follow {_quoted(prev)}"
    elif missing and prev is not None:
        hint = f"an expression must follow {_quoted(prev)}"
    elif prev is not None and _keyword_hint(prev):
        hint = _keyword_hint(prev)
    elif _keyword_hint(found):
        hint = _keyword_hint(found)
    elif (found.token_type == TokenType.L_PAREN and prev is not None and prev.token_type in _NAMES
          and before is not None and before.token_type in _ENDS_OPERAND):  # "age COUNT(*)": age AS COUNT, then (
        hint = f"is a comma missing between {_quoted(before)} and {_quoted(prev)}?"
    elif found.token_type in _OPERAND and prev is not None and prev.token_type in _ENDS_OPERAND:
        hint = f"is a comma, an operator, AND or OR missing before {_quoted(found)}?"
    else:
        hint = None
    return ParseError(f"syntax error: {what}" + (f"; {hint}" if hint else ""), found.text[:40], line, col)


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
