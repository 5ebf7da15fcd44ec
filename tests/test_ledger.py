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

from dpsql.errors import BudgetExceededError, LedgerError, PrivacyError
from dpsql.private.budget import Budget, Cost
from dpsql.private.ledger import Entry, Ledger

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
    # SQLite opens "" as a temporary database, deleted on close: each run would get the budget anew
    with pytest.raises(LedgerError, match="the ledger's path is empty"):
        Ledger("", Budget(epsilon=1.0))


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


def test_a_total_beyond_the_largest_float_is_over_budget():
    """With a budget near the largest float, the recorded total plus a request can overflow a
    double: that total exceeds the budget (it was OverflowError from math.fsum)."""
    with Ledger(":memory:", Budget(epsilon=1.7e308)) as ledger:
        ledger.spend(Cost(epsilon=1e308))
        for attempt in (ledger.check, ledger.spend):
            with pytest.raises(BudgetExceededError, match=r"only epsilon=6\.9+\d*e\+307.* remains"):
                attempt(Cost(epsilon=1e308))
        assert ledger.spent() == Cost(epsilon=1e308) and len(ledger.entries()) == 1


def test_currency_mismatch_records_nothing():
    with Ledger(None, Budget(rho=1.0)) as ledger:
        with pytest.raises(PrivacyError, match="currency") as info:
            ledger.spend(Cost(epsilon=0.1))
        assert not isinstance(info.value, BudgetExceededError)
        with pytest.raises(PrivacyError):
            ledger.check(Cost(delta=1e-6))
        with pytest.raises(PrivacyError, match="expected a dpsql.private.budget.Cost"):
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
from dpsql.private.budget import Cost
from dpsql.errors import BudgetExceededError
from dpsql.private.ledger import Ledger
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
from dpsql.private.budget import Cost
from dpsql.private.ledger import Ledger
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


# -- tamper evidence: truncation, edits, replacement, format migration --------


def _sql(path, *statements):
    """Run raw SQL on a ledger file, as someone editing it by hand would, and commit."""
    import sqlite3
    conn = sqlite3.connect(path)
    try:
        for statement in statements:
            conn.execute(statement)
        conn.commit()
    finally:
        conn.close()


def _count(path):
    """How many entries the file holds, read without dpsql's checks."""
    import sqlite3
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT count(*) FROM entries").fetchone()[0]
    finally:
        conn.close()


def _ledger_with(path, spends=4, budget=Budget(epsilon=1.0)):
    with Ledger(path, budget) as ledger:
        for i in range(spends):
            ledger.spend(Cost(epsilon=0.125), description=f"query {i}", mechanism="laplace")
    return path.read_bytes()


def _refused_on_open(path, match, budget=Budget(epsilon=1.0)):
    """Opening ``path`` (with no budget, and with its ``budget``) raises
    LedgerError matching ``match`` and changes nothing in the file."""
    data = path.read_bytes()
    with pytest.raises(LedgerError, match=match) as info:
        Ledger(path)
    assert str(path) in str(info.value)
    with pytest.raises(LedgerError, match=match):
        Ledger(path, budget)
    assert path.read_bytes() == data
    return str(info.value)


def test_truncated_tail_is_refused(tmp_path):
    good = _ledger_with(tmp_path / "good.db")

    plain = tmp_path / "plain.db"  # the last entry deleted: the id sequence and the head are ahead
    plain.write_bytes(good)
    _sql(plain, "DELETE FROM entries WHERE id = 4")
    _refused_on_open(plain, "ends at entry 3 but its head records 4 entries: its last entries were deleted")

    reset = tmp_path / "reset.db"  # ... and sqlite_sequence reset too: the head still records 4 entries
    reset.write_bytes(good)
    _sql(reset, "DELETE FROM entries WHERE id >= 3", "UPDATE sqlite_sequence SET seq = 2 WHERE name = 'entries'")
    _refused_on_open(reset, "ends at entry 2 but its head records 4 entries.*truncated")

    emptied = tmp_path / "emptied.db"  # every entry deleted and the sequence row removed
    emptied.write_bytes(good)
    _sql(emptied, "DELETE FROM entries", "DELETE FROM sqlite_sequence")
    _refused_on_open(emptied, "ends at entry 0 but its head records 4 entries")

    head = tmp_path / "head.db"  # ... and the head rewritten to match: the id sequence is still ahead
    head.write_bytes(good)
    import sqlite3
    conn = sqlite3.connect(head)
    (third,) = conn.execute("SELECT chain FROM entries WHERE id = 3").fetchone()
    conn.close()
    _sql(head, "DELETE FROM entries WHERE id = 4",
         f"UPDATE meta SET value = '{{\"count\": 3, \"hash\": \"{third}\"}}' WHERE key = 'head'")
    _refused_on_open(head, "id sequence is at 4 but its last entry is 3: its last entries were deleted")


