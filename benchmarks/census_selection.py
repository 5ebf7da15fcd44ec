"""Strategy selection for a census tabulation batch, at county and tract level, alone and four at once.

The batch (issue 41): county x sex x 6 age groups; county totals; county x race (7) x Hispanic,
over persons with a geography column of 3,142 counties or 85,000 tracts. Each copy is a fresh
process (nothing cached) that times each phase of a request apart: compiling the batch, the
workload's fingerprint (the strategy memo's key), selecting a strategy under Laplace (epsilon)
and Gaussian (rho) noise, and the error analysis of the chosen one (expected RMSE and every
answer's variance); then the whole request end to end, ``db.explain`` on a new connection with an
empty strategy cache (compile, fingerprint, selection of both noises, standard errors, the
tables). ``--copies 4`` starts four processes at once on the same cores (one request with three
others running beside it). Goal: under 60 s per request at both levels, alone and four at once.

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
    """Each phase of one request in this process (a fresh one: nothing cached); the timings as a dict."""
    import tempfile

    import duckdb

    import dpsql
    from dpsql import compile_batch, load_schema
    from dpsql.hdmm.error_analysis import query_variances, rmse
    from dpsql.hdmm.optimize.selector import select
    from dpsql.hdmm.optimize.threads import cores, thread_count
    from dpsql.privacy import Gaussian, Laplace

    out: dict = {"level": level, "load": os.getloadavg()[0], "threads": thread_count(cores(), os.getloadavg()[0], 1)}
    start = time.perf_counter()
    batch = compile_batch(STATEMENTS, load_schema(schema(LEVELS[level])))
    W = batch.workload
    out.update(answers=W.num_queries, compile_s=time.perf_counter() - start)
    start = time.perf_counter()
    W.fingerprint()
    out["fingerprint_s"] = time.perf_counter() - start
    for name, noise in (("laplace", Laplace(1.0)), ("gaussian", Gaussian(rho=1.0))):
        start = time.perf_counter()
        sel = select(W, noise, progress=False)
        selected = time.perf_counter() - start
        start = time.perf_counter()
        error = rmse(W, sel.strategy, noise)
        query_variances(W, sel.strategy, noise)
        out[name] = {"select_s": selected, "errors_s": time.perf_counter() - start, "operator": sel.operator,
                     "rmse": error,
                     "candidates": {c.operator: [round(c.rmse, 4), round(c.seconds, 2)] for c in sel.candidates}}
    con = duckdb.connect()
    con.execute("CREATE TABLE persons (geo INTEGER, sex VARCHAR, age INTEGER, race VARCHAR, hispanic BOOLEAN)")
    with tempfile.TemporaryDirectory() as cache:
        db = dpsql.connect(con, schema=schema(LEVELS[level]), budget=dpsql.Budget(epsilon=10.0, delta=1e-6),
                           cache=cache, progress=False)
        start = time.perf_counter()
        plan = db.explain(STATEMENTS, epsilon=1.0)
        out["explain_s"] = time.perf_counter() - start
        out["explain_noise"] = f"{plan.mechanism} {plan.operator}"
    out["load_end"] = os.getloadavg()[0]
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
    print(f"{'level':>6} {'answers':>9} {'copies':>6} {'copy':>4} {'load':>9} {'thr':>3} {'compile':>7} "
          f"{'fprint':>6} | {'laplace':>7} {'errors':>6} {'operator':>9} {'rmse':>6} | {'gauss':>6} {'errors':>6} "
          f"{'operator':>9} {'rmse':>6} | {'explain':>7}")
    worst = 0.0
    for level in args.levels:
        for copies in args.copies:
            for i, r in enumerate(run(level, copies)):
                lap, gau = r["laplace"], r["gaussian"]
                worst = max(worst, r["explain_s"], r["compile_s"] + r["fingerprint_s"] + lap["select_s"]
                            + lap["errors_s"], r["compile_s"] + r["fingerprint_s"] + gau["select_s"] + gau["errors_s"])
                print(f"{level:>6} {r['answers']:>9,} {copies:>6} {i + 1:>4} {r['load']:>4.1f}-{r['load_end']:<4.1f} "
                      f"{r['threads']:>3} {r['compile_s']:>7.2f} {r['fingerprint_s']:>6.3f} | {lap['select_s']:>7.2f} "
                      f"{lap['errors_s']:>6.2f} {lap['operator']:>9} {lap['rmse']:>6.3f} | {gau['select_s']:>6.2f} "
                      f"{gau['errors_s']:>6.2f} {gau['operator']:>9} {gau['rmse']:>6.3f} | {r['explain_s']:>7.2f}",
                      flush=True)
                print(f"{'':>6} candidates (rmse, s): laplace {lap['candidates']}; gaussian {gau['candidates']}; "
                      f"explain chose {r['explain_noise']}", flush=True)
    print(f"\nseconds; load: the one-minute load average at a copy's start and end. Slowest request: {worst:.1f} s "
          f"(compile + fingerprint + selection + error analysis, or explain end to end); goal: under "
          f"{GOAL_SECONDS:.0f} s at county and tract level, alone and with three other copies at once")
    return 0


if __name__ == "__main__":
    sys.exit(main())
