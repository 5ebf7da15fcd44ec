"""The Spark backend gives the same counts, and the same private answers, as DuckDB.

One local Spark session (``local[2]``) serves the whole module. Every table
is built once in DuckDB and copied, row by row with explicit Spark types, to
a Spark temp view of the same name (going through pandas would turn NULLs
in float columns into NaN, which the mapping treats differently).
Skipped, with the reason, when pyspark or Java is not installed.
"""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
from decimal import Decimal
from itertools import combinations

import duckdb
import numpy as np
import pandas as pd
import pytest


def _missing() -> str | None:
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed (pip install -e '.[spark]')"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "Java is not installed (Spark needs a JVM)"
    return None


if _missing():
    pytest.skip(f"Spark backend tests skipped: {_missing()}", allow_module_level=True)

from sql_oracle import SCHEMA as PEOPLE
from sql_oracle import StatementGenerator, _py, assert_released_near_exact, make_table, released_interval
from test_measure import SCHEMA as MERGED
from test_measure import make_people, oracle_marginals

import dpsql
from dpsql import compile_batch
from dpsql.errors import MeasurementError
from dpsql.private.backend import SparkBackend
from dpsql.private.budget import Budget, Cost
from dpsql.private.measure import measure_marginals
from dpsql.schema import (
    Attribute,
    load_schema,
)

NAN, INF = float("nan"), float("inf")
pytestmark = pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning")


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("dpsql-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.execution.arrow.pyspark.enabled", "false")
               .getOrCreate())
    session.sparkContext.setLogLevel("OFF")
    yield session
    session.stop()


def to_spark(spark, con, table: str, ddl: str) -> None:
    """Copy DuckDB ``table`` to a Spark temp view of the same name, with Spark types ``ddl``."""
    rows = [tuple(v for v in r) for r in con.execute(f'SELECT * FROM "{table}"').fetchall()]
    spark.createDataFrame(rows, schema=ddl).createOrReplaceTempView(table)


def assert_same(got, want):
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


# -- (a) the same counts as DuckDB ------------------------------------------------------------

def test_marginals_with_merged_attributes_and_out_of_domain_values(spark):
    """NULLs, an out-of-domain category, NaN-free doubles with 2.5 and inf, grades outside the domain."""
    con = duckdb.connect()
    make_people(con, 3000, seed=0)
    to_spark(spark, con, "people", "sex string, age double, white boolean, black boolean, income double, "
                                   "grade bigint, extra int")
    schema = load_schema(MERGED)
    attributes = compile_batch("SELECT sex, COUNT(*) FROM people WHERE white OR black GROUP BY sex",
                               schema).attributes
    subsets = [(), (0,), (2,), (1, 3), (0, 1, 2, 3, 4), (0,), (2, 4), (3, 1)]
    got = measure_marginals(spark, "people", schema, attributes, subsets)
    assert_same(got, measure_marginals(con, "people", schema, attributes, subsets))
    assert_same(got, oracle_marginals(con, "people", schema, attributes, subsets))
    # a merged attribute of non-adjacent columns, and one marginal alone (a plain GROUP BY)
    sizes = {c.name: c.size for c in schema.columns}
    attrs = [Attribute("sex+grade", ("sex", "grade"), (sizes["sex"], sizes["grade"])),
             Attribute("income", ("income",), (sizes["income"],)),
             Attribute("age", ("age",), (sizes["age"],)),
             Attribute("race", ("white", "black"), (sizes["white"], sizes["black"]))]
    for subs in ([(0, 1, 2, 3)], [(3, 0)], [(1, 3), (0, 2), ()]):
        assert_same(measure_marginals(SparkBackend(spark), "people", schema, attrs, subs),
                    measure_marginals(con, "people", schema, attrs, subs))
    # the same attributes with their values grouped (a reduced domain: one count per group)
    rng = np.random.default_rng(5)
    grouped = [a.grouped(np.unique(rng.integers(0, 3, a.size), return_inverse=True)[1]) for a in attrs]
    for subs in ([(0, 1, 2, 3)], [(3, 0)], [(1, 3), (0, 2), ()]):
        assert_same(measure_marginals(SparkBackend(spark), "people", schema, grouped, subs),
                    measure_marginals(con, "people", schema, grouped, subs))


