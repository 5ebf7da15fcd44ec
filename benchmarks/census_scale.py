"""Census scale through the public API: redistricting and SF1 tables at nation, state, county and tract
as one ``db.batch`` release.

Generates persons over 51 states, 3,142 counties of heavy-tailed (log-normal) sizes and about 85,000
tracts (each about the same population, as tracts are drawn), with race (63 combinations, skewed),
Hispanic origin, voting age, sex and 23 age groups, into DuckDB (``--parquet``: a Parquet file read
by DuckDB). A ``hierarchy`` column ``geo`` holds each person's tract code (``SSCCCTTTTTT``) with levels
state (2), county (5) and tract (11). ``dpsql.connect`` opens it with that schema and a zCDP budget,
and ONE ``db.batch`` at the stated ρ releases:

* the redistricting tables -- total, race × Hispanic (63 × 2), voting age -- at nation, state, county
  and tract (12 statements);
* the SF1 tables at county: sex by age (P12-like, 2 × 23) and race by Hispanic (P5-like: the county
  redistricting table above).

Reported per level: RMSE and mean absolute error of total population, measured and expected (from the
release's standard errors); beside it the per-level baseline: each level's three tables measured on
their own (one ``db.batch`` per level, on a separate ledger) with an equal share ρ/4 of the same ρ and
no estimation across levels (the Noisy Measurement File without post-processing). Also: whether every level adds up bit for bit (``math.fsum`` of the children equals the
parent) and every table of a level to its total population; the time of each phase (selection;
measurement, of which DuckDB's counting; estimation; the rest), plain DuckDB's GROUP BYs of the same
statements in the same run, and peak memory. At full geography one product over every attribute
would count 85,000 tracts × 63 × 2 × 2 × 2 × 23 cells; OPT_H+ measures each table with the
geography on its own and reconciles them (:mod:`dpsql.hdmm.optimize.hierplus`).

    python benchmarks/census_scale.py                                  # 10^7 rows, the full geography
    python benchmarks/census_scale.py --rows 100000000                 # 10^8 rows
    python benchmarks/census_scale.py --fraction 0.02 --rows 200000    # a small run, about a minute
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import sys
import tempfile
import time

import duckdb
import numpy as np
import pandas as pd

import dpsql
import dpsql.engine.engine as engine_module
from dpsql.private.kernel import PrivateTable

RACES, AGES = 63, 23
ADULT = 7  # age groups 7..22 are 18 and over (0-4, 5-9, 10-14, 15-17 ... as SF1 P12 splits them)
LEVELS = ("nation", "state", "county", "tract")
KEYS = {"nation": "", "state": "state", "county": "county", "tract": "tract"}


def geography(states: int, counties: int, tracts: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Each tract's state and county: county populations log-normal (σ = 1.6, heavy-tailed as U.S.
    counties are), states' numbers of counties too, each state and county at least one of its parts."""
    per_state = allocate(rng.lognormal(0, 0.8, states), counties)
    county_state = np.repeat(np.arange(states), per_state)
    county = np.repeat(np.arange(counties), allocate(rng.lognormal(0, 1.6, counties), tracts))
    return county_state[county], county


def allocate(weights: np.ndarray, total: int) -> np.ndarray:
    """``total`` parts among ``weights``: one each, the rest in proportion (largest remainders)."""
    share = weights / weights.sum() * (total - weights.size)
    out = np.floor(share).astype(int)
    out[np.argsort(out - share)[:total - weights.size - out.sum()]] += 1
    return out + 1


def codes(state: np.ndarray, county: np.ndarray) -> list[str]:
    """Tract codes SSCCCTTTTTT: state, county within state, tract within county."""
    first_county = np.searchsorted(county, county, side="left")
    first_of_state = {}
    for c, s in zip(county, state):
        first_of_state.setdefault(s, c)
    out = []
    for i, (s, c) in enumerate(zip(state, county)):
        out.append(f"{s + 1:02d}{c - first_of_state[s] + 1:03d}{i - first_county[i] + 1:06d}")
    return out


def people(rows: int, tracts: list[str], tract_weights: np.ndarray, rng: np.random.Generator) -> pd.DataFrame:
    race_p = np.r_[0.6, 0.13, 0.06, 0.05, 0.03, np.full(RACES - 5, 0.13 / (RACES - 5))]
    age = rng.choice(AGES, rows).astype(np.int8)
    return pd.DataFrame({"geo": pd.Categorical.from_codes(rng.choice(len(tracts), rows, p=tract_weights),
                                                          categories=tracts),
                         "race": rng.choice(RACES, rows, p=race_p / race_p.sum()).astype(np.int8),
                         "hisp": (rng.random(rows) < 0.19).astype(np.int8),
                         "va": (age >= ADULT).astype(np.int8),
                         "sex": (rng.random(rows) < 0.5).astype(np.int8),
                         "age": age})


