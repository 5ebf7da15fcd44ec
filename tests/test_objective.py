"""The ``"max"`` objective: minimize the largest per-query variance.

Checked against the total-variance selection (never worse on the largest
variance), against its own dense figures, and end to end through the API
and the command line, where answers stay exact at a huge ε.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from sql_oracle import SCHEMA, make_table

import dpsql
from dpsql.api.cli import main
from dpsql.errors import ArgumentError, WorkloadError
from dpsql.hdmm.error_analysis import max_variance, rmse
from dpsql.hdmm.matrix import Identity, IdentityTotal, Prefix, Total
from dpsql.hdmm.optimize import select
from dpsql.hdmm.workload import Workload, marginals_workload
from dpsql.privacy import Gaussian, Laplace

NOISES = [Laplace(1.0), Gaussian(1.0, 1e-6)]
SQLS = ["SELECT region, sex, COUNT(*) AS n FROM people GROUP BY region, sex",
        "SELECT COUNT(*) AS n FROM people WHERE age < 5",
        "SELECT white, COUNT(*) AS n FROM people GROUP BY white"]


def test_max_objective_never_raises_the_largest_variance():
    W = Workload((6, 4), [(1.0, (Prefix(6), Total(4))), (1.0, (Identity(6), Identity(4))),
                          (3.0, (Total(6), Identity(4)))])
    for noise in NOISES:
        total = select(W, noise, restarts=1)
        worst = select(W, noise, restarts=1, objective="max")
        assert worst.max_variance <= total.max_variance * (1 + 1e-9)
        assert max_variance(W, worst.strategy, noise) == pytest.approx(worst.max_variance, rel=1e-9)
        assert rmse(W, worst.strategy, noise) == pytest.approx(worst.rmse, rel=1e-9)
    with pytest.raises(WorkloadError, match="objective"):
        select(W, NOISES[0], objective="mean")


def test_gaussian_marginal_workloads_get_the_certified_optimum():
    W = Workload((3, 4, 5), [(1.0, (IdentityTotal(3), Identity(4), Total(5)))] +
                 [(w, fs) for w, fs in marginals_workload((3, 4, 5), k=2).terms])
    sel = select(W, Gaussian(1.0, 1e-6), restarts=1, objective="max")
    assert sel.operator == "OPT_M_max"
    total = select(W, Gaussian(1.0, 1e-6), restarts=1)
    assert sel.max_variance < total.max_variance
    dense = sel.strategy.matrix.dense()
    X = np.linalg.pinv(dense.T @ dense, rcond=1e-10, hermitian=True)
    sens = float(np.sqrt((dense**2).sum(axis=0)).max())
    var = Gaussian(1.0, 1e-6).variance(sens) * np.diag(W.dense() @ X @ W.dense().T)
    assert sel.max_variance == pytest.approx(var.max(), rel=1e-8)


def test_the_api_answers_exactly_and_caps_the_largest_std_error():
    con = make_table(300, seed=2)
    db = dpsql.connect(con, schema=SCHEMA, budget=dpsql.Budget(epsilon=1e10))
    for res, sql in zip(db.batch(SQLS, epsilon=1e9, noise="laplace", objective="max"), SQLS):
        exact = con.sql(sql).df()
        assert res.df["n"].sum() == pytest.approx(exact["n"].sum(), abs=1e-4)
    by_total = db.batch(SQLS, epsilon=1.0, noise="laplace")
    by_max = db.batch(SQLS, epsilon=1.0, noise="laplace", objective="max")
    worst = max(r.df["std_error"].max() for r in by_max)
    assert worst <= max(r.df["std_error"].max() for r in by_total) * (1 + 1e-9)
    spent = db.spent()
    with pytest.raises(ArgumentError, match="objective"):
        db.query(SQLS[0], epsilon=1.0, objective="worst")
    assert db.spent() == spent


def test_the_command_line_takes_the_objective(tmp_path, capsys):
    con = make_table(200, seed=3)
    con.sql("SELECT * FROM people").write_parquet(str(tmp_path / "people.parquet"))
    (tmp_path / "people.yaml").write_text(yaml.safe_dump(SCHEMA))
    rc = main(["query", SQLS[0], "--data", str(tmp_path / "people.parquet"), "--schema",
               str(tmp_path / "people.yaml"), "--ledger", str(tmp_path / "l.ledger"), "--epsilon", "1",
               "--budget-epsilon", "2", "--noise", "laplace", "--objective", "max"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "std_error" in out
