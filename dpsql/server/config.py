"""The owner's server configuration: datasets, analysts and where to listen, validated whole.

``dpsql serve CONFIG`` reads one YAML file (paths in it are relative to the file)::

    listen:
      host: 127.0.0.1          # a non-loopback host needs tls
      port: 5433
      tls: {cert: server.crt, key: server.key}
    limits:                    # all optional; these are the defaults
      max_connections: 64
      max_statement_bytes: 1048576
      max_result_rows: 100000
      statements_per_second: 10
    datasets:
      persons:                 # the database name clients connect to
        source: persons.duckdb # a DuckDB file, Parquet or CSV (as dpsql.connect takes)
        table: persons         # default: the schema's table
        schema: persons.yaml
        public_tables: []
        ledger: persons.ledger
        budget: {epsilon: 10, delta: 1.0e-6}   # or {rho: ...}
    analysts:
      alice:
        password: "SCRAM-SHA-256$4096:..."      # made by `dpsql passwd`; a plain password is refused
        budgets:
          persons: {epsilon: 4}                 # her part; parts may add up to more than the total
        reads: [bob]           # optional: whose released tables alice may read (as bob.<table>)

Every problem is reported at once, each with its path in the file
(:class:`~dpsql.errors.ConfigError`), before anything is opened. An analyst
with no part for a dataset cannot connect to it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

from dpsql.engine import Budget
from dpsql.errors import ConfigError, Error
from dpsql.server.pgwire import is_loopback
from dpsql.server.scram import Verifier, parse_verifier

__all__ = ["AnalystConfig", "DatasetConfig", "Limits", "ServerConfig", "load_config"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


@dataclass(frozen=True)
class Limits:
    """What one client may ask: connections in all, bytes of one message, rows of one result,
    statements per second per analyst (a burst of as many, refilled at that rate)."""

    max_connections: int = 64
    max_statement_bytes: int = 1 << 20
    max_result_rows: int = 100_000
    statements_per_second: float = 10.0


@dataclass(frozen=True)
class DatasetConfig:
    name: str
    source: str
    table: str | None
    schema: str
    public_tables: tuple[str, ...]
    ledger: str
    budget: Budget


@dataclass(frozen=True)
class AnalystConfig:
    name: str
    verifier: Verifier = field(repr=False)
    parts: Mapping[str, Budget]
    reads: tuple[str, ...]


@dataclass(frozen=True)
class ServerConfig:
    host: str
    port: int
    cert: str | None
    key: str | None
    limits: Limits
    datasets: Mapping[str, DatasetConfig]
    analysts: Mapping[str, AnalystConfig]
    path: str



class _Problems:
    """Collects ``(path, message)`` pairs; :meth:`check` raises them together."""

    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        self.items.append((path, message))

    def mapping(self, value: Any, path: str, required: bool = True) -> Mapping:
        if value is None and not required:
            return {}
        if not isinstance(value, Mapping):
            self.add(path, f"must be a mapping, got {type(value).__name__}")
            return {}
        return value

    def entries(self, top: Mapping, key: str, rule: str) -> "list[tuple[str, str, Mapping]]":
        """``(name, path, spec)`` of each well-named entry of the mapping ``top[key]``; a badly
        named one is a problem (``rule`` says what a name is) and left out."""
        out = []
        for name, spec in self.mapping(top.get(key), key).items():
            where = f"{key}.{name}"
            if not isinstance(name, str) or not _NAME.match(name):
                self.add(where, f"{rule}: letters, digits and _")
                continue
            out.append((name, where, self.mapping(spec, where)))
        return out

    def unknown(self, value: Mapping, path: str, known: set[str]) -> None:
        for k in value:
            if k not in known:
                self.add(f"{path}.{k}" if path else str(k), f"unknown key (known: {', '.join(sorted(known))})")


def _file(base: Path, value: Any, path: str, problems: _Problems, must_exist: bool = True) -> str:
    if not isinstance(value, str) or not value:
        problems.add(path, "must be a file path")
        return ""
    full = (base / value).resolve() if not os.path.isabs(value) else Path(value)
    if must_exist and not full.exists():
        problems.add(path, f"no such file: {full}")
    return str(full)


def _budget(value: Any, path: str, problems: _Problems) -> Budget | None:
    if not isinstance(value, Mapping) or not set(value) <= {"epsilon", "delta", "rho"} or not value:
        problems.add(path, "must be {epsilon: ..., delta: ...} or {rho: ...}")
        return None
    try:
        return Budget(**{k: float(v) if isinstance(v, (int, float, str)) and not isinstance(v, bool) else v
                         for k, v in value.items()})
    except (Error, ValueError, TypeError) as e:
        problems.add(path, str(e))
        return None


def _positive(value: Any, path: str, problems: _Problems, default: float, integer: bool) -> float:
    if value is None:
        return default
    ok = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok or not 0 < value < float("inf"):
        problems.add(path, f"must be a positive {'integer' if integer else 'number'}")
        return default
    return value


def load_config(path: "str | os.PathLike") -> ServerConfig:
    """The validated configuration in ``path`` (see the module docstring), or a ConfigError
    listing every problem."""
    file = Path(path)
    try:
        raw = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError([("", f"cannot read {file}: {e.strerror}")], str(file)) from None
    except yaml.YAMLError as e:
        raise ConfigError([("", f"not valid YAML: {e}")], str(file)) from None
    base = file.resolve().parent
    p = _Problems()
    top = p.mapping(raw, "")
    p.unknown(top, "", {"listen", "limits", "datasets", "analysts"})

    listen = p.mapping(top.get("listen"), "listen", required=False)
    p.unknown(listen, "listen", {"host", "port", "tls"})
    host = listen.get("host", "127.0.0.1")
    if not isinstance(host, str):
        p.add("listen.host", "must be a host name or address")
        host = "127.0.0.1"
    port = listen.get("port", 5433)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        p.add("listen.port", "must be a port number (0 picks a free one)")
        port = 5433
    tls = p.mapping(listen.get("tls"), "listen.tls", required=False)
    p.unknown(tls, "listen.tls", {"cert", "key"})
    cert = _file(base, tls["cert"], "listen.tls.cert", p) if "cert" in tls else None
    key = _file(base, tls["key"], "listen.tls.key", p) if "key" in tls else None
    if (cert is None) != (key is None):
        p.add("listen.tls", "needs both cert and key")
    if cert is None and not is_loopback(host):
        p.add("listen.host", f"{host} is not a loopback address: serving it needs listen.tls (cert and key), "
                             "so that passwords and answers are encrypted")

    lim = p.mapping(top.get("limits"), "limits", required=False)
    p.unknown(lim, "limits", set(Limits.__dataclass_fields__))
    d = Limits()
    limits = Limits(**{name: _positive(lim.get(name), f"limits.{name}", p, getattr(d, name),
                                       integer=name != "statements_per_second")
                       for name in Limits.__dataclass_fields__})

    datasets: dict[str, DatasetConfig] = {}
    for name, where, spec in p.entries(top, "datasets", "a dataset name is a database name clients give"):
        p.unknown(spec, where, {"source", "table", "schema", "public_tables", "ledger", "budget"})
        for required in ("source", "schema", "ledger", "budget"):
            if required not in spec:
                p.add(f"{where}.{required}", "is required")
        public = spec.get("public_tables", [])
        if not isinstance(public, list) or not all(isinstance(t, str) for t in public):
            p.add(f"{where}.public_tables", "must be a list of table names")
            public = []
        table = spec.get("table")
        if table is not None and not isinstance(table, str):
            p.add(f"{where}.table", "must be a table name")
            table = None
        budget = _budget(spec.get("budget"), f"{where}.budget", p) if "budget" in spec else None
        datasets[name] = DatasetConfig(
            name, _file(base, spec.get("source"), f"{where}.source", p) if "source" in spec else "", table,
            _file(base, spec.get("schema"), f"{where}.schema", p) if "schema" in spec else "", tuple(public),
            _file(base, spec.get("ledger"), f"{where}.ledger", p, must_exist=False) if "ledger" in spec else "",
            budget or Budget(epsilon=1.0))
    if not datasets:
        p.add("datasets", "name at least one dataset")
    ledgers = [d.ledger for d in datasets.values() if d.ledger]
    if len(set(ledgers)) != len(ledgers):
        p.add("datasets", "each dataset needs a ledger file of its own")

    analysts: dict[str, AnalystConfig] = {}
    for name, where, spec in p.entries(top, "analysts", "an analyst name is a user name clients give"):
        p.unknown(spec, where, {"password", "budgets", "reads"})
        verifier = None
        password = spec.get("password")
        if not isinstance(password, str):
            p.add(f"{where}.password", "is required: a verifier made by `dpsql passwd`")
        else:
            try:
                verifier = parse_verifier(password)
            except ValueError as e:
                p.add(f"{where}.password", f"{e}; a plain password is refused: make a verifier with `dpsql passwd`")
        parts: dict[str, Budget] = {}
        for ds, part in p.mapping(spec.get("budgets"), f"{where}.budgets").items():
            if ds not in datasets:
                p.add(f"{where}.budgets.{ds}", f"no dataset named {ds!r} (datasets: {', '.join(datasets)})")
                continue
            b = _budget(part, f"{where}.budgets.{ds}", p)
            if b is not None and b.currency != datasets[ds].budget.currency:
                p.add(f"{where}.budgets.{ds}", f"is a {b.currency} budget, and dataset {ds!r} has a "
                                               f"{datasets[ds].budget.currency} budget")
            elif b is not None:
                parts[ds] = b
        reads = spec.get("reads", [])
        if not isinstance(reads, list) or not all(isinstance(r, str) for r in reads):
            p.add(f"{where}.reads", "must be a list of analyst names")
            reads = []
        if verifier is not None:
            analysts[name] = AnalystConfig(name, verifier, parts, tuple(reads))
    for a in analysts.values():
        for r in a.reads:
            if r not in analysts:
                p.add(f"analysts.{a.name}.reads", f"no analyst named {r!r}")
    if not analysts and not any(path.startswith("analysts") for path, _ in p.items):
        p.add("analysts", "name at least one analyst")
    if p.items:
        raise ConfigError(p.items, str(file))
    return ServerConfig(host, port, cert, key, limits, datasets, analysts, str(file))
