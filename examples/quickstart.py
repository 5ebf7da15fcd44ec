"""dpsql quickstart: from a batch of Census-style SQL to an optimized measurement strategy.

It compiles the 2010 Census SF1 person tables (examples/sf1/*.sql, 49
statements over a persons table) into one workload, lets HDMM choose a
measurement strategy for the whole batch under Laplace noise (ε = 1), and
compares its expected error with two simple baselines: measuring every
cell of the data cube (Identity), and answering every query on its own
with the budget split between them (the L1 sensitivity of the batch).

Nothing here touches data: strategy selection is data-independent, so it
spends no privacy budget. The noisy measurement on a DuckDB table comes next
(`dpsql.connect`, issue 4).

    python examples/quickstart.py
"""

import glob
import math
import os
import time

import dpsql
from dpsql.cache import StrategyCache
from dpsql.error import query_variances, rmse
from dpsql.matrix import Identity
from dpsql.optimize import select
from dpsql.privacy import Laplace
from dpsql.strategy import KronStrategy

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sf1")

schema = dpsql.load_schema(os.path.join(HERE, "persons.yaml"))
files = sorted(glob.glob(os.path.join(HERE, "*.sql")))
start = time.perf_counter()
batch = dpsql.compile_batch([open(f).read() for f in files], schema)
W = batch.workload
print(f"compiled {len(batch.statements)} statements from {len(files)} files in "
      f"{time.perf_counter() - start:.2f} s: {W.num_queries} queries, {len(W.terms)} Kronecker terms, "
      f"domain {' x '.join(map(str, W.domain))}")

noise = Laplace(epsilon=1.0)
cache = StrategyCache(os.path.join(os.path.expanduser("~"), ".cache", "dpsql", "examples"))
start = time.perf_counter()
sel = select(W, noise, cache=cache)
print(f"HDMM selected {sel.operator} in {time.perf_counter() - start:.1f} s"
      f"{' (from the strategy cache)' if sel.cached else ''}")
for c in sel.candidates:
    print(f"  {c.operator:9} expected RMSE {c.rmse:8.3f}  ({c.seconds:.1f} s)")

identity = rmse(W, KronStrategy(tuple(Identity(n) for n in W.domain)), noise)
separate = math.sqrt(noise.variance(W.sensitivity(1)))
print("\nexpected RMSE per query at epsilon = 1:")
print(f"  HDMM strategy           {sel.rmse:8.2f}")
print(f"  Identity (every cell)   {identity:8.2f}   ({identity / sel.rmse:.1f}x more error)")
print(f"  each query on its own   {separate:8.2f}   ({separate / sel.rmse:.1f}x more error)")

# Standard errors are data-independent too: every answer's, before any data is read.
se = query_variances(W, sel.strategy, noise) ** 0.5
p12 = next(s for s in batch.statements if s.plan.keys and len(s.groups) == 46)  # P12: sex by age group
block = p12.blocks[0]
print(f"\nP12 (sex by age group): standard error of each of its {len(p12.groups)} answers")
for labels, value in list(zip(p12.groups, se[block.rows]))[:4]:
    print(f"  {' / '.join(map(str, labels)):28} ± {value:.2f}")
print("  ...")
