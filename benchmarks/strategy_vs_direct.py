"""Is the selected strategy ever worse than the obvious mechanism? And what does ``objective="max"`` buy?

Part 1. A seeded generator writes single- and multi-statement COUNT batches
(CASE buckets on numeric columns, ranges, IN filters, mixed GROUP BYs) over a
10-column census-like schema; each is compiled by dpsql into its workload.
For each batch and each noise model (Laplace ε = 1; Gaussian ε = 1, δ = 1e-6)
it compares the expected RMSE of the selected strategy with three baselines
measured in the same run:

* ``direct``: each statement's own queries measured as they are (one
  Kronecker part per distinct term, budget split optimally), sensitivity 1 for
  a single GROUP BY;
* ``identity``: every cell of the workload-reduced domain counted once;
* ``hdmm``: HDMM's operators (OPT_0/OPT_⊗, OPT_+, OPT_M) on the unreduced
  domain, which is what selection did before domain reduction.

Every ratio ``selected / best baseline`` must be ≤ 1.00. It is by
construction against ``direct`` and ``identity`` (both are candidates).
Against unreduced HDMM the Gaussian searches can differ by their own
tolerance: each per-attribute optimum is certified to a relative duality gap
of 1e-4 of the variance (``default_rtol``), so two runs near the same optimum
may differ by up to that; the count within that gap is printed beside the
count within exactly 1.00, and the verdict allows it. The Laplace searches are
local, and with the restarts ``db.query`` uses (3) every Laplace ratio is
within exactly 1.00.
The script prints the distribution of the gain ``best baseline / selected``
and of the ratio to each baseline, and the batches with the smallest gain.

Part 2. The largest per-query variance with ``objective="max"`` against the
total-variance strategy, on HDMM's CPS, Adult (3-way) and Loans marginal
workloads (``workloads.py``), under both noise models. The anchor:
ResidualPlanner (Xiao et al., NeurIPS 2023) reports a max variance 24× below
HDMM's total-variance strategy on Adult 3-way marginals.

    python benchmarks/strategy_vs_direct.py               # 200 batches, both parts
    python benchmarks/strategy_vs_direct.py --batches 40  # a quick look
    python benchmarks/strategy_vs_direct.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import workloads as B  # noqa: E402

from dpsql import compile_batch  # noqa: E402
from dpsql.hdmm.optimize import select  # noqa: E402
from dpsql.hdmm.optimize.gaussian import default_rtol  # noqa: E402
from dpsql.hdmm.optimize.selector import feasible  # noqa: E402
from dpsql.privacy import Gaussian, Laplace  # noqa: E402

NOISES = {"laplace": Laplace(1.0), "gaussian": Gaussian(1.0, 1e-6)}
#: How far above 1 a ratio to unreduced HDMM may be: the Gaussian per-attribute optimum is
#: certified to a relative gap of default_rtol of the variance (every attribute here is small).
TOLERANCE = {"laplace": 0.0, "gaussian": math.sqrt(1.0 + default_rtol(1)) - 1.0}
HDMM_OPERATORS = ("OPT_0", "OPT_kron", "OPT_plus", "OPT_M")

CATEGORIES = {
    "sex": ["Female", "Male"],
    "race": ["White", "Black", "Asian", "AIAN", "NHPI", "Other"],
    "education": [f"e{i}" for i in range(16)],
    "marital": ["Married", "Divorced", "Separated", "Widowed", "Never", "Spouse absent", "AF spouse"],
    "occupation": [f"o{i}" for i in range(14)],
    "region": ["NE", "MW", "S", "W", "PR"],
    "income": ["<=50K", ">50K"],
}
NUMERIC = {"age": (0, 99), "hours": (1, 99), "weeks": (0, 52)}
SCHEMA = {"table": "census", "columns": {
    **{c: {"type": "integer", "min": lo, "max": hi} for c, (lo, hi) in NUMERIC.items()},
    **{c: {"type": "categorical", "values": v} for c, v in CATEGORIES.items()}}}


class Generator:
    """Random COUNT statements in the styles analysts write."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def bucket(self) -> tuple[str, str]:
        """A CASE on a numeric column with 2–4 buckets, and its alias."""
        col = self.pick(list(NUMERIC))
        lo, hi = NUMERIC[col]
        cuts = sorted(set(int(c) for c in self.rng.integers(lo + 1, hi, int(self.rng.integers(1, 4)))))
        whens = " ".join(f"WHEN {col} < {c} THEN 'b{i}'" for i, c in enumerate(cuts))
        return f"CASE {whens} ELSE 'b{len(cuts)}' END", f"{col}_bucket"

    def condition(self) -> str:
        kind = self.pick(["range", "at_least", "in", "equal"])
        if kind in ("range", "at_least"):
            col = self.pick(list(NUMERIC))
            lo, hi = NUMERIC[col]
            a, b = sorted(int(v) for v in self.rng.integers(lo, hi + 1, 2))
            return f"{col} BETWEEN {a} AND {b}" if kind == "range" else f"{col} >= {a}"
        col = self.pick(list(CATEGORIES))
        values = CATEGORIES[col]
        if kind == "equal":
            return f"{col} = '{self.pick(values)}'"
        chosen = self.rng.choice(values, size=int(self.rng.integers(1, len(values))), replace=False)
        return f"{col} IN ({', '.join(repr(str(v)) for v in chosen)})"

    def statement(self) -> str:
        keys, names = [], []
        for _ in range(int(self.rng.integers(0, 3))):
            if self.rng.random() < 0.4:
                expr, alias = self.bucket()
                if alias not in names:
                    keys.append(f"{expr} AS {alias}")
                    names.append(alias)
            else:
                col = self.pick(list(CATEGORIES) + list(NUMERIC)[:1])
                if col not in names:
                    keys.append(col)
                    names.append(col)
        where = ""
        if self.rng.random() < 0.5:
            where = " WHERE " + " AND ".join(self.condition() for _ in range(int(self.rng.integers(1, 3))))
        if not keys:
            return f"SELECT COUNT(*) AS n FROM census{where}"
        return f"SELECT {', '.join(keys)}, COUNT(*) AS n FROM census{where} GROUP BY {', '.join(names)}"

    def batch(self) -> list[str]:
        size = 1 if self.rng.random() < 0.5 else int(self.rng.integers(2, 6))
        return [self.statement() for _ in range(size)]


