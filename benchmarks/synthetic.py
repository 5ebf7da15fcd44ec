"""Synthetic-data benchmark: dpsql's methods beside AIM and MST on ADULT and NLTCS.

The task (``../shared/workloads.md``, the FEM experiment): 64 random 3-way marginals
(a fresh draw each run, the same draw for every method), δ = 1/n², each ε, several
runs. For every method it prints the mean over runs of

* the max error: over every cell of the workload, ``|true − synthetic| / n``;
* the mean total-variation distance over the 64 marginals (½ Σ|p − q| each);
* the seconds a run took;

and each method's ratios to MST and to AIM measured in the same run (over the runs both
have: ``--peer-runs`` runs the peers on fewer workloads, as AIM takes 4 to 47 minutes a
run on ADULT; finished peer runs are cached in ``benchmarks/.peer_cache``, keyed by
everything they depend on, so that their runs can be gathered over several invocations,
and ``--fresh-peers`` reruns them). The peers are dpmm's AIM (McKenna et al. 2022;
workload-aware, model size ``--aim-model-size`` MB) and MST (McKenna, Miklau & Sheldon 2021), run through
``peers/dpmm.py`` in a virtual environment of their own (dpmm pins numpy 1.26),
single-core, with no budget spent on preprocessing; they print as ``dpmm-aim`` and
``dpmm-mst``. dpsql's methods: ``aim`` (its own AIM on dpsql's graphical model), ``pgm``
(the workload's marginals measured once, a graphical model) and ``pgm-pairs`` (the same, measuring only
the workload's 2-way marginals), ``fem``, ``dualquery``, ``mwem`` and ``hdmm`` (the same
marginals answered directly as one HDMM batch: no table, the accuracy a table could
reach). On ADULT, FEM's published mean max error is printed beside ours.

Errors are computed against the exact data by :func:`dpsql.owner.evaluate` (and, for
HDMM, from exact GROUP BY counts): a NON-PRIVATE, benchmark-only evaluation.

    python benchmarks/synthetic.py                                  # ADULT and NLTCS, ε 0.1 and 1, 5 runs, AIM and MST
    python benchmarks/synthetic.py --datasets nltcs --runs 1 --methods aim pgm --peers mst
    python benchmarks/synthetic.py --methods aim pgm pgm-pairs hdmm   # the committed table (peers read from the cache)
    python benchmarks/synthetic.py --datasets adult --epsilons 0.1 0.25 0.5 1 --methods fem --peers   # the FEM table
    python benchmarks/synthetic.py --json results/synthetic.json
    python benchmarks/synthetic.py --datasets kdd99 --methods aim pgm hdmm --peers   # 42 attributes

FEM uses the published settings (ε₀ = 0.008·√ε, perturbation scale 0.16·√T, 50
samples a round, T the most rounds the budget allows) with the exponential mechanism's
bounded-range accounting (ε₀²/8-zCDP a selection; ``--paper-accounting`` runs the paper's
T instead: each selection charged ε₀²/2 and T the most rounds Bun & Steinke's conversion
allows, :func:`paper_fem_options`). DualQuery uses η = 0.4, s = 35; MWEM 15 rounds with 10 replays.
``--sample N`` keeps a seeded random sample of ``N`` rows of each data set (a real table at a
size no default was chosen on; the peers read the same sample), named ``adult-N`` in the output.
``--datasets kdd99`` adds the high-dimensional case: KDD Cup 1999's 494,021 rows of 42
attributes (3·10^40 cells), coded by public rules (``kdd99.py``); ``--peers`` alone leaves dpmm's
peers out, which run on one core and take far longer there.
Skips with a message when ``../shared/data`` is absent (``DPSQL_DATA`` names another place).

Issue 42's settings: ``--workload all`` (every triple, NLTCS's 560, given to every method and
to dpmm's AIM alike, ``--peer-timeout`` capping dpmm's run), ``--workload default`` (no
workload: pgm then runs AIM-style selection, i.e. dpsql's ``aim`` over every triple) with
``--evaluate all`` (the errors over every triple of the columns of at most
``--eval-max-values`` values: ADULT as published leaves out fnlwgt, capital_gain and
capital_loss, whose triples have 10^7 to 10^12 cells), and ``--datasets adult-raw``. Each
finished run is printed as it ends with the load average then (``--log`` appends it to a
JSON-lines file), so an invocation cut short keeps its runs; the table gives each setting's
mean and, over several runs, the standard deviation (``sd``). ``--first-run K`` numbers the
runs from ``K`` (run ``K`` has the seed and the random workload run ``K`` has in any
invocation), so that later invocations add runs to a log rather than repeat its first ones.

    python benchmarks/synthetic.py --datasets nltcs --workload all --methods pgm aim --peers aim \
        --peer-runs 1 --peer-timeout 1500 --log runs.jsonl
    python benchmarks/synthetic.py --datasets adult-raw --workload default --evaluate all --methods aim --peers
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import itertools
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import duckdb
import kdd99

# the checkout this script is in is the one measured (run as a script, its folder is on the path, not the checkout,
# and an installed dpsql, such as another worktree's editable install, would be measured instead)
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np

import dpsql
from dpsql.owner.evaluate import evaluate
from dpsql.schema import load_schema
from dpsql.sql.compile import schema_attributes
from dpsql.synth import random_marginals
from dpsql.synth.accounting import bun_steinke_rho, fem_rounds_zcdp
from dpsql.synth.fem import PUBLISHED_EPS0_FACTOR

#: The shared data sets (``DPSQL_DATA`` overrides: a git worktree lies deeper than the main checkout).
DATA = os.environ.get("DPSQL_DATA") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                                                    "data")
#: Published FEM mean max error, ADULT, 64 random 3-way marginals (workloads.md).
PUBLISHED_FEM = {0.1: 0.172, 0.15: 0.133, 0.2: 0.113, 0.25: 0.106, 0.5: 0.078, 1.0: 0.076}
METHODS = ("aim", "pgm", "pgm-pairs", "mst", "hdmm", "fem", "dualquery", "mwem")
#: dpmm's generators, by the label they are printed with (dpsql has its own "aim" and "mst").
PEERS = {"dpmm-aim": "aim", "dpmm-mst": "mst"}
#: Each method label: dpsql's method and its options (or a function of ε and δ giving them).
OPTIONS = {"aim": ("aim", {}), "pgm": ("pgm", {}), "pgm-pairs": ("pgm", {"measure": "pairs"}), "mst": ("mst", {}),
           "fem": ("fem", {}), "dualquery": ("dualquery", {"eta": 0.4, "samples": 35, "oracle": "heuristic"}),
           "mwem": ("mwem", {"rounds": 15, "replays": 10})}
CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".dpsql_cache")  # strategies, public
#: What dpsql's methods are given (``--workload``): the evaluated marginals (``random``, ``all``), or
#: ``pairs`` (workload=2) or ``default`` (no workload) while the evaluation stays on the marginals drawn;
#: under ``pure``, dpsql's methods spend a pure ε (``--pure``: δ = 0, Laplace noise).
WORKLOAD: dict[str, str] = {}
#: Finished peer runs (records and seconds), so that 5 runs of dpmm's AIM (hours) can be
#: gathered over several invocations; keyed by everything the run depends on. Git-ignored.
PEER_CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".peer_cache")


#: Proxies of issue 42's held-out tables, by shape only (rows, each column's number of values):
#: a passenger list (class, sex, age, siblings, parents, fare, port, survived), a salary table with
#: a 500-value job title, and a table of 35 attributes. Drawn by :func:`generate_proxy`.
PROXIES = {"passengers": (1_309, [3, 2, 81, 9, 7, 513, 3, 2]),
           "salaries": (136_000, [500, 20, 10, 5, 2, 2, 200]),
           "wide35": (170_000, [int(k) for k in np.random.default_rng(35).integers(2, 11, 35)]),
           # shapes no default was chosen on: they check the defaults (sessions 15 and 16)
           "mixed20k": (20_000, [60, 2, 2, 9, 14, 5, 3, 25, 7, 2, 11]),
           "small8k": (8_000, [40, 12, 8, 5, 3, 2, 30, 7, 4, 16])}
#: A proxy with the relations real tables have and the Dirichlet networks above lack, in the shape
#: of loan records (the FEM paper's LOANS columns, ../shared/data/loans-domain.json): functional
#: dependencies (state → region, sub-grade → grade), a near-copy (the funded amount is the loan
#: amount in 90% of rows, one bin off otherwise) and ordered relations (the rate by sub-grade, the
#: income by amount). Rows by name; drawn by :func:`loan_records` (session 20).
LOANS = {"loans20k": 20_000}
#: The tables :func:`generate_proxy` draws, by name.
GENERATED = (*PROXIES, *LOANS)


def _conditional(rng: np.random.Generator, parent: np.ndarray, values: int, alpha: float) -> np.ndarray:
    """A column drawn given ``parent``'s value from a Dirichlet(``alpha``) distribution over
    ``values`` values for each of the parent's values."""
    out = np.zeros(parent.size, dtype=np.int64)
    for value in np.unique(parent):
        at = np.flatnonzero(parent == value)
        out[at] = rng.choice(values, size=at.size, p=rng.dirichlet(np.full(values, alpha)))
    return out