def test_marginals_of_the_oracle_table_every_pair(spark):
    con = make_table(500, seed=2)
    to_spark(spark, con, "people", "sex string, age int, hours double, white boolean, black boolean, "
                                   "region string, score int")
    schema = load_schema(PEOPLE)
    attributes = compile_batch("SELECT COUNT(*) FROM people", schema).attributes
    n = len(attributes)
    subsets = [()] + [(a,) for a in range(n)] + list(combinations(range(n), 2)) + [(0, 2, 4), tuple(range(n))]
    assert_same(measure_marginals(spark, "people", schema, attributes, subsets),
                measure_marginals(con, "people", schema, attributes, subsets))


STRINGS = ["a", "B", "it's", "é", "日本", "back\\slash", "", "two words", "Z"]


def _wide_schema():
    rng = np.random.default_rng(1)
    alphabet = list("abcXYZ é日本_'\\")
    many = sorted({"".join(rng.choice(alphabet, size=rng.integers(0, 5))) for _ in range(120)})
    spec = {"table": "wide", "columns": {
        "s": {"type": "categorical", "values": STRINGS, "nullable": True},
        "m": {"type": "categorical", "values": many[::2]},                   # > 16 values: a binary search
        "n": {"type": "categorical", "values": [1, 2.5, -3, 10, 0]},
        "i": {"type": "integer", "min": -3, "max": 5, "nullable": True},
        "b": {"type": "numeric", "bins": [0, 10.5, 20, 100]},
        "t": {"type": "boolean", "nullable": True}}}
    return load_schema(spec), many


# Each load: DuckDB types, Spark types, and rows (s, m, n, i, b, t), some of the wrong type for the schema.
def _loads(many):
    rng = np.random.default_rng(5)
    size = 300
    s = rng.choice(np.array(STRINGS + ["A", "x", "a ", "日", None], dtype=object), size)
    m = rng.choice(np.array(many + ["zzz", None], dtype=object), size)
    natural = [(s[k], m[k], float(rng.choice([1, 2.5, -3, 10, 0, 2.4999, 11, NAN, INF, -0.0])),
                int(rng.integers(-6, 9)) if rng.random() > 0.1 else None,
                float(rng.choice([0, -0.0, 10.5, 10.4999, 20, 99.99, 100, 100.01, NAN, INF, -INF, 5])),
                bool(rng.random() < 0.5) if rng.random() > 0.1 else None) for k in range(size)]
    yield ("s VARCHAR, m VARCHAR, n DOUBLE, i INTEGER, b DOUBLE, t BOOLEAN",
           "s string, m string, n double, i int, b double, t boolean", natural)
    narrow = [(r[0], r[1], int(v) if math.isfinite(v) and v == int(v) else 7, r[3],
               round(r[4], 2) if math.isfinite(r[4]) else None, r[5]) for r, v in zip(natural, [r[2] for r in natural])]
    yield ("s VARCHAR, m VARCHAR, n TINYINT, i BIGINT, b DECIMAL(8,2), t BOOLEAN",
           "s string, m string, n tinyint, i bigint, b decimal(8,2), t boolean",
           [(a, b_, n, i, None if d is None else Decimal(f"{d:.2f}"), t) for a, b_, n, i, d, t in narrow])
    floats = [(r[0], r[1], Decimal("2.50") if k % 3 else Decimal("2.51"), None if r[3] is None else r[3] + 0.5 * (k % 2),
               float(int(r[4])) if math.isfinite(r[4]) else -1.0, r[5]) for k, r in enumerate(natural)]
    yield ("s VARCHAR, m VARCHAR, n DECIMAL(6,2), i DOUBLE, b INTEGER, t BOOLEAN",
           "s string, m string, n decimal(6,2), i double, b int, t boolean",
           [(a, b_, n, i, int(d), t) for a, b_, n, i, d, t in floats])
    # every column of a type that holds no domain value: all rows out of every marginal
    wrong = [(int(k % 3), None if k % 4 else "x", str(r[2]), str(r[3]), bool(k % 2), "true" if k % 2 else "false")
             for k, r in enumerate(natural)]
    yield ("s INTEGER, m VARCHAR, n VARCHAR, i VARCHAR, b BOOLEAN, t VARCHAR",
           "s int, m string, n string, i string, b boolean, t string", wrong)


