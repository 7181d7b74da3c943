"""A full disk during a campaign (issue 26, item 8), on a real full filesystem: a small tmpfs
mounted for the test (root only; skipped elsewhere, as mounting needs it). Before the fix the
run ended in `campaign: database error: ... No space left on device` with exit status 2 (the
code for "refused before running anything"), the run was left `running` (so --resume called it
"runner died mid-run"), and a 0-byte `<db>.live.json.<pid>.tmp` and a partial `.wav.part` stayed
behind. Now: exit 1 (a failed run), one line saying the disk is full, the stopped run's note
says so, no temp file is left, and --resume after freeing space completes the campaign."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from plans_helpers import make_workload, plan_dict, write_json

from console.live import LiveFeed
from data.store import Store

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def disk(tmp_path):
    """A 64 MiB tmpfs at tmp_path/disk; `shrink(disk)` remounts it to what it holds plus `room`."""
    path = tmp_path / "disk"
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(path)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def resize(path: Path, room: int) -> None:
    """Remount the tmpfs to its current use plus `room` bytes (whole pages)."""
    used = shutil.disk_usage(path).used
    size = -(-(used + room) // 4096) * 4096
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True)


def leftovers(root: Path) -> list[str]:
    return sorted(str(p) for p in root.rglob("*") if p.name.endswith((".tmp", ".part")))


def test_live_snapshot_on_a_full_disk_leaves_no_temp_file(disk):
    feed = LiveFeed(disk / "c.duckdb")
    resize(disk, 64 * 1024)  # (a tmpfs of size 0 has no limit)
    with pytest.raises(OSError, match="No space left"), open(disk / "filler", "wb", buffering=0) as f:
        while True:  # the disk is full: not one more page
            f.write(b"x" * 4096)
    writes = feed.writes
    feed._write('{"seq": 1}')
    assert feed.last_error and "No space left on device" in feed.last_error
    assert leftovers(disk) == [] and feed.writes == writes


@pytest.mark.slow  # a campaign on a full disk, resumed
def test_campaign_on_a_full_disk_fails_the_run_and_resumes(disk, tmp_path):
    doc = plan_dict(make_workload(tmp_path / "wl", short=True), profiles=("fast",), concurrencies=(1, 2), requests=8,
                    warmups=0, repeats=2)
    e = doc["engines"][0]
    e["argv"] = [sys.executable, "-m", "engine_adapters.reference", "--dialect", "vllm-omni", "--profile", "fast",
                 "--host", "127.0.0.1", "--port", str(e["port"])]
    plan = write_json(tmp_path / "plan.json", doc)
    db = disk / "c.duckdb"  # the store, its live file and the artifacts (next to it) all on the small disk

    def campaign(*args):
        return subprocess.run([sys.executable, "-m", "console.cli", *args, "--db", str(db)],
                              capture_output=True, text=True)

    assert campaign("plan", "freeze", str(plan)).returncode == 0
    resize(disk, 64 * 1024)  # less than the first run's audio (FLAC, each distinct output once: about 107 KB)
    r = campaign("run", str(plan))
    assert "database error" not in r.stderr and "Traceback" not in r.stderr, r.stderr[-3000:]
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    # one line (an audit-anchor warning may precede it: the anchor file is on the same disk)
    lines = [x for x in r.stderr.strip().splitlines() if "audit anchor not updated" not in x]
    assert len(lines) == 1 and lines[0].startswith("campaign: the campaign stopped: the disk is full"), lines
    assert "No space left on device" in lines[0] and "--resume" in lines[0]
    assert leftovers(disk) == []

    resize(disk, 64 << 20)  # space freed: resume finishes the campaign
    r = campaign("run", str(plan), "--resume")
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert leftovers(disk) == []
    with Store(db) as s:
        runs = s.query("SELECT cell_key, status, note FROM runs ORDER BY started_at")
        stopped = [x for x in runs if x["status"] != "complete"]
        assert len(stopped) == 1 and "the disk is full" in (stopped[0]["note"] or ""), runs
        assert "runner died" not in stopped[0]["note"]
        assert len({x["cell_key"] for x in runs if x["status"] == "complete"}) == 4
