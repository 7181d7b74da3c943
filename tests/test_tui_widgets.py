"""Throughput decision-rule cells render in the TUI's checks table with their own meaning."""

from __future__ import annotations

from console.tui.widgets import CHECK_DEFS, rule_cell_as_check
from stats.throughput_rules import RepeatValue, evaluate_rule


def test_rule_cell_maps_ratio_lower_bound_and_medians():
    rule = {"name": "exceeds", "kind": "throughput_exceeds", "candidate": "cand", "reference": "ref",
            "concurrencies": [16], "confidence": 0.95}
    values = {("cand", 16): [RepeatValue(i, f"c{i}", v) for i, v in enumerate([110.0, 112.0, 108.0])],
              ("ref", 16): [RepeatValue(i, f"r{i}", v) for i, v in enumerate([100.0, 101.0, 99.0])]}
    cell = evaluate_rule(rule, values).checks_dicts()[0]  # what the verdict row stores
    row = rule_cell_as_check(cell)
    assert row["status"] == "PASS" and row["n_ids"] == 3 and row["margin"] == 1.0
    assert row["bound"] == cell["lower_bound_ratio"] and 1.0 < row["bound"] < row["point"]
    assert (row["base_value"], row["cand_value"]) == (100.0, 110.0)  # medians
    assert CHECK_DEFS["point"].format(row["point"]) == f"{cell['geo_mean_ratio']:.3f}"
