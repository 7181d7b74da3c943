"""An addendum's `parent` takes the same hash prefix the command line does (>= 6 hex digits,
resolved at freeze and recorded in full; loading the frozen addendum uses the recorded hash, so a
prefix that later became ambiguous could not break it)."""

from __future__ import annotations

import pytest

from data.audit import events
from data.errors import CampaignError
from data.plan_freeze import freeze, freeze_plan
from data.plan_loading import plan_from_store
from plans_helpers import make_workload, plan_dict, write_json


def addendum(parent: str, name: str = "repeat-design") -> dict:
    return {"schema": "omni-campaign-addendum/1", "parent": parent, "name": name, "reason": "three repeats",
            "changes": {"sweep": {"measured_repeats": 3}}}


def test_parent_prefix_is_resolved_and_recorded_in_full(tmp_path, store):
    wl = make_workload(tmp_path / "wl")
    parent = freeze_plan(store, write_json(tmp_path / "plan.json", plan_dict(wl)))
    path = write_json(tmp_path / "add.json", addendum(parent[:8].upper()))
    res = freeze(store, path, expected_parent=parent[:12])
    assert res.created
    assert store.scalar("SELECT parent_hash FROM plans WHERE plan_hash = ?", [res.hash]) == parent
    assert events(store, kind="addendum_frozen")[0]["payload"]["parent_hash"] == parent
    eff = plan_from_store(store, res.hash)
    assert eff.parent_hash == parent and eff.sweep.measured_repeats == 3
    # without --parent too (the prefix alone binds it)
    res2 = freeze(store, write_json(tmp_path / "add2.json", addendum(parent[:6], "six")))
    assert plan_from_store(store, res2.hash).parent_hash == parent


def test_parent_prefix_refusals_are_one_line(tmp_path, store):
    wl = make_workload(tmp_path / "wl")
    parent = freeze_plan(store, write_json(tmp_path / "plan.json", plan_dict(wl)))
    other = freeze_plan(store, write_json(tmp_path / "other.json", {**plan_dict(wl), "name": "other"}))
    with pytest.raises(CampaignError, match=r"add1.json: parent: .* does not match"):
        freeze(store, write_json(tmp_path / "add1.json", addendum(parent[:5])))
    with pytest.raises(CampaignError, match=r"parent: '0{8}' is not .* given on the command line"):
        freeze(store, write_json(tmp_path / "add2.json", addendum("0" * 8)), expected_parent=parent)
    with pytest.raises(CampaignError, match=r"add3.json: parent: plan 0{8}: not frozen"):
        freeze(store, write_json(tmp_path / "add3.json", addendum("0" * 8)))
    with pytest.raises(CampaignError, match=r"parent: .* is not .* given on the command line"):
        freeze(store, write_json(tmp_path / "add4.json", addendum(parent[:10])), expected_parent=other)
