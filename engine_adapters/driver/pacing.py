"""At most a few request sends per pass of the driver's event loop (docs/timing.md, "Sends per
loop pass").

A closed-loop opening starts every slot at once: without a bound, one pass of a shard's loop
would run all its workers' first steps (a connect each), and a later pass all their writes (a
~96 KB body each), several milliseconds in which no read is stamped and no probe runs. With the
bound, those sends are spread over consecutive passes in the order they asked, and the reads that
arrive meanwhile are stamped between them. A send stamps itself when it leaves (after its turn),
so the wait is not part of any request's latency; it is part of the closed loop's `send_lag`.
No library offers a per-pass budget (asyncio.Semaphore bounds sends in flight, not sends per
pass), so this is a few lines by hand.
"""

from __future__ import annotations

import asyncio
from collections import deque


class SendPacer:
    """`pacer.turn()` before a send: None to send now, while this pass has budget left and nobody
    waits; otherwise a future to await, done in a later pass, first come first served.

    The budget is reset by a callback queued in the pass before, which runs in its turn among
    that pass's ready callbacks: a send that asks earlier in the same pass is counted against the
    previous pass's budget, so one pass can start up to twice `per_pass` sends, never more."""

    def __init__(self, per_pass: int):
        if per_pass < 1:
            raise ValueError(f"sends per pass must be >= 1, got {per_pass}")
        self.per_pass = per_pass
        self.used = 0  # sends started (or released) in the current pass
        self.waiting: deque[asyncio.Future[None]] = deque()
        self.deferred = 0  # sends that had to wait for a later pass (docs/timing.md)
        self._armed = False

    def turn(self) -> asyncio.Future[None] | None:
        """None: send now. A future: send once it is done (await it)."""
        if self.used < self.per_pass and not self.waiting:
            self.used += 1
            self._arm()
            return None
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting.append(fut)
        self.deferred += 1
        self._arm()
        return fut

    def _arm(self) -> None:
        if not self._armed:  # one callback per pass that had a send: it runs in the next pass
            self._armed = True
            asyncio.get_running_loop().call_soon(self._next_pass)

    def _next_pass(self) -> None:
        self._armed = False
        self.used = 0
        while self.waiting and self.used < self.per_pass:
            fut = self.waiting.popleft()
            if not fut.done():  # a waiter cancelled meanwhile (timeout, cancelled run) takes no budget
                fut.set_result(None)
                self.used += 1
        if self.used:
            self._arm()
