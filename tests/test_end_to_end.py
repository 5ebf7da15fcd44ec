"""End to end: SQL in, private answers out, against exact DuckDB answers and
closed-form variances."""

from __future__ import annotations

import itertools
import math

import duckdb
import numpy as np
import pandas as pd
import pytest
from sql_oracle import (
    SCHEMA,
    StatementGenerator,
    _py,
    assert_released_near_exact,
    exact_rows,
    group_key,
    make_table,
    released_interval,
)

import dpsql
from dpsql.engine import engine as engine_module
from dpsql.errors import ArgumentError, BudgetExceededError, MeasurementError, PrivacyError, UnknownColumnError
from dpsql.hdmm.marginals import Marginals
from dpsql.hdmm.matrix import Dense, Identity, IdentityTotal, Prefix, Total
from dpsql.hdmm.optimize import select
from dpsql.hdmm.reconstruct import least_squares
from dpsql.hdmm.strategy import KronStrategy, MarginalStrategy, UnionStrategy
from dpsql.hdmm.workload import Workload
from dpsql.privacy import Gaussian, Laplace
from dpsql.private import kernel as kernel_module
from dpsql.private.budget import Budget, Cost
from dpsql.private.kernel import PrivateTable, required_marginals, strategy_answers
from dpsql.private.ledger import Ledger
from dpsql.private.measure import Counting

HUGE = Budget(epsilon=1e12, delta=0.5)


def connect(con, budget=HUGE, **kwargs):
    return dpsql.connect(con, schema=SCHEMA, budget=budget, cache=False, **kwargs)




@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_answers_equal_duckdb_at_huge_epsilon(noise):
    con = make_table(500, seed=3)
    gens = StatementGenerator(11).batch(5)
    if noise == "laplace":
        db = connect(con)
        results = db.batch([g.sql for g in gens], epsilon=1e9, noise=noise)
    else:  # (ε, δ) Gaussian noise shrinks only like 1/√ε; zCDP's σ = Δ/√(2ρ)
        db = connect(con, budget=Budget(rho=1e20))
        results = db.batch([g.sql for g in gens], rho=1e19, noise=noise)
    compiled = dpsql.compile_batch([g.sql for g in gens], SCHEMA)
    assert len(results) == len(gens)
    for st, res, g in zip(compiled.statements, results, gens):
        assert res.mechanism == noise
        exact, names = exact_rows(con, g.oracle, st.plan)
        assert len(res.df) == len(st.groups)
        for i in range(len(st.groups)):
            key = group_key(st, i)
            for agg in st.plan.aggregates:
                want = exact.get(key)
                want = None if want is None else want[names.index(agg.name)]
                assert_released_near_exact(agg.func, res.df[agg.name].iloc[i], want, (g.sql, key),
                                           released_interval(st, res.df, agg.name, i))


def test_result_api_and_relation():
    con = make_table(300, seed=1)
    db = connect(con)
    res = db.query("SELECT sex, COUNT(*) AS n FROM people WHERE age >= 5 GROUP BY sex", epsilon=1.0)
    assert list(res.df.columns) == ["sex", "n", "std_error", "ci_low", "ci_high"]
    assert res.df["sex"].tolist() == ["F", "M", None]
    z = 1.959963984540054
    assert np.allclose(res.df["ci_high"] - res.df["n"], z * res.df["std_error"])
    assert res.epsilon == 1.0 and res.mechanism in ("laplace", "gaussian")
    assert "expected RMSE" in repr(res)
    rows = res.relation.fetchall()
    assert [r[0] for r in rows] == ["F", "M", None]
    # further SQL over the relation, DuckDB style
    total = res.relation.aggregate("sum(n)").fetchall()[0][0]
    assert math.isclose(total, res.df["n"].sum())
    rel = db.sql("SELECT region, COUNT(*) FROM people GROUP BY region", epsilon=1.0)
    assert isinstance(rel, duckdb.DuckDBPyRelation) and len(rel.df()) == 4
    # module-level call on the most recent connection
    assert len(dpsql.query("SELECT COUNT(*) FROM people", epsilon=0.5).df) == 1
    assert math.isclose(db.spent().epsilon, 2.5)


def test_multiple_aggregates_get_prefixed_error_columns():
    db = connect(make_table(200, seed=2))
    res = db.query("SELECT region, COUNT(*) AS n, SUM(age) AS s, AVG(score) AS a FROM people GROUP BY region",
                   epsilon=1.0)
    assert list(res.df.columns)[:5] == ["region", "n", "n_std_error", "n_ci_low", "n_ci_high"]
    assert {"s_std_error", "a_std_error"} <= set(res.df.columns)
    assert (res.df["n_std_error"] > 0).all()


def test_having_and_order_apply_after_noise():
    db = connect(make_table(300, seed=4))
    res = db.query("SELECT region, COUNT(*) AS n FROM people GROUP BY region ORDER BY n DESC LIMIT 2",
                   epsilon=1e9)
    assert len(res.df) == 2 and list(res.df.columns) == ["region", "n", "std_error", "ci_low", "ci_high"]
    assert res.df["n"].iloc[0] >= res.df["n"].iloc[1]


def test_statement_options_set_the_spend():
    db = connect(make_table(100))
    db.query("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=0.25) COUNT(*) FROM people")
    assert math.isclose(db.spent().epsilon, 0.25)
    with pytest.raises(PrivacyError, match="epsilon"):
        db.query("SELECT COUNT(*) FROM people")


def test_the_spend_is_given_in_one_place():
    """A statement's OPTIONS and the call's epsilon= used to be resolved silently (the call won: 50×
    what the statement said); a batch where only some statements set epsilon said "say how much to
    spend". Both are refused, naming the conflict, and spend nothing."""
    db = connect(make_table(100))
    stated = "SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=0.1, delta=0) COUNT(*) FROM people"
    for kwargs in [{"epsilon": 5.0}, {"rho": 1.0}]:
        with pytest.raises(PrivacyError, match=f"passes {next(iter(kwargs))}= too: give the spend in one place"):
            db.query(stated, **kwargs)
    with pytest.raises(ArgumentError, match="std_error, or the statements' WITH DIFFERENTIAL_PRIVACY OPTIONS"):
        db.query(stated, std_error=5.0)
    with pytest.raises(PrivacyError, match="statement 2 of the batch sets epsilon .* statements 1, 3 do not"):
        db.batch(["SELECT COUNT(*) FROM people", stated, "SELECT sex, COUNT(*) FROM people GROUP BY sex"])
    with pytest.raises(PrivacyError, match="statements 2, 3 of the batch set epsilon .* statement 1 does not"):
        db.batch(["SELECT COUNT(*) FROM people", stated, stated])
    plan = db.query("EXPLAIN SELECT COUNT(*) FROM people", std_error=5.0)  # what an accuracy costs, for free
    assert plan.statements[0]["std_error"].max() == pytest.approx(5.0, rel=1e-6)
    assert db.ledger.entries() == []
    db.query(stated)
    assert db.spent().epsilon == pytest.approx(0.1)


