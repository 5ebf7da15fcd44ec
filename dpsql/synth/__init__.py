"""Private synthetic data (MWEM, DualQuery, FEM).

DualQuery and FEM reduce synthetic data to repeated *best responses* of a data
player: the record maximizing a weighted sum of conjunction queries plus
per-attribute linear terms. :mod:`dpsql.synth.oracle` solves that problem
(an integer program in CVXPY/HiGHS, a local-search heuristic, or both).
"""

from .oracle import (METHODS, RESULT_METHODS, Conjunction, OracleProblem, Response, best_response, best_responses,
                     objective)

__all__ = ["Conjunction", "Response", "OracleProblem", "best_response", "best_responses", "objective", "METHODS",
           "RESULT_METHODS"]
