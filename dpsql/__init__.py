"""dpsql: differentially private SQL with HDMM-optimized measurements.

Start with :func:`connect`: it opens a private DuckDB table with its public
schema, a privacy :class:`Budget` and a durable ledger, and answers SQL with
noisy results and their standard errors (:mod:`dpsql.connection`).
:func:`query` and :func:`batch` act on the most recent connection. Below that: the schema and SQL front end (:func:`load_schema`,
:func:`compile_batch`), the HDMM core (:mod:`dpsql.matrix`,
:mod:`dpsql.workload`, :mod:`dpsql.optimize`, :mod:`dpsql.error`), the
private kernel (:mod:`dpsql.kernel`) and the error hierarchy (:class:`Error`).
"""

from .errors import (ArgumentError, BoundsError, BudgetExceededError, CacheError, DomainError, Error,
                     GroupingError, LedgerError, MeasurementError, ParseError, PrivacyError, ResourceLimitError,
                     SchemaError, SQLError, UnknownColumnError, UnsupportedSQLError, WorkloadError)
from .budget import Budget, Cost
from .connection import Connection, batch, connect, query
from .ledger import Ledger
from .result import Result
from .schema import Schema, load_schema
from .sql import CompiledBatch, QueryPlan, compile_batch, compile_sql, plan_statement

__version__ = "0.1.0"

__all__ = [
    "connect", "query", "batch", "Connection", "Result", "Budget", "Cost", "Ledger",
    "Error", "ArgumentError", "SchemaError", "SQLError", "ParseError", "UnsupportedSQLError", "UnknownColumnError", "DomainError",
    "BoundsError", "GroupingError", "WorkloadError", "PrivacyError", "CacheError", "BudgetExceededError",
    "LedgerError", "MeasurementError", "ResourceLimitError",
    "Schema", "load_schema", "CompiledBatch", "QueryPlan", "compile_batch", "compile_sql", "plan_statement",
]
