"""MWEM, its factored distribution, the exponential mechanism and synthetic tables."""

from __future__ import annotations

import itertools
import math

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
from dpsql.errors import ArgumentError, BudgetExceededError, PrivacyError, WorkloadError
from dpsql.private import kernel as kernel_module
from dpsql.private.budget import Budget, Cost
from dpsql.private.kernel import PrivateTable
from dpsql.private.ledger import Ledger
from dpsql.private.measure import Counting
from dpsql.sql.compile import schema_attributes
from dpsql.synth.factored import FactoredDistribution
from dpsql.synth.mwem import check_mwem, mwem, mwem_steps
from dpsql.synth.synthesize import workload_marginals

SCHEMA = {"table": "t", "columns": {
    "a": {"type": "integer", "min": 0, "max": 2},
    "b": {"type": "integer", "min": 0, "max": 3},
    "c": {"type": "boolean"},
    "d": {"type": "categorical", "values": ["x", "y"]}}}


def make_table(n=6000, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 3, n)
    b = (a + rng.integers(0, 2, n)) % 4          # b depends on a
    c = rng.random(n) < 0.3
    d = np.where(rng.random(n) < 0.5, "x", "y")
    con = duckdb.connect()
    con.register("df", pd.DataFrame({"a": a, "b": b, "c": c, "d": d}))
    con.execute("CREATE TABLE t AS SELECT * FROM df")
    con.unregister("df")
    return con, np.stack([a, b, c.astype(int), (d == "y").astype(int)], axis=1)


def truth_marginal(records, domain, subset):
    if not subset:
        return np.array([float(len(records))])
    flat = np.ravel_multi_index(tuple(records[:, a] for a in subset), [domain[a] for a in subset])
    return np.bincount(flat, minlength=math.prod(domain[a] for a in subset)).astype(float)


# -- the factored distribution: dense oracles ---------------------------------------------

def test_factored_marginals_and_updates_match_a_dense_distribution():
    domain = (2, 3, 4)
    d = FactoredDistribution(domain, total=50.0)
    dense = np.full(domain, 50.0 / 24)
    rng = np.random.default_rng(0)
    for subset in [(0, 2), (1,), (0, 1), (2,)]:
        m = rng.uniform(0, 20, math.prod(domain[a] for a in subset))
        d.update(subset, m)
        # the same multiplicative-weights step on the dense distribution
        axes = tuple(i for i in range(3) if i not in subset)
        est = dense.sum(axis=axes).reshape(-1)
        shape = [domain[i] if i in subset else 1 for i in range(3)]
        dense = dense * np.exp(((m - est) / (2 * 50.0)).reshape(shape))
        dense *= 50.0 / dense.sum()
        for q in [(), (0,), (1, 2), (0, 1, 2), (0, 2)]:
            want = dense.sum(axis=tuple(i for i in range(3) if i not in q)).reshape(-1) if q else [50.0]
            assert np.allclose(d.marginal(q), want)
    assert [g[0] for g in d.groups] == [(0, 1, 2)]


def test_factored_groups_stay_independent_until_a_measurement_spans_them():
    d = FactoredDistribution((3, 3, 3, 3), total=9.0)
    d.update((0, 1), np.arange(9.0))
    d.update((2,), np.array([1.0, 2.0, 6.0]))
    assert sorted(g[0] for g in d.groups) == [(0, 1), (2,), (3,)]
    assert d.merged_cells((1, 2)) == 27
    joint = d.marginal((1, 2)).reshape(3, 3)
    assert np.allclose(joint, np.outer(d.marginal((1,)), d.marginal((2,))) / 9.0)


def test_sampling_follows_the_distribution():
    d = FactoredDistribution((2, 3), total=1.0)
    d.update((0, 1), np.array([0.5, 0.0, 0.0, 0.0, 0.0, 0.5]) * 1.0)
    for _ in range(200):
        d.update((0, 1), np.array([0.5, 0.0, 0.0, 0.0, 0.0, 0.5]))
    p = d.marginal((0, 1))
    rec = d.sample(20000, np.random.default_rng(1))
    freq = np.bincount(rec[:, 0] * 3 + rec[:, 1], minlength=6) / 20000
    assert np.allclose(freq, p, atol=0.015)


