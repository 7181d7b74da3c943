"""Synthetic controls: every generated dataset gets its known answer."""

from __future__ import annotations

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


def test_controls_bca_and_detect_a_broken_margin():
    assert all_ok(run_controls(GateConfig(margins={"wer": 0.2, "sim": 0.5, "utmos": 0.05}, draws=2000, seed=1, method="bca")))
    # A margin so wide that a real degradation passes: the controls must notice.
    broken = run_controls(GateConfig(margins={"wer": 50.0, "sim": 0.5, "utmos": 0.05}, draws=2000, seed=1))
    assert not all_ok(broken)
    assert {r.name for r in broken if not r.ok} >= {"wer-beyond-margin", "single-outlier"}