def schema(tracts: list[str]) -> dict:
    return {"table": "persons", "columns": {
        "geo": {"type": "hierarchy", "values": tracts, "levels": {"state": 2, "county": 5, "tract": 11}},
        "race": {"type": "integer", "min": 0, "max": RACES - 1},
        "hisp": {"type": "integer", "min": 0, "max": 1},
        "va": {"type": "integer", "min": 0, "max": 1},
        "sex": {"type": "integer", "min": 0, "max": 1},
        "age": {"type": "integer", "min": 0, "max": AGES - 1}}}


def statements() -> list[str]:
    """The batch: the 12 redistricting statements (3 tables at 4 levels), then SF1 sex by age at county
    (the SF1 race by Hispanic at county is the county redistricting statement)."""
    out = []
    for level in LEVELS:
        key = KEYS[level]
        for detail in ("", "race, hisp", "va"):
            keys = ", ".join(k for k in (key, detail) if k)
            out.append(f"SELECT {keys + ', ' if keys else ''}COUNT(*) AS n FROM persons"
                       + (f" GROUP BY {keys}" if keys else ""))
    out.append("SELECT county, sex, age, COUNT(*) AS n FROM persons GROUP BY county, sex, age")
    return out


def plain(sql: str) -> str:
    """A statement as plain DuckDB SQL (the levels as prefixes of the code)."""
    for name, length in (("tract", 11), ("county", 5), ("state", 2)):
        sql = sql.replace(name, f"substr(geo, 1, {length})" if length < 11 else "geo")
    return sql.replace("GROUP BY", "GROUP BY ALL --")


