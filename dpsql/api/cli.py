"""The ``dpsql`` command line: private queries, batches, synthetic tables and the budget ledger.

::

    dpsql query "SELECT sex, COUNT(*) FROM persons GROUP BY sex" \\
        --data persons.parquet --schema persons.yaml --ledger persons.ledger --epsilon 0.5
    dpsql batch tables.sql --data persons.duckdb --schema persons.yaml --ledger persons.ledger \\
        --epsilon 1 --out results/
    dpsql synth --data persons.parquet --schema persons.yaml --ledger persons.ledger \\
        --epsilon 1 --workload 2 --out persons_synthetic.parquet
    dpsql budget --ledger persons.ledger [--analyst alice]
    dpsql schema draft persons.csv --out persons.yaml     # the owner's starting schema: review it
    dpsql query "SELECT sex, COUNT(*) FROM adult GROUP BY sex" --data adult.data \
        --names age,workclass,sex --trim --schema adult.yaml --ledger adult.ledger --epsilon 0.5

A new ledger needs its total budget: ``--budget-epsilon`` (and
``--budget-delta``) or ``--budget-rho``, never both kinds. ``--out`` writes CSV
or Parquet, chosen by the file extension; a batch of several statements writes
one file per statement into the ``--out`` directory (``--format`` picks the
type), so a .csv or .parquet file name is refused for it. ``--names`` (the columns of a
CSV file without a header line) and ``--trim`` (spaces around values) read ``--data`` as
:class:`dpsql.CSV` does. Each result file carries
its provenance (the SQL, the mechanism, epsilon, delta or rho, the ledger entry, the
error columns and their confidence level): as Parquet key-value metadata under the
key ``dpsql``, or as JSON in a file beside a CSV (``q01.csv``, ``q01.json``).
Every file is written to a temporary name and renamed into place, so a reader
never sees half a file.
Errors print one line, never a traceback, and exit with status 2 (bad input,
refused spend) or 1 (anything else; 130 when interrupted); a failure of DuckDB
or an unexpected one is named by its exception class only, as its message may
quote private data.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import getpass
import json
import os
import secrets
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import duckdb
from tqdm.auto import tqdm

from dpsql.api.connection import Connection, connect
from dpsql.api.flags import in_flags
from dpsql.engine.answer import budget_number, one_line
from dpsql.errors import Error
from dpsql.owner.draft import MAX_VALUES, draft_schema
from dpsql.owner.validate import validate
from dpsql.private.backend import CSV
from dpsql.private.budget import Budget, Cost
from dpsql.private.ledger import Ledger
from dpsql.sql.parse import explained, parse_statements
from dpsql.synth.synthesize import METHODS, column_groups

if TYPE_CHECKING:
    import pandas as pd

OUT_FORMATS = ("csv", "parquet")


class UsageError(Exception):
    """Bad command-line input found before anything is spent (exit status 2)."""


def _budget(args: argparse.Namespace) -> Budget | None:
    """The total budget the ``--budget-*`` flags give a new ledger (None without them):
    ``--budget-epsilon`` with an optional ``--budget-delta``, or ``--budget-rho`` alone. Any other
    combination is a UsageError, as :class:`Budget` refuses it, rather than a silent choice of one."""
    if args.budget_rho is not None and (args.budget_epsilon is not None or args.budget_delta is not None):
        other = "--budget-epsilon" if args.budget_epsilon is not None else "--budget-delta"
        raise UsageError(f"--budget-rho (a zCDP budget) cannot be combined with {other} (an (epsilon, delta) "
                         "budget): give one kind of budget")
    if args.budget_delta is not None and args.budget_epsilon is None:
        raise UsageError("--budget-delta needs --budget-epsilon: delta is part of an (epsilon, delta) budget")
    if args.budget_rho is not None:
        return Budget(rho=args.budget_rho)
    if args.budget_epsilon is not None:
        return Budget(epsilon=args.budget_epsilon, delta=args.budget_delta or 0.0)
    return None


def _add_table(p: argparse.ArgumentParser) -> None:
    """Where the private table is and its public schema."""
    p.add_argument("--data", required=True, help="a .duckdb database, or a CSV or Parquet file")
    p.add_argument("--schema", required=True, help="the table's public schema (YAML or JSON)")
    p.add_argument("--table", help="table name in --data (default: the schema's)")
    _add_csv(p)


def _add_csv(p: argparse.ArgumentParser) -> None:
    """How to read a delimited text file: :class:`dpsql.CSV`'s ``names``, ``delimiter`` and ``trim``."""
    p.add_argument("--names", help="the comma-separated column names of a CSV file without a header line "
                   "(its first line is a row, as in UCI's adult.data)")
    p.add_argument("--delimiter", help="the one character between a CSV file's fields (default: a comma, a tab for "
                   "a .tsv name); \\t for a tab")
    p.add_argument("--trim", action="store_true", help="remove the spaces around each CSV value ('39, Female')")


