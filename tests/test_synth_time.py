"""Synthesis options bounded by a time budget (``max_seconds``), refused before anything is spent.

Options whose work never ends (``pgm sweeps=10**9``, ``fem rounds=100000``, MWEM's
``rounds = replays = 10000``) were accepted, and the whole spend recorded before the run
started; each is now estimated from public values (:mod:`dpsql.synth.work`) and refused up front.
"""

from __future__ import annotations

import re
import time
import warnings

import pytest
from sql_oracle import SCHEMA, make_table

import dpsql
from dpsql.errors import ArgumentError, ResourceLimitError
from dpsql.synth import work


def _db(epsilon=1e6, delta=1e-3):
    con = make_table(300)
    return dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=epsilon, delta=delta), cache=False,
                         progress=False)


def _refused_before_the_spend(db, method, match, **kwargs):
    started = time.perf_counter()
    with pytest.raises(ResourceLimitError, match=match):
        db.synthesize(method, workload=1, name="s", **kwargs)
    assert db.ledger.entries() == [] and db.spent().epsilon == 0.0
    assert time.perf_counter() - started < 10.0  # refused up front, not after running


@pytest.mark.parametrize("method, kwargs, match", [
    ("pgm", {"epsilon": 1.0, "delta": 1e-6, "sweeps": 10**9}, r"PGM with sweeps=1000000000 of \d+ marginals would run "
                                                               r"for about [\d,]+ s.*, more than max_seconds=600"),
    ("fem", {"epsilon": 1.0, "delta": 1e-6, "rounds": 100_000}, r"FEM with rounds=100000 with samples=50 would run "
                                                                r"for about [\d,]+ s.*, more than max_seconds=600"),
    ("mwem", {"epsilon": 100.0, "rounds": 10_000, "replays": 10_000}, r"MWEM with rounds=10000 and replays=10000 "
                                                                      r"\(500,050,000,000 updates\) would run"),
    ("aim", {"epsilon": 1.0, "delta": 1e-6, "rounds": 10**6}, r"AIM with rounds=1000000 would run"),
    ("pgm", {"epsilon": 1.0, "delta": 1e-6, "sweeps": 0, "max_seconds": 1e-3},
     r"PGM's model of \d+ marginals, even at its smallest \(\d+ cells\), takes about .* s a fit step: 200 steps"),
    ("dualquery", {"epsilon": 1.0, "rounds": 1_000_000, "oracle": "mip"}, r"DualQuery with rounds=1000000 .*would run"),
    ("pgm", {"epsilon": 1.0, "delta": 1e-6, "rows": 10**6, "sweeps": 1000}, r"sweeps=1000 of \d+ marginals over "
                                                                            r"rows=1000000 would run"),
], ids=["pgm-sweeps", "fem-rounds", "mwem-rounds-replays", "aim-rounds", "pgm-fit", "dualquery-rounds",
        "pgm-sweeps-rows"])
def test_options_whose_work_exceeds_max_seconds_are_refused_before_the_spend(method, kwargs, match):
    _refused_before_the_spend(_db(), method, match, **kwargs)


def test_max_seconds_sets_the_limit_and_is_validated():
    db = _db()
    _refused_before_the_spend(db, "mwem", r"MWEM with rounds=10 would run .* more than max_seconds=0.5",
                              epsilon=1.0, rounds=10, replays=100, max_seconds=0.5)
    for bad in (0, -1.0, float("inf"), "600", work.MAX_SECONDS * 2):
        with pytest.raises(ArgumentError, match="max_seconds must"):
            db.synthesize("pgm", workload=1, epsilon=1.0, delta=1e-6, name="s", max_seconds=bad)
    assert db.ledger.entries() == []


@pytest.mark.parametrize("method, kwargs", [
    ("mwem", {"epsilon": 1.0}), ("pgm", {"epsilon": 1.0, "delta": 1e-6}), ("aim", {"epsilon": 1.0, "delta": 1e-6}),
])
def test_the_defaults_fit_the_default_limit(method, kwargs):
    """The estimates are not so conservative that the defaults are refused (2-way marginals of 8 columns)."""
    db = _db()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        db.synthesize(method, workload=2, name="s", seed=0, rows=100, **kwargs)
    assert db.spent().epsilon > 0


def test_fems_rounds_are_priced_growing_with_the_cells_selected_before():
    """FEM's local search climbs the leader's loss over every cell selected before, so its rounds
    grow longer (the default spend on every triple of 7 columns planned 2,911 rounds as 291 s and
    ran about 1,300). 600 rounds priced alike were 60 s; with the growth they pass 90 s: refused,
    nothing spent."""
    db = _db()
    with pytest.raises(ResourceLimitError, match=r"FEM with rounds=600 with samples=50 would run for about "
                                                 r"[\d,]+ s.*, more than max_seconds=90") as e:
        db.synthesize("fem", workload=3, epsilon=1.0, delta=1e-6, rounds=600, max_seconds=90, name="s")
    assert int(re.search(r"about ([\d,]+) s", str(e.value)).group(1).replace(",", "")) > 100
    assert db.ledger.entries() == []


@pytest.mark.parametrize("method, kwargs, match", [
    ("fem", {"delta": 1e-6}, r"FEM at eps0=\S+ fits [\d,]+ rounds of 50 records, more than it has time for within "
                             r"max_seconds=3 \(about [\d,]+ s\); running \d+ rounds, which spends less"),
    ("dualquery", {"oracle": "heuristic", "samples": 10}, None),
], ids=["fem", "dualquery"])
def test_rounds_the_spend_sets_are_capped_to_max_seconds_spending_less(method, kwargs, match):
    """FEM's and DualQuery's rounds follow from the spend (FEM at the defaults ran 545 s here); past
    what ``max_seconds`` allows they run fewer, spend less, and finish in about that time."""
    db = _db()
    started = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        syn = db.synthesize(method, workload=2, epsilon=100.0, name="s", seed=0, rows=100, max_seconds=3.0, **kwargs)
    assert time.perf_counter() - started < 15.0  # 3 s and fixed costs, on a loaded machine (it ran 545 s)
    assert match is None or any(re.search(match, str(w.message)) for w in caught)
    assert syn.epsilon < 100.0 and db.spent().epsilon == syn.epsilon


def test_mwems_default_replays_are_fewer_where_they_may_not_fit():
    """MWEM's default ``replays=100`` is priced as if its measurements merged the largest attributes;
    past ``max_seconds`` the defaults were refused (a 2,000-row table of 6 columns: about 605 s
    against 600, though the run took 5 s). Replays are post-processing of the same measurements,
    so the default now takes the most that fit, with a warning; ``replays=100`` given is refused."""
    db = _db()
    with pytest.raises(ResourceLimitError, match=r"MWEM with rounds=10 would run for about \S+ s \(8\.8 s in all\)"):
        db.synthesize("mwem", workload=2, epsilon=1.0, replays=100, max_seconds=7, name="s")
    assert db.ledger.entries() == []
    with pytest.warns(UserWarning, match=r"MWEM's default of replays=100 may not fit in max_seconds=7 \(about 9 s if "
                                         r"its measurements merge the largest attributes\): running replays=(\d+),"):
        syn = db.synthesize("mwem", workload=2, epsilon=1.0, max_seconds=7, name="s", seed=0)
    assert db.spent().epsilon == pytest.approx(1.0) and len(syn.df) > 0
