"""Strategy selection with and without term stacking (``dpsql.hdmm.stacking``), same run.

A batch compiles to one Kronecker term per statement; statements that differ in one
factor only (ranges over one column, one filter value per statement under the same
GROUP BY) are stacked into one term before the operators run. This script selects a
strategy for such batches twice, stacked (the default) and with ``stack=False``, and
prints the seconds of each, their ratio and both expected RMSEs (the same queries, so
the RMSEs differ only where OPT_+, which works group by group, found another strategy).
Selection is data-independent: no data is read and no budget spent.

    python benchmarks/stacking.py               # Laplace and Gaussian, 3 restarts as db.query uses
    python benchmarks/stacking.py --noise laplace
"""

from __future__ import annotations

import argparse
import sys
import time

from dpsql import compile_batch, load_schema
from dpsql.hdmm.optimize import select
from dpsql.privacy import Gaussian, Laplace

SCHEMA = load_schema({"table": "people", "columns": {
    "zip": {"type": "integer", "min": 0, "max": 1000},
    "state": {"type": "integer", "min": 1, "max": 50},
    "sex": {"type": "categorical", "values": ["F", "M"]},
    "age": {"type": "integer", "min": 0, "max": 99},
    "income": {"type": "integer", "min": 0, "max": 199},
}})


def batches() -> dict[str, list[str]]:
    """The batches timed: statements that stack, and a marginal batch that does not (a control)."""
    return {
        "25 ranges of 41 zips": [f"SELECT COUNT(*) FROM people WHERE zip BETWEEN {i} AND {i + 40}"
                                 for i in range(0, 1000, 40)],
        "137 sliding ranges of 41 zips": [f"SELECT COUNT(*) FROM people WHERE zip BETWEEN {i} AND {i + 40}"
                                          for i in range(0, 960, 7)],
        "320 sliding ranges of 41 zips": [f"SELECT COUNT(*) FROM people WHERE zip BETWEEN {i} AND {i + 40}"
                                          for i in range(0, 960, 3)],
        "50 states x sex x age decade": [f"SELECT sex, age // 10 AS decade, COUNT(*) FROM people WHERE state = {s} "
                                         "GROUP BY sex, decade" for s in range(1, 51)],
        "20 income bands, COUNT and SUM": [f"SELECT sex, COUNT(*), SUM(age) FROM people WHERE income BETWEEN {i} "
                                           f"AND {i + 9} GROUP BY sex" for i in range(0, 200, 10)],
        "control: 4 marginals": ["SELECT sex, COUNT(*) FROM people GROUP BY sex",
                                 "SELECT state, COUNT(*) FROM people GROUP BY state",
                                 "SELECT sex, age // 10 AS decade, COUNT(*) FROM people GROUP BY sex, decade",
                                 "SELECT state, sex, COUNT(*) FROM people GROUP BY state, sex"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--noise", nargs="+", default=["laplace", "gaussian"], choices=["laplace", "gaussian"])
    args = ap.parse_args(argv)
    models = {"laplace": Laplace(1.0), "gaussian": Gaussian(1.0, 1e-6)}
    print(f"{'batch':34} {'noise':9} {'terms':>5} {'stacked s':>10} {'unstacked s':>12} {'speed-up':>9} "
          f"{'rmse stacked':>13} {'rmse unstacked':>15}  chosen")
    for name, texts in batches().items():
        W = compile_batch(texts, SCHEMA).workload
        for noise in args.noise:
            figures = []
            for stack in (True, False):
                start = time.perf_counter()
                sel = select(W, models[noise], restarts=3, progress=False, stack=stack)
                figures.append((time.perf_counter() - start, sel.rmse, sel.operator))
            (fast, rmse, chosen), (slow, plain, before) = figures
            print(f"{name:34} {noise:9} {len(W.terms):>5} {fast:10.2f} {slow:12.2f} {slow / fast:8.1f}x "
                  f"{rmse:13.4f} {plain:15.4f}  {chosen} (unstacked: {before})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
