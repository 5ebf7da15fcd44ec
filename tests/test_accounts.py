"""Analysts' accounts on a shared ledger (dpsql/private/ledger.py): each analyst's part and the dataset's
total both hold, across processes; the analyst is part of the tamper-evident chain; version-2 ledgers
are migrated; ``dpsql budget`` shows the spend per analyst."""

import hashlib
import json
import multiprocessing
import re
import sqlite3
import threading

import account_spender
import numpy as np
import pytest
from test_ledger import _refused_on_open, _sql
from test_mwem import SCHEMA, make_table

from dpsql.api.cli import main
from dpsql.engine import Dataset, Request, Strategies
from dpsql.errors import BudgetExceededError, LedgerError, PrivacyError
from dpsql.private.backend import backend_for
from dpsql.private.budget import Budget, Cost
from dpsql.private.ledger import Account, Ledger
from dpsql.schema import load_schema

# Costs and budgets are dyadic, so every sum is exact and each limit admits an exact number of spends.
BUDGET = Budget(epsilon=1.0)
STEP = Cost(epsilon=0.125)


def _raw(path, sql):
    """Rows of ``sql`` on the ledger file, read without dpsql's checks."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


# -- the two limits ------------------------------------------------------------------------------


def test_an_account_cannot_exceed_its_part(tmp_path):
    path = tmp_path / "ledger.db"
    with Ledger(path, BUDGET) as ledger:
        alice = ledger.account("alice", Budget(epsilon=0.375))
        assert isinstance(alice, Account) and alice.budget == Budget(epsilon=0.375) and alice.path == str(path)
        assert [alice.spend(STEP, description=f"q{i}", mechanism="laplace") for i in range(3)] == [1, 2, 3]
        assert alice.spent() == Cost(epsilon=0.375) and alice.remaining() == Cost()
        data = path.read_bytes()
        for attempt in (alice.check, alice.spend):
            with pytest.raises(BudgetExceededError) as info:
                attempt(STEP)
            assert str(info.value) == (
                "privacy budget exceeded: the request costs epsilon=0.125, delta=0.0, but epsilon=0.375, "
                "delta=0.0 of the part epsilon=0.375, delta=0.0 (pure DP) given to analyst 'alice' is already "
                "spent and only epsilon=0.0, delta=0.0 remains; nothing was recorded")
            assert (info.value.requested, info.value.spent, info.value.remaining) == (
                STEP, Cost(epsilon=0.375), Cost())
        assert path.read_bytes() == data  # refused: nothing recorded
        # the dataset still has room for the others
        assert ledger.remaining() == Cost(epsilon=0.625)
        assert ledger.account("bob").spend(STEP) == 4
        assert ledger.spend(STEP) == 5
        assert alice.spent() == Cost(epsilon=0.375) and ledger.spent() == Cost(epsilon=0.625)
        assert ledger.accounts() == {"": STEP, "alice": Cost(epsilon=0.375), "bob": STEP}
    with Ledger(path) as ledger:  # a new account of the same analyst, in a new process, sees her spends
        again = ledger.account("alice", Budget(epsilon=0.5))
        assert [(e.id, e.analyst, e.description) for e in again.entries()] == [
            (1, "alice", "q0"), (2, "alice", "q1"), (3, "alice", "q2")]
        assert again.spend(STEP) == 6
        with pytest.raises(BudgetExceededError, match="given to analyst 'alice'"):
            again.spend(STEP)


def test_a_part_without_delta_admits_no_delta():
    """The part binds field by field: a pure-DP part refuses any delta though the dataset has some."""
    ledger = Ledger(None, Budget(epsilon=1.0, delta=1e-6))
    alice = ledger.account("alice", Budget(epsilon=0.5))
    with pytest.raises(BudgetExceededError, match=r"of the part epsilon=0.5, delta=0.0 \(pure DP\) given to"):
        alice.spend(Cost(epsilon=0.125, delta=1e-9))
    assert ledger.entries() == []
    assert alice.spend(Cost(epsilon=0.125)) == 1


def test_parts_above_the_total_cannot_exceed_the_total(tmp_path):
    with Ledger(tmp_path / "ledger.db", BUDGET) as ledger:
        alice = ledger.account("alice", Budget(epsilon=0.75))
        bob = ledger.account("bob", Budget(epsilon=0.75))  # 1.5 in parts of a budget of 1
        for _ in range(6):
            alice.spend(STEP)
        assert bob.remaining() == bob.dataset_remaining() == Cost(epsilon=0.25)  # not the 0.75 left of his part
        assert bob.spent() == Cost() and bob.dataset_spent() == Cost(epsilon=0.75)
        bob.spend(STEP)
        bob.spend(STEP)
        entries = ledger.entries()
        for account, mine in ((bob, Cost(epsilon=0.25)), (alice, Cost(epsilon=0.75))):
            with pytest.raises(BudgetExceededError) as info:
                account.spend(STEP)
            assert str(info.value) == (
                "privacy budget exceeded: the request costs epsilon=0.125, delta=0.0, but epsilon=1.0, delta=0.0 "
                "of the dataset's total budget epsilon=1.0, delta=0.0 (pure DP), shared by all analysts, is "
                "already spent and only epsilon=0.0, delta=0.0 remains; nothing was recorded"
                if account is bob else
                "privacy budget exceeded: the request costs epsilon=0.125, delta=0.0, but epsilon=0.75, delta=0.0 "
                "of the part epsilon=0.75, delta=0.0 (pure DP) given to analyst 'alice' is already spent and "
                "epsilon=1.0, delta=0.0 of the dataset's total budget epsilon=1.0, delta=0.0 (pure DP), shared by "
                "all analysts, is already spent and only epsilon=0.0, delta=0.0 remains; nothing was recorded")
            assert account.spent() == mine and account.remaining() == Cost()
        with pytest.raises(BudgetExceededError, match=r"of the budget epsilon=1.0, delta=0.0 \(pure DP\) is"):
            ledger.spend(STEP)  # the owner's refusal reads as before accounts
        assert ledger.entries() == entries and ledger.spent() == Cost(epsilon=1.0)


def test_remaining_is_the_least_of_both_limits_in_each_field():
    """alice's part leaves her less epsilon, the dataset (after carol) less delta: she may spend exactly both."""
    delta = 2.0 ** -18
    ledger = Ledger(None, Budget(epsilon=1.0, delta=delta))
    ledger.account("carol").spend(Cost(epsilon=0.25, delta=delta * 0.75))
    alice = ledger.account("alice", Budget(epsilon=0.5, delta=delta))
    alice.spend(Cost(epsilon=0.25))
    assert alice.remaining() == Cost(epsilon=0.25, delta=delta * 0.25)
    for over in (Cost(epsilon=0.375), Cost(epsilon=0.125, delta=delta * 0.5)):
        with pytest.raises(BudgetExceededError) as info:
            alice.check(over)
        assert info.value.remaining == Cost(epsilon=0.25, delta=delta * 0.25)
    alice.spend(alice.remaining())
    assert alice.remaining() == Cost() and ledger.remaining() == Cost(epsilon=0.25)


