"""Hierarchy levels given by a public mapping (``levels: [state, county]`` with ``codes:``), not by
prefixes: answered as plain DuckDB answers with the mapping joined (at a huge budget), adding up bit
for bit, validated with errors naming the path, and seen by strategy selection as a tree (OPT_H)."""

from __future__ import annotations

import math
import re

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
from dpsql.errors import SchemaError
from dpsql.schema import load_schema


def _mapping(seed: int) -> dict[str, list[str]]:
    """Codes ``L-c-t`` whose county and state are drawn at random: no prefix of a code names them."""
    rng = np.random.default_rng(seed)
    county_state = {f"K{k}": f"S{rng.integers(0, 3)}" for k in range(7)}
    county_state.update({"K0": "S0", "K1": "S1", "K2": "S2"})  # every state has a county
    codes = [f"{letter}-{c}-{t}" for letter in "ABC" for c in "xyz" for t in range(1, 4)]
    rng.shuffle(codes)
    out = {}
    for i, code in enumerate(codes):
        county = f"K{i % 7}"
        out[code] = [county_state[county], county]
    return out


def _schema(mapping: dict[str, list[str]], codes: object = None) -> dict:
    return {"table": "p", "columns": {
        "geo": {"type": "hierarchy", "values": sorted(mapping), "levels": ["state", "county"],
                "codes": mapping if codes is None else codes},
        "sex": {"type": "categorical", "values": ["F", "M"]}}}


def _census(seed: int = 0, rows: int = 600, rho: float = 1e13) -> tuple[duckdb.DuckDBPyConnection, dpsql.Connection]:
    """The private table ``p`` and the mapping as table ``m`` (for plain DuckDB), and dpsql over ``p``."""
    mapping = _mapping(seed)
    rng = np.random.default_rng(seed)
    con = duckdb.connect()
    con.register("people", pd.DataFrame({"geo": rng.choice(sorted(mapping), rows), "sex": rng.choice(["F", "M"], rows)}))
    con.execute("CREATE TABLE p AS SELECT * FROM people")
    con.register("lookup", pd.DataFrame([[g, s, c] for g, (s, c) in mapping.items()], columns=["geo", "state", "county"]))
    con.execute("CREATE TABLE m AS SELECT * FROM lookup")
    return con, dpsql.connect(con, schema=_schema(mapping), budget=dpsql.Budget(rho=rho), cache=False, progress=False)


@pytest.mark.parametrize("query, plain", [
    ("SELECT state, sex, COUNT(*) AS n FROM p GROUP BY state, sex",
     "SELECT m.state, p.sex, COUNT(*) AS n FROM p JOIN m USING (geo) GROUP BY ALL"),
    ("SELECT state, county, COUNT(*) AS n FROM p WHERE county = 'K3' OR state = 'S0' GROUP BY state, county",
     "SELECT m.state, m.county, COUNT(*) AS n FROM p JOIN m USING (geo) WHERE m.county = 'K3' OR m.state = 'S0' "
     "GROUP BY ALL"),
    ("WITH c AS (SELECT county, sex FROM p WHERE sex = 'F') SELECT county, COUNT(*) AS n FROM c GROUP BY county",
     "SELECT m.county, COUNT(*) AS n FROM p JOIN m USING (geo) WHERE sex = 'F' GROUP BY ALL"),
    ("SELECT lower(state) AS s, COUNT(*) AS n FROM p GROUP BY lower(state)",
     "SELECT lower(m.state) AS s, COUNT(*) AS n FROM p JOIN m USING (geo) GROUP BY ALL"),
    ("SELECT geo, state, COUNT(*) AS n FROM p GROUP BY geo, state",
     "SELECT geo, m.state, COUNT(*) AS n FROM p JOIN m USING (geo) GROUP BY ALL"),
])
def test_sql_on_mapped_levels_equals_duckdb_with_the_mapping_joined(query, plain):
    con, db = _census()
    got = db.query(query, rho=1e10).df
    want = con.sql(plain).df()
    keys = [c for c in want.columns if c != "n"]
    assert list(got.columns[:len(want.columns)]) == list(want.columns)
    got, want = got.sort_values(keys).reset_index(drop=True), want.sort_values(keys).reset_index(drop=True)
    assert list(got[keys].itertuples(index=False)) == list(want[keys].itertuples(index=False))
    np.testing.assert_allclose(got["n"], want["n"], atol=1e-3)


def test_mapped_levels_add_up_bit_for_bit():
    _, db = _census(seed=1, rows=300, rho=10.0)
    total, state, county = (r.df for r in db.batch(["SELECT COUNT(*) AS n FROM p",
                                                     "SELECT state, COUNT(*) AS n FROM p GROUP BY state",
                                                     "SELECT state, county, COUNT(*) AS n FROM p GROUP BY state, county"],
                                                    rho=0.5))
    assert not all(float(v).is_integer() for v in county["n"])  # noisy estimates, not counts
    assert math.fsum(state["n"]) == total["n"][0]
    for value, name in zip(state["n"], state["state"]):
        kids = county.loc[county["state"] == name, "n"].tolist()
        assert kids and math.fsum(kids) == value, (name, math.fsum(kids) - value)


