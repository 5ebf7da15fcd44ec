"""Results a person can read and trust (issue 39, item 5): numbers to significant digits, the
header's error per answer column, statements labelled by their SQL, every statement in the
ledger, provenance in --out files, repeats answered for free, results registered by name,
and the notebook, Arrow, Polars and plot forms."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
import os
import re
import sys

import duckdb
import numpy as np
import pandas as pd
import pytest
import yaml

import dpsql
from dpsql.api.cli import main
from dpsql.engine import Request
from dpsql.engine.answer import significant
from dpsql.engine.dataset import Dataset
from dpsql.errors import DependencyError, WorkloadError
from dpsql.private.ledger import Ledger

SCHEMA = {"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 2},
                                    "b": {"type": "integer", "min": 0, "max": 6}}}
COUNT = "SELECT a, COUNT(*) AS n FROM t GROUP BY a"
RATIO = "SELECT a, AVG(b) / 1000 AS r, SUM(b) AS s FROM t GROUP BY a"


def table() -> duckdb.DuckDBPyConnection:
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT range % 3 AS a, range % 7 AS b FROM range(300)")
    return con


def connect(budget: float = 10.0, ledger=None) -> dpsql.Connection:
    return dpsql.connect(table(), schema=SCHEMA, budget=dpsql.Budget(epsilon=budget), ledger=ledger, cache=False,
                         progress=False)


@pytest.fixture(scope="module")
def batch():
    db = connect()
    return db, db.batch([COUNT, RATIO], epsilon=0.5, noise="laplace")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    table().sql("SELECT * FROM t").write_parquet(str(d / "t.parquet"))
    (d / "t.yaml").write_text(yaml.safe_dump(SCHEMA))
    return d


def cli(capsys, *argv: str) -> str:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert rc == 0, err
    return out


def rows(text: str, header: str) -> list[list[str]]:
    """The rows printed under the table header line that starts with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [header])
    return [line.split() for line in lines[start + 1:] if line.strip() and not line.startswith("--")]


# -- numbers to significant digits ---------------------------------------------------------------

def test_a_ratios_standard_error_prints_to_significant_digits(batch):
    """A ratio's standard error (about 0.001) printed as 0.00 at two decimals."""
    _, (_, ratio) = batch
    printed = rows(repr(ratio), "a")
    columns = list(ratio.df.columns)
    for line, (_, want) in zip(printed, ratio.df.iterrows()):
        for name in ("r", "r_std_error", "r_ci_low", "r_ci_high", "s_std_error"):
            value = float(line[columns.index(name)].replace(",", ""))
            assert value == pytest.approx(want[name], rel=1e-3) and value != 0


@pytest.mark.parametrize("value,text", [(0.00123456, "0.001235"), (37.3755, "37.38"), (12345.6, "12,346"),
                                        (-11.6, "-11.60"), (0.0, "0"), (float("nan"), "nan"), (1e-12, "1e-12")])
def test_significant(value, text):
    assert significant(value) == text


def test_budgets_print_rounded(files, tmp_path, capsys):
    """Balances printed as 0.10000000000000009 and 0.30000000000000004 (the ledger's float sums)."""
    common = ["--data", str(files / "t.parquet"), "--schema", str(files / "t.yaml"), "--ledger",
              str(tmp_path / "l.ledger"), "--noise", "laplace"]
    cli(capsys, "query", COUNT, *common, "--epsilon", "0.1", "--budget-epsilon", "0.4")
    out = cli(capsys, "query", "SELECT b, COUNT(*) AS n FROM t GROUP BY b", *common, "--epsilon", "0.2")
    assert "-- remaining budget: epsilon=0.1, delta=0" in out
    with Ledger(tmp_path / "l.ledger") as led:
        assert led.spent().epsilon == 0.1 + 0.2 != 0.3 and led.remaining().epsilon == 0.4 - (0.1 + 0.2) != 0.1
    out = cli(capsys, "budget", "--ledger", str(tmp_path / "l.ledger"))
    assert "spent:     epsilon=0.3, delta=0" in out and "remaining: epsilon=0.1, delta=0" in out
    assert "000000" not in out.replace(".000000", "")  # no float noise digits, anywhere


