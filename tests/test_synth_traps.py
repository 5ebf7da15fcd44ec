"""A new user's first hour with synthetic tables: table shapes the benchmarks never used (a column
of NULLs only, an empty synthetic table, a one-valued column, names in a workload string), each
expected to work or to be refused with a clear message before anything is spent."""

import warnings

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
from dpsql import Budget
from dpsql.errors import WorkloadError
from dpsql.owner.draft import draft_schema


@pytest.fixture()
def shapes():
    """A connection to 300 rows of an integer, a text, a boolean and a binned column."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.integers(-2, 1, 300), "s": rng.choice(["x", "y"], 300),
                          "b": rng.integers(0, 2, 300).astype(bool), "f": rng.uniform(0, 10, 300)})
    con = duckdb.connect()
    con.register("frame", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    schema = {"table": "t", "columns": {"a": {"type": "integer", "min": -2, "max": 0},
                                        "s": {"type": "categorical", "values": ["x", "y"]},
                                        "b": {"type": "boolean"}, "f": {"type": "numeric", "bins": [0, 5, 10]}}}
    return dpsql.connect(con, schema=schema, budget=Budget(rho=10.0), cache=False, progress=False)


def test_a_drafted_schema_leaves_out_an_integer_column_of_nulls_only():
    """``dpsql schema draft`` on a table with an unused INTEGER column stopped on an unexpected
    MaskError: DuckDB's numpy result masks a NULL integer, and the draft read its MIN with ``int()``."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT NULL::INTEGER AS unused, NULL::UTINYINT AS spare, NULL::BOOLEAN AS flag, "
                "range AS age FROM range(5)")
    assert draft_schema(con, "t").split("\n\n", 1)[1].splitlines()[3:] == [
        "  # unused: only NULLs; left out", "  # spare: only NULLs; left out", "  # flag: only NULLs; left out",
        "  age: {type: integer, min: 0, max: 4}"]


def test_a_drafted_schema_reads_whole_floats_as_integers_and_ranges_over_finite_values():
    """A pandas integer column beside a NaN is a DOUBLE one: drafted as ten bins of width 0.2 over
    0..2, its synthetic values came out 0.1 and 1.9. A DOUBLE column holding a NaN or an infinity
    (whose MAX they are) was drafted as "only NULLs; left out"."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT CASE WHEN range % 10 = 0 THEN NULL ELSE range % 3 END::DOUBLE AS kids, "
                "CASE WHEN range % 7 = 0 THEN 'nan'::DOUBLE WHEN range = 1 THEN 'inf'::DOUBLE "
                "ELSE range / 10 END AS hours FROM range(50)")
    assert draft_schema(con, "t").split("\n\n", 1)[1].splitlines()[3:] == [
        "  kids: {type: integer, min: 0, max: 2, nullable: true}",
        "  hours: {type: numeric, bins: [0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5]}"]


def test_a_drafted_schema_keeps_codes_with_leading_zeros_as_text(tmp_path):
    """A CSV column of ZIP codes was drafted as integers (02134 read as 2134): the synthetic table
    then held numbers, 2134 and codes that are none (a value between two codes)."""
    path = tmp_path / "people.csv"
    path.write_text("zip,code,age\n" + "".join(f"{z},{c},{a}\n" for z, c, a in
                                               [("02134", "007", 30), ("10001", "12", 41), ("02134", "7", 52)]))
    assert draft_schema(path).split("\n\n", 1)[1].splitlines()[3:] == [
        "  zip: {type: categorical, values: ['02134', '10001']}",
        "  code: {type: categorical, values: ['007', '12', '7']}",
        "  age: {type: integer, min: 30, max: 52}"]


def test_a_drafted_schema_marks_a_column_of_row_identifiers():
    """A passenger list's PassengerId (1..1,309, one a row) was drafted as ten numeric bins, with
    nothing to say that a row's identifier is of no use to a query or a synthetic table. An integer
    column whose every value differs, over at least MIN_IDENTIFIER_ROWS rows, is commented; one
    that repeats a value, or a short table's, is not."""
    from dpsql.owner.draft import MIN_IDENTIFIER_ROWS
    con = duckdb.connect()
    rows = MIN_IDENTIFIER_ROWS
    con.execute(f"CREATE TABLE t AS SELECT range + 1 AS id, range % 7 AS day, range + (range = 5)::INT AS near "
                f"FROM range({rows})")
    assert draft_schema(con, "t").split("\n\n", 1)[1].splitlines()[3:] == [
        f"  id: {{type: integer, min: 1, max: {rows}}}  # every value distinct: an identifier? leave it out",
        "  day: {type: integer, min: 0, max: 6}", f"  near: {{type: integer, min: 0, max: {rows - 1}}}"]
    con.execute(f"DELETE FROM t WHERE id = {rows}")
    assert "identifier" not in draft_schema(con, "t")


