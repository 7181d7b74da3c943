"""Busy polling (engine_adapters/driver/busy_poll.py; docs/timing.md, "Busy polling"): for its
window after each read the driver's loop polls instead of sleeping, then sleeps until the next
read. Checked by the loop thread's time on a CPU or waiting for one, on uvloop (as the driver runs) and asyncio, and
through a real drive against the reference engine."""

from __future__ import annotations

import asyncio
import time

import pytest
from reference_server import launch_engine, stop_engine, wait_ready

from engine_adapters.driver.busy_poll import BusyPoll
from engine_adapters.driver.client_loop import DriveLoop, new_event_loop
from engine_adapters.driver.overhead import SCHEDSTAT
from engine_adapters.driver.spec import DriveSpec, RequestSpec

LOOPS = {"uvloop": new_event_loop, "asyncio": asyncio.new_event_loop}


def _running_or_ready_s() -> float:
    """Seconds this thread was on a CPU or ready and waiting for one (the kernel's schedstat; its
    CPU time where there is none): a polling thread is one or the other all the time, however
    loaded the box, and a sleeping one neither."""
    try:
        with open(SCHEDSTAT) as f:
            run, wait = f.read().split()[:2]
        return (int(run) + int(wait)) / 1e9
    except (OSError, ValueError):
        return time.thread_time()


@pytest.mark.parametrize("kind", LOOPS)
def test_the_loop_polls_for_its_window_then_sleeps_until_the_next_read(kind):
    loop = LOOPS[kind]()

    async def main() -> tuple[float, float, int, int]:
        c0 = _running_or_ready_s()
        poll = BusyPoll(asyncio.get_running_loop(), window_us=60_000)
        await asyncio.sleep(0.06)  # inside the window: the loop never sleeps
        c1 = _running_or_ready_s()
        await asyncio.sleep(0.2)  # the window is over: asleep
        c2 = _running_or_ready_s()
        after_window = poll.passes
        poll.read(time.perf_counter_ns())  # a read starts it again
        await asyncio.sleep(0.03)
        restarted = poll.passes - after_window
        poll.stop()
        await asyncio.sleep(0.03)
        assert poll.passes == after_window + restarted  # stopped: no pass after it
        return c1 - c0, c2 - c1, after_window, restarted

    try:
        polling, sleeping, passes, restarted = loop.run_until_complete(main())
    finally:
        loop.close()
    # polling, the thread is on a CPU or waiting for one (a shared box) all the time: over half of it
    # here (CPU time alone fell under half in a `make check` beside other test runs: the wait is
    # the box's load, not a sleep; a VM's steal counts as neither, hence half, not all)
    assert polling > 0.03 and passes > 1000, (polling, passes)
    assert sleeping < 0.05, sleeping  # 200 ms with the window spent: nearly no CPU
    assert restarted > 100, restarted


def test_a_drive_with_busy_poll_reports_its_window_and_passes(prompt):
    eng = wait_ready(launch_engine("vllm-omni", "fast"), "vllm-omni", "fast")
    try:
        reqs = [RequestSpec(f"spk-{i}", f"Busy poll request {i}.", prompt) for i in range(2)]
        got = {}
        for window in (0, 5_000):
            spec = DriveSpec("bp", eng.url, "vllm-omni", 2, reqs, timeout_s=60, busy_poll_us=window)
            raws: list = []
            loop = new_event_loop()
            try:
                got[window] = loop.run_until_complete(DriveLoop(spec, raws.extend).main(lambda: False)).overhead
            finally:
                loop.close()
            assert [r.failure for r in raws] == [None, None]
    finally:
        stop_engine(eng)
    assert got[0]["busy_poll_us"] == 0 and got[0]["busy_poll_passes"] == 0
    assert got[5_000]["busy_poll_us"] == 5_000 and got[5_000]["busy_poll_passes"] > 100, got[5_000]


def test_busy_poll_us_must_be_an_integer_from_zero():
    for bad in (-1, True, 2.5):
        with pytest.raises(ValueError, match=f"busy_poll_us must be an integer >= 0, got {bad!r}"):
            DriveSpec("x", "http://127.0.0.1:1", "vllm-omni", 1, [], busy_poll_us=bad).validate()
