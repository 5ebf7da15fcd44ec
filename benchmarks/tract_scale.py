"""A large string domain: 85,000 tract codes at 10^7 rows, dpsql's counting queries against plain DuckDB.

The table: persons with a tract code ``geo`` (a ``hierarchy`` column of 85,000 codes ``SSCCCTTTTTT``,
one row in 200 a code outside the domain, one in 100 NULL), ``sex`` and ``age``, in memory, under a
case-insensitive default collation (the lookup must stay byte-exact). Timed, each the median of
``--repeats`` runs: plain DuckDB's GROUP BYs (tract, tract x sex, county); building and rendering
the owner's snapshot query; taking the snapshot (:func:`dpsql.private.measure.take_snapshot`), and
opening the table from a DuckDB file as ``dpsql serve`` does (the snapshot included); the
kernel's counting query for the same marginals (the county one a grouped attribute) read directly
from the table and from the snapshot.

    python benchmarks/tract_scale.py                  # 10^7 rows
    python benchmarks/tract_scale.py --rows 1000000
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from measure_scale import timed  # noqa: E402  (the median of repeated runs, as there)

import dpsql  # noqa: E402
from dpsql.engine.dataset import Dataset  # noqa: E402
from dpsql.private.measure import prepare_counting, snapshot_query, take_snapshot  # noqa: E402
from dpsql.schema import Attribute, load_schema  # noqa: E402

TRACTS = 85_000
PLAIN = ["SELECT geo, COUNT(*) FROM persons GROUP BY geo",
         "SELECT geo, sex, COUNT(*) FROM persons GROUP BY geo, sex",
         "SELECT substr(geo, 1, 5), COUNT(*) FROM persons GROUP BY 1"]


def tract_codes(rng: np.random.Generator) -> list[str]:
    """85,000 distinct codes: 52 states, about 3,200 counties, tracts numbered within each county."""
    county = np.sort(rng.integers(0, 3200, TRACTS))
    within = np.arange(TRACTS) - np.searchsorted(county, county)
    return [f"{c // 62:02d}{c:03d}{t:06d}" for c, t in zip(county, within)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    codes = tract_codes(np.random.default_rng(0))
    spec = {"table": "persons", "columns": {
        "geo": {"type": "hierarchy", "values": codes, "levels": {"state": 2, "county": 5, "tract": 11}},
        "sex": {"type": "categorical", "values": ["F", "M"]},
        "age": {"type": "integer", "min": 0, "max": 115}}}
    schema = load_schema(spec)
    con = duckdb.connect()
    con.execute("SET default_collation = 'nocase'")
    con.execute("CREATE TABLE codes AS SELECT * FROM (SELECT unnest($1) AS code, unnest(range($2)) AS i)",
                [codes, TRACTS])
    start = time.perf_counter()
    con.execute(f"""CREATE TABLE persons AS SELECT
        CASE WHEN r % 100 = 0 THEN NULL WHEN r % 200 = 1 THEN lower('X' || code) ELSE code END AS geo,
        CASE WHEN hash(r * 3) % 2 = 0 THEN 'F' ELSE 'M' END AS sex, (hash(r * 5) % 116)::INTEGER AS age
        FROM (SELECT range AS r, hash(range) % {TRACTS} AS i FROM range({args.rows})) JOIN codes USING (i)""")
    made = time.perf_counter() - start
    t_nocase = timed(lambda: [con.execute(s).fetchnumpy() for s in PLAIN], args.repeats)
    con.execute("SET default_collation = 'binary'")  # the reference: GROUP BYs without a collation to apply
    t_plain = timed(lambda: [con.execute(s).fetchnumpy() for s in PLAIN], args.repeats)
    con.execute("SET default_collation = 'nocase'")

    start = time.perf_counter()
    query = snapshot_query(schema, "persons", {"geo": "string", "sex": "string", "age": "int"})
    t_build = time.perf_counter() - start
    start = time.perf_counter()
    sql = query.sql("duckdb")
    t_render = time.perf_counter() - start
    start = time.perf_counter()
    snapshot = take_snapshot(con, "persons", schema)
    t_snapshot = time.perf_counter() - start

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "persons.duckdb"
        con.execute(f"ATTACH '{path}' AS file")
        con.execute("CREATE TABLE file.persons AS SELECT * FROM persons")
        con.execute("DETACH file")
        start = time.perf_counter()
        Dataset.open(str(path), schema=spec, budget=dpsql.Budget(epsilon=1.0), snapshot=True, cache=False,
                     progress=False)
        t_open = time.perf_counter() - start

    county = np.unique([c[:5] for c in codes], return_inverse=True)[1]
    geo = Attribute("geo", ("geo",), (TRACTS,))
    attributes = [geo, Attribute("sex", ("sex",), (2,)), geo.grouped(county.tolist())]
    subsets = [(0,), (0, 1), (2,)]
    start = time.perf_counter()
    direct = prepare_counting(con, "persons", schema, attributes, subsets)
    t_prepare = time.perf_counter() - start
    indexed = prepare_counting(con, "persons", schema, attributes, subsets, snapshot)
    assert all((a == b).all() for a, b in zip(direct.run(), indexed.run())), "the snapshot's counts differ"
    t_direct = timed(direct.run, args.repeats)
    t_indexed = timed(indexed.run, args.repeats)

    print(f"# python benchmarks/tract_scale.py --rows {args.rows}   ({time.strftime('%Y-%m-%d')}, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the end)")
    print(f"{args.rows:,} rows, {TRACTS:,} tract codes, generated in {made:.1f} s; snapshot query built in "
          f"{t_build:.2f} s, rendered in {t_render:.2f} s ({len(sql) / 1e6:.2f} MB of SQL)")
    print(f"{'what':62} {'s':>8} {'vs plain':>9}")
    for what, t in [("plain DuckDB: GROUP BY tract; tract, sex; county", t_plain),
                    ("the same GROUP BYs under the NOCASE default collation", t_nocase),
                    ("take_snapshot (once, at connect)", t_snapshot),
                    ("Dataset.open of the table in a DuckDB file, with its snapshot", t_open),
                    ("counting query, direct: prepare (build, render, plan)", t_prepare),
                    ("counting query, direct: run", t_direct),
                    ("counting query, from the snapshot", t_indexed)]:
        print(f"{what:62} {t:8.2f} {t / t_plain:9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
