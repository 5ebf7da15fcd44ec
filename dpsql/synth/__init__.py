"""Private synthetic data (MWEM, DualQuery, FEM, PGM, AIM, MST).

:func:`dpsql.Connection.synthesize` is the entry point: it runs one of the
methods through the private kernel, samples a table and registers it in
DuckDB (:mod:`dpsql.synth.synthesize`), once the method's plan
(:mod:`dpsql.synth.plan`: its spend split, model and time, from public values)
has priced it before anything is charged. The pieces:

* :mod:`~dpsql.synth.mwem`: MWEM over a factored distribution
  (:mod:`~dpsql.synth.factored`);
* :mod:`~dpsql.synth.dualquery` and :mod:`~dpsql.synth.fem`: the
  query-release game with a best-response oracle, an integer program in
  CVXPY/HiGHS or local search (:mod:`~dpsql.synth.oracle`), over the cells of
  the workload marginals (:mod:`~dpsql.synth.cells`);
* :mod:`~dpsql.synth.pgm`, :mod:`~dpsql.synth.aim` and :mod:`~dpsql.synth.mst`: measured
  marginals (all at once, selected adaptively, or a spanning tree of pairs) on a domain
  whose rare values are merged (:mod:`~dpsql.synth.compress`) and wide columns binned
  (:mod:`~dpsql.synth.coarsen`), and a graphical model fitted to them
  (:mod:`~dpsql.synth.junction`, :mod:`~dpsql.synth.graphical`,
  :mod:`~dpsql.synth.estimate`), sampled and refined (:mod:`~dpsql.synth.refine`);
* :mod:`~dpsql.synth.accounting`: their privacy formulas and inverses.

The data owner's NON-PRIVATE error report is :func:`dpsql.owner.evaluate.evaluate`.
"""

from dpsql.synth.cells import MarginalCells, random_marginals
from dpsql.synth.oracle import (
    ORACLES,
    RESULT_METHODS,
    Conjunction,
    OracleProblem,
    Response,
    best_response,
    best_responses,
    objective,
    perturbed_responses,
)
from dpsql.synth.synthesize import NameTakenError, SyntheticTable

__all__ = ["Conjunction", "Response", "OracleProblem", "best_response", "best_responses", "perturbed_responses",
           "objective", "ORACLES", "RESULT_METHODS", "MarginalCells", "random_marginals", "SyntheticTable",
           "NameTakenError"]
