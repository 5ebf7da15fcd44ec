"""Issue 42's find 3: a wide integer column (ADULT's capital_gain declared 0..99999) is binned for
the model only, by every method and under every kind of spend, and every resource error names the
column and its size."""

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
from dpsql import Budget
from dpsql.errors import ResourceLimitError
from dpsql.synth.coarsen import WIDE_SHARE


def integer_table(frame: pd.DataFrame, highs: dict[str, int]) -> tuple[duckdb.DuckDBPyConnection, dict]:
    """``frame`` as DuckDB table t, and its schema: each column an integer from 0 to its high."""
    con = duckdb.connect()
    con.register("frame", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    return con, {"table": "t", "columns": {c: {"type": "integer", "min": 0, "max": high} for c, high in highs.items()}}


@pytest.fixture(scope="module")
def wide():
    rng = np.random.default_rng(0)
    n = 3000
    frame = pd.DataFrame({"gain": rng.choice([0, 0, 0, 0, 2174, 7298, 15024], n),
                          "loss": rng.choice([0, 0, 0, 1902], n),
                          "a": rng.integers(0, 3, n), "b": rng.integers(0, 2, n), "c": rng.integers(0, 4, n)})
    con, schema = integer_table(frame, {"gain": 99_999, "loss": 99_999, "a": 2, "b": 1, "c": 3})
    return con, schema, frame


def test_a_wide_column_is_binned_for_the_model_and_drawn_back_from_its_one_way_counts(wide):
    """Every pair with gain would be 100,000 to 400,000 cells (refused today); in its 49 public bins
    the run is small, and each sampled bin becomes one of the values its noisy one-way counts
    show: the synthetic gains are (nearly all) the real ones, in their proportions and pairs."""
    con, schema, frame = wide
    db = dpsql.connect(con, schema=schema, budget=Budget(rho=10.0), cache=False, progress=False)
    syn = db.synthesize("pgm", workload=2, rho=10.0, seed=0, name="s")
    gains = syn.df["gain"].astype(int)
    assert gains.isin([0, 2174, 7298, 15024]).mean() > 0.98  # (a bin of no clear value draws uniformly)
    for value in (0, 2174, 7298, 15024):
        assert (gains == value).mean() == pytest.approx((frame.gain == value).mean(), abs=0.02)
    truth = pd.crosstab(frame.gain, frame.a, normalize=True)
    joint = pd.crosstab(gains, syn.df["a"].astype(int), normalize=True).reindex_like(truth)
    assert np.abs(joint.to_numpy() - truth.to_numpy()).max() < 0.02
    assert syn.df["loss"].astype(int).isin([0, 1902]).mean() > 0.98


def test_resource_errors_name_the_widest_column_and_its_size():
    """A workload too large even with every wide column binned is refused, naming the column."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT range % 1000 AS x, range % 999 AS y, range % 998 AS z FROM range(100)")
    schema = {"table": "t", "columns": {c: {"type": "integer", "min": 0, "max": 999} for c in "xyz"}}
    db = dpsql.connect(con, schema=schema, budget=Budget(epsilon=1.0, delta=1e-6), cache=False, progress=False)
    with pytest.raises(ResourceLimitError, match=r"1,000,000,000 cells, .* the widest column, x, has 1,000 values"):
        db.synthesize("fem", workload=3, epsilon=1.0, delta=1e-6, name="s")
    assert db.ledger.entries() == []


#: Each method on workload=2 over the two wide columns (whose pair is 10^10 cells: refused today by
#: mwem, fem and dualquery, and by pgm under a pure epsilon), with a spend it takes and few rounds.
METHODS = [("mwem", {"epsilon": 5.0}, {"rounds": 3, "replays": 3}),
           ("fem", {"epsilon": 5.0, "delta": 1e-6}, {"rounds": 3, "samples": 5}),
           ("dualquery", {"epsilon": 5.0, "delta": 1e-6}, {"rounds": 3, "samples": 5}),
           ("aim", {"epsilon": 5.0, "delta": 1e-6}, {"rounds": 8, "iterations": 50}),
           ("pgm", {"epsilon": 5.0}, {"iterations": 50}),
           ("mst", {"epsilon": 5.0, "delta": 1e-6}, {"iterations": 50})]


@pytest.mark.slow  # about 2 to 4 s each: a one-way marginal of 200,000 cells measured
@pytest.mark.parametrize("method, spend, options", METHODS, ids=[m[0] for m in METHODS])
def test_every_method_bins_the_wide_columns_and_draws_them_back_in_their_domain(wide, method, spend, options):
    """Every method takes the one binning path: its model or game counts the 49 bins, and each
    released value is drawn within its bin from the noisy full-resolution one-way counts (measured
    by the method, or with WIDE_SHARE of the spend): an integer of the declared domain, and a
    value the data holds whenever its bin holds one clearly."""
    con, schema, frame = wide
    budget = Budget(epsilon=5.0, delta=1e-6) if "delta" in spend else Budget(epsilon=5.0)
    db = dpsql.connect(con, schema=schema, budget=budget, cache=False, progress=False)
    syn = db.synthesize(method, workload=2, seed=0, name="s", rows=500, **spend, **options)
    for column in ("gain", "loss"):
        values = syn.df[column].astype(int)
        assert values.between(0, 99_999).all() and len(values) == 500
    assert sum(e.cost.epsilon for e in db.ledger.entries()) == pytest.approx(5.0, rel=1e-6, abs=0) or method in \
        ("fem", "dualquery")  # (their rounds given spend less than asked)
    real = {0, 2174, 7298, 15024}
    if method in ("aim", "pgm", "mst"):  # a model of every one-way marginal: the bins hold the real values
        # (mst's one-way counts take a third of rho, a noisier draw within each bin than pgm's and aim's)
        assert syn.df["gain"].astype(int).isin(real).mean() > (0.9 if method == "mst" else 0.95)


@pytest.mark.slow
def test_pgm_under_a_pure_epsilon_bins_a_wide_column(wide):
    """Refused today (Laplace noise had no binning): the binned column's one-way marginal is
    measured with Laplace noise like every other marginal, and the values within each bin
    come from WIDE_SHARE of epsilon spent on the full-resolution one-way counts (not uniform)."""
    con, schema, frame = wide
    db = dpsql.connect(con, schema=schema, budget=Budget(epsilon=20.0), cache=False, progress=False)
    syn = db.synthesize("pgm", workload=[["gain", "a"], ["loss", "b"]], epsilon=20.0, seed=0, name="s")
    gains = syn.df["gain"].astype(int)
    for value in (0, 2174, 7298, 15024):
        assert (gains == value).mean() == pytest.approx((frame.gain == value).mean(), abs=0.03)
    spent = [e.cost.epsilon for e in db.ledger.entries()]
    assert sum(spent) == pytest.approx(20.0) and min(spent) == pytest.approx(20.0 * WIDE_SHARE)


def test_aim_keeps_a_wide_columns_relation_to_another_through_its_bins():
    """A column spread over 0..99999 has no value counted above the noise: today AIM merged them
    all into one and lost how it relates to `high` (half the rows agreed, as by chance). In its
    bins the relation is measured: nearly every synthetic row keeps it."""
    rng = np.random.default_rng(1)
    spread = rng.integers(0, 100_000, 2000)
    frame = pd.DataFrame({"spread": spread, "high": (spread >= 50_000).astype(int), "a": rng.integers(0, 3, 2000)})
    con, schema = integer_table(frame, {"spread": 99_999, "high": 1, "a": 2})
    db = dpsql.connect(con, schema=schema, budget=Budget(epsilon=10.0, delta=1e-6), cache=False, progress=False)
    syn = db.synthesize("aim", workload=[["spread", "high"]], epsilon=10.0, delta=1e-6, seed=0, name="s",
                        rounds=5, iterations=100)
    df = syn.df.astype(int)
    assert df.spread.between(0, 99_999).all()
    assert ((df.spread >= 50_000) == df.high).mean() > 0.9


def test_mst_measures_a_wide_columns_bins_so_that_its_picks_do_not_all_join_it(monkeypatch):
    """A column spread over 0..99999 in 49 bins, its one-way counts summed into bins from full
    resolution, carries the noise of 2,000 to 3,000 values a bin: its noisy shares made every pair
    with it look far from independence (L1 distances of thousands), and every pick joined it
    (ADULT's fnlwgt took 13 of 14). MST now also measures its one-way marginal in its bins, with
    1/(d + 1) of the one-way third (5 columns: 5/6 at full resolution): the picks keep x - y,
    equal in 70% of rows (an L1 distance of about 1,200), and spread - high."""
    from test_pgm import spy_result

    rng = np.random.default_rng(2)
    n = 3000
    spread = rng.integers(0, 100_000, n)
    x = rng.integers(0, 2, n)
    frame = pd.DataFrame({"spread": spread, "high": (spread >= 50_000).astype(int), "x": x,
                          "y": np.where(rng.random(n) < 0.4, x, rng.integers(0, 2, n)), "z": rng.integers(0, 4, n)})
    con, schema = integer_table(frame, {"spread": 99_999, "high": 1, "x": 1, "y": 1, "z": 3})
    db = dpsql.connect(con, schema=schema, budget=Budget(rho=1.0), cache=False, progress=False)
    seen = spy_result(monkeypatch, db, "mst")
    syn = db.synthesize("mst", workload=2, rho=0.5, seed=0, name="s")
    drawn = seen["reservation"].drawn
    assert [m.split("(")[0] for m, _ in drawn] == ["gaussian", "gaussian", *["exponential"] * 4, "gaussian"]
    assert [r for _, r in drawn[:2]] == pytest.approx([0.5 / 3 * 5 / 6, 0.5 / 3 / 6], rel=1e-9)
    picked = {o.subset for o in seen["result"].observations if len(o.subset) == 2}
    assert (2, 3) in picked and (0, 1) in picked, picked
    df = syn.df.astype(int)
    assert ((df.spread >= 50_000) == df.high).mean() > 0.9 and (df.x == df.y).mean() > 0.6


@pytest.mark.parametrize("method,function", [("aim", "aim"), ("pgm", "pgm_compressed")])
def test_aim_and_pgm_measure_a_wide_columns_bins_as_well(monkeypatch, method, function):
    """As MST does: a wide column's bins summed from its full-resolution one-way counts carry the
    noise of every value in them (here 2,000 to 3,000 a bin), so the first measurement also counts
    it in its bins. Of the one-way share (0.3 x 2/3: spread and a have more than two values), 3/4
    measures the 3 columns at full resolution and 1/4 spread's 49 bins; the model gets both."""
    from test_pgm import spy_result

    rng = np.random.default_rng(3)
    n = 3000
    spread = rng.integers(0, 100_000, n)
    frame = pd.DataFrame({"spread": spread, "high": (spread >= 50_000).astype(int), "a": rng.integers(0, 3, n)})
    con, schema = integer_table(frame, {"spread": 99_999, "high": 1, "a": 2})
    db = dpsql.connect(con, schema=schema, budget=Budget(rho=1.0), cache=False, progress=False)
    seen = spy_result(monkeypatch, db, function)
    syn = db.synthesize(method, workload=[["spread", "high"]], rho=0.5, seed=0, name="s",
                        **({"rounds": 5, "iterations": 100} if method == "aim" else {}))
    drawn = seen["reservation"].drawn
    assert [m.split("(")[0] for m, _ in drawn[:2]] == ["gaussian", "gaussian"]
    assert [r for _, r in drawn[:2]] == pytest.approx([0.5 * 0.2 * 3 / 4, 0.5 * 0.2 / 4], rel=1e-9)
    spreads = [o for o in seen["result"].observations if o.subset == (0,)]
    assert len(spreads) >= 2 and {o.values.size for o in spreads} == {49}  # (aim's rounds may measure it again)
    df = syn.df.astype(int)
    assert df.spread.between(0, 99_999).all() and ((df.spread >= 50_000) == df.high).mean() > 0.9
