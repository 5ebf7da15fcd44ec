"""Tests of dpsql.private.measure against real oracles: Column.encode and numpy histograms."""

from __future__ import annotations

import math
from decimal import Decimal

import duckdb
import numpy as np
import pandas as pd
import pytest
import sqlglot
from sqlglot import exp

from dpsql import compile_batch
from dpsql.errors import Error, MeasurementError
from dpsql.private.measure import index_expression, marginals_query, measure_marginals, sql_type_family
from dpsql.schema import Attribute, Binned, Boolean, Categorical, Column, IntegerRange, load_schema

NAN, INF = float("nan"), float("inf")


def encode_oracle(column: Column, values) -> list[int]:
    """``Column.encode`` value by value, with one documented departure of the
    SQL mapping: NaN is out of the domain (``index_of`` reads it as NULL)."""
    out = []
    for v in values:
        if isinstance(v, float) and math.isnan(v):
            out.append(-1)
            continue
        out.append(int(column.encode([v])[0]))
    return out


def sql_indices(con, column: Column, sql_type: str, values, declared=...):
    """Load ``values`` into a one-column table of ``sql_type`` and map them in
    SQL, telling :func:`index_expression` the type ``declared`` (default
    ``sql_type``; None: unknown); returns (indices, the values as DuckDB
    hands them to Python)."""
    declared = sql_type if declared is ... else declared
    con.execute("DROP TABLE IF EXISTS v")
    con.execute(f"CREATE TABLE v (pos INTEGER, x {sql_type})")
    con.executemany("INSERT INTO v VALUES (?, ?)", list(enumerate(values)))
    ref = exp.column("x", quoted=True)
    mapped = exp.select(exp.column("pos"), index_expression(column, ref, declared).as_("i"),
                        index_expression(column, ref, declared, outside=-1).as_("j"),
                        ref).from_("v").order_by("pos")
    rows = con.execute(mapped.sql(dialect="duckdb")).fetchall()
    got = [-1 if r[1] is None else int(r[1]) for r in rows]
    assert got == [int(r[2]) for r in rows]  # outside=-1 is the same mapping with -1 for NULL
    return got, [r[3] for r in rows]


@pytest.fixture
def con():
    c = duckdb.connect()
    yield c
    c.close()


STRINGS = ["a", "B", "it's", "é", "日本", "back\\slash", "", "two words", "Z"]
CASES = [
    # (column, [(sql type, values), ...])
    (Categorical("s", choices=tuple(STRINGS)), [
        ("VARCHAR", [*STRINGS, "A", "b", "e", "x", None, "a ", "日"]),
        ("INTEGER", [1, 0, None]),
        ("DOUBLE", [1.0, NAN, None]),
        ("BOOLEAN", [True, None]),
        ("DATE", ["2020-01-01", None]),
    ]),
    (Categorical("n", choices=(1, 2.5, -3, 10, 0)), [
        ("INTEGER", [1, 2, -3, 10, 0, 11, None]),
        ("TINYINT", [1, -3, 127, -128, None]),
        ("UBIGINT", [10, 18446744073709551615, None]),
        ("HUGEINT", [10, 2 ** 100, None]),
        ("DOUBLE", [1.0, 2.5, -3.0, 10.0, 2.4999999, 1e300, NAN, INF, -INF, -0.0, 0.0, None]),
        ("FLOAT", [2.5, 1.0, 0.1, None]),
        ("DECIMAL(6,2)", [Decimal("2.50"), Decimal("1.00"), Decimal("-3.00"), Decimal("2.51"), None]),
        ("VARCHAR", ["1", "2.5", "x", None]),
        ("BOOLEAN", [True, False, None]),
    ]),
    (IntegerRange("i", min=-3, max=5), [
        ("INTEGER", list(range(-6, 9)) + [None, 2 ** 31 - 1]),
        ("TINYINT", [-128, -3, 0, 5, 6, 127, None]),
        ("UTINYINT", [0, 5, 6, 255, None]),
        ("BIGINT", [-3, 5, -(2 ** 63), 2 ** 63 - 1, None]),
        ("UBIGINT", [0, 4, 2 ** 64 - 1, None]),
        ("HUGEINT", [-3, 2, 2 ** 120, None]),
        ("DOUBLE", [2.0, 2.5, -3.0, 5.0, 5.5, -3.5, 1e300, NAN, INF, -INF, -0.0, None]),
        ("FLOAT", [2.0, 2.5, 4.0, None]),
        ("DECIMAL(10,3)", [Decimal("2.000"), Decimal("2.500"), Decimal("-3.000"), Decimal("9.000"), None]),
        ("VARCHAR", ["3", "x", "", None]),
        ("BOOLEAN", [True, False, None]),
        ("DATE", ["2020-01-01", None]),
        ("INTEGER[]", [[1], None]),
    ]),
    (IntegerRange("j", min=0, max=2), [
        ("TINYINT", [-1, 0, 1, 2, 3, None]),
        ("DOUBLE", [0.0, 1.0, 2.0, 2.000001, None]),
    ]),
    (Binned("b", edges=(0.0, 10.5, 20.0, 100.0)), [
        ("DOUBLE", [0.0, -0.0, 10.5, float(np.nextafter(10.5, 0)), 20.0, 99.99, 100.0, float(np.nextafter(100, 200)),
                    -1e-300, NAN, INF, -INF, None]),
        ("FLOAT", [10.5, 0.1, 100.0, None]),
        ("INTEGER", [-1, 0, 10, 11, 20, 100, 101, None]),
        ("HUGEINT", [50, 2 ** 100, None]),
        ("DECIMAL(8,3)", [Decimal("10.500"), Decimal("10.499"), Decimal("100.000"), None]),
        ("VARCHAR", ["5", "x", None]),
        ("BOOLEAN", [True, None]),
    ]),
    (Boolean("t"), [
        ("BOOLEAN", [True, False, None]),
        ("INTEGER", [0, 1, 2, -1, None]),
        ("VARCHAR", ["true", "false", None]),
        ("DOUBLE", [1.0, NAN, None]),
    ]),
]


