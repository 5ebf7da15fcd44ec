"""What choosing the marginals with the exact data would buy a graphical-model synthetic table: a NON-PRIVATE reference.

The synthetic benchmark (``synthetic.py``) asks for a table whose max error on 64 random
3-way marginals is below AIM's and at most half of MST's. This script asks how far the
recipe that AIM, MST and dpsql's ``aim`` and ``pgm`` share (measure marginals with Gaussian
noise, fit a graphical model, sample it) can go at a given (ε, δ = 1/n²) when the choice of
what to measure costs nothing and is made **with the exact data**, which no private
mechanism can do:

1. Picks, greedily and without noise, marginals from the workload's downward closure (two or
   more attributes): each step, the one whose exact counts are farthest, in their worst cell,
   from the model fitted to the exact counts picked so far (and every one-way marginal),
   among those that keep the model within ``--max-model-size`` MB.
2. For each ``K``: measures every one-way marginal and the first ``K`` picks with Gaussian
   noise of one ``σ = √((d + K)/(2ρ))``, spending the budget's whole ``ρ`` on measurement (the
   ``ρ`` of Gaussian noise alone, :func:`~dpsql.synth.accounting.gaussian_rho`, as ``pgm`` does),
   fits dpsql's graphical model (:func:`dpsql.synth.estimate.estimate`), samples ``n`` records
   and reports their max error and mean total-variation distance, beside the max error of the
   same sets measured without noise (the structure's own error: what noise adds to). With
   ``--compress``, on the domain MST's compression makes (:mod:`dpsql.synth.compress`, as
   ``pgm`` and ``aim`` do by default), decided by the EXACT one-way counts at ``THRESHOLD · σ``:
   each set is measured by compressed cell, and merged values are drawn back by their exact
   shares.

The best ``K`` (lowest mean max error over the runs) is found by evaluating against the
exact data too: an oracle, not a mechanism. Nor is it a bound: the picks are greedy and
every measurement gets the same noise, and an adaptive mechanism that spends unevenly can
do better (AIM does at ε = 1 on ADULT). What it shows is how much of a method's error would
remain if its selection were free and exact. The peers' figures from a ``synthetic.py
--json`` file (``--peers``) are printed beside it, with the number of runs they are means of.

Beside the best ``K`` it prints a floor that no selection moves: the max error of the one-way
marginals alone, measured with the noise of ``d`` sets (the whole budget on them) and of
``d + K`` sets, each projected onto the nonnegative counts with the right total
(:func:`one_way_floor`). A guide, not a bound on the workload's error: a 3-way marginal's
cells split those rows, but its largest cells (tens of thousands of rows on ADULT) hold most of
them, and a table measured with that noise meets them with errors of the same order.

    python benchmarks/synthetic_oracle.py --datasets adult --epsilons 0.1 1 --runs 3 \\
        --peers benchmarks/results/synthetic.json --json benchmarks/results/synthetic_oracle.json
    python benchmarks/synthetic_oracle.py --compress --runs 3 --peers benchmarks/results/synthetic.json \\
        --json benchmarks/results/synthetic_oracle_compressed.json

Everything here reads the data exactly: a benchmark-only analysis, never a release.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

from dpsql.private.measure import measure_marginals
from dpsql.schema import load_schema
from dpsql.sql.compile import schema_attributes
from dpsql.synth import random_marginals
from dpsql.synth.accounting import gaussian_rho
from dpsql.synth.aim import candidates
from dpsql.synth.compress import THRESHOLD, Compression, compress, compressible
from dpsql.synth.estimate import Observation, estimate
from dpsql.synth.graphical import GraphicalModel
from dpsql.synth.junction import junction_tree
from dpsql.synth.pgm import PGMResult

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from synthetic import Data, write_rows  # noqa: E402  (the benchmark's data sets and error measures)

KS = (0, 4, 8, 12, 16, 20, 24, 32)


class Exact:
    """The data set's exact marginal counts (NON-PRIVATE), read through DuckDB once each."""

    def __init__(self, data: Data) -> None:
        self.data, self.schema = data, load_schema(data.schema)
        self.attributes = schema_attributes(self.schema)
        self.domain = tuple(a.size for a in self.attributes)
        self._memo: dict[tuple[int, ...], np.ndarray] = {}

    def marginal(self, subset: tuple[int, ...]) -> np.ndarray:
        if subset not in self._memo:
            self._memo[subset], = measure_marginals(self.data.con, self.data.name, self.schema, self.attributes,
                                                    [subset])
        return self._memo[subset]


