"""Measuring a census batch at 10^7 rows (10^8 with ``--rows``): dpsql against plain DuckDB.

The table: persons with a county (3,142), sex, age, race (7) and Hispanic, in a DuckDB file, read
as ``dpsql.connect`` reads a file. The batch (issue 41): county x sex x 6 age groups; county
totals; county x race x Hispanic. Timed, each the median of ``--repeats`` runs:

* plain DuckDB: the batch's three GROUP BYs on the file's table;
* the counting query the kernel runs for the batch's strategy (its marginals, one scan), read
  directly from the table (each value checked against its domain and mapped to its index on
  every request) and from the owner's snapshot (:func:`dpsql.private.measure.take_snapshot`,
  taken once at connect, its time reported apart);
* the whole measurement in the kernel (the count, then noise for every cell) and the whole
  request through ``db.batch`` (compile, cached strategy, measurement, reconstruction, answers).

Goal (issue 41): measuring a batch costs at most 2x the same GROUP BYs in plain DuckDB.

    python benchmarks/measure_scale.py                    # 10^7 rows
    python benchmarks/measure_scale.py --rows 100000000   # 10^8 rows
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dpsql  # noqa: E402
from dpsql.api.connection import Connection  # noqa: E402
from dpsql.engine.dataset import Dataset  # noqa: E402
from dpsql.hdmm.strategy import Strategy  # noqa: E402
from dpsql.privacy import Laplace  # noqa: E402
from dpsql.private.budget import Cost  # noqa: E402
from dpsql.private.kernel import on_cells, required_marginals  # noqa: E402
from dpsql.private.measure import prepare_counting, take_snapshot  # noqa: E402

COUNTIES = 3142
RACES = ["white", "black", "aian", "asian", "nhpi", "other", "two+"]
SCHEMA = {"table": "persons", "columns": {
    "county": {"type": "integer", "min": 0, "max": COUNTIES - 1},
    "sex": {"type": "categorical", "values": ["F", "M"]},
    "age": {"type": "integer", "min": 0, "max": 115},
    "race": {"type": "categorical", "values": RACES},
    "hispanic": {"type": "boolean"}}}
AGE = ("CASE WHEN age < 18 THEN 0 WHEN age < 25 THEN 1 WHEN age < 35 THEN 2 WHEN age < 50 THEN 3 "
       "WHEN age < 65 THEN 4 ELSE 5 END")
BATCH = [f"SELECT county, sex, {AGE} AS agegrp, COUNT(*) AS n FROM persons GROUP BY county, sex, agegrp",
         "SELECT county, COUNT(*) AS n FROM persons GROUP BY county",
         "SELECT county, race, hispanic, COUNT(*) AS n FROM persons GROUP BY county, race, hispanic"]


def make_data(path: Path, rows: int) -> float:
    """The persons table in a DuckDB file: heavy-tailed county sizes, a few rows outside the domain."""
    start = time.perf_counter()
    con = duckdb.connect(str(path))
    races = "[" + ", ".join(f"'{r}'" for r in RACES) + "]"
    con.execute(f"""CREATE TABLE persons AS SELECT
        least({COUNTIES - 1}, floor({COUNTIES} * pow((hash(i) % 1000003) / 1000003.0, 3)))::INTEGER AS county,
        CASE WHEN hash(i * 3) % 2 = 0 THEN 'F' ELSE 'M' END AS sex,
        (hash(i * 5) % 117)::INTEGER AS age,
        {races}[1 + (hash(i * 7) % 7)::INTEGER] AS race,
        hash(i * 11) % 5 = 0 AS hispanic
        FROM range({rows}) t(i)""")
    con.close()
    return time.perf_counter() - start


def timed(fn, repeats: int) -> float:
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "persons.duckdb"
        made = make_data(path, args.rows)
        plain = duckdb.connect(str(path), read_only=True)
        t_plain = timed(lambda: [plain.execute(s).fetchnumpy() for s in BATCH], args.repeats)

        budget = dpsql.Budget(epsilon=1e9)
        start = time.perf_counter()
        db = dpsql.connect(str(path), schema=SCHEMA, budget=budget, cache=False, progress=False)
        t_connect = time.perf_counter() - start
        # the path without a snapshot, in the same process
        direct_db = Connection(Dataset.open(str(path), schema=SCHEMA, budget=budget, cache=False, progress=False,
                                            snapshot=False))
        db.batch(BATCH, epsilon=1.0)  # selects the strategy once; later requests find it
        direct_db.batch(BATCH, epsilon=1.0)

        private = db._engine._private
        compiled = dpsql.compile_batch(BATCH, db.schema)
        strategy: Strategy = db._engine._strategies.get(compiled.workload, Laplace(1.0), "total")
        counted, cells = on_cells(strategy, compiled.attributes)
        subsets = required_marginals(counted)
        con = private._con
        snapshot = private._snapshot
        direct = prepare_counting(con, "persons", db.schema, cells, subsets)
        indexed = prepare_counting(con, "persons", db.schema, cells, subsets, snapshot)
        assert all((a == b).all() for a, b in zip(direct.run(), indexed.run())), "the snapshot's counts differ"
        start = time.perf_counter()
        take_snapshot(con, "persons", db.schema)
        t_snapshot = time.perf_counter() - start
        t_direct = timed(direct.run, args.repeats)
        t_indexed = timed(indexed.run, args.repeats)
        noise, cost = Laplace(1.0), Cost.laplace(1.0, budget)
        t_measure = timed(lambda: private.measure(compiled.attributes, strategy, noise, cost), args.repeats)
        t_measure_direct = timed(lambda: direct_db._engine._private.measure(compiled.attributes, strategy, noise, cost),
                                 args.repeats)
        t_batch = timed(lambda: db.batch(BATCH, epsilon=1.0), args.repeats)
        t_batch_direct = timed(lambda: direct_db.batch(BATCH, epsilon=1.0), args.repeats)
        cells_measured = sum(int(m.size) for m in indexed.run())

    print(f"# python benchmarks/measure_scale.py --rows {args.rows}   ({time.strftime('%Y-%m-%d')}, "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the end)")
    print(f"{args.rows:,} rows generated in {made:.1f} s; strategy {strategy.operator}, marginals "
          f"{subsets} ({cells_measured:,} cells); connect with its snapshot {t_connect:.1f} s "
          f"(the snapshot alone {t_snapshot:.1f} s)")
    print(f"{'what':58} {'ms':>8} {'vs plain':>9}")
    rows = [("plain DuckDB: the batch's 3 GROUP BYs", t_plain),
            ("counting query, direct (domain check + index per request)", t_direct),
            ("counting query, from the snapshot", t_indexed),
            ("kernel measurement (count + noise), direct", t_measure_direct),
            ("kernel measurement (count + noise), from the snapshot", t_measure),
            ("db.batch end to end, direct", t_batch_direct),
            ("db.batch end to end, from the snapshot", t_batch)]
    for what, t in rows:
        print(f"{what:58} {1000 * t:8.1f} {t / t_plain:9.2f}")
    print("goal: measuring a batch <= 2x plain DuckDB's GROUP BYs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
