"""A data owner's first hour with messy real-world files: a city's salary table (money columns with
"Not Provided" among the numbers, names with accents), a census extract (codes, weights, text with
spaces around it, as UCI's ``adult.data``), a survey export (a byte-order mark, CRLF line ends,
punctuation in the column names). Each test is one find of running ``schema draft``, ``connect``,
``query`` and ``synthesize`` on such files, with an exact oracle.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import duckdb
import pandas as pd
import pytest
import yaml

import dpsql
from dpsql.owner.draft import draft_schema
from dpsql.owner.validate import validate


def body(text: str) -> list[str]:
    """The lines of a drafted schema after its header and ``table:``, ``privacy_unit:``, ``columns:``."""
    return text.split("\n\n", 1)[1].splitlines()[3:]


def test_a_data_frame_is_drafted():
    """``draft_schema(frame)``, documented, stopped on a TypeError: the header named the source by
    ``os.fspath(frame)``."""
    frame = pd.DataFrame({"age": [30, 41, 52], "sex": ["F", "M", "F"]})
    text = draft_schema(frame, "people")
    assert "drafted by `dpsql schema draft` from a data frame." in text
    assert body(text) == ["  age: {type: integer, min: 30, max: 52}", "  sex: {type: categorical, values: [F, M]}"]


def test_numbers_stored_as_text_in_a_database_stay_text():
    """A VARCHAR column of numbers in a database (or a frame read with ``dtype=str``) was drafted as an
    integer column, which connecting then refused (a text column holds no integer): only a CSV
    file's fields, which every schema type is cast from, are read as numbers."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT (range % 3)::VARCHAR AS kids, range % 5 AS age FROM range(30)")
    text = draft_schema(con, "t")
    assert body(text) == ["  kids: {type: categorical, values: ['0', '1', '2']}", "  age: {type: integer, min: 0, max: 4}"]
    db = dpsql.connect(con, schema=text, budget=dpsql.Budget(epsilon=1.0), cache=False, validate=True)
    assert (db.validation.rows, db.validation.clean_rows) == (30, 30)


def test_accents_are_written_as_they_are(tmp_path):
    """Names with accents (``JOSÉ``, ``Español``, ``中文``) were drafted as YAML escapes
    (``"GARCIA, JOS\\xC9"``), which the owner has to review by eye; the draft now holds the text as it
    is, and loads back to the same values."""
    path = tmp_path / "staff.csv"
    path.write_text('Name,Language\n"GARCIA, JOSÉ",Español\n"LEE, WEI",中文\n', encoding="utf-8")
    text = draft_schema(path)
    assert body(text) == ["  Name: {type: categorical, values: ['GARCIA, JOSÉ', 'LEE, WEI']}",
                          "  Language: {type: categorical, values: [Español, 中文]}"]
    assert dpsql.load_schema(text).column("Language").values == ("Español", "中文")


