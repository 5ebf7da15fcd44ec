"""The 2010 Census SF1 person tables (examples/sf1/*.sql) compile to the SF1
workload of workloads.md: same Gram matrix as a reference built directly from
the definition, and HDMM's published Laplace RMSE at epsilon = 1."""

from __future__ import annotations

import glob
from pathlib import Path

import numpy as np
import pytest

from dpsql.hdmm.matrix import Dense, Identity, Ones
from dpsql.hdmm.workload import Workload
from dpsql.sql import compile_batch

ROOT = Path(__file__).resolve().parent.parent / "examples" / "sf1"
FLAGS = ["white", "black", "aian", "asian", "nhpi", "other"]


@pytest.fixture(scope="module")
def batch():
    return compile_batch([Path(f).read_text() for f in sorted(glob.glob(str(ROOT / "*.sql")))],
                         str(ROOT / "persons.yaml"))


def _code_flags(code: int) -> list[int]:
    """Flags of a race code; index = white*32 + black*16 + ... + other (C order)."""
    return [(code >> (5 - i)) & 1 for i in range(6)]


def reference() -> Workload:
    """SF1 built straight from workloads.md (no SQL involved)."""
    nflags = np.array([sum(_code_flags(c)) for c in range(64)])
    race1 = np.zeros((7, 64))
    for i in range(6):
        race1[i, 1 << (5 - i)] = 1          # exactly flag i set
    race1[6] = 1 - race1[:6].sum(axis=0)    # everything else
    race2 = np.zeros((70, 64))
    for c in range(1, 64):
        race2[c - 1, c] = 1                 # the 63 non-zero codes
    for k in range(1, 7):
        race2[62 + k] = nflags == k         # exactly k races
    race2[69] = nflags >= 2                 # two or more races
    white = np.zeros((1, 64))
    white[0, 32] = 1
    adult = (np.arange(115) >= 18)[None, :].astype(float)
    cuts = [0, 5, 10, 15, 18, 20, 21, 22, 25, 30, 35, 40, 45, 50, 55, 60, 62, 65, 67, 70, 75, 80, 85, 115]
    age1 = np.zeros((23, 115))
    for i, (lo, hi) in enumerate(zip(cuts, cuts[1:])):
        age1[i, lo:hi] = 1
    age3 = np.zeros((103, 115))
    for a in range(100):
        age3[a, a] = 1
    for i, lo in enumerate((100, 105, 110)):
        age3[100 + i, lo:lo + 5] = 1
    T = {2: Ones(1, 2), 64: Ones(1, 64), 115: Ones(1, 115)}
    I2 = Identity(2)
    IT2 = Dense(np.vstack([np.eye(2), np.ones((1, 2))]))
    hisp, nothisp = Dense([[0, 1]]), Dense([[1, 0]])
    R1, R2, W, AD = Dense(race1), Dense(race2), Dense(white), Dense(adult)
    A1, A3 = Dense(age1), Dense(age3)
    total = (T[2], T[2], T[64], T[115])
    products = [
        total,                                   # P1
        (T[2], T[2], R1, T[115]), total,         # P3
        (T[2], I2, T[64], T[115]), total,        # P4
        (T[2], I2, R1, T[115]), (T[2], I2, T[64], T[115]),           # P5
        (T[2], T[2], R2, T[115]), total,                              # P8
        (T[2], I2, T[64], T[115]), (T[2], nothisp, R2, T[115]), total,  # P9
        (T[2], T[2], R2, AD), (T[2], T[2], T[64], AD),                # P10
        (T[2], I2, T[64], AD), (T[2], nothisp, R2, AD), (T[2], T[2], T[64], AD),  # P11
        (I2, T[2], T[64], A1), (IT2, T[2], T[64], T[115]),            # P12
        (I2, T[2], R1, A1), (IT2, T[2], R1, T[115]),                  # P12A-G
        (I2, hisp, T[64], A1), (IT2, hisp, T[64], T[115]),            # P12H
        (I2, nothisp, W, A1), (IT2, nothisp, W, T[115]),              # P12I
        (I2, T[2], T[64], A3), (IT2, T[2], T[64], T[115]),            # PCT12
        (I2, T[2], R1, A3), (IT2, T[2], R1, T[115]),                  # PCT12A-G
        (I2, hisp, T[64], A3), (IT2, hisp, T[64], T[115]),            # PCT12H
        (I2, nothisp, R1, A3), (IT2, nothisp, R1, T[115]),            # PCT12I-O
    ]
    return Workload((2, 2, 64, 115), [(1.0, p) for p in products])


def test_sf1_compiles_to_the_census_domain(batch):
    assert batch.domain == (2, 2, 64, 115)
    assert [a.name for a in batch.attributes] == ["sex", "hispanic", "race", "age"]
    assert batch.attributes[2].columns == tuple(FLAGS)


def test_sf1_matches_the_reference_definition(batch):
    W, R = batch.workload, reference()
    rng = np.random.default_rng(0)
    V = rng.standard_normal((W.shape[1], 3))
    # same Gram matrix WᵀW: the same queries up to order, zero rows and splitting a product into pieces
    assert np.allclose(W.rmatvec(W.matvec(V)), R.rmatvec(R.matvec(V)))
    # same queries: the compiled rows that are not identically zero are the reference's rows
    nonzero = np.count_nonzero(np.abs(W.matvec(np.ones(W.shape[1]))) > 0)
    assert R.shape[0] == 4150 and nonzero == 4150
    # the groups WHERE rules out on the domain (the all-flags-off group of 4 "race detail" tables and
    # their "0 races" group) are not output, so every compiled row is one of the reference's
    assert W.shape[0] == 4150


def test_sf1_hdmm_rmse_laplace(batch):
    """HDMM's OPT_kron on the compiled SF1 workload reaches the published 7.30 (within 5%)."""
    opt = pytest.importorskip("dpsql.hdmm.optimize.kron")
    from dpsql.hdmm.error_analysis import rmse
    from dpsql.hdmm.strategy import KronStrategy
    from dpsql.privacy import Laplace

    W = batch.workload
    strategy = opt.opt_kron(W, Laplace(1.0), restarts=1, seed=0)
    value = rmse(W, strategy, Laplace(1.0))
    assert abs(value - 7.30) / 7.30 < 0.05, value
    identity = KronStrategy(tuple(Identity(n) for n in W.domain), operator="identity")
    assert abs(rmse(W, identity, Laplace(1.0)) - 23.20) / 23.20 < 0.05
