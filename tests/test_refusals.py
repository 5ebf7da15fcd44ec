"""Refusals: every bad request is refused before the first draw, records nothing, and raises a dpsql error.

Each test checks the ledger (``db.ledger.entries()`` and ``db.spent()``) is exactly as it was after
a refusal, and that what a synthesis reports as spent is what the ledger charged. The property
test at the end calls ``db.synthesize`` with random values of random types for every parameter of
every method.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_mwem import SCHEMA, make_table

import dpsql
from dpsql import limits
from dpsql.errors import ArgumentError, BudgetExceededError, Error, PrivacyError, ResourceLimitError, WorkloadError
from dpsql.private.budget import Budget, Cost
from dpsql.synth.accounting import dualquery_epsilon, dualquery_rho


def _db(budget, seed=0, rows=300, ledger=None):
    """A connection with seeded noise over a small generated table."""
    con, _ = make_table(rows)
    return dpsql.connect(con, schema=SCHEMA, budget=budget, ledger=ledger, cache=False, progress=False,
                         source_of_noise=np.random.default_rng(seed))


def _state(db):
    return db.ledger.entries(), db.spent()


def _refused(db, error, match, method, **kwargs):
    """``db.synthesize(method, **kwargs)`` raises ``error`` matching ``match`` and records nothing."""
    before = _state(db)
    kwargs.setdefault("workload", 1)
    with pytest.raises(error, match=match):
        db.synthesize(method, **kwargs)
    assert _state(db) == before
    assert not issubclass(error, (ValueError, TypeError, AttributeError, ZeroDivisionError, MemoryError))


def _charged(db, before: list) -> Cost:
    """What the ledger recorded after the entries ``before``, summed exactly as the ledger sums."""
    new = [e.cost for e in db.ledger.entries()[len(before):]]
    return Cost(*(math.fsum(getattr(c, f) for c in new) for f in ("epsilon", "delta", "rho")))


# -- options: types and ranges, before anything is read -----------------------------------------

@pytest.mark.parametrize("method, kwargs, error, match", [
    ("fem", {"rounds": 0}, ArgumentError, r"rounds must be an integer >= 1, got rounds=0"),   # was ZeroDivisionError
    ("fem", {"rounds": 2.0}, ArgumentError, r"rounds must be an integer >= 1, got rounds=2.0"),
    ("fem", {"eps0": math.nan}, ArgumentError, r"eps0 must be a finite number > 0, got eps0=nan"),
    ("fem", {"eps0": 1e-300, "samples": 2}, PrivacyError, r"eps0=1e-300 has no finite, nonzero zCDP cost"),
    ("fem", {"samples": 0}, ArgumentError, r"samples must be an integer >= 1, got samples=0"),
    ("fem", {"noise": -1.0}, ArgumentError, r"noise must be a finite number > 0, got noise=-1.0"),
    ("fem", {"oracle": "magic"}, ArgumentError, r"oracle must be one of .*got oracle='magic'"),
    ("fem", {"time_limit": math.inf}, ArgumentError, r"time_limit must be a finite number > 0"),
    ("fem", {"processes": 0}, ArgumentError, r"processes must be an integer >= 1, got processes=0"),
    ("fem", {"bounded_range": "yes"}, ArgumentError, r"bounded_range must be True or False"),
    ("fem", {"rounds": 10**9, "samples": 50}, ResourceLimitError, r"rounds=1000000000 .*synthetic cells"),
    ("mwem", {"rounds": -3}, ArgumentError, r"rounds must be an integer >= 1, got rounds=-3"),
    ("mwem", {"replays": 0}, ArgumentError, r"replays must be an integer >= 1, got replays=0"),
    ("mwem", {"init": "random"}, ArgumentError, r"init must be one of \('uniform', 'noisy'\)"),
    ("mwem", {"average": 1}, ArgumentError, r"average must be True or False, got average=1"),
    ("mwem", {"rows": -1}, ArgumentError, r"rows must be an integer >= 0, got rows=-1"),       # spent before
    ("mwem", {"rows": 10**12}, ResourceLimitError, r"rows=1000000000000 means"),               # spent, MemoryError
    ("mwem", {"rows": 2.5}, ArgumentError, r"rows must be an integer >= 0, got rows=2.5"),
    ("mwem", {"seed": -1}, ArgumentError, r"seed must be an integer >= 0, got seed=-1"),
    ("mwem", {"seed": "7"}, ArgumentError, r"seed must be an integer >= 0, got seed='7'"),
    ("mwem", {"rounds": 10**15}, ArgumentError, r"rounds must be at most 10,000, got rounds=1000000000000000"),
    ("mwem", {"replays": 10**6}, ArgumentError, r"replays must be at most 10,000, got replays=1000000"),
    ("dualquery", {"eta": 0.0}, ArgumentError, r"eta must be a finite number > 0, got eta=0.0"),
    ("dualquery", {"eta": 1e7}, ArgumentError, r"eta must be at most 1e\+06, got eta=10000000.0"),
    ("dualquery", {"count_share": 1.0}, ArgumentError, r"count_share must be in \(0, 1\), got count_share=1.0"),
    ("dualquery", {"count_share": 1e-300}, PrivacyError, r"noisy row count gets count_share=1e-300"),
    ("dualquery", {"samples": True}, ArgumentError, r"samples must be an integer >= 1, got samples=True"),
    ("dualquery", {"rounds": 10**8}, ResourceLimitError, r"rounds=100000000 means"),
    ("dualquery", {"oracle": None, "time_limit": "10"}, ArgumentError, r"time_limit must be a number"),
])
def test_options_are_validated_before_anything_is_spent(method, kwargs, error, match):
    spend = {"epsilon": 1.0} if method == "mwem" else {"epsilon": 1.0, "delta": 1e-6}
    _refused(_db(Budget(epsilon=10.0, delta=1e-5)), error, match, method, **spend, **kwargs)


def test_mwem_refuses_steps_below_the_smallest_epsilon():
    """10,000 rounds of 0.01 are 20,001 steps of 5e-7 each, below the floor of a measurement (rounds
    of 10**7 ran for days, one ledger entry a step, at 5e-9 each)."""
    _refused(_db(Budget(epsilon=10.0)), PrivacyError, r"MWEM with rounds=10000 splits .* too small to measure",
             "mwem", epsilon=0.01, rounds=10_000)


@pytest.mark.parametrize("option", ["progress", "budget", "schema", "attributes", "private", "released"])
def test_an_option_named_like_an_internal_argument_is_unknown(option):
    """These collided with synthesize's own parameters: a TypeError (got multiple values)."""
    _refused(_db(Budget(epsilon=10.0)), WorkloadError, rf"mwem takes no option {option}; its options are rounds",
             "mwem", epsilon=1.0, **{option: 1})