def fit(exact: Exact, sets: list[tuple[int, ...]], sigma: float, rng: np.random.Generator | None,
        iterations: int, start: GraphicalModel | None = None, compression: Compression | None = None) -> PGMResult:
    """The model of ``sets`` measured with Gaussian noise ``sigma`` (none when ``rng`` is None),
    on the domain ``compression`` makes (one noisy count per compressed cell) if given,
    warm-started from ``start`` if given."""
    exact_counts = [Observation(s, exact.marginal(s), sigma) for s in sets]
    if compression is not None:
        exact_counts = [compression.observe(o) for o in exact_counts]
    domain = exact.domain if compression is None else compression.domain
    observations = [Observation(o.subset, o.values + (0.0 if rng is None else rng.normal(0, sigma, o.values.size)),
                                sigma) for o in exact_counts]
    tree = junction_tree(domain, sets)
    start = start.on_tree(tree) if start is not None else None
    return PGMResult(estimate(domain, observations, tree=tree, start=start, iterations=iterations),
                     observations, compression)


def exact_compression(exact: Exact, sigma: float) -> Compression:
    """MST's compression (:func:`~dpsql.synth.compress.compress`) made from the EXACT one-way
    counts at ``THRESHOLD · sigma``: what a mechanism's noisy one-ways approximate."""
    ones = [Observation((a,), exact.marginal((a,)), sigma) for a in compressible(exact.domain)]
    return compress(exact.domain, ones, THRESHOLD)


def one_way_floor(exact: Exact, n: int, sigma: float, rng: np.random.Generator, draws: int = 100) -> float:
    """The mean, over ``draws`` draws of Gaussian noise ``sigma`` on each cell, of the max error
    (a fraction of ``n``) of the one-way marginals alone, each projected onto the nonnegative counts
    that sum to ``n`` (their least-squares estimate): a guide to what a table whose marginals all
    get that noise can reach (see the module docstring)."""
    worst = np.zeros(draws)
    for a in range(len(exact.domain)):
        x = exact.marginal((a,))
        for t in range(draws):
            worst[t] = max(worst[t], float(np.abs(simplex(x + rng.normal(0, sigma, x.size), n) - x).max()) / n)
    return float(worst.mean())


def simplex(y: np.ndarray, total: float) -> np.ndarray:
    """The nearest (least squares) point to ``y`` with nonnegative entries summing to ``total``.

    >>> simplex(np.array([5.0, -1.0, 2.0, 0.5]), 4.0).tolist()
    [3.5, 0.0, 0.5, 0.0]
    """
    top = np.sort(y)[::-1]
    excess = np.cumsum(top) - total
    k = np.flatnonzero(top > excess / np.arange(1, y.size + 1))[-1]
    return np.maximum(y - excess[k] / (k + 1), 0.0)


