"""Issue 42's find 3: a wide integer column (ADULT's capital_gain declared 0..99999) is binned for
the model only, and every resource error names the column and its size."""

import duckdb
import numpy as np
import pandas as pd
import pytest

import dpsql
from dpsql import Budget
from dpsql.errors import ResourceLimitError


@pytest.fixture(scope="module")
def wide():
    rng = np.random.default_rng(0)
    n = 3000
    frame = pd.DataFrame({"gain": rng.choice([0, 0, 0, 0, 2174, 7298, 15024], n),
                          "loss": rng.choice([0, 0, 0, 1902], n),
                          "a": rng.integers(0, 3, n), "b": rng.integers(0, 2, n), "c": rng.integers(0, 4, n)})
    con = duckdb.connect()
    con.register("frame", frame)
    con.execute("CREATE TABLE t AS SELECT * FROM frame")
    schema = {"table": "t", "columns": {"gain": {"type": "integer", "min": 0, "max": 99_999},
                                        "loss": {"type": "integer", "min": 0, "max": 99_999},
                                        "a": {"type": "integer", "min": 0, "max": 2},
                                        "b": {"type": "integer", "min": 0, "max": 1},
                                        "c": {"type": "integer", "min": 0, "max": 3}}}
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


def test_resource_errors_name_the_wide_column_and_its_size(wide):
    con, schema, _ = wide
    db = dpsql.connect(con, schema=schema, budget=Budget(epsilon=1.0, delta=1e-6), cache=False, progress=False)
    with pytest.raises(ResourceLimitError, match=r"the widest column, gain, has 100,000 values"):
        db.synthesize("fem", workload=2, epsilon=1.0, delta=1e-6, name="s")  # (gain, loss): 10^10 cells
    pure = dpsql.connect(con, schema=schema, budget=Budget(epsilon=1.0), cache=False, progress=False)
    with pytest.raises(ResourceLimitError, match=r"column gain has 100,000 values"):
        pure.synthesize("pgm", workload=2, epsilon=1.0, name="s")
    assert db.ledger.entries() == [] and pure.ledger.entries() == []
