"""The ``dpsql`` command line (dpsql/api/cli.py): query, batch and budget.

Most tests call ``main([...])`` in-process; one runs ``python -m dpsql`` in a
subprocess. Every test has its own ledger in ``tmp_path``; the data files are
shared. The statements reuse a few workloads so that strategy selection (data
independent, cached on disk) stays cheap, and use ``--noise laplace`` unless
the mechanism matters.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pandas as pd
import pytest
import yaml
from sql_oracle import SCHEMA, make_table

import dpsql
from dpsql.api.cli import main
from dpsql.private.ledger import Ledger

REGION_SQL = "SELECT region, COUNT(*) AS n FROM people GROUP BY region"
SEX_SQL = "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"
REGIONS = ["E", "N", "S", "W"]
HUGE = ["--epsilon", "1e9", "--budget-epsilon", "1e10", "--noise", "laplace"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The people table as Parquet and CSV (plus a copy without region W), and its schema as YAML and JSON."""
    d = tmp_path_factory.mktemp("data")
    con = make_table(300, seed=11)
    con.sql("SELECT * FROM people").write_parquet(str(d / "people.parquet"))
    con.sql("SELECT * FROM people").write_csv(str(d / "people.csv"))
    con.sql("SELECT * FROM people WHERE region <> 'W'").write_parquet(str(d / "people_no_w.parquet"))
    (d / "people.yaml").write_text(yaml.safe_dump(SCHEMA))
    (d / "people.json").write_text(json.dumps(SCHEMA))
    return {"con": con, "dir": d, "parquet": str(d / "people.parquet"), "csv": str(d / "people.csv"),
            "no_w": str(d / "people_no_w.parquet"), "yaml": str(d / "people.yaml"),
            "json": str(d / "people.json")}


def exact(con, sql: str) -> dict:
    return {k: float(v) for k, v in con.sql(sql).fetchall()}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def error_lines(err: str) -> list[str]:
    """The CLI's own error lines (stderr may also hold a progress bar of a slow strategy selection)."""
    return [line for line in err.replace("\r", "\n").splitlines() if line.startswith("dpsql:")]


def entries(ledger: Path) -> list:
    with Ledger(ledger) as led:
        return led.entries()


def leftovers(directory: Path) -> list[str]:
    """Anything in ``directory`` that looks like a writer's temporary file."""
    return [n for n in os.listdir(directory) if n.startswith(".") or n.endswith(".tmp")]


def default_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


# -- query ------------------------------------------------------------------------------------

def test_query_out_csv_exact_counts(data, tmp_path, capsys):
    out = tmp_path / "res" / "regions.csv"
    ledger = tmp_path / "l.ledger"
    rc, stdout, err = run(capsys, "query", REGION_SQL, "--data", data["parquet"], "--schema", data["yaml"],
                          "--ledger", str(ledger), "--out", str(out), *HUGE)
    assert rc == 0, err
    assert "wrote 1 file" in stdout and str(out) in stdout
    assert "-- remaining budget: epsilon=9000000000, delta=0" in stdout
    df = pd.read_csv(out)
    assert list(df.columns) == ["region", "n", "std_error", "ci_low", "ci_high"]
    assert sorted(df["region"]) == REGIONS and len(df) == 4  # one row per declared value
    want = exact(data["con"], "SELECT region, COUNT(*) FROM people GROUP BY region")
    assert sum(want.values()) == 300
    for row in df.itertuples():
        assert row.n == pytest.approx(want[row.region], abs=1e-6)
        assert 0 < row.std_error < 1e-6
        assert row.ci_low <= row.n <= row.ci_high
    # the writer's temp files + renames leave only the result and its provenance, with the usual file mode
    assert sorted(os.listdir(out.parent)) == ["regions.csv", "regions.json"]
    assert os.stat(out).st_mode & 0o777 == default_mode()
    # one release, recorded with the requested spend
    (e,) = entries(ledger)
    assert e.cost.epsilon == 1e9 and e.cost.delta == 0 and e.mechanism.startswith("laplace")
    assert "GROUP BY region" in e.description


def test_query_out_parquet_covers_declared_domain(data, tmp_path, capsys):
    # the data has no region W, but W is in the declared domain: it gets a row, with count ~0
    out = tmp_path / "regions.parquet"
    rc, stdout, err = run(capsys, "query", REGION_SQL, "--data", data["no_w"], "--schema", data["json"],
                          "--ledger", str(tmp_path / "l.ledger"), "--out", str(out), *HUGE)
    assert rc == 0, err
    rel = duckdb.sql(f"SELECT * FROM read_parquet('{out}') ORDER BY region")
    assert rel.columns == ["region", "n", "std_error", "ci_low", "ci_high"]
    rows = rel.fetchall()
    assert [r[0] for r in rows] == REGIONS
    want = exact(data["con"], "SELECT region, COUNT(*) FROM people WHERE region <> 'W' GROUP BY region")
    want["W"] = 0.0
    for region, n, se, lo, hi in rows:
        assert n == pytest.approx(want[region], abs=1e-6)
        assert lo <= n <= hi and se > 0
    assert not leftovers(tmp_path)
    # .key: the cache's; .released: the releases a repeat is answered from (dpsql.engine.repeats)
    assert sorted(os.listdir(tmp_path)) == ["l.ledger", "l.ledger.key", "l.ledger.released", "regions.parquet"]
    assert os.stat(out).st_mode & 0o777 == default_mode()