def test_what_spends_nothing_needs_no_spend():
    """Group keys alone (DISTINCT, GROUP BY without aggregates) come from the public domain: no
    epsilon is asked for, none is spent, and one given is still checked."""
    db = connect(make_table(100))
    out = db.query("SELECT DISTINCT sex FROM people WHERE sex IS NOT NULL")
    assert out.df["sex"].tolist() == ["F", "M"] and out.epsilon == 0.0
    assert db.explain("SELECT age FROM people GROUP BY age").statements[0]["age"].tolist() == [*range(21), None]
    with pytest.raises(PrivacyError):
        db.query("SELECT DISTINCT sex FROM people", epsilon=-1.0)
    assert db.ledger.entries() == []


def test_default_noise_is_the_lower_error_one():
    db = connect(make_table(100))
    sql = "SELECT age, COUNT(*) FROM people GROUP BY age"
    chosen = db.query(sql, epsilon=1.0, delta=1e-6)
    lap = db.query(sql, epsilon=1.0, noise="laplace")
    gau = db.query(sql, epsilon=1.0, delta=1e-6, noise="gaussian")
    assert chosen.rmse == pytest.approx(min(lap.rmse, gau.rmse))
    assert chosen.mechanism == ("laplace" if lap.rmse < gau.rmse else "gaussian")
    assert lap.delta == 0.0 and gau.delta == 1e-6


def test_gaussian_noise_without_delta_says_whose_delta_is_zero():
    request = connect(make_table(50), budget=Budget(epsilon=1.0, delta=1e-5))
    with pytest.raises(PrivacyError, match="this request's delta is 0"):
        request.query("SELECT COUNT(*) FROM people", epsilon=0.5, delta=0.0, noise="gaussian")
    budget = connect(make_table(50), budget=Budget(epsilon=1.0))
    with pytest.raises(PrivacyError, match="this budget has delta = 0"):
        budget.query("SELECT COUNT(*) FROM people", epsilon=0.5, noise="gaussian")


def test_zcdp_budget():
    db = connect(make_table(100), budget=Budget(rho=1.0))
    res = db.query("SELECT sex, COUNT(*) FROM people GROUP BY sex", rho=0.125, noise="gaussian")
    assert res.rho == 0.125 and res.epsilon == 0.0
    res = db.query("SELECT sex, COUNT(*) FROM people GROUP BY sex", rho=0.125, noise="laplace")
    assert res.mechanism == "laplace"
    assert math.isclose(db.spent().rho, 0.25)
    with pytest.raises(PrivacyError):
        db.query("SELECT COUNT(*) FROM people", epsilon=0.5, delta=1e-6, noise="gaussian")
    with pytest.raises(PrivacyError, match="rho="):
        db.query("SELECT COUNT(*) FROM people")
    assert math.isclose(db.spent().rho, 0.25)


# -- refusals spend nothing ------------------------------------------------------------------

def _forbid_data(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the private table was read")

    def no_selection(*a, **k):
        raise AssertionError("an unaffordable request should be refused before strategy selection")
    monkeypatch.setattr(kernel_module, "prepare_counting", boom)
    monkeypatch.setattr(engine_module, "select", no_selection)


def test_refused_query_touches_no_data_and_records_nothing(tmp_path, monkeypatch):
    path = tmp_path / "l.ledger"
    db = dpsql.connect(make_table(100), schema=SCHEMA, budget=Budget(epsilon=1.0), ledger=path, cache=False)
    db.query("SELECT COUNT(*) FROM people", epsilon=0.75)
    before = Ledger(path).entries()
    _forbid_data(monkeypatch)
    with pytest.raises(BudgetExceededError):
        db.query("SELECT COUNT(*) FROM people", epsilon=0.5)
    assert Ledger(path).entries() == before
    # bad SQL: rejected before anything else
    with pytest.raises(UnknownColumnError):
        db.query("SELECT COUNT(*) FROM people WHERE nope = 1", epsilon=0.1)
    with pytest.raises(PrivacyError):
        db.query("SELECT COUNT(*) FROM people", epsilon=-1.0)
    assert Ledger(path).entries() == before
    assert math.isclose(db.remaining().epsilon, 0.25)


def test_failed_measurement_spends_nothing(tmp_path):
    con = duckdb.connect()  # no people table at all: refused when connecting
    with pytest.raises(dpsql.SchemaError, match="the source has no table or view 'people'"):
        dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=1.0), ledger=tmp_path / "l", cache=False)
    con = make_table(10)
    db = dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=1.0), ledger=tmp_path / "l", cache=False)
    con.execute("DROP TABLE people")  # gone after connecting: the measurement fails
    with pytest.raises(MeasurementError):
        db.query("SELECT COUNT(*) FROM people", epsilon=0.5)
    assert db.spent().epsilon == 0.0 and Ledger(tmp_path / "l").entries() == []


# -- sources -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["csv", "parquet", "duckdb"])
def test_file_sources(tmp_path, kind):
    con = make_table(200, seed=5)
    path = tmp_path / f"people.{kind}"
    if kind == "duckdb":
        con.execute(f"ATTACH '{path}' AS f")
        con.execute("CREATE TABLE f.people AS SELECT * FROM people")
        con.execute("DETACH f")
    else:
        con.sql("SELECT * FROM people").write_csv(str(path)) if kind == "csv" else \
            con.sql("SELECT * FROM people").write_parquet(str(path))
    db = dpsql.connect(path, schema=SCHEMA, budget=HUGE, cache=False)
    res = db.query("SELECT region, COUNT(*) AS n FROM people GROUP BY region", epsilon=1e9)
    exact = dict(con.sql("SELECT region, COUNT(*) FROM people GROUP BY region").fetchall())
    assert np.allclose(res.df["n"], [exact.get(r, 0) for r in res.df["region"]], atol=1e-6)


# -- noise scale and standard errors against independent oracles ----------------------------

def _fixed_marginals(monkeypatch, x_by_subset):
    def fake(con, table, schema, attributes, subsets, snapshot=None):
        return Counting(lambda: [x_by_subset(tuple(s)) for s in subsets])
    monkeypatch.setattr(kernel_module, "prepare_counting", fake)


def _strategies(domain):
    n1, n2 = domain
    kron = KronStrategy((Dense(np.vstack([np.eye(n1), np.ones((1, n1)) * 0.5])), IdentityTotal(n2)))
    union = UnionStrategy([KronStrategy((Identity(n1), Total(n2))), KronStrategy((Prefix(n1), Identity(n2)))],
                          [0.6, 0.8], [[0], [1]])
    theta = np.array([0.2, 0.5, 0.3, 1.0])
    marg = MarginalStrategy(Marginals(domain, theta))
    # OPT_+'s cluster part: a fixed prefix factor on attribute 0, marginals (total and identity) on 1
    factored = MarginalStrategy(Marginals((n2,), np.array([0.3, 0.7])), fixed=(Prefix(n1), None))
    return {"kron": kron, "union": union, "marginal": marg, "factored": factored}


