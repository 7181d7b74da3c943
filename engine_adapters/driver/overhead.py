"""The driver's measurement of itself: send lag and loop lag summaries, the collector's pauses and
the loop thread's wait for a CPU during a drive (runs.driver_overhead_json; docs/timing.md,
docs/performance.md)."""

from __future__ import annotations

import os
import time
from typing import Any


def cpu_us_per_event(cpu_s: float, events: int) -> float:
    """A client's CPU per audio event (µs): the figure the fidelity and per-event benches print
    (docs/performance.md); NaN with no events."""
    return cpu_s / events * 1e6 if events else float("nan")


WORST_LAGS = 5  # loop-lag probes kept with their instants, worst first


def worst_at(values: list[int], at: list[int], n: int = WORST_LAGS) -> list[list[float]]:
    """The n largest of `values` (ns) as [instant (perf_counter_ns), ms], worst first: where in the
    run a loop lag happened, to set beside the sends and arrivals around it (bench_timing_fidelity)."""
    top = sorted(zip(values, at), reverse=True)[:n]
    return [[t, v / 1e6] for v, t in top]


def loop_lag_summary(lags: list[int], at: list[int], teardown: list[int]) -> dict[str, Any]:
    """driver_overhead_json.loop_lag, for one driver process or merged over shards (docs/timing.md):
    the drive's probes summarised, the worst with their instants, and the teardown's largest apart."""
    return {**summarise_ns(lags), "worst": worst_at(lags, at), "teardown_max_ms": max(teardown, default=0) / 1e6}


def summarise_ns(values: list[int]) -> dict[str, float | int | None]:
    """n, p50, p99 and max in ms of nanosecond durations (all None when there are none)."""
    import numpy as np

    if not values:
        return {"n": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    arr = np.asarray(values, dtype=float) / 1e6
    return {"n": int(arr.size), "p50_ms": float(np.percentile(arr, 50, method="linear")),
            "p99_ms": float(np.percentile(arr, 99, method="linear")), "max_ms": float(arr.max())}


class GcPauses:
    """gc.callbacks hook: how many collections of each generation ran during the drive and how
    long the longest one stopped the process (a collector pause delays every stamp behind it; in
    the driver process the collector is off, so these count only GC_VALVE's)."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.max_ns = [0, 0, 0]
        self.total_ns = 0
        self._t0 = 0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter_ns()
            return
        gen, dt = info["generation"], time.perf_counter_ns() - self._t0
        self.count[gen] += 1
        self.max_ns[gen] = max(self.max_ns[gen], dt)
        self.total_ns += dt

    def summary(self) -> dict[str, Any]:
        return {"collections": self.count, "max_ms": [round(x / 1e6, 3) for x in self.max_ns],
                "total_ms": round(self.total_ns / 1e6, 3)}


def cpu_steal_ms() -> list[float] | None:
    """Per CPU, the time the hypervisor kept it from running since boot (the steal column of
    /proc/stat, in ms): in a VM a thread's schedstat counts neither on-CPU nor waiting time while
    its virtual CPU is taken away (docs/timing.md, "Stall trace"). None off Linux."""
    try:
        with open("/proc/stat") as f:
            rows = [line.split() for line in f if line.startswith("cpu") and line[3:4].isdigit()]
        hz = os.sysconf("SC_CLK_TCK")
        return [int(r[8]) * 1000 / hz for r in rows]
    except (OSError, IndexError, ValueError):
        return None


class HostSteal:
    """The hypervisor's steal from construction to `summary()`, all CPUs: a drive's
    driver_overhead_json.host_steal (docs/timing.md) and the benches' steal figures. A VM's CPU
    taken away delays a stamp with the thread neither on a CPU nor waiting for one, so no figure
    of the driver's own shows it. /proc/stat counts in ticks of 10 ms (USER_HZ 100)."""

    def __init__(self) -> None:
        self._start = cpu_steal_ms()

    def summary(self) -> dict[str, float] | None:
        end = cpu_steal_ms()
        if self._start is None or end is None:
            return None
        per_cpu = [b - a for a, b in zip(self._start, end)]
        return {"ms": round(sum(per_cpu), 1), "max_cpu_ms": round(max(per_cpu, default=0.0), 1)}


def host_steal_summary(parts: list[dict[str, float] | None]) -> dict[str, float] | None:
    """host_steal over one process's drive or merged over shards: the same host over nearly the
    same window, so the largest of the shards' figures; None if any process has none."""
    if not parts or any(p is None for p in parts):
        return None
    return {"ms": max(p["ms"] for p in parts if p), "max_cpu_ms": max(p["max_cpu_ms"] for p in parts if p)}


SCHEDSTAT = "/proc/thread-self/schedstat"  # Linux: ns on a CPU, ns waiting on a runqueue, timeslices


def _schedstat() -> tuple[int, int] | None:
    try:
        with open(SCHEDSTAT) as f:
            _, wait, slices = f.read().split()[:3]
        return int(wait), int(slices)
    except (OSError, ValueError):  # not Linux, or a kernel built without schedstats
        return None


class RunqueueWait:
    """How long the calling thread (the drive's loop) was ready to run but waiting for a CPU,
    from the kernel's schedstat (docs/timing.md). A loop-lag probe sees only the passes it
    waits through, 10 ms apart; this counts every moment the process was kept off a core, the
    host's share of a late stamp. Made on the thread it measures; None where there is no
    schedstat."""

    def __init__(self) -> None:
        self._start = _schedstat()

    def summary(self) -> dict[str, Any] | None:
        """This process's wait as driver_overhead_json.runqueue (`runqueue_summary` of one)."""
        end = _schedstat()
        if self._start is None or end is None:
            return None
        return runqueue_summary([{"wait_ms": round((end[0] - self._start[0]) / 1e6, 3),
                                  "timeslices": end[1] - self._start[1]}])


def runqueue_summary(waits: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """driver_overhead_json.runqueue over the drive's processes (one, or every shard): the waits
    summed, the most one process waited, the timeslices summed; None if any process has none."""
    if not waits or any(w is None for w in waits):
        return None
    ms = [w["wait_ms"] for w in waits if w is not None]
    return {"wait_ms": round(sum(ms), 3), "max_shard_wait_ms": max(ms),
            "timeslices": sum(w["timeslices"] for w in waits if w is not None)}