# -- the header --------------------------------------------------------------------------------

def test_header_rmse_is_per_answer_column(batch):
    """The header showed the RMSE over every measured query of the batch (internal SUMs and COUNTs
    included), not the error of the answers asked for."""
    _, (count, ratio) = batch
    df = ratio.df
    want = {name: math.sqrt(float(np.mean(df[f"{name}_std_error"] ** 2))) for name in ("r", "s")}
    assert ratio.answer_rmse == pytest.approx(want, rel=1e-12)
    line = next(line for line in repr(ratio).splitlines() if "RMSE" in line)
    assert line == f"-- expected RMSE: r {significant(want['r'])}, s {significant(want['s'])}"
    assert significant(ratio.rmse) not in line
    assert count.answer_rmse == pytest.approx({"n": math.sqrt(float(np.mean(count.df["std_error"] ** 2)))})


def test_statements_of_a_batch_are_labelled_by_their_sql(batch, files, tmp_path, capsys):
    _, results = batch
    for res, sql in zip(results, [COUNT, "SELECT a, AVG(b) / 1000 AS r, SUM(b) AS s FROM t GROUP BY a"]):
        assert repr(res).splitlines()[0] == f"-- {sql}"
    (tmp_path / "q.sql").write_text(f"{COUNT};\n{RATIO}\n   ;")
    out = cli(capsys, "batch", str(tmp_path / "q.sql"), "--data", str(files / "t.parquet"), "--schema",
              str(files / "t.yaml"), "--ledger", str(tmp_path / "l.ledger"), "--budget-epsilon", "1",
              "--epsilon", "0.5", "--noise", "laplace")
    heads = [line for line in out.splitlines() if line.startswith("-- SELECT")]
    assert heads == [f"-- {COUNT}", "-- SELECT a, AVG(b) / 1000 AS r, SUM(b) AS s FROM t GROUP BY a"]


def test_every_statement_of_a_batch_is_shown_from_the_ledger(files, tmp_path, capsys):
    """``dpsql budget`` showed the first line of a release's description: a batch's first statement."""
    ledger = str(tmp_path / "l.ledger")
    (tmp_path / "q.sql").write_text(f"{COUNT};\n{RATIO};\nSELECT\n  b, COUNT(*) AS m\nFROM t GROUP BY b")
    cli(capsys, "batch", str(tmp_path / "q.sql"), "--data", str(files / "t.parquet"), "--schema",
        str(files / "t.yaml"), "--ledger", ledger, "--budget-epsilon", "1", "--epsilon", "0.5", "--noise", "laplace")
    (e,) = Ledger(ledger).entries()
    out = cli(capsys, "budget", "--ledger", ledger)
    lines = out.splitlines()
    at = lines.index(f"    #1 {e.time} {e.mechanism} epsilon=0.5, delta=0")
    assert lines[at + 1:at + 4] == [f"        {COUNT}",
                                    "        SELECT a, AVG(b) / 1000 AS r, SUM(b) AS s FROM t GROUP BY a",
                                    "        SELECT b, COUNT(*) AS m FROM t GROUP BY b"]


# -- provenance in --out files -------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_out_files_carry_their_provenance(files, tmp_path, capsys, fmt):
    (tmp_path / "q.sql").write_text(f"{COUNT};\n{RATIO}")
    ledger = str(tmp_path / "l.ledger")
    cli(capsys, "batch", str(tmp_path / "q.sql"), "--data", str(files / "t.parquet"), "--schema",
        str(files / "t.yaml"), "--ledger", ledger, "--budget-epsilon", "1", "--epsilon", "0.5", "--noise", "laplace",
        "--out", str(tmp_path / "out"), "--format", fmt)
    (e,) = Ledger(ledger).entries()
    for name, sql, errors in [("q01", COUNT, {"n": ("std_error", "ci_low", "ci_high")}),
                              ("q02", "SELECT a, AVG(b) / 1000 AS r, SUM(b) AS s FROM t GROUP BY a",
                               {c: (f"{c}_std_error", f"{c}_ci_low", f"{c}_ci_high") for c in ("r", "s")})]:
        path = tmp_path / "out" / f"{name}.{fmt}"
        if fmt == "csv":
            meta = json.loads((tmp_path / "out" / f"{name}.json").read_text())
        else:
            ((text,),) = duckdb.sql(f"SELECT decode(value) FROM parquet_kv_metadata('{path}') "
                                    "WHERE decode(key) = 'dpsql'").fetchall()
            meta = json.loads(text)
        df = duckdb.sql(f"SELECT * FROM '{path}'").df()
        assert (meta["sql"], meta["mechanism"], meta["epsilon"], meta["delta"], meta["ledger_entry"]) == (
            sql, "laplace", e.cost.epsilon, e.cost.delta, e.id)
        assert meta["confidence"] == 0.95 and meta["repeated"] is False
        assert {c: (v["std_error"], v["ci_low"], v["ci_high"]) for c, v in meta["errors"].items()} == errors
        for column, (se, _, _) in errors.items():
            assert meta["errors"][column]["expected_rmse"] == pytest.approx(math.sqrt(np.mean(df[se] ** 2)))
    assert not [n for n in os.listdir(tmp_path / "out") if n.startswith(".")]


