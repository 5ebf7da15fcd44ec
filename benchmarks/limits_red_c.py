"""The synthesis options' time bound (``max_seconds``, :mod:`dpsql.synth.work`): for each option, the
largest value answered and the first refused, with the seconds each request took, measured on a
small in-memory table (8 columns of :mod:`tests.sql_oracle`, 300 rows, 2-way marginals).

The boundary is found on the plan alone (``_plan`` validates a request and estimates its work
without reading or spending anything), then both requests are made for real through
``db.synthesize``: the answered one runs (within ``max_seconds``, if the estimate is conservative)
and the refused one raises :class:`~dpsql.errors.ResourceLimitError` before any spend.

    python -m benchmarks.limits_red_c
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import dpsql  # noqa: E402
from dpsql.errors import ResourceLimitError  # noqa: E402
from dpsql.sql.compile import schema_attributes  # noqa: E402
from dpsql.synth.synthesize import _plan  # noqa: E402

#: A small max_seconds, so that the largest answered request runs in seconds.
MAX_SECONDS = 5.0

#: (bound, method, the option searched, the other arguments)
BOUNDS: list[tuple[str, str, str, dict[str, Any]]] = [
    ("pgm sweeps (rows=1000)", "pgm", "sweeps", {"epsilon": 1.0, "delta": 1e-6, "rows": 1000}),
    ("pgm iterations", "pgm", "iterations", {"epsilon": 1.0, "delta": 1e-6, "rows": 100, "sweeps": 0}),
    ("fem rounds (samples=50)", "fem", "rounds", {"epsilon": 1.0, "delta": 1e-6}),
    ("mwem replays (rounds=5)", "mwem", "replays", {"epsilon": 10.0, "rounds": 5, "rows": 100}),
    ("mwem rounds (replays=1)", "mwem", "rounds", {"epsilon": 100.0, "replays": 1, "rows": 100}),
    ("aim rounds", "aim", "rounds", {"epsilon": 1.0, "delta": 1e-6, "rows": 100}),
    ("dualquery rounds (heuristic oracle)", "dualquery", "rounds", {"epsilon": 1.0, "oracle": "heuristic",
                                                                     "rows": 100}),
]


def _db() -> dpsql.Connection:
    from sql_oracle import SCHEMA, make_table

    return dpsql.connect(make_table(300), schema=SCHEMA, budget=dpsql.Budget(epsilon=1e9, delta=1e-3), cache=False,
                         progress=False)


def _accepted(db: dpsql.Connection, method: str, kwargs: dict[str, Any]) -> bool:
    """Whether the request passes every check before the spend (nothing is read or spent)."""
    options = {k: v for k, v in kwargs.items() if k not in ("epsilon", "delta", "rho", "rows")}
    try:
        _plan(db._engine._private, db.schema, schema_attributes(db.schema), method, 2, db.budget, kwargs.get("epsilon"),
              kwargs.get("delta"), kwargs.get("rho"), kwargs.get("rows"), "s", 0, options)
    except ResourceLimitError:
        return False
    return True


def _largest(accepted: Callable[[int], bool]) -> int:
    """The largest n >= 1 with ``accepted(n)``, for a predicate true up to a point and false after (0: none)."""
    if not accepted(1):
        return 0
    hi = 1
    while accepted(hi * 2):
        hi *= 2
    lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if accepted(mid) else (lo, mid)
    return lo


def _timed(method: str, kwargs: dict[str, Any]) -> float:
    db = _db()
    started = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            db.synthesize(method, workload=2, name="s", seed=0, **kwargs)
        except ResourceLimitError:
            assert db.ledger.entries() == [], "a refusal recorded a spend"
    return time.perf_counter() - started


def rows() -> list[tuple[str, str, float, str, float]]:
    """(bound, largest request answered, its seconds, first request refused, its seconds) per option."""
    out = []
    db = _db()
    for bound, method, name, base in BOUNDS:
        base = {**base, "max_seconds": MAX_SECONDS}
        n = _largest(lambda v: _accepted(db, method, {**base, name: v}))
        answered, refused = {**base, name: n}, {**base, name: n + 1}
        out.append((f"{bound}, max_seconds={MAX_SECONDS:g}", f"{method} {name}={n}", _timed(method, answered),
                    f"{method} {name}={n + 1}", _timed(method, refused)))
    return out


if __name__ == "__main__":
    for row in rows():
        print(f"{row[0]:<50} {row[1]:<28} {row[2]:7.2f} s   {row[3]:<28} {row[4]:7.3f} s", flush=True)