@pytest.mark.parametrize("workload, match", [
    ([], "at least one marginal"),
    (2.5, "a workload is k .*got float"),
    (True, "a workload is k .*got bool"),
    ([("a",), 5], "nonempty tuple of column names, got 5"),
    ([()], "nonempty tuple of column names, got \\(\\)"),
    ([("a", None)], "nonempty tuple of column names"),
    ({"a": 1}, "a workload is k .*got dict"),
    ("SELECT COUNT(*) FROM t", "no marginal to learn"),
    (0, "workload=0 asks for every 0-way marginal, but the table has 4 attributes: give k from 1 to 4"),
])
@pytest.mark.parametrize("method", ["mwem", "dualquery", "fem", "pgm"])
def test_bad_workloads_are_refused_before_anything_is_spent(method, workload, match):
    _refused(_db(Budget(epsilon=10.0)), WorkloadError, match, method, epsilon=1.0, workload=workload)


def test_a_single_column_name_is_a_one_way_marginal():
    """A bare name in a list of marginals is that column (it used to be split into characters)."""
    from dpsql.sql.compile import schema_attributes
    from dpsql.synth.synthesize import workload_marginals

    schema = dpsql.load_schema(SCHEMA)
    attrs = schema_attributes(schema)
    assert workload_marginals([("a", "b"), "c"], schema, attrs) == [(0, 1), (2,)]
    assert workload_marginals([("a", "b"), "d"], schema, attrs) == [(0, 1), (3,)]


