"""The error a session (or the protocol layer) raises to send the client a PostgreSQL ErrorResponse."""

from __future__ import annotations

from dpsql.errors import ArgumentError, Error


class PgError(Error):
    """An error for the client, with its SQLSTATE (e.g. ``"42601"``, syntax error) and message.

    ``position`` is a 1-based character offset into the query text as the client sent it (psql draws a caret
    under it); ``detail`` and ``hint`` are the optional DETAIL and HINT lines. Everything here reaches the
    client verbatim, so it must be built from public inputs only.
    """

    def __init__(self, sqlstate: str, message: str, *, position: int | None = None,
                 detail: str | None = None, hint: str | None = None, done: "list | None" = None) -> None:
        if len(sqlstate) != 5 or not sqlstate.isascii() or not sqlstate.isalnum():
            raise ArgumentError(f"SQLSTATE must be 5 ASCII letters or digits, got {sqlstate!r}")
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message
        self.position = position
        self.detail = detail
        self.hint = hint
        #: the outcomes of a simple query's statements before the one that failed: sent before the
        #: error, as PostgreSQL does (a statement that spent must reach the client with its answer)
        self.done = list(done or [])
