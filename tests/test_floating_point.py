"""Floating-point safety of released values (Mironov 2012).

The textbook sampler ``x + b (E₁ − E₂)`` in doubles leaks ``x`` through the
low-order bits of its output; the kernel's lattice releases do not. Oracles:
the exact discrete Laplace and exp(−γ) probabilities, and exact arithmetic on
the lattice.
"""

from __future__ import annotations

import math

import duckdb
import numpy as np
import pytest
from scipy.stats import chi2_contingency, chisquare

import dpsql
from dpsql.private.noise import (
    ROUNDING_SLACK,
    bernoulli_exp,
    discrete_laplace,
    laplace,
    lattice_gaussian,
    lattice_laplace,
)


def test_discrete_laplace_has_the_exact_distribution():
    t = 3
    k = discrete_laplace(t, 200_000, source=np.random.default_rng(7))
    a = math.exp(-1 / t)
    support = np.arange(-12, 13)
    pmf = (1 - a) / (1 + a) * a ** np.abs(support)
    observed = np.array([np.count_nonzero(k == v) for v in support] + [np.count_nonzero(np.abs(k) > 12)])
    expected = np.append(pmf, 1 - pmf.sum()) * k.size
    assert chisquare(observed, expected).pvalue > 1e-3
    assert abs(k.mean()) < 0.05


@pytest.mark.parametrize("num,den", [(0, 5), (1, 3), (2, 3), (1, 1)])
def test_bernoulli_exp_is_exact(num, den):
    n = 200_000
    draws = bernoulli_exp(np.full(n, num), np.full(n, den), source=np.random.default_rng(num * 10 + den))
    p = math.exp(-num / den)
    assert abs(draws.mean() - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-12


def test_textbook_laplace_leaks_through_low_order_bits_and_the_lattice_does_not():
    """Mironov's observation: around 0, outputs for x = 0 are the noise itself, with far finer
    spacing than 1 + noise can have, so "y is not a multiple of 2^-53" happens only when x = 0:
    an event of probability > 0 under one input and 0 under its neighbour (infinite privacy loss).
    On the lattice, every output for either input is a multiple of the same public step."""
    rng = np.random.default_rng(3)
    n = 20_000

    def off_grid(y):
        near = y[np.abs(y) < 1]
        return np.count_nonzero(near * 2.0**53 != np.rint(near * 2.0**53))

    naive0, naive1 = 0.0 + laplace(1.0, n, rng), 1.0 + laplace(1.0, n, rng)
    assert off_grid(naive0) > 1000 and off_grid(naive1) == 0          # the leak
    for x in (0.0, 1.0):
        y, _ = lattice_laplace(np.full(n, x), 1.0, 1.0, 1, rng)
        step = 1.0 / ROUNDING_SLACK                                     # Δ / (2^24 · changed), a power of two
        assert np.all(y / step == np.rint(y / step)) and off_grid(y) == 0


def test_low_order_bits_do_not_reveal_the_count():
    """True counts 1000 and 1001: the released values are lattice points whose low-order bits
    (every bit below the lattice step is 0; the 10 bits above it) have the same distribution."""
    n = 50_000
    bits = []
    for count, seed in ((1000.0, 1), (1001.0, 2)):
        y, _ = lattice_laplace(np.full(n, count), 1.0, 1.0, 1, np.random.default_rng(seed))
        step = 1.0 / ROUNDING_SLACK
        units = np.rint(y / step)
        assert np.array_equal(units * step, y)                          # nothing below the step
        bits.append(np.bincount((units.astype(np.int64) % 1024), minlength=1024))
    assert chi2_contingency(np.array(bits)).pvalue > 1e-3


def test_the_release_is_a_function_of_the_rounded_value_and_the_integer_noise():
    step = 2.0 ** -26                                                   # 1 / (2^24 · 3) rounded down to 2^k
    base = step * np.array([4_000_123.0, -17.0, 0.0])
    same, _ = lattice_laplace(base, 1.0, 1.0, 3, np.random.default_rng(9))
    nudged, _ = lattice_laplace(base + step / 4, 1.0, 1.0, 3, np.random.default_rng(9))
    shifted, _ = lattice_laplace(base + 3 * step, 1.0, 1.0, 3, np.random.default_rng(9))
    assert np.array_equal(same, nudged)                                 # same lattice point, same release
    assert np.array_equal(shifted - same, np.full(3, 3 * step))         # the distribution only shifts


def test_lattice_laplace_scale_and_std():
    y, std = lattice_laplace(np.zeros(200_000), 2.0, 0.5, 4, np.random.default_rng(4))
    assert std == pytest.approx(math.sqrt(2) * 2.0 / 0.5, rel=1e-5)     # Laplace(Δ/ε) to within 2^-23
    assert y.std() == pytest.approx(std, rel=0.01)


def test_lattice_gaussian_releases_lattice_points():
    sigma = 3.7
    step = 2.0 ** math.floor(math.log2(sigma / ROUNDING_SLACK))
    y = lattice_gaussian(np.full(100_000, 1000.3), sigma, np.random.default_rng(5))
    assert np.array_equal(np.rint(y / step) * step, y)
    assert abs(y.mean() - 1000.3) < 0.05 and y.std() == pytest.approx(sigma, rel=0.01)


@pytest.mark.parametrize("noise", ["laplace", "gaussian"])
def test_kernel_measurements_are_lattice_points(noise, monkeypatch):
    """What the kernel releases (before public least squares) lies on the lattice."""
    seen = []
    import dpsql.engine.engine as engine
    real = engine.least_squares
    monkeypatch.setattr(engine, "least_squares", lambda W, A, y: (seen.append(y), real(W, A, y))[1])
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT i % 7 AS a FROM range(1000) r(i)")
    db = dpsql.connect(con, schema={"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 6}}},
                       budget=dpsql.Budget(epsilon=10.0, delta=1e-6), cache=False)
    db.query("SELECT a, COUNT(*) FROM t GROUP BY a", epsilon=1.0, noise=noise)
    (y,) = seen
    assert np.array_equal(y * 2.0**30, np.rint(y * 2.0**30))            # lattice points, step ≥ 2^-30
    assert not np.array_equal(y * 2.0**10, np.rint(y * 2.0**10))        # ... and finer than 2^-10
