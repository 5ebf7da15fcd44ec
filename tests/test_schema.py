"""Schemas: loading from YAML, JSON and dicts; value <-> index; validation
that reports every mistake with its path."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpsql import schema as schema_module
from dpsql.errors import Error, SchemaError
from dpsql.schema import Binned, Boolean, Categorical, IntegerRange, load_schema

MINIMUM = """
table: adult
columns:
  age:   {type: integer, min: 17, max: 90}
  sex:   {type: categorical, values: [Female, Male]}
  hours: {type: numeric, bins: [0, 20, 40, 60, 100]}
"""


def test_minimum_format(tmp_path):
    path = tmp_path / "adult.yaml"
    path.write_text(MINIMUM)
    for source in (str(path), path, MINIMUM):
        s = load_schema(source)
        assert s.table == "adult"
        assert s.names == ("age", "sex", "hours")
        assert s.domain == (74, 2, 4)
        assert isinstance(s.column("AGE"), IntegerRange)   # unquoted SQL names are case-insensitive
        assert s.privacy_unit.column is None


def test_json_and_dict_agree(tmp_path):
    import yaml

    spec = yaml.safe_load(MINIMUM)
    path = tmp_path / "adult.json"
    path.write_text(json.dumps(spec))
    assert load_schema(str(path)).domain == load_schema(spec).domain == (74, 2, 4)


def test_value_index_mapping():
    s = load_schema({"table": "t", "columns": {
        "age": {"type": "integer", "min": 17, "max": 90, "nullable": True},
        "sex": {"type": "categorical", "values": ["Female", "Male"]},
        "hours": {"type": "numeric", "bins": [0, 20, 40, 60, 100]},
        "vet": {"type": "boolean", "nullable": True},
        "code": {"type": "categorical", "values": [3, 1, 2.5]},
    }})
    age, sex, hours, vet, code = s.columns
    assert (age.index_of(17), age.index_of(90), age.index_of(None), age.size) == (0, 73, 74, 75)
    assert (sex.index_of("Male"), sex.size, sex.labels) == (1, 2, ("Female", "Male"))
    assert [hours.index_of(v) for v in (0, 19.99, 20, 59.5, 60, 100)] == [0, 0, 1, 2, 3, 3]
    assert hours.values == ("[0, 20)", "[20, 40)", "[40, 60)", "[60, 100]")
    assert (vet.index_of(False), vet.index_of(True), vet.index_of(None)) == (0, 1, 2)
    assert (code.index_of(1), code.index_of(2.5)) == (1, 2)
    for col, bad in [(age, 16), (age, 17.5), (sex, "male"), (hours, 100.5), (hours, -1), (vet, 2), (vet, 1.0), (sex, None)]:
        with pytest.raises(KeyError):
            col.index_of(bad)
    assert list(age.encode([17, None, 200])) == [0, 74, -1]
    assert isinstance(hours, Binned) and isinstance(vet, Boolean) and isinstance(code, Categorical)


def test_bounds_and_sum_weights():
    s = load_schema({"table": "t", "columns": {
        "n": {"type": "integer", "min": 0, "max": 5, "nullable": True, "bounds": [1, 3]},
        "c": {"type": "categorical", "values": [10, 20], "bounds": [0, 15]}}})
    assert list(s.column("n").sum_weights()) == [1, 1, 2, 3, 3, 3, 0]   # clamped; NULL adds 0
    assert list(s.column("c").sum_weights()) == [10, 15]


def test_sum_bounds_come_from_the_domain_and_declared_bounds_only_narrow_them():
    s = load_schema({"table": "t", "columns": {
        "age": {"type": "integer", "min": -3, "max": 90, "nullable": True},
        "wide": {"type": "integer", "min": 0, "max": 5, "bounds": [-100, 100]},
        "half": {"type": "integer", "min": 0, "max": 5, "bounds": [-100, 2]},
        "score": {"type": "categorical", "values": [2.5, -1, 7]},
        "word": {"type": "categorical", "values": ["a", "b"]},
        "hours": {"type": "numeric", "bins": [0, 20, 40]},
        "flag": {"type": "boolean"}}})
    assert s.column("age").sum_bounds == (-3, 90)
    assert s.column("wide").sum_bounds == (0, 5)  # clamping into [-100, 100] changes nothing; sensitivity 5, not 100
    assert s.column("half").sum_bounds == (0, 2)
    assert s.column("score").sum_bounds == (-1, 7)
    assert [s.column(c).sum_bounds for c in ("word", "flag")] == [None, None]
    assert s.column("hours").sum_bounds == (0, 40)  # a binned column's outer edges
    assert list(s.column("half").sum_weights()) == [0, 1, 2, 2, 2, 2]
    from dpsql.sql import plan_statement
    aggs = plan_statement("SELECT SUM(wide), AVG(age), SUM(score) FROM t", s).aggregates
    assert [a.sensitivity for a in aggs] == [5.0, 90.0, 7.0]  # what the noise is scaled by


def test_bounds_that_contain_no_value_are_refused():
    with pytest.raises(SchemaError, match=r"columns\.n\.bounds.*contains none of the column's values"):
        load_schema({"table": "t", "columns": {"n": {"type": "integer", "min": 0, "max": 5, "bounds": [6, 9]}}})
    with pytest.raises(SchemaError, match=r"columns\.h\.bounds: must overlap the bins' range \[0, 40\]"):
        load_schema({"table": "t", "columns": {"h": {"type": "numeric", "bins": [0, 20, 40], "bounds": [41, 50]}}})
    h = load_schema({"table": "t", "columns": {"h": {"type": "numeric", "bins": [0, 20, 40], "bounds": [10, 90]}}})
    assert h.column("h").sum_bounds == (10, 40)


def test_privacy_unit_and_merge():
    s = load_schema({"table": "t", "privacy_unit": {"column": "pid", "max_rows": 4},
                     "merge": {"ab": ["a", "b"]},
                     "columns": {"a": {"type": "boolean"}, "b": {"type": "boolean"}}})
    assert (s.privacy_unit.column, s.privacy_unit.max_rows) == ("pid", 4)
    assert s.merge == (("ab", ("a", "b")),)


def test_every_mistake_is_reported_with_its_path():
    bad = {
        "table": "",
        "extra": 1,
        "privacy_unit": {"column": "age", "max_rows": 0},
        "merge": {"m": ["age", "nope"], "n": ["age", "sex"]},
        "columns": {
            "age": {"type": "integer", "min": 90, "max": 17},
            "sex": {"type": "categorical", "values": ["F", "F", 3]},
            "hours": {"type": "numeric", "bins": [0, 20, 20], "labels": ["a"]},
            "flag": {"type": "boolean", "bounds": [0, 1]},
            "nokind": {"min": 1},
            "weird": {"type": "float"},
            "inc": {"type": "integer", "min": 0, "max": 10, "bounds": [5, 1], "nullable": "yes", "unit": 3},
            "cat": {"type": "categorical", "values": ["a", "b"], "bounds": [0, 1]},
            "big": {"type": "integer", "min": 0, "max": 10**9},
        },
    }
    with pytest.raises(SchemaError) as info:
        load_schema(bad)
    paths = {p for p, _ in info.value.problems}
    expected = {"table", "extra", "privacy_unit.column", "privacy_unit.max_rows", "merge.m[1]", "merge.n[0]",
                "columns.age.max", "columns.sex.values", "columns.sex.values[1]", "columns.hours.bins[2]",
                "columns.hours.labels", "columns.flag.bounds", "columns.nokind.type", "columns.weird.type",
                "columns.inc.bounds", "columns.inc.nullable", "columns.inc.unit", "columns.cat.bounds",
                "columns.big"}
    assert expected <= paths, expected - paths
    assert isinstance(info.value, Error)
    text = str(info.value)
    assert "columns.age.max: must be >= min (90)" in text
    assert f"{len(info.value.problems)} schema problems" in text


@pytest.mark.parametrize("spec,path", [
    ({}, "table"),
    ({"table": "t"}, "columns"),
    ({"table": "t", "columns": {}}, "columns"),
    ({"table": "t", "columns": []}, "columns"),
    ({"table": "t", "columns": {"a": "integer"}}, "columns.a"),
    ({"table": "t", "columns": {"a": {"type": "categorical", "values": []}}}, "columns.a.values"),
    ({"table": "t", "columns": {"a": {"type": "integer", "max": 3}}}, "columns.a.min"),
    ({"table": "t", "columns": {"a": {"type": "integer", "min": 0.5, "max": 3}}}, "columns.a.min"),
    ({"table": "t", "columns": {"a": {"type": "numeric", "bins": [1]}}}, "columns.a.bins"),
    ({"table": "t", "columns": {"a": {"type": "numeric", "bins": [0, "x"]}}}, "columns.a.bins[1]"),
    ({"table": "t", "columns": {"a": {"type": "boolean"}, "A": {"type": "boolean"}}}, "columns.A"),
    ({"table": "t", "privacy_unit": "person", "columns": {"a": {"type": "boolean"}}}, "privacy_unit"),
])
def test_single_mistakes(spec, path):
    with pytest.raises(SchemaError) as info:
        load_schema(spec)
    assert path in {p for p, _ in info.value.problems}


def test_yaml_syntax_error_has_a_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("table: t\ncolumns:\n  a: {type: integer, min: 0\n")
    with pytest.raises(SchemaError) as info:
        load_schema(str(path))
    assert "line" in info.value.problems[0][0] and str(path) in str(info.value)


@pytest.mark.parametrize("name, text, where, problem", [
    ("s.yaml", "table: t\ncolumns:\n  age: {type: integer, min: 0, max: 90}\n  age: {type: integer, min: 0, max: 5}\n",
     "line 4, column 3", "invalid YAML: key 'age' appears twice in one mapping (first at line 3)"),
    ("s.yaml", "table: t\ncolumns:\n  age: {type: integer, min: 0, max: 90, max: 5}\n",
     "line 3, column 41", "invalid YAML: key 'max' appears twice in one mapping (first at line 3)"),
    ("s.json", '{"table": "t", "columns": {"age": {"type": "integer", "min": 0, "max": 90, "max": 5}}}',
     "", "invalid JSON: key 'max' appears twice in one object"),
    ("s.yaml", "[" * 5000, "", "nested too deeply to read"),
    ("s.json", "[" * 100_000, "", "nested too deeply to read"),
    ("s.yaml", "table: t\ncolumns:\n  a: {type: integer, min: 0, max: " + "9" * 5001 + "}\n", "",
     "cannot be read: Exceeds the limit (4300 digits) for integer string conversion"),
])
def test_schema_text_that_cannot_be_read_as_written_is_refused(tmp_path, name, text, where, problem):
    """A key given twice was resolved to its last value silently (a domain of 0..5 for 0..90, say);
    deep nesting and long integers escaped as RecursionError and ValueError."""
    (tmp_path / name).write_text(text)
    with pytest.raises(SchemaError) as info:
        load_schema(str(tmp_path / name))
    ((got_where, got_problem),) = info.value.problems
    assert got_where == where and got_problem.startswith(problem)


def test_an_unquoted_yaml_date_is_the_text_it_reads():
    """PyYAML makes 2020-01-31 a date, which a schema's values cannot be; quoted, it is text."""
    plain = load_schema("table: t\ncolumns:\n  d: {type: categorical, values: [2020-01-31, 2020-02-01]}\n")
    quoted = load_schema("table: t\ncolumns:\n  d: {type: categorical, values: ['2020-01-31', '2020-02-01']}\n")
    assert plain.column("d") == quoted.column("d") and plain.column("d").values == ("2020-01-31", "2020-02-01")