@pytest.mark.parametrize("method", ["mwem", "dualquery", "fem", "pgm"])
def test_spend_refusals_name_the_parameter(method):
    _refused(_db(Budget(rho=1.0)), PrivacyError, r"^rho must be finite, got nan$", method, rho=math.nan)
    _refused(_db(Budget(rho=1.0)), PrivacyError, r"^rho must be > 0, got -0.01$", method, rho=-0.01)
    _refused(_db(Budget(rho=1.0)), PrivacyError, r"^delta=1e-06 cannot be spent from the zCDP budget", method,
             rho=0.1, delta=1e-6)  # was silently ignored
    _refused(_db(Budget(epsilon=1.0)), PrivacyError,
             r"^epsilon=1e-320 is below the smallest epsilon dpsql answers with, 1e-06$", method, epsilon=1e-320)
    _refused(_db(Budget(epsilon=1.0)), PrivacyError, r"delta=1e-06 can never be charged", method,
             epsilon=0.5, delta=1e-6)
    _refused(_db(Budget(epsilon=1.0)), BudgetExceededError, "budget", method, epsilon=2.0)


def test_mwem_refuses_a_delta_it_would_not_charge():
    """MWEM is pure epsilon-DP: it used to report the delta asked for and charge 0."""
    db = _db(Budget(epsilon=10.0, delta=1e-5))
    _refused(db, PrivacyError, r"MWEM is pure epsilon-DP and would never use delta=1e-06", "mwem",
             epsilon=1.0, delta=1e-6)
    syn = db.synthesize("mwem", workload=1, epsilon=1.0, delta=0.0, rounds=2, name="pure")
    assert syn.delta == 0.0 and db.spent().delta == 0.0


def test_a_name_that_exists_is_refused_before_anything_is_spent():
    db = _db(Budget(epsilon=10.0))
    db.synthesize("mwem", workload=1, epsilon=1.0, rounds=2, name="taken")
    for method in ("mwem", "dualquery", "fem", "pgm"):
        _refused(db, WorkloadError, "already exists", method, epsilon=1.0, name="taken")
        _refused(db, WorkloadError, "nonempty string", method, epsilon=1.0, name=5)


def test_mwem_average_on_a_huge_domain_is_refused_up_front(monkeypatch):
    import dpsql.synth.mwem as mwem_module

    monkeypatch.setattr(mwem_module, "MAX_GROUP_CELLS", 40)  # the test domain has 48 cells
    _refused(_db(Budget(epsilon=10.0)), WorkloadError, "averaging MWEM iterates needs the full domain of 48",
             "mwem", epsilon=1.0, average=True, rounds=2)


# -- rows: a documented limit, and a capped default ------------------------------------------

def test_default_rows_above_the_limit_are_capped_with_a_warning(monkeypatch):
    monkeypatch.setattr(limits, "MAX_SYNTHETIC_CELLS", 400)  # 100 rows of 4 columns
    db = _db(Budget(epsilon=100.0))
    with pytest.warns(UserWarning, match=r"noisy row count is 3\d\d rows.*sampling 100 rows"):
        syn = db.synthesize("mwem", workload=1, epsilon=10.0, rounds=2, name="capped")
    assert len(syn.df) == 100
    _refused(db, ResourceLimitError, r"rows=101 means 404 synthetic cells", "mwem", epsilon=1.0, rows=101)
    assert len(db.synthesize("mwem", workload=1, epsilon=1.0, rounds=2, rows=100, name="exact").df) == 100


def test_zero_rows_is_an_empty_table():
    db = _db(Budget(epsilon=10.0))
    for method, extra in (("mwem", {"rounds": 2}), ("fem", {"rounds": 2, "samples": 3})):
        syn = db.synthesize(method, workload=1, epsilon=1.0, rows=0, name=f"empty_{method}", **extra)
        assert len(syn.df) == 0 and list(syn.df.columns) == ["a", "b", "c", "d"]


def test_synthetic_cells_limit_is_documented():
    assert limits.MAX_SYNTHETIC_CELLS == 100_000_000 and limits.synthetic_rows_cap(4) == 25_000_000
    with pytest.raises(ResourceLimitError, match="more than the limit of 100,000,000"):
        limits.check_synthetic_cells(25_000_001, 4, "rows=25000001")
    limits.check_synthetic_cells(25_000_000, 4, "rows=25000000")