# -- the exponential mechanism --------------------------------------------------------------

@pytest.fixture
def counted_once(monkeypatch):
    """Read the private table once per distinct request, so thousands of draws stay fast."""
    seen = {}
    real = kernel_module.prepare_counting

    def once(con, table, schema, attributes, subsets, snapshot=None):
        key = (id(con), tuple(map(tuple, subsets)))
        counting = real(con, table, schema, attributes, subsets, snapshot)

        def read():
            if key not in seen:
                seen[key] = counting.run()
            return seen[key]
        return Counting(read)

    monkeypatch.setattr(kernel_module, "prepare_counting", once)


def _private(con, budget=Budget(epsilon=1e9), source=None):
    schema = dpsql.load_schema(SCHEMA)
    ledger = Ledger(None, budget)
    return PrivateTable(con, "t", schema, ledger, source), schema_attributes(schema), ledger


def _count_reads(monkeypatch) -> list[int]:
    """The ledger entry of each read of the private table, as they happen."""
    reads: list[int] = []
    real = PrivateTable._read
    monkeypatch.setattr(PrivateTable, "_read", lambda self, counting, entry: reads.append(entry) or
                        real(self, counting, entry))
    return reads


def test_exponential_mechanism_probabilities(counted_once):
    con, records = make_table(600)
    table, attrs, ledger = _private(con, source=np.random.default_rng(3))
    domain = [a.size for a in attrs]
    cands = [(0,), (1,), (2,)]
    truth = [truth_marginal(records, domain, c) for c in cands]
    # estimates that miss the truth by L1 scores 0, 10 and 20
    est = [truth[0].copy(), truth[1].copy(), truth[2].copy()]
    est[1][0] += 10
    est[2][0] -= 20
    eps = 0.2
    # 1,000 draws: a frequency's sd is at most 0.016; a doubled or halved eps moves one by 0.1 or more
    picks = np.bincount([table.select_marginal(attrs, cands, est, eps, Cost(epsilon=eps)) for _ in range(1000)],
                        minlength=3) / 1000
    want = np.exp(eps * np.array([0, 10, 20]) / 2)
    assert np.allclose(picks, want / want.sum(), atol=0.04)
    assert len(ledger.entries()) == 1000 and ledger.spent().epsilon == pytest.approx(200.0)


def test_exponential_mechanism_respects_the_unit_bound(counted_once):
    con, records = make_table(600)
    schema = dict(SCHEMA, privacy_unit={"column": "pid", "max_rows": 4})
    con.execute("ALTER TABLE t ADD COLUMN pid INTEGER")
    con.execute("UPDATE t SET pid = rowid")
    table = PrivateTable(con, "t", dpsql.load_schema(schema), Ledger(None, Budget(epsilon=1e9)),
                         np.random.default_rng(4))
    attrs = schema_attributes(dpsql.load_schema(schema))
    domain = [a.size for a in attrs]
    cands = [(0,), (1,)]
    est = [truth_marginal(records, domain, c) for c in cands]
    est[1][0] += 40  # score 40 with k = 4 acts like 10 with k = 1
    picks = np.mean([table.select_marginal(attrs, cands, est, 0.2, Cost(epsilon=0.2)) for _ in range(1000)])
    assert picks == pytest.approx(math.exp(1) / (1 + math.exp(1)), abs=0.04)  # k = 1 would give 0.98


