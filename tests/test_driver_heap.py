"""The driver process's heap (engine_adapters/driver/heap.py): after prepare_heap, keeping ~13 KB
body reads lands on pages already mapped, and freed memory is not handed back between waves."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from engine_adapters.driver.heap import RESERVE_MAX, RESERVE_PER_SLOT, reserve_for

ROOT = Path(__file__).resolve().parents[1]

# a fresh interpreter per case: mallopt changes the whole process's allocator
KEEP_READS = r"""
import json, resource, sys
from engine_adapters.driver.heap import prepare_heap
ready = prepare_heap(32 << 20) if sys.argv[1] == "prepared" else None
faults = []
for wave in range(2):  # two waves of requests: each keeps 1,200 reads of 13 KB, then lets them go
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    kept = [bytes(13_000) + bytes([k % 251]) for k in range(1200)]
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    del kept
print(json.dumps({"faults": faults, "ready": ready.summary() if ready else None}))
"""


def _keep_reads(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", KEEP_READS, mode], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)
    return json.loads(out.stdout)


@pytest.mark.skipif(platform.system() != "Linux" or not platform.libc_ver()[0].startswith("glibc"),
                    reason="prepare_heap acts on glibc's allocator only")
def test_prepared_heap_keeps_reads_off_fresh_pages():
    plain, prepared = _keep_reads("plain"), _keep_reads("prepared")
    pages = 1200 * 13_000 // 4096  # ~3,800 pages of reads per wave
    # unprepared, both waves fault their reads' pages in (glibc trims the freed top between them)
    assert min(plain["faults"]) > pages // 2, plain
    # prepared: the reserve was touched once, up front; the reads then fault (almost) nothing
    ready = prepared["ready"]
    assert ready["applied"] and ready["reserved_mb"] == 32.0 and ready["prefault_faults"] > 4000, ready
    assert max(prepared["faults"]) < pages // 10, prepared


def test_reserve_scales_with_slots_up_to_a_ceiling():
    assert reserve_for(0) == 0 and reserve_for(3) == 3 * RESERVE_PER_SLOT
    assert reserve_for(10_000) == RESERVE_MAX
