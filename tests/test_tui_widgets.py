"""Throughput decision-rule cells render in the TUI's checks table with their own meaning."""

from __future__ import annotations

from console.live import LiveInflight
from console.tui.widgets import STALL_STYLE, inflight_state
from data.plan_model import DecisionRule
from stats.results.checks import CHECK_DEFS, CheckRow, check_rows
from stats.throughput_rules import RepeatValue, evaluate_rule


def test_rule_cell_maps_ratio_lower_bound_and_medians():
    rule = DecisionRule(name="exceeds", kind="throughput_exceeds", candidate="cand", reference="ref",
                        concurrencies=(16,), confidence=0.95)
    values = {("cand", 16): [RepeatValue(i, f"c{i}", v) for i, v in enumerate([110.0, 112.0, 108.0])],
              ("ref", 16): [RepeatValue(i, f"r{i}", v) for i, v in enumerate([100.0, 101.0, 99.0])]}
    cell = evaluate_rule(rule, values).checks_dicts()[0]  # what the verdict row stores
    row = CheckRow.from_rule_cell(cell)
    assert row == check_rows("throughput", [cell])[0]
    assert row.status == "PASS" and row.n_ids == 3 and row.margin == 1.0 and not row.upper
    assert row.bound == cell["lower_bound_ratio"] and 1.0 < row.bound < row.point
    assert (row.base_value, row.cand_value) == (100.0, 110.0)  # medians
    assert row.ratios == tuple(p["ratio"] for p in cell["pairs"])
    assert CHECK_DEFS["point"].format(row.point) == f"{cell['geo_mean_ratio']:.3f}" == row.formatted("point")


def test_inflight_state_says_what_a_listener_hears_now():
    playing = LiveInflight(1, "u", False, 2.0, 0.1, 4, ttfa_s=0.3, audio_s=2.5, chunks=3, buffer_s=0.8)
    stalled = LiveInflight(2, "u", False, 4.0, 1.7, 4, ttfa_s=0.3, audio_s=1.0, chunks=2, stalls=1,
                           stall_total_s=1.2, buffer_s=0.0)
    waiting = LiveInflight(3, "u", False, 0.4, 0.4, 0)
    silent = LiveInflight(4, "u", False, 2.5, 2.5, 0)
    assert [str(inflight_state(f)) for f in (playing, stalled, waiting, silent)] == [
        "playing, 0.8 s buffered", "stalled, silent 1.7 s", "waiting 0.4 s", "waiting 2.5 s, silent 2.5 s"]
    assert inflight_state(stalled).style == STALL_STYLE and inflight_state(silent).style == STALL_STYLE
    assert inflight_state(playing).style != STALL_STYLE
