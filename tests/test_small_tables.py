"""pgm on a table too small for AIM's rounds (dpsql.synth.aim.too_noisy): once its first measurement
shows the rounds' noise past TREE_NOISE of the noisy row count, MST's tree of pairs spends the rest,
from those one-way counts, within the same reservation; aim by name never switches."""

from __future__ import annotations

import contextlib
import math
import warnings
from typing import Iterator

import numpy as np
import pytest
from test_pgm import SCHEMA, make_table, spy_result

import dpsql
from dpsql.private.budget import Budget
from dpsql.synth.aim import ALPHA, TREE_NOISE, first_share

ROWS = 5000
ROUNDS = 16 * 4  # AIM's default shares for SCHEMA's 4 columns
TINY = 20 * 8 / 2**20  # a model of 20 cells: no model holds the triples, so pgm's adaptive path runs
SWITCHED = "MST's spanning tree of pairs is measured instead"


def rho_for(noise_share: float) -> float:
    """The rho at which AIM's first rounds measure with noise of this share of ROWS (one row a unit)."""
    return ROUNDS / (2 * ALPHA * (noise_share * ROWS) ** 2)


@pytest.fixture(scope="module")
def table():
    return make_table(ROWS)


def kinds(reservation) -> list[str]:
    return [m.split("(")[0] for m, _ in reservation.drawn]


def test_past_the_line_mst_spends_the_rest_from_pgms_one_way_counts_by_hand(table, monkeypatch):
    """At 8% (rho 0.0002): pgm's first measurement takes AIM's share of rho (0.9 * 4 / 64), then MST
    measures the one-way marginals again up to a third, makes its 3 picks at eps = sqrt(8 (rho/3) / 3),
    and measures the 3 pairs with the last third: rho in all, in one ledger entry. The one-way
    counts MST fits are the two measurements pooled: as precise as one at a third of rho."""
    rho = 0.0002
    assert math.sqrt(ROUNDS / (2 * ALPHA * rho)) > TREE_NOISE * ROWS * 1.5
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(rho=1.0), cache=False, progress=False)
    seen = spy_result(monkeypatch, db, "mst")
    with pytest.warns(UserWarning, match=SWITCHED) as caught:
        syn = db.synthesize("pgm", workload=3, rho=rho, seed=1, name="s", max_model_size=TINY)
    assert any("of the noisy row count" in str(w.message) and f"past {TREE_NOISE:.1%}" in str(w.message) for w in caught)
    entries = db.ledger.entries()
    assert len(entries) == 1 and entries[0].mechanism == "pgm" and db.spent().rho == syn.rho == rho
    reservation = seen["reservation"]
    assert reservation.rho == rho and reservation.closed
    assert kinds(reservation) == ["gaussian"] * 2 + ["exponential"] * 3 + ["gaussian"]
    first = first_share(ROUNDS, 4)
    eps = math.sqrt(8 * (rho / 3) / 3)
    charges = [r for _, r in reservation.drawn]
    assert charges == pytest.approx([first * rho, (1 / 3 - first) * rho] + [eps**2 / 8] * 3 + [rho / 3], rel=1e-9)
    assert math.fsum(charges) == pytest.approx(rho, rel=1e-12)
    assert "MST pick 1 of 3" in reservation.drawn[2][0] and "AIM round" not in str(reservation.drawn)
    result = seen["result"]
    for o in result.observations[:4]:  # pooled, then merged: sd sqrt(4 / (2 rho/3)) per value merged
        merged = np.bincount(result.compression.labels[o.subset[0]]) if result.compression else np.ones(len(o.values))
        np.testing.assert_allclose(np.broadcast_to(o.std, merged.shape), np.sqrt(merged * 4 / (2 * rho / 3)),
                                   rtol=1e-6)
    assert [len(o.subset) for o in result.observations[4:]] == [2, 2, 2]
    assert syn.report.attrs["estimate"].startswith("AIM's rounds would measure each marginal with noise")


@pytest.mark.parametrize("share, switched", [(0.06, True), (0.043, True), (0.034, False)])
def test_the_line_is_the_rounds_noise_against_the_noisy_rows(table, monkeypatch, share, switched):
    """The rule reads AIM's rounds' noise, not the first one-way counts': with one_way_share=0.6 those
    have under a third of it (1.8% of the rows at 6%) and the table still gets MST, whose picks and
    pairs then share what the one-way marginals left (0.2 of rho each); so does it at 4.3%, just past
    TREE_NOISE (3.8%); at 3.4%, just below, AIM's rounds run."""
    rho = rho_for(share)
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(rho=1.0), cache=False, progress=False)
    seen = spy_result(monkeypatch, db, "aim")
    with pytest.warns(UserWarning) if switched else _no_warning(SWITCHED):
        db.synthesize("pgm", workload=3, rho=rho, seed=1, name="s", max_model_size=TINY, one_way_share=0.6)
    reservation = seen["reservation"]
    drawn = str(reservation.drawn)
    assert ("MST pick" in drawn) == switched and ("AIM round" in drawn) == (not switched)
    assert ("result" in seen) == (not switched)
    if switched:
        assert [r for _, r in reservation.drawn] == pytest.approx([0.6 * rho] + [0.2 * rho / 3] * 3 + [0.2 * rho],
                                                                  rel=1e-9)


def test_aim_by_name_runs_its_rounds_however_small_the_table(table, monkeypatch):
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(rho=1.0), cache=False, progress=False)
    seen = spy_result(monkeypatch, db, "aim")
    with _no_warning(SWITCHED):
        db.synthesize("aim", workload=3, rho=rho_for(0.2), seed=1, name="s", max_model_size=TINY)
    assert "AIM round" in str(seen["reservation"].drawn) and "result" in seen


def test_pgms_default_target_switches_too(table, monkeypatch):
    """With no workload (every triple, which no model of 20 cells holds) pgm's default is AIM's
    rounds, charged as aim; on a table too small for them, MST's tree within that charge."""
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(rho=1.0), cache=False, progress=False)
    seen = spy_result(monkeypatch, db, "mst")
    with pytest.warns(UserWarning, match=SWITCHED):
        syn = db.synthesize(rho=rho_for(0.2), seed=1, name="s", max_model_size=TINY)
    assert syn.method == "aim" and [e.mechanism for e in db.ledger.entries()] == ["aim"]
    reservation = seen["reservation"]
    assert math.fsum(r for _, r in reservation.drawn) == pytest.approx(reservation.rho, rel=1e-12)
    assert "MST pick" in str(reservation.drawn) and "result" in seen


@contextlib.contextmanager
def _no_warning(text: str) -> Iterator[None]:
    """A context in which no warning holding ``text`` may be given."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        yield
    assert not [w for w in seen if text in str(w.message)]


def test_the_switch_shows_its_fit_on_pgms_bar(table, capsys):
    """MST's fit after the switch advances pgm's own fit bar (one bar, described once), not a second
    one nested in it."""
    db = dpsql.connect(table, schema=SCHEMA, budget=Budget(rho=1.0), cache=False, progress=True)
    with pytest.warns(UserWarning, match=SWITCHED):
        db.synthesize("pgm", workload=3, rho=rho_for(0.2), seed=1, name="s", max_model_size=TINY)
    shown = capsys.readouterr().err.replace("\r", "\n")
    assert "pgm fit:" in shown and "fit fit" not in shown
