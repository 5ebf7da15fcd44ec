"""Evaluating SQL expressions on the public domain (never on data).

One public entry point, :class:`Grid`: the product of some columns' domains,
on which a predicate evaluates to two boolean arrays (where it is TRUE, where
it is FALSE; elsewhere it is UNKNOWN, SQL's three-valued logic), and a value
expression (a column, a literal, ``+ - *``, ``CAST``, ``CASE``) evaluates to
values and a NULL mask. Because every domain cell is evaluated, the result is
exact for any predicate the domain can express; a predicate it cannot express
(a cut inside a numeric bin) raises :class:`dpsql.errors.DomainError`.

Anything else (a function such as ``lower`` or ``substr``, ``LIKE``, ``//``,
``COALESCE``, arithmetic on non-integers, a CAST to another type) is handed to
DuckDB itself, which evaluates the whole expression around it on the domain
(:mod:`dpsql.sql.domain_eval`): DuckDB's semantics exactly, for any
deterministic expression over columns that are not binned.

Numbers follow DuckDB's types exactly, or are refused. An integer literal is
an exact integer of any size, a literal with a decimal point an exact DECIMAL
(a :class:`fractions.Fraction`), one with an exponent a DOUBLE. Arithmetic
(``+ - *``, unary minus) takes integers only and is computed exactly: a result
that leaves the 64-bit range on some cell of the domain, where DuckDB stops with
an overflow error, is refused, as is arithmetic on DECIMAL or DOUBLE values,
which DuckDB rounds. Comparisons of integers with integers or decimals are
exact whatever their size; a comparison that involves non-integer values is
made in DOUBLE, as DuckDB does, and refused where a DOUBLE would not hold its
operands (a decimal literal of more than 15 significant digits, an integer
beyond 2**53). A CAST to an integer type checks the target's range (TRY_CAST
gives NULL outside it, CAST is refused); a CAST to DOUBLE rounds as DuckDB does.

Integer values carry DuckDB's type, because DuckDB checks overflow in the type
of the result: an integer column is taken as BIGINT, ``CAST(x AS TINYINT)`` is
a TINYINT, an integer literal takes the type of the other operand when it fits
(``CAST(x AS TINYINT) + 100`` is a TINYINT and overflows at 128), and a signed
and an unsigned operand widen as in DuckDB. A result outside its type, or
outside 64 bits, is refused.

>>> from dpsql.schema import IntegerRange
>>> import sqlglot
>>> g = Grid([IntegerRange("age", min=0, max=4)])
>>> t, f = g.predicate(sqlglot.parse_one("age >= 3 OR age = 0"))
>>> g.full(t).astype(int).tolist()
[1, 0, 0, 1, 1]
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, NoReturn, Sequence

import numpy as np
from sqlglot import exp

from dpsql.errors import DomainError, SQLError, UnsupportedSQLError
from dpsql.limits import EvaluationLimitError
from dpsql.schema import Binned, Boolean, Categorical, Column, DateRange, IntegerRange
from dpsql.sql.domain_eval import DomainEvalError, domain_eval

__all__ = ["Grid", "Value", "literal_value", "number_value", "column_refs", "conjuncts", "construct_name",
           "column_function"]

Fail = Callable[..., "SQLError"]

#: Largest joint domain of columns that one condition or key may couple (the
#: columns are then measured as one merged attribute).
MAX_ATTRIBUTE_SIZE = 5_000_000

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Integers up to this size convert to DOUBLE exactly; beyond it a DOUBLE comparison rounds them.
_EXACT_DOUBLE_INT = 2**53
#: Significant digits of a decimal literal that a DOUBLE keeps apart and in order.
_DOUBLE_DIGITS = 15
#: Longest number literal read (Python refuses to convert longer digit strings to int).
_MAX_NUMBER_CHARS = 4000

#: sqlglot's names of DuckDB's integer types, with the range of each.
_INT_TYPES: dict[str, tuple[int, int]] = {
    "TINYINT": (-(2**7), 2**7 - 1), "SMALLINT": (-(2**15), 2**15 - 1), "INT": (-(2**31), 2**31 - 1),
    "BIGINT": (INT64_MIN, INT64_MAX), "INT128": (-(2**127), 2**127 - 1), "UTINYINT": (0, 2**8 - 1),
    "USMALLINT": (0, 2**16 - 1), "UINT": (0, 2**32 - 1), "UBIGINT": (0, 2**64 - 1), "UINT128": (0, 2**128 - 1)}
_DOUBLE_TYPES = {"DOUBLE"}
_TYPE_NAMES = {"INT": "INTEGER", "INT128": "HUGEINT", "UINT": "UINTEGER", "UINT128": "UHUGEINT"}
_BIGINT = _INT_TYPES["BIGINT"]
_HUGEINT = _INT_TYPES["INT128"]
#: DuckDB's signed integer types, narrowest first: an integer literal's own type is the first
#: that holds it (1 is an INTEGER, 2**40 a BIGINT).
_SIGNED = [_INT_TYPES[t] for t in ("TINYINT", "SMALLINT", "INT", "BIGINT", "INT128")]

_INTEGER_TEXT = re.compile(r"[0-9]+")
_DECIMAL_TEXT = re.compile(r"[0-9]+\.[0-9]*|\.[0-9]+")
_DOUBLE_TEXT = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+")
_ARITHMETIC = {exp.Add: operator.add, exp.Sub: operator.sub, exp.Mul: operator.mul}

_COMPARISONS = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_COMPARISON_NODES = {op: cls for cls, op in _COMPARISONS.items()}
_FLIP = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _default_fail(
    cls: type[SQLError], message: str, construct: str | None = None, node: exp.Expression | None = None
) -> SQLError:
    return cls(message, construct)


@dataclass
class Value:
    """A value expression evaluated on a grid: ``values`` and ``null`` broadcast
    to the grid; ``kind`` is 'num', 'str', 'bool', 'bin' (a binned column) or
    'null'. ``column`` is set for a bare column, ``labels`` for a CASE (its
    result labels in order of appearance) and ``literal`` for a literal."""

    values: Any
    null: Any
    kind: str
    column: Column | None = None
    labels: tuple | None = None
    literal: Any = None
    is_literal: bool = False
    exact: Any = None  # a number literal's exact value: int, Fraction (DECIMAL) or float (DOUBLE)
    itype: tuple[int, int] | None = None  # the range of DuckDB's integer type of an integer value
    duckdb: bool = False  # computed by DuckDB: an expression over it is DuckDB's too (its types)


def number_value(text: str) -> int | Fraction | float:
    """The exact value of a number literal as DuckDB types it: digits only are an integer (of any
    size), a decimal point makes an exact DECIMAL (a Fraction), an exponent a DOUBLE (a float,
    inf beyond its range). Raises ValueError for text that is not such a number (``1.5e``).

    >>> number_value("12"), number_value("0.1"), number_value("1e-2")
    (12, Fraction(1, 10), 0.01)
    """
    if len(text) > _MAX_NUMBER_CHARS:
        raise ValueError(f"a number literal of {len(text):,} characters")
    if _INTEGER_TEXT.fullmatch(text):
        return int(text)
    if _DECIMAL_TEXT.fullmatch(text):
        return Fraction(text if not text.endswith(".") else text[:-1])
    if _DOUBLE_TEXT.fullmatch(text):
        return float(text)
    raise ValueError(f"{text!r} is not a number")


def _exact_literal(node: exp.Expression) -> tuple[bool, Any]:
    """Like :func:`literal_value`, with numbers exact (see :func:`number_value`)."""
    negate = False
    while isinstance(node, (exp.Paren, exp.Neg)):
        negate ^= isinstance(node, exp.Neg)
        node = node.this
    if isinstance(node, exp.Literal) and not node.is_string:
        try:
            v = number_value(node.this)
        except ValueError:
            return False, None
        return True, -v if negate else v
    if negate:
        return False, None
    if isinstance(node, exp.Null):
        return True, None
    if isinstance(node, exp.Boolean):
        return True, bool(node.this)
    if isinstance(node, exp.Literal):
        return True, node.this
    return False, None


def literal_value(node: exp.Expression) -> tuple[bool, Any]:
    """``(True, python value)`` if ``node`` is a literal (number, string,
    boolean, NULL, or a negated number), else ``(False, None)``. A decimal
    number is given as a float here; :class:`Grid` compares it exactly."""
    ok, v = _exact_literal(node)
    if ok and isinstance(v, Fraction):
        v = float(v)  # 2.0 stays a float: it is not a position in GROUP BY 2.0
    return ok, v


def conjuncts(expr: exp.Expression | None) -> list[exp.Expression]:
    """Top-level conjuncts of a predicate, NOT pushed through AND/OR.

    >>> import sqlglot
    >>> [c.sql() for c in conjuncts(sqlglot.parse_one("a = 1 AND NOT (b = 2 OR c = 3) AND (d = 1 OR e = 2)"))]
    ['a = 1', 'NOT b = 2', 'NOT c = 3', 'd = 1 OR e = 2']
    """
    out: list[exp.Expression] = []
    stack = [(expr, False)] if expr is not None else []  # a loop, not recursion: chains may be long
    while stack:
        e, negated = stack.pop()
        while isinstance(e, exp.Paren):
            e = e.this
        if isinstance(e, exp.Not):
            stack.append((e.this, not negated))
        elif (isinstance(e, exp.And) and not negated) or (isinstance(e, exp.Or) and negated):
            stack.append((e.expression, negated))
            stack.append((e.this, negated))  # popped first: conjuncts stay in order
        else:
            out.append(exp.Not(this=e.copy()) if negated else e)
    return out


def column_refs(node: exp.Expression) -> list[str]:
    """Names of the columns a (resolved) expression mentions, in order, once each."""
    seen: list[str] = []
    for col in node.find_all(exp.Column):
        if col.name not in seen:
            seen.append(col.name)
    return seen


def column_function(column: Column, expr: exp.Expression) -> tuple[np.ndarray, np.ndarray] | None:
    """``expr``, a number-valued expression of ``column`` alone (a public lookup column is a CASE over
    its key), on each of the column's domain indices (NULL's too): ``(values, null)``, values 0 where
    NULL; None when the expression's values are not numbers."""
    grid = Grid([column])
    v = grid.value(expr)
    if v.kind not in ("num", "null"):
        return None
    null = grid.full(v.null).ravel().astype(bool)
    values = np.where(null, 0.0, grid.full(v.values).ravel()).astype(float) if v.kind == "num" \
        else np.zeros(column.size)
    return values, null


