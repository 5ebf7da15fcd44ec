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
