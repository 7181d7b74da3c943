"""The driver's instruments (engine_adapters/driver/instruments.py): the registry chooses them from
the spec, and together they report exactly the driver_overhead_json keys docs/timing.md names,
on a real event loop with the real counters of this process."""

from __future__ import annotations

import asyncio
import gc
import os

from engine_adapters.driver.instruments import Instruments, instruments
from engine_adapters.driver.spec import DriveSpec

ALWAYS = {"host_steal", "gc", "cpu_s", "page_faults", "runqueue", "busy_poll_us", "busy_poll_passes"}


def spec(**kw) -> DriveSpec:
    return DriveSpec(run_id="r", url="http://127.0.0.1:1", dialect="reference", concurrency=2, requests=[], **kw)


def run(s: DriveSpec, freeze_gc: bool) -> tuple[dict, list[bool]]:
    """Start, read twice, stop and summarise the drive's instruments on a fresh loop; also whether
    the collector was on before, during and after."""
    seen: list[bool] = [gc.isenabled()]

    async def main() -> dict:
        items = Instruments(instruments(s, 2, freeze_gc=freeze_gc, driving=lambda: True))
        items.start(before_barrier=True)
        items.start(before_barrier=False)
        seen.append(gc.isenabled())
        now = asyncio.get_running_loop().time
        for hook in items.read_hooks():
            hook(int(now() * 1e9))
        await asyncio.sleep(0.02)
        items.stop()
        return items.summary()

    loop = asyncio.new_event_loop()
    try:
        got = loop.run_until_complete(main())
    finally:
        loop.close()
    seen.append(gc.isenabled())
    return got, seen


def test_the_default_drive_reports_the_always_on_figures_and_leaves_the_collector_alone():
    got, seen = run(spec(), freeze_gc=False)
    assert set(got) == ALWAYS, got
    assert got["busy_poll_us"] == 0 and got["busy_poll_passes"] == 0
    assert got["cpu_s"] >= 0 and got["page_faults"] >= 0
    assert len(got["gc"]["collections"]) == 3 and got["gc"]["total_ms"] >= 0
    assert seen == [True, True, True]


def test_the_driver_process_freezes_the_collector_for_the_drive_and_every_opt_in_adds_its_keys():
    cpus = tuple(sorted(os.sched_getaffinity(0)))
    got, seen = run(spec(busy_poll_us=5_000, trace_stalls=True, cpus=cpus), freeze_gc=True)
    assert set(got) == ALWAYS | {"heap", "trace", "cpus"}, got
    assert seen == [True, False, True]  # off from the freeze to the end of the drive, then back on
    assert got["busy_poll_us"] == 5_000 and got["busy_poll_passes"] > 0
    assert got["cpus"] == list(cpus)
    assert set(got["heap"]) == {"applied", "reserved_mb", "prefault_faults", "prefault_ms"}
    assert got["trace"]["sender"] == [] and isinstance(got["trace"]["gaps"], list)


def test_the_busy_poll_stops_spinning_when_the_drive_is_over():
    driving = [True]

    async def main() -> tuple[int, int]:
        items = Instruments(instruments(spec(busy_poll_us=60_000), 2, freeze_gc=False, driving=lambda: driving[0]))
        items.start(before_barrier=False)
        await asyncio.sleep(0.02)
        driving[0] = False
        await asyncio.sleep(0)
        at_end = items.summary()["busy_poll_passes"]
        await asyncio.sleep(0.02)  # inside the 60 ms window, but the drive is over: no more passes
        items.stop()
        return at_end, items.summary()["busy_poll_passes"]

    loop = asyncio.new_event_loop()
    try:
        at_end, later = loop.run_until_complete(main())
    finally:
        loop.close()
    assert at_end > 0 and later <= at_end + 1, (at_end, later)