@pytest.mark.parametrize("shape", ["kron", "union", "marginal", "factored"])
@pytest.mark.parametrize("noise", [Laplace(0.7), pytest.param(Gaussian(epsilon=0.9, delta=1e-5), marks=pytest.mark.slow)])
def test_empirical_std_matches_reported_std_error(monkeypatch, shape, noise):
    domain = (5, 4)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 30, size=domain).astype(float)

    def marg(subset):
        axes = tuple(i for i in range(2) if i not in subset)
        return x.sum(axis=axes).ravel()

    _fixed_marginals(monkeypatch, marg)
    W = Workload(domain, [(1.0, (Identity(5), Total(4))), (1.0, (Prefix(5), Identity(4)))])
    strategy = _strategies(domain)[shape]
    ledger = Ledger(None, Budget(epsilon=1e9, delta=0.5))
    table = PrivateTable(None, "t", dpsql.load_schema(SCHEMA), ledger, source=np.random.default_rng(1))
    cost = Cost(epsilon=noise.epsilon, delta=getattr(noise, "delta", 0.0) or 0.0)
    reps = 1500  # the std within 10%: about 3 sd of a sample std of 1,500 (a wrong scale, e.g. sqrt(2), is 41%)
    answers = np.empty((reps, W.shape[0]))
    for r in range(reps):
        m = table.measure([], strategy, noise, cost)
        answers[r] = least_squares(W, strategy, m.values)
    # noise scale from first principles on the dense strategy matrix
    A = strategy.matrix.dense()
    if isinstance(noise, Laplace):
        expected_std = math.sqrt(2) * np.abs(A).sum(axis=0).max() / noise.epsilon
    else:
        expected_std = np.sqrt((A**2).sum(axis=0)).max() * noise.sigma(1.0)
    # Laplace noise is discrete on a lattice whose rounding costs at most a relative 2^-23 in scale
    assert m.noise_std == pytest.approx(expected_std, rel=1e-5 if isinstance(noise, Laplace) else 1e-9)
    reported = m.noise_std * np.sqrt(np.concatenate(strategy.query_variances(W)))
    # closed-form variance from dense algebra for full least squares shapes
    if shape != "union":
        Wd = W.dense()
        cov = m.noise_std**2 * Wd @ np.linalg.pinv(A.T @ A) @ Wd.T
        assert np.allclose(reported, np.sqrt(np.diag(cov)), rtol=1e-8)
    truth = W.matvec(x.ravel())
    assert np.allclose(answers.mean(axis=0), truth, atol=5 * reported.max() / math.sqrt(reps))
    empirical = answers.std(axis=0)
    assert np.all(np.abs(empirical / reported - 1) < 0.10), np.abs(empirical / reported - 1).max()
    assert len(ledger.entries()) == reps


def test_privacy_unit_bound_scales_the_noise(monkeypatch):
    spec = dict(SCHEMA, privacy_unit={"column": "pid", "max_rows": 3})
    con = make_table(100)
    con.execute("ALTER TABLE people ADD COLUMN pid INTEGER DEFAULT 1")
    one = dpsql.connect(con, schema=SCHEMA, budget=HUGE, cache=False)
    three = dpsql.connect(con, schema=spec, budget=HUGE, cache=False)
    sql = "SELECT sex, COUNT(*) FROM people GROUP BY sex"
    a = one.query(sql, epsilon=1.0, noise="laplace")
    b = three.query(sql, epsilon=1.0, noise="laplace")
    assert np.allclose(b.df["std_error"], 3 * a.df["std_error"])
    assert b.rmse == pytest.approx(3 * a.rmse)
    # every row has pid 1: one unit, so at most 3 rows survive the bound
    c = three.query("SELECT COUNT(*) AS n FROM people", epsilon=1e9)
    assert c.df["n"].iloc[0] == pytest.approx(3, abs=1e-6)


def test_strategy_answers_from_marginals_match_dense():
    domain = (5, 4)
    x = np.arange(20.0)
    for strategy in _strategies(domain).values():
        X = x.reshape(domain)
        marg = {s: X.sum(axis=tuple(i for i in range(2) if i not in s)).ravel() for s in required_marginals(strategy)}
        assert np.allclose(strategy_answers(strategy, marg), strategy.matrix.dense() @ x)


def test_nonnegative_answers_are_consistent():
    con = make_table(300, seed=6)
    db = connect(con)
    sqls = ["SELECT region, COUNT(*) AS n FROM people GROUP BY region", "SELECT COUNT(*) AS n FROM people",
            "SELECT region, sex, COUNT(*) AS n FROM people GROUP BY region, sex"]
    res = db.batch(sqls, epsilon=0.05, noise="laplace", nonnegative=True)
    by_region, total, by_both = (r.df for r in res)
    assert (by_region["n"] >= -1e-9).all() and (by_both["n"] >= -1e-9).all()
    # one non-negative data vector behind every answer: totals are sums of their parts
    assert by_region["n"].sum() == pytest.approx(total["n"].iloc[0], rel=1e-6)
    assert by_both["n"].sum() == pytest.approx(total["n"].iloc[0], rel=1e-6)
    both = by_both.groupby("region")["n"].sum()
    assert np.allclose(both.loc[by_region["region"]].to_numpy(), by_region["n"].to_numpy(), rtol=1e-6)
    # at a huge epsilon it recovers the exact answers
    exact = db.batch(sqls, epsilon=1e9, noise="laplace", nonnegative=True)[1].df["n"].iloc[0]
    assert exact == pytest.approx(300, abs=1e-3)


@pytest.mark.parametrize("item", ["CAST(COUNT(*) AS SMALLINT) * 100", "CAST(SUM(age) AS INTEGER) * 1000000",
                                  "CASE WHEN COUNT(*) > 1 THEN 9223372036854775807 * 2 ELSE 0 END"])
def test_an_expression_over_noisy_answers_that_overflows_is_null_not_a_failure_after_the_charge(item):
    """Only casts and functions were made safe: integer arithmetic past its type's range failed
    the whole request after the charge, on a noisy value (whether it fails depends on the noise)."""
    con = make_table(3000, seed=2)
    db = connect(con, budget=Budget(epsilon=10.0))
    res = db.query(f"SELECT sex, {item} AS x, COUNT(*) AS n FROM people GROUP BY sex", epsilon=1.0)
    assert res.df["x"].isna().all() and (res.df["n"] > 100).all()
    assert db.spent().epsilon == 1.0
    with pytest.raises(duckdb.OutOfRangeException):  # what DuckDB does on the table itself
        con.sql(f"SELECT sex, {item} AS x FROM people GROUP BY sex").fetchall()