def test_marginals_for_every_column_type(spark):
    """Doubles with NaN and ±inf, DECIMAL, TINYINT, byte-ordered unicode strings,
    and columns of a type outside the schema's kind: the same counts on both."""
    schema, many = _wide_schema()
    attrs = [Attribute(c.name, (c.name,), (c.size,)) for c in schema.columns]
    split = [Attribute("b", ("b",), (2 * a.size,), split=("b",)) if a.name == "b" else a for a in attrs]
    subsets = [(), (0,), (1,), (2,), (3,), (4,), (5,), (0, 1), (2, 3, 4), (5, 0)]
    totals = []
    for duck_types, spark_types, rows in _loads(many):
        con = duckdb.connect()
        con.execute(f"CREATE TABLE wide ({duck_types})")
        con.executemany("INSERT INTO wide VALUES (?, ?, ?, ?, ?, ?)", rows)
        spark.createDataFrame(rows, schema=spark_types).createOrReplaceTempView("wide")
        want = measure_marginals(con, "wide", schema, attrs, subsets)
        assert_same(measure_marginals(spark, "wide", schema, attrs, subsets), want)
        totals.append([int(w.sum()) for w in want[1:7]])
        # the binned column measured by endpoint masses (a batch that sums it): the same shares
        for got, duck in zip(measure_marginals(spark, "wide", schema, split, subsets),
                             measure_marginals(con, "wide", schema, split, subsets)):
            np.testing.assert_allclose(got, duck, rtol=1e-12, atol=1e-9)
    assert all(t > 0 for t in totals[0])          # the natural types put rows in every column's domain
    assert totals[-1] == [0] * 6                  # wrong types (m: NULL or "x", in no domain): nothing


def test_marginals_of_days(spark):
    """A date column read from a DATE, a TIMESTAMP_NTZ (its day) and ISO text: the same counts on both,
    NULLs, days outside the domain and text that is no date included."""
    import datetime

    schema = load_schema({"table": "days", "columns": {
        c: {"type": "date", "min": "2020-02-20", "max": "2020-03-10", "nullable": True} for c in ("d", "t", "s")}})
    rng = np.random.default_rng(9)
    start = datetime.datetime(2020, 2, 15, 12, 30)
    rows = []
    for _ in range(400):
        moment = start + datetime.timedelta(hours=int(rng.integers(0, 24 * 30)))
        text = rng.choice([moment.date().isoformat(), "junk", "2020-02-30", None])
        rows.append((moment.date() if rng.random() > 0.1 else None, moment if rng.random() > 0.1 else None, text))
    con = duckdb.connect()
    con.execute("CREATE TABLE days (d DATE, t TIMESTAMP, s VARCHAR)")
    con.executemany("INSERT INTO days VALUES (?, ?, ?)", rows)
    spark.createDataFrame(rows, schema="d date, t timestamp_ntz, s string").createOrReplaceTempView("days")
    attrs = [Attribute(c.name, (c.name,), (c.size,)) for c in schema.columns]
    subsets = [(0,), (1,), (2,), (0, 1)]
    want = measure_marginals(con, "days", schema, attrs, subsets)
    assert_same(measure_marginals(spark, "days", schema, attrs, subsets), want)
    assert 0 < want[0][:-1].sum() < 400 and want[1][-1] > 0  # in and out of the domain, and NULLs