def test_deleted_middle_entry_is_refused(tmp_path):
    path = tmp_path / "ledger.db"
    _ledger_with(path)
    _sql(path, "DELETE FROM entries WHERE id = 2")
    message = _refused_on_open(path, "entry 3 does not chain to entry 1")
    assert "entry 2 is missing" in message and "edited or truncated" in message

    first = tmp_path / "first.db"
    _ledger_with(first)
    _sql(first, "DELETE FROM entries WHERE id = 1")
    _refused_on_open(first, "entry 2 does not chain to the start of the ledger")


def test_edited_entries_are_refused(tmp_path):
    good = _ledger_with(tmp_path / "good.db")
    edits = {
        "epsilon": ["UPDATE entries SET epsilon = 0.0625 WHERE id = 3"],
        "delta": ["UPDATE entries SET delta = 1e-300 WHERE id = 3"],
        "time": ["UPDATE entries SET time = '2000-01-01T00:00:00.000000+00:00' WHERE id = 3"],
        "mechanism": ["UPDATE entries SET mechanism = 'gaussian' WHERE id = 3"],
        "description": ["UPDATE entries SET description = 'something else' WHERE id = 3"],
        # change the hash's first digit (to 'f', or to 'e' if it is 'f': the hash is random per ledger)
        "chain": ["UPDATE entries SET chain = (CASE WHEN substr(chain, 1, 1) = 'f' THEN 'e' ELSE 'f' END) "
                  "|| substr(chain, 2) WHERE id = 3"],
        # swap entries 3 and 4, hashes and all
        "reorder": ["UPDATE entries SET id = -3 WHERE id = 3", "UPDATE entries SET id = 3 WHERE id = 4",
                    "UPDATE entries SET id = 4 WHERE id = -3"],
    }
    for name, statements in edits.items():
        path = tmp_path / f"{name}.db"
        path.write_bytes(good)
        _sql(path, *statements)
        _refused_on_open(path, "entry 3 does not chain to entry 2.*edited or truncated")

    wrong_type = tmp_path / "type.db"  # SQLite stores anything anywhere
    wrong_type.write_bytes(good)
    _sql(wrong_type, "UPDATE entries SET epsilon = 'nothing' WHERE id = 2")
    _refused_on_open(wrong_type, "entry 2 holds a value of the wrong type")

    added = tmp_path / "added.db"  # a row inserted by hand (no chain) is refused as well
    added.write_bytes(good)
    _sql(added, "INSERT INTO entries (time, epsilon, delta, rho, mechanism, description) "
                "VALUES ('2000-01-01T00:00:00+00:00', 0, 0, 0, '', '')")
    _refused_on_open(added, "entry 5 does not chain to entry 4")


def test_edits_while_open_are_refused_and_spend_nothing(tmp_path):
    path = tmp_path / "ledger.db"
    _ledger_with(path)
    ledger = Ledger(path)
    assert ledger.spent() == Cost(epsilon=0.5)
    _sql(path, "UPDATE entries SET epsilon = 0.0 WHERE id = 2")  # hand back 0.125 of budget
    for attempt in (lambda: ledger.spend(Cost(epsilon=0.125)), lambda: ledger.check(Cost(epsilon=0.125)),
                    ledger.spent, ledger.remaining, ledger.entries, lambda: ledger.entry(1),
                    lambda: ledger.afford(Cost(epsilon=0.125))):
        with pytest.raises(LedgerError, match="entry 2 does not chain to entry 1"):
            attempt()
    assert _count(path) == 4
    ledger.close()