def test_a_value_yaml_reads_as_a_line_break_stays_escaped():
    """Written as they are, a NEL or a line separator in a value (``x\\x85y``) would be a line break
    to YAML and to a reader: such a value keeps YAML's escapes and loads back the same."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('x\x85y'), ('a\u2028b'), ('é')) v(s)")
    text = draft_schema(con, "t")
    assert body(text) == ['  s: {type: categorical, values: ["a\\Lb", "x\\Ny", "\\xE9"]}']
    assert dpsql.load_schema(text).column("s").values == ("a\u2028b", "x\x85y", "é")


def salaries(path: Path) -> list[list[str]]:
    """A city's salary table as ``SF Salaries`` has it, written to ``path``: quoted names with a comma,
    pay with cents, a few negative, "Not Provided" in a few rows and no benefits in the first year.
    Returns the rows as Python's csv module reads them back (the oracle)."""
    rows = [[str(i + 1), f"LEE, {'JOSÉ' if i % 2 else 'ANN'}",
             "Not Provided" if i % 50 == 7 else f"{(i - 5) * 310.25:.2f}",
             "" if i < 100 else "Not Provided" if i % 97 == 3 else f"{20000 + i * 3.5:.2f}",
             str(2011 + i // 100)] for i in range(300)]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([["Id", "EmployeeName", "BasePay", "Benefits", "Year"], *rows])
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.reader(fh))[1:]


def test_pay_with_a_few_not_provided_is_drafted_as_numbers(tmp_path):
    """SF Salaries' BasePay holds "Not Provided" in a few rows among thousands of amounts: the draft
    called it a text column with 11,881 distinct values and left it out, so no pay could be queried.
    Numbers in all but a few texts are now numbers, nullable, with a comment saying which texts read
    as NULL (as connecting reads them). Oracle: the amounts Python's csv module reads."""
    rows = salaries(tmp_path / "salaries.csv")
    text = draft_schema(tmp_path / "salaries.csv")
    assert body(text)[2:4] == [
        "  BasePay: {type: numeric, bins: [-1552, 7725, 17002, 26279, 35556, 44833, 54110, 63387, 72664, 81941, 91218], "
        "nullable: true}  # 'Not Provided' (6 rows) is not a number: read as NULL",
        "  Benefits: {type: numeric, bins: [20353, 20423, 20493, 20563, 20633, 20703, 20773, 20843, 20913, 20983, 21053], "
        "nullable: true}  # 'Not Provided' (3 rows) is not a number: read as NULL"]
    db = dpsql.connect(tmp_path / "salaries.csv", schema=text, budget=dpsql.Budget(epsilon=1e12), cache=False)
    assert (db.validation.rows, db.validation.clean_rows) == (300, 300)
    df = db.query("SELECT Year, SUM(BasePay) AS pay, COUNT(Benefits) AS n FROM salaries GROUP BY Year", epsilon=1e11).df
    exact = {y: (sum(float(r[2]) for r in rows if r[4] == str(y) and r[2] != "Not Provided"),
                 sum(1 for r in rows if r[4] == str(y) and r[3] not in ("", "Not Provided"))) for y in (2011, 2012, 2013)}
    got = {y: (p, round(n)) for y, p, n in zip(df["Year"], df["pay"], df["n"])}
    assert got == {y: (pytest.approx(p, rel=1e-7), n) for y, (p, n) in exact.items()}


def test_text_with_spaces_around_it_is_pointed_to_trim(tmp_path):
    """UCI's ``adult.data`` writes ``, Female``: drafted as it is, the domain was ``[' Female', ' Male']``
    with nothing to say so, and an analyst's ``WHERE sex = 'Female'`` was refused as outside it. The
    draft now says to read the file with --trim; drafted with it, the values have no spaces."""
    path = tmp_path / "adult.csv"
    path.write_text("age,sex,income\n" + "".join(f"{30 + i % 9}, {['Female', 'Male'][i % 2]},<=50K\n" for i in range(40)))
    assert body(draft_schema(path))[1] == (
        "  sex: {type: categorical, values: [' Female', ' Male']}  # spaces around values: read the file with "
        "--trim (dpsql.CSV(path, trim=True)) and draft again")
    assert body(draft_schema(dpsql.CSV(path, trim=True)))[1] == "  sex: {type: categorical, values: [Female, Male]}"
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES (' a'), ('b ')) v(s)")
    assert body(draft_schema(con, "t")) == [
        "  s: {type: categorical, values: [' a', 'b ']}  # spaces around values: trim them in a view (TRIM(s))"]


def test_the_average_pay_is_measured_as_well_as_a_count():
    """``SELECT Year, AVG(TotalPay)`` over 12,000 salaries (bins to 200,000) answered 37,784 for an
    exact 87,121, with a standard error of 52,715, and NaN for a year: its SUM's weights (up to
    200,000) dominated the strategy's objective, which then barely measured the COUNT beside it.
    Each SUM is now measured divided by the power of two at or above its bound (as a SUM of squares
    was), on a COUNT's scale. Oracle: DuckDB's exact averages; the standard errors are computed before
    any noise (the strategy's), so they are exact to assert on."""
    con = duckdb.connect()
    con.execute("CREATE TABLE pay AS SELECT 2011 + range % 4 AS Year, 20000 + (range * 7919) % 150000 AS TotalPay "
                "FROM range(12000)")
    schema = {"table": "pay", "columns": {"Year": {"type": "integer", "min": 2011, "max": 2014},
                                          "TotalPay": {"type": "numeric", "bins": list(range(0, 200001, 20000))}}}
    db = dpsql.connect(con, schema=schema, budget=dpsql.Budget(epsilon=10.0), cache=False, progress=False)
    sql = "SELECT Year, AVG(TotalPay) AS a, COUNT(*) AS n FROM pay GROUP BY Year ORDER BY Year"
    got = db.query(sql, epsilon=1.0).df
    exact = con.sql(sql).df()
    assert got["a_std_error"].max() < 300 and got["n_std_error"].max() < 10  # were 28,000 to 1e6 (or NaN), and 4,838
    assert (abs(got["a"] - exact["a"]) < 6 * got["a_std_error"]).all()


def test_lines_read_as_no_row_are_reported_to_the_owner(tmp_path):
    """A file saved as Windows-1252 (``JOSÉ`` as the byte 0xC9) lost every line with an accent, and a
    name with an unquoted comma every line it was on: ``dpsql validate`` said ``9,577 rows ... 0
    dropped`` of a 12,000-line file, and of a file with no line read, ``0 rows``, while ``schema
    draft`` called each column "only NULLs". Now the lines read as no row are counted, by reason,
    in the report, the connecting warning and the draft; with no row left, connecting and the draft
    are refused. Oracle: the lines written."""
    path = tmp_path / "pay.csv"
    good = [f'"LEE, ANN",{100 + i}' for i in range(5)]
    path.write_bytes(("name,pay\r\n" + "\r\n".join(good) + "\r\n").encode() + b'"Jos\xc9, A",7\r\nJos\xc9,8\r\n'
                     + b"LEE, ANN,9\r\n\r\n")
    schema = {"table": "pay", "columns": {"pay": {"type": "integer", "min": 0, "max": 200}}}
    note = ("3 lines of {} were not read, in no answer: 2 not UTF-8 or too long (save the file as UTF-8), 1 with "
            "another number of fields than the header or text after a closing quote (a value holding the delimiter "
            "must be in double quotes)").format(path)
    report = validate(path, schema)
    assert (report.rows, report.unread_lines, report.problems()) == (5, {"not_utf8": 2, "fields": 1}, 3)
    assert str(report).splitlines()[1] == f"  {note}"
    with pytest.warns(UserWarning, match=re.escape(note)):
        dpsql.connect(path, schema=schema, budget=dpsql.Budget(epsilon=1.0), cache=False)
    assert draft_schema(path).splitlines()[6] == f"# NOTE: {note}."

    path.write_text("name,pay\n" + "".join(f"LEE, ANN,{i}\n" for i in range(4)))
    with pytest.raises(dpsql.SchemaError, match="4 lines of .* not read.*no row is left"):
        dpsql.connect(path, schema=schema, budget=dpsql.Budget(epsilon=1.0), cache=False)
    with pytest.raises(dpsql.ArgumentError, match="4 lines of .* not read.*no row to draft from"):
        draft_schema(path)


def test_a_file_of_a_header_alone_is_read_as_no_rows(tmp_path):
    """A CSV file of its header line alone made ``schema draft``, ``validate``, ``query`` and ``synth``
    fail with "unexpected TypeError" (counting its unread lines summed no line: NULL, not 0), and the
    draft called each column "only NULLs". Oracle: the file has no line after its header."""
    path = tmp_path / "empty.csv"
    path.write_text("a,b\n")
    assert draft_schema(path).splitlines()[-2:] == ["  # a: no rows to draft it from; left out",
                                                    "  # b: no rows to draft it from; left out"]
    schema = {"table": "empty", "columns": {"a": {"type": "integer", "min": 0, "max": 3},
                                            "b": {"type": "categorical", "values": ["x", "y"]}}}
    report = validate(path, schema)
    assert (report.rows, report.unread_lines, report.problems()) == (0, {}, 0)
    db = dpsql.connect(path, schema=schema, budget=dpsql.Budget(epsilon=1.0), cache=False, progress=False)
    db.query("SELECT COUNT(*) FROM empty", epsilon=0.5)
    with pytest.warns(UserWarning, match="the table's size is mostly noise"):
        syn = db.synthesize("pgm", workload=[("a", "b")], epsilon=0.5, name="s")
    assert syn.df.columns.tolist() == ["a", "b"]


def test_a_semicolon_separated_file_is_read_with_delimiter(tmp_path, capsys):
    """A European export separates fields with ``;`` (commas are decimal marks): read at commas, its
    header was one field and no line a row, and the command line had no way to give the delimiter
    (``dpsql.CSV(path, delimiter=";")`` only). The note on the unread lines now names the fix, and
    ``--delimiter`` gives it to every command that reads --data."""
    from dpsql.api.cli import main

    path = tmp_path / "euro.csv"
    path.write_text("Alter;Geschlecht;Einkommen\n" + "".join(f"{20 + i % 40};{'mw'[i % 2]};{1000 + i},50\n"
                                                              for i in range(60)))
    with pytest.raises(dpsql.ArgumentError, match=re.escape(
            "60 with another number of fields than the header or text after a closing quote (a value holding the "
            "delimiter must be in double quotes; the header is one field holding ';': give the delimiter, "
            "--delimiter ';' or dpsql.CSV(path, delimiter=';')): no row to draft from")):
        draft_schema(path)
    assert main(["schema", "draft", str(path), "--delimiter", ";"]) == 0
    assert body(capsys.readouterr().out)[:2] == ["  Alter: {type: integer, min: 20, max: 59}",
                                                 "  Geschlecht: {type: categorical, values: [m, w]}"]
    schema = tmp_path / "euro.yaml"
    schema.write_text(yaml.safe_dump({"table": "euro", "columns": {"Alter": {"type": "integer", "min": 0, "max": 99}}}))
    assert main(["validate", "--data", str(path), "--schema", str(schema), "--delimiter", ";"]) == 0
    assert "table euro: 60 rows, 60 with every column in its declared domain" in capsys.readouterr().out


def test_an_unknown_column_of_a_workload_is_named_with_the_nearest():
    """``--workload 'region,Language'`` on a census extract whose column is ``lang`` said only
    ``unknown column in marginal ('region', 'Language')``: which of the two, and what the columns
    are, the user had to find. Refused before any spend."""
    frame = pd.DataFrame({"region": ["South", "West"] * 50, "lang": ["English", "Español"] * 50,
                          "AGEP": list(range(100))})
    schema = {"table": "census", "columns": {"region": {"type": "categorical", "values": ["South", "West"]},
                                             "lang": {"type": "categorical", "values": ["English", "Español"]},
                                             "AGEP": {"type": "integer", "min": 0, "max": 99}}}
    db = dpsql.connect(frame, schema=schema, budget=dpsql.Budget(epsilon=1.0), cache=False, progress=False)
    with pytest.raises(dpsql.WorkloadError) as e:
        db.synthesize(workload=[("agep",), ("regoin", "lang")], epsilon=0.5)
    assert str(e.value) == ("unknown column 'regoin' in marginal ('regoin', 'lang') (did you mean region?); the "
                            "columns are region, lang, AGEP")
    assert db.remaining().epsilon == 1.0


def test_a_comment_over_two_lines_is_named_as_the_cause(tmp_path):
    """A survey export's comment holding a line break (``"Line one\\nline two"``) is read a line at a
    time: its second line was counted as "another number of fields than the header" with a hint
    about unquoted delimiters, the wrong fix. The note now counts the lines with an unclosed quote
    and names the line breaks inside values. Oracle: the lines Python's csv module writes."""
    path = tmp_path / "survey.csv"
    with open(path, "w", newline="", encoding="utf-8-sig") as fh:
        csv.writer(fh, lineterminator="\r\n").writerows(
            [["Age (years)", "Comments"]] + [[20 + i, ["fine", "Line one\nline two", 'said "ok",\nleft'][i % 3]]
                                              for i in range(30)])
    unclosed = sum(line.count('"') % 2 for line in path.read_text(encoding="utf-8-sig").splitlines())
    report = validate(path, {"table": "survey", "columns": {"Age (years)": {"type": "integer", "min": 0, "max": 99}}})
    assert (unclosed, report.rows, report.unread_lines) == (40, 20, {"fields": 30})
    assert report.unread_note.endswith(
        "; 40 lines of the file hold an unclosed double quote: a quoted value holding a line break is read a line at "
        "a time (a line of it with the header's number of fields, the first or the last, is a row holding part of "
        "that value), so replace the line breaks inside values)")


def test_a_column_name_in_another_case_of_a_non_ascii_letter_is_refused_with_duckdbs_candidate():
    """DuckDB matches a name in any case for ASCII letters alone, so ``SELECT ünïcode`` does not find the
    column ``Ünïcode``, as in DuckDB itself; the refusal kept only the first line of DuckDB's message
    and dropped the name it suggests (its binder reads the schema, never a row). Nothing is spent."""
    con = duckdb.connect()
    con.execute('CREATE TABLE t AS SELECT range % 3 AS "Ünïcode" FROM range(50)')
    db = dpsql.connect(con, schema={"table": "t", "columns": {"Ünïcode": {"type": "integer", "min": 0, "max": 2}}},
                       budget=dpsql.Budget(epsilon=1.0), cache=False, progress=False)
    with pytest.raises(dpsql.Error, match=re.escape('Referenced column "ünïcode" not found in FROM clause!; '
                                                    'Candidate bindings: "Ünïcode")')):
        db.query("SELECT ünïcode, COUNT(*) FROM t GROUP BY 1", epsilon=0.5)
    assert db.spent().epsilon == 0
    assert db.query('SELECT "Ünïcode", COUNT(*) AS n FROM t GROUP BY 1', epsilon=0.5).df.columns[0] == "Ünïcode"
