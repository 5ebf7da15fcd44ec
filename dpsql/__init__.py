# --- SQL front end (issue 3); added by the front-end session, keep or move as you like.
from .errors import (BoundsError, DomainError, Error, GroupingError, ParseError, SchemaError, SQLError,  # noqa: E402
                     UnknownColumnError, UnsupportedSQLError)
from .schema import Schema, load_schema  # noqa: E402
from .sql import CompiledBatch, QueryPlan, compile_batch, compile_sql, plan_statement  # noqa: E402
