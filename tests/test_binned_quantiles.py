"""Quantiles of binned columns (issue 40, item 6), against DuckDB.

A binned column's quantile is read from the noisy CDF over its bins, at their resolution: each
bin's f rows are taken as spread evenly within it (the k-th, 0-based, at (k + 1/2) / f of the way
from its lower edge to its upper one) and the quantile is DuckDB's of those rows. The oracles here
are independent of dpsql: DuckDB bins the raw rows itself (the last bin closed), the spread rows are
built in the test, and DuckDB computes the quantile of them; the true DuckDB quantile of the raw
rows must lie within the reported interval, which covers the bin holding the answer.
"""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
from dpsql.private.budget import Budget

EDGES = [0, 5, 10, 20, 50]
SCHEMA = {"table": "t", "columns": {
    "g": {"type": "categorical", "values": ["a", "b", "c"], "nullable": True},
    "age": {"type": "integer", "min": 0, "max": 9},
    "x": {"type": "numeric", "bins": EDGES, "nullable": True},
}}
#: DuckDB's own binning of x: [lo, hi), the last bin closed
BIN_SQL = ("CASE WHEN x >= 0 AND x < 5 THEN 0 WHEN x >= 5 AND x < 10 THEN 1 WHEN x >= 10 AND x < 20 THEN 2 "
           "WHEN x >= 20 AND x <= 50 THEN 3 END")
HUGE = Budget(epsilon=1e13, delta=0.5)


def table(kind: str, n: int = 300, seed: int = 0) -> duckdb.DuckDBPyConnection:
    """A table ``t`` (g, age, x) whose x values are drawn as ``kind`` says, with NULLs and values on the edges."""
    rng = np.random.default_rng(seed)
    x = {"uniform": lambda: rng.uniform(0, 50, n),
         "skewed": lambda: np.minimum(rng.exponential(6.0, n), 50),
         "edges": lambda: rng.choice(np.array(EDGES, dtype=float), n),
         "top": lambda: np.where(rng.random(n) < 0.7, 50.0, rng.uniform(20, 50, n)),
         "one bin": lambda: rng.uniform(10, 20, n)}[kind]()
    x[rng.random(n) < 0.15] = np.nan
    g = rng.choice(np.array(["a", "b", "c", None], dtype=object), n, p=[0.5, 0.3, 0.15, 0.05])
    g[(x > 30) & (g == "c")] = "a"  # group c holds no value above 30
    df = pd.DataFrame({"g": g, "age": rng.integers(0, 10, n), "x": pd.array(np.where(np.isnan(x), None, x),
                                                                                  dtype="Float64")})
    con = duckdb.connect()
    con.register("df", df)
    con.execute("CREATE TABLE t AS SELECT g::VARCHAR AS g, age::INTEGER AS age, x::DOUBLE AS x FROM df")
    con.unregister("df")
    return con


def connect(con, budget: Budget = HUGE, **kwargs) -> dpsql.Connection:
    return dpsql.connect(con, schema=SCHEMA, budget=budget, cache=False, **kwargs)


def spread(con, where: str, key: str) -> duckdb.DuckDBPyConnection:
    """A DuckDB table ``s`` (k, x): per group ``k`` (``key`` over t's rows), DuckDB's exact count of
    t's rows in each bin (WHERE ``where``, NULL x skipped) as that many rows spread evenly within it."""
    counts = con.sql(f"SELECT {key} AS k, {BIN_SQL} AS bin, COUNT(*) AS f FROM t "
                     f"WHERE x IS NOT NULL AND ({where}) GROUP BY ALL").fetchall()
    rows = [(k, EDGES[b] + (i + 0.5) / f * (EDGES[b + 1] - EDGES[b])) for k, b, f in counts for i in range(f)]
    out = duckdb.connect()
    out.register("rows", pd.DataFrame(rows or None, columns=["k", "x"], dtype=object))
    out.execute("CREATE TABLE s AS SELECT k::VARCHAR AS k, x::DOUBLE AS x FROM rows")
    return out


AGGREGATES = ["MEDIAN(x)", "QUANTILE_CONT(x, 0.1)", "QUANTILE_DISC(x, 0.75)", "QUANTILE(x, 0)",
              "QUANTILE_CONT(x, 1)", "QUANTILE_DISC(x, 0.5)",
              "PERCENTILE_CONT(0.3) WITHIN GROUP (ORDER BY x DESC)",
              "PERCENTILE_DISC(0.6) WITHIN GROUP (ORDER BY x DESC)"]


