"""A synthetic, census-like persons table for examples and benchmarks.

The columns match ``examples/sf1/persons.yaml``: sex, hispanic, six yes/no
race flags (white, black, aian, asian, nhpi, other) and age 0–114. The
marginals are loosely modelled on the 2010 U.S. Census: about 18% Hispanic,
single-race shares of roughly 72 / 13 / 1 / 5 / 0.2 / 6 %, about 3% reporting
two or more races (every person has at least one race), and an age pyramid
that is flat to 60 and thins out to a few centenarians. The data are made
up here from a seed: they describe no real person.

    import duckdb
    from census import load_persons
    con = duckdb.connect()
    load_persons(con, rows=300_000, seed=0)
"""

from __future__ import annotations

import numpy as np
import pandas as pd

RACES = ("white", "black", "aian", "asian", "nhpi", "other")
SINGLE_RACE_SHARE = np.array([0.72, 0.13, 0.01, 0.05, 0.002, 0.058])
MULTIRACE_SHARE = 0.03


def _age_weights() -> np.ndarray:
    age = np.arange(115)
    w = np.where(age < 60, 1.0, np.clip((100 - age) / 40.0, 0.0, None) ** 1.5)
    w[age >= 100] = 0.002 * np.exp(-(age[age >= 100] - 100) / 3.0)
    return w / w.sum()


def persons(rows: int, seed: int = 0) -> pd.DataFrame:
    """``rows`` made-up persons, reproducible from ``seed``."""
    rng = np.random.default_rng(seed)
    flags = np.zeros((rows, len(RACES)), dtype=bool)
    single = rng.choice(len(RACES), size=rows, p=SINGLE_RACE_SHARE / SINGLE_RACE_SHARE.sum())
    flags[np.arange(rows), single] = True
    multi = rng.random(rows) < MULTIRACE_SHARE
    extra = rng.random((rows, len(RACES))) < 0.3
    extra[np.arange(rows), (single + 1 + rng.integers(0, len(RACES) - 1, rows)) % len(RACES)] = True
    flags |= multi[:, None] & extra
    data = {
        "sex": np.where(rng.random(rows) < 0.492, "Male", "Female"),
        "hispanic": rng.random(rows) < 0.18,
    }
    data.update({name: flags[:, i] for i, name in enumerate(RACES)})
    data["age"] = rng.choice(115, size=rows, p=_age_weights()).astype(np.int16)
    return pd.DataFrame(data)


def load_persons(con, rows: int, seed: int = 0, table: str = "persons", chunk: int = 2_000_000) -> None:
    """Create (or replace) ``table`` on a DuckDB connection with ``persons(rows, seed)``,
    generated in chunks so that tens of millions of rows fit in modest memory."""
    con.execute(f'DROP TABLE IF EXISTS "{table}"')
    done = 0
    part = 0
    while done < rows or part == 0:
        n = min(chunk, rows - done)
        df = persons(n, seed=seed * 1_000_003 + part)
        con.register("_persons_chunk", df)
        if part == 0:
            con.execute(f'CREATE TABLE "{table}" AS SELECT * FROM _persons_chunk')
        else:
            con.execute(f'INSERT INTO "{table}" SELECT * FROM _persons_chunk')
        con.unregister("_persons_chunk")
        done += n
        part += 1