def compare(W, noise, restarts: int) -> dict:
    start = time.perf_counter()
    sel = select(W, noise, restarts=restarts, progress=False)
    seconds = time.perf_counter() - start
    out = {"selected": sel.rmse, "operator": sel.operator, "seconds": seconds,
           "reduced_cells": math.prod(sel.reduction.workload.domain), "cells": math.prod(W.domain)}
    out["direct"] = (select(W, noise, operators=["direct"], reduce=False, progress=False).rmse
                     if "direct" in feasible(W) else math.inf)  # not for a batch of zero queries
    reduced = sel.reduction.workload
    out["identity"] = (select(W, noise, operators=["identity"], progress=False).rmse
                       if "identity" in feasible(reduced) else math.inf)
    ops = [o for o in feasible(W) if o in HDMM_OPERATORS]
    start = time.perf_counter()
    out["hdmm"] = select(W, noise, operators=ops, reduce=False, restarts=restarts, progress=False).rmse
    out["hdmm_seconds"] = time.perf_counter() - start
    return out


def quantiles(values) -> str:
    q = np.quantile(np.asarray(values), [0.0, 0.1, 0.5, 0.9, 1.0])
    return " ".join(f"{v:8.3f}" for v in q)


def part1(batches: int, seed: int, restarts: int) -> tuple[list[dict], bool]:
    gen = Generator(seed)
    rows, ok = [], True
    print(f"Part 1: {batches} generated batches on a 10-column census-like schema, expected RMSE at ε = 1")
    empty = 0
    for b in range(batches):
        compiled = compile_batch(sqls := gen.batch(), SCHEMA)
        while not compiled.terms:  # WHERE rules out every group on the domain: nothing to measure
            empty += 1
            compiled = compile_batch(sqls := gen.batch(), SCHEMA)
        W = compiled.workload
        for name, noise in NOISES.items():
            r = compare(W, noise, restarts)
            r.update(batch=b, noise=name, statements=len(sqls), sql=sqls)
            r["best_baseline"] = min(r["direct"], r["identity"], r["hdmm"])
            r["ratio"] = r["selected"] / r["best_baseline"] if r["best_baseline"] > 0 else 1.0 + r["selected"]
            rows.append(r)
        print(f"  batch {b + 1:3}/{batches}: {len(sqls)} statement(s), reduced {rows[-1]['cells']:.3g} -> "
              f"{rows[-1]['reduced_cells']} cells; ratio laplace {rows[-2]['ratio']:.3f}, "
              f"gaussian {rows[-1]['ratio']:.3f}", flush=True)
    print(f"  ({empty} generated batches whose WHERE clauses rule out every group were skipped: "
          "nothing to measure)\n")
    print(f"{'noise':9} {'batches':>7} {'≤1.00':>6} {'in gap':>6}   ratio selected/x: {'min':>8} {'p10':>8} "
          f"{'p50':>8} {'p90':>8} {'max':>8}")
    for name in NOISES:
        mine = [r for r in rows if r["noise"] == name]
        within = sum(r["ratio"] <= 1.0 + 1e-9 for r in mine)
        close = sum(r["ratio"] <= 1.0 + 1e-9 + TOLERANCE[name] for r in mine)
        ok &= close == len(mine)
        for base in ("best_baseline", "direct", "identity", "hdmm"):
            ratios = [r["selected"] / r[base] for r in mine if 0 < r[base] < math.inf]
            label = f"{name:9} {len(mine):7} {within:6} {close:6}" if base == "best_baseline" else " " * 31
            print(f"{label}   {base:>15}: {quantiles(ratios)}")
        gains = [r["best_baseline"] / r["selected"] for r in mine if r["selected"] > 0]
        print(f"{'':31}   {'gain (best/sel)':>15}: {quantiles(gains)}")
        sel_s = sum(r["seconds"] for r in mine)
        hdmm_s = sum(r["hdmm_seconds"] for r in mine)
        print(f"{'':31}   selection time {sel_s:.1f} s in all, HDMM without reduction {hdmm_s:.1f} s "
              f"({hdmm_s / max(sel_s, 1e-9):.1f}x)")
    print("\nSmallest gains (the batches where selection is closest to a baseline):")
    for r in sorted((r for r in rows if r["selected"] > 0), key=lambda r: r["best_baseline"] / r["selected"])[:5]:
        print(f"  {r['noise']:9} ratio {r['ratio']:.4f} selected {r['selected']:.3f} ({r['operator']}) "
              f"direct {r['direct']:.3f} identity {r['identity']:.3f} hdmm {r['hdmm']:.3f}")
        for sql in r["sql"]:
            print(f"      {sql}")
    return rows, ok