def test_with_one_writer_the_ledger_is_verified_once_and_then_read_no_more(tmp_path):
    """While no other connection commits to the file (SQLite's data_version), a Ledger uses what it verified and
    recorded itself, reading no entry: a spend or a check costs the same at any length. Another writer's spend is
    verified anew; an edit is refused by every read, as before."""
    path = tmp_path / "ledger.db"
    _ledger_with(path, spends=3)
    ledger = Ledger(path)
    alice = ledger.account("alice")
    statements = []
    ledger._conn.set_trace_callback(statements.append)

    def reads(call):  # the result, and how many times every entry was read
        statements.clear()
        result = call()
        return result, sum("ORDER BY id" in s for s in statements)

    assert reads(lambda: ledger.entry(2)) == (ledger.entries()[1], 1)  # nothing verified since it opened
    mine, full = reads(lambda: alice.record(Cost(epsilon=0.125), "by alice", "laplace"))
    assert (mine.id, mine.analyst, mine.description, full) == (4, "alice", "by alice", 0)
    assert reads(lambda: ledger.entry(4)) == (mine, 0)  # its own spend, recorded as verified
    assert reads(lambda: alice.entry(4)) == (mine, 0) and reads(lambda: alice.entry(2)) == (None, 0)
    assert reads(lambda: ledger.entry(9)) == (None, 0)
    assert reads(lambda: ledger.afford(Cost(epsilon=0.25))) == ((True, Cost(epsilon=0.5)), 0)
    assert reads(lambda: alice.afford(Cost(epsilon=0.625))) == ((False, Cost(epsilon=0.5)), 0)
    assert reads(lambda: ledger.spend(Cost(epsilon=0.125))) == (5, 0)
    other = Ledger(path)  # another process's spend: legitimate, verified anew
    other.spend(Cost(epsilon=0.125))
    assert reads(lambda: ledger.entry(6)) == (other.entries()[5], 1)
    assert reads(ledger.spent) == (Cost(epsilon=0.75), 0)
    _sql(path, "UPDATE entries SET time = '2000-01-01T00:00:00.000000+00:00' WHERE id = 2")
    for attempt in (lambda: ledger.entry(1), lambda: ledger.spend(Cost(epsilon=0.125)), ledger.spent):
        with pytest.raises(LedgerError, match="entry 2 does not chain to entry 1"):
            attempt()
    assert _count(path) == 6
    other.close()
    ledger.close()


def test_edited_budget_is_refused(tmp_path):
    good = _ledger_with(tmp_path / "good.db")

    raised = tmp_path / "raised.db"
    raised.write_bytes(good)
    _sql(raised, "UPDATE meta SET value = '{\"currency\": \"approx-dp\", \"epsilon\": 10.0, \"delta\": 0.0}' "
                 "WHERE key = 'budget'")
    message = _refused_on_open(raised, "does not match the ledger's fingerprint: the ledger's budget was edited")
    assert "epsilon=10.0" in message
    with pytest.raises(LedgerError, match="fingerprint"):  # giving the new budget does not help
        Ledger(raised, Budget(epsilon=10.0))

    # someone who also recomputes the fingerprint breaks the chain: every entry's hash holds the old one
    from dpsql.private.ledger import _fingerprint
    refingered = tmp_path / "refingered.db"
    refingered.write_bytes(good)
    import sqlite3
    conn = sqlite3.connect(refingered)
    meta = dict(conn.execute("SELECT key, value FROM meta"))
    conn.close()
    forged = _fingerprint(Budget(epsilon=10.0), meta["nonce"], meta["created"])
    _sql(refingered, "UPDATE meta SET value = '{\"epsilon\": 10.0, \"delta\": 0.0}' WHERE key = 'budget'",
         f"UPDATE meta SET value = '{forged}' WHERE key = 'fingerprint'")
    _refused_on_open(refingered, "entry 1 does not chain to the start of the ledger")

    # a budget edited while a Ledger is open
    path = tmp_path / "open.db"
    path.write_bytes(good)
    with Ledger(path) as ledger:
        _sql(path, "UPDATE meta SET value = '{\"epsilon\": 10.0, \"delta\": 0.0}' WHERE key = 'budget'")
        with pytest.raises(LedgerError, match="budget was edited"):
            ledger.spend(Cost(epsilon=0.5))
        with pytest.raises(LedgerError, match="budget was edited"):
            ledger.remaining()
    assert _count(path) == 4


