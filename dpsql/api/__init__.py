"""What users hold: the connection, its results and the command line.

:mod:`~dpsql.api.connection` (``dpsql.connect``, ``db.query``, ``db.batch``,
``db.synthesize``) runs SQL → workload → strategy → private measurement → answers;
:mod:`~dpsql.api.result` holds released answers (on :mod:`dpsql.released`, the
separate DuckDB of released data, with no file access, on which everything handed to
an analyst lives); :mod:`~dpsql.api.cli` is the ``dpsql`` command.
"""
