"""Compiling query plans into one workload, with row bookkeeping.

The public function is :func:`compile_batch` (and :func:`compile_sql` for one
statement). Every statement of a batch becomes a few terms of one
:class:`dpsql.hdmm.workload.Workload`: one Kronecker product per measured
aggregate (COUNT, SUM; AVG is a SUM term and a COUNT term). The workload's
domain is a tuple of *attributes*; an attribute is one schema column, or
several columns merged into one (their joint domain in C order).

Why merging. A Kronecker product can only express a conjunction of
per-attribute conditions. A condition that couples columns (``white OR
black``, ``a < b``, a CASE over several columns) is exact on the merged
attribute of those columns, where it is just a 0/1 vector over the joint
domain (HDMM §2.3 merges the six race flags this way). Columns are merged
when (i) the schema's ``merge`` section says so, or (ii) some statement of the
batch has a top-level conjunct of its WHERE clause, or a GROUP BY key, that
mentions several columns. Top-level conjuncts are found after pushing NOT
through AND/OR (De Morgan holds in SQL's three-valued logic), so ``NOT (a = 1
OR b = 2)`` does not merge. Because every condition is evaluated on every cell
of the public domain, under SQL's three-valued logic, the compiled rows are
exact: ``workload @ x`` equals the SQL answers on any table whose histogram is
``x``.

The data vector ``x`` is the histogram of the table over the attributes, in
attribute order (first attribute slowest); an attribute's index is the C-order
index of its columns' value indices (``Column.index_of``, NULL last). When the
merged columns are adjacent in the schema (as the race flags are) this is the
same vector as the histogram over the columns.

>>> from dpsql.schema import load_schema
>>> s = load_schema({"table": "t", "columns": {
...     "a": {"type": "boolean"}, "b": {"type": "boolean"}, "age": {"type": "integer", "min": 0, "max": 9}}})
>>> batch = compile_batch(["SELECT COUNT(*) FROM t WHERE a OR b", "SELECT age, COUNT(*) FROM t GROUP BY age"], s)
>>> [a.name for a in batch.attributes], batch.domain, batch.workload.shape
(['a+b', 'age'], (4, 10), (11, 40))
>>> batch.statements[1].rows("count_star()")
slice(1, 11, None)
"""

from __future__ import annotations

import contextlib
import gc
import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

import numpy as np
import scipy.sparse as sp
from sqlglot import exp

from dpsql import limits
from dpsql.errors import ArgumentError, SQLError, UnsupportedSQLError
from dpsql.hdmm.matrix import Dense, Identity, Matrix, Ones, Sparse
from dpsql.schema import Attribute, Binned, Column, DateRange, Schema, load_schema
from dpsql.sql.aggregates import MEASURES, QUANTILES, as_days, measures, quantile, value
from dpsql.sql.analyze import analyze
from dpsql.sql.grid import MAX_ATTRIBUTE_SIZE, Grid, column_function, column_refs, conjuncts
from dpsql.sql.parse import Statement, parse_statements
from dpsql.sql.plan import Aggregate, GroupKey, QueryPlan
from dpsql.sql.postprocess import check_postprocessing

if TYPE_CHECKING:
    import pandas as pd

    from dpsql.hdmm.workload import Workload

__all__ = ["Block", "CompiledStatement", "CompiledBatch", "compile_batch", "compile_sql",
           "schema_attributes", "MAX_ATTRIBUTE_SIZE"]

#: Factors with more entries than this are stored sparse.
_DENSE_ENTRIES = 200_000


@dataclass(frozen=True)
class Block:
    """Workload rows ``start:stop`` measuring one of an aggregate's queries, for one statement.
    ``measure`` is 'count', 'sum' or 'sumsq'; for the sums, ``column``'s values are clamped to
    ``bounds`` (and squared for 'sumsq'). Row ``i`` of the block is group ``i`` of the statement;
    its answer times ``scale`` is the query's. A SUM is measured divided by the power of two at or
    above the bounds' largest magnitude, a SUM of squares by its square, so that their weights are
    on a COUNT's scale (:func:`_scale`): otherwise they would dominate the batch's Gram matrix, and
    the strategy would barely measure the other queries."""

    statement: int
    aggregate: str
    measure: str
    column: str | None
    bounds: tuple[float, float] | None
    start: int
    stop: int
    term: int | None  # None for a statement without groups: no rows, nothing measured
    scale: float = 1.0
    #: the rows, when not ``start:stop``: a quantile's prefix count ``j`` of each group, within the
    #: one term that holds all of the column's prefix counts (``start`` is the term's first row)
    index: np.ndarray | None = field(default=None, compare=False)
    #: for a SUM, the groups in which no row of any table has a non-NULL value (their WHERE,
    #: FILTER and keys rule out every such cell of the domain): their SUM is NULL, as DuckDB's
    empty: np.ndarray | None = field(default=None, compare=False)
    #: the statement's groups the block answers, when not all: one grouping set's (GROUPING SETS,
    #: ROLLUP, CUBE); a measure then has one block per set, each zero on the others' groups
    part: slice | None = field(default=None, compare=False)

    @property
    def rows(self) -> slice | np.ndarray:
        return slice(self.start, self.stop) if self.index is None else self.index

    def take(self, v: np.ndarray, groups: int) -> np.ndarray:
        """The block's entries of a per-query vector ``v`` (answers, or standard errors) times
        ``scale``, one per group: zeros for a block that measures nothing, since WHERE rules out
        every cell of the public domain and no row of any table counts in it, and zeros on the
        groups outside its :attr:`part`."""
        if self.part is None:
            return np.zeros(groups) if self.term is None else v[self.rows] * self.scale
        out = np.zeros(groups)
        if self.term is not None:
            out[self.part] = v[self.rows] * self.scale
        return out


