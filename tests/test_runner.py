"""The campaign runner end to end against the real reference engine (real HTTP, real DuckDB,
`campaign` as a subprocess): a full small campaign, and resume after SIGKILL of the runner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from data.audit import verify_chain
from data.integrity import verify_store
from data.queries import aggregate_runs
from data.store import Store
from engine_adapters.telemetry import gpu_identity
from plans_helpers import inproc, make_workload, plan_dict, write_json

pytestmark = pytest.mark.timeout(240)


def _plan(tmp_path, short=False, **kw):
    wl = make_workload(tmp_path / "wl", short=short)
    doc = plan_dict(wl, **kw)
    for e in doc["engines"]:  # the engine's own module entry point: independent of the CLI wiring
        e["argv"] = [sys.executable, "-m", "engine_adapters.reference", "--dialect", e["dialect"],
                     "--profile", e["profile"], "--host", "127.0.0.1", "--port", str(e["port"])]
    return write_json(tmp_path / "plan.json", doc)


def campaign(*args, db, **kw):
    return subprocess.run([sys.executable, "-m", "console.cli", *args, "--db", str(db)],
                          capture_output=True, text=True, **kw)


@pytest.mark.slow  # a full campaign
def test_full_small_campaign(tmp_path, capsys):
    plan = _plan(tmp_path, short=True, concurrencies=(1, 2, 4), requests=4, warmups=1, repeats=2,
                 interleave="sequential", restart="per_cell")
    db = tmp_path / "c.duckdb"
    fr = inproc(capsys, "plan", "freeze", str(plan), db=db)
    assert fr.returncode == 0, fr.stderr
    r = campaign("run", str(plan), db=db)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "18 run(s) recorded" in r.stdout

    with Store(db) as s:
        h = s.scalar("SELECT plan_hash FROM plans")
        runs = s.query("SELECT * FROM runs ORDER BY started_at")
        assert len(runs) == 18 and {x["status"] for x in runs} == {"complete"}
        assert sum(x["kind"] == "warmup" for x in runs) == 6 and sum(x["kind"] == "measured" for x in runs) == 12
        assert len({x["cell_key"] for x in runs}) == 18
        # sequential order: each engine's sweep, warmup before the measured repeats in every cell
        assert [x["cell_key"] for x in runs[:3]] == ["ref-baseline/c1/warmup/0", "ref-baseline/c1/measured/0",
                                                     "ref-baseline/c1/measured/1"]
        assert runs[-1]["cell_key"] == "ref-fast/c4/measured/1"
        assert s.scalar("SELECT count(*) FROM requests WHERE outcome = 'ok'") == 18 * 4
        assert s.scalar("SELECT count(DISTINCT utt_id) FROM requests") == 4  # the same requests for every cell
        assert {x["telemetry_status"] for x in runs} == {gpu_identity()[1]}
        agg = aggregate_runs(s, h)
        assert len(agg) == 12 and {x["kind"] for x in agg} == {"measured"}
        assert len(aggregate_runs(s, h, engine="ref-fast", concurrency=2)) == 2
        launches = s.query("SELECT * FROM engine_launches")
        assert len(launches) == 6 and {x["status"] for x in launches} == {"stopped"}  # per_cell: one per engine x C
        attempts = s.query("SELECT * FROM attempts")
        assert {a["outcome"] for a in attempts} == {"measured"}
        assert sorted(sum((json.loads(a["run_ids_json"]) for a in attempts), [])) == sorted(x["run_id"] for x in runs)
        kinds = [e[0] for e in s.con.execute("SELECT kind FROM audit_events ORDER BY seq").fetchall()]
        assert kinds.count("run_started") == kinds.count("run_ended") == 18
        assert verify_chain(s).ok
        no_pool = s.scalar("SELECT count(*) FROM runs WHERE pool IS DISTINCT FROM 'tuning'")
        assert no_pool == 0

    again = inproc(capsys, "run", str(plan), db=db)
    assert again.returncode == 2 and "already has 18 run(s)" in again.stderr
    resumed = inproc(capsys, "run", str(plan), "--resume", db=db)
    assert resumed.returncode == 0 and "0 run(s) recorded, 18 cell(s) already complete" in resumed.stdout

    rep = inproc(capsys, "report", str(plan), "--format", "json", db=db)
    assert rep.returncode == 0, rep.stderr
    cells = json.loads(rep.stdout)
    assert [(c["engine"], c["concurrency"], c["repeats"]) for c in cells] == [
        (e, c, 2) for e in ("ref-baseline", "ref-fast") for c in (1, 2, 4)]
    assert all(c["throughput_median"] > 0 and c["failed_max"] == 0 and c["chunks_mean_min"] >= 1 for c in cells)
    tput = {(c["engine"], c["concurrency"]): c["throughput_median"] for c in cells}
    # the fast profile's cheaper decode steps must show up in the measured table
    assert sum(tput["ref-fast", c] for c in (1, 2, 4)) > sum(tput["ref-baseline", c] for c in (1, 2, 4))
    table = inproc(capsys, "report", str(plan), db=db)
    assert table.returncode == 0 and "ref-baseline" in table.stdout and "TTFA p95" in table.stdout
    assert "not in aggregates: 6 warmup/complete" in table.stdout

    with Store(db) as s:
        victim = s.scalar("SELECT run_id FROM runs WHERE cell_key = 'ref-fast/c2/measured/0'")
    ex = inproc(capsys, "runs", "exclude", victim, "--reason", "profiler attached", db=db)
    assert ex.returncode == 0, ex.stderr
    cells = json.loads(inproc(capsys, "report", str(plan), "--format", "json", db=db).stdout)
    assert {(c["engine"], c["concurrency"]): c["repeats"] for c in cells}[("ref-fast", 2)] == 1
    assert sum(c["repeats"] for c in cells) == 11


@pytest.mark.slow  # a campaign killed and resumed
def test_resume_after_sigkill_mid_cell(tmp_path, capsys):
    plan = _plan(tmp_path, profiles=("baseline",), concurrencies=(1,), requests=6, warmups=0, repeats=3,
                 interleave="sequential", restart="per_cell")
    db = tmp_path / "c.duckdb"
    assert inproc(capsys, "plan", "freeze", str(plan), db=db).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "console.cli", "run", str(plan), "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("[1/3]") or time.monotonic() > deadline:
            break
    assert lines[-1].startswith("[1/3]"), "".join(lines)
    time.sleep(1.2)  # inside the second run (6 long requests at C=1 take a few seconds)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    with Store(db) as s:
        before = s.query("SELECT run_id, status, cell_key FROM runs ORDER BY started_at")
        assert [(r["status"], r["cell_key"]) for r in before] == [
            ("complete", "ref-baseline/c1/measured/0"), ("running", "ref-baseline/c1/measured/1")]
        first = s.query("SELECT * FROM requests WHERE run_id = ? ORDER BY request_index", [before[0]["run_id"]])
        partial = s.query("SELECT * FROM requests WHERE run_id = ? ORDER BY request_index", [before[1]["run_id"]])
        chunks_before = s.scalar("SELECT count(*) FROM chunks")
        orphan = s.query("SELECT pid, status FROM engine_launches")[0]
        assert orphan["status"] == "ready" and len(first) == 6 and len(partial) < 6

    r = campaign("run", str(plan), "--resume", db=db)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "marked incomplete" in r.stdout and "2 run(s) recorded, 1 cell(s) already complete" in r.stdout
    with Store(db) as s:
        runs = s.query("SELECT run_id, status, cell_key FROM runs ORDER BY started_at")
        assert [(x["status"], x["cell_key"]) for x in runs] == [
            ("complete", "ref-baseline/c1/measured/0"), ("incomplete", "ref-baseline/c1/measured/1"),
            ("complete", "ref-baseline/c1/measured/1"), ("complete", "ref-baseline/c1/measured/2")]
        # nothing stored before the kill was lost or changed
        assert s.query("SELECT * FROM requests WHERE run_id = ? ORDER BY request_index", [runs[0]["run_id"]]) == first
        assert s.query("SELECT * FROM requests WHERE run_id = ? ORDER BY request_index", [runs[1]["run_id"]]) == partial
        assert s.scalar("SELECT count(*) FROM chunks") > chunks_before
        h = s.scalar("SELECT plan_hash FROM plans")
        assert [x["run_id"] for x in aggregate_runs(s, h)] == [runs[0]["run_id"], runs[2]["run_id"], runs[3]["run_id"]]
        statuses = [x["status"] for x in s.query("SELECT status FROM engine_launches ORDER BY started_at")]
        assert statuses == ["crashed", "stopped"]
        ended = s.query("SELECT payload_json FROM audit_events WHERE kind = 'run_ended' AND subject = ?", [runs[1]["run_id"]])
        assert json.loads(ended[0]["payload_json"])["status"] == "incomplete"
        assert verify_chain(s).ok
        # the recovered run's end event records the digest of what it stored; verify recomputes it
        assert json.loads(ended[0]["payload_json"])["digest"]["tables"]["requests"]["rows"] == len(partial)
        assert [c for c in verify_store(s) if not c.ok] == []
    assert not os.path.exists(f"/proc/{orphan['pid']}") or \
        open(f"/proc/{orphan['pid']}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"


def test_startup_failure_is_recorded_and_cells_skipped(tmp_path, capsys):
    plan = _plan(tmp_path, profiles=("baseline",), concurrencies=(1, 2), requests=2, warmups=0, repeats=1)
    doc = json.loads(plan.read_text())
    doc["engines"][0]["argv"] = [sys.executable, "-c", "import sys; print('no GPU for you'); sys.exit(3)"]
    plan.write_text(json.dumps(doc))
    db = tmp_path / "c.duckdb"
    assert inproc(capsys, "plan", "freeze", str(plan), db=db).returncode == 0
    r = inproc(capsys, "run", str(plan), db=db)
    assert r.returncode == 1 and "startup failed" in r.stdout and "remaining cells were skipped" in r.stdout
    with Store(db) as s:
        assert s.scalar("SELECT count(*) FROM runs") == 0
        launch = s.query("SELECT * FROM engine_launches")
        assert len(launch) == 1 and launch[0]["status"] == "startup_failed" and launch[0]["exit_code"] == 3
        assert "no GPU for you" in launch[0]["log_tail"]
        att = s.query("SELECT * FROM attempts")
        assert [a["outcome"] for a in att] == ["startup_failed"] and att[0]["launch_id"] == launch[0]["launch_id"]
        assert s.scalar("SELECT count(*) FROM audit_events WHERE kind = 'attempt_recorded'") == 1


@pytest.mark.slow  # 3 s in a loaded `make check`
def test_holdout_phase_needs_opening_and_then_blocks_reuse(tmp_path, capsys):
    plan = _plan(tmp_path, short=True, profiles=("baseline",), concurrencies=(1,), requests=2, warmups=0, repeats=1)
    db = tmp_path / "c.duckdb"
    assert inproc(capsys, "plan", "freeze", str(plan), db=db).returncode == 0
    refused = inproc(capsys, "run", str(plan), "--holdout", db=db)
    assert refused.returncode == 2 and "holdout pool 'holdout' is reserved" in refused.stderr
    assert inproc(capsys, "plan", "open-holdout", str(plan), "--reason", "candidate chosen on tuning", db=db).returncode == 0
    r = campaign("run", str(plan), "--holdout", db=db)
    assert r.returncode == 0, r.stdout + r.stderr
    with Store(db) as s:
        runs = s.query("SELECT * FROM runs")
        assert [(x["cell_key"], x["pool"], x["status"]) for x in runs] == [("ref-baseline/c1/measured/0@holdout", "holdout", "complete")]
        holdout = json.loads((tmp_path / "wl" / "pools.json").read_text())["holdout"]
        assert [u for (u,) in s.con.execute("SELECT utt_id FROM requests ORDER BY request_index").fetchall()] == holdout
    # a new plan reserving the same (now used) holdout is refused, naming the ids and the run
    doc = json.loads(plan.read_text())
    doc["name"] = "round-two"
    (tmp_path / "round2.json").write_text(json.dumps(doc))
    again = inproc(capsys, "plan", "freeze", str(tmp_path / "round2.json"), db=db)
    assert again.returncode == 2 and "4 of 4 holdout id(s) already appear in stored requests" in again.stderr
    assert runs[0]["run_id"] in again.stderr


@pytest.mark.slow  # a detached campaign
def test_detached_run_survives_the_terminal_going_away(tmp_path):
    """`run --detach` puts the campaign in its own session: a hang-up of the launching terminal's
    process group (what an SSH drop delivers) does not reach it, and it completes on its own."""
    plan = _plan(tmp_path, short=True, profiles=("baseline",), concurrencies=(1,), requests=2, warmups=0, repeats=1)
    db = tmp_path / "c.duckdb"
    assert campaign("plan", "freeze", str(plan), db=db).returncode == 0
    # the launcher runs in a process group of its own, standing in for the login shell's
    launcher = subprocess.Popen([sys.executable, "-m", "console.cli", "run", str(plan), "--detach", "--db", str(db)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    out, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == 0, out
    pid = int(out.split("pid ")[1].split(")")[0])
    try:
        os.killpg(launcher.pid, signal.SIGHUP)  # the "terminal" hangs up; the launcher's group is gone already
    except ProcessLookupError:
        pass
    assert os.getsid(pid) == pid  # its own session: no controlling terminal to lose
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        if open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
            break  # exited; reaped by whoever adopted it
        time.sleep(0.3)
    log = (tmp_path / "c.duckdb.run.log").read_text()
    assert "1 run(s) recorded" in log, log
    with Store(db) as s:
        assert s.query("SELECT status FROM runs") == [{"status": "complete"}]


def test_plan_cell_on_a_port_held_by_another_server_is_a_startup_failure(tmp_path, capsys):
    """A stale server answers 200 on the engine's port: the cell is a startup failure naming the
    port and the holder, never a complete run under the engine's name."""
    from engine_helpers import start_stale_server

    plan = _plan(tmp_path, short=True, profiles=("baseline",), concurrencies=(1,), requests=2, warmups=0, repeats=1)
    port = json.loads(plan.read_text())["engines"][0]["port"]
    db = tmp_path / "c.duckdb"
    assert inproc(capsys, "plan", "freeze", str(plan), db=db).returncode == 0
    stale = start_stale_server(port)
    try:
        r = inproc(capsys, "run", str(plan), db=db)
    finally:
        stale.kill()
        stale.wait()
    assert r.returncode != 0 and "startup failed" in r.stdout
    assert f"port {port} on 127.0.0.1 is already in use (held by pid {stale.pid} (" in r.stdout
    with Store(db) as s:
        assert s.scalar("SELECT count(*) FROM runs") == 0
        launch = s.query("SELECT * FROM engine_launches")
        assert [x["status"] for x in launch] == ["startup_failed"] and f"port {port}" in launch[0]["failure_reason"]
        assert [a["outcome"] for a in s.query("SELECT outcome FROM attempts")] == ["startup_failed"]


