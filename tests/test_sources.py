"""What ``dpsql.connect`` reads the private table from: files and their formats, and the errors
for a source or ledger it cannot use (each a :class:`dpsql.Error` naming the file or argument).

Oracles: a CSV file that differs from a plain one only in its encoding details (a byte-order
mark, unnamed columns) releases exactly what the plain one releases, with the same seeded noise;
a file read through :func:`~dpsql.private.backend.csv_view` has exactly one row per line.
"""

from __future__ import annotations

import csv
import warnings

import duckdb
import numpy as np
import pytest
from test_trust_boundary import SCHEMA  # age 0..9, sex F/M
from test_trust_boundary import _release as release  # the seeded-noise answers of one GROUP BY

import dpsql
from dpsql.private.backend import csv_view

ROWS = [(i % 10, "F" if i % 3 == 0 else "M") for i in range(200)]


def write_csv(path, header, lines, eol="\n", encoding="utf-8"):
    path.write_bytes((eol.join([header, *lines]) + eol).encode(encoding))
    return path


@pytest.fixture
def plain(tmp_path):
    return release(write_csv(tmp_path / "plain.csv", "age,sex", [f"{a},{s}" for a, s in ROWS]))


@pytest.mark.parametrize("eol", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_a_csv_with_a_byte_order_mark_reads_like_one_without(tmp_path, plain, eol):
    """Excel's "CSV UTF-8" starts with a byte-order mark: it is not part of the first column's name
    (which used to be '\ufeffage', so no query found the column 'age')."""
    bom = write_csv(tmp_path / "bom.csv", "age,sex", [f"{a},{s}" for a, s in ROWS], eol, "utf-8-sig")
    assert bom.read_bytes().startswith(b"\xef\xbb\xbfage")
    np.testing.assert_array_equal(release(bom), plain)


@pytest.mark.parametrize("header,line", [(",age,sex", "{i},{a},{s}"),      # pandas' to_csv with its index
                                         ("age,sex,", "{a},{s},"),        # a trailing delimiter
                                         ("age,,sex", "{a},x,{s}")])
def test_unnamed_csv_columns_are_not_read(tmp_path, plain, header, line):
    """A column whose header name is empty is never read, and the others are read as usual (it used
    to make connect fail with DuckDB's binder error)."""
    path = write_csv(tmp_path / "unnamed.csv", header, [line.format(i=i, a=a, s=s) for i, (a, s) in enumerate(ROWS)])
    np.testing.assert_array_equal(release(path), plain)


def test_a_large_crlf_csv_reads_each_line_once(tmp_path):
    """Past DuckDB's 32 MiB buffer, a border that falls between a line's \\r and its \\n made a
    multi-threaded read count that line twice; the file is read by one thread. Each line is
    8 bytes after a 9-byte header, so every line's \\r ends on a multiple of 8 bytes, the border too."""
    lines = 4_400_000
    path = tmp_path / "big.csv"
    path.write_bytes(b"age,sex\r\n" + b"31,Fab\r\n" * lines)
    con = duckdb.connect()
    con.execute(csv_view(path, "people", dpsql.load_schema(SCHEMA)))
    assert con.sql("SELECT count(*) FROM people").fetchall() == [(lines,)]


@pytest.mark.parametrize("delimiter", [",", ";", "\t", "|"])
@pytest.mark.parametrize("trim", [False, True])
def test_quoted_fields_may_hold_the_delimiter(tmp_path, delimiter, trim):
    """A passenger list names each passenger "Braund, Mr. Owen Harris": the comma inside quotes
    made every line one field too long, so every line was dropped (and ``schema draft`` said each
    column held only NULLs). Oracle: Python's csv module on each well-formed line; a malformed
    line (text after a closing quote, a field too many) is dropped alone, and a quote that does
    not close is text, as before."""
    d = delimiter
    fields = [["3", "Braund, Mr. Owen Harris", "male"], ["1", 'Cumings, Mrs. John ("Florence")', "female"],
              ["", "Heikkinen; Miss. Laina|x", ""], ["2", "plain", "female"], ["2", f"ends with a{d}", "x"]]
    def quoted(f):
        return '"' + f.replace('"', '""') + '"' if any(c in f for c in f'"{d},;|\t') else f
    good = [d.join((" " + quoted(f) + " ") if trim and i == 1 else quoted(f) for i, f in enumerate(row))
            for row in fields]
    bad = [f'4{d}"closed"after{d}male', f'5{d}"x"{d}male{d}extra']
    loose = f'6{d}"unclosed{d}male'  # three fields: a quote that does not close is text
    path = tmp_path / "people.csv"
    path.write_text("\n".join([d.join(["class", "name", "sex"]), good[0], *bad, *good[1:], loose]) + "\n")
    con = duckdb.connect()
    con.execute(csv_view(path, "people", None, d, trim=trim))
    want = [tuple(None if v == "" else v.strip(" ") if trim else v for v in row)  # TRIM strips spaces
            for row in csv.reader(good, delimiter=d, skipinitialspace=trim)]
    assert con.sql("SELECT * FROM people").fetchall() == [*want, ("6", '"unclosed', "male")]


def _file(tmp_path, name, content=b"not a database"):
    (tmp_path / name).write_bytes(content)
    return tmp_path / name


def _directory(tmp_path, name):
    (tmp_path / name).mkdir()
    return tmp_path / name


#: (what dpsql.connect is given, beside the schema and a budget; what its error says)
BAD_SOURCES = {
    "missing": (lambda d: {"source": d / "nope.csv"}, r"source: no such data file: .*nope\.csv"),
    "unknown suffix": (lambda d: {"source": _file(d, "x.txt", b"age,sex\n1,F\n")},
                       r"cannot tell the format of .*x\.txt from its name: use \.duckdb, \.csv"),
    "compressed": (lambda d: {"source": _file(d, "x.csv.gz")}, r"x\.csv\.gz .*decompress"),
    "not a source": (lambda d: {"source": 42}, r"source must be a DuckDB connection.*got int"),
    "ledger": (lambda d: {"source": duckdb.connect(), "ledger": 5}, r"ledger must be a file path.*got int"),
    "directory": (lambda d: {"source": _directory(d, "dir.csv")}, r"dir\.csv is a directory, not a data file"),
    "corrupt parquet": (lambda d: {"source": _file(d, "b.parquet")}, r"cannot open .*b\.parquet as a parquet file"),
    "corrupt duckdb": (lambda d: {"source": _file(d, "b.duckdb")}, r"cannot open .*b\.duckdb as a duckdb file"),
    "empty csv": (lambda d: {"source": _file(d, "e.csv", b"")}, r"first line of .*e\.csv is empty"),
    "header not utf-8": (lambda d: {"source": _file(d, "l.csv", "\u00e2ge,sex\n1,F\n".encode("latin-1"))},
                         r"first line of .*l\.csv \(its header\) is not UTF-8 text"),
    "semicolons": (lambda d: {"source": _file(d, "s.csv", b"age;sex\n1;F\n")},
                   r"header of .*s\.csv \(1 field split at ','\) names none of the schema's columns age, sex"),
    "repeated name": (lambda d: {"source": _file(d, "r.csv", b"age,age,sex\n1,2,F\n")},
                      r"header of .*r\.csv names fields 1 and 2 the same"),
    # DuckDB would read p1.parquet for "p[1].parquet", every matching file for "p?.csv"
    "pattern in a parquet name": (lambda d: {"source": _file(_file(d, "p1.parquet").parent, "p[1].parquet")},
                                  r"DuckDB reads \*, \? and \[ in a file's path as a pattern.*p\[1\]\.parquet"),
    "pattern in a csv name": (lambda d: {"source": _file(_file(d, "pa.csv", b"age\n1\n").parent, "p?.csv")},
                              r"can match other files than .*p\?\.csv: rename it"),
    "repeated in another case": (lambda d: {"source": _file(d, "c.csv", b"sex,age,AGE\nF,1,2\n")},
                                 r"names fields 2 and 3 the same \(names are compared case-insensitively\)"),
    "two-character delimiter": (lambda d: {"source": dpsql.CSV(_file(d, "t.csv", b"age||sex\n1||F\n"), delimiter="||")},
                                r"a CSV delimiter is one character, not a double quote or a line break; got '\|\|'"),
}


def _parquet_with_bad_utf8(tmp_path, column):
    """A Parquet file of ROWS whose last ``column`` string is the bytes Q, 0xFF, 0xFE, Q (not UTF-8)."""
    path = tmp_path / "bad.parquet"
    con = duckdb.connect()
    con.execute("CREATE TABLE p AS SELECT * FROM (VALUES " + ", ".join(f"({a}, '{s}', 'n')" for a, s in ROWS)
                + ") v(age, sex, note)")
    con.execute(f"UPDATE p SET {column} = 'QQQQ' WHERE rowid = (SELECT max(rowid) FROM p)")
    con.execute(f"COPY p TO '{path}' (FORMAT parquet, COMPRESSION uncompressed)")
    path.write_bytes(path.read_bytes().replace(b"QQQQ", b"Q\xff\xfeQ"))
    return path


def test_a_parquet_string_that_is_not_utf8_is_found_when_connecting(tmp_path):
    """DuckDB fails a whole Parquet scan on one string that is not UTF-8: in a schema column, every
    measurement would have failed after its charge, on this data set only. Connecting reads the
    schema's string columns once, so it is the owner's error; in another column it is never read."""
    with pytest.raises(dpsql.ArgumentError, match=r"cannot open .*bad\.parquet as a parquet file: .*UTF8"):
        dpsql.connect(_parquet_with_bad_utf8(tmp_path, "sex"), schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0),
                      cache=False)
    db = dpsql.connect(_parquet_with_bad_utf8(tmp_path, "note"), schema=SCHEMA, budget=dpsql.Budget(epsilon=1e12),
                       cache=False)
    assert db.query("SELECT COUNT(*) AS n FROM people", epsilon=1e9).df["n"][0] == pytest.approx(len(ROWS), abs=1e-3)


