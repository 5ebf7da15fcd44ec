"""dpsql quickstart: Census-style tables from a private DuckDB table, in one private batch.

It generates a census-like persons table (300,000 made-up people, seeded;
see examples/census.py) in DuckDB, opens it with dpsql under a privacy
budget, and answers the 2010 Census SF1 person tables (examples/sf1/*.sql,
49 statements) with one jointly optimized measurement at epsilon = 1. It
prints a few of the noisy tables with their standard errors, next to the
standard error each answer would have had if every query were answered on
its own with its share of the budget.

    python examples/quickstart.py
"""

import glob
import math
import os
import sys
import time

import duckdb

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from census import load_persons  # noqa: E402

import dpsql  # noqa: E402

ROWS, SEED, EPSILON = 300_000, 0, 1.0

# 1. The private table. In real use this is your data; here we make some up.
con = duckdb.connect()
start = time.perf_counter()
load_persons(con, ROWS, seed=SEED)
print(f"generated {ROWS:,} made-up persons in DuckDB ({time.perf_counter() - start:.1f} s)")
# ... and kept in examples/persons.duckdb, which `dpsql serve examples/serve.yaml` serves to analysts
# (written under a temporary name and renamed, so a server never opens half a file)
partial = os.path.join(HERE, f".persons.{os.getpid()}.duckdb")
con.execute(f"ATTACH '{partial}' AS out; CREATE TABLE out.persons AS SELECT * FROM persons; DETACH out")
os.replace(partial, os.path.join(HERE, "persons.duckdb"))

# 2. Open it privately: its public schema, a total budget, an in-memory ledger.
db = dpsql.connect(con, schema=os.path.join(HERE, "sf1", "persons.yaml"), budget=dpsql.Budget(epsilon=EPSILON))

# 3. One batch: every SF1 table, answered from one HDMM-optimized measurement.
files = sorted(glob.glob(os.path.join(HERE, "sf1", "*.sql")))
tables = [open(f, encoding="utf-8").read() for f in files]
start = time.perf_counter()
results = db.batch(tables, epsilon=EPSILON, noise="laplace")
release = results[0].release
print(f"answered {release.statements} SF1 statements ({release.queries:,} queries) in "
      f"{time.perf_counter() - start:.1f} s: {release.describe()}")

# What answering every query on its own would cost: the batch's queries move by
# up to Δ (their L1 sensitivity) when one person is added, so each would need
# Laplace noise of scale Δ/ε, a standard error of √2·Δ/ε.
compiled = dpsql.compile_batch(tables, db.schema)
separate_se = math.sqrt(2) * compiled.workload.sensitivity(1) / EPSILON
print(f"expected RMSE per query: {release.rmse:.2f} jointly, {separate_se:.2f} for each query on its own "
      f"({separate_se / release.rmse:.1f}x more error)")
print(f"budget left: epsilon = {db.remaining().epsilon:g}")
print("'std_error' is the standard error of each noisy answer; 'alone ±' is what it would be if\n"
      "each query were answered on its own; 'exact' is shown only because this example owns its data.\n")


def show(title, statement, result, rows=8):
    """Print a table's noisy answers, their standard errors and (only because this
    example made the data up) the exact counts that plain DuckDB gives."""
    keys = [k.name for k in statement.plan.keys]
    df = result.df.copy()
    exact = con.sql(statement.plan.sql).df()
    df = df.merge(exact.rename(columns={"persons": "exact"}), on=keys, how="left") if keys else \
        df.assign(exact=exact["persons"].iloc[0])
    df["exact"] = df["exact"].fillna(0).astype(int)
    df["alone ±"] = separate_se
    print(title)
    print(df.drop(columns=["ci_low", "ci_high"]).head(rows).to_string(index=False, float_format=lambda v: f"{v:,.1f}"))
    print(f"  ... {len(df)} rows in all\n" if len(df) > rows else "")


shown = {(): "P1. Total population", ("races",): "P3/P4. Number of races",
         ("sex", "age_group"): "P12. Sex by age"}
for st, r in zip(compiled.statements, results):
    title = shown.pop(tuple(k.name for k in st.plan.keys), None)
    if title:
        show(title, st, r)