@pytest.mark.slow  # a long engine run
def test_engine_killed_mid_run_fails_the_run_with_the_signal(tmp_path):
    """SIGKILL the reference engine while a run streams: that run is 'failed' with the cause
    stored, its launch 'crashed', and no aggregate uses it."""
    from engine_helpers import find_engine

    plan = _plan(tmp_path, profiles=("baseline",), concurrencies=(1,), requests=6, warmups=0, repeats=1)
    port = json.loads(plan.read_text())["engines"][0]["port"]
    db = tmp_path / "c.duckdb"
    assert campaign("plan", "freeze", str(plan), db=db).returncode == 0
    proc = subprocess.Popen([sys.executable, "-m", "console.cli", "run", str(plan), "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if " ready (" in line:
            break
    assert " ready (" in lines[-1], "".join(lines)
    engine = find_engine(f"--port {port}")
    time.sleep(1.0)  # inside the run: 6 long requests at C=1 take a few seconds
    os.kill(engine, signal.SIGKILL)
    out = "".join(lines) + proc.stdout.read()
    proc.wait(120)
    assert "run " in out and "failed (engine exited: killed by SIGKILL)" in out, out
    with Store(db) as s:
        runs = s.query("SELECT * FROM runs")
        assert [(x["status"], x["note"]) for x in runs] == [("failed", "engine exited: killed by SIGKILL")]
        assert json.loads(runs[0]["driver_overhead_json"])["engine_exit"] == "engine exited: killed by SIGKILL"
        assert s.scalar("SELECT count(*) FROM requests WHERE run_id = ?", [runs[0]["run_id"]]) == 6  # nothing dropped
        assert aggregate_runs(s, runs[0]["plan_hash"]) == []
        launch = s.query("SELECT status, failure_reason FROM engine_launches")
        assert launch == [{"status": "crashed", "failure_reason": "engine exited while serving: killed by SIGKILL"}]
        ended = s.query("SELECT payload_json FROM audit_events WHERE kind = 'run_ended'")
        assert json.loads(ended[0]["payload_json"])["error"] == "engine exited: killed by SIGKILL"
        assert verify_chain(s).ok


def _driver_plan(tmp_path, c: int, requests: int, **sweep) -> Path:
    """A one-engine, one-repeat plan at concurrency c with `sweep` fields set as given."""
    plan = _plan(tmp_path, short=True, profiles=("baseline",), concurrencies=(c,), requests=requests, warmups=0, repeats=1)
    doc = json.loads(plan.read_text())
    doc["sweep"].update(sweep)
    plan.write_text(json.dumps(doc))
    return plan


def _freeze_and_run(capsys, plan: Path, db: Path) -> None:
    assert inproc(capsys, "plan", "freeze", str(plan), db=db).returncode == 0
    r = inproc(capsys, "run", str(plan), db=db)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow  # 4 s in a loaded `make check`
def test_plan_spreads_each_run_over_the_driver_processes_it_names(tmp_path, capsys):
    """`sweep.driver_shards` reaches the driver: a run at C=2 with two shards records both
    (driver_overhead_json.shards) and stores every request, as one process would."""
    db = tmp_path / "c.duckdb"
    _freeze_and_run(capsys, _driver_plan(tmp_path, 2, 4, driver_shards=2), db)
    with Store(db) as s:
        run = s.query("SELECT * FROM runs")[0]
        assert run["status"] == "complete"
        assert len(json.loads(run["driver_overhead_json"])["shards"]) == 2
        assert s.scalar("SELECT count(*) FROM requests WHERE outcome = 'ok'") == 4


@pytest.mark.slow  # 3 s in a loaded `make check`
def test_plan_sets_each_runs_busy_poll(tmp_path, capsys):
    """`sweep.driver_busy_poll_us` reaches the driver: the run records its window and the loop
    passes that polled (docs/timing.md, "Busy polling"); a bad value is one line naming it."""
    db = tmp_path / "c.duckdb"
    _freeze_and_run(capsys, _driver_plan(tmp_path, 1, 2, driver_busy_poll_us=2000), db)
    with Store(db) as s:
        overhead = json.loads(s.scalar("SELECT driver_overhead_json FROM runs"))
    assert overhead["busy_poll_us"] == 2000 and overhead["busy_poll_passes"] > 100, overhead
    plan = _driver_plan(tmp_path, 1, 2, driver_busy_poll_us=-5)
    r = inproc(capsys, "plan", "freeze", str(plan), db=tmp_path / "d.duckdb")
    assert r.returncode != 0 and "driver_busy_poll_us" in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("value", [0, "many", 1.5])
def test_a_bad_driver_shards_value_is_one_line_naming_the_field(tmp_path, capsys, value):
    plan = _driver_plan(tmp_path, 2, 4, driver_shards=value)
    r = inproc(capsys, "plan", "freeze", str(plan), db=tmp_path / "c.duckdb")
    assert r.returncode != 0 and "driver_shards" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "c.duckdb").exists() or "Traceback" not in r.stderr
