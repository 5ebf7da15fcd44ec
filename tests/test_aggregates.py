"""dpsql.sql.aggregates: each function against numpy on raw values, and its gradient
against finite differences (the delta method's standard errors rest on it)."""

from __future__ import annotations

import numpy as np
import pytest

from dpsql.sql.aggregates import MEASURES, gradient, value

NUMPY = {"count": len, "sum": np.sum, "avg": np.mean, "var_pop": np.var, "var_samp": lambda v: np.var(v, ddof=1),
         "stddev_pop": np.std, "stddev_samp": lambda v: np.std(v, ddof=1)}


def parts_of(values: np.ndarray) -> dict[str, np.ndarray]:
    return {"count": np.array([float(len(values))]), "sum": np.array([values.sum()]),
            "sumsq": np.array([(values**2).sum()])}


@pytest.mark.parametrize("func", sorted(MEASURES))
def test_values_match_numpy(func):
    rng = np.random.default_rng(0)
    for n in (2, 3, 50):
        values = rng.integers(-5, 40, n).astype(float)
        assert value(func, parts_of(values))[0] == pytest.approx(NUMPY[func](values), rel=1e-12)


@pytest.mark.parametrize("func", ["avg", "var_pop", "var_samp", "stddev_pop", "stddev_samp"])
def test_too_few_rows_give_null_as_duckdb_does(func):
    none = value(func, parts_of(np.array([])))
    one = value(func, parts_of(np.array([7.0])))
    assert np.isnan(none[0])
    assert np.isnan(one[0]) if func.endswith("samp") else one[0] == (7.0 if func == "avg" else 0.0)


def test_a_noisy_negative_variance_is_zero():
    parts = {"count": np.array([10.0]), "sum": np.array([50.0]), "sumsq": np.array([240.0])}  # 240 < 50²/10
    assert value("var_samp", parts)[0] == 0.0 and value("stddev_pop", parts)[0] == 0.0


@pytest.mark.parametrize("func", sorted(MEASURES))
def test_gradient_matches_finite_differences(func):
    parts = {"count": np.array([37.0]), "sum": np.array([412.0]), "sumsq": np.array([6011.0])}
    grad = gradient(func, parts)
    assert set(grad) == set(MEASURES[func])
    for m in MEASURES[func]:
        h = 1e-4 * parts[m][0]
        up = {**parts, m: parts[m] + h}
        down = {**parts, m: parts[m] - h}
        numeric = (value(func, up) - value(func, down)) / (2 * h)
        assert grad[m][0] == pytest.approx(numeric[0], rel=1e-6)


EXPRESSIONS = ['"a" / "b"', 'POWER("a", 2) - 3 * "a"', '"a" ^ 0.5 * "b"', 'sqrt("a") + "b" * 0.5', 'ln("a") - exp("b" / 100)',
               'abs("a" - 2 * "b")', '-("a" * "b") / ("b" + 1)', '("a" + "k") * 2']
