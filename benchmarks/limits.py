"""Every bound on a request's cost, measured: the largest request answered and the first refused.

Each ``benchmarks/limits_*.py`` module measures the bounds of one part of dpsql (its
``rows()`` returns ``(bound, largest answered, seconds, first refused, seconds)``, each
request run for real on a small in-memory table). This script runs them all and prints
one table; a refusal is meant to come fast and before anything is spent.

    python benchmarks/limits.py            # every part
    python benchmarks/limits.py red_c      # the parts whose file name contains red_c
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))


def parts(selected: list[str]) -> list[Path]:
    files = sorted(p for p in HERE.glob("limits_*.py"))
    return [p for p in files if not selected or any(s in p.stem for s in selected)]


def main() -> None:
    rows = []
    for path in parts(sys.argv[1:]):
        spec = importlib.util.spec_from_file_location(path.stem.replace("-", "_"), path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        t0 = time.perf_counter()
        rows += [(path.stem, *row) for row in module.rows()]
        print(f"{path.name}: measured in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    head = ("part", "bound", "largest answered", "s", "first refused", "s")
    width = [max(len(head[i]), *(len(_cell(r[i])) for r in rows)) for i in range(len(head))]
    print(" | ".join(h.ljust(w) for h, w in zip(head, width)))
    print("-+-".join("-" * w for w in width))
    for r in rows:
        print(" | ".join(_cell(v).ljust(w) for v, w in zip(r, width)))


def _cell(v: object) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


if __name__ == "__main__":
    main()
