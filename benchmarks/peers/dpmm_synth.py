"""Fit dpmm's AIM or MST to an integer-coded table and write a synthetic copy.

Run by the python of dpmm's own venv (see ``peers/dpmm.py``), never by ours: it
imports only dpmm and what dpmm depends on (numpy, pandas).

    python dpmm_synth.py --csv DATA.csv --domain DOMAIN.json --method aim|mst \\
        --epsilon E --delta D --seed S --out OUT.csv \\
        [--workload WORKLOAD.json] [--max-model-size MB] [--n-jobs K]

Prints one JSON line to stdout (``method``, ``seconds`` = fit + sample wall
time, ``rows``, ``dpmm_version``, ``settings``); progress and dpmm's own
chatter go to stderr.

What dpmm 0.1.9 does, read from its source, and how this script uses it:

* Budget. dpmm's pipelines (``AIMPipeline``/``MSTPipeline``) put a
  ``TableBinner`` in front of the model that by default spends an EXTRA
  ``proc_epsilon=0.1`` (on top of ``epsilon``) on PrivTree binning of every
  numeric column (integer codes count as numeric), half of it on DP bounds when
  none are given; it also drops constant columns and, for categorical columns
  without given categories, reads the categories off the data (a leak it only
  logs). We pass ``disable_processing=True`` and give the public domain
  ``{column: size}`` to ``fit``: the model then builds its ``Domain`` from those
  sizes (it only falls back to ``max + 1`` of the data when no domain is given),
  no binner runs, and all of (epsilon, delta) goes to the mechanism.
* Accounting. The mechanism converts (epsilon, delta) to rho-zCDP with
  ``cdp_rho`` (the Canonne-Kamath-Steinke conversion) and spends rho on
  Gaussian noise added to marginal counts (add/remove-one-record neighbours,
  L2 sensitivity 1 per marginal) and on exponential-mechanism selections,
  each counted as epsilon_0**2 / 8. MST spends rho/3 on the 1-way marginals,
  rho/3 on d - 1 selections and at most rho/3 on the d - 1 chosen 2-way
  marginals (it normalises their weights over d cliques, so it spends
  (d - 1)/d of that third: slightly more noise than needed, never less). AIM
  anneals as in the paper until rho is used up. The Gaussian noise comes from
  OpenDP's sampler, which ``--seed`` does not control: the seed fixes
  selection, compression and sampling, so two runs with one seed differ.
* Domain compression (``compress=True``, dpmm's default) merges the values of
  each attribute whose noisy 1-way count is below 3 sigma into one value; it is
  post-processing of the noisy 1-way marginals and costs no budget.
* AIM's workload. ``AIM._fit`` takes a workload ``W`` (a list of
  ``(clique, weight)``), but neither the pipeline nor ``AIMGM.fit`` forwards
  one, so with ``--workload`` this script does the pipeline's fit steps itself
  and calls the AIM mechanism's ``fit(df, W=...)``. Without ``--workload`` AIM
  uses all 2-way marginals (``degree=2``) with at most ``max_cells=10000``
  cells, weight 1. Each workload clique is put in the CSV's column order so
  that one marginal is never two candidates.
* Defaults kept: AIM ``rounds = 16 * d`` (d attributes), ``n_iters=1000``,
  ``degree=2``, ``max_cells=10000``, ``compress=True``; MST ``n_iters=5000``
  (``MSTGM``'s; 2500 in its selection step), ``compress=True``. Changed:
  ``n_jobs`` is 1 (dpmm's -1 means all cores but one, in a multiprocessing
  pool), and AIM's ``max_model_size`` is 80 MB (the default of dpmm's
  ``AIMGM`` and of the AIM paper) because the pipeline's default, None, puts no
  bound on the model at all. MST's ``max_model_size`` (None) only stops scoring
  candidate pairs early, so it is left unset.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from importlib.metadata import version
from pathlib import Path

# This file sits beside peers/dpmm.py, which would shadow the dpmm package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from dpmm.pipelines import AIMPipeline, MSTPipeline  # noqa: E402

AIM_MAX_MODEL_SIZE_MB = 80.0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--csv", required=True, help="integer-coded table with a header")
    p.add_argument("--domain", required=True, help="JSON {column: number of values}")
    p.add_argument("--method", required=True, choices=("aim", "mst"))
    p.add_argument("--epsilon", required=True, type=float)
    p.add_argument("--delta", required=True, type=float)
    p.add_argument("--seed", required=True, type=int)
    p.add_argument("--out", required=True, help="where to write the synthetic CSV")
    p.add_argument("--workload", help="JSON list of lists of column names (AIM only)")
    p.add_argument("--max-model-size", type=float, help="MB; AIM default 80, MST none")
    p.add_argument("--n-jobs", type=int, default=1, help="dpmm worker processes (default 1)")
    args = p.parse_args(argv)
    if not args.epsilon > 0 or not 0 < args.delta < 1:
        p.error("need epsilon > 0 and 0 < delta < 1 (dpmm treats epsilon = 0 as no privacy)")
    return args


def load_table(csv: str, domain_json: str) -> tuple[pd.DataFrame, dict[str, int]]:
    """The table and its public domain sizes, in the CSV's column order, checked against each other."""
    with open(domain_json) as f:
        domain = {str(k): int(v) for k, v in json.load(f).items()}
    df = pd.read_csv(csv)
    if set(df.columns) != set(domain):
        raise SystemExit(f"columns {sorted(df.columns)} do not match domain keys {sorted(domain)}")
    sizes = {c: domain[c] for c in df.columns}
    bad = [c for c in df.columns if df[c].dtype.kind not in "iu" or df[c].min() < 0 or df[c].max() >= sizes[c]]
    if bad:
        raise SystemExit(f"columns {bad} are not integer codes in 0..size-1")
    return df.astype(np.int64), sizes


