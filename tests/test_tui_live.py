"""LiveFeed against a real drive: the reference engine (flaky profile) over real HTTP, the real
driver process, every batch written to a real store AND fed to the LiveFeed, exactly as the
recording loop does. The snapshot's figures must equal what stats.metrics computes from the store."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from plans_helpers import free_port, make_workload

from console.live import LiveFeed, live_metrics, live_path, read_snapshot
from data.records import RequestRecord
from data.store import Store
from data.workload import load_workload
from data.writer import BatchWriter
from engine_adapters.driver import DriverProcess, DriveSpec, RequestSpec
from stats.metrics import run_metrics

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def engine():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "engine_adapters.reference", "--dialect", "vllm-omni",
                             "--profile", "flaky", "--port", str(port)], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/health", timeout=1) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("reference engine did not become healthy in 60 s")
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.mark.slow  # 2 s in a loaded `make check`
def test_livefeed_follows_a_real_drive(engine, tmp_path):
    wl = load_workload(make_workload(tmp_path / "wl", n=8, n_holdout=0), "en")
    requests = [RequestSpec(u.utt_id, u.target_text, u.prompt_wav, u.prompt_text) for u in wl.utterances] * 2
    run_id = "live-run"
    spec = DriveSpec(run_id=run_id, url=engine, dialect="vllm-omni", concurrency=4, requests=requests,
                     timeout_s=5.0, artifacts_dir=tmp_path / "artifacts", sampling={"seed": 42})
    db = tmp_path / "campaign.duckdb"
    snaps = []
    with Store(db) as store:
        store.insert("runs", {"run_id": run_id, "engine": "ref-flaky", "dialect": "vllm-omni", "concurrency": 4,
                              "repeat_index": 0, "kind": "exploratory", "status": "running"})
        feed = LiveFeed(db, max_hz=4)
        feed.cell(0, 1, "ref-flaky/c4/exploratory/0", "running")
        feed.run_started(run_id, "ref-flaky", 4, "exploratory", len(requests), "vllm-omni", spec.request_options)
        proc = DriverProcess(spec, on_inflight=feed.inflight).start()
        writer = BatchWriter(store)
        t0 = time.monotonic()
        for batch in proc.batches():
            writer.add(batch)
            writer.flush()
            feed.records(batch)
            snap = read_snapshot(live_path(db))
            if snap is not None:
                snaps.append(snap)
        proc.join()
        elapsed = time.monotonic() - t0
        feed.run_ended(run_id, "complete")
        feed.finished()
        final = read_snapshot(live_path(db))
        m = run_metrics(store, run_id)
        stored = store.query("SELECT request_index, outcome, t_send_ns, t_first_audio_ns, audio_chunks FROM requests "
                             "WHERE run_id = ?", [run_id])

    assert final.state == "finished" and final.run.status == "complete"
    assert final.cell_key == "ref-flaky/c4/exploratory/0" and final.cells_total == 1
    assert len(stored) == len(requests) == final.run.done
    assert final.run.completed == m.completed and sum(final.run.failed.values()) == m.failed
    assert final.run.failed == m.failures_by_class
    assert m.completed > 0  # the flaky profile fails some requests, not all
    assert live_metrics()  # the registry's live surface is not empty
    for name in live_metrics():
        assert final.run.metrics[name] == pytest.approx(getattr(m, name)), name
    by_index = {r["request_index"]: r for r in stored}
    for row in final.requests:
        rec = by_index[row.index]
        assert row.outcome == rec["outcome"]
        ttfa = None if rec["t_first_audio_ns"] is None else (rec["t_first_audio_ns"] - rec["t_send_ns"]) / 1e9
        assert row.ttfa_s == pytest.approx(ttfa)
        assert row.chunks == rec["audio_chunks"]
    ends = [r.end_s for r in final.requests]
    assert ends == sorted(ends, reverse=True)  # newest first
    # throttled: at most max_hz writes a second (+ the forced run_ended/finished writes and the first)
    assert feed.writes <= elapsed * 4 + 4
    # while running, snapshots showed the run in progress with in-flight requests
    running = [s for s in snaps if s.run and s.run.status == "running"]
    assert running and any(s.in_flight() > 0 for s in running)
    # ... as the driver reported them: never more than C, each with its own clock readings
    reported = [f for s in running for f in (s.inflight or ())]
    assert reported and all(0 < len(s.inflight or ()) <= 4 for s in running if s.inflight)
    assert all(0 <= f.silent_s <= f.elapsed_s and f.reads >= 0 for f in reported)
    assert any(f.reads > 0 for f in reported)
    assert {f.utt_id for f in reported} <= {r.utt_id for r in requests}
    assert final.inflight == [] and final.in_flight() == 0
    # decoded in flight: never ahead of what the request finally delivered, and the player's
    # state is consistent (buffered audio while playing, nothing while stalled)
    final_by_index = {r.index: r for r in final.requests}
    decoded = [f for f in reported if f.chunks]
    assert decoded, "no in-flight report carried audio"
    for f in decoded:
        end = final_by_index[f.index]
        assert f.chunks <= end.chunks and f.audio_s <= end.audio_s + 1e-9
        assert f.ttfa_s == pytest.approx(end.ttfa_s) and f.buffer_s is not None and f.buffer_s >= 0
    assert all(s.run.done <= len(requests) for s in running)
    json.loads(live_path(db).read_text())  # strict JSON on disk


def test_livefeed_never_raises_into_the_campaign(tmp_path):
    """An unwritable snapshot location is remembered, not raised: the campaign goes on."""
    feed = LiveFeed(tmp_path / "missing-dir" / "c.duckdb", max_hz=50)
    feed.run_started("r", "e", 1, "measured", 1)
    feed.records([RequestRecord("r", 0, "u", False, "ok", 0, t_end_ns=1)])
    feed.run_ended("r", "complete")
    feed.finished()
    assert feed.writes == 0 and "missing-dir" in (feed.last_error or "")