class Grid:
    """The product of ``columns``' domains (C order, first column slowest).

    Every array this class returns broadcasts to :attr:`shape`; use
    :meth:`full` to materialize one. ``fail(cls, message, construct, node)``
    builds the error to raise for an expression the grammar does not allow
    (the analyzer passes one that adds line and column).
    """

    def __init__(self, columns: Sequence[Column], fail: Fail | None = None) -> None:
        self.columns = tuple(columns)
        self.shape = tuple(c.size for c in self.columns)
        self.fail = fail or _default_fail
        self._axis = {c.name: i for i, c in enumerate(self.columns)}
        self._columns: dict[str, Value] = {}

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    def full(self, array: Any) -> np.ndarray:
        """``array`` broadcast to the grid's shape (a fresh, writable copy)."""
        return np.array(np.broadcast_to(array, self.shape))

    def axis_array(self, name: str, array: np.ndarray) -> np.ndarray:
        """Reshape a per-value array of column ``name`` to broadcast on the grid."""
        shape = [1] * len(self.columns)
        shape[self._axis[name]] = -1
        return np.asarray(array).reshape(shape)

    # -- errors -----------------------------------------------------------------
    def _raise(self, cls: type[SQLError], message: str, construct: str, node: exp.Expression) -> NoReturn:
        raise self.fail(cls, message, construct, node)

    def _unsupported(self, node: exp.Expression, where: str = "here") -> NoReturn:
        name = construct_name(node)
        self._raise(UnsupportedSQLError, f"{name} is not supported {where}", name, node)

    # -- values -----------------------------------------------------------------
    def column(self, name: str) -> Value:
        """Column ``name``'s values and NULL mask on the grid (built once; read-only)."""
        cached = self._columns.get(name)
        if cached is None:
            cached = self._columns[name] = self._column(name)
        return cached

    def _column(self, name: str) -> Value:
        col = next(c for c in self.columns if c.name == name)
        n = len(col.values)
        null = np.zeros(col.size, dtype=bool)
        if col.nullable:
            null[n] = True
        if isinstance(col, Binned):
            vals = np.arange(col.size)
            kind = "bin"
        elif isinstance(col, Boolean):
            vals = np.array([False, True] + ([False] if col.nullable else []))
            kind = "bool"
        elif isinstance(col, Categorical) and not col.is_numeric:
            vals = np.array(list(col.values) + ([""] if col.nullable else []), dtype=str)
            kind = "str"
        elif isinstance(col, DateRange):  # days: compared and transformed by DuckDB (its casts from text)
            vals = np.empty(col.size, dtype=object)
            vals[:] = list(col.values) + ([col.min] if col.nullable else [])
            kind = "other"
        else:
            vals = np.array(list(col.values) + ([0] if col.nullable else []))
            kind = "num"
        values, nulls = self.axis_array(name, vals), self.axis_array(name, null)
        values.flags.writeable = nulls.flags.writeable = False
        itype = _BIGINT if kind == "num" and _is_integer_array(values) else None  # the compiler's assumption
        return Value(values, nulls, kind, column=col, itype=itype, duckdb=kind == "other")

    def value(self, node: exp.Expression) -> Value:
        """Evaluate a value expression."""
        if isinstance(node, exp.Paren):
            return self.value(node.this)
        if isinstance(node, exp.Alias):
            return self.value(node.this)
        if _foreign(node):
            return self._by_duckdb(node)
        ok, lit = _exact_literal(node)
        if ok:
            if isinstance(lit, int) and not isinstance(lit, bool) and not _HUGEINT[0] <= lit <= _HUGEINT[1]:
                self._raise(UnsupportedSQLError, f"the integer {_fmtnum(lit)} is beyond DuckDB's HUGEINT range "
                            "(2**127), where DuckDB's comparisons and arithmetic fail or round",
                            f"literal {_fmtnum(lit)}", node)
            return _literal(lit)
        if isinstance(node, exp.Column):
            if node.name not in self._axis:  # pragma: no cover - analyzer resolves first
                self._raise(SQLError, f"column {node.name!r} is not on this grid", node.name, node)
            v = self.column(node.name)
            col = v.column
            if (v.kind == "num" and np.asarray(v.values).dtype.kind == "f"
                    and any(isinstance(x, int) and abs(x) > _EXACT_DOUBLE_INT for x in col.values)):
                self._raise(UnsupportedSQLError, f"column {col.name!r} mixes integers beyond 2**53 with "
                            "non-integers, which a DOUBLE cannot hold exactly", f"column {col.name!r}", node)
            return v
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
            return self._arithmetic(node)
        if isinstance(node, exp.Neg):
            return self._negate(node)
        if isinstance(node, (exp.Cast, exp.TryCast)):
            return self._cast(node)
        if isinstance(node, exp.Case):
            return self._case(node)
        if _is_predicate(node):
            t, f = self.predicate(node)
            return Value(np.asarray(t), np.logical_not(np.logical_or(t, f)), "bool")
        self._unsupported(node, "in a value expression")  # pragma: no cover - _foreign sends the rest to DuckDB
        raise AssertionError  # pragma: no cover

    def _by_duckdb(self, node: exp.Expression) -> Value:
        """``node`` evaluated by DuckDB on the domain of the columns it reads (see
        :mod:`dpsql.sql.domain_eval`), broadcast to the grid."""
        names = set(column_refs(node))
        cols = [c for c in self.columns if c.name in names]
        for col in cols:
            if isinstance(col, Binned):
                self._raise(DomainError, f"'{_sql(node)}' reads the binned column {col.name!r}, whose rows have "
                            "no single value on the domain (a bin holds many); compare the column with a bin edge",
                            construct_name(node), node)
        try:
            out = domain_eval(node, cols)
        except EvaluationLimitError as e:  # placed here; not re-run part by part, as a refusal below is
            self._raise(EvaluationLimitError, e.reason, construct_name(node), node)
        except DomainEvalError as e:
            part = _failing_part(node, cols)
            self._raise(UnsupportedSQLError, f"'{_sql(node)}' cannot be evaluated on the declared domain: {e}",
                        construct_name(part), part)
        shape = [1] * len(self.columns)
        for col in cols:
            shape[self._axis[col.name]] = col.size
        values, null = out.values.reshape(shape), out.null.reshape(shape)
        kind, itype = _duckdb_kind(out.sql_type)
        if kind == "num" and values.dtype == object and itype is None:  # DECIMAL: compared in DOUBLE from here
            values = values.astype(np.float64)
        return Value(values, null, kind, itype=itype, duckdb=True)

    # -- integer arithmetic -----------------------------------------------------
    def _arithmetic(self, node: exp.Expression) -> Value:
        """``+ - *`` along a left-deep chain (``a + b - c * d``), in a loop: a long chain does
        not recurse."""
        chain = []
        while isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
            chain.append(node)
            node = node.this
        acc = self.value(node)
        for op in reversed(chain):
            acc = self._binary(op, acc, self.value(op.expression))
        return acc

    def _binary(self, node: exp.Expression, left: Value, right: Value) -> Value:
        if "other" in (left.kind, right.kind):  # dates, timestamps, intervals: DuckDB's own arithmetic
            return self._by_duckdb(node)
        for side in (left, right):
            if side.kind not in ("num", "null"):
                hint = "; cast a boolean with CAST(x AS INTEGER)" if side.kind == "bool" else ""
                what = {"bool": "a boolean", "str": "text", "bin": "a binned column"}[side.kind]
                self._raise(DomainError, f"arithmetic '{node.key}' needs numbers, not {what}{hint}", "arithmetic", node)
        null = np.logical_or(left.null, right.null)
        if "null" in (left.kind, right.kind):
            return Value(np.asarray(0), np.asarray(True), "num")
        if (left.duckdb or right.duckdb or not _is_integer_array(np.asarray(left.values))
                or not _is_integer_array(np.asarray(right.values))):
            return self._by_duckdb(node)  # DECIMAL or DOUBLE arithmetic: DuckDB's types and rounding
        a, b = np.asarray(left.values), np.asarray(right.values)
        itype = _combine(_operand_type(left, right), _operand_type(right, left))
        fn = _ARITHMETIC[type(node)]
        bound = _max_abs(a) * _max_abs(b) if isinstance(node, exp.Mul) else _max_abs(a) + _max_abs(b)
        if bound <= min(-itype[0], itype[1]) and a.dtype != object and b.dtype != object:
            return Value(fn(a.astype(np.int64), b.astype(np.int64)), null, "num", itype=itype)
        exact = fn(a.astype(object), b.astype(object))  # Python integers: exact, however large
        return Value(self._in_range(exact, null, itype, node), null, "num", itype=itype)

    def _negate(self, node: exp.Neg) -> Value:
        inner = self.value(node.this)
        if inner.kind not in ("num", "null"):
            self._raise(DomainError, "unary minus needs a number", "unary minus", node)
        if inner.kind == "null":
            return inner
        if inner.duckdb:
            return self._by_duckdb(node)
        values = np.asarray(inner.values)
        if values.dtype.kind == "f":
            return Value(np.negative(values), inner.null, "num")  # exact: only the sign changes
        # not a DOUBLE, so integers: DuckDB's DECIMAL values are DOUBLE here (see _by_duckdb)
        itype = inner.itype or _BIGINT
        if values.dtype != object and itype[0] < 0 and _max_abs(values) <= itype[1]:
            return Value(np.negative(values), inner.null, "num", itype=itype)
        return Value(self._in_range(-values.astype(object), inner.null, itype, node), inner.null, "num", itype=itype)

    def _in_range(self, exact: np.ndarray, null: Any, itype: tuple[int, int], node: exp.Expression) -> np.ndarray:
        """Exact integers (an object array) as int64, or refuse where a non-NULL cell leaves the
        range of the result's DuckDB type (where DuckDB stops with an overflow error) or 64 bits."""
        lo, hi = max(itype[0], INT64_MIN), min(itype[1], INT64_MAX)
        exact = np.asarray(exact, dtype=object)
        out = np.vectorize(lambda x: not lo <= x <= hi, otypes=[bool])(exact) if exact.size else \
            np.zeros(exact.shape, dtype=bool)
        bad = np.logical_and(out, np.logical_not(null))
        if bad.any():
            full = self.full(bad)
            where = tuple(int(i) for i in np.argwhere(full)[0])
            cells = ", ".join(f"{c.name} = {_show(c.labels[i])}" for c, i in zip(self.columns, where))
            value = np.broadcast_to(exact, full.shape)[where]
            kind = f"the range of {_type_name(itype)}" if (lo, hi) == itype else "the 64-bit integer range"
            self._raise(DomainError, f"'{_sql(node)}' leaves {kind} ({_fmtnum(value)}"
                        f"{' at ' + cells if cells else ''}), where DuckDB stops with an overflow error",
                        "arithmetic overflow", node)
        return np.where(out, 0, exact).astype(np.int64)

    def _cast(self, node: exp.Cast) -> Value:
        """CAST / TRY_CAST to an integer type (range checked: CAST outside it is refused, as DuckDB
        stops with a conversion error; TRY_CAST gives NULL) or to DOUBLE (rounded as DuckDB does)."""
        to = node.args.get("to")
        target = to.this.name if isinstance(to, exp.DataType) and hasattr(to.this, "name") else str(to)
        target = target.upper()
        inner = self.value(node.this)
        if inner.duckdb:
            return self._by_duckdb(node)
        if inner.kind == "null" and (target in _INT_TYPES or target in _DOUBLE_TYPES):
            return inner
        if target in _INT_TYPES and inner.kind == "bool":
            return Value(np.asarray(inner.values).astype(np.int64), inner.null, "num", itype=_INT_TYPES[target])
        if target in _INT_TYPES and inner.kind == "num" and _is_integer_array(np.asarray(inner.values)):
            lo, hi = _INT_TYPES[target]
            values = np.asarray(inner.values)
            out = np.logical_or(values < lo, values > hi).astype(bool)
            if isinstance(node, exp.TryCast):
                null = np.logical_or(inner.null, out)
                return Value(np.where(out, 0, values), null, "num", itype=(lo, hi))
            if np.logical_and(out, np.logical_not(inner.null)).any():
                self._raise(DomainError, f"'{_sql(node)}': some values of the domain are outside the range of "
                            f"{_sql(to)} ({lo}..{hi}), where DuckDB stops with a conversion error; use TRY_CAST "
                            "(NULL outside the range) or a wider type", "CAST", node)
            return Value(values, inner.null, "num", itype=(lo, hi))
        if target in _DOUBLE_TYPES and inner.kind in ("bool", "num"):
            return Value(self._double(inner, node, cast=True), inner.null, "num")
        return self._by_duckdb(node)  # another type (DECIMAL, VARCHAR, DATE...): DuckDB's own conversion

    def _case(self, node: exp.Case) -> Value:
        subject = node.args.get("this")
        conds = []
        result_nodes = []
        for branch in node.args.get("ifs") or []:
            if subject is not None:
                t, _ = self._compare(subject, branch.this, "=", branch)
            else:
                t, _ = self.predicate(branch.this)
            conds.append(t)
            result_nodes.append(branch.args.get("true"))
        default = node.args.get("default")
        has_else = default is not None
        if has_else:
            result_nodes.append(default)
        literals = [_exact_literal(r) for r in result_nodes]
        if all(ok for ok, _ in literals):
            return self._case_labels(node, conds, [self._label(v, r) for (_, v), r in zip(literals, result_nodes)],
                                     has_else)
        # results are value expressions: the key's domain is the set of values taken
        results = [self.value(r) for r in result_nodes]
        if any(r.duckdb for r in results):
            return self._by_duckdb(node)
        kinds = {r.kind for r in results if r.kind != "null"}
        if len(kinds) > 1 or kinds & {"bin"}:
            self._raise(DomainError, "CASE results must all be numbers, all strings or all booleans",
                        "CASE", node)
        kind = kinds.pop() if kinds else "null"
        arrays = [self.full(r.values) for r in results]
        dtype: Any = float
        itype = None
        if kind == "num":
            numbers = [a for a, r in zip(arrays, results) if r.kind == "num"]
            if all(_is_integer_array(a) for a in numbers):
                dtype = np.int64 if all(a.dtype != object for a in numbers) else object
                itype = _case_type([r for r in results if r.kind == "num"])
            else:  # DuckDB gives the CASE a DOUBLE or DECIMAL type: compared in DOUBLE (see _compare_numbers)
                arrays = [self._double(r, node) if r.kind == "num" else a for a, r in zip(arrays, results)]
                arrays = [self.full(a) for a in arrays]
        elif kind != "null":
            dtype = np.result_type(*[a.dtype for a, r in zip(arrays, results) if r.kind != "null"])
        values = np.zeros(self.shape, dtype=dtype)
        null = np.ones(self.shape, dtype=bool)
        decided = np.zeros(self.shape, dtype=bool)
        branches = list(zip(conds, arrays, results))
        if has_else:
            branches.append((np.asarray(True), arrays[-1], results[-1]))
        for t, rv, r in branches:
            hit = np.logical_and(np.broadcast_to(t, self.shape), ~decided)
            if r.kind != "null":
                values[hit] = rv[hit]
            null[hit] = self.full(r.null)[hit]
            decided |= hit
        return Value(values, null, kind, itype=itype)

    def _label(self, value: Any, node: exp.Expression) -> Any:
        """A literal CASE result as a label: an integer exact, a decimal as the float that keeps it
        apart from every other decimal (at most 15 significant digits)."""
        if isinstance(value, Fraction):
            return self._double(_literal(value), node).item()
        if isinstance(value, int) and not isinstance(value, bool):
            self.value(node)  # the HUGEINT range check
        return value

    def _case_labels(self, node: exp.Case, conds: list[np.ndarray], results: list[Any], has_else: bool) -> Value:
        kinds = {_label_kind(r) for r in results if r is not None}
        if len(kinds) > 1:
            self._raise(DomainError, "CASE results must all be strings, all numbers or all booleans",
                        "CASE", node)
        labels: list = []
        for r in results:
            if r is not None and r not in labels:  # 1 and 1.0 are one group, as in DuckDB's DECIMAL
                labels.append(r)
        kind = kinds.pop() if kinds else "null"
        if (kind == "num" and any(isinstance(x, float) for x in labels)
                and any(isinstance(x, int) and abs(x) > _EXACT_DOUBLE_INT for x in labels)):
            self._raise(UnsupportedSQLError, "CASE mixes integers beyond 2**53 with non-integers, which a "
                        "DOUBLE cannot hold exactly", "CASE", node)
        # index of the label each cell gets; -1 = NULL
        idx = np.full(self.shape, -1, dtype=np.int64)
        decided = np.zeros(self.shape, dtype=bool)
        for t, r in zip(conds, results):
            hit = np.logical_and(np.broadcast_to(t, self.shape), ~decided)
            idx[hit] = -1 if r is None else labels.index(r)
            decided |= hit
        if has_else:
            r = results[-1]
            idx[~decided] = -1 if r is None else labels.index(r)
        null = idx < 0
        if kind == "str":
            table = np.array(list(labels) + [""], dtype=str)
        elif kind == "bool":
            table = np.array(list(labels) + [False], dtype=bool)
        else:
            table = np.array(list(labels) + [0])
        itype = None
        if kind == "num" and all(isinstance(x, int) for x in labels):
            itype = _combine(*[_natural_type(x) for x in labels]) if labels else None
        return Value(table[idx], null, kind, labels=tuple(labels), itype=itype)

    def _double(self, v: Value, node: exp.Expression, other: Value | None = None, cast: bool = False) -> np.ndarray:
        """``v`` as DOUBLE values, as DuckDB converts it, or refuse where that loses exactness the
        compiler cannot follow: a decimal literal of more than 15 significant digits (DuckDB
        compares it with integers exactly), integers beyond 2**53 compared with non-integers
        (unless with a DOUBLE literal or in an explicit CAST, where DuckDB rounds them the same way)."""
        if v.kind == "bool":
            return np.asarray(v.values).astype(np.float64)
        if v.is_literal and v.exact is not None:
            x = v.exact
            if isinstance(x, Fraction) and _significant_digits(x) > _DOUBLE_DIGITS:
                self._raise(UnsupportedSQLError, f"the number {_literal_text(x)} has more significant digits "
                            f"than a DOUBLE holds ({_DOUBLE_DIGITS}); it is compared here with non-integer "
                            "values, in DOUBLE", f"literal {_literal_text(x)}", node)
            try:
                return np.asarray(float(x))
            except OverflowError:
                self._raise(UnsupportedSQLError, f"the number {_fmtnum(x)} is beyond the range of a DOUBLE",
                            f"literal {_fmtnum(x)}", node)
        values = np.asarray(v.values)
        if values.dtype.kind == "f":
            return values
        exempt = cast or (other is not None and other.is_literal and isinstance(other.exact, float))
        if _max_abs(values) > _EXACT_DOUBLE_INT and not exempt:
            self._raise(UnsupportedSQLError, "comparing integers beyond 2**53 with non-integer values is not "
                        "supported: DuckDB would compare them exactly or in DOUBLE depending on the column types",
                        construct_name(node), node)
        return values.astype(np.float64)

    # -- predicates -------------------------------------------------------------
    def predicate(self, node: exp.Expression) -> tuple[np.ndarray, np.ndarray]:
        """Evaluate a predicate: ``(true, false)`` boolean arrays."""
        if isinstance(node, exp.Paren):
            return self.predicate(node.this)
        if isinstance(node, (exp.And, exp.Or)):
            return self._connective(node)
        if isinstance(node, exp.Not):
            t, f = self.predicate(node.this)
            return f, t
        if isinstance(node, exp.Boolean):
            return np.asarray(bool(node.this)), np.asarray(not node.this)
        if isinstance(node, exp.Null):
            return np.asarray(False), np.asarray(False)
        if _foreign(node):  # DuckDB's, as a whole (see value)
            return self._truth(node)
        op = _COMPARISONS.get(type(node))
        if op is not None:
            return self._compare(node.this, node.expression, op, node)
        if isinstance(node, exp.Between):
            if node.args.get("symmetric"):
                self._raise(UnsupportedSQLError, "BETWEEN SYMMETRIC is not supported (DuckDB does not accept it); "
                            "write (x BETWEEN a AND b OR x BETWEEN b AND a)", "BETWEEN SYMMETRIC", node)
            t1, f1 = self._compare(node.this, node.args["low"], ">=", node)
            t2, f2 = self._compare(node.this, node.args["high"], "<=", node)
            return np.logical_and(t1, t2), np.logical_or(f1, f2)
        if isinstance(node, exp.In):
            if node.args.get("query") is not None or node.args.get("unnest") is not None:
                self._unsupported(node.args.get("query") or node, "inside IN")
            t: Any = np.asarray(False)
            f: Any = np.asarray(True)
            items = node.expressions
            if not items:
                self._raise(UnsupportedSQLError, "IN needs at least one value", "IN", node)
            for item in items:
                ok, _ = literal_value(item)
                if not ok:
                    self._raise(UnsupportedSQLError, "IN lists must hold literals", "IN", item)
                t2, f2 = self._compare(node.this, item, "=", node)
                t, f = np.logical_or(t, t2), np.logical_and(f, f2)
            return t, f
        if isinstance(node, exp.Is):
            inner = self.value(node.this)
            target = node.expression
            if isinstance(target, exp.Null):
                null = np.asarray(inner.null)
                return null, np.logical_not(null)
            if isinstance(target, exp.Boolean):
                if inner.kind != "bool":
                    self._raise(DomainError, f"IS {'TRUE' if target.this else 'FALSE'} needs a boolean",
                                "IS", node)
                vals = np.asarray(inner.values) if target.this else np.logical_not(inner.values)
                t = np.logical_and(vals, np.logical_not(inner.null))
                return t, np.logical_not(t)
            self._unsupported(node, "(IS takes NULL, TRUE or FALSE)")
        if isinstance(node, (exp.Column, exp.Cast, exp.Case)) or (
                isinstance(node, exp.Literal) or isinstance(node, exp.Neg)):
            return self._truth(node)
        self._unsupported(node, "in a condition")  # pragma: no cover - _foreign sends the rest to DuckDB
        raise AssertionError  # pragma: no cover

    def _truth(self, node: exp.Expression, v: Value | None = None) -> tuple[np.ndarray, np.ndarray]:
        """A boolean value expression (evaluated as ``v`` if given) as a predicate: ``(true, false)``."""
        v = self.value(node) if v is None else v
        if v.kind != "bool":
            self._raise(DomainError, f"a {_kind_name(v.kind)} is used as a condition; compare it "
                        "with a value", construct_name(node), node)
        ok = np.logical_not(v.null)
        return np.logical_and(v.values, ok), np.logical_and(np.logical_not(v.values), ok)

    def _connective(self, node: exp.Expression) -> tuple[np.ndarray, np.ndarray]:
        """AND / OR along a left-deep chain (``a AND b OR c ...``), in a loop: a long chain does
        not recurse."""
        chain = []
        while isinstance(node, (exp.And, exp.Or)):
            chain.append(node)
            node = node.this
        t, f = self.predicate(node)
        for op in reversed(chain):
            t2, f2 = self.predicate(op.expression)
            if isinstance(op, exp.And):
                t, f = np.logical_and(t, t2), np.logical_or(f, f2)
            else:
                t, f = np.logical_or(t, t2), np.logical_and(f, f2)
        return t, f

    def _compare(
        self, left_node: exp.Expression, right_node: exp.Expression, op: str, node: exp.Expression
    ) -> tuple[np.ndarray, np.ndarray]:
        left, right = self.value(left_node), self.value(right_node)
        if left.duckdb or right.duckdb:  # compared in DuckDB's types, by DuckDB
            compared = _COMPARISON_NODES[op](this=left_node.copy(), expression=right_node.copy())
            return self._truth(compared, self._by_duckdb(compared))
        if right.kind == "bin" and left.kind != "bin":
            left, right, op = right, left, _FLIP[op]
            left_node, right_node = right_node, left_node
        if left.kind == "bin":
            return self._compare_bins(left, right, op, node)
        if "null" in (left.kind, right.kind):
            none = np.asarray(False)
            return none, none
        if left.kind != right.kind:
            lit = right if right.is_literal else left if left.is_literal else None
            other = left if lit is right else right
            if lit is not None and other.column is not None:
                self._raise(DomainError, f"{_show(lit.literal)} is a {_kind_name(lit.kind)}, but column "
                            f"{other.column.name!r} holds {_kind_name(other.kind)}s",
                            f"literal {_show(lit.literal)}", right_node if lit is right else left_node)
            self._raise(DomainError, f"cannot compare a {_kind_name(left.kind)} with a "
                        f"{_kind_name(right.kind)}", "comparison", node)
        if op in ("=", "<>"):
            for a, b, bnode in ((left, right, right_node), (right, left, left_node)):
                if a.column is not None and b.is_literal:
                    self._check_member(a.column, b, bnode)
        if left.kind == "bool" and op not in ("=", "<>"):
            self._raise(DomainError, "booleans are compared only with = or <>", op, node)
        if left.kind == "num":
            cmp = self._compare_numbers(left, right, op, node)
        else:
            cmp = _COMPARE[op](left.values, right.values)
        ok = np.logical_not(np.logical_or(left.null, right.null))
        return np.logical_and(cmp, ok), np.logical_and(np.logical_not(cmp), ok)

    def _compare_numbers(self, left: Value, right: Value, op: str, node: exp.Expression) -> np.ndarray:
        """``left op right`` on numbers as DuckDB compares them: integers and decimals exactly,
        anything with a non-integer value (a DOUBLE) in DOUBLE."""
        a, b = np.asarray(left.values), np.asarray(right.values)
        if _is_integer_array(a) and _is_integer_array(b):
            return np.asarray(_COMPARE[op](a, b), dtype=bool)
        if _is_integer_array(a) and isinstance(right.exact, Fraction):
            return _compare_with_fraction(a, right.exact, op)
        if _is_integer_array(b) and isinstance(left.exact, Fraction):
            return _compare_with_fraction(b, left.exact, _FLIP[op])
        if isinstance(left.exact, Fraction) and isinstance(right.exact, Fraction):
            return np.asarray(_COMPARE[op](left.exact, right.exact))
        return np.asarray(_COMPARE[op](self._double(left, node, right), self._double(right, node, left)), dtype=bool)

    def _check_member(self, col: Column, lit: Value, node: exp.Expression) -> None:
        value = lit.literal
        if isinstance(lit.exact, Fraction):
            non_integers = any(isinstance(v, float) and not v.is_integer() for v in col.values)
            value = float(lit.exact) if non_integers else lit.exact  # a DOUBLE column, or exact
        try:
            if isinstance(value, Fraction) and value.denominator != 1:
                raise KeyError(value)  # an integer column holds no 2.0000000000000000001
            col.index_of(value)
        except (KeyError, TypeError, ValueError, OverflowError):
            dom = _describe_domain(col)
            shown = _literal_text(lit.exact) if lit.exact is not None else _show(lit.literal)
            self._raise(DomainError, f"{shown} is outside the declared domain of column "
                        f"{col.name!r} ({dom})", f"literal {shown}", node)

    def _compare_bins(
        self, left: Value, right: Value, op: str, node: exp.Expression
    ) -> tuple[np.ndarray, np.ndarray]:
        col = left.column
        assert isinstance(col, Binned)
        if not right.is_literal or right.kind != "num":
            self._raise(DomainError, f"binned column {col.name!r} can only be compared with a number "
                        "at a bin edge", f"column {col.name!r}", node)
        v = right.exact if isinstance(right.exact, int) else self._double(right, node).item()  # big ints compare exactly
        all_t, all_f = [], []
        for lo, hi, closed in col.intervals():
            below_hi = hi < v or (hi == v and not closed)   # every value < v
            if op == "<":
                t, f = below_hi, lo >= v
            elif op == "<=":
                t, f = hi <= v, lo > v
            elif op == ">":
                t, f = lo > v, hi <= v
            elif op == ">=":
                t, f = lo >= v, below_hi
            elif op == "=":
                t, f = False, (v < lo or v > hi or (v == hi and not closed))
            else:  # <>
                t, f = (v < lo or v > hi or (v == hi and not closed)), False
            if not (t or f):
                edges = ", ".join(_fmtnum(e) for e in col.edges)
                self._raise(DomainError, f"'{col.name} {op} {_fmtnum(v)}' cuts a bin of column "
                            f"{col.name!r}; compare with a bin edge ({edges})",
                            f"{col.name} {op} {_fmtnum(v)}", node)
            all_t.append(t)
            all_f.append(f)
        if col.nullable:
            all_t.append(False)
            all_f.append(False)
        return (self.axis_array(col.name, np.array(all_t)), self.axis_array(col.name, np.array(all_f)))


