"""One drive sharded over several driver processes (engine_adapters/driver/shards.py) against the
real reference engine: the same requests, chunks and outcomes as one process, per-request timings
that hold together, warmups that end before any measured request starts in any shard, and a shard
that dies ending the run as failed, naming that shard (docs/performance.md)."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from plans_helpers import free_port

from console.recording import launch_engine, record_run, stop_engine
from engine_adapters.driver import DriverProcess, DriveSpec, RequestSpec
from engine_adapters.driver.shards import check_shards, resolve_shards, shard_items
from data.plan_model import EngineSpec

TEXTS = ["A short sentence for the engine.", "Another line of speech to render now.",
         "Timing every chunk as it arrives.", "The fourth request says this.", "And a fifth, a little longer, to vary."]




@pytest.fixture
def engine(store, tmp_path):
    port = free_port()
    argv = (sys.executable, "-m", "engine_adapters.reference", "--dialect", "vllm-omni", "--profile", "fast",
            "--port", str(port))
    eng = launch_engine(store, EngineSpec("ref", "reference", "vllm-omni", argv=argv, port=port, health_timeout_s=90,
                                          profile="fast"), log_dir=tmp_path / "logs")
    yield eng
    stop_engine(store, eng, grace_s=2)


@pytest.mark.parametrize("n,c,k", [(15, 6, 2), (15, 6, 4), (7, 3, 2), (3, 8, 3), (40, 5, 3), (0, 4, 2), (10, 1, 1)])
def test_shard_items_deal_the_closed_loop_slots(n, c, k):
    items = list(range(n))
    parts = [shard_items(items, c, i, k) for i in range(k)]
    assert sorted(x for mine, _ in parts for x in mine) == items  # every item once
    assert all(mine == sorted(mine) for mine, _ in parts)  # order kept within a shard
    assert sum(w for _, w in parts) == min(c, n)  # the shards together keep the phase's slots busy
    for mine, w in parts:  # items in proportion to slots: each worker's share within one item of c's
        assert w == 0 and not mine or len(mine) <= w * -(-n // max(min(c, n), 1))


@pytest.mark.parametrize("n,c,k", [(15, 6, 2), (15, 6, 4), (7, 3, 2), (3, 8, 3), (40, 5, 3), (10, 1, 1)])
def test_the_fidelity_bench_knows_which_shard_read_a_request(n, c, k):
    """bench_timing_fidelity.reader_of (which process read a late event) deals as shard_items does."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    from bench_timing_fidelity import reader_of

    shard_of = reader_of(c, n, k)
    for index in range(k):
        mine, _ = shard_items(list(range(n)), c, index, k)
        assert [i for i in range(n) if shard_of(i) == index] == mine


def test_resolve_shards_and_check():
    assert resolve_shards(1, 1024) == 1 and resolve_shards(8, 4) == 4 and resolve_shards(3, 64) == 3
    assert resolve_shards("auto", 64, cpus=16) == 1 and resolve_shards("auto", 256, cpus=16) == 1
    assert resolve_shards("auto", 1024, cpus=16) == 4 and resolve_shards("auto", 4096, cpus=16) == 15
    assert resolve_shards("auto", 1024, cpus=2) == 1 and resolve_shards("auto", 1024, cpus=1) == 1
    for bad in (0, -1, "x", True, 1.5, None):
        with pytest.raises(ValueError, match="shards must be an integer >= 1 or 'auto'"):
            check_shards(bad)
    check_shards("auto"), check_shards(2)


def _requests(prompt, n):
    return [RequestSpec(f"spk{i % 3}-{i}", TEXTS[i % len(TEXTS)], prompt) for i in range(n)]