# -- DualQuery: the spend sets one of eta, rounds and samples -------------------------------------

def test_dualquery_refuses_eta_with_rounds_up_front():
    db = _db(Budget(epsilon=10.0, delta=1e-5))
    match = r"give rounds \(the spend sets eta\) or eta \(the spend sets rounds\), not both"
    _refused(db, PrivacyError, match, "dualquery", epsilon=1.0, eta=0.4, rounds=3)
    _refused(db, PrivacyError, match, "dualquery", epsilon=1.0, eta=0.4, rounds=3, samples=5)


@pytest.mark.parametrize("budget, spend", [(Budget(epsilon=10.0, delta=1e-5), {"epsilon": 1.0, "delta": 1e-6}),
                                           (Budget(epsilon=10.0), {"epsilon": 1.0}),
                                           (Budget(rho=1.0), {"rho": 0.1})])
def test_dualquery_rounds_and_samples_that_used_to_overflow_now_set_eta(budget, spend):
    """rounds=50, samples=500 cost more than epsilon=1 at eta=0.4 on 300 rows: the run used to be
    refused AFTER its noisy row count was spent. Now eta is derived and the run spends the rest."""
    db = _db(budget)
    syn = db.synthesize("dualquery", workload=1, rounds=50, samples=500, oracle="heuristic", name="dq", **spend)
    count, run = db.ledger.entries()
    assert "T=50, s=500" in run.description
    eta = float(run.description.split("eta=")[1].split(",")[0])
    n = float(run.description.split("n=")[1])
    if budget.rho is not None:
        assert run.cost.rho == pytest.approx(0.95 * 0.1, rel=1e-9) == dualquery_rho(eta, 50, 500, n)
    else:
        delta = spend.get("delta", 0.0)
        assert run.cost.epsilon == pytest.approx(0.95, rel=1e-9)
        assert run.cost.epsilon == dualquery_epsilon(eta, 50, 500, n, delta) and run.cost.delta == delta
    charged = count.cost + run.cost
    assert Cost(syn.epsilon, syn.delta, syn.rho) == charged and charged.within(budget.request(**spend))
    assert sum(syn.oracle.values()) == 50  # one record a round


def test_dualquery_with_a_huge_eta_runs_one_free_round():
    """eta=1e6 used to overflow Theorem 4.3 (math.expm1) after the noisy count was spent."""
    db = _db(Budget(epsilon=10.0, delta=1e-5))
    syn = db.synthesize("dualquery", workload=1, epsilon=1.0, delta=1e-6, eta=1e6, oracle="heuristic", name="h")
    count, run = db.ledger.entries()
    assert "T=1," in run.description and run.cost == Cost()
    assert Cost(syn.epsilon, syn.delta, syn.rho) == count.cost == Cost(epsilon=0.05)
    assert sum(syn.oracle.values()) == 1


@pytest.mark.parametrize("options", [{}, {"samples": 3}, {"eta": 2.0}, {"rounds": 4}, {"rounds": 1},
                                     {"rounds": 3, "samples": 4}, {"eta": 0.1, "samples": 2}])
def test_dualquery_never_refuses_after_the_count(options):
    db = _db(Budget(epsilon=10.0, delta=1e-5))
    syn = db.synthesize("dualquery", workload=1, epsilon=0.3, delta=1e-6, oracle="heuristic", name="d", **options)
    entries = db.ledger.entries()
    assert len(entries) == 2 and Cost(syn.epsilon, syn.delta, syn.rho) == entries[0].cost + entries[1].cost
    assert Cost(syn.epsilon, syn.delta, syn.rho).within(Cost(epsilon=0.3, delta=1e-6))
    if "rounds" in options:
        assert sum(syn.oracle.values()) == options["rounds"]  # one record a round


# -- what is reported is what is charged ----------------------------------------------------------

