"""`campaign run --cluster`: a local Ray instance with fake GPU resources (two GPUs named by an
accelerator_type resource, no NVML) driving real reference engines over real HTTP into real
DuckDB files. One Ray instance serves the whole module (it takes seconds to start)."""

from __future__ import annotations

import json
import os
import signal
import sys

import pytest

from data.audit import verify_chain
from data.integrity import verify_store
from data.store import Store
from plans_helpers import inproc, make_workload, plan_dict, write_json

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.timeout(300)
FAKE_GPU = "Fake-GPU"


@pytest.fixture(scope="module")
def ray_local():
    """Two fake GPUs on a two-core box; the dashboard off; always shut down."""
    ray.init(num_cpus=2, num_gpus=2, resources={f"accelerator_type:{FAKE_GPU}": 2}, include_dashboard=False,
             log_to_driver=False, object_store_memory=150 * 2**20, logging_level="ERROR")
    try:
        yield ray
    finally:
        ray.shutdown()


def _plan(tmp_path, **kw):
    wl = make_workload(tmp_path / "wl", short=True)
    cluster = kw.pop("cluster", None)
    doc = plan_dict(wl, **kw)
    for e in doc["engines"]:
        e["argv"] = [sys.executable, "-m", "engine_adapters.reference", "--dialect", e["dialect"],
                     "--profile", e["profile"], "--host", "127.0.0.1", "--port", str(e["port"])]
    if cluster:
        doc["cluster"] = cluster
    return write_json(tmp_path / "plan.json", doc)


def _stored(db):
    """Per cell: (utt ids in request order, audio hashes in request order, outcomes); and runs."""
    with Store(db) as s:
        rows = s.query("SELECT r.cell_key, q.request_index, q.utt_id, q.audio_sha256, q.outcome FROM requests q "
                       "JOIN runs r USING (run_id) WHERE r.status = 'complete' ORDER BY r.cell_key, q.request_index")
        runs = s.query("SELECT * FROM runs ORDER BY cell_key")
    cells: dict[str, list] = {}
    for r in rows:
        cells.setdefault(r["cell_key"], []).append((r["request_index"], r["utt_id"], r["audio_sha256"], r["outcome"]))
    return cells, runs


def _scores(db):
    """Per (cell, request, scorer): status, value and hypothesis as stored."""
    with Store(db) as s:
        rows = s.query("SELECT r.cell_key, q.request_index, q.scorer_id, q.model_hash, q.status, q.value, q.hypothesis "
                       "FROM quality_scores q JOIN runs r USING (run_id) ORDER BY 1, 2, 3")
    return [tuple(r.values()) for r in rows]


def _gate(capsys, plan, db):
    """The quality verdict and its checks as the gate prints them (dry run: nothing issued)."""
    r = inproc(capsys, "gate", str(plan), "--dry-run", db=db)
    assert "dry run: nothing issued" in r.stdout, r.stdout + r.stderr
    return r.returncode, [ln for ln in r.stdout.splitlines() if "verdict" in ln.lower() or "│" in ln]