@pytest.mark.parametrize("nullable", [False, True])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_index_matches_encode(con, case, nullable):
    column, loads = CASES[case]
    column = type(column)(**{**column.__dict__, "nullable": nullable})
    for sql_type, values in loads:
        got, fetched = sql_indices(con, column, sql_type, values)
        assert got == encode_oracle(column, fetched), (column, sql_type, fetched)


def test_enum_and_collation(con):
    """ENUM values compare as their text; the connection's default collation
    (here case-insensitive) does not change the mapping, nor does a column's."""
    col = Categorical("s", choices=("ok", "sad", "Ok"))
    con.execute("CREATE TYPE mood AS ENUM ('sad', 'ok', 'OK', 'happy')")
    got, fetched = sql_indices(con, col, "mood", ["sad", "ok", "OK", "happy", None], declared="ENUM")
    assert got == encode_oracle(col, fetched) == [1, 0, -1, -1, -1]
    con.execute("SET default_collation = 'nocase'")
    got, fetched = sql_indices(con, col, "VARCHAR", ["ok", "OK", "Ok", "SAD"])
    assert got == encode_oracle(col, fetched) == [0, -1, 2, -1]
    got, fetched = sql_indices(con, col, "VARCHAR COLLATE nocase", ["ok", "OK", "Ok"], declared="VARCHAR")
    assert got == [0, -1, 2]


def test_many_values_binary_search(con):
    """Large domains use nested CASEs (a binary search): still exact, including
    strings whose order depends on bytes (case, accents, CJK)."""
    rng = np.random.default_rng(1)
    alphabet = list("abcXYZ é日本_'\\")
    strings = sorted({"".join(rng.choice(alphabet, size=rng.integers(0, 5))) for _ in range(200)})
    col = Categorical("s", choices=tuple(strings[::2]))
    probe = strings + ["zzz", None]
    for nullable in (False, True):
        c = Categorical("s", nullable=nullable, choices=col.choices)
        got, fetched = sql_indices(con, c, "VARCHAR", probe)
        assert got == encode_oracle(c, fetched)
    nums = Categorical("n", choices=tuple(dict.fromkeys(float(x) for x in np.round(rng.normal(size=60), 2))) + (7, -7))
    probe = list(nums.choices) + [float(x) for x in rng.normal(size=40)] + [NAN, INF, 7.0, -7.5, None]
    for sql_type in ("DOUBLE", "INTEGER"):
        vals = probe if sql_type == "DOUBLE" else [int(v) for v in range(-10, 10)] + [None]
        got, fetched = sql_indices(con, nums, sql_type, vals)
        assert got == encode_oracle(nums, fetched)
    edges = tuple(float(x) for x in np.cumsum(rng.uniform(0.1, 2, size=41)) - 5)
    bins = Binned("b", edges=edges)
    probe = list(edges) + [float(np.nextafter(e, -INF)) for e in edges] + [float(x) for x in rng.uniform(-8, 80, 300)]
    got, fetched = sql_indices(con, bins, "DOUBLE", probe + [NAN, INF, None])
    assert got == encode_oracle(bins, fetched)


