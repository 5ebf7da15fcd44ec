"""Window functions over aggregates: post-processing of the released groups, against DuckDB.
Windows over the table's rows stay refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sql_oracle import SCHEMA, _py, histogram, make_table

import dpsql
from dpsql.errors import UnsupportedSQLError
from dpsql.private.budget import Budget
from dpsql.sql import compile_batch
from dpsql.sql.postprocess import postprocess

# every group is present in the data (so dpsql's groups, which cover the keys' domain, are DuckDB's)
STATEMENTS = [
    "SELECT region, COUNT(*) AS n, ROUND(100.0 * COUNT(*) / SUM(COUNT(*)) OVER (), 1) AS pct FROM people "
    "GROUP BY region ORDER BY region",
    "SELECT sex, region, COUNT(*) AS n, rank() OVER (PARTITION BY sex ORDER BY COUNT(*) DESC) AS r, "
    "SUM(COUNT(*)) OVER (PARTITION BY sex) AS total FROM people WHERE sex IS NOT NULL GROUP BY sex, region "
    "HAVING COUNT(*) > 30 ORDER BY sex, r, region",
    "SELECT region, AVG(age) AS a, row_number() OVER (ORDER BY AVG(age) DESC) AS rn FROM people GROUP BY region "
    "ORDER BY rn",
    "SELECT region, COUNT(*) AS n, ntile(2) OVER (ORDER BY COUNT(*)) AS half, lag(COUNT(*), 1, 0) OVER "
    "(ORDER BY region) AS prev, dense_rank() OVER (ORDER BY region DESC) AS dr, percent_rank() OVER "
    "(ORDER BY COUNT(*)) AS pr, cume_dist() OVER (ORDER BY COUNT(*)) AS cd, SUM(COUNT(*)) OVER (ORDER BY region "
    "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS running FROM people GROUP BY region "
    "ORDER BY rank() OVER (ORDER BY COUNT(*) DESC)",
    "SELECT SUM(COUNT(*)) OVER () AS total, COUNT(*) AS n, AVG(SUM(age)) OVER () AS s FROM people WHERE age > 3",
    "SELECT sex, COUNT(*) AS n, GROUPING(sex) AS g, SUM(COUNT(*)) OVER (PARTITION BY GROUPING(sex)) AS t "
    "FROM people GROUP BY ROLLUP (sex) ORDER BY g, sex",
]


def _same_rows(got, want, context):
    assert len(got) == len(want), context
    for row, exact in zip(got, want):
        for g, w in zip(row, exact):
            g, w = _py(g), _py(w)
            if isinstance(w, float) or isinstance(g, float):
                assert g is not None and w is not None and math.isclose(g, w, rel_tol=1e-6, abs_tol=1e-6), \
                    (context, row, exact)
            else:
                assert g == w, (context, row, exact)


@pytest.fixture(scope="module")
def con():
    c = make_table(n=300, seed=1)
    yield c
    c.close()


@pytest.mark.parametrize("sql", STATEMENTS)
def test_windows_over_exact_answers_are_duckdbs(con, sql):
    batch = compile_batch(sql, SCHEMA)
    table = postprocess(batch, batch.workload.matvec(histogram(con, batch)))[0]
    _same_rows(list(table.itertuples(index=False)), con.sql(sql).fetchall(), sql)


def test_released_windows_equal_duckdbs_at_a_huge_epsilon(con):
    db = dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=1e13), cache=False, progress=False)
    results = db.batch(STATEMENTS[:3], epsilon=1e12, noise="laplace")
    for sql, res in zip(STATEMENTS, results):
        got = res.df[[c for c in res.df.columns if not c.endswith(("std_error", "ci_low", "ci_high"))]]
        _same_rows(list(got.itertuples(index=False)), con.sql(sql).fetchall(), sql)


def test_a_linear_window_and_a_share_of_it_have_standard_errors_a_rank_none(con):
    """The share of the total had a NULL standard error; a rank stays without one."""
    db = dpsql.connect(con, schema=SCHEMA, budget=Budget(epsilon=10), cache=False, progress=False)
    df = db.query(STATEMENTS[0], epsilon=1).df
    assert np.isfinite(df["n_std_error"]).all() and (df["pct_std_error"] > 0).all()
    assert (df["pct_ci_low"] < df["pct"]).all() and (df["pct"] < df["pct_ci_high"]).all()
    df = db.query(STATEMENTS[1], epsilon=1).df
    assert (df["total_std_error"] > 0).all() and "r_std_error" not in df.columns


# -- standard errors of windows: the delta method with the covariances between groups --------------

SMALL = {"table": "p", "columns": {"sex": {"type": "categorical", "values": ["F", "M"]},
                                   "region": {"type": "integer", "min": 0, "max": 3},
                                   "age": {"type": "integer", "min": 0, "max": 9}}}
#: the cells, the total and prefix ranges, measured together under Gaussian noise: their least-squares
#: answers covary
WINDOWED = ("SELECT sex, age, COUNT(*) AS n, SUM(COUNT(*)) OVER (PARTITION BY sex) AS t, "
            "100.0 * COUNT(*) / SUM(COUNT(*)) OVER () AS pct, SUM(COUNT(*)) OVER (ORDER BY sex, age ROWS "
            "BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS run, AVG(COUNT(*)) OVER (PARTITION BY age) AS a "
            "FROM p GROUP BY sex, age ORDER BY sex, age; SELECT COUNT(*) FROM p; "
            + "; ".join(f"SELECT sex, COUNT(*) FROM p WHERE age < {k} GROUP BY sex" for k in range(1, 10)))


def _oracle(operator):
    """The statement's error columns from :func:`error_columns`, and the exact covariance of the
    workload's least-squares answers, ``σ² W (AᵀA)⁺ Wᵀ``, formed densely (small domain)."""
    from dpsql.engine.uncertainty import error_columns
    from dpsql.hdmm.optimize import select
    from dpsql.privacy import Gaussian

    batch = compile_batch(WINDOWED, SMALL)
    W = batch.workload
    S = select(W, Gaussian(rho=0.5), operators=[operator], restarts=1).strategy
    A = S.matrix.dense()
    sigma = 1.7
    cov = sigma**2 * W.dense() @ np.linalg.pinv(A.T @ A, rcond=1e-10, hermitian=True) @ W.dense().T
    y = W.dense() @ np.random.default_rng(3).integers(0, 9, W.shape[1]).astype(float)
    se = sigma * np.sqrt(np.concatenate(S.query_variances(W)))
    st = batch.statements[0]

    def covariance(a, b, full=False):
        return sigma**2 * (S.cross_covariance if full else S.cross_variances)(W, a, b)

    return st, y, cov, error_columns(st, y, se, 1.96, covariance)


