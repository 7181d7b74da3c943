"""Sends per loop pass (engine_adapters/driver/pacing.py; docs/timing.md, "Sends per loop pass"):
a closed-loop opening no longer starts every slot's send in one pass of the driver's loop. The
passes are counted by a callback that re-arms itself with call_soon, so it runs exactly once per
pass of the loop under test (uvloop, as the driver runs, and the default asyncio loop)."""

from __future__ import annotations

import asyncio
import bisect
import time

import pytest
from reference_server import launch_engine, stop_engine, wait_ready

from engine_adapters.driver.client_loop import DriveLoop, new_event_loop
from engine_adapters.driver.pacing import SendPacer
from engine_adapters.driver.spec import SENDS_PER_PASS, DriveSpec, RequestSpec

LOOPS = {"uvloop": new_event_loop, "asyncio": asyncio.new_event_loop}


def _pass_counter(loop: asyncio.AbstractEventLoop, starts: list[int]) -> None:
    def tick() -> None:
        starts.append(time.perf_counter_ns())
        loop.call_soon(tick)
    loop.call_soon(tick)


def _per_pass(starts: list[int], stamps: list[int]) -> list[int]:
    """How many of `stamps` fall in each loop pass (pass i begins at starts[i])."""
    counts: dict[int, int] = {}
    for t in stamps:
        i = bisect.bisect_right(starts, t)
        counts[i] = counts.get(i, 0) + 1
    return [counts[k] for k in sorted(counts)]


@pytest.mark.parametrize("kind", LOOPS)
def test_pacer_starts_at_most_its_budget_per_pass_in_order(kind):
    loop = LOOPS[kind]()
    starts: list[int] = []
    order: list[tuple[int, int]] = []  # (task, the time its send would start)

    async def main() -> int:
        pacer = SendPacer(3)
        _pass_counter(asyncio.get_running_loop(), starts)

        async def sender(i: int) -> None:
            if (wait := pacer.turn()) is not None:
                await wait
            order.append((i, time.perf_counter_ns()))

        await asyncio.gather(*(sender(i) for i in range(11)))
        return pacer.deferred

    try:
        deferred = loop.run_until_complete(main())
    finally:
        loop.close()
    assert [i for i, _ in order] == list(range(11))  # first come, first served
    assert deferred == 8
    per_pass = _per_pass(starts, [t for _, t in order])
    assert max(per_pass) == 3 and sum(per_pass) == 11 and len(per_pass) == 4, per_pass


def test_a_cancelled_waiter_takes_no_budget_and_holds_no_one_up():
    loop = new_event_loop()
    done: list[int] = []

    async def main() -> None:
        pacer = SendPacer(1)

        async def sender(i: int) -> None:
            if (wait := pacer.turn()) is not None:
                await wait
            done.append(i)

        tasks = [asyncio.ensure_future(sender(i)) for i in range(4)]
        await asyncio.sleep(0)  # every task has asked for its turn: 0 sends, 1-3 wait
        tasks[1].cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert not pacer.waiting

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert done == [0, 2, 3]


def test_a_budget_below_one_is_refused():
    with pytest.raises(ValueError, match="sends per pass must be >= 1, got 0"):
        SendPacer(0)
    for bad in (0, -2, True, 2.5):
        with pytest.raises(ValueError, match=f"sends_per_pass must be an integer >= 1, got {bad!r}"):
            DriveSpec("x", "http://127.0.0.1:1", "vllm-omni", 1, [], sends_per_pass=bad).validate()


@pytest.fixture(scope="module")
def engine():
    eng = wait_ready(launch_engine("vllm-omni", "fast"), "vllm-omni", "fast")
    yield eng
    stop_engine(eng)


def _opening(url: str, prompt, per_pass: int, c: int = 24) -> tuple[list[int], list[int], dict]:
    """(pass start instants, the drive's send stamps, its overhead) for a closed loop of c
    requests on c slots against the engine, the whole drive in one uvloop loop."""
    reqs = [RequestSpec(f"spk-{i}", f"Opening request number {i}.", prompt) for i in range(c)]
    spec = DriveSpec("pacing", url, "vllm-omni", c, reqs, timeout_s=60, sends_per_pass=per_pass)
    raws: list = []
    dl = DriveLoop(spec, raws.extend)
    starts: list[int] = []
    loop = new_event_loop()

    async def main():
        _pass_counter(asyncio.get_running_loop(), starts)
        return await dl.main(lambda: False)

    try:
        summary = loop.run_until_complete(main())
    finally:
        loop.close()
    assert [r.failure for r in raws] == [None] * c
    return starts, [r.t_send_ns for r in raws], summary.overhead


def test_the_opening_sends_at_most_the_budget_per_loop_pass(engine, prompt):
    starts, sends, overhead = _opening(engine.url, prompt, 4)
    per_pass = _per_pass(starts, sends)
    assert max(per_pass) == 4 and len(per_pass) >= 6, per_pass
    assert overhead["sends_per_pass"] == 4 and overhead["deferred_sends"] == 20
    # the same opening unpaced: every slot's send starts in the drive's first pass
    starts, sends, overhead = _opening(engine.url, prompt, 10_000)
    assert _per_pass(starts, sends) == [24] and overhead["deferred_sends"] == 0


def test_the_default_budget_is_what_the_docs_state():
    assert SENDS_PER_PASS == 4
    assert DriveSpec("x", "http://127.0.0.1:1", "vllm-omni", 1, []).sends_per_pass == SENDS_PER_PASS