@dataclass(frozen=True, eq=False)
class CompiledStatement:
    """One statement's place in the batch. ``groups[i]`` holds the key labels
    (in ``plan.keys`` order; None is NULL) of the statement's ``i``-th group;
    groups cover the keys' declared domain, less the groups WHERE rules out on it."""

    index: int
    plan: QueryPlan
    groups: tuple[tuple, ...]
    blocks: tuple[Block, ...]
    #: a quantile's thresholds (by aggregate name): its column's non-NULL domain values, sorted, or a
    #: binned column's bins ``(lo, hi)`` in order (:func:`~dpsql.sql.aggregates.quantile`)
    thresholds: dict[str, tuple] = field(default_factory=dict)
    #: with grouping sets (:attr:`QueryPlan.grouping_sets`), each group's set; else empty
    sets: tuple[int, ...] = ()

    def block(self, aggregate: str, measure: str | None = None) -> Block:
        """The block of one of an aggregate's measured queries (:data:`~dpsql.sql.aggregates.MEASURES`;
        the first by default, the only one for COUNT and SUM)."""
        return next(b for b in self.blocks if b.aggregate == aggregate and measure in (None, b.measure))

    def blocks_of(self, aggregate: str) -> list[Block]:
        """An aggregate's blocks, one per measured query, in measure order."""
        return [b for b in self.blocks if b.aggregate == aggregate]

    def rows(self, aggregate: str, measure: str | None = None) -> slice:
        """Workload rows of an aggregate's block."""
        return self.block(aggregate, measure).rows

    def parts(self, aggregate: str, y: np.ndarray) -> dict[str, np.ndarray]:
        """An aggregate's measured queries per group, from workload answers ``y``."""
        out: dict[str, np.ndarray] = {}
        for b in self.blocks_of(aggregate):  # several blocks of one measure: one per grouping set
            out[b.measure] = out[b.measure] + b.take(y, len(self.groups)) if b.measure in out \
                else b.take(y, len(self.groups))
        return out

    def table(self, y: np.ndarray) -> pd.DataFrame:
        """A pandas DataFrame with one row per group: every key and aggregate (hidden ones too),
        from workload answers ``y``, and the grouping-set column (see :meth:`CompiledBatch.tables`)."""
        import pandas as pd

        y = np.asarray(y, dtype=float)
        data: dict[str, Any] = {}
        for i, key in enumerate(self.plan.keys):
            # object dtype keeps None as SQL NULL (pandas would turn it into NaN)
            data[key.name] = pd.Series([g[i] for g in self.groups], dtype=object)
        for agg in self.plan.aggregates:
            data[agg.name] = self.values(agg.name, y)
        if self.plan.set_column is not None:
            data[self.plan.set_column] = np.asarray(self.sets, dtype=np.int64)
        if not self.plan.keys:
            data = {k: np.atleast_1d(v) for k, v in data.items()}
        return pd.DataFrame(data)

    def measured(self, aggregate: str) -> bool:
        """Whether an aggregate is measured: False when WHERE rules out the whole public domain."""
        return any(b.term is not None for b in self.blocks_of(aggregate))

    def notes(self, df: "pd.DataFrame") -> tuple[str, ...]:
        """What the answers in ``df`` (this statement's result) say beyond their values: each visible
        quantile of a binned column is interpolated within a bin, named by its edges (the bin holding
        the answer, by the schema's rule: [lo, hi), the last bin closed), row by row."""
        out = []
        for agg in self.plan.aggregates:
            bins = np.asarray(self.thresholds.get(agg.name, ()), dtype=float)
            if bins.ndim != 2 or not agg.visible or agg.name not in df.columns:
                continue
            answers = df[agg.name].to_numpy(dtype=float)
            answers = answers[~np.isnan(answers)]
            held = np.clip(np.searchsorted(bins[:, 0], answers, side="right") - 1, 0, len(bins) - 1)
            named = [f"[{lo:.15g}, {hi:.15g}{']' if j == len(bins) - 1 else ')'}"
                     for j, (lo, hi) in enumerate(bins)]
            found = [(named[j], int((held == j).sum())) for j in np.unique(held)]
            where = ", ".join(f"{b} ({k} row{'s' * (k != 1)})" if len(answers) > 1 else b for b, k in found)
            if found:
                out.append(f"{agg.name} is interpolated within bin{'s' * (len(found) > 1)} {where} of {agg.column}: "
                           "a bin's rows taken as spread evenly between its edges; its interval covers that bin")
        return tuple(out)

    def values(self, aggregate: str, y: np.ndarray) -> np.ndarray:
        """One aggregate's value per group from workload answers ``y`` (:func:`~dpsql.sql.aggregates.value`)."""
        agg = next(a for a in self.plan.aggregates if a.name == aggregate)
        if agg.func in QUANTILES:  # NULL over no rows
            out = quantile(agg.func, agg.quantile, agg.descending, np.array(self.thresholds[aggregate]),
                           self.parts(aggregate, y)) if self.measured(aggregate) else np.full(len(self.groups), np.nan)
            return out if agg.origin is None else as_days(out, agg.origin, agg.func)  # a date column's: days
        if not self.measured(aggregate):  # over no rows: COUNT is 0, and every other aggregate NULL
            return np.full(len(self.groups), 0.0 if agg.func == "count" else np.nan)
        out = value(agg.func, self.parts(aggregate, y), agg.bounds)
        if agg.func != "sum":
            return out
        empty = np.zeros(len(self.groups), dtype=bool)
        for b in self.blocks_of(aggregate):
            if b.empty is not None:
                empty[b.part if b.part is not None else slice(None)] = b.empty
        return np.where(empty, np.nan, out)