@pytest.mark.parametrize("operator", ["OPT_kron", "OPT_M"])  # OPT_plus's local least squares: below
def test_window_standard_errors_are_the_exact_covariance_of_the_linear_combination(operator):
    st, y, cov, errors = _oracle(operator)
    (block,) = st.blocks_of("n")
    rows = np.arange(block.start, block.stop)
    n = y[rows]
    C = cov[np.ix_(rows, rows)]  # the COUNTs' covariance, group by group
    sex = np.array([g[0] for g in st.groups])
    age = np.array([g[1] for g in st.groups])
    same_sex = (sex[:, None] == sex[None, :]).astype(float)
    same_age = (age[:, None] == age[None, :]) / (age[:, None] == age[None, :]).sum(axis=1)
    running = np.tril(np.ones((len(n), len(n))))  # the groups are in key order
    total = n.sum()
    share = 100.0 * (np.eye(len(n)) / total - n[:, None] / total**2)  # ∂(100 n_r / Σ n)/∂n_j
    ignoring = False
    for column, grad in [("t", same_sex), ("run", running), ("a", same_age), ("pct", share)]:
        want = np.sqrt(np.einsum("ij,jk,ik->i", grad, C, grad))
        np.testing.assert_allclose(errors[f"{column}_std_error"], want, rtol=1e-7, err_msg=column)
        independent = np.sqrt(np.einsum("ij,j,ij->i", grad, np.diag(C), grad))
        ignoring |= bool(np.any(np.abs(independent / want - 1) > 0.05))
    assert ignoring  # the covariances between groups matter: a sum of variances would be wrong