def test_a_headerless_space_padded_file_is_read_with_names_and_trim(tmp_path, capsys):
    """UCI's adult.data style: no header line, ', ' between values, a name that is not .csv. --names and --trim
    read it as dpsql.CSV(path, names=, trim=) does; the errors without them name these flags."""
    rows = [(39, "State-gov", "Male"), (50, "Private", "Female"), (38, "Private", "Male"), (28, "Private", "Female"),
            (53, "Private", "Male")] * 20
    path = tmp_path / "adult.data"
    path.write_text("".join(f"{age}, {work}, {sex}\n" for age, work, sex in rows))
    schema = tmp_path / "adult.yaml"
    schema.write_text(yaml.safe_dump({"table": "adult", "columns": {
        "age": {"type": "integer", "min": 17, "max": 90},
        "workclass": {"type": "categorical", "values": ["Private", "State-gov"]},
        "sex": {"type": "categorical", "values": ["Female", "Male"]}}}))
    ledger = tmp_path / "l.ledger"
    common = ["--data", str(path), "--schema", str(schema), "--ledger", str(ledger), *HUGE]
    sql = "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex"

    rc, _, err = run(capsys, "query", sql, *common)
    assert rc == 2 and "--names (a file without a header line) or --trim" in err and "dpsql.CSV" not in err
    rc, _, err = run(capsys, "query", sql, *common, "--trim")  # its first line read as a header
    assert rc == 2 and "name the file's columns in order: --names col1,col2,..." in err
    rc, _, err = run(capsys, "query", sql, *common, "--names", "age, workclass, sex")  # ' Male' is no value
    assert rc == 2 and "with --trim," in err and "dpsql.CSV" not in err
    assert not ledger.exists()  # every refusal before the ledger

    rc, out, err = run(capsys, "query", sql, *common, "--names", "age,workclass,sex", "--trim", "--out",
                       str(tmp_path / "n.csv"))
    assert rc == 0, err
    got = dict(pd.read_csv(tmp_path / "n.csv")[["sex", "n"]].itertuples(index=False))
    assert got == pytest.approx({"Female": 40.0, "Male": 60.0}, abs=1e-6)
    rc, out, err = run(capsys, "validate", "--data", str(path), "--schema", str(schema), "--names",
                       "age,workclass,sex", "--trim")
    assert rc == 0, err


def test_query_csv_data_prints_to_stdout(data, tmp_path, capsys):
    # CSV input, no --out: the answer table goes to stdout, NULL is a group of a nullable column
    rc, stdout, err = run(capsys, "query", SEX_SQL, "--data", data["csv"], "--schema", data["yaml"],
                          "--ledger", str(tmp_path / "l.ledger"), *HUGE)
    assert rc == 0, err
    assert "laplace noise, epsilon=1000000000" in stdout
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["sex", "n"])
    table = {line.split()[0]: float(line.split()[1]) for line in lines[header + 1:header + 4]}
    want = exact(data["con"], "SELECT coalesce(sex, 'None'), COUNT(*) FROM people GROUP BY 1")
    assert set(table) == {"F", "M", "None"}
    for k, v in table.items():
        assert v == pytest.approx(want[k], abs=1e-3)


def test_query_explain_and_std_error(data, tmp_path, capsys):
    ledger = tmp_path / "l.ledger"
    base = ["--data", data["csv"], "--schema", data["yaml"], "--ledger", str(ledger), "--budget-epsilon", "10"]
    for argv in (["query", SEX_SQL, "--explain", "--epsilon", "0.5"], ["query", f"EXPLAIN {SEX_SQL}", "--epsilon", "0.5"]):
        rc, stdout, err = run(capsys, *argv, *base)
        assert rc == 0, err
        assert "would spend epsilon=0.5" in stdout and "std_error" in stdout
    assert entries(ledger) == []  # nothing spent
    rc, stdout, err = run(capsys, "query", SEX_SQL, "--std-error", "4", *base)
    assert rc == 0, err
    spent = entries(ledger)[0].cost.epsilon
    assert spent == pytest.approx(2**0.5 / 4, rel=1e-6)  # one count per group, sensitivity 1: sd √2/ε = 4


# -- batch ------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_batch_writes_one_file_per_statement(data, tmp_path, capsys, fmt):
    sql = tmp_path / "tables.sql"
    sql.write_text(f"-- two tables from one measurement\n{REGION_SQL};\n\n{SEX_SQL};\n")
    outdir = tmp_path / "results"
    ledger = tmp_path / "l.ledger"
    extra = [] if fmt == "csv" else ["--format", "parquet"]
    rc, stdout, err = run(capsys, "batch", str(sql), "--data", data["parquet"], "--schema", data["yaml"],
                          "--ledger", str(ledger), "--out", str(outdir), *HUGE, *extra)
    assert rc == 0, err
    assert sorted(os.listdir(outdir)) == sorted([f"q01.{fmt}", f"q02.{fmt}"] + (["q01.json", "q02.json"]
                                                                               if fmt == "csv" else []))
    assert "wrote 2 files" in stdout and "2 statements" in stdout
    frames = [duckdb.sql(f"SELECT * FROM '{outdir / f'q0{i}.{fmt}'}'").df() for i in (1, 2)]
    assert list(frames[0].columns) == ["region", "n", "std_error", "ci_low", "ci_high"]
    assert list(frames[1].columns) == ["sex", "n", "std_error", "ci_low", "ci_high"]
    assert sorted(frames[0]["region"]) == REGIONS
    assert len(frames[1]) == 3 and frames[1]["sex"].isna().sum() == 1
    want = exact(data["con"], "SELECT region, COUNT(*) FROM people GROUP BY region")
    for region, n in zip(frames[0]["region"], frames[0]["n"]):
        assert n == pytest.approx(want[region], abs=1e-6)
    want = exact(data["con"], "SELECT coalesce(sex, '?'), COUNT(*) FROM people GROUP BY 1")
    for sex, n in zip(frames[1]["sex"].fillna("?"), frames[1]["n"]):
        assert n == pytest.approx(want[sex], abs=1e-6)
    # one joint measurement: one ledger entry with the whole batch's spend
    (e,) = entries(ledger)
    assert e.cost.epsilon == 1e9
    assert "GROUP BY region" in e.description and "GROUP BY sex" in e.description


# -- the ledger and the budget subcommand -----------------------------------------------------

def test_new_ledger_needs_a_budget(data, tmp_path, capsys):
    ledger = tmp_path / "new.ledger"
    out = tmp_path / "x.csv"
    rc, stdout, err = run(capsys, "query", REGION_SQL, "--data", data["parquet"], "--schema", data["yaml"],
                          "--ledger", str(ledger), "--epsilon", "0.5", "--noise", "laplace", "--out", str(out))
    assert rc == 2
    (line,) = err.strip().splitlines()
    assert line.startswith("dpsql:") and "--budget-epsilon" in line and str(ledger) in line
    assert not ledger.exists() and not out.exists() and stdout == ""
    rc, stdout, err = run(capsys, "budget", "--ledger", str(ledger))
    assert rc == 2 and "--budget-epsilon" in err and not ledger.exists()


