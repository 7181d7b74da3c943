"""The driver process's heap, made ready before the drive so keeping body reads costs no page faults.

Every body read the driver keeps is a new bytes object (~13 KB for a 0.2 s audio event) that lives
until its request ends. On fresh memory each one first-touches about four pages, several times
the cost of a read on memory the heap already holds (measured: docs/performance.md, "Per-event
CPU"). glibc also gives memory back to the kernel as soon as the freed top of the heap exceeds
128 KB, so every wave of requests faulted its pages in again.
`prepare_heap` (driver process only, before the clock starts) turns that trimming off, serves
large allocations from the heap instead of mmap, and touches `reserve_bytes` once so the first
wave's reads land on pages that are already mapped. Outside glibc it does nothing."""

from __future__ import annotations

import ctypes
import ctypes.util
import resource
import time
from dataclasses import dataclass
from typing import Callable

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc <malloc.h>
MMAP_THRESHOLD_MAX = 32 << 20  # glibc's ceiling for M_MMAP_THRESHOLD on 64-bit
TRIM_THRESHOLD = 2**31 - 1  # (mallopt takes an int) never give the heap's top back during the drive (the process ends after it)
RESERVE_PER_SLOT = 1 << 20  # a request's kept reads: 9.4 s of 24 kHz audio in 0.2 s SSE events is ~0.6 MB
RESERVE_MAX = 512 << 20
_BLOCK = 16 << 20  # touched in blocks below the mmap threshold, so they come from (and go back to) the heap


@dataclass(frozen=True)
class HeapReady:
    """What prepare_heap did: applied (False off glibc), bytes touched, faults and time it took."""
    applied: bool
    reserved_mb: float
    faults: int
    ms: float

    def summary(self) -> dict[str, float | bool | int]:
        return {"applied": self.applied, "reserved_mb": self.reserved_mb, "prefault_faults": self.faults,
                "prefault_ms": self.ms}


def reserve_for(slots: int) -> int:
    """Bytes to pre-touch for `slots` requests in flight."""
    return min(max(slots, 0) * RESERVE_PER_SLOT, RESERVE_MAX)


def _mallopt() -> Callable[[int, int], int] | None:
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "mallopt", None) if name else None
    except OSError:
        return None


def prepare_heap(reserve_bytes: int) -> HeapReady:
    """Keep freed memory in the heap and pre-touch `reserve_bytes` of it (glibc only)."""
    mallopt = _mallopt()
    if mallopt is None or not mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD):
        return HeapReady(False, 0.0, 0, 0.0)
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_MAX)
    f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
    blocks = [bytearray(_BLOCK) for _ in range(-(-reserve_bytes // _BLOCK))]  # zero-filled: every page touched
    del blocks  # back to the heap's free top, which is no longer trimmed
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    return HeapReady(True, round(reserve_bytes / 2**20, 1), faults, round((time.perf_counter() - t0) * 1e3, 2))