def test_a_window_with_too_many_groups_has_no_standard_error(monkeypatch):
    from dpsql.engine import uncertainty

    monkeypatch.setattr(uncertainty, "MAX_WINDOW_GROUPS", 19)
    _, _, _, errors = _oracle("OPT_kron")
    assert np.isnan(errors["t_std_error"]).all() and np.isfinite(errors["n_std_error"]).all()


@pytest.mark.slow
@pytest.mark.parametrize("operator", ["OPT_kron", "OPT_plus"])
def test_window_standard_errors_match_the_spread_over_noise_draws(operator):
    """300 draws of Gaussian noise on the strategy's measurements, least squares, post-processing:
    the spread of each window's value is its stated standard error."""
    from dpsql.engine.uncertainty import error_columns
    from dpsql.hdmm.optimize import select
    from dpsql.hdmm.reconstruct import least_squares
    from dpsql.privacy import Gaussian

    batch = compile_batch(WINDOWED, SMALL)
    W = batch.workload
    S = select(W, Gaussian(rho=0.5), operators=[operator], restarts=1).strategy
    A = S.matrix.dense()
    rng = np.random.default_rng(4)
    x = rng.integers(20, 60, W.shape[1]).astype(float)
    sigma = 2.0
    runs = []
    for _ in range(300):
        y = least_squares(W, S, A @ x + rng.normal(0, sigma, A.shape[0]))
        runs.append(postprocess(batch, y)[0][["t", "pct", "run", "a"]].to_numpy(dtype=float))
    spread = np.std(runs, axis=0)
    y = W.dense() @ x
    se = sigma * np.sqrt(np.concatenate(S.query_variances(W)))
    errors = error_columns(batch.statements[0], y, se, 1.96, lambda a, b, full=False: sigma**2 * (
        S.cross_covariance if full else S.cross_variances)(W, a, b))
    stated = np.column_stack([errors[f"{c}_std_error"] for c in ("t", "pct", "run", "a")])
    assert np.all(np.abs(spread / stated - 1) < 0.15), spread / stated


@pytest.mark.parametrize("sql,words", [
    ("SELECT COUNT(*) OVER () FROM people", "window functions over the table's rows"),
    ("SELECT sex, SUM(age) OVER (PARTITION BY sex) FROM people", "window functions over the table's rows"),
    ("SELECT row_number() OVER (ORDER BY age) FROM people", "window functions over the table's rows"),
    ("SELECT sex, COUNT(*) FROM people GROUP BY sex HAVING SUM(COUNT(*)) OVER () > 3", "not allowed in HAVING"),
    ("SELECT COUNT(*) FROM people WHERE row_number() OVER () > 1", "not allowed in WHERE"),
    ("SELECT sex, abs(COUNT(*)) OVER () FROM people GROUP BY sex", "window function ABS is not supported"),
])
def test_windows_over_rows_are_refused(sql, words):
    with pytest.raises(UnsupportedSQLError, match=words):
        compile_batch(sql, SCHEMA)


def test_within_group_read_after_noise_is_not_nested(con):
    """ORDER BY PERCENTILE_DISC(q) WITHIN GROUP (...) was refused as a nested aggregate."""
    sql = ("SELECT region, COUNT(*) AS n FROM people GROUP BY region "
           "ORDER BY PERCENTILE_DISC(0.3) WITHIN GROUP (ORDER BY age DESC), region")
    batch = compile_batch(sql, SCHEMA)
    table = postprocess(batch, batch.workload.matvec(histogram(con, batch)))[0]
    _same_rows(list(table.itertuples(index=False)), con.sql(sql).fetchall(), sql)