def _data(args: argparse.Namespace) -> Any:
    """``args.data``, read as :class:`dpsql.CSV` with ``--names``, ``--delimiter`` and ``--trim`` when any
    is given (a delimited file whatever its name, as ``adult.data``)."""
    names = [n.strip() for n in args.names.split(",")] if args.names else None
    delimiter = "\t" if args.delimiter == "\\t" else args.delimiter
    return CSV(args.data, names=names, delimiter=delimiter, trim=args.trim) if names or args.trim or delimiter \
        else args.data


def _add_source(p: argparse.ArgumentParser) -> None:
    """The private table, its ledger and the spend: what every spending command takes."""
    _add_table(p)
    p.add_argument("--ledger", required=True, help="the privacy-budget ledger file (created if absent)")
    p.add_argument("--public-table", action="append", default=[], metavar="NAME",
                   help="a table in a .duckdb --data that the owner declares public, for lookup joins (repeatable)")
    p.add_argument("--epsilon", type=float, help="epsilon to spend on this request")
    p.add_argument("--rho", type=float, help="rho to spend (zCDP budgets)")


def _add_common(p: argparse.ArgumentParser) -> None:
    _add_source(p)
    p.add_argument("--delta", type=float, help="delta to spend (Gaussian noise)")
    p.add_argument("--noise", choices=("laplace", "gaussian"), help="default: the lower-error one")
    p.add_argument("--dialect", help="the SQL dialect of the statements (postgres, bigquery, tsql, spark...; "
                   "default: DuckDB's), transpiled to DuckDB's")
    p.add_argument("--nonnegative", action="store_true", help="non-negative, consistent answers (biased)")
    p.add_argument("--integer", action="store_true", help="non-negative integer counts that add up (biased)")
    p.add_argument("--objective", choices=("total", "max"), default="total",
                   help="minimize the expected RMSE over all answers (total) or the largest std error (max)")
    p.add_argument("--std-error", type=float,
                   help="instead of --epsilon/--rho: spend the least that gives every COUNT and SUM this std error")
    p.add_argument("--explain", action="store_true",
                   help="show the strategy, the cost and each answer's expected std error; read and spend nothing")
    p.add_argument("--out", help="write results here (.csv or .parquet; a directory for several statements)")
    p.add_argument("--format", choices=OUT_FORMATS, default="csv", help="file type inside an --out directory")
    _add_budget(p)


