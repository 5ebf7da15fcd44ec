"""The oracle's integer program (DualQuery §5, generalized to non-binary attributes) in CVXPY/HiGHS.

:func:`solve_mip` models the best response over one-hot record variables and
one relaxed indicator per active query, hands HiGHS a MIP start when there is
one (through CVXPY's warm-start cache, :func:`_seed_highs`), and returns the
best feasible record under a time limit and relative gap together with how
it was stopped and HiGHS's dual bound. It is the exact half of the oracle;
:mod:`dpsql.synth.oracle.heuristic` is the fast half.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import sys
import warnings
from typing import Any, Mapping

import numpy as np
import scipy.sparse as sp

from dpsql.synth.oracle.compiled import CompiledProblem

__all__ = ["solve_mip", "MIN_SOLVER_SECONDS"]

#: Relative MIP gap at or below which a HiGHS "optimal" status counts as proven optimal.
_PROVEN_GAP = 1e-9

#: Smallest time limit handed to HiGHS, in seconds (it rejects non-positive limits).
MIN_SOLVER_SECONDS = 1e-3


def solve_mip(problem: CompiledProblem, seconds: float, mip_gap: float, start: np.ndarray | None,
              highs_seed: int | None) -> tuple[np.ndarray | None, str, float | None]:
    """Solve the integer program with HiGHS through CVXPY.

    Variables: one-hot binaries ``z`` (one block per attribute, summing to 1)
    and ``y_q ∈ [0, 1]`` per active query. ``y_q`` is pushed up when
    ``c_q > 0`` and down when ``c_q < 0``, so one side of the AND suffices:
    ``y_q ≤ Σ_{v∈S} z[i, v]`` for each literal of a positive query, and
    ``y_q ≥ Σ_literals Σ_{v∈S} z[i, v] − (k − 1)`` for a negative one. All
    constraints are sparse matrix blocks.

    Returns the record (None when HiGHS found no feasible point), the label
    ``mip-optimal`` / ``mip-gap`` / ``mip-time-limit``, and the upper bound on
    the optimum (objective dual bound plus the constant), if any.
    """
    import cvxpy as cp

    _silence_highs_banner()
    n_cols = len(problem.linear)
    d = len(problem.domain)
    z = cp.Variable(n_cols, boolean=True, name="z")
    onehot = sp.csr_matrix((np.ones(n_cols), (np.repeat(np.arange(d), problem.domain), np.arange(n_cols))),
                           shape=(d, n_cols))
    constraints = [onehot @ z == 1]
    obj = problem.linear @ z
    y = None
    if problem.n_active:
        Q = problem.n_active
        y = cp.Variable(Q, bounds=[0, 1], name="y")
        positive = problem.weights > 0
        lit_pos = positive[problem.lit_query]
        if lit_pos.any():
            rows = np.flatnonzero(lit_pos)
            select = sp.csr_matrix((np.ones(len(rows)), (np.arange(len(rows)), problem.lit_query[rows])),
                                   shape=(len(rows), Q))
            constraints.append(select @ y - problem.M[rows] @ z <= 0)
        if (~positive).any():
            negatives = np.flatnonzero(~positive)
            lits = np.flatnonzero(~lit_pos)
            position = np.full(Q, -1, dtype=np.int64)
            position[negatives] = np.arange(len(negatives))
            sum_lits = sp.csr_matrix((np.ones(len(lits)), (position[problem.lit_query[lits]], np.arange(len(lits)))),
                                     shape=(len(negatives), len(lits))) @ problem.M[lits]
            select = sp.csr_matrix((np.ones(len(negatives)), (np.arange(len(negatives)), negatives)),
                                   shape=(len(negatives), Q))
            constraints.append(sum_lits @ z - select @ y <= problem.arity[negatives] - 1)
        obj = obj + problem.weights @ y
    prob = cp.Problem(cp.Maximize(obj), constraints)

    options: dict[str, Any] = {"time_limit": float(max(seconds, MIN_SOLVER_SECONDS)), "mip_rel_gap": float(mip_gap)}
    if mip_gap == 0.0:
        options["mip_abs_gap"] = 0.0
    if highs_seed is not None:
        options["random_seed"] = int(highs_seed)
    data, chain, inverse = prob.get_problem_data(cp.HIGHS)
    warm = False
    if start is not None:
        values = {z: _one_hot(problem, start)}
        if y is not None:
            values[y] = (problem.unsatisfied(start) == 0).astype(float)
        warm = _seed_highs(prob, data, values)
    raw = chain.solve_via_data(prob, data, warm_start=warm, verbose=False, solver_opts=options)
    info = raw["info"]
    status = raw["model_status"]
    bound = None
    if math.isfinite(info.mip_dual_bound):
        bound = problem.constant - float(info.mip_dual_bound)
    if info.primal_solution_status != 2:  # kSolutionStatusFeasible
        return None, "mip-time-limit", bound
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Solution may be inaccurate" on a time limit
        prob.unpack_results(raw, chain, inverse)
    zval = np.asarray(z.value, dtype=float)
    record = np.array([int(np.argmax(zval[problem.offsets[i]:problem.offsets[i + 1]])) for i in range(d)],
                      dtype=np.int64)
    if status == "kOptimal":
        label = "mip-optimal" if info.mip_gap <= _PROVEN_GAP else "mip-gap"
    else:
        label = "mip-time-limit"
    return record, label, bound


@functools.cache
def _silence_highs_banner() -> None:
    """Make the process's first ``highspy.Highs`` with standard output pointed at /dev/null.

    HiGHS writes its banner to file descriptor 1 when the first one is made, whatever its
    options, and CVXPY makes one before it passes any; the banner would land in the middle of
    a user's output (a CSV the command line writes to standard output, say). Later ones print
    nothing. Where the C library cannot be reached (not a POSIX system), the banner stays.
    """
    import highspy

    try:
        libc = ctypes.CDLL(None)
    except OSError:
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()
            libc.fflush(None)
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _one_hot(problem: CompiledProblem, record: np.ndarray) -> np.ndarray:
    out = np.zeros(len(problem.linear))
    out[problem.offsets[:-1] + record] = 1.0
    return out


def _seed_highs(prob: Any, data: Mapping[str, Any], values: Mapping[Any, np.ndarray]) -> bool:
    """Hand HiGHS a MIP start through CVXPY's warm-start path.

    CVXPY's HiGHS interface ignores the variables' ``.value``; with
    ``warm_start=True`` it only passes HiGHS (``Highs.setSolution``) the
    solution cached from an earlier solve of the same ``Problem``. We put the
    start there, laid out in the solver's column order
    (``param_prob.var_id_to_col``). HiGHS checks the start ("MIP start
    solution is feasible" in its log) and uses it as the first incumbent.
    Returns False, leaving the solve cold, if CVXPY's internals differ.
    """
    try:
        import highspy

        columns = data["param_prob"].var_id_to_col
        x0 = np.zeros(len(data["c"]))
        for var, value in values.items():
            x0[columns[var.id]:columns[var.id] + var.size] = np.asarray(value, dtype=float).ravel(order="F")
        solution = highspy.HighsSolution()
        solution.col_value = x0
        solution.value_valid = True
        prob._solver_cache["HIGHS"] = (None, None, {"model_status": "kOptimal", "solution": solution})
        return True
    except Exception:  # pragma: no cover - depends on CVXPY internals
        return False