@pytest.mark.slow  # long engine runs, sharded and not
def test_sharded_runs_store_what_one_process_stores(store, engine, tmp_path, prompt):
    reqs = _requests(prompt, 15)
    runs = {}
    for k in (1, 2, 3):
        spec = DriveSpec(f"sh{k}", engine.spec.url, "vllm-omni", 6, reqs, warmup_requests=3, timeout_s=60,
                         artifacts_dir=tmp_path / "a", sampling={"seed": 42, "temperature": 0.0}, shards=k)
        runs[k] = record_run(store, spec, engine="ref", kind="exploratory", telemetry=False)
    shape = {}
    for k, run_id in runs.items():
        run = store.query("SELECT status, driver_overhead_json FROM runs WHERE run_id = ?", [run_id])[0]
        assert run["status"] == "complete", run
        reqs_rows = store.query("SELECT * FROM requests WHERE run_id = ? ORDER BY request_index", [run_id])
        chunks = store.query("SELECT request_index, count(*) AS n, sum(samples) AS s FROM chunks WHERE run_id = ? "
                             "GROUP BY request_index ORDER BY request_index", [run_id])
        shape[k] = ([(r["request_index"], r["utt_id"], r["is_warmup"], r["outcome"], r["audio_samples"],
                      r["audio_chunks"], r["events"]) for r in reqs_rows],
                    [(c["request_index"], c["n"], c["s"]) for c in chunks])
        assert len(reqs_rows) == 18 and {r["outcome"] for r in reqs_rows} == {"ok"}
        for r in reqs_rows:  # one clock for every shard: each request's stamps in order
            assert r["t_send_ns"] <= r["t_first_byte_ns"] <= r["t_first_audio_ns"] <= r["t_last_audio_ns"] <= r["t_end_ns"], r
        arrivals = store.query("SELECT request_index, chunk_index, t_arrival_ns FROM chunks WHERE run_id = ? "
                               "ORDER BY request_index, chunk_index", [run_id])
        spans = {r["request_index"]: (r["t_send_ns"], r["t_end_ns"]) for r in reqs_rows}
        last = {}
        for a in arrivals:
            lo, hi = spans[a["request_index"]]
            assert lo <= a["t_arrival_ns"] <= hi and a["t_arrival_ns"] >= last.get(a["request_index"], 0)
            last[a["request_index"]] = a["t_arrival_ns"]
        warm_end = max(r["t_end_ns"] for r in reqs_rows if r["is_warmup"])
        assert warm_end <= min(r["t_send_ns"] for r in reqs_rows if not r["is_warmup"])  # in every shard
        measured = [spans[r["request_index"]] for r in reqs_rows if not r["is_warmup"]]
        most = max(sum(1 for s, e in measured if s <= t < e) for t, _ in measured)
        assert most <= 6, most  # never more than C in flight across the shards
        overhead = json.loads(run["driver_overhead_json"])
        assert overhead["page_faults"] >= 0  # the drive's own page faults (heap.py keeps them few)
        # the worst loop lags with their instants (every shard's, merged), worst first, inside the drive
        worst = overhead["loop_lag"]["worst"]
        assert 0 < len(worst) <= 5 and [ms for _, ms in worst] == sorted((ms for _, ms in worst), reverse=True)
        assert worst[0][1] == overhead["loop_lag"]["max_ms"] and overhead["loop_lag"]["teardown_max_ms"] >= 0
        first, last_end = min(s for s, _ in spans.values()), max(e for _, e in spans.values())
        assert all(first - 1e9 < t < last_end + 1e9 for t, _ in worst), (worst, first, last_end)
        if k == 1:
            assert "shards" not in overhead and overhead["heap"]["reserved_mb"] > 0
        else:
            assert len(overhead["shards"]) == k and sum(s["sent"] for s in overhead["shards"]) == 18
            assert overhead["start_spread_ms"] < 50 and overhead["loop_lag"]["n"] > 0 and overhead["cpu_s"] > 0
            assert all(s["heap"]["reserved_mb"] > 0 for s in overhead["shards"]), overhead["shards"]
    assert shape[2] == shape[1] and shape[3] == shape[1]


@pytest.mark.slow  # 2 s in a loaded `make check`
def test_sharded_cancel_and_live_rows(engine, tmp_path, prompt):
    """Cancelling a sharded drive cancels every shard: requests sent = records; in-flight rows
    come from both shards, each request's reads handed over once."""
    rows_seen: dict[int, int] = {}
    lock = threading.Lock()

    def on_inflight(rows, now_ns):
        with lock:
            assert len({r.index for r in rows}) == len(rows)
            for r in rows:
                rows_seen[r.index] = rows_seen.get(r.index, 0) + len(r.stamps)

    spec = DriveSpec("shx", engine.spec.url, "vllm-omni", 4, _requests(prompt, 40), timeout_s=60,
                     artifacts_dir=tmp_path / "a", shards=2)
    proc = DriverProcess(spec, on_inflight=on_inflight).start()
    records = []
    t0 = time.monotonic()
    for batch in proc.batches():
        records += batch
        if time.monotonic() - t0 > 1.5:
            proc.cancel()
    proc.join()
    done = [r for r in records if type(r).__name__ == "RequestRecord"]
    assert proc.fatal is None and proc.summary is not None and proc.summary.cancelled
    assert proc.summary.sent == len(done) < 40 and len({r.request_index for r in done}) == len(done)
    assert {r.request_index % 2 for r in done} == {0, 1}  # both shards sent
    assert {i % 2 for i in rows_seen} == {0, 1}
    assert time.monotonic() - t0 < 30  # the cancel stopped it (not the 60 s request timeout); room for load