# -- (b) the privacy unit bound ----------------------------------------------------------------

def test_privacy_unit_bound(spark):
    schema = load_schema({"table": "visits", "privacy_unit": {"column": "person", "max_rows": 3},
                          "columns": {"day": {"type": "integer", "min": 0, "max": 49},
                                      "kind": {"type": "categorical", "values": ["a", "b"]}}})
    rows = [("big", d, "a") for d in range(50)]
    rows += [(f"p{i}", i % 50, "b") for i in range(20)]
    rows += [("pair", 7, "b"), ("pair", 8, "b")]
    rows += [(None, 40 + i, "b") for i in range(5)]
    spark.createDataFrame(rows, schema="person string, day int, kind string").createOrReplaceTempView("visits")
    attrs = [Attribute("day", ("day",), (50,)), Attribute("kind", ("kind",), (2,))]
    picks = set()
    for _ in range(4):
        total, kind, day_kind = measure_marginals(spark, "visits", schema, attrs, [(), (1,), (0, 1)])
        assert total.tolist() == [30] and kind.tolist() == [3, 27]   # the 50-row unit keeps exactly 3
        table = day_kind.reshape(50, 2)
        assert table[:, 1].tolist() == np.bincount([i % 50 for i in range(20)] + [7, 8] + list(range(40, 45)),
                                                   minlength=50).tolist()
        assert set(table[:, 0]) <= {0.0, 1.0}
        picks.add(tuple(np.flatnonzero(table[:, 0])))
    assert len(picks) > 1                                              # drawn at random
    # the random key and the row number get names no column has
    clash = load_schema({"table": "t", "privacy_unit": {"column": "_dpsql_random", "max_rows": 1},
                         "columns": {"_dpsql_rank": {"type": "boolean"}}})
    spark.createDataFrame([(1, True), (1, True), (2, False), (None, True), (None, True)],
                          schema="_dpsql_random int, _dpsql_rank boolean").createOrReplaceTempView("t")
    (hist,) = measure_marginals(spark, "t", clash, [Attribute("b", ("_dpsql_rank",), (2,))], [(0,)])
    assert hist.tolist() == [1.0, 3.0]


# -- (c) end to end ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def people(spark):
    con = make_table(400, seed=3)
    to_spark(spark, con, "people", "sex string, age int, hours double, white boolean, black boolean, "
                                   "region string, score int")
    return con


def _exact(con, oracle_sql, plan):
    names = list(plan.outputs)
    return {tuple(_py(r[names.index(k.name)]) for k in plan.keys): r for r in con.sql(oracle_sql).fetchall()}, names


def test_end_to_end_equals_duckdb(spark, people, tmp_path):
    gens = StatementGenerator(11).batch(6)
    texts = [g.sql for g in gens]
    budget = Budget(epsilon=1e12)
    on_spark = dpsql.connect(spark, table="people", schema=PEOPLE, budget=budget, cache=tmp_path)
    on_duck = dpsql.connect(people, schema=PEOPLE, budget=budget, cache=tmp_path)
    assert isinstance(on_spark._engine._private._con, SparkBackend)  # the kernel reads through Spark
    compiled = compile_batch(texts, PEOPLE)
    # a huge epsilon: both give DuckDB's exact answers
    for db in (on_spark, on_duck):
        results = db.batch(texts, epsilon=1e9, noise="laplace")
        for st, res, g in zip(compiled.statements, results, gens):
            if st.sets:  # a margin's NULL key meets a NULL group's: compared with DuckDB by test_compile_exact
                continue
            exact, names = _exact(people, g.oracle, st.plan)
            for i, key in enumerate(st.groups):
                want_row = exact.get(tuple(_py(v) for v in key))
                for agg in st.plan.aggregates:
                    want = None if want_row is None else want_row[names.index(agg.name)]
                    assert_released_near_exact(agg.func, res.df[agg.name].iloc[i], want, (g.sql, key),
                                               released_interval(st, res.df, agg.name, i))
    # the same seeded noise source: identical noisy answers
    seeded = [dpsql.connect(src, table="people", schema=PEOPLE, budget=budget, cache=tmp_path,
                            source_of_noise=np.random.default_rng(42)) for src in (spark, people)]
    a, b = (db.batch(texts, epsilon=0.5, noise="laplace") for db in seeded)
    for x, y in zip(a, b):
        pd.testing.assert_frame_equal(x.df, y.df)
    assert not a[0].df.equals(on_duck.batch(texts, epsilon=0.5, noise="laplace")[0].df)  # it was noisy
    # results of a Spark table live on the analyst's DuckDB, like any others
    rel = a[0].relation
    assert isinstance(rel, duckdb.DuckDBPyRelation) and len(rel.fetchall()) == len(a[0].df)
    assert seeded[0].spent().epsilon == 0.5
    for db in (on_spark, on_duck, *seeded):
        db.close()


