"""The driver's instruments: what a driver process measures about itself during a drive, each a
small object with start/stop/summary, registered in one place (`instruments`), so that
`DriveLoop.main` reads as the drive (docs/timing.md, "What the driver records about itself").

Each instrument's `summary()` is its keys of runs.driver_overhead_json, under the names and with
the meanings docs/timing.md gives; `drive_overhead` merges them with the loop's own figures
(send and loop lag). Instruments made `before_barrier` start before a sharded drive's start
barrier (setting up the process, or reading a host counter outside the drive); the rest start
just after it, on the loop's thread. All stop in reverse order once the drive's teardown is over
(the pool closed, the last batch shipped), so the drive's figures include its teardown, as they
always have. An instrument that watches every body read has `read(t)` (`ReadHook`); with none
on, the read path is the bare sink (DriveLoop._traced).
"""

from __future__ import annotations

import asyncio
import gc
import os
import resource
import time
from typing import Any, Callable, Protocol, runtime_checkable

from engine_adapters.driver.busy_poll import BusyPoll
from engine_adapters.driver.heap import HeapReady, prepare_heap, reserve_for
from engine_adapters.driver.overhead import GcPauses, HostSteal, RunqueueWait
from engine_adapters.driver.spec import DriveSpec
from engine_adapters.driver.stall_trace import ReadGaps


class Instrument(Protocol):
    before_barrier: bool  # start before a sharded drive's start barrier (outside the drive)

    def start(self) -> None:
        """Begin measuring (on the loop's thread)."""

    def stop(self) -> None:
        """Take the end reading and release what `start` took (after the drive's teardown)."""

    def summary(self) -> dict[str, Any]:
        """Its keys of driver_overhead_json (after `stop`)."""


@runtime_checkable
class ReadHook(Protocol):
    def read_hook(self) -> Callable[[int], None] | None:
        """What to tell every body read's stamp (perf_counter_ns), on the hot path; None when off."""


# -- the driver process's setup (before the barrier) -------------------------------------------
class Heap:
    """heap: the driver process's heap kept and pre-touched for `slots` requests' reads before
    the clock starts (heap.py); driver process only (`freeze_gc`)."""
    before_barrier = True

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self.ready: HeapReady | None = None

    def start(self) -> None:
        self.ready = prepare_heap(reserve_for(self.slots))

    def stop(self) -> None:
        pass

    def summary(self) -> dict[str, Any]:
        return {"heap": self.ready.summary()} if self.ready else {}


class FrozenCollector:
    """No figure of its own: everything built before the drive (modules, client, bodies) is
    collected and frozen, and the automatic collector is off for the drive; GC_VALVE in
    DriveLoop.ticker bounds what a leak could pile up (docs/performance.md, "The driver pause at
    1,024 live streams"; docs/timing.md, "What is kept away from the stamps"). Driver process only."""
    before_barrier = True

    def start(self) -> None:
        gc.collect()
        gc.freeze()
        gc.disable()

    def stop(self) -> None:
        gc.enable()

    def summary(self) -> dict[str, Any]:
        return {}


class Steal:
    """host_steal: the hypervisor's steal over the drive (overhead.HostSteal); /proc/stat is read
    before the start barrier so no read of it falls inside the drive."""
    before_barrier = True

    def __init__(self) -> None:
        self.steal: HostSteal | None = None
        self.figure: dict[str, float] | None = None

    def start(self) -> None:
        self.steal = HostSteal()

    def stop(self) -> None:
        self.figure = self.steal.summary() if self.steal else None

    def summary(self) -> dict[str, Any]:
        return {"host_steal": self.figure}


# -- the drive's own process (after the barrier) -------------------------------------------------
class Collections:
    """gc: every collection during the drive, count and longest pause per generation (gc.callbacks)."""
    before_barrier = False

    def __init__(self) -> None:
        self.pauses = GcPauses()

    def start(self) -> None:
        gc.callbacks.append(self.pauses)

    def stop(self) -> None:
        gc.callbacks.remove(self.pauses)

    def summary(self) -> dict[str, Any]:
        return {"gc": self.pauses.summary()}


class CpuTime:
    """cpu_s: the driver process's CPU time over the drive."""
    before_barrier = False

    def __init__(self) -> None:
        self.t0 = 0.0
        self.cpu_s = 0.0

    def start(self) -> None:
        self.t0 = time.process_time()

    def stop(self) -> None:
        self.cpu_s = time.process_time() - self.t0

    def summary(self) -> dict[str, Any]:
        return {"cpu_s": round(self.cpu_s, 4)}


