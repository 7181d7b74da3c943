"""Synthetic controls: every generated dataset gets its known answer."""

from __future__ import annotations

import pytest

from stats import gates
from stats.controls import all_ok, run_controls
from stats.gates import GateConfig


def test_all_controls_pass_with_reference_campaign_settings():
    results = run_controls(GateConfig(margins={"wer": 0.2, "sim": 0.5, "utmos": 0.05}, draws=20000, seed=20261022))
    names = [r.name for r in results]
    assert len(results) >= 8 and len(set(names)) == len(names)
    assert {"identical-arms", "wer-beyond-margin", "sim-beyond-margin", "utmos-beyond-margin", "inside-margins",
            "missing-id", "scorer-unavailable", "single-outlier", "same-seed"} <= set(names)
    bad = [(r.name, r.detail) for r in results if not r.ok]
    assert not bad
    assert all_ok(results)


def test_controls_bca_and_wide_margins():
    assert all_ok(run_controls(GateConfig(margins={"wer": 0.2, "sim": 0.5, "utmos": 0.05}, draws=2000, seed=1, method="bca")))
    assert all_ok(run_controls(GateConfig(margins={"wer": 5.0, "sim": 2.0, "utmos": 0.3}, draws=2000, seed=1)))


@pytest.mark.parametrize("broken,expect_failing", [
    (lambda bound, margin: gates.PASS if bound <= margin else gates.FAIL, {"bound-equals-margin"}),
    (lambda bound, margin: gates.PASS, {"wer-beyond-margin", "sim-beyond-margin", "utmos-beyond-margin",
                                        "single-outlier", "bound-equals-margin"}),
])
def test_controls_catch_a_broken_gate(monkeypatch, broken, expect_failing):
    """Fault injection: a gate with a wrong decision rule must not get past the controls."""
    monkeypatch.setattr(gates, "decide", lambda bound, margin: gates.INCONCLUSIVE if bound is None else broken(bound, margin))
    results = run_controls(GateConfig(margins={"wer": 0.2, "sim": 0.5, "utmos": 0.05}, draws=1000, seed=1))
    assert {r.name for r in results if not r.ok} == expect_failing


def test_gate_refuses_when_controls_fail(monkeypatch, tmp_path, capsys):
    from console.cli import main
    from stats.controls import baseline_table, with_candidate

    csv = tmp_path / "s.csv"
    with_candidate(baseline_table(n_ids=10)).to_csv(csv, index=False)
    monkeypatch.setattr(gates, "decide", lambda bound, margin: gates.PASS)
    db = tmp_path / "c.duckdb"
    code = main(["gate", "--scores", str(csv), "--wer-margin", "0.2", "--sim-margin", "0.5", "--utmos-margin", "0.05",
                 "--draws", "500", "--issue", "--db", str(db)])
    err = capsys.readouterr().err
    assert code == 2 and "synthetic controls failed" in err and "refuses to issue" in err
    assert not db.exists() or __import__("data.store", fromlist=["Store"]).Store(db).scalar("SELECT count(*) FROM verdicts") == 0