def test_accounts_are_checked_and_closed():
    ledger = Ledger(None, BUDGET)
    for name in ("", " alice", "alice\n", "bell\a", "x" * 201, 7, None):
        with pytest.raises(LedgerError, match="an analyst's name must be"):
            ledger.account(name)
    with pytest.raises(LedgerError, match=r"analyst 'alice''s part rho=1.0 \(zCDP\) is not in the currency"):
        ledger.account("alice", Budget(rho=1.0))
    with pytest.raises(LedgerError, match="part must be a dpsql.private.budget.Budget or None, got float"):
        ledger.account("alice", 0.5)
    alice = ledger.account("alice")
    assert alice.budget == alice.dataset_budget == BUDGET and alice.part is None and alice.analyst == "alice"
    with pytest.raises(PrivacyError, match="in zCDP"):
        alice.spend(Cost(rho=0.5))
    with alice:
        alice.spend(STEP)
    with pytest.raises(LedgerError, match="analyst 'alice''s account is closed"):
        alice.spend(STEP)
    assert ledger.account("bob").spend(STEP) == 2  # closing an account leaves the ledger open
    ledger.close()


def test_an_analysts_engine_charges_the_account():
    """The kernel and the engine take an Account as they take a Ledger: each release is charged to
    the analyst, and a request beyond the part is refused before anything is read or recorded."""
    ledger = Ledger(None, BUDGET)
    con, _ = make_table(200)
    dataset = Dataset(backend_for(con), load_schema(SCHEMA), ledger, Strategies(None, progress=False),
                      source_of_noise=np.random.default_rng(0))
    engine = dataset.engine("alice", Budget(epsilon=0.25))
    engine.run(Request("SELECT a, COUNT(*) FROM t GROUP BY a", epsilon=0.125))
    assert [(e.analyst, e.cost) for e in ledger.entries()] == [("alice", STEP)]
    alice = engine.ledger
    assert alice.spent() == STEP and alice.remaining() == STEP and engine.budget == Budget(epsilon=0.25)
    with pytest.raises(BudgetExceededError, match="given to analyst 'alice'"):
        engine.run(Request("SELECT b, COUNT(*) FROM t GROUP BY b", epsilon=0.25))
    assert len(ledger.entries()) == 1
    alice.close()
    assert ledger.spend(STEP) == 2  # closing alice's account leaves the shared ledger open


