"""The demo echoes each command whole (issue 32): never cut with "…" at any width, quoted so a shell
takes it back, so it can be copied and run again. The demo's `campaign` helper runs in a
subprocess with its stdout a pipe and an 60-column terminal width."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_echoed_command_is_whole_and_copyable(tmp_path):
    out = tmp_path / ("a folder with spaces and a long name " * 3).strip() / "plan.json"
    out.parent.mkdir()
    code = ("import sys; from console.demo import campaign; "
            "campaign('plan', 'init', '--demo', '-o', sys.argv[1])")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "60"}
    r = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    echoed = [ln for ln in r.stdout.splitlines() if ln.startswith("$ campaign ")]
    assert len(echoed) == 1 and "…" not in r.stdout
    assert shlex.split(echoed[0][2:]) == ["campaign", "plan", "init", "--demo", "-o", str(out)]
    assert out.is_file()
