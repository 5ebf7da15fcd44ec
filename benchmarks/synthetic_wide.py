"""Synthetic tables of wide tables: what a user gets with no workload, and with every pair.

A table of ``d`` columns (2, 3 and 5 values in turn, or ``--sizes``) is drawn as a chain: each column copies the
previous one's value (modulo its size) in 70% of rows and is uniform in the rest, so every
relation worth keeping is between neighbours. For each ``d`` the script runs

* ``default``: ``db.synthesize(epsilon=..., delta=1/n^2)`` with no workload (aim over every
  triple while aim's candidates are few enough, else pgm over every pair: docs/synthetic.md), and
* ``pairs``: pgm with ``workload=2`` (when the default was not that already), and, asked for,
* ``mst``: mst with ``workload=2`` (when the default was not that already),

and prints the method that ran, its seconds, the plan's estimate, and the mean total variation
distance over 64 random triples against the same error of a baseline measured in the same run:
**independent** columns drawn from the exact one-way marginals (non-private: what a model that
learnt no relation at best reaches). ``TV/indep`` below 1 is what the relations learnt are worth.

    python benchmarks/synthetic_wide.py                       # 30, 40, 60 and 80 columns
    python benchmarks/synthetic_wide.py --columns 40 --rows 50000 --epsilon 0.1
    python benchmarks/synthetic_wide.py --columns 30 --sizes 5 10 20 --requests default
    python benchmarks/synthetic_wide.py --columns 8 24 40 --pure      # a pure epsilon: Laplace noise

Generated in memory: no data set is read or written.
"""

from __future__ import annotations

import argparse
import time
import warnings

import duckdb
import numpy as np
import pandas as pd

import dpsql
from dpsql import Budget

SIZES = (2, 3, 5)


def chain(d: int, n: int, seed: int, sizes: tuple[int, ...] = SIZES) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    cols = [rng.integers(0, sizes[0], n)]
    for i in range(1, d):
        size = sizes[i % len(sizes)]
        cols.append(np.where(rng.random(n) < 0.3, rng.integers(0, size, n), cols[-1] % size))
    return pd.DataFrame({f"c{i:02d}": c for i, c in enumerate(cols)})


def mean_tv(real: pd.DataFrame, synth: pd.DataFrame, triples: list[list[str]]) -> float:
    out = []
    for t in triples:
        a = real.groupby(t).size() / len(real)
        b = synth.groupby(t).size() / max(len(synth), 1)
        out.append(0.5 * a.sub(b, fill_value=0).abs().sum())
    return float(np.mean(out))


def independent(real: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    return pd.DataFrame({c: rng.choice(real[c].to_numpy(), len(real)) for c in real.columns})


def run(d: int, n: int, epsilon: float, seed: int, sizes: tuple[int, ...] = SIZES,
        requests: tuple[str, ...] = ("default", "pairs"), pure: bool = False) -> list[dict]:
    frame = chain(d, n, seed, sizes)
    con = duckdb.connect()
    con.register("frame", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    schema = {"table": "t", "columns": {c: {"type": "integer", "min": 0, "max": sizes[i % len(sizes)] - 1}
                                        for i, c in enumerate(frame.columns)}}
    rng = np.random.default_rng(seed + 1)
    triples = [sorted(rng.choice(frame.columns, 3, replace=False)) for _ in range(64)]
    baseline = mean_tv(frame, independent(frame, rng), triples)
    rows: list[dict] = []
    for label, method, workload in (("default", "pgm", None), ("pairs", "pgm", 2), ("mst", "mst", 2)):
        if label not in requests or label != "default" and rows and rows[0]["method"] == method:
            continue  # not asked for, or the default ran it already
        db = dpsql.connect(con, schema=schema, budget=Budget(epsilon=10 * epsilon, delta=1e-3), cache=False,
                           progress=False)
        start = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                syn = db.synthesize(method, workload=workload, epsilon=epsilon, delta=None if pure else 1.0 / n**2,
                                    name=f"s_{label}", seed=seed)
            except dpsql.Error as e:
                rows.append({"columns": d, "run": label, "method": "refused", "seconds": time.perf_counter() - start,
                             "estimate": str(e)[:120], "tv": float("nan"), "indep": baseline})
                continue
        rows.append({"columns": d, "run": label, "method": syn.method, "seconds": time.perf_counter() - start,
                     "estimate": str(syn.report.attrs.get("estimate", ""))[:120],
                     "tv": mean_tv(frame, syn.df, triples), "indep": baseline})
        print(_line(rows[-1]), flush=True)
        for w in caught:
            print(f"{'':>9}warning: {str(w.message)[:160]}", flush=True)
    return rows


def _line(r: dict) -> str:
    return (f"{r['columns']:>7}  {r['run']:>7}  {r['method']:>7}  {r['seconds']:>7.1f}  {r['tv']:>7.4f}  "
            f"{r['indep']:>7.4f}  {r['tv'] / r['indep']:>8.2f}  {r['estimate']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--columns", type=int, nargs="+", default=[30, 40, 60, 80])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="the columns' numbers of values, in turn")
    ap.add_argument("--requests", nargs="+", choices=["default", "pairs", "mst"], default=["default", "pairs"])
    ap.add_argument("--pure", action="store_true", help="a pure epsilon (delta = 0: Laplace noise) for every request")
    args = ap.parse_args()
    print(f"chain tables of {args.rows:,} rows of {', '.join(map(str, args.sizes))} values in turn, epsilon = "
          f"{args.epsilon:g}, delta = {'0' if args.pure else '1/n^2'}; mean TV over 64 random triples; indep: "
          "independent columns from the exact one-way marginals (non-private baseline)")
    print(f"{'columns':>7}  {'run':>7}  {'method':>7}  {'seconds':>7}  {'mean TV':>7}  {'indep':>7}  "
          f"{'TV/indep':>8}  estimate")
    for d in args.columns:
        run(d, args.rows, args.epsilon, args.seed, tuple(args.sizes), tuple(args.requests), args.pure)


if __name__ == "__main__":
    main()
