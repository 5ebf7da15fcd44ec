"""Messages that help: a syntax error names the token found and what could come there; an unknown
column, table or function names the nearest declared one; the command line speaks in flags, the
Python API in arguments."""

from __future__ import annotations

import re

import pytest
import yaml
from sql_oracle import SCHEMA, make_table

import dpsql
import dpsql.errors as E
from dpsql.api.cli import main
from dpsql.errors import did_you_mean
from dpsql.schema import load_schema
from dpsql.sql import compile_batch

ADULT = load_schema({"table": "adult", "columns": {
    "age": {"type": "integer", "min": 17, "max": 90},
    "hours_per_week": {"type": "integer", "min": 1, "max": 99},
    "sex": {"type": "categorical", "values": ["Female", "Male"]},
    "income": {"type": "categorical", "values": ["<=50K", ">50K"]},
}})


# (sql, words the message holds, the text at the reported position)
SYNTAX = [
    ("SELEC COUNT(*) FROM adult", "unexpected 'SELEC'; a statement starts with SELECT, WITH or EXPLAIN "
     "(did you mean SELECT?)", "SELEC"),
    ("SELEC age", "unexpected 'SELEC'; a statement starts with SELECT", "SELEC"),
    ("1 + 1", "unexpected '1'; a statement starts with SELECT", "1 + 1"),
    ("SELECT sex COUNT(*) FROM adult GROUP BY sex", "unexpected '(' after 'COUNT'; is a comma missing between 'sex' "
     "and 'COUNT'?", "(*)"),
    ("SELECT COUNT(*) FORM adult", "unexpected 'adult' after 'FORM'; did you mean FROM?", "adult"),
    ("SELECT COUNT(*) FROM adult WHER age > 30", "unexpected 'age' after 'WHER'; did you mean WHERE?", "age >"),
    ("SELECT sex, COUNT(*) FROM adult GROUP sex", "unexpected 'sex' after 'GROUP'; did you mean GROUP BY?", "sex"),
    ("SELECT COUNT(*) FROM adult WHERE", "the statement ends after 'WHERE'; an expression must follow 'WHERE'",
     "WHERE"),
    ("SELECT COUNT(* FROM adult", "unexpected 'FROM' after '*'; expected ')'", "FROM"),
    ("SELECT COUNT(*) FROM adult WHERE age IN (20 30)", "unexpected '30' after '20'; expected ')', or is a comma "
     "missing before '30'?", "30)"),
    ("SELECT COUNT(*) FROM adult WHERE age > 30 sex = 'Male'", "unexpected 'sex' after '30'; is a comma, an "
     "operator, AND or OR missing before 'sex'?", "sex ="),
    ("SELECT COUNT(*) FROM WHERE age > 1", "unexpected 'WHERE' after 'FROM'; a table name must follow 'FROM'",
     "WHERE"),
    ("SELECT COUNT(*) FROM adult WHERE age = = 1", "unexpected '=' after '='; an expression must follow '='", "= 1"),
]


def _at(sql: str, err: E.SQLError) -> str:
    lines = sql.split("\n")
    return lines[err.line - 1][err.column - 1:]


@pytest.mark.parametrize("sql,words,at", SYNTAX, ids=[s for s, _, _ in SYNTAX])
def test_a_syntax_error_names_the_token_and_what_could_come_there(sql, words, at):
    with pytest.raises(E.ParseError) as info:
        compile_batch(sql, ADULT)
    assert info.value.reason.startswith(f"syntax error: {words}"), info.value.reason
    assert _at(sql, info.value).startswith(at), (info.value.line, info.value.column)


def test_a_syntax_error_in_a_batch_is_placed_in_its_statement():
    text = "SELECT COUNT(*) FROM adult;\nSELECT sex COUNT(*) FROM adult GROUP BY sex"
    with pytest.raises(E.ParseError, match="is a comma missing between 'sex' and 'COUNT'") as info:
        compile_batch(text, ADULT)
    assert (info.value.line, info.value.column) == (2, 17)


# (sql, error class, the message's start)
UNKNOWN = [
    ("SELECT AVG(hours) FROM adult", E.UnknownColumnError,
     "unknown column 'hours' (did you mean hours_per_week?); the schema of 'adult' declares age, hours_per_week"),
    ("SELECT COUNT(*) FROM adult WHERE agee > 30", E.UnknownColumnError, "unknown column 'agee' (did you mean age?)"),
    ("SELECT Sexx, COUNT(*) FROM adult GROUP BY Sexx", E.UnknownColumnError, "unknown column 'Sexx' (did you mean sex?)"),
    ("SELECT COUNT(*) FROM adult WHERE zip = 3", E.UnknownColumnError, "unknown column 'zip'; the schema"),
    ("SELECT COUNT(*) FROM adults", E.UnknownColumnError, "unknown table 'adults' (did you mean adult?)"),
    ("SELECT COUNT(*) FROM people", E.UnknownColumnError, "unknown table 'people'; the schema declares 'adult'"),
    ("SELECT COUNT(*) FROM adult WHERE adlt.age > 30", E.UnknownColumnError,
     "unknown table 'adlt' in adlt.age (did you mean adult?)"),
    ("SELECT sex, COUNT(*) AS total FROM adult GROUP BY sex ORDER BY totl", E.UnknownColumnError,
     "unknown column 'totl' in ORDER BY (did you mean total?)"),
    ("SELECT AVGG(age) FROM adult", E.UnsupportedSQLError, "unknown function AVGG (did you mean AVG?)"),
    ("SELECT sex, MEDIANN(age) FROM adult GROUP BY sex", E.UnsupportedSQLError,
     "unknown function MEDIANN (did you mean MEDIAN?)"),
    ("SELECT COUNT(*) FROM adult WHERE sqrtt(age) > 5", E.UnsupportedSQLError,
     "unknown function sqrtt (did you mean SQRT?)"),
    ("SELECT COUNT(*) FROM adult WHERE zqx(age) > 5", E.UnsupportedSQLError, "unknown function zqx"),
]


