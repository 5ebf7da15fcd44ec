"""Census scale: redistricting tables at nation, state, county and tract in one consistent release.

Generates persons over 51 states, 3,142 counties of heavy-tailed (log-normal) sizes and about
85,000 tracts (each about the same population, as tracts are drawn), with race (63 combinations,
skewed), Hispanic origin, voting age, sex and 23 age groups. The release, at the stated ρ (zCDP,
Gaussian noise):

* part A (``--share-a`` of ρ): the redistricting tables -- total, race × Hispanic, voting age --
  at every level, and race × Hispanic at county (SF1 P5-like). The data vector is tract × (race,
  Hispanic, voting age), 252 cells per tract; OPT_H selects the product strategy
  ``H ⊗ A_D``: ``H`` measures every level with optimized weights, ``A_D`` is OPT_0's factor for
  the 252 cells. Estimated by least squares through the tree (:mod:`dpsql.hdmm.hierarchy`):
  every level adds up exactly. Integer tables by TopDown rounding (:func:`topdown_integer`).
* part B (the rest): sex by age at county (SF1 P12-like), measured directly (identity).

Reported per level: RMSE and MAE of total population, measured and expected, for the release and
for the per-level baseline (each level's measurement of the same strategy, with its share of the
same ρ, read on its own: the Noisy Measurement File without post-processing); the largest
inconsistency between levels; time per phase (selection, counting, noise, estimation, integer
tables of race × Hispanic), plain DuckDB's GROUP BYs of the same tables beside the counting, and peak memory.

    python benchmarks/census_scale.py                       # 10^7 rows, the full geography
    python benchmarks/census_scale.py --rows 100000000      # 10^8 rows
    python benchmarks/census_scale.py --fraction 0.1 --rows 1000000 --json out.json   # a few minutes
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time

import duckdb
import numpy as np
import scipy.sparse as sp

from dpsql.hdmm.hierarchy import Tree, topdown_integer
from dpsql.hdmm.matrix import Dense, Identity, Sparse, Total
from dpsql.hdmm.optimize.hier import opt_hier
from dpsql.hdmm.reconstruct import least_squares
from dpsql.hdmm.workload import Workload
from dpsql.privacy import Gaussian

RACES, AGES = 63, 23
DETAIL = RACES * 2 * 2  # race × Hispanic × voting age
LEVELS = ("nation", "state", "county", "tract")


def geography(states: int, counties: int, tracts: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Each tract's state and county: county populations log-normal (σ = 1.6, heavy-tailed as U.S.
    counties are), states' numbers of counties too, each state and county at least one of its parts."""
    per_state = allocate(rng.lognormal(0, 0.8, states), counties)
    county_state = np.repeat(np.arange(states), per_state)
    county = np.repeat(np.arange(counties), allocate(rng.lognormal(0, 1.6, counties), tracts))
    return county_state[county], county


def allocate(weights: np.ndarray, total: int) -> np.ndarray:
    """``total`` parts among ``weights``: one each, the rest in proportion (largest remainders)."""
    share = weights / weights.sum() * (total - weights.size)
    out = np.floor(share).astype(int)
    out[np.argsort(out - share)[:total - weights.size - out.sum()]] += 1
    return out + 1


