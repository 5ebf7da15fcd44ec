"""Test-only oracle: a random table in DuckDB, its exact histogram, and a
seeded generator of statements with the DuckDB SQL that answers them exactly.

The public API never returns exact answers; this module exists only so the
tests can check ``workload @ x`` against DuckDB.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass

import duckdb
import numpy as np
import pandas as pd

from dpsql.schema import load_schema
from dpsql.sql import compile_batch
from dpsql.sql.aggregates import quantile_interval
from dpsql.sql.outputs import error_names

SCHEMA = {
    "table": "people",
    "columns": {
        "sex": {"type": "categorical", "values": ["F", "M"], "nullable": True},
        "age": {"type": "integer", "min": 0, "max": 20, "nullable": True},  # SUM bounds from the domain
        "hours": {"type": "numeric", "bins": [0, 10, 20, 40], "nullable": True},
        "white": {"type": "boolean"},
        "black": {"type": "boolean", "nullable": True},
        "region": {"type": "categorical", "values": ["E", "N", "S", "W"]},
        "score": {"type": "categorical", "values": [1, 2, 5, 10], "nullable": True, "bounds": [0, 8]},
    },
    # a public lookup table (W has no zone: an INNER join drops its rows, a LEFT join gives NULL)
    "public_tables": {"zones": {"columns": ["region", "zone", "km"],
                                "rows": [["E", "coast", 5], ["N", "inland", 120.5], ["S", "coast", 2], ["X", "none", 0]]}},
}
HOURS_EDGES = [0, 10, 20, 40]
HOURS_BIN_SQL = ("CASE WHEN hours < 10 THEN '[0, 10)' WHEN hours < 20 THEN '[10, 20)' "
                 "WHEN hours <= 40 THEN '[20, 40]' END")
SCORE_CLAMPED = "(CASE WHEN score > 8 THEN 8 WHEN score < 0 THEN 0 ELSE score END)"


def schema():
    return load_schema(SCHEMA)


def make_table(n: int = 400, seed: int = 0) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection holding a random ``people`` table with NULLs."""
    rng = np.random.default_rng(seed)

    def maybe_null(values, p=0.12):
        return [None if rng.random() < p else v for v in values]

    hours = rng.uniform(0, 40, n)
    edge_rows = rng.random(n) < 0.2
    hours[edge_rows] = rng.choice(HOURS_EDGES, edge_rows.sum())
    df = pd.DataFrame({
        "sex": maybe_null(rng.choice(["F", "M"], n).tolist()),
        "age": pd.array(maybe_null(rng.integers(0, 21, n).tolist()), dtype="Int64"),
        "hours": pd.array(maybe_null(hours.tolist()), dtype="Float64"),
        "white": rng.random(n) < 0.6,
        "black": pd.array(maybe_null((rng.random(n) < 0.3).tolist()), dtype="boolean"),
        "region": rng.choice(["E", "N", "S", "W"], n).tolist(),
        "score": pd.array(maybe_null(rng.choice([1, 2, 5, 10], n).tolist()), dtype="Int64"),
    })
    con = duckdb.connect()
    con.register("df", df)
    con.execute("CREATE TABLE people AS SELECT sex::VARCHAR AS sex, age::INTEGER AS age, "
                "hours::DOUBLE AS hours, white::BOOLEAN AS white, black::BOOLEAN AS black, "
                "region::VARCHAR AS region, score::INTEGER AS score FROM df")
    con.unregister("df")
    con.execute("CREATE TABLE zones (region VARCHAR, zone VARCHAR, km DOUBLE)")
    con.executemany("INSERT INTO zones VALUES (?, ?, ?)", SCHEMA["public_tables"]["zones"]["rows"])
    return con