def test_lenient_mapping_without_types(con):
    """Without the SQL type, values are TRY_CAST first: never an error, and
    the same answer as typed mapping for the natural types."""
    for column, loads in CASES:
        for sql_type, values in loads:
            lenient, _ = sql_indices(con, column, sql_type, values, declared=None)
            typed, fetched = sql_indices(con, column, sql_type, values)
            natural = {Categorical: "VARCHAR" if not column.is_numeric else "DOUBLE", IntegerRange: "DOUBLE",
                       Binned: "DOUBLE", Boolean: "BOOLEAN"}[type(column)]
            if sql_type == natural:
                assert lenient == typed
    col = IntegerRange("i", min=0, max=5)
    assert sql_indices(con, col, "VARCHAR", ["3", "x", "3.0", "3.5"], declared=None)[0] == [3, -1, 3, -1]
    assert sql_type_family(None) is None


# -- marginals -----------------------------------------------------------------------------

SCHEMA = {
    "table": "people",
    "merge": {"race": ["white", "black"]},
    "columns": {
        "sex": {"type": "categorical", "values": ["F", "M"], "nullable": True},
        "age": {"type": "integer", "min": 0, "max": 9},
        "white": {"type": "boolean"},
        "black": {"type": "boolean", "nullable": True},
        "income": {"type": "numeric", "bins": [0, 10, 50, 100]},
        "grade": {"type": "categorical", "values": [1, 2, 3]},
    },
}


def make_people(con, n, seed, table="people"):
    rng = np.random.default_rng(seed)
    sex = rng.choice(np.array(["F", "M", "X", None], dtype=object), size=n, p=[0.45, 0.45, 0.03, 0.07])
    age = rng.integers(-1, 11, size=n).astype(float)
    age[rng.random(n) < 0.03] = np.nan
    age[rng.random(n) < 0.02] = 2.5
    white = rng.choice(np.array([True, False, None], dtype=object), size=n, p=[0.5, 0.47, 0.03])
    black = rng.choice(np.array([True, False, None], dtype=object), size=n, p=[0.3, 0.6, 0.1])
    income = rng.uniform(-5, 105, size=n)
    income[rng.random(n) < 0.03] = np.inf
    grade = rng.integers(0, 5, size=n)
    extra = rng.integers(0, 1000, size=n)
    rows = [(s, None if a != a else float(a), w, b, float(i), int(g), int(e))
            for s, a, w, b, i, g, e in zip(sex, age, white, black, income, grade, extra)]
    frame = pd.DataFrame(rows, columns=["sex", "age", "white", "black", "income", "grade", "extra"])
    con.register("frame", frame)
    con.execute(f'CREATE OR REPLACE TABLE "{table}" AS SELECT sex::VARCHAR sex, age::DOUBLE age, '
                'white::BOOLEAN white, black::BOOLEAN black, income::DOUBLE income, grade::BIGINT grade, '
                'extra::INTEGER extra FROM frame')
    con.unregister("frame")


