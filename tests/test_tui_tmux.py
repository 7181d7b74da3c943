"""`campaign tui` as a user over SSH runs it (issue 15): a campaign started with `campaign run
--detach` against the embedded reference engine, the console opened inside tmux, keys sent,
the screen read back with `tmux capture-pane -p`; the tmux session is killed mid-campaign (the
SSH drop), the campaign goes on and finishes, and a new `campaign tui` in a new tmux session
re-attaches to it and shows it finished. Real processes, real HTTP, a real DuckDB file; tmux runs
on a private socket so no user session is touched."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from console.live import live_path, read_snapshot
from plans_helpers import make_workload, plan_dict, write_json

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (.ci/run installs it)")]

ROOT = Path(__file__).resolve().parents[1]
SOCKET = f"omni-tui-test-{os.getpid()}"


def tmux(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["tmux", "-L", SOCKET, *args], capture_output=True, text=True, check=check, timeout=10)


def open_tui(name: str, db: Path) -> None:
    env = f"PYTHONPATH={shlex.quote(str(ROOT))} TERM=xterm-256color"
    cmd = f"cd {shlex.quote(str(ROOT))} && env {env} {shlex.quote(sys.executable)} -m console.cli tui --db {shlex.quote(str(db))}"
    tmux("new-session", "-d", "-s", name, "-x", "220", "-y", "30", cmd)  # wide: columns never truncate the words asserted


def screen(name: str) -> str:
    r = tmux("capture-pane", "-p", "-t", name, check=False)
    return r.stdout if r.returncode == 0 else ""


def wait_screen(name: str, pattern: str, timeout: float, key: str | None = None) -> str:
    """Poll the pane until `pattern` (a regex) is on it; re-send `key` each poll (the app may
    not have mounted its bindings when the first one arrives)."""
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        if key:
            tmux("send-keys", "-t", name, key, check=False)
        text = screen(name)
        if re.search(pattern, text):
            return text
        time.sleep(0.5)
    pytest.fail(f"{pattern!r} not on the tmux pane {name} within {timeout:.0f} s; the pane:\n{text}")


def _plan(tmp_path: Path) -> Path:
    """One engine, C=1, three measured repeats with a restart each: long enough (a few tens of
    seconds on 2 cores) that the console sees it running and outlives a killed tmux session."""
    wl = make_workload(tmp_path / "wl", short=False)
    doc = plan_dict(wl, concurrencies=(1,), requests=6, repeats=3, profiles=("baseline",))
    for e in doc["engines"]:
        e["argv"] = [sys.executable, "-m", "engine_adapters.reference", "--dialect", e["dialect"],
                     "--profile", e["profile"], "--host", "127.0.0.1", "--port", str(e["port"])]
    return write_json(tmp_path / "plan.json", doc)


def campaign(*args: str, db: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "console.cli", *args, "--db", str(db)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)


def pid_alive(pid: int) -> bool:
    """Running, not a zombie (the detached campaign's parent has exited; whoever adopts it may
    reap it late)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_tui_in_tmux_survives_a_dropped_session_and_reattaches(tmp_path):
    plan = _plan(tmp_path)
    db = tmp_path / "c.duckdb"
    assert campaign("plan", "freeze", str(plan), db=db).returncode == 0
    pid = None
    try:
        r = campaign("run", str(plan), "--detach", db=db)
        assert r.returncode == 0, r.stdout + r.stderr
        pid = int(re.search(r"\(pid (\d+)\)", r.stdout).group(1))

        open_tui("first", db)
        wait_screen("first", r"Runs", 30)  # the app is up
        # Live: the campaign, running one of its cells. The head names the cell only once the
        # first engine is up (before that it reads just "running"), so wait for both together
        live = wait_screen("first", r"test-plan.*cell \d/3 ref-baseline/c1/measured/\d\s+running", 60, key="7")
        assert read_snapshot(live_path(db)).state == "running"  # still mid-campaign
        wait_screen("first", r"run_id|engine", 10, key="1")  # back to Runs
        tmux("kill-session", "-t", "first")  # the SSH drop: the console dies, the campaign does not
        assert pid_alive(pid)

        deadline = time.monotonic() + 90
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not pid_alive(pid), "the detached campaign did not finish within 90 s"
        pid = None
        con = duckdb.connect(str(db), read_only=True)
        try:
            statuses = [s for (s,) in con.execute("SELECT status FROM runs ORDER BY started_at").fetchall()]
        finally:
            con.close()
        assert statuses == ["complete"] * 3, statuses
        assert read_snapshot(live_path(db)).state == "finished"

        open_tui("second", db)  # re-attach: a new console in a new tmux session
        runs = wait_screen("second", r"(?s)complete.*complete.*complete", 30, key="1")
        assert runs.count("ref-baseline") >= 3, runs
        live = wait_screen("second", r"test-plan.*finished", 20, key="7")
        assert "✓✓✓" in live, live  # the grid: all three cells complete
    finally:
        tmux("kill-server", check=False)
        if pid is not None and pid_alive(pid):
            os.kill(pid, 15)
            deadline = time.monotonic() + 20
            while pid_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.2)