def _add_budget(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("total budget of a new ledger")
    g.add_argument("--budget-epsilon", type=float)
    g.add_argument("--budget-delta", type=float)
    g.add_argument("--budget-rho", type=float)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dpsql", description="Differentially private SQL over DuckDB.")
    sub = p.add_subparsers(dest="command", required=True)
    q = sub.add_parser("query", help="answer one SQL statement privately")
    q.add_argument("sql", help="the statement")
    _add_common(q)
    b = sub.add_parser("batch", help="answer a file of statements from one joint measurement")
    b.add_argument("file", help="a .sql file of ;-separated statements")
    _add_common(b)
    y = sub.add_parser("synth", help="make a private synthetic table (MWEM, DualQuery, FEM, PGM or AIM)")
    _add_source(y)
    y.add_argument("--delta", type=float, help="delta to spend (DualQuery, FEM, PGM, AIM); default 0, pure DP")
    y.add_argument("--method", choices=METHODS, default="pgm", help="default pgm")
    y.add_argument("--workload",
                   help="k (all k-way marginals), column groups like 'age,sex;race', or a .sql file "
                        "(default: Python's workload=None, every triple as the target; docs/synthetic.md)")
    y.add_argument("--rounds", type=int,
                   help="rounds (default: MWEM 10; DualQuery and FEM as many as the spend allows; "
                        "given, the spend sets DualQuery's eta and FEM's eps0; AIM: the shares its "
                        "spend starts in, 16 per column, fewer if those do not fit in the time)")
    y.add_argument("--rows", type=int, help="rows to sample (default: the noisy row count)")
    y.add_argument("--seed", type=int, help="seed for sampling rows from the learned distribution")
    y.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                   help="one of the method's options (docs/synthetic.md), e.g. max_seconds=300 or adaptive=false; "
                        "repeatable")
    y.add_argument("--out", help="write the synthetic table here (.csv or .parquet)")
    _add_budget(y)
    v = sub.add_parser("validate", help="data owner only: report rows outside the schema's domains")
    _add_table(v)
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    d = sub.add_parser("schema", help="data owner only: draft a starting schema from the data")
    draft = d.add_subparsers(dest="schema_command", required=True).add_parser(
        "draft", help="write a starting YAML schema drawn from DATA; review every domain before use")
    draft.add_argument("data", help="a .csv, .tsv, .parquet or .duckdb file")
    draft.add_argument("--table", help="the table (default: the file's name, or a database's only table)")
    draft.add_argument("--out", help="write the YAML to this new file (default: standard output)")
    _add_csv(draft)
    draft.add_argument("--max-values", type=int, default=MAX_VALUES,
                       help=f"most text values a categorical column lists (default {MAX_VALUES})")
    s = sub.add_parser("serve", help="data owner: serve datasets to analysts over the PostgreSQL protocol")
    s.add_argument("config", help="the server's YAML configuration (see dpsql.server.config)")
    s.add_argument("--port", type=int, help="listen on this port instead of the configuration's (0: a free one)")
    s.add_argument("--host", help="listen on this host instead of the configuration's")
    w = sub.add_parser("passwd", help="make a SCRAM-SHA-256 password verifier for an analyst in a serve config")
    w.add_argument("--stdin", action="store_true", help="read the password from standard input, not a prompt")
    g = sub.add_parser("budget", help="show a ledger's budget, spend and history")
    where = g.add_mutually_exclusive_group(required=True)
    where.add_argument("--ledger", help="the ledger file")
    where.add_argument("--config", help="a dpsql serve configuration: the ledger of its --dataset")
    g.add_argument("--dataset", help="with --config: the dataset (default: its only one)")
    g.add_argument("--analyst", metavar="NAME", help="show this analyst's spend and releases only")
    # accepted for symmetry with query and batch; the ledger alone holds the budget
    g.add_argument("--data", help=argparse.SUPPRESS)
    g.add_argument("--schema", help=argparse.SUPPRESS)
    g.add_argument("--epsilon", type=float, help=argparse.SUPPRESS)
    _add_budget(g)
    return p