def oracle_marginals(con, table, schema, attributes, subsets):
    """Histograms computed in Python from Column.encode, dropping rows with -1 in
    any declared column."""
    rows = con.execute(f'SELECT {", ".join(c.name for c in schema.columns)} FROM "{table}"').fetchall()
    codes = {c.name: encode_oracle(c, [r[i] for r in rows]) for i, c in enumerate(schema.columns)}
    read = {c for s in subsets for a in s for c in attributes[a].columns}
    keep = np.all([np.array(codes[c.name]) >= 0 for c in schema.columns] + [np.ones(len(rows), bool)], axis=0)
    attr_idx = []
    for a in attributes:
        cols = [np.array(codes[c])[keep] for c in a.columns]
        attr_idx.append(np.ravel_multi_index(tuple(cols), a.sizes) if set(a.columns) <= read else None)
    out = []
    for s in subsets:
        size = math.prod(attributes[a].size for a in s)
        flat = np.ravel_multi_index(tuple(attr_idx[a] for a in s), [attributes[a].size for a in s]) if s \
            else np.zeros(int(keep.sum()), dtype=int)
        out.append(np.bincount(flat, minlength=size).astype(float))
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_marginals_match_numpy(con, seed):
    schema = load_schema(SCHEMA)
    make_people(con, 3000, seed)
    batch = compile_batch("SELECT sex, COUNT(*) FROM people WHERE white OR black GROUP BY sex", schema)
    attributes = batch.attributes
    assert [a.name for a in attributes] == ["sex", "age", "race", "income", "grade"]
    subsets = [(), (0,), (2,), (1, 3), (0, 1, 2, 3, 4), (0,), (2, 4), (3, 1)]
    got = measure_marginals(con, "people", schema, attributes, subsets)
    want = oracle_marginals(con, "people", schema, attributes, subsets)
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        assert g.dtype == np.float64
        np.testing.assert_array_equal(g, w)
    assert got[0][0] == got[4].sum() == got[1].sum() and 0 < got[0][0] < 3000  # same rows everywhere
    # marginals are consistent projections of the full one
    full = got[4].reshape([a.size for a in attributes])
    np.testing.assert_array_equal(full.sum(axis=(0, 1, 3, 4)), got[2])
    np.testing.assert_array_equal(full.sum(axis=(0, 2, 4)).T.ravel(), got[7])


def test_many_marginals_are_counted_in_queries_of_few_grouping_sets(con, monkeypatch):
    """The 34,220 triples of 60 columns in one GROUPING SETS query ran DuckDB out of memory,
    after the charge. At most MAX_GROUPING_SETS marginals go in one query; the counts are the
    oracle's, in the order asked, duplicates and the empty marginal included."""
    import dpsql.private.measure as measure

    monkeypatch.setattr(measure, "MAX_GROUPING_SETS", 3)
    schema = load_schema(SCHEMA)
    make_people(con, 2000, 3)
    attributes = compile_batch("SELECT sex, COUNT(*) FROM people WHERE white OR black GROUP BY sex", schema).attributes
    subsets = [(0,), (2,), (1, 3), (0, 1, 2, 3, 4), (), (2, 4), (3, 1), (0,)]
    queries = []
    execute = duckdb.DuckDBPyConnection.execute

    def spy(self, query, *args, **kwargs):
        if "GROUP BY" in str(query) and not str(query).startswith("PREPARE"):
            queries.append(str(query))
        return execute(self, query, *args, **kwargs)

    monkeypatch.setattr(duckdb.DuckDBPyConnection, "execute", spy)
    got = measure_marginals(con, "people", schema, attributes, subsets)
    for g, w in zip(got, oracle_marginals(con, "people", schema, attributes, subsets), strict=True):
        np.testing.assert_array_equal(g, w)
    assert len(queries) == 3 and all(q.count("GROUPING SETS") <= 1 for q in queries)


def test_marginals_non_adjacent_merge_and_single_set(con):
    """A merged attribute of non-adjacent columns (attribute order is not
    schema order); one marginal alone (plain GROUP BY, no filter)."""
    schema = load_schema(SCHEMA)
    make_people(con, 1500, 7)
    sizes = {c.name: c.size for c in schema.columns}
    attributes = [Attribute("sex+grade", ("sex", "grade"), (sizes["sex"], sizes["grade"])),
                  Attribute("income", ("income",), (sizes["income"],)),
                  Attribute("age", ("age",), (sizes["age"],)),
                  Attribute("race", ("white", "black"), (sizes["white"], sizes["black"]))]
    for subsets in ([(0, 1, 2, 3)], [(0,)], [(3, 0)], [()], [(1, 3), (0, 2)]):
        got = measure_marginals(con, "people", schema, attributes, subsets)
        want = oracle_marginals(con, "people", schema, attributes, subsets)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    assert measure_marginals(con, "people", schema, attributes, []) == []