_COMPARE = {"=": operator.eq, "<>": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
            ">=": operator.ge}


def _literal(lit: Any) -> Value:
    """The Value of a literal with exact value ``lit`` (see :func:`_exact_literal`)."""
    if lit is None:
        return Value(False, True, "null", literal=None, is_literal=True)
    if isinstance(lit, bool):
        return Value(np.asarray(lit), False, "bool", literal=lit, is_literal=True)
    if isinstance(lit, str):
        return Value(np.asarray(lit), False, "str", literal=lit, is_literal=True)
    shown = lit
    if isinstance(lit, Fraction):
        try:
            shown = float(lit)
        except OverflowError:
            shown = math.copysign(math.inf, lit)
    return Value(np.asarray(shown), False, "num", literal=shown, is_literal=True, exact=lit)


def _natural_type(x: int) -> tuple[int, int]:
    """DuckDB's type of the integer literal ``x``: the narrowest of INTEGER, BIGINT, HUGEINT that
    holds it (beyond HUGEINT, the compiler's 64-bit check refuses it in arithmetic anyway)."""
    return next((t for t in _SIGNED[2:] if t[0] <= x <= t[1]), _SIGNED[-1])


def _operand_type(v: Value, other: Value) -> tuple[int, int]:
    """The DuckDB integer type of operand ``v`` of an arithmetic operator whose other operand is
    ``other``: an integer literal takes the other operand's type when it fits (DuckDB's
    integer-literal rule), else its own."""
    if v.itype is not None:
        return v.itype
    if v.is_literal and isinstance(v.exact, int):
        if other.itype is not None and other.itype[0] <= v.exact <= other.itype[1]:
            return other.itype
        return _natural_type(v.exact)
    return _BIGINT


