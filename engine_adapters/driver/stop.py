"""Ending a driver process: the one place the driver stops a child (a plain multiprocessing child,
not a process group), so it can be rewired to a shared stopper."""

from __future__ import annotations

from typing import Any


def stop_process(proc: Any, grace_s: float) -> None:
    """Wait up to `grace_s` for a multiprocessing.Process to exit, then kill it (SIGKILL) and reap it."""
    proc.join(grace_s)
    if proc.is_alive():
        proc.kill()
        proc.join(5.0)