# -- repeats -----------------------------------------------------------------------------------

def test_a_repeated_batch_is_answered_from_its_release_for_free():
    db = connect(budget=1.0)
    first = db.batch([COUNT, RATIO], epsilon=0.25, noise="laplace")
    again = db.batch(f"{COUNT};\n  {RATIO.lower().replace('select', 'SELECT')}", epsilon=0.25, noise="laplace")
    assert db.spent().epsilon == 0.25 and len(db.ledger.entries()) == 1
    for a, b in zip(first, again):
        pd.testing.assert_frame_equal(a.df, b.df, check_exact=True)
        assert b.repeated and not a.repeated and b.release.entry == a.release.entry == 1
        assert "a repeat: the release of ledger entry 1 again, nothing spent now" in repr(b)
    db.batch([COUNT, RATIO], epsilon=0.5, noise="laplace")  # another spend: measured anew
    db.batch([COUNT, RATIO], epsilon=0.25, noise="laplace", confidence=0.9)  # another interval: anew
    assert db.spent().epsilon == 1.0
    again = db.batch([COUNT, RATIO], epsilon=0.25, noise="laplace")  # the budget is spent, the repeat is free
    pd.testing.assert_frame_equal(first[1].df, again[1].df, check_exact=True)


def test_repeats_are_per_analyst():
    ds = Dataset.open(table(), schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), cache=False, progress=False)
    alice, bob = ds.engine("alice"), ds.engine("bob")
    request = Request(COUNT, epsilon=0.25, noise="laplace")
    (a1,) = alice.run(request)
    (b1,) = bob.run(request)
    (a2,) = alice.run(request)
    (b2,) = bob.run(request)
    assert [e.analyst for e in ds.ledger.entries()] == ["alice", "bob"]
    assert not a1.release.repeated and not b1.release.repeated and a2.release.repeated and b2.release.repeated
    pd.testing.assert_frame_equal(a1.df, a2.df, check_exact=True)
    pd.testing.assert_frame_equal(b1.df, b2.df, check_exact=True)
    assert not a1.df.equals(b1.df)  # bob got his own noise, not alice's release


def test_repeats_persist_across_processes_but_not_across_ledgers(files, tmp_path, capsys):
    ledger = tmp_path / "l.ledger"
    common = ["--data", str(files / "t.parquet"), "--schema", str(files / "t.yaml"), "--ledger", str(ledger),
              "--budget-epsilon", "1", "--epsilon", "0.5", "--noise", "laplace"]
    cli(capsys, "query", RATIO, *common, "--out", str(tmp_path / "one.csv"))
    out = cli(capsys, "query", RATIO, *common, "--out", str(tmp_path / "two.csv"))
    assert "a repeat: the release of ledger entry 1 again, nothing spent now" in out
    assert (tmp_path / "one.csv").read_bytes() == (tmp_path / "two.csv").read_bytes()
    assert len(Ledger(ledger).entries()) == 1
    assert json.loads((tmp_path / "two.json").read_text())["repeated"] is True
    assert os.stat(f"{ledger}.released").st_mode & 0o777 == 0o600  # every analyst's releases: the owner's only
    ledger.unlink()  # a new ledger of the same name: the old releases are not its own
    out = cli(capsys, "query", RATIO, *common, "--out", str(tmp_path / "three.csv"))
    assert "a repeat:" not in out and len(Ledger(ledger).entries()) == 1
    assert (tmp_path / "one.csv").read_bytes() != (tmp_path / "three.csv").read_bytes()