def test_empty_and_all_out_of_domain(con):
    schema = load_schema({"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 2},
                                                    "b": {"type": "boolean"}}})
    attrs = [Attribute("a", ("a",), (3,)), Attribute("b", ("b",), (2,))]
    con.execute("CREATE TABLE t (a INTEGER, b BOOLEAN)")
    got = measure_marginals(con, "t", schema, attrs, [(), (0,), (0, 1)])
    assert [g.tolist() for g in got] == [[0.0], [0.0] * 3, [0.0] * 6]
    con.execute("INSERT INTO t VALUES (7, true), (1, NULL), (NULL, false)")
    got = measure_marginals(con, "t", schema, attrs, [(), (0, 1)])
    assert [g.tolist() for g in got] == [[0.0], [0.0] * 6]
    # every declared column must be in its domain, whichever columns a measurement reads: the
    # total, a's marginal and their joint marginal count the same (here no) rows
    assert measure_marginals(con, "t", schema, attrs, [()])[0].tolist() == [0.0]
    assert measure_marginals(con, "t", schema, attrs, [(0,)])[0].tolist() == [0.0, 0.0, 0.0]
    con.execute("INSERT INTO t VALUES (2, false)")
    assert [g.tolist() for g in measure_marginals(con, "t", schema, attrs, [(), (0,), (1,)])] == \
        [[1.0], [0.0, 0.0, 1.0], [1.0, 0.0]]


def test_quoted_names_and_extra_columns(con):
    schema = load_schema({"table": 'my "odd" table', "columns": {
        'we"ird col': {"type": "categorical", "values": ["x", "y"]},
        "select": {"type": "integer", "min": 1, "max": 3}}})
    con.execute('CREATE TABLE "my ""odd"" table" ("we""ird col" VARCHAR, "select" INTEGER, other VARCHAR)')
    con.execute("""INSERT INTO "my ""odd"" table" VALUES ('x', 1, 'a'), ('y', 3, 'b'), ('y', 3, NULL), ('z', 1, 'c')""")
    attrs = [Attribute("w", ('we"ird col',), (2,)), Attribute("s", ("select",), (3,))]
    total, joint = measure_marginals(con, 'my "odd" table', schema, attrs, [(), (0, 1)])
    assert total.tolist() == [3.0]
    assert joint.tolist() == [1, 0, 0, 0, 0, 2]


# -- privacy unit ---------------------------------------------------------------------------

def test_privacy_unit_bound(con):
    schema = load_schema({"table": "visits", "privacy_unit": {"column": "person", "max_rows": 3},
                          "columns": {"day": {"type": "integer", "min": 0, "max": 49},
                                      "kind": {"type": "categorical", "values": ["a", "b"]}}})
    rows = [("big", d, "a") for d in range(50)]                     # one unit with 50 rows
    rows += [(f"p{i}", i % 50, "b") for i in range(20)]              # 20 units with one row
    rows += [("pair", 7, "b"), ("pair", 8, "b")]                     # a unit with two rows
    rows += [(None, 40 + i, "b") for i in range(5)]                  # NULL unit: each row its own unit
    con.execute("CREATE TABLE visits (person VARCHAR, day INTEGER, kind VARCHAR)")
    con.executemany("INSERT INTO visits VALUES (?, ?, ?)", rows)
    attrs = [Attribute("day", ("day",), (50,)), Attribute("kind", ("kind",), (2,))]
    picks = set()
    for _ in range(12):
        total, kind, day_kind = measure_marginals(con, "visits", schema, attrs, [(), (1,), (0, 1)])
        assert total.tolist() == [3 + 20 + 2 + 5]
        assert kind.tolist() == [3, 27]                              # the big unit contributes exactly 3 rows
        table = day_kind.reshape(50, 2)
        assert table[:, 1].tolist() == np.bincount([i % 50 for i in range(20)] + [7, 8] + list(range(40, 45)),
                                                   minlength=50).tolist()  # other units unchanged
        assert set(table[:, 0]) <= {0.0, 1.0}
        picks.add(tuple(np.flatnonzero(table[:, 0])))
    assert len(picks) > 1                                            # the kept rows are drawn at random
    sql = marginals_query(schema, attrs, [(0,)], "visits").sql(dialect="duckdb")
    assert "ROW_NUMBER() OVER (PARTITION BY \"person\"" in sql


