"""The benchmark workloads of HDMM Tables 4–7, built from ../shared/workloads.md.

Each builder returns a :class:`dpsql.hdmm.workload.Workload`; nothing here is
tuned to a strategy. The census predicate sets follow the definitions in
workloads.md (race as a 6-bit code of yes/no flags, age 0–114).
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from dpsql.hdmm.matrix import (
    AllRange,
    ColumnPermuted,
    Dense,
    Identity,
    IdentityTotal,
    Matrix,
    Prefix,
    Total,
    WidthRange,
)
from dpsql.hdmm.workload import Workload, kway_subsets, products_workload

ONE_D_SIZES = (64, 256, 1024, 4096)
PERMUTATION_SEED = 0


def one_d(name: str, n: int) -> Workload:
    """all-range, prefix, width32 or permuted (all-range with shuffled columns)."""
    if name == "all-range":
        return Workload.of(AllRange(n))
    if name == "prefix":
        return Workload.of(Prefix(n))
    if name == "width32":
        return Workload.of(WidthRange(n, 32))
    if name == "permuted":
        perm = np.random.default_rng(PERMUTATION_SEED).permutation(n)
        return Workload.of(ColumnPermuted(AllRange(n), perm))
    raise ValueError(name)


# --- Census SF1 -------------------------------------------------------------
# Attribute order (sex, hispanic, race, age). Hispanic index 1 is "hispanic".
#
# Every table part below is one Kronecker product. A table's own total rows
# (the table total, the male/female totals of the sex-by-age tables, the
# hispanic / not hispanic totals) are separate products, so a total shared by
# several tables is repeated once per table, exactly as each table publishes
# it. Each table then has its real 2010 SF1 cell count (P1 1, P3 8, P4 3,
# P5 17, P8 71, P9 73, P10 71, P11 73, P12 49, P12A–I 9×49, PCT12 209,
# PCT12A–O 15×209), 4151 queries in 33 products.
#
# Statistics (ε = 1): 4151 rows; Identity RMSE 23.20 (SF1) and 32.50 (SF1+),
# as published. The true L1 sensitivity (max column norm) is 41 (82 for SF1+).
# The published "Laplace" column 70.71 = √2·50 (141.42 for SF1+) is instead
# √2 · Σ_k sens(product k), a per-product upper bound that is 50 here; the
# Gaussian column 29.87 is likewise σ(ε,δ)·√(Σ_k sens₂(product k)²) = σ·√50.
RACE_CODES = 64
AGES = 115
P12_CUTS = [0, 5, 10, 15, 18, 20, 21, 22, 25, 30, 35, 40, 45, 50, 55, 60, 62, 65, 67, 70, 75, 80, 85, 115]


def _flags(code: int) -> int:
    return bin(code).count("1")


def race_alone() -> Dense:
    """7 rows: one per single-flag code, then everything else.

    "Everything else" is the complement of the six single-race codes, so it
    also covers code 0 (which never occurs); that is what reproduces the
    published Identity RMSE (leaving code 0 out gives 23.16, not 23.20).
    """
    M = np.zeros((7, RACE_CODES))
    for i in range(6):
        M[i, 1 << i] = 1.0
    M[6] = 1.0 - M[:6].sum(axis=0)
    return Dense(M)


def race_detail() -> Dense:
    """70 rows: the 63 nonzero codes, "exactly k races" for k = 1..6, "two or more"."""
    M = np.zeros((70, RACE_CODES))
    for c in range(1, RACE_CODES):
        M[c - 1, c] = 1.0
        M[62 + _flags(c), c] = 1.0
    M[69] = M[64:69].sum(axis=0)  # two or more = exactly 2, ..., exactly 6
    return Dense(M)


def race_row(codes) -> Dense:
    row = np.zeros((1, RACE_CODES))
    row[0, list(codes)] = 1.0
    return Dense(row)


def age_rows(bounds: list[tuple[int, int]]) -> Dense:
    M = np.zeros((len(bounds), AGES))
    for r, (lo, hi) in enumerate(bounds):
        M[r, lo:hi] = 1.0
    return Dense(M)


def sf1_terms() -> list[tuple[Matrix, Matrix, Matrix, Matrix]]:
    """The 33 products over (sex, hispanic, race, age) of the SF1 person tables."""
    T2, T64, T115 = Total(2), Total(RACE_CODES), Total(AGES)
    sex, sex_IT = Identity(2), IdentityTotal(2)  # IT adds the both-sexes row
    hisp, hisp_IT = Identity(2), IdentityTotal(2)
    is_hisp = Dense([[0.0, 1.0]])
    not_hisp = Dense([[1.0, 0.0]])
    alone, detail = race_alone(), race_detail()
    white_alone = race_row([1])
    adult = age_rows([(18, AGES)])
    p12_age = age_rows(list(zip(P12_CUTS[:-1], P12_CUTS[1:])))
    pct12_age = age_rows([(a, a + 1) for a in range(100)] + [(100, 105), (105, 110), (110, 115)])
    total = (T2, T2, T64, T115)
    adult_total = (T2, T2, T64, adult)

    terms = [
        total,                                   # P1: total population
        (T2, T2, alone, T115), total,            # P3: race alone (7) + total
        (T2, hisp, T64, T115), total,            # P4: hispanic, not hispanic + total
        (T2, hisp, alone, T115),                 # P5: hispanic × race alone (14)
        (T2, hisp_IT, T64, T115),                #     + hispanic, not hispanic, total
        (T2, T2, detail, T115), total,           # P8: race detail (70) + total
        (T2, hisp, T64, T115),                   # P9: hispanic, not hispanic
        (T2, not_hisp, detail, T115), total,     #     + not hispanic × race detail (70) + total
        (T2, T2, detail, adult), adult_total,    # P10: P8 for age 18+
        (T2, hisp, T64, adult),                  # P11: P9 for age 18+
        (T2, not_hisp, detail, adult), adult_total,
    ]
    # P12 and PCT12 (sex by age groups), each followed by its iterations.
    # Every part is [sex × age groups] plus its totals [IT(sex) × all ages]
    # (both sexes, male, female): 2·23 + 3 = 49 cells for P12, 2·103 + 3 = 209
    # for PCT12. Iterations A–G are the race alone rows (white, ..., some other
    # race, two or more), H is hispanic; for P12, I is white alone not
    # hispanic; for PCT12, I–O are the seven race alone rows within not hispanic.
    for ages, not_hisp_races in ((p12_age, white_alone), (pct12_age, alone)):
        for h, r in ((T2, T64),                  # P12 / PCT12
                     (T2, alone),                # P12A–G / PCT12A–G
                     (is_hisp, T64),             # P12H / PCT12H
                     (not_hisp, not_hisp_races)):  # P12I / PCT12I–O
            terms += [(sex, h, r, ages), (sex_IT, h, r, T115)]
    return terms


def sf1(states: bool = False) -> Workload:
    """Census SF1 (or SF1+ with a 51-state attribute, IT(51), on every product)."""
    terms = sf1_terms()
    if states:
        return Workload((2, 2, RACE_CODES, AGES, 51), [(1.0, t + (IdentityTotal(51),)) for t in terms])
    return Workload((2, 2, RACE_CODES, AGES), [(1.0, t) for t in terms])


# --- CPS, Adult, Loans -----------------------------------------------------
CPS = (50, 100, 7, 4, 2)
ADULT = (100, 100, 100, 99, 85, 42, 16, 15, 9, 7, 6, 5, 2, 2)
LOANS = (101, 101, 101, 101, 3, 8, 36, 6, 51, 4, 5, 15)


def cps_marginals() -> Workload:
    return Workload(CPS, [(1.0, tuple(IdentityTotal(n) for n in CPS))])


def cps_prefix() -> Workload:
    return Workload(CPS, [(1.0, (Prefix(50), Prefix(100)) + tuple(IdentityTotal(n) for n in CPS[2:]))])


def adult_marginals() -> Workload:
    return products_workload(ADULT, kway_subsets(len(ADULT), 3, lower=True))


def adult_prefix() -> Workload:
    return products_workload(
        ADULT, kway_subsets(len(ADULT), 2), block=lambda i, n: Prefix(n) if i < 5 else Identity(n)
    )


def _small_subsets(domain, limit=5000):
    return [s for r in range(len(domain) + 1) for s in itertools.combinations(range(len(domain)), r)
            if math.prod(domain[i] for i in s) <= limit]


def loans_marginals() -> Workload:
    return products_workload(LOANS, _small_subsets(LOANS))


def loans_prefix() -> Workload:
    return products_workload(LOANS, _small_subsets(LOANS), block=lambda i, n: Prefix(n) if i < 4 else Identity(n))
