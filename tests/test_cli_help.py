"""One command line (issue 32): `campaign --help` in workflow order with the steps named; one
meaning per flag name (`--plan FILE`, `--plan-hash HASH`; the old hash `--plan` a hidden alias that
still works); `--format json` where output has a machine form (`probe`, `scorers`, `plan list`),
the old spellings kept; `ACTION` as the one placeholder; `scorers` and `tui` help naming every
action and tab. The CLI runs as a subprocess; `probe` against the real reference engine."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from console.cli import WORKFLOW, build_parser
from reference_server import launch_engine, stop_engine, wait_ready

REPO = Path(__file__).resolve().parents[1]


def cli(*args, db=None):
    extra = ["--db", str(db)] if db else []
    return subprocess.run([sys.executable, "-m", "console.cli", *map(str, args), *extra], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200"}, cwd=REPO,
                          timeout=180)


def _subparsers(parser):
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            yield parser, a
            for p in a.choices.values():
                yield from _subparsers(p)


def test_help_lists_commands_in_workflow_order_with_the_steps():
    registered = set(next(a for _, a in _subparsers(build_parser())).choices)
    steps = [n for _, names in WORKFLOW for n in names]
    assert sorted(steps) == sorted(registered) and len(steps) == len(set(steps))  # each in exactly one step
    r = cli("--help")
    assert r.returncode == 0
    listed = re.findall(r"^    (\w+)", r.stdout, re.M)
    assert listed == steps
    tail = r.stdout[r.stdout.index("workflow:"):]
    for step, names in WORKFLOW:
        assert re.search(rf"^  {re.escape(step)}\s+{re.escape(', '.join(names))}$", tail, re.M), tail


def test_one_placeholder_for_sub_actions():
    metavars = {(p.prog, a.metavar) for p, a in _subparsers(build_parser())}
    assert {m for _, m in metavars} == {"COMMAND", "ACTION"}, metavars


@pytest.mark.slow  # 2.5 s or more in the full run of 2026-12-03 (docs/testing.md)
def test_scorers_and_tui_help_name_every_action_and_tab():
    r = cli("scorers", "--help")
    assert r.returncode == 0 and re.search(r"^    list\s", r.stdout, re.M) and re.search(r"^    run\s", r.stdout, re.M)
    app = (REPO / "console" / "tui" / "app.py").read_text()
    tabs = re.findall(r'TabPane\("([^"]+)"', app)
    assert len(tabs) == 8
    r = cli("tui", "--help")
    for tab in tabs:
        assert re.search(rf"^  {tab}\s+\S", r.stdout, re.M), (tab, r.stdout)
    top = cli("--help").stdout
    assert all(t in " ".join(top.split()) for t in tabs)
    rows = json.loads(cli("scorers", "--format", "json").stdout)
    assert {"pocketsphinx", "whisper", "utmos22"} <= {x["scorer"] for x in rows}
    assert json.loads(cli("scorers", "list", "--format", "json").stdout) == rows


@pytest.fixture(scope="module")
def probed(tmp_path_factory):
    """A probe against the reference engine, the store holding its run and a frozen plan."""
    tmp = tmp_path_factory.mktemp("probe")
    engine = wait_ready(launch_engine("vllm-omni", "fast"), "vllm-omni", "fast", timeout_s=90)
    try:
        db = tmp / "c.duckdb"
        r = cli("probe", "--url", engine.url, "--dialect", "vllm-omni", "-c", "1", "-n", "2", "--no-telemetry",
                "--artifacts", tmp / "a", "--format", "json", "--output", tmp / "m.json", db=db)
        old = cli("probe", "--url", engine.url, "--dialect", "vllm-omni", "-c", "1", "-n", "2", "--no-telemetry",
                  "--artifacts", tmp / "a", "--json", tmp / "old.json", db=db)
    finally:
        stop_engine(engine)
    yield tmp, db, r, old


@pytest.mark.slow  # 2.5 s or more in the full run of 2026-12-03 (docs/testing.md)
def test_probe_format_json_and_output_file(probed):
    tmp, _db, r, old = probed
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # stdout is the document alone
    assert doc["status"] == "complete" and doc["metrics"]["completed"] == 2
    assert json.loads((tmp / "m.json").read_text()) == doc
    assert "probe http" in r.stderr  # the human lines went to stderr
    # the old `--json FILE` still writes the file and prints the table
    assert old.returncode == 0 and json.loads((tmp / "old.json").read_text())["metrics"]["completed"] == 2
    assert "│" in old.stdout


@pytest.mark.slow  # 2.5 s or more in the full run of 2026-12-03 (docs/testing.md)
def test_plan_hash_flag_and_its_hidden_old_spelling(probed, tmp_path):
    tmp, db, _, _ = probed
    from plans_helpers import make_workload, plan_dict, write_json

    plan = write_json(tmp_path / "plan.json", plan_dict(make_workload(tmp_path / "wl", short=True)))
    assert cli("plan", "freeze", plan, db=db).returncode == 0
    [row] = json.loads(cli("plan", "list", "--format", "json", db=db).stdout)
    h = row["hash"]
    assert len(h) == 64
    for cmd in (("runs", "list"), ("verdicts",), ("audit", "log")):
        helptext = cli(*cmd, "--help").stdout
        assert "--plan-hash HASH" in helptext and not re.search(r"--plan\b(?!-)", helptext), helptext
        new = cli(*cmd, "--plan-hash", h[:10], "--format", "json", db=db)
        old = cli(*cmd, "--plan", h[:10], "--format", "json", db=db)
        assert new.returncode == old.returncode == 0, new.stderr + old.stderr
        assert json.loads(new.stdout) == json.loads(old.stdout)
    events = json.loads(cli("audit", "log", "--plan-hash", h[:10], "--format", "json", db=db).stdout)
    everything = json.loads(cli("audit", "log", "--format", "json", db=db).stdout)
    assert events and len(events) < len(everything)  # the probe's events are not the plan's
    out_new, out_old = tmp_path / "new.csv", tmp_path / "old.csv"
    assert cli("export", "runs", "--plan-hash", h[:10], "-o", out_new, db=db).returncode == 0
    assert cli("export", "runs", "--plan", h[:10], "-o", out_old, db=db).returncode == 0
    assert out_new.read_text() == out_old.read_text()
