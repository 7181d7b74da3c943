"""The store's work during a run stays on the thread that does it (data/store.py,
Store.single_threaded; docs/timing.md): DuckDB's worker threads run at the priority they were
made with, normal, so the share of an insert or a checkpoint they took escaped the decoder's idle
priority and competed with the driver's processes for a core."""

from __future__ import annotations

import os
import threading

import pyarrow as pa
import pytest

from data.store import Store
from engine_adapters.driver.priority import idle_priority


def _threads_cpu() -> dict[int, int]:
    """CPU ticks (user + system) of every thread of this process, by thread id."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended meanwhile
            continue
        out[int(tid)] = int(fields[11]) + int(fields[12])
    return out


def _chunks(n: int, first: int) -> pa.Table:
    idx = pa.array(range(first, first + n), pa.int32())
    return pa.table({"run_id": ["r"] * n, "request_index": idx, "chunk_index": pa.array([0] * n, pa.int32()),
                     "t_arrival_ns": pa.array(range(n), pa.int64()), "kind": ["audio"] * n,
                     "samples": pa.array([4800] * n, pa.int32()), "payload_bytes": pa.array([13000] * n, pa.int32()),
                     "server_emit_ns": pa.array(range(n), pa.int64())})


def test_single_threaded_sets_one_thread_and_restores_the_count(tmp_path):
    with Store(tmp_path / "c.duckdb") as s:
        s.con.execute("SET threads = 3")
        with s.single_threaded():
            assert s.scalar("SELECT current_setting('threads')") == 1
        assert s.scalar("SELECT current_setting('threads')") == 3
        with pytest.raises(RuntimeError), s.single_threaded():
            raise RuntimeError("a failed run")
        assert s.scalar("SELECT current_setting('threads')") == 3


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or (os.cpu_count() or 1) < 2,
                    reason="needs Linux /proc and 2 CPUs (DuckDB makes no worker threads on one)")
def test_inserts_and_checkpoints_stay_on_the_idle_priority_thread(tmp_path):
    """What the decoder thread does while a run records: Arrow inserts in transactions, then a
    checkpoint. DuckDB's own threads take no CPU for it (a tick is 10 ms; before, one of its
    normal-priority workers took 270-280 ms of the 1.3-1.5 s on the 2-core dev box). Only the
    threads that opening the store made are counted: threads other tests left in this process
    may run meanwhile (they once summed 3 ticks here)."""
    existing = set(_threads_cpu())
    s = Store(tmp_path / "c.duckdb")
    s.con.execute(f"SET threads = {os.cpu_count()}")
    duckdb_threads = set(_threads_cpu()) - existing
    assert duckdb_threads  # DuckDB makes its workers when it opens (and at SET threads)
    worker: dict[str, int] = {}

    def store_like_the_decoder() -> None:
        worker["tid"] = threading.get_native_id()
        worker["priority"] = idle_priority()
        with s.single_threaded():
            for k in range(4):
                t = _chunks(300_000, k * 300_000)  # noqa: F841 (DuckDB reads it by name)
                with s.transaction():
                    s.con.execute("INSERT INTO chunks BY NAME SELECT * FROM t")
            s.con.execute("CHECKPOINT")

    try:
        before = _threads_cpu()
        th = threading.Thread(target=store_like_the_decoder)
        th.start()
        th.join()
        after = _threads_cpu()
        assert s.scalar("SELECT count(*) FROM chunks") == 1_200_000
    finally:
        s.close()
    others = {tid: t - before.get(tid, 0) for tid, t in after.items() if tid in duckdb_threads}
    assert sum(others.values()) <= 2, (worker, others)


class _Watch:
    """A live view (console.live.LiveFeed's interface) that notes, on the thread that stores each
    batch, the store's DuckDB thread count and that thread's scheduling policy."""

    def __init__(self, store: Store):
        self.store = store
        self.seen: list[tuple[int, int]] = []

    def run_started(self, *args) -> None:
        pass

    def records(self, batch) -> None:
        self.seen.append((self.store.scalar("SELECT current_setting('threads')"), os.sched_getscheduler(0)))

    def inflight(self, rows, now_ns) -> None:
        pass

    def run_ended(self, *args) -> None:
        pass


@pytest.mark.parametrize("store_threads,seen", [(1, 1), (None, 2)])
def test_a_recorded_run_stores_single_threaded_and_restores_the_count(store, tmp_path, prompt, store_threads, seen):
    """record_run's default; `store_threads=None` (a bench's comparison) leaves DuckDB's count."""
    from reference_server import launch_engine, stop_engine, wait_ready

    from console.recording import record_run
    from engine_adapters.driver import DriveSpec, RequestSpec

    store.con.execute("SET threads = 2")
    watch = _Watch(store)
    eng = wait_ready(launch_engine("vllm-omni", "fast"), "vllm-omni", "fast")
    try:
        reqs = [RequestSpec(f"spk-{i}", f"Stored by the decoder, request {i}.", prompt) for i in range(6)]
        spec = DriveSpec("threads", eng.url, "vllm-omni", 3, reqs, timeout_s=60, artifacts_dir=tmp_path / "a")
        run_id = record_run(store, spec, engine="ref", kind="exploratory", telemetry=False, live=watch,
                            **({} if store_threads == 1 else {"store_threads": store_threads}))
    finally:
        stop_engine(eng)
    assert store.scalar("SELECT count(*) FROM requests WHERE run_id = ? AND outcome = 'ok'", [run_id]) == 6
    assert watch.seen and {threads for threads, _ in watch.seen} == {seen}, watch.seen
    got: list[str] = []  # what idle_priority gets on this machine (SCHED_IDLE, or a nice-19 fallback)
    probe = threading.Thread(target=lambda: got.append(idle_priority()))
    probe.start()
    probe.join()
    expected = os.SCHED_IDLE if got == ["SCHED_IDLE"] else os.SCHED_OTHER
    assert {policy for _, policy in watch.seen} == {expected}, (got, watch.seen)  # stored by the decoder's thread
    assert store.scalar("SELECT current_setting('threads')") == 2
