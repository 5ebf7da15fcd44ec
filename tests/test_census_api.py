"""A geographic hierarchy released through the public front ends: every level adds up to the last
digit (float answers) and ``integer=True`` gives non-negative integers that add up, through
``db.query``/``db.batch`` and the CLI (the server's ``SET dpsql.integer`` is in test_server.py)."""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pandas as pd
import pytest
import yaml

import dpsql
from dpsql.api.cli import main

LEVELS = ["SELECT COUNT(*) AS n FROM p",
          "SELECT state, COUNT(*) AS n FROM p GROUP BY state",
          "SELECT state, county, COUNT(*) AS n FROM p GROUP BY state, county",
          "SELECT county, tract, COUNT(*) AS n FROM p GROUP BY county, tract"]


def _codes(seed: int) -> list[str]:
    """Tract codes (state 2 digits, county 3, tract 2) of an uneven geography."""
    rng = np.random.default_rng(seed)
    return [f"{s:02d}{c:03d}{t:02d}" for s in range(1, 6) for c in range(1, rng.integers(3, 9))
            for t in range(1, rng.integers(2, 7))]


def _schema(codes: list[str]) -> dict:
    return {"table": "p", "columns": {
        "geo": {"type": "hierarchy", "values": codes, "levels": {"state": 2, "county": 5, "tract": 7}},
        "sex": {"type": "categorical", "values": ["F", "M"]}}}


