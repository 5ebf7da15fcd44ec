"""Evaluating any deterministic scalar expression on the declared domain, by DuckDB itself.

One public function, :func:`domain_eval`. The expression (``name LIKE 'Bach%'``,
``lower(c) = 'x'``, ``age // 10``, ``substr(code, 1, 2)``, ``COALESCE(a, b)``,
``date_trunc('month', CAST(day AS DATE))``) is run by DuckDB on every cell of
the product of its columns' declared domains, in the sandbox
(:mod:`dpsql.sql.sandbox`), which holds public values only. The result is the
expression's value on each cell: a predicate or a GROUP BY key over the domain,
so the compiler needs no new kind of query, and the semantics are DuckDB's own,
NULLs and overflow included. A domain column has the type of its declared
values (:attr:`dpsql.schema.Column.sql_type`: BIGINT, VARCHAR, BOOLEAN or
DOUBLE), the type dpsql reads them in. A hierarchy's level given by a mapping
(``dpsql_level(geo, 'county')``, :mod:`dpsql.sql.levels`) is one more column of
its code's domain, listing each code's county from the mapping.

An expression DuckDB cannot evaluate on some value of the domain (an overflow,
a failed cast) is refused, as is one that is not deterministic
(:func:`dpsql.sql.sandbox.check_deterministic`) or that calls a function
which can build a value larger than its arguments (``repeat``, ``lpad``,
``range``: :func:`dpsql.sql.sandbox.check_bounded`), before DuckDB runs it.
The evaluation runs under the sandbox's limits (:func:`dpsql.sql.sandbox.limited`):
past :data:`dpsql.limits.MAX_EVAL_SECONDS` or :data:`dpsql.limits.MAX_EVAL_MEMORY_MIB`
it stops with :class:`dpsql.limits.EvaluationLimitError`. All of these depend on
the schema alone, never on data, and happen while compiling, before anything is spent.

>>> from dpsql.schema import Categorical
>>> from sqlglot import parse_one
>>> out = domain_eval(parse_one("lower(educ) LIKE 'bach%'"), [Categorical("educ", choices=("HS", "Bachelors"))])
>>> out.sql_type, out.values.tolist(), out.null.tolist()
('BOOLEAN', [False, True], [False, False])
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Sequence

import duckdb
import numpy as np
from sqlglot import exp

from dpsql.schema import Binned, Column, IntegerRange
from dpsql.sql import sandbox
from dpsql.sql.levels import level_sources

__all__ = ["DomainValues", "DomainEvalError", "domain_eval"]

_NUMPY_TYPES = {"BOOLEAN": bool, "TINYINT": np.int64, "SMALLINT": np.int64, "INTEGER": np.int64,
                "BIGINT": np.int64, "UTINYINT": np.int64, "USMALLINT": np.int64, "UINTEGER": np.int64,
                "FLOAT": np.float64, "DOUBLE": np.float64, "VARCHAR": str}


class DomainEvalError(ValueError):
    """DuckDB cannot evaluate the expression on the domain, or it is not deterministic."""


@dataclass(frozen=True)
class DomainValues:
    """An expression's value on every cell of its columns' domain product (C order, first
    column slowest): ``values`` (read-only; a NULL cell holds a placeholder), the ``null`` mask
    and DuckDB's type of the result (``sql_type``, such as ``BIGINT`` or ``DECIMAL(18,1)``).
    Values are numpy numbers, booleans or strings where the type allows, Python objects
    (HUGEINT, DECIMAL as exact ``decimal.Decimal``, DATE...) otherwise."""

    values: np.ndarray
    null: np.ndarray
    sql_type: str


def domain_eval(node: exp.Expression, columns: Sequence[Column]) -> DomainValues:
    """Evaluate ``node`` on the product of ``columns``' domains (every column it reads, none
    binned: a bin's rows have no single value), by DuckDB. Raises :class:`DomainEvalError`."""
    return _evaluate(node.sql(dialect="duckdb", identify=True), tuple(columns))