def test_privacy_unit_column_name_clash(con):
    """The random sort key gets a name that no schema or unit column has."""
    schema = load_schema({"table": "t", "privacy_unit": {"column": "_dpsql_random", "max_rows": 1},
                          "columns": {"_dpsql_random1": {"type": "boolean"}}})
    con.execute('CREATE TABLE t ("_dpsql_random" INTEGER, "_dpsql_random1" BOOLEAN)')
    con.execute("INSERT INTO t VALUES (1, true), (1, true), (2, false), (NULL, true), (NULL, true)")
    (hist,) = measure_marginals(con, "t", schema, [Attribute("b", ("_dpsql_random1",), (2,))], [(0,)])
    assert hist.tolist() == [1.0, 3.0]


# -- SQL generation and errors ------------------------------------------------------------

def test_query_is_built_not_pasted():
    schema = load_schema(SCHEMA)
    attrs = compile_batch("SELECT COUNT(*) FROM people WHERE white OR black", schema).attributes
    unit_schema = load_schema({**SCHEMA, "privacy_unit": {"column": "pid", "max_rows": 2}})
    for s in (schema, unit_schema):
        query = marginals_query(s, attrs, [(), (0, 2), (1, 3, 4)], "people")
        assert isinstance(query, exp.Select)
        for dialect in ("duckdb", "postgres", "snowflake", "bigquery"):
            text = query.sql(dialect=dialect)
            sqlglot.parse_one(text, read=dialect)  # renders to SQL that parses back
        assert "GROUPING SETS" in query.sql(dialect="duckdb")
    one = marginals_query(schema, attrs, [(0, 2)], "people").sql(dialect="duckdb")
    assert "GROUPING SETS" not in one and "GROUP BY" in one


def test_bad_subsets():
    schema = load_schema(SCHEMA)
    attrs = compile_batch("SELECT COUNT(*) FROM people", schema).attributes
    with pytest.raises(Error):
        marginals_query(schema, attrs, [(0, 0)], "people")
    with pytest.raises(Error):
        marginals_query(schema, attrs, [(len(attrs),)], "people")
    with pytest.raises(Error):
        marginals_query(schema, [Attribute("nope", ("nope",), (2,))], [(0,)], "people")


def test_missing_table_and_column(con):
    schema = load_schema(SCHEMA)
    attrs = compile_batch("SELECT COUNT(*) FROM people", schema).attributes
    with pytest.raises(MeasurementError, match="people"):
        measure_marginals(con, "people", schema, attrs, [()])
    con.execute("CREATE TABLE people (sex VARCHAR, age INTEGER)")
    with pytest.raises(MeasurementError, match="white"):
        measure_marginals(con, "people", schema, attrs, [()])
    unit = load_schema({"table": "t", "privacy_unit": {"column": "pid", "max_rows": 1},
                        "columns": {"sex": {"type": "categorical", "values": ["F"]}}})
    with pytest.raises(MeasurementError, match="pid"):
        measure_marginals(con, "people", unit, [Attribute("sex", ("sex",), (1,))], [()])