def _combine(*types: tuple[int, int]) -> tuple[int, int]:
    """The type of an arithmetic result on operands of ``types``: the wider one; a signed and an
    unsigned type give the signed one when it holds the unsigned range, else BIGINT or HUGEINT."""
    out = types[0]
    for t in types[1:]:
        if (out[0] < 0) == (t[0] < 0):
            out = out if out[1] >= t[1] else t
        else:
            signed, unsigned = (out, t) if out[0] < 0 else (t, out)
            out = signed if signed[1] >= unsigned[1] else \
                next(s for s in _SIGNED[3:] + [(-(2**128), 2**128)] if s[1] >= unsigned[1])
    return out


def _case_type(results: list[Value]) -> tuple[int, int] | None:
    """DuckDB's type of a CASE with integer results: literals take the others' type when they fit;
    a signed and an unsigned type give the narrowest signed type holding both."""
    typed = [r.itype for r in results if r.itype is not None]
    base = None
    for t in typed:
        if base is None:
            base = t
        elif (base[0] < 0) == (t[0] < 0):
            base = base if base[1] >= t[1] else t
        else:
            lo, hi = min(base[0], t[0]), max(base[1], t[1])
            base = next(s for s in _SIGNED if s[0] <= lo and hi <= s[1])
    for r in results:
        if r.itype is None and r.is_literal and isinstance(r.exact, int):
            if base is None or not base[0] <= r.exact <= base[1]:
                base = _combine(base, _natural_type(r.exact)) if base is not None else _natural_type(r.exact)
    return base


