"""Idle priority for the parent's threads that must never take a core from the driver."""

from __future__ import annotations

import os
import threading


def idle_priority() -> str:
    """Put the calling thread (only it: Linux scheduling is per thread) at idle priority.

    Decoding competes with the driver process for a core on a small box: on the 2-core dev box
    the parent decoding C=32..128 streams while the driver ran put the driver's p99 at 2-3 ms
    against 0.2-0.3 ms with decoding out of its way (bench/bench_timing_fidelity.py). A SCHED_IDLE
    thread runs only on otherwise idle CPU and is preempted at once when the driver wakes; it
    catches up as soon as a core is free (at the latest when the run ends). SCHED_BATCH at nice
    10 was measured too and left C=32..128 tails of 2-5 ms. The cost: on a host whose cores are
    all kept busy by other work, this thread waits for them. Measurement is unaffected (the
    driver's sender blocks on the full pipe, its loop does not), but results and the live view
    arrive late."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "SCHED_IDLE"
    except (AttributeError, OSError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        return "nice 19"
    except (AttributeError, OSError):
        return "normal"