@pytest.mark.parametrize("method, budget, spend, options", [
    ("mwem", Budget(epsilon=10.0), {"epsilon": 0.7}, {"rounds": 3}),
    ("mwem", Budget(rho=1.0), {"rho": 0.3}, {"rounds": 3, "init": "noisy"}),
    ("mwem", Budget(rho=1.0), {"epsilon": 0.5}, {"rounds": 2}),         # an eps-DP request under zCDP
    ("fem", Budget(epsilon=10.0, delta=1e-5), {"epsilon": 1.0, "delta": 1e-6}, {"rounds": 4, "samples": 3}),
    ("fem", Budget(epsilon=10.0), {"epsilon": 1.0}, {"rounds": 4, "samples": 3}),
    ("fem", Budget(rho=1.0), {"epsilon": 0.5}, {"rounds": 4, "samples": 3}),
    ("dualquery", Budget(rho=1.0), {"epsilon": 0.5}, {"rounds": 3, "samples": 3, "oracle": "heuristic"}),
])
def test_reported_spend_is_what_the_ledger_charged(method, budget, spend, options):
    db = _db(budget)
    syn = db.synthesize(method, workload=1, name="s", **spend, **options)
    charged = _charged(db, [])
    assert Cost(syn.epsilon, syn.delta, syn.rho) == charged == db.spent()
    assert charged.within(budget.request(**spend))


# -- the batch API ---------------------------------------------------------------------------------

def test_batch_with_a_non_text_item_is_an_argument_error():
    db = _db(Budget(epsilon=1.0))
    before = _state(db)
    with pytest.raises(ArgumentError, match="item 2 of the batch is of type int"):
        db.batch(["SELECT a, COUNT(*) FROM t GROUP BY a", 5], epsilon=0.5)
    assert _state(db) == before


# -- the query API: the spend request ----------------------------------------------------------------

QUERY = "SELECT a, COUNT(*) AS n FROM t GROUP BY a"


@pytest.mark.parametrize("budget, spend, match", [
    (Budget(epsilon=1.0), {"epsilon": 1e-320}, r"epsilon=1e-320 is below the smallest epsilon"),  # was misleading
    (Budget(epsilon=1.0), {"epsilon": 5e-14}, r"epsilon=5e-14 is below the smallest epsilon"),    # used to hang
    (Budget(epsilon=1.0), {"epsilon": -0.5}, r"epsilon must be > 0, got -0.5"),
    (Budget(epsilon=1.0), {"epsilon": "0.5"}, r"epsilon must be a number, got '0.5'"),
    (Budget(epsilon=1.0), {"epsilon": 0.5, "delta": 1e-6}, r"delta=1e-06 can never be charged"),  # was ignored
    (Budget(epsilon=1.0), {"rho": 0.1}, r"rho=0.1 cannot be spent from the budget"),
    (Budget(epsilon=1.0, delta=1e-5), {"epsilon": 0.5, "delta": -1e-9}, r"delta must be in \[0, 1\)"),
    (Budget(rho=1.0), {"rho": -0.01}, r"rho must be > 0, got -0.01"),                            # was ValueError
    (Budget(rho=1.0), {"rho": math.nan}, r"^rho must be finite, got nan"),                        # named epsilon
    (Budget(rho=1.0), {"rho": 0.1, "delta": 1e-6}, r"delta=1e-06 cannot be spent from the zCDP budget"),
    (Budget(rho=1.0), {"epsilon": 0.5, "rho": 0.1}, r"not both"),
])
def test_bad_spend_requests_are_refused_before_anything_is_spent(budget, spend, match):
    db = _db(budget)
    before = _state(db)
    with pytest.raises(PrivacyError, match=match):
        db.query(QUERY, **spend)
    assert _state(db) == before


def test_gaussian_noise_that_cannot_be_calibrated_is_refused_not_dropped():
    """δ below the analytic Gaussian's floor: a delta was asked for, so answering with Laplace noise
    would drop it without a word; refused, with the noise left to dpsql or asked for, before anything
    is spent. Without the delta, Laplace answers and only ε is charged."""
    db = _db(Budget(epsilon=2.0, delta=1e-5))
    before = _state(db)
    with pytest.raises(PrivacyError, match="delta=1e-200 was given, but no Gaussian noise"):
        db.query(QUERY, epsilon=0.5, delta=1e-200)
    with pytest.raises(PrivacyError, match="delta=1e-200 is below the floor"):
        db.query(QUERY, epsilon=0.5, delta=1e-200, noise="gaussian")
    assert _state(db) == before
    res = db.query(QUERY, epsilon=0.5, noise="laplace")
    assert db.ledger.entries()[-1].cost == Cost(epsilon=0.5) == Cost(res.release.epsilon, res.release.delta)


