"""The statistical privacy audit (dpsql.owner.audit), at the small sizes: every released
mechanism stays within its claimed ε, and a deliberately broken one is caught."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import binomtest

from dpsql.owner.audit import MECHANISMS, Sizes, audit_outputs, clopper_pearson, epsilon_lower_bound, run_audit

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("hits,trials", [(0, 10), (3, 10), (10, 10), (57, 400), (1, 1000)])
def test_clopper_pearson_matches_the_exact_binomial_interval(hits, trials):
    # a two-sided exact interval at 90% is the pair of one-sided 95% bounds
    ci = binomtest(hits, trials).proportion_ci(confidence_level=0.90, method="exact")
    lo, hi = clopper_pearson(hits, trials, 0.05)
    assert lo == pytest.approx(ci.low, abs=1e-12) and hi == pytest.approx(ci.high, abs=1e-12)


def test_epsilon_lower_bound_is_the_log_ratio_of_the_bounds():
    lo, _ = clopper_pearson(600, 1000, 0.01)
    _, hi = clopper_pearson(100, 1000, 0.01)
    assert epsilon_lower_bound(600, 100, 1000, 0.0, 0.01) == pytest.approx(math.log(lo / hi))
    assert epsilon_lower_bound(600, 100, 1000, 0.05, 0.01) == pytest.approx(math.log((lo - 0.05) / hi))
    assert epsilon_lower_bound(100, 600, 1000, 0.0, 0.01) == 0.0   # no loss in this direction


def test_audit_of_exact_laplace_samples():
    """Exact Laplace(1) noise on counts 10 and 11 is 1-DP: fine at ε = 1, a violation if it claims 0.5."""
    rng = np.random.default_rng(3)
    out, out1 = 10 + rng.laplace(0, 1, (20_000, 1)), 11 + rng.laplace(0, 1, (20_000, 1))
    events = [("y > 11", lambda o: o[:, 0] > 11)]
    honest = audit_outputs("laplace", out, out1, events, 1.0)
    assert honest.verdict == "ok" and 0.9 < honest.audited_epsilon_lower <= 1.0
    assert audit_outputs("laplace", out, out1, events, 0.5).verdict == "violation"


#: the audit must have power: these mechanisms' audited loss is visibly positive at the small sizes
POWER = {"query_laplace": 0.2, "dualquery_fem_query_sampling": 0.3, "pgm_weighted_marginals": 0.2}
HONEST = [name for name in MECHANISMS if "broken" not in name]


def test_the_audit_covers_every_released_mechanism():
    assert set(HONEST) == {"query_laplace", "query_gaussian", "batch_laplace", "mwem_exponential_selection",
                           "dualquery_fem_query_sampling", "pgm_weighted_marginals", "aim_weighted_selection"}


# one test per mechanism, so that pytest-xdist spreads the audit's minute over the workers
@pytest.mark.parametrize("name", HONEST)
def test_every_released_mechanism_passes(name):
    [row] = run_audit(Sizes(), seed=0, only=[name])
    assert row.mechanism == name
    assert row.verdict == "ok" and row.audited_epsilon_lower <= row.claimed_epsilon, row
    assert row.audited_epsilon_lower > POWER.get(name, -math.inf), row


def test_the_broken_mechanism_is_caught():
    [broken] = run_audit(Sizes(), seed=0, only=["broken_laplace_half_noise"])
    assert broken.verdict == "violation"
    assert broken.audited_epsilon_lower > broken.claimed_epsilon == 1.0


def test_benchmark_script_writes_json_rows(tmp_path):
    out = tmp_path / "audit.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "audit.py"), "--quick", "--json", str(out),
                           "--only", "dualquery_fem_query_sampling"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "dualquery_fem_query_sampling" in proc.stdout and "audited ε" in proc.stdout
    [row] = json.loads(out.read_text())
    assert {"mechanism", "claimed_epsilon", "audited_epsilon_lower", "trials", "verdict"} <= set(row)
    assert row["verdict"] == "ok" and row["trials"] == Sizes().samples