@dataclass(frozen=True, eq=False)
class CompiledBatch:
    """A batch compiled to one workload (see the module docstring)."""

    schema: Schema
    attributes: tuple[Attribute, ...]
    statements: tuple[CompiledStatement, ...]
    terms: tuple[tuple[float, tuple[Any, ...]], ...]

    @property
    def domain(self) -> tuple[int, ...]:
        return tuple(a.size for a in self.attributes)

    @property
    def num_rows(self) -> int:
        return sum(math.prod(f.shape[0] for f in factors) for _, factors in self.terms)

    @cached_property
    def workload(self) -> Workload:
        """The :class:`dpsql.hdmm.workload.Workload` (built on first use)."""
        from dpsql.hdmm.workload import Workload

        return Workload(self.domain, list(self.terms))

    def attribute_of(self, column: str) -> Attribute:
        return next(a for a in self.attributes if column in a.columns)

    def tables(self, y: np.ndarray) -> list:
        """Per statement, a pandas DataFrame with one row per group: every key
        and aggregate (hidden ones too), from workload answers ``y`` (noisy
        ones, normally). AVG is SUM / COUNT."""
        return [st.table(y) for st in self.statements]


def compile_sql(sql: str, schema: "Schema | dict | str", **kwargs) -> CompiledBatch:
    """Compile one statement (or a ``;``-separated text) to a batch."""
    return compile_batch(sql, schema, **kwargs)


