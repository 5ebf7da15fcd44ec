"""Strategy selection for a census tabulation batch, at county and tract level, alone and four at once.

The batch (issue 41): county x sex x 6 age groups; county totals; county x race (7) x Hispanic,
over persons with a geography column of 3,142 counties or 85,000 tracts. Each copy compiles the
batch and selects a strategy from an empty cache (no strategy cache, a fresh process), under
Laplace (epsilon) and Gaussian (rho) noise, and reports the seconds of each phase, the chosen
operator and its expected RMSE per unit of noise. ``--copies 4`` starts four processes at once on
the same cores (one selection with three others running beside it). Goal: under 60 s per
selection at both levels, alone and four at once.

    python benchmarks/census_selection.py                   # county and tract, 1 and 4 copies
    python benchmarks/census_selection.py --levels county --copies 1
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LEVELS = {"county": 3142, "tract": 85_000}
AGE = ("CASE WHEN age < 18 THEN 0 WHEN age < 25 THEN 1 WHEN age < 35 THEN 2 WHEN age < 50 THEN 3 "
       "WHEN age < 65 THEN 4 ELSE 5 END")
STATEMENTS = [f"SELECT geo, sex, {AGE} AS agegrp, COUNT(*) FROM persons GROUP BY geo, sex, agegrp",
              "SELECT geo, COUNT(*) FROM persons GROUP BY geo",
              "SELECT geo, race, hispanic, COUNT(*) FROM persons GROUP BY geo, race, hispanic"]
GOAL_SECONDS = 60.0


def schema(units: int) -> dict:
    return {"table": "persons", "columns": {
        "geo": {"type": "integer", "min": 0, "max": units - 1},
        "sex": {"type": "categorical", "values": ["F", "M"]},
        "age": {"type": "integer", "min": 0, "max": 115},
        "race": {"type": "categorical", "values": ["white", "black", "aian", "asian", "nhpi", "other", "two+"]},
        "hispanic": {"type": "boolean"}}}


def one(level: str) -> dict:
    """Compile and select in this process (a fresh one: nothing cached); the timings as a dict."""
    from dpsql import compile_batch, load_schema
    from dpsql.hdmm.optimize.selector import select
    from dpsql.hdmm.optimize.threads import cores, thread_count
    from dpsql.privacy import Gaussian, Laplace

    start = time.perf_counter()
    batch = compile_batch(STATEMENTS, load_schema(schema(LEVELS[level])))
    out = {"level": level, "answers": batch.workload.num_queries, "compile_s": time.perf_counter() - start,
           "threads": thread_count(cores(), os.getloadavg()[0], 1), "load": os.getloadavg()[0]}
    for name, noise in (("laplace", Laplace(1.0)), ("gaussian", Gaussian(rho=1.0))):
        start = time.perf_counter()
        sel = select(batch.workload, noise, progress=False)
        out[name] = {"select_s": time.perf_counter() - start, "operator": sel.operator, "rmse": sel.rmse,
                     "candidates": {c.operator: [round(c.rmse, 4), round(c.seconds, 2)] for c in sel.candidates}}
    return out


def run(level: str, copies: int) -> list[dict]:
    """``copies`` fresh processes selecting at once; their reports."""
    env = dict(os.environ)
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", level], stdout=subprocess.PIPE, env=env,
                              text=True) for _ in range(copies)]
    reports = []
    for p in procs:
        stdout, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"a worker failed ({p.returncode})")
        reports.append(json.loads(stdout.strip().splitlines()[-1]))
    return reports


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", nargs="+", default=list(LEVELS), choices=list(LEVELS))
    parser.add_argument("--copies", nargs="+", type=int, default=[1, 4])
    parser.add_argument("--worker", choices=list(LEVELS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(one(args.worker)))
        return 0
    print(f"# python benchmarks/census_selection.py --levels {' '.join(args.levels)} --copies "
          f"{' '.join(map(str, args.copies))}   ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f} at start)")
    print(f"{'level':>6} {'answers':>9} {'copies':>6} {'copy':>4} {'load':>5} {'thr':>3} {'compile s':>9} | "
          f"{'laplace s':>9} {'operator':>9} {'rmse':>7} | {'gauss s':>8} {'operator':>9} {'rmse':>7}")
    worst = 0.0
    for level in args.levels:
        for copies in args.copies:
            for i, r in enumerate(run(level, copies)):
                lap, gau = r["laplace"], r["gaussian"]
                worst = max(worst, lap["select_s"], gau["select_s"])
                print(f"{level:>6} {r['answers']:>9,} {copies:>6} {i + 1:>4} {r['load']:>5.1f} {r['threads']:>3} "
                      f"{r['compile_s']:>9.1f} | {lap['select_s']:>9.1f} {lap['operator']:>9} {lap['rmse']:>7.3f} | "
                      f"{gau['select_s']:>8.1f} {gau['operator']:>9} {gau['rmse']:>7.3f}", flush=True)
                print(f"{'':>6} candidates (rmse, s): laplace {lap['candidates']}; gaussian {gau['candidates']}",
                      flush=True)
    print(f"\nslowest selection: {worst:.1f} s; goal: under {GOAL_SECONDS:.0f} s at county and tract level, "
          "alone and with three other copies at once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