def load_workload(path: str, columns: list[str]) -> list[tuple[str, ...]]:
    """Workload cliques, each sorted into column order, duplicates dropped."""
    with open(path) as f:
        cliques = json.load(f)
    order = {c: i for i, c in enumerate(columns)}
    unknown = {c for cl in cliques for c in cl} - set(order)
    if unknown:
        raise SystemExit(f"workload names unknown columns {sorted(unknown)}")
    return list(dict.fromkeys(tuple(sorted(set(cl), key=order.get)) for cl in cliques))


def log_aim_rounds(aim, start: float) -> list[tuple[str, ...]]:
    """Print each AIM round's chosen marginal to stderr (to see how far a long run got).

    Returns the list that the chosen marginals are appended to, one per round.
    """
    choose = aim.worst_approximated
    chosen: list[tuple[str, ...]] = []

    def logged(*args, **kwargs):
        clique = choose(*args, **kwargs)
        chosen.append(tuple(clique))
        print(f"[dpmm_synth] AIM round {len(chosen)}: {clique} at {time.perf_counter() - start:.0f}s",
              file=sys.stderr, flush=True)
        return clique

    aim.worst_approximated = logged
    return chosen


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    df, sizes = load_table(args.csv, args.domain)
    workload = load_workload(args.workload, list(df.columns)) if args.workload else None
    max_model_size = args.max_model_size
    if max_model_size is None and args.method == "aim":
        max_model_size = AIM_MAX_MODEL_SIZE_MB

    pipeline_cls = AIMPipeline if args.method == "aim" else MSTPipeline
    pipe = pipeline_cls(epsilon=args.epsilon, delta=args.delta, compress=True,
                        max_model_size=max_model_size, n_jobs=args.n_jobs,
                        disable_processing=True)
    mech = pipe.gen.generator  # dpmm's AIM / MST mechanism object

    start = time.perf_counter()
    rounds = log_aim_rounds(mech, start) if args.method == "aim" else None
    with contextlib.redirect_stdout(sys.stderr):  # keep stdout for our one JSON line
        if args.method == "aim" and workload is not None:
            # GenerativePipeline.fit with processing disabled, plus the workload.
            pipe.set_random_state(args.seed)
            pipe.gen.set_domain(sizes)
            pipe.gen.check_fit(df)
            mech.fit(df, public=False, W=[(cl, 1.0) for cl in workload])
        else:
            pipe.fit(df, domain=sizes, random_state=args.seed)
        synth = pipe.generate(n_records=len(df), random_state=args.seed)
    seconds = time.perf_counter() - start

    synth = synth[list(df.columns)].astype(np.int64)
    synth.to_csv(args.out, index=False)

    d = len(df.columns)
    settings: dict = {
        "epsilon": args.epsilon, "delta": args.delta, "rho_zcdp": mech.rho, "seed": args.seed,
        "preprocessing": "disabled; public domain sizes passed to fit (no budget spent on domain)",
        "compress": mech.compress, "max_model_size_mb": max_model_size, "n_iters": mech.n_iters,
        "n_jobs": mech.n_jobs,
        "one_way_measured": sum(len(cl) == 1 for cl in mech.cliques),
        "marginals_measured": [list(cl) for cl in mech.cliques if len(cl) > 1],
    }
    if args.method == "aim":
        settings.update({
            "rounds_max": mech.rounds or 16 * d, "rounds_run": len(rounds),
            "degree": mech.degree, "max_cells": mech.max_cells,
            "workload": f"{len(workload)} given cliques" if workload is not None
            else f"all {mech.degree}-way marginals with <= {mech.max_cells} cells",
        })
    else:
        settings["workload"] = ("ignored: " if workload else "") + "MST measures a spanning tree of 2-way marginals"
    print(json.dumps({"method": args.method, "seconds": round(seconds, 3), "rows": len(synth),
                      "dpmm_version": version("dpmm"), "settings": settings}), flush=True)


if __name__ == "__main__":
    main()
