"""CPU and wall time per answered request on a ledger file, as the ledger grows: fresh requests (each a
spend and a kept release) and repeated ones (served from the release store, spending nothing).

    python benchmarks/repeats.py [requests] [step]    # defaults 1500 300: about 5 minutes on a loaded machine

Wall time depends on the machine's load and its disk's fsync; CPU time is the steadier figure.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import duckdb

import dpsql

SCHEMA = {"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 2},
                                    "b": {"type": "integer", "min": 0, "max": 6}}}
SQL = "SELECT a, COUNT(*) AS n FROM t GROUP BY a"


def main(requests: int, step: int) -> None:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT range % 3 AS a, range % 7 AS b FROM range(300)")
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=1e6),
                       ledger=os.path.join(tempfile.mkdtemp(), "l.ledger"), cache=False, progress=False)
    done = 0
    while done < requests:
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(step):
            done += 1
            db.query(SQL, epsilon=0.001 * done, noise="laplace")  # a new spend each time
        fresh = ((time.perf_counter() - wall) / step * 1e3, (time.process_time() - cpu) / step * 1e3)
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(20):
            assert db.query(SQL, epsilon=0.001 * (done - i), noise="laplace").repeated
        again = ((time.perf_counter() - wall) / 20 * 1e3, (time.process_time() - cpu) / 20 * 1e3)
        print(f"ledger entries {done:5d}: fresh {fresh[0]:6.1f} ms wall {fresh[1]:5.1f} ms cpu; "
              f"repeat {again[0]:6.1f} ms wall {again[1]:5.1f} ms cpu", flush=True)
    db.close()


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]) if len(sys.argv) > 2 else (1500, 300))