def test_exponential_mechanism_with_weights_and_offsets_scales_by_the_largest_weight(counted_once):
    """AIM's scores: s_j = w_j·miss_j − b_j, picked with probability ∝ exp(ε s_j / (2 max w))."""
    con, records = make_table(600)
    table, attrs, ledger = _private(con, source=np.random.default_rng(5))
    domain = [a.size for a in attrs]
    cands = [(0,), (1,), (2,)]
    est = [truth_marginal(records, domain, c) for c in cands]
    est[1][0] += 10
    est[2][0] -= 20
    weights, offsets, eps = np.array([4.0, 2.0, 1.0]), np.array([3.0, 0.0, 12.0]), 0.5
    reservation = table.reserve(Cost(epsilon=1e3), "draws", "aim", rho=1e3)   # drawn from: no entry a draw
    picks = np.bincount([table.select_marginal(attrs, cands, est, eps, reservation, weights=weights,
                                               offsets=offsets) for _ in range(3000)], minlength=3) / 3000
    scores = weights * np.array([0.0, 10.0, 20.0]) - offsets            # -3, 20, 8
    want = np.exp(eps * scores / (2 * weights.max()))
    assert np.allclose(picks, want / want.sum(), atol=0.03)
    with pytest.raises(ValueError, match="weights must be finite and > 0"):
        table.select_marginal(attrs, cands, est, eps, Cost(epsilon=eps), weights=[1.0, 0.0, 1.0])


def test_a_reservation_with_a_zcdp_allowance_refuses_steps_beyond_it_before_reading(monkeypatch):
    from dpsql.privacy import Gaussian, Laplace
    from dpsql.synth.mwem import marginal_strategy

    con, records = make_table(600)
    table, attrs, ledger = _private(con, budget=Budget(rho=2.0), source=np.random.default_rng(6))
    reads = _count_reads(monkeypatch)
    reservation = table.reserve(Cost(rho=1.0), "AIM test", "aim", rho=1.0)
    domain = [a.size for a in attrs]
    m = table.measure(attrs, marginal_strategy(domain, (0, 1)), Gaussian(rho=0.5), reservation, "first")
    assert m.entry == reservation.entry and m.noise_std == pytest.approx(1.0, rel=1e-6)   # 1/sqrt(2·0.5)
    table.select_marginal(attrs, [(0,), (0, 1)], [np.zeros(3), np.zeros(12)], 1.2, reservation, "pick")
    assert reservation.drawn[1][1] == pytest.approx(1.2**2 / 8)
    assert len(reads) == 2   # (0, 1) counted once and kept; (0,) read for the selection
    for step in (lambda: table.measure(attrs, marginal_strategy(domain, (2,)), Gaussian(rho=0.4), reservation),
                 lambda: table.select_marginal(attrs, [(2,)], [np.zeros(2)], 2.0, reservation)):
        with pytest.raises(PrivacyError, match="would exceed the reserved rho=1.0"):
            step()
    assert len(reads) == 2 and reservation.used == pytest.approx(0.5 + 0.18)
    with pytest.raises(ValueError, match="Gaussian"):
        table.measure(attrs, marginal_strategy(domain, (2,)), Laplace(0.1), reservation)
    table.measure(attrs, marginal_strategy(domain, (2,)), Gaussian(rho=1.0 - 0.68), reservation)   # exactly the rest
    assert reservation.used == pytest.approx(1.0) and len(ledger.entries()) == 1
    assert ledger.spent().rho == 1.0
    reservation.close()
    with pytest.raises(ValueError, match="open reservation"):
        table.measure(attrs, marginal_strategy(domain, (2,)), Gaussian(rho=1e-3), reservation)
    plain = table.reserve(Cost(rho=0.1), "no allowance", "fem")
    with pytest.raises(ValueError, match="no allowance"):
        table.select_marginal(attrs, [(2,)], [np.zeros(2)], 0.1, plain)