# -- (d) errors ------------------------------------------------------------------------------------

def test_errors_spend_nothing_and_echo_no_data(spark, tmp_path):
    with pytest.raises(dpsql.SchemaError, match="the source has no table or view 'nowhere'"):  # from the catalog
        dpsql.connect(spark, table="nowhere", schema=PEOPLE, budget=Budget(epsilon=1.0), ledger=tmp_path / "ledger",
                      cache=tmp_path)
    assert not (tmp_path / "ledger").exists()
    spark.createDataFrame([("F",)], schema="sex string").createOrReplaceTempView("narrow")
    with pytest.raises(MeasurementError, match="age"):
        measure_marginals(spark, "narrow", load_schema(PEOPLE), [], [()])
    # a failure while rows are read reports the exception class, not the message quoting a value
    spark.sql("CREATE OR REPLACE TEMP VIEW failing AS SELECT IF(v = 'Alice Smith', "
              "raise_error(concat('bad row ', v)), true) AS a FROM VALUES ('Alice Smith'), ('Bob') t(v)")
    with pytest.raises(MeasurementError) as info:
        measure_marginals(spark, "failing", load_schema({"table": "failing", "columns": {"a": {"type": "boolean"}}}),
                          [Attribute("a", ("a",), (2,))], [(0,)])
    assert "Alice" not in str(info.value) and "failed (" in str(info.value), str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


@pytest.mark.parametrize("method,spend,options", [
    ("mwem", {"epsilon": 1.0}, {"rounds": 3}),
    ("fem", {"epsilon": 1.0, "delta": 1e-6}, {"rounds": 5, "samples": 5}),
    ("dualquery", {"epsilon": 1.0, "delta": 1e-6}, {"rounds": 3, "samples": 5, "oracle": "heuristic"}),
])
def test_synthesize_on_spark_equals_duckdb(spark, people, tmp_path, method, spend, options):
    """Synthesis reads the private table only through the kernel, so on Spark it reads through
    the Spark backend: with the same seeded noise the synthetic tables are identical."""
    tables = []
    for src in (spark, people):
        db = dpsql.connect(src, table="people", schema=PEOPLE, budget=Budget(epsilon=10.0, delta=1e-5),
                           cache=tmp_path, progress=False, source_of_noise=np.random.default_rng(7))
        syn = db.synthesize(method, workload=[("sex", "region"), ("age",)], seed=5, name=f"s_{method}",
                            **spend, **options)
        assert len(syn.relation.fetchall()) == len(syn.df) > 0           # queryable in DuckDB
        assert db.spent().epsilon == pytest.approx(syn.epsilon) and 0 < syn.epsilon
        assert Cost(epsilon=syn.epsilon).within(Cost(epsilon=1.0))  # up to float rounding: 0.1 + 0.9 of it
        tables.append(syn.df)
        db.close()
    pd.testing.assert_frame_equal(tables[0], tables[1])