def test_a_repeat_is_not_served_once_its_ledger_entry_is_edited(tmp_path):
    """A release is served again only while its ledger entry is unchanged: an edited entry (here its time, as a
    rewrite of the entry would change it) is refused as an edited ledger, and nothing is served."""
    import sqlite3

    path = tmp_path / "l.ledger"
    db = connect(budget=1.0, ledger=str(path))
    (first,) = db.batch([COUNT], epsilon=0.25, noise="laplace")
    assert db.query(COUNT, epsilon=0.25, noise="laplace").repeated
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE entries SET time = '2000-01-01T00:00:00.000000+00:00' WHERE id = ?",
                     (first.release.entry,))
    with pytest.raises(dpsql.LedgerError, match="entry 1 does not chain"):
        db.query(COUNT, epsilon=0.25, noise="laplace")
    db.close()


def test_keeping_a_release_reads_nothing_from_the_ledger_and_serving_it_one_entry(tmp_path):
    """The release names its ledger entry (id and time, from the kernel's spend), so keeping it reads nothing
    from the ledger, and serving it again reads that entry alone (reading them all took 22 ms a request)."""
    from dpsql.engine.repeats import Repeats

    ds = Dataset.open(table(), schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), ledger=str(tmp_path / "l.ledger"),
                      cache=False, progress=False)
    alice = ds.engine("alice")
    (first,) = alice.run(Request(COUNT, epsilon=0.25, noise="laplace"))
    ((entry,),) = [ds.ledger.entries()]
    assert (first.release.entry, first.release.time) == (entry.id, entry.time)
    statements = []
    ds.ledger._conn.set_trace_callback(statements.append)
    repeats = Repeats(str(tmp_path / "other.ledger"))
    repeats.put(alice.ledger, "key", [first])
    assert statements == []
    (again,) = repeats.get(alice.ledger, "key")
    assert again.release.repeated and not [s for s in statements if "ORDER BY id" in s]
    assert repeats.get(ds.engine("bob").ledger, "key") is None
    repeats.close()
    ds.close()


# -- released data by name, and other forms --------------------------------------------------------

def test_register_makes_a_result_queryable_by_name(batch):
    db, (count, _) = batch
    relation = count.register("counts")
    assert relation.fetchall() == db.released.sql("SELECT * FROM counts").fetchall()
    ((total,),) = db.released.sql("SELECT SUM(n) FROM counts").fetchall()
    assert total == pytest.approx(count.df["n"].sum(), rel=1e-12)
    with pytest.raises(WorkloadError):
        count.register("counts")


def test_html_arrow_and_polars(batch):
    _, (count, _) = batch
    page = count._repr_html_()
    assert page.startswith(f"<p><code>-- {COUNT}<br>") and "<table" in page
    assert significant(count.df["n"].iloc[0]) in page
    arrow = count.arrow()
    assert arrow.column_names == list(count.df.columns) and arrow.column("n").to_pylist() == count.df["n"].tolist()
    polars = count.pl()
    assert polars.columns == list(count.df.columns) and polars["n"].to_list() == count.df["n"].tolist()


def test_missing_optional_packages_are_named(batch, monkeypatch):
    _, (count, _) = batch
    monkeypatch.setitem(sys.modules, "polars", None)  # what an absent package looks like to import
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(DependencyError, match=re.escape("pip install polars")):
        count.pl()
    with pytest.raises(ImportError, match=re.escape("pip install 'dpsql[plot]'")):
        count.plot()


def test_plot_draws_each_answer_with_its_interval(batch):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    _, (_, ratio) = batch
    ax = ratio.plot()
    assert isinstance(ax, matplotlib.axes.Axes)
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(v) for v in ratio.df["a"]]
    for container, column in zip(ax.containers, ["r", "s"]):
        line, _, (bars,) = container
        assert np.array_equal(line.get_ydata(), ratio.df[column].to_numpy())
        ends = np.array([[segment[0][1], segment[1][1]] for segment in bars.get_segments()])
        np.testing.assert_allclose(ends, ratio.df[[f"{column}_ci_low", f"{column}_ci_high"]].to_numpy(), rtol=1e-12)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["r", "s"]


