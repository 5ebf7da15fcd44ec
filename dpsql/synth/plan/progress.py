"""The progress bar of a synthesis run: the rounds done, or a model's fit converging."""

from __future__ import annotations

import contextlib
import math
from typing import Callable, Iterator

from tqdm.auto import tqdm


def round_progress(bar: tqdm) -> Callable[[int], None]:
    """A progress callback taking the number of rounds done so far."""
    return lambda done: bar.update(done - bar.n)


@contextlib.contextmanager
def fit_progress(bar: tqdm, steps: int, taken: list[int]) -> Iterator[Callable[[int, float], None]]:
    """``bar`` showing a model's fit (:func:`~dpsql.synth.estimate.estimate`) converge: it
    counts percent of the way, on a log scale, from the first measured improvement over 100
    steps to the one that stops the fit, not steps toward their cap (``steps``, which the fit
    mostly never reaches; shown beside), and is full when the fit has ended. ``taken`` gets
    the steps done (the fit reads released measurements only, so their count is public)."""
    bar.total, bar.unit = 100, "% converged"
    if not bar.disable:  # a disabled bar has no description
        bar.set_description_str(f"{bar.desc} fit")
    first: list[float] = []

    def advance(step: int, ratio: float) -> None:
        taken[:] = [step]
        if math.isfinite(ratio) and ratio > 0:
            first.append(first[0] if first else max(ratio, 1.0 + 1e-9))
            done = 100 * math.log(first[0] / max(ratio, 1.0)) / math.log(first[0])
            bar.update(max(min(int(done), 99) - bar.n, 0))  # never back
        if not bar.disable and step % 10 == 0:
            bar.set_postfix_str(f"step {step:,} (at most {steps:,})", refresh=False)

    yield advance
    bar.update(bar.total - bar.n)