def _type_name(itype: tuple[int, int]) -> str:
    name = next((k for k, v in _INT_TYPES.items() if v == itype), None)
    return _TYPE_NAMES.get(name, name) if name else f"the integers {itype[0]}..{itype[1]}"


def _is_integer_array(a: np.ndarray) -> bool:
    """Whether ``a`` holds integers (int64, or Python ints too large for it)."""
    if a.dtype.kind in "iu":
        return True
    return a.dtype == object and all(isinstance(x, int) and not isinstance(x, bool) for x in a.flat)


def _max_abs(a: np.ndarray) -> int:
    """The largest absolute value in an integer array, as a Python int (no int64 overflow)."""
    if a.size == 0:
        return 0
    if a.dtype == object:
        return max(abs(int(x)) for x in a.flat)
    return max(int(a.max()), -int(a.min()), 0)


def _compare_with_fraction(x: np.ndarray, q: Fraction, op: str) -> np.ndarray:
    """``x op q`` exactly, for integers ``x`` and a decimal ``q`` (x < 2.5 is x <= 2)."""
    if q.denominator == 1:
        return np.asarray(_COMPARE[op](x, int(q)), dtype=bool)
    below = math.floor(q)
    if op == "=":
        return np.zeros(x.shape, dtype=bool)
    if op == "<>":
        return np.ones(x.shape, dtype=bool)
    if op in ("<", "<="):
        return np.asarray(x <= below, dtype=bool)
    return np.asarray(x > below, dtype=bool)


