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


# Modules whose tests measure their own process's scheduling, CPU ticks, threads or a live
# terminal's redraws: `make test` and `make check` run them alone, after the parallel pass
# (docs/testing.md, "Parallel workers").
SERIAL_MODULES = {
    "tests/test_driver_runqueue.py": "pins CPUs and counts a thread's wait for one",
    "tests/test_driver_stall_trace.py": "counts each gap's time on and off a CPU",
    "tests/test_driver_busy_poll.py": "spins a core for its window",
    "tests/test_driver_heap.py": "counts the driver process's page faults",
    "tests/test_driver_ticker.py": "times the loop's timer against the clock",
    "tests/test_driver_pacing.py": "counts sends per loop pass at a measured rate",
    "tests/test_store_threads.py": "counts CPU ticks of the store's threads",
    "tests/test_tui_live.py": "follows a real drive live (failed under load average 7-11)",
    "tests/test_tui_tmux.py": "reads tmux's screen after redraws (clipped once under load)",
    "tests/test_server_metrics.py": "holds the client's TTFA to the engine's own within 50 ms",
    "tests/test_server_metrics_surfaces.py": "holds every client figure to the engine's within its tolerance "
                                             "(a second figure was flagged under a second worker, 2026-12-03)",
    "tests/test_cluster.py": "compares CPU float32 scores of two processes bit for bit (they differed in the "
                             "last bits once under a second worker, 2026-12-03)",
}


@pytest.hookimpl(tryfirst=True)  # before -m reads the marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks by where a test is and what it uses (docs/testing.md):
    - a test that reads the quick demo is `slow` (`make check` leaves it out), wherever it is and
      whether it takes the fixture itself or through another; under pytest-xdist every such test
      is in one group, so the demo runs once, on one worker;
    - every other test is grouped with its module, so a module's fixtures are built once;
    - a test of SERIAL_MODULES is `serial`."""
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        if "quick_demo" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.xdist_group("quick_demo"))
        else:
            item.add_marker(pytest.mark.xdist_group(module))
        if module in SERIAL_MODULES:
            item.add_marker(pytest.mark.serial)


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