def by_group(rows) -> dict:
    return {r[0]: r[1:] for r in rows}


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("where", ["TRUE", "age >= 3", "g <> 'b' OR x >= 10"])
def test_exact_counts_give_the_interpolation_duckdb_computes_on_spread_rows(keyed, where):
    """(1) At a huge epsilon the answer is DuckDB's quantile of each bin's exact count of rows
    spread evenly within the bin, for every quantile function and order, grouped or not, with a
    WHERE (the rows' NULL x are skipped, as DuckDB skips them)."""
    con = table("uniform", seed=1)
    aggs = ", ".join(f"{a} AS q{i}" for i, a in enumerate(AGGREGATES))
    key, group = ("g, ", " GROUP BY g") if keyed else ("", "")
    res = connect(con).query(f"SELECT {key}{aggs} FROM t WHERE {where}{group}", epsilon=1e12)
    want = by_group(spread(con, where, "g" if keyed else "NULL").sql(f"SELECT k, {aggs} FROM s GROUP BY k")
                    .fetchall())
    groups = res.df["g"].tolist() if keyed else [None]
    assert set(want) <= set(groups)
    for r, g in enumerate(groups):
        for i in range(len(AGGREGATES)):
            got, exact = res.df[f"q{i}"].iloc[r], want.get(g, [None] * len(AGGREGATES))[i]
            if exact is None:  # no row with a value: NULL, as DuckDB's
                assert math.isnan(got), (where, g, AGGREGATES[i], got)
            else:
                assert math.isclose(got, exact, rel_tol=1e-9, abs_tol=1e-9), (where, g, AGGREGATES[i], got, exact)


def test_formula_by_hand():
    """(1) The definition on a small table, computed by hand: bins [0, 5) 1 row, [5, 10) none,
    [10, 20) 2 rows, [20, 50] 1 row (at the closed top edge); NULLs are not counted."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT * FROM (VALUES ('a', 1, 3.0), ('a', 2, 11.0), ('a', 3, 19.5), "
                "('a', 4, 50.0), ('a', 5, NULL), ('b', 6, NULL)) v(g, age, x)")
    res = connect(con).query("SELECT g, MEDIAN(x) AS m, QUANTILE_DISC(x, 0.25) AS d, QUANTILE_CONT(x, 0.9) AS c "
                             "FROM t GROUP BY g ORDER BY g", epsilon=1e12)
    # rows spread: 2.5; 12.5, 17.5; 35. Median: halfway between 12.5 and 17.5. DISC 0.25: rank 0.
    # CONT 0.9: h = 2.7, 17.5 + 0.7 * (35 - 17.5)
    assert res.df["m"].tolist()[0] == pytest.approx(15.0)
    assert res.df["d"].tolist()[0] == pytest.approx(2.5)
    assert res.df["c"].tolist()[0] == pytest.approx(17.5 + 0.7 * 17.5)
    assert all(math.isnan(v) for v in res.df.loc[1, ["m", "d", "c"]])  # b: only NULLs, as DuckDB's NULL
    assert (res.df["m_ci_low"][0], res.df["m_ci_high"][0]) == (10.0, 20.0)
    assert (res.df["d_ci_low"][0], res.df["d_ci_high"][0]) == (0.0, 5.0)
    assert (res.df["c_ci_low"][0], res.df["c_ci_high"][0]) == (10.0, 50.0)  # between ranks 2 and 3: two bins


@pytest.mark.parametrize("kind", ["uniform", "skewed", "edges", "top", "one bin"])
def test_true_quantile_is_within_the_interval_that_covers_the_bin(kind):
    """(2) DuckDB's exact quantile of the raw rows lies within the reported interval, which holds
    the answer and the whole bin holding it; the result's notes say which bin it is interpolated in."""
    con = table(kind, seed=7)
    aggs = ", ".join(f"{a} AS q{i}" for i, a in enumerate(AGGREGATES))
    sql = f"SELECT g, {aggs} FROM t WHERE age <> 4 GROUP BY g"
    res = connect(con).query(sql, epsilon=1e12)
    true = by_group(con.sql(sql).fetchall())
    assert true
    for r, g in enumerate(res.df["g"]):
        for i in range(len(AGGREGATES)):
            q, low, high = res.df[f"q{i}"][r], res.df[f"q{i}_ci_low"][r], res.df[f"q{i}_ci_high"][r]
            exact = true.get(g, [None] * len(AGGREGATES))[i]
            if exact is None:
                assert math.isnan(q) and math.isnan(low) and math.isnan(high)
                continue
            b = min(int(np.searchsorted(EDGES, q, side="right")) - 1, len(EDGES) - 2)
            assert low <= EDGES[b] <= q <= EDGES[b + 1] <= high, (kind, g, AGGREGATES[i], low, q, high)
            assert low <= exact <= high, (kind, g, AGGREGATES[i], low, exact, high)
            assert EDGES[0] <= low and high <= EDGES[-1]  # within the declared bins
            closed = "]" if b == len(EDGES) - 2 else ")"
            assert any(f"q{i} is interpolated within bin" in n and f"[{EDGES[b]}, {EDGES[b + 1]}{closed}" in n
                       for n in res.notes), res.notes
    assert all(n in res.describe() for n in res.notes)