@pytest.mark.slow  # Ray
def test_the_same_plan_locally_and_on_the_cluster_stores_the_same_requests(ray_local, tmp_path, capsys):
    plan = _plan(tmp_path, concurrencies=(1, 2), requests=3, repeats=1)
    local, remote = tmp_path / "local.duckdb", tmp_path / "cluster.duckdb"
    for db in (local, remote):
        assert inproc(capsys, "plan", "freeze", str(plan), db=db).returncode == 0
    r = inproc(capsys, "run", str(plan), db=local)
    assert r.returncode == 0, r.stdout + r.stderr
    c = inproc(capsys, "run", str(plan), "--cluster", "local", db=remote)
    assert c.returncode == 0, c.stdout + c.stderr
    assert "4 run(s) recorded" in c.stdout and f"{FAKE_GPU} x 2 on 1 node(s)" in c.stdout

    cells_l, runs_l = _stored(local)
    cells_r, runs_r = _stored(remote)
    assert len(runs_l) == len(runs_r) == 4 and {x["status"] for x in runs_r} == {"complete"}
    assert sorted(cells_l) == sorted(cells_r) and len(cells_r) == 4
    assert cells_l == cells_r  # counts, utterance ids, audio hashes (lossless profiles) and outcomes
    assert all(len(v) == 3 and all(o == "ok" and h for _, _, h, o in v) for v in cells_r.values())
    # every output file came back to this host's artifacts folder with the recorded hash
    import hashlib
    with Store(remote) as s:
        files = s.query("SELECT path, sha256 FROM audio_files")
        assert len(files) == 12
        for f in files:
            assert hashlib.sha256((tmp_path / "artifacts" / f["path"]).read_bytes()).hexdigest() == f["sha256"]
        assert verify_chain(s).ok and [x for x in verify_store(s) if not x.ok] == []
        launches = s.query("SELECT status, log_path FROM engine_launches")
        assert len(launches) == 4 and {x["status"] for x in launches} == {"stopped"}
        # the engines' logs came back too (the node's scratch folder is gone)
        assert all(os.path.getsize(x["log_path"]) > 0 and x["log_path"].startswith(str(tmp_path)) for x in launches)
        assert {a["outcome"] for a in s.query("SELECT outcome FROM attempts")} == {"measured"}
    # placement: a node id and a GPU per run, and the runs a pair compares shared one GPU
    assert all(x["node_id"] and x["gpu_uuid"] and x["gpu_name"] == FAKE_GPU for x in runs_r)
    by_slot: dict[tuple, set] = {}
    for x in runs_r:
        by_slot.setdefault((x["concurrency"], x["repeat_index"]), set()).add((x["node_id"], x["gpu_uuid"]))
    assert all(len(v) == 1 for v in by_slot.values())
    assert all(x["node_id"] is None for x in runs_l)
    # the engines' own metrics, scraped on the node around each run as the local runner scrapes them
    # (cluster runs stored none before 2026-12-03): the same family and figures as the local run's,
    # scrape 0 before the first request, and the run's requests counted by the engine, none failed
    # (the reference engine counted a client that hung up after its last event as a failure until
    # 2026-12-03: docs/engines.md, "Engine metrics")
    from stats.server_reconcile import reconcile_run

    recs = {}
    for db in (local, remote):
        with Store(db) as s:
            cells = {r["cell_key"]: r["run_id"] for r in s.query("SELECT cell_key, run_id FROM runs")}
            recs[db] = {k: reconcile_run(s, rid) for k, rid in cells.items()}
    assert sorted(recs[local]) == sorted(recs[remote])
    want_done = {k: next((p.server, p.client) for p in r.pairs if p.figure == "requests_completed")
                 for k, r in recs[local].items()}
    for key, rec in recs[remote].items():
        mine = recs[local][key]
        assert rec.engine_family == mine.engine_family is not None and rec.baseline and rec.scrapes >= 2, rec
        got = {p.figure: (p.server, p.client) for p in rec.pairs}
        assert sorted(got) == sorted(p.figure for p in mine.pairs)
        assert got["requests_failed"] == (0.0, 0.0) and got["requests_completed"][1] == 3.0, rec
        assert got["requests_completed"] == want_done[key] == (3.0, 3.0) and got["audio_s_total"][0] > 0, rec

    # the quality phase on both, scored locally and by one scorer replica per (fake) GPU
    for db, where in ((local, []), (remote, ["--cluster", "local"])):
        assert inproc(capsys, "plan", "open-holdout", str(plan), "--reason", "test", db=db).returncode == 0
        h = inproc(capsys, "run", str(plan), "--holdout", *where, db=db)
        assert h.returncode == 0, h.stdout + h.stderr
        sc = inproc(capsys, "score", str(plan), *where, db=db)
        assert sc.returncode == 0, sc.stdout + sc.stderr
    assert "2 replica(s) per scorer" in sc.stdout
    scores = _scores(local)
    assert scores and _scores(remote) == scores and all(x[4] == "ok" for x in scores)
    assert _gate(capsys, plan, local) == _gate(capsys, plan, remote)

    again = inproc(capsys, "run", str(plan), "--cluster", "local", "--resume", db=remote)
    assert again.returncode == 0 and "0 run(s) recorded, 4 cell(s) already complete" in again.stdout


