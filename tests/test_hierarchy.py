"""Hierarchical factors (dpsql.hdmm.hierarchy, OPT_H): the tree's estimate, variances, level weights
and integer tables against dense oracles on small random hierarchies."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from dpsql.errors import WorkloadError
from dpsql.hdmm.hierarchy import HierarchyFactor, Tree, optimize_weights, topdown_integer
from dpsql.hdmm.matrix import Identity, Sparse, Total
from dpsql.hdmm.optimize.hier import opt_hier
from dpsql.hdmm.reconstruct import least_squares
from dpsql.hdmm.strategy import KronStrategy
from dpsql.hdmm.workload import Workload
from dpsql.privacy import Gaussian


def _geography(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Each cell's state and county: 3-4 states of 1-4 counties of 1-5 cells (one county may be its state)."""
    rng = np.random.default_rng(seed)
    state, county, c = [], [], 0
    for s in range(int(rng.integers(3, 5))):
        for _ in range(int(rng.integers(1, 5))):
            k = int(rng.integers(1, 6))
            state += [s] * k
            county += [c] * k
            c += 1
    return np.array(state), np.array(county)


def _groups(labels: np.ndarray) -> Sparse:
    return Sparse(sp.csr_matrix((np.ones(labels.size), (labels, np.arange(labels.size)))))


def _all_nodes(tree: Tree) -> np.ndarray:
    return np.vstack([A.toarray() for A in tree.aggregations])


@pytest.mark.parametrize("seed", range(4))
def test_estimate_and_variances_equal_dense_least_squares(seed):
    state, county = _geography(seed)
    tree = Tree.from_labels(state.size, [state, county])
    weights = (0.3, 0.5, 0.7, 0.4)
    H = HierarchyFactor(tree, weights)
    D = H.dense()
    G_inv = np.linalg.inv(D.T @ D)
    rng = np.random.default_rng(seed)
    y = D @ rng.integers(0, 30, state.size) + rng.normal(size=D.shape[0])
    np.testing.assert_allclose(tree.estimate(y, weights), G_inv @ D.T @ y, atol=1e-9)
    nodes = _all_nodes(tree)
    np.testing.assert_allclose(tree.node_variances(weights), np.einsum("ij,jk,ik->i", nodes, G_inv, nodes), rtol=1e-10)
    X = rng.normal(size=(state.size, 3))
    np.testing.assert_allclose(H.inverse.matvec(X), G_inv @ X, atol=1e-10)
    np.testing.assert_allclose(H.column_norms(2), np.sqrt((D**2).sum(axis=0)))
    other = Sparse(sp.csr_matrix(rng.normal(size=(2, state.size))))  # not nodes: the general path
    np.testing.assert_allclose(H.cross_diag(other, other),
                               np.einsum("ij,jk,ik->i", other.dense(), G_inv, other.dense()), rtol=1e-9)


def test_levels_add_up_exactly():
    state, county = _geography(7)
    tree = Tree.from_labels(state.size, [state, county])
    weights = (0.2, 0.6, 0.6, 0.5)
    H = HierarchyFactor(tree, weights)
    y = H.matvec(np.arange(state.size, dtype=float)) + np.random.default_rng(0).normal(size=H.shape[0]) * 3
    est = tree.estimate_nodes(y, weights)
    np.testing.assert_allclose(_all_nodes(tree) @ est[tree.offsets[-2]:], est, atol=1e-9)
    parent_sums = np.zeros(tree.nodes)
    np.add.at(parent_sums, tree.parent[1:], est[1:] if est.ndim == 1 else est[1:])
    np.testing.assert_allclose(parent_sums[:tree.offsets[-2]], est[:tree.offsets[-2]], atol=1e-9)


def test_standard_errors_match_the_spread_of_repeated_draws():
    state, county = _geography(3)
    tree = Tree.from_labels(state.size, [state, county])
    weights = (0.4, 0.5, 0.5, 0.6)
    H = HierarchyFactor(tree, weights)
    x = np.random.default_rng(1).integers(0, 50, state.size).astype(float)
    rng = np.random.default_rng(2)
    draws = 4000
    Y = H.matvec(x)[:, None] + rng.normal(size=(H.shape[0], draws))
    est = tree.estimate_nodes(Y, weights)
    spread = est.var(axis=1, ddof=1)
    # the sample variance of 4000 normal draws is within 10% of the truth (about 4.5 standard deviations)
    np.testing.assert_allclose(spread, tree.node_variances(weights), rtol=0.1)
    np.testing.assert_allclose(est.mean(axis=1), _all_nodes(tree) @ x, atol=0.2)


