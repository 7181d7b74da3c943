"""Verdicts: insert-only storage, the exported document against its JSON Schema, `gate --scores`
on a hand-made table, throughput decision rules over stored runs."""

from __future__ import annotations

import json
from datetime import datetime, timezone
import math
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import jsonschema
import numpy as np
import pytest
import scipy.stats

from console.cli import main
from data.audit import verify_chain
from data.plan_model import DecisionRule
from data.store import Store
from data.verdicts import VerdictExists, VerdictRow, get_verdict, insert_verdict
from stats.throughput_rules import RepeatValue, evaluate_rule, lower_ratio_bound
from stats.verdict_doc import load_schema

ROOT = Path(__file__).resolve().parents[1]

# A hand-made long table: 4 ids, 2 repeats, one concurrency. Per id (summed over repeats):
#   base errors 1,0,2,0 words 20,20,10,10 -> ΣE_b=3, ΣN=60; cand errors 1,1,2,0 -> ΣE_c=4
#   WER point = 100*(4-3)/60 = 1.6667 pp; SIM base 70 everywhere, cand 69.9 -> drop 0.1;
#   MOS identical -> 0.
HAND = """arm,concurrency,repeat,utt_id,wer_errors,wer_words,sim,mos
baseline,1,0,a-1,1,10,70,3.5
baseline,1,1,a-1,0,10,70,3.5
baseline,1,0,a-2,0,10,70,3.6
baseline,1,1,a-2,0,10,70,3.6
baseline,1,0,b-1,1,5,70,3.7
baseline,1,1,b-1,1,5,70,3.7
baseline,1,0,b-2,0,5,70,3.8
baseline,1,1,b-2,0,5,70,3.8
candidate,1,0,a-1,1,10,69.9,3.5
candidate,1,1,a-1,0,10,69.9,3.5
candidate,1,0,a-2,1,10,69.9,3.6
candidate,1,1,a-2,0,10,69.9,3.6
candidate,1,0,b-1,1,5,69.9,3.7
candidate,1,1,b-1,1,5,69.9,3.7
candidate,1,0,b-2,0,5,69.9,3.8
candidate,1,1,b-2,0,5,69.9,3.8
"""


def test_insert_only_and_audited(store):
    row = VerdictRow(kind="quality", verdict="PASS", name="x", checks=[{"metric": "wer", "bound": 0.1}],
                     inputs={"rows": 3}, verdict_id="quality-test-1")
    assert insert_verdict(store, row) == "quality-test-1"
    with pytest.raises(VerdictExists, match="already exists.*insert-only"):
        insert_verdict(store, VerdictRow(kind="quality", verdict="FAIL", verdict_id="quality-test-1"))
    v = get_verdict(store, "quality-test-1")
    assert v["verdict"] == "PASS" and v["checks"] == [{"metric": "wer", "bound": 0.1}]
    assert store.scalar("SELECT count(*) FROM verdicts") == 1
    ev = store.query("SELECT kind, subject FROM audit_events")
    assert ev == [{"kind": "verdict_issued", "subject": "quality-test-1"}]  # the refused insert left nothing
    assert verify_chain(store).ok
    with pytest.raises(Exception, match="verdict 'MAYBE'"):
        insert_verdict(store, VerdictRow(kind="quality", verdict="MAYBE"))


def test_no_code_path_updates_or_deletes_verdicts():
    pattern = re.compile(r"(UPDATE\s+verdicts|DELETE\s+FROM\s+verdicts|DROP\s+TABLE\s+verdicts)", re.I)
    offenders = [str(p.relative_to(ROOT)) for d in ("console", "data", "stats", "engine_adapters")
                 for p in (ROOT / d).rglob("*.py") if pattern.search(p.read_text(errors="replace"))]
    assert offenders == []