def histogram(con: duckdb.DuckDBPyConnection, batch, table: str = "people") -> np.ndarray:
    """The exact data vector over ``batch.attributes`` (test-only)."""
    df = con.sql(f"SELECT * FROM {table}").df()
    sch = batch.schema
    idx = {}
    for c in sch.columns:
        vals = [None if pd.isna(v) else (v.item() if hasattr(v, "item") else v) for v in df[c.name]]
        enc = c.encode(vals)
        assert (enc >= 0).all(), f"value outside the domain of {c.name}"
        idx[c.name] = enc
    # a split (summed binned) column: each row's share in its bin's lower and upper endpoint
    # cells, computed here in numpy from the row's value and the bin's clamped edges
    x = np.zeros(math.prod(batch.domain))
    weight = np.ones(len(df))
    split = [c for a in batch.attributes for c in a.split]
    for sides in itertools.product((0, 1), repeat=len(split)):
        w, cell = weight.copy(), dict(idx)
        for c, side in zip(split, sides):
            col = sch.column(c)
            lo, hi = col.sum_bounds
            edges = np.clip(np.asarray(col.edges, float), lo, hi)
            v = df[c].to_numpy(dtype=float, na_value=np.nan)
            b = np.minimum(idx[c], len(edges) - 2)
            width = edges[b + 1] - edges[b]
            up = np.where(np.isnan(v) | (width == 0), 0.0,
                          (np.clip(v, lo, hi) - edges[b]) / np.where(width == 0, 1, width))
            w = w * (up if side else 1 - up)
            cell[c] = 2 * idx[c] + side
        attr_idx = [np.ravel_multi_index([cell[c] for c in a.columns], a.sizes) for a in batch.attributes]
        flat = np.ravel_multi_index(attr_idx, batch.domain) if attr_idx else np.zeros(len(df), np.int64)
        x += np.bincount(flat, weights=w, minlength=x.size)
    return x


def _py(v):
    if v is None:
        return None
    try:
        if pd.isna(v):
            return None
    except (TypeError, ValueError):
        pass
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def exact_rows(con, oracle_sql: str, plan) -> tuple[dict[tuple, tuple], list[str]]:
    """DuckDB's rows for ``oracle_sql`` by group key (see :func:`group_key`), and the output names.
    With grouping sets the oracle selects ``GROUPING(keys...) AS gid`` (keys in the plan's order):
    a group's key starts with it, since two sets can hold the same labels (NULL of a margin)."""
    names = list(plan.outputs)
    key_pos = [names.index(k.name) for k in plan.keys]
    exact = {}
    for r in con.sql(oracle_sql).fetchall():
        key = tuple(_py(r[p]) for p in key_pos)
        if plan.grouping_sets is not None:
            key = (r[names.index("gid")], *key)
        assert key not in exact, f"duplicate group {key}"
        exact[key] = r
    return exact, names


def group_key(st, i: int) -> tuple:
    """Group ``i`` of a compiled statement as :func:`exact_rows` keys DuckDB's rows."""
    key = tuple(_py(v) for v in st.groups[i])
    sets = st.plan.grouping_sets
    if sets is None:
        return key
    n = len(st.plan.keys)
    return (sum(1 << (n - 1 - k) for k in range(n) if k not in sets[st.sets[i]]), *key)


def compare(batch, statement_index: int, y: np.ndarray, con, oracle_sql: str) -> None:
    """Assert that the batch's answers for one statement equal DuckDB's
    exact answers to ``oracle_sql`` (same select list), group by group; groups
    DuckDB does not return are 0 (COUNT, SUM) or undefined (AVG, variances), and a SUM
    is NULL only where DuckDB's is (the domain proves the group has no value to sum)."""
    st = batch.statements[statement_index]
    plan = st.plan
    table = batch.tables(y)[statement_index]
    exact, names = exact_rows(con, oracle_sql, plan)
    ours_keys = [group_key(st, i) for i in range(len(st.groups))]
    assert len(set(ours_keys)) == len(ours_keys), "groups must be distinct"
    missing = set(exact) - set(ours_keys)
    assert not missing, f"DuckDB groups {missing} are not in the compiled domain"
    for i, key in enumerate(ours_keys):
        r = exact.get(key)
        for agg in plan.aggregates:
            got = table[agg.name].iloc[i]
            want = None if r is None else r[names.index(agg.name)]
            bins = binned_interval(st, agg.name, y)
            if bins is not None:  # read within the bins: DuckDB's value and ours in the bins' interval
                assert_within(got, want, (bins[0][i], bins[1][i]), (plan.sql, key, agg.name))
            elif agg.func not in ("count", "sum"):  # AVG, variances: NULL where DuckDB has too few rows
                if want is None:
                    assert np.isnan(got), (plan.sql, key, agg.name, got)
                elif agg.func.startswith("stddev"):  # the square root of a variance's rounding (1e-15 when
                    # the group's values are all equal) is 3e-8: compared by their squares
                    assert math.isclose(got**2, float(want) ** 2, rel_tol=1e-9, abs_tol=1e-9), (plan.sql, key, got, want)
                else:
                    assert math.isclose(got, float(want), rel_tol=1e-9, abs_tol=1e-9), (plan.sql, key, got, want)
            elif agg.func == "sum" and np.isnan(got):  # NULL: the domain proves the group has no value to sum
                assert want is None, (plan.sql, key, agg.name, got, want)
            else:
                want = 0.0 if want is None else float(want)
                assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-9), (plan.sql, key, agg.name, got, want)


