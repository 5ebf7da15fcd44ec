"""Issue 39's first hour with real data: no row is dropped silently.

Each of the finds had dpsql connect, spend and release noise over an empty table: values with a
leading space (UCI's ``, Female``), 0/1 columns declared ``boolean`` read from BIGINT columns (a
DuckDB or pandas table; the same schema worked on the CSV), ``values: [F, M]`` where the data says
Female/Male, and a declared column the table lacks. Each is now refused when the owner connects
(before a ledger is written) or read as the owner meant it, and the owner sees how many rows fall
outside the domains. Oracles: the exact counts of the rows written, and the same seeded release
from every source of the same rows.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql

ROWS = [(20 + i % 50, ["Female", "Male"][i % 3 == 0], i % 4 == 0) for i in range(300)]
SCHEMA = {"table": "people", "columns": {"age": {"type": "integer", "min": 17, "max": 90},
                                         "sex": {"type": "categorical", "values": ["Female", "Male"]},
                                         "smoker": {"type": "boolean"}}}
SQL = "SELECT sex, smoker, COUNT(*) AS n FROM people GROUP BY sex, smoker"
EXACT = {(s, b): sum(1 for r in ROWS if (r[1], r[2]) == (s, b)) for s in ("Female", "Male") for b in (False, True)}


def release(source, schema=SCHEMA, **options):
    """The seeded release of SQL from ``source``, as {(sex, smoker): n}."""
    db = dpsql.connect(source, schema=schema, budget=dpsql.Budget(epsilon=10.0), cache=False,
                       source_of_noise=np.random.default_rng(7), **options)
    df = db.query(SQL, epsilon=1.0, noise="laplace").df
    return {(s, bool(b)): n for s, b, n in zip(df["sex"], df["smoker"], df["n"])}


def write(path: Path, lines, header="age,sex,smoker") -> Path:
    path.write_text("".join(f"{line}\n" for line in ([header] if header else []) + list(lines)))
    return path


def plain_lines(sep=","):
    return [sep.join([str(a), s, str(int(b))]) for a, s, b in ROWS]


@pytest.fixture
def csv_release(tmp_path):
    return release(write(tmp_path / "plain.csv", plain_lines()))


def refused(match, source, schema=SCHEMA, tmp_path=None, **options):
    """Assert connect refuses ``source`` with a SchemaError matching ``match``, writing no ledger."""
    ledger = tmp_path / "refused.ledger" if tmp_path is not None else None
    with pytest.raises(dpsql.SchemaError, match=match):
        dpsql.connect(source, schema=schema, budget=dpsql.Budget(epsilon=1.0), cache=False, ledger=ledger, **options)
    assert ledger is None or not ledger.exists()


# -- values with surrounding spaces: UCI's ", Female" ---------------------------------------------------

def test_values_with_leading_spaces_are_refused_with_the_fix_and_read_with_trim(tmp_path, csv_release):
    """It dropped every row, spent, and released Female -35.06 / Male 47.43. Now connect refuses it
    naming trim=True, and dpsql.CSV(path, trim=True) releases what the plain file releases."""
    spaced = write(tmp_path / "spaced.csv", plain_lines(sep=", "))
    refused(r"(?s)columns\.sex: 300 rows outside the domain .*trim=True.*all 300 rows have a column outside",
            spaced, tmp_path=tmp_path)
    assert release(dpsql.CSV(spaced, trim=True)) == csv_release
    assert set(csv_release) == set(EXACT) and all(abs(csv_release[k] - EXACT[k]) < 40 for k in EXACT)


# -- booleans read from integer columns ------------------------------------------------------------------

def test_booleans_read_from_bigint_columns_release_what_the_csv_releases(tmp_path, csv_release):
    """The same schema worked on the CSV ('0'/'1' cast to BOOLEAN) but dropped every row of a DuckDB
    or pandas table of BIGINT: an integer column holding 0 and 1 is read as False and True."""
    frame = pd.DataFrame(ROWS, columns=["age", "sex", "smoker"]).astype({"smoker": "int64"})
    con = duckdb.connect()
    con.execute("CREATE TABLE people AS SELECT * FROM frame")
    assert con.sql("SELECT typeof(smoker) FROM people LIMIT 1").fetchall() == [("BIGINT",)]
    assert release(con) == csv_release
    assert release(frame) == csv_release


def test_integers_other_than_0_and_1_are_outside_a_boolean_domain():
    frame = pd.DataFrame({"age": [30] * 6, "sex": ["Male"] * 6, "smoker": [0, 1, 2, -1, 1, 0]})
    with pytest.warns(UserWarning, match=r"(?s)2 of 6 rows .*columns\.smoker: 2 rows outside the domain \(2 outside\)"):
        db = dpsql.connect(frame, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), cache=False)
    assert (db.validation.rows, db.validation.clean_rows) == (6, 4)


# -- categories the schema does not list ------------------------------------------------------------------

def test_declared_values_that_match_no_row_are_refused_for_a_file(tmp_path):
    """``values: [F, M]`` where the data says Female/Male connected and released noise over nothing."""
    schema = {**SCHEMA, "columns": {**SCHEMA["columns"], "sex": {"type": "categorical", "values": ["F", "M"]}}}
    refused(r"columns\.sex: 300 rows outside the domain \(300 outside\)", write(tmp_path / "p.csv", plain_lines()),
            schema, tmp_path)


def test_a_connection_is_checked_with_validate_true_only(tmp_path):
    """A database may be large: its rows are counted when the owner asks (validate=True); its
    catalog is checked always."""
    schema = {**SCHEMA, "columns": {**SCHEMA["columns"], "sex": {"type": "categorical", "values": ["F", "M"]}}}
    con = duckdb.connect()
    con.execute("CREATE TABLE people AS SELECT * FROM (VALUES (30, 'Female', true), (40, 'M', false)) v(age, sex, smoker)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dpsql.connect(con, schema=schema, budget=dpsql.Budget(epsilon=1.0), cache=False).validation is None
    with pytest.warns(UserWarning, match=r"table people: 1 of 2 rows have a column outside its declared domain"):
        db = dpsql.connect(con, schema=schema, budget=dpsql.Budget(epsilon=1.0), cache=False, validate=True)
    sex = next(c for c in db.validation.columns if c.name == "sex")
    assert (sex.counts, sex.examples) == ({"outside": 1}, ["Female"])
    assert db.ledger.entries() == []
    con.execute("UPDATE people SET sex = 'Male'")
    refused("all 2 rows have a column outside", con, schema, tmp_path, validate=True)


# -- columns the table lacks, or cannot hold the domain ----------------------------------------------------

def test_a_declared_column_the_table_lacks_is_refused_with_the_nearest_name(tmp_path):
    """It connected fine and failed at the first query."""
    con = duckdb.connect()
    con.execute("CREATE TABLE people (age INTEGER, sex VARCHAR, smoker BOOLEAN, hours_per_week INTEGER)")
    schema = {**SCHEMA, "columns": {**SCHEMA["columns"], "hours": {"type": "integer", "min": 0, "max": 99}}}
    refused(r"1 schema problem:\n  columns\.hours: the table has no such column \(did you mean 'hours_per_week'\?\); "
            r"its columns are age, sex, smoker, hours_per_week$", con, schema, tmp_path)
    refused(r"privacy_unit\.column: the table has no such column", con,
            {**SCHEMA, "privacy_unit": {"column": "person_id"}}, tmp_path)
    refused(r"table: the source has no table or view 'persons'$", con, {**SCHEMA, "table": "persons"}, tmp_path)


def test_a_table_of_another_database_schema_is_refused_with_the_view_to_make(tmp_path):
    """``table: s.people`` said only that the source had no such table, though it has."""
    con = duckdb.connect()
    con.execute("CREATE SCHEMA s; CREATE TABLE s.people (age INTEGER, sex VARCHAR, smoker BOOLEAN)")
    refused(r"table: the source has no table or view 's\.people'; a table is named alone, as in its default "
            r"schema: create a view of it there \(CREATE VIEW people AS SELECT \* FROM s\.people\) and declare "
            r"that$", con, {**SCHEMA, "table": "s.people"}, tmp_path)
    con.execute("CREATE VIEW people AS SELECT * FROM s.people")
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), cache=False, progress=False)
    assert db.query("SELECT COUNT(*) AS n FROM people", epsilon=0.5).df.columns[0] == "n"  # the view is read


def test_a_column_whose_type_holds_none_of_its_domain_is_refused(tmp_path):
    con = duckdb.connect()
    con.execute("CREATE TABLE people (age VARCHAR, sex BIGINT, smoker DOUBLE)")
    refused(r"3 schema problems:\n"
            r"  columns\.age: is a text column in the table.*TRY_CAST\(col AS DOUBLE\).*\n"
            r"  columns\.sex: is an integer column in the table, which holds no value of its declared categorical "
            r"domain \[Female, Male\].*values: \[1, 2\].*\n"
            r"  columns\.smoker: is a floating-point column", con, SCHEMA, tmp_path)


# -- data frames ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["pandas", "polars", "arrow"])
def test_data_frames_are_sources(kind, csv_release):
    """connect refused a pandas DataFrame (and Polars and Arrow tables); each is copied into a table."""
    frame = pd.DataFrame(ROWS, columns=["age", "sex", "smoker"])
    if kind == "polars":
        pl = pytest.importorskip("polars")
        frame = pl.from_pandas(frame)
    elif kind == "arrow":
        pa = pytest.importorskip("pyarrow")
        frame = pa.Table.from_pandas(frame)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no registered-object warning: it is a copy
        assert release(frame) == csv_release


def test_a_frame_duckdb_cannot_copy_is_a_dpsql_error():
    """A pandas column of Python objects mixing booleans and integers fails DuckDB's conversion: a
    dpsql.ArgumentError saying what to do, not DuckDB's TypeMismatchException (whose message quotes values)."""
    frame = pd.DataFrame({"age": [30] * 3, "sex": "Male", "smoker": pd.Series([True, False, 5], dtype=object)})
    with pytest.raises(dpsql.ArgumentError, match=r"cannot copy the pandas table into DuckDB \(TypeMismatchException\); "
                                                  "convert its columns"):
        dpsql.connect(frame, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), cache=False)