def test_list_form_of_columns():
    s = load_schema({"table": "t", "columns": [{"name": "a", "type": "boolean"},
                                               {"name": "b", "type": "integer", "min": 1, "max": 3}]})
    assert s.domain == (2, 3)


def test_grid_order_is_c_order():
    s = load_schema({"table": "t", "columns": {"a": {"type": "boolean"}, "b": {"type": "integer", "min": 0, "max": 2}}})
    idx = np.ravel_multi_index([[s.columns[0].index_of(True)], [s.columns[1].index_of(2)]], s.domain)
    assert idx[0] == 1 * 3 + 2


def test_a_schema_file_that_cannot_be_read_says_why(tmp_path, monkeypatch):
    """A string that names a file is read as one, even when the file is missing (it used to be parsed
    as the YAML string "adult.yaml": "must be a mapping, got str"); a directory or a file that is not
    UTF-8 is a SchemaError naming the file, not an OSError or UnicodeDecodeError."""
    monkeypatch.chdir(tmp_path)
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("table: t\ncolumns:\n  a: {type: categorical, values: [\u00e9]}\n".encode("latin-1"))
    for spec, problem in [("adult.yaml", "no such schema file"), ("schemas/adult", "no such schema file"),
                          (str(tmp_path), "is a directory, not a schema file"), (latin, "is not UTF-8 text")]:
        with pytest.raises(SchemaError, match=problem) as info:
            load_schema(spec)
        assert info.value.source == str(spec)
    bom = tmp_path / "bom.json"  # Notepad's UTF-8 starts with a byte-order mark
    bom.write_text(json.dumps({"table": "t", "columns": {"a": {"type": "boolean"}}}), encoding="utf-8-sig")
    assert load_schema(bom).names == ("a",)
    # one line of JSON holding a "/" is text, not a path
    assert load_schema(json.dumps({"table": "t", "columns": {"a": {"type": "categorical", "values": ["N/A"]}}})
                       ).column("a").values == ("N/A",)