def test_a_delta_the_budget_cannot_pay_is_refused_not_dropped():
    """delta=0.5 against a budget delta of 1e-6: Gaussian noise does not fit, and Laplace noise would
    silently drop the delta asked for (red team, issue 38 item 11): refused, spending nothing; a
    delta with Laplace noise asked for explicitly is refused alike."""
    db = _db(Budget(epsilon=2.0, delta=1e-6))
    before = _state(db)
    for kwargs in ({}, {"noise": "laplace"}):
        with pytest.raises(PrivacyError, match="delta=0.5 was given"):
            db.query(QUERY, epsilon=0.5, delta=0.5, **kwargs)
    assert _state(db) == before


def test_the_kernel_refuses_noise_below_the_lattice_floor_before_charging():
    """A privacy unit of up to 10^8 rows changes up to 10^8 coordinates, which puts the lattice Laplace
    floor (changed * 2^-44) above epsilon = 1e-6: refused by the kernel before the spend is recorded."""
    con, _ = make_table(300)
    con.execute("CREATE TABLE u AS SELECT *, row_number() OVER () AS person FROM t")
    schema = dict(SCHEMA, table="u", privacy_unit={"column": "person", "max_rows": 10**8})
    db = dpsql.connect(con, schema=schema, budget=Budget(epsilon=1.0), cache=False, progress=False)
    before = _state(db)
    with pytest.raises(PrivacyError, match=r"below the floor .* = 2\*changed/2\^45 for changed=100000000"):
        db.query(QUERY.replace("FROM t", "FROM u"), epsilon=1e-6, noise="laplace")
    assert _state(db) == before


# -- the property: random values of random types, for every parameter --------------------------------

SMALL_INTS = st.sampled_from([1, 2, 3])
BAD_INTS = st.sampled_from([0, -1, -10**30, 10**30, 2**63])
BAD_TYPES = st.sampled_from([True, False, 2.0, 2.5, math.nan, math.inf, -math.inf, "3", "", b"3", [2], {}, 1j])
REALS = st.sampled_from([0.0, -1.0, 1e-320, 5e-14, 1e-7, 0.05, 0.3, 0.5, 1.0, 2.0, 1e6, 1e300, 10**400])
SPENDS = st.sampled_from([None, 0.5, 1.0, 1e-320, 1e-7, 1e-6, 0.0, -1.0, math.nan, math.inf, "0.5", True,
                          10**400, 1e300])
DELTAS = st.sampled_from([None, 0.0, 1e-6, 1e-4, 0.5, 1.0, -1e-9, math.nan, "1e-6", True])


def _count(small=SMALL_INTS):
    """An option that counts something: small valid values (large valid ones would only be slow), and
    invalid ones of every kind (a huge count is refused by a limit, never run)."""
    return st.one_of(st.none(), small, BAD_INTS, BAD_TYPES)


def _real():
    return st.one_of(st.none(), REALS, BAD_TYPES)