def _write_atomic(df: "pd.DataFrame", path: Path, provenance: "dict[str, Any] | None" = None) -> None:
    """Write a released table as CSV or Parquet (by extension) via temporary files and renames: a reader
    never sees half a file. ``provenance`` (a result's :meth:`~dpsql.api.result.Result.provenance`) goes into
    a Parquet file's key-value metadata under ``dpsql``, and beside a CSV file as JSON (``<name>.json``);
    both files are written before either is renamed into place, the JSON first, so a CSV is never without
    it and a failed write leaves neither."""
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in OUT_FORMATS:
        raise ValueError(f"--out {path}: use a .csv or .parquet file name")
    path.parent.mkdir(parents=True, exist_ok=True)
    text = None if provenance is None else json.dumps(provenance, indent=2, allow_nan=False)

    def parquet(tmp: str) -> None:  # the analyst's DuckDB cannot write files: a scratch one writes the frame
        with duckdb.connect() as writer:
            writer.register("answers", df)
            metadata = "" if text is None else f", KV_METADATA {{dpsql: {_sql_string(text)}}}"
            writer.execute(f"COPY answers TO {_sql_string(tmp)} (FORMAT parquet{metadata})")

    files = [(path, (lambda tmp: df.to_csv(tmp, index=False)) if fmt == "csv" else parquet)]
    if fmt == "csv" and text is not None:
        files.insert(0, (_sidecar(path), lambda tmp: Path(tmp).write_text(text + "\n", encoding="utf-8")))
    written: list[tuple[str, Path]] = []
    try:
        for target, write in files:
            # Not tempfile.mkstemp: its files are mode 0600, which the rename would
            # carry over to the result; O_EXCL with mode 0666 gets the umask's mode.
            tmp = str(target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp")
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            written.append((tmp, target))
            write(tmp)
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        for tmp, target in written:
            os.replace(tmp, target)
    except BaseException:
        for tmp, _ in written:
            if os.path.exists(tmp):
                os.unlink(tmp)
        raise


def _sql_string(text: str) -> str:
    """``text`` as a SQL string literal."""
    return "'" + text.replace("'", "''") + "'"


def _sidecar(path: Path) -> Path:
    """The JSON file of provenance written beside the CSV file ``path``."""
    return path.with_suffix(".json")


def _is_out_file(out: Path) -> bool:
    return out.suffix.lower().lstrip(".") in OUT_FORMATS and not out.is_dir()


def _check_args(args: argparse.Namespace) -> None:
    """Refuse bad input that would otherwise only fail after the spend is recorded: contradictory
    or missing budget flags, an --out that is not a .csv or .parquet name or cannot be written, and
    input files (a batch's SQL, a --workload .sql file) that cannot be read. Reads those files
    into ``args`` (``sql_text``, ``workload_value``), so nothing is read after the spend, and
    sets ``out_paths``, the files --out will write."""
    if args.ledger in ("", ":memory:"):  # a ledger kept in this process would forget the spend when it ends
        raise UsageError(f"--ledger {args.ledger!r}: give the ledger file's path")
    if _budget(args) is None and not os.path.exists(args.ledger):
        raise UsageError(f"{args.ledger}: no ledger exists here; a new ledger needs its total budget: "
                         "give --budget-epsilon (and --budget-delta) or --budget-rho")
    if args.command == "batch":
        args.sql_text = _read_text(args.file, "the batch file")
    if args.command == "synth":
        args.workload_value = None if args.workload is None else _workload(args.workload)
    if getattr(args, "out", None):
        args.out_paths = _checked_out_paths(args, Path(args.out))


def _checked_out_paths(args: argparse.Namespace, out: Path) -> list[Path]:
    """The files ``--out`` will write for this request: ``out`` itself when it is a .csv or .parquet
    file name, else ``out/q01.<format>``, ``out/q02.<format>``, ... in the directory ``out``. Refused
    (UsageError), before anything is spent, when they cannot all be written: a name that is neither
    a .csv or .parquet file nor a directory, a directory that cannot be written, a file name for a
    batch of several statements (counted by parsing the batch file), or a path that is a directory."""
    if args.command == "synth" and not _is_out_file(out):
        raise UsageError(f"--out {out}: use a .csv or .parquet file name")
    if args.command == "query" and out.suffix and not _is_out_file(out) and not out.is_dir():
        raise UsageError(f"--out {out}: use a .csv or .parquet file name (or a directory)")
    _check_writable(out.parent if _is_out_file(out) else out, out)
    count = len(parse_statements(args.sql_text)) if args.command == "batch" else 1
    if count > 1 and _is_out_file(out):
        raise UsageError(f"--out {out}: a batch of {count} statements writes one file per statement into a "
                         "directory: give a directory name, not a .csv or .parquet file name; nothing was spent")
    paths = [out] if _is_out_file(out) else [out / f"q{i:02d}.{args.format}" for i in range(1, count + 1)]
    named = [("--ledger", args.ledger), ("--data", args.data), ("--schema", args.schema),
             ("the batch file", getattr(args, "file", None))]
    inputs = {os.path.realpath(f): flag for flag, f in named if f}
    for path in paths + [_sidecar(p) for p in paths if p.suffix.lower() == ".csv"]:
        if path.is_dir():
            raise UsageError(f"--out {out}: {path} is a directory, not a file that can be written; "
                             "nothing was spent")
        if os.path.realpath(path) in inputs:
            raise UsageError(f"--out {out}: {path} is {inputs[os.path.realpath(path)]}, which the output would "
                             "replace; nothing was spent")
    return paths


def _read_text(path: str, what: str) -> str:
    """The UTF-8 text of ``path``, or UsageError naming ``what``."""
    try:
        with open(path, encoding="utf-8") as fh:  # the CLI reads files; dpsql's API never does
            return fh.read()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"{what} {path}: cannot be read ({_reason(e)})") from None


