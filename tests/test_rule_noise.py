"""Noise said out loud (issue 32): a throughput rule whose runs carry host steal or a repeat spread
above the thresholds of docs/statistics.md says so and names the runs, in `campaign gate`, the
HTML report and the demo's ending; each rule cell reads as the test it applied."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from results_store import build_campaign

from console.cli import main
from data.plan_model import DecisionRule
from data.store import Store
from stats.results.checks import CheckRow
from stats.rule_noise import CV_LIMIT, STEAL_SHARE, HostSteal, rule_noise
from stats.throughput_rules import RepeatValue, evaluate_rule


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    root = tmp_path_factory.mktemp("noise")
    db, plan = build_campaign(root)
    return root, db, plan


def _vals(c, cand, ref):
    return {("cand", c): [RepeatValue(i, f"cand-c{c}-{i}", v) for i, v in enumerate(cand)],
            ("ref", c): [RepeatValue(i, f"ref-c{c}-{i}", v) for i, v in enumerate(ref)]}


def test_spread_and_steal_above_their_thresholds_are_named():
    rule = DecisionRule(name="exceeds", kind="throughput_exceeds", candidate="cand", reference="ref",
                        concurrencies=(16, 32), confidence=0.95)
    # C16 quiet (CV about 1 %); C32: the candidate's repeats 0.77 / 1.34 / 1.23 of the reference's
    r = evaluate_rule(rule, {**_vals(16, [110, 112, 108], [100, 101, 99]), **_vals(32, [77, 134, 123], [100, 100, 100])})
    cells = r.checks_dicts()
    notes = rule_noise(cells, "cand", "ref", {})
    assert [(n.concurrency, n.engine, n.sign, n.run_ids) for n in notes] == [
        (32, "cand", "spread", ("cand-c32-0", "cand-c32-1", "cand-c32-2"))]
    assert f"> {CV_LIMIT * 100:.0f}%" in notes[0].text()
    # host steal: just above the share is named, just below is not
    steal = {"ref-c16-1": HostSteal(STEAL_SHARE * 1000 * 1.01, 1000.0), "ref-c16-2": HostSteal(STEAL_SHARE * 990, 1000.0)}
    named = [n for n in rule_noise(cells, "cand", "ref", steal) if n.sign == "host steal"]
    assert [(n.concurrency, n.engine, n.run_ids) for n in named] == [(16, "ref", ("ref-c16-1",))]
    # the cell reads as the test it applied
    assert CheckRow.from_rule_cell(cells[1]).test.startswith(f"lower bound {r.cells[1].lower_bound_ratio:.3f} ≤ 1.0 → FAIL")
    assert CheckRow.from_rule_cell(cells[0]).test.endswith("> 1.0 → PASS")


@pytest.mark.slow  # 2.5 s or more in the full run of 2026-12-03 (docs/testing.md)
def test_gate_report_and_demo_ending_name_a_run_the_host_stole_from(campaign, tmp_path, capsys):
    from console.demo import Layout, verdict_lines

    root, db0, plan = campaign
    folder = tmp_path / "c"
    folder.mkdir()
    db = folder / "campaign.duckdb"
    shutil.copy(db0, db)
    capsys.readouterr()
    assert main(["gate", str(plan), "--db", str(db), "--dry-run"]) in (0, 1, 3)
    quiet = capsys.readouterr().out
    assert "noise:" not in quiet
    assert re.search(r"lower bound \d+\.\d{3} [>≤] 1\.0 → (PASS|FAIL)", quiet), quiet
    with Store(db) as s:  # 3 s of a 30 s run taken from one CPU: 10 %, above the 5 % threshold
        s.con.execute("UPDATE runs SET driver_overhead_json = ? WHERE run_id = 'fast-c4-r1'",
                      [json.dumps({"host_steal": {"ms": 4000.0, "max_cpu_ms": 3000.0}})])
    assert main(["gate", str(plan), "--db", str(db), "--dry-run"]) in (0, 1, 3)
    out = capsys.readouterr().out
    assert "noise: host steal above the thresholds" in out
    assert re.search(r"C4 ref-fast: host steal 3000 ms of 30\.0 s on one CPU \(10% > 5%\); runs fast-c4-r1", out), out
    assert main(["report", str(plan), "--db", str(db)]) == 0  # the text report: the rule, its test, its noise
    report = capsys.readouterr().out
    assert re.search(r"C4: ratio \d\.\d{3}, lower bound \d\.\d{3} [>≤] 1\.0 → (PASS|FAIL)", report), report
    assert "noise: host steal" in report and "runs fast-c4-r1" in report
    assert re.search(r"host \S+ .* · runs 2025-12-01 10:00:00 – 2025-12-01 \S+ UTC", report), report
    html = tmp_path / "r.html"
    assert main(["report", str(plan), "--db", str(db), "--html", str(html)]) == 0
    text = html.read_text(encoding="utf-8")
    assert 'class="noise"' in text and "fast-c4-r1" in text and "lower bound" in text and "→" in text
    ending = "\n".join(verdict_lines(Layout(folder)))
    assert "noise: host steal" in ending and "runs fast-c4-r1" in ending
