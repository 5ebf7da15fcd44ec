"""Time the SQL front end: compiling batches of statements into one workload.

Prints, for the 49-statement Census SF1 batch (examples/sf1) and for seeded
random batches of 10, 40 and 160 statements over the test schema, the
median compile time over repeated runs, and its ratio to the 2-second target
for a 40-statement batch (issue 3).

    python benchmarks/compile_batch.py
"""

from __future__ import annotations

import glob
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from sql_oracle import SCHEMA, StatementGenerator  # noqa: E402

from dpsql import compile_batch, load_schema  # noqa: E402

TARGET_SECONDS_40 = 2.0
REPEATS = 5


def timed(texts, schema) -> tuple[float, int, int]:
    """Median seconds to compile ``texts`` and build the workload; statements; workload rows."""
    runs = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        batch = compile_batch(texts, schema)
        rows = batch.workload.num_queries
        runs.append(time.perf_counter() - start)
    return statistics.median(runs), len(batch.statements), rows


def main() -> int:
    print(f"{'batch':28} {'statements':>10} {'rows':>8} {'median s':>9} {'vs 2 s target':>14}")
    sf1 = os.path.join(ROOT, "examples", "sf1")
    texts = [open(f).read() for f in sorted(glob.glob(os.path.join(sf1, "*.sql")))]
    seconds, count, rows = timed(texts, load_schema(os.path.join(sf1, "persons.yaml")))
    print(f"{'Census SF1 (examples/sf1)':28} {count:>10} {rows:>8} {seconds:9.3f} {seconds / TARGET_SECONDS_40:14.2f}")
    for size in (10, 40, 160):
        gen = StatementGenerator(1234)
        texts = [gen.statement().sql for _ in range(size)]
        seconds, count, rows = timed(texts, SCHEMA)
        print(f"{'random (tests/sql_oracle)':28} {count:>10} {rows:>8} {seconds:9.3f} {seconds / TARGET_SECONDS_40:14.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