def binned_interval(st, name: str, y: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """For a quantile of a binned column, its interval per group from workload answers ``y`` taken as
    exact (no error band): the bins of the ranks DuckDB reads. None for another aggregate."""
    bins = np.asarray(st.thresholds.get(name, ()), dtype=float)
    if bins.ndim != 2:
        return None
    agg = next(a for a in st.plan.aggregates if a.name == name)
    parts = st.parts(name, y)
    return quantile_interval(agg.func, agg.quantile, agg.descending, bins, parts,
                             {k: np.zeros_like(v) for k, v in parts.items()}, 0.0)


def released_interval(st, df: pd.DataFrame, name: str, i: int) -> tuple[float, float] | None:
    """For a quantile of a binned column, the interval released beside it in row ``i`` of ``df``
    (its ``ci_low`` and ``ci_high``); None for another aggregate."""
    if np.asarray(st.thresholds.get(name, ())).ndim != 2:
        return None
    _, low, high = error_names(st.plan, name)
    return float(df[low].iloc[i]), float(df[high].iloc[i])


def assert_within(got: float, want, interval: tuple[float, float], context) -> None:
    """A quantile of a binned column against DuckDB's ``want``: NULL where DuckDB's is (or has no
    row), else both in ``interval``, the bins it is read within."""
    if want is None:
        assert math.isnan(got), (*context, got, want)
        return
    low, high = interval
    assert low <= float(want) <= high and low <= got <= high, (*context, low, got, want, high)


def assert_released_near_exact(func: str, got: float, want, context,
                               interval: tuple[float, float] | None = None) -> None:
    """A release at a huge budget against DuckDB's exact value ``want`` (None where DuckDB has no
    row for the group, or a NULL): COUNT and SUM are 0 there, AVG and the variances undefined.

    Releases are rounded to 2^-24 of the strategy's sensitivity (dpsql/private/noise.py); a
    variance of a few rows amplifies that rounding in its SUM of squares, and a standard
    deviation near 0 amplifies it again, so those are compared more loosely, and by their square.
    A quantile of a binned column is compared by its released ``interval`` (:func:`released_interval`).
    """
    if interval is not None:
        assert_within(got, want, interval, context)
        return
    if func == "sum" and math.isnan(got):  # NULL: the domain proves the group has no value to sum
        assert want is None, (*context, got, want)
        return
    if func in ("count", "sum"):  # rounding 2^-24 of a sensitivity above 16 exceeds 1e-6 (seen: 1.08e-6)
        want = 0.0 if want is None else float(want)
        assert math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-4), (*context, got, want)
        return
    if want is None:  # DuckDB's NULL, or a group it does not return (no rows): NULL, exactly
        assert math.isnan(got), (*context, got, want)
        return
    if func.startswith("quantile"):  # read off a CDF of whole counts: exact
        assert math.isclose(got, float(want), rel_tol=1e-12, abs_tol=1e-12), (*context, got, want)
        return
    # the rounding is bounded; variances of three rows have shown errors up to 1.7e-4
    tol, power = (1e-6, 1) if func == "avg" else (1e-3, 2 if func.startswith("stddev") else 1)
    assert math.isclose(got**power, float(want) ** power, rel_tol=tol, abs_tol=tol), (*context, got, want)


# -- the statement generator ----------------------------------------------------------------

