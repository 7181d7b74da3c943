"""What a driver process's loop thread did while it read nothing: an opt-in diagnostic
(`DriveSpec.trace_stalls`; bench/bench_timing_fidelity.py --trace; docs/timing.md, "Stall trace").

A late event in a sharded drive sits in one process that read nothing while the others read.
The per-run runqueue total (overhead.RunqueueWait) cannot say what that process did in those
milliseconds; this records, for every gap of at least MIN_GAP_NS between two reads of the process,
how much of it the loop thread spent on a CPU and waiting for one (the kernel's schedstat for the
thread, read at every body read). The rest the thread was not running: asleep (in epoll with
nothing readable, or on the GIL) or, in a VM, with its virtual CPU taken away by the hypervisor,
which the guest's schedstat counts as neither (a thread that never sleeps, under busy_poll.py,
still shows such time: docs/performance.md, "Who was late"). The sender thread's message spans say
when the GIL was its: it holds it from taking a batch off its queue until the write starts
(`writev` releases it).

Reading schedstat costs one `pread` (~2-5 us) per body read, so this stays off in measured runs.
"""

from __future__ import annotations

import os
import time
from typing import Any

from engine_adapters.driver.overhead import SCHEDSTAT

MIN_GAP_NS = 500_000  # a silence this long is kept (p99 of the skew at 1,024 streams is ~0.2 ms)


class ReadGaps:
    """Made on the loop thread (thread-self is resolved at open). `mark(t)` at every body read with
    its stamp; `gaps` holds [t_from, t_to, on_cpu_ns, runqueue_ns] per long silence."""

    def __init__(self, min_gap_ns: int = MIN_GAP_NS):
        self._fd = os.open(SCHEDSTAT, os.O_RDONLY)
        self.min_gap_ns = min_gap_ns
        self.gaps: list[list[int]] = []
        self._t, self._run, self._wait = time.perf_counter_ns(), *self._stat()

    def _stat(self) -> tuple[int, int]:
        run, wait = os.pread(self._fd, 128, 0).split()[:2]
        return int(run), int(wait)

    def mark(self, t: int) -> None:
        run, wait = self._stat()
        if t - self._t >= self.min_gap_ns:
            self.gaps.append([self._t, t, run - self._run, wait - self._wait])
        self._t, self._run, self._wait = t, run, wait

    def close(self) -> None:
        os.close(self._fd)


def explain_gap(gap: list[int], sender_spans: list[list[int]], since_ns: int) -> dict[str, Any]:
    """One gap as the fidelity bench prints it, for a late event emitted at `since_ns` and read at
    the gap's end or after it (ms): the gap, the loop thread's time on a CPU and waiting for one
    over the whole gap, and over the part after the emit the least it spent not running (that
    part minus every CPU and runqueue ns of the gap: asleep, or its virtual CPU stolen) and how
    long the sender thread held the GIL."""
    t0, t1, run, wait = gap
    start = max(t0, since_ns)
    held = sum(max(0, min(t1, packed) - max(start, got)) for got, packed, _ in sender_spans)
    return {"gap_ms": round((t1 - t0) / 1e6, 3), "on_cpu_ms": round(run / 1e6, 3),
            "runqueue_ms": round(wait / 1e6, 3), "after_emit_ms": round((t1 - start) / 1e6, 3),
            "not_running_after_emit_ms": round(max(0, t1 - start - run - wait) / 1e6, 3),
            "sender_gil_ms": round(held / 1e6, 3)}
