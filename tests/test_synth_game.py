"""DualQuery and FEM: accounting by hand, the kernel's cell sampling, the batched
oracle, and synthetic tables through the API."""

from __future__ import annotations

import itertools
import math
import os

import duckdb
import numpy as np
import pytest
from test_mwem import SCHEMA, cli_files, make_table
from test_pgm import zcdp_epsilon_by_hand

import dpsql
from dpsql.errors import ArgumentError, BudgetExceededError, PrivacyError, WorkloadError
from dpsql.owner.evaluate import evaluate
from dpsql.private.budget import Budget, Cost
from dpsql.private.kernel import PrivateTable
from dpsql.private.ledger import Ledger
from dpsql.private.measure import measure_marginals
from dpsql.sql.compile import schema_attributes
from dpsql.synth import MarginalCells, random_marginals
from dpsql.synth.accounting import (
    MAX_ROUNDS,
    dualquery_epsilon,
    dualquery_eta,
    dualquery_eta_zcdp,
    dualquery_rho,
    dualquery_rounds,
    dualquery_samples,
    exponential_rho,
    fem_rounds,
    fem_rounds_zcdp,
    zcdp_epsilon,
    zcdp_rho,
)
from dpsql.synth.oracle import Conjunction, objective, perturbed_responses

# -- accounting, by hand -------------------------------------------------------------------


def test_dualquery_theorem_4_2_by_hand():
    # eta T (T-1) s / n
    assert dualquery_epsilon(0.4, 10, 35, 1000.0) == pytest.approx(0.4 * 10 * 9 * 35 / 1000)
    assert dualquery_epsilon(2.0, 1, 500, 10.0) == 0.0  # one round samples uniformly


def test_dualquery_theorem_4_3_by_hand():
    eta, T, s, n, delta = 1.0, 4, 5, 1000.0, 1e-5
    per_draw = 2 * eta * (T - 1) / n            # 0.006
    k = s * (T - 1)                              # 15 draws that look at the data
    want = per_draw * (math.sqrt(2 * k * math.log(1 / delta)) + k * (math.exp(per_draw) - 1))
    assert dualquery_epsilon(eta, T, s, n, delta) == pytest.approx(want, rel=1e-12)
    assert want == pytest.approx(0.006 * (math.sqrt(30 * math.log(1e5)) + 15 * (math.exp(0.006) - 1)))


def test_dualquery_rho_by_hand():
    # rounds t = 1..4, each of s = 3 draws is (2 eta (t-1)/n)-DP, i.e. (that)^2/2-zCDP
    eta, n = 0.5, 100.0
    want = sum(3 * (2 * eta * (t - 1) / n) ** 2 / 2 for t in range(1, 5))
    assert dualquery_rho(eta, 4, 3, n) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
def test_dualquery_inverses_are_the_largest_that_fit(delta):
    eta, s, n, eps = 0.4, 35, 48842.0, 1.0
    T = dualquery_rounds(eps, delta, eta, s, n)
    assert dualquery_epsilon(eta, T, s, n, delta) <= eps < dualquery_epsilon(eta, T + 1, s, n, delta)
    s2 = dualquery_samples(eps, delta, eta, T, n)
    assert s2 >= s
    assert dualquery_epsilon(eta, T, s2, n, delta) <= eps < dualquery_epsilon(eta, T, s2 + 1, n, delta)


@pytest.mark.parametrize("delta", [0.0, 1e-6])
@pytest.mark.parametrize("eps, T, s, n", [(0.95, 50, 500, 300.0), (1.0, 2, 1, 1.0), (1e-6, 1000, 35, 5.0),
                                          (50.0, 3, 5, 48842.0)])
def test_dualquery_eta_is_the_largest_that_fits(eps, T, s, n, delta):
    eta = dualquery_eta(eps, delta, T, s, n)
    assert dualquery_epsilon(eta, T, s, n, delta) <= eps < dualquery_epsilon(eta * (1 + 1e-12), T, s, n, delta)
    if delta == 0.0:  # Theorem 4.2 inverted by hand: eta = eps n / (T (T-1) s)
        assert eta == pytest.approx(eps * n / (T * (T - 1) * s), rel=1e-12)
    assert dualquery_eta(eps, delta, T, s, n, upper=eta / 2) == eta / 2  # a cap that fits is the answer