def test_a_registered_dataframe_is_warned_of_when_connecting():
    """DuckDB types a registered DataFrame's object columns from a sample: a later value can fail
    every read or be converted (2.5 counted as 2). The owner is told to copy it into a table."""
    import pandas as pd

    con = duckdb.connect()
    con.register("people", pd.DataFrame({"age": [1, 2], "sex": ["F", "M"]}))
    with pytest.warns(UserWarning, match="registered Python object .* copy it into a table first"):
        dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), cache=False)
    con.execute("CREATE TABLE copied AS SELECT * FROM people")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dpsql.connect(con, schema=SCHEMA, table="copied", budget=dpsql.Budget(epsilon=1.0), cache=False)


@pytest.mark.parametrize("case", sorted(BAD_SOURCES))
def test_a_source_or_ledger_that_cannot_be_used_is_a_dpsql_error(tmp_path, case):
    """Each used to escape as a builtin or DuckDB exception (FileNotFoundError, ValueError,
    TypeError, IsADirectoryError, BinderException, ParserException, InvalidInputException,
    IOException), or, for a repeated header name, to drop every row silently."""
    make, message = BAD_SOURCES[case]
    with pytest.raises(dpsql.ArgumentError, match=message):
        dpsql.connect(schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), cache=False, **make(tmp_path))


def test_header_errors_quote_no_line_of_the_file(tmp_path):
    """A file without a header has a row of data on its first line: the header's errors give
    positions and counts, never its text."""
    path = tmp_path / "noheader.csv"
    for first in ("Alice Smith,Alice Smith,F", "Alice Smith;F"):
        path.write_text(f"{first}\n3,F\n")
        with pytest.raises(dpsql.ArgumentError) as info:
            dpsql.connect(path, schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), cache=False)
        assert "Alice" not in str(info.value)
