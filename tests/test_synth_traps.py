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