def test_a_dead_shard_fails_the_run_naming_it(store, engine, tmp_path, prompt):
    killed = []

    def on_progress(stored, total):
        if not killed:
            victim = next(p for p in mp.active_children() if p.name.endswith("-2of2"))
            os.kill(victim.pid, signal.SIGKILL)
            killed.append(victim.pid)

    spec = DriveSpec("shdead", engine.spec.url, "vllm-omni", 4, _requests(prompt, 40), timeout_s=60,
                     artifacts_dir=tmp_path / "a", shards=2)
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(run=record_run(store, spec, engine="ref", kind="exploratory",
                                                                  telemetry=False, on_progress=on_progress)))
    t0 = time.monotonic()
    t.start()
    t.join(60)
    assert not t.is_alive(), "a dead shard left the run hanging"
    assert time.monotonic() - t0 < 30 and killed  # failed at once, not at the 60 s timeout; room for load
    run = store.query("SELECT status, driver_overhead_json FROM runs WHERE run_id = 'shdead'")[0]
    fatal = json.loads(run["driver_overhead_json"])["fatal"]
    assert run["status"] == "failed" and fatal == f"driver shard 2 of 2 (pid {killed[0]}) exited with code -9 before its summary"
    stored = store.query("SELECT request_index, outcome FROM requests WHERE run_id = 'shdead'")
    assert stored and len(stored) < 40  # what arrived is kept; the survivor stopped early
    assert {r["outcome"] for r in stored if r["request_index"] % 2 == 0} <= {"ok", "cancelled"}


def test_no_more_shards_than_a_phase_keeps_busy(prompt, tmp_path):
    """Two requests at C=8 with shards=4: two driver processes, not four (nothing is started)."""
    spec = DriveSpec("cap", "http://127.0.0.1:1", "vllm-omni", 8, _requests(prompt, 2), shards=4)
    assert DriverProcess(spec).shards == 2 and len(DriverProcess(spec).pids) == 2
    assert DriverProcess(DriveSpec("cap", "http://127.0.0.1:1", "vllm-omni", 8, _requests(prompt, 2),
                                   warmup_requests=3, shards=4)).shards == 3


def test_pinned_shards_run_on_their_cpus(store, engine, tmp_path, prompt):
    """DriveSpec.cpus pins driver process k to cpus[k % len]: each shard reports the one CPU it ran
    on, and the run stores what an unpinned run stores; a CPU the process may not use is one line."""
    import os

    usable = sorted(os.sched_getaffinity(0))
    pins = (usable[-1], usable[0])
    spec = DriveSpec("pin2", engine.spec.url, "vllm-omni", 4, _requests(prompt, 8), timeout_s=60,
                     artifacts_dir=tmp_path / "a", sampling={"seed": 42, "temperature": 0.0}, shards=2, cpus=pins)
    run_id = record_run(store, spec, engine="ref", kind="exploratory", telemetry=False)
    run = store.query("SELECT status, driver_overhead_json FROM runs WHERE run_id = ?", [run_id])[0]
    assert run["status"] == "complete", run
    shards = json.loads(run["driver_overhead_json"])["shards"]
    assert [s["cpus"] for s in shards] == [[pins[0]], [pins[1]]]
    assert store.scalar("SELECT count(*) FROM requests WHERE run_id = ? AND outcome = 'ok'", [run_id]) == 8
    with pytest.raises(ValueError, match=r"cpus: 100000 is not a CPU of this machine \(0-\d+\)"):
        DriveSpec("bad", engine.spec.url, "vllm-omni", 1, [], cpus=(100000,)).validate()