class PageFaults:
    """page_faults: the driver process's minor page faults over the drive."""
    before_barrier = False

    def __init__(self) -> None:
        self.f0 = 0
        self.faults = 0

    def start(self) -> None:
        self.f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    def stop(self) -> None:
        self.faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - self.f0

    def summary(self) -> dict[str, Any]:
        return {"page_faults": self.faults}


class Runqueue:
    """runqueue: how long the loop thread waited for a CPU over the drive (overhead.RunqueueWait,
    made on the thread it measures)."""
    before_barrier = False

    def __init__(self) -> None:
        self.wait: RunqueueWait | None = None
        self.figure: dict[str, Any] | None = None

    def start(self) -> None:
        self.wait = RunqueueWait()

    def stop(self) -> None:
        self.figure = self.wait.summary() if self.wait else None

    def summary(self) -> dict[str, Any]:
        return {"runqueue": self.figure}


class StallTrace:
    """trace: the loop thread's long silences between reads (stall_trace.ReadGaps; opt-in,
    `DriveSpec.trace_stalls`). The sender's spans are added by the parent (process.py)."""
    before_barrier = False

    def __init__(self) -> None:
        self.gaps: ReadGaps | None = None

    def start(self) -> None:
        self.gaps = ReadGaps()  # opens the loop thread's schedstat: made on that thread

    def read_hook(self) -> Callable[[int], None] | None:
        return self.gaps.mark if self.gaps is not None else None

    def stop(self) -> None:
        if self.gaps is not None:
            self.gaps.close()

    def summary(self) -> dict[str, Any]:
        return {"trace": {"gaps": self.gaps.gaps if self.gaps else [], "sender": []}}


class BusyPolling:
    """busy_poll_us / busy_poll_passes: the loop kept polling for `window_us` after each read
    (busy_poll.py; opt-in, `DriveSpec.busy_poll_us`), until `driving()` turns false. Always
    reported: 0 and 0 when off."""
    before_barrier = False

    def __init__(self, window_us: int, driving: Callable[[], bool]) -> None:
        self.window_us, self.driving = window_us, driving
        self.poll: BusyPoll | None = None

    def start(self) -> None:
        if self.window_us:
            self.poll = BusyPoll(asyncio.get_running_loop(), self.window_us, self.driving)

    def read_hook(self) -> Callable[[int], None] | None:
        return self.poll.read if self.poll is not None else None

    def stop(self) -> None:
        if self.poll is not None:
            self.poll.stop()

    def summary(self) -> dict[str, Any]:
        return {"busy_poll_us": self.window_us, "busy_poll_passes": self.poll.passes if self.poll else 0}


class Affinity:
    """cpus: the CPUs the driver process was pinned to (`DriveSpec.cpus`)."""
    before_barrier = False

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def summary(self) -> dict[str, Any]:
        return {"cpus": sorted(os.sched_getaffinity(0))}


# -- the registry -------------------------------------------------------------------------------
def instruments(spec: DriveSpec, slots: int, *, freeze_gc: bool, driving: Callable[[], bool]) -> list[Instrument]:
    """Every instrument of one drive, in start order (the one place they are chosen)."""
    out: list[Instrument] = []
    if freeze_gc:  # the driver process (child.py), not a drive run in a test's process
        out += [Heap(slots), FrozenCollector()]
    out += [Steal(), Collections(), CpuTime(), PageFaults(), Runqueue()]
    out.append(BusyPolling(spec.busy_poll_us, driving))  # told each read before the stall trace
    if spec.trace_stalls:
        out.append(StallTrace())
    if spec.cpus:
        out.append(Affinity())
    return out


class Instruments:
    """One drive's instruments, started and stopped together."""

    def __init__(self, items: list[Instrument]) -> None:
        self.items = items

    def start(self, before_barrier: bool) -> None:
        for i in self.items:
            if i.before_barrier == before_barrier:
                i.start()

    def read_hooks(self) -> tuple[Callable[[int], None], ...]:
        """The hooks of every instrument that watches body reads and is on, in registry order."""
        return tuple(h for i in self.items if isinstance(i, ReadHook) and (h := i.read_hook()) is not None)

    def stop(self) -> None:
        for i in reversed(self.items):
            i.stop()

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for i in self.items:
            out.update(i.summary())
        return out