def picks(exact: Exact, workload, steps: int, max_cells: int, iterations: int) -> list[tuple[int, ...]]:
    """The greedy, noise-free choice of step 1 (see the module docstring); each step's fit is
    warm-started from the last one's."""
    d = len(exact.domain)
    ones = [(a,) for a in range(d)]
    pool = [r for r in candidates(workload) if len(r) >= 2]
    chosen: list[tuple[int, ...]] = []
    model: GraphicalModel = fit(exact, ones, 1.0, None, iterations).model
    for _ in range(steps):
        scored = sorted(((float(np.abs(exact.marginal(r) - model.marginal(r)).max()), r) for r in pool
                         if r not in chosen), reverse=True)
        pick = next((r for _, r in scored if junction_tree(exact.domain, ones + chosen + [r]).size <= max_cells), None)
        if pick is None:
            break
        chosen.append(pick)
        model = fit(exact, ones + chosen, 1.0, None, iterations, start=model).model
    return chosen


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["adult"], choices=["adult", "nltcs"])
    ap.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 1.0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--ks", type=int, nargs="+", default=list(KS), help="numbers of picks to measure")
    ap.add_argument("--max-model-size", type=float, default=10.0, help="the model's size limit in MB (default 10)")
    ap.add_argument("--iterations", type=int, default=500, help="mirror-descent steps of each measured model's fit")
    ap.add_argument("--greedy-iterations", type=int, default=100, help="... of each greedy step's (warm-started)")
    ap.add_argument("--compress", action="store_true",
                    help="measure on MST's compressed domain, made from the exact one-way counts (as pgm and aim do)")
    ap.add_argument("--peers", help="a synthetic.py --json file, for its dpmm-aim and dpmm-mst rows")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    missing = [d for d in args.datasets if not Data.available(d)]
    if missing:
        print(f"skipped: {', '.join(missing)} absent (the shared data sets are not on this machine)")
        return 0
    peers = {}
    if args.peers:
        with open(args.peers, encoding="utf-8") as fh:
            peers = {(r["data"], r["epsilon"], r["method"]): r for r in json.load(fh) if r["method"].startswith("dpmm")}
    rows = []
    for name in args.datasets:
        data = Data(name)
        exact, n, d = Exact(data), data.n, len(data.columns)
        rhos = {eps: gaussian_rho(eps, 1.0 / n**2) for eps in args.epsilons}
        print(f"\n{name.upper()}: {n:,} rows, {d} attributes, 64 random 3-way marginals, delta = 1/n^2; "
              f"picks made with the EXACT data (an oracle, not a mechanism)"
              f"{'; measured on the domain compressed by the exact one-way counts' if args.compress else ''}")
        print(f"{'eps':>5} {'run':>3} {'K':>3} {'sigma':>7} {'exact max':>9} {'max err':>8} {'mean TV':>8}  last picks")
        for run in range(args.runs):
            workload = random_marginals(d, 3, 64, seed=1000 + run)
            start = time.perf_counter()
            chosen = picks(exact, workload, max(args.ks), int(args.max_model_size * 2**20 / 8), args.greedy_iterations)
            ones = [(a,) for a in range(d)]
            structure = {k: data.errors(fit(exact, ones + chosen[:k], 1.0, None, args.iterations)
                                        .sample(n, np.random.default_rng(run)), workload)[0]
                         for k in args.ks if k <= len(chosen)}
            for eps in args.epsilons:
                for k, exact_max in structure.items():
                    sigma = math.sqrt((d + k) / (2 * rhos[eps]))
                    rng = np.random.default_rng([run, k, int(eps * 1000)])
                    compression = exact_compression(exact, sigma) if args.compress else None
                    learned = fit(exact, ones + chosen[:k], sigma, rng, args.iterations, compression=compression)
                    max_err, tv = data.errors(learned.sample(n, rng), workload)
                    rows.append({"data": name, "epsilon": eps, "run": run, "k": k, "sigma": sigma, "compress": args.compress,
                                 "exact_max_error": exact_max, "max_error": max_err, "mean_tv": tv})
                    names = ", ".join("x".join(data.columns[a] for a in r) for r in chosen[max(k - 2, 0):k])
                    print(f"{eps:>5g} {run:>3} {k:>3} {sigma:>7.0f} {exact_max:>9.4f} {max_err:>8.4f} {tv:>8.4f}  "
                          f"{names}", flush=True)
            print(f"      run {run}: {time.perf_counter() - start:.0f} s")
        print(f"\n{'eps':>5} {'best K':>6} {'oracle':>8} {'1-way floor':>11} {'at K':>7} {'dpmm AIM':>9} {'dpmm MST':>9}"
              f" {'MST / 2':>8} {'peer runs':>9}  (oracle: mean over {args.runs} run(s); 1-way floor: the one-way "
              f"marginals' own max error\n{'':>20}measured alone with the whole budget, and with the noise of d + best K sets)")
        for eps in args.epsilons:
            mine = [r for r in rows if r["data"] == name and r["epsilon"] == eps]
            by_k = {k: float(np.mean([r["max_error"] for r in mine if r["k"] == k])) for k in {r["k"] for r in mine}}
            best = min(by_k, key=by_k.get)
            aim, mst = (peers.get((name, eps, who), {}) for who in ("dpmm-aim", "dpmm-mst"))
            shown = [f"{p['max_error']:>9.4f}" if p else f"{'':>9}" for p in (aim, mst)]
            half = f"{mst['max_error'] / 2:>8.4f}" if mst else f"{'':>8}"
            runs = "/".join(str(p["runs"]) for p in (aim, mst) if p)
            floors = [one_way_floor(exact, n, math.sqrt((d + k) / (2 * rhos[eps])), np.random.default_rng(k))
                      for k in (0, best)]
            print(f"{eps:>5g} {best:>6} {by_k[best]:>8.4f} {floors[0]:>11.4f} {floors[1]:>7.4f} {shown[0]} {shown[1]} "
                  f"{half} {runs:>9}")
    if args.json:
        write_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
