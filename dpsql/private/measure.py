"""Exact marginal histograms of the private table: the one module that reads private data.

:func:`measure_marginals` counts, in DuckDB or Apache Spark (wherever the
table lives: :mod:`dpsql.private.backend`), the rows of a private table in
every cell of a few low-dimensional marginals (contingency tables) over the
workload's *attributes* (:class:`dpsql.sql.compile.Attribute`). Nothing here
adds noise or releases anything: the counts go straight to
:mod:`dpsql.private.kernel`, which perturbs them before they leave the private layer.

Privacy-relevant guarantees:

* **Only declared-domain cells are counted.** Each schema column is mapped in
  SQL to its domain index (:func:`index_expression`, the same mapping as
  :meth:`dpsql.schema.Column.index_of`); the output is one count per cell of
  the public domain and nothing else (no data value, no list of values seen).
* **Grouped attributes count groups.** An attribute with ``groups`` (the
  values a workload never tells apart, merged: :mod:`dpsql.hdmm.reduction`)
  is keyed by the group of its value index (a ``CASE`` over runs of
  consecutive indices, or for many runs a lookup in a string of the labels),
  so one count per group is made and no finer count
  exists even inside this module.
* **Out-of-domain rows are dropped.** A row in which *any* declared column
  holds a value outside its domain (a value not listed, a non-integral or
  out-of-range number, NaN, ±inf, a value of the wrong SQL type, NULL in a
  column that is not ``nullable``) is removed before counting, whichever
  columns the marginals read, so every measurement describes the same set of
  rows: ``COUNT(*)`` is the same number alone and beside a ``GROUP BY``, and
  ``COUNT(a)`` never counts a NULL that ``a``'s domain does not hold. Columns
  no marginal reads are read for this test only. A row-level filter is a
  stable transformation: it does not change the sensitivity.
* **Privacy units are bounded.** When the schema's ``privacy_unit`` names a
  column, at most ``max_rows`` rows per unit are kept, chosen uniformly at
  random in SQL, *before* the domain filter; rows whose unit column is NULL
  are each treated as a unit of their own (all kept).
* **Errors do not echo data.** A database failure becomes a
  :class:`dpsql.errors.MeasurementError`. The engine's own message is kept
  only for schema-level errors found before any row is read (DuckDB catalog
  and binder errors, Spark analysis errors: a missing table or column); any
  other failure is reported by its exception class alone. Every cast of
  a data value that could fail is a ``TRY_CAST``, arithmetic is widened
  first, and comparisons never coerce data to a narrower type, so no value
  can make the query fail in the first place.

Columns of the table that the schema does not declare are ignored. All
marginals come from one scan (``GROUP BY GROUPING SETS``); only the requested
marginals are built, never the full-domain vector unless it is requested
(HDMM §10.1). The SQL is built with :mod:`sqlglot` expressions and rendered
in the backend's dialect at the end (:func:`marginals_query` returns the
expression); the few constructs that differ between DuckDB and Spark are
chosen so the same counts come out on both (:func:`_for_dialect`).

>>> import duckdb
>>> from dpsql.schema import load_schema
>>> from dpsql.schema import Attribute
>>> con = duckdb.connect()
>>> _ = con.execute("CREATE TABLE people AS SELECT * FROM (VALUES "
...                 "('F', 30, true), ('M', 41, false), ('F', 30, NULL), ('X', 35, true)) v(sex, age, ok)")
>>> schema = load_schema({"table": "people", "columns": {
...     "sex": {"type": "categorical", "values": ["F", "M"]},
...     "age": {"type": "integer", "min": 30, "max": 41},
...     "ok": {"type": "boolean", "nullable": True}}})
>>> attrs = [Attribute("sex", ("sex",), (2,)), Attribute("age+ok", ("age", "ok"), (12, 3))]
>>> total, by_sex, sex_ok = measure_marginals(con, "people", schema, attrs, [(), (0,), (0, 1)])
>>> total, by_sex          # the 'X' row is outside the domain of sex: dropped everywhere
(array([3.]), array([2., 1.]))
>>> sex_ok.shape           # sex (2) x age+ok (12 * 3), cell = sex * 36 + (age - 30) * 3 + ok
(72,)
>>> {int(i): float(sex_ok[i]) for i in sex_ok.nonzero()[0]}   # (F,30,true), (F,30,NULL), (M,41,false)
{1: 1.0, 2: 1.0, 69: 1.0}
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from sqlglot import exp

from dpsql.errors import MeasurementError, WorkloadError
from dpsql.private.backend import (
    Backend,
    BackendError,
    backend_for,
    duckdb_type_family,
    table_expression,
)
from dpsql.schema import (
    Attribute,
    Binned,
    Boolean,
    Categorical,
    Column,
    DateRange,
    IntegerRange,
    Schema,
    integer_cast_type,
)

__all__ = ["Counting", "Snapshot", "index_expression", "marginals_query", "measure_marginals", "prepare_counting",
           "snapshot_query", "sql_type_family", "take_snapshot", "MeasurementError"]

#: Above this many cases, value lookups are a balanced binary search of nested
#: CASEs (O(log n) comparisons per row) rather than one flat CASE.
_FLAT_CASES = 16

#: Above this many runs of consecutive values in one group, a grouped attribute's key is a lookup
#: in a string of labels (:func:`_label_lookup`): the nested CASEs of a binary search cost several
#: syntax nodes per run to build, render and plan (``a % 7 = 0`` on a million values is 285,715
#: runs, and took minutes and gigabytes), the string one byte per value and digit.
_SEARCHED_RUNS = 1024

#: Above this many values, a categorical's index is looked up in the domain as a relation
#: (:func:`_relation_lookup`, a hash join in DuckDB) rather than by a binary search of nested CASEs,
#: which cost several syntax nodes per value to build, render and evaluate (85,000 tract codes:
#: 3.5 MB of SQL, minutes per snapshot).
_JOINED_VALUES = 1024

#: Index of a value outside the domain, and the key of a column a grouping set omits.
_OUTSIDE, _OMITTED = -1, -2



def sql_type_family(sql_type: Any) -> str | None:
    """The family of a column type, as far as domain indices go.

    ``sql_type`` is a ``duckdb`` type object (its ``id`` is used), a DuckDB
    type name, or already a family (what :meth:`dpsql.private.backend.Backend.column_types`
    returns). Families: ``"string"`` (VARCHAR, ENUM, JSON), ``"int"``, ``"uint"`` (unsigned),
    ``"float"`` (FLOAT, DOUBLE), ``"decimal"``, ``"bool"``, ``"date"`` (DATE, and
    TIMESTAMP without a time zone), ``"null"`` (the type of an all-NULL column),
    ``"other"`` (times, lists, blobs, ...), or None when ``sql_type`` is None (unknown).

    >>> sql_type_family("DECIMAL(5,2)"), sql_type_family("VARCHAR"), sql_type_family("DATE"), sql_type_family(None)
    ('decimal', 'string', 'date', None)
    """
    return duckdb_type_family(sql_type)


# -- literals and small builders ---------------------------------------------------------

def _int(n: int) -> exp.Expression:
    return exp.Literal.number(int(n))


def _double(x: float) -> exp.Expression:
    """A DOUBLE literal equal to ``x`` exactly (integers below 2**53 print as
    integers; others as a string cast, so no DECIMAL literal rounds them)."""
    x = float(x)
    if x.is_integer() and abs(x) < 2 ** 53:
        return _int(int(x))
    return exp.cast(exp.Literal.string(repr(x)), exp.DataType.build("DOUBLE"))


def _try_cast(e: exp.Expression, to: str) -> exp.Expression:
    """A cast that yields NULL instead of failing (``safe``: sqlglot's spark
    dialect renders an unsafe TryCast as a plain, failing, CAST)."""
    return exp.TryCast(this=e.copy(), to=exp.DataType.build(to), safe=True)


def _binary(e: exp.Expression) -> exp.Expression:
    """Compare strings byte by byte whatever the connection's default collation
    (UTF-8 byte order is code point order, which is Python's ``str`` order)."""
    return exp.Paren(this=exp.Collate(this=e, expression=exp.to_identifier("binary", quoted=True)))


def _case(ifs: list[tuple[exp.Expression, exp.Expression]], default: exp.Expression | None = None,
          this: exp.Expression | None = None) -> exp.Expression:
    node = exp.Case(this=this.copy() if this is not None else None,
                    ifs=[exp.If(this=cond, true=val) for cond, val in ifs])
    if default is not None:
        node.set("default", default)
    return node


def _outside(outside: int | None) -> exp.Expression | None:
    """The ELSE of a top-level CASE: nothing (NULL) or the ``outside`` marker."""
    return None if outside is None else _int(outside)


def _nothing(outside: int | None) -> exp.Expression:
    """An index expression that is never in the domain."""
    return exp.cast(exp.null(), exp.DataType.build("INTEGER")) if outside is None else _int(outside)


def _lookup(x: exp.Expression, keys: list[tuple[exp.Expression, Any, int]], outside: int | None) -> exp.Expression:
    """Index of ``x`` among ``keys`` = (literal, sort key, index), else
    ``outside``: a flat ``CASE x WHEN k THEN i ...`` for few keys, a binary
    search of nested CASEs on ``x < k`` for many (keys must sort like SQL
    compares them; NULL and NaN fall through every test to ``outside``)."""
    keys = sorted(keys, key=lambda k: k[1])
    if not keys:
        return _nothing(outside)

    def build(lo: int, hi: int) -> exp.Expression:
        if hi - lo <= _FLAT_CASES:
            return _case([(lit.copy(), _int(i)) for lit, _, i in keys[lo:hi]], _outside(outside), this=x)
        mid = (lo + hi) // 2
        return _case([(exp.LT(this=x.copy(), expression=keys[mid][0].copy()), build(lo, mid))], build(mid, hi))

    return build(0, len(keys))


def _split(texts: Sequence[str], sep: str, to: str | None = None) -> exp.Expression:
    """``UNNEST(STRING_SPLIT('<texts joined by sep>', sep))``, its elements cast ``to`` a type:
    one string literal whatever the number of elements (``sep`` must be in none of them)."""
    parts: exp.Expression = exp.Anonymous(this="STRING_SPLIT", expressions=[
        exp.Literal.string(sep.join(texts)), exp.Literal.string(sep)])
    if to is not None:
        parts = exp.cast(parts, exp.DataType.build(f"{to}[]"))
    return exp.Unnest(expressions=[parts])


def _relation_lookup(x: exp.Expression, keys: Sequence[tuple[str, int]], key_type: str | None,
                     outside: int | None) -> exp.Expression:
    """Index of ``x`` among ``keys`` = (key as text, index), else ``outside``: a scalar subquery
    over the domain as a relation of (value, index), both unnested from string literals::

        COALESCE((SELECT d.i FROM (SELECT UNNEST(STRING_SPLIT('<keys joined by sep>', sep)) AS v,
                                          UNNEST(RANGE(n)) AS i) AS d
                  WHERE (d.v COLLATE "binary") = x), outside)

    DuckDB decorrelates it into a hash join of the distinct ``x`` with the domain, built once per
    query: constant work per row, and two literals whatever the domain's size. Without
    ``key_type`` the keys are strings and ``x`` is text ``COLLATE "binary"``: both sides are
    compared byte by byte, exact whatever the connection's default collation, and ``sep`` is a
    character no key holds, so the split gives back exactly the keys. With one (``BIGINT``,
    ``DOUBLE``) the keys are numbers written so that the cast reads them back exactly (``repr``
    of a float), compared with ``x`` of that type (DuckDB's ``-0.0 = 0.0`` holds in the join as in
    a CASE; no key is NaN). A NULL ``x`` matches nothing. DuckDB only: Spark refuses a correlated
    scalar subquery that does not aggregate."""
    texts = [k for k, _ in keys]
    used = set().union(*map(set, texts))
    sep = next(chr(c) for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF and chr(c) not in used)
    # names the correlated ``x`` does not use, so that the subquery cannot capture its columns
    taken = {i.name.lower() for i in x.find_all(exp.Identifier)}
    rel, val, idx = (_free_name(n, taken) for n in ("_dpsql_domain", "_dpsql_value", "_dpsql_index"))
    indices = [i for _, i in keys]
    numbers = (exp.Unnest(expressions=[exp.Anonymous(this="RANGE", expressions=[_int(len(keys))])])
               if indices == list(range(len(keys))) else _split([str(i) for i in indices], ",", "BIGINT"))
    domain = exp.select(exp.alias_(_split(texts, sep, key_type), _ident(val)), exp.alias_(numbers, _ident(idx)))
    value = _col(val, rel)
    found = exp.select(_col(idx, rel)).from_(
        exp.Subquery(this=domain, alias=exp.TableAlias(this=_ident(rel))), copy=False).where(
        exp.EQ(this=_binary(value) if key_type is None else value, expression=x), copy=False)
    index: exp.Expression = exp.Subquery(this=found)
    return index if outside is None else exp.Coalesce(this=index, expressions=[_int(outside)])


def _bins(v: exp.Expression, edges: Sequence[float], outside: int | None) -> exp.Expression:
    """Bin of DOUBLE ``v``: i when ``edges[i] <= v < edges[i+1]``, the last bin
    closed; ``outside`` beyond ``[edges[0], edges[-1]]`` and for NULL or NaN
    (NaN fails ``v <= edges[-1]`` whether it compares as largest, as in
    DuckDB and PostgreSQL, or unordered, as in IEEE)."""
    e = [_double(x) for x in edges]
    n = len(edges) - 1

    def build(lo: int, hi: int) -> exp.Expression:  # v is known to be in bins lo..hi-1
        if hi - lo == 1:
            return _int(lo)
        if hi - lo <= _FLAT_CASES:
            return _case([(exp.LT(this=v.copy(), expression=e[i + 1].copy()), _int(i)) for i in range(lo, hi - 1)],
                         _int(hi - 1))
        mid = (lo + hi) // 2
        return _case([(exp.LT(this=v.copy(), expression=e[mid].copy()), build(lo, mid))], build(mid, hi))

    inside = exp.and_(exp.GTE(this=v.copy(), expression=e[0].copy()),
                      exp.LTE(this=v.copy(), expression=e[n].copy()))
    return _case([(inside, build(0, n))], _outside(outside))


def _units(position: int, attribute: Attribute, columns: Sequence[int]) -> list[tuple[str, int]]:
    """An attribute's output keys: ``("column", c)`` per schema column ``c`` it reads value by
    value, or one ``("group", position)`` when its values are grouped."""
    return [("column", c) for c in columns] if attribute.groups is None else [("group", position)]


def _endpoint_share(column: Binned, value: exp.Expression, index: exp.Expression) -> exp.Expression:
    """The share of a row in the upper endpoint cell of its bin (``index``, a bin of ``column``
    or -1 / NULL's index): ``(x - lo) / (hi - lo)`` with ``x`` and the bin's edges clamped to the
    SUM bounds, kept in [0, 1] against rounding; 0 for a zero-width bin, NULL and out of domain
    (see :class:`~dpsql.schema.Attribute`)."""
    lo, hi = column.sum_bounds
    edges = np.clip(np.asarray(column.edges, dtype=float), lo, hi)
    x = exp.func("LEAST", exp.func("GREATEST", value.copy(), _double(lo)), _double(hi))
    shares = [exp.Div(this=exp.Paren(this=exp.Sub(this=x.copy(), expression=_double(a))),
                      expression=_double(b - a)) if b > a else _int(0) for a, b in zip(edges[:-1], edges[1:])]

    def build(first: int, stop: int) -> exp.Expression:  # the bin is known to be in first..stop-1
        if stop - first <= _FLAT_CASES:
            return _case([(_int(b), shares[b]) for b in range(first, stop)], _int(0), this=index)
        mid = (first + stop) // 2
        return _case([(exp.LT(this=index.copy(), expression=_int(mid)), build(first, mid))], build(mid, stop))

    share = build(0, len(shares))
    return exp.func("LEAST", exp.func("GREATEST", share, _int(0)), _int(1))


def _group_key(attribute: Attribute, indices: Sequence[exp.Expression]) -> exp.Expression:
    """The group (:attr:`Attribute.groups`) of the value whose column indices are ``indices``,
    or -1 when one of them is (the value is outside the domain). The groups form runs of
    consecutive value indices: a binary search of nested CASEs finds the run when there are
    at most :data:`_SEARCHED_RUNS`, a lookup in a string of labels (:func:`_label_lookup`) otherwise."""
    # BIGINT: a snapshot's index columns are as narrow as their domains, and DuckDB multiplies two
    # TINYINTs as TINYINT, which overflows (and fails the read)
    value: exp.Expression = exp.cast(indices[0].copy(), exp.DataType.build("BIGINT"))
    for idx, size in zip(indices[1:], attribute.sizes[1:]):
        value = exp.Add(this=exp.Mul(this=exp.Paren(this=value), expression=_int(size)), expression=idx.copy())
    labels = np.asarray(attribute.groups)
    starts = np.flatnonzero(np.r_[True, labels[1:] != labels[:-1]])

    def build(lo: int, hi: int) -> exp.Expression:  # the value is in runs lo..hi-1
        if hi - lo == 1:
            return _int(int(labels[starts[lo]]))
        if hi - lo <= _FLAT_CASES:
            return _case([(exp.LT(this=value.copy(), expression=_int(int(starts[r + 1]))), _int(int(labels[starts[r]])))
                          for r in range(lo, hi - 1)], _int(int(labels[starts[hi - 1]])))
        mid = (lo + hi) // 2
        return _case([(exp.LT(this=value.copy(), expression=_int(int(starts[mid]))), build(lo, mid))], build(mid, hi))

    out: exp.Expression = indices[0].copy()
    for idx in indices[1:]:
        out = exp.BitwiseOr(this=out, expression=idx.copy())
    group = build(0, len(starts)) if len(starts) <= _SEARCHED_RUNS else _label_lookup(value, labels)
    return _case([(exp.LT(this=exp.Paren(this=out), expression=_int(0)), _int(_OUTSIDE))], group)


def _label_lookup(value: exp.Expression, labels: np.ndarray) -> exp.Expression:
    """``labels[value]`` for a value index in range: the labels written in decimal, each padded to
    the same width, in one string literal, and the one at ``value`` cut out and cast back. One
    syntax node whatever the number of labels, and constant time per row in DuckDB, which
    slices an ASCII string by byte offset."""
    width = len(str(int(labels.max())))
    digits = labels.astype(np.int64)[:, None] // 10 ** np.arange(width - 1, -1, -1, dtype=np.int64) % 10
    text = (digits + ord("0")).astype(np.uint8).tobytes().decode("ascii")
    start = exp.Add(this=exp.Mul(this=exp.Paren(this=value.copy()), expression=_int(width)), expression=_int(1))
    cut = exp.Substring(this=exp.Literal.string(text), start=start, length=_int(width))
    return exp.cast(cut, exp.DataType.build("BIGINT"))


# -- index expressions -------------------------------------------------------------------

def index_expression(column: Column, expr: exp.Expression, sql_type: Any = None, *,
                     outside: int | None = None, dialect: str | None = None) -> exp.Expression:
    """A sqlglot expression giving the domain index of ``expr`` (a column
    reference) under ``column``, or NULL when the value is outside the domain
    (or the integer ``outside``, e.g. -1, when given).

    With ``sql_type`` (the column's DuckDB type, see :func:`sql_type_family`)
    the mapping agrees with :meth:`Column.index_of` on the Python value DuckDB
    returns for the cell: a value whose type cannot hold a domain value (the
    string ``'3'`` for an integer column, the number 3 for a categorical of
    strings, a DATE for anything) is out of the domain. Two documented
    departures: NaN is out of the domain (SQL does not treat NaN as NULL;
    ``index_of`` does), and DECIMAL values are compared after conversion to
    DOUBLE (so DECIMAL 0.1 is the schema value 0.1, as in SQL). Strings are
    compared byte by byte (``COLLATE "binary"``) whatever the connection's
    default collation. Without ``sql_type`` the mapping is lenient: the value
    is ``TRY_CAST`` to the kind's natural type first (VARCHAR for string
    categoricals, DOUBLE for numbers, BOOLEAN).

    ``dialect`` is the SQL the expression will be rendered in (None: DuckDB). A categorical of
    more than :data:`_JOINED_VALUES` values is looked up in its domain as a relation
    (:func:`_relation_lookup`) on DuckDB, and by a binary search of CASEs on Spark (and for
    integers beyond BIGINT).

    Nothing here can raise on a data value: every cast is a ``TRY_CAST`` (or
    cannot fail) and comparisons only widen the data.

    >>> from sqlglot import exp
    >>> from dpsql.schema import IntegerRange
    >>> index_expression(IntegerRange("age", min=17, max=90), exp.column("age"), "INTEGER").sql("duckdb")
    'CASE WHEN age BETWEEN 17 AND 90 THEN TRY_CAST(age AS BIGINT) - 17 END'
    """
    family = sql_type_family(sql_type)
    value = _value_index(column, expr, family, outside, dialect)
    if column.nullable:
        return _case([(exp.Is(this=expr.copy(), expression=exp.null()), _int(len(column.values)))], value)
    return value


def _value_index(column: Column, c: exp.Expression, family: str | None, outside: int | None,
                 dialect: str | None) -> exp.Expression:
    """Index of a non-NULL value; ``outside`` for NULL or an out-of-domain value."""
    if isinstance(column, DateRange):
        return _day_index(column, c, family, outside, dialect)
    if family in ("null", "other", "date"):
        return _nothing(outside)
    if isinstance(column, Boolean):
        if family is None:
            b = _try_cast(c, "BOOLEAN")
        elif family == "bool":
            b = c.copy()
        elif family in ("int", "uint"):  # 0 and 1 are False and True (a 0/1 column of a DataFrame or CSV)
            return _lookup(c.copy(), [(_int(0), 0, 0), (_int(1), 1, 1)], outside)
        else:
            return _nothing(outside)
        as_int = exp.cast(b, exp.DataType.build("INTEGER"))  # False, True -> 0, 1
        return as_int if outside is None else exp.Coalesce(this=as_int, expressions=[_int(outside)])
    if family == "bool":  # Python bools are in no other kind's domain
        return _nothing(outside)
    if isinstance(column, Categorical) and not column.is_numeric:
        if family is None:
            x = _try_cast(c, "VARCHAR")
        elif family == "string":
            x = exp.cast(c.copy(), exp.DataType.build("VARCHAR"))  # a no-op on VARCHAR; ENUM, JSON to text
        else:
            return _nothing(outside)
        x = _binary(x)
        if len(column.values) > _JOINED_VALUES and dialect not in _SPARK:
            return _relation_lookup(x, [(s, i) for i, s in enumerate(column.values)], None, outside)
        return _lookup(x, [(exp.Literal.string(s), s, i) for i, s in enumerate(column.values)], outside)
    if family == "string":  # numbers only from here on
        return _nothing(outside)
    integral = family in ("int", "uint")
    # an unsigned column holds no negative value: compare it with none (DuckDB would cast a UHUGEINT to BIGINT)
    least = 0 if family == "uint" else None
    if isinstance(column, Categorical):
        if integral:
            x = c.copy()
            keys = [(_int(int(v)), int(v), i) for i, v in enumerate(column.values)
                    if float(v).is_integer() and (least is None or v >= least)]
        else:
            x = _try_cast(c, "DOUBLE")
            keys = [(_double(v), float(v), i) for i, v in enumerate(column.values)
                    if isinstance(v, float) or float(v) == v]  # an int no DOUBLE equals is unreachable
        if len(keys) > _JOINED_VALUES and dialect not in _SPARK:
            if not integral:
                return _relation_lookup(x, [(repr(float(k)), i) for _, k, i in keys], "DOUBLE", outside)
            if all(-2 ** 63 <= k < 2 ** 63 for _, k, _ in keys):  # no value outside BIGINT can equal one
                return _relation_lookup(_try_cast(c, "BIGINT"), [(str(k), i) for _, k, i in keys], "BIGINT", outside)
        return _lookup(x, keys, outside)
    if isinstance(column, IntegerRange):
        lo, hi = column.min, column.max
        to = integer_cast_type(lo, hi)
        if integral and to is not None:
            if least is not None and hi < least:
                return _nothing(outside)
            inside = exp.Between(this=c.copy(), low=_int(lo if least is None else max(lo, least)), high=_int(hi))
            # c - lo in c's own type could overflow (a TINYINT 100 minus -100): widen first; and
            # the index is always of type ``to`` (numpy cannot fetch a BIGNUM column)
            index = _try_cast(c, to) if lo == 0 else exp.Sub(this=_try_cast(c, to), expression=_int(lo))
            return _case([(inside, index)], _outside(outside))
        v = _try_cast(c, "DOUBLE")
        # integral: v % 1 = 0 (fmod; NaN and ±inf give NaN). Not v = FLOOR(v): Spark's FLOOR
        # returns BIGINT and fails on overflow in ANSI mode, whatever the range test before it
        integral_v = exp.EQ(this=exp.Mod(this=v.copy(), expression=_int(1)), expression=_int(0))
        inside = exp.and_(exp.GTE(this=v.copy(), expression=_int(lo)), exp.LTE(this=v.copy(), expression=_int(hi)),
                          integral_v)
        index = exp.Sub(this=_try_cast(v, to), expression=_int(lo)) if to is not None else \
            _try_cast(exp.Sub(this=v.copy(), expression=_int(lo)), "BIGINT")  # bounds beyond 128 bits
        return _case([(inside, index)], _outside(outside))
    if isinstance(column, Binned):
        return _bins(_try_cast(c, "DOUBLE"), column.edges, outside)
    raise TypeError(f"unknown column kind {type(column).__name__}")  # pragma: no cover


def _day_index(column: DateRange, c: exp.Expression, family: str | None, outside: int | None,
               dialect: str | None) -> exp.Expression:
    """A day's index, its distance in days from the domain's first: a DATE's, a TIMESTAMP's day (a cast,
    which drops the time of day) or ISO text's (a ``TRY_CAST``: text that is no date is outside)."""
    if family == "date":
        day = exp.cast(c.copy(), exp.DataType.build("DATE"))
    elif family in ("string", None):
        day = _try_cast(c, "DATE")
    else:
        return _nothing(outside)
    lo, hi = (exp.cast(exp.Literal.string(d.isoformat()), exp.DataType.build("DATE")) for d in (column.min, column.max))
    # DuckDB: DATE - DATE is a BIGINT of days; Spark's is an INTERVAL, its day count datediff(end, start)
    days = exp.Anonymous(this="datediff", expressions=[day.copy(), lo.copy()]) if dialect in _SPARK else \
        exp.Sub(this=day.copy(), expression=lo.copy())
    return _case([(exp.Between(this=day, low=lo, high=hi), days)], _outside(outside))


# -- the query ---------------------------------------------------------------------------

def _ident(name: str) -> exp.Identifier:
    return exp.to_identifier(name, quoted=True)


def _col(name: str, table: str | None = None) -> exp.Column:
    return exp.Column(this=_ident(name), table=_ident(table) if table else None)


def _free_name(prefix: str, taken: set[str]) -> str:
    """``prefix``, or ``prefix`` with the smallest number appended, that no name in ``taken`` (lower case) is."""
    return next(n for n in (f"{prefix}{i or ''}" for i in range(len(taken) + 1)) if n not in taken)


def _from_item(table: "str | exp.Table | exp.Subquery") -> exp.Expression:
    """What to read FROM: a table name (one identifier), a table, or a subquery
    (:meth:`dpsql.private.backend.Backend.source`, e.g. a view made safe)."""
    return table.copy() if isinstance(table, exp.Subquery) else table_expression(table)


_SPARK = ("spark", "spark2", "databricks")


def _for_dialect(query: exp.Select, dialect: str | None) -> exp.Select:
    """Adapt the neutral query to ``dialect`` where the same sqlglot node
    would mean something else there (None and ``"duckdb"``: unchanged).

    Spark: ``COLLATE "binary"`` is dropped, since every string is compared
    after ``CAST(... AS STRING)``, which in Spark yields the default
    UTF8_BINARY collation (byte order, as in DuckDB's ``binary``), and Spark
    3.5 has no COLLATE at all; DuckDB's HUGEINT becomes DECIMAL(38, 0), the
    widest exact integer Spark has. (Other portable choices are made while
    building: TRY_CAST is marked ``safe`` so sqlglot renders Spark's
    ``TRY_CAST`` rather than a failing CAST; integrality is ``v % 1 = 0``,
    not ``v = FLOOR(v)``; the unit bound is a subquery, not QUALIFY;
    ``RAND()`` is rendered per dialect by sqlglot.)
    """
    if dialect not in _SPARK:
        return query

    def adapt(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Paren) and isinstance(node.this, exp.Collate):
            return node.this.this
        if isinstance(node, exp.Collate):
            return node.this
        if isinstance(node, exp.DataType) and node.this == exp.DataType.Type.INT128:
            return exp.DataType.build("DECIMAL(38, 0)")
        return node

    return query.transform(adapt)


class _Plan:
    """The query and how to read its result: ``keys[j]`` is the output column
    of key ``j`` (the index of one schema column, or the group of a grouped
    attribute's value); ``order[s]`` lists, for subset ``s``, the key
    positions in ravel order, ``dims[s]`` their sizes."""

    def __init__(self, schema: Schema, attributes: Sequence[Attribute], subsets: Sequence[Sequence[int]],
                 table: "str | exp.Table", types: Mapping[str, Any] | None, dialect: str | None = None,
                 indexed: bool = False) -> None:
        # indexed: ``table`` is a :class:`Snapshot`'s, whose columns hold domain indices and whose rows are
        # all inside the domain (no privacy unit, no split column): no index to compute, no row to drop
        cols = schema.columns
        position = {c.name: i for i, c in enumerate(cols)}
        self.subsets = [tuple(int(a) for a in s) for s in subsets]
        for s in self.subsets:
            if len(set(s)) != len(s) or any(not 0 <= a < len(attributes) for a in s):
                raise WorkloadError(f"marginal {s} must list distinct attribute positions below {len(attributes)}")
        attr_cols: list[list[int]] = []
        split: set[int] = set()  # binned columns measured by endpoint masses (see Attribute)
        for a in attributes:
            try:
                idx = [position[schema.column(c).name] for c in a.columns]  # type: ignore[union-attr]
                split |= {position[schema.column(c).name] for c in a.split}  # type: ignore[union-attr]
            except (AttributeError, KeyError):
                raise WorkloadError(f"attribute {a.name!r} names a column the schema does not declare") from None
            if any(not isinstance(cols[i], Binned) or cols[i].sum_bounds is None for i in split):
                raise WorkloadError(f"attribute {a.name!r}: only a binned column with SUM bounds can be split")
            if tuple(cols[i].size * (2 if i in split else 1) for i in idx) != tuple(a.sizes):
                raise WorkloadError(f"attribute {a.name!r} sizes {a.sizes} do not match the schema")
            attr_cols.append(idx)
        # output keys: one per column of an attribute measured value by value, one per attribute
        # whose values are grouped (its cell label); the columns read are those of every key
        units = sorted({u for s in self.subsets for a in s for u in _units(a, attributes[a], attr_cols[a])})
        unit_pos = {u: j for j, u in enumerate(units)}
        self.keys = [f"k{j}" for j in range(len(units))]
        self.order = [[unit_pos[u] for a in s for u in _units(a, attributes[a], attr_cols[a])] for s in self.subsets]
        self.dims = [[cols[u[1]].size * (2 if u[1] in split else 1) if u[0] == "column" else attributes[u[1]].cells
                      for a in s for u in _units(a, attributes[a], attr_cols[a])] for s in self.subsets]
        self.sizes = [math.prod(attributes[a].cells for a in s) for s in self.subsets]
        used = sorted({c for u in units for c in ([u[1]] if u[0] == "column" else attr_cols[u[1]])})
        # 1. source rows: the columns the marginals read, at most max_rows per privacy unit, and
        #    only rows whose other declared columns are in their domains too
        types = {k.lower(): v for k, v in (types or {}).items()}
        read = [cols[i] for i in used]
        others = [c for c in cols if position[c.name] not in used]
        in_domain = exp.and_(*[exp.GTE(this=index_expression(c, _col(c.name), types.get(c.name.lower()),
                                                              outside=_OUTSIDE, dialect=dialect), expression=_int(0))
                               for c in others]) if others and not indexed else None
        src = exp.select(*([_col(c.name) for c in read] or [exp.alias_(_int(1), _ident("one"))]))
        unit = schema.privacy_unit
        if unit.column is None:
            src = src.from_(_from_item(table), copy=False)
            if in_domain is not None:
                src = src.where(in_domain, copy=False)
        else:
            # ranked = rows numbered in random order within each unit, then a filter on the number
            # (a subquery, not QUALIFY, which Spark SQL lacks). DuckDB refuses a volatile window
            # ORDER BY: the random key is drawn in a projection first.
            taken = {c.name.lower() for c in cols} | {unit.column.lower()}
            rnd, rnk = _free_name("_dpsql_random", taken), _free_name("_dpsql_rank", taken)
            u = _col(unit.column)
            carried = [_col(c.name) for c in cols]
            if unit.column.lower() not in {c.name.lower() for c in cols}:
                carried.append(u.copy())  # a column listed twice would be ambiguous in Spark
            drawn = exp.select(*[c.copy() for c in carried], exp.alias_(exp.Rand(), _ident(rnd)))
            drawn = drawn.from_(_from_item(table), copy=False)
            rank = exp.Window(this=exp.RowNumber(), partition_by=[u.copy()],
                              order=exp.Order(expressions=[exp.Ordered(this=_col(rnd), nulls_first=False)]))
            ranked = exp.select(*[c.copy() for c in carried], exp.alias_(rank, _ident(rnk)))
            ranked = ranked.from_(exp.Subquery(this=drawn, alias=exp.TableAlias(this=_ident("drawn"))), copy=False)
            src = src.from_(exp.Subquery(this=ranked, alias=exp.TableAlias(this=_ident("ranked"))), copy=False)
            src = src.where(exp.or_(exp.Is(this=u.copy(), expression=exp.null()),
                                    exp.LTE(this=_col(rnk), expression=_int(unit.max_rows))), copy=False)
            if in_domain is not None:  # after the cut to max_rows, as for the columns read
                src = src.where(in_domain, copy=False)
        weighted = [j for j, c in enumerate(used) if c in split]
        # 1b. text columns grouped first by their exact (binary) text, so that each value's index is
        #     looked up once per distinct value instead of once per row; the counts are summed after.
        #     (Not with a privacy unit's cut or a split column: their rows are weighed one by one.)
        texts = [c for c in read if isinstance(c, Categorical) and not c.is_numeric
                 and sql_type_family(types.get(c.name.lower())) == "string"]
        tally = None
        if texts and unit.column is None and not weighted and not indexed:
            tally = _free_name("_dpsql_n", {c.name.lower() for c in cols})
            keyed = [_binary(exp.cast(_col(c.name), exp.DataType.build("VARCHAR"))) if c in texts else _col(c.name)
                     for c in read]
            src = exp.select(*[exp.alias_(k, _ident(c.name)) for k, c in zip(keyed, read)],
                             exp.alias_(exp.Count(this=exp.Star()), _ident(tally))).from_(
                exp.Subquery(this=src, alias=exp.TableAlias(this=_ident("rows"))), copy=False).group_by(
                *[k.copy() for k in keyed], copy=False)
        # 2. every read column's index (-1 outside the domain), computed once
        idx_names = [f"i{j}" for j in range(len(read))]
        indices = [exp.alias_(_col(c.name) if indexed else
                              index_expression(c, _col(c.name), types.get(c.name.lower()), outside=_OUTSIDE,
                                               dialect=dialect),
                              _ident(n)) for c, n in zip(read, idx_names)]
        # a split column's upper share reads its index: the raw values are carried through
        raw = {j: f"x{j}" for j in weighted}  # beside the i* names: the outputs are these alone
        carried = [exp.alias_(_col(read[j].name), _ident(raw[j])) for j in weighted]
        proj = exp.select(*(indices + carried or [exp.alias_(_int(1), _ident("one"))]),
                          *([_col(tally)] if tally else []))
        proj = proj.from_(exp.Subquery(this=src, alias=exp.TableAlias(this=_ident("src"))), copy=False)
        if weighted:
            # 2a. a split column: each row twice, in its bin's lower and upper endpoint cells, weighed by
            #     its shares there (a product over the split columns); the counts are their SUM
            sides = exp.select(exp.alias_(_int(0), _ident("s"))).union(exp.select(_int(1)), distinct=False)
            doubled = exp.select(*[
                exp.alias_(_case([(exp.LT(this=_col(n), expression=_int(0)), _col(n))],
                                 exp.Add(this=exp.Mul(this=_col(n), expression=_int(2)),
                                         expression=_col("s", f"side{j}"))), _ident(n))
                if j in weighted else _col(n) for j, n in enumerate(idx_names)])
            weight: exp.Expression | None = None
            for j in weighted:
                upper = _endpoint_share(read[j], _try_cast(_col(raw[j]), "DOUBLE"), _col(idx_names[j]))
                share = _case([(exp.EQ(this=_col("s", f"side{j}"), expression=_int(0)),
                                exp.Sub(this=_int(1), expression=upper.copy()))], upper)
                weight = share if weight is None else exp.Mul(this=weight, expression=share)
            doubled = doubled.select(exp.alias_(weight, _ident("wt")), copy=False).from_(
                exp.Subquery(this=proj, alias=exp.TableAlias(this=_ident("indexed"))), copy=False)
            for j in weighted:
                doubled = doubled.join(exp.Subquery(this=sides.copy(), alias=exp.TableAlias(this=_ident(f"side{j}"))),
                                       join_type="cross", copy=False)
            proj = doubled
        # 2b. a grouped attribute's key: the group of its value index (-1 if a column is outside)
        column_idx = {c: _col(n) for c, n in zip(used, idx_names)}
        key_names = idx_names if all(u[0] == "column" for u in units) else [f"g{j}" for j in range(len(units))]
        if key_names is not idx_names:
            values = [column_idx[u[1]] if u[0] == "column"
                      else _group_key(attributes[u[1]], [column_idx[c] for c in attr_cols[u[1]]]) for u in units]
            proj = exp.select(*[exp.alias_(v, _ident(n)) for v, n in zip(values, key_names)] or
                              [exp.alias_(_int(1), _ident("one"))], *([_col("wt")] if weighted else []),
                              *([_col(tally)] if tally else [])).from_(
                exp.Subquery(this=proj, alias=exp.TableAlias(this=_ident("cols"))), copy=False)
        # 3. drop rows with any key out of domain. A key that every grouping set has
        #    needs no filter: its -1 groups are dropped after counting (see split). For the
        #    others, keys are >= 0 or -1, so one bitwise OR is negative exactly when some
        #    key is out (one cheap test per row; CASEs with a non-NULL ELSE keep DuckDB's
        #    statistics, so small domains get its perfect-hash aggregation).
        sets = sorted({tuple(sorted(o)) for o in self.order}, key=lambda t: (len(t), t))
        nonempty = [s for s in sets if s]
        always = set.intersection(*[set(s) for s in sets]) if sets else set()
        checked = [] if indexed else [n for j, n in enumerate(key_names) if j not in always]
        selects: list[exp.Expression] = [
            exp.alias_(exp.Coalesce(this=_col(n), expressions=[_int(_OMITTED)]), _ident(k))
            for n, k in zip(key_names, self.keys)]
        count = (exp.Sum(this=_col("wt")) if weighted else exp.cast(exp.Sum(this=_col(tally)), exp.DataType.build("BIGINT"))
                 if tally else exp.Count(this=exp.Star()))
        selects.append(exp.alias_(count, _ident("n")))
        query = exp.select(*selects).from_(exp.Subquery(this=proj, alias=exp.TableAlias(this=_ident("idx"))))
        if checked:
            any_out: exp.Expression = _col(checked[0])
            for n in checked[1:]:
                any_out = exp.BitwiseOr(this=any_out, expression=_col(n))
            query = query.where(exp.GTE(this=exp.Paren(this=any_out), expression=_int(0)), copy=False)
        if len(sets) == 1 and nonempty:
            query = query.group_by(*[_col(key_names[j]) for j in nonempty[0]], copy=False)
        elif nonempty:
            grouping = exp.GroupingSets(expressions=[
                exp.Tuple(expressions=[_col(key_names[j]) for j in s]) for s in sets])
            query.set("group", exp.Group(expressions=[grouping]))
        self.query = _for_dialect(query, dialect)

    def split(self, result: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """Scatter the result rows into one flat histogram per subset."""
        n = np.asarray(result["n"], dtype=np.float64)
        keys = np.column_stack([np.asarray(result[k], dtype=np.int64) for k in self.keys]) \
            if self.keys else np.zeros((len(n), 0), dtype=np.int64)
        keep = ~np.any(keys == _OUTSIDE, axis=1)  # out of domain in a column every set keys on
        n, keys = n[keep], keys[keep]
        present = keys != _OMITTED  # a key is NULL exactly when its grouping set omits it
        patterns, inverse = (np.unique(np.packbits(present, axis=1), axis=0, return_inverse=True)
                             if self.keys else (np.zeros((1, 0)), np.zeros(len(n), dtype=np.int64)))
        inverse = np.asarray(inverse).reshape(-1)
        rows_of: dict[tuple[int, ...], np.ndarray] = {}
        for p in range(len(patterns)):
            sel = np.flatnonzero(inverse == p)
            if len(sel):
                rows_of[tuple(np.flatnonzero(present[sel[0]]))] = sel
        out = []
        for order, dims, size in zip(self.order, self.dims, self.sizes):
            hist = np.zeros(size, dtype=np.float64)
            sel = rows_of.get(tuple(sorted(order)))
            if sel is not None:
                if order:
                    flat = np.ravel_multi_index(tuple(keys[sel, j] for j in order), dims)
                    hist[flat] = n[sel]
                else:
                    hist[0] = n[sel].sum()
            out.append(hist)
        return out


def marginals_query(schema: Schema, attributes: Sequence[Attribute], subsets: Sequence[Sequence[int]],
                    table: "str | exp.Table", types: Mapping[str, Any] | None = None,
                    dialect: str | None = None) -> exp.Select:
    """One SELECT counting every requested marginal in one scan.

    Its shape (``i*`` index every column the marginals read, -1 outside the domain;
    ``k*`` are the keys of the marginals, -2 where a grouping set omits one)::

        SELECT COALESCE(i0, -2) AS k0, ..., COUNT(*) AS n
        FROM (SELECT <index of column 0> AS i0, ...                -- index_expression
              FROM (SELECT <columns read> FROM <table>
                    WHERE <index of every other column> >= 0) AS src) AS idx
        WHERE (i0 | i1 | ...) >= 0                                  -- every read column in domain
        GROUP BY GROUPING SETS ((<columns of subset 1>), ...)

    With a privacy unit, ``src`` keeps at most ``max_rows`` random rows per unit::

        (SELECT <columns read> FROM
           (SELECT <declared columns>, ROW_NUMBER() OVER (PARTITION BY unit ORDER BY r) AS rank
            FROM (SELECT <declared columns>, unit, RANDOM() AS r FROM <table>) AS drawn) AS ranked
         WHERE (unit IS NULL OR rank <= max_rows) AND <index of every other column> >= 0) AS src

    (one plain GROUP BY when there is one marginal; the WHERE skips the
    columns that every marginal keys on, whose -1 groups are dropped after
    counting; merged attributes are grouped by their columns and raveled in
    numpy). ``types`` maps column names to their SQL types (see
    :func:`index_expression`); :func:`measure_marginals` reads them from the
    table. Without ``dialect`` the expression is neutral sqlglot, as run on
    DuckDB; with one (``"spark"``), the few nodes that mean something else
    there are adapted (see :func:`_for_dialect`). Render it with
    ``.sql(dialect=...)``.
    """
    return _Plan(schema, attributes, subsets, table, types, dialect).query


# -- running it --------------------------------------------------------------------------

def _name(table: Any, dialect: str) -> str:
    return table.sql(dialect=dialect) if isinstance(table, exp.Expression) else repr(table)


def _fail(table: Any, e: BackendError, dialect: str) -> MeasurementError:
    name = _name(table, dialect)
    if e.schema_level:
        return MeasurementError(f"measuring table {name} failed: {e.reason}")
    return MeasurementError(f"measuring table {name} failed ({e.reason})")


def _column_types(backend: Backend, table: "str | exp.Table", schema: Schema) -> dict[str, str]:
    """The type family of every schema column (reads no rows)."""
    found = {name.lower(): t for name, t in backend.column_types(table).items()}
    name = _name(table, backend.dialect)
    missing = [c.name for c in schema.columns if c.name.lower() not in found]
    if missing:
        raise MeasurementError(f"table {name} has no column {', '.join(map(repr, missing))} declared in the schema")
    unit = schema.privacy_unit.column
    if unit is not None and unit.lower() not in found:
        raise MeasurementError(f"table {name} has no privacy-unit column {unit!r}")
    return {c.name: found[c.name.lower()] for c in schema.columns}


@dataclass(frozen=True)
class Counting:
    """A counting query made ready from the catalog and public inputs only: ``read()`` reads the
    table and returns the histograms (see :func:`prepare_counting`)."""

    read: Callable[[], list[np.ndarray]]

    def run(self) -> list[np.ndarray]:
        """The histograms (see :func:`measure_marginals`); MeasurementError without data values."""
        return self.read()


def _run(backend: Backend, table: "str | exp.Table", plan: _Plan) -> list[np.ndarray]:
    try:
        result = backend.run(plan.query)
    except BackendError as e:
        raise _fail(table, e, backend.dialect) from None
    return plan.split(result)


#: The most marginals one counting query counts (its GROUPING SETS); more are counted in several
#: queries, one after another. DuckDB keeps a hash table per grouping set and thread: the 34,220
#: triples of 60 three-valued columns (20,000 rows) took 15 s and 0.2 GB in queries of 256 sets,
#: 9 GB for the first 4,096 in one query, and ran out of memory in one query of all of them.
MAX_GROUPING_SETS = 256


def prepare_counting(source: "Backend | Any", table: "str | exp.Table", schema: Schema,
                     attributes: Sequence[Attribute], subsets: Sequence[Sequence[int]],
                     snapshot: "Snapshot | None" = None) -> Counting:
    """Check that ``table`` has every schema column (reading its catalog entry, no rows), build
    the counting queries and plan them (:meth:`Backend.check`), so that every failure that does
    not depend on the rows happens here, before the kernel charges the budget. Arguments as for
    :func:`measure_marginals`; with a ``snapshot`` of ``table`` (:func:`take_snapshot`) the
    counts are read from it, the same counts (a split binned column is still read from
    ``table``: its rows are weighed by their values). At most :data:`MAX_GROUPING_SETS`
    marginals are counted by one query (under a privacy unit each query draws its own rows of
    each unit, at most ``max_rows`` of them: each marginal's sensitivity is as before)."""
    if not subsets:
        return Counting(list)
    backend = backend_for(source)
    chunks = [subsets[i:i + MAX_GROUPING_SETS] for i in range(0, len(subsets), MAX_GROUPING_SETS)]
    try:
        if snapshot is not None and not any(a.split for a in attributes):
            plans = [_Plan(schema, attributes, chunk, snapshot.table, None, backend.dialect, indexed=True)
                     for chunk in chunks]
        else:
            types = _column_types(backend, table, schema)
            plans = [_Plan(schema, attributes, chunk, backend.source(table), types, backend.dialect)
                     for chunk in chunks]
        for plan in plans:
            backend.check(plan.query)
    except BackendError as e:
        raise _fail(table, e, backend.dialect) from None
    return Counting(lambda: [h for plan in plans for h in _run(backend, table, plan)])


# -- the owner's snapshot -----------------------------------------------------------------

@dataclass(frozen=True)
class Snapshot:
    """A private table validated and indexed once (:func:`take_snapshot`): a temporary table on the
    owner's DuckDB connection with one small-integer column per schema column, named as it, holding
    the value's domain index (:func:`index_expression`), and only the rows whose every declared
    column is inside its domain. A measurement over it is a plain ``GROUP BY`` of those columns.

    It is private data: it lives on the owner's connection only, which analysts never query (the
    released database and the server's sessions are other connections), and only the kernel reads
    it. It is a copy: rows the owner changes in the table after it was taken are not seen."""

    table: exp.Table


def _index_type(column: Column) -> str:
    """The smallest signed integer type holding every index of ``column`` (its NULL's included)."""
    size = column.size
    return next(t for t, top in (("TINYINT", 2**7), ("SMALLINT", 2**15), ("INTEGER", 2**31), ("BIGINT", 2**63))
                if size <= top)


def snapshot_query(schema: Schema, table: "str | exp.Expression", types: Mapping[str, Any]) -> exp.Select:
    """``SELECT`` every schema column's domain index (as :func:`index_expression`, -1 outside),
    named as the column, of the rows of ``table`` whose every index is in the domain: the rows and
    indices that :func:`marginals_query` counts when nothing is split and there is no privacy unit.

    >>> from dpsql.schema import load_schema
    >>> s = load_schema({"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 9}}})
    >>> snapshot_query(s, "t", {"a": "int"}).sql("duckdb")
    'SELECT CAST("a" AS TINYINT) AS "a" FROM (SELECT CASE WHEN "a" BETWEEN 0 AND 9 THEN TRY_CAST("a" AS BIGINT) ELSE -1 END AS "a" FROM "t") AS "idx" WHERE ("a") >= 0'
    """
    cols = schema.columns
    types = {k.lower(): v for k, v in types.items()}
    indices = exp.select(*[exp.alias_(index_expression(c, _col(c.name), types.get(c.name.lower()), outside=_OUTSIDE),
                                      _ident(c.name)) for c in cols]).from_(_from_item(table), copy=False)
    any_out: exp.Expression = _col(cols[0].name)
    for c in cols[1:]:
        any_out = exp.BitwiseOr(this=any_out, expression=_col(c.name))
    return exp.select(*[exp.alias_(exp.cast(_col(c.name), exp.DataType.build(_index_type(c))), _ident(c.name))
                        for c in cols]).from_(
        exp.Subquery(this=indices, alias=exp.TableAlias(this=_ident("idx"))), copy=False).where(
        exp.GTE(this=exp.Paren(this=any_out), expression=_int(0)), copy=False)


def take_snapshot(source: "Backend | Any", table: str, schema: Schema) -> "Snapshot | None":
    """Validate and index private ``table`` once into a :class:`Snapshot`, so that each later
    measurement is a plain ``GROUP BY`` of small integers; None where a snapshot cannot stand for
    the table: on Spark, and under a privacy unit (whose rows are drawn anew per measurement).

    It reads every row, so it is taken when the owner opens the data (``dpsql.connect``,
    ``dpsql serve``), never for an analyst's request; a failure raises
    :class:`~dpsql.errors.MeasurementError` to the owner, and nothing is spent."""
    backend = backend_for(source)
    if backend.dialect != "duckdb" or schema.privacy_unit.column is not None or not schema.columns:
        return None
    try:
        types = _column_types(backend, table, schema)
        query = snapshot_query(schema, backend.source(table), types)
        name = exp.Table(this=_ident(f"_dpsql_snapshot_{secrets.token_hex(8)}"), db=_ident("main"),
                         catalog=_ident("temp"))
        backend.create_temporary(name, query)
    except BackendError as e:
        raise MeasurementError(f"indexing table {_name(table, backend.dialect)} once for its measurements failed "
                               f"({e.reason}); open it without the snapshot") from None
    return Snapshot(name)


def measure_marginals(source: "Backend | Any", table: "str | exp.Table", schema: Schema,
                      attributes: Sequence[Attribute], subsets: Sequence[Sequence[int]]) -> list[np.ndarray]:
    """Exact histograms of ``table`` over subsets of ``attributes``.

    ``source`` says where the table lives: a :class:`~dpsql.private.backend.Backend`
    (e.g. :class:`~dpsql.private.backend.SparkBackend`), a ``SparkSession``, or a
    DuckDB connection (see :func:`dpsql.private.backend.backend_for`). The same
    counts come out on every backend.

    ``subsets[s]`` lists attribute positions (normally sorted; empty means
    the grand total). Result ``s`` is the histogram over those attributes,
    flattened in C order over their sizes (the first listed attribute varies
    slowest; a merged attribute's index is the C-order index of its
    columns'), as float64 of length ``prod(sizes)`` (1 for the empty subset).

    Rows with any declared column outside its domain are dropped before counting,
    from every marginal alike; with a privacy unit, at most
    ``max_rows`` random rows per unit are counted (see the module docstring).
    Database failures raise :class:`MeasurementError` without data values.
    """
    return prepare_counting(source, table, schema, attributes, subsets).run()
