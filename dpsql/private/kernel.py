"""The private kernel: the one layer that reads the private table and spends budget.

Everything else in dpsql (compiling SQL, selecting a strategy, reconstructing
answers, post-processing) is public math on public inputs and on the noisy
values this layer releases. :class:`PrivateTable` holds the connection to
the private data and the ledger. Its outputs that depend on the data, each a
differentially private release charged to the ledger before it is made:

* :meth:`PrivateTable.measure`: noisy answers to a strategy's queries
  (Laplace or Gaussian noise), with their noise scale;
* :meth:`PrivateTable.select_marginal`: the index of one candidate marginal
  (an exponential mechanism; MWEM's and AIM's selection);
* :meth:`PrivateTable.sample_cells`: exponential-mechanism draws of cell
  queries (DualQuery's and FEM's selections), against a budget charged in
  advance by :meth:`PrivateTable.reserve`.

``measure`` and ``select_marginal`` charge the ledger per call, or draw their
``ρ`` from a reservation's zCDP allowance (AIM's adaptive rounds: the whole
spend is charged before the first read, and a step beyond it is refused).

Its other outputs are functions of the public schema, the strategy, the
ledger and the owner's catalog alone: ``rows_per_unit``, ``sensitivity``,
``plan`` (the noise a measurement would add, or a refusal), ``check`` and
``reserve`` (refusals, and the ledger entry charged), and ``has_table``
(whether a name is taken on the owner's connection: a catalog lookup that
reads no row, used to refuse a synthetic table's name before any spend).

Order of operations in ``measure`` (and alike in the others), and why:

1. the ledger checks that the cost fits the budget, and everything that can
   be known without reading a row is checked: the size of the measurement,
   the noise parameters, and the table's catalog entry (its columns and
   their types). A request refused here reads nothing and records nothing;
2. the spend is recorded in the ledger, atomically re-checked against the
   budget and made durable (a concurrent spender that took the budget first
   makes this one fail, still before any row is read);
3. only then are exact marginals counted where the table lives, DuckDB or
   Spark (:mod:`dpsql.private.measure`, :mod:`dpsql.private.backend`), over the attributes
   each strategy block measures. The counting query is built so that no
   row's value can make it fail; should it fail anyway (say, an owner's view
   calling a function that raises on some value), the charge is kept and the
   error says so: whether a read fails might depend on the data, so failing
   must cost what succeeding costs (fail closed);
4. noise is drawn from the OS CSPRNG (:mod:`dpsql.private.noise`), on a power-of-two
   lattice so no low-order bit of a release depends on the exact value
   (Laplace: exact discrete Laplace noise on the rounded answers), and the
   noisy values are returned.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Sequence

import duckdb
import numpy as np

from dpsql.errors import MeasurementError, PrivacyError
from dpsql.hdmm.matrix import Kronecker, Matrix, constant_row, kron_terms
from dpsql.hdmm.reduction import ReducedStrategy
from dpsql.hdmm.strategy import Strategy, measured_cells
from dpsql.limits import check_measured_cells
from dpsql.privacy import Gaussian, Laplace, NoiseModel
from dpsql.private.backend import Backend, BackendError, backend_for
from dpsql.private.budget import RELATIVE_TOLERANCE, Cost
from dpsql.private.ledger import Ledger
from dpsql.private.measure import Counting, Snapshot, prepare_counting
from dpsql.private.noise import (
    GaussianLattice,
    LaplaceLattice,
    UniformSource,
    categorical,
    gaussian_lattice,
    laplace_lattice,
)
from dpsql.schema import Attribute, Schema

__all__ = ["Measurement", "PrivateTable", "Reservation", "release_in_chunks", "strategy_answers"]


@dataclass(frozen=True)
class Measurement:
    """Noisy answers to every row of a strategy, and how they were made.

    ``sensitivity`` already includes the privacy unit's row bound; every
    value carries independent noise of standard deviation ``noise_std``.
    ``entry`` and ``time`` are the id and time of the ledger entry charged.
    """

    values: np.ndarray
    noise: NoiseModel
    sensitivity: float
    noise_std: float
    cost: Cost
    entry: int
    time: str


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
            c = constant_row(f)
            if c is None:
                kept.append(i)
            else:
                scalar *= c
        block = Kronecker([factors[i] for i in kept]) if kept else None
        plan.append((scalar, tuple(kept), block))
    return plan


#: Answers given their noise at a time: every answer of a measurement gets its own draw (the empty
#: cells of its marginals too), in vectorized chunks of this many, so the samplers' temporaries
#: (several 8-byte arrays per answer) stay within some hundred MB whatever the measurement's size.
NOISE_CHUNK = 1 << 22


def release_in_chunks(plan: "LaplaceLattice | GaussianLattice", exact: np.ndarray,
                      source: UniformSource | None = None) -> np.ndarray:
    """``plan.release(exact)``, drawn :data:`NOISE_CHUNK` answers at a time: the same independent
    noise per answer, with bounded temporaries."""
    exact = np.asarray(exact, dtype=np.float64)
    if exact.size <= NOISE_CHUNK:
        return plan.release(exact, source)
    flat = exact.reshape(-1)
    out = np.empty_like(flat)
    for start in range(0, flat.size, NOISE_CHUNK):
        out[start:start + NOISE_CHUNK] = plan.release(flat[start:start + NOISE_CHUNK], source)
    return out.reshape(exact.shape)


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


def max_column_nonzeros(strategy: Strategy) -> int:
    """At most how many strategy answers one row moves: the most nonzeros in a column of ``A``
    (a Kronecker block's is the product of its factors'; blocks add up). Factors too large to
    densify count all their rows."""
    total = 0
    for _, factors in kron_terms(strategy.matrix):
        block = 1
        for f in factors:
            rows, cols = f.shape
            block *= int(np.count_nonzero(f.dense(), axis=0).max()) if rows * cols <= 4_000_000 else rows
        total += block
    return total


def on_cells(strategy: Strategy, attributes: Sequence[Attribute] = ()) -> tuple[Strategy, list[Attribute]]:
    """What is counted for ``strategy``: for a strategy on a reduced domain
    (:class:`~dpsql.hdmm.reduction.ReducedStrategy`), its reduced strategy and the kept
    attributes with their values grouped (one count per group, so ``A_red (P x)``);
    otherwise both unchanged."""
    if not isinstance(strategy, ReducedStrategy):
        return strategy, list(attributes)
    r = strategy.reduction
    return strategy.inner, [attributes[i].grouped(r.labels[i]) for i in r.kept] if attributes else []


class PrivateTable:
    """A private table, its public schema and its budget ledger.

    ``measure`` is the only way to learn anything about the rows, and it
    satisfies the guarantee of its noise model with respect to adding or
    removing one privacy unit (a row, or all rows sharing the schema's unit
    column, of which at most ``max_rows`` are kept):

    * :class:`~dpsql.privacy.Laplace` (ε): each strategy answer is rounded
      to a lattice ``γ·Z`` and gets independent discrete Laplace noise of
      scale ``k Δ₁(A) / ε`` (to within 2^-23): ε-DP, since one unit moves
      ``A x`` by at most ``k Δ₁`` in L1 (HDMM Proposition 2) and the
      rounding is accounted for (:func:`~dpsql.private.noise.lattice_laplace`); no
      floating-point noise, so no floating-point attack (Mironov 2012).
    * :class:`~dpsql.privacy.Gaussian` (ε, δ) or ρ: N(0, σ²) noise with
      ``σ`` calibrated to ``k Δ₂(A)`` by the analytic Gaussian mechanism
      (Balle & Wang 2018), or ``σ = k Δ₂ / √(2ρ)`` for ρ-zCDP; the noisy
      answers are rounded to a lattice of step at most ``σ/2^24``
      (:func:`~dpsql.private.noise.lattice_gaussian`).

    ``k`` is the unit's row bound (1 when each row is its own unit).
    ``con`` is where the table lives: a DuckDB connection or a
    :class:`~dpsql.private.backend.Backend` (e.g. Spark); only the counting query
    runs there, and noise and ledger stay in this process.
    ``source`` replaces the secure generator, for reproducible tests only.
    ``lock`` serializes the queries on ``con``; tables sharing one connection (one per
    analyst's account of a dataset) must share one lock. ``snapshot``: the table validated and
    indexed once (:func:`~dpsql.private.measure.take_snapshot`), which the counts are read from.
    """

    def __init__(self, con: "duckdb.DuckDBPyConnection | Backend", table: str, schema: Schema, ledger: Ledger,
                 source: UniformSource | None = None, lock: "threading.RLock | None" = None,
                 snapshot: Snapshot | None = None) -> None:
        self._snapshot = snapshot
        self._con = con
        self._table = table
        self._schema = schema
        self._ledger = ledger
        self._source = source
        # one query at a time on the shared connection (DuckDB connections are not thread-safe)
        self._lock = lock if lock is not None else threading.RLock()

    @property
    def rows_per_unit(self) -> int:
        unit = self._schema.privacy_unit
        return 1 if unit.column is None else int(unit.max_rows)

    def _counting(self, attributes: Sequence[Attribute], subsets: Sequence[tuple[int, ...]]) -> Counting:
        """The counting query, checked against the table's catalog entry (no row read): every
        failure that does not depend on the rows happens here, before anything is charged."""
        with self._lock:
            return prepare_counting(self._con, self._table, self._schema, attributes, subsets, self._snapshot)

    def _read(self, counting: Counting, entry: int) -> list[np.ndarray]:
        """Exact marginals of the private table (never released as they are), one query at a time,
        read only after ledger entry ``entry`` has charged for them. A failure now keeps the
        charge (fail closed): whether a read fails may depend on the rows."""
        with self._lock:
            try:
                return counting.run()
            except MeasurementError as e:
                raise MeasurementError(f"{e}; the spend recorded before the table was read (ledger entry "
                                       f"{entry}) is kept, since a failure while reading may depend on "
                                       "the data") from None

    def has_table(self, name: str) -> bool:
        """Whether ``name`` is taken on the private table's connection (a catalog lookup: no row read)."""
        with self._lock:
            try:
                return backend_for(self._con).has_table(name)
            except BackendError as e:
                raise MeasurementError(f"looking up the name {name!r} failed ({e.reason})") from None

    def check(self, cost: Cost) -> None:
        """Refuse (BudgetExceededError) a request whose total cost does not fit, reading nothing."""
        self._ledger.check(cost)

    def sensitivity(self, strategy: Strategy, noise: NoiseModel) -> float:
        """Most one privacy unit can move the strategy's answers, in the noise's norm."""
        return self.rows_per_unit * strategy.sensitivity(noise.norm)

    def plan(self, strategy: Strategy, noise: NoiseModel, sensitivity: float | None = None,
             attributes: Sequence[Attribute] = ()) -> LaplaceLattice | GaussianLattice:
        """The noise a measurement of ``strategy`` over ``attributes`` would add, from public values only.

        Refuses (before anything is read or charged) a measurement that counts more
        cells than :data:`~dpsql.limits.MAX_MEASURED_CELLS` (ResourceLimitError) or whose
        noise cannot be added (PrivacyError: the floors and ceilings of
        :func:`~dpsql.private.noise.laplace_lattice` and :func:`~dpsql.private.noise.gaussian_lattice`).
        :meth:`measure` calls it first; multi-step mechanisms call it for every step
        before their first spend. ``sensitivity`` is :meth:`sensitivity`, when the
        caller has it already. The Laplace lattice rounds every answer one unit can move:
        a row moves those of one cell, or of ``2^k`` cells when ``attributes`` split ``k``
        binned columns into endpoint cells (:class:`~dpsql.schema.Attribute`).
        """
        counted, _ = on_cells(strategy)
        check_measured_cells(measured_cells(counted), "this measurement needs")
        sens = self.sensitivity(strategy, noise) if sensitivity is None else sensitivity
        if isinstance(noise, Laplace):
            cells = 2 ** sum(len(a.split) for a in attributes)
            return laplace_lattice(sens, noise.epsilon, self.rows_per_unit * cells * max_column_nonzeros(counted))
        if isinstance(noise, Gaussian):
            return gaussian_lattice(noise.sigma(sens))
        raise TypeError(f"unknown noise model {noise!r}")  # pragma: no cover - NoiseModel is a closed union

    def measure(self, attributes: Sequence[Attribute], strategy: Strategy, noise: NoiseModel,
                cost: "Cost | Reservation", description: str = "") -> Measurement:
        """Noisy answers to ``strategy.matrix`` on the table's data vector over ``attributes``
        (for a strategy on a reduced domain, its reduced strategy's answers on the reduced
        cells, counted directly: see :func:`on_cells`).

        ``cost`` must be what ``noise`` spends in the ledger's currency; the
        caller derives both from the same request (see :mod:`dpsql.api.connection`).
        Or ``cost`` is a :class:`Reservation` with an allowance the step draws from (refused,
        reading nothing, when it is short): ``ρ`` of a zCDP allowance for ``Gaussian(rho=...)``
        noise, or ``ε`` of a pure ``ε`` allowance for ``Laplace(ε)`` noise; its ``cost`` is then
        the reservation's.
        """
        if isinstance(cost, Reservation):
            drawn = cost.measurement(noise)
            cost.admit(drawn, self)
        else:
            self._ledger.check(cost)
        sens = self.sensitivity(strategy, noise)
        plan = self.plan(strategy, noise, sens, attributes)
        counted, cells = on_cells(strategy, attributes)
        subsets = required_marginals(counted)
        if isinstance(cost, Reservation):
            cost.draw(drawn, f"{noise.key()}: {description}")  # before the read: a failing read still spends
            counts = self._cached(cells, subsets, cost)
            entry, time, cost = cost.entry, cost.time, cost.cost
        else:
            counting = self._counting(cells, subsets)
            recorded = self._ledger.record(cost, description=description, mechanism=noise.key())
            entry, time = recorded.id, recorded.time
            counts = self._read(counting, entry)
        exact = strategy_answers(counted, dict(zip(subsets, counts)))
        return Measurement(values=release_in_chunks(plan, exact, self._source), noise=noise,
                           sensitivity=sens, noise_std=plan.std, cost=cost, entry=entry, time=time)

    def _cached(self, attributes: Sequence[Attribute], subsets: Sequence[tuple[int, ...]],
                reservation: "Reservation") -> list[np.ndarray]:
        """Exact marginals on ``subsets`` of ``attributes`` for a step of ``reservation`` (already
        charged in the ledger): each read once per reservation and kept in it, never released.
        Kept per attribute list, groups included, so steps may count over coarser groupings."""
        key = tuple((a.name, a.groups) for a in attributes)
        missing = sorted({tuple(s) for s in subsets} - {s for k, s in reservation._marginals if k == key},
                         key=lambda t: (len(t), t))
        if missing:
            counting = self._counting(attributes, missing)
            reservation._marginals.update(((key, s), m) for s, m in zip(missing, self._read(counting, reservation.entry)))
        return [reservation._marginals[(key, tuple(s))] for s in subsets]

    def select_marginal(self, attributes: Sequence[Attribute], candidates: Sequence[tuple[int, ...]],
                        estimates: Sequence[np.ndarray], epsilon: float, cost: "Cost | Reservation",
                        description: str = "", weights: Sequence[float] | None = None,
                        offsets: Sequence[float] | None = None) -> int:
        """The exponential mechanism over marginals (McSherry & Talwar 2007; MWEM's and AIM's selection).

        Picks candidate ``j`` with probability ∝ ``exp(ε s_j / (2kw))`` where
        ``s_j = w_j ‖m_j − estimates[j]‖₁ − offsets[j]`` is how badly a public estimate
        misses the true marginal ``m_j`` on attributes ``candidates[j]``, with public
        ``weights`` ``w_j > 0`` (default 1) and ``offsets`` (default 0), and ``w = max_j w_j``.
        One privacy unit changes every ``m_j`` by at most ``k`` in L1, so each
        score moves by at most ``k w``: ε-DP, and ``ε²/8``-zCDP since the exponential
        mechanism is ε-bounded-range (Cesar & Rogers 2021). Only the chosen index leaves the
        kernel; the spend is recorded before it does: ``cost`` in the ledger, or drawn from a
        :class:`Reservation`: ``ε²/8`` of a zCDP allowance, ``ε`` of a pure ``ε`` one.
        """
        if not candidates:
            raise ValueError("the exponential mechanism needs at least one candidate")
        w = np.ones(len(candidates)) if weights is None else np.asarray(weights, dtype=float)
        b = np.zeros(len(candidates)) if offsets is None else np.asarray(offsets, dtype=float)
        if w.shape != (len(candidates),) or b.shape != w.shape or not (np.all(w > 0) and np.all(np.isfinite(w))
                                                                      and np.all(np.isfinite(b))):
            raise ValueError("weights must be finite and > 0, and offsets finite, one per candidate")
        subsets = [tuple(c) for c in candidates]
        unique = sorted(set(subsets), key=lambda t: (len(t), t))
        if isinstance(cost, Reservation):
            drawn = epsilon * epsilon / 8.0 if cost.rho is not None else epsilon
            cost.admit(drawn, self)
            cost.draw(drawn, f"exponential(eps={epsilon!r}): {description}")
            counts = dict(zip(unique, self._cached(attributes, unique, cost)))
        else:
            self._ledger.check(cost)
            counting = self._counting(attributes, unique)
            entry = self._ledger.spend(cost, description=description, mechanism=f"exponential(eps={epsilon!r})")
            counts = dict(zip(unique, self._read(counting, entry)))
        misses = np.array([np.abs(counts[c] - np.asarray(e, dtype=float)).sum() for c, e in zip(subsets, estimates)])
        scores = w * misses - b
        return int(categorical(epsilon * scores / (2.0 * self.rows_per_unit * w.max()), 1, self._source)[0])

    def reserve(self, cost: Cost, description: str, mechanism: str, rho: float | None = None,
                epsilon: float | None = None) -> "Reservation":
        """Charge the ledger now for a whole multi-step mechanism, before its first release.

        For algorithms whose total privacy loss composes by a formula over all
        of their steps (advanced composition, zCDP converted to (ε, δ); e.g.
        DualQuery and FEM), the total is recorded in one entry before any step
        runs. Steps then draw against the returned :class:`Reservation`
        instead of a cost; each records what it used in
        :attr:`Reservation.charges`, so the caller's formula can be checked
        against the steps actually taken. With ``rho``, the reservation is also a
        zCDP allowance of ``ρ`` (which ``cost`` must stand for: ``ρ`` itself, or an
        ``(ε, δ)`` that ``ρ``-zCDP implies): :meth:`measure` and :meth:`select_marginal`
        steps draw their ``ρ`` from it and are refused once it would be exceeded (AIM's
        adaptive rounds). With ``epsilon``, it is a pure ``ε`` allowance instead (``cost`` at
        least that ``ε``): steps draw their ``ε`` (Laplace measurements, exponential picks), which
        add up by basic composition. A refused reservation reads nothing and records nothing.
        """
        if epsilon is not None and (rho is not None or not cost.epsilon >= epsilon):
            raise ValueError("a pure epsilon allowance needs a cost of at least that epsilon, and no rho")
        self._ledger.check(cost)
        recorded = self._ledger.record(cost, description=description, mechanism=mechanism)
        return Reservation(cost=cost, entry=recorded.id, _owner=self, rho=rho, epsilon=epsilon, time=recorded.time)

    def sample_cells(self, attributes: Sequence[Attribute], subsets: Sequence[tuple[int, ...]],
                     estimates: np.ndarray, epsilon: float, size: int, reservation: "Reservation") -> np.ndarray:
        """``size`` independent exponential-mechanism draws over every cell query
        of the marginals ``subsets`` and its negation (DualQuery's query
        sampling, FEM's query selection).

        Cells are numbered in order: the cells of ``subsets[0]`` in C order,
        then those of ``subsets[1]``, and so on. For cell ``j`` of a marginal
        whose exact counts are ``c`` (total ``n``), the score is
        ``s_j = c_j − n·estimates[j]`` with ``estimates[j] ∈ [0, 1]`` a public
        estimate of the cell's fraction. Each draw returns ``(j, +1)``, the
        cell query, with probability ∝ ``exp(ε s_j / (2k))``, or ``(j, −1)``,
        its negation (whose score is ``−s_j``), with probability ∝
        ``exp(−ε s_j / (2k))``, as rows ``[j, sign]`` of the result.

        **Guarantee.** Adding or removing one row ``x`` changes ``s_j`` by
        ``[x ∈ cell j] − estimates[j] ∈ [−1, 1]``, so one privacy unit of at
        most ``k`` rows moves every score by at most ``k``; each draw is
        ``ε``-DP (McSherry & Talwar 2007) and the ``size`` draws compose to
        ``size·ε``. The exact counts of one reservation are read once and kept
        in it (never released), so every draw of a run sees the same data.
        """
        if reservation._owner is not self or reservation.closed:
            raise ValueError("sample_cells needs an open reservation of this table")
        estimates = np.asarray(estimates, dtype=float).reshape(-1)
        if not np.all((estimates >= 0.0) & (estimates <= 1.0)):
            raise ValueError("cell estimates must be fractions in [0, 1]")
        if not epsilon > 0:
            raise ValueError(f"epsilon must be > 0, got {epsilon!r}")
        subsets = tuple(tuple(s) for s in subsets)
        if subsets not in reservation._counts:
            counts = self._read(self._counting(attributes, subsets), reservation.entry)
            reservation._counts[subsets] = (np.concatenate(counts),
                                            np.concatenate([np.full(c.size, c.sum()) for c in counts]))
        counts, totals = reservation._counts[subsets]
        if estimates.size != counts.size:
            raise ValueError(f"{counts.size} cells but {estimates.size} estimates")
        scores = counts - totals * estimates
        logits = (epsilon / (2.0 * self.rows_per_unit)) * np.concatenate([scores, -scores])
        draws = categorical(logits, size, self._source)
        reservation.charges.append(("exponential", float(epsilon), int(size)))
        return np.stack([draws % counts.size, np.where(draws < counts.size, 1, -1)], axis=1)


@dataclass(eq=False)
class Reservation:
    """Budget already recorded in the ledger for one multi-step mechanism
    (see :meth:`PrivateTable.reserve`). ``charges`` lists each exponential draw
    against it as ``(mechanism, epsilon per draw, draws)``. It may hold an allowance that
    steps draw from and are refused past: ``rho``, a zCDP one (steps compose by adding their
    ``ρ``, adaptively), or ``epsilon``, a pure ``ε`` one (steps compose by adding their ``ε``,
    basic composition); ``drawn`` lists each step as ``(mechanism, what it drew)``. The private
    counts it caches for the steps never leave the kernel."""

    cost: Cost
    entry: int
    _owner: "PrivateTable"
    charges: list[tuple[str, float, int]] = field(default_factory=list)
    closed: bool = False
    _counts: dict = field(default_factory=dict, repr=False)
    rho: float | None = None
    epsilon: float | None = None
    drawn: list[tuple[str, float]] = field(default_factory=list)
    _marginals: dict = field(default_factory=dict, repr=False)
    #: the time of its ledger entry ``entry``
    time: str = ""

    @property
    def used(self) -> float:
        """What its steps have drawn so far from its allowance (ρ, or ε)."""
        return math.fsum(r for _, r in self.drawn)

    def measurement(self, noise: NoiseModel) -> float:
        """What a measurement with ``noise`` draws: its ``ρ`` from a zCDP allowance
        (``Gaussian(rho=...)``), its ``ε`` from a pure one (``Laplace``)."""
        if self.rho is not None and isinstance(noise, Gaussian) and noise.rho is not None:
            return noise.rho
        if self.epsilon is not None and isinstance(noise, Laplace):
            return noise.epsilon
        raise ValueError("a measurement drawn from a reservation needs Gaussian(rho=...) noise from a zCDP "
                         "allowance, or Laplace noise from a pure epsilon one")

    def admit(self, amount: float, owner: "PrivateTable") -> None:
        """Refuse (before anything is read) a step drawing ``amount`` that is not drawn from an
        open allowance of ``owner``, or that would exceed it (beyond float rounding)."""
        if self._owner is not owner or self.closed:
            raise ValueError("a step needs an open reservation of this table")
        name, allowance = ("rho", self.rho) if self.rho is not None else ("epsilon", self.epsilon)
        if allowance is None:
            raise ValueError("this reservation has no allowance (reserve it with rho=... or epsilon=...)")
        if not (amount > 0 and math.isfinite(amount)) or self.used + amount > allowance * (1.0 + RELATIVE_TOLERANCE):
            raise PrivacyError(f"a step of {name}={amount!r} would exceed the reserved {name}={allowance!r} "
                               f"({self.used!r} drawn)")

    def draw(self, amount: float, mechanism: str) -> None:
        """Record a step drawing ``amount`` (checked by :meth:`admit`)."""
        self.drawn.append((mechanism, float(amount)))

    def close(self) -> None:
        """End the run: no more steps may draw on it, and its cached counts are dropped."""
        self.closed = True
        self._counts.clear()
        self._marginals.clear()