def test_relation_on_read_only_database(tmp_path):
    path = tmp_path / "people.duckdb"
    src = make_table(50)
    src.execute(f"ATTACH '{path}' AS f")
    src.execute("CREATE TABLE f.people AS SELECT * FROM people")
    src.execute("DETACH f")
    db = dpsql.connect(path, schema=SCHEMA, budget=HUGE, cache=False)
    rel = db.query("SELECT white, COUNT(*) AS n FROM people GROUP BY white", epsilon=1.0, noise="laplace").relation
    assert len(rel.filter("n > -1e9").fetchall()) == 2


@pytest.mark.parametrize("aggregate", ["AVG(age)",  # the others by -m slow (800 requests, 20 to 40 s each)
                                       *[pytest.param(a, marks=pytest.mark.slow) for a in
                                         ("SUM(age) / COUNT(*)", "VAR_SAMP(age)", "STDDEV_POP(age)",
                                          "sqrt(SUM(age)) + COUNT(age) * 0.5")]])
def test_delta_method_standard_errors_include_the_covariances(monkeypatch, aggregate):
    """AVG, variances, standard deviations and expressions over aggregates combine several noisy
    queries (SUM, SUM of squares, COUNT) whose errors are correlated; the reported standard error
    must match the spread of the answers over repeated noise draws on the same table."""
    con = make_table(2000, seed=8)
    db = connect(con, source_of_noise=np.random.default_rng(5))
    sql = f"SELECT region, {aggregate} AS a FROM people GROUP BY region"
    first = db.query(sql, epsilon=0.5, noise="laplace")
    counts = {}
    real = kernel_module.prepare_counting

    def once(con_, table, schema, attributes, subsets, snapshot=None):  # measure once, then reuse the counts
        key = tuple(map(tuple, subsets))
        counting = real(con_, table, schema, attributes, subsets, snapshot)

        def read():
            if key not in counts:
                counts[key] = counting.run()
            return counts[key]
        return Counting(read)

    monkeypatch.setattr(kernel_module, "prepare_counting", once)
    # each run a new request (a repeated one is answered from its release: dpsql.engine.repeats); the
    # confidence level changes the intervals only, not the answers whose spread is measured
    runs = np.array([db.query(sql, epsilon=0.5, noise="laplace", confidence=0.5 + i / 2000).df["a"].to_numpy()
                     for i in range(800)])
    reported = first.df["std_error"].to_numpy()
    assert np.all(np.abs(runs.std(axis=0) / reported - 1) < 0.1), runs.std(axis=0) / reported


def test_expressions_over_aggregates_get_a_standard_error_or_null():
    """A differentiable expression over aggregates gets a standard error and an interval (the
    delta method), one the delta method cannot follow (a CASE, integer division) gets NULL, and a
    constant or a key expression gets none. Without noise, the interval is the value."""
    db = connect(make_table(300, seed=2))
    sql = ("SELECT region, SUM(age) / COUNT(*) AS mean, CASE WHEN COUNT(*) > 5 THEN 1 END AS big, "
           "SUM(age) // 2 AS half, 7 AS seven, COUNT(*) AS n FROM people GROUP BY region")
    df = db.query(sql, epsilon=1e9, noise="laplace").df
    assert list(df.columns) == ["region", "mean", "mean_std_error", "mean_ci_low", "mean_ci_high", "big",
                                "big_std_error", "big_ci_low", "big_ci_high", "half", "half_std_error",
                                "half_ci_low", "half_ci_high", "seven", "n", "n_std_error", "n_ci_low", "n_ci_high"]
    assert df["mean_std_error"].between(0, 1e-6).all() and df["big_std_error"].isna().all()
    assert df["half_std_error"].isna().all()
    assert np.allclose(df["mean_ci_low"], df["mean"]) and np.allclose(df["mean_ci_high"], df["mean"])
    noisy = db.query(sql, epsilon=1.0, noise="laplace").df
    assert (noisy["mean_std_error"] > 0).all() and (noisy["n_std_error"] > 0).all()


def test_filtered_group_bys_use_a_factored_opt_plus_part_and_stay_exact():
    """GROUP BYs that share one WHERE and differ in their keys form an OPT_+
    cluster: the filter fixed on its attribute, marginals on the keys; least
    squares through that part is exact. The answers of the selected (reduced)
    strategy equal DuckDB's at a huge budget."""
    con = make_table(400, seed=8)
    sqls = ["SELECT region, COUNT(*) AS n FROM people WHERE age < 12 GROUP BY region",
            "SELECT sex, COUNT(*) AS n FROM people WHERE age < 12 GROUP BY sex",
            "SELECT white, COUNT(*) AS n FROM people WHERE age < 12 GROUP BY white",
            "SELECT region, sex, COUNT(*) AS n FROM people GROUP BY region, sex",
            "SELECT region, white, COUNT(*) AS n FROM people GROUP BY region, white"]
    W = dpsql.compile_batch(sqls, dpsql.load_schema(SCHEMA)).workload
    unreduced = select(W, Laplace(1.0), restarts=1, reduce=False)
    chosen = unreduced.strategy
    assert chosen.operator == "OPT_plus"
    assert any(isinstance(p, MarginalStrategy) and p.fixed is not None for p in chosen.parts)
    x = np.random.default_rng(0).poisson(3.0, W.shape[1]).astype(float)
    assert np.allclose(least_squares(W, chosen, chosen.matrix.matvec(x)), W.matvec(x))
    # on the reduced domain (age: under 12 or not) a single product does better still
    assert select(W, Laplace(1.0), restarts=1).rmse < unreduced.rmse
    results = connect(con).batch(sqls, epsilon=1e9, noise="laplace")
    for sql, res in zip(sqls, results):
        keys = [c for c in res.df.columns if c in ("region", "sex", "white")]
        exact = {tuple(r[:-1]): r[-1] for r in con.sql(sql).fetchall()}
        for _, row in res.df.iterrows():
            key = tuple(None if pd.isna(row[k]) else row[k] for k in keys)
            # exact up to the noise left at epsilon = 1e9 (8 of its standard errors, about 1e-7 each) and
            # the least-squares solve's rounding (1.0e-6 off once, against an abs=1e-6 bound): far below 1
            assert row["std_error"] < 1e-5, (sql, key)
            assert row["n"] == pytest.approx(exact.get(key, 0), abs=8 * row["std_error"] + 1e-5), (sql, key)