def test_a_reservation_with_a_pure_epsilon_allowance_adds_up_epsilons_and_takes_laplace_noise_only(monkeypatch):
    """A pure epsilon allowance (MST under a pure epsilon): a Laplace measurement draws its epsilon,
    with noise of scale sensitivity / epsilon; a pick draws its epsilon (not epsilon^2/8); Gaussian
    noise, a step past the allowance, and an allowance its cost does not pay for are refused."""
    from dpsql.privacy import Gaussian, Laplace
    from dpsql.synth.mwem import marginal_strategy

    con, records = make_table(600)
    table, attrs, ledger = _private(con, budget=Budget(epsilon=2.0), source=np.random.default_rng(7))
    reads = _count_reads(monkeypatch)
    for bad in ({"epsilon": 1.5}, {"epsilon": 0.5, "rho": 0.5}):
        with pytest.raises(ValueError, match="a pure epsilon allowance needs a cost of at least that epsilon"):
            table.reserve(Cost(epsilon=1.0), "test", "mst", **bad)
    assert ledger.entries() == []
    reservation = table.reserve(Cost(epsilon=1.0), "MST test", "mst", epsilon=1.0)
    domain = [a.size for a in attrs]
    m = table.measure(attrs, marginal_strategy(domain, (0, 1)), Laplace(0.5), reservation, "first")
    assert m.entry == reservation.entry and m.noise_std == pytest.approx(math.sqrt(2) * 2, rel=1e-6)  # scale 1/0.5
    table.select_marginal(attrs, [(0,), (0, 1)], [np.zeros(3), np.zeros(12)], 0.3, reservation, "pick")
    assert [r for _, r in reservation.drawn] == [pytest.approx(0.5), pytest.approx(0.3)]
    with pytest.raises(ValueError, match="Gaussian.*Laplace"):
        table.measure(attrs, marginal_strategy(domain, (2,)), Gaussian(rho=0.01), reservation)
    with pytest.raises(PrivacyError, match="would exceed the reserved epsilon=1.0"):
        table.select_marginal(attrs, [(2,)], [np.zeros(2)], 0.25, reservation)
    assert len(reads) == 2
    table.measure(attrs, marginal_strategy(domain, (2,)), Laplace(0.2), reservation)   # exactly the rest
    assert reservation.used == pytest.approx(1.0) and len(ledger.entries()) == 1 and ledger.spent().epsilon == 1.0


# -- MWEM -----------------------------------------------------------------------------------

def test_mwem_accounting_is_recorded_step_by_step():
    con, _ = make_table(500)
    table, attrs, ledger = _private(con, budget=Budget(epsilon=2.0))
    rounds = 4
    steps = mwem_steps(rounds)
    assert steps == 2 * rounds + 1 and mwem_steps(rounds, "noisy") == 2 * rounds + 2
    res = mwem(table, attrs, list(itertools.combinations(range(4), 2)), 1.0 / steps, Cost(epsilon=1.0 / steps),
               rounds=rounds)
    entries = ledger.entries()
    assert len(entries) == steps
    assert sum(e.mechanism.startswith("exponential") for e in entries) == rounds
    assert ledger.spent().epsilon == pytest.approx(1.0)
    assert len(res.measurements) == rounds
    # a run that would not fit is refused before anything is measured
    before = ledger.entries()
    with pytest.raises(BudgetExceededError):  # 1.0 is left; this run needs 1.8
        mwem(table, attrs, [(0, 1)], 1.8 / steps, Cost(epsilon=1.8 / steps), rounds=rounds)
    assert ledger.entries() == before


def test_mwem_refuses_runs_that_would_fail_midway_before_measuring():
    con, _ = make_table(300)
    table, attrs, ledger = _private(con, budget=Budget(epsilon=2.0))
    # steps below the lattice Laplace floor used to fail after the first measurement was charged
    with pytest.raises(PrivacyError, match="below the floor"):
        mwem(table, attrs, [(0, 1)], 1e-15, Cost(epsilon=1e-15), rounds=2)
    with pytest.raises(ArgumentError, match="rounds must be an integer >= 1, got rounds=0"):
        mwem(table, attrs, [(0, 1)], 0.1, Cost(epsilon=0.1), rounds=0)
    with pytest.raises(ArgumentError, match="replays must be an integer >= 1, got replays=0"):
        mwem(table, attrs, [(0, 1)], 0.1, Cost(epsilon=0.1), rounds=1, replays=0)
    with pytest.raises(ArgumentError, match="init must be one of"):
        mwem(table, attrs, [(0, 1)], 0.1, Cost(epsilon=0.1), rounds=1, init="random")
    with pytest.raises(WorkloadError, match="non-empty workload"):
        mwem(table, attrs, [], 0.1, Cost(epsilon=0.1), rounds=1)
    assert ledger.entries() == []
    # the noisy start measures d one-way marginals at once: its floor is d times higher
    check_mwem(table, attrs, [(0, 1)], 1e-13, rounds=1)
    with pytest.raises(PrivacyError, match="below the floor"):
        check_mwem(table, attrs, [(0, 1)], 1e-13, rounds=1, init="noisy")


