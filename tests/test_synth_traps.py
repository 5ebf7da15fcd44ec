"""A new user's first hour with synthetic tables: table shapes the benchmarks never used (a column
of NULLs only, an empty synthetic table, a one-valued column, names in a workload string), each
expected to work or to be refused with a clear message before anything is spent."""

import duckdb

from dpsql.owner.draft import draft_schema


def test_a_drafted_schema_leaves_out_an_integer_column_of_nulls_only():
    """``dpsql schema draft`` on a table with an unused INTEGER column stopped on an unexpected
    MaskError: DuckDB's numpy result masks a NULL integer, and the draft read its MIN with ``int()``."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT NULL::INTEGER AS unused, NULL::UTINYINT AS spare, range AS age "
                "FROM range(5)")
    assert draft_schema(con, "t").split("\n\n", 1)[1].splitlines()[3:] == [
        "  # unused: only NULLs; left out", "  # spare: only NULLs; left out",
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