def _budget_report(stdout: str) -> dict:
    fields = {}
    for line in stdout.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and key in ("budget", "spent", "remaining"):
            fields[key] = value.strip()
    return fields


def test_the_printed_remaining_budget_can_be_spent_exactly(data, tmp_path, capsys):
    """The remaining budget was printed with 6 significant digits (0.876544 of 0.8765436 left), so
    spending what was printed was refused; it is now printed to 12, within the ledger's tolerance."""
    common = ["--data", data["parquet"], "--schema", data["yaml"], "--ledger", str(tmp_path / "l.ledger"),
              "--noise", "laplace"]
    rc, stdout, err = run(capsys, "query", SEX_SQL, *common, "--epsilon", "0.1234564", "--budget-epsilon", "1")
    assert rc == 0, err
    printed = re.search(r"-- remaining budget: epsilon=(\S+), delta=0", stdout).group(1)
    assert float(printed) == pytest.approx(1 - 0.1234564, rel=1e-12)
    rc, stdout, err = run(capsys, "query", SEX_SQL, *common, "--epsilon", printed)
    assert rc == 0, err
    assert "-- remaining budget: epsilon=0, delta=0" in stdout


def test_budget_subcommand_matches_ledger(data, tmp_path, capsys):
    ledger = tmp_path / "l.ledger"
    common = ["--data", data["parquet"], "--schema", data["yaml"], "--ledger", str(ledger), "--noise", "laplace"]
    assert run(capsys, "query", REGION_SQL, *common, "--epsilon", "0.25", "--budget-epsilon", "1")[0] == 0
    assert run(capsys, "query", SEX_SQL, *common, "--epsilon", "0.5")[0] == 0  # existing ledger: no budget needed
    rc, stdout, err = run(capsys, "budget", "--ledger", str(ledger))
    assert rc == 0, err
    with Ledger(ledger) as led:
        spent, remaining, recorded = led.spent(), led.remaining(), led.entries()
    assert spent.epsilon == 0.75
    assert spent.delta == remaining.delta == 0
    assert _budget_report(stdout) == {"budget": "epsilon=1, delta=0", "spent": f"epsilon={spent.epsilon:.12g}, delta=0",
                                      "remaining": f"epsilon={remaining.epsilon:.12g}, delta=0"}
    assert "2 releases" in stdout
    lines = [line.strip() for line in stdout.splitlines() if line.strip().startswith("#")]
    assert len(lines) == len(recorded) == 2
    for line, e, sql in zip(lines, recorded, [REGION_SQL, SEX_SQL]):
        assert line == f"#{e.id} {e.time} {e.mechanism} epsilon={e.cost.epsilon:.12g}, delta=0"
        assert f"{line}\n        {sql}\n" in stdout


def test_over_budget_is_refused(data, tmp_path, capsys):
    ledger = tmp_path / "l.ledger"
    outdir = tmp_path / "out"
    outdir.mkdir()
    common = ["--data", data["parquet"], "--schema", data["yaml"], "--ledger", str(ledger), "--noise", "laplace"]
    assert run(capsys, "query", REGION_SQL, *common, "--epsilon", "0.75", "--budget-epsilon", "1")[0] == 0
    before = entries(ledger)
    out = outdir / "x.csv"
    rc, stdout, err = run(capsys, "query", REGION_SQL, *common, "--epsilon", "0.5", "--out", str(out))
    assert rc == 2
    (line,) = error_lines(err)
    assert "BudgetExceededError" in line and "budget exceeded" in line and "remains" in line
    assert "remaining budget" not in stdout
    assert not out.exists() and os.listdir(outdir) == []
    assert entries(ledger) == before
    # a batch over budget writes no --out directory either
    sql = tmp_path / "b.sql"
    sql.write_text(f"{REGION_SQL}; {SEX_SQL}")
    rc, stdout, err = run(capsys, "batch", str(sql), *common, "--epsilon", "0.5", "--out", str(tmp_path / "res"))
    assert rc == 2 and len(error_lines(err)) == 1 and "budget exceeded" in error_lines(err)[0]
    assert not (tmp_path / "res").exists() and entries(ledger) == before


def test_bad_sql_spends_nothing(data, tmp_path, capsys):
    ledger = tmp_path / "l.ledger"
    out = tmp_path / "x.csv"
    rc, stdout, err = run(capsys, "query", "SELECT nosuch, COUNT(*) FROM people GROUP BY nosuch",
                          "--data", data["parquet"], "--schema", data["yaml"], "--ledger", str(ledger),
                          "--epsilon", "0.5", "--budget-epsilon", "1", "--noise", "laplace", "--out", str(out))
    assert rc == 2
    (line,) = err.strip().splitlines()
    assert line.startswith("dpsql: UnknownColumnError:") and "nosuch" in line
    assert not out.exists()
    with Ledger(ledger) as led:
        assert led.entries() == [] and led.spent().epsilon == 0


def test_bad_out_extension_is_refused_before_spending(data, tmp_path, capsys):
    ledger = tmp_path / "l.ledger"
    common = ["--data", data["parquet"], "--schema", data["yaml"], "--ledger", str(ledger), "--noise", "laplace",
              "--epsilon", "0.5", "--budget-epsilon", "1"]
    assert run(capsys, "budget", "--ledger", str(ledger), "--budget-epsilon", "1")[0] == 0
    rc, stdout, err = run(capsys, "query", REGION_SQL, *common, "--out", str(tmp_path / "x.txt"))
    assert rc == 2 and ".csv or .parquet" in err
    assert entries(ledger) == [] and sorted(os.listdir(tmp_path)) == ["l.ledger"]


# -- zCDP -------------------------------------------------------------------------------------