@pytest.mark.parametrize("seed", range(3))
def test_integer_tables_are_non_negative_and_add_up(seed):
    state, county = _geography(seed)
    tree = Tree.from_labels(state.size, [state, county])
    weights = (0.3, 0.3, 0.5, 0.7)
    H = HierarchyFactor(tree, weights)
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 3, (state.size, 4)).astype(float)   # small counts: many estimates negative
    est = tree.estimate_nodes(H.matvec(x) + rng.normal(size=(H.shape[0], 4)) * 4, weights)
    assert (est < 0).any()
    table = topdown_integer(tree, est)
    assert table.dtype.kind == "i" and (table >= 0).all()
    assert (table[0] == np.maximum(np.rint(est[0]), 0)).all()
    sums = np.zeros_like(table)
    np.add.at(sums, tree.parent[1:], table[1:])
    np.testing.assert_array_equal(sums[:tree.offsets[-2]], table[:tree.offsets[-2]])
    assert np.abs(table - est).max() < np.abs(est).max() + 4  # near the estimates, not arbitrary


def test_not_nested_groups_are_refused():
    with pytest.raises(WorkloadError, match="not nested"):
        Tree.from_labels(4, [np.array([0, 0, 1, 1]), np.array([0, 1, 1, 2])])


def test_optimized_weights_beat_equal_weights_and_sensitivity_is_one():
    state, county = _geography(5)
    tree = Tree.from_labels(state.size, [state, county])
    tracts = np.arange(tree.offsets[-2], tree.nodes)
    weights = optimize_weights(tree, [(1.0, tracts)], 2)
    assert HierarchyFactor(tree, weights).sensitivity(2) == pytest.approx(1.0)

    def error(w):
        return float(tree.node_variances(w)[tracts].sum()) * float(tree.leaf_norms(w, 2).max()) ** 2

    assert error(weights) < 0.9 * error((1.0, 1.0, 1.0, 1.0))
    assert error(weights) == pytest.approx(tracts.size, rel=1e-3)  # for leaves alone: identity is optimal


def test_opt_h_product_strategy_answers_as_dense_least_squares():
    state, county = _geography(11)
    n = state.size
    W = Workload((n, 3), [(1.0, (_groups(state), Identity(3))), (1.0, (_groups(county), Total(3))),
                          (1.0, (Identity(n), Total(3)))])
    A = opt_hier(W, Gaussian(1.0, 1e-6))
    assert isinstance(A, KronStrategy) and isinstance(A.factors[0], HierarchyFactor)
    D = A.matrix.dense()
    rng = np.random.default_rng(0)
    y = D @ rng.integers(0, 10, n * 3) + rng.normal(size=D.shape[0])
    Wd = W.dense()
    np.testing.assert_allclose(least_squares(W, A, y), Wd @ np.linalg.pinv(D) @ y, atol=1e-8)
    cov = Wd @ np.linalg.pinv(D.T @ D) @ Wd.T
    np.testing.assert_allclose(np.concatenate(A.query_variances(W)), np.diag(cov), rtol=1e-8)
    assert A.trace_error(W) == pytest.approx(np.trace(cov), rel=1e-8)


def _census(seed: int = 0, rows: int = 600):
    import duckdb
    import pandas as pd

    import dpsql

    codes = [f"{s:02d}{c:03d}{t:02d}" for s in range(1, 4) for c in range(1, 2 + s) for t in range(1, 3)]
    rng = np.random.default_rng(seed)
    con = duckdb.connect()
    people = pd.DataFrame({"geo": rng.choice(codes, rows), "sex": rng.choice(["F", "M"], rows)})  # noqa: F841
    con.execute("CREATE TABLE p AS SELECT * FROM people")
    schema = {"table": "p", "columns": {
        "geo": {"type": "hierarchy", "values": codes, "levels": {"state": 2, "county": 5, "tract": 7}},
        "sex": {"type": "categorical", "values": ["F", "M"]}}}
    return con, dpsql.connect(con, schema=schema, budget=dpsql.Budget(rho=1e13), cache=False, progress=False)


