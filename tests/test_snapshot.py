"""The owner's snapshot (dpsql.private.measure.take_snapshot): the private table validated and
indexed once, measured by a plain GROUP BY, with exactly the counts of the direct path."""

from __future__ import annotations

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
from dpsql.engine.dataset import Dataset
from dpsql.hdmm.matrix import Identity
from dpsql.hdmm.strategy import KronStrategy
from dpsql.privacy import Laplace
from dpsql.private.budget import Cost
from dpsql.private.measure import prepare_counting, take_snapshot
from dpsql.schema import Attribute, load_schema

SCHEMA = {"table": "t", "columns": {
    "sex": {"type": "categorical", "values": ["F", "M", "f"]},
    "age": {"type": "integer", "min": 0, "max": 9},
    "ok": {"type": "boolean", "nullable": True},
    "score": {"type": "categorical", "values": [1, 2.5, 3]},
    "grade": {"type": "integer", "min": 1, "max": 3, "nullable": True}}}

ATTRIBUTES = [Attribute("sex", ("sex",), (3,)), Attribute("age", ("age",), (10,)), Attribute("ok", ("ok",), (3,)),
              Attribute("score+grade", ("score", "grade"), (3, 4))]
SUBSETS = [(), (0,), (1,), (0, 1), (2, 3), (0, 1, 2, 3)]


def hostile(con: duckdb.DuckDBPyConnection, rows: int = 3000, seed: int = 0) -> None:
    """A table whose every column holds values outside its domain, NULLs, case and padding variants
    of the categories, a number's non-integral and NaN values, and a column of the wrong type."""
    rng = np.random.default_rng(seed)
    sexes = np.array(["F", "M", "f", "m", "F ", "ß", ""], dtype=object)
    sex = sexes[rng.integers(0, len(sexes), rows)]
    sex[rng.random(rows) < 0.05] = None
    age = rng.integers(-2, 12, rows).astype(float)
    age[rng.random(rows) < 0.05] = 4.5
    age[rng.random(rows) < 0.03] = np.nan
    ok = np.where(rng.random(rows) < 0.2, None, rng.random(rows) < 0.5).astype(object)
    score = np.array([1, 2.5, 3, 2, 1.0000001])[rng.integers(0, 5, rows)]
    grade = rng.integers(0, 5, rows).astype(object)
    grade[rng.random(rows) < 0.1] = None
    con.register("frame", pd.DataFrame({"sex": pd.Series(sex, dtype="string"), "age": age,
                                        "ok": pd.Series(ok, dtype="boolean"), "score": score,
                                        "grade": pd.Series(grade, dtype="Int32"), "extra": "x"}))
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    con.execute("UPDATE t SET age = 'nan'::DOUBLE WHERE rowid % 97 = 0")  # NaN: outside the domain, not NULL


def test_snapshot_counts_equal_the_direct_path():
    con = duckdb.connect()
    con.execute("SET default_collation = 'nocase'")  # 'f' = 'F' under it: the domain is byte-exact
    hostile(con)
    schema = load_schema(SCHEMA)
    snapshot = take_snapshot(con, "t", schema)
    assert snapshot is not None
    grouped = [ATTRIBUTES[0], ATTRIBUTES[1].grouped([0, 0, 0, 1, 1, 2, 2, 2, 2, 3]), *ATTRIBUTES[2:]]
    for attributes in (ATTRIBUTES, grouped):
        direct = prepare_counting(con, "t", schema, attributes, SUBSETS).run()
        indexed = prepare_counting(con, "t", schema, attributes, SUBSETS, snapshot).run()
        for d, i in zip(direct, indexed):
            np.testing.assert_array_equal(d, i)
    # a sanity floor: rows outside the domain were dropped, and some were kept
    assert 0 < direct[0][0] < 3000


def test_snapshot_is_a_plain_group_by_of_small_integers():
    con = duckdb.connect()
    hostile(con, rows=50)
    schema = load_schema(SCHEMA)
    snapshot = take_snapshot(con, "t", schema)
    rel = con.sql(f"SELECT * FROM {snapshot.table.sql('duckdb')}")
    assert rel.columns == list(SCHEMA["columns"]) and {str(t) for t in rel.types} == {"TINYINT"}
    # every row in the domain: the smallest index of every column is >= 0
    lows = con.execute(f"SELECT min(least(sex, age, ok, score, grade)) FROM {snapshot.table.sql('duckdb')}").fetchone()
    assert lows[0] >= 0


