"""What DualQuery and FEM produce: the records their data player chose.

Both algorithms solve the query-release game with a no-regret player on one
side and best responses on the other, and both output the multiset of
records the data player chose. :class:`GameResult` keeps those records,
which oracle produced each one, and the queries the private selections
picked, for the quality report.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

__all__ = ["GameResult"]


@dataclass
class GameResult:
    """Records (an (r, d) int array of domain indices) and their provenance.

    ``methods[i]`` names what produced record ``i``: an oracle label of
    :data:`dpsql.synth.oracle.RESULT_METHODS`. ``selected`` lists the private draws as
    ``(cell, sign)`` pairs (see :meth:`dpsql.private.kernel.PrivateTable.sample_cells`).
    """

    records: np.ndarray
    methods: list[str] = field(default_factory=list)
    selected: list[tuple[int, int]] = field(default_factory=list)

    def oracle_summary(self) -> dict[str, int]:
        """How many records each oracle method produced."""
        return dict(Counter(self.methods))