def test_groups_the_where_clause_rules_out_are_not_output_and_cost_nothing_alone():
    """Decided on the public domain: age is declared 0..20, so ``age > 30`` holds for no row of any table."""
    con = make_table(300, seed=3)
    db = connect(con, budget=Budget(epsilon=1e10))
    empty = db.query("SELECT sex, COUNT(*) AS n, AVG(age) AS a FROM people WHERE age > 30 GROUP BY sex", epsilon=1.0)
    assert empty.df.empty and list(empty.df.columns)[:2] == ["sex", "n"]
    assert "nothing spent" in repr(empty) and empty.epsilon == 0.0
    assert db.ledger.spent() == Cost(epsilon=0.0, delta=0.0, rho=0.0)
    both = db.batch(["SELECT sex, COUNT(*) AS n FROM people WHERE FALSE GROUP BY sex HAVING n > 1 ORDER BY n LIMIT 1",
                     "SELECT region, COUNT(*) AS n FROM people WHERE region IN ('E', 'N') GROUP BY region"],
                    epsilon=1e9)
    assert both[0].df.empty
    exact = dict(con.sql("SELECT region, COUNT(*) FROM people WHERE region IN ('E', 'N') GROUP BY region").fetchall())
    assert dict(zip(both[1].df["region"], both[1].df["n"].round().astype(int))) == exact
    assert db.ledger.spent().epsilon == pytest.approx(1e9)


def test_a_statement_without_group_by_whose_where_rules_out_the_domain_is_answered_as_duckdb_does():
    """One row, as over no rows: COUNT 0 and every other aggregate NULL, exactly, with nothing
    measured or spent; beside a measured statement, only that one is paid for."""
    con = make_table(300, seed=4)
    db = connect(con, budget=Budget(epsilon=1e10))
    sql = ("SELECT COUNT(*) AS n, COUNT(age) AS c, SUM(age) AS s, AVG(age) AS m, STDDEV(age) AS sd, MEDIAN(age) AS q, "
           "COUNT(*) + 1 AS n1, SUM(age) * 2 AS s2 FROM people WHERE age > 30 AND sex = 'F'")
    res = db.query(sql, epsilon=1.0)
    exact = con.sql(sql).df()
    assert res.epsilon == 0.0 and db.ledger.spent().epsilon == 0.0 and "nothing spent" in repr(res)
    for col in exact.columns:
        want, got = exact[col].iloc[0], res.df[col].iloc[0]
        assert (pd.isna(want) and pd.isna(got)) or want == got, col
        error = res.df[f"{col}_std_error"].iloc[0]
        assert (pd.isna(error) if pd.isna(want) else error == 0.0), col
    both = db.batch([sql, "SELECT COUNT(*) AS n FROM people WHERE sex = 'F'"], epsilon=1e9)
    assert both[0].df["n"].tolist() == [0.0] and pd.isna(both[0].df["s"].iloc[0])
    assert both[1].df["n"].round().tolist() == [con.sql("SELECT COUNT(*) FROM people WHERE sex = 'F'").fetchall()[0][0]]
    assert db.ledger.spent().epsilon == pytest.approx(1e9)


