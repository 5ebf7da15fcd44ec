"""Evaluating SQL expressions on the public domain (never on data).

One public entry point, :class:`Grid`: the product of some columns' domains,
on which a predicate evaluates to two boolean arrays (where it is TRUE, where
it is FALSE; elsewhere it is UNKNOWN, SQL's three-valued logic), and a value
expression (a column, a literal, ``+ - *``, ``CAST``, ``CASE``) evaluates to
values and a NULL mask. Because every domain cell is evaluated, the result is
exact for any predicate the domain can express; a predicate it cannot express
(a cut inside a numeric bin) raises :class:`dpsql.errors.DomainError`.

>>> from dpsql.schema import IntegerRange
>>> import sqlglot
>>> g = Grid([IntegerRange("age", min=0, max=4)])
>>> t, f = g.predicate(sqlglot.parse_one("age >= 3 OR age = 0"))
>>> g.full(t).astype(int).tolist()
[1, 0, 0, 1, 1]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
from sqlglot import exp

from ..errors import DomainError, SQLError, UnsupportedSQLError
from ..schema import Binned, Boolean, Categorical, Column, IntegerRange

__all__ = ["Grid", "Value", "literal_value", "column_refs"]

Fail = Callable[..., "SQLError"]

#: Largest joint domain of columns that one condition or key may couple (the
#: columns are then measured as one merged attribute).
MAX_ATTRIBUTE_SIZE = 5_000_000

_INT_TYPES = {"TINYINT", "SMALLINT", "INT", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT", "UINT",
              "UBIGINT", "INTEGER"}
_FLOAT_TYPES = {"DOUBLE", "FLOAT", "REAL", "DECIMAL"}

_COMPARISONS = {exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">="}
_FLIP = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _default_fail(cls, message, construct=None, node=None):
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


def literal_value(node: exp.Expression) -> tuple[bool, Any]:
    """``(True, python value)`` if ``node`` is a literal (number, string,
    boolean, NULL, or a negated number), else ``(False, None)``."""
    if isinstance(node, exp.Paren):
        return literal_value(node.this)
    if isinstance(node, exp.Null):
        return True, None
    if isinstance(node, exp.Boolean):
        return True, bool(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return True, node.this
        return True, _number(node.this)
    if isinstance(node, exp.Neg):
        ok, v = literal_value(node.this)
        if ok and isinstance(v, (int, float)) and not isinstance(v, bool):
            return True, -v
    return False, None


def _number(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


def column_refs(node: exp.Expression) -> list[str]:
    """Names of the columns a (resolved) expression mentions, in order, once each."""
    seen: list[str] = []
    for col in node.find_all(exp.Column):
        if col.name not in seen:
            seen.append(col.name)
    return seen


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
    def _raise(self, cls, message: str, construct: str, node: exp.Expression):
        raise self.fail(cls, message, construct, node)

    def _unsupported(self, node: exp.Expression, where: str = "here"):
        name = _construct_name(node)
        self._raise(UnsupportedSQLError, f"{name} is not supported {where}", name, node)

    # -- values -----------------------------------------------------------------
    def column(self, name: str) -> Value:
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
        else:
            vals = np.array(list(col.values) + ([0] if col.nullable else []))
            kind = "num"
        return Value(self.axis_array(name, vals), self.axis_array(name, null), kind, column=col)

    def value(self, node: exp.Expression) -> Value:
        """Evaluate a value expression."""
        if isinstance(node, exp.Paren):
            return self.value(node.this)
        if isinstance(node, exp.Alias):
            return self.value(node.this)
        ok, lit = literal_value(node)
        if ok:
            if lit is None:
                return Value(False, True, "null", literal=None, is_literal=True)
            if isinstance(lit, bool):
                kind = "bool"
            elif isinstance(lit, str):
                kind = "str"
            else:
                kind = "num"
            return Value(np.asarray(lit), False, kind, literal=lit, is_literal=True)
        if isinstance(node, exp.Column):
            if node.name not in self._axis:  # pragma: no cover - analyzer resolves first
                self._raise(SQLError, f"column {node.name!r} is not on this grid", node.name, node)
            return self.column(node.name)
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul)):
            left, right = self.value(node.this), self.value(node.expression)
            for side in (left, right):
                if side.kind not in ("num", "null"):
                    self._raise(DomainError, f"arithmetic '{node.key}' needs numbers; "
                                f"cast a boolean with CAST(x AS INTEGER)", "arithmetic", node)
            op = {exp.Add: np.add, exp.Sub: np.subtract, exp.Mul: np.multiply}[type(node)]
            return Value(op(left.values, right.values), np.logical_or(left.null, right.null), "num")
        if isinstance(node, exp.Neg):
            inner = self.value(node.this)
            if inner.kind not in ("num", "null"):
                self._raise(DomainError, "unary minus needs a number", "unary minus", node)
            if inner.kind == "null":
                return inner
            return Value(np.negative(inner.values), inner.null, "num")
        if isinstance(node, (exp.Cast, exp.TryCast)):
            return self._cast(node)
        if isinstance(node, exp.Case):
            return self._case(node)
        if _is_predicate(node):
            t, f = self.predicate(node)
            return Value(np.asarray(t), np.logical_not(np.logical_or(t, f)), "bool")
        self._unsupported(node, "in a value expression")
        raise AssertionError  # pragma: no cover

    def _cast(self, node: exp.Cast) -> Value:
        to = node.args.get("to")
        target = to.this.name if to is not None and hasattr(to.this, "name") else str(to)
        target = target.upper()
        inner = self.value(node.this)
        if target in _INT_TYPES or target in _FLOAT_TYPES:
            if inner.kind == "bool":
                return Value(np.asarray(inner.values).astype(np.int64), inner.null, "num")
            if inner.kind == "num" and (target in _FLOAT_TYPES or np.issubdtype(np.asarray(inner.values).dtype, np.integer)):
                return Value(inner.values, inner.null, "num")
            if inner.kind == "null":
                return inner
        self._raise(UnsupportedSQLError, f"CAST of a {_kind_name(inner.kind)} to {target} is not supported "
                    "(only booleans and integers to a numeric type)", "CAST", node)
        raise AssertionError  # pragma: no cover

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
        if all(literal_value(r)[0] for r in result_nodes):
            return self._case_labels(node, conds, [literal_value(r)[1] for r in result_nodes], has_else)
        # results are value expressions: the key's domain is the set of values taken
        results = [self.value(r) for r in result_nodes]
        kinds = {r.kind for r in results if r.kind != "null"}
        if len(kinds) > 1 or kinds & {"bin"}:
            self._raise(DomainError, "CASE results must all be numbers, all strings or all booleans",
                        "CASE", node)
        kind = kinds.pop() if kinds else "null"
        values = None
        null = np.ones(self.shape, dtype=bool)
        decided = np.zeros(self.shape, dtype=bool)
        branches = list(zip(conds, results))
        if has_else:
            branches.append((np.asarray(True), results[-1]))
        for t, r in branches:
            hit = np.logical_and(np.broadcast_to(t, self.shape), ~decided)
            rv = self.full(r.values)
            if values is None:
                values = np.zeros(self.shape, dtype=rv.dtype if kind != "null" else float)
            if kind == "num":
                values = values.astype(np.result_type(values.dtype, rv.dtype))
            values[hit] = rv[hit]
            null[hit] = self.full(r.null)[hit]
            decided |= hit
        return Value(values, null, kind)

    def _case_labels(self, node, conds, results, has_else) -> Value:
        kinds = {_label_kind(r) for r in results if r is not None}
        if len(kinds) > 1:
            self._raise(DomainError, "CASE results must all be strings, all numbers or all booleans",
                        "CASE", node)
        labels: list = []
        for r in results:
            if r is not None and r not in labels:
                labels.append(r)
        kind = kinds.pop() if kinds else "null"
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
        return Value(table[idx], null, kind, labels=tuple(labels))

    # -- predicates -------------------------------------------------------------
    def predicate(self, node: exp.Expression) -> tuple[np.ndarray, np.ndarray]:
        """Evaluate a predicate: ``(true, false)`` boolean arrays."""
        if isinstance(node, exp.Paren):
            return self.predicate(node.this)
        if isinstance(node, exp.And):
            t1, f1 = self.predicate(node.this)
            t2, f2 = self.predicate(node.expression)
            return np.logical_and(t1, t2), np.logical_or(f1, f2)
        if isinstance(node, exp.Or):
            t1, f1 = self.predicate(node.this)
            t2, f2 = self.predicate(node.expression)
            return np.logical_or(t1, t2), np.logical_and(f1, f2)
        if isinstance(node, exp.Not):
            t, f = self.predicate(node.this)
            return f, t
        if isinstance(node, exp.Boolean):
            return np.asarray(bool(node.this)), np.asarray(not node.this)
        if isinstance(node, exp.Null):
            return np.asarray(False), np.asarray(False)
        op = _COMPARISONS.get(type(node))
        if op is not None:
            return self._compare(node.this, node.expression, op, node)
        if isinstance(node, exp.Between):
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
            v = self.value(node)
            if v.kind != "bool":
                self._raise(DomainError, f"a {_kind_name(v.kind)} is used as a condition; compare it "
                            "with a value", _construct_name(node), node)
            ok = np.logical_not(v.null)
            return np.logical_and(v.values, ok), np.logical_and(np.logical_not(v.values), ok)
        self._unsupported(node, "in a condition")
        raise AssertionError  # pragma: no cover

    def _compare(self, left_node, right_node, op: str, node) -> tuple[np.ndarray, np.ndarray]:
        left, right = self.value(left_node), self.value(right_node)
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
                    self._check_member(a.column, b.literal, bnode)
        if left.kind == "bool" and op not in ("=", "<>"):
            self._raise(DomainError, "booleans are compared only with = or <>", op, node)
        fn = {"=": np.equal, "<>": np.not_equal, "<": np.less, "<=": np.less_equal,
              ">": np.greater, ">=": np.greater_equal}[op]
        cmp = fn(left.values, right.values)
        ok = np.logical_not(np.logical_or(left.null, right.null))
        return np.logical_and(cmp, ok), np.logical_and(np.logical_not(cmp), ok)

    def _check_member(self, col: Column, lit: Any, node) -> None:
        try:
            col.index_of(lit)
        except (KeyError, TypeError, ValueError, OverflowError):
            dom = _describe_domain(col)
            self._raise(DomainError, f"{_show(lit)} is outside the declared domain of column "
                        f"{col.name!r} ({dom})", f"literal {_show(lit)}", node)

    def _compare_bins(self, left: Value, right: Value, op: str, node) -> tuple[np.ndarray, np.ndarray]:
        col = left.column
        assert isinstance(col, Binned)
        if not right.is_literal or right.kind != "num":
            self._raise(DomainError, f"binned column {col.name!r} can only be compared with a number "
                        "at a bin edge", f"column {col.name!r}", node)
        v = right.literal if isinstance(right.literal, int) else float(right.literal)  # big ints compare exactly
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
            "null": "NULL"}.get(kind, kind)


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
    if isinstance(col, Boolean):
        return "TRUE, FALSE"
    vals = list(col.values)
    shown = ", ".join(_show(v) for v in vals[:8]) + (", ..." if len(vals) > 8 else "")
    return shown


def _construct_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Anonymous):
        return f"function {str(node.this).upper()}"
    names = {exp.Like: "LIKE", exp.ILike: "ILIKE", exp.Div: "division", exp.Mod: "modulo",
             exp.Subquery: "subquery", exp.Select: "subquery", exp.Exists: "EXISTS",
             exp.Window: "window function", exp.Star: "*", exp.Dot: "dotted name",
             exp.DPipe: "string concatenation", exp.Bracket: "subscript",
             exp.Placeholder: "parameter", exp.Parameter: "parameter",
             exp.Interval: "INTERVAL", exp.Array: "array", exp.Tuple: "tuple",
             exp.IntDiv: "integer division", exp.BitwiseAnd: "bitwise AND", exp.BitwiseOr: "bitwise OR",
             exp.SimilarTo: "SIMILAR TO", exp.RegexpLike: "regular expression",
             exp.Distinct: "DISTINCT"}
    for cls, name in names.items():
        if isinstance(node, cls):
            return name
    if isinstance(node, exp.Func) and not isinstance(node, exp.Connector):
        return f"function {node.sql_name()}"
    return node.key.upper()