def _significant_digits(q: Fraction) -> int:
    """Significant digits of the decimal ``q`` (1.50 has 2, 0.001 has 1, 1200 has 2).

    >>> _significant_digits(Fraction("0.30000000000000000001")), _significant_digits(Fraction("1.50"))
    (20, 2)
    """
    if q == 0:
        return 1
    d = q.denominator
    twos = (d & -d).bit_length() - 1
    fives = 0
    while d % 5 == 0:
        d //= 5
        fives += 1
    k = max(twos, fives)  # q = m / 10**k with m an integer
    m = abs(q.numerator) * 10**k // q.denominator
    return len(str(m).strip("0"))


def _literal_text(x: Any) -> str:
    """A number as SQL would write it (a decimal in full)."""
    if isinstance(x, Fraction):
        if x.denominator == 1:
            return f"{x.numerator}.0"
        from decimal import Decimal, localcontext

        with localcontext() as ctx:
            ctx.prec = 5000
            return format(Decimal(x.numerator) / Decimal(x.denominator), "f")
    return _fmtnum(x) if not isinstance(x, str) else repr(x)


def _sql(node: Any) -> str:
    """A short SQL rendering of ``node`` for messages."""
    text = node.sql(dialect="duckdb") if isinstance(node, exp.Expression) else str(node)
    return text if len(text) <= 80 else text[:77] + "..."