OPTIONS = {
    "mwem": {"rounds": _count(), "replays": st.one_of(st.none(), SMALL_INTS, BAD_INTS.filter(lambda v: v < 1),
                                                      BAD_TYPES),
             "init": st.sampled_from([None, "uniform", "noisy", "NOISY", "", 1, True]),
             "average": st.sampled_from([None, False, True, 1, "no", 0.0])},
    # rounds or eps0 (never the published default run of thousands of rounds), small samples
    "fem": {"rounds": st.one_of(SMALL_INTS, BAD_INTS, BAD_TYPES),
            "eps0": st.one_of(st.none(), REALS, BAD_TYPES), "samples": _count(st.sampled_from([1, 2, 5])),
            "noise": _real(), "oracle": st.sampled_from(["heuristic", "HEURISTIC", "magic", 5, True]),
            "time_limit": _real(), "processes": _count(),
            "bounded_range": st.sampled_from([None, True, False, 1, "x"])},
    # eta never tiny with rounds derived (thousands of rounds would be valid but slow)
    "dualquery": {"eta": st.sampled_from([None, 0.4, 1.0, 1e6, 2e6, 0.0, -1.0, math.nan, math.inf, "0.4", True]),
                  "rounds": _count(), "samples": _count(),
                  # a tiny count_share is valid, but its noisy count makes thousands of rounds: slow
                  "count_share": st.sampled_from([None, 0.05, 0.5, 0.0, 1.0, 1.5, -0.1, 1e-300, math.nan, math.inf,
                                                  "0.05", True]),
                  "oracle": st.sampled_from(["heuristic", "heuristic", "mip!", 5, True]), "time_limit": _real()},
    "pgm": {"iterations": _count(), "max_model_size": st.one_of(st.none(), _real(), st.sampled_from([1e-5, 1e-4])),
            "sweeps": st.sampled_from([None, 0, 3, -1, 1.5, "3", True]),
            "measure": st.sampled_from([None, "workload", "pairs", "PAIRS", "", 2, True])},
}
WORKLOADS = st.sampled_from([1, [("a", "b"), ("c", "d")], [("a", "b"), "c"], 2, 0, 5, -1, [], None, [("a", 5)],
                             [("nope",)], "SELECT a, COUNT(*) FROM t GROUP BY a", [5], 1.5, True, {"a": 1}])
ROWS = st.sampled_from([None, None, 0, 1, 50, -1, 10**12, 2.5, "5", True, math.nan])
SEEDS = st.sampled_from([None, 0, 7, -1, 2.5, "1", True, 10**30])


#: A valid request of each method under each kind of budget; the property changes random parts of it.
BASE = {"mwem": {"rounds": 2, "replays": 3}, "fem": {"rounds": 2, "samples": 3, "oracle": "heuristic"},
        "dualquery": {"rounds": 3, "samples": 3, "oracle": "heuristic"}, "pgm": {"iterations": 20}}
SPEND = {"approx": {"epsilon": 0.5, "delta": 1e-5}, "pure": {"epsilon": 0.5}, "zcdp": {"rho": 0.1}}


@st.composite
def requests(draw, method, kind):
    """A valid request with each parameter replaced, one time in four, by a random value of a random type."""
    request = dict(workload=[("a", "b"), ("c", "d")], rows=None, seed=None, epsilon=None, delta=None, rho=None)
    request.update(SPEND[kind], **BASE[method])
    if method == "mwem":
        request["delta"] = None  # pure epsilon-DP
    pools = dict(workload=WORKLOADS, epsilon=SPENDS, delta=DELTAS, rho=SPENDS, rows=ROWS, seed=SEEDS,
                 **OPTIONS[method])
    for key, pool in pools.items():
        if draw(st.integers(0, 3)) == 0:
            request[key] = draw(pool)
    return request


PROPERTY = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
BUDGETS = {"approx": Budget(epsilon=1e3, delta=1e-3), "pure": Budget(epsilon=1e3), "zcdp": Budget(rho=1e3)}


@pytest.mark.parametrize("kind", BUDGETS)
@pytest.mark.parametrize("method", ["mwem", "dualquery", "fem", "pgm"])
def test_synthesize_raises_only_dpsql_errors_and_records_nothing_when_it_does(method, kind, monkeypatch):
    monkeypatch.setattr(limits, "MAX_SYNTHETIC_CELLS", 8_000)   # keep every accepted run small
    budget = BUDGETS[kind]
    db = _db(budget, rows=200)
    names = (f"s{i}" for i in itertools.count())
    outcomes = {"made": 0, "refused": 0}

    @PROPERTY
    @given(request=requests(method, kind))
    def check(request):
        before, spent = db.ledger.entries(), db.spent()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # a capped default is not a refusal
                syn = db.synthesize(method, name=next(names), **request)
        except Error:
            assert db.ledger.entries() == before and db.spent() == spent
            outcomes["refused"] += 1
            return
        outcomes["made"] += 1
        reported = Cost(syn.epsilon, syn.delta, syn.rho)
        assert reported == _charged(db, before)
        asked = budget.request(request["epsilon"], request["delta"], request["rho"])
        assert reported.within(asked)
        assert len(syn.df) == len(db.released.sql(f'SELECT * FROM "{syn.name}"').fetchall())

    check()
    assert outcomes["made"] >= 5 and outcomes["refused"] >= 20, outcomes