def bayesian_records(rows: int, sizes: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """``rows`` records of a seeded random Bayesian network over columns of ``sizes`` values: each
    column depends on one or two earlier ones (two when their values' pairs are at most 200)
    through conditional distributions drawn from a Dirichlet(0.5), so that its 3-way marginals
    carry dependence a model must learn."""
    data = np.zeros((rows, len(sizes)), dtype=np.int64)
    for j, k in enumerate(sizes):
        parents = sorted(rng.choice(j, size=min(j, 2), replace=False).tolist()) if j else []
        if len(parents) == 2 and sizes[parents[0]] * sizes[parents[1]] > 200:
            parents = parents[:1]
        key = np.ravel_multi_index(tuple(data[:, p] for p in parents), [sizes[p] for p in parents]) if parents \
            else np.zeros(rows, dtype=np.int64)
        data[:, j] = _conditional(rng, key, k, 0.5)
    return data


def loan_records(rows: int, rng: np.random.Generator) -> tuple[list[str], list[int], np.ndarray]:
    """``rows`` loan records (:data:`LOANS`): the columns' names, their numbers of values and the
    integer-coded records."""
    def near(parent: np.ndarray, of: int, values: int, spread: float) -> np.ndarray:
        """An ordered column near a monotone map of an ordered ``parent`` of ``of`` values."""
        centre = np.round(parent * (values - 1) / (of - 1)).astype(np.int64)
        return np.clip(centre + np.round(rng.normal(0, spread, parent.size)).astype(np.int64), 0, values - 1)

    def free(values: int, alpha: float) -> np.ndarray:
        return rng.choice(values, size=rows, p=rng.dirichlet(np.full(values, alpha)))

    c: dict[str, tuple[int, np.ndarray]] = {}
    c["state"] = 51, free(51, 0.7)
    c["region"] = 4, rng.integers(0, 4, 51)[c["state"][1]]
    c["grade"] = 7, free(7, 2.0)
    c["sub_grade"] = 35, 5 * c["grade"][1] + _conditional(rng, c["grade"][1], 5, 1.0)
    c["int_rate"] = 33, near(c["sub_grade"][1], 35, 33, 1.0)
    c["term"] = 2, _conditional(rng, c["grade"][1], 2, 1.0)
    c["loan_amnt"] = 33, free(33, 0.8)
    off = np.clip(c["loan_amnt"][1] + rng.choice([-1, 1], rows), 0, 32)
    c["funded_amnt"] = 33, np.where(rng.random(rows) < 0.9, c["loan_amnt"][1], off)
    c["annual_inc"] = 33, near(c["loan_amnt"][1], 33, 33, 4.0)
    c["home_ownership"] = 5, _conditional(rng, c["annual_inc"][1] // 4, 5, 0.5)
    c["purpose"] = 14, free(14, 0.5)
    c["emp_length"] = 12, free(12, 1.0)
    c["loan_status"] = 5, _conditional(rng, c["grade"][1], 5, 0.5)
    c["verification"] = 3, _conditional(rng, c["annual_inc"][1] // 11, 3, 0.5)
    return list(c), [k for k, _ in c.values()], np.column_stack([v for _, v in c.values()])


def generate_proxy(name: str, seed: int = 42) -> tuple[str, str]:
    """A proxy table (:data:`PROXIES`: :func:`bayesian_records`; :data:`LOANS`: :func:`loan_records`),
    seeded, written as an integer-coded CSV and its domain file in a temporary folder (never
    committed). Returns the two paths."""
    folder = os.path.join(tempfile.gettempdir(), "dpsql_proxies")
    csv, domain = os.path.join(folder, f"{name}.csv"), os.path.join(folder, f"{name}-domain.json")
    if os.path.exists(csv) and os.path.exists(domain):
        return csv, domain
    rng = np.random.default_rng(seed)
    if name in LOANS:
        columns, sizes, data = loan_records(LOANS[name], rng)
    else:
        rows, sizes = PROXIES[name]
        columns, data = [f"c{j}" for j in range(len(sizes))], bayesian_records(rows, sizes, rng)
    os.makedirs(folder, exist_ok=True)
    np.savetxt(csv + ".tmp", data, fmt="%d", delimiter=",", header=",".join(columns), comments="")
    with open(domain + ".tmp", "w", encoding="utf-8") as fh:
        json.dump(dict(zip(columns, sizes)), fh)
    os.replace(csv + ".tmp", csv)
    os.replace(domain + ".tmp", domain)
    return csv, domain


class Data:
    """A data set as DuckDB table ``name`` with a schema of integer-coded columns, and its files."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "adult-raw":
            self._raw_adult()
            return
        if name == "kdd99":  # coded from the shared archive once, by public rules
            self.csv, self.domain_file = kdd99.prepare()
        elif name in GENERATED:  # generated, in a temporary folder: never in the repository
            self.csv, self.domain_file = generate_proxy(name)
        else:
            folder = os.path.join(DATA, name)
            self.csv = os.path.join(folder, f"{name}.csv")
            self.domain_file = os.path.join(folder, f"{name}-domain.json")
        with open(self.domain_file, encoding="utf-8") as fh:
            domain = json.load(fh)
        self.con = duckdb.connect()
        self.con.execute("CREATE TABLE raw AS SELECT * FROM read_csv_auto(?, header=true)", [self.csv])
        self.columns = [c[0] for c in self.con.execute("DESCRIBE raw").fetchall()]  # as in the CSV
        safe = [re.sub(r"\W+", "_", c).strip("_").lower() for c in self.columns]
        select = ", ".join(f'"{c}" AS {s}' for c, s in zip(self.columns, safe))
        self.con.execute(f"CREATE TABLE {name} AS SELECT {select} FROM raw")
        self.con.execute("DROP TABLE raw")
        self.schema = {"table": name, "columns": {s: {"type": "integer", "min": 0, "max": int(domain[c]) - 1}
                                                  for c, s in zip(self.columns, safe)}}
        self.n = int(self.con.execute(f"SELECT count(*) FROM {name}").fetchall()[0][0])

    def _raw_adult(self) -> None:
        """ADULT as published (``adult.data``), no bounds narrowed: its integer columns declared over
        their documented ranges (capital_gain 0..99999, fnlwgt 0..999,999: the most values a schema
        column may declare; ADULT's largest is 1,484,705, and those rows are left out), its text columns
        categorical over the values the file holds (a benchmark convenience: public in the UCI
        documentation). Records are coded by the schema's value order for the evaluation."""
        names = ["age", "workclass", "fnlwgt", "education", "education_num", "marital_status", "occupation",
                 "relationship", "race", "sex", "capital_gain", "capital_loss", "hours_per_week", "native_country",
                 "income"]
        ranges = {"age": (0, 120), "fnlwgt": (0, 999_999), "education_num": (1, 16), "capital_gain": (0, 99_999),
                  "capital_loss": (0, 99_999), "hours_per_week": (0, 99)}
        self.con = duckdb.connect()
        self.con.execute(f"CREATE TABLE {self.name.replace('-', '_')} AS SELECT * FROM read_csv(?, header=false, "
                         f"columns={{{', '.join(repr(c) + ': ' + repr('VARCHAR') for c in names)}}})",
                         [os.path.join(DATA, "adult", "adult.data")])
        self.name = self.name.replace("-", "_")
        columns = {}
        for c in names:
            if c in ranges:
                self.con.execute(f"ALTER TABLE {self.name} ALTER {c} TYPE INTEGER USING CAST(trim({c}) AS INTEGER)")
                columns[c] = {"type": "integer", "min": ranges[c][0], "max": ranges[c][1]}
            else:
                self.con.execute(f"UPDATE {self.name} SET {c} = trim({c})")
                distinct = self.con.execute(f"SELECT DISTINCT {c} FROM {self.name} ORDER BY 1").fetchall()
                values = [v for (v,) in distinct]
                columns[c] = {"type": "categorical", "values": values}
        self.con.execute(f"DELETE FROM {self.name} WHERE age IS NULL OR fnlwgt > 999999")
        self.columns = names
        self.schema = {"table": self.name, "columns": columns}
        self.n = int(self.con.execute(f"SELECT count(*) FROM {self.name}").fetchall()[0][0])

    def sample(self, rows: int) -> None:
        """Keep a seeded random sample of ``rows`` of the table's rows (reservoir sampling, seed 7):
        a smaller table of the same shape and relations, whose size no default was chosen on. The
        sample is also written as a CSV with the original header in a temporary folder (never
        committed), which dpmm's peers read."""
        self.con.execute(f"CREATE TABLE kept AS SELECT * FROM {self.name} USING SAMPLE {int(rows)} ROWS (reservoir, 7)")
        self.con.execute(f"DROP TABLE {self.name}")
        self.con.execute(f"ALTER TABLE kept RENAME TO {self.name}")
        self.n = int(self.con.execute(f"SELECT count(*) FROM {self.name}").fetchall()[0][0])
        folder = os.path.join(tempfile.gettempdir(), "dpsql_samples")
        os.makedirs(folder, exist_ok=True)
        csv = os.path.join(folder, f"{self.name}-{self.n}.csv")
        columns = ", ".join(f'{s} AS "{c}"' for s, c in zip(self.schema["columns"], self.columns))
        self.con.execute(f"COPY (SELECT {columns} FROM {self.name}) TO '{csv}.tmp' (HEADER, DELIMITER ',')")
        os.replace(csv + ".tmp", csv)
        self.csv = csv

    def narrow(self, most: int) -> list[int]:
        """The positions of the columns of at most ``most`` values (whose marginals can be evaluated)."""
        sizes = [a.size for a in schema_attributes(load_schema(self.schema))]
        return [i for i, size in enumerate(sizes) if size <= most]

    @staticmethod
    def available(name: str) -> bool:
        if name in GENERATED:
            return True
        if name == "adult-raw":
            return os.path.exists(os.path.join(DATA, "adult", "adult.data"))
        if name == "kdd99":
            return kdd99.available()
        folder = os.path.join(DATA, name)
        return all(os.path.exists(os.path.join(folder, f)) for f in (f"{name}.csv", f"{name}-domain.json"))

    def errors(self, records: np.ndarray, marginals) -> tuple[float, float]:
        """(max error over every cell, mean total-variation distance over the marginals) of records."""
        report = evaluate(self.con, self.name, self.schema, records, marginals)
        each = report[report.marginal != "all"]
        return float(report[report.marginal == "all"].max_error.iloc[0]), \
            float((0.5 * each.cells * each.mean_error).mean())


def paper_fem_options(epsilon: float, delta: float) -> dict:
    """FEM's options as the paper ran it (workloads.md): ``ε₀ = 0.008·√ε``, each selection charged
    ``ε₀²/2``, and ``T`` the most rounds whose ``ρ = T·ε₀²/2`` Bun & Steinke's conversion
    ``ε = ρ + 2√(ρ ln(1/δ))`` allows (:func:`~dpsql.synth.accounting.bun_steinke_rho`). dpsql's
    tighter conversion (Canonne, Kamath & Steinke) allows more, so the run fits its budget.

    >>> paper_fem_options(1.0, 1.0 / 48842 ** 2)["rounds"]
    353
    """
    eps0 = PUBLISHED_EPS0_FACTOR * math.sqrt(epsilon)
    rounds = fem_rounds_zcdp(bun_steinke_rho(epsilon, delta), eps0, bounded_range=False)
    return {"bounded_range": False, "eps0": eps0, "rounds": rounds}


def run(data: Data, label: str, epsilon: float, marginals, seed: int) -> tuple[float, float, float]:
    """One synthesis at (ε, 1/n²): (max error, mean TV, seconds)."""
    if label == "hdmm":
        return run_hdmm(data, epsilon, marginals)
    method, options = OPTIONS[label]
    n, cols = data.n, list(data.schema["columns"])
    if callable(options):
        options = options(epsilon, 1.0 / n ** 2)
    db = dpsql.connect(data.con, table=data.name, schema=data.schema,
                       budget=dpsql.Budget(epsilon=epsilon, delta=1.0 / n ** 2), progress=False)
    delta = None if method == "mwem" or WORKLOAD.get("pure") else 1.0 / n ** 2
    given = WORKLOAD.get("given", "random")  # "default": no workload; "pairs": workload=2
    workload = {"default": None, "pairs": 2}.get(given, [[cols[a] for a in m] for m in marginals])
    start = time.perf_counter()
    syn = db.synthesize(method, workload=workload, epsilon=epsilon, delta=delta,
                        seed=seed, name=f"synth_{method}", **options)
    seconds = time.perf_counter() - start
    return (*data.errors(syn.records, marginals), seconds)


def run_hdmm(data: Data, epsilon: float, marginals) -> tuple[float, float, float]:
    """The same marginals as one HDMM batch of GROUP BY queries at (ε, 1/n²), Gaussian noise:
    (max error, NaN, seconds); the answers are not a table, so they have no total variation."""
    table, cols, n = data.name, list(data.schema["columns"]), data.n
    db = dpsql.connect(data.con, table=table, schema=data.schema,
                       budget=dpsql.Budget(epsilon=epsilon, delta=1.0 / n ** 2), cache=CACHE, progress=False)
    groups = [", ".join(cols[a] for a in m) for m in marginals]
    start = time.perf_counter()
    results = db.batch([f"SELECT {g}, COUNT(*) AS n FROM {table} GROUP BY {g}" for g in groups],
                       epsilon=epsilon, delta=1.0 / n ** 2, noise="gaussian")
    seconds = time.perf_counter() - start
    worst = 0.0
    for g, res in zip(groups, results):   # NON-PRIVATE: the exact counts, for this evaluation only
        exact = data.con.sql(f"SELECT {g}, COUNT(*) AS exact FROM {table} GROUP BY {g}").df()
        both = res.df.merge(exact, on=[c.strip() for c in g.split(",")], how="left").fillna({"exact": 0})
        err = np.abs(both["n"].to_numpy(float) - both["exact"].to_numpy(float)) / n
        worst = max(worst, float(err.max()))
    return worst, math.nan, seconds  # noisy answers are no distribution: a total variation means nothing


def _peer_inputs(data: Data, peer: str, marginals, model_size: float) -> tuple[list[list[str]] | None, float | None]:
    """What dpmm's ``peer`` takes of the workload (column names) and the model size: AIM both, MST neither."""
    if peer != "aim":
        return None, None
    return [[data.columns[a] for a in m] for m in marginals], model_size


@functools.cache
def _dpmm_version() -> str:
    """The dpmm version installed in the peers' venv (creating it on first use)."""
    from peers.dpmm import python_for_dpmm

    with open(os.path.join(os.path.dirname(python_for_dpmm()), "..", ".installed"), encoding="utf-8") as fh:
        return fh.read().strip()


def peer_cache(data: Data, peer: str, epsilon: float, marginals, seed: int, model_size: float) -> str:
    """Where a finished peer run with these inputs (and the installed dpmm version) is cached."""
    key = json.dumps([data.name, data.n, peer, epsilon, seed, *_peer_inputs(data, peer, marginals, model_size),
                      _dpmm_version()])
    return os.path.join(PEER_CACHE, f"{data.name}-{peer}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.npz")


def run_peer(data: Data, peer: str, epsilon: float, marginals, seed: int, model_size: float,
             timeout: float | None, cache: bool = True) -> tuple[np.ndarray, float]:
    """dpmm's AIM or MST at (ε, 1/n²) in its own venv: (records, seconds of fit and sampling). It
    reads the data set's files, not its DuckDB connection, so it can run beside the other methods.
    With ``cache``, a run already finished with the same inputs is read from :func:`peer_cache`
    instead of rerun; every finished run is stored there."""
    from peers.dpmm import run_dpmm

    path = peer_cache(data, peer, epsilon, marginals, seed, model_size)
    if cache and os.path.exists(path):
        with np.load(path) as saved:
            return saved["records"].astype(np.int64), float(saved["seconds"])
    workload, size = _peer_inputs(data, peer, marginals, model_size)
    table, info = run_dpmm(peer, data.csv, data.domain_file, epsilon, 1.0 / data.n ** 2, seed,
                           workload=workload, timeout=timeout, max_model_size=size)
    records, seconds = table[data.columns].to_numpy(dtype=np.int64), float(info["seconds"])
    os.makedirs(PEER_CACHE, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=PEER_CACHE, suffix=".npz", delete=False) as fh:
        np.savez_compressed(fh, records=records, seconds=seconds)
    os.replace(fh.name, path)
    return records, seconds


@functools.lru_cache(maxsize=1)
def code_version() -> str | None:
    """The commit of the code measured (``git describe --always --dirty``), or None outside a checkout."""
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=os.path.dirname(os.path.abspath(__file__)),
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def log_run(path: str | None, data: str, epsilon: float, who: str, run: int, outcome: tuple) -> None:
    """Print one finished run, and append it to the JSON-lines file ``path`` if given, with the
    1-minute load average when it ended (the machine is shared: times depend on it) and the
    commit measured (:func:`code_version`)."""
    load = os.getloadavg()[0]
    print(f"      run {run + 1}: {epsilon:g} {who}: max error {outcome[0]:.4f}, mean TV {outcome[1]:.4f}, "
          f"{outcome[2]:.1f} s, load {load:.1f}", flush=True)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"data": data, "epsilon": epsilon, "method": who, "run": run + 1,
                                 "max_error": outcome[0], "mean_tv": outcome[1], "seconds": outcome[2],
                                 "load": load, "workload": WORKLOAD.get("given"), "pure": bool(WORKLOAD.get("pure")), "code": code_version()}) + "\n")


def write_rows(path: str, rows: list[dict]) -> None:
    """``rows`` as JSON at ``path``, written whole or not at all."""
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        json.dump(rows, fh, indent=2)
    os.replace(path + ".tmp", path)
    print(f"wrote {path}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["adult", "nltcs"],
                    choices=["adult", "nltcs", "kdd99", "adult-raw", *GENERATED])
    ap.add_argument("--workload", default="random", choices=["random", "all", "pairs", "default"],
                    help="random: 64 random triples (the peers get them too); all: every triple (NLTCS: 560), given "
                         "to every method and AIM alike; pairs: workload=2; default: no workload (issue 42). The "
                         "errors are over the triples drawn (all: every triple)")
    ap.add_argument("--evaluate", default=None, choices=["random", "all"],
                    help="the errors over 64 random triples or all triples (default: all with --workload all)")
    ap.add_argument("--eval-max-values", type=int, default=1024,
                    help="evaluate triples of the columns of at most this many values only (ADULT as published: "
                         "fnlwgt, capital_gain and capital_loss are left out)")
    ap.add_argument("--log", help="append each finished run (errors, seconds, the load average) to this JSON-lines file")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--first-run", type=int, default=1,
                    help="number the runs from this one (its seed and workload), to add runs to earlier ones")
    ap.add_argument("--epsilons", type=float, nargs="+", default=[0.1, 1.0])
    ap.add_argument("--methods", nargs="*", default=list(METHODS), choices=METHODS)
    ap.add_argument("--peers", nargs="*", default=list(PEERS.values()), choices=list(PEERS.values()),
                    help="dpmm's generators to run side by side (none: --peers alone)")
    ap.add_argument("--peer-runs", type=int, help="run the peers on the first this many workloads only (default: "
                                                  "all); ratios compare the means over the runs both have")
    ap.add_argument("--aim-model-size", type=float, default=10.0, help="AIM's max model size in MB (default 10)")
    ap.add_argument("--fresh-peers", action="store_true", help=f"rerun peer runs found in {PEER_CACHE}")
    ap.add_argument("--peer-timeout", type=float, help="seconds a peer run may take before it is reported as such")
    ap.add_argument("--paper-accounting", action="store_true",
                    help="run FEM with the paper's T: eps0^2/2-zCDP a selection, Bun & Steinke's conversion")
    ap.add_argument("--pure", action="store_true",
                    help="dpsql's methods spend a pure epsilon (delta = 0: Laplace noise; pgm and mst take it)")
    ap.add_argument("--sample", type=int, help="keep a seeded random sample of this many rows of each data set "
                    "(dpmm's peers read the same sample)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    args.evaluate = args.evaluate or ("all" if args.workload == "all" else "random")
    if args.first_run < 1:
        ap.error("--first-run takes a run number >= 1")
    if args.sample is not None and (args.sample < 1 or "adult-raw" in args.datasets):
        ap.error("--sample takes a row count >= 1, of the coded data sets (not adult-raw)")
    if args.paper_accounting:
        OPTIONS["fem"] = ("fem", paper_fem_options)
    missing = [d for d in args.datasets if not Data.available(d)]
    if missing:
        print(f"skipped: {', '.join(missing)} absent from {DATA} (the shared data sets are not on this machine)")
        return 0
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    rows = []
    for name in args.datasets:
        data = Data(name)
        if args.sample is not None:
            data.sample(args.sample)
            name = f"{name}-{data.n}"
        d = len(data.columns)
        print(f"\n{name.upper()}: {data.n:,} rows, {d} attributes, delta = {'0 (dpsql)' if args.pure else '1/n^2'}, "
              f"{args.runs} run(s) per epsilon")
        print(f"{'eps':>5} {'method':>10} {'max err':>8} {'mean TV':>8} {'seconds':>8} {'max/MST':>8} {'max/AIM':>8} "
              f"{'TV/MST':>7} {'TV/AIM':>7} {'runs':>4} {'published':>9}")
        WORKLOAD["given"] = args.workload
        WORKLOAD["pure"] = "yes" if args.pure else ""
        fit = data.narrow(args.eval_max_values)  # the columns whose triples are evaluated
        every = [tuple(fit[i] for i in m) for m in itertools.combinations(range(len(fit)), 3)]
        runs = range(args.first_run - 1, args.first_run - 1 + args.runs)
        workloads = {r: every if args.evaluate == "all" else
                     [tuple(fit[i] for i in m) for m in random_marginals(len(fit), 3, 64, seed=1000 + r)]
                     for r in runs}
        if len(fit) < d:
            print(f"      errors over triples of the {len(fit)} columns of at most {args.eval_max_values:,} values "
                  f"(left out: {', '.join(data.columns[i] for i in range(d) if i not in fit)})")
        print(f"      errors over {'all ' + str(len(every)) if args.evaluate == 'all' else '64 random'} triples")
        zeros = np.mean([data.errors(np.zeros((0, d), dtype=np.int64), w)[0] for w in workloads.values()])
        print(f"{'':>5} {'zeros':>10} {zeros:>8.4f} {0.5:>8.4f}   (the all-zeros table: the trivial baseline)")
        # the peers run in a subprocess each, one at a time, while dpsql's methods run here: two cores
        peers = [label for label, peer in PEERS.items() if peer in args.peers]
        peer_runs = runs[:args.peer_runs or args.runs]
        if peers and not args.fresh_peers:
            cached = sum(os.path.exists(peer_cache(data, PEERS[label], eps, workloads[r], r, args.aim_model_size))
                         for eps in args.epsilons for label in peers for r in peer_runs)
            print(f"      {cached} of {len(args.epsilons) * len(peers) * len(peer_runs)} peer runs read from {PEER_CACHE}, "
                  "finished by an earlier invocation (their seconds as measured then)")
        with ThreadPoolExecutor(max_workers=1) as pool:
            pending = {(eps, label, r): pool.submit(run_peer, data, PEERS[label], eps, workloads[r], r,
                                                    args.aim_model_size, args.peer_timeout, not args.fresh_peers)
                       for eps in args.epsilons for label in peers for r in peer_runs}
            outcome = {}
            for r, w in workloads.items():  # run by run, each printed as it ends, so a cut-short run keeps its runs
                for eps in args.epsilons:
                    for who in args.methods:
                        outcome[(eps, who, r)] = run(data, who, eps, w, seed=r)
                        log_run(args.log, name, eps, who, r, outcome[(eps, who, r)])
            for key, job in pending.items():
                try:
                    records, seconds = job.result()
                    outcome[key] = (*data.errors(records, workloads[key[2]]), seconds)
                    log_run(args.log, name, *key, outcome[key])
                except TimeoutError:
                    print(f"{key[0]:>5g} {key[1]:>10} did not finish in {args.peer_timeout:g} s (run {key[2] + 1})")
        for eps in args.epsilons:
            def mean(who: str, runs: Sequence[int] = runs) -> tuple[float, ...] | None:
                """``who``'s mean (max error, mean TV, seconds) over those of ``runs`` it has."""
                have = [outcome[(eps, who, r)] for r in runs if (eps, who, r) in outcome]
                return tuple(float(np.mean(col)) for col in zip(*have)) if have else None

            def ratio(who: str, peer: str, i: int) -> float | None:
                """``who``'s mean over ``peer``'s mean, over the runs both have."""
                both = runs if peer not in peers else \
                    [r for r in runs if (eps, who, r) in outcome and (eps, peer, r) in outcome]
                a, b = mean(who, both), mean(peer, both)
                return a[i] / b[i] if a and b and math.isfinite(a[i]) else None

            found = {who: m for who in peers + list(args.methods) if (m := mean(who)) is not None}
            for who, (max_err, tv, seconds) in found.items():
                published = PUBLISHED_FEM.get(eps) if (name, who) == ("adult", "fem") else None
                ratios = {f"{m}_{p.split('-')[1]}": ratio(who, p, i) if p in found else None
                          for i, m in ((0, "max"), (1, "tv")) for p in PEERS}
                tv = tv if math.isfinite(tv) else None  # hdmm's answers are no table: no TV
                tv_text = f"{tv:.4f}" if tv is not None else "n/a"
                count = sum((eps, who, r) in outcome for r in runs)
                spread = {f"{m}_sd": float(np.std([outcome[(eps, who, r)][i] for r in runs
                                                   if (eps, who, r) in outcome], ddof=1)) if count > 1 else None
                          for i, m in ((0, "max_error"), (1, "mean_tv"), (2, "seconds"))}
                pure = who == "mwem" or args.pure and not who.startswith("dpmm")
                rows.append({"data": name, "epsilon": eps, "delta": 0.0 if pure else 1.0 / data.n ** 2,
                             "method": who, "runs": count, "max_error": max_err, "mean_tv": tv,
                             "seconds": seconds, **spread, "published_fem": published, **ratios,
                             "aim_model_size_mb": args.aim_model_size if who in ("dpmm-aim", "aim") else None})
                shown = " ".join(f"{ratios[k]:>{w}.3f}" if ratios[k] is not None else " " * w
                                 for k, w in (("max_mst", 8), ("max_aim", 8), ("tv_mst", 7), ("tv_aim", 7)))
                print(f"{eps:>5g} {who:>10} {max_err:>8.4f} {tv_text:>8} {seconds:>8.1f} {shown} {count:>4} "
                      f"{published or '':>9}", flush=True)
                if count > 1:
                    print(f"{'':>5} {'sd':>10} {spread['max_error_sd']:>8.4f} {spread['mean_tv_sd'] or math.nan:>8.4f} "
                          f"{spread['seconds_sd']:>8.1f}")
            for who in ("aim", "pgm", "pgm-pairs"):
                if who in found and all(p in found for p in PEERS):
                    ok = ratio(who, "dpmm-aim", 0) < 1 and ratio(who, "dpmm-mst", 0) <= 0.5
                    print(f"      {who} below AIM's max error and at most half of MST's: {'yes' if ok else 'NO'}")
    if args.json:
        write_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