@pytest.mark.parametrize("sql", [
    "SELECT SUM(b) AS x FROM t WHERE b IS NULL",
    "SELECT AVG(b) AS m, SUM(b) AS x FROM t WHERE b IS NULL",  # SUM reads AVG's measured SUM
    "SELECT SUM(b) FILTER (WHERE b IS NULL) AS x, COUNT(*) AS n FROM t",
    "SELECT SUM(CASE WHEN a > 100 THEN b END) AS x, COUNT(*) AS n FROM t",
    "SELECT b, SUM(b) AS x FROM t GROUP BY b",
    "SELECT a, COALESCE(SUM(b) FILTER (WHERE a = 3), -1) AS x FROM t GROUP BY a",
])
def test_a_sum_the_domain_proves_empty_is_null_as_duckdbs(sql):
    """Where a group's WHERE, FILTER or keys leave no cell with a non-NULL value, its SUM is NULL
    (exactly, from the public domain); it was 0, with a standard error of 0."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i % 10 AS a, CASE WHEN i % 3 = 0 THEN NULL ELSE i % 7 END AS b "
                "FROM range(300) r(i)")
    schema = {"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 9},
                                        "b": {"type": "integer", "min": 0, "max": 6, "nullable": True}}}
    db = dpsql.connect(con, schema=schema, budget=Budget(epsilon=1e10), cache=False, progress=False)
    got = db.query(sql, epsilon=1e9).df
    want = con.sql(sql).df()
    for _, row in want.iterrows():
        keys = [c for c in want.columns if c in ("a", "b")]
        match = got if not keys else got[np.logical_and.reduce([
            got[k].isna() if pd.isna(row[k]) else got[k] == row[k] for k in keys])]
        assert len(match) == 1, (sql, row)
        x = match["x"].iloc[0]
        assert (pd.isna(x) and pd.isna(row["x"])) or x == pytest.approx(row["x"], abs=1e-3), (sql, row, x)


@pytest.mark.parametrize("sql, groups", [
    ("SELECT DISTINCT sex, region FROM people WHERE region <> 'E'",
     [(s, r) for s in ("F", "M", None) for r in ("N", "S", "W")]),
    ("SELECT region FROM people WHERE age < 3 GROUP BY region", [("E",), ("N",), ("S",), ("W",)]),
    ("SELECT sex, CASE WHEN age < 10 THEN 'child' ELSE 'adult' END AS g FROM people GROUP BY ALL",
     [(s, g) for s in ("F", "M", None) for g in ("adult", "child")]),  # a NULL age takes the ELSE branch
])
def test_group_keys_alone_are_the_public_domain_and_cost_nothing(sql, groups):
    """SELECT DISTINCT and GROUP BY without aggregates list the keys' declared domain (less what
    WHERE rules out on it): the same for any table, measured from none, spending nothing."""
    outputs = []
    for seed in (1, 2):
        db = connect(make_table(50 * seed, seed=seed), budget=Budget(epsilon=1.0))
        res = db.query(sql, epsilon=1.0)
        assert res.epsilon == 0.0 and db.ledger.spent().epsilon == 0.0 and "nothing spent" in repr(res)
        outputs.append(sorted(map(tuple, res.df.astype(object).where(res.df.notna(), None).to_numpy().tolist()),
                              key=repr))
    assert outputs[0] == outputs[1] == sorted(groups, key=repr)


@pytest.mark.parametrize("noise, budget, spend", [("laplace", HUGE, {"epsilon": 0.5}),
                                                  ("gaussian", HUGE, {"epsilon": 0.5, "delta": 1e-6}),
                                                  ("gaussian", Budget(rho=1.0), {"rho": 0.1})])
def test_explain_reads_nothing_spends_nothing_and_foresees_the_standard_errors(noise, budget, spend):
    """The standard errors of COUNT and SUM depend on the schema, the SQL and the budget alone,
    so explain() must give exactly what the measurement then reports, before spending anything."""
    sqls = ["SELECT sex, COUNT(*) AS n, SUM(age) AS s, AVG(age) AS a FROM people WHERE region <> 'E' GROUP BY sex",
            "SELECT region, COUNT(*) FILTER (WHERE white) AS w FROM people GROUP BY region HAVING w > 3"]
    db = connect(make_table(300, seed=4), budget=budget)
    plan = db.explain(sqls, noise=noise, **spend)
    assert db.ledger.spent() == Cost(epsilon=0.0, delta=0.0, rho=0.0)
    results = db.batch(sqls, noise=noise, **spend)
    release = results[0].release
    assert (plan.mechanism, plan.operator) == (release.mechanism, release.operator)
    assert (plan.cost.epsilon, plan.cost.delta, plan.cost.rho) == (release.epsilon, release.delta, release.rho)
    assert plan.rmse == pytest.approx(release.rmse, rel=1e-12)
    first = plan.statements[0]
    assert list(first["sex"]) == list(results[0].df["sex"])
    for name in ("n", "s"):
        np.testing.assert_allclose(first[f"{name}_std_error"], results[0].df[f"{name}_std_error"], rtol=1e-12)
    assert first["a_std_error"].isna().all()
    assert len(plan.statements[1]) == 4  # every group: HAVING runs on the answers
    assert "would spend" in repr(plan)


def test_explain_names_its_error_columns_as_the_result_does():
    """A hidden aggregate (HAVING COUNT(*)) got a column of its own, and a computed item none."""
    db = connect(make_table(300, seed=4), budget=HUGE)
    for sql in ["SELECT sex, SUM(age) AS s FROM people GROUP BY sex HAVING COUNT(*) > 10",
                "SELECT sex, SUM(age) / COUNT(*) AS r FROM people GROUP BY sex",
                "SELECT sex, SUM(age) AS s, SUM(age) / COUNT(*) AS r FROM people GROUP BY sex"]:
        plan, result = db.explain(sql, epsilon=1.0).statements[0], db.query(sql, epsilon=1.0).df
        errors = [c for c in result.columns if c.endswith("std_error")]
        assert list(plan.columns) == ["sex", *errors], sql
        if "s_std_error" in errors or "HAVING" in sql:  # a SUM's standard error is known before measuring
            name = errors[0]
            np.testing.assert_allclose(plan[name], result[name], rtol=1e-12)
        assert plan[errors[-1]].isna().all() == ("/" in sql), sql  # a ratio's depends on the answers


def test_explain_chooses_among_the_noises_the_budget_still_affords():
    """With the budget's delta spent, batch can only use Laplace noise; explain, with the same
    arguments, showed Gaussian noise and its standard errors (it chose among all noises)."""
    cols = "abcdef"
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT " + ", ".join(f"(i * {k + 3}) % 4 AS {c}" for k, c in enumerate(cols))
                + " FROM range(500) r(i)")
    schema = {"table": "t", "columns": {c: {"type": "integer", "min": 0, "max": 3} for c in cols}}
    db = dpsql.connect(con, schema=schema, budget=Budget(epsilon=10.0, delta=1e-3), cache=False, progress=False)
    sqls = [f"SELECT {a}, {b}, COUNT(*) AS n FROM t GROUP BY {a}, {b}" for a, b in itertools.combinations(cols, 2)]
    assert db.explain(sqls, epsilon=1.0).mechanism.startswith("gaussian")  # 15 marginals: Gaussian noise wins
    db.query("SELECT a, COUNT(*) FROM t GROUP BY a", epsilon=0.5, delta=1e-3, noise="gaussian")
    plan, results = db.explain(sqls, epsilon=1.0), db.batch(sqls, epsilon=1.0)
    assert plan.mechanism == results[0].release.mechanism and plan.mechanism.startswith("laplace")
    np.testing.assert_allclose(plan.statements[0]["std_error"], results[0].df["std_error"], rtol=1e-12)


def test_explain_statement_through_query_and_sql():
    db = connect(make_table(100, seed=2), budget=Budget(epsilon=1.0))
    sql = "SELECT region, COUNT(*) AS n FROM people GROUP BY region"
    via_query = db.query(f"/* how accurate? */ EXPLAIN {sql}", epsilon=0.5, noise="laplace")
    direct = db.explain(sql, epsilon=0.5, noise="laplace")
    assert repr(via_query) == repr(direct)
    rel = db.sql(f"EXPLAIN {sql}", epsilon=0.5, noise="laplace")
    assert rel.columns == ["region", "std_error"] and len(rel.fetchall()) == 4  # named as a Result's
    assert db.ledger.spent().epsilon == 0.0
    with pytest.raises(dpsql.UnsupportedSQLError, match="EXPLAIN ANALYZE is not supported"):
        db.query(f"EXPLAIN ANALYZE {sql}", epsilon=0.5)


@pytest.mark.parametrize("budget, kwargs", [(HUGE, {}), (HUGE, {"noise": "gaussian", "delta": 1e-6}),
                                            (Budget(rho=100.0), {})])
def test_std_error_spends_the_least_that_meets_it(budget, kwargs):
    """The largest expected standard error of a COUNT or SUM is known before measuring, and
    falls as the spend grows: the request spends the least that brings it to the target."""
    db = connect(make_table(200, seed=5), budget=budget)
    sqls = ["SELECT region, COUNT(*) AS n FROM people GROUP BY region",
            "SELECT sex, SUM(age) AS s, AVG(age) AS a FROM people GROUP BY sex"]
    res = db.batch(sqls, std_error=5.0, **kwargs)
    worst = max(res[0].df["std_error"].max(), res[1].df["s_std_error"].max())  # one aggregate: "std_error"
    assert worst <= 5.0 and worst == pytest.approx(5.0, rel=1e-6)
    spent = db.ledger.spent()
    assert (spent.rho if budget.currency == "zcdp" else spent.epsilon) == pytest.approx(
        res[0].release.rho if budget.currency == "zcdp" else res[0].release.epsilon)
    with pytest.raises(dpsql.ArgumentError, match="not both"):
        db.query(sqls[0], std_error=5.0, epsilon=1.0)
    with pytest.raises(dpsql.ArgumentError, match="depend on their answers"):
        db.query("SELECT AVG(age) AS a FROM people", std_error=5.0)


def test_constant_select_items_and_parenthesized_aggregates_match_duckdb():
    """A constant select item is evaluated by DuckDB after noise, once per output row, exactly as
    DuckDB would (types included); a parenthesized aggregate is the aggregate."""
    con = make_table(300, seed=6)
    db = connect(con)
    sql = ("SELECT 3 AS three, sex, (COUNT(*)) AS n, 'x' AS s, NULL AS z, 1 + 2 AS t, CAST(7 AS DOUBLE) / 2 AS h "
           "FROM people GROUP BY sex HAVING three = 3 ORDER BY sex NULLS LAST")
    got = db.query(sql, epsilon=1e9, noise="laplace").df
    want = con.sql(sql).df()
    for col in ("three", "s", "t", "h"):
        assert got[col].tolist() == want[col].tolist()
    assert got["z"].isna().all()
    assert got["sex"].tolist()[:2] == want["sex"].tolist()[:2]
    np.testing.assert_allclose(got["n"], want["n"], atol=1e-6)
    with pytest.raises(dpsql.UnsupportedSQLError, match="constant select item cannot be evaluated"):
        db.query("SELECT 9223372036854775807 + 1 AS z, COUNT(*) FROM people", epsilon=1.0)


def test_expressions_over_aggregates_are_evaluated_by_duckdb_after_noise():
    """SUM(age) * 1, a ratio of aggregates, ABS(AVG(...) - 10): DuckDB evaluates them on the
    released aggregates (hidden ones for those not selected), so at a huge budget they are
    DuckDB's own answers."""
    con = make_table(300, seed=7)
    db = connect(con)
    sql = ("SELECT sex, SUM(age) * 1 AS a, SUM(age) / COUNT(*) AS m, COUNT(*) + 1 AS c1, ABS(AVG(age) - 10) AS r "
           "FROM people GROUP BY sex HAVING m > 0 ORDER BY sex NULLS LAST")
    got, want = db.query(sql, epsilon=1e9, noise="laplace").df, con.sql(sql).df()
    assert [c for c in got.columns if "_std_error" not in c and "_ci_" not in c] == ["sex", "a", "m", "c1", "r"]
    for col in ("a", "m", "c1", "r"):
        np.testing.assert_allclose(got[col].astype(float), want[col].astype(float), atol=1e-5)
    assert list(db.query("SELECT sex, COUNT(*) * 2 AS n2 FROM people GROUP BY ALL", epsilon=1e9).df.columns) == \
        ["sex", "n2", "std_error", "ci_low", "ci_high"]