def test_opt_h_is_selected_for_two_nested_mapped_levels():
    """As for prefix levels (tests/test_hierarchy.py): on 8,000 codes, too many for a dense Gram of the
    cells, state and county of the mapping are a tree, and OPT_H is the strategy."""
    n = 8_000
    codes = [f"T{i:05d}" for i in range(n)]
    rng = np.random.default_rng(0)
    county = rng.permutation(n) // 20  # 400 counties, not runs of consecutive codes
    mapping = {c: [f"S{k // 40}", f"C{k}"] for c, k in zip(codes, county)}
    schema = {"table": "p", "columns": {"geo": {"type": "hierarchy", "levels": ["state", "county"], "codes": mapping},
                                        "sex": {"type": "categorical", "values": ["F", "M"]}}}
    con = duckdb.connect()
    con.execute("CREATE TABLE p (geo VARCHAR, sex VARCHAR)")
    db = dpsql.connect(con, schema=schema, budget=dpsql.Budget(rho=1.0), cache=False, progress=False)
    plan = db.explain(["SELECT state, sex, COUNT(*) AS n FROM p GROUP BY state, sex",
                       "SELECT county, COUNT(*) AS n FROM p GROUP BY county",
                       "SELECT geo, COUNT(*) AS n FROM p GROUP BY geo"], rho=0.5)
    assert plan.operator == "OPT_H"


def test_codes_from_a_csv_file_relative_to_the_schema_file(tmp_path):
    mapping = _mapping(0)
    (tmp_path / "geo").mkdir()
    (tmp_path / "geo" / "codes.csv").write_text("geo,state,county\n" + "".join(
        f"{g},{s},{c}\n" for g, (s, c) in mapping.items()))
    import yaml

    (tmp_path / "p.yaml").write_text(yaml.safe_dump(_schema(mapping, "geo/codes.csv")))
    from_file = load_schema(str(tmp_path / "p.yaml")).column("geo")
    assert from_file == load_schema(_schema(mapping)).column("geo")
    assert dict(zip(from_file.values, zip(*from_file.level_codes))) == {g: tuple(v) for g, v in mapping.items()}


@pytest.mark.parametrize("change, path, message", [
    (lambda m: m.pop(sorted(m)[0]), "columns.geo.codes", "1 code not mapped: 'A-x-1'"),
    (lambda m: m.update({"Z-0-0": ["S0", "K0"]}), "columns.geo.codes", "1 code mapped but not in values: 'Z-0-0'"),
    (lambda m: m.update({next(g for g, v in m.items() if v[1] == "K4"): ["S9", "K4"]}), "columns.geo.codes",
     "county 'K4' is under state"),
    (lambda m: m.update({sorted(m)[0]: ["S0"]}), "columns.geo.codes", "must be mapped to 2 non-empty strings"),
    (lambda m: m.update({1001: ["S0", "K0"]}), "columns.geo.codes", "code 1001 must be a non-empty string (quote"),
])
def test_a_bad_mapping_is_refused_naming_its_path(change, path, message):
    spec = _schema(_mapping(0))  # values: the codes mapped before the change
    change(spec["columns"]["geo"]["codes"])
    with pytest.raises(SchemaError) as info:
        load_schema(spec)
    assert info.value.problems == [(path, info.value.problems[0][1])] and message in info.value.problems[0][1]


def test_level_named_like_a_column_csv_header_and_levels_are_checked(tmp_path):
    mapping = _mapping(0)
    spec = _schema(mapping)
    spec["columns"]["geo"]["levels"] = ["state", "sex"]
    with pytest.raises(SchemaError, match=r"columns\.geo\.levels: level 'sex' is also the name of a column"):
        load_schema(spec)
    (tmp_path / "codes.csv").write_text("tract,state,county\n" + "".join(f"{g},{s},{c}\n" for g, (s, c) in mapping.items()))
    with pytest.raises(SchemaError, match=r"columns\.geo\.codes: .*codes\.csv: the header must be geo,state,county"):
        load_schema(_schema(mapping, str(tmp_path / "codes.csv")))
    with pytest.raises(SchemaError, match=r"columns\.geo\.codes: .*no such file"):
        load_schema(_schema(mapping, str(tmp_path / "missing.csv")))
    (tmp_path / "twice.csv").write_text("geo,state,county\nA-x-1,S0,K0\nA-x-1,S0,K0\n")
    with pytest.raises(SchemaError, match=r"columns\.geo\.codes: .*line 3: code 'A-x-1' is mapped twice"):
        load_schema(_schema({"A-x-1": ["S0", "K0"]}, str(tmp_path / "twice.csv")))
    spec = _schema(mapping)
    spec["columns"]["geo"]["levels"] = {"state": 1}
    with pytest.raises(SchemaError, match=r"columns\.geo\.levels: with 'codes', must list the levels' names"):
        load_schema(spec)


def test_the_docs_example_runs(capsys):
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "census.md").read_text()
    code = re.search(r"## Levels given by a mapping\n.*?```python\n(.*?)```", text, re.S).group(1)
    exec(compile(code, "docs/census.md", "exec"), {})
    assert "06037" in capsys.readouterr().out