def test_gate_scores_hand_made_table_issue_export_and_reproduce(tmp_path, capsys):
    csv = tmp_path / "scores.csv"
    csv.write_text(HAND)
    db = tmp_path / "c.duckdb"
    args = ["gate", "--scores", str(csv), "--wer-margin", "0.2", "--sim-margin", "0.5", "--mos-margin", "0.05",
            "--draws", "2000", "--seed", "20261022", "--concurrencies", "1"]
    assert main(args + ["--issue", "--db", str(db)]) == 1  # WER +1.67 pp: FAIL
    out = capsys.readouterr().out
    assert "Quality verdict: FAIL" in out and "+1.6667pp" in out
    vid = re.search(r"verdict issued: (\S+)", out).group(1)
    with Store(db) as s:
        v = get_verdict(s, vid)
    wer, sim, mos = v["checks"]
    assert wer["point"] == pytest.approx(100 / 60, abs=1e-12) and wer["status"] == "FAIL"
    assert sim["point"] == pytest.approx(0.1, abs=1e-9) and sim["status"] == "PASS"
    assert mos["point"] == 0.0 and mos["bound"] == 0.0 and mos["status"] == "PASS"
    assert v["attribution"][0]["top_id"] == "a-2" and v["attribution"][0]["survives_without_top"] is False

    out_json = tmp_path / "verdict.json"
    assert main(["export", "verdict", vid[:20], "-o", str(out_json), "--db", str(db)]) == 0
    doc = json.loads(out_json.read_text())
    jsonschema.validate(doc, load_schema())
    assert doc["schema_version"] == "omni-campaign-verdict/1" and doc["verdict"] == "FAIL"
    assert doc["cells"][0]["ids"] == ["a-1", "a-2", "b-1", "b-2"]
    assert all(c["ok"] for c in doc["controls"])
    # The pure-numpy snippet in the document reproduces every bound.
    r = subprocess.run([sys.executable, "-c", doc["reproduce"]["numpy"]], cwd=tmp_path, capture_output=True,
                       text=True, check=True)
    conc, bounds = r.stdout.strip().split(" ", 1)
    assert conc == "1"
    for got, check in zip(json.loads(bounds), doc["checks"]):
        assert abs(got - check["bound"]) <= 1e-12
    # The schema is not a rubber stamp.
    bad = dict(doc, verdict="MOSTLY")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, load_schema())


@pytest.mark.parametrize("body,needle", [
    (HAND.replace("wer_words", "words"), "missing column(s) wer_words"),
    (HAND.replace("candidate,1,1,b-2,0,5", "candidate,1,1,b-2,-3,5"), "row 16: wer_errors -3 is not a non-negative integer"),
    (HAND.replace("baseline,1,0,a-1", "base,1,0,a-1"), "row 1: arm 'base'"),
    (HAND.replace("69.9,3.8", "69.9,high"), "row 15: mos 'high' is not a finite number"),
], ids=["column", "negative", "arm", "text"])
def test_gate_scores_bad_input_one_line(tmp_path, capsys, body, needle):
    csv = tmp_path / "scores.csv"
    csv.write_text(body)
    code = main(["gate", "--scores", str(csv), "--wer-margin", "0.2", "--sim-margin", "0.5", "--mos-margin", "0.05",
                 "--draws", "200"])
    err = capsys.readouterr().err
    assert code == 2 and needle in err and err.count("\n") == 1 and str(csv) in err


