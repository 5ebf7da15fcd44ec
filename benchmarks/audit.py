"""Statistical privacy audit of every mechanism dpsql releases (see :mod:`dpsql.owner.audit`).

Runs each mechanism many times on two neighbouring tables (one row added),
turns the frequencies of a few events into a Clopper–Pearson lower
confidence bound on ε (joint level 95% per mechanism), and compares it
with the claimed ε. A deliberately broken mechanism (Laplace with half the
noise its ε needs) must come out as a violation.

    python benchmarks/audit.py                  # the large version (several minutes on 2 cores)
    python benchmarks/audit.py --quick          # the sizes the test suite uses (about 20 s)
    python benchmarks/audit.py --json audit.json

``--json`` writes one row per mechanism with the keys ``mechanism``,
``claimed_epsilon``, ``audited_epsilon_lower``, ``trials`` and ``verdict``
(``ok`` or ``violation``), plus ``claimed_delta``, ``event`` (the event that
gave the bound) and ``seconds``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from dpsql.owner.audit import MECHANISMS, Sizes


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the small sizes of the test suite")
    p.add_argument("--seed", type=int, default=0, help="seed of the (insecure, reproducible) noise sources")
    p.add_argument("--only", nargs="*", choices=list(MECHANISMS), help="audit only these mechanisms")
    p.add_argument("--json", metavar="PATH", help="write the rows as JSON here")
    args = p.parse_args(argv)
    sizes = Sizes() if args.quick else Sizes.large()
    header = f"{'mechanism':<30} {'claimed ε':>9} {'δ':>7} {'audited ε ≥':>11} {'trials':>9}  {'verdict':<9} {'time':>6}  event"
    print(header)
    print("-" * len(header))
    rows = []
    for name in args.only or list(MECHANISMS):
        start = time.perf_counter()
        row = MECHANISMS[name](sizes, args.seed)
        seconds = time.perf_counter() - start
        rows.append({**row.as_dict(), "seconds": round(seconds, 2)})
        print(f"{row.mechanism:<30} {row.claimed_epsilon:>9.3g} {row.claimed_delta:>7.2g} "
              f"{row.audited_epsilon_lower:>11.3f} {row.trials:>9,}  {row.verdict:<9} {seconds:>5.1f}s  {row.event}",
              flush=True)
    flagged = [r["mechanism"] for r in rows if r["verdict"] == "violation"]
    print(f"\nviolations: {', '.join(flagged) if flagged else 'none'}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)
            fh.write("\n")
    unexpected = [m for m in flagged if "broken" not in m]
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
