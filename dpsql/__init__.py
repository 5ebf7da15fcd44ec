"""dpsql: differentially private SQL with HDMM-optimized measurements.

Start with :func:`connect`: it opens a private DuckDB table with its public
schema, a privacy :class:`Budget` and a durable ledger, and answers SQL with
noisy results and their standard errors (:mod:`dpsql.api.connection`).
:func:`query` and :func:`batch` act on the most recent connection.

The packages, one per trust boundary (imports only go down this list, which
``tests/test_layers.py`` enforces): the foundation modules (:mod:`dpsql.errors`,
:mod:`dpsql.schema`, :mod:`dpsql.limits`, :mod:`dpsql.privacy`, :mod:`dpsql.released`); :mod:`dpsql.hdmm`,
the matrix mechanism's math; :mod:`dpsql.sql`, the SQL front end; :mod:`dpsql.private`,
the only code that reads the private table or draws noise; :mod:`dpsql.synth`,
synthetic tables; and :mod:`dpsql.api` and :mod:`dpsql.owner`, for analysts and for
the data owner.
"""

from dpsql.api.connection import Connection, batch, connect, query
from dpsql.api.result import Result
from dpsql.errors import (
    ArgumentError,
    BudgetExceededError,
    CacheError,
    ConfigError,
    DomainError,
    Error,
    GroupingError,
    LedgerError,
    MeasurementError,
    ParseError,
    PrivacyError,
    ResourceLimitError,
    SchemaError,
    SQLError,
    UnknownColumnError,
    UnsupportedSQLError,
    WorkloadError,
)
from dpsql.private.backend import CSV
from dpsql.private.budget import Budget, Cost
from dpsql.private.ledger import Ledger
from dpsql.schema import Schema, load_schema
from dpsql.sql import CompiledBatch, QueryPlan, compile_batch, compile_sql, plan_statement

__version__ = "0.1.0"

__all__ = [
    "connect", "query", "batch", "Connection", "Result", "CSV", "Budget", "Cost", "Ledger",
    "Error", "ArgumentError", "SchemaError", "SQLError", "ParseError", "UnsupportedSQLError", "UnknownColumnError", "DomainError",
    "GroupingError", "WorkloadError", "PrivacyError", "CacheError", "ConfigError", "BudgetExceededError",
    "LedgerError", "MeasurementError", "ResourceLimitError",
    "Schema", "load_schema", "CompiledBatch", "QueryPlan", "compile_batch", "compile_sql", "plan_statement",
]
