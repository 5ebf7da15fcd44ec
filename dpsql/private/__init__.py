"""The private kernel: the only code that reads the private table, draws noise or spends budget.

:class:`~dpsql.private.kernel.PrivateTable` measures a strategy's marginals
(:mod:`~dpsql.private.measure`, on DuckDB or Spark through
:mod:`~dpsql.private.backend`), adds calibrated noise from the secure samplers of
:mod:`~dpsql.private.noise`, and records every spend in the durable
:mod:`~dpsql.private.ledger` against a :mod:`~dpsql.private.budget`. It may use the
HDMM math (:mod:`dpsql.hdmm`) but never the SQL front end (:mod:`dpsql.sql`), so
nothing an analyst writes reaches the private table except as a public workload.
"""