def test_zcdp_gaussian(data, tmp_path, capsys):
    ledger = tmp_path / "z.ledger"
    # a fresh zCDP ledger reports its spend in rho, not epsilon
    rc, stdout, err = run(capsys, "budget", "--ledger", str(ledger), "--budget-rho", "1")
    assert rc == 0, err
    assert _budget_report(stdout) == {"budget": "rho=1", "spent": "rho=0", "remaining": "rho=1"}
    out = tmp_path / "sex.csv"
    rc, stdout, err = run(capsys, "query", SEX_SQL, "--data", data["parquet"], "--schema", data["yaml"],
                          "--ledger", str(ledger), "--budget-rho", "1", "--rho", "0.1", "--noise", "gaussian",
                          "--out", str(out))
    assert rc == 0, err
    assert "gaussian noise, rho=0.1" in stdout and "-- remaining budget: rho=0.9" in stdout
    df = pd.read_csv(out)
    assert list(df.columns) == ["sex", "n", "std_error", "ci_low", "ci_high"] and len(df) == 3
    # Gaussian sigma = sqrt(1 / (2 rho)) per measured query; errors are finite and positive
    assert (df["std_error"] > 0).all() and df["std_error"].lt(50).all()
    assert df["n"].sum() == pytest.approx(300, abs=200)
    with Ledger(ledger) as led:
        (e,) = led.entries()
        assert led.spent().rho == pytest.approx(0.1) and led.spent().epsilon == 0
        assert e.mechanism.startswith("gaussian")
    rc, stdout, err = run(capsys, "budget", "--ledger", str(ledger))
    assert _budget_report(stdout) == {"budget": "rho=1", "spent": "rho=0.1", "remaining": "rho=0.9"}
    assert f"#{e.id} {e.time} {e.mechanism} rho=0.1\n        {SEX_SQL}\n" in stdout
    # epsilon is the wrong currency for this ledger: refused, nothing spent
    rc, stdout, err = run(capsys, "query", SEX_SQL, "--data", data["parquet"], "--schema", data["yaml"],
                          "--ledger", str(ledger), "--epsilon", "0.1", "--rho", "0.1", "--noise", "gaussian")
    assert rc == 2 and "rho" in err and len(entries(ledger)) == 1


# -- atomic writes ----------------------------------------------------------------------------

def test_failed_write_leaves_no_temp_file(data, tmp_path, capsys, monkeypatch):
    def broken_to_csv(self, path, *args, **kwargs):
        Path(path).write_text("region,n\nE,")  # half a file, then the disk fills up
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", broken_to_csv)
    outdir = tmp_path / "out"
    outdir.mkdir()
    rc, stdout, err = run(capsys, "query", REGION_SQL, "--data", data["parquet"], "--schema", data["yaml"],
                          "--ledger", str(tmp_path / "l.ledger"), "--out", str(outdir / "x.csv"), *HUGE)
    assert rc == 1
    assert "No space left on device" in error_lines(err)[0]
    assert os.listdir(outdir) == []


def test_write_replaces_an_existing_file(data, tmp_path, capsys):
    out = tmp_path / "x.csv"
    out.write_text("old contents\n")
    rc, stdout, err = run(capsys, "query", REGION_SQL, "--data", data["parquet"], "--schema", data["yaml"],
                          "--ledger", str(tmp_path / "l.ledger"), "--out", str(out), *HUGE)
    assert rc == 0, err
    assert pd.read_csv(out).columns[0] == "region"
    assert sorted(os.listdir(tmp_path)) == ["l.ledger", "l.ledger.key", "l.ledger.released", "x.csv", "x.json"]


# -- the module entry point -------------------------------------------------------------------