def test_file_replaced_while_open_is_refused(tmp_path):
    path = tmp_path / "ledger.db"
    _ledger_with(path, spends=8)  # the whole budget is spent
    fresh = tmp_path / "fresh.db"
    Ledger(fresh, Budget(epsilon=1.0)).close()  # a new ledger with the same budget
    fresh_bytes = fresh.read_bytes()

    ledger = Ledger(path)
    with pytest.raises(BudgetExceededError):
        ledger.check(Cost(epsilon=0.5))
    os.replace(fresh, path)  # another file at the path (a new inode)
    for attempt in (lambda: ledger.spend(Cost(epsilon=0.5)), lambda: ledger.check(Cost(epsilon=0.5)),
                    ledger.spent, ledger.entries):
        with pytest.raises(LedgerError, match="replaced by another file while this Ledger had it open"):
            attempt()
    assert _count(path) == 0  # nothing was spent, in either file
    ledger.close()

    # a file overwritten in place (same inode) with a fresh ledger: another creation id
    spent = tmp_path / "spent.db"
    _ledger_with(spent, spends=8)
    inode = spent.stat().st_ino
    ledger = Ledger(spent)
    spent.write_bytes(fresh_bytes)
    assert spent.stat().st_ino == inode
    with pytest.raises(LedgerError, match="holds a different ledger .* replaced while open"):
        ledger.spend(Cost(epsilon=0.5))
    with pytest.raises(LedgerError, match="replaced while open"):
        ledger.spent()
    assert _count(spent) == 0
    ledger.close()

    # ... or with an older copy of itself: it no longer extends what the Ledger saw
    ledger = Ledger(path)
    ledger.spend(Cost(epsilon=0.5))
    path.write_bytes(fresh_bytes)
    with pytest.raises(LedgerError, match="no longer extends the 1 entries this Ledger has seen"):
        ledger.spend(Cost(epsilon=0.5))
    assert _count(path) == 0
    ledger.close()


def test_file_deleted_while_open_is_refused(tmp_path):
    path = tmp_path / "ledger.db"
    _ledger_with(path, spends=8)
    ledger = Ledger(path)
    os.remove(path)
    for attempt in (lambda: ledger.spend(Cost(epsilon=0.5)), lambda: ledger.check(Cost(epsilon=0.5)),
                    ledger.spent, ledger.remaining, ledger.entries):
        with pytest.raises(LedgerError, match="deleted while this Ledger had it open"):
            attempt()
    assert not path.exists()  # nothing re-created it

    Ledger(path, Budget(epsilon=1.0)).close()  # re-created with the same budget: the budget is fresh
    with pytest.raises(LedgerError, match="replaced"):
        ledger.spend(Cost(epsilon=0.5))
    assert _count(path) == 0
    ledger.close()


def test_an_open_ledger_refuses_a_consistent_rollback(tmp_path):
    """A ledger rolled back consistently (tail, head and sequence) reopens
    fine, but a Ledger that saw the deleted entries refuses it."""
    path = tmp_path / "ledger.db"
    _ledger_with(path, spends=2)
    ledger = Ledger(path)
    other = Ledger(path)  # a second object (as another process would) sees the same file
    other.spend(Cost(epsilon=0.125))
    assert ledger.spend(Cost(epsilon=0.125)) == 4  # extends what it saw: fine
    assert other.spent() == Cost(epsilon=0.5)
    import sqlite3
    conn = sqlite3.connect(path)
    (second,) = conn.execute("SELECT chain FROM entries WHERE id = 2").fetchone()
    conn.close()
    _sql(path, "DELETE FROM entries WHERE id > 2", "UPDATE sqlite_sequence SET seq = 2 WHERE name = 'entries'",
         f"UPDATE meta SET value = '{{\"count\": 2, \"hash\": \"{second}\"}}' WHERE key = 'head'")
    with pytest.raises(LedgerError, match="no longer extends the 4 entries this Ledger has seen"):
        ledger.spend(Cost(epsilon=0.125))
    with pytest.raises(LedgerError, match="no longer extends"):
        other.check(Cost(epsilon=0.125))
    assert _count(path) == 2
    ledger.close()
    other.close()
    with Ledger(path) as reopened:  # out of scope: a consistent rewrite of the file itself
        assert reopened.spent() == Cost(epsilon=0.25)