def test_synthesize_mwem_charges_what_it_reports_and_refuses_delta():
    con, _ = make_table(300)
    db = dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=10.0, delta=1e-5), cache=False)
    with pytest.raises(PrivacyError, match="MWEM is pure epsilon-DP"):
        db.synthesize("mwem", workload=1, epsilon=1.0, delta=1e-6, rounds=2)  # used to report delta, charge 0
    assert db.ledger.entries() == []
    syn = db.synthesize("mwem", workload=1, epsilon=0.7, rounds=3, name="s")
    assert (syn.epsilon, syn.delta) == (db.spent().epsilon, db.spent().delta) == (0.7 / 7 * 7, 0.0)


def test_mwem_laplace_measurements_have_the_calibrated_noise(counted_once):
    con, records = make_table(2000)
    table, attrs, _ = _private(con, source=np.random.default_rng(9))
    domain = [a.size for a in attrs]
    errors = []
    for _ in range(300):
        res = mwem(table, attrs, [(0, 1)], 0.5, Cost(epsilon=0.5), rounds=1)
        subset, values = res.measurements[0]
        errors.append(values - truth_marginal(records, domain, subset))
    # a marginal has L1 sensitivity 1: Laplace scale 1/ε = 2, standard deviation 2√2
    assert np.std(errors) == pytest.approx(2 * math.sqrt(2), rel=0.06)


@pytest.mark.parametrize("init", ["uniform", "noisy"])
def test_mwem_converges_to_the_true_marginals_at_large_epsilon(init):
    con, records = make_table(6000)
    table, attrs, _ = _private(con, source=np.random.default_rng(2))
    domain = [a.size for a in attrs]
    workload = list(itertools.combinations(range(4), 2))
    res = mwem(table, attrs, workload, 1e4, Cost(epsilon=1e4), rounds=12, replays=200, init=init)
    for q in workload:
        err = np.abs(res.distribution.marginal(q) - truth_marginal(records, domain, q)).max()
        assert err < 0.02 * len(records), (q, err)


def test_mwem_average_option_is_a_distribution_over_the_full_domain():
    con, _ = make_table(300)
    table, attrs, _ = _private(con)
    res = mwem(table, attrs, [(0, 1), (2, 3)], 10.0, Cost(epsilon=10.0), rounds=3, average=True)
    assert res.distribution.marginal(()).item() == pytest.approx(res.distribution.total)
    assert [g[0] for g in res.distribution.groups] == [(0, 1, 2, 3)]


# -- synthetic tables through the API -------------------------------------------------------

def test_synthesize_registers_a_queryable_table_and_spends_through_the_ledger(tmp_path):
    con, records = make_table(4000)
    db = dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=1e6), ledger=tmp_path / "l", cache=False)
    syn = db.synthesize("mwem", workload=[("a", "b"), ("c", "d")], epsilon=1e4, rounds=6, replays=100,
                        rows=3000, name="t_syn", seed=0)
    assert db.spent().epsilon == pytest.approx(1e4)
    assert len(Ledger(tmp_path / "l").entries()) == mwem_steps(6)
    # plain SQL over the synthetic table, with the schema's values
    rows = db.released.sql("SELECT a, b, COUNT(*) FROM t_syn GROUP BY a, b").fetchall()
    assert sum(r[2] for r in rows) == 3000
    assert {r[0] for r in rows} <= {0, 1, 2} and set(db.released.sql("SELECT DISTINCT d FROM t_syn").df()["d"]) <= {"x", "y"}
    # b = a or a + 1 (mod 4) in the private data: the synthetic table keeps that structure
    off = db.released.sql("SELECT COUNT(*) FROM t_syn WHERE b <> a AND b <> (a + 1) % 4").fetchall()[0][0]
    assert off < 0.03 * 3000
    assert list(syn.report.columns) == ["marginal", "cells", "max_abs_error_vs_noisy", "mean_abs_error_vs_noisy"]
    assert "synthetic table 't_syn'" in repr(syn) and len(syn.relation.fetchall()) == 3000


