"""A synthetic table's quality report, from released numbers only: its counts against each noisy
measurement (pgm, aim, mst, mwem), how often the selections picked each workload marginal
(dualquery, fem), and the columns fitted only through their one-way marginals.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from dpsql.schema import Attribute
from dpsql.synth.cells import MarginalCells, marginal_name
from dpsql.synth.game import GameResult

if TYPE_CHECKING:
    import pandas as pd


def note_alone(report: "pd.DataFrame", attributes: Sequence[Attribute]) -> None:
    """Record on ``report`` the columns of ``attributes`` fitted only through their one-way
    marginals, with a warning; not those of one value, which have no relation to learn."""
    names = [a.name for a in attributes if a.size > 1]
    report.attrs["one_way_only"] = names
    if names:
        report.attrs["warnings"] = [*report.attrs.get("warnings", []),
                                    f"fitted only through their one-way marginals (each keeps its distribution, "
                                    f"not its relation to the other columns): {', '.join(names)}"]


def game_report(learned: GameResult, marginals: Sequence[tuple[int, ...]],
                attributes: Sequence[Attribute]) -> "pd.DataFrame":
    """Per workload marginal: how often the private selections picked one of its
    cells (released numbers only)."""
    import pandas as pd

    cells = MarginalCells([a.cells for a in attributes], marginals)
    picked = np.bincount([cells.locate(j)[0] for j, _ in learned.selected], minlength=len(marginals))
    return pd.DataFrame({"marginal": [marginal_name(attributes, m) for m in marginals],
                         "cells": np.diff(cells.offsets), "times_selected": picked})


def measured_report(measurements: Sequence[tuple[tuple[int, ...], np.ndarray, np.ndarray | None]], total: float,
                    records: np.ndarray, attributes: Sequence[Attribute], rows: int) -> "pd.DataFrame":
    """Synthetic counts (rescaled from ``rows`` to the learned ``total``) against each noisy
    measurement ``(subset, counts, cells)`` (released numbers only): ``cells`` None, or each of the
    marginal's cells' counted cell, for counts of a coarser grouping (AIM's coarse candidates,
    named with ``(grouped)``)."""
    import pandas as pd

    domain = [a.cells for a in attributes]
    scale = rows / max(total, 1e-12) if rows else 1.0  # no rows: every count is 0
    out = []
    for subset, measured, cells in measurements:
        synth = MarginalCells(domain, [subset]).counts(records) / scale
        if cells is not None:
            synth = np.bincount(cells, synth, len(measured))
        err = np.abs(synth - measured)
        name = marginal_name(attributes, subset) + ("" if cells is None else " (grouped)")
        out.append({"marginal": name, "cells": len(measured),
                    "max_abs_error_vs_noisy": float(err.max()), "mean_abs_error_vs_noisy": float(err.mean())})
    return pd.DataFrame(out)
