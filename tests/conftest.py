"""Shared pytest fixtures (owned by the lead; helpers put their own helpers in tests/<area>_*.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from data.store import Store


@pytest.fixture
def store(tmp_path):
    """A fresh, migrated run store in a temporary DuckDB file."""
    s = Store(tmp_path / "campaign.duckdb")
    yield s
    s.close()


@pytest.fixture(scope="module")
def prompt(tmp_path_factory):
    """One voiced test prompt, the bench's own (test modules may override it)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from bench_timing_fidelity import prompt_wav

    return prompt_wav(tmp_path_factory.mktemp("p") / "prompt.wav")


@pytest.hookimpl(tryfirst=True)  # before -m reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that reads the quick demo is in the slow tier (`make check` leaves it out:
    docs/testing.md), wherever it is and whether it takes the fixture itself or through another."""
    for item in items:
        if "quick_demo" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def quick_demo():
    """`campaign demo --quick` once for the whole test session (about 95 s alone): its stdout and
    its store, shared by the demo, TUI and evidence tests. KEEP_QUICK_DEMO=1 keeps the folder and
    REUSE_QUICK_DEMO=<its stdout file> reuses it while working on those tests."""
    root = Path(__file__).resolve().parents[1]
    reuse = os.environ.get("REUSE_QUICK_DEMO")
    if reuse:
        text = Path(reuse).read_text()
        yield text, root / re.search(r"store:\s+(demo/\S+)/campaign.duckdb", text).group(1) / "campaign.duckdb"
        return
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-m", "console.cli", "demo", "--quick"], cwd=root, env=env,
                         capture_output=True, text=True, timeout=800)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    folder = root / re.search(r"store:\s+(demo/\S+)/campaign.duckdb", out.stdout).group(1)
    yield out.stdout, folder / "campaign.duckdb"
    if os.environ.get("KEEP_QUICK_DEMO"):
        (folder / "demo.out").write_text(out.stdout)
    else:
        shutil.rmtree(folder, ignore_errors=True)