def test_dualquery_eta_zcdp_by_hand():
    rho, T, s, n = 0.095, 5, 7, 400.0
    eta = dualquery_eta_zcdp(rho, T, s, n)
    assert eta == pytest.approx(n * math.sqrt(rho / (2 * s * (1 + 4 + 9 + 16))), rel=1e-12)
    assert dualquery_rho(eta, T, s, n) <= rho < dualquery_rho(eta * (1 + 1e-12), T, s, n)


def test_dualquery_accounting_edges():
    # e^{eps'} beyond a double is an infinite cost, not an OverflowError (eta=1e6 used to fail after a spend)
    assert dualquery_epsilon(1e6, 3, 5, 10.0, 1e-6) == math.inf
    with pytest.raises(PrivacyError, match="rounds >= 2"):
        dualquery_eta(1.0, 0.0, 1, 5, 10.0)  # one round costs nothing whatever eta is
    # FEM round counts are capped, never float('inf') turned into an int
    assert fem_rounds_zcdp(1e300, 1e-150) == MAX_ROUNDS == fem_rounds(1e300, 0.0, 1e-150)


def test_zcdp_conversion_and_fem_rounds_by_hand():
    rho, delta = 0.01, 1e-9
    # Canonne, Kamath & Steinke (2020, Corollary 13), by hand: below Bun & Steinke's rho + 2 sqrt(rho ln(1/delta))
    assert zcdp_epsilon(rho, delta) == pytest.approx(zcdp_epsilon_by_hand(rho, delta), rel=1e-9)
    assert zcdp_epsilon(rho, delta) < 0.01 + 2 * math.sqrt(0.01 * math.log(1e9)) - 0.1
    eps = 0.7
    r = zcdp_rho(eps, delta)
    assert zcdp_epsilon(r, delta) <= eps and zcdp_epsilon(r * 1.001, delta) > eps
    assert r > (math.sqrt(math.log(1 / delta) + eps) - math.sqrt(math.log(1 / delta))) ** 2
    assert zcdp_rho(1e308, delta) == 1e300 and zcdp_epsilon(1e300, delta) <= 1e308  # capped, finite, within
    assert exponential_rho(0.1) == pytest.approx(0.01 / 8) and exponential_rho(0.1, False) == pytest.approx(0.005)
    T = fem_rounds(eps, delta, 0.01)
    assert T == math.floor(r / (0.01 ** 2 / 8) + 1e-9)
    assert fem_rounds(eps, delta, 0.01, bounded_range=False) == math.floor(r / (0.01 ** 2 / 2) + 1e-9)
    assert fem_rounds(1.0, 0.0, 0.3) == 3
    with pytest.raises(PrivacyError):
        fem_rounds(0.1, 0.0, 0.3)


# -- cells: the numbering the kernel uses ------------------------------------------------------


def test_marginal_cells_match_the_kernels_marginals():
    con, records = make_table(700)
    schema = dpsql.load_schema(SCHEMA)
    attrs = schema_attributes(schema)
    subsets = [(0, 1), (2,), (1, 2, 3), ()]
    cells = MarginalCells([a.size for a in attrs], subsets)
    exact = np.concatenate(measure_marginals(con, "t", schema, attrs, subsets))
    assert np.array_equal(cells.counts(records), exact)
    for j in [0, 5, 13, 14, cells.size - 1]:  # each cell's conjunction selects exactly its records
        assert cells.conjunction(j).evaluate(records).sum() == exact[j]
    assert cells.fractions(records[:0]).sum() == 0.0


def test_random_marginals_are_distinct_and_seeded():
    a = random_marginals(15, 3, 64, seed=4)
    assert len(set(a)) == 64 and all(len(m) == 3 and list(m) == sorted(m) for m in a)
    assert a == random_marginals(15, 3, 64, seed=4) and a != random_marginals(15, 3, 64, seed=5)
    with pytest.raises(WorkloadError):
        random_marginals(3, 4)


# -- the kernel's exponential mechanism over cells --------------------------------------------