def test_a_kept_release_reads_back_exactly():
    """What a repeat returns is the earlier table exactly: dtypes, missing values (None and NaN apart),
    infinities, -0.0 and every float's bits; a column JSON cannot carry exactly is not kept."""
    from dpsql.engine.answer import Answer, Release
    from dpsql.engine.repeats import _decode, _encode

    release = Release("laplace", 0.1, 0.0, 0.0, 1.0, "OPT_0", 3, 1, 7)
    df = pd.DataFrame({"k": ["x", None, "z"], "i": np.array([1, 2, 3]), "b": [True, False, True],
                       "f": [0.1, np.nan, -np.inf], "g": [1 / 3, -0.0, 1e300],
                       "o": pd.Series([1.5, None, np.nan], dtype=object), "j": np.array([4, -5, 6], dtype=np.int32),
                       "h": np.array([0.25, np.nan, np.inf], dtype=np.float32)})
    (back,) = _decode(_encode([Answer("SELECT 1", df, release, {"f": ("g", "g", "g")})]))
    pd.testing.assert_frame_equal(back.df, df, check_exact=True)
    assert back.df["o"].tolist()[1] is None and math.isnan(back.df["o"].tolist()[2])
    assert np.signbit(back.df["g"][1]) and back.errors == {"f": ("g", "g", "g")}
    assert back.release == dataclasses.replace(release, repeated=True)
    days = pd.DataFrame({"d": pd.Series([datetime.date(2020, 2, 29), None], dtype=object),
                         "t": pd.Series([datetime.datetime(2020, 2, 1, 0, 0, 0, 1), datetime.datetime(2021, 1, 1)],
                                        dtype=object)})  # a date column's groups, date_trunc's
    (back,) = _decode(_encode([Answer("SELECT 1", days, release)]))
    pd.testing.assert_frame_equal(back.df, days, check_exact=True)
    assert [type(v) for v in back.df["d"]] == [datetime.date, type(None)]
    stamps = pd.DataFrame({"d": pd.to_datetime(["2020-01-01 10:30", None]), "u": pd.to_datetime(["2020-01-01"], utc=True)
                           .append(pd.DatetimeIndex([None], tz="UTC"))})  # DuckDB's TIMESTAMP, after HAVING
    (back,) = _decode(_encode([Answer("SELECT 1", stamps, release)]))
    pd.testing.assert_frame_equal(back.df, stamps, check_exact=True)
    nanoseconds = pd.DataFrame({"d": pd.to_datetime(["2020-01-01 00:00:00.000000001"])})
    assert _encode([Answer("SELECT 1", nanoseconds, release)]) is None


def test_explain_says_whether_the_remaining_budget_affords_an_accuracy():
    """Planning by accuracy (issue 39): explain(..., std_error=) gives the epsilon that accuracy costs and
    whether what is left of the budget buys it, spending nothing either way."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT range % 3 AS a FROM range(30)")
    db = dpsql.connect(con, schema={"table": "t", "columns": {"a": {"type": "integer", "min": 0, "max": 2}}},
                       budget=dpsql.Budget(epsilon=3.0), cache=False, progress=False)
    sql = "SELECT a, COUNT(*) AS n FROM t GROUP BY a"
    db.query("SELECT COUNT(*) AS n FROM t", epsilon=2.0)
    cheap, dear = db.explain(sql, std_error=5.0, noise="laplace"), db.explain(sql, std_error=0.5, noise="laplace")
    assert cheap.cost.epsilon == pytest.approx(math.sqrt(2) / 5.0) and cheap.affordable
    assert dear.cost.epsilon == pytest.approx(math.sqrt(2) / 0.5) and not dear.affordable
    assert "-- the remaining budget (epsilon=1) affords it" in repr(cheap)
    assert "-- the remaining budget (epsilon=1) does not afford it" in repr(dear)
    assert cheap.remaining == db.remaining() and db.spent().epsilon == 2.0