#: The node types the grid evaluates itself; an expression holding any other is DuckDB's.
_NATIVE = frozenset({exp.Paren, exp.Alias, exp.Column, exp.Identifier, exp.Literal, exp.Boolean, exp.Null,
                     exp.Neg, exp.Add, exp.Sub, exp.Mul, exp.Cast, exp.TryCast, exp.DataType, exp.Case, exp.If,
                     exp.And, exp.Or, exp.Not, exp.Between, exp.In, exp.Is, *_COMPARISONS})

#: DuckDB's integer type names, as the grid's type ranges.
_DUCKDB_INTS = {"TINYINT": "TINYINT", "SMALLINT": "SMALLINT", "INTEGER": "INT", "BIGINT": "BIGINT",
                "HUGEINT": "INT128", "UTINYINT": "UTINYINT", "USMALLINT": "USMALLINT", "UINTEGER": "UINT",
                "UBIGINT": "UBIGINT", "UHUGEINT": "UINT128"}


def _foreign(node: exp.Expression) -> bool:
    """Whether ``node`` holds a construct the grid leaves to DuckDB."""
    return any(type(n) not in _NATIVE for n in node.walk())


def _failing_part(node: exp.Expression, columns: list[Column]) -> exp.Expression:
    """The construct to name when DuckDB cannot evaluate ``node``: its innermost function or
    operator that DuckDB cannot evaluate alone (``node`` itself if every part evaluates)."""
    parts = [n for n in node.walk() if isinstance(n, (exp.Func, exp.Binary, exp.Unary))]
    for part in reversed(parts):  # breadth-first order, reversed: the innermost first
        names = set(column_refs(part))
        try:
            domain_eval(part, [c for c in columns if c.name in names])
        except DomainEvalError:
            return part
    return node


