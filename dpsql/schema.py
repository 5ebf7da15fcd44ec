"""Schemas: the public domain of a table.

A schema declares, for one table, every column that queries may mention and
the finite set of values it can take (its *domain*). Domains are public: the
compiler turns SQL into matrices over them and GROUP BY output covers them
whatever the private data holds. A schema is loaded from YAML, JSON or a dict::

    table: adult
    privacy_unit: row                 # or {column: person_id, max_rows: 5}
    merge:                            # optional: columns measured as one attribute
      race: [white, black]
    columns:
      age:   {type: integer, min: 17, max: 90, bounds: [17, 90]}
      sex:   {type: categorical, values: [Female, Male], nullable: true}
      hours: {type: numeric, bins: [0, 20, 40, 60, 100]}
      white: {type: boolean}
      black: {type: boolean}

Column kinds:

* ``categorical``: ``values`` is an explicit list, all strings or all numbers.
* ``integer``: every integer from ``min`` to ``max`` inclusive.
* ``numeric``: ``bins`` are increasing edges; value v falls in bin i when
  ``bins[i] <= v < bins[i+1]``, and the last bin also holds ``bins[-1]``.
  Optional ``labels`` name the bins: distinct strings, or distinct numbers (default ``"[lo, hi)"``).
* ``boolean``: False, True (read from a BOOLEAN column, or from an integer column holding 0 and 1).
* ``date``: every day from ``min`` to ``max`` inclusive (ISO ``YYYY-MM-DD``), read from a DATE
  column, a TIMESTAMP one (its day: the time of day is not part of the domain) or ISO text.
  SQL compares and transforms it as DuckDB does (``d >= '2021-01-01'``, ``year(d)``,
  ``date_trunc('month', d)``), on the declared days.

``nullable: true`` makes NULL one more value of the domain (always the last
index). A column whose values are numbers (``integer``, or ``categorical``
with numeric values) can be summed: its SUM/AVG bounds are its smallest and
largest value, and ``bounds: [lo, hi]`` may narrow them (values are clamped
into the bounds before summing, so a row moves a SUM by at most
``max(|lo|, |hi|)``). A ``numeric`` (binned) column can be summed too, within
its outer edges (narrowed the same way): each row is measured between its
bin's edges (see :class:`Attribute`).

Value ``v`` of a column has index ``column.index_of(v)``; a data vector over
several columns is indexed in C order (the first column varies slowest).
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from dpsql.errors import SchemaError, WorkloadError

__all__ = [
    "Attribute",
    "Column",
    "Categorical",
    "Hierarchy",
    "IntegerRange",
    "Binned",
    "Boolean",
    "DateRange",
    "PrivacyUnit",
    "PublicTable",
    "Schema",
    "integer_cast_type",
    "load_schema",
    "with_public_tables",
]

#: Most values (NULL aside) one column of any kind may declare (keeps matrices implicit-friendly).
MAX_COLUMN_DOMAIN = 1_000_000


def _is_null(value: Any) -> bool:
    if value is None:
        return True
    try:
        return bool(value != value)  # NaN, pandas NA-like
    except Exception:  # pragma: no cover - exotic NA types
        return False


_INT64 = (-(2 ** 63), 2 ** 63 - 1)
_INT128 = (-(2 ** 127), 2 ** 127 - 1)


def integer_cast_type(lo: int, hi: int) -> str | None:
    """The narrower of BIGINT and HUGEINT that holds every integer in ``[lo, hi]``, or None.

    >>> integer_cast_type(0, 90), integer_cast_type(0, 2 ** 64), integer_cast_type(0, 2 ** 200)
    ('BIGINT', 'HUGEINT', None)
    """
    if _INT64[0] <= lo and hi <= _INT64[1]:
        return "BIGINT"
    if _INT128[0] <= lo and hi <= _INT128[1]:
        return "HUGEINT"
    return None


@dataclass(frozen=True)
class Column:
    """Base class of column kinds. ``values`` are the non-NULL domain values
    in index order; NULL, when ``nullable``, has index ``len(values)``."""

    name: str
    nullable: bool = False
    bounds: tuple[float, float] | None = None

    kind = "column"

    @property
    def values(self) -> tuple:
        raise NotImplementedError

    @property
    def size(self) -> int:
        """Number of domain values, NULL included when nullable."""
        return len(self.values) + (1 if self.nullable else 0)

    @property
    def labels(self) -> tuple:
        """Values as they appear as GROUP BY keys, in index order (None = NULL)."""
        return tuple(self.values) + ((None,) if self.nullable else ())

    @property
    def is_numeric(self) -> bool:
        """Whether each domain value is a number (so SUM can be exact)."""
        return False

    @property
    def sql_type(self) -> str:
        """The DuckDB type that holds the domain's values: how dpsql reads them from text, and
        the type an expression over them is evaluated in (:mod:`dpsql.sql.domain_eval`)."""
        return "DOUBLE"

    def index_of(self, value: Any) -> int:
        """Index of ``value`` in the domain; raises ``KeyError`` if outside."""
        if _is_null(value):
            if self.nullable:
                return len(self.values)
            raise KeyError(f"NULL is not a value of column {self.name!r}")
        return self._index(value)

    def _index(self, value: Any) -> int:
        raise NotImplementedError

    def encode(self, values: Sequence[Any]) -> np.ndarray:
        """Indices of many values at once; -1 marks a value outside the domain."""
        out = np.empty(len(values), dtype=np.int64)
        for i, v in enumerate(values):
            try:
                out[i] = self.index_of(v)
            except (KeyError, TypeError, ValueError, OverflowError):
                out[i] = -1
        return out

    @property
    def sum_bounds(self) -> tuple[float, float] | None:
        """The ``[lo, hi]`` a SUM/AVG clamps values into: the range of the
        domain's values, narrowed by the declared ``bounds``. None for a column
        that cannot be summed, or whose declared bounds contain none of its values.

        Clamping domain values into the intersection gives the same values as
        clamping them into the declared bounds, at a sensitivity no larger.
        """
        if not self.is_numeric:
            return None
        lo, hi = min(self.values), max(self.values)
        if self.bounds is not None:
            lo, hi = max(lo, self.bounds[0]), min(hi, self.bounds[1])
        return (lo, hi) if lo <= hi else None

    def sum_weights(self, bounds: "tuple[float, float] | None" = None) -> np.ndarray:
        """The value of each domain index clamped to ``bounds`` (:attr:`sum_bounds` by default;
        NULL counts 0): the weights of a SUM over this column."""
        bounds = self.sum_bounds if bounds is None else bounds
        if bounds is None or not self.is_numeric:
            raise ValueError(f"column {self.name!r} cannot be summed")
        lo, hi = bounds
        vals = np.clip(np.asarray(self.values, dtype=float), lo, hi)
        if self.nullable:
            vals = np.append(vals, 0.0)
        return vals


@dataclass(frozen=True)
class Categorical(Column):
    """An explicit list of values (strings, or numbers)."""

    choices: tuple = ()
    kind = "categorical"

    @property
    def values(self) -> tuple:
        return self.choices

    @property
    def is_numeric(self) -> bool:
        return bool(self.choices) and not isinstance(self.choices[0], str)

    @property
    def sql_type(self) -> str:
        if not self.is_numeric:
            return "VARCHAR"
        if all(isinstance(v, int) for v in self.choices):
            return integer_cast_type(min(self.choices), max(self.choices)) or "DOUBLE"
        return "DOUBLE"

    def _index(self, value: Any) -> int:
        lookup = self.__dict__.get("_lookup")
        if lookup is None:
            lookup = {v: i for i, v in enumerate(self.choices)}
            object.__setattr__(self, "_lookup", lookup)
        if isinstance(value, bool):
            raise KeyError(value)
        if isinstance(value, (np.generic,)):
            value = value.item()
        return lookup[value]


@dataclass(frozen=True)
class Hierarchy(Categorical):
    """Codes whose levels form a hierarchy (``type: hierarchy``), the finest codes being the values.
    ``levels`` are ``(name, length)`` pairs, coarsest first. A level given by a prefix length is the
    code's first ``length`` characters (``state: 2, county: 5`` for tract codes ``SSCCCTTTTTT``). A
    level given by a public mapping (``codes:``) has length None, and ``level_codes[k][j]`` is code
    ``j``'s code at level ``k`` (a tract's county from a lookup, a ZIP code's region). Either way a
    level is a public function of the code, so SQL groups by and filters on it as on any key
    (``GROUP BY state`` reads ``substr(geo, 1, 2)``, or the mapping: :mod:`dpsql.sql.levels`); the
    data holds the codes alone."""

    levels: tuple[tuple[str, int | None], ...] = ()
    level_codes: tuple[tuple[str, ...], ...] = ()
    kind = "hierarchy"

    def level_expression(self, name: str) -> tuple[int | None, bool] | None:
        """For level ``name`` (case-insensitive): its prefix length (None for a mapped level) and
        whether it is the whole code; None if it is not a level of this column."""
        for k, (level, length) in enumerate(self.levels):
            if level.lower() == name.lower():
                if length is None:
                    return None, self.level_codes[k] == self.choices
                return length, all(len(v) == length for v in self.choices)
        return None


@dataclass(frozen=True)
class IntegerRange(Column):
    """Every integer from ``min`` to ``max`` inclusive."""

    min: int = 0
    max: int = 0
    kind = "integer"

    @property
    def values(self) -> tuple:
        return tuple(range(self.min, self.max + 1))

    @property
    def size(self) -> int:
        return self.max - self.min + 1 + (1 if self.nullable else 0)

    @property
    def is_numeric(self) -> bool:
        return True

    @property
    def sql_type(self) -> str:
        return integer_cast_type(self.min, self.max) or "DOUBLE"

    def _index(self, value: Any) -> int:
        if isinstance(value, (bool, np.bool_)) or isinstance(value, str):
            raise KeyError(value)
        if isinstance(value, (int, np.integer)):  # exact, however large (float() would overflow)
            if not self.min <= int(value) <= self.max:
                raise KeyError(value)
            return int(value) - self.min
        if not math.isfinite(float(value)) or float(value) != int(value) or not self.min <= value <= self.max:
            raise KeyError(value)
        return int(value) - self.min


@dataclass(frozen=True)
class Binned(Column):
    """Numeric values mapped to bins by increasing ``edges``."""

    edges: tuple[float, ...] = ()
    bin_labels: tuple | None = None
    kind = "numeric"

    @property
    def values(self) -> tuple:
        if self.bin_labels is not None:
            return tuple(self.bin_labels)
        n = len(self.edges) - 1
        return tuple(
            f"[{_fmt(self.edges[i])}, {_fmt(self.edges[i + 1])}{']' if i == n - 1 else ')'}"
            for i in range(n)
        )

    def intervals(self) -> list[tuple[float, float, bool]]:
        """Each bin as ``(lo, hi, hi_included)``."""
        n = len(self.edges) - 1
        return [(self.edges[i], self.edges[i + 1], i == n - 1) for i in range(n)]

    @property
    def sum_bounds(self) -> tuple[float, float] | None:
        """The outer edges, narrowed by the declared ``bounds``: what a SUM/AVG clamps values into."""
        lo, hi = self.edges[0], self.edges[-1]
        if self.bounds is not None:
            lo, hi = max(lo, self.bounds[0]), min(hi, self.bounds[1])
        return (lo, hi) if lo <= hi else None

    def endpoint_weights(self, bounds: "tuple[float, float] | None" = None) -> np.ndarray:
        """The weights of a SUM over this column on its endpoint cells (2 per domain index, see
        :class:`Attribute`): bin ``b``'s lower cell weighs its lower edge, its upper cell its upper
        edge, both clamped to ``bounds`` (:attr:`sum_bounds` by default); NULL's cells weigh 0.

        >>> Binned("h", edges=(0.0, 10.0, 40.0), bounds=(0.0, 25.0)).endpoint_weights().tolist()
        [0.0, 10.0, 10.0, 25.0]
        """
        bounds = self.sum_bounds if bounds is None else bounds
        if bounds is None:
            raise ValueError(f"column {self.name!r} cannot be summed")
        edges = np.clip(np.asarray(self.edges, dtype=float), *bounds)
        weights = np.column_stack([edges[:-1], edges[1:]]).ravel()
        return np.append(weights, [0.0, 0.0]) if self.nullable else weights

    def _index(self, value: Any) -> int:
        if isinstance(value, (str, bool, np.bool_)):
            raise KeyError(value)
        v = float(value)
        if not self.edges[0] <= v <= self.edges[-1]:
            raise KeyError(value)
        i = int(np.searchsorted(self.edges, v, side="right")) - 1
        return min(i, len(self.edges) - 2)


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


@dataclass(frozen=True)
class Boolean(Column):
    """False, True; the integers 0 and 1 are read as False and True."""

    kind = "boolean"

    @property
    def values(self) -> tuple:
        return (False, True)

    @property
    def sql_type(self) -> str:
        return "BOOLEAN"

    def _index(self, value: Any) -> int:
        if isinstance(value, (bool, np.bool_)):
            return int(bool(value))
        if isinstance(value, (int, np.integer)) and value in (0, 1):  # an integer 0/1 column read as booleans
            return int(value)
        raise KeyError(value)


@dataclass(frozen=True)
class DateRange(Column):
    """Every day from ``min`` to ``max`` inclusive, in order: index ``i`` is ``min`` plus ``i`` days.
    A value is a ``datetime.date`` (a ``datetime``'s day, as DuckDB casts a TIMESTAMP to DATE),
    or its ISO text ``YYYY-MM-DD``.

    >>> d = DateRange("day", min=datetime.date(2024, 2, 27), max=datetime.date(2024, 3, 1))
    >>> d.size, d.index_of("2024-03-01"), d.values[2]
    (4, 3, datetime.date(2024, 2, 29))
    """

    min: datetime.date = datetime.date(1970, 1, 1)
    max: datetime.date = datetime.date(1970, 1, 1)
    kind = "date"

    @functools.cached_property
    def values(self) -> tuple:  # type: ignore[override]
        return tuple(self.min + datetime.timedelta(days=i) for i in range((self.max - self.min).days + 1))

    @property
    def size(self) -> int:
        return (self.max - self.min).days + 1 + (1 if self.nullable else 0)

    @property
    def sql_type(self) -> str:
        return "DATE"

    def _index(self, value: Any) -> int:
        if isinstance(value, np.datetime64):
            value = value.astype("datetime64[D]").item()
        if isinstance(value, str):
            try:
                value = iso_date(value)
            except ValueError:
                raise KeyError(value) from None
        if isinstance(value, datetime.datetime):
            value = value.date()
        if not isinstance(value, datetime.date) or not self.min <= value <= self.max:
            raise KeyError(value)
        return (value - self.min).days


def iso_date(text: str) -> datetime.date:
    """The day ``text`` names in ISO form, ``YYYY-MM-DD`` exactly; raises ``ValueError`` otherwise
    (``datetime.date.fromisoformat`` also reads ``20240229`` and week dates, which DuckDB does not).

    >>> iso_date("2024-02-29")
    datetime.date(2024, 2, 29)
    """
    digits = text[:4] + text[5:7] + text[8:]
    if not (len(text) == 10 and text[4] == text[7] == "-" and digits.isascii() and digits.isdigit()):
        raise ValueError(f"{text!r:.40} is not a date written YYYY-MM-DD")
    try:
        return datetime.date.fromisoformat(text)
    except ValueError as e:
        raise ValueError(f"{text!r} is not a day of the calendar ({e})") from None


@dataclass(frozen=True)
class PrivacyUnit:
    """Who is protected: each row (``column is None``), or all rows sharing a
    value of ``column``, of which at most ``max_rows`` are kept per unit."""

    column: str | None = None
    max_rows: int = 1


@dataclass(frozen=True)
class Attribute:
    """One axis of the data vector's domain: one column, or columns measured together
    (a merge), with their domain sizes. The attribute's size is their product.

    ``groups``, when set, merges the attribute's values for measurement: value ``j``
    (its index in C order over ``columns``) is counted in cell ``groups[j]``, so
    only ``cells`` counts are made (a workload-based domain reduction,
    :mod:`dpsql.hdmm.reduction`).

    ``split`` names binned columns measured by *endpoint masses* (a batch sums them): each
    domain index ``i`` of such a column has two cells, ``2i`` and ``2i + 1``, and its size in
    ``sizes`` is twice the column's. A row whose value ``x`` is in bin ``[lo, hi]`` (its
    edges clamped to the SUM bounds, ``x`` too) counts ``(hi - x) / (hi - lo)`` in the lower
    cell and ``(x - lo) / (hi - lo)`` in the upper one (all in the lower one when ``lo = hi``;
    a NULL counts 1 in NULL's lower cell). The two cells add up to the bin's count, and the
    lower edge times the first plus the upper edge times the second is the rows' clamped sum,
    exactly: a SUM over a binned column is a linear query of the histogram. Every row still
    adds a non-negative vector of total 1 (a convex combination of two cells), so a
    strategy's sensitivity is its largest column norm, as for counts; but it moves the answers
    of two cells, which the Laplace release lattice's rounding must cover
    (:meth:`~dpsql.private.kernel.PrivateTable.plan` is given the attributes)."""

    name: str
    columns: tuple[str, ...]
    sizes: tuple[int, ...]
    groups: tuple[int, ...] | None = None
    split: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return math.prod(self.sizes)

    @property
    def cells(self) -> int:
        """How many counts measuring this attribute makes: its groups, or its size."""
        return self.size if self.groups is None else max(self.groups) + 1

    def grouped(self, labels: Sequence[int]) -> Attribute:
        """This attribute with its values merged into the groups ``labels`` (one per value,
        numbered from 0); itself when every value is its own group in order."""
        labels = tuple(np.asarray(labels, dtype=np.int64).tolist())  # int() per value took 4 s for 5 million
        if len(labels) != self.size:
            raise WorkloadError(f"attribute {self.name!r}: {len(labels)} group labels for {self.size} values")
        if sorted(set(labels)) != list(range(max(labels, default=-1) + 1)):
            raise WorkloadError(f"attribute {self.name!r}: group labels must be numbered 0, 1, ... without gaps")
        return self if labels == tuple(range(self.size)) else replace(self, groups=labels)


@dataclass(frozen=True)
class PublicTable:
    """A public lookup table a statement may join (``public_tables:`` in a schema): its
    ``columns`` and ``rows``, declared in the schema, so public by declaration. A join with it
    on a key unique in it is a function of the private column, evaluated on the domain."""

    name: str
    columns: tuple[str, ...]
    rows: tuple[tuple, ...]

    def column(self, name: str) -> int | None:
        """The position of column ``name`` (case-insensitive), or None."""
        lowered = [c.lower() for c in self.columns]
        return lowered.index(name.lower()) if name.lower() in lowered else None


@dataclass(frozen=True)
class Schema:
    """A table's public domain. ``columns`` keep their declaration order, which
    is the order of the data vector's axes. ``merge`` maps an attribute name to
    columns that are always measured together as one attribute. ``public_tables``
    are lookup tables a statement may join."""

    table: str
    columns: tuple[Column, ...]
    privacy_unit: PrivacyUnit = field(default_factory=PrivacyUnit)
    merge: tuple[tuple[str, tuple[str, ...]], ...] = ()
    public_tables: tuple[PublicTable, ...] = ()

    def public_table(self, name: str) -> PublicTable | None:
        """The public table called ``name`` (case-insensitive), or None."""
        return next((t for t in self.public_tables if t.name.lower() == name.lower()), None)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {c.name.lower(): c for c in self.columns})
        object.__setattr__(self, "_position", {c.name: i for i, c in enumerate(self.columns)})

    def column(self, name: str) -> Column | None:
        """The column called ``name`` (case-insensitive, as unquoted SQL), or None."""
        return self._by_name.get(name.lower())  # type: ignore[attr-defined]

    def position(self, name: str) -> int:
        """Position of a column in declaration order."""
        return self._position[name]  # type: ignore[attr-defined]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def domain(self) -> tuple[int, ...]:
        """Domain size of every column, in declaration order."""
        return tuple(c.size for c in self.columns)

    @classmethod
    def from_dict(cls, spec: Mapping[str, Any], source: str | None = None) -> "Schema":
        """Validate ``spec`` and build a Schema (see :func:`load_schema`)."""
        return _build(spec, source)


def load_schema(spec: "str | os.PathLike | Mapping[str, Any] | Schema") -> Schema:
    """Load a schema from a YAML or JSON file path, a YAML/JSON string, or a dict.

    Every mistake is reported at once, each with its path in the document:

    >>> load_schema({"table": "t", "columns": {"a": {"type": "integer", "min": 5, "max": 1}}})
    Traceback (most recent call last):
    ...
    dpsql.errors.SchemaError: 1 schema problem:
      columns.a.max: must be >= min (5)
    """
    if isinstance(spec, Schema):
        return spec
    if isinstance(spec, Mapping):
        return _build(spec, None)
    source = None
    if isinstance(spec, os.PathLike) or (isinstance(spec, str) and _names_a_file(spec)):
        source = os.fspath(spec)
        text = _read_schema_file(source)
    elif isinstance(spec, str):
        text = spec
    else:
        raise SchemaError([("", f"expected a path, a YAML/JSON string or a dict, got {type(spec).__name__}")])
    data = _parse_text(text, source)
    return _build(data, source)


def _names_a_file(spec: str) -> bool:
    """Whether a schema given as a string is a file name rather than YAML/JSON text: one line, not an
    inline mapping (``{...}``, e.g. ``json.dumps`` output), that exists, ends in .yaml, .yml or
    .json, or holds a path separator. So a mistyped file name is reported as a missing file, not
    parsed as the YAML string ``"adult.yaml"``."""
    if "\n" in spec or spec.lstrip().startswith("{"):
        return False
    separators = [s for s in (os.sep, os.altsep) if s]
    return (os.path.exists(spec) or spec.lower().endswith((".yaml", ".yml", ".json"))
            or any(s in spec for s in separators))


def _read_schema_file(path: str) -> str:
    """The text of the schema file ``path`` (UTF-8, with or without a byte-order mark); a file that
    cannot be read raises :class:`~dpsql.errors.SchemaError` saying why."""
    try:
        with open(path, encoding="utf-8-sig") as fh:
            return fh.read()
    except FileNotFoundError:
        problem = "no such schema file"
    except IsADirectoryError:
        problem = "is a directory, not a schema file"
    except UnicodeDecodeError as exc:
        problem = f"is not UTF-8 text (byte {exc.start} cannot be decoded); save it as UTF-8"
    except OSError as exc:
        problem = f"cannot be read: {exc.strerror or type(exc).__name__}"
    raise SchemaError([("", problem)], path)


def _parse_text(text: str, source: str | None) -> Any:
    try:
        if source and source.endswith(".json"):
            try:
                return json.loads(text, object_pairs_hook=_json_object)
            except json.JSONDecodeError as exc:
                raise SchemaError([(f"line {exc.lineno}", f"invalid JSON: {exc.msg}")], source) from None
        import yaml  # JSON is a subset of YAML

        try:
            return yaml.load(text, Loader=_yaml_loader())  # noqa: S506 (a SafeLoader)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc)
            raise SchemaError([(where, f"invalid YAML: {problem}")], source) from None
    except _DuplicateKey as exc:
        raise SchemaError([("", f"invalid JSON: key {exc.args[0]!r} appears twice in one object")], source) from None
    except RecursionError:
        raise SchemaError([("", "nested too deeply to read")], source) from None
    except ValueError as exc:  # Python's limit on the digits of an integer
        raise SchemaError([("", f"cannot be read: {exc}")], source) from None


class _DuplicateKey(Exception):
    pass


def _json_object(pairs: list[tuple[str, Any]]) -> dict:
    """A JSON object, refusing a key given twice (``json`` would keep the last silently)."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


@functools.cache
def _yaml_loader() -> type:
    """PyYAML's SafeLoader, but a mapping that gives a key twice is an error (PyYAML keeps the last
    silently), and an unquoted date stays the text it is, as a quoted one would: a schema's values
    are strings and numbers."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> dict:
            seen: dict = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:  # an unhashable key: SafeLoader says so
                    break
                if first is not key_node:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"key {key!r} appears twice in one mapping (first at line "
                        f"{first.start_mark.line + 1})", key_node.start_mark)
            return super().construct_mapping(node, deep)

    Loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    return Loader


_COMMON_KEYS = {"type", "nullable", "bounds", "description"}
_KIND_KEYS = {
    "categorical": {"values"},
    "hierarchy": {"values", "levels", "codes"},
    "integer": {"min", "max"},
    "numeric": {"bins", "labels"},
    "boolean": set(),
    "date": {"min", "max"},
}
_KIND_ALIASES = {"categorical": "categorical", "category": "categorical", "enum": "categorical",
                 "integer": "integer", "int": "integer", "numeric": "numeric", "binned": "numeric",
                 "boolean": "boolean", "bool": "boolean", "hierarchy": "hierarchy", "date": "date"}


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _build(spec: Any, source: str | None) -> Schema:
    problems: list[tuple[str, str]] = []

    def bad(path: str, msg: str) -> None:
        problems.append((path, msg))

    if not isinstance(spec, Mapping):
        raise SchemaError([("", f"must be a mapping with 'table' and 'columns', got {type(spec).__name__}")], source)
    for key in spec:
        if key not in {"table", "columns", "privacy_unit", "merge", "description", "public_tables"}:
            bad(str(key), "unknown key (expected table, columns, privacy_unit, merge, public_tables)")
    table = spec.get("table")
    if table is None:
        bad("table", "is required")
    elif not isinstance(table, str) or not table.strip():
        bad("table", "must be a non-empty string")

    columns: list[Column] = []
    raw_cols = spec.get("columns")
    entries: list[tuple[Any, Any]] = []  # (name, column spec), in declaration order, repeats kept
    if raw_cols is None:
        bad("columns", "is required")
    elif isinstance(raw_cols, list):  # also accept [{name: ..., type: ...}, ...]
        for i, item in enumerate(raw_cols):
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                bad(f"columns[{i}]", "must be a mapping with a 'name'")
                continue
            entries.append((item["name"], {k: v for k, v in item.items() if k != "name"}))
        if not raw_cols:
            bad("columns", "must declare at least one column")
    elif not isinstance(raw_cols, Mapping):
        bad("columns", "must be a mapping of column name to column spec")
    elif not raw_cols:
        bad("columns", "must declare at least one column")
    else:
        entries = list(raw_cols.items())
    seen: set[str] = set()
    for name, cspec in entries:
        path = f"columns.{name}"
        if not isinstance(name, str) or not name:
            bad(path, "column name must be a non-empty string")
            continue
        if name.lower() in seen:
            bad(path, "duplicate column name (names are case-insensitive)")
            continue
        seen.add(name.lower())
        col = _build_column(name, cspec, path, bad, os.path.dirname(source) if source else None)
        if col is not None:
            columns.append(col)

    unit = PrivacyUnit()
    raw_unit = spec.get("privacy_unit", "row")
    if raw_unit in ("row", None):
        pass
    elif isinstance(raw_unit, Mapping):
        for key in raw_unit:
            if key not in {"column", "max_rows"}:
                bad(f"privacy_unit.{key}", "unknown key (expected column, max_rows)")
        ucol = raw_unit.get("column")
        mrows = raw_unit.get("max_rows", 1)
        if not isinstance(ucol, str) or not ucol:
            bad("privacy_unit.column", "must name the column that identifies a privacy unit")
            ucol = None
        elif ucol.lower() in seen:
            bad("privacy_unit.column", f"{ucol!r} is a domain column; the unit identifier must not be queryable")
        if not _is_int(mrows) or mrows < 1:
            bad("privacy_unit.max_rows", "must be an integer >= 1")
            mrows = 1
        unit = PrivacyUnit(ucol, mrows)
    else:
        bad("privacy_unit", "must be 'row' or a mapping {column: <name>, max_rows: <int>}")

    merge: list[tuple[str, tuple[str, ...]]] = []
    raw_merge = spec.get("merge") or {}
    if not isinstance(raw_merge, Mapping):
        bad("merge", "must be a mapping of attribute name to a list of columns")
        raw_merge = {}
    used: dict[str, str] = {}
    by_lower = {c.name.lower(): c.name for c in columns}
    for mname, mcols in raw_merge.items():
        mpath = f"merge.{mname}"
        if not isinstance(mcols, list) or len(mcols) < 2:
            bad(mpath, "must be a list of at least two columns")
            continue
        names = []
        for i, c in enumerate(mcols):
            if not isinstance(c, str) or c.lower() not in seen:
                bad(f"{mpath}[{i}]", f"unknown column {c!r}")
            elif c.lower() in used:
                bad(f"{mpath}[{i}]", f"column {c!r} is already merged into {used[c.lower()]!r}")
            else:
                used[c.lower()] = str(mname)
                if c.lower() in by_lower:
                    names.append(by_lower[c.lower()])
        merge.append((str(mname), tuple(names)))

    for col in columns:
        for level, _ in getattr(col, "levels", ()):
            if level.lower() in seen:
                bad(f"columns.{col.name}.levels", f"level {level!r} is also the name of a column")
    public = _public_tables(spec.get("public_tables", {}), table, bad)
    if problems:
        raise SchemaError(problems, source)
    return Schema(table=table, columns=tuple(columns), privacy_unit=unit, merge=tuple(merge), public_tables=public)


def with_public_tables(schema: Schema, tables: Mapping[str, Any]) -> Schema:
    """``schema`` with more public lookup tables, ``{name: {"columns": [...], "rows": [[...]]}}``,
    checked as a ``public_tables:`` entry is (and against the names already declared); e.g. the
    tables an owner marks public when connecting (``dpsql.connect(..., public_tables=[...])``).
    Raises :class:`~dpsql.errors.SchemaError` listing every problem.

    >>> s = load_schema({"table": "t", "columns": {"st": {"type": "categorical", "values": ["CA"]}}})
    >>> with_public_tables(s, {"r": {"columns": ["st", "region"], "rows": [["CA", "W"]]}}).public_table("R").rows
    (('CA', 'W'),)
    """
    problems: list[tuple[str, str]] = []

    def bad(path: str, msg: str) -> None:
        problems.append((path, msg))

    for name in tables:
        if isinstance(name, str) and schema.public_table(name) is not None:
            bad(f"public_tables.{name}", "is already declared in the schema")
    added = _public_tables(tables, schema.table, bad)
    if problems:
        raise SchemaError(problems)
    return replace(schema, public_tables=schema.public_tables + added)


def _public_tables(spec: Any, private: Any, bad: Callable[[str, str], None]) -> tuple[PublicTable, ...]:
    """``public_tables: {name: {columns: [...], rows: [[...], ...]}}``: values are strings,
    numbers, booleans or null; every row as long as ``columns``."""
    if not isinstance(spec, Mapping):
        bad("public_tables", "must be a mapping of table names to {columns, rows}")
        return ()
    out = []
    for name, tspec in spec.items():
        path = f"public_tables.{name}"
        if not isinstance(name, str) or not name.strip() or (isinstance(private, str) and name.lower() == private.lower()):
            bad(path, "must be a non-empty name other than the private table's")
            continue
        if not isinstance(tspec, Mapping) or set(tspec) - {"columns", "rows"}:
            bad(path, "must be a mapping with 'columns' and 'rows'")
            continue
        cols, rows = tspec.get("columns"), tspec.get("rows")
        if (not isinstance(cols, list) or not cols or not all(isinstance(c, str) and c for c in cols)
                or len({c.lower() for c in cols}) != len(cols)):
            bad(f"{path}.columns", "must be a list of distinct column names")
            continue
        if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == len(cols) for r in rows):
            bad(f"{path}.rows", f"must be a list of rows of {len(cols)} values")
            continue
        if any(not (v is None or isinstance(v, (str, bool)) or _is_number(v)) for r in rows for v in r):
            bad(f"{path}.rows", "values must be strings, numbers, booleans or null")
            continue
        out.append(PublicTable(name=name, columns=tuple(cols), rows=tuple(tuple(r) for r in rows)))
    return tuple(out)


def _domain_fits(path: str, size: int, hint: str, bad: Callable[[str, str], None]) -> bool:
    """Whether a column of ``size`` values (NULL aside) is within :data:`MAX_COLUMN_DOMAIN`, whatever its
    kind; if not, reports it at ``path`` with ``hint`` (how to declare a smaller domain)."""
    if size <= MAX_COLUMN_DOMAIN:
        return True
    bad(path, f"domain of {size} values is too large (at most {MAX_COLUMN_DOMAIN}); {hint}")
    return False


def _check_keys(keys: list, path: str, bad: Callable[[str, str], None]) -> bool:
    """Whether ``keys`` (a categorical column's values, or a binned column's labels: what GROUP BY
    outputs for it) are all strings or all finite numbers, and distinct. None is refused (it would be
    a second NULL group beside ``nullable``'s), and so are lists, mappings and booleans (not keys of
    one SQL type). Reports every problem, each at its ``path[i]``."""
    valid = []
    for i, k in enumerate(keys):
        if isinstance(k, str) or _is_number(k):
            valid.append((i, k))
        else:
            bad(f"{path}[{i}]", f"must be a string or a number, got {k!r}")
    ok = len(valid) == len(keys)
    if ok and not (all(isinstance(k, str) for k in keys) or all(_is_number(k) for k in keys)):
        bad(path, "must be all strings or all numbers")
        ok = False
    seen: set = set()
    for i, k in valid:  # hashable: checked only after the types
        if k in seen:
            bad(f"{path}[{i}]", f"duplicate value {k!r}")
            ok = False
        seen.add(k)
    return ok


def _build_column(name: str, cspec: Any, path: str, bad: Callable[[str, str], None],
                  base: str | None = None) -> Column | None:
    """The column ``name`` declared by ``cspec``, or None after reporting its problems; a file the
    spec names (a hierarchy's ``codes:``) is relative to ``base``, the schema file's folder."""
    if not isinstance(cspec, Mapping):
        bad(path, "must be a mapping with a 'type'")
        return None
    raw_kind = cspec.get("type")
    if raw_kind is None:
        bad(f"{path}.type", "is required (categorical, integer, numeric, boolean, date or hierarchy)")
        return None
    kind = _KIND_ALIASES.get(str(raw_kind).lower()) if isinstance(raw_kind, str) else None
    if kind is None:
        bad(f"{path}.type", f"unknown type {raw_kind!r} (expected categorical, integer, numeric, boolean, date or hierarchy)")
        return None
    ok = True
    for key in cspec:
        if key not in _COMMON_KEYS | _KIND_KEYS[kind]:
            bad(f"{path}.{key}", f"unknown key for a {kind} column")
            ok = False
    nullable = cspec.get("nullable", False)
    if not isinstance(nullable, bool):
        bad(f"{path}.nullable", "must be true or false")
        ok, nullable = False, False

    bounds = None
    if "bounds" in cspec:
        b = cspec["bounds"]
        if not (isinstance(b, (list, tuple)) and len(b) == 2 and all(_is_number(x) for x in b)):
            bad(f"{path}.bounds", "must be a list [lo, hi] of two numbers")
            ok = False
        elif b[0] > b[1]:
            bad(f"{path}.bounds", f"lo ({b[0]}) must be <= hi ({b[1]})")
            ok = False
        else:
            bounds = (b[0], b[1])

    col: Column | None = None
    if kind == "categorical":
        vals = cspec.get("values")
        if not isinstance(vals, list) or not vals:
            bad(f"{path}.values", "must be a non-empty list")
            return None
        if not _domain_fits(path, len(vals), "declare fewer values", bad):
            return None
        ok = _check_keys(vals, f"{path}.values", bad) and ok
        if bounds is not None and not all(_is_number(v) for v in vals):
            bad(f"{path}.bounds", "only columns with numeric values can be summed")
            ok = False
        if ok:
            col = Categorical(name=name, nullable=nullable, bounds=bounds, choices=tuple(vals))
    elif kind == "hierarchy":
        col = _build_hierarchy(name, cspec, path, bad, base) if ok and bounds is None else None
        if bounds is not None:
            bad(f"{path}.bounds", "a hierarchy's codes cannot be summed")
    elif kind == "integer":
        lo, hi = cspec.get("min"), cspec.get("max")
        if lo is None:
            bad(f"{path}.min", "is required")
        elif not _is_int(lo):
            bad(f"{path}.min", "must be an integer")
            lo = None
        if hi is None:
            bad(f"{path}.max", "is required")
        elif not _is_int(hi):
            bad(f"{path}.max", "must be an integer")
            hi = None
        if lo is not None and hi is not None:
            if hi < lo:
                bad(f"{path}.max", f"must be >= min ({lo})")
            elif _domain_fits(path, hi - lo + 1, "use numeric bins", bad) and ok:
                col = IntegerRange(name=name, nullable=nullable, bounds=bounds, min=lo, max=hi)
    elif kind == "numeric":
        edges = cspec.get("bins")
        if not isinstance(edges, list) or len(edges) < 2:
            bad(f"{path}.bins", "must be a list of at least two increasing edges")
            return None
        if not _domain_fits(path, len(edges) - 1, "use fewer bins", bad):
            return None
        good = True
        for i, e in enumerate(edges):
            if not _is_number(e):
                bad(f"{path}.bins[{i}]", f"must be a finite number, got {e!r}")
                good = False
        if good:
            for i in range(1, len(edges)):
                if edges[i] <= edges[i - 1]:
                    bad(f"{path}.bins[{i}]", f"must be greater than the previous edge ({edges[i - 1]})")
                    good = False
        labels = cspec.get("labels")
        if labels is not None:
            if not isinstance(labels, list) or len(labels) != len(edges) - 1:
                bad(f"{path}.labels", f"must be a list of {len(edges) - 1} labels, one per bin")
                good = False
            elif not _check_keys(labels, f"{path}.labels", bad):
                good = False
        if good and bounds is not None and not (bounds[0] <= edges[-1] and bounds[1] >= edges[0]):
            bad(f"{path}.bounds", f"must overlap the bins' range [{edges[0]}, {edges[-1]}]")
            good = False
        if good and ok:
            col = Binned(name=name, nullable=nullable, bounds=bounds, edges=tuple(float(e) for e in edges),
                         bin_labels=tuple(labels) if labels is not None else None)
    elif kind == "date":
        lo, hi = (_date_bound(cspec, key, f"{path}.{key}", bad) for key in ("min", "max"))
        if bounds is not None:
            bad(f"{path}.bounds", "a date column cannot be summed")
        elif lo is not None and hi is not None:
            if hi < lo:
                bad(f"{path}.max", f"must be on or after min ({lo.isoformat()})")
            elif _domain_fits(path, (hi - lo).days + 1, "declare a shorter range of days", bad) and ok:
                col = DateRange(name=name, nullable=nullable, min=lo, max=hi)
    else:
        if bounds is not None:
            bad(f"{path}.bounds", "a boolean column cannot be summed")
        elif ok:
            col = Boolean(name=name, nullable=nullable)
    if col is not None and bounds is not None and col.sum_bounds is None:
        bad(f"{path}.bounds", f"[{bounds[0]}, {bounds[1]}] contains none of the column's values "
                              f"(they range over [{min(col.values)}, {max(col.values)}])")
        return None
    return col


def _date_bound(cspec: Mapping[str, Any], key: str, path: str, bad: Callable[[str, str], None]) -> datetime.date | None:
    """A date column's ``min`` or ``max``: a ``datetime.date`` or ISO text (``2024-02-29``), or None after
    reporting it at ``path``."""
    value = cspec.get(key)
    if value is None:
        bad(path, "is required (a day written YYYY-MM-DD)")
        return None
    if isinstance(value, datetime.date) and not isinstance(value, datetime.datetime):
        return value
    if isinstance(value, str):
        try:
            return iso_date(value)
        except ValueError as e:
            bad(path, str(e))
            return None
    bad(path, f"must be a day written YYYY-MM-DD, got {value!r:.40}")
    return None


def _build_hierarchy(name: str, cspec: Mapping[str, Any], path: str, bad: Callable[[str, str], None],
                     base: str | None) -> Column | None:
    """``{type: hierarchy, values: [codes], levels: {name: prefix length, ...}}``: the codes are
    distinct strings, the levels' lengths increase and none is longer than the shortest code. Or
    ``{type: hierarchy, values: [codes], levels: [name, ...], codes: <mapping>}``: levels given by a
    public mapping of every code to its code at each level (:func:`_level_codes`); ``values`` may
    then be left out (the mapping's codes, in its order)."""
    if "codes" in cspec:
        return _build_mapped_hierarchy(name, cspec, path, bad, base)
    vals, levels = cspec.get("values"), cspec.get("levels")
    if not isinstance(vals, list) or not vals or not all(isinstance(v, str) and v for v in vals):
        bad(f"{path}.values", "must be a non-empty list of code strings")
        return None
    if not _domain_fits(path, len(vals), "declare fewer codes", bad) or not _check_keys(vals, f"{path}.values", bad):
        return None
    if (not isinstance(levels, Mapping) or not levels
            or not all(isinstance(k, str) and k and _is_int(v) and v >= 1 for k, v in levels.items())):
        bad(f"{path}.levels", "must map each level's name to its codes' prefix length, coarsest first "
                              "(e.g. {state: 2, county: 5}), or list the levels' names with a 'codes' mapping")
        return None
    lengths = list(levels.values())
    shortest = min(len(v) for v in vals)
    if any(b <= a for a, b in zip(lengths, lengths[1:])) or lengths[-1] > shortest:
        bad(f"{path}.levels", f"prefix lengths must increase, up to the shortest code's length ({shortest})")
        return None
    if not _level_names_ok(name, list(levels), path, bad):
        return None
    return Hierarchy(name=name, nullable=bool(cspec.get("nullable", False)), choices=tuple(vals),
                     levels=tuple((k, int(v)) for k, v in levels.items()))


#: Most levels a hierarchy given by a mapping may name (prefix levels are bounded by the codes' length).
MAX_HIERARCHY_LEVELS = 32


def _level_names_ok(name: str, levels: list, path: str, bad: Callable[[str, str], None]) -> bool:
    """Whether ``levels`` are distinct names other than the column's ``name`` (reported if not)."""
    names = [k.lower() for k in levels]
    if len(set(names)) != len(names) or name.lower() in names:
        bad(f"{path}.levels", "level names must be distinct and differ from the column's name")
        return False
    return True


def _build_mapped_hierarchy(name: str, cspec: Mapping[str, Any], path: str, bad: Callable[[str, str], None],
                            base: str | None) -> Column | None:
    """A hierarchy whose levels are given by the public mapping ``codes`` (see :func:`_build_hierarchy`)."""
    vals, levels = cspec.get("values"), cspec.get("levels")
    if (not isinstance(levels, list) or not levels or len(levels) > MAX_HIERARCHY_LEVELS
            or not all(isinstance(k, str) and k for k in levels)):
        bad(f"{path}.levels", f"with 'codes', must list the levels' names, coarsest first (e.g. [state, county]; "
                              f"1 to {MAX_HIERARCHY_LEVELS} levels)")
        return None
    if not _level_names_ok(name, levels, path, bad):
        return None
    if vals is not None:
        if not isinstance(vals, list) or not vals or not all(isinstance(v, str) and v for v in vals):
            bad(f"{path}.values", "must be a non-empty list of code strings (or be left out: the codes mapped)")
            return None
        if not (_domain_fits(path, len(vals), "declare fewer codes", bad) and _check_keys(vals, f"{path}.values", bad)):
            return None
    rows = _level_codes(name, levels, cspec["codes"], f"{path}.codes", bad, base)
    if rows is None:
        return None
    if vals is None:
        vals = list(rows)
    elif not _mapped_once(vals, rows, f"{path}.codes", bad):
        return None
    if not _nested(levels, vals, rows, f"{path}.codes", bad):
        return None
    by_level = tuple(zip(*(rows[v] for v in vals)))
    return Hierarchy(name=name, nullable=bool(cspec.get("nullable", False)), choices=tuple(vals),
                     levels=tuple((k, None) for k in levels), level_codes=by_level)


def _level_codes(name: str, levels: list[str], spec: Any, path: str, bad: Callable[[str, str], None],
                 base: str | None) -> dict[str, tuple[str, ...]] | None:
    """The mapping ``codes:`` of each finest code to its codes at ``levels``, in its order: a mapping
    ``{code: [level codes...]}``, or the path of a CSV file (relative to ``base``, the schema file's
    folder) whose header is the column's name then the levels' names. Codes are non-empty strings,
    each mapped once, at most :data:`MAX_COLUMN_DOMAIN` of them. None after reporting a problem."""
    where = ""
    if isinstance(spec, str):
        file = spec if base is None or os.path.isabs(spec) else os.path.join(base, spec)
        table = _read_codes_csv(file, [name, *levels], path, bad)
        if table is None:
            return None
        where = f"{spec}: "
    elif isinstance(spec, Mapping):
        for code, parents in spec.items():
            if not isinstance(parents, list):
                bad(f"{path}.{code}", f"must list the code's {len(levels)} level codes ({', '.join(levels)})")
                return None
        table = [(0, [code, *parents]) for code, parents in spec.items()]  # no line numbers: "where" is empty
    else:
        bad(path, f"must map each code to its codes at {', '.join(levels)}, or name a CSV file with the header "
                  f"{','.join([name, *levels])}")
        return None
    if not table:
        bad(path, "maps no code")
        return None
    if not _domain_fits(path, len(table), "declare fewer codes", bad):
        return None
    out: dict[str, tuple[str, ...]] = {}
    hint = " (quote codes in YAML: 01001 is read as a number)"
    for line, row in table:
        at = f"{where}line {line}: " if where else ""
        code, parents = (row[0], row[1:]) if row else ("", [])
        if not isinstance(code, str) or not code:
            bad(path, f"{at}code {code!r} must be a non-empty string" + (hint if _is_number(code) else ""))
            return None
        if len(parents) != len(levels) or not all(isinstance(c, str) and c for c in parents):
            bad(path, f"{at}code {code!r} must be mapped to {len(levels)} non-empty strings ({', '.join(levels)}), "
                      f"got {parents!r}" + (hint if any(_is_number(c) for c in parents) else ""))
            return None
        if code in out:
            bad(path, f"{at}code {code!r} is mapped twice")
            return None
        out[code] = tuple(parents)
    return out


def _read_codes_csv(file: str, header: list[str], path: str,
                    bad: Callable[[str, str], None]) -> list[tuple[int, list[str]]] | None:
    """The rows of the CSV file ``file`` (UTF-8), each with its line number, after checking that its
    header is ``header``; at most one row beyond :data:`MAX_COLUMN_DOMAIN` is read."""
    import csv

    try:
        with open(file, encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(fh)
            first = next(reader, None)
            if first is None or [c.strip().lower() for c in first] != [h.lower() for h in header]:
                bad(path, f"{file}: the header must be {','.join(header)} (the column, then its levels), "
                          f"got {','.join(first or [])!r}")
                return None
            rows = []
            for row in reader:
                rows.append((reader.line_num, row))
                if len(rows) > MAX_COLUMN_DOMAIN:
                    break
            return rows
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        reason = "no such file" if isinstance(exc, FileNotFoundError) else str(exc)[:200]
        bad(path, f"{file}: cannot be read ({reason})")
        return None


def _mapped_once(vals: list[str], rows: Mapping[str, tuple[str, ...]], path: str,
                 bad: Callable[[str, str], None]) -> bool:
    """Whether the mapping ``rows`` maps exactly the codes ``vals`` (reporting a few that differ)."""
    missing = [v for v in vals if v not in rows]
    listed = set(vals)
    extra = [c for c in rows if c not in listed]
    for codes, what in ((missing, "not mapped"), (extra, "mapped but not in values")):
        if codes:
            shown = ", ".join(repr(c) for c in codes[:5]) + (f" and {len(codes) - 5} more" if len(codes) > 5 else "")
            bad(path, f"{len(codes)} code{'s' if len(codes) > 1 else ''} {what}: {shown}")
    return not missing and not extra


def _nested(levels: list[str], vals: list[str], rows: Mapping[str, tuple[str, ...]], path: str,
            bad: Callable[[str, str], None]) -> bool:
    """Whether each level's code determines its coarser levels' codes (so the levels form a tree):
    the same county is never under two states. Reports the first conflict of each level."""
    ok = True
    for k in range(1, len(levels)):
        parent: dict[str, tuple[str, str]] = {}
        for v in vals:
            code, up = rows[v][k], rows[v][k - 1]
            first = parent.setdefault(code, (up, v))
            if first[0] != up:
                bad(path, f"{levels[k]} {code!r} is under {levels[k - 1]} {first[0]!r} (code {first[1]!r}) and "
                          f"{levels[k - 1]} {up!r} (code {v!r}): the levels must be nested")
                ok = False
                break
    return ok
