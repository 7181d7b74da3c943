"""`campaign evidence verify` decides a quality verdict the way `campaign gate` did (issue 38, item 5).

The gate caps a precision-changing candidate's quality PASS by its equivalence verdict
(console/verdicts/quality.py); verify used to re-derive quality verdicts without that cap, so an
honest bundle holding a capped verdict failed verify and a forged uncapped PASS passed. Here a
precision candidate is gated before its equivalence run (real reference engines over HTTP, which
then PASS equivalence), exported and verified; then the same campaign with the quality verdict
issued as an uncapped PASS (a forger with the store in hand, every hash consistent) must fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from plans_helpers import free_port
from results_store import build_campaign

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # `campaign`
WIDE = {"wer_pp": 50.0, "sim": 50.0, "mos": 5.0}  # margins the synthetic candidate clears
EQUIVALENCE = {"pairs": [{"reference": "ref-baseline", "candidate": "ref-fast"}], "utterances": 2, "concurrency": 1,
               "repeats": 1, "tolerances": {"max_length_diff": 0, "max_abs": 0.01}}


def campaign(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=ROOT, env=ENV, timeout=600)


def ok(res: subprocess.CompletedProcess, *codes: int) -> str:
    assert res.returncode in (codes or (0,)), res.stdout + res.stderr
    return res.stdout


@pytest.fixture(scope="module")
def gated(tmp_path_factory):
    """A precision candidate's quality gate issued before its equivalence verdict exists (capped to
    INCONCLUSIVE), then its equivalence run against the baseline (PASS: the `fast` profile's audio
    is byte-identical)."""
    root = tmp_path_factory.mktemp("cap")
    db, plan = build_campaign(root, concurrencies=(1,), repeats=2, requests=4, holdout=6, gpu=False, gate=False,
                              sim_gap=False, precision_change=True, margins=WIDE, ports=(free_port(), free_port()),
                              sections={"equivalence": EQUIVALENCE})
    ok(campaign("validate", plan, "--db", db))
    out = ok(campaign("gate", plan, "--db", db), 3)
    assert "ref-fast: quality PASS capped to INCONCLUSIVE" in out, out
    return root, db, plan


def _export_verify(db: Path, plan: Path, dest: Path) -> subprocess.CompletedProcess:
    ok(campaign("equivalence", plan, "--db", db))  # after the gate: the later PASS does not uncap the verdict
    ok(campaign("export", "evidence", plan, dest, "--db", db))
    return campaign("evidence", "verify", dest)


@pytest.mark.slow  # a synthetic campaign, then equivalence against two real reference engines and two bundles
def test_an_honest_bundle_with_a_capped_verdict_verifies(gated, tmp_path):
    root, db, plan = gated
    shutil.copytree(root, tmp_path / "c")
    res = _export_verify(tmp_path / "c" / db.name, tmp_path / "c" / plan.name, tmp_path / "bundle")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "INCONCLUSIVE: " in res.stdout and "evidence verified" in res.stdout


@pytest.mark.slow  # as above
def test_a_forged_uncapped_pass_fails_verify(gated, tmp_path):
    from console.verdicts.quality import decide as decide_quality
    from data.plan_freeze import frozen_plan_for_file
    from data.store import Store
    from stats.gates import GateConfig, evaluate_gates
    from stats.metrics import METRICS_VERSION
    from stats.quality.registry import scorer_status
    from stats.quality.scoring import scores_frame
    from stats.verdict_doc import issue_quality

    root, db, plan_path = gated
    shutil.copytree(root, tmp_path / "c")
    db, plan_path = tmp_path / "c" / db.name, tmp_path / "c" / plan_path.name
    with Store(db) as store:  # the forger issues the statistics' PASS as if no cap applied
        plan = frozen_plan_for_file(store, plan_path)
        view = plan.for_candidate("ref-fast")
        frame = scores_frame(store, view)
        status = scorer_status(view)
        result = evaluate_gates(frame, GateConfig.from_plan(plan), scorer_status=status, source=f"plan {plan.hash[:12]}")
        assert result.verdict == "PASS"
        honest = decide_quality(store, plan, "ref-fast", evaluate_gates(frame, GateConfig.from_plan(plan),
                                                                         scorer_status=status))
        assert honest.result.verdict == "INCONCLUSIVE"
        issue_quality(store, result, frame, plan=view, metrics_version=METRICS_VERSION, scorer_status=status,
                      scorers=dict(frame.attrs.get("scorers") or {}), validators=honest.validators)
    res = _export_verify(db, plan_path, tmp_path / "bundle")
    assert res.returncode == 1, res.stdout + res.stderr
    [line] = [ln for ln in (res.stdout + res.stderr).splitlines() if "FAILED" in ln]
    assert "re-derived INCONCLUSIVE, the document says PASS" in line, line
