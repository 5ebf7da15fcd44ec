"""Hierarchy levels given by a public mapping (``levels: [state, county]`` with ``codes:``), not by
prefixes: answered as plain DuckDB answers with the mapping joined (at a huge budget), adding up bit
for bit, validated with errors naming the path, and seen by strategy selection as a tree (OPT_H)."""

from __future__ import annotations

import math
import re
from pathlib import Path

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
    people = pd.DataFrame({"geo": rng.choice(sorted(mapping), rows), "sex": rng.choice(["F", "M"], rows)})
    con.register("people", people)
    con.execute("CREATE TABLE p AS SELECT * FROM people")
    con.register("lookup", pd.DataFrame([[g, *v] for g, v in mapping.items()], columns=["geo", "state", "county"]))
    con.execute("CREATE TABLE m AS SELECT * FROM lookup")
    return con, dpsql.connect(con, schema=_schema(mapping), budget=dpsql.Budget(rho=rho), cache=False, progress=False)


def _csv(path: Path, mapping: dict[str, list[str]], header: str) -> None:
    path.write_text(header + "\n" + "".join(",".join([code, *levels]) + "\n" for code, levels in mapping.items()))


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
    batch = ["SELECT COUNT(*) AS n FROM p", "SELECT state, COUNT(*) AS n FROM p GROUP BY state",
             "SELECT state, county, COUNT(*) AS n FROM p GROUP BY state, county"]
    total, state, county = (r.df for r in db.batch(batch, rho=0.5))
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


def test_a_mapping_that_spells_the_prefixes_compiles_as_the_prefixes_do():
    """The same levels, given by prefix lengths or by the mapping they define: the same workload
    (the same partition matrices, bit for bit), whatever the statements do with the levels."""
    from dpsql.sql import compile_batch

    codes = [f"{s:02d}{c:03d}{t:02d}" for s in range(1, 4) for c in range(1, 2 + s) for t in range(1, 3)]

    def workload(levels: object, mapping: dict | None = None) -> str:
        geo = {"type": "hierarchy", "values": codes, "levels": levels} | ({"codes": mapping} if mapping else {})
        sex = {"type": "categorical", "values": ["F", "M"]}
        schema = load_schema({"table": "p", "columns": {"geo": geo, "sex": sex}})
        batch = ["SELECT state, sex, COUNT(*) FROM p GROUP BY state, sex",
                 "SELECT state, county, COUNT(*) FROM p WHERE county <> '01001' GROUP BY state, county",
                 "WITH c AS (SELECT county, sex FROM p) SELECT county, COUNT(*) FROM c WHERE sex = 'F' GROUP BY county",
                 "SELECT CASE WHEN state = '02' THEN 'two' ELSE 'other' END AS s, COUNT(*) FROM p GROUP BY s"]
        return compile_batch(batch, schema).workload.fingerprint()

    prefix = workload({"state": 2, "county": 5})
    assert workload(["state", "county"], {c: [c[:2], c[:5]] for c in codes}) == prefix
    assert workload(["state", "county"], {c: ["01", c[:5]] for c in codes}) != prefix  # one state: another tree


def test_codes_from_a_csv_file_relative_to_the_schema_file(tmp_path):
    mapping = _mapping(0)
    (tmp_path / "geo").mkdir()
    _csv(tmp_path / "geo" / "codes.csv", mapping, "geo,state,county")
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
    _csv(tmp_path / "codes.csv", mapping, "tract,state,county")
    with pytest.raises(SchemaError, match=r"columns\.geo\.codes: .*codes\.csv: the header must be geo,state,county"):
        load_schema(_schema(mapping, str(tmp_path / "codes.csv")))
    with pytest.raises(SchemaError, match=r"columns\.geo\.codes: .*no such file"):
        load_schema(_schema(mapping, str(tmp_path / "missing.csv")))
    (tmp_path / "twice.csv").write_text("geo,state,county\nA-x-1,S0,K0\nA-x-1,S0,K0\n")
    with pytest.raises(SchemaError, match=r"columns\.geo\.codes: .*line 3: code 'A-x-1' is mapped twice"):
        load_schema(_schema({"A-x-1": ["S0", "K0"]}, str(tmp_path / "twice.csv")))
    (tmp_path / "empty.csv").write_text("geo,state,county\n")
    with pytest.raises(SchemaError, match=r"columns\.geo\.codes: maps no code"):
        load_schema({"table": "p", "columns": {"geo": {"type": "hierarchy", "levels": ["state", "county"],
                                                       "codes": str(tmp_path / "empty.csv")}}})
    spec = _schema(mapping)
    spec["columns"]["geo"]["levels"] = {"state": 1}
    with pytest.raises(SchemaError, match=r"columns\.geo\.levels: with 'codes', must list the levels' names"):
        load_schema(spec)


def test_the_docs_example_runs(capsys):
    text = (Path(__file__).resolve().parent.parent / "docs" / "census.md").read_text()
    code = re.search(r"## Levels given by a mapping\n.*?```python\n(.*?)```", text, re.S).group(1)
    exec(compile(code, "docs/census.md", "exec"), {})
    assert "06037" in capsys.readouterr().out