# -- headerless files --------------------------------------------------------------------------------------

def test_a_file_without_a_header_is_read_with_the_names_given(tmp_path, csv_release):
    path = write(tmp_path / "people.data", plain_lines(), header=None)
    with pytest.raises(dpsql.ArgumentError, match=r"cannot tell the format .*dpsql\.CSV\(path\)"):
        dpsql.connect(path, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), cache=False)
    with pytest.raises(dpsql.ArgumentError, match=r"first line is a row, not a header.*names=\["):
        dpsql.connect(dpsql.CSV(path), schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), cache=False)
    assert release(dpsql.CSV(path, names=["age", "sex", "smoker"])) == csv_release
    with pytest.raises(dpsql.ArgumentError, match="'AGE' is given twice"):
        dpsql.connect(dpsql.CSV(path, names=["age", "AGE", "smoker"]), schema=SCHEMA, cache=False)


# -- the raw UCI file ----------------------------------------------------------------------------------

ADULT_NAMES = ["age", "workclass", "fnlwgt", "education", "education_num", "marital_status", "occupation",
               "relationship", "race", "sex", "capital_gain", "capital_loss", "hours_per_week", "native_country",
               "income"]


def _adult_data() -> Path:
    root = Path(__file__).resolve().parents[1]
    for base in (root.parent, root.parent.parent):
        path = base / "shared" / "data" / "adult" / "adult.data"
        if path.exists():
            return path
    pytest.skip("UCI's adult.data is not in ../shared/data/adult")