def part2(restarts: int) -> list[dict]:
    print("\nPart 2: largest per-query std error, objective='max' vs the total-variance strategy (ε = 1)")
    print(f"{'workload':26} {'noise':9} {'total: max sd':>14} {'max: max sd':>12} {'var ratio':>10} "
          f"{'rmse total':>11} {'rmse max':>9} {'operator':>22} {'seconds':>8}")
    rows = []
    for name, build in (("CPS marginals", B.cps_marginals), ("Adult 3-way marginals", B.adult_marginals),
                        ("Loans small marginals", B.loans_marginals)):
        W = build()
        for noise_name, noise in NOISES.items():
            total = select(W, noise, restarts=restarts, progress=False)
            start = time.perf_counter()
            worst = select(W, noise, restarts=restarts, progress=False, objective="max")
            seconds = time.perf_counter() - start
            row = {"workload": name, "noise": noise_name, "total_max_variance": total.max_variance,
                   "max_max_variance": worst.max_variance, "ratio": total.max_variance / worst.max_variance,
                   "total_rmse": total.rmse, "max_rmse": worst.rmse, "operator": worst.candidates and
                   min(worst.candidates, key=lambda c: c.max_variance).operator, "seconds": seconds}
            rows.append(row)
            print(f"{name:26} {noise_name:9} {math.sqrt(row['total_max_variance']):14.3f} "
                  f"{math.sqrt(row['max_max_variance']):12.3f} {row['ratio']:9.2f}x {row['total_rmse']:11.3f} "
                  f"{row['max_rmse']:9.3f} {row['operator']:>22} {seconds:8.1f}", flush=True)
    print("Published anchor: ResidualPlanner's max variance on Adult 3-way marginals is 24x below HDMM's "
          "total-variance strategy.")
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--restarts", type=int, default=3,
                    help="operator restarts, for the selection and the HDMM baseline alike (3, as db.query)")
    ap.add_argument("--skip-max", action="store_true", help="skip part 2")
    ap.add_argument("--json", metavar="PATH", help="also write every row as JSON")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    rows, ok = part1(args.batches, args.seed, args.restarts)
    max_rows = [] if args.skip_max else part2(args.restarts)
    print(f"\n{'every' if ok else 'NOT every'} selected strategy within 1.00x of its best baseline "
          f"(Gaussian: within the certified gap); "
          f"total {time.perf_counter() - start:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"batches": rows, "max": max_rows}, f, indent=1, default=str)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
