"""A categorical of a large domain (tract codes, numeric codes): its values are looked up in the domain
as a relation (dpsql.private.measure._relation_lookup), with exactly the semantics of the small-domain
CASE: strings byte-exact whatever the default collation, ENUM read as text, numbers compared as the
column's integers or as DOUBLE (-0.0 is 0, NaN outside), out-of-domain rows dropped, NULL its own cell
when nullable. Checked against a pure-Python count, direct and from the snapshot."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest
from sqlglot import exp

from dpsql.private.measure import _JOINED_VALUES, index_expression, prepare_counting, snapshot_query, take_snapshot
from dpsql.schema import Attribute, load_schema


def _domain(n: int) -> list[str]:
    """``n`` distinct strings that differ only by case or trailing space in places, with quotes, a
    backslash, the empty string, non-ASCII text and a control character (the lookup's first choice
    of separator, so another must be chosen)."""
    base = [f"{i:011d}" for i in range(n - 10)]
    return base + ["tract A", "TRACT a", "x ", "ß", "O'Brien", "back\\slash", "", "\x01one", "Ünïcode", "z" * 40]


def _table(con: duckdb.DuckDBPyConnection, values: list[str], rows: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    near = [v.upper() for v in values[-10:]] + [v + " " for v in values[-10:]] + ["x", " x", "tract a", "ss",
                                                                                  "99999999999", "0"]
    pool = np.array(values + near, dtype=object)
    geo = pool[rng.integers(0, len(pool), rows)]
    geo[rng.random(rows) < 0.05] = None
    code = np.array(values[:50] + ["nope"], dtype=object)[rng.integers(0, 51, rows)]
    sex = np.array(["F", "M", "f"], dtype=object)[rng.integers(0, 3, rows)]
    frame = pd.DataFrame({"geo": pd.Series(geo, dtype="string"), "code": code, "sex": sex})
    con.register("frame", frame)
    enum = ", ".join("'" + v.replace("'", "''") + "'" for v in values[:50] + ["nope"])
    con.execute(f"CREATE TYPE codes AS ENUM ({enum})")
    con.execute("CREATE TABLE t AS SELECT geo, CAST(code AS codes) AS code, sex FROM frame")
    return frame


def _oracle(frame: pd.DataFrame, values: list[str], code_values: list[str]) -> list[np.ndarray]:
    """Total, by geo (NULL last), by code, by geo x sex: pure Python over the rows in the domain."""
    geo_of = {v: i for i, v in enumerate(values)}
    code_of = {v: i for i, v in enumerate(code_values)}
    total, by_geo = np.zeros(1), np.zeros(len(values) + 1)
    by_code, by_geo_sex = np.zeros(len(code_values)), np.zeros((len(values) + 1) * 2)
    for g, c, s in zip(frame["geo"], frame["code"], frame["sex"]):
        gi = len(values) if g is pd.NA else geo_of.get(g)
        if gi is None or c not in code_of or s not in ("F", "M"):
            continue
        total[0] += 1
        by_geo[gi] += 1
        by_code[code_of[c]] += 1
        by_geo_sex[gi * 2 + ("F", "M").index(s)] += 1
    return [total, by_geo, by_code, by_geo_sex]


@pytest.mark.parametrize("collation", ["nocase", "binary"])
def test_large_string_domain_counts_equal_a_python_count(collation):
    values = _domain(_JOINED_VALUES * 5)
    code_values = values[-5:] + values[:2000]  # a large domain read from an ENUM column
    schema = load_schema({"table": "t", "columns": {
        "geo": {"type": "categorical", "values": values, "nullable": True},
        "code": {"type": "categorical", "values": code_values},
        "sex": {"type": "categorical", "values": ["F", "M"]}}})
    con = duckdb.connect()
    con.execute(f"SET default_collation = '{collation}'")  # 'f' = 'F', 'x ' = 'x' under nocase
    frame = _table(con, values, rows=6000)
    attributes = [Attribute("geo", ("geo",), (len(values) + 1,)), Attribute("code", ("code",), (len(code_values),)),
                  Attribute("sex", ("sex",), (2,))]
    subsets = [(), (0,), (1,), (0, 2)]
    expected = _oracle(frame, values, code_values)
    snapshot = take_snapshot(con, "t", schema)
    for source in (None, snapshot):
        counts = prepare_counting(con, "t", schema, attributes, subsets, source).run()
        for got, want in zip(counts, expected):
            np.testing.assert_array_equal(got, want)
    assert 1000 < expected[0][0] < 6000  # some rows dropped, most kept


def test_large_domain_is_one_literal_not_a_case_per_value():
    values = _domain(20_000)
    schema = load_schema({"table": "t", "columns": {"geo": {"type": "categorical", "values": values}}})
    sql = snapshot_query(schema, "t", {"geo": "string"}).sql("duckdb")
    assert len(sql) < len(" ".join(values)) + 2000  # the values once, in one string: no WHEN per value
    # Spark keeps the search of CASEs (its correlated scalar subqueries must aggregate)
    column = load_schema({"table": "t", "columns": {"geo": {"type": "categorical", "values": values[:2000]}}}).column("geo")
    spark = index_expression(column, exp.column("geo"), "string", outside=-1, dialect="spark")
    assert spark.find(exp.Subquery) is None and spark.find(exp.Case) is not None


def test_lookup_does_not_capture_columns_named_like_its_own():
    values = _domain(_JOINED_VALUES * 2)
    schema = load_schema({"table": "t", "columns": {
        "_dpsql_value": {"type": "categorical", "values": values},
        "_dpsql_index": {"type": "integer", "min": 0, "max": 3}}})
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('00000000007', 1), ('nope', 2), ('x ', 3)) v"
                "(_dpsql_value, _dpsql_index)")
    attributes = [Attribute("v", ("_dpsql_value",), (len(values),))]
    want = np.zeros(len(values))
    want[[7, values.index("x ")]] = 1
    for source in (None, take_snapshot(con, "t", schema)):
        (got,) = prepare_counting(con, "t", schema, attributes, [(0,)], source).run()
        np.testing.assert_array_equal(got, want)


def test_large_numeric_domains_count_equal_a_python_count():
    ints = [-(2 ** 62), *range(0, 4 * _JOINED_VALUES, 2), 2 ** 63 - 1]
    floats = [round(0.1 * i, 1) for i in range(-3, 2 * _JOINED_VALUES)]
    schema = load_schema({"table": "t", "columns": {
        "big": {"type": "categorical", "values": ints}, "ubig": {"type": "categorical", "values": ints},
        "dbl": {"type": "categorical", "values": ints}, "f": {"type": "categorical", "values": floats}}})
    rng = np.random.default_rng(1)
    rows = 5000

    def draw(pool: list) -> np.ndarray:
        return np.array(pool, dtype=object)[rng.integers(0, len(pool), rows)]

    near_ints = [-1, 1, 3, 2 ** 63 - 2, 2 ** 62, 5000]
    big = draw(ints + near_ints + [-(2 ** 63)])
    ubig = draw([i for i in ints if i >= 0] + [n for n in near_ints if n >= 0] + [2 ** 64 - 1])
    dbl = draw([float(i) for i in ints] + [0.5, 2.0000001, -0.0, float("nan"), float("inf")])
    f = draw(floats + [0.1 + 1e-12, -0.0, 0.15, float("nan")])
    frame = pd.DataFrame({"big": big.astype(np.int64), "ubig": ubig.astype(np.uint64), "dbl": dbl.astype(float),
                          "f": f.astype(float)})
    con = duckdb.connect()
    con.execute("SET default_collation = 'nocase'")
    con.register("frame", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    con.execute("UPDATE t SET dbl = NULL WHERE rowid % 53 = 0")  # NULL beside NaN: both outside
    con.execute("UPDATE t SET f = NULL WHERE rowid % 59 = 0")
    int_of = {k: i for i, k in enumerate(ints)}
    dbl_of = {float(k): i for i, k in enumerate(ints) if float(k) == k}
    f_of = {k: i for i, k in enumerate(floats)}
    want = [np.zeros(len(ints)), np.zeros(len(ints)), np.zeros(len(ints)), np.zeros(len(floats))]
    for b, u, d, x in con.execute("SELECT * FROM t").fetchall():
        found = [int_of.get(b), int_of.get(u), None if d is None or d != d else dbl_of.get(d),
                 None if x is None or x != x else f_of.get(x)]
        if None not in found:
            for hist, i in zip(want, found):
                hist[i] += 1
    attributes = [Attribute(c, (c,), (len(ints),)) for c in ("big", "ubig", "dbl")] + [
        Attribute("f", ("f",), (len(floats),))]
    subsets = [(0,), (1,), (2,), (3,)]
    for source in (None, take_snapshot(con, "t", schema)):
        for got, expected in zip(prepare_counting(con, "t", schema, attributes, subsets, source).run(), want):
            np.testing.assert_array_equal(got, expected)
    assert want[0].sum() > 50  # some rows in every domain
