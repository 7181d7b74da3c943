"""The drive's housekeeping on one timer (engine_adapters/driver/client_loop.py, DriveLoop.ticker;
periodic.py): the loop-lag probe still waits through a whole loop pass, socket-read callbacks
included (as it did when a sleeping task armed it), and the chores riding on the ticks (flush,
cancel watch) run every n-th tick, never inside a probe's window."""

from __future__ import annotations

import asyncio
import socket
import statistics
import time

from engine_adapters.driver.client_loop import TICK_S, DriveLoop, new_event_loop
from engine_adapters.driver.periodic import Periodic
from engine_adapters.driver.spec import DriveSpec

READ_HOLD_S = 0.004  # how long each socket-read callback keeps the loop busy


def _drive_loop() -> DriveLoop:
    return DriveLoop(DriveSpec("x", "http://127.0.0.1:1", "vllm-omni", 1, []), lambda batch: None)


def _run(seconds: float, chore_every: int, chore_hold_s: float = 0.0,
         read_hold_s: float = READ_HOLD_S, dl: DriveLoop | None = None,
         driving_s: float | None = None) -> tuple[list[int], int, int]:
    """(loop-lag samples ns, ticks' chore runs, socket reads) over `seconds` of a loop whose socket
    is always readable and whose every read callback holds the loop `read_hold_s`; with
    `driving_s`, the drive counts as ended from then on."""
    dl = dl or _drive_loop()
    start = time.monotonic()
    a, b = socket.socketpair()
    a.setblocking(False)
    b.sendall(b"x" * 4096)  # more than the run reads: readable on every pass
    reads = chores = 0

    def on_read() -> None:
        nonlocal reads
        a.recv(1)
        reads += 1
        time.sleep(read_hold_s)

    def chore() -> None:
        nonlocal chores
        chores += 1
        time.sleep(chore_hold_s)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.add_reader(a.fileno(), on_read)
        ticker = dl.ticker(((chore_every, chore),), driving=lambda: driving_s is None or
                           time.monotonic() - start < driving_s)
        await asyncio.sleep(seconds)
        ticker.cancel()
        # a probe armed by the last tick still runs on a pass with a read: stop reading only then
        # (removed first, that probe could run on a pass without one, a teardown artefact)
        await asyncio.sleep(2 * TICK_S + read_hold_s)
        loop.remove_reader(a.fileno())

    loop = new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
        a.close()
        b.close()
    return dl.loop_lag_ns, chores, reads


def test_probe_waits_through_a_pass_with_socket_reads():
    lag, chores, reads = _run(0.3, chore_every=3)
    assert reads > 10 and len(lag) >= 5
    # every probe's wait holds at least one read callback: armed from a ready callback, it runs on
    # the loop's next pass (a probe armed straight from the timer would run before the reads: ~0)
    assert min(lag) >= READ_HOLD_S * 1e9 * 0.9, lag
    assert abs(chores - len(lag) // 3) <= 1  # every 3rd tick


def test_chores_run_before_the_probe_is_armed():
    # a chore on every tick, much longer than a read callback but shorter than a tick: inside
    # the probe's window it would be in every sample
    hold = 0.007
    lag, chores, _ = _run(0.4, chore_every=1, chore_hold_s=hold, read_hold_s=0.001)
    assert chores >= 10 and len(lag) >= 10
    # inside the window every sample would hold the 7 ms chore; half of it tells the two apart with
    # room for samples that also hold time off the CPU on a loaded box (a median, not a max)
    assert statistics.median(lag) < hold / 2 * 1e9, lag


def test_periodic_runs_every_period_until_cancelled():
    calls: list[float] = []

    async def main() -> None:
        p = Periodic(TICK_S, lambda: calls.append(time.monotonic()))
        await asyncio.sleep(TICK_S * 10.5)
        p.cancel()
        n = len(calls)
        await asyncio.sleep(TICK_S * 3)
        assert len(calls) == n  # nothing after cancel

    loop = new_event_loop()
    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    # 10 periods fit in 10.5 (one spare above); a late run delays the next, so a loaded box gets
    # fewer: half is the floor
    assert 5 <= len(calls) <= 11
    assert all(b - a >= TICK_S * 0.9 for a, b in zip(calls, calls[1:]))


def test_probes_after_the_drive_ended_time_the_teardown_apart():
    """A probe that runs once the drive's requests have all ended timed the teardown (closing
    connections, the last flush): it is kept apart, not in the drive's loop lag (docs/timing.md)."""
    dl = _drive_loop()
    lag, _, _ = _run(0.4, chore_every=1000, dl=dl, driving_s=0.2)
    assert len(lag) >= 5 and len(dl.teardown_lag_ns) >= 5, (len(lag), len(dl.teardown_lag_ns))
    assert len(lag) == len(dl.loop_lag_at_ns)
    assert min(dl.teardown_lag_ns) >= READ_HOLD_S * 1e9 * 0.9  # they still measured the loop
    # only the driving part's: 0.2 s, with 50 ms for a last probe that runs late on a loaded box
    assert max(dl.loop_lag_at_ns) - min(dl.loop_lag_at_ns) < 0.25e9
