"""Reads while a campaign runs (data/snapshot.py): `campaign sql`, `campaign report` and the
TUI's loader answer from a consistent snapshot the running campaign serves, never "in use".
Real `campaign run` subprocess, real reference engines, real DuckDB files."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from test_run_exit import _frozen, campaign

from console.live import live_path, read_snapshot
from console.tui.data import load_browser
from data.snapshot import open_reader, socket_path

pytestmark = pytest.mark.timeout(240)


def _wait_running(db, proc, deadline_s=60.0):
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        snap = read_snapshot(live_path(db))
        if snap is not None and snap.state == "running" and snap.run is not None and snap.run.done >= 1:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.1)
    raise AssertionError("the campaign never reported a running cell")


@pytest.mark.slow  # reads during a real run
def test_sql_report_and_tui_read_a_snapshot_during_a_run(tmp_path):
    plan, doc, db = _frozen(tmp_path, concurrencies=(1,), requests=24, repeats=2, profiles=("baseline", "fast"))
    proc = subprocess.Popen([sys.executable, "-m", "console.cli", "run", str(plan), "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_running(db, proc)
        sql = campaign("sql", "SELECT count(*) AS plans FROM plans", "--format", "csv", db=db)
        assert sql.returncode == 0, sql.stderr
        assert sql.stdout.split() == ["plans", "1"] and "in use" not in sql.stderr
        report = campaign("report", str(plan), db=db)
        assert report.returncode == 0, report.stderr
        assert "ref-baseline" in report.stdout
        data = load_browser(db)  # the TUI's loader, in this process
        assert data.snapshot_of == db and data.reports
        with open_reader(db) as store:
            assert store.snapshot_of == db
            assert store.scalar("SELECT count(*) FROM audit_events WHERE kind = 'plan_frozen'") == 1
        assert proc.poll() is None, "the campaign ran out before the reads: raise requests"
    finally:
        out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    assert not socket_path(db).exists()  # the owner removed its socket and snapshot when done
    with open_reader(db) as store:  # the store itself again
        assert store.snapshot_of is None
        assert store.scalar("SELECT count(*) FROM runs WHERE status = 'complete'") == 4