_V1_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
CREATE TABLE entries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    time TEXT NOT NULL,
    epsilon REAL NOT NULL CHECK (epsilon >= 0),
    delta REAL NOT NULL CHECK (delta >= 0),
    rho REAL NOT NULL CHECK (rho >= 0),
    mechanism TEXT NOT NULL,
    description TEXT NOT NULL
);
"""


V1_BUDGET = Budget(epsilon=1.0, delta=1e-6)


def _version_1(path, costs):
    """A version-1 ledger (the format before the chain), written with raw sqlite3."""
    import sqlite3
    conn = sqlite3.connect(path)
    conn.executescript(_V1_SCHEMA)
    conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [
        ("format", "dpsql-ledger"), ("version", "1"),
        ("budget", json.dumps({"currency": "approx-dp", "epsilon": 1.0, "delta": 1e-6})),
        ("created", "2024-05-01T12:00:00.000000+00:00")])
    conn.executemany("INSERT INTO entries (time, epsilon, delta, rho, mechanism, description) "
                     "VALUES (?, ?, ?, 0.0, ?, ?)",
                     [(f"2024-05-01T12:0{i}:00.000000+00:00", eps, delta, "laplace", f"v1 query {i}")
                      for i, (eps, delta) in enumerate(costs)])
    conn.commit()
    conn.close()


def test_version_1_ledger_is_migrated(tmp_path):
    path = tmp_path / "v1.db"
    _version_1(path, [(0.1, 0.0), (0.2, 1e-7), (0.3, 0.0)])
    with Ledger(path, V1_BUDGET) as ledger:
        entries = ledger.entries()
        assert [(e.id, e.cost.epsilon, e.description) for e in entries] == [
            (1, 0.1, "v1 query 0"), (2, 0.2, "v1 query 1"), (3, 0.3, "v1 query 2")]
        assert ledger.spent() == Cost(epsilon=math.fsum([0.1, 0.2, 0.3]), delta=1e-7)
        assert ledger.spend(Cost(epsilon=0.25)) == 4
    import sqlite3
    conn = sqlite3.connect(path)
    meta = dict(conn.execute("SELECT key, value FROM meta"))
    chains = [row[0] for row in conn.execute("SELECT chain FROM entries ORDER BY id")]
    conn.close()
    assert meta["version"] == "3" and len(meta["nonce"]) == 32 and len(meta["fingerprint"]) == 64
    assert len(set(chains)) == 4 and all(len(c) == 64 for c in chains)
    with Ledger(path) as ledger:  # reopening does not migrate again
        assert [e.id for e in ledger.entries()] == [1, 2, 3, 4]
    _sql(path, "UPDATE entries SET epsilon = 0.0 WHERE id = 2")  # the migrated chain protects the old entries
    _refused_on_open(path, "entry 2 does not chain to entry 1", V1_BUDGET)

    empty = tmp_path / "empty-v1.db"
    _version_1(empty, [])
    with Ledger(empty) as ledger:
        assert ledger.entries() == [] and ledger.spend(Cost(epsilon=1.0)) == 1


def test_version_1_ledger_with_deleted_entries_is_refused(tmp_path):
    gap = tmp_path / "gap.db"
    _version_1(gap, [(0.1, 0.0), (0.2, 0.0), (0.3, 0.0)])
    _sql(gap, "DELETE FROM entries WHERE id = 2")
    message = _refused_on_open(gap, "version-1 ledger has no entry 2", V1_BUDGET)
    assert "refusing to migrate" in message

    tail = tmp_path / "tail.db"
    _version_1(tail, [(0.1, 0.0), (0.2, 0.0), (0.3, 0.0)])
    _sql(tail, "DELETE FROM entries WHERE id = 3")
    _refused_on_open(tail, "version-1 ledger's id sequence is at 3 but it holds 2 entries", V1_BUDGET)

    other = tmp_path / "other-budget.db"  # a wrong budget is refused before the file is migrated
    _version_1(other, [(0.1, 0.0)])
    data = other.read_bytes()
    with pytest.raises(LedgerError, match="was created with the budget"):
        Ledger(other, Budget(epsilon=2.0))
    assert other.read_bytes() == data

    future = tmp_path / "future.db"
    _version_1(future, [])
    _sql(future, "UPDATE meta SET value = '4' WHERE key = 'version'")
    _refused_on_open(future, "unsupported ledger version '4'", V1_BUDGET)


def test_zero_costs_chain_exactly(tmp_path):
    """-0.0 is stored by SQLite as 0 and read back as 0.0; the chain hashes what is read back."""
    path = tmp_path / "ledger.db"
    with Ledger(path, Budget(epsilon=1.0)) as ledger:
        ledger.spend(Cost(epsilon=-0.0))
        ledger.spend(Cost(epsilon=1.0, delta=0.0))
        ledger.spend(Cost(epsilon=0.0))
    with Ledger(path) as ledger:
        assert ledger.spent() == Cost(epsilon=1.0)


def test_file_replaced_during_a_spend_is_not_released(tmp_path):
    """If the file is replaced while a spend's transaction runs, the spend went
    to the old file: spend raises instead of returning an id."""
    path = tmp_path / "ledger.db"
    _ledger_with(path, spends=1)
    fresh = tmp_path / "fresh.db"
    Ledger(fresh, Budget(epsilon=1.0)).close()
    ledger = Ledger(path)
    run = ledger._transaction

    def replaced_meanwhile(body, begin="BEGIN"):
        result = run(body, begin)
        os.replace(fresh, path)  # right after the commit, before spend returns
        return result

    ledger._transaction = replaced_meanwhile
    with pytest.raises(LedgerError, match="replaced .* do not release its result"):
        ledger.spend(Cost(epsilon=0.125))
    assert _count(path) == 0
    ledger.close()
