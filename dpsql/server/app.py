"""``dpsql serve``: the owner's process that analysts reach with any PostgreSQL client.

This is the boundary between owner and analyst that one Python process cannot be:
the private tables, the ledgers and the owner's configuration live in this
process, and an analyst only sends SQL over the wire and gets released values back.

At start, :class:`App` validates the configuration (:mod:`dpsql.server.config`),
opens every dataset (:class:`~dpsql.engine.dataset.Dataset`) and runs the owner's
checks on it (:func:`~dpsql.owner.validate.validate`): a column missing from the table,
a column whose SQL type cannot hold its domain, or a table none of whose rows fits the
schema stops the server; rows outside the domain are reported to the owner (on
stderr, never to analysts). Each analyst gets, per dataset they have a part of, a
:class:`~dpsql.server.session.Workspace`: an engine charging their account of the
dataset's ledger, and a released DuckDB of their own (no file access, released data
only). Connections authenticate with SCRAM-SHA-256 before anything else is read
(:mod:`dpsql.server.pgwire`); the client's database name picks the dataset.

Every charge is on disk (the ledger commits and syncs) before the answer it pays for
is sent, so a crash or ``kill -9`` loses no recorded spend: a client may miss an
answer that was charged, never receive one that was not.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import sys
from typing import TextIO

from dpsql.engine import Dataset
from dpsql.errors import ConfigError
from dpsql.owner.validate import validate
from dpsql.released import ReleasedData
from dpsql.server.config import ServerConfig, load_config
from dpsql.server.pgwire import Limits as WireLimits
from dpsql.server.pgwire import PgError, Server
from dpsql.server.scram import Verifier
from dpsql.server.session import CATALOG_MACROS, AnalystSession, RateLimiter, Workspace

__all__ = ["App", "serve"]

#: Memory and threads of each analyst's released DuckDB (free queries over released tables).
RELEASED_SETUP = ("SET memory_limit = '1GB'", "SET threads = 1")


class App:
    """The datasets, the analysts' workspaces and the protocol server of one configuration."""

    def __init__(self, config: ServerConfig, *, log: TextIO = sys.stderr, cache: "bool | str" = True) -> None:
        self.config = config
        self._log = log
        self.datasets: dict[str, Dataset] = {}
        for name, d in config.datasets.items():
            self._check_data(name, d.source, d.schema, d.table)
            self.datasets[name] = Dataset.open(d.source, d.table, d.schema, d.budget, d.ledger, cache=cache,
                                               progress=False, public_tables=d.public_tables)
        limiters = {a: RateLimiter(config.limits.statements_per_second) for a in config.analysts}
        self.workspaces: dict[tuple[str, str], Workspace] = {}
        for a in config.analysts.values():
            for ds, part in a.parts.items():
                dataset = self.datasets[ds]
                released = ReleasedData(*RELEASED_SETUP)
                for macro in CATALOG_MACROS:
                    released.con.execute(macro)
                self.workspaces[(a.name, ds)] = Workspace(a.name, ds, dataset.schema.table,
                                                          dataset.engine(a.name, part), released, limiters[a.name])
        for (name, ds), ws in self.workspaces.items():  # who may read whose released tables
            for reader in config.analysts.values():
                if name in reader.reads and (reader.name, ds) in self.workspaces:
                    ws.readers[reader.name] = self.workspaces[(reader.name, ds)].released

    def _check_data(self, name: str, source: str, schema: str, table: str | None) -> None:
        """The owner's checks (:func:`validate`); a ConfigError on a hard error, a report otherwise."""
        report = validate(source, schema, table=table)
        hard = [f"column {m} is missing from the table" for m in report.missing]
        hard += [f"column {c.name}: {c.type_problem}" for c in report.columns if c.type_problem]
        if report.rows and not report.clean_rows:
            hard.append(f"none of the table's {report.rows:,} rows fits the schema's domains")
        if report.problems():
            print(f"dpsql serve: dataset {name} (for the owner only: exact counts and values):\n{report}",
                  file=self._log)
        if hard:
            raise ConfigError([(f"datasets.{name}", h) for h in hard], self.config.path)

    def authenticate(self, user: str) -> Verifier | None:
        """The user's password verifier, or None for an unknown user (refused after the exchange)."""
        analyst = self.config.analysts.get(user)
        return analyst.verifier if analyst is not None else None

    def open_session(self, user: str, database: str, params: dict[str, str]) -> AnalystSession:
        """A session of an authenticated analyst on ``database`` (the dataset's name; the only
        dataset they have a part of when they name none, or name their user name, as psql does)."""
        mine = [ds for (a, ds) in self.workspaces if a == user]
        if database in ("", user) and len(mine) == 1:
            database = mine[0]
        ws = self.workspaces.get((user, database))
        if ws is None:
            raise PgError("3D000", f"database \"{database}\" does not exist for {user} (yours: "
                                   f"{', '.join(mine) or 'none'})")
        return AnalystSession(ws, self.config.limits)

    def server(self, port: int | None = None, host: str | None = None) -> Server:
        """The protocol server (not yet started) on the configured or given port and host."""
        c = self.config
        context = None
        if c.cert is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.load_cert_chain(c.cert, c.key)
        limits = WireLimits(max_message_bytes=c.limits.max_statement_bytes, max_connections=c.limits.max_connections)
        return Server(host=host or c.host, port=c.port if port is None else port, authenticate=self.authenticate,
                      open_session=self.open_session, ssl_context=context, allow_plaintext_loopback=context is None,
                      limits=limits)

    def close(self) -> None:
        for ws in self.workspaces.values():
            ws.released.close()
        for d in self.datasets.values():
            d.close()


def serve(config: "str | os.PathLike", port: int | None = None, host: str | None = None, *,
          out: TextIO = sys.stdout) -> None:
    """Run the server of ``config`` until interrupted; print one line once it accepts connections."""
    app = App(load_config(config))

    async def main() -> None:
        server = app.server(port, host)
        await server.start()
        names = ", ".join(sorted(app.datasets))
        print(f"dpsql serve: ready on {server.host}:{server.port} ({'TLS' if app.config.cert else 'loopback only'}; "
              f"datasets {names}; {len(app.config.analysts)} analysts)", file=out, flush=True)
        await server.serve_forever()

    try:
        asyncio.run(main())
    finally:
        app.close()