@pytest.mark.slow  # Ray
def test_a_worker_killed_mid_cell_leaves_the_run_incomplete_and_the_cell_runs_again(ray_local, tmp_path, capsys):
    from console.runner import RunnerOptions, run_plan
    from console.commands.plan import plan_for_arg

    plan_path = _plan(tmp_path, profiles=("baseline",), concurrencies=(1,), requests=6, repeats=1)
    db = tmp_path / "c.duckdb"
    assert inproc(capsys, "plan", "freeze", str(plan_path), db=db).returncode == 0
    workers: list[int] = []
    killed: list[int] = []

    def on_progress(done, total):
        if not killed and done >= 1:  # a request of the first run is stored: kill its worker
            killed.append(workers[0])
            os.kill(workers[0], signal.SIGKILL)

    lines: list[str] = []
    with Store(db) as s:
        plan = plan_for_arg(s, str(plan_path))
        res = run_plan(s, plan, RunnerOptions(artifacts_dir=tmp_path / "artifacts", cluster="local", log=lines.append,
                                             on_node=lambda p: workers.append(p["pid"]), on_progress=on_progress))
        runs = s.query("SELECT run_id, status, note, node_id FROM runs ORDER BY started_at")
        counts = {r["run_id"]: s.scalar("SELECT count(*) FROM requests WHERE run_id = ?", [r["run_id"]]) for r in runs}
        launches = s.query("SELECT status, failure_reason FROM engine_launches ORDER BY started_at")
        attempts = s.query("SELECT outcome, reason FROM attempts ORDER BY created_at")
        ended = [json.loads(e["payload_json"]) for e in
                 s.query("SELECT payload_json FROM audit_events WHERE kind = 'run_ended' ORDER BY seq")]
        assert verify_chain(s).ok and [x for x in verify_store(s) if not x.ok] == []
    assert killed and len(workers) == 2, lines
    assert res.ok and res.problems == [], res.problems
    assert [r["status"] for r in runs] == ["incomplete", "complete"], lines
    assert "lost" in runs[0]["note"] or "died" in runs[0]["note"], runs[0]["note"]
    assert 1 <= counts[runs[0]["run_id"]] < 6 and counts[runs[1]["run_id"]] == 6
    assert ended[0]["status"] == "incomplete" and ended[0]["requests_stored"] == counts[runs[0]["run_id"]]
    assert ended[0]["digest"]["tables"]["requests"]["rows"] == counts[runs[0]["run_id"]]
    assert [x["status"] for x in launches] == ["crashed", "stopped"]
    assert [a["outcome"] for a in attempts] == ["interrupted", "measured"]
    assert any("re-queued 1 cell(s): ref-baseline/c1/measured/0" in ln for ln in lines), lines


@pytest.mark.slow  # Ray
def test_a_cluster_of_another_shape_is_refused_with_one_line(ray_local, tmp_path, capsys):
    plan = _plan(tmp_path, profiles=("baseline",), concurrencies=(1,), requests=1, repeats=1,
                 cluster={"gpu_name": "NVIDIA H200", "gpus": 8})
    db = tmp_path / "c.duckdb"
    fr = inproc(capsys, "plan", "freeze", str(plan), db=db)
    assert fr.returncode == 0, fr.stderr
    with Store(db) as s:
        payload = json.loads(s.scalar("SELECT payload_json FROM audit_events WHERE kind = 'plan_frozen'"))
    assert payload["cluster"] == {"gpu_name": "NVIDIA H200", "gpus": 8}
    r = inproc(capsys, "run", str(plan), "--cluster", "local", db=db)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "cluster.gpu_name: expected every GPU to be 'NVIDIA H200'" in r.stderr and f"{FAKE_GPU} x 2" in r.stderr
    with Store(db) as s:
        assert s.scalar("SELECT count(*) FROM runs") == 0


def test_a_bad_cluster_address_is_one_line(tmp_path, capsys):
    plan = _plan(tmp_path, profiles=("baseline",), concurrencies=(1,), requests=1, repeats=1)
    db = tmp_path / "c.duckdb"
    assert inproc(capsys, "plan", "freeze", str(plan), db=db).returncode == 0
    r = inproc(capsys, "run", str(plan), "--cluster", "somewhere", db=db)
    assert r.returncode == 2 and "--cluster: 'somewhere' is not local, auto or ray://HOST:PORT" in r.stderr
