"""The demo campaign (console/demo.py) and what it needs from plans: several quality candidates
(each its own verdict) and requests per concurrency slot."""

from __future__ import annotations

from pathlib import Path

import pytest
from plans_helpers import make_workload, plan_dict, write_json

from console.runner import plan_cells
from data.errors import CampaignError
from data.plan_loading import load_plan

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
    assert view.document()["quality"]["candidate"] == "ref-lossy" and view.document()["quality"]["candidates"] == ["ref-lossy"]
    assert plan.document()["quality"].get("candidate") is None  # the plan itself is unchanged
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