def test_an_empty_synthetic_table_has_its_columns_types(shapes):
    """With ``rows=0`` (or a noisy row count of 0 on an empty table) every column of ``syn.df`` was
    ``object``: an empty series infers no type."""
    empty = shapes.synthesize("mwem", workload=2, rho=0.1, rows=0, seed=0, name="empty", rounds=1)
    some = shapes.synthesize("mwem", workload=2, rho=0.1, rows=5, seed=0, name="some", rounds=1)
    assert empty.df.empty and dict(empty.df.dtypes) == dict(some.df.dtypes)
    assert [str(t) for t in empty.df.dtypes[["a", "b", "f"]]] == ["int64", "bool", "float64"]


def test_a_column_measured_only_beside_a_one_valued_column_is_reported_as_fitted_alone():
    """Under a pure epsilon, OPT_M's weights measured ``c`` in the marginal ``c x k`` of a column
    ``k`` of one value: ``c``'s relation to the others was never measured, but the report's
    ``one_way_only`` left it out (and ``print(syn)`` did not warn), as if it were. ``k`` itself,
    of one value, has no relation to learn and is not listed."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.integers(0, 3, 200), "b": rng.integers(0, 3, 200), "c": rng.integers(0, 3, 200),
                          "k": np.zeros(200, dtype=int)})
    con = duckdb.connect()
    con.register("frame", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    three = {"type": "integer", "min": 0, "max": 2}
    schema = {"table": "t", "columns": {"a": three, "b": three, "c": three, "k": {"type": "integer", "min": 0, "max": 0}}}
    db = dpsql.connect(con, schema=schema, budget=Budget(epsilon=1.0), cache=False, progress=False)
    syn = db.synthesize("pgm", workload=1, epsilon=1.0, seed=0, name="s", iterations=50)
    assert list(syn.report.marginal) == ["a x b x k", "c x k"]
    assert syn.report.attrs["one_way_only"] == ["c"] and "other columns): c\n" in repr(syn)


@pytest.mark.parametrize("workload, marginal", [("a, s", "('a', 's')"), ('"a", "b"', "('a', 'b')"),
                                                ('"s"', "('s',)"), ("a,s;b", "('a', 's'), ('b',)"),
                                                ("a, s;", "('a', 's')")])
def test_column_names_in_a_workload_string_are_refused_with_the_tuple_to_write(shapes, workload, marginal):
    """``workload="a, s"`` (a marginal spelt as the command line's ``--workload a,s`` spells it) was compiled as SQL: "syntax
    error: unexpected 'a'; a statement starts with SELECT". Refused, spending nothing, with the
    tuple that says it."""
    with pytest.raises(WorkloadError) as e:
        shapes.synthesize("pgm", workload=workload, rho=0.1, name="s")
    assert str(e.value) == f"{workload!r} names columns, not a statement: give a marginal as a tuple of " \
                           f"names, workload=[{marginal}]"
    assert shapes.spent().rho == 0


@pytest.mark.parametrize("method, spend, options", [
    ("pgm", {"epsilon": 1e-3, "delta": 1e-9}, {"iterations": 50}),
    ("pgm", {"epsilon": 1e-3}, {"iterations": 50}),
    ("aim", {"rho": 1e-8}, {"rounds": 3, "iterations": 50}),
    ("mwem", {"epsilon": 1e-3}, {"rounds": 2}),
    ("dualquery", {"epsilon": 1e-2}, {"rounds": 2}),
    ("fem", {"epsilon": 1e-2, "delta": 1e-9}, {"rounds": 2}),
])
def test_a_default_row_count_that_is_mostly_noise_is_warned_about(method, spend, options):
    """At a tiny spend a 300-row table's default size was its noisy row count alone: 84,000 rows
    (pgm), 2.2 million (aim). The count and its noise's standard deviation are released, so a
    count less than 3 of them is warned about, naming both; at a sound spend nothing is said.
    DualQuery's count is a Laplace count of ``0.05 ε``: standard deviation ``√2 / (0.05 ε)``."""
    def synthesize(**given):
        budget = Budget(rho=100.0) if "rho" in spend else Budget(epsilon=100.0, delta=1e-5)
        db = dpsql.connect(_table(), schema=_SCHEMA, budget=budget, cache=False, progress=False,
                           source_of_noise=np.random.default_rng(0))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            db.synthesize(method, workload=2, seed=0, name="s", **given, **options)
        return [str(w.message) for w in caught if "mostly noise" in str(w.message)]

    [message] = synthesize(**spend)
    assert message.startswith("the noisy row count is ") and message.endswith(
        "at this spend the table's size is mostly noise (pass rows= to choose it)")
    if method == "dualquery":
        assert f"less than 3 times its noise's standard deviation ({2 ** 0.5 / (0.05 * spend['epsilon']):,.0f})" in message
    assert synthesize(**{k: (v if k == "delta" else 1.0) for k, v in spend.items()}) == []


_SCHEMA = {"table": "t", "columns": {c: {"type": "integer", "min": 0, "max": 2} for c in "abc"}}


def _table() -> duckdb.DuckDBPyConnection:
    """300 rows of three 3-value columns."""
    rng = np.random.default_rng(1)
    con = duckdb.connect()
    con.register("frame", pd.DataFrame({c: rng.integers(0, 3, 300) for c in "abc"}))
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    return con