# -- concurrency -------------------------------------------------------------------------------


class _Racing:
    """A ledger's SQLite connection on which ``race()`` runs once, just before the next write transaction
    begins: another process's spend landing after anything checked beforehand."""

    def __init__(self, conn, race):
        self._conn, self._race = conn, race

    def execute(self, sql, *args):
        if sql == "BEGIN IMMEDIATE" and self._race is not None:
            race, self._race = self._race, None
            race()
        return self._conn.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


@pytest.mark.parametrize("total, other_analyst, limit", [
    (1.0, "alice", "but epsilon=0.25, delta=0.0 of the part epsilon=0.25, delta=0.0 (pure DP) given to analyst "
                   "'alice' is already spent and only epsilon=0.0, delta=0.0 remains"),
    (0.25, "bob", "but epsilon=0.25, delta=0.0 of the dataset's total budget epsilon=0.25, delta=0.0 (pure DP), "
                  "shared by all analysts, is already spent and only epsilon=0.0, delta=0.0 remains"),
])
def test_a_spend_sees_what_landed_before_its_transaction(tmp_path, total, other_analyst, limit):
    """Both limits are checked inside the spend's write transaction: a spend by another process (another
    connection) just before it is counted, whichever analyst made it, and the second spend is refused."""
    path = tmp_path / "ledger.db"
    with Ledger(path, Budget(epsilon=total)) as ledger, Ledger(path) as elsewhere:
        alice = ledger.account("alice", Budget(epsilon=0.25))
        other = elsewhere.account(other_analyst, Budget(epsilon=0.25))
        alice.spend(STEP)
        ledger._conn = _Racing(ledger._conn, lambda: other.spend(STEP))
        with pytest.raises(BudgetExceededError, match=re.escape(limit)):
            alice.spend(STEP)
        assert [e.analyst for e in ledger.entries()] == ["alice", other_analyst]


TICK = Cost(epsilon=2.0 ** -7)  # the dataset's 0.5 is 64 ticks
PARTS = {"alice": 16, "bob": 32, "carol": None}  # in ticks; carol has no part