@dataclass
class Generated:
    sql: str      # for dpsql
    oracle: str   # for DuckDB (binned GROUP BY and clamped SUM spelled out)


class StatementGenerator:
    """Seeded random statements over :data:`SCHEMA` with their oracle SQL."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.sets_rng = random.Random(-1 - seed)  # its own stream: the other statements stay as they were
        self.bins_rng = random.Random(-100_000 - seed)  # the same, for quantiles of the binned column

    def leaf(self) -> str:
        r = self.rng
        col = r.choice(["sex", "age", "age", "hours", "white", "black", "region", "score", "cross", "duckdb"])
        if col == "duckdb":  # evaluated by DuckDB itself on the domain (dpsql.sql.domain_eval)
            return r.choice(["sex LIKE 'F%'", "lower(region) IN ('e', 'w')", "region ILIKE 'n'", "age // 5 = 2",
                             "age % 3 = 0", "age / 4 > 2.5", "COALESCE(score, 0) * 0.5 >= 1",
                             "starts_with(COALESCE(sex, 'x'), 'x')", "regexp_matches(region, '[NS]')",
                             "length(sex || region) = 2", "NULLIF(age, 10) IS NULL", "sqrt(score) > 2",
                             f"CAST(age AS VARCHAR) LIKE '{r.randint(1, 2)}%'"])
        if col == "sex":
            return r.choice(["sex = 'F'", "sex <> 'M'", "sex IN ('F')", "sex NOT IN ('M')", "sex IS NULL",
                             "sex IS NOT NULL", "sex < 'M'", "sex IN ('F', 'M')"])
        if col == "age":
            op = r.choice(["<", "<=", ">", ">=", "=", "<>", "IN", "NOT IN", "BETWEEN", "IS NULL"])
            if op in ("<", "<=", ">", ">="):
                return f"age {op} {r.randint(-1, 21)}"
            if op in ("=", "<>"):
                return f"age {op} {r.randint(0, 20)}"
            if op in ("IN", "NOT IN"):
                vals = sorted(r.sample(range(21), r.randint(1, 4)))
                return f"age {op} ({', '.join(map(str, vals))})"
            if op == "BETWEEN":
                a, b = sorted(r.sample(range(-2, 23), 2))
                return f"age {r.choice(['', 'NOT '])}BETWEEN {a} AND {b}"
            return r.choice(["age IS NULL", "age IS NOT NULL"])
        if col == "hours":
            # bins are [lo, hi) with the last one closed: these cuts are exact
            e = r.choice([0, 10, 20, -5, 50])
            op = r.choice(["<", ">="])
            if r.random() < 0.2:
                a, b = sorted(r.sample([0, 10, 20, 40], 2))
                return f"(hours >= {a} AND hours {'<=' if b == 40 else '<'} {b})"
            if r.random() < 0.15:
                return r.choice(["hours <= 40", "hours > 40", "hours BETWEEN 0 AND 40", "hours <> 55"])
            if r.random() < 0.1:
                return r.choice(["hours IS NULL", "hours IS NOT NULL"])
            return f"hours {op} {e}"
        if col == "white":
            return r.choice(["white", "NOT white", "white = TRUE", "white <> FALSE", "white IS NOT NULL"])
        if col == "black":
            return r.choice(["black", "NOT black", "black = FALSE", "black IS NULL", "black IS NOT NULL",
                             "black IS TRUE", "black IS NOT TRUE"])
        if col == "region":
            vals = r.sample(["E", "N", "S", "W"], r.randint(1, 3))
            return r.choice([f"region = '{vals[0]}'", f"region IN ({', '.join(repr(v) for v in vals)})",
                             f"region NOT IN ({', '.join(repr(v) for v in vals)})", f"region >= '{vals[0]}'"])
        if col == "score":
            return r.choice([f"score = {r.choice([1, 2, 5, 10])}", f"score > {r.randint(0, 11)}",
                             "score IS NULL", f"score IN (1, {r.choice([2, 5, 10])})", "score <= 4.5"])
        return r.choice(["CAST(white AS INTEGER) + CAST(black AS INTEGER) >= 1", "age < score",
                         "age + score = 7", "(sex = 'F') = black", "age - 2 * score > 0"])

    def predicate(self, depth: int) -> str:
        r = self.rng
        if depth <= 0 or r.random() < 0.35:
            return self.leaf()
        kind = r.choice(["AND", "OR", "OR", "NOT"])
        if kind == "NOT":
            return f"NOT ({self.predicate(depth - 1)})"
        return f"({self.predicate(depth - 1)} {kind} {self.predicate(depth - 1)})"

    KEYS = [
        ("sex", "sex"), ("age", "age"), ("white", "white"), ("black", "black"), ("region", "region"),
        ("score", "score"),
        ("hours", None),
        ("CASE WHEN age < 5 THEN 'young' WHEN age < 15 THEN 'mid' ELSE 'old' END AS ageg", "ageg"),
        ("CASE WHEN age BETWEEN 0 AND 9 THEN 1 WHEN age >= 18 THEN 3 END AS agec", "agec"),
        ("CASE region WHEN 'N' THEN 'north' WHEN 'S' THEN 'south' ELSE 'other' END AS reg2", "reg2"),
        ("CASE WHEN hours < 20 THEN 'part' WHEN hours >= 20 THEN 'full' END AS hbin", "hbin"),
        ("CASE WHEN white AND black THEN 'both' WHEN white OR black THEN 'one' ELSE 'none' END AS wb", "wb"),
        ("CAST(white AS INTEGER) + CAST(black AS INTEGER) AS nflags", "nflags"),
        ("age >= 18 AS adult", "adult"),
        ("age // 5 AS age5", "age5"), ("lower(COALESCE(sex, region)) AS sr", "sr"),
        ("substr(region, 1, 1) || CAST(score % 2 AS VARCHAR) AS rs", "rs"), ("score * 0.5 AS half", "half"),
    ]
    AGGS = [("COUNT(*)", "COUNT(*)"), ("COUNT(black)", "COUNT(black)"), ("COUNT(age)", "COUNT(age)"),
            ("SUM(age)", "SUM(age)"), ("AVG(age)", "AVG(age)"),
            ("SUM(score)", f"SUM({SCORE_CLAMPED})"), ("AVG(score)", f"AVG({SCORE_CLAMPED})"),
            ("SUM(hours)", "SUM(hours)"), ("AVG(hours)", "AVG(hours)"),
            ("VAR_SAMP(age)", "VAR_SAMP(age)"), ("STDDEV_POP(age)", "STDDEV_POP(age)"),
            ("VARIANCE(score)", f"VARIANCE({SCORE_CLAMPED})"), ("STDDEV(age)", "STDDEV(age)"),
            ("MEDIAN(age)", "MEDIAN(age)"), ("QUANTILE_DISC(score, 0.25)", "QUANTILE_DISC(score, 0.25)"),
            ("PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY age DESC)", "PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY age DESC)"),
            ("PERCENTILE_DISC(0.3) WITHIN GROUP (ORDER BY score DESC)", "PERCENTILE_DISC(0.3) WITHIN GROUP (ORDER BY score DESC)"),
            ("PROPORTION", None)]  # the share of rows where a random condition holds (:meth:`proportion`)

    #: quantiles of the binned column, read within its bins (their interval holds DuckDB's value)
    BINNED_QUANTILES = ["MEDIAN(hours)", "QUANTILE_CONT(hours, 0.25)", "QUANTILE_DISC(hours, 0.9)",
                        "PERCENTILE_CONT(0.7) WITHIN GROUP (ORDER BY hours DESC)",
                        "MEDIAN(hours) FILTER (WHERE age > 8)"]

    def proportion(self) -> str:
        """An AVG of a random condition made 1, 0 or NULL, in one of the spellings dpsql reads as a
        ratio of two counts (DuckDB answers each as written: its NULLs are skipped)."""
        cond = self.predicate(1)
        return self.rng.choice([f"AVG(CASE WHEN {cond} THEN 1 ELSE 0 END)", f"AVG(({cond})::INT)",
                                f"AVG(CAST(({cond}) AS DOUBLE))", f"AVG(CASE WHEN {cond} THEN 1 END)",
                                f"AVG(CASE WHEN {cond} THEN 1.0 ELSE NULL END)", f"AVG(CAST({cond} AS INTEGER))"])

    def filtered(self, agg: str, cond: str) -> str:
        """``agg`` restricted to the rows where ``cond`` holds, spelled as FILTER or, where
        SQL allows an equivalent, as a CASE argument."""
        func, arg = agg[:-1].split("(", 1)
        spellings = [f"{agg} FILTER (WHERE {cond})"]
        if func in ("MEDIAN", "QUANTILE_DISC") or "WITHIN GROUP" in agg:
            return self.rng.choice(spellings + ([f"MEDIAN(CASE WHEN {cond} THEN {arg} END)"] if func == "MEDIAN" else []))
        if arg != "*":
            spellings.append(f"{func}(CASE WHEN {cond} THEN {arg} END)")
        if func == "SUM":
            spellings.append(f"SUM(CASE WHEN {cond} THEN {arg} ELSE 0 END)")
        if agg == "COUNT(*)":
            spellings += [f"SUM(CASE WHEN {cond} THEN 1 ELSE 0 END)", f"COUNT(CASE WHEN {cond} THEN 'x' END)"]
        return self.rng.choice(spellings)

    def statement(self) -> Generated:
        r = self.rng
        nkeys = r.choice([0, 1, 1, 2])
        keys = r.sample(self.KEYS, nkeys)
        aggs = r.sample(self.AGGS, r.choice([1, 1, 2]))
        sel, osel, group, ogroup = [], [], [], []
        for i, (expr, alias) in enumerate(keys):
            if alias is None:  # binned column
                sel.append("hours")
                osel.append(f"{HOURS_BIN_SQL} AS hours")
                group.append("hours" if r.random() < 0.5 else str(i + 1))
                ogroup.append(str(i + 1))
            else:
                sel.append(expr)
                osel.append(expr)
                g = alias if r.random() < 0.6 else str(i + 1)
                group.append(g)
                ogroup.append(str(i + 1))
        for j, (a, oa) in enumerate(aggs):
            if a == "PROPORTION":
                a = oa = self.proportion()
            if r.random() < 0.3:  # the rows where a condition holds: FILTER, or a CASE argument
                cond = self.predicate(1)
                a, oa = self.filtered(a, cond), f"{oa} FILTER (WHERE {cond})"
            sel.append(f"{a} AS agg{j}")
            osel.append(f"{oa} AS agg{j}")
        where = ""
        if r.random() < 0.85:
            where = f" WHERE {self.predicate(r.choice([1, 2, 3]))}"
        join = r.choice(["", "", "", "", "", "", "", " JOIN zones USING (region)", " LEFT JOIN zones z USING (region)"])
        if join and r.random() < 0.6:  # the public table's column as a key
            sel.insert(0, "zone")
            osel.insert(0, "zone")
            keys = [("zone", "zone"), *keys]
            group = [g if not g.isdigit() else str(int(g) + 1) for g in group]
            ogroup = [str(int(g) + 1) for g in ogroup]
            group.insert(0, "zone")
            ogroup.insert(0, "1")
        if join and self.sets_rng.random() < 0.4:  # a public lookup column's SUM or AVG (its own stream)
            lk = f"{self.sets_rng.choice(['SUM', 'AVG'])}(km)"
            sel.append(f"{lk} AS lk")
            osel.append(f"{lk} AS lk")
        if self.bins_rng.random() < 0.15:  # a quantile of the binned column: compared by its interval (compare)
            bq = self.bins_rng.choice(self.BINNED_QUANTILES)
            sel.append(f"{bq} AS bq")
            osel.append(f"{bq} AS bq")
        if keys and self.sets_rng.random() < 0.15:  # a window over the groups' released aggregate
            (a, oa), window = aggs[0], self.sets_rng.choice(["SUM({}) OVER ()", "rank() OVER (ORDER BY {} DESC)",
                                                              "row_number() OVER (ORDER BY {})"])
            sel.append(f"{window.format(sel[len(keys)].rsplit(' AS ', 1)[0])} AS win")
            osel.append(f"{window.format(osel[len(keys)].rsplit(' AS ', 1)[0])} AS win")
        grouping = keys and self.sets_rng.random() < 0.2
        if grouping:  # GROUPING SETS, ROLLUP, CUBE, and GROUPING() of every key as gid
            exprs = [e.rsplit(" AS ", 1)[0] if a is not None else "hours" for e, a in keys]
            oexprs = [e.rsplit(" AS ", 1)[0] if a is not None else HOURS_BIN_SQL for e, a in keys]
            sel.append(f"GROUPING({', '.join(exprs)}) AS gid")
            osel.append(f"GROUPING({', '.join(oexprs)}) AS gid")
        sql = f"SELECT {', '.join(sel)} FROM people{join}{where}"
        osql = f"SELECT {', '.join(osel)} FROM people{join}{where}"
        if grouping:
            form = self.grouping_sets(len(keys))
            sql += f" GROUP BY {form.format(*group)}"
            osql += f" GROUP BY {form.format(*ogroup)}"
        elif keys:
            sql += " GROUP BY ALL" if r.random() < 0.15 else f" GROUP BY {', '.join(group)}"
            osql += f" GROUP BY {', '.join(ogroup)}"
        if not join and r.random() < 0.25:  # the same statement through a CTE or a FROM-subquery
            return Generated(*self.wrapped(sql, osql))
        return Generated(sql, osql)

    def wrapped(self, sql: str, osql: str) -> tuple[str, str]:
        """``sql`` and its oracle read through a row-by-row CTE (a filter), a FROM-subquery that
        renames the table, or an outer query passing an aggregate query's answers through
        (dpsql.sql.inline): DuckDB answers each the same way."""
        kind = self.rng.choice(["cte", "rename", "outer"])
        if kind == "outer":
            return f"SELECT * FROM ({sql}) AS q", f"SELECT * FROM ({osql}) AS q"
        source = (f"WITH base AS (SELECT * FROM people WHERE {self.predicate(1)}) " if kind == "cte"
                  else "")
        table = "base" if kind == "cte" else "(SELECT * FROM people) AS p"
        return tuple(source + text.replace(" FROM people", f" FROM {table}", 1) for text in (sql, osql))

    def grouping_sets(self, n: int) -> str:
        """A GROUP BY of ``n`` keys (``{0}``, ``{1}``... placeholders) with grouping sets, each set once and
        every key in one (DuckDB refuses a selected key in none)."""
        r = self.sets_rng
        slots = [f"{{{i}}}" for i in range(n)]
        forms = [f"ROLLUP ({', '.join(slots)})", f"CUBE ({', '.join(slots)})"]
        if n >= 2:
            forms += [f"{slots[0]}, ROLLUP ({', '.join(slots[1:])})", f"ROLLUP (({slots[0]}, {slots[1]}))" +
                      "".join(f", {s}" for s in slots[2:]), f"CUBE ({', '.join(slots[:-1])}), {slots[-1]}"]
        subsets = sorted({tuple(range(n))} | {tuple(sorted(r.sample(range(n), r.randint(0, n))))
                                              for _ in range(r.randint(1, 3))},
                         key=lambda t: (-len(t), t))
        listed = ", ".join(f"({', '.join(slots[i] for i in t)})" for t in subsets)
        forms.append(f"GROUPING SETS ({listed})")
        return r.choice(forms)

    def batch(self, count: int, max_cells: int = 512) -> list[Generated]:
        """``count`` statements whose batch keeps every merged attribute (columns coupled by a
        condition or key) to at most ``max_cells`` cells, so that tests running the strategy
        optimizer on it stay fast; larger couplings are checked without it (test_compile_exact)."""
        from dpsql.sql import compile_batch

        out: list[Generated] = []
        while len(out) < count:
            g = self.statement()
            if max(a.size for a in compile_batch([x.sql for x in [*out, g]], SCHEMA).attributes) <= max_cells:
                out.append(g)
        return out


def check_statements(gens: list[Generated], con, schema: dict = SCHEMA) -> None:
    """Compile ``gens`` as one batch (against ``schema``, :data:`SCHEMA` by default) and check
    every statement against DuckDB."""
    batch = compile_batch([g.sql for g in gens], schema)
    # a batch whose WHERE clauses rule out every group has no rows to measure
    y = batch.workload.matvec(histogram(con, batch)) if batch.terms else np.zeros(0)
    for i, g in enumerate(gens):
        compare(batch, i, y, con, g.oracle)
