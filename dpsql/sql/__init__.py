"""The SQL front end: statements to query plans to one workload.

* :func:`plan_statement` — one statement to a :class:`QueryPlan` (grammar and
  schema checks, errors with line and column);
* :func:`compile_batch` — statements (a list of texts or a ``;``-separated
  text; never a file name) to a :class:`CompiledBatch`: a
  :class:`dpsql.hdmm.workload.Workload` plus which rows answer which statement,
  aggregate and group.

The grammar is written down in ``grammar/dpsql.ebnf``.
"""

from dpsql.sql.analyze import plan_statement
from dpsql.sql.compile import Block, CompiledBatch, CompiledStatement, compile_batch, compile_sql
from dpsql.sql.grid import conjuncts
from dpsql.sql.parse import parse_statements
from dpsql.sql.plan import Aggregate, GroupKey, QueryPlan

__all__ = ["plan_statement", "compile_batch", "compile_sql", "parse_statements", "conjuncts",
           "QueryPlan", "GroupKey", "Aggregate", "CompiledBatch", "CompiledStatement", "Block"]