def people(rows: int, tract_weights: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    race_p = np.r_[0.6, 0.13, 0.06, 0.05, 0.03, np.full(RACES - 5, 0.13 / (RACES - 5))]
    return {"tract": rng.choice(tract_weights.size, rows, p=tract_weights).astype(np.int32),
            "race": rng.choice(RACES, rows, p=race_p / race_p.sum()).astype(np.int16),
            "hisp": (rng.random(rows) < 0.19).astype(np.int8),
            "va": (rng.random(rows) < 0.78).astype(np.int8),
            "sex": (rng.random(rows) < 0.5).astype(np.int8),
            "age": rng.choice(AGES, rows).astype(np.int8)}


def groups(labels: np.ndarray) -> Sparse:
    return Sparse(sp.csr_matrix((np.ones(labels.size), (labels, np.arange(labels.size)))))


def marginal(keep: tuple[int, ...]) -> Dense:
    """The marginal over the detail cells (race, Hispanic, voting age) keeping axes ``keep``."""
    shape = (RACES, 2, 2)
    mats = [np.eye(n) if a in keep else np.ones((1, n)) for a, n in enumerate(shape)]
    return Dense(np.kron(np.kron(mats[0], mats[1]), mats[2]))


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=10_000_000)
    p.add_argument("--fraction", type=float, default=1.0, help="scale the numbers of counties and tracts")
    p.add_argument("--rho", type=float, default=1.0)
    p.add_argument("--share-a", type=float, default=0.8, help="share of rho for the redistricting tables")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--balance", action="store_true", help="weigh every level's mean squared error the same")
    p.add_argument("--json", help="write the results here")
    a = p.parse_args(argv)
    rng = np.random.default_rng(a.seed)
    out: dict = {"rows": a.rows, "rho": a.rho, "share_a": a.share_a, "balance": a.balance, "seconds": {}}
    sec = out["seconds"]

    state, county = geography(51, max(51, round(3142 * a.fraction)), max(102, round(85_000 * a.fraction)), rng)
    n = state.size
    tract_w = rng.lognormal(0, 0.3, n)
    data = people(a.rows, tract_w / tract_w.sum(), rng)
    out.update(states=51, counties=int(county.max()) + 1, tracts=n)
    con = duckdb.connect()
    con.execute(f"SET threads = {a.threads}")
    con.register("persons_df", data)
    con.execute("CREATE TABLE persons AS SELECT * FROM persons_df")
    con.unregister("persons_df")
    con.register("geo_df", {"tract": np.arange(n, dtype=np.int32), "county": county, "state": state})
    con.execute("CREATE TABLE geo AS SELECT * FROM geo_df")
    del data

    # -- selection -----------------------------------------------------------------------------------
    t0 = time.perf_counter()
    geo_levels = [Total(n), groups(state), groups(county), Identity(n)]
    rh, va = marginal((0, 1)), marginal((2,))
    # --balance: each level's mean squared error weighs the same (else its total squared error, which
    # the tracts' many queries dominate)
    terms = [(1 / math.sqrt(g.shape[0]) if a.balance else 1.0, (g, d))
             for g in geo_levels for d in (Total(DETAIL), rh, va)]
    W = Workload((n, DETAIL), terms)
    A = opt_hier(W, Gaussian(1.0, 1e-9))
    sec["selection"] = time.perf_counter() - t0
    H, AD = A.factors
    out["level_weights"] = dict(zip(LEVELS, H.weights))
    tree: Tree = H.tree

    # -- measurement: the counting GROUP BYs, then noise ----------------------------------------------
    t0 = time.perf_counter()
    cells = con.execute("SELECT tract, (race * 2 + hisp) * 2 + va AS d, COUNT(*) FROM persons GROUP BY ALL").fetchnumpy()
    sa = con.execute("SELECT g.county, p.sex * 23 + p.age AS c, COUNT(*) FROM persons p JOIN geo g USING (tract) "
                     "GROUP BY ALL").fetchnumpy()
    sec["counting"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    for level in ("'nation'", "g.state", "g.county", "g.tract"):
        for detail in ("", ", p.race, p.hisp", ", p.va"):
            con.execute(f"SELECT {level}{detail}, COUNT(*) FROM persons p JOIN geo g USING (tract) GROUP BY ALL").fetchall()
    con.execute("SELECT g.county, p.sex, p.age, COUNT(*) FROM persons p JOIN geo g USING (tract) GROUP BY ALL").fetchall()
    sec["plain_duckdb_group_bys"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    x = np.zeros((n, DETAIL))
    x[cells["tract"], cells["d"]] = cells["count_star()"]
    rho_a, rho_b = a.rho * a.share_a, a.rho * (1 - a.share_a)
    sigma_a = A.sensitivity(2) / math.sqrt(2 * rho_a)          # Gaussian mechanism: Δ²/(2σ²)-zCDP
    clean = AD.matvec(H.matvec(x).T).T                          # (H ⊗ A_D) x, as nodes × A_D's rows
    y = clean + rng.normal(0, sigma_a, clean.shape)
    del clean
    ncounty = int(county.max()) + 1
    xb = np.zeros((ncounty, 2 * AGES))
    xb[sa["county"], sa["c"]] = sa["count_star()"]
    sigma_b = 1.0 / math.sqrt(2 * rho_b)
    yb = xb + rng.normal(0, sigma_b, xb.shape)
    sec["noise"] = time.perf_counter() - t0

    # -- estimation: least squares through the tree, integer tables ------------------------------------
    t0 = time.perf_counter()
    answers = least_squares(W, A, y.ravel())
    sec["estimation"] = time.perf_counter() - t0
    variances = A.query_variances(W)
    t0 = time.perf_counter()
    # TopDown on the race × Hispanic table (its columns add up to the total): the single cells are not
    # asked for, so A_D estimates them poorly and clipping them at zero would bias every sum
    d_pinv = np.linalg.pinv(AD.dense())                         # A_D⁺: the detail cells from A_D's rows
    node_est = tree.estimate_nodes(y @ (rh.dense() @ d_pinv).T, H.weights)
    integer = topdown_integer(tree, node_est)
    sec["integer_tables"] = time.perf_counter() - t0

    # -- errors per level ------------------------------------------------------------------------------
    truth_nodes = np.concatenate([agg @ x.sum(axis=1) for agg in tree.aggregations])
    offsets = np.cumsum([0] + [g.shape[0] * d.shape[0] for g in geo_levels for d in (Total(DETAIL), rh, va)])
    ones_d = np.ones(DETAIL)
    node_var = tree.node_variances(H.weights)
    total_d = ones_d @ d_pinv                                   # the total of the cells from A_D's rows
    d_var = float(total_d @ total_d)
    levels = {}
    sums_ok = True
    for li, name in enumerate(LEVELS):
        k = 3 * li  # the total term of this level
        wk = terms[k][0]  # a workload answer is its term's weight times the query's
        est = answers[offsets[k]:offsets[k + 1]] / wk
        lv = tree.level_nodes[li]
        truth = truth_nodes[lv.start:lv.stop]
        err = est - truth
        expected_rmse = float(math.sqrt(np.mean(variances[k]))) * sigma_a / wk
        # baseline: this level's own measurements, read alone (its weight, the same σ)
        base = (y[lv.start:lv.stop] @ total_d) / H.weights[li]
        base_err = base - truth
        base_expected = math.sqrt(d_var) * sigma_a / H.weights[li]
        # and with an equal share of ρ for every level (weight 1/2 each), as a fixed split would give
        equal_err = rng.normal(0, sigma_a, (len(lv), AD.shape[0])) @ total_d / 0.5
        int_err = integer[lv.start:lv.stop].sum(axis=1) - truth
        levels[name] = {
            "nodes": len(lv), "rmse": float(np.sqrt(np.mean(err**2))), "expected_rmse": expected_rmse,
            "mae": float(np.mean(np.abs(err))), "expected_mae": expected_rmse * math.sqrt(2 / math.pi),
            "baseline_rmse": float(np.sqrt(np.mean(base_err**2))), "baseline_expected_rmse": base_expected,
            "baseline_mae": float(np.mean(np.abs(base_err))),
            "equal_share_baseline_rmse": float(np.sqrt(np.mean(equal_err**2))),
            "equal_share_baseline_expected_rmse": math.sqrt(d_var) * sigma_a / 0.5,
            "integer_rmse": float(np.sqrt(np.mean(int_err.astype(float) ** 2))),
            "expected_rmse_tree_formula": float(math.sqrt(np.mean(node_var[lv.start:lv.stop]) * d_var)) * sigma_a}
        if li > 0:  # consistency: children add up to parents, for the float estimate and the integers
            parent_sum = np.zeros(tree.nodes)
            np.add.at(parent_sum, tree.parent[lv.start:lv.stop], node_est[lv.start:lv.stop].sum(axis=1))
            par = np.unique(tree.parent[lv.start:lv.stop])
            levels[name]["largest_inconsistency"] = float(np.abs(parent_sum[par] - node_est[par].sum(axis=1)).max())
            ip = np.zeros(integer.shape, dtype=np.int64)
            np.add.at(ip, tree.parent[lv.start:lv.stop], integer[lv.start:lv.stop])
            sums_ok &= bool(np.array_equal(ip[par], integer[par]))
    out["levels"] = levels
    out["integer_tables_add_up"] = sums_ok
    out["integer_tables_non_negative"] = bool((integer >= 0).all())
    out["sex_by_age_county"] = {"rmse": float(np.sqrt(np.mean((yb - xb) ** 2))), "expected_rmse": sigma_b}
    out["peak_memory_gb"] = peak_gb()
    out["sigma_a"] = sigma_a
    json.dump(out, sys.stdout, indent=1)
    print()
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(out, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
