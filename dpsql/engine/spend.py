"""What a request may spend: the noise options its spend allows, from public values only.

A request states its spend as ``epsilon``/``delta`` (an (ε, δ) budget), ``rho`` (a zCDP
budget), the statements' ``WITH DIFFERENTIAL_PRIVACY OPTIONS(epsilon=…, delta=…)``, or a
target ``std_error``. :func:`noise_options` turns the stated spend into the (noise model,
cost) pairs it allows; :func:`statement_options` reads the statements' own spend. Nothing
here reads data or the ledger: a refusal is a :class:`~dpsql.errors.PrivacyError` and
spends nothing.

>>> from dpsql.private.budget import Budget
>>> from dpsql.sql import compile_batch
>>> s = {"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 2}}}
>>> batch = compile_batch("SELECT a, COUNT(*) FROM t GROUP BY a", s)
>>> [(m.name, c.epsilon) for m, c in noise_options(batch, Budget(epsilon=1.0), epsilon=0.5)]
[('laplace', 0.5)]
"""

from __future__ import annotations

import math

from dpsql.errors import PrivacyError
from dpsql.privacy import Gaussian, Laplace, NoiseModel
from dpsql.private.budget import APPROX_DP, ZCDP, Budget, Cost
from dpsql.sql.compile import CompiledBatch

__all__ = ["NOISE_FAMILIES", "noise_options", "statement_options"]

NOISE_FAMILIES = ("laplace", "gaussian")


def noise_options(compiled: CompiledBatch, budget: Budget, epsilon: float | None = None,
                  delta: float | None = None, rho: float | None = None,
                  noise: str | None = None) -> list[tuple[NoiseModel, Cost]]:
    """The (noise model, cost) pairs this request allows, from public values only.

    The request is validated by :meth:`Budget.request` (types, finiteness,
    the floors, δ or ρ the budget cannot be charged with), so a refusal is a
    PrivacyError and nothing is spent. Laplace noise costs ``ε`` (``ρ = ε²/2``
    under zCDP); Gaussian noise costs ``(ε, δ)``, with ``δ`` defaulting to the
    budget's δ in proportion to ``ε``, or ``ρ``. A Gaussian option whose
    calibration is refused (e.g. δ below its floor) is dropped when the noise
    family is left to dpsql, and refused when it was asked for. A request with
    nothing to measure and no spend allows no option (it spends nothing).
    """
    if noise is not None and noise not in NOISE_FAMILIES:
        raise PrivacyError(f"noise must be one of {NOISE_FAMILIES}, got {noise!r:.80}")
    stated = statement_options(compiled)
    if stated is not None:
        given = [f"{k}=" for k, v in (("epsilon", epsilon), ("rho", rho), ("delta", delta)) if v is not None
                 and (k != "delta" or stated[1] is not None)]
        if given:
            raise PrivacyError(f"the statements set their spend in WITH DIFFERENTIAL_PRIVACY OPTIONS, and this "
                               f"call passes {' and '.join(given)} too: give the spend in one place")
        epsilon, delta = stated[0], stated[1] if stated[1] is not None else delta
    elif not compiled.terms and epsilon is None and rho is None:
        return []  # nothing to measure, nothing to spend
    requested = budget.request(epsilon=epsilon, delta=delta, rho=rho)
    families = [noise] if noise else list(NOISE_FAMILIES)
    out: list[tuple[NoiseModel, Cost]] = []
    for fam in families:
        if fam == "laplace":
            # under zCDP, epsilon as given (validated above), or the epsilon whose cost is rho
            eps = (requested.epsilon if budget.currency == APPROX_DP
                   else float(epsilon) if rho is None else math.sqrt(2.0) * math.sqrt(requested.rho))
            out.append((Laplace(eps), Cost.laplace(eps, budget)))
            continue
        if budget.currency == ZCDP:
            if rho is None:
                if noise == "gaussian":
                    raise PrivacyError("Gaussian noise under a zCDP budget is given by rho=, not epsilon=")
                continue
            model: NoiseModel = Gaussian(rho=requested.rho)
            cost = Cost.gaussian(budget, rho=requested.rho)
        else:
            gauss_delta = requested.delta if delta is not None else budget.delta * requested.epsilon / budget.epsilon
            if gauss_delta <= 0:
                if noise == "gaussian":
                    raise PrivacyError("Gaussian noise needs delta > 0; " + (
                        "this request's delta is 0" if delta is not None else "this budget has delta = 0"))
                continue
            model = Gaussian(epsilon=requested.epsilon, delta=gauss_delta)
            cost = Cost.gaussian(budget, epsilon=requested.epsilon, delta=gauss_delta)
        try:
            model.sigma(1.0)  # the calibration's floors depend on epsilon and delta only
        except PrivacyError:
            if noise == "gaussian":
                raise
            continue
        out.append((model, cost))
    return out


def statement_options(compiled: CompiledBatch) -> tuple[float, float | None] | None:
    """ε and δ (None if no statement sets one) summed over the statements' WITH DIFFERENTIAL_PRIVACY
    OPTIONS, or None when no statement sets ε; a PrivacyError when some do and others do not."""
    opts = [st.plan.options for st in compiled.statements]
    stated = [i + 1 for i, o in enumerate(opts) if "epsilon" in o]
    if not stated:
        return None
    if len(stated) < len(opts):
        missing = [i + 1 for i, o in enumerate(opts) if "epsilon" not in o]
        raise PrivacyError(f"statement{'s' if len(stated) > 1 else ''} {', '.join(map(str, stated))} of the batch "
                           f"set{'' if len(stated) > 1 else 's'} epsilon in WITH DIFFERENTIAL_PRIVACY OPTIONS, "
                           "and statement"
                           f"{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} "
                           f"{'do' if len(missing) > 1 else 'does'} not: give every "
                           "statement its epsilon, or none and pass epsilon= to the call")
    eps = math.fsum(float(o["epsilon"]) for o in opts)
    delta = math.fsum(float(o.get("delta", 0.0)) for o in opts) if any("delta" in o for o in opts) else None
    return eps, delta