def test_other_errors_do_not_echo_data(con):
    """Only the exception class is reported for a failure that is not schema-level."""
    schema = load_schema({"table": "t", "columns": {"a": {"type": "boolean"}}})
    con.execute("CREATE TABLE t (a BOOLEAN)")

    class Failing:
        def sql(self, query):
            return con.sql(query)

        def execute(self, query, *parameters):
            raise duckdb.ConversionException("Could not convert string 'Alice Smith' to INT32")

    with pytest.raises(MeasurementError) as info:
        measure_marginals(Failing(), "t", schema, [Attribute("a", ("a",), (2,))], [(0,)])
    assert "Alice" not in str(info.value) and "ConversionException" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_a_summed_binned_column_is_measured_by_endpoint_shares(con):
    """Bins [0, 10), [10, 20), [20, 40] with SUM bounds [5, 25]: clamped edges 5-10, 10-20, 20-25.
    Each row alone, against a hand calculation of its two shares: non-negative, at most two
    cells (its bin's), adding up to 1 (0 outside the domain), so a row moves the histogram by
    at most one count in L1 and L2: a strategy's sensitivity is that of counts."""
    schema = load_schema({"table": "t", "columns": {
        "h": {"type": "numeric", "bins": [0, 10, 20, 40], "nullable": True, "bounds": [5, 25]},
        "a": {"type": "integer", "min": 0, "max": 1}}})
    split = Attribute("h", ("h",), (8,), split=("h",))
    # value -> {cell: share}; the lower cell of bin b is 2b, the upper 2b + 1, NULL's lower is 6
    cases = {0.0: {0: 1.0}, 3.0: {0: 1.0}, 7.5: {0: 0.5, 1: 0.5}, 10.0: {2: 1.0}, 12.5: {2: 0.75, 3: 0.25},
             19.999: {2: 0.0001, 3: 0.9999}, 20.0: {4: 1.0}, 21.0: {4: 0.8, 5: 0.2}, 30.0: {5: 1.0}, 40.0: {5: 1.0},
             None: {6: 1.0}, -1.0: {}, 40.5: {}, NAN: {}, INF: {}}
    con.execute("CREATE TABLE t (h DOUBLE, a INTEGER)")
    for value, shares in cases.items():
        con.execute("DELETE FROM t")
        con.execute("INSERT INTO t VALUES (?, 1)", [value])
        (hist,) = measure_marginals(con, "t", schema, [split], [(0,)])
        want = np.zeros(8)
        for cell, share in shares.items():
            want[cell] = share
        np.testing.assert_allclose(hist, want, atol=1e-12, err_msg=str(value))
        assert (hist >= 0).all() and np.abs(hist).sum() <= 1 + 1e-12
    # all rows together, in a merged attribute (a, h) and summed out: the shares add up per row
    con.execute("DELETE FROM t")
    con.executemany("INSERT INTO t VALUES (?, ?)", [[v, i % 2] for i, v in enumerate(cases)])
    merged = Attribute("a+h", ("a", "h"), (2, 8), split=("h",))
    total, joint = measure_marginals(con, "t", schema, [merged], [(), (0,)])
    assert total[0] == pytest.approx(11)  # 15 rows, 4 outside the domain
    want = np.zeros((2, 8))
    for i, shares in enumerate(cases.values()):
        for cell, share in shares.items():
            want[i % 2, cell] += share
    np.testing.assert_allclose(joint, want.ravel(), atol=1e-12)
    # the shares times the clamped edges are the clamped SUM: 5+5+7.5+10+12.5+19.999+20+21+25+25
    sums = schema.column("h").endpoint_weights() @ joint.reshape(2, 8).sum(axis=0)
    assert sums == pytest.approx(150.999)


def test_the_laplace_lattice_rounds_both_endpoint_cells_a_row_moves(con):
    """A row of a split binned column moves two cells' answers: the lattice's rounding must cover
    twice the changed answers of a one-cell row, or the Laplace release would be over its epsilon."""
    from dpsql.hdmm.matrix import Identity
    from dpsql.hdmm.strategy import KronStrategy
    from dpsql.privacy import Laplace
    from dpsql.private.budget import Budget
    from dpsql.private.kernel import PrivateTable
    from dpsql.private.ledger import Ledger
    from dpsql.private.noise import laplace_lattice

    schema = load_schema({"table": "t", "columns": {"h": {"type": "numeric", "bins": [0, 10, 20]}}})
    con.execute("CREATE TABLE t (h DOUBLE)")
    table = PrivateTable(con, "t", schema, Ledger(None, Budget(epsilon=10.0)))
    strategy = KronStrategy((Identity(4),))
    split = [Attribute("h", ("h",), (4,), split=("h",))]
    eps = 1e-9  # where the rounding term 2c/eps dominates the lattice's scale
    assert table.plan(strategy, Laplace(eps), attributes=split).scale == laplace_lattice(1.0, eps, 2).scale
    assert table.plan(strategy, Laplace(eps)).scale == laplace_lattice(1.0, eps, 1).scale
    assert laplace_lattice(1.0, eps, 2).scale > laplace_lattice(1.0, eps, 1).scale
