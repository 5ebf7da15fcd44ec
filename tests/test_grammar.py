"""grammar/ and the compiler stay in step: every production of
grammar/dpsql.ebnf has an example in grammar/examples.sql, every example names
real productions and compiles, and every construct the grammar lists as
rejected is rejected."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dpsql.errors import SQLError, UnknownColumnError, UnsupportedSQLError
from dpsql.schema import load_schema
from dpsql.sql import compile_batch, parse_statements, plan_statement

GRAMMAR = Path(__file__).resolve().parent.parent / "grammar"
SCHEMA = load_schema(str(GRAMMAR / "schema.yaml"))


def _ebnf_text() -> str:
    return (GRAMMAR / "dpsql.ebnf").read_text()


def productions() -> list[str]:
    text = re.sub(r"\(\*.*?\*\)", " ", _ebnf_text(), flags=re.S)
    return re.findall(r"^\s*([a-z_]+)\s*=", text, flags=re.M)


def examples() -> list[tuple[list[str], str]]:
    out: list[tuple[list[str], str]] = []
    rules: list[str] | None = None
    body: list[str] = []
    for line in (GRAMMAR / "examples.sql").read_text().splitlines():
        m = re.match(r"--\s*rule:\s*(.+)$", line)
        if m:
            if rules is not None:
                out.append((rules, "\n".join(body)))
            rules = [r.strip() for r in m.group(1).split(",")]
            body = []
        elif rules is not None:
            body.append(line)
    if rules is not None:
        out.append((rules, "\n".join(body)))
    return out


def test_grammar_has_productions():
    names = productions()
    assert len(names) == len(set(names)), "duplicate production"
    assert {"statement", "aggregate", "condition", "case", "group_by_clause", "dp_options"} <= set(names)


def test_every_production_has_an_example():
    tagged = {r for rules, _ in examples() for r in rules}
    missing = set(productions()) - tagged
    assert not missing, f"productions without an example in grammar/examples.sql: {sorted(missing)}"


def test_every_example_names_a_production():
    unknown = {r for rules, _ in examples() for r in rules} - set(productions())
    assert not unknown, f"examples tagged with unknown productions: {sorted(unknown)}"


@pytest.mark.parametrize("rules,sql", examples(), ids=[",".join(r) for r, _ in examples()])
def test_example_compiles(rules, sql):
    batch = compile_batch(sql, SCHEMA)
    # rows to measure, unless every statement is group keys alone (answered from the domain)
    assert (batch.workload.shape[0] > 0 if batch.terms
            else all(b.term is None for st in batch.statements for b in st.blocks))
    for st in parse_statements(sql):
        plan_statement(st, SCHEMA)
    if "batch" in rules:
        assert len(batch.statements) > 1


def test_all_examples_compile_as_one_batch():
    text = "\n".join(sql for _, sql in examples())
    batch = compile_batch(text, SCHEMA)
    assert len(batch.statements) == len(parse_statements(text))


# Every construct the grammar lists as outside it, with a statement using it.
REJECTED = {
    "JOIN with a table not declared public": "SELECT COUNT(*) FROM adult JOIN other ON adult.age = other.age",
    "a second table": "SELECT COUNT(*) FROM adult, other",
    "subqueries": "SELECT COUNT(*) FROM adult WHERE age IN (SELECT age FROM adult)",
    "recursive CTEs (WITH RECURSIVE)": "WITH RECURSIVE a AS (SELECT * FROM adult) SELECT COUNT(*) FROM a",
    "UNION": "SELECT COUNT(*) FROM adult UNION ALL SELECT COUNT(*) FROM adult",
    "window functions over the table's rows": "SELECT COUNT(*) OVER () FROM adult",
    "DISTINCT in an aggregate": "SELECT COUNT(DISTINCT age) FROM adult",
    "DISTINCT ON": "SELECT DISTINCT ON (sex) sex FROM adult",
    "other aggregates (MIN, MAX, ...)": "SELECT MAX(age) FROM adult",
    "non-deterministic functions (random, now, current_date)":
        "SELECT COUNT(*) FROM adult WHERE random() < 0.5",
    "WITH TOTALS": "SELECT sex, COUNT(*) FROM adult GROUP BY sex WITH TOTALS",
    "QUALIFY without a window": "SELECT sex, COUNT(*) FROM adult GROUP BY sex QUALIFY COUNT(*) > 1",
    "SELECT *": "SELECT * FROM adult",
    "parameters": "SELECT COUNT(*) FROM adult WHERE age > $1",
    "non-SELECT statements": "DROP TABLE adult",
    "BETWEEN SYMMETRIC": "SELECT COUNT(*) FROM adult WHERE age BETWEEN SYMMETRIC 60 AND 20",
    "TABLESAMPLE / USING SAMPLE": "SELECT COUNT(*) FROM adult TABLESAMPLE 10%",
    "qualified table names": "SELECT COUNT(*) FROM main.adult",
    "NULLS FIRST": "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex ORDER BY sex NULLS FIRST",
    "LIMIT ... PERCENT": "SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex LIMIT 50 PERCENT",
}


def test_rejected_list_matches_the_grammar():
    text = re.sub(r"\s+", " ", _ebnf_text())
    m = re.search(r"Outside the grammar, and rejected: (.*?)\. \*\)", text)
    assert m, "the grammar lists the rejected constructs"
    listed = [x.strip() for x in re.split(r",(?![^()]*\))", m.group(1))]
    assert listed == list(REJECTED), listed


@pytest.mark.parametrize("construct,sql", list(REJECTED.items()))
def test_rejected_constructs_raise(construct, sql):
    with pytest.raises(SQLError) as info:
        plan_statement(sql, SCHEMA)
    assert isinstance(info.value, (UnsupportedSQLError, UnknownColumnError))
    assert info.value.line is not None