def test_python_dash_m_dpsql(data, tmp_path):
    out = tmp_path / "regions.csv"
    ledger = tmp_path / "l.ledger"
    proc = subprocess.run([sys.executable, "-m", "dpsql", "query", REGION_SQL, "--data", data["csv"],
                           "--schema", data["yaml"], "--ledger", str(ledger), "--out", str(out), *HUGE],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "wrote 1 file" in proc.stdout
    df = pd.read_csv(out)
    want = exact(data["con"], "SELECT region, COUNT(*) FROM people GROUP BY region")
    assert dict(zip(df["region"], df["n"])) == pytest.approx(want, abs=1e-6)
    proc = subprocess.run([sys.executable, "-m", "dpsql", "budget", "--ledger", str(tmp_path / "none.ledger")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--budget-epsilon" in proc.stderr


def test_a_reader_that_stops_early_ends_the_output_quietly(tmp_path):
    """``dpsql budget | head -1``: the reader closes the pipe; dpsql printed "[Errno 32] Broken pipe"."""
    ledger = tmp_path / "l.ledger"
    with Ledger(ledger, dpsql.Budget(epsilon=10.0)) as led:
        for _ in range(1000):  # about 100 kB of history lines: more than a pipe holds
            led.spend(dpsql.Cost(epsilon=0.001), description="SELECT COUNT(*) FROM people", mechanism="laplace")
    proc = subprocess.Popen([sys.executable, "-m", "dpsql", "budget", "--ledger", str(ledger)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("ledger ")
    proc.stdout.close()
    assert proc.wait(timeout=120) == 1 and proc.stderr.read() == ""
    proc.stderr.close()


# -- refusals spend nothing ---------------------------------------------------------------------

def _unwritable_outs(tmp_path: Path) -> list:
    """``--out`` paths that cannot be written, even by root: under a file, and a directory that is a file."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a directory\n")
    return [blocker / "x.csv", blocker / "sub" / "x.csv", blocker]


@pytest.mark.parametrize("command", ["query", "batch"])
def test_unwritable_out_is_refused_before_spending(data, tmp_path, capsys, command):
    ledger = tmp_path / "l.ledger"
    sql = tmp_path / "b.sql"
    sql.write_text(f"{REGION_SQL}; {SEX_SQL}")
    first = [REGION_SQL] if command == "query" else [str(sql)]
    common = ["--data", data["parquet"], "--schema", data["yaml"], "--ledger", str(ledger), *HUGE]
    assert run(capsys, "budget", "--ledger", str(ledger), "--budget-epsilon", "1e10")[0] == 0
    for out in _unwritable_outs(tmp_path):
        if command == "query" and out.name == "blocker":
            continue  # a query's --out that is a file without .csv/.parquet is refused by its name already
        rc, stdout, err = run(capsys, command, *first, *common, "--out", str(out))
        assert rc == 2, (out, err)
        (line,) = err.strip().splitlines()
        assert line.startswith(f"dpsql: --out {out}: cannot write in") and "nothing was spent" in line
        assert entries(ledger) == []
    assert sorted(os.listdir(tmp_path)) == ["b.sql", "blocker", "l.ledger"]


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_out_directory_is_refused_before_spending(data, tmp_path, capsys):
    ledger = tmp_path / "l.ledger"
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        for out in (locked / "x.csv", locked / "new" / "x.csv"):
            rc, stdout, err = run(capsys, "query", REGION_SQL, "--data", data["parquet"], "--schema", data["yaml"],
                                  "--ledger", str(ledger), "--out", str(out), *HUGE)
            assert rc == 2 and "cannot write in" in err and "Permission denied" in err
            assert not ledger.exists() or entries(ledger) == []
        assert os.listdir(locked) == []
    finally:
        locked.chmod(0o700)


def test_out_directories_are_created_only_when_the_result_is_written(data, tmp_path, capsys):
    """The writability check creates missing directories and removes them again: a refused
    request leaves nothing behind, an answered one writes into them."""
    ledger = tmp_path / "l.ledger"
    out = tmp_path / "a" / "b" / "x.csv"
    common = ["--data", data["parquet"], "--schema", data["yaml"], "--ledger", str(ledger), "--noise", "laplace"]
    rc, stdout, err = run(capsys, "query", REGION_SQL, *common, "--epsilon", "2", "--budget-epsilon", "1",
                          "--out", str(out))
    assert rc == 2 and "BudgetExceededError" in err
    assert sorted(os.listdir(tmp_path)) == ["l.ledger"] and entries(ledger) == []
    rc, stdout, err = run(capsys, "query", REGION_SQL, *common, "--epsilon", "0.5", "--out", str(out))
    assert rc == 0, err
    assert sorted(os.listdir(out.parent)) == ["x.csv", "x.json"]


def test_unreadable_input_files_are_usage_errors(data, tmp_path, capsys):
    ledger = tmp_path / "l.ledger"
    common = ["--data", data["parquet"], "--schema", data["yaml"], "--ledger", str(ledger), *HUGE]
    rc, stdout, err = run(capsys, "batch", str(tmp_path / "missing.sql"), *common)
    assert rc == 2 and err.strip().startswith("dpsql: the batch file") and len(err.strip().splitlines()) == 1
    binary = tmp_path / "binary.sql"
    binary.write_bytes(b"\xff\xfe SELECT")
    rc, stdout, err = run(capsys, "batch", str(binary), *common)
    assert rc == 2 and "cannot be read" in err
    assert not ledger.exists()


@pytest.mark.parametrize("extra, match", [
    (["--rows", "-1"], "rows must be an integer >= 0, got rows=-1"),
    (["--rows", str(10**12)], "rows=1000000000000 means"),
    (["--method", "mwem", "--rounds", "0"], "rounds must be an integer >= 1, got rounds=0"),
    (["--method", "mwem", "--delta", "1e-6"], "MWEM is pure epsilon-DP"),
    (["--rounds", "3"], "pgm takes no option rounds"),
    (["--method", "fem", "--rounds", "0"], "rounds must be an integer >= 1"),
    (["--method", "aim"], "AIM is zCDP"),
    (["--method", "aim", "--delta", "1e-6", "--rounds", "0"], "rounds must be an integer >= 1"),
    (["--method", "dualquery", "--delta", "1e-6", "--rounds", "2", "--seed", "-3"], "seed must be an integer >= 0"),
    (["--seed", "-1"], "seed must be an integer >= 0"),
    (["--workload", "nosuch.sql"], "the --workload file nosuch.sql: cannot be read"),
    (["--workload", "a,nope"], "unknown column"),
    (["--epsilon", "1e-320"], "--epsilon 1e-320 is below the smallest epsilon dpsql answers with, 1e-06"),
    (["--option", "max_seconds"], "--option 'max_seconds': give NAME=VALUE"),
    (["--option", "nosuch=1"], "pgm takes no option nosuch"),
    (["--option", "sweeps=1", "--option", "sweeps=2"], "--option sweeps is given twice"),
    (["--option", "adaptive=maybe", "--delta", "1e-6"], "adaptive must be True or False, got adaptive='maybe'"),
    (["--option", "max_seconds=0.001", "--delta", "1e-6"], "max_seconds=0.001"),
])
def test_synth_refusals_leave_the_ledger_untouched(data, tmp_path, capsys, extra, match):
    ledger = tmp_path / "l.ledger"
    assert run(capsys, "budget", "--ledger", str(ledger), "--budget-epsilon", "10", "--budget-delta", "1e-5")[0] == 0
    spend = [] if "--epsilon" in extra else ["--epsilon", "1"]
    rc, stdout, err = run(capsys, "synth", "--data", data["parquet"], "--schema", data["yaml"], "--ledger", str(ledger),
                          "--workload", "region,sex", *spend, *extra, "--out", str(tmp_path / "syn.csv"))
    assert rc == 2, err
    (line,) = error_lines(err)
    assert match in line
    assert entries(ledger) == [] and not (tmp_path / "syn.csv").exists()


def test_synth_takes_the_methods_options(data, tmp_path, capsys):
    """--option passes a method's options (here pgm's sweeps and adaptive, and a max_seconds the run
    fits in) as Python's keyword arguments would."""
    ledger, out = tmp_path / "l.ledger", tmp_path / "syn.csv"
    rc, stdout, err = run(capsys, "synth", "--data", data["parquet"], "--schema", data["yaml"], "--ledger", str(ledger),
                          "--budget-epsilon", "2", "--budget-delta", "1e-5", "--epsilon", "1", "--delta", "1e-6",
                          "--workload", "region,sex", "--option", "sweeps=0", "--option", "adaptive=false",
                          "--option", "max_seconds=300", "--out", str(out))
    assert rc == 0, err
    (entry,) = entries(ledger)
    assert entry.mechanism == "pgm" and len(pd.read_csv(out)) > 0


def test_synth_defaults_to_pgm(data, tmp_path, capsys):
    """Without --method the table comes from PGM: under a pure epsilon, one Laplace measurement."""
    ledger, out = tmp_path / "l.ledger", tmp_path / "syn.csv"
    rc, stdout, err = run(capsys, "synth", "--data", data["parquet"], "--schema", data["yaml"], "--ledger", str(ledger),
                          "--budget-epsilon", "2", "--epsilon", "1", "--workload", "region,sex", "--out", str(out))
    assert rc == 0, err
    (entry,) = entries(ledger)
    assert entry.description.startswith("PGM: ") and entry.mechanism.startswith("laplace")
    assert entry.cost.epsilon == pytest.approx(1.0) and entry.cost.delta == 0
    assert len(pd.read_csv(out)) > 0


def test_synth_without_a_workload_makes_pythons_default_choice(data, tmp_path, capsys):
    """No --workload is Python's workload=None (every triple as the target, under a delta), not all
    pairs: the same ledger entry and the same measured marginals as db.synthesize() charges."""
    ledger, out = tmp_path / "l.ledger", tmp_path / "syn.csv"
    rc, stdout, err = run(capsys, "synth", "--data", data["parquet"], "--schema", data["yaml"], "--ledger", str(ledger),
                          "--budget-epsilon", "2", "--budget-delta", "1e-5", "--epsilon", "1", "--delta", "1e-6",
                          "--out", str(out))
    assert rc == 0, err
    (entry,) = entries(ledger)
    db = dpsql.connect(data["con"], schema=SCHEMA, budget=dpsql.Budget(epsilon=2, delta=1e-5), cache=False,
                       progress=False)
    syn = db.synthesize(epsilon=1, delta=1e-6, name="s")
    (python,) = db.ledger.entries()
    assert (entry.mechanism, entry.description, entry.cost) == (python.mechanism, python.description, python.cost)
    def triples(names) -> set[frozenset[str]]:  # the YAML schema lists the columns in another order
        return {frozenset(m.split(" x ")) for m in names if m.count(" x ") == 2}

    shown = [re.split(r"\s{2,}", line.strip())[0] for line in stdout.splitlines() if " x " in line]
    assert triples(syn.report.marginal) and triples(shown) == triples(syn.report.marginal)


def test_a_warning_is_one_line_in_the_command_lines_words(data, tmp_path, capsys):
    """A synthesis warning was Python's display: the ``dpsql`` script's file and line, ``UserWarning``,
    then ``sys.exit(main())``, mid progress bar, with Python's advice ("pass rows= to choose it").
    Now it is one ``dpsql: warning:`` line naming the flag."""
    ledger, out = tmp_path / "l.ledger", tmp_path / "syn.csv"
    rc, stdout, err = run(capsys, "synth", "--data", data["parquet"], "--schema", data["yaml"], "--ledger", str(ledger),
                          "--budget-epsilon", "2", "--epsilon", "0.001", "--workload", "region,sex", "--out", str(out))
    assert rc == 0, err
    lines = err.replace("\r", "\n").splitlines()
    (warned,) = [line for line in lines if "mostly noise" in line]
    assert warned.startswith("dpsql: warning: the noisy row count is ") and warned.endswith(
        ": at this spend the table's size is mostly noise (give --rows to choose it)")
    assert not any("UserWarning" in line or "sys.exit" in line for line in lines)


def test_the_reports_warnings_are_in_the_command_lines_words(data, tmp_path, capsys):
    """The report's warnings, printed after the table, kept Python's advice ("use method='pgm'")."""
    ledger, out = tmp_path / "l.ledger", tmp_path / "syn.csv"
    rc, stdout, err = run(capsys, "synth", "--data", data["parquet"], "--schema", data["yaml"], "--ledger", str(ledger),
                          "--budget-epsilon", "2", "--budget-delta", "1e-5", "--epsilon", "1", "--delta", "1e-6",
                          "--method", "fem", "--rounds", "2", "--workload", "region,sex", "--out", str(out))
    assert rc == 0, err
    (warned,) = [line for line in stdout.splitlines() if "expect a table near uniform" in line]
    assert warned.startswith("-- warning: FEM finds a cell off by 5% of the rows only on tables of more than about ")
    assert warned.endswith("--method pgm measures the marginals instead")


def test_public_table_marked_by_the_owner_on_the_command_line(data, tmp_path, capsys):
    db_file = tmp_path / "people.duckdb"
    with duckdb.connect(str(db_file)) as c:
        c.execute("CREATE TABLE people AS SELECT * FROM read_parquet(?)", [data["parquet"]])
        c.execute("CREATE TABLE labels AS SELECT * FROM (VALUES ('E', 'east'), ('W', 'west')) t(region, label)")
    schema = tmp_path / "s.yaml"
    schema.write_text(yaml.safe_dump({k: v for k, v in SCHEMA.items() if k != "public_tables"}))
    sql = "SELECT label, COUNT(*) AS n FROM people JOIN labels USING (region) GROUP BY label"
    args = ["query", sql, "--data", str(db_file), "--schema", str(schema), "--ledger", str(tmp_path / "l"), *HUGE]
    rc, _, err = run(capsys, *args)
    assert rc != 0 and "only a public lookup table" in err
    assert Ledger(tmp_path / "l").spent().epsilon == 0
    out = tmp_path / "n.csv"
    rc, _, err = run(capsys, *args, "--public-table", "labels", "--out", str(out))
    assert rc == 0, err
    want = exact(data["con"], "SELECT CASE region WHEN 'E' THEN 'east' ELSE 'west' END, COUNT(*) FROM people "
                              "WHERE region IN ('E', 'W') GROUP BY 1")
    got = pd.read_csv(out)
    assert dict(zip(got["label"], got["n"].round(3))) == want


# -- --out decided before the spend -------------------------------------------------------------

def test_batch_out_file_name_for_several_statements_is_refused_before_spending(data, tmp_path, capsys):
    """A .csv/.parquet --out names one file; a batch of several statements writes one per statement,
    so the name is refused before the spend, not after it (an existing file: "File exists"; a new
    name: a directory called new.csv)."""
    ledger = tmp_path / "l.ledger"
    sql = tmp_path / "b.sql"
    sql.write_text(f"{REGION_SQL}; {SEX_SQL};")
    existing = tmp_path / "res.csv"
    existing.write_text("old contents\n")
    common = ["--data", data["parquet"], "--schema", data["yaml"], "--ledger", str(ledger), *HUGE]
    assert run(capsys, "budget", "--ledger", str(ledger), "--budget-epsilon", "1e10")[0] == 0
    for out in (existing, tmp_path / "new.csv", tmp_path / "new.parquet"):
        rc, stdout, err = run(capsys, "batch", str(sql), *common, "--out", str(out))
        assert rc == 2, err
        (line,) = err.strip().splitlines()
        assert line.startswith(f"dpsql: --out {out}: a batch of 2 statements") and "nothing was spent" in line
        assert entries(ledger) == []
    assert existing.read_text() == "old contents\n"
    assert sorted(os.listdir(tmp_path)) == ["b.sql", "l.ledger", "res.csv"]
    # a batch of one statement writes the one file that the name gives
    sql.write_text(f"{REGION_SQL};")
    rc, stdout, err = run(capsys, "batch", str(sql), *common, "--out", str(existing))
    assert rc == 0, err
    assert pd.read_csv(existing).columns[0] == "region" and len(entries(ledger)) == 1


@pytest.mark.parametrize("command", ["query", "batch"])
def test_out_file_that_is_a_directory_is_refused_before_spending(data, tmp_path, capsys, command):
    ledger = tmp_path / "l.ledger"
    sql = tmp_path / "b.sql"
    sql.write_text(f"{REGION_SQL}; {SEX_SQL}")
    outdir = tmp_path / "res"
    blocked = outdir / ("q01.csv" if command == "query" else "q02.csv")
    blocked.mkdir(parents=True)
    first = [REGION_SQL] if command == "query" else [str(sql)]
    rc, stdout, err = run(capsys, command, *first, "--data", data["parquet"], "--schema", data["yaml"],
                          "--ledger", str(ledger), "--out", str(outdir), *HUGE)
    assert rc == 2, err
    (line,) = err.strip().splitlines()
    assert line == f"dpsql: --out {outdir}: {blocked} is a directory, not a file that can be written; nothing was spent"
    assert not ledger.exists() and os.listdir(outdir) == [blocked.name] and os.listdir(blocked) == []


@pytest.mark.parametrize("target, flag", [("ledger", "--ledger"), ("data", "--data"), ("schema", "--schema"),
                                          ("sql", "the batch file")])
def test_an_out_file_that_is_an_input_is_refused_before_spending(data, tmp_path, capsys, target, flag):
    """Writing the result over the ledger would erase the spend; over the data, the next request
    would measure the noisy result."""
    files = {"ledger": tmp_path / "l.csv", "data": tmp_path / "people.csv", "schema": tmp_path / "s.csv",
             "sql": tmp_path / "b.csv"}
    shutil.copy(data["csv"], files["data"])
    files["schema"].write_text(json.dumps(SCHEMA))
    files["sql"].write_text(REGION_SQL)
    before = {name: path.read_bytes() for name, path in files.items() if path.exists()}
    out = tmp_path / "." / files[target].name  # the same file by another spelling
    rc, stdout, err = run(capsys, "batch", str(files["sql"]), "--data", str(files["data"]), "--schema",
                          str(files["schema"]), "--ledger", str(files["ledger"]), "--out", str(out), *HUGE)
    assert rc == 2, err
    (line,) = error_lines(err)
    assert line == f"dpsql: --out {out}: {out} is {flag}, which the output would replace; nothing was spent"
    assert not files["ledger"].exists()
    assert {name: path.read_bytes() for name, path in files.items() if path.exists()} == before


@pytest.mark.parametrize("ledger", ["", ":memory:"])
def test_a_ledger_that_would_not_outlive_the_command_is_refused(data, capsys, ledger):
    rc, stdout, err = run(capsys, "query", REGION_SQL, "--data", data["parquet"], "--schema", data["yaml"],
                          "--ledger", ledger, *HUGE)
    assert rc == 2 and stdout == ""
    assert error_lines(err) == [f"dpsql: --ledger {ledger!r}: give the ledger file's path"]


# -- budget flags -------------------------------------------------------------------------------

@pytest.mark.parametrize("flags, message", [
    (["--budget-epsilon", "1", "--budget-rho", "1"], "--budget-rho (a zCDP budget) cannot be combined with "
                                                     "--budget-epsilon"),
    (["--budget-rho", "1", "--budget-delta", "1e-5"], "--budget-rho (a zCDP budget) cannot be combined with "
                                                      "--budget-delta"),
    (["--budget-rho", "1", "--budget-delta", "0"], "cannot be combined with --budget-delta"),
    (["--budget-delta", "1e-5"], "--budget-delta needs --budget-epsilon"),
])
@pytest.mark.parametrize("command", ["budget", "query"])
def test_contradictory_budget_flags_are_refused(data, tmp_path, capsys, flags, message, command):
    ledger = tmp_path / "l.ledger"
    request = [] if command == "budget" else [REGION_SQL, "--data", data["parquet"], "--schema", data["yaml"],
                                              "--epsilon", "0.5", "--noise", "laplace"]
    rc, stdout, err = run(capsys, command, *request, "--ledger", str(ledger), *flags)
    assert rc == 2
    (line,) = err.strip().splitlines()
    assert line.startswith("dpsql: ") and message in line
    assert stdout == "" and not ledger.exists()


# -- --explain with --std-error -----------------------------------------------------------------

@pytest.mark.parametrize("argv", [["query", SEX_SQL, "--explain"], ["query", f"EXPLAIN {SEX_SQL}"],
                                  ["batch", "BATCH", "--explain"]])
def test_explain_with_std_error_shows_what_that_accuracy_costs(data, tmp_path, capsys, argv):
    """--explain with --std-error plans by accuracy: it prints the spend that gives every COUNT and
    SUM that standard error, and every expected standard error is at most it; nothing is spent."""
    sql = tmp_path / "b.sql"
    sql.write_text(f"{REGION_SQL}; {SEX_SQL}")
    ledger = tmp_path / "l.ledger"
    argv = [str(sql) if a == "BATCH" else a for a in argv]
    rc, stdout, err = run(capsys, *argv, "--std-error", "10", "--data", data["parquet"], "--schema", data["yaml"],
                          "--ledger", str(ledger), "--budget-epsilon", "1", "--budget-delta", "1e-5")
    assert rc == 0, err
    head = stdout.splitlines()[0]
    assert head.startswith("-- would spend epsilon=") and "laplace" in head
    errors = [float(line.split()[-1]) for line in stdout.splitlines()[1:]
              if line.strip() and not line.lstrip().startswith(("--", "region", "sex"))]
    assert errors and max(errors) <= 10.0 + 1e-6 and max(errors) > 9.9
    assert Ledger(ledger).spent().epsilon == 0.0


# -- validate -----------------------------------------------------------------------------------

@pytest.fixture
def failing_view(tmp_path):
    """A .duckdb file whose view t CASTs 'zz' to INTEGER (failing on that row), its schema, and a
    connection to it."""
    db_file = tmp_path / "v.duckdb"
    with duckdb.connect(str(db_file)) as c:
        c.execute("CREATE TABLE raw AS SELECT * FROM (VALUES ('1'), ('zz'), ('3'), ('7')) v(a)")
        c.execute("CREATE VIEW t AS SELECT CAST(a AS INTEGER) AS a FROM raw")
    schema = {"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 4}}}
    schema_file = tmp_path / "v.yaml"
    schema_file.write_text(yaml.safe_dump(schema))
    return db_file, schema, schema_file


def test_validate_reads_a_failing_view_as_measurement_does(failing_view, capsys):
    import dpsql
    from dpsql.owner.validate import validate

    db_file, schema, schema_file = failing_view
    con = duckdb.connect(str(db_file), read_only=True)
    report = validate(con, schema)
    assert (report.rows, report.clean_rows) == (4, 2)
    (column,) = report.columns
    assert column.counts == {"null": 1, "outside": 1} and column.examples == ["7"]
    # what validate calls clean is what a measurement counts
    db = dpsql.connect(con, schema=schema, budget=dpsql.Budget(epsilon=1e10), cache=False, progress=False)
    counted = db.query("SELECT a, COUNT(*) AS n FROM t GROUP BY a", epsilon=1e9, noise="laplace").df["n"].sum()
    assert counted == pytest.approx(report.clean_rows, abs=1e-3)
    con.close()
    rc, stdout, err = run(capsys, "validate", "--data", str(db_file), "--schema", str(schema_file))
    assert rc == 3, err
    assert "a (INTEGER): 2 rows outside the domain: 1 null, 1 outside" in stdout


def test_validate_failures_are_dpsql_errors(failing_view, tmp_path, capsys):
    from dpsql.errors import MeasurementError
    from dpsql.owner.validate import validate

    db_file, schema, schema_file = failing_view
    rc, stdout, err = run(capsys, "validate", "--data", str(db_file), "--schema", str(schema_file), "--table", "nope")
    assert rc == 2 and stdout == ""
    (line,) = err.strip().splitlines()
    assert line == "dpsql: MeasurementError: validating table 'nope' failed: the data has no table or view of that name"
    # a view that fails where TRY cannot reach (an error() call) fails closed, naming only the class
    con = duckdb.connect()
    con.execute("CREATE TABLE raw AS SELECT * FROM (VALUES ('1'), ('zz')) v(a)")
    con.execute("CREATE VIEW t AS SELECT CASE WHEN a = 'zz' THEN error('SECRET zz') ELSE 1 END AS a FROM raw")
    with pytest.raises(MeasurementError, match=r"^validating table 't' failed: InvalidInputException$"):
        validate(con, schema)


# -- no traceback, no private data in a failure ----------------------------------------------------

def test_data_duckdb_cannot_open_is_one_line(data, tmp_path, capsys):
    """--data that DuckDB cannot open: one line on stderr, no traceback, nothing spent."""
    ledger = tmp_path / "l.ledger"
    for name in ("bad.duckdb", "bad.parquet"):
        bad = tmp_path / name
        bad.write_text("not a table")
        for argv in (["query", REGION_SQL, "--ledger", str(ledger), *HUGE], ["validate"]):
            rc, stdout, err = run(capsys, *argv, "--data", str(bad), "--schema", data["yaml"])
            assert rc in (1, 2) and stdout == ""
            (line,) = err.strip().splitlines()
            assert line.startswith("dpsql: ")
    assert not ledger.exists()


@pytest.mark.parametrize("error, status, shown", [
    (duckdb.ConversionException("Could not convert string 'SECRET' to INT32"), 1,
     "dpsql: DuckDB failed (ConversionException); its message is not shown: it may quote private data"),
    (RuntimeError("counts [SECRET]"), 1,
     "dpsql: unexpected RuntimeError; its message is not shown: it may quote private data"),
    (KeyboardInterrupt(), 130, "dpsql: interrupted"),
])
def test_unexpected_failures_are_one_line_without_their_message(data, tmp_path, capsys, monkeypatch, error, status,
                                                                shown):
    from dpsql.api.connection import Connection

    def failing(*args, **kwargs):
        raise error

    monkeypatch.setattr(Connection, "query", failing)
    try:
        rc, stdout, err = run(capsys, "query", REGION_SQL, "--data", data["parquet"], "--schema", data["yaml"],
                              "--ledger", str(tmp_path / "l.ledger"), *HUGE)
    except KeyboardInterrupt:  # escaping, it would stop the whole test session
        pytest.fail("KeyboardInterrupt escaped main")
    assert rc == status
    assert err.strip().splitlines() == [shown]