def test_the_raw_uci_adult_file_is_refused_or_reported_before_any_spend(tmp_path):
    """The three mismatches on the real file: no header, values with a leading space, and values the
    schema spells otherwise. Each is refused when connecting, naming the fix; read as it should be,
    the counts are the file's, exactly."""
    path = _adult_data()
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    schema = {"table": "adult", "columns": {"age": {"type": "integer", "min": 17, "max": 90},
                                            "sex": {"type": "categorical", "values": ["Female", "Male"]},
                                            "income": {"type": "categorical", "values": ["<=50K", ">50K"]}}}
    with pytest.raises(dpsql.ArgumentError, match=r"first line is a row, not a header"):
        dpsql.connect(dpsql.CSV(path), schema=schema, budget=dpsql.Budget(epsilon=1.0), cache=False)
    refused(rf"columns\.sex: {len(lines):,} rows outside the domain .*trim=True", dpsql.CSV(path, names=ADULT_NAMES),
            schema, tmp_path)
    short = {**schema, "columns": {**schema["columns"], "sex": {"type": "categorical", "values": ["F", "M"]}}}
    refused(rf"columns\.sex: {len(lines):,} rows outside the domain \({len(lines):,} outside\)",
            dpsql.CSV(path, names=ADULT_NAMES, trim=True), short, tmp_path)
    db = dpsql.connect(dpsql.CSV(path, names=ADULT_NAMES, trim=True), schema=schema,
                       budget=dpsql.Budget(epsilon=1e12), cache=False, ledger=tmp_path / "ok.ledger")
    assert (db.validation.rows, db.validation.clean_rows) == (len(lines), len(lines))
    df = db.query("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex", epsilon=1e9).df
    exact = {s: sum(1 for line in lines if line.split(",")[9].strip() == s) for s in ("Female", "Male")}
    assert dict(zip(df["sex"], np.round(df["n"]).astype(int))) == exact


