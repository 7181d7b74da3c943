"""`campaign run` exit status tells the truth (issue 11 item 7): a failed cell is a non-zero exit,
a closed stdout neither stops the campaign silently nor hides a failure, `--detach` checks what
it can before it detaches, and a refused run leaves the running campaign's live snapshot alone.
The CLI runs as a subprocess against the real reference engine and real DuckDB files."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import duckdb
import pytest

from console.live import live_path
from plans_helpers import make_workload, plan_dict, write_json

pytestmark = pytest.mark.timeout(240)


def campaign(*args, db, **kw):
    return subprocess.run([sys.executable, "-m", "console.cli", *args, "--db", str(db)],
                          capture_output=True, text=True, **kw)


def _plan(tmp_path, name="plan.json", **kw):
    wl = make_workload(tmp_path / "wl", short=True)
    doc = plan_dict(wl, **kw)
    for e in doc["engines"]:
        e["argv"] = [sys.executable, "-m", "engine_adapters.reference", "--dialect", e["dialect"],
                     "--profile", e["profile"], "--host", "127.0.0.1", "--port", str(e["port"])]
    return write_json(tmp_path / name, doc), doc


def _frozen(tmp_path, **kw):
    plan, doc = _plan(tmp_path, **kw)
    db = tmp_path / "c.duckdb"
    fr = campaign("plan", "freeze", str(plan), db=db)
    assert fr.returncode == 0, fr.stderr
    return plan, doc, db


@pytest.mark.slow  # a campaign run as a user would
def test_a_cell_that_measured_nothing_is_a_nonzero_exit(tmp_path):
    """Every request of one engine fails (the reference engine's forced `http_500` fault): the runs
    are stored as measured, and the exit status says the sweep did not succeed."""
    plan, doc = _plan(tmp_path, concurrencies=(1,), requests=2, repeats=1)
    doc["engines"][1]["request"] = {"headers": {"X-Reference-Fault": "http_500"}}
    write_json(plan, doc)
    db = tmp_path / "c.duckdb"
    assert campaign("plan", "freeze", str(plan), db=db).returncode == 0
    r = campaign("run", str(plan), db=db)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "ref-fast/c1/measured/0: no request succeeded" in r.stdout
    assert "1 of 2 cell(s) did not succeed" in r.stdout
    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 2
    con.close()


@pytest.mark.slow  # a campaign run as a user would
def test_closed_stdout_keeps_the_campaign_running_and_says_so(tmp_path):
    """`campaign run PLAN | head -3`: the campaign goes on with its output discarded, says so on
    stderr once, and its exit status is the campaign's own."""
    plan, _, db = _frozen(tmp_path, concurrencies=(1,), requests=2, repeats=2, profiles=("baseline",))
    proc = subprocess.Popen([sys.executable, "-m", "console.cli", "run", str(plan), "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    head = [proc.stdout.readline()]
    while head[-1] and not head[-1].startswith("[1/2]"):
        head.append(proc.stdout.readline())
    proc.stdout.close()  # what `head -3` does when it has its lines: the campaign is one cell in
    err = proc.stderr.read()
    rc = proc.wait(timeout=180)
    assert head[-1].startswith("[1/2]"), head
    assert rc == 0, err
    assert "stdout is closed" in err and err.count("stdout is closed") == 1
    con = duckdb.connect(str(db), read_only=True)
    assert [s for (s,) in con.execute("SELECT status FROM runs").fetchall()] == ["complete", "complete"]
    con.close()


@pytest.mark.slow  # a campaign run as a user would
def test_closed_stdout_does_not_hide_a_failure(tmp_path):
    plan, doc = _plan(tmp_path, concurrencies=(1,), requests=2, repeats=2, profiles=("baseline",))
    doc["engines"][0]["request"] = {"headers": {"X-Reference-Fault": "http_500"}}
    write_json(plan, doc)
    db = tmp_path / "c.duckdb"
    assert campaign("plan", "freeze", str(plan), db=db).returncode == 0
    r = subprocess.run(["bash", "-c", 'set -o pipefail; "$0" -m console.cli run "$1" --db "$2" | head -1',
                        sys.executable, str(plan), str(db)], capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "stdout is closed" in r.stderr
    assert "2 of 2 cell(s) did not succeed" in r.stderr  # the summary goes where it can still be read


@pytest.mark.slow  # 3 s in a loaded `make check`
def test_detach_checks_the_plan_in_the_foreground(tmp_path):
    db = tmp_path / "c.duckdb"
    r = campaign("run", str(tmp_path / "missing.json"), "--detach", db=db)
    assert r.returncode == 2 and "running in the background" not in r.stdout
    assert "missing.json" in r.stderr
    plan, _ = _plan(tmp_path, concurrencies=(1,), requests=2, repeats=1, profiles=("baseline",))
    r = campaign("run", str(plan), "--detach", db=db)
    assert r.returncode == 2 and "plan is not frozen" in r.stderr and "background" not in r.stdout
    assert not (tmp_path / "c.duckdb.run.log").exists()


@pytest.mark.slow  # 4 s in a loaded `make check`
def test_detach_checks_ports_and_store_lock(tmp_path):
    plan, doc, db = _frozen(tmp_path, concurrencies=(1,), requests=2, repeats=1, profiles=("baseline",))
    port = doc["engines"][0]["port"]
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", port))
        holder.listen()
        r = campaign("run", str(plan), "--detach", db=db)
    assert r.returncode == 2 and "background" not in r.stdout
    assert f"engines[0].port: port {port} on 127.0.0.1 is already in use (held by pid {os.getpid()} (" in r.stderr
    con = duckdb.connect(str(db))  # another process holds the store, as a running campaign does
    try:
        r = campaign("run", str(plan), "--detach", db=db)
    finally:
        con.close()
    assert r.returncode == 2 and "in use" in r.stderr and "background" not in r.stdout
    assert not (tmp_path / "c.duckdb.run.log").exists()


def test_refused_second_run_leaves_the_live_snapshot_alone(tmp_path):
    plan, _, db = _frozen(tmp_path, concurrencies=(1,), requests=2, repeats=1, profiles=("baseline",))
    snap = live_path(db)
    running = {"schema": "omni-campaign-live/1", "state": "running", "pid": os.getpid(), "seq": 7,
               "plan_name": "the running one"}
    snap.write_text(json.dumps(running))
    con = duckdb.connect(str(db))  # the running campaign's lock on the store
    try:
        r = campaign("run", str(plan), db=db)
    finally:
        con.close()
    assert r.returncode == 2 and "in use" in r.stderr
    assert json.loads(snap.read_text()) == running