@pytest.mark.parametrize("query, plain", [
    ("SELECT state, sex, COUNT(*) AS n FROM p GROUP BY state, sex",
     "SELECT substr(geo, 1, 2) AS state, sex, COUNT(*) AS n FROM p GROUP BY ALL"),
    ("SELECT state, county, COUNT(*) AS n FROM p WHERE state = '02' GROUP BY state, county",
     "SELECT substr(geo, 1, 2) AS state, substr(geo, 1, 5) AS county, COUNT(*) AS n FROM p "
     "WHERE substr(geo, 1, 2) = '02' GROUP BY ALL"),
    ("SELECT tract, COUNT(*) AS n FROM p GROUP BY tract", "SELECT geo AS tract, COUNT(*) AS n FROM p GROUP BY ALL"),
])
def test_sql_on_levels_equals_duckdb_at_a_huge_budget(query, plain):
    con, db = _census()
    got = db.query(query, rho=1e10).df
    want = con.sql(plain).df()
    keys = [c for c in want.columns if c != "n"]
    got, want = got.sort_values(keys).reset_index(drop=True), want.sort_values(keys).reset_index(drop=True)
    assert list(got[keys].itertuples(index=False)) == list(want[keys].itertuples(index=False))
    np.testing.assert_allclose(got["n"], want["n"], atol=1e-3)


def test_hierarchy_schema_checks_its_levels():
    from dpsql.errors import SchemaError
    from dpsql.schema import Hierarchy, load_schema

    s = load_schema({"table": "t", "columns": {"geo": {"type": "hierarchy", "values": ["0601", "0602"],
                                                       "levels": {"state": 2, "county": 4}}}})
    assert isinstance(s.column("geo"), Hierarchy) and s.column("geo").level_expression("STATE") == (2, False)
    for levels, message in [({"state": 3, "county": 2}, "must increase"), ({"state": 5}, "shortest code"),
                            ({"geo": 2}, "differ from the column"), ([2, 4], "must map")]:
        with pytest.raises(SchemaError, match=message):
            load_schema({"table": "t", "columns": {"geo": {"type": "hierarchy", "values": ["0601"],
                                                           "levels": levels}}})
    with pytest.raises(SchemaError, match="also the name of a column"):
        load_schema({"table": "t", "columns": {"geo": {"type": "hierarchy", "values": ["0601"], "levels": {"s": 2}},
                                               "s": {"type": "boolean"}}})


def test_selection_on_a_large_hierarchy_is_opt_h_and_its_cache_entry_round_trips(tmp_path):
    from dpsql.hdmm.cache import StrategyCache
    from dpsql.hdmm.optimize.selector import select

    n = 8_000  # a dense Gram of the cells (64 million entries) is beyond every other operator's reach
    state, county = np.arange(n) // 800, np.arange(n) // 20
    W = Workload((n, 2), [(1.0, (_groups(state), Identity(2))), (1.0, (_groups(county), Total(2))),
                          (1.0, (Identity(n), Total(2)))])
    cache = StrategyCache(tmp_path)
    first = select(W, Gaussian(1.0, 1e-6), cache=cache, progress=False)
    assert first.operator == "OPT_H"
    again = select(W, Gaussian(1.0, 1e-6), cache=cache, progress=False)
    assert again.cached and again.rmse == pytest.approx(first.rmse, rel=1e-12)


def _county_workload(seed: int):
    state, county = _geography(seed)
    n = state.size
    W = Workload((n, 2), [(1.0, (_groups(state), Identity(2))), (1.0, (_groups(county), Identity(2))),
                          (1.0, (Identity(n), Total(2)))])
    return W, opt_hier(W, Gaussian(1.0, 1e-6)), _groups(state), _groups(county)


def test_nonnegative_on_a_hierarchy_is_topdown_and_integer_tables_add_up():
    from dpsql.hdmm.reconstruct import nonnegative

    W, A, S, C = _county_workload(2)
    rng = np.random.default_rng(0)
    big = rng.integers(1000, 2000, W.domain[0] * 2).astype(float)
    y = A.matrix.matvec(big) + rng.normal(size=A.matrix.shape[0])
    # no estimate near zero: nothing to clip, so the non-negative answers are the least-squares ones
    np.testing.assert_allclose(nonnegative(W, A, y), least_squares(W, A, y), atol=1e-6)
    small = rng.integers(0, 2, W.domain[0] * 2).astype(float)
    y = A.matrix.matvec(small) + rng.normal(size=A.matrix.shape[0]) * 3
    assert (least_squares(W, A, y) < 0).any()
    for integer in (False, True):
        ans = nonnegative(W, A, y, integer=integer)
        assert (ans >= -1e-9).all()
        states, counties = ans[:S.shape[0] * 2], ans[S.shape[0] * 2:(S.shape[0] + C.shape[0]) * 2]
        county_state = (S.dense() @ C.dense().T).argmax(axis=0)  # each county's state
        summed = np.zeros((S.shape[0], 2))
        np.add.at(summed, county_state, counties.reshape(-1, 2))
        np.testing.assert_allclose(summed.ravel(), states, atol=1e-6)
        if integer:
            np.testing.assert_array_equal(ans, np.round(ans))