def _column_sql(i: int, col: Column, index: str, levels: Sequence[str] = ()) -> str:
    """A subquery listing column ``col``'s domain under its own name, with each value's index in
    column ``{index}{i}`` (NULL, when nullable, last), and the codes of the mapped ``levels`` of a
    hierarchy (the columns :func:`dpsql.sql.levels.level_sources` named, from the lists ``$l{i}_{k}``)."""
    name = exp.to_identifier(col.name, quoted=True).sql(dialect="duckdb")
    if isinstance(col, IntegerRange) and col.sql_type == "BIGINT":
        rows = f"SELECT range AS {name}, range - ({col.min}) AS {index}{i} FROM range({col.min}, {col.max} + 1)"
    else:
        rows = (f"SELECT CAST(UNNEST($v{i}) AS {col.sql_type}) AS {name}, "
                f"generate_subscripts($v{i}, 1) - 1 AS {index}{i}"
                + "".join(f", CAST(UNNEST($l{i}_{k}) AS VARCHAR) AS \"{level}\"" for k, level in enumerate(levels)))
    if col.nullable:
        rows += f" UNION ALL SELECT NULL, {len(col.values)}" + ", NULL" * len(levels)
    return f"({rows}) AS d{i}"


def _text(v: object) -> str:
    return repr(v) if isinstance(v, float) else str(v).lower() if isinstance(v, bool) else str(v)


@functools.lru_cache(maxsize=32)  # a result holds up to MAX_ATTRIBUTE_SIZE cells
def _evaluate(text: str, columns: tuple[Column, ...]) -> DomainValues:
    for col in columns:
        if isinstance(col, Binned):
            raise DomainEvalError(f"binned column {col.name!r} has no single value per row (a bin holds many)")
    known = {c.name.lower() for c in columns}
    tree = exp.maybe_parse(text, dialect="duckdb")
    for ref in tree.find_all(exp.Column):
        if ref.name.lower() not in known or ref.table:
            raise DomainEvalError(f"column {ref.sql(dialect='duckdb')} is not on this domain")
    index = "i"  # the index columns' prefix: one no column name starts with
    while any(name.startswith(index) for name in known):
        index = "_" + index
    tree, levels = level_sources(tree, columns, lambda i, k: f"{index}{i}_{k}")  # mapped levels: domain columns
    sql = tree.sql(dialect="duckdb")
    try:
        sandbox.check_bounded(f"SELECT {sql}")
        sandbox.check_deterministic(sql, known | {ref for refs in levels.values() for ref, _ in refs})
    except ValueError as e:
        raise DomainEvalError(str(e)) from None
    sources = ", ".join(_column_sql(i, c, index, [ref for ref, _ in levels.get(i, [])])
                        for i, c in enumerate(columns)) or "(SELECT 1)"
    order = ", ".join(f"{index}{i}" for i in range(len(columns))) or "1"
    query = f"SELECT ({sql}) AS v, ({sql}) IS NULL AS n FROM {sources} ORDER BY {order}"
    params = {f"v{i}": [_text(v) for v in c.values] for i, c in enumerate(columns)
              if not (isinstance(c, IntegerRange) and c.sql_type == "BIGINT")}
    params.update({f"l{i}_{k}": list(codes) for i, refs in levels.items() for k, (_, codes) in enumerate(refs)})
    try:
        with sandbox.limited(f"'{sql if len(sql) <= 80 else sql[:77] + '...'}' on the declared domain") as con:
            rel = con.sql(query, params=params or None)
            sql_type = str(rel.types[0])
            dtype = _NUMPY_TYPES.get(sql_type)
            if dtype is not None:
                got = rel.fetchnumpy()
                null = np.asarray(got["n"], dtype=bool)
                filler = "" if dtype is str else dtype(0)
                values = np.asarray(np.ma.filled(np.ma.asarray(got["v"]), filler), dtype=dtype)
            else:
                rows = rel.fetchall()
                null = np.array([r[1] for r in rows], dtype=bool)
                values = np.empty(len(rows), dtype=object)
                values[:] = [r[0] for r in rows]
    except duckdb.Error as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise DomainEvalError(f"DuckDB cannot evaluate it on every value of the domain ({reason[:300]})") from None
    values.flags.writeable = False
    null.flags.writeable = False
    return DomainValues(values, null, sql_type)
