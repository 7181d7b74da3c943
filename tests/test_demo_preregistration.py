"""Issue 38's Done-when on a quick demo (the session's one, tests/conftest.py): its protocol cannot
be bent after the fact. A copy of the demo's store takes each attempt as a user would (the
`campaign` command line): an addendum that relaxes the protocol, the plan edited and re-frozen
under its name, a probe of the reserved holdout; the demo itself kept its holdout untouched,
printed the evidence class with each quality verdict and selected before opening the holdout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from data.audit import events
from data.store import Store

ROOT = Path(__file__).resolve().parents[1]


def campaign(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console.cli", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)


@pytest.fixture(scope="module")
def demo(quick_demo, tmp_path_factory):
    """A copy of the quick demo's folder: these attempts must not touch the session's store."""
    out, db = quick_demo
    copy = tmp_path_factory.mktemp("demo38") / "demo"
    shutil.copytree(db.parent, copy, ignore=shutil.ignore_patterns("artifacts"))
    with Store(copy / "campaign.duckdb") as s:
        plan_hash = s.scalar("SELECT plan_hash FROM plans WHERE kind = 'plan'")
    return out, copy, plan_hash


def _one_line_refusal(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, \
        r.stdout + r.stderr
    return r.stderr


def test_a_relaxing_addendum_is_refused_naming_each_field(demo):
    _, folder, h = demo
    add = folder / "relax.json"
    add.write_text(json.dumps({"schema": "omni-campaign-addendum/1", "parent": h, "name": "relax", "reason": "cheaper",
                               "changes": {"workload": {"holdout_pool": None}, "quality": {"margins": {"wer_pp": 50}},
                                           "bootstrap": {"draws": 500, "seed": 1},
                                           "sampling": {"temperature": 0.9, "seed": 1}}}))
    err = _one_line_refusal(campaign("plan", "addendum", h[:12], add, "--db", folder / "campaign.duckdb"))
    for field in ("quality.margins.wer_pp: 0.2 in the parent, 50 in the addendum",
                  "bootstrap.draws: 2000 in the parent, 500 in the addendum",
                  "bootstrap.seed: 20261022 in the parent, 1 in the addendum",
                  "sampling.temperature: 0.0 in the parent, 0.9 in the addendum",
                  "sampling.seed: 42 in the parent, 1 in the addendum",
                  "workload.holdout_pool: 'holdout' in the parent, None in the addendum"):
        assert field in err, err


def test_the_plan_edited_and_refrozen_under_its_name_is_refused(demo):
    _, folder, h = demo
    doc = json.loads((folder / "plan.json").read_text())
    doc["quality"]["margins"]["wer_pp"] = 5.0
    edited = folder / "plan-edited.json"
    edited.write_text(json.dumps(doc))
    err = _one_line_refusal(campaign("plan", "freeze", edited, "--db", folder / "campaign.duckdb"))
    assert f"name 'demo-reference-ab' is already frozen in this store as plan {h[:12]}" in err
    assert "quality.margins.wer_pp: 0.2 -> 5.0" in err and "campaign plan addendum" in err


def test_a_probe_never_touches_a_protected_holdout(demo):
    """The demo's own probe ran before its holdout opened and sent none of its ids; after the
    demo's quality runs those prompts are spent, so a round two reserves new ones, which a probe
    may not send (named pool, or drawn by default)."""
    _, folder, h = demo
    db = folder / "campaign.duckdb"
    pools = json.loads((folder / "pools.json").read_text())
    with Store(db) as s:
        probe_ids = {u for (u,) in s.con.execute("SELECT DISTINCT q.utt_id FROM requests q JOIN runs r USING (run_id) "
                                                 "WHERE r.plan_hash IS NULL").fetchall()}
        used = {u for (u,) in s.con.execute("SELECT DISTINCT utt_id FROM requests").fetchall()}
    assert probe_ids and not probe_ids & set(pools["holdout"])
    fresh = [u for u in pools["tuning"] if u not in used][:6]
    round2 = {"tuning": [u for u in pools["tuning"] if u not in fresh], "holdout2": fresh}
    (folder / "pools2.json").write_text(json.dumps(round2))
    doc = json.loads((folder / "plan.json").read_text())
    doc.update(name="round-two")
    doc["workload"].update(pools_file="pools2.json", holdout_pool="holdout2")
    doc["quality"]["pool"] = "holdout2"
    (folder / "plan2.json").write_text(json.dumps(doc))
    r = campaign("plan", "freeze", folder / "plan2.json", "--db", db)
    assert r.returncode == 0, r.stdout + r.stderr
    with Store(db) as s:
        runs = s.scalar("SELECT count(*) FROM runs")
    err = _one_line_refusal(campaign("probe", "--url", "http://127.0.0.1:9", "--dialect", "vllm-omni",
                                     "--pools-file", folder / "pools2.json", "--pool", "holdout2", "-n", "4",
                                     "--no-telemetry", "--db", db))
    assert "would send 4 id(s) of the holdout pool 'holdout2' of plan 'round-two'" in err and "not opened" in err
    with Store(db) as s:
        assert s.scalar("SELECT count(*) FROM runs") == runs  # nothing stored


def test_the_demo_kept_its_holdout_untouched_and_selected_first(demo):
    out, folder, h = demo
    with Store(folder / "campaign.duckdb") as s:
        docs = [json.loads(d) for (d,) in s.con.execute(
            "SELECT document_json FROM verdicts WHERE kind = 'quality'").fetchall()]
        opened = events(s, kind="holdout_opened")[0]["seq"]
        selected = [e for e in events(s, kind="candidate_recorded") if e["payload"]["change"] == "selected"]
        accepted = json.loads(s.scalar("SELECT document_json FROM verdicts WHERE kind = 'acceptance'"))
    assert [d["evidence"]["status"] for d in docs] == ["untouched", "untouched"]
    assert "PASS (untouched holdout) quality" in out and "FAIL (untouched holdout) quality" in out
    assert [e["payload"]["name"] for e in selected] == ["ref-fast"] and selected[0]["seq"] < opened
    assert "post_holdout" not in selected[0]["payload"]
    assert accepted["verdict"] == "PASS" and {p["piece"]: p["status"] for p in accepted["pieces"]}["selection"] == "PASS"
    assert accepted["claims"]["concurrencies"] == [16] and "C16 only" in " ".join(accepted["claims"]["non_claims"])