def test_integer_division_of_integer_aggregates_truncates_as_duckdb_does():
    """COUNT and a SUM of integers are integers in DuckDB, so their // truncates (toward zero);
    an AVG is a DOUBLE, whose // divides. The noisy answers are DOUBLEs, and // of them used to
    divide (7.55 where DuckDB says 7). Compared where the exact division leaves a remainder (a
    noisy 699.9999 // 7 is 99, DuckDB's exact 700 // 7 is 100)."""
    con = make_table(400, seed=5)
    db = connect(con)
    sql = ("SELECT region, COUNT(*) // 7 AS a, SUM(age) // 4 AS b, -SUM(age) // 3 AS c, AVG(age) // 2 AS d, "
           "COUNT(*) AS n, SUM(age) AS s FROM people GROUP BY region HAVING COUNT(*) // 10 >= 1 ORDER BY region")
    got, want = db.query(sql, epsilon=1e9, noise="laplace").df, con.sql(sql).df()
    assert got["region"].tolist() == want["region"].tolist() and len(got) == 4
    for col, divides in [("a", want["n"] % 7 != 0), ("b", want["s"] % 4 != 0), ("c", want["s"] % 3 != 0)]:
        assert (got[col] == np.trunc(got[col])).all() and divides.any()
        np.testing.assert_array_equal(got[col][divides], want[col][divides].astype(float))
    np.testing.assert_allclose(got["d"], want["d"], rtol=1e-6)
    assert (got["d"] != np.trunc(got["d"])).any()  # AVG's // is a division


def test_order_by_all_and_limit_all_are_duckdbs():
    """ORDER BY ALL sorts by every output column, left to right; LIMIT ALL limits nothing. Both
    were refused, at line 1, column 1, with DuckDB's parser message."""
    con = make_table(300, seed=2)
    db = connect(con)
    for sql in ["SELECT region, sex, COUNT(*) AS n FROM people GROUP BY ALL ORDER BY ALL DESC LIMIT ALL",
                "SELECT region, sex, COUNT(*) AS n FROM people GROUP BY ALL ORDER BY ALL LIMIT 5"]:
        got = db.query(sql, epsilon=1e9).df[["region", "sex"]]
        want = con.sql(sql).df()[["region", "sex"]]
        assert [tuple(_py(v) for v in r) for r in got.itertuples(index=False)] == \
            [tuple(_py(v) for v in r) for r in want.itertuples(index=False)]


def test_quantile_intervals_cover_duckdb_quantiles():
    """MEDIAN and a 90th percentile per group, released at a small budget: the CDF band's interval
    holds DuckDB's exact quantile in most draws (the band is pointwise at 95%, so coverage is
    near that), and the released value always lies inside its own interval."""
    con = make_table(1500, seed=9)
    db = connect(con, source_of_noise=np.random.default_rng(2))
    sql = "SELECT region, MEDIAN(age) AS m, QUANTILE_DISC(age, 0.9) AS p FROM people GROUP BY region ORDER BY region"
    exact = con.sql(sql).df()
    hits = draws = 0
    for _ in range(60):
        df = db.query(sql, epsilon=0.5, noise="laplace").df
        for col in ("m", "p"):
            assert (df[f"{col}_ci_low"] <= df[col]).all() and (df[col] <= df[f"{col}_ci_high"]).all()
            hits += int(((df[f"{col}_ci_low"] <= exact[col]) & (exact[col] <= df[f"{col}_ci_high"])).sum())
            draws += len(df)
    assert hits / draws >= 0.85, hits / draws


def test_a_column_of_half_a_million_values_is_queried_like_any_other():
    """Income declared as 0..500,000 (SmartNoise's PUMS metadata does so): every query on it used
    to end in a MemoryError, allocating the column's 500,001 × 500,001 Gram. Now a predicate,
    a SUM, an AVG by group and a GROUP BY on the column itself are answered, each with its
    closed-form standard error under Laplace noise, within ten of them of DuckDB's exact answer."""
    rng = np.random.default_rng(3)
    n, top = 400, 500_000
    df = pd.DataFrame({"sex": rng.integers(0, 2, n), "income": rng.integers(0, 60_000, n)})
    con = duckdb.connect()
    con.register("df", df)
    con.execute("CREATE TABLE t AS SELECT * FROM df")
    schema = {"table": "t", "columns": {"sex": {"type": "integer", "min": 0, "max": 1},
                                        "income": {"type": "integer", "min": 0, "max": top}}}
    db = dpsql.connect(con, schema=schema, budget=Budget(epsilon=8.0), cache=False, progress=False)
    total = db.query("SELECT SUM(income) AS s FROM t", epsilon=1.0, noise="laplace")
    assert total.release.operator == "direct"
    assert total.df["std_error"][0] == pytest.approx(math.sqrt(2.0) * top, rel=1e-6)  # sensitivity: the top value
    assert abs(total.df["s"][0] - df.income.sum()) < 10 * total.df["std_error"][0]
    richer = db.query("SELECT COUNT(*) AS c FROM t WHERE income > 30000", epsilon=1.0, noise="laplace")
    assert richer.df["std_error"][0] == pytest.approx(math.sqrt(2.0), rel=1e-6)
    assert abs(richer.df["c"][0] - (df.income > 30_000).sum()) < 10 * math.sqrt(2.0)
    means = db.query("SELECT sex, AVG(income) AS m FROM t GROUP BY sex ORDER BY sex", epsilon=1.0, noise="laplace")
    # a group's AVG is NULL (with its error) only where its noisy count rounds to 0 or less
    assert len(means.df) == 2 and (np.isfinite(means.df["std_error"]) | means.df["m"].isna()).all()
    cells = db.query("SELECT income, COUNT(*) AS c FROM t GROUP BY income", epsilon=1.0, noise="laplace").df
    assert len(cells) == top + 1 and np.allclose(cells["std_error"], math.sqrt(2.0))
    exact = df.income.value_counts().reindex(range(top + 1), fill_value=0).to_numpy()
    assert np.abs(cells.sort_values("income")["c"].to_numpy() - exact).max() < 25 * math.sqrt(2.0)