def _table(con, schema=SCHEMA, budget=Budget(epsilon=1e9), seed=3):
    s = dpsql.load_schema(schema)
    ledger = Ledger(None, budget)
    return PrivateTable(con, "t", s, ledger, np.random.default_rng(seed)), schema_attributes(s), ledger


@pytest.mark.parametrize("unit", [None, 3])
def test_sample_cells_follows_the_exponential_mechanism(unit):
    con, records = make_table(500)
    schema = SCHEMA
    if unit:
        schema = dict(SCHEMA, privacy_unit={"column": "pid", "max_rows": unit})
        con.execute("ALTER TABLE t ADD COLUMN pid INTEGER")
        con.execute("UPDATE t SET pid = rowid")  # one row per unit: the cap keeps every row
    table, attrs, ledger = _table(con, schema)
    subsets = [(0,), (2, 3)]
    cells = MarginalCells([a.size for a in attrs], subsets)
    estimates = np.linspace(0.05, 0.6, cells.size)
    reservation = table.reserve(Cost(epsilon=1.0), "test", "exponential")
    eps = 0.02
    draws = table.sample_cells(attrs, subsets, estimates, eps, 40_000, reservation)
    counts = cells.counts(records)
    scores = counts - len(records) * estimates            # both marginals total n
    logits = eps / (2 * (unit or 1)) * np.concatenate([scores, -scores])
    want = np.exp(logits - logits.max())
    want /= want.sum()
    index = np.where(draws[:, 1] == 1, draws[:, 0], draws[:, 0] + cells.size)
    got = np.bincount(index, minlength=2 * cells.size) / len(draws)
    assert np.abs(got - want).max() < 0.01
    assert reservation.charges == [("exponential", eps, 40_000)]
    assert len(ledger.entries()) == 1  # the reservation; draws never charge again


def test_sample_cells_refuses_bad_estimates_and_closed_reservations():
    con, _ = make_table(100)
    table, attrs, _ = _table(con)
    reservation = table.reserve(Cost(epsilon=1.0), "test", "exponential")
    with pytest.raises(ValueError):
        table.sample_cells(attrs, [(0,)], np.array([0.5, 1.5, 0.0]), 0.1, 1, reservation)
    with pytest.raises(ValueError):
        table.sample_cells(attrs, [(0,)], np.zeros(2), 0.1, 1, reservation)
    reservation.close()
    with pytest.raises(ValueError):
        table.sample_cells(attrs, [(0,)], np.zeros(3), 0.1, 1, reservation)
    other, _, _ = _table(con)
    with pytest.raises(ValueError):
        other.sample_cells(attrs, [(0,)], np.zeros(3), 0.1, 1, table.reserve(Cost(epsilon=1.0), "x", "y"))


def test_reservation_over_budget_records_nothing():
    con, _ = make_table(100)
    table, _, ledger = _table(con, budget=Budget(epsilon=1.0))
    with pytest.raises(BudgetExceededError):
        table.reserve(Cost(epsilon=1.5), "too much", "fem")
    assert ledger.entries() == []


# -- the batched oracle -------------------------------------------------------------------------


def test_perturbed_responses_against_brute_force():
    rng = np.random.default_rng(0)
    domain = (3, 2, 4, 2)
    grid = np.array(list(itertools.product(*[range(n) for n in domain])))
    offsets = np.concatenate([[0], np.cumsum(domain)])
    optimal = 0
    for trial in range(20):
        queries = []
        for _ in range(8):
            attrs = tuple(sorted(rng.choice(4, size=2, replace=False)))
            queries.append(Conjunction.from_cell(attrs, [rng.integers(domain[a]) for a in attrs]))
        weights = rng.choice([-1.0, 1.0, 2.0], size=8)
        perturb = -rng.exponential(1.0, size=(6, offsets[-1]))
        responses = perturbed_responses(domain, queries, weights, perturb, seed=trial)
        for r, resp in enumerate(responses):
            values = objective(queries, weights, grid) + perturb[r][offsets[:-1] + grid].sum(axis=1)
            here = objective(queries, weights, np.array([resp.record]))[0] + \
                perturb[r][offsets[:-1] + np.array(resp.record)].sum()
            assert resp.objective == pytest.approx(here) and resp.method == "heuristic"
            assert resp.objective <= values.max() + 1e-9
            optimal += resp.objective >= values.max() - 1e-9
    assert optimal >= 0.95 * 20 * 6