def timed(module: object, name: str) -> list[float]:
    """Wrap ``module.name`` so that its time is added up in the returned one-element list (the
    engine's phases: its least-squares estimate)."""
    f, total = getattr(module, name), [0.0]

    def wrapper(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            total[0] += time.perf_counter() - t0

    setattr(module, name, wrapper)
    return total


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--fraction", type=float, default=1.0, help="scale the numbers of counties and tracts")
    p.add_argument("--rho", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--parquet", action="store_true", help="write the persons to Parquet and read them from there")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--no-sf1", action="store_true", help="leave SF1 sex by age at county out of the batch")
    p.add_argument("--no-snapshot", action="store_true",
                   help="count from the table itself on every request, not from the owner's indexed snapshot")
    a = p.parse_args(argv)
    rng = np.random.default_rng(a.seed)
    out: dict = {"rows": a.rows, "rho": a.rho, "seconds": {}, "load_average": os.getloadavg()}
    sec = out["seconds"]
    t_all = time.perf_counter()

    state, county = geography(51, max(51, round(3142 * a.fraction)), max(102, round(85_000 * a.fraction)), rng)
    tracts = codes(state, county)
    weights = rng.lognormal(0, 0.3, len(tracts))
    t0 = time.perf_counter()
    con = duckdb.connect()
    con.execute(f"SET threads = {a.threads}")
    df = people(a.rows, tracts, weights / weights.sum(), rng)
    con.register("persons_df", df)
    tmp = tempfile.TemporaryDirectory()
    if a.parquet:
        path = os.path.join(tmp.name, "persons.parquet")
        con.execute(f"COPY (SELECT geo::VARCHAR AS geo, * EXCLUDE (geo) FROM persons_df) TO '{path}'")
        con.execute(f"CREATE VIEW persons AS SELECT * FROM read_parquet('{path}')")
    else:
        con.execute("CREATE TABLE persons AS SELECT geo::VARCHAR AS geo, * EXCLUDE (geo) FROM persons_df")
    con.unregister("persons_df")
    del df
    sec["generate"] = time.perf_counter() - t0
    out.update(states=51, counties=int(county.max()) + 1, tracts=len(tracts))

    sqls = statements()[:12] if a.no_sf1 else statements()
    t0 = time.perf_counter()
    truth = [con.sql(plain(s)).df() for s in sqls]
    sec["plain_duckdb_group_bys"] = time.perf_counter() - t0

    ledger = os.path.join(tmp.name, "release.ledger")
    t0 = time.perf_counter()
    db = dpsql.connect(con, schema=schema(tracts), budget=dpsql.Budget(rho=a.rho), ledger=ledger, cache=False,
                       progress=False, snapshot=not a.no_snapshot)
    sec["connect_and_snapshot"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan = db.explain(sqls, rho=a.rho)
    sec["selection"] = time.perf_counter() - t0
    estimation = timed(engine_module, "least_squares")
    measurement, counting = timed(PrivateTable, "measure"), timed(PrivateTable, "_read")
    t0 = time.perf_counter()
    results = db.batch(sqls, rho=a.rho)
    sec["release"] = time.perf_counter() - t0
    sec["estimation"] = estimation[0]
    sec["measurement"] = measurement[0]  # the kernel: counting in DuckDB, noise, the ledger's record
    sec["counting"] = counting[0]        # of which DuckDB's counting query
    sec["rest"] = sec["release"] - estimation[0] - measurement[0]  # compiling, error analysis, result tables
    out["counting_to_plain_duckdb"] = counting[0] / sec["plain_duckdb_group_bys"]
    out["operator"] = results[0].release.operator
    out["expected_rmse_all_answers"] = results[0].release.rmse
    del plan

    # the per-level baseline: each level's three tables measured on their own, with an equal share of
    # the same rho, no estimation across levels (a fresh ledger: the same data, a separate budget)
    base_db = dpsql.connect(con, schema=schema(tracts), budget=dpsql.Budget(rho=a.rho),
                            ledger=os.path.join(tmp.name, "baseline.ledger"), cache=False, progress=False,
                            snapshot=not a.no_snapshot)
    t0 = time.perf_counter()
    baseline = [base_db.batch(sqls[3 * li:3 * li + 3], rho=a.rho / len(LEVELS))[0].df for li in range(len(LEVELS))]
    sec["baseline_releases"] = time.perf_counter() - t0

    levels: dict = {}
    frames = [r.df for r in results]
    for li, level in enumerate(LEVELS):
        levels[level] = {**errors(frames[3 * li], truth[3 * li], KEYS[level]),
                         **{f"baseline_{k}": v for k, v in errors(baseline[li], truth[3 * li], KEYS[level]).items()
                            if k != "nodes"}}
        levels[level]["ratio_rmse_to_baseline"] = levels[level]["rmse"] / levels[level]["baseline_rmse"]
    out["levels_add_up_bit_for_bit"] = adds_up(frames[0], frames[3], frames[6], frames[9])
    out["tables_add_up_bit_for_bit"] = tables_add_up(frames)
    out["levels"] = levels
    out["peak_memory_gb"] = peak_gb()
    sec["total"] = time.perf_counter() - t_all
    json.dump(out, sys.stdout, indent=1)
    print()
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


def errors(got: pd.DataFrame, want: pd.DataFrame, key: str) -> dict:
    """RMSE and mean absolute error of a level's totals, measured and expected (its standard errors)."""
    if key:
        got = got.merge(want.rename(columns={want.columns[0]: key, "n": "true"}), on=key)
    else:
        got = got.assign(true=float(want["n"].iloc[0]))
    err = got["n"] - got["true"]
    return {"nodes": len(got), "rmse": float(np.sqrt(np.mean(err**2))),
            "expected_rmse": float(np.sqrt(np.mean(got["std_error"] ** 2))), "mae": float(np.mean(np.abs(err))),
            "expected_mae": float(np.mean(got["std_error"])) * math.sqrt(2 / math.pi)}


def tables_add_up(frames: list[pd.DataFrame]) -> bool:
    """Whether every table of a level sums, by ``math.fsum``, to that level's total population: race by
    Hispanic origin and voting age at every level, and SF1 sex by age at county (when in the batch)."""
    ok = True
    for li, level in enumerate(LEVELS):
        key = KEYS[level]
        totals = frames[3 * li].set_index(key)["n"] if key else frames[3 * li]["n"].iloc[0]
        tables = [frames[3 * li + 1], frames[3 * li + 2]] + (frames[12:] if level == "county" else [])
        for table in tables:
            if not key:
                ok &= math.fsum(table["n"].tolist()) == float(totals)
                continue
            sums = table.groupby(key)["n"].apply(lambda s: math.fsum(s.tolist()))
            ok &= bool((totals.reindex(sums.index) == sums).all())
    return ok


def adds_up(nation: pd.DataFrame, state: pd.DataFrame, county: pd.DataFrame, tract: pd.DataFrame) -> bool:
    """Whether every parent's total is ``math.fsum`` of its children's, bit for bit."""
    county = county.assign(state=county["county"].str[:2])
    tract = tract.assign(county=tract["tract"].str[:5])
    ok = math.fsum(state["n"].tolist()) == float(nation["n"].iloc[0])
    for parents, children, key in ((state, county, "state"), (county, tract, "county")):
        sums = children.groupby(key)["n"].apply(lambda s: math.fsum(s.tolist()))
        ok &= bool((parents.set_index(key)["n"] == sums.reindex(parents[key])).all())
    return ok


if __name__ == "__main__":
    sys.exit(main())