def test_no_snapshot_under_a_privacy_unit():
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT range % 3 AS a, range AS u FROM range(10)")
    schema = load_schema({"table": "t", "privacy_unit": {"column": "u", "max_rows": 1},
                          "columns": {"a": {"type": "integer", "min": 0, "max": 2}}})
    assert take_snapshot(con, "t", schema) is None


def test_a_file_source_is_measured_from_its_snapshot(tmp_path):
    path = tmp_path / "t.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE t AS SELECT range % 3 AS a FROM range(30)")
    con.close()
    schema = {"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 2}}}
    ds = Dataset.open(str(path), schema=schema, budget=dpsql.Budget(epsilon=1e9), cache=False, progress=False)
    assert ds._snapshot is not None  # on by default for a file
    private = ds.engine()._private
    m = private.measure([Attribute("a", ("a",), (3,))], KronStrategy([Identity(3)]), Laplace(1e6), Cost(epsilon=1e6))
    np.testing.assert_allclose(m.values, [10, 10, 10], atol=1e-3)


def test_counts_come_from_the_snapshot_taken_at_open():
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT range % 3 AS a FROM range(30)")
    schema = {"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 2}}}
    db = dpsql.connect(con, schema=schema, budget=dpsql.Budget(epsilon=1e9), cache=False, progress=False)
    assert db._engine._private._snapshot is None  # a connection the owner keeps changing: off by default
    ds = Dataset.open(con, schema=schema, budget=dpsql.Budget(epsilon=1e9), cache=False, progress=False,
                      snapshot=True)
    con.execute("DELETE FROM t WHERE a = 0")  # after the snapshot: not seen
    private = ds.engine()._private
    m = private.measure([Attribute("a", ("a",), (3,))], KronStrategy([Identity(3)]), Laplace(1e6),
                        Cost(epsilon=1e6))
    np.testing.assert_allclose(m.values, [10, 10, 10], atol=1e-3)


def test_analysts_cannot_read_the_snapshot(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("a\n" + "\n".join(str(i % 3) for i in range(30)) + "\n")
    schema = {"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 2}}}
    db = dpsql.connect(str(path), schema=schema, budget=dpsql.Budget(epsilon=1.0), cache=False, progress=False)
    name = db._engine._private._snapshot.table.name
    for sql in (f'SELECT COUNT(*) FROM "{name}"', f"SELECT COUNT(*) FROM temp.main.{name}"):
        with pytest.raises(dpsql.Error):
            db.query(sql, epsilon=0.5)
    assert db.ledger.entries() == []  # refused: nothing spent


@pytest.mark.parametrize("runs", [50, 5000])  # a search of CASEs, and a lookup in a string of labels
def test_grouped_attribute_of_two_columns_over_small_integers(runs):
    """The group of (a, b) is keyed by a * 100 + b: over TINYINT index columns that product must
    not overflow (DuckDB would fail the read, after the spend)."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT (hash(i) % 103)::INT AS a, (hash(i * 7) % 100)::INT AS b FROM range(5000) r(i)")
    schema = load_schema({"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 99},
                                                    "b": {"type": "integer", "min": 0, "max": 99}}})
    labels = np.arange(10_000) * runs // 10_000
    attributes = [Attribute("a+b", ("a", "b"), (100, 100)).grouped(labels.tolist())]
    snapshot = take_snapshot(con, "t", schema)
    direct = prepare_counting(con, "t", schema, attributes, [(0,)]).run()
    indexed = prepare_counting(con, "t", schema, attributes, [(0,)], snapshot).run()
    np.testing.assert_array_equal(direct[0], indexed[0])
    assert direct[0].sum() > 0


def test_noise_is_drawn_for_every_answer_in_chunks(monkeypatch):
    """A measurement larger than a chunk: every answer gets its own noise, of the planned spread."""
    from dpsql.private import kernel
    from dpsql.private.noise import gaussian_lattice, laplace_lattice

    monkeypatch.setattr(kernel, "NOISE_CHUNK", 1000)
    exact = np.arange(4500, dtype=float).reshape(1500, 3)
    rng = np.random.default_rng(3)
    for plan in (laplace_lattice(1.0, 0.5, 1), gaussian_lattice(2.0)):
        noisy = kernel.release_in_chunks(plan, exact, rng)
        assert noisy.shape == exact.shape
        noise = (noisy - exact).reshape(-1)
        assert np.count_nonzero(noise == 0) < 450  # no chunk left unperturbed
        for part in np.array_split(noise, 5):  # each chunk, and the ends of the last, at the planned spread
            assert 0.8 < part.std() / plan.std < 1.2
