"""The private kernel: the one layer that reads the private table and spends budget.

Everything else in dpsql (compiling SQL, selecting a strategy, reconstructing
answers, post-processing) is public math on public inputs and on the noisy
values this layer releases. :class:`PrivateTable` holds the connection to
the private data and the ledger, and its only output is
:meth:`PrivateTable.measure`: noisy answers to a strategy's queries.

Order of operations in ``measure``, and why:

1. the ledger checks that the cost fits the budget, before any data is read
   (a refused request touches nothing and records nothing);
2. exact marginals are counted where the table lives, DuckDB or Spark
   (:mod:`dpsql.measure`, :mod:`dpsql.backend`), only over
   the attributes each strategy block measures;
3. noise is drawn from the OS CSPRNG (:mod:`dpsql.noise`);
4. the spend is recorded in the ledger, atomically re-checked against the
   budget and made durable (a failure in steps 1–4 spends nothing, and a
   concurrent spender that took the budget first makes this one fail);
5. only then are the noisy values returned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import duckdb
import numpy as np

from .backend import Backend
from .budget import Cost
from .ledger import Ledger
from .matrix import Kronecker, Matrix, Ones, kron_terms
from .measure import measure_marginals
from .noise import UniformSource, gaussian, laplace
from .privacy import Gaussian, Laplace, NoiseModel
from .schema import Schema
from .sql.compile import Attribute
from .strategy import Strategy

__all__ = ["Measurement", "PrivateTable", "strategy_answers"]


@dataclass(frozen=True)
class Measurement:
    """Noisy answers to every row of a strategy, and how they were made.

    ``sensitivity`` already includes the privacy unit's row bound; every
    value carries independent noise of standard deviation ``noise_std``.
    """

    values: np.ndarray
    noise: NoiseModel
    sensitivity: float
    noise_std: float
    cost: Cost
    entry: int


def _constant_row(f: Matrix) -> float | None:
    """``c`` when ``f`` is the single query ``c·1ᵀ`` (it sums its attribute out), else None."""
    if f.shape[0] != 1:
        return None
    if isinstance(f, Ones):
        return 1.0
    row = f.dense().ravel()
    return float(row[0]) if np.all(row == row[0]) else None


def _block_plan(strategy: Strategy) -> list[tuple[float, tuple[int, ...], Matrix | None]]:
    """Per strategy block, in row order: (scalar, measured attributes, block on them).

    A factor ``c·1ᵀ`` sums its attribute out, so the block is computed from
    the marginal on the other attributes only (HDMM §10.1).
    """
    terms = kron_terms(strategy.matrix)
    if terms is None:
        raise TypeError(f"cannot measure a {type(strategy.matrix).__name__} strategy")
    plan = []
    for w, factors in terms:
        scalar, kept = w, []
        for i, f in enumerate(factors):
            c = _constant_row(f)
            if c is None:
                kept.append(i)
            else:
                scalar *= c
        block = Kronecker([factors[i] for i in kept]) if kept else None
        plan.append((scalar, tuple(kept), block))
    return plan


def strategy_answers(strategy: Strategy, marginals: dict[tuple[int, ...], np.ndarray]) -> np.ndarray:
    """Exact ``A x`` from the marginals of ``x`` that the strategy's blocks need.

    ``marginals[S]`` is the histogram over attributes ``S`` (C order). Public
    math: it is applied inside the kernel to exact marginals, and by tests to
    known data.
    """
    parts = []
    for scalar, kept, block in _block_plan(strategy):
        m = marginals[kept]
        parts.append(scalar * (block.matvec(m) if block is not None else np.atleast_1d(m.sum())))
    return np.concatenate(parts)


def required_marginals(strategy: Strategy) -> list[tuple[int, ...]]:
    """The distinct attribute subsets a strategy's blocks are computed from."""
    return sorted({kept for _, kept, _ in _block_plan(strategy)}, key=lambda s: (len(s), s))


class PrivateTable:
    """A private table, its public schema and its budget ledger.

    ``measure`` is the only way to learn anything about the rows, and it
    satisfies the guarantee of its noise model with respect to adding or
    removing one privacy unit (a row, or all rows sharing the schema's unit
    column, of which at most ``max_rows`` are kept):

    * :class:`~dpsql.privacy.Laplace` (ε): each strategy answer gets
      independent Laplace noise of scale ``k Δ₁(A) / ε``: ε-DP, since one
      unit moves ``A x`` by at most ``k Δ₁`` in L1 (HDMM Proposition 2).
    * :class:`~dpsql.privacy.Gaussian` (ε, δ) or ρ: N(0, σ²) noise with
      ``σ`` calibrated to ``k Δ₂(A)`` by the analytic Gaussian mechanism
      (Balle & Wang 2018), or ``σ = k Δ₂ / √(2ρ)`` for ρ-zCDP.

    ``k`` is the unit's row bound (1 when each row is its own unit).
    ``con`` is where the table lives: a DuckDB connection or a
    :class:`~dpsql.backend.Backend` (e.g. Spark); only the counting query
    runs there, and noise and ledger stay in this process.
    ``source`` replaces the secure generator, for reproducible tests only.
    """

    def __init__(self, con: "duckdb.DuckDBPyConnection | Backend", table: str, schema: Schema, ledger: Ledger,
                 source: UniformSource | None = None) -> None:
        self._con = con
        self._table = table
        self._schema = schema
        self._ledger = ledger
        self._source = source

    @property
    def rows_per_unit(self) -> int:
        unit = self._schema.privacy_unit
        return 1 if unit.column is None else int(unit.max_rows)

    def sensitivity(self, strategy: Strategy, noise: NoiseModel) -> float:
        """Most one privacy unit can move the strategy's answers, in the noise's norm."""
        return self.rows_per_unit * strategy.sensitivity(noise.norm)

    def measure(self, attributes: Sequence[Attribute], strategy: Strategy, noise: NoiseModel, cost: Cost,
                description: str = "") -> Measurement:
        """Noisy answers to ``strategy.matrix`` on the table's data vector over ``attributes``.

        ``cost`` must be what ``noise`` spends in the ledger's currency; the
        caller derives both from the same request (see :mod:`dpsql.connection`).
        """
        self._ledger.check(cost)
        subsets = required_marginals(strategy)
        counts = measure_marginals(self._con, self._table, self._schema, attributes, subsets)
        exact = strategy_answers(strategy, dict(zip(subsets, counts)))
        sens = self.sensitivity(strategy, noise)
        if isinstance(noise, Laplace):
            scale = noise.scale(sens)
            z = laplace(scale, exact.size, self._source)
            std = math.sqrt(2.0) * scale
        elif isinstance(noise, Gaussian):
            std = noise.sigma(sens)
            z = gaussian(std, exact.size, self._source)
        else:  # pragma: no cover - NoiseModel is a closed union
            raise TypeError(f"unknown noise model {noise!r}")
        values = exact + z
        entry = self._ledger.spend(cost, description=description, mechanism=noise.key())
        return Measurement(values=values, noise=noise, sensitivity=sens, noise_std=std, cost=cost, entry=entry)
