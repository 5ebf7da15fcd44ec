"""dpsql: differentially private SQL with HDMM-optimized measurements.

The public surface so far: the error hierarchy (:class:`Error` and its
subclasses), the schema and SQL front end (:func:`load_schema`,
:func:`compile_batch`), and the HDMM core in its own modules
(:mod:`dpsql.matrix`, :mod:`dpsql.workload`, :mod:`dpsql.privacy`,
:mod:`dpsql.optimize`, :mod:`dpsql.error`, :mod:`dpsql.cache`).
"""

from .errors import (BoundsError, CacheError, DomainError, Error, GroupingError, ParseError, PrivacyError,
                     SchemaError, SQLError, UnknownColumnError, UnsupportedSQLError, WorkloadError)
from .schema import Schema, load_schema
from .sql import CompiledBatch, QueryPlan, compile_batch, compile_sql, plan_statement

__version__ = "0.1.0"

__all__ = [
    "Error", "SchemaError", "SQLError", "ParseError", "UnsupportedSQLError", "UnknownColumnError", "DomainError",
    "BoundsError", "GroupingError", "WorkloadError", "PrivacyError", "CacheError",
    "Schema", "load_schema", "CompiledBatch", "QueryPlan", "compile_batch", "compile_sql", "plan_statement",
]
