"""End-to-end benchmark: private queries on a generated census-like table.

Two measurements, each against a baseline timed or measured in the same run:

1. **Overhead.** ``db.query`` for a two-key COUNT … GROUP BY (strategy
   already cached) against the same GROUP BY in plain DuckDB. Goal: ≤ 2×.
2. **Accuracy.** The 49 SF1 person-table statements (``examples/sf1``)
   through one ``db.batch`` at ε = 1, against answering each statement on its
   own with ε / 49. The RMSE over every answer, measured against the exact
   answers over ``--reps`` repetitions, is the headline. Goal: ratio ≤ 0.5.

    python benchmarks/end_to_end.py                 # 10 million rows
    python benchmarks/end_to_end.py --rows 1000000 --reps 5 --json e2e.json

The exact answers come from the private kernel's own marginal query with
no noise (:func:`dpsql.private.measure.measure_marginals`): a benchmark-only path,
never part of a release.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import sys
import time

import duckdb
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))

from census import load_persons  # noqa: E402

import dpsql  # noqa: E402
from dpsql.hdmm.matrix import Identity  # noqa: E402
from dpsql.hdmm.strategy import KronStrategy  # noqa: E402
from dpsql.private.kernel import strategy_answers  # noqa: E402
from dpsql.private.measure import measure_marginals  # noqa: E402
from dpsql.sql import parse_statements  # noqa: E402

SF1 = os.path.join(HERE, "..", "examples", "sf1")
TWO_KEY = "SELECT sex, age, COUNT(*) AS n FROM persons GROUP BY sex, age"
EPSILON = 1.0


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def exact_answers(con, compiled) -> np.ndarray:
    """Noise-free workload answers (benchmark oracle): ``W x`` from the full histogram."""
    W = compiled.workload
    full = tuple(range(len(compiled.attributes)))
    (x,) = measure_marginals(con, "persons", compiled.schema, compiled.attributes, [full])
    identity = KronStrategy(tuple(Identity(n) for n in W.domain))
    return W.matvec(strategy_answers(identity, {full: x}))


def answers_vector(compiled, results) -> np.ndarray:
    """Every statement's aggregate values, statement by statement (no post-processing in SF1)."""
    return np.concatenate([r.df[agg.name].to_numpy(dtype=float)
                           for st, r in zip(compiled.statements, results) for agg in st.plan.aggregates])


def exact_vector(compiled, y: np.ndarray) -> np.ndarray:
    """The same layout as :func:`answers_vector`, from workload answers ``y``."""
    return np.concatenate([y[st.rows(agg.name)] for st in compiled.statements for agg in st.plan.aggregates])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the summary here")
    args = ap.parse_args()

    con = duckdb.connect()
    start = time.perf_counter()
    load_persons(con, args.rows, seed=args.seed)
    print(f"generated {args.rows:,} persons in {time.perf_counter() - start:.1f} s")
    schema = os.path.join(SF1, "persons.yaml")
    db = dpsql.connect(con, schema=schema, budget=dpsql.Budget(epsilon=1e9), progress=False)

    # 1. overhead of one private query, strategy cached
    db.query(TWO_KEY, epsilon=EPSILON)  # warm: selects and caches the strategy
    duck = _median_seconds(lambda: con.sql(TWO_KEY).fetchall(), 7)
    ours = _median_seconds(lambda: db.query(TWO_KEY, epsilon=EPSILON), 7)
    print(f"\n{'two-key COUNT GROUP BY':28} {'seconds':>9}")
    print(f"{'plain DuckDB':28} {duck:9.4f}")
    print(f"{'dpsql db.query (cached)':28} {ours:9.4f}   ratio {ours / duck:.2f}x  (goal <= 2x)")

    # 2. SF1 batch against separate answers
    files = sorted(glob.glob(os.path.join(SF1, "*.sql")))
    statements = [s for f in files for s in parse_statements(open(f).read())]
    texts = [s.sql for s in statements]
    compiled = dpsql.compile_batch(texts, schema)
    truth = exact_vector(compiled, exact_answers(con, compiled))
    start = time.perf_counter()
    results = db.batch(texts, epsilon=EPSILON, noise="laplace")
    first = time.perf_counter() - start
    print(f"\nSF1: {len(texts)} statements, {compiled.workload.num_queries} queries; "
          f"first batch (with strategy selection) {first:.1f} s, strategy {results[0].release.operator}")
    batch_sq, sep_sq = [], []
    batch_expected = results[0].rmse
    sep_expected_sq = []
    for rep in range(args.reps):
        res = db.batch(texts, epsilon=EPSILON, noise="laplace")
        batch_sq.append(np.mean((answers_vector(compiled, res) - truth) ** 2))
        sep = [db.query(t, epsilon=EPSILON / len(texts), noise="laplace") for t in texts]
        sep_sq.append(np.mean((answers_vector(compiled, sep) - truth) ** 2))
        if rep == 0:
            sep_expected_sq = [r.rmse**2 * r.release.queries for r in sep]
        print(f"  rep {rep + 1:2d}/{args.reps}: batch RMSE {math.sqrt(batch_sq[-1]):8.3f}   "
              f"separate RMSE {math.sqrt(sep_sq[-1]):8.3f}", flush=True)
    batch_rmse = math.sqrt(np.mean(batch_sq))
    separate_rmse = math.sqrt(np.mean(sep_sq))
    separate_expected = math.sqrt(sum(sep_expected_sq) / compiled.workload.num_queries)
    print(f"\n{'SF1 at epsilon = 1':28} {'measured RMSE':>14} {'expected RMSE':>14}")
    print(f"{'one joint db.batch':28} {batch_rmse:14.3f} {batch_expected:14.3f}")
    print(f"{'each statement alone':28} {separate_rmse:14.3f} {separate_expected:14.3f}")
    print(f"{'ratio (goal <= 0.5)':28} {batch_rmse / separate_rmse:14.3f}")
    print("published (HDMM Table 6, SF1, Laplace, OPT_kron): 7.30 expected RMSE at epsilon = 1")

    summary = {
        "rows": args.rows,
        "query_seconds": ours,
        "duckdb_seconds": duck,
        "overhead_ratio": ours / duck,
        "batch_rmse": batch_rmse,
        "separate_rmse": separate_rmse,
        "batch_rmse_ratio": batch_rmse / separate_rmse,
    }
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=2)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
