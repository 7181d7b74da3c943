"""The driver's wait for a CPU (engine_adapters/driver/overhead.py, RunqueueWait; docs/timing.md):
`driver_overhead_json.runqueue` counts how long the drive's loop thread was ready to run but off
a core, from the kernel's schedstat. Checked against a real contention: the driver pinned to one
CPU that two busy processes share with it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from console.recording import record_run
from engine_adapters.driver import DriveSpec, RequestSpec
from engine_adapters.driver.overhead import SCHEDSTAT, RunqueueWait
from engine_adapters.driver.shards import merge_summaries
from engine_adapters.driver.results import DriveSummary

pytestmark = pytest.mark.skipif(not Path(SCHEDSTAT).exists(), reason="this kernel has no schedstat")

BURN = "import os, sys, time; os.sched_setaffinity(0, {int(sys.argv[1])}); end = time.time() + 20\nwhile time.time() < end: pass"


def test_a_thread_kept_off_its_cpu_is_counted():
    """Two busy processes on this thread's only CPU: the thread waits for it most of the time."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    burners = [subprocess.Popen([sys.executable, "-c", BURN, str(cpu)]) for _ in range(2)]
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {cpu})
        import time

        time.sleep(0.3)  # the burners are running on the CPU
        wait = RunqueueWait()
        end = time.perf_counter() + 0.6
        while time.perf_counter() < end:  # ready all the time: every moment off the CPU is a wait
            pass
        got = wait.summary()
    finally:
        os.sched_setaffinity(0, before)
        for b in burners:
            b.kill()
            b.wait()
    assert got is not None and got["timeslices"] > 0
    assert got["wait_ms"] > 200, got  # about 2/3 of 600 ms with three sharing a CPU fairly


@pytest.mark.slow  # 2 s in a loaded `make check`
def test_a_drive_reports_its_wait_and_shards_merge_it(store, tmp_path, prompt):
    from reference_server import launch_engine, stop_engine, wait_ready

    eng = wait_ready(launch_engine("vllm-omni", "fast"), "vllm-omni", "fast")
    try:
        reqs = [RequestSpec(f"spk-{i}", f"Request {i} for the runqueue.", prompt) for i in range(4)]
        spec = DriveSpec("rq", eng.url, "vllm-omni", 2, reqs, timeout_s=60, artifacts_dir=tmp_path / "a", shards=2)
        run_id = record_run(store, spec, engine="ref", kind="exploratory", telemetry=False)
    finally:
        stop_engine(eng)
    overhead = json.loads(store.scalar("SELECT driver_overhead_json FROM runs WHERE run_id = ?", [run_id]))
    per_shard = [s["runqueue"] for s in overhead["shards"]]
    assert all(r["wait_ms"] >= 0 and r["timeslices"] > 0 for r in per_shard), per_shard
    assert overhead["runqueue"]["wait_ms"] == pytest.approx(sum(r["wait_ms"] for r in per_shard), abs=1e-3)
    assert overhead["runqueue"]["max_shard_wait_ms"] == max(r["wait_ms"] for r in per_shard)
    # the host's steal over the drive: one host, nearly one window, so the largest shard's figure
    steals = [s["host_steal"] for s in overhead["shards"]]
    if all(steals):  # /proc/stat: Linux
        assert all(0 <= st["max_cpu_ms"] <= st["ms"] for st in steals), steals
        assert overhead["host_steal"] == {"ms": max(st["ms"] for st in steals),
                                          "max_cpu_ms": max(st["max_cpu_ms"] for st in steals)}


def test_host_steal_counts_the_hypervisors_steal_per_cpu():
    from engine_adapters.driver.overhead import HostSteal, cpu_steal_ms, host_steal_summary

    per_cpu = cpu_steal_ms()
    assert per_cpu is not None and len(per_cpu) == os.cpu_count() and min(per_cpu) >= 0, per_cpu
    got = HostSteal().summary()
    assert got is not None and 0 <= got["max_cpu_ms"] <= got["ms"], got
    assert host_steal_summary([got, None]) is None and host_steal_summary([]) is None


def test_a_shard_without_schedstat_leaves_the_merged_figure_out():
    def part(rq):
        return DriveSummary(loop_impl="x", client_impl="y", anchor_wall_ns=0, anchor_perf_ns=0, sent=1, cancelled=False,
                            overhead={"runqueue": rq})
    assert merge_summaries([part({"wait_ms": 1.0, "timeslices": 3}), part(None)], cancelled=False).overhead["runqueue"] is None