@pytest.mark.parametrize("column,path", [
    ({"type": "categorical", "values": [[1, 2], "x"]}, "columns.a.values[0]"),
    ({"type": "categorical", "values": [{"k": 1}, {"k": 1}]}, "columns.a.values[1]"),
    ({"type": "categorical", "values": ["x", None]}, "columns.a.values[1]"),
    ({"type": "numeric", "bins": [0, 2, 5], "labels": [None, "hi"], "nullable": True}, "columns.a.labels[0]"),
    ({"type": "numeric", "bins": [0, 2, 5], "labels": [["lo"], {"hi": 1}]}, "columns.a.labels[1]"),
    ({"type": "numeric", "bins": [0, 2, 5], "labels": ["lo", 5]}, "columns.a.labels"),
    ({"type": "numeric", "bins": [0, 2, 5], "labels": [1, 1.0]}, "columns.a.labels[1]"),
])
def test_group_keys_are_distinct_strings_or_numbers(column, path):
    """A categorical value or a bin label is what GROUP BY outputs: a list or mapping would be a
    group key (or crash the duplicate check, unhashable), and None a second NULL group."""
    with pytest.raises(SchemaError) as info:
        load_schema({"table": "t", "columns": {"a": column}})
    assert path in {p for p, _ in info.value.problems}


def test_a_column_repeated_in_the_list_form_is_refused():
    with pytest.raises(SchemaError, match=r"columns\.a: duplicate column name"):
        load_schema({"table": "t", "columns": [{"name": "a", "type": "boolean"},
                                               {"name": "a", "type": "integer", "min": 0, "max": 3}]})


@pytest.mark.parametrize("column", [
    {"type": "categorical", "values": list(range(11))},
    {"type": "categorical", "values": [str(i) for i in range(11)]},
    {"type": "integer", "min": 0, "max": 10},
    {"type": "numeric", "bins": list(range(12))},
])
def test_every_column_kind_is_capped_at_max_column_domain(monkeypatch, column):
    monkeypatch.setattr(schema_module, "MAX_COLUMN_DOMAIN", 10)
    with pytest.raises(SchemaError, match=r"columns\.a: domain of 11 values is too large \(at most 10\)"):
        load_schema({"table": "t", "columns": {"a": column}})
    monkeypatch.setattr(schema_module, "MAX_COLUMN_DOMAIN", 11)
    assert load_schema({"table": "t", "columns": {"a": column}}).domain == (11,)