def test_threads_of_several_analysts_share_one_ledger(tmp_path):
    """Threads spending through accounts of one Ledger object (one SQLite connection) keep both limits."""
    ledger = Ledger(tmp_path / "ledger.db", Budget(epsilon=0.5))
    accounts = {name: ledger.account(name, None if ticks is None else Budget(epsilon=ticks * TICK.epsilon))
                for name, ticks in PARTS.items()}
    start = threading.Barrier(4)
    given = []

    def spender(name):
        start.wait()
        for _ in range(40):
            try:
                given.append((accounts[name].spend(TICK), name))
            except BudgetExceededError:
                pass

    threads = [threading.Thread(target=spender, args=(name,)) for name in ("alice", "alice", "bob", "carol")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    entries = ledger.entries()
    assert sorted(given) == [(e.id, e.analyst) for e in entries]
    spent = {name: account.spent() for name, account in accounts.items()}
    assert spent["alice"].epsilon <= 16 * TICK.epsilon and spent["bob"].epsilon <= 32 * TICK.epsilon
    # the caps (16 + 32) and carol's 40 attempts exceed the 64 ticks, so the total is reached exactly
    assert len(entries) == 64 and ledger.spent() == Cost(epsilon=0.5)
    assert spent == {name: Cost(epsilon=sum(e.analyst == name for e in entries) * TICK.epsilon) for name in PARTS}
    ledger.close()


def test_processes_of_several_analysts_never_overspend(tmp_path):
    """Four processes of three analysts spend ticks together; parts add up to more than the budget."""
    path = str(tmp_path / "ledger.db")
    Ledger(path, Budget(epsilon=0.5)).close()
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    attempts = 40
    analysts = ["alice", "alice", "bob", "carol"]
    parts = {name: None if ticks is None else Budget(epsilon=ticks * TICK.epsilon) for name, ticks in PARTS.items()}
    procs = [context.Process(target=account_spender.spend, args=(path, name, parts[name], TICK, attempts, start, results))
             for name in analysts]
    for proc in procs:
        proc.start()
    try:
        start.set()
        reports = [results.get(timeout=120) for _ in procs]
        for proc in procs:
            proc.join(timeout=30)
            assert proc.exitcode == 0
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.kill()
                proc.join()

    with Ledger(path) as ledger:
        entries = ledger.entries()
        totals = ledger.accounts()
    # charge for charge: every id a worker was given is an entry of its analyst, and every entry was given out
    given = sorted((i, name) for name, ids, _ in reports for i in ids)
    assert given == [(e.id, e.analyst) for e in entries]
    assert all(len(ids) + len(refused) == attempts for _, ids, refused in reports)
    for name, ids, refused in reports:
        assert all((f"given to analyst {name!r}" in r or "dataset's total budget" in r) for r in refused)
    counts = {name: sum(e.analyst == name for e in entries) for name in PARTS}
    assert counts["alice"] <= 16 and counts["bob"] <= 32
    assert totals == {name: Cost(epsilon=n * TICK.epsilon) for name, n in counts.items() if n}
    # the parts' caps (16 + 32) and carol's 40 attempts exceed the 64 ticks, so the total is reached exactly
    assert len(entries) == 64 and sum(totals.values(), Cost()) == Cost(epsilon=0.5)


# -- tamper evidence and migration -----------------------------------------------------------------


def _three_analysts(path):
    with Ledger(path, BUDGET) as ledger:
        ledger.spend(STEP, description="owner")
        ledger.account("alice").spend(STEP, description="alice's")
        ledger.account("bob").spend(STEP, description="bob's")
    return path.read_bytes()


@pytest.mark.parametrize("edit, match", [
    ("UPDATE entries SET analyst = 'bob' WHERE id = 2", "entry 2 does not chain to entry 1"),
    ("UPDATE entries SET analyst = 'alice' WHERE id = 1", "entry 1 does not chain to the start of the ledger"),
    ("UPDATE entries SET analyst = '' WHERE id = 3", "entry 3 does not chain to entry 2"),
    ("UPDATE entries SET analyst = 'alice ' WHERE id = 2", "entry 2 does not chain to entry 1"),
    ("UPDATE entries SET analyst = x'626f62' WHERE id = 3", "entry 3 holds a value of the wrong type"),
])
def test_an_edited_analyst_is_refused(tmp_path, edit, match):
    path = tmp_path / "ledger.db"
    good = _three_analysts(path)
    with Ledger(path) as ledger:  # an open ledger's accounts refuse too, and record nothing
        bob = ledger.account("bob")
        _sql(path, edit)
        with pytest.raises(LedgerError, match=match):
            bob.spend(STEP)
    _refused_on_open(path, match)
    path.write_bytes(good)
    with Ledger(path) as ledger:
        assert [e.analyst for e in ledger.entries()] == ["", "alice", "bob"]


def _v2_digest(*fields):
    return hashlib.sha256(json.dumps(list(fields), separators=(",", ":")).encode("ascii")).hexdigest()


def _version_2(path, costs):
    """A version-2 ledger (chained, without analysts), written with raw sqlite3 and hashed as version 2
    specifies: the fingerprint of the nonce, creation time and budget; each entry chained to the last."""
    nonce, created = "0123456789abcdef" * 2, "2025-03-01T09:00:00.000000+00:00"
    fingerprint = _v2_digest("dpsql-ledger budget", nonce, created, "approx-dp", "1.0", "1e-06", "None")
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL);
        CREATE TABLE entries (id INTEGER PRIMARY KEY AUTOINCREMENT, time TEXT NOT NULL,
            epsilon REAL NOT NULL CHECK (epsilon >= 0), delta REAL NOT NULL CHECK (delta >= 0),
            rho REAL NOT NULL CHECK (rho >= 0), mechanism TEXT NOT NULL, description TEXT NOT NULL,
            chain TEXT NOT NULL DEFAULT '');""")
    chain = fingerprint
    for i, (epsilon, delta) in enumerate(costs, 1):
        time = f"2025-03-01T09:0{i}:00.000000+00:00"
        chain = _v2_digest("dpsql-ledger entry", chain, i, time, repr(epsilon), repr(delta), "0.0", "laplace",
                           f"v2 query {i}", fingerprint)
        conn.execute("INSERT INTO entries (time, epsilon, delta, rho, mechanism, description, chain) "
                     "VALUES (?, ?, ?, 0.0, 'laplace', ?, ?)", (time, epsilon, delta, f"v2 query {i}", chain))
    conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", [
        ("format", "dpsql-ledger"), ("version", "2"),
        ("budget", json.dumps({"currency": "approx-dp", "epsilon": 1.0, "delta": 1e-6})), ("created", created),
        ("nonce", nonce), ("fingerprint", fingerprint), ("head", json.dumps({"count": len(costs), "hash": chain}))])
    conn.commit()
    conn.close()


def test_version_2_ledger_is_migrated(tmp_path):
    path = tmp_path / "v2.db"
    _version_2(path, [(0.25, 0.0), (0.125, 1e-7)])
    chains = _raw(path, "SELECT chain FROM entries ORDER BY id")
    with Ledger(path, Budget(epsilon=1.0, delta=1e-6)) as ledger:
        assert [(e.id, e.cost, e.description, e.analyst) for e in ledger.entries()] == [
            (1, Cost(epsilon=0.25), "v2 query 1", ""), (2, Cost(epsilon=0.125, delta=1e-7), "v2 query 2", "")]
        assert ledger.accounts() == {"": Cost(epsilon=0.375, delta=1e-7)}
        assert ledger.account("alice", Budget(epsilon=0.5)).spend(STEP) == 3
    assert dict(_raw(path, "SELECT key, value FROM meta"))["version"] == "3"
    assert _raw(path, "SELECT chain FROM entries WHERE id <= 2 ORDER BY id") == chains  # the old chain is kept
    with Ledger(path) as ledger:  # reopening does not migrate again
        assert [e.analyst for e in ledger.entries()] == ["", "", "alice"]
    _sql(path, "UPDATE entries SET analyst = 'alice' WHERE id = 2")  # the migrated entries are the owner's
    _refused_on_open(path, "entry 2 does not chain to entry 1", Budget(epsilon=1.0, delta=1e-6))

    edited = tmp_path / "edited-v2.db"  # an edited version-2 ledger is refused, and left as it was, not migrated
    _version_2(edited, [(0.25, 0.0), (0.125, 0.0)])
    _sql(edited, "UPDATE entries SET epsilon = 0.0 WHERE id = 1")
    _refused_on_open(edited, "entry 1 does not chain to the start of the ledger", Budget(epsilon=1.0, delta=1e-6))
    assert dict(_raw(edited, "SELECT key, value FROM meta"))["version"] == "2"
    assert "analyst" not in [row[1] for row in _raw(edited, "PRAGMA table_info(entries)")]


# -- dpsql budget --------------------------------------------------------------------------------


def _lines(capsys, *argv):
    assert main(list(argv)) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return out.splitlines()


def test_budget_command_shows_each_analyst(tmp_path, capsys):
    path = tmp_path / "ledger.db"
    with Ledger(path, BUDGET) as ledger:
        ledger.spend(STEP, description="SELECT 1", mechanism="laplace")
        alice = ledger.account("alice", Budget(epsilon=0.5))
        alice.spend(Cost(epsilon=0.25), description="SELECT a\nFROM t", mechanism="laplace")
        ledger.account("bob").spend(STEP, description="", mechanism="gaussian")
        alice.spend(STEP, description="SELECT b", mechanism="laplace")
        e1, e2, e3, e4 = (e.time for e in ledger.entries())
    head = [f"ledger {path}", "  budget:    epsilon=1, delta=0", "  spent:     epsilon=0.625, delta=0",
            "  remaining: epsilon=0.375, delta=0"]
    assert _lines(capsys, "budget", "--ledger", str(path)) == head + [
        "  spent by analyst:",
        "    (owner): epsilon=0.125, delta=0",
        "    'alice': epsilon=0.375, delta=0",
        "    'bob': epsilon=0.125, delta=0",
        "  4 releases",
        f"    #1 {e1} (owner) laplace epsilon=0.125, delta=0", "        SELECT 1",
        f"    #2 {e2} 'alice' laplace epsilon=0.25, delta=0", "        SELECT a FROM t",
        f"    #3 {e3} 'bob' gaussian epsilon=0.125, delta=0",
        f"    #4 {e4} 'alice' laplace epsilon=0.125, delta=0", "        SELECT b"]
    assert _lines(capsys, "budget", "--ledger", str(path), "--analyst", "alice") == head + [
        "  spent by 'alice': epsilon=0.375, delta=0",
        "  2 releases",
        f"    #2 {e2} laplace epsilon=0.25, delta=0", "        SELECT a FROM t",
        f"    #4 {e4} laplace epsilon=0.125, delta=0", "        SELECT b"]
    assert _lines(capsys, "budget", "--ledger", str(path), "--analyst", "dave") == head + [
        "  spent by 'dave': epsilon=0, delta=0", "  0 releases"]
    assert main(["budget", "--ledger", str(path), "--analyst", ""]) == 2
    assert "LedgerError: an analyst's name must be" in capsys.readouterr().err