# -- the algorithms through the API -----------------------------------------------------------


def _db(con, tmp_path, budget, seed=0):
    """A connection with seeded noise: these tests check learning, whose error is random."""
    return dpsql.connect(con, schema=SCHEMA, budget=budget, ledger=tmp_path / "l", cache=False, progress=False,
                         source_of_noise=np.random.default_rng(seed))


def test_fem_spends_its_formula_and_learns_the_marginals(tmp_path):
    con, records = make_table(3000)
    db = _db(con, tmp_path, Budget(epsilon=40.0, delta=1e-5))
    eps, delta, eps0 = 20.0, 1e-6, 0.5
    syn = db.synthesize("fem", workload=2, epsilon=eps, delta=delta, eps0=eps0, samples=20, seed=1, name="f")
    T = fem_rounds(0.95 * eps, delta, eps0)  # count_share 0.05 of eps counts the rows (Laplace)
    assert abs(len(syn.records) - 3000) < 20 and syn.method == "fem"  # the noisy count, not 20 * T records
    assert syn.oracle == {"heuristic": 20 * T} and "records by heuristic" in repr(syn)
    run = zcdp_epsilon(T * eps0 ** 2 / 8, delta)
    assert syn.epsilon == pytest.approx(0.05 * eps + run) and syn.epsilon <= eps
    entries = Ledger(tmp_path / "l").entries()
    assert [e.cost for e in entries] == [Cost(epsilon=0.05 * eps), Cost(epsilon=run, delta=delta)]
    marginals = list(itertools.combinations(range(4), 2))
    report = evaluate(con, "t", SCHEMA, syn.records, marginals)
    assert bool(report["private"].any()) is False
    zeros = evaluate(con, "t", SCHEMA, syn.records[:0], marginals)
    # max error 0.036-0.073 over 8 noise seeds; answering zeros gives 0.35
    assert report.max_error.iloc[-1] < 0.1 < 0.3 < zeros.max_error.iloc[-1]
    assert syn.report["times_selected"].sum() == T
    # the table answers SQL, with the schema's values
    assert db.released.sql("SELECT COUNT(*) FROM f").fetchall()[0][0] == len(syn.records)
    assert set(db.released.sql("SELECT DISTINCT d FROM f").df()["d"]) <= {"x", "y"}


def test_fem_warns_up_front_of_its_error_floor_and_of_wide_columns_from_public_values_only(tmp_path):
    from dpsql.synth.plan.games import fem_warnings

    con, _ = make_table(500)
    db = _db(con, tmp_path, Budget(rho=1.0))
    with pytest.warns(UserWarning, match=r"only on tables of more than about [\d,]+ rows at eps0=0.05") as caught:
        syn = db.synthesize("fem", workload=1, rho=0.01, eps0=0.05, samples=5, seed=0)
    assert caught[0].filename == __file__ and "warning: FEM finds a cell" in repr(syn)  # points at the call
    assert syn.report.attrs["warnings"] == [str(w.message) for w in caught if "FEM" in str(w.message)]
    # 2 ln(Q) / (eps0 * 5%), Q = 2 * cells of the workload: the same for any table (n is not used)
    rows = 2 * math.log(2 * 11) / (0.05 * 0.05)
    assert f"more than about {rows:,.0f} rows" in syn.report.attrs["warnings"][0]
    notes = fem_warnings(0.05, 600, [("a", 3), ("wide", 501), ("c", 2)], [(0, 1), (2,)])
    assert len(notes) == 2 and "wide (501 values) will make its rounds slow" in notes[1]
    assert len(fem_warnings(0.05, 600, [("a", 3), ("wide", 501), ("c", 2)], [(0, 2)])) == 1  # wide column unused