def compile_batch(sql: "str | Sequence[str]", schema: "Schema | dict | str",
                  merge: Iterable[Sequence[str]] = (), dialect: str | None = None) -> CompiledBatch:
    """Compile statements (a text of ``;``-separated statements, or a list of
    such texts) into one workload.

    A text is only ever SQL, never a file name: what compiles a request reads
    no file (read a ``.sql`` file yourself, as the ``dpsql batch`` command does).
    ``merge`` adds groups of columns to measure as one attribute, on top of the
    schema's ``merge`` section and the merges the statements need. ``dialect`` reads the
    statements in another SQL dialect (sqlglot's name: ``"postgres"``, ``"tsql"``...), transpiled
    to DuckDB's (:func:`~dpsql.sql.parse.parse_statements`).
    """
    schema = load_schema(schema)
    statements: list[Statement] = []
    texts = [sql] if isinstance(sql, str) else list(sql) if isinstance(sql, (list, tuple)) else None
    if texts is None:
        raise ArgumentError(f"SQL must be a text or a list of texts, got {type(sql).__name__}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ArgumentError(f"SQL must be text: item {i + 1} of the batch is of type {type(text).__name__}")
    _check_size(texts)
    items: list[int] = []  # each statement's text, for the errors of a list of several
    types = {c.name.lower(): c.sql_type for c in schema.columns}  # for another dialect's typed semantics
    for i, text in enumerate(texts):
        with _placed(i, len(texts)):
            found = parse_statements(text, dialect, types)
        statements.extend(found)
        items.extend([i] * len(found))
    if not statements:
        raise UnsupportedSQLError("no SQL statement to compile", "empty batch", 1, 1)
    if len(statements) > limits.MAX_STATEMENTS:
        raise limits.refuse("this batch has", len(statements), "statements", limits.MAX_STATEMENTS)
    plans = []
    for st, i in zip(statements, items):
        with _placed(i, len(texts)):
            plans.append(analyze(st, schema))
    try:
        attributes = _attributes(schema, plans, statements, [tuple(m) for m in merge])
        batch = _fold_sets(plans, _compile(schema, _expand_sets(plans), attributes))
    except RecursionError:  # a safety net: parse_statements bounds the nesting on tokens first
        raise limits.nesting_error(None, None, ", or its syntax tree is too deep for the Python stack left") from None
    check_postprocessing(batch)
    return batch


@contextlib.contextmanager
def _placed(item: int, items: int) -> Iterator[None]:
    """A SQL error in text ``item`` (0-based) of a batch given as a list of ``items`` texts says
    which text it is in: its line and column are within that text."""
    try:
        yield
    except SQLError as e:
        if items == 1 or e.item is not None:
            raise
        raise e.in_item(item + 1) from None


def _check_size(texts: Sequence[str]) -> None:
    """Refuse, before parsing, a batch whose text or statement count exceeds the limits
    (statements are estimated by their ``;`` separators)."""
    estimate = sum(max(1, t.rstrip().rstrip(";").count(";") + 1) for t in texts if isinstance(t, str))
    if estimate > limits.MAX_STATEMENTS:
        unit = "statements" if all(";" not in t.rstrip().rstrip(";") for t in texts) else "statements (about)"
        raise limits.refuse("this batch has", estimate, unit, limits.MAX_STATEMENTS)
    chars = sum(len(t) for t in texts if isinstance(t, str))
    if chars > limits.MAX_SQL_CHARS:
        raise limits.refuse("this SQL text has", chars, "characters", limits.MAX_SQL_CHARS)


def schema_attributes(schema: "Schema | dict | str") -> tuple[Attribute, ...]:
    """The attributes of a schema with no statement: each column alone, except
    the columns its ``merge`` section measures together.

    >>> from dpsql.schema import load_schema
    >>> s = load_schema({"table": "t", "merge": {"ab": ["a", "b"]}, "columns": {
    ...     "a": {"type": "boolean"}, "b": {"type": "boolean"}, "c": {"type": "integer", "min": 0, "max": 4}}})
    >>> [(a.name, a.size) for a in schema_attributes(s)]
    [('ab', 4), ('c', 5)]
    """
    return _attributes(load_schema(schema), [], [], [])


# -- attributes --------------------------------------------------------------------------

def _attributes(schema: Schema, plans: list[QueryPlan], statements: list[Statement],
                extra: list[tuple[str, ...]]) -> tuple[Attribute, ...]:
    parent = {c.name: c.name for c in schema.columns}

    def find(c: str) -> str:
        while parent[c] != c:
            parent[c] = parent[parent[c]]
            c = parent[c]
        return c

    def union(cols: Sequence[str]) -> None:
        roots = [find(c) for c in cols]
        for r in roots[1:]:
            parent[find(r)] = find(roots[0])

    names: dict[frozenset, str] = {}
    for mname, cols in schema.merge:
        union(cols)
        names[frozenset(cols)] = mname
    for cols in extra:
        resolved = []
        for c in cols:
            col = schema.column(c)
            if col is None:
                raise UnsupportedSQLError(f"merge names unknown column {c!r}", f"column {c!r}")
            resolved.append(col.name)
        union(resolved)
    for plan, st in zip(plans, statements):
        filters = [part for a in plan.aggregates for part in conjuncts(a.filter) + conjuncts(a.indicator)]
        for part in conjuncts(plan.where) + filters + [k.expr for k in plan.keys]:
            cols = column_refs(part)
            if len(cols) > 1:
                union(cols)
                size = math.prod(schema.column(c).size for c in
                                 {d for d in parent if find(d) == find(cols[0])})
                if size > MAX_ATTRIBUTE_SIZE:
                    line, col = st.position(part)
                    raise UnsupportedSQLError(
                        f"this condition couples columns {', '.join(cols)}; measuring them as one attribute "
                        f"needs {size} cells (at most {MAX_ATTRIBUTE_SIZE})", "condition across columns",
                        line, col)
    groups: dict[str, list[str]] = {}
    for c in schema.columns:
        groups.setdefault(find(c.name), []).append(c.name)
    # a binned column a statement sums is measured by endpoint masses (see Attribute)
    summed = {a.column for plan in plans for a in plan.aggregates if a.func in ("sum", "avg") and a.column
              and isinstance(schema.column(a.column), Binned)}
    attrs = []
    for cols in sorted(groups.values(), key=lambda cs: schema.position(cs[0])):
        name = names.get(frozenset(cols), "+".join(cols))
        attrs.append(Attribute(name=name, columns=tuple(cols),
                               sizes=tuple(schema.column(c).size * (2 if c in summed else 1) for c in cols),
                               split=tuple(c for c in cols if c in summed)))
    return tuple(attrs)


# -- terms -------------------------------------------------------------------------------

class _KeyDomain:
    """A GROUP BY key on its attribute's grid: its labels and each cell's group."""

    def __init__(self, grid: Grid, key_expr: exp.Expression) -> None:
        v = grid.value(key_expr)
        if v.column is not None and isinstance(key_expr, exp.Column):
            col = v.column
            self.labels = list(col.labels)
            idx = grid.axis_array(col.name, np.arange(col.size))
            self.index = grid.full(idx).ravel()
            return
        null = grid.full(v.null).ravel()
        values = grid.full(v.values).ravel()
        if v.labels is not None:
            labels = list(v.labels)
            lookup = {lab: i for i, lab in enumerate(labels)}
            index = np.array([lookup.get(x.item() if hasattr(x, "item") else x, -1) for x in values]
                             if values.size <= 100_000 else _label_index(values, labels), dtype=np.int64)
        else:
            present = np.unique(values[~null]) if (~null).any() else np.array([])
            labels = [x.item() if hasattr(x, "item") else x for x in present]
            if v.kind == "bool":
                labels = [bool(x) for x in labels]
            if present.size:
                values = np.where(null, present[0], values)  # a NULL cell's placeholder may not compare
                index = np.searchsorted(present, values)
            else:
                index = np.zeros(values.size, np.int64)
        if null.any():
            labels.append(None)
            index = np.where(null, len(labels) - 1, index)
        self.labels = labels
        self.index = np.asarray(index, dtype=np.int64)


def _label_index(values: np.ndarray, labels: list) -> np.ndarray:
    out = np.full(values.size, -1, dtype=np.int64)
    for i, lab in enumerate(labels):
        out[values == lab] = i
    return out


def _group_labels(n_keys: int, parts: Sequence[tuple[Sequence[int], Sequence[_KeyDomain], np.ndarray]]) -> tuple:
    """Every group's labels in key order: the product, over the attributes hosting keys (the first
    slowest), of each one's kept key combinations (``parts``: its keys' positions, their domains and
    ``kept``, flat indices into the keys' labels). Built a column per key in numpy, then zipped with
    the cyclic garbage collector paused: its passes over millions of new tuples, which hold no
    cycles, took 3 of the 3.5 s the 2.3 million groups of a tract-level batch took to list."""
    sizes = [len(kept) for _, _, kept in parts]
    columns: list[list] = [[] for _ in range(n_keys)]
    for a, (keys, doms, kept) in enumerate(parts):
        combos = np.unravel_index(kept, [len(d.labels) for d in doms])
        for k, d, index in zip(keys, doms, combos):
            labels = np.fromiter(d.labels, dtype=object, count=len(d.labels))
            columns[k] = np.tile(np.repeat(labels[index], math.prod(sizes[a + 1:])), math.prod(sizes[:a])).tolist()
    if not n_keys:
        return ((),)
    enabled = gc.isenabled()
    gc.disable()
    try:
        return tuple(zip(*columns))
    finally:
        if enabled:
            gc.enable()


def _compile(schema: Schema, plans: list[QueryPlan], split_attributes: tuple[Attribute, ...]) -> CompiledBatch:
    # terms are built on each attribute's value cells, then put on its endpoint cells (_split)
    attributes = tuple(replace(a, sizes=tuple(schema.column(c).size for c in a.columns), split=())
                       for a in split_attributes)
    grids = [Grid([schema.column(c) for c in a.columns]) for a in attributes]
    attr_of = {c: i for i, a in enumerate(attributes) for c in a.columns}
    terms: list[tuple[float, tuple[Any, ...]]] = []
    compiled: list[CompiledStatement] = []
    row = queries = 0
    for s_index, plan in enumerate(plans):
        where = _masks(plan.where, [None] * len(attributes), grids, attr_of)

        # keys hosted by each attribute, in plan order
        hosted: list[list[int]] = [[] for _ in attributes]
        key_domains: list[_KeyDomain] = []
        for k, key in enumerate(plan.keys):
            a = attr_of[key.columns[0]]
            hosted[a].append(k)
            key_domains.append(_KeyDomain(grids[a], key.expr))

        # the groups: per attribute, the key combinations of the cells where WHERE can hold. The
        # others are empty on every table (DuckDB never returns them); this reads the domain alone.
        impossible = any(m is not None and not m.any() for m in where)
        kept: list[np.ndarray | None] = [None] * len(attributes)
        for a in range(len(attributes)):
            if hosted[a]:
                group = _cell_groups([key_domains[k] for k in hosted[a]])
                kept[a] = np.unique(group[:0] if impossible else group if where[a] is None else group[where[a]])

        # answers: one per group and measured aggregate, refused before the groups are listed
        # (a statement without GROUP BY keeps its one group, answered as over no rows, unmeasured)
        n_groups = 0 if impossible else math.prod(len(rows) for rows in kept if rows is not None)
        thresholds = {a.name: _thresholds(schema.column(a.column)) for a in plan.aggregates if a.func in QUANTILES}
        queries += n_groups * sum(len(measures(a.func, len(thresholds.get(a.name, ())))) for a in plan.aggregates)
        # one measured query per group for each of these; a quantile's prefix counts are one term
        group_dims = [len(rows) if rows is not None else 1 for rows in kept]
        limits.check_queries(queries, f"statement {s_index + 1} ({n_groups:,} groups) and those before it need"
                             if len(plans) > 1 else f"this statement has {n_groups:,} groups and needs")
        groups = _group_labels(len(plan.keys), [(hosted[a], [key_domains[k] for k in hosted[a]], kept[a])
                                                for a in range(len(attributes)) if hosted[a]])

        blocks: list[Block] = []
        made: dict[tuple, Any] = {}  # a block (or a quantile's blocks) already measured, by what it counts
        for agg in plan.aggregates:
            masks = _masks(agg.filter, where, grids, attr_of)
            filter_sql = None if agg.filter is None else agg.filter.sql(dialect="duckdb")
            if agg.argument is not None:  # a lookup column's values: not the column's own
                filter_sql = (filter_sql, agg.argument.sql(dialect="duckdb"))
            if agg.func in QUANTILES:  # the column's prefix counts: one term, a block per threshold
                sig = ("cdf", agg.column, filter_sql)
                if sig not in made:
                    factors, index = _cdf_term(schema.column(agg.column), thresholds[agg.name], attributes, grids,
                                               attr_of, masks, hosted, key_domains, plan.keys, kept, group_dims)
                    nrows = n_groups * len(thresholds[agg.name])
                    made[sig] = [Block(s_index, agg.name, f"le{j}", agg.column, None, row, row + nrows,
                                       len(terms) if n_groups else None, 1.0, row + index[j])
                                 for j in range(len(thresholds[agg.name]))]
                    if n_groups:
                        terms.append((1.0, tuple(_split(f, a, schema) for f, a in zip(factors, split_attributes))))
                        row += nrows
                blocks.extend(replace(b, aggregate=agg.name) for b in made[sig])
                continue
            for measure in MEASURES[agg.func]:
                column = agg.column
                col = schema.column(column) if column else None
                # a proportion's SUM counts the rows where its value is 1
                hits = _masks(agg.indicator, masks, grids, attr_of) if measure == "sum" and agg.indicator else None
                # COUNT(col) of a non-nullable column is COUNT(*)
                sig = (measure, column if (measure != "count" or (col is not None and col.nullable)) else None,
                       filter_sql, None if hits is None else agg.indicator.sql(dialect="duckdb"))
                if sig in made:
                    # the same rows (and, for a SUM, the same empty groups) under this aggregate's name
                    blocks.append(replace(made[sig], aggregate=agg.name, column=column,
                                          bounds=agg.bounds if measure in ("sum", "sumsq") else None))
                    continue
                if not n_groups:
                    made[sig] = Block(s_index, agg.name, measure, column, None, row, row, None)
                    blocks.append(made[sig])
                    continue
                scale = _scale(measure, agg.sensitivity)
                factors = []
                nonempty = np.ones(1, dtype=bool)  # for a SUM: the groups with a cell whose value is not NULL
                for a, attr in enumerate(attributes):
                    mask = masks[a] if hits is None else hits[a]
                    weights = endpoints = None
                    keys_here = ([key_domains[k] for k in hosted[a]], [plan.keys[k] for k in hosted[a]], kept[a])
                    counted = mask  # the cells a COUNT(column) would count here
                    if col is not None and attr_of[col.name] == a:
                        nn = grids[a].full(grids[a].axis_array(col.name, _not_null(col, agg.argument))).ravel()
                        counted = nn if mask is None else (mask & nn)
                        if measure == "count":
                            mask = counted
                        elif isinstance(col, Binned):  # a SUM: weights on the endpoint cells
                            endpoints = (col.name, col.endpoint_weights(agg.bounds) / scale)
                        else:
                            w = col.sum_weights(agg.bounds) if agg.argument is None else _lookup_weights(col, agg)
                            w = w * w / scale if measure == "sumsq" else w / scale
                            weights = grids[a].full(grids[a].axis_array(col.name, w)).ravel()
                    if measure == "sum":
                        nonempty = np.kron(nonempty, _factor(attr, grids[a], counted, None, *keys_here).row_sums() > 0)
                    factor = _factor(attr, grids[a], mask, weights, *keys_here)
                    factors.append(_split(factor, split_attributes[a], schema, endpoints))
                nrows = math.prod(f.shape[0] for f in factors)
                blk = Block(s_index, agg.name, measure, column, agg.bounds if measure in ("sum", "sumsq") else None,
                            row, row + nrows, len(terms), scale, empty=~nonempty if measure == "sum" else None)
                terms.append((1.0, tuple(factors)))
                row += nrows
                made[sig] = blk
                blocks.append(blk)
        compiled.append(CompiledStatement(index=s_index, plan=plan, groups=groups, blocks=tuple(blocks),
                                          thresholds=thresholds))
    return CompiledBatch(schema=schema, attributes=split_attributes, statements=tuple(compiled), terms=tuple(terms))


def _split(factor: Matrix, attr: Attribute, schema: Schema,
           endpoints: tuple[str, np.ndarray] | None = None) -> Matrix:
    """``factor``, a matrix over ``attr``'s value cells, on its endpoint cells (``attr.split``,
    see :class:`~dpsql.schema.Attribute`): both cells of a value get the value's column. With
    ``endpoints = (column, weights)``, each cell's column is also multiplied by the weight of
    its cell of ``column`` (one weight per endpoint cell): a SUM over that binned column."""
    if not attr.split:
        return factor
    if isinstance(factor, Ones) and endpoints is None:
        return Ones(factor.shape[0], attr.size)
    cells = np.unravel_index(np.arange(attr.size), attr.sizes)
    value = [k // 2 if c in attr.split else k for c, k in zip(attr.columns, cells)]
    source = np.ravel_multi_index(value, [schema.column(c).size for c in attr.columns])
    M = (factor.matrix if isinstance(factor, Sparse) else sp.identity(factor.shape[1], format="csr")
         if isinstance(factor, Identity) else sp.csr_matrix(factor.dense()))[:, source]
    if endpoints is not None:
        column, weights = endpoints
        M = M @ sp.diags(weights[cells[attr.columns.index(column)]])
    return Dense(M.toarray()) if M.shape[0] * M.shape[1] <= _DENSE_ENTRIES else Sparse(sp.csr_matrix(M))


def _thresholds(col: Column) -> tuple:
    """A quantile's thresholds, one prefix count each: the column's sorted non-NULL values, a date
    column's days as numbers (days from its first), or a binned column's bins as ``(lo, hi)``
    pairs, in order (its quantile is read within them)."""
    if isinstance(col, Binned):
        return tuple(zip(col.edges[:-1], col.edges[1:]))
    if isinstance(col, DateRange):
        return tuple(range(len(col.values)))
    return tuple(sorted(col.values))


def _cdf_term(col: Column, levels: tuple, attributes: tuple[Attribute, ...], grids: list[Grid],
              attr_of: dict[str, int], masks: list[np.ndarray | None], hosted: list[list[int]],
              key_domains: list[_KeyDomain], keys: Sequence[GroupKey], kept: list[np.ndarray | None],
              group_dims: list[int]) -> tuple[list[Matrix], list[np.ndarray]]:
    """A quantile's prefix counts as one Kronecker term: on the column's attribute, one row per
    (group, threshold) counting the cells whose value is at most the threshold (a prefix matrix
    within each group); elsewhere the usual group factors. Also, per threshold, each group's row
    in the term (the term's rows run in attribute order, the threshold beside its attribute's
    group)."""
    m = len(levels)
    home = attr_of[col.name]
    factors: list[Matrix] = []
    for a, attr in enumerate(attributes):
        doms = [key_domains[k] for k in hosted[a]]
        if a != home:
            factors.append(_factor(attr, grids[a], masks[a], None, doms, [keys[k] for k in hosted[a]], kept[a]))
            continue
        n = attr.size
        label = grids[a].full(grids[a].axis_array(col.name, np.arange(col.size))).ravel()
        # each domain value's threshold (a binned column's bins and a date column's days are its
        # thresholds, in order); NULL none
        order = np.arange(m) if isinstance(col, (Binned, DateRange)) else np.searchsorted(levels, col.values)
        rank = np.concatenate([order, np.full(int(col.nullable), -1)])[label]
        groups = kept[a] if kept[a] is not None else np.zeros(1, np.int64)
        row_of = np.full(math.prod(len(d.labels) for d in doms), -1)  # a group WHERE rules out has no row
        row_of[groups] = np.arange(groups.size)
        group = row_of[_cell_groups(doms)] if doms else np.zeros(n, np.int64)
        valid = (rank >= 0) & (group >= 0) & (masks[a] if masks[a] is not None else True)
        cells = np.nonzero(valid)[0]
        lengths = m - rank[cells]  # a cell counts for its value's threshold and every one above
        within = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        rows = np.repeat(group[cells] * m + rank[cells], lengths) + within
        M = sp.csr_matrix((np.ones(rows.size), (rows, np.repeat(cells, lengths))), shape=(groups.size * m, n))
        factors.append(Dense(M.toarray()) if M.shape[0] * n <= _DENSE_ENTRIES else Sparse(M))
    dims = [d * m if a == home else d for a, d in enumerate(group_dims)]
    multi = np.unravel_index(np.arange(math.prod(group_dims)), group_dims)
    index = []
    for j in range(m):
        coords = [c * m + j if a == home else c for a, c in enumerate(multi)]
        index.append(np.ravel_multi_index(coords, dims) if coords else np.zeros(0, np.int64))
    return factors, index


def _masks(condition: exp.Expression | None, masks: list[np.ndarray | None], grids: list[Grid],
           attr_of: dict[str, int]) -> list[np.ndarray | None]:
    """``masks`` (one flat boolean vector per attribute, None for no condition) ANDed with
    ``condition``: each top-level conjunct is exact on the one attribute holding its columns."""
    masks = list(masks)
    for part in conjuncts(condition):
        cols = column_refs(part)
        if not cols:
            t, _ = Grid([]).predicate(part)
            if not bool(t):
                masks[0] = np.zeros(grids[0].size, dtype=bool)
            continue
        a = attr_of[cols[0]]
        t = grids[a].full(grids[a].predicate(part)[0]).ravel()
        masks[a] = t if masks[a] is None else (masks[a] & t)
    return masks


def _scale(measure: str, sensitivity: float) -> float:
    """What a block of ``measure`` is measured divided by: for a SUM, the power of two at or above its
    bound's largest magnitude (a power of two, so that dividing and multiplying back are exact in
    binary floating point), and its square for a SUM of squares, so that every query's weights are at
    most 1, as a COUNT's. Otherwise a SUM of pay (bounds in the 100,000s) dominates the batch's Gram
    matrix, the strategy barely measures the COUNT beside it, and their ratio, an AVG, is noise."""
    if measure not in ("sum", "sumsq") or not sensitivity > 0:
        return 1.0
    power = 2.0 ** math.ceil(math.log2(sensitivity))
    return power * power if measure == "sumsq" else power


def _lookup_weights(col: Column, agg: Aggregate) -> np.ndarray:
    """Per domain index of ``col``: the value an aggregate's ``argument`` reads there, clamped to its
    bounds, 0 where NULL (which SUM skips)."""
    values, null = column_function(col, agg.argument)
    return np.where(null, 0.0, np.clip(values, *agg.bounds))


def _not_null(col: Column, argument: exp.Expression | None = None) -> np.ndarray:
    """Per domain index of ``col``: whether it, or the ``argument`` read of it (a lookup column), is not NULL."""
    if argument is not None:
        return ~column_function(col, argument)[1]
    v = np.ones(col.size, dtype=bool)
    if col.nullable:
        v[-1] = False
    return v


def _cell_groups(keys: list[_KeyDomain]) -> np.ndarray:
    """Each cell's group on an attribute: the C-order index of its keys' labels."""
    if len(keys) == 1:
        return keys[0].index
    return np.ravel_multi_index([k.index for k in keys], [len(k.labels) for k in keys])


def _factor(attr: Attribute, grid: Grid, mask: np.ndarray | None, weights: np.ndarray | None,
            keys: list[_KeyDomain], key_plans: list[GroupKey], kept: np.ndarray | None) -> Matrix:
    """The factor of one aggregate's term on one attribute: its keys' groups (the rows ``kept``) by
    the attribute's cells, each entry the cell's weight where ``mask`` holds."""
    n = attr.size
    if mask is not None and mask.all():
        mask = None
    if not keys:
        if mask is None and weights is None:
            return Ones(1, n)
        row = np.ones(n) if weights is None else weights.astype(float)
        if mask is not None:
            row = row * mask
        return Dense(row[None, :])
    if (len(keys) == 1 and mask is None and weights is None and len(attr.columns) == 1
            and isinstance(key_plans[0].expr, exp.Column) and len(kept) == n):
        return Identity(n)
    rows = math.prod(len(k.labels) for k in keys)
    group = _cell_groups(keys)
    vals = np.ones(n) if weights is None else weights.astype(float)
    if mask is not None:
        vals = vals * mask
    keep = vals != 0
    cols = np.nonzero(keep)[0]
    M = sp.csr_matrix((vals[keep], (group[keep], cols)), shape=(rows, n))[kept]
    rows = len(kept)
    if rows * n <= _DENSE_ENTRIES:
        return Dense(M.toarray())
    return Sparse(M)


# -- grouping sets -----------------------------------------------------------------------

def _expand_sets(plans: list[QueryPlan]) -> list[QueryPlan]:
    """Each plan with grouping sets (GROUPING SETS, ROLLUP, CUBE) as one plan per set, grouped on
    that set's keys: compiled like any statement, all of them terms of the one workload, so HDMM
    optimizes every margin of a tabulation together (:func:`_fold_sets` makes them one again)."""
    out = []
    for plan in plans:
        if plan.grouping_sets is None:
            out.append(plan)
            continue
        out.extend(replace(plan, keys=tuple(plan.keys[k] for k in s), grouping_sets=None)
                   for s in plan.grouping_sets)
    return out


def _fold_sets(plans: list[QueryPlan], expanded: CompiledBatch) -> CompiledBatch:
    """The statements of :func:`_expand_sets` made one per plan: a plan's sets' groups in turn (a
    key outside a set is NULL there), each set's blocks answering its groups (:attr:`Block.part`)."""
    parts = iter(expanded.statements)
    statements = []
    for i, plan in enumerate(plans):
        if plan.grouping_sets is None:
            st = next(parts)
            statements.append(replace(st, index=i, blocks=tuple(replace(b, statement=i) for b in st.blocks)))
            continue
        groups: list[tuple] = []
        blocks: list[Block] = []
        sets: list[int] = []
        thresholds: dict[str, tuple] = {}
        for j, keys in enumerate(plan.grouping_sets):
            st = next(parts)
            part = slice(len(groups), len(groups) + len(st.groups))
            for g in st.groups:
                labels = dict(zip(keys, g))
                groups.append(tuple(labels.get(k) for k in range(len(plan.keys))))
            sets.extend([j] * len(st.groups))
            blocks.extend(replace(b, statement=i, part=part) for b in st.blocks)
            thresholds.update(st.thresholds)
        statements.append(CompiledStatement(index=i, plan=plan, groups=tuple(groups), blocks=tuple(blocks),
                                            thresholds=thresholds, sets=tuple(sets)))
    return replace(expanded, statements=tuple(statements))