def _reason(e: BaseException) -> str:
    """An OS error's short reason, e.g. "Permission denied"."""
    return e.strerror if isinstance(e, OSError) and e.strerror else str(e)


def _check_writable(directory: Path, out: Path) -> None:
    """Refuse (UsageError) an --out whose ``directory`` cannot be created or written: create it and a
    temporary file in it, then remove both, so that a refused request leaves no trace. The write
    itself (:func:`_write_atomic`) creates them again after the spend."""
    missing = []
    for parent in [directory, *directory.parents]:
        if parent.exists() or parent.is_symlink():
            break
        missing.append(parent)
    probe = directory / f".dpsql-probe.{secrets.token_hex(6)}.tmp"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        os.unlink(probe)
    except OSError as e:
        raise UsageError(f"--out {out}: cannot write in {directory} ({_reason(e)}); nothing was spent") from None
    finally:
        for created in missing:  # deepest first
            try:
                created.rmdir()
            except OSError:
                pass


def _connect(args: argparse.Namespace, **options: Any) -> Connection:
    """:func:`connect` to the request's --data, --schema, --table, --ledger, budget and public tables."""
    return connect(_data(args), table=args.table, schema=args.schema, budget=_budget(args), ledger=args.ledger,
                   public_tables=args.public_table, dialect=getattr(args, "dialect", None), **options)


def _run_query(args: argparse.Namespace, statements: "str | list[str]", single: bool) -> int:
    inner = explained(statements) if single else None
    db = _connect(args)
    try:
        spend = dict(epsilon=args.epsilon, delta=args.delta, rho=args.rho, noise=args.noise, objective=args.objective,
                     std_error=args.std_error)
        if args.explain or inner is not None:  # with --std-error: what that accuracy costs
            print(db.explain(inner or statements, **spend))
            return 0
        kwargs = dict(spend, nonnegative=args.nonnegative, integer=args.integer)
        results = [db.query(statements, **kwargs)] if single else db.batch(statements, **kwargs)
        if args.out:
            paths = args.out_paths
            for r, path in zip(results, paths, strict=True):
                _write_atomic(r.df, path, r.provenance())
                print(r.describe())
            print(f"-- wrote {len(paths)} file{'s' if len(paths) != 1 else ''}: {', '.join(map(str, paths[:3]))}"
                  f"{' ...' if len(paths) > 3 else ''}")
        else:
            for r in results:
                print(r)
                print()
        print(f"-- remaining budget: {_format_cost(db.remaining(), db.budget)}")
    finally:
        db.close()
    return 0


def _workload(text: str):
    """``--workload``: an int k, a .sql file, or column groups ``a,b;c``."""
    if text.strip().isdigit():
        return int(text)
    if text.strip().lower().endswith(".sql"):
        return _read_text(text.strip(), "the --workload file")
    return column_groups(text)


def _synth_options(given: Sequence[str], rounds: int | None) -> dict[str, Any]:
    """``--option NAME=VALUE`` as keyword options (``--rounds`` among them): ``true`` and
    ``false`` are booleans, a number is an int or a float, anything else a string; the method
    checks each, before anything is charged.

    >>> _synth_options(["max_seconds=300", "adaptive=false", "measure=pairs", "compress=2.5"], 4)
    {'max_seconds': 300, 'adaptive': False, 'measure': 'pairs', 'compress': 2.5, 'rounds': 4}
    """
    options: dict[str, Any] = {}
    for item in given:
        name, sep, text = item.partition("=")
        if not sep or not name.strip().isidentifier():
            raise UsageError(f"--option {item!r}: give NAME=VALUE, as in --option max_seconds=300")
        name = name.strip()
        if name in options or name == "rounds" and rounds is not None:
            raise UsageError(f"--option {name} is given twice")
        options[name] = _option_value(text.strip())
    return options if rounds is None else {**options, "rounds": rounds}