def test_fem_under_zcdp_spends_rho():
    con, _ = make_table(500)
    db = dpsql.connect(con, schema=SCHEMA, budget=Budget(rho=1.0), cache=False, progress=False,
                       source_of_noise=np.random.default_rng(0))
    syn = db.synthesize("fem", workload=1, rho=0.01, eps0=0.05, samples=5, seed=0)
    T = math.floor(0.95 * 0.01 / (0.05 ** 2 / 8) + 1e-9)  # count_share 0.05 of rho counts the rows
    count, run = db.ledger.entries()
    assert count.cost.rho == pytest.approx(0.05 * 0.01) and run.cost.rho == pytest.approx(T * 0.05 ** 2 / 8)
    # the noisy count of 500 rows (Laplace of scale 1/sqrt(2 * 0.05 * 0.01) = 32), not 5 * T = 150 records
    assert syn.report["times_selected"].sum() == T and abs(len(syn.records) - 500) < 6 * 32
    fixed = db.synthesize("fem", workload=1, rho=0.01, eps0=0.05, samples=5, rows=77, seed=0, name="g")
    assert len(fixed.records) == 77 and db.ledger.entries()[-1].cost.rho == pytest.approx(
        math.floor(0.01 / (0.05 ** 2 / 8) + 1e-9) * 0.05 ** 2 / 8)  # rows given: no count, all of rho


def test_fem_runs_its_oracle_in_one_process_unless_asked(monkeypatch):
    """Worker processes are spawned, and spawning reruns a script's top level: in a script with no
    ``__main__`` guard, every worker called ``synthesize`` again and spent again (one ε = 1 request
    charged ε = 5 on 2 cores). So the MIP oracle runs inline unless ``processes`` asks for more."""
    import dpsql.synth.fem as fem_module

    asked = []
    real = fem_module.best_responses
    monkeypatch.setattr(fem_module, "best_responses",  # records what is asked for, solves inline
                        lambda *a, **k: asked.append(k["processes"]) or real(*a, **{**k, "processes": 1}))
    con, _ = make_table(300)
    db = dpsql.connect(con, schema=SCHEMA, budget=Budget(rho=1.0), cache=False, progress=False)
    db.synthesize("fem", workload=1, rho=0.0004, eps0=0.05, samples=2, oracle="mip", seed=0, name="one")
    rounds = len(asked)
    db.synthesize("fem", workload=1, rho=0.0004, eps0=0.05, samples=2, oracle="mip", seed=0, processes=2, name="two")
    assert rounds >= 1 and asked == [1] * rounds + [min(2, os.cpu_count() or 1)] * rounds


def test_dualquery_spends_count_plus_theorem_4_3(tmp_path):
    con, records = make_table(3000)
    db = _db(con, tmp_path, Budget(epsilon=20.0, delta=1e-4))
    eps, delta, eta, s = 10.0, 1e-6, 0.4, 20
    syn = db.synthesize("dualquery", workload=2, epsilon=eps, delta=delta, eta=eta, samples=s, seed=2,
                        oracle="heuristic", name="dq")
    entries = Ledger(tmp_path / "l").entries()
    count, run = entries
    assert count.cost == Cost(epsilon=0.05 * eps)  # the noisy row count, Laplace
    n_hat = float(run.description.split("n=")[1])
    T = dualquery_rounds(0.95 * eps, delta, eta, s, n_hat)
    assert f"T={T}," in run.description
    assert run.cost.epsilon == pytest.approx(dualquery_epsilon(eta, T, s, n_hat, delta), rel=1e-6)
    assert syn.epsilon == pytest.approx(count.cost.epsilon + run.cost.epsilon) and syn.epsilon <= eps
    assert abs(len(syn.df) - 3000) < 200  # rows default to the noisy count
    report = evaluate(con, "t", SCHEMA, syn.records, list(itertools.combinations(range(4), 2)))
    assert report.max_error.iloc[-1] < 0.2, report.max_error.iloc[-1]
    assert db.released.sql("SELECT COUNT(*) FROM dq").fetchall()[0][0] == len(syn.df)


