"""The durable privacy-budget ledger: persistence, refusal, corruption, concurrency and crashes."""

import json
import math
import os
import signal
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from dpsql.budget import Budget, Cost
from dpsql.errors import BudgetExceededError, LedgerError, PrivacyError
from dpsql.ledger import Entry, Ledger

REPO = Path(__file__).resolve().parents[1]


def _python(script, *args, **kwargs):
    """Start ``python -c script args`` with this checkout importable."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], env=env, text=True, **kwargs)


# -- persistence and the stored budget ---------------------------------------


def test_reopen_sees_previous_spends(tmp_path):
    path = tmp_path / "ledger.db"
    budget = Budget(epsilon=1.0, delta=1e-6)
    with Ledger(path, budget) as ledger:
        assert ledger.path == str(path)
        first = ledger.spend(Cost(epsilon=0.25), description="count by age", mechanism="laplace")
        second = ledger.spend(Cost(epsilon=0.5, delta=1e-7), description="sum of income", mechanism="gaussian")
        assert second > first
        before = ledger.entries()

    with Ledger(path) as reopened:  # budget=None: the stored one
        assert reopened.budget == budget
        assert reopened.entries() == before
        assert [e.id for e in before] == [first, second]
        assert reopened.spent() == Cost(epsilon=0.75, delta=1e-7)
        assert reopened.remaining() == Cost(epsilon=0.25, delta=1e-6 - 1e-7)
        reopened.spend(Cost(epsilon=0.25))

    with Ledger(str(path), Budget(epsilon=1.0, delta=1e-6)) as same:  # the same budget is fine
        assert len(same.entries()) == 3
        assert same.spent().epsilon == 1.0
        assert same.remaining().epsilon == 0.0


def test_entry_fields(tmp_path):
    with Ledger(tmp_path / "l.db", Budget(rho=1.0)) as ledger:
        entry_id = ledger.spend(Cost(rho=0.125), description="histogram", mechanism="gaussian")
        (entry,) = ledger.entries()
    assert isinstance(entry, Entry)
    assert (entry.id, entry.cost, entry.mechanism, entry.description) == (
        entry_id, Cost(rho=0.125), "gaussian", "histogram")
    when = datetime.fromisoformat(entry.time)
    assert when.utcoffset().total_seconds() == 0
    assert abs((datetime.now(timezone.utc) - when).total_seconds()) < 60


def test_different_budget_is_refused(tmp_path):
    path = tmp_path / "ledger.db"
    Ledger(path, Budget(epsilon=1.0)).close()
    with pytest.raises(LedgerError) as info:
        Ledger(path, Budget(epsilon=2.0))
    message = str(info.value)
    assert str(path) in message and "epsilon=1.0" in message and "epsilon=2.0" in message
    with pytest.raises(LedgerError, match="rho=1.0"):
        Ledger(path, Budget(rho=1.0))
    with pytest.raises(LedgerError, match="delta=1e-06"):
        Ledger(path, Budget(epsilon=1.0, delta=1e-6))
    assert Ledger(path).budget == Budget(epsilon=1.0)


def test_new_ledger_needs_a_budget(tmp_path):
    path = tmp_path / "missing.db"
    with pytest.raises(LedgerError, match="needs a budget"):
        Ledger(path)
    assert not path.exists()
    with pytest.raises(LedgerError, match="needs a budget"):
        Ledger(None)
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    with pytest.raises(LedgerError, match="needs a budget"):
        Ledger(empty)
    with Ledger(empty, Budget(epsilon=1.0)) as ledger:  # an empty file becomes a ledger
        ledger.spend(Cost(epsilon=0.5))
    assert Ledger(empty).spent() == Cost(epsilon=0.5)


def test_not_a_ledger(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello, I am not a database\n" * 100)
    with pytest.raises(LedgerError, match="notes.txt"):
        Ledger(text)
    with pytest.raises(LedgerError, match="notes.txt"):
        Ledger(text, Budget(epsilon=1.0))
    assert text.read_text().startswith("hello")  # left alone

    import sqlite3
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE people (name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError, match="other.db: not a dpsql ledger"):
        Ledger(other, Budget(epsilon=1.0))

    with pytest.raises(LedgerError, match="directory"):
        Ledger(tmp_path, Budget(epsilon=1.0))
    with pytest.raises(LedgerError, match="no_such_dir"):
        Ledger(tmp_path / "no_such_dir" / "l.db", Budget(epsilon=1.0))


def test_corrupt_ledger(tmp_path):
    path = tmp_path / "ledger.db"
    with Ledger(path, Budget(epsilon=1.0)) as ledger:
        for i in range(30):
            ledger.spend(Cost(epsilon=0.01), description=f"query {i}")
    good = path.read_bytes()
    assert len(good) > 4096

    header = tmp_path / "header.db"
    header.write_bytes(b"\0" * 100 + good[100:])
    with pytest.raises(LedgerError, match="header.db"):
        Ledger(header)

    pages = tmp_path / "pages.db"
    pages.write_bytes(good[:4096] + b"\xff" * (len(good) - 4096))
    with pytest.raises(LedgerError, match="pages.db"):
        Ledger(pages)

    truncated = tmp_path / "truncated.db"
    truncated.write_bytes(good[:len(good) // 2])
    with pytest.raises(LedgerError, match="truncated.db"):
        Ledger(truncated)

    import sqlite3
    tampered = tmp_path / "tampered.db"
    tampered.write_bytes(good)
    conn = sqlite3.connect(tampered)
    conn.execute("UPDATE meta SET value = '{\"epsilon\": -1}' WHERE key = 'budget'")
    conn.commit()
    conn.close()
    with pytest.raises(LedgerError, match="tampered.db: the ledger's stored budget is unreadable"):
        Ledger(tampered)


# -- refusal ---------------------------------------------------------------


def test_refused_spend_changes_nothing(tmp_path):
    path = tmp_path / "ledger.db"
    ledger = Ledger(path, Budget(epsilon=1.0))
    for _ in range(3):
        ledger.spend(Cost(epsilon=0.3), mechanism="laplace")
    entries, spent, data = ledger.entries(), ledger.spent(), path.read_bytes()

    with pytest.raises(BudgetExceededError) as info:
        ledger.spend(Cost(epsilon=0.2), description="too much")
    error = info.value
    assert isinstance(error, PrivacyError)
    assert error.requested == Cost(epsilon=0.2)
    assert error.spent == spent
    assert error.remaining.epsilon == pytest.approx(0.1)
    message = str(error)
    assert "epsilon=0.2" in message and f"epsilon={spent.epsilon!r}" in message
    assert f"epsilon={error.remaining.epsilon!r}" in message and "nothing was recorded" in message

    with pytest.raises(BudgetExceededError):
        ledger.check(Cost(epsilon=0.2))
    ledger.check(Cost(epsilon=0.1))  # fits exactly (0.9 + 0.1, up to rounding): no error, no write

    assert ledger.entries() == entries
    assert ledger.spent() == spent
    assert path.read_bytes() == data
    ledger.close()
    assert Ledger(path).entries() == entries


def test_exact_fill_then_refuse_in_memory():
    with Ledger(":memory:", Budget(epsilon=1.0)) as ledger:
        assert ledger.path is None
        ids = [ledger.spend(Cost(epsilon=0.1)) for _ in range(10)]
        assert ids == list(range(1, 11))
        assert ledger.spent() == Cost(epsilon=math.fsum([0.1] * 10))
        with pytest.raises(BudgetExceededError):
            ledger.spend(Cost(epsilon=1e-9))
        ledger.spend(Cost())  # a free release always fits
        assert len(ledger.entries()) == 11


def test_currency_mismatch_records_nothing():
    with Ledger(None, Budget(rho=1.0)) as ledger:
        with pytest.raises(PrivacyError, match="currency") as info:
            ledger.spend(Cost(epsilon=0.1))
        assert not isinstance(info.value, BudgetExceededError)
        with pytest.raises(PrivacyError):
            ledger.check(Cost(delta=1e-6))
        with pytest.raises(PrivacyError, match="expected a dpsql.budget.Cost"):
            ledger.spend(0.1)
        assert ledger.entries() == []
        ledger.spend(Cost.laplace(1.0, ledger.budget))
        assert ledger.remaining() == Cost(rho=0.5)


def test_closed_ledger(tmp_path):
    ledger = Ledger(tmp_path / "l.db", Budget(epsilon=1.0))
    ledger.close()
    ledger.close()  # idempotent
    with pytest.raises(LedgerError, match="closed"):
        ledger.spend(Cost(epsilon=0.1))
    with pytest.raises(LedgerError, match="closed"):
        ledger.spent()


# -- concurrency and crashes -------------------------------------------------

_SPENDER = r"""
import json, sys
from dpsql.budget import Cost
from dpsql.errors import BudgetExceededError
from dpsql.ledger import Ledger
path, attempts = sys.argv[1], int(sys.argv[2])
ledger = Ledger(path)
print("ready", flush=True)
sys.stdin.readline()  # start together
ids, refused = [], 0
for i in range(attempts):
    try:
        ids.append(ledger.spend(Cost(epsilon=0.01), description=f"attempt {i}", mechanism="laplace"))
    except BudgetExceededError:
        refused += 1
