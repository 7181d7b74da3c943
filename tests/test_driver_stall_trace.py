"""The stall trace (engine_adapters/driver/stall_trace.py; docs/timing.md, "Stall trace"): what a
driver process's loop thread did in each long silence between its reads, from the kernel's
schedstat, and the sender thread's GIL spans; checked against real CPU work and real sleep, and
through a real sharded drive into driver_overhead_json."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from console.recording import record_run
from engine_adapters.driver import DriveSpec, RequestSpec
from engine_adapters.driver.overhead import SCHEDSTAT
from engine_adapters.driver.stall_trace import ReadGaps, explain_gap

pytestmark = pytest.mark.skipif(not Path(SCHEDSTAT).exists(), reason="this kernel has no schedstat")

MS = 1_000_000


def test_a_gap_spent_computing_is_on_a_cpu_and_a_gap_spent_asleep_is_not():
    gaps = ReadGaps(min_gap_ns=5 * MS)
    gaps.mark(time.perf_counter_ns())
    end = time.perf_counter() + 0.04
    while time.perf_counter() < end:  # busy for 40 ms: on a CPU, or waiting for one on a shared box
        pass
    gaps.mark(time.perf_counter_ns())
    time.sleep(0.04)  # asleep for 40 ms
    gaps.mark(time.perf_counter_ns())
    gaps.mark(time.perf_counter_ns() + 1)  # 1 ns later: below min_gap_ns, not kept
    gaps.close()
    assert len(gaps.gaps) == 2, gaps.gaps
    (a0, a1, busy_run, busy_wait), (b0, b1, idle_run, idle_wait) = gaps.gaps
    # in a VM the rest of a busy gap is the hypervisor's steal, counted as neither (4.3 ms of 40 was
    # once, on the dev box): a busy gap is mostly on a CPU, a sleeping one almost not at all
    assert a1 - a0 >= 40 * MS and busy_run + busy_wait >= 0.5 * (a1 - a0), gaps.gaps
    assert b1 - b0 >= 40 * MS and idle_run + idle_wait < 10 * MS, gaps.gaps


def test_explaining_a_gap_counts_only_what_follows_the_emit():
    gap = [100 * MS, 110 * MS, 1 * MS, 2 * MS]  # 10 ms silent: 1 ms on a CPU, 2 ms waiting for one
    spans = [[104 * MS, 105 * MS, 106 * MS],  # the sender held the GIL 104-105 (then wrote)
             [90 * MS, 101 * MS, 102 * MS]]  # before the emit: not counted
    assert explain_gap(gap, spans, since_ns=103 * MS) == {
        "gap_ms": 10.0, "on_cpu_ms": 1.0, "runqueue_ms": 2.0, "after_emit_ms": 7.0,
        "not_running_after_emit_ms": 4.0, "sender_gil_ms": 1.0}
    assert explain_gap(gap, spans, since_ns=0)["after_emit_ms"] == 10.0  # emitted before the gap began


@pytest.mark.parametrize("shards", [1, 2])
@pytest.mark.slow  # 3 s in a loaded `make check`
def test_a_traced_drive_keeps_each_processes_gaps_and_sender_spans(store, tmp_path, prompt, shards):
    from reference_server import launch_engine, stop_engine, wait_ready

    eng = wait_ready(launch_engine("vllm-omni", "fast"), "vllm-omni", "fast")
    try:
        reqs = [RequestSpec(f"spk-{i}", f"Request {i} for the stall trace.", prompt) for i in range(4)]
        spec = DriveSpec(f"trace{shards}", eng.url, "vllm-omni", 2, reqs, timeout_s=60, artifacts_dir=tmp_path / "a",
                         shards=shards, trace_stalls=True)
        run_id = record_run(store, spec, engine="ref", kind="exploratory", telemetry=False)
        plain = DriveSpec(f"plain{shards}", eng.url, "vllm-omni", 2, reqs, timeout_s=60, artifacts_dir=tmp_path / "b",
                          shards=shards)
        plain_id = record_run(store, plain, engine="ref", kind="exploratory", telemetry=False)
    finally:
        stop_engine(eng)
    overhead = json.loads(store.scalar("SELECT driver_overhead_json FROM runs WHERE run_id = ?", [run_id]))
    traces = [s["trace"] for s in overhead["shards"]] if shards > 1 else [overhead["trace"]]
    assert len(traces) == shards
    for tr in traces:
        assert tr["gaps"], tr  # a request's first byte comes after a prefill: at least one silence
        assert all(t1 - t0 >= 500_000 and run >= 0 and wait >= 0 for t0, t1, run, wait in tr["gaps"]), tr["gaps"]
        assert tr["sender"] and all(got <= packed <= done for got, packed, done in tr["sender"]), tr["sender"]
    untraced = json.loads(store.scalar("SELECT driver_overhead_json FROM runs WHERE run_id = ?", [plain_id]))
    assert "trace" not in untraced and all("trace" not in s for s in untraced.get("shards", []))


def test_trace_stalls_must_be_a_bool():
    with pytest.raises(ValueError, match="trace_stalls must be true or false, got 'yes'"):
        DriveSpec("x", "http://127.0.0.1:1", "vllm-omni", 1, [], trace_stalls="yes").validate()  # type: ignore[arg-type]