def test_binned_key_summed_and_filtered_column():
    """(3) Grouped by the binned column itself, beside its SUM (its bins then measured by endpoint
    masses), with FILTER and CASE spellings, on a column with NULLs: DuckDB's quantile of the rows
    each one counts, spread evenly within their bin, and the true quantile within the interval,
    which is the group's bin."""
    con = table("skewed", n=200, seed=3)
    sql = ("SELECT x, MEDIAN(x) AS m, SUM(x) AS s, QUANTILE_CONT(x, 0.8) FILTER (WHERE g = 'a') AS fa, "
           "MEDIAN(CASE WHEN age < 5 THEN x END) AS young FROM t GROUP BY x")
    res = connect(con).query(sql, epsilon=1e12)
    assert res.df["x"].tolist() == ["[0, 5)", "[5, 10)", "[10, 20)", "[20, 50]", None]
    assert res.df["s"].sum() == pytest.approx(con.sql("SELECT SUM(x) FROM t").fetchall()[0][0])
    for col, agg, where in (("m", "MEDIAN(x)", "TRUE"), ("fa", "QUANTILE_CONT(x, 0.8)", "g = 'a'"),
                            ("young", "MEDIAN(x)", "age < 5")):
        spread_rows = by_group(spread(con, where, BIN_SQL).sql(f"SELECT k::INTEGER, {agg} FROM s GROUP BY k")
                               .fetchall())
        true = by_group(con.sql(f"SELECT {BIN_SQL} AS b, {agg} FROM t WHERE {where} GROUP BY b").fetchall())
        for r in range(4):
            got, low, high = res.df[col][r], res.df[f"{col}_ci_low"][r], res.df[f"{col}_ci_high"][r]
            assert math.isclose(got, spread_rows[r][0], rel_tol=1e-9), (r, col, got, spread_rows[r][0])
            assert EDGES[r] == low <= true[r][0] <= high == EDGES[r + 1]  # one bin per group: the bin itself
        assert math.isnan(res.df[col][4])  # the NULL bin: no value


def test_notes_are_kept_with_a_repeat_and_the_provenance():
    """A repeated request is answered by the release kept beside the ledger: its notes too."""
    db = connect(table("uniform", seed=4))
    first = db.query("SELECT MEDIAN(x) AS m, COUNT(*) AS n FROM t", epsilon=1.0)
    again = db.query("SELECT MEDIAN(x) AS m, COUNT(*) AS n FROM t", epsilon=1.0)
    assert again.repeated and again.notes == first.notes and len(first.notes) == 1
    assert first.notes[0].startswith("m is interpolated within bin [")
    assert first.provenance()["notes"] == list(first.notes)
    assert db.query("SELECT AVG(x) AS a FROM t", epsilon=1.0).notes == ()  # nothing interpolated


def test_generator_statement_is_accepted():
    """The statement of issue 40 that was refused: a binned column's median, grouped and not."""
    con = table("uniform", seed=2)
    db = connect(con)
    for sql in ("SELECT median(x) FROM t", "SELECT g, median(x) AS m FROM t GROUP BY g ORDER BY m DESC"):
        assert len(db.query(sql, epsilon=1e12).df) >= 1


SMALL = {"table": "t", "columns": {"x": {"type": "numeric", "bins": list(range(11))}}}


def _released_medians(tmp_path, seeds: int) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """DuckDB's median of an even spread over [0, 10) (10 bins), and the median released at epsilon 1
    with each of ``seeds`` noise seeds, with its interval; each spend is the one planned (explain)."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT (i * 7919 % 400) / 40.0 AS x FROM range(400) r(i)")
    sql = "SELECT MEDIAN(x) AS m FROM t"
    planned = dpsql.connect(con, schema=SMALL, budget=Budget(epsilon=1.0), cache=tmp_path).explain(sql, epsilon=1.0)
    out = []
    for seed in range(seeds):
        db = dpsql.connect(con, schema=SMALL, budget=Budget(epsilon=1.0), cache=tmp_path,
                           source_of_noise=np.random.default_rng(seed))
        res = db.query(sql, epsilon=1.0)
        assert res.epsilon == planned.cost.epsilon == 1.0 and db.spent().epsilon == 1.0
        out.append(res.df.loc[0, ["m", "ci_low", "ci_high"]].to_numpy(dtype=float))
    answers, lows, highs = np.array(out).T
    assert np.all((lows <= answers) & (answers <= highs))
    return con.sql(sql).fetchall()[0][0], answers, lows, highs


def test_spend_is_planned_and_the_interval_covers_the_truth(tmp_path):
    """(4) At epsilon 1 on a small domain: the spend recorded is the one planned (explain) and
    asked for; the noisy median varies from seed to seed, within its interval, which holds the truth."""
    true, answers, lows, highs = _released_medians(tmp_path, 4)
    assert np.all((lows <= true) & (true <= highs))
    assert answers.std() > 0  # noisy


@pytest.mark.slow
def test_noise_spread_matches_the_interval(tmp_path):
    """(4) Over 60 seeds, the released median's spread is no wider than its stated 95% interval
    allows (a normal 95% range of the answers fits within the mean interval), the interval covers
    DuckDB's true median at least as often as its confidence level says, and it is informative."""
    true, answers, lows, highs = _released_medians(tmp_path, 60)
    assert np.mean((lows <= true) & (true <= highs)) >= 0.95
    assert 0 < 1.96 * answers.std() <= np.mean(highs - lows) / 2
    assert np.mean(highs - lows) <= 4  # a few of the 10 bins