ledger.close()
print(json.dumps({"ids": ids, "refused": refused}), flush=True)
"""


def test_four_processes_never_overspend(tmp_path):
    path = tmp_path / "ledger.db"
    Ledger(path, Budget(epsilon=1.0)).close()
    attempts = 60
    procs = [_python(_SPENDER, path, attempts, stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(4)]
    try:
        for proc in procs:
            assert proc.stdout.readline().strip() == "ready"
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        reports = []
        for proc in procs:
            out, _ = proc.communicate(timeout=120)
            assert proc.returncode == 0
            reports.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    reported = [i for report in reports for i in report["ids"]]
    assert sum(len(r["ids"]) + r["refused"] for r in reports) == 4 * attempts
    with Ledger(path) as ledger:
        entries = ledger.entries()
        assert ledger.spent().epsilon <= 1.0
        assert ledger.budget.admits(ledger.spent())
    # the budget allows exactly 100 spends of 0.01, and exactly those were recorded
    assert len(reported) == len(entries) == 100
    assert sorted(reported) == [e.id for e in entries]  # each id reported by exactly one process
    assert math.fsum(e.cost.epsilon for e in entries) == 1.0


_LOOPING_SPENDER = r"""
import sys
from dpsql.budget import Cost
from dpsql.ledger import Ledger
ledger = Ledger(sys.argv[1])
for i in range(1_000_000):
    entry_id = ledger.spend(Cost(epsilon=0.001), description=f"spend {i}")
    print(entry_id, flush=True)  # only after spend has returned
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
def test_kill_9_loses_no_reported_spend(tmp_path):
    path = tmp_path / "ledger.db"
    Ledger(path, Budget(epsilon=1000.0)).close()
    reported = []
    for _ in range(3):  # three crashes in a row, each at an arbitrary point of a spend
        proc = _python(_LOOPING_SPENDER, path, stdout=subprocess.PIPE)
        try:
            seen = 0
            while seen < 20:
                line = proc.stdout.readline()
                assert line, "the spender died early"
                reported.append(int(line))
                seen += 1
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == -signal.SIGKILL
        proc.stdout.close()  # ids printed after the kill was sent are not counted as reported

        with Ledger(path) as ledger:  # opens cleanly (integrity checked on open)
            ids = [e.id for e in ledger.entries()]
            assert set(reported) <= set(ids)
            assert ids == list(range(1, len(ids) + 1))  # no gaps, no half-written entries
            assert ledger.spent().epsilon == pytest.approx(0.001 * len(ids))
    with Ledger(path) as ledger:
        assert ledger.spend(Cost(epsilon=0.001)) == len(ids) + 1


_CRASH_MID_TRANSACTION = r"""
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA cache_size = 1")  # spill uncommitted pages into the database file
conn.execute("BEGIN IMMEDIATE")
for i in range(500):
    conn.execute("INSERT INTO entries (time, epsilon, delta, rho, mechanism, description) "
                 "VALUES ('2000-01-01T00:00:00+00:00', 0.5, 0, 0, 'laplace', ?)", ("x" * 500,))
print("inserted", flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX SIGKILL")
def test_crash_mid_transaction_records_nothing(tmp_path):
    path = tmp_path / "ledger.db"
    with Ledger(path, Budget(epsilon=1.0)) as ledger:
        ledger.spend(Cost(epsilon=0.25))
        before = ledger.entries()
    proc = _python(_CRASH_MID_TRANSACTION, path, stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == "inserted"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    proc.stdout.close()
    with Ledger(path) as ledger:  # the hot journal is rolled back
        assert ledger.entries() == before
        assert ledger.spend(Cost(epsilon=0.75)) == before[-1].id + 1
        with pytest.raises(BudgetExceededError):
            ledger.spend(Cost(epsilon=0.01))
