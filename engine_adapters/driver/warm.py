"""A driver process started ahead of its run, so the spawn and imports stay out of the run."""

from __future__ import annotations

import multiprocessing as mp

from engine_adapters.driver.child import child_main
from engine_adapters.driver.stop import stop_process


class WarmDriver:
    """A driver process started ahead of its run: spawned and imported (about a second: a fresh
    interpreter, numpy, uvloop, the dialects) while the engine starts or the previous run is
    being stored, then handed its DriveSpec when the run begins. Until then it only waits on
    its control pipe; from then on it is exactly the process DriverProcess would have spawned.
    Closing the control pipe (`discard`) makes an unused one exit."""

    def __init__(self) -> None:
        ctx = mp.get_context("spawn")
        self.recv, self.send = ctx.Pipe(duplex=False)
        self.cancel = ctx.Event()
        self._control_recv, self.control = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=child_main, args=(None, self.send, self.cancel, False, self._control_recv),
                                name="driver-warm", daemon=True)
        self.proc.start()
        self._control_recv.close()

    def discard(self) -> None:
        self.control.close()
        stop_process(self.proc, 5.0)
        self.recv.close()
        self.send.close()


_WARM: list[WarmDriver] = []


def take_warm() -> WarmDriver | None:
    """The waiting driver process, if one is alive (it is then no longer waiting)."""
    warm = next((w for w in _WARM if w.proc.is_alive()), None)
    if warm is not None:
        _WARM.remove(warm)
    return warm


def prewarm() -> None:
    """Start a driver process for the next DriverProcess of this process to use (at most one
    waits at a time); the runner calls this before each engine launch and after each run."""
    if not any(w.proc.is_alive() for w in _WARM):
        discard_warm()
        _WARM.append(WarmDriver())


def discard_warm() -> None:
    """End the driver process prewarm() left waiting, if any."""
    while _WARM:
        _WARM.pop().discard()
