"""Stop a process group for good: SIGTERM it, wait for its main process, SIGKILL whatever is
left, and return once the group is gone, so the engine's GPU memory and port are free.

An engine runs as a process group led by its orphan guard (lifecycle.EngineProcess starts it
in a new session; docs/engines.md, "Stopping an engine"). Three places stop one, all through
`stop_group`: `EngineProcess.stop` (the guard is this process's child and is reaped), the
runner on resume (an engine a dead runner left behind: not a child, so its end is seen in
/proc), and the orphan guard itself (a member of the group it stops, so the final SIGKILL ends
the guard too).

Stdlib only: the orphan guard, which runs by path, imports it. Linux facts from /proc
(`/proc/<pid>/stat`: state, parent, group).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Callable

PROC = Path("/proc")
POLL_S = 0.02


def proc_pids() -> list[int]:
    """Every pid /proc lists (empty where there is no /proc)."""
    try:
        return [int(d.name) for d in PROC.iterdir() if d.name.isdigit()]
    except OSError:
        return []


def live_stat(pid: int) -> tuple[int, int] | None:
    """(ppid, pgid) of a live (non-zombie) process, else None: a zombie has ended; its parent,
    or init for an orphan, reaps it."""
    try:
        fields = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == "Z" else (int(fields[1]), int(fields[2]))


def group_alive(pgid: int) -> bool:
    """Does any live (non-zombie) process remain in process group `pgid`?"""
    return any((st := live_stat(pid)) is not None and st[1] == pgid for pid in proc_pids())


def signal_group(pgid: int, sig: int) -> bool:
    """Send `sig` to the group (0: the caller's own group); False when no member is left to
    signal (or none this user may signal)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _wait_until(done: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


def _ended(pgid: int, main: subprocess.Popen[bytes] | None, timeout_s: float) -> bool:
    """Wait up to `timeout_s` for the main process to end: a child of ours is reaped by
    waiting on it; any other is watched in /proc (`pgid` is its pid: the group leader)."""
    if main is not None:
        try:
            main.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True
    return _wait_until(lambda: live_stat(pgid) is None, timeout_s)


def stop_group(pgid: int, *, main: subprocess.Popen[bytes] | None = None, grace_s: float = 10.0,
               kill_wait_s: float = 10.0, gone_wait_s: float = 2.0) -> None:
    """Stop process group `pgid` (0: the caller's own) and everything in it.

    While the main process (`main`, a child of ours, else the group leader `pgid`) runs:
    SIGTERM the group and give it `grace_s` to end; if it does not, SIGKILL the group and wait
    up to `kill_wait_s`. Then SIGKILL the group once more for stragglers the main process forked
    and left behind, and wait up to `gone_wait_s` until no live member remains."""
    running = main.poll() is None if main is not None else live_stat(pgid) is not None
    if running and signal_group(pgid, signal.SIGTERM) and not _ended(pgid, main, grace_s):
        signal_group(pgid, signal.SIGKILL)
        _ended(pgid, main, kill_wait_s)
    if signal_group(pgid, signal.SIGKILL) and pgid > 0:
        _wait_until(lambda: not group_alive(pgid), gone_wait_s)
