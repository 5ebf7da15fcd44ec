"""Plain DuckDB served by the wire protocol: a :class:`dpsql.server.pgwire.Session` that runs each statement on
its own DuckDB cursor and reports DuckDB's results with PostgreSQL types and command tags.

Used by tests/test_pgwire.py (the real clients check it against DuckDB directly) and by the benchmarks as the
non-private baseline served by the same protocol code (add tests/ to ``sys.path`` to import it).
"""

from __future__ import annotations

import duckdb

from dpsql.server.pgwire import Column, Command, Outcome, PgError, Rows

_TYPES = {
    "BOOLEAN": "bool", "TINYINT": "int2", "SMALLINT": "int2", "UTINYINT": "int2", "INTEGER": "int4",
    "USMALLINT": "int4", "BIGINT": "int8", "UINTEGER": "int8", "FLOAT": "float8", "DOUBLE": "float8",
    "HUGEINT": "numeric", "UBIGINT": "numeric", "UHUGEINT": "numeric", "DATE": "date", "TIMESTAMP": "timestamp",
}
# DuckDB's exception classes -> SQLSTATE
_STATES = [
    (duckdb.ParserException, "42601"), (duckdb.CatalogException, "42P01"), (duckdb.BinderException, "42703"),
    (duckdb.ConversionException, "22P02"), (duckdb.OutOfRangeException, "22003"), (duckdb.InterruptException, "57014"),
    (duckdb.Error, "XX000"),
]
_TAGS = {"SET": "SET", "CREATE": "CREATE TABLE", "DROP": "DROP TABLE", "INSERT": "INSERT 0 {n}",
         "UPDATE": "UPDATE {n}", "DELETE": "DELETE {n}"}


def pg_type(duckdb_type: object) -> str:
    """The wire type of a DuckDB column type (anything without a PostgreSQL twin is sent as text)."""
    name = str(duckdb_type)
    return "numeric" if name.startswith("DECIMAL") else _TYPES.get(name, "text")


def _error(e: duckdb.Error) -> PgError:
    state = next(code for cls, code in _STATES if isinstance(e, cls))
    return PgError(state, str(e).split("\n", 1)[0])


class DuckDBSession:
    """One connection's session over ``cursor``: statements run as DuckDB runs them."""

    def __init__(self, cursor: duckdb.DuckDBPyConnection) -> None:
        self.cursor = cursor

    def run(self, sql: str) -> list[Outcome]:
        try:
            return [self._one(statement) for statement in self.cursor.extract_statements(sql)]
        except duckdb.Error as e:
            raise _error(e) from None

    def _one(self, statement: object) -> Outcome:
        kind = statement.type.name
        result = self.cursor.execute(statement.query)
        if kind == "TRANSACTION":
            return Command(statement.query.strip().rstrip(";").split()[0].upper())
        if kind in _TAGS:
            row = result.fetchone()
            return Command(_TAGS[kind].format(n=row[0] if row else 0))
        columns = [Column(d[0], pg_type(d[1])) for d in result.description]
        rows = result.fetchall()
        converters = [str if c.type == "text" else None for c in columns]
        if any(converters):
            rows = [tuple(v if f is None or v is None else f(v) for v, f in zip(row, converters)) for row in rows]
        return Rows(columns, rows, f"SELECT {len(rows)}")

    def parameter_types(self, sql: str) -> dict[int, str]:
        return {}  # every parameter of unspecified type is reported as text

    def describe(self, sql: str) -> list[Column] | None:
        try:
            statements = self.cursor.extract_statements(sql)
            if len(statements) != 1 or statements[0].type.name != "SELECT":
                return None
            relation = self.cursor.sql(statements[0].query)
        except duckdb.Error as e:
            raise _error(e) from None
        return [Column(name, pg_type(t)) for name, t in zip(relation.columns, relation.types)]

    def cancel(self) -> None:
        self.cursor.interrupt()

    def close(self) -> None:
        self.cursor.close()