def _option_value(text: str) -> Any:
    """An ``--option`` value: a boolean, an int, a float, or the string itself."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def _run_synth(args: argparse.Namespace) -> int:
    options = _synth_options(args.option, args.rounds)
    db = _connect(args, progress=True)
    try:
        syn = db.synthesize(args.method, workload=args.workload_value, epsilon=args.epsilon, delta=args.delta,
                            rho=args.rho, rows=args.rows, seed=args.seed, **options)
        print("\n".join(in_flags(line) if line.startswith("-- warning: ") else line for line in repr(syn).splitlines()))
        if args.out:
            _write_atomic(syn.df, Path(args.out))
            print(f"-- wrote {len(syn.df):,} rows to {args.out}")
        else:
            print(syn.df.head(10).to_string(index=False))
        print(f"-- remaining budget: {_format_cost(db.remaining(), db.budget)}")
    finally:
        db.close()
    return 0


def _format_cost(c: Cost, budget: Budget) -> str:
    """``c`` in the budget's currency (a zCDP ledger with nothing spent shows ``rho=0``), each number rounded to
    12 significant digits (:func:`~dpsql.engine.answer.budget_number`: ``0.1``, not the float sum
    ``0.10000000000000009``), close enough that a printed remaining budget can be spent."""
    if budget.rho is not None:
        return f"rho={budget_number(c.rho)}"
    return f"epsilon={budget_number(c.epsilon)}, delta={budget_number(c.delta)}"


def _ledger_of_config(args: argparse.Namespace) -> None:
    """``dpsql budget --config F --dataset D``: set ``args.ledger`` to the dataset's ledger, and
    ``args.part`` to ``--analyst``'s part of it (None without them)."""
    args.part = None
    if args.config is None:
        if args.dataset is not None:
            raise UsageError("--dataset names a dataset of a --config")
        return
    from dpsql.server.config import load_config

    config = load_config(args.config)
    name = args.dataset or (next(iter(config.datasets)) if len(config.datasets) == 1 else None)
    if name not in config.datasets:
        raise UsageError(f"--dataset must name one of the configuration's datasets: {', '.join(config.datasets)}")
    args.ledger = config.datasets[name].ledger
    analyst = config.analysts.get(args.analyst) if args.analyst is not None else None
    args.part = analyst.parts.get(name) if analyst is not None else None


def _run_budget(args: argparse.Namespace) -> int:
    """The dataset's budget, spend and releases; the total per analyst when some entry has one (the owner's
    spends, through the ledger itself, shown as ``(owner)``), or with ``--analyst`` that analyst's alone."""
    part = args.part
    with Ledger(args.ledger, _budget(args)) as ledger:
        b = ledger.budget
        print(f"ledger {args.ledger}")
        print(f"  budget:    {_format_cost(b.remaining(Cost()), b)}")
        print(f"  spent:     {_format_cost(ledger.spent(), b)}")
        print(f"  remaining: {_format_cost(ledger.remaining(), b)}")
        if args.analyst is not None:
            account = ledger.account(args.analyst)
            entries, by_analyst = account.entries(), False
            print(f"  spent by {args.analyst!r}: {_format_cost(account.spent(), b)}"
                  + (f" of a part of {_format_cost(part.remaining(Cost()), part)}" if part is not None else ""))
        else:
            entries, totals = ledger.entries(), ledger.accounts()
            by_analyst = any(totals)  # some entry has an analyst
            if by_analyst:
                print("  spent by analyst:")
                for name, cost in totals.items():
                    print(f"    {_analyst(name)}: {_format_cost(cost, b)}")
        print(f"  {len(entries)} release{'s' if len(entries) != 1 else ''}")
        for e in entries:
            who = f" {_analyst(e.analyst)}" if by_analyst else ""
            print(f"    #{e.id} {e.time}{who} {e.mechanism} {_format_cost(e.cost, b)}")
            for statement in _statements(e.description):
                print(f"        {statement}")
    return 0


