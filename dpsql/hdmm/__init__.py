"""The High-Dimensional Matrix Mechanism: plain linear algebra, no data and no randomness.

Implicit matrices (:mod:`~dpsql.hdmm.matrix`), workloads as unions of Kronecker
products (:mod:`~dpsql.hdmm.workload`, :mod:`~dpsql.hdmm.marginals`) and their
domain reduction to the values the queries tell apart (:mod:`~dpsql.hdmm.reduction`) and
their terms stacked where they differ in one factor (:mod:`~dpsql.hdmm.stacking`), measurement
strategies and their expected error (:mod:`~dpsql.hdmm.strategy`,
:mod:`~dpsql.hdmm.error_analysis`), the OPT_0 / OPT_⊗ / OPT_+ / OPT_M operators and the
selector that keeps the best of them and of the obvious mechanisms (:mod:`~dpsql.hdmm.optimize`), least-squares
reconstruction (:mod:`~dpsql.hdmm.reconstruct`) and the strategy cache
(:mod:`~dpsql.hdmm.cache`). Imports only the foundation modules (``dpsql.errors``,
``dpsql.schema``, ``dpsql.limits``, ``dpsql.privacy``, ``dpsql.released``).
"""
