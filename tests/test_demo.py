"""The demo campaign (console/demo.py) and what it needs from plans: several quality candidates
(each its own verdict) and requests per concurrency slot."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from plans_helpers import make_workload, plan_dict, write_json

from console.runner import plan_cells
from data.errors import CampaignError
from data.plans import load_plan

ROOT = Path(__file__).resolve().parents[1]


def test_several_candidates_each_seen_alone(tmp_path):
    make_workload(tmp_path / "wl")
    doc = plan_dict(tmp_path / "wl", profiles=("baseline", "fast", "lossy"))
    doc["quality"]["candidates"] = ["ref-fast", "ref-lossy"]
    doc["quality"].pop("candidate")
    plan = load_plan(write_json(tmp_path / "p.json", doc))
    assert plan.quality_candidates == ["ref-fast", "ref-lossy"]
    view = plan.for_candidate("ref-lossy")
    assert view.hash == plan.hash and view.quality.candidate == "ref-lossy"
    assert view.raw["quality"]["candidate"] == "ref-lossy" and view.raw["quality"]["candidates"] == ["ref-lossy"]
    assert plan.raw["quality"].get("candidate") is None  # the plan itself is unchanged
    with pytest.raises(CampaignError, match="'ref-baseline' is not a quality candidate"):
        plan.for_candidate("ref-baseline")
    # the holdout phase runs the baseline and every candidate
    assert sorted({c.engine for c in plan_cells(plan, "holdout")}) == ["ref-baseline", "ref-fast", "ref-lossy"]


def test_bad_candidates_are_refused(tmp_path):
    make_workload(tmp_path / "wl")
    doc = plan_dict(tmp_path / "wl")
    doc["quality"]["candidates"] = ["ref-fast", "ref-nope"]
    with pytest.raises(CampaignError, match=r"quality.candidates\[1\]: 'ref-nope' is not an engine in this plan"):
        load_plan(write_json(tmp_path / "a.json", doc))
    doc["quality"]["candidates"] = ["ref-baseline"]
    with pytest.raises(CampaignError, match=r"quality.candidates\[0\]: 'ref-baseline' is the baseline"):
        load_plan(write_json(tmp_path / "b.json", doc))


def test_requests_per_slot_raises_requests_at_high_concurrency(tmp_path):
    make_workload(tmp_path / "wl")
    doc = plan_dict(tmp_path / "wl", concurrencies=(1, 4, 16), requests=8)
    doc["sweep"]["requests_per_slot"] = 2
    plan = load_plan(write_json(tmp_path / "p.json", doc))
    assert [plan.requests_at(c) for c in (1, 4, 16)] == [8, 8, 32]


def test_quick_demo_tells_the_whole_story(tmp_path):
    """`campaign demo --quick` end to end with the real commands: fast PASS, lossy FAIL naming its
    failing checks, the throughput rule, one exclusion; a second demo is a new campaign."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "console.cli", "demo", "--quick"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    folder = re.search(r"store:\s+(demo/\S+)/campaign.duckdb", text).group(1)
    try:
        assert re.search(r"PASS\s+quality\s+demo-reference-ab: ref-fast vs ref-baseline", text)
        assert re.search(r"FAIL\s+quality\s+demo-reference-ab: ref-lossy vs ref-baseline", text)
        assert re.search(r"failing checks: \S+@C16", text)
        assert re.search(r"(PASS|FAIL|INCONCLUSIVE)\s+throughput fast-exceeds-peer", text)
        assert "C32: ratio" in text and "audit verify OK" in text
        assert text.count(".venv/bin/campaign sql ") == 3
        from data.store import Store
        with Store(ROOT / folder / "campaign.duckdb", read_only=True) as s:
            assert s.scalar("SELECT count(*) FROM exclusions WHERE reason LIKE 'profiled:%'") == 1
            assert s.scalar("SELECT count(*) FROM audit_events WHERE kind = 'holdout_opened'") == 1
            assert s.scalar("SELECT count(DISTINCT engine) FROM runs WHERE pool = 'holdout'") == 3
            evidence = [json.loads(d)["evidence"]["status"] for (d,) in s.con.execute(
                "SELECT document_json FROM verdicts WHERE kind = 'quality'").fetchall()]
            assert evidence == ["reserved", "reserved"]
    finally:
        import shutil
        shutil.rmtree(ROOT / folder, ignore_errors=True)