# -- dpsql schema draft ----------------------------------------------------------------------------------

def test_a_drafted_schema_reads_every_row_of_its_csv(tmp_path):
    """A CSV file read as text: whole numbers become an integer column, other numbers numeric bins,
    true/false a boolean, few texts a categorical (an empty field makes it nullable), many texts a
    comment. Connecting with the draft drops no row; its header says the domains need review."""
    from dpsql.owner.draft import MAX_VALUES, draft_schema

    lines = [f"{20 + i % 50},{['Female', 'Male', ''][i % 3]},{['true', 'false'][i % 2]},{i / 7:.3f},id{i}"
             for i in range(300)]
    path = write(tmp_path / "people.csv", lines, header="age,sex,smoker,hours,name")
    text = draft_schema(path)
    assert "REVIEW EVERY DOMAIN BEFORE USE" in text and "public knowledge" in text
    schema = dpsql.load_schema(text)
    assert schema.table == "people" and schema.names == ("age", "sex", "smoker", "hours")
    age, sex, smoker, hours = schema.columns
    assert (age.kind, age.min, age.max, age.nullable) == ("integer", 20, 69, False)
    assert (sex.kind, sex.values, sex.nullable) == ("categorical", ("Female", "Male"), True)
    assert (smoker.kind, hours.kind, hours.edges[0], hours.edges[-1] >= 299 / 7) == ("boolean", "numeric", 0, True)
    assert "# name: 300 distinct values, too many to list" in text and 300 > MAX_VALUES
    db = dpsql.connect(path, schema=text, budget=dpsql.Budget(epsilon=1.0), cache=False)
    assert (db.validation.rows, db.validation.clean_rows) == (300, 300)


def test_schema_draft_on_the_command_line(tmp_path, capsys):
    from dpsql.api.cli import main

    con = duckdb.connect(str(tmp_path / "people.duckdb"))
    con.execute("CREATE TABLE people AS SELECT * FROM (VALUES (30, 'F', 1.5), (41, 'M', NULL)) v(age, sex, hours)")
    con.close()
    out = tmp_path / "people.yaml"
    assert main(["schema", "draft", str(tmp_path / "people.duckdb"), "--out", str(out)]) == 0
    assert "review every domain" in capsys.readouterr().err
    assert out.read_text().splitlines()[-3:] == ["  age: {type: integer, min: 30, max: 41}",
                                                 "  sex: {type: categorical, values: [F, M]}",
                                                 "  hours: {type: numeric, bins: [1, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, "
                                                 "1.7, 1.8, 1.9, 2], nullable: true}"]
    assert main(["schema", "draft", str(tmp_path / "people.duckdb"), "--out", str(out)]) == 2
    assert "exists" in capsys.readouterr().err


def test_the_examples_of_docs_sources_run(capsys):
    text = (Path(__file__).resolve().parents[1] / "docs" / "sources.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 3
    for block in blocks:
        exec(compile(block, "docs/sources.md", "exec"), {})
    out = capsys.readouterr().out
    assert re.search(r"^ +smoker +n +std_error", out, re.M)
    assert re.search(r"^3$", out, re.M)
    assert "table t: 1 of 3 rows have a column outside its declared domain" in out
    assert re.search(r"sex \(VARCHAR\): 1 rows outside the domain: 1 outside\n +e\.g\. X", out)