def test_integer_answers_without_a_hierarchy_round_the_fitted_vector_to_its_total():
    from dpsql.hdmm.reconstruct import nonnegative

    W = Workload((3, 2), [(1.0, (Identity(3), Total(2))), (1.0, (Total(3), Total(2)))])
    A = KronStrategy((Identity(3), Identity(2)))
    y = np.array([2.4, 0.3, -1.0, 5.2, 1.1, 0.35])  # the fit: 2.4, 0.3, 0, 5.2, 1.1, 0.35 (total 9.35)
    ans = nonnegative(W, A, y, integer=True)
    # integers nearest the fit adding up to round(9.35) = 9: floors 2+0+0+5+1+0 = 8, one more for the
    # largest remainder (0.4)
    np.testing.assert_array_equal(ans, [3.0, 5.0, 1.0, 9.0])


def test_a_public_tables_column_named_as_a_level_is_left_alone():
    import sqlglot

    from dpsql.schema import load_schema
    from dpsql.sql.levels import with_levels

    s = load_schema({"table": "t", "columns": {"geo": {"type": "hierarchy", "values": ["0601"],
                                                       "levels": {"state": 2}}}})
    tree = sqlglot.parse_one("SELECT r.state, p.state FROM t AS p JOIN r ON r.state = p.state")
    assert with_levels(tree, s).sql() == ("SELECT r.state, SUBSTRING(p.geo, 1, 2) AS state FROM t AS p "
                                          "JOIN r ON r.state = SUBSTRING(p.geo, 1, 2)")


def test_nested_levels_are_not_offered_per_term_operators():
    from dpsql.hdmm.optimize.selector import _stacking, feasible

    W, _, _, _ = _county_workload(0)  # state × sex, county × sex, tract: three levels, two product groups
    ops = feasible(W)
    assert "OPT_H" in ops and "OPT_plus" not in ops and "direct" not in ops
    # levels by a detail's totals and cells (as a census batch): stacking them hides the tree, which is
    # read off the workload's own terms
    state, county = _geography(0)
    n = state.size
    census = Workload((n, 3), [(1.0, (g, d)) for g in (Total(n), _groups(state), _groups(county), Identity(n))
                               for d in (Total(3), Identity(3))])
    stacked = _stacking(census, True).workload
    assert "OPT_H" not in feasible(stacked)
    ops = feasible(stacked, None, "total", census)
    assert "OPT_H" in ops and "OPT_plus" not in ops


def test_one_level_beside_its_total_or_a_filter_is_not_nested():
    """A tract GROUP BY beside tract totals, or a filter and a total, forms a tree too, but groups at
    one level only: OPT_⊗'s closed form covers it, so OPT_H is not searched, and OPT_+ stays offered."""
    from dpsql.hdmm.matrix import DENSE_LIMIT
    from dpsql.hdmm.optimize.selector import feasible

    tracts = int(DENSE_LIMIT**0.5) + 1  # too many for a dense Gram: identity and total form a tree
    one_level = Workload((tracts, 3), [(1.0, (Identity(tracts), Identity(3))), (1.0, (Total(tracts), Identity(3))),
                                       (1.0, (Identity(tracts), Total(3)))])
    ops = feasible(one_level)
    assert "OPT_H" not in ops and "OPT_plus" in ops
    state, _ = _geography(0)
    n = state.size
    filtered = Workload((n, 3), [(1.0, (Sparse(sp.csr_matrix((state == 0).astype(float)[None, :])), Identity(3))), (1.0, (Total(n), Identity(3))),
                                 (1.0, (Identity(n), Total(3)))])
    assert "OPT_plus" in feasible(filtered)