def _statements(description: str) -> list[str]:
    """A ledger entry's description as ``dpsql budget`` prints it: each statement of a batch (the engine
    records them ``;``-separated) on a line of its own, its whitespace collapsed; any other text as one line."""
    try:
        parts = parse_statements(description)
    except Error:  # not SQL: a synthetic table's or another mechanism's description
        parts = [description]
    return [line for line in (one_line(p if isinstance(p, str) else p.sql) for p in parts) if line]


def _analyst(name: str) -> str:
    """An entry's analyst as ``dpsql budget`` prints it: quoted, or ``(owner)``, which no quoted name is."""
    return repr(name) if name else "(owner)"


def _run_validate(args: argparse.Namespace) -> int:
    """The data owner's report (exact counts and data values: never for analysts). Exit status 3
    when some row would be dropped or a column is missing, 0 when the table is clean."""
    report = validate(_data(args), args.schema, table=args.table)
    print(json.dumps(dataclasses.asdict(report), indent=2) if args.json else report)
    return 3 if report.problems() else 0


def _run_schema(args: argparse.Namespace) -> int:
    """``dpsql schema draft``: the owner's starting schema (it quotes the data: never for analysts)."""
    text = draft_schema(_data(args), args.table, max_values=args.max_values)
    if args.out is None:
        print(text, end="")
        return 0
    try:
        with open(args.out, "x", encoding="utf-8") as fh:
            fh.write(text)
    except FileExistsError:
        raise UsageError(f"--out {args.out} exists: remove it, or give another name") from None
    print(f"dpsql: wrote {args.out}: review every domain before use (see its header)", file=sys.stderr)
    return 0


def _run_serve(args: argparse.Namespace) -> int:
    """Serve until interrupted (the owner's command; see :mod:`dpsql.server.app`)."""
    from dpsql.server.app import serve

    serve(args.config, port=args.port, host=args.host)
    return 0


def _run_passwd(args: argparse.Namespace) -> int:
    """Print a verifier for a ``dpsql serve`` configuration's ``password:`` (never the password)."""
    from dpsql.server.scram import make_verifier

    if args.stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            raise UsageError("the passwords differ")
    if not password:
        raise UsageError("the password is empty")
    print(make_verifier(password))
    return 0


def _show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                  file: Any = None, line: str | None = None) -> None:
    """A warning as one line on stderr, its advice in flags (:func:`~dpsql.api.flags.in_flags`), above
    any progress bar: Python's own display named the ``dpsql`` script's file and line and quoted
    ``sys.exit(main())``, mid-bar."""
    tqdm.write(f"dpsql: warning: {in_flags(str(message))}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status (see the module docstring). Every failure
    is one line on stderr, never a traceback: a traceback, or DuckDB's message, may quote private data.
    Every warning is one line on stderr too (:func:`_show_warning`)."""
    args = parser().parse_args(argv)
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    """:func:`main`'s command, its failures each one line on stderr."""
    try:
        if args.command == "validate":
            return _run_validate(args)
        if args.command == "schema":
            return _run_schema(args)
        if args.command == "serve":
            return _run_serve(args)
        if args.command == "passwd":
            return _run_passwd(args)
        if args.command == "budget":
            _ledger_of_config(args)
        _check_args(args)
        if args.command == "budget":
            return _run_budget(args)
        if args.command == "query":
            return _run_query(args, args.sql, single=True)
        if args.command == "synth":
            return _run_synth(args)
        return _run_query(args, args.sql_text, single=False)
    except Error as e:
        print(f"dpsql: {type(e).__name__}: {in_flags(str(e))}", file=sys.stderr)
        return 2
    except UsageError as e:
        print(f"dpsql: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # whatever reads stdout stopped (dpsql budget | head): stop quietly, as cat does
        with contextlib.suppress(OSError, ValueError):  # else Python reports stdout's failed flush at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (OSError, ValueError) as e:
        print(f"dpsql: {e}", file=sys.stderr)
        return 1
    except duckdb.Error as e:  # its message may quote a value of the private table
        print(f"dpsql: DuckDB failed ({type(e).__name__}); its message is not shown: it may quote private data",
              file=sys.stderr)
        return 1
    except Exception as e:  # a bug: named by its class only, for the same reason
        print(f"dpsql: unexpected {type(e).__name__}; its message is not shown: it may quote private data",
              file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("dpsql: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
