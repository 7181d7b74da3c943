"""Runner cell planning: order, interleaving, warmups, exploratory labelling, request selection."""

from __future__ import annotations

from pathlib import Path

import pytest

from console.runner import measured_kind, plan_cells, select_requests
from data.errors import CampaignError
from data.plan_model import plan_from_dict
from data.workload import Utterance
from plans_helpers import plan_dict


def _plan(**kw):
    return plan_from_dict(plan_dict(Path("/nonexistent"), ports=[1001, 1002], **kw), hash="f" * 64)


def test_alternate_interleaves_engines_within_each_slot():
    cells = plan_cells(_plan(concurrencies=(1, 4), warmups=1, repeats=2))
    assert [c.key for c in cells] == [
        "ref-baseline/c1/warmup/0", "ref-fast/c1/warmup/0",
        "ref-baseline/c1/measured/0", "ref-fast/c1/measured/0",
        "ref-baseline/c1/measured/1", "ref-fast/c1/measured/1",
        "ref-baseline/c4/warmup/0", "ref-fast/c4/warmup/0",
        "ref-baseline/c4/measured/0", "ref-fast/c4/measured/0",
        "ref-baseline/c4/measured/1", "ref-fast/c4/measured/1",
    ]
    assert all(c.pool == "tuning" and c.phase == "sweep" for c in cells)


def test_sequential_runs_each_engine_sweep_in_turn():
    cells = plan_cells(_plan(concurrencies=(1, 2), warmups=0, repeats=1, interleave="sequential"))
    assert [c.key for c in cells] == ["ref-baseline/c1/measured/0", "ref-baseline/c2/measured/0",
                                      "ref-fast/c1/measured/0", "ref-fast/c2/measured/0"]


def test_no_restart_sweep_is_exploratory():
    plan = _plan(restart="never", warmups=1, repeats=1, concurrencies=(1,))
    assert measured_kind(plan) == "exploratory"
    assert [c.kind for c in plan_cells(plan)] == ["warmup", "warmup", "exploratory", "exploratory"]
    assert measured_kind(_plan(restart="per_cell")) == "measured"


def test_holdout_phase_uses_quality_arms_and_pool():
    plan = _plan(concurrencies=(1, 2), warmups=1, repeats=1)
    cells = plan_cells(plan, "holdout")
    assert [c.key for c in cells] == ["ref-baseline/c1/warmup/0@holdout", "ref-fast/c1/warmup/0@holdout",
                                      "ref-baseline/c1/measured/0@holdout", "ref-fast/c1/measured/0@holdout"]
    assert {c.pool for c in cells} == {"holdout"}


def test_select_requests_cycles_in_pool_order():
    utts = [Utterance(f"s-{i}", "p", Path("/x.wav"), f"t{i}") for i in range(3)]
    assert [u.utt_id for u in select_requests(utts, 5)] == ["s-0", "s-1", "s-2", "s-0", "s-1"]
    assert [u.utt_id for u in select_requests(utts, None)] == ["s-0", "s-1", "s-2"]
    with pytest.raises(CampaignError, match="empty"):
        select_requests([], 3)