DUCKDB_VALUES = {"a": np.array([3.0, 40.0, 7.5]), "b": np.array([2.0, 9.0, 11.0]), "k": np.array([1, 2, 3])}


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_expression_partials_match_duckdb_values_and_finite_differences(text):
    """dpsql.sql.delta: the value equals DuckDB's on the same numbers, and each partial derivative
    (with respect to the aggregates a and b; k is a key, not noisy) equals a central finite difference."""
    import duckdb
    import pandas as pd
    import sqlglot

    from dpsql.sql.delta import partials

    expr = sqlglot.parse_one(text, dialect="duckdb")
    value_, grad = partials(expr, DUCKDB_VALUES, {"a", "b"})
    df = pd.DataFrame(DUCKDB_VALUES)  # noqa: F841 - read by DuckDB below
    want = duckdb.sql(f"SELECT ({text})::DOUBLE AS v FROM df").df()["v"].to_numpy()
    np.testing.assert_allclose(value_, want, rtol=1e-12)
    assert set(grad) <= {"a", "b"}
    for name in ("a", "b"):
        h = 1e-6 * np.abs(DUCKDB_VALUES[name])
        up = {**DUCKDB_VALUES, name: DUCKDB_VALUES[name] + h}
        down = {**DUCKDB_VALUES, name: DUCKDB_VALUES[name] - h}
        numeric = (partials(expr, up, {"a", "b"})[0] - partials(expr, down, {"a", "b"})[0]) / (2 * h)
        np.testing.assert_allclose(grad.get(name, 0.0), numeric, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("text", ['CASE WHEN "a" > 1 THEN "a" END', '"a" // 2', 'round("a", "b")', 'greatest("a", "b")',
                                  '"a" > "b"', 'POWER("a", "b")'])
def test_expressions_the_delta_method_cannot_follow_give_none(text):
    import sqlglot

    from dpsql.sql.delta import partials

    assert partials(sqlglot.parse_one(text, dialect="duckdb"), DUCKDB_VALUES, {"a", "b"}) is None


def test_a_rounded_value_has_the_error_of_the_value():
    """ROUND(100.0 * n / SUM(n) OVER (), 1), a share of the total as analysts write it: DuckDB's
    rounding (half away from zero), and the gradient of the value rounded."""
    import sqlglot

    from dpsql.sql.delta import partials

    columns = {"a": np.array([2.25, -2.25, 7.0]), "b": np.array([4.0, 4.0, 3.0])}
    value, grad = partials(sqlglot.parse_one('round("a" / "b", 2)', dialect="duckdb"), columns, {"a", "b"})
    assert value.tolist() == [0.56, -0.56, 2.33]
    np.testing.assert_allclose(grad["a"], 1 / columns["b"])


def test_the_noisy_cdf_is_the_least_squares_monotone_fit():
    """The pool-adjacent-violators fit equals SciPy's isotonic regression (an independent oracle)."""
    from scipy.optimize import isotonic_regression

    from dpsql.sql.aggregates import _monotone

    rng = np.random.default_rng(3)
    for _ in range(50):
        p = np.cumsum(rng.integers(0, 5, 30)) + rng.normal(0, 4, 30)
        np.testing.assert_allclose(_monotone(p), isotonic_regression(p).x, atol=1e-9)


@pytest.mark.parametrize("func", ["quantile_cont", "quantile_disc"])
@pytest.mark.parametrize("descending", [False, True])
def test_quantiles_read_from_exact_prefix_counts_equal_duckdb(func, descending):
    """With exact prefix counts, the quantile is DuckDB's, for every fraction, in either order."""
    import duckdb

    from dpsql.sql.aggregates import quantile

    rng = np.random.default_rng(4)
    domain = np.array([-3, 0, 2, 5, 11])
    for _ in range(60):
        rows = rng.choice(domain, int(rng.integers(1, 12))).tolist()
        q = float(rng.choice([0.0, 0.1, 0.25, 1 / 3, 0.5, 0.9, 1.0, rng.random()]))
        parts = {f"le{j}": np.array([float(sum(r <= v for r in rows))]) for j, v in enumerate(domain)}
        got = quantile(func, q, descending, domain, parts)[0]
        sql_func = "percentile_cont" if func == "quantile_cont" else "percentile_disc"
        want = duckdb.sql(f"SELECT {sql_func}({q!r}) WITHIN GROUP (ORDER BY x{' DESC' if descending else ''}) "
                          f"FROM (SELECT unnest({rows}) AS x)").fetchall()[0][0]
        assert got == pytest.approx(want, abs=1e-12), (rows, q)


def test_a_quantile_interval_holds_the_estimate_and_shrinks_to_it_without_noise():
    from dpsql.sql.aggregates import quantile, quantile_interval

    domain = np.arange(10)
    rows = np.repeat(domain, [5, 0, 3, 9, 1, 0, 7, 2, 2, 4])
    exact = {f"le{j}": np.array([float((rows <= v).sum())]) for j, v in enumerate(domain)}
    rng = np.random.default_rng(5)
    noisy = {k: v + rng.normal(0, 2, 1) for k, v in exact.items()}
    se = {k: np.array([2.0]) for k in exact}
    for parts, spread in ((exact, {k: np.zeros(1) for k in exact}), (noisy, se)):
        value = quantile("quantile_disc", 0.5, False, domain, parts)
        low, high = quantile_interval("quantile_disc", 0.5, False, domain, parts, spread, 1.96)
        assert low[0] <= value[0] <= high[0]
        if parts is exact:
            assert low[0] == value[0] == high[0] == 3
    assert high[0] > low[0]  # the noisy band is wider than a point