def _duckdb_kind(sql_type: str) -> tuple[str, tuple[int, int] | None]:
    """The grid's kind (and integer type range) of a value of DuckDB type ``sql_type``."""
    if sql_type == "BOOLEAN":
        return "bool", None
    if sql_type in _DUCKDB_INTS:
        return "num", _INT_TYPES[_DUCKDB_INTS[sql_type]]
    if sql_type == "VARCHAR":
        return "str", None
    if sql_type in ("FLOAT", "DOUBLE") or sql_type.startswith("DECIMAL"):
        return "num", None
    if sql_type == '"NULL"' or sql_type == "NULL":
        return "null", None
    return "other", None


def _is_predicate(node: exp.Expression) -> bool:
    return isinstance(node, (exp.And, exp.Or, exp.Not, exp.Between, exp.In, exp.Is,
                             *_COMPARISONS.keys()))


def _label_kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, str):
        return "str"
    return "num"


def _kind_name(kind: str) -> str:
    return {"num": "number", "str": "string", "bool": "boolean", "bin": "binned value",
            "null": "NULL", "other": "value of another type"}.get(kind, kind)


def _show(v: Any) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, str):
        return repr(v)
    return _fmtnum(v)


def _fmtnum(v: float) -> str:
    if isinstance(v, (int, np.integer)):
        text = str(int(v))
        return text if len(text) <= 40 else f"{text[:20]}...({len(text)} digits)"
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def _describe_domain(col: Column) -> str:
    if isinstance(col, IntegerRange):
        return f"integers {col.min}..{col.max}"
    if isinstance(col, DateRange):
        return f"days {col.min.isoformat()}..{col.max.isoformat()}"
    if isinstance(col, Boolean):
        return "TRUE, FALSE"
    vals = list(col.values)
    shown = ", ".join(_show(v) for v in vals[:8]) + (", ..." if len(vals) > 8 else "")
    return shown


def construct_name(node: exp.Expression) -> str:
    """How an error message names a syntax node: ``"LIKE"``, ``"function LOWER"``, ``"division"``..."""
    if isinstance(node, exp.Anonymous):
        return f"function {str(node.this).upper()}"
    names = {exp.TryCast: "TRY_CAST", exp.Cast: "CAST", exp.Like: "LIKE", exp.ILike: "ILIKE", exp.Div: "division", exp.Mod: "modulo",
             exp.Subquery: "subquery", exp.Select: "subquery", exp.Exists: "EXISTS",
             exp.Window: "window function", exp.Star: "*", exp.Dot: "dotted name",
             exp.DPipe: "string concatenation", exp.Bracket: "subscript",
             exp.Placeholder: "parameter", exp.Parameter: "parameter",
             exp.Interval: "INTERVAL", exp.Array: "array", exp.Tuple: "tuple",
             exp.IntDiv: "integer division", exp.BitwiseAnd: "bitwise AND", exp.BitwiseOr: "bitwise OR",
             exp.SimilarTo: "SIMILAR TO", exp.RegexpLike: "regular expression",
             exp.Distinct: "DISTINCT", exp.GroupingSets: "GROUPING SETS", exp.Rollup: "ROLLUP",
             exp.Cube: "CUBE", exp.NullSafeEQ: "IS NOT DISTINCT FROM", exp.NullSafeNEQ: "IS DISTINCT FROM",
             exp.Glob: "GLOB", exp.Collate: "COLLATE", exp.Lambda: "lambda", exp.TableSample: "TABLESAMPLE",
             exp.Pivot: "PIVOT", exp.Fetch: "FETCH", exp.Struct: "struct",
             exp.Pow: "power (^)", exp.BitwiseNot: "bitwise NOT", exp.BitwiseXor: "bitwise XOR",
             exp.DataType: "data type", exp.Var: "keyword", exp.Tuple: "tuple", exp.Unnest: "UNNEST",
             exp.AtTimeZone: "AT TIME ZONE", exp.Escape: "ESCAPE"}
    for cls, name in names.items():
        if isinstance(node, cls):
            return name
    if isinstance(node, exp.Func) and not isinstance(node, exp.Connector):
        return f"function {node.sql_name()}"
    return node.key.upper()