def test_synthesize_refusals_spend_nothing():
    con, _ = make_table(200)
    db = dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=1.0), cache=False)
    with pytest.raises(BudgetExceededError):
        db.synthesize("mwem", workload=2, epsilon=2.0)
    with pytest.raises(WorkloadError):
        db.synthesize("gan", workload=2, epsilon=0.5)
    with pytest.raises(WorkloadError):
        db.synthesize("mwem", workload=[("a", "nope")], epsilon=0.5)
    assert db.spent().epsilon == 0.0


def test_synthesize_under_zcdp_spends_rho():
    con, _ = make_table(300)
    db = dpsql.connect(con, schema=SCHEMA, budget=Budget(rho=1.0), cache=False)
    db.synthesize("mwem", workload=1, rho=0.5, rounds=3, name="s")
    assert db.spent().rho == pytest.approx(0.5)


def test_workload_descriptions():
    schema = dpsql.load_schema(SCHEMA)
    attrs = schema_attributes(schema)
    assert workload_marginals(2, schema, attrs) == list(itertools.combinations(range(4), 2))
    assert workload_marginals([("b", "a"), ("d",)], schema, attrs) == [(0, 1), (3,)]
    sql = ["SELECT a, COUNT(*) FROM t WHERE c GROUP BY a", "SELECT b, d, COUNT(*) FROM t GROUP BY b, d"]
    assert workload_marginals(sql, schema, attrs) == [(0, 2), (1, 3)]
    # a list of names alone is their one-way marginals (it was compiled as SQL, and refused)
    assert workload_marginals(["b", "D"], schema, attrs) == [(1,), (3,)] == workload_marginals("b;d".split(";"),
                                                                                              schema, attrs)
    with pytest.raises(WorkloadError, match="^workload=7 asks for every 7-way marginal, but the table has 4 "
                                            "attributes: give k from 1 to 4$"):
        workload_marginals(7, schema, attrs)
    with pytest.raises(WorkloadError, match="group keys alone, as in SELECT DISTINCT"):
        workload_marginals("SELECT DISTINCT a FROM t", schema, attrs)
    # names beside SQL were compiled as SQL ("COLUMN is not supported"); OPTIONS were ignored
    with pytest.raises(WorkloadError, match="this workload mixes column names \\('b'\\) with SQL"):
        workload_marginals(["b", "SELECT COUNT(*) FROM t"], schema, attrs)
    with pytest.raises(WorkloadError, match="OPTIONS in a synthetic table's workload: its spend is synthesize's"):
        workload_marginals("SELECT WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon = 5) a, COUNT(*) FROM t GROUP BY a",
                           schema, attrs)


def cli_files(tmp_path, rows: int):
    """A generated table as ``t.parquet`` and its schema as ``t.json`` in ``tmp_path``, for the CLI."""
    import json

    con, _ = make_table(rows)
    data = tmp_path / "t.parquet"
    con.sql("SELECT * FROM t").write_parquet(str(data))
    schema = tmp_path / "t.json"
    schema.write_text(json.dumps(SCHEMA))
    return data, schema


def test_cli_synth_writes_the_table_atomically(tmp_path, capsys):
    from dpsql.api.cli import main

    data, schema = cli_files(tmp_path, 1000)
    out = tmp_path / "syn.csv"
    code = main(["synth", "--data", str(data), "--schema", str(schema), "--ledger", str(tmp_path / "l"),
                 "--budget-epsilon", "2", "--epsilon", "1", "--method", "mwem", "--workload", "a,b;c", "--rounds", "3",
                 "--rows", "500", "--seed", "1", "--out", str(out)])
    assert code == 0
    df = pd.read_csv(out)
    assert len(df) == 500 and list(df.columns) == ["a", "b", "c", "d"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l", "syn.csv", "t.json", "t.parquet"]
    assert Ledger(tmp_path / "l").spent().epsilon == pytest.approx(1.0)
    assert "remaining budget: epsilon=1" in capsys.readouterr().out