@pytest.mark.slow  # 3 s in a loaded `make check`
def test_gate_scores_cli_subprocess_error_has_no_traceback(tmp_path):
    csv = tmp_path / "scores.csv"
    csv.write_text(HAND.replace("wer_words", "words"))
    r = subprocess.run([sys.executable, "-m", "console.cli", "gate", "--scores", str(csv), "--wer-margin", "0.2",
                        "--sim-margin", "0.5", "--mos-margin", "0.05"], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and "missing column(s) wer_words" in r.stderr and "Traceback" not in r.stderr


def test_gate_scores_missing_id_inconclusive(tmp_path, capsys):
    csv = tmp_path / "scores.csv"
    csv.write_text("\n".join(l for l in HAND.splitlines() if not l.startswith("candidate,1,1,b-2")) + "\n")
    assert main(["gate", "--scores", str(csv), "--wer-margin", "5", "--sim-margin", "0.5",
                 "--mos-margin", "0.05", "--draws", "500", "--concurrencies", "1"]) == 3
    out = capsys.readouterr().out
    assert "INCONCLUSIVE" in out and "b-2" in out


# -- throughput decision rules ---------------------------------------------------------------

def test_lower_ratio_bound_matches_scipy_t_interval():
    ratios = [1.10, 1.12, 1.07]
    geo, lower = lower_ratio_bound(ratios, 0.95)
    logs = np.log(ratios)
    ci = scipy.stats.ttest_1samp(logs, 0.0, alternative="greater").confidence_interval(0.95)
    assert lower == pytest.approx(math.exp(ci.low), rel=1e-12)
    assert geo == pytest.approx(math.exp(logs.mean()), rel=1e-12)


def _vals(c, cand, ref, engines=("cand", "ref")):
    return {(engines[0], c): [RepeatValue(i, f"c{c}-{i}", v) for i, v in enumerate(cand)],
            (engines[1], c): [RepeatValue(i, f"r{c}-{i}", v) for i, v in enumerate(ref)]}


def test_rule_pass_fail_inconclusive_and_boundary():
    rule = DecisionRule(name="exceeds", kind="throughput_exceeds", candidate="cand", reference="ref",
                        concurrencies=(16, 32), confidence=0.95)
    vals = {**_vals(16, [110, 112, 108], [100, 101, 99]), **_vals(32, [120, 121, 119], [100, 100, 100])}
    r = evaluate_rule(rule, vals)
    assert r.verdict == "PASS" and all(c.lower_bound_ratio > 1 for c in r.cells)
    assert r.cells[0].candidate_spread["median"] == 110 and r.cells[0].n_pairs == 3
    noisy = {**vals, **_vals(32, [130, 90, 120], [100, 100, 100])}
    assert evaluate_rule(rule, noisy).verdict == "FAIL"
    short = {**vals, **_vals(32, [130], [100, 100])}
    r = evaluate_rule(rule, short)
    assert r.verdict == "INCONCLUSIVE" and "1 paired repeat" in r.cells[1].reason
    # lower bound exactly equal to min_ratio fails
    lb = evaluate_rule(rule, vals).cells[0].lower_bound_ratio
    r = evaluate_rule(replace(rule, concurrencies=(16,), min_ratio=lb), vals)
    assert r.cells[0].status == "FAIL"


def _add_run(store, plan_hash, engine, c, rep, audio_s_per_req, wall_s, kind="measured", status="complete",
             pool="tuning"):
    run_id = f"{engine}-c{c}-{kind}-{rep}" + ("" if pool == "tuning" else f"-{pool}")
    store.insert("runs", {"run_id": run_id, "plan_hash": plan_hash, "engine": engine, "dialect": "vllm-omni",
                          "concurrency": c, "repeat_index": rep, "kind": kind, "status": status, "pool": pool})
    for i in range(2):
        t0 = 1_000_000_000
        end = t0 + int(wall_s * 1e9)
        samples = int(audio_s_per_req * 24000)
        store.insert("requests", {"run_id": run_id, "request_index": i, "utt_id": f"u{i}", "is_warmup": False,
                                  "outcome": "ok", "t_send_ns": t0, "t_first_audio_ns": t0 + 100_000_000,
                                  "t_last_audio_ns": end, "t_end_ns": end, "audio_samples": samples,
                                  "sample_rate": 24000, "audio_chunks": 2})
        for k, t in enumerate((t0 + 100_000_000, end)):
            store.insert("chunks", {"run_id": run_id, "request_index": i, "chunk_index": k, "t_arrival_ns": t,
                                    "kind": "audio", "samples": samples // 2, "payload_bytes": 100})
    return run_id


@pytest.mark.slow  # 6 s in a loaded `make check`
def test_gate_plan_issues_rule_verdict_with_throughput_table(tmp_path, capsys):
    plan_path = tmp_path / "plan.json"
    assert main(["plan", "init", "--demo", "-o", str(plan_path)]) == 0
    raw = json.loads(plan_path.read_text())
    raw["workload"]["root"] = str(ROOT / raw["workload"]["root"])
    raw["bootstrap"]["draws"] = 2000
    raw["validators"][0].update(argv=[sys.executable, *raw["validators"][0]["argv"][1:]], cwd=str(ROOT))  # as the demo
    plan_path.write_text(json.dumps(raw))
    db = tmp_path / "c.duckdb"
    assert main(["plan", "freeze", str(plan_path), "--db", str(db)]) == 0
    rule = raw["decision_rules"][0]
    with Store(db) as s:
        plan_hash = s.scalar("SELECT plan_hash FROM plans")
        for c in (16, 32):
            for rep in range(3):
                _add_run(s, plan_hash, rule["candidate"], c, rep, 2.0, 1.0 - 0.01 * rep)
                _add_run(s, plan_hash, rule["reference"], c, rep, 2.0, 1.5 + 0.01 * rep)
        _add_run(s, plan_hash, rule["reference"], 16, 9, 2.0, 0.1, kind="profiled")  # never aggregated
        excluded = _add_run(s, plan_hash, rule["reference"], 32, 7, 2.0, 0.1)
        # a holdout-phase quality run is another workload: never a throughput repeat
        _add_run(s, plan_hash, rule["reference"], 16, 0, 2.0, 0.1, pool="holdout")
    assert main(["runs", "exclude", excluded, "--reason", "stack snapshots during run", "--db", str(db)]) == 0
    assert main(["validate", str(plan_path), "--db", str(db)]) == 0  # a PASS needs the plan's validator
    capsys.readouterr()
    code = main(["gate", str(plan_path), "--db", str(db)])
    out = capsys.readouterr().out
    assert "Rule verdict: PASS" in out
    assert code == 3  # nothing was scored: no quality verdict, so the plan's question stays open
    ids = re.findall(r"verdict issued: (\S+)", out)
    assert len(ids) == 1  # the rule's; a quality verdict with no scored output is not issued
    assert out.count("nothing to judge, no verdict: quality") == len(raw["quality"]["candidates"])
    with Store(db) as s:
        kinds = {get_verdict(s, i)["kind"]: get_verdict(s, i) for i in ids}
        assert verify_chain(s).ok
    assert set(kinds) == {"throughput"} and kinds["throughput"]["verdict"] == "PASS"
    cells = kinds["throughput"]["checks"]
    assert [c["n_pairs"] for c in cells] == [3, 3]
    assert cells[0]["pairs"][0]["ratio"] == pytest.approx(1.5)
    out_json = tmp_path / "rule.json"
    assert main(["export", "verdict", kinds["throughput"]["verdict_id"], "-o", str(out_json), "--db", str(db)]) == 0
    doc = json.loads(out_json.read_text())
    jsonschema.validate(doc, load_schema())
    assert doc["plan"]["hash"] == plan_hash and doc["plan"]["canonical"]["name"] == raw["name"]
    assert sorted({r["concurrency"] for r in doc["throughput"]}) == raw["sweep"]["concurrencies"]  # every sweep C
    c16 = next(r for r in doc["throughput"] if r["engine"] == rule["candidate"] and r["concurrency"] == 16)
    assert [r["throughput"] for r in c16["repeats"]] == pytest.approx([25 * 4 / (1.0 - 0.01 * i) for i in range(3)])
    assert doc["exclusions"] == [{"run_id": excluded, "reason": "stack snapshots during run",
                                  "excluded_at": doc["exclusions"][0]["excluded_at"],
                                  "audit_seq": doc["exclusions"][0]["audit_seq"]}]
    assert {r["run_id"]: r["in_aggregates"] for r in doc["runs"]}[excluded] is False

    for fmt in ("csv", "parquet"):
        f = tmp_path / f"runs.{fmt}"
        assert main(["export", "runs", "--format", fmt, "-o", str(f), "--plan", plan_hash[:12], "--db", str(db)]) == 0
        import pandas as pd
        df = pd.read_csv(f) if fmt == "csv" else pd.read_parquet(f)
        assert len(df) == 2 * 15 and {"engine", "concurrency", "kind", "excluded_reason", "t_send_ns"} <= set(df.columns)


def test_verdicts_and_runs_are_listed_in_chain_order_not_by_their_clocks(tmp_path):
    """`created_at` / `started_at` moved a day with duckdb on the file (a wrong clock or a forger):
    listings and a cell's repeat order follow the audit sequence (they followed the clocks)."""
    import duckdb

    from data.audit import append_event
    from data.queries import aggregate_runs, plan_runs
    from data.verdicts import list_verdicts
    from plans_helpers import insert_run

    db = tmp_path / "c.duckdb"
    with Store(db) as s:
        for vid in ("quality-b-first", "quality-a-second"):
            insert_verdict(s, VerdictRow(kind="quality", verdict="PASS", name=vid, verdict_id=vid))
        for rid in ("run-b-first", "run-a-second"):  # the same cell and repeat: a tie only the order breaks
            insert_run(s, rid, plan_hash="p" * 64)
            append_event(s, "run_started", plan_hash="p" * 64, subject=rid, payload={})
    con = duckdb.connect(str(db))
    try:
        con.execute("UPDATE verdicts SET created_at = created_at + INTERVAL '1 day' WHERE verdict_id = 'quality-b-first'")
        con.execute("UPDATE runs SET started_at = now() + INTERVAL '1 day' WHERE run_id = 'run-b-first'")
    finally:
        con.close()
    with Store(db, read_only=True) as s:
        assert [v["verdict_id"] for v in list_verdicts(s)] == ["quality-b-first", "quality-a-second"]
        assert [r["run_id"] for r in aggregate_runs(s, "p" * 64)] == ["run-b-first", "run-a-second"]
        assert [r["run_id"] for r in plan_runs(s, "p" * 64)] == ["run-b-first", "run-a-second"]


def test_latest_launch_and_plan_are_the_latest_in_the_chain_not_by_their_clocks(tmp_path):
    """The report's admission limit comes from an engine's latest launch and the TUI's plan views
    open on the latest plan: both by the audit sequence; the first launch's started_at and the
    first plan's frozen_at moved a day ahead with duckdb do not make them 'latest'."""
    import duckdb

    from console.tui.panes.plan import load_plan_view
    from data.launches import store_launch
    from plans_helpers import make_workload, plan_dict, write_json
    from stats.results.report import admission_limits

    class _Plan:
        hash = "p" * 64

    db = tmp_path / "c.duckdb"
    wl = make_workload(tmp_path / "wl", short=True)
    with Store(db) as s:
        for lid, limit in (("launch-1", 16), ("launch-2", 8)):
            store_launch(s, {"launch_id": lid, "engine": "e", "adapter": "reference", "status": "ready",
                             "plan_hash": "p" * 64, "started_at": datetime.now(timezone.utc),
                             "deploy_json": json.dumps({"admission_limit": limit})})
    for name in ("first", "second"):
        doc = plan_dict(wl, concurrencies=(1,), requests=2, repeats=1)
        doc["name"] = name
        assert main(["plan", "freeze", str(write_json(tmp_path / f"{name}.json", doc)), "--db", str(db)]) == 0
    con = duckdb.connect(str(db))
    try:
        con.execute("UPDATE engine_launches SET started_at = now() + INTERVAL '1 day' WHERE launch_id = 'launch-1'")
        con.execute("UPDATE plans SET frozen_at = now() + INTERVAL '1 day' WHERE name = 'first'")
    finally:
        con.close()
    with Store(db, read_only=True) as s:
        assert admission_limits(s, _Plan()) == {"e": 8}
        assert load_plan_view(s).name == "second"