def test_dualquery_draws_are_charged_as_the_theorem_says(monkeypatch):
    """Every round's draws use the per-draw epsilon 2 eta (t-1) k / n of the proof."""
    import dpsql.private.kernel as kernel_module

    seen = []
    real = kernel_module.PrivateTable.sample_cells

    def spy(self, attributes, subsets, estimates, epsilon, size, reservation):
        seen.append((epsilon, size))
        return real(self, attributes, subsets, estimates, epsilon, size, reservation)

    monkeypatch.setattr(kernel_module.PrivateTable, "sample_cells", spy)
    con, _ = make_table(400)
    table, attrs, _ = _table(con)
    from dpsql.synth.dualquery import dualquery

    res = table.reserve(Cost(epsilon=1.0), "dq", "dualquery")
    out = dualquery(table, attrs, [(0, 1), (2, 3)], eta=0.5, rounds=5, samples=7, n=400.0, reservation=res,
                    oracle="heuristic", seed=0)
    assert seen == [(2 * 0.5 * (t - 1) / 400.0, 7) for t in range(2, 6)]
    assert len(out.records) == 5 and len(out.selected) == 35 and len(out.methods) == 5


def test_game_methods_refuse_before_reading(tmp_path):
    con, _ = make_table(200)
    db = _db(con, tmp_path, Budget(epsilon=1.0, delta=1e-6))
    with pytest.raises(BudgetExceededError):
        db.synthesize("fem", workload=2, epsilon=2.0, delta=1e-7)
    with pytest.raises(WorkloadError):
        db.synthesize("fem", workload=2, epsilon=0.5, delta=1e-7, replays=3)  # an MWEM option
    with pytest.raises(PrivacyError):
        db.synthesize("fem", workload=2, epsilon=0.5, delta=1e-7, rounds=10, eps0=1.0)
    with pytest.raises(ArgumentError, match="rounds must be an integer >= 1, got rounds=0"):
        db.synthesize("fem", workload=2, epsilon=0.5, delta=1e-7, rounds=0)  # was ZeroDivisionError
    with pytest.raises(PrivacyError, match="give rounds .* or eta .*, not both"):
        db.synthesize("dualquery", workload=2, epsilon=0.5, delta=1e-7, rounds=3, eta=0.4)
    with pytest.raises(ArgumentError, match="count_share must be in"):
        db.synthesize("dualquery", workload=2, epsilon=0.5, delta=1e-7, count_share=1.5)
    assert db.spent() == Cost() and db.ledger.entries() == []


def test_dualquery_given_rounds_derives_eta_and_spends_the_request(tmp_path):
    """Rounds and samples that do not fit at the default eta used to be refused after the noisy
    count was spent; now the spend sets eta (Theorem 4.3 inverted) and the run uses all of it."""
    con, _ = make_table(1000)
    db = _db(con, tmp_path, Budget(epsilon=10.0, delta=1e-5))
    eps, delta, T, s = 1.0, 1e-6, 20, 200
    syn = db.synthesize("dualquery", workload=2, epsilon=eps, delta=delta, rounds=T, samples=s, seed=0,
                        oracle="heuristic", name="dq")
    count, run = Ledger(tmp_path / "l").entries()
    n_hat = float(run.description.split("n=")[1])
    eta = float(run.description.split("eta=")[1].split(",")[0])
    assert eta == dualquery_eta(0.95 * eps, delta, T, s, n_hat)
    assert run.cost.epsilon == dualquery_epsilon(eta, T, s, n_hat, delta) == pytest.approx(0.95 * eps, rel=1e-12)
    assert syn.epsilon == count.cost.epsilon + run.cost.epsilon <= eps and syn.delta == delta
    assert sum(syn.oracle.values()) == T


def test_cli_synth_fem(tmp_path, capsys):
    from dpsql.api.cli import main

    data, schema = cli_files(tmp_path, 800)
    out = tmp_path / "syn.parquet"
    code = main(["synth", "--data", str(data), "--schema", str(schema), "--ledger", str(tmp_path / "l"),
                 "--budget-epsilon", "5", "--budget-delta", "1e-5", "--epsilon", "2", "--delta", "1e-6",
                 "--method", "fem", "--rounds", "20", "--workload", "a,b;c,d", "--rows", "300", "--out", str(out)])
    assert code == 0
    assert duckdb.sql(f"SELECT COUNT(*) FROM read_parquet('{out}')").fetchall()[0][0] == 300
    spent = Ledger(tmp_path / "l").spent()
    assert spent.delta == pytest.approx(1e-6) and spent.epsilon == pytest.approx(2.0)
    assert "times_selected" in capsys.readouterr().out
