"""One decision for a candidate's quality verdict (console/verdicts/quality.py): the TUI's Gates tab
(a dry run) showed PASS for a precision-changing candidate that `campaign gate` caps to
INCONCLUSIVE for want of an equivalence verdict (docs/equivalence.md): it applied the validators
but not the equivalence precondition."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from results_store import build_campaign

from console.tui.data import open_read_only
from console.tui.panes.gates import GatesPane, load_gates

ROOT = Path(__file__).resolve().parents[1]
WIDE = {"wer_pp": 50.0, "sim": 50.0, "mos": 5.0}  # margins the synthetic candidate clears: its gate PASSes


def _gate(plan: Path, db: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console.cli", "gate", str(plan), "--db", str(db), "--dry-run"],
                          capture_output=True, text=True, cwd=ROOT)


def _tui(db: Path):
    with open_read_only(db) as store:
        return load_gates(store)


@pytest.mark.slow  # two synthetic campaigns, `campaign validate` and `campaign gate` as subprocesses
@pytest.mark.parametrize("precision_change", [False, True])
def test_the_gates_tab_shows_the_verdict_the_gate_issues(tmp_path, precision_change):
    db, plan = build_campaign(tmp_path, concurrencies=(1,), repeats=2, requests=4, holdout=6, gpu=False, gate=False,
                              sim_gap=False, precision_change=precision_change, margins=WIDE)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}  # `campaign`
    v = subprocess.run([sys.executable, "-m", "console.cli", "validate", str(plan), "--db", str(db)],
                       capture_output=True, text=True, cwd=ROOT, env=env)  # the plan's validator passes: only the cap is left
    assert v.returncode == 0, v.stdout + v.stderr
    out = _gate(plan, db)
    [cand] = _tui(db).candidates
    if not precision_change:
        assert out.returncode == 0, out.stdout + out.stderr  # the candidate PASSes: nothing to cap
        assert cand.verdict == "PASS" and cand.preconditions == []
        return
    assert out.returncode == 3, out.stdout + out.stderr
    assert "ref-fast: quality PASS capped to INCONCLUSIVE: ref-fast changes numerical precision" in out.stdout
    assert cand.verdict == "INCONCLUSIVE"
    assert "has no equivalence verdict against the quality baseline ref-baseline" in cand.preconditions[0]
    assert "no PASS: ref-fast changes numerical precision" in GatesPane.more_text(_tui(db)).plain
