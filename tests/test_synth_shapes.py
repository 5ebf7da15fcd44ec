"""Synthetic tables of shapes the benchmarks never tried (millions of rows, a ZIP-code-like
column, nullable columns, a privacy unit, deterministic dependences): each runs within the time
it is planned for, keeps the structure its workload names, and is refused before any charge
with a message that names the construct and never a private value."""

import itertools
import math
import re
import warnings

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
from dpsql import Budget
from dpsql.errors import ResourceLimitError
from dpsql.private.kernel import PrivateTable
from dpsql.synth.aim import candidates
from dpsql.synth.pgm import greedy_trials
from dpsql.synth.refine import refine
from dpsql.synth.work import refine_seconds, structure_seconds


def _connect(frame, budget):
    """dpsql on ``frame`` as table ``t``, each column an integer from 0 to its largest value."""
    con = duckdb.connect()
    con.register("frame", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    schema = {"table": "t", "columns": {c: {"type": "integer", "min": 0, "max": int(frame[c].max())}
                                        for c in frame.columns}}
    return dpsql.connect(con, schema=schema, budget=budget, cache=False, progress=False)


def test_a_refinement_step_sorts_only_the_records_of_the_cells_it_changes(monkeypatch):
    """The default rows of a 3-million-row table took 9 minutes to refine (a plan of under 5):
    every step of every sweep sorted all the records by cell, though only those of the cells
    that lose or gain records move. On 200,000 records whose counts miss the target in 10 of
    100 cells by 100 records each, one step sorts those cells' records alone and meets the
    target exactly."""
    rng = np.random.default_rng(0)
    n = 200_000
    records = np.column_stack([rng.integers(0, 10, n), rng.integers(0, 10, n)])
    counts = np.bincount(records[:, 0] * 10 + records[:, 1], minlength=100).astype(float)
    target = counts.copy()
    target[:5] -= 100.0
    target[5:10] += 100.0
    sorted_sizes = []
    argsort = np.argsort

    def spy(a, *args, **kwargs):
        sorted_sizes.append(len(a))
        return argsort(a, *args, **kwargs)

    monkeypatch.setattr(np, "argsort", spy)
    out = refine(records, (10, 10), [((0, 1), target, 0.0)], rng, sweeps=1)
    assert np.array_equal(np.bincount(out[:, 0] * 10 + out[:, 1], minlength=100), target)
    assert sorted_sizes == [counts[:10].sum()]


def test_aim_candidates_of_every_triple_of_many_columns_are_weighed_in_linear_time():
    """Planning the default workload (every triple) of 80 columns hung for hours before any
    charge: each candidate's weight summed over the whole workload (now it sums, over its
    attributes, the workload marginals holding each; the time is benchmarks', not a test's).
    Each attribute of a candidate is in ``C(d - 1, 2)`` of the ``C(d, 3)`` triples, so a
    candidate of ``k`` attributes weighs ``k · C(d - 1, 2)``."""
    d = 30
    weights = candidates(list(itertools.combinations(range(d), 3)))
    assert len(weights) == math.comb(d, 1) + math.comb(d, 2) + math.comb(d, 3)
    assert all(w == len(r) * math.comb(d - 1, 2) for r, w in weights.items())


@pytest.mark.parametrize("method, budget, spend", [("pgm", Budget(rho=1.0), {"rho": 0.5}),
                                                   ("mwem", Budget(epsilon=1.0), {"epsilon": 0.5})])
def test_a_column_of_one_declared_value_is_not_warned_about_as_fitted_alone(method, budget, spend):
    """A column of one declared value has no relation to the other columns to learn, but
    ``print(syn)`` warned that it was fitted only through its one-way marginal."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.integers(0, 3, 500), "const": "only"})
    frame["b"] = (frame["a"] + rng.integers(0, 2, 500)) % 3
    con = duckdb.connect()
    con.register("frame", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    schema = {"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 2},
                                        "b": {"type": "integer", "min": 0, "max": 2},
                                        "const": {"type": "categorical", "values": ["only"]}}}
    db = dpsql.connect(con, schema=schema, budget=budget, cache=False, progress=False)
    syn = db.synthesize(method, workload=[("a", "b")], rows=100, name="s", seed=0, **spend)
    assert syn.report.attrs["one_way_only"] == [] and "warning" not in repr(syn)
    assert (syn.df["const"] == "only").all()


class _Started(Exception):
    """Raised in place of AIM's first reservation: the request was planned and would run."""


def test_the_default_rounds_are_cut_to_those_that_fit_in_max_seconds(monkeypatch):
    """``db.synthesize(rho=...)`` with no workload on a table of 60 columns or more was refused
    before the charge: aim's default of 16 rounds a column, whatever the table, took longer than
    ``max_seconds``. The default is now cut to the rounds that fit (with a warning), down to 2 a
    column; below that it is refused before the charge. Given rounds are never cut. (On a small
    table, a small ``max_seconds`` makes the same plan as the default one on a wide table.)"""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({f"c{j:02d}": rng.integers(0, 3, 200) for j in range(12)})  # 3^12 cells: no one model
    db = _connect(frame, Budget(rho=1.0))
    reserved = []

    def started(self, cost, description, *args, **kwargs):
        reserved.append(description)
        raise _Started

    monkeypatch.setattr(PrivateTable, "reserve", started)
    with pytest.warns(UserWarning, match=r"16 rounds per column \(rounds=192\) does not fit in max_seconds=40: "
                                         r"running rounds=(\d+)") as caught:
        with pytest.raises(_Started):
            db.synthesize("aim", rho=0.5, name="s", max_seconds=40)
    fit = int(re.search(r"running rounds=(\d+)", str(caught[0].message)).group(1))
    assert 24 <= fit < 192 and reserved == [f"AIM: rho=0.5, T={fit}"]
    with pytest.raises(ResourceLimitError, match=f"AIM with rounds={fit + 1} would run"):
        db.synthesize("aim", rho=0.5, name="s", max_seconds=40, rounds=fit + 1)
    with pytest.raises(ResourceLimitError, match="with no workload, pgm selects among every 3-way marginal as aim.*"
                                                 "AIM's default rounds, 16 per column and at least 2 in time, do not fit"):
        db.synthesize(rho=0.5, name="s", max_seconds=10)
    assert len(reserved) == 1 and db.ledger.entries() == []


def test_aim_by_name_is_refused_before_the_charge_on_a_table_too_wide_for_its_candidates(monkeypatch):
    """With no workload on 60 columns, aim scored the 35,990 marginals within the triples every
    round (a model and an estimate each, minutes a round) after the charge, far past
    ``max_seconds``. Beyond AIM_MAX_CANDIDATES aim asked for by name is refused before the
    charge. The default then is mst (tests/test_mst.py), or, given an option of pgm's that mst
    does not take, pgm over every pair."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({f"c{j:02d}": rng.integers(0, 3, 200) for j in range(40)})  # 10,700 candidates
    db = _connect(frame, Budget(rho=1.0))
    with pytest.raises(ResourceLimitError, match="AIM scores every marginal within the workload's, 10,700 here"):
        db.synthesize("aim", rho=0.5, name="s")
    reserved = []

    def started(self, cost, description, *args, **kwargs):
        reserved.append(description)
        raise _Started

    monkeypatch.setattr(PrivateTable, "reserve", started)
    with pytest.warns(UserWarning, match="more than 5,000: pgm measures every pair of columns instead"):
        with pytest.raises(_Started):
            db.synthesize(rho=0.5, name="s", one_way_share=0.2)
    assert reserved == ["PGM: rho=0.5"] and db.ledger.entries() == []


def test_pgms_plan_counts_the_greedy_search_for_a_model():
    """pgm with every pair of 40 to 80 columns ran past its plan (925 s against about 444 s on
    80): the greedy search for a model, none of it planned, took most of it. The plan now counts
    it from public values (12 trial junction trees for each of the 780 pairs of 40 columns, about
    60 s here, and 5 s of refinement), so a max_seconds below that is refused before the charge."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({f"c{j:02d}": rng.integers(0, 3, 200) for j in range(40)})
    db = _connect(frame, Budget(rho=1.0))
    with pytest.raises(ResourceLimitError, match=r"PGM's model of 820 marginals.*the rest of the run \(65 s\) "
                                                 r"exceed max_seconds=30"):
        db.synthesize("pgm", workload=2, rho=0.5, name="s", max_seconds=30)
    assert db.ledger.entries() == []


def test_pgms_plan_prices_the_search_at_each_limit_it_tries():
    """The search for a model was priced at max_model_size's limit only. On 12 binary columns the
    model of every triple is one clique of 4,096 cells, within it, so no search was planned;
    with max_seconds=5 its fit cannot take 200 steps, the plan halves the limit, and the run
    then searched for a model (12 trial trees for each of 286 sets, about 2 s) that the plan
    never counted: a model of 2,048 cells with "about 1 s besides". Priced at each limit tried,
    the plan halves once more, and max_seconds=3 is refused before the charge."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({f"c{j:02d}": rng.integers(0, 2, 300) for j in range(12)})
    db = _connect(frame, Budget(rho=1.0))
    plan = db.synthesize("pgm", workload=3, rho=0.5, name="s", max_seconds=5, seed=0).report.attrs["estimate"]
    subsets = [*itertools.combinations(range(12), 3), *((a,) for a in range(12))]
    search = structure_seconds(greedy_trials(subsets), 12)  # at 2,048 cells the model of every triple is searched for
    assert search > 1.5 and plan.endswith(f"about {refine_seconds(30, len(subsets), 1) + search:,.0f} s besides")
    assert plan.startswith("a model of 1,024 cells (within 1,024)")
    with pytest.raises(ResourceLimitError, match=r"PGM's model of 232 marginals.*the rest of the run \(3 s\) "
                                                 r"exceed max_seconds=3"):
        db.synthesize("pgm", workload=3, rho=0.5, name="s2", max_seconds=3)
    assert len(db.ledger.entries()) == 1


def test_the_default_rows_are_priced_on_the_model_fitted_not_the_plans_bound():
    """The time left for the default rows priced each fit step at the plan's bound for a greedy
    model (every measured set summed from a clique of the whole limit: 0.61 s a step on 30
    columns' pairs, 122 s for 200 steps), so a run of 10 s with max_seconds=146 made 1 row of
    the 3,000. Priced on the model fitted (released), it makes them all, and warns of nothing."""
    rng = np.random.default_rng(0)
    cols = [rng.integers(0, 3, 3000)]
    for _ in range(29):
        cols.append(np.where(rng.random(3000) < 0.3, rng.integers(0, 3, 3000), cols[-1]))
    frame = pd.DataFrame({f"c{j:02d}": c for j, c in enumerate(cols)})
    db = _connect(frame, Budget(rho=1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        syn = db.synthesize("pgm", workload=2, rho=1.0, name="s", seed=0, max_seconds=146, adaptive=False)
    assert abs(len(syn.df) - 3000) < 50


def test_aim_reports_the_estimate_it_was_planned_with():
    """The docs promise the run's estimate in ``syn.report.attrs["estimate"]``; aim's was empty."""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.integers(0, 3, 300), "b": rng.integers(0, 2, 300)})
    db = _connect(frame, Budget(rho=1.0))
    syn = db.synthesize("aim", workload=2, rho=0.5, rounds=4, name="s", seed=0)
    assert re.fullmatch(r"rounds=4: about [\d,]+ s; iterations=1000: about [\d,]+ s; the rounds end within what the "
                        r"last fit and the sampling leave of max_seconds, as they price their own work",
                        syn.report.attrs["estimate"])


@pytest.mark.parametrize("method, budget, spend", [("pgm", Budget(rho=50.0), {"rho": 10.0}),
                                                   ("mwem", Budget(epsilon=50.0), {"epsilon": 20.0})])
def test_under_a_privacy_unit_the_default_rows_are_those_of_the_kept_rows(method, budget, spend):
    """With ``privacy_unit: {column: pid, max_rows: 2}`` every method learns from at most 2 rows a
    person: the synthetic table has about as many rows as were kept (``Σ min(k, 2)``), not the
    table's, and no ``pid`` column (docs/synthetic.md)."""
    rng = np.random.default_rng(0)
    per_person = rng.integers(1, 6, 2_000)
    frame = pd.DataFrame({"pid": np.repeat(np.arange(2_000), per_person)})
    frame["a"] = rng.integers(0, 3, len(frame))
    con = duckdb.connect()
    con.register("frame", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    schema = {"table": "t", "privacy_unit": {"column": "pid", "max_rows": 2},
              "columns": {"a": {"type": "integer", "min": 0, "max": 2}}}
    db = dpsql.connect(con, schema=schema, budget=budget, cache=False, progress=False)
    kept = int(np.minimum(per_person, 2).sum())
    syn = db.synthesize(method, workload=1, name="s", seed=0, **spend)
    assert list(syn.df.columns) == ["a"]
    assert abs(len(syn.df) - kept) < 0.02 * kept < len(frame) - kept


def test_default_rows_are_capped_by_the_fit_steps_taken_not_the_most_planned():
    """The default rows are capped to what ``max_seconds`` leaves after the fit. The cap counted
    the most steps planned, though the fit stops once it converges: 24 binary columns under a
    pure epsilon got 6,325 of their 10,043 rows in a 26-second run. Here the plan of 4,701 steps
    left 24,779 of 40,000 rows; the converged fit leaves nearly all of them."""
    rng = np.random.default_rng(0)
    n = 40_000
    frame = pd.DataFrame({"a": rng.integers(0, 3, n), "b": rng.integers(0, 2, n)})
    frame["c"] = (frame["a"] + frame["b"]) % 3
    con = duckdb.connect()
    con.register("frame", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    three = {"type": "integer", "min": 0, "max": 2}
    schema = {"table": "t", "columns": {"a": three, "b": {"type": "integer", "min": 0, "max": 1}, "c": three}}
    db = dpsql.connect(con, schema=schema, budget=Budget(rho=1.0), cache=False, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a few rows may still be capped
        syn = db.synthesize("pgm", workload=2, rho=1.0, name="s", seed=0, max_seconds=1.0)
    assert len(syn.df) > 0.95 * n


def test_dualquery_says_when_its_rounds_spend_far_less_than_asked():
    """On a 20-row table each DualQuery round after the first (whose draws are uniform and free)
    costs more than the whole spend, so the run spent only the row count's share of epsilon = 1 and
    nothing said the rest went unspent. A warning now says so; the ledger holds what was spent.
    (Half the spend counts the rows, so that the noisy count stays below the 56 rows at which a
    second round would fit, but with probability 1e-8.)"""
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"a": rng.integers(0, 3, 20), "b": rng.integers(0, 2, 20)})
    db = _connect(frame, Budget(epsilon=2.0))
    with pytest.warns(UserWarning, match=r"DualQuery runs 1 round at eta=.* its rounds spend epsilon=0.0, delta=0.0 "
                                         r"of the epsilon=0.5, delta=0.0 asked for them, and the rest is not charged"):
        db.synthesize("dualquery", workload=[("a", "b")], epsilon=1.0, rows=10, name="s", seed=0, count_share=0.5)
    assert db.ledger.spent().epsilon == pytest.approx(0.5)