@pytest.mark.parametrize("sql,cls,start", UNKNOWN, ids=[s for s, _, _ in UNKNOWN])
def test_an_unknown_name_suggests_the_nearest_declared_one(sql, cls, start):
    with pytest.raises(E.SQLError) as info:
        compile_batch(sql, ADULT)
    assert type(info.value) is cls and info.value.reason.startswith(start), info.value.reason
    if "did you mean" not in start:
        assert "did you mean" not in info.value.reason


def test_did_you_mean():
    assert did_you_mean("HOURS", ["age", "hours_per_week"]) == " (did you mean hours_per_week?)"
    assert did_you_mean("week", ["age", "hours_per_week", "weekday_hours"]) == " (did you mean weekday_hours?)"
    assert did_you_mean("age", ["age", "agee"]) == ""  # a known name is not misspelt
    assert did_you_mean("", ["age"]) == "" and did_you_mean("a", ["age", "sex"]) == ""


def test_suggestions_read_the_public_schema_only():
    """Through the API the message names what the schema declares, whatever the table holds."""
    messages = set()
    for seed in (1, 2):
        db = dpsql.connect(make_table(50, seed=seed), schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), cache=False)
        with pytest.raises(E.UnknownColumnError) as info:
            db.query("SELECT COUNT(*) FROM people WHERE regoin = 'E'", epsilon=0.5)
        messages.add(str(info.value))
        assert db.spent().epsilon == 0
    assert messages == {"unknown column 'regoin' (did you mean region?); the schema of 'people' declares sex, age, "
                        "hours, white, black, region, score at line 1, column 35"}


# -- the command line speaks in flags, the Python API in arguments ---------------------------------------------

#: Python spellings a command-line message must not hold: ``name=...``, ``budget=None``, ``std_error``, ``delta=``.
PYTHON = re.compile(r"\b[a-z_]+=\.\.\.|budget=None|\bstd_error\b|delta=$|<in-memory ledger>")


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("messages")
    make_table(60, seed=3).sql("SELECT * FROM people").write_csv(str(d / "people.csv"))
    (d / "people.yaml").write_text(yaml.safe_dump(SCHEMA))
    return d


SQL = "SELECT region, COUNT(*) AS n FROM people GROUP BY region"


def _cli(capsys, files, ledger: str, *flags: str) -> str:
    rc = main(["query", SQL, "--data", str(files / "people.csv"), "--schema", str(files / "people.yaml"),
               "--ledger", str(files / ledger), *flags])
    err = capsys.readouterr().err
    assert rc == 2, err
    return err


@pytest.mark.parametrize("ledger,flags,advice", [
    # a ledger of epsilon=1 ("eps") and one of rho=1 ("rho") are made first, below
    ("eps", ["--budget-epsilon", "2", "--epsilon", "0.1"],
     "(leave out --budget-epsilon, --budget-delta and --budget-rho to use the stored one)"),
    ("eps", [], "say how much to spend: --epsilon ..."),
    ("rho", [], "say how much to spend: --rho ... (or --epsilon ...;"),
    ("eps", ["--rho", "0.1"], "--rho 0.1 cannot be spent from the budget epsilon=1.0, delta=0.0 (pure DP): spend "
     "--epsilon ... (and --delta ...), not --rho"),
    ("eps", ["--epsilon", "0.1", "--delta", "0.1"], "leave out --delta"),
    ("rho", ["--epsilon", "0.1", "--delta", "1e-6"], "spend --rho ... (or --epsilon ... for an epsilon-DP request), "
     "without --delta"),
    ("eps", ["--std-error", "5", "--noise", "gaussian"], "--std-error with Gaussian noise under an (epsilon, delta) "
     "budget needs --delta"),
    ("eps", ["--std-error", "5", "--epsilon", "1"], "give --std-error, or --epsilon or --rho, not both"),
    ("empty", [], "the file holds no ledger, and a new ledger needs its total budget: give --budget-epsilon (and "
     "--budget-delta) or --budget-rho"),
])
def test_command_line_messages_speak_in_flags(capsys, files, ledger, flags, advice):
    (files / "empty").touch()
    for name, budget in (("eps", ["--budget-epsilon", "1"]), ("rho", ["--budget-rho", "1"])):
        if not (files / name).exists():
            main(["budget", "--ledger", str(files / name), *budget])
            capsys.readouterr()
    err = _cli(capsys, files, ledger, *flags)
    assert advice in err and not PYTHON.search(err), err


def test_the_python_api_keeps_python_advice():
    with pytest.raises(E.LedgerError) as info:
        dpsql.connect(make_table(20, seed=1), schema=SCHEMA)
    assert str(info.value) == ("a ledger kept in memory (no ledger file) starts empty, and a new ledger needs a "
                               "budget: pass budget=dpsql.Budget(epsilon=...) (or rho=...), or the path of a ledger "
                               "file that holds one")
    db = dpsql.connect(make_table(20, seed=1), schema=SCHEMA, budget=dpsql.Budget(epsilon=1.0), cache=False)
    with pytest.raises(E.PrivacyError, match=r"say how much to spend: epsilon=\.\.\."):
        db.query(SQL)
