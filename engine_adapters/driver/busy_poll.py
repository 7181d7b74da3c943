"""Keep a driver process's loop polling its sockets instead of sleeping, for a while after each
read: an opt-in for hosts whose sleeping CPUs wake late (`DriveSpec.busy_poll_us`; docs/timing.md,
"Busy polling").

A driver process that sleeps in epoll can be woken late, after the engine's write has handed the
bytes to the kernel, while the other processes read on (what was measured: docs/timing.md, "Busy
polling"; docs/performance.md, "Who was late at 1,024 live streams"). A loop with
a ready callback polls epoll with a zero timeout and never sleeps, so its CPU never idles and no
wake-up is needed. `BusyPoll` keeps one such callback re-arming itself until `window_ns` has passed
since the last read (and while the drive's requests last), then lets the loop sleep; the next
read starts it again. The price is a core per driver process while it polls.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable


class BusyPoll:
    """Made on the loop's thread once the drive starts; `read(t)` at every body read."""

    __slots__ = ("_loop", "window_ns", "_driving", "_last", "_spinning", "_stopped", "passes")

    def __init__(self, loop: asyncio.AbstractEventLoop, window_us: int, driving: Callable[[], bool] = lambda: True):
        self._loop = loop
        self._driving = driving  # false once the drive's requests have all ended: its teardown is not polled
        self.window_ns = window_us * 1000
        self._last = time.perf_counter_ns()
        self._spinning = False
        self._stopped = False
        self.passes = 0  # loop passes that ran the poll callback (a measure of its cost)
        self._start()

    def _start(self) -> None:
        self._spinning = True
        self._loop.call_soon(self._spin)

    def _spin(self) -> None:
        if not self._stopped and time.perf_counter_ns() - self._last < self.window_ns and self._driving():
            self.passes += 1
            self._loop.call_soon(self._spin)
        else:
            self._spinning = False

    def read(self, t: int) -> None:
        self._last = t
        if not self._spinning and not self._stopped:
            self._start()

    def stop(self) -> None:
        self._stopped = True
