"""A function run every `period` seconds on the event loop as a plain timer callback.

The drive's housekeeping (the loop-lag ticker, with the flusher and the cancel watch riding on
its ticks: DriveLoop.ticker) used to be three tasks looping over `asyncio.sleep`: each wake-up
was a future, a timer, a task step and a coroutine resumption, and each woke a waiting loop on
its own. One re-armed timer callback is one timer and one call per tick (docs/performance.md,
"Per-event CPU (issue 18, item 1)")."""

from __future__ import annotations

import asyncio
from typing import Callable


class Periodic:
    """`fn()` every `period` s from now (the next run is armed before `fn` runs, so a slow `fn`
    does not stretch the period) until `cancel()`. An exception in `fn` stops it and reaches
    the loop's exception handler, as an unretrieved task exception would."""

    __slots__ = ("_loop", "_period", "_fn", "_handle")

    def __init__(self, period: float, fn: Callable[[], object]):
        self._loop = asyncio.get_running_loop()
        self._period = period
        self._fn = fn
        self._handle: asyncio.TimerHandle | None = self._loop.call_later(period, self._run)

    def _run(self) -> None:
        self._handle = self._loop.call_later(self._period, self._run)
        try:
            self._fn()
        except BaseException:
            self.cancel()
            raise

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