def _people(codes: list[str], rows: int, seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    weights = rng.lognormal(0, 1.5, len(codes))  # some tracts nearly empty: clipping at 0 matters
    return pd.DataFrame({"geo": rng.choice(codes, rows, p=weights / weights.sum()),
                         "sex": rng.choice(["F", "M"], rows)})


def _db(seed: int, rows: int = 2_000) -> dpsql.Connection:
    codes = _codes(seed)
    con = duckdb.connect()
    con.register("people", _people(codes, rows, seed))
    con.execute("CREATE TABLE p AS SELECT * FROM people")
    return dpsql.connect(con, schema=_schema(codes), budget=dpsql.Budget(rho=100.0), cache=False, progress=False)


def _add_up(nation: pd.DataFrame, state: pd.DataFrame, county: pd.DataFrame, tract: pd.DataFrame) -> None:
    """Every parent is the sum of its children, bit for bit (``math.fsum``, the correctly rounded sum)."""
    pairs = [(nation.assign(key=""), state.assign(key=""), "key"), (state, county, "state"),
             (county, tract, "county")]
    for parents, children, key in pairs:
        assert len(parents) > 0
        for value, part in zip(parents["n"], parents[key]):
            kids = children.loc[children[key] == part, "n"].tolist()
            assert kids and math.fsum(kids) == value, (key, part, math.fsum(kids) - value)


@pytest.mark.parametrize("seed", [0, 1])
def test_float_levels_add_up_bit_for_bit(seed):
    db = _db(seed)
    results = db.batch(LEVELS, rho=0.5)
    frames = [r.df for r in results]
    assert not all(float(v).is_integer() for v in frames[3]["n"])  # real noisy estimates, not counts
    _add_up(*frames)
    # DuckDB's SUM over the released county table is the state's answer, exactly
    con = duckdb.connect()
    con.register("county", frames[2])
    con.register("state", frames[1])
    summed = con.sql("SELECT s.n AS n, SUM(c.n) AS total FROM county c JOIN state s USING (state) "
                     "GROUP BY s.state, s.n").df()
    assert len(summed) == len(frames[1]) and (summed["n"] == summed["total"]).all()


@pytest.mark.parametrize("how", ["batch", "query"])
def test_integer_answers_are_non_negative_integers_that_add_up(how):
    db = _db(2, rows=300)
    if how == "batch":
        frames = [r.df for r in db.batch(LEVELS, rho=0.05, integer=True)]
    else:  # one statement per level, each its own release: each is integer and non-negative
        frames = [db.query(sql, rho=0.05, integer=True).df for sql in LEVELS]
    for df in frames:
        assert (df["n"] >= 0).all() and (df["n"] == np.round(df["n"])).all()
    assert (frames[3]["n"] == 0).any()  # clipping at zero had work to do
    if how == "batch":  # one release: the levels add up
        _add_up(*frames)


def test_integer_on_a_flat_workload_rounds_one_fitted_vector():
    db = _db(3, rows=300)
    total, by_sex = db.batch(["SELECT COUNT(*) AS n FROM p", "SELECT sex, COUNT(*) AS n FROM p GROUP BY sex"],
                             rho=0.05, integer=True)
    assert total.release.operator != "OPT_H"
    assert (by_sex.df["n"] >= 0).all() and (by_sex.df["n"] == np.round(by_sex.df["n"])).all()
    assert by_sex.df["n"].sum() == total.df["n"].iloc[0]


def test_integer_must_be_a_boolean():
    db = _db(0, rows=50)
    with pytest.raises(dpsql.ArgumentError, match="integer must be True or False"):
        db.query(LEVELS[1], rho=0.1, integer="yes")
    assert db.spent().rho == 0


def test_cli_integer(tmp_path, capsys):
    codes = _codes(4)
    data = tmp_path / "p.parquet"
    _people(codes, 300, 4).to_parquet(data)
    schema = tmp_path / "p.yaml"
    schema.write_text(yaml.safe_dump(_schema(codes), sort_keys=False))
    out = tmp_path / "out"
    sql = tmp_path / "levels.sql"
    sql.write_text(";\n".join(LEVELS[1:3]))
    rc = main(["batch", str(sql), "--data", str(data), "--schema", str(schema), "--ledger", str(tmp_path / "l.ledger"),
               "--rho", "0.05", "--budget-rho", "1", "--integer", "--out", str(out)])
    _, err = capsys.readouterr()
    assert rc == 0, err
    files = sorted(out.glob("*.csv"))
    state, county = (pd.read_csv(f, dtype={"state": str, "county": str}) for f in files)
    for df in (state, county):
        assert (df["n"] >= 0).all() and (df["n"] == np.round(df["n"])).all()
    _add_up(pd.DataFrame({"n": [state["n"].sum()]}), state, county, county.assign(tract=county["county"]))


SPLIT = LEVELS + ["SELECT county, race, COUNT(*) AS n FROM p GROUP BY county, race",
                  "SELECT tract, race, COUNT(*) AS n FROM p GROUP BY tract, race",
                  "SELECT state, sex, age, COUNT(*) AS n FROM p GROUP BY state, sex, age"]


def _split_db(rows: int = 3_000) -> tuple[dpsql.Connection, duckdb.DuckDBPyConnection]:
    """Tables on disjoint attributes (race; sex by age) at several levels of one geography."""
    codes = _codes(5)
    schema = _schema(codes)
    schema["columns"].update({"race": {"type": "integer", "min": 0, "max": 4},
                              "age": {"type": "integer", "min": 0, "max": 5}})
    rng = np.random.default_rng(5)
    people = _people(codes, rows, 5).assign(race=rng.integers(0, 5, rows), age=rng.integers(0, 6, rows))
    con = duckdb.connect()
    con.register("people", people)
    con.execute("CREATE TABLE p AS SELECT * FROM people")
    return dpsql.connect(con, schema=schema, budget=dpsql.Budget(rho=1e9), cache=False, progress=False), con


def test_a_release_too_large_for_one_product_is_split_by_table_and_reconciled(monkeypatch):
    """With the cells one product would count over the limit (lowered here, as 85,000 tracts by every
    table's attributes are in benchmarks/census_scale.py), OPT_H+ measures each table's attributes with
    the geography on their own. Every level of every table still adds up bit for bit, and at a huge
    spend the answers are DuckDB's."""
    db, con = _split_db()
    cells = len(_codes(5)) * 5 * 2 * 6
    monkeypatch.setattr("dpsql.hdmm.optimize.selector.MAX_MEASURED_CELLS", cells - 1)
    results = db.batch(SPLIT, rho=1e8)
    assert {r.release.operator for r in results} == {"OPT_Hplus"}
    frames = [r.df for r in results]
    _add_up(*frames[:4])
    county_race, tract_race, state_sex_age = frames[4:]

    def sums(df: pd.DataFrame, keys: list[str]) -> dict:
        return {k if len(keys) > 1 else k[0]: math.fsum(g["n"].tolist()) for k, g in df.groupby(keys)}

    counties, states = frames[2].set_index("county")["n"], frames[1].set_index("state")["n"]
    assert sums(county_race, ["county"]) == counties.to_dict()           # race table = totals, exactly
    assert sums(state_sex_age, ["state"]) == states.to_dict()            # sex by age table = totals
    tract_race = tract_race.assign(county=tract_race["tract"].str[:5])
    assert sums(tract_race, ["county", "race"]) == county_race.set_index(["county", "race"])["n"].to_dict()
    exact = con.sql("SELECT substr(geo, 1, 2) AS state, sex, age, COUNT(*) AS n FROM p GROUP BY ALL").df()
    merged = state_sex_age.merge(exact, on=["state", "sex", "age"], how="left", suffixes=("", "_exact")).fillna(0)
    assert np.allclose(merged["n"], merged["n_exact"], atol=0.05)
    exact = con.sql("SELECT geo AS tract, race, COUNT(*) AS n FROM p GROUP BY ALL").df()
    merged = tract_race.merge(exact, on=["tract", "race"], how="left", suffixes=("", "_exact")).fillna(0)
    assert np.allclose(merged["n"], merged["n_exact"], atol=0.05)
    assert (results[5].df["std_error"] > 0).all()  # the tract by race table keeps its standard errors


def test_a_release_no_product_can_count_is_refused_before_anything_is_spent(monkeypatch):
    db, _ = _split_db(300)
    monkeypatch.setattr("dpsql.hdmm.optimize.selector.MAX_MEASURED_CELLS", 10)
    with pytest.raises(dpsql.ResourceLimitError, match="cells, more than the limit"):
        db.batch(SPLIT, rho=1.0)
    assert db.spent().rho == 0