def test_a_where_of_one_column_conditions_on_large_columns_is_answered_exactly():
    """``income > 50000 AND age >= 18`` over 500,001 × 101 values: each conjunct reads one column,
    but the WHERE was validated on the joint domain (refused as coupling columns beyond 5 million
    cells), and the size check counted the unreduced 50-million-cell marginal, where the kernel
    counts the 2 × 2 cells the query tells apart."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT (i * 37) % 500001 AS income, i % 101 AS age FROM range(20000) r(i)")
    schema = {"table": "t", "columns": {"income": {"type": "integer", "min": 0, "max": 500_000},
                                        "age": {"type": "integer", "min": 0, "max": 100}}}
    db = dpsql.connect(con, schema=schema, budget=HUGE, cache=False, progress=False)
    for where in ("income > 50000 AND age >= 18", "NOT (income <= 50000 OR age < 18)"):
        sql = f"SELECT age >= 65 AS old, COUNT(*) AS n FROM t WHERE {where} GROUP BY old ORDER BY old"
        got = db.query(sql, epsilon=1e9).df
        exact = con.sql(f"SELECT age >= 65 AS old, COUNT(*) FROM t WHERE {where} GROUP BY old ORDER BY old").fetchall()
        assert [(k, round(n, 3)) for k, n in zip(got["old"], got["n"])] == [(k, float(n)) for k, n in exact]


def test_pairs_of_group_by_keys_with_a_column_of_100000_values_take_a_residual_strategy():
    """Under Gaussian noise, OPT_M answers these three two-way tables with residual queries:
    their contrast basis on the 100,000-value column was a dense 99,999 × 100,000 matrix (a
    MemoryError). Answered now, the small table within six standard errors of DuckDB's."""
    rng = np.random.default_rng(1)
    n = 3000
    df = pd.DataFrame({"x": rng.integers(0, 100_000, n), "y": rng.integers(0, 3, n), "z": rng.integers(0, 4, n)})
    con = duckdb.connect()
    con.register("df", df)
    con.execute("CREATE TABLE t AS SELECT * FROM df")
    schema = {"table": "t", "columns": {"x": {"type": "integer", "min": 0, "max": 99_999},
                                        "y": {"type": "integer", "min": 0, "max": 2},
                                        "z": {"type": "integer", "min": 0, "max": 3}}}
    db = dpsql.connect(con, schema=schema, budget=Budget(epsilon=2.0, delta=1e-6), cache=False, progress=False)
    pairs = ["SELECT x, y, COUNT(*) AS c FROM t GROUP BY x, y", "SELECT x, z, COUNT(*) AS c FROM t GROUP BY x, z",
             "SELECT y, z, COUNT(*) AS c FROM t GROUP BY y, z"]
    results = db.batch(pairs, epsilon=1.0, delta=1e-7, noise="gaussian")
    # OPT_+ runs too now (its error analysis forms no 100,000 x 100,000 matrix): its part for these
    # three tables, all marginals, is OPT_M's marginal strategy
    assert results[2].release.operator in ("OPT_M", "OPT_plus") and len(results[0].df) == 300_000
    both = results[2].df.merge(con.sql(pairs[2]).df(), on=["y", "z"], suffixes=("", "_exact"))
    assert len(both) == 12 and ((both.c - both.c_exact).abs() < 6 * both.std_error).all()


@pytest.mark.parametrize("lo", [2**20, 10**6, 2**40])
def test_a_sum_over_large_nearly_equal_values_is_not_read_as_a_count(lo):
    """A SUM whose values lo..lo+9 differ by parts per million is still a SUM: OPT_0 took its
    weights for a constant (``np.allclose``) and measured COUNT(*) alone, which answered it as
    the mean value times the count (off by 5·10⁸ of 10¹⁰, with a standard error of 0.08)."""
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t AS SELECT {lo} + (i * i) % 10 AS v, i % 2 = 0 AS g FROM range(3000) r(i)")
    schema = {"table": "t", "columns": {"v": {"type": "integer", "min": lo, "max": lo + 9}, "g": {"type": "boolean"}}}
    db = dpsql.connect(con, schema=schema, budget=Budget(epsilon=1e15), cache=False)
    for sql in ["SELECT SUM(v) AS a FROM t", "SELECT AVG(v) AS a FROM t",
                "SELECT g, SUM(v) AS a FROM t GROUP BY g ORDER BY g", "SELECT SUM(v) AS a FROM t WHERE g"]:
        want = [r[-1] for r in con.sql(sql).fetchall()]
        got = db.query(sql, epsilon=1e14).df["a"].tolist()
        assert np.allclose(got, want, rtol=1e-9, atol=0), (sql, got, want)


def test_every_answer_describes_the_rows_in_the_declared_domain():
    """A row outside the domain of any declared column is dropped from every answer, not only
    from those that read that column: COUNT(*) alone, beside a GROUP BY, and COUNT(a) (whose
    NULLs the domain does not hold) are the same number."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT CASE WHEN i < 25 THEN NULL WHEN i < 50 THEN 99 ELSE i % 5 END AS a, "
                "i % 2 = 0 AS g FROM range(100) r(i)")
    schema = {"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 4}, "g": {"type": "boolean"}}}
    db = dpsql.connect(con, schema=schema, budget=Budget(epsilon=1e15), cache=False)
    in_domain = con.sql("SELECT COUNT(*) FROM t WHERE a BETWEEN 0 AND 4").fetchall()[0][0]
    by_g = [n for _, n in con.sql("SELECT g, COUNT(*) FROM t WHERE a BETWEEN 0 AND 4 GROUP BY g ORDER BY g").fetchall()]
    counts = [db.query(sql, epsilon=1e14).df["n"].tolist() for sql in [
        "SELECT COUNT(*) AS n FROM t", "SELECT COUNT(a) AS n FROM t", "SELECT COUNT(a) AS n, SUM(a) AS s FROM t"]]
    assert np.allclose(counts, [[in_domain]] * 3, atol=1e-6), counts
    assert np.allclose(db.query("SELECT g, COUNT(a) AS n FROM t GROUP BY g", epsilon=1e14).df["n"], by_g, atol=1e-6)
