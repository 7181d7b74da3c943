"""Run an engine so that it cannot outlive the console that launched it.

    python -m engine_adapters.orphan_guard CONSOLE_PID -- ENGINE_ARGV...

An engine left behind by a console that was SIGKILLed (OOM killer, a closed terminal without
--detach, kill -9) keeps its GPU memory and its port, and the next campaign's launch fails or,
worse, measures next to it. The guard is the engine's parent and the leader of its process
group (lifecycle.EngineProcess starts it in a new session): it waits for the engine, and when
the console's pid is no longer its parent it stops the whole group, SIGTERM then SIGKILL, as
EngineProcess.stop would have.

Written by hand because the kernel's PR_SET_PDEATHSIG fires when the *thread* that forked exits,
and the console launches engines from worker threads (the TUI's, the runner's), so it would kill
healthy engines; polling the parent pid twice a second is robust and costs nothing measurable.
The guard ignores SIGTERM/SIGINT (a group signal reaches the engine anyway) and exits with the
engine's status, re-raising a fatal signal on itself so the console sees the same return code
(and stores the real cause, e.g. "killed by SIGKILL"). SIGKILL and SIGSTOP have no disposition to
reset, so they are sent as they are; a failed reset must never end the guard with a traceback
and exit code 1 instead.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

if not __package__:  # run by path (lifecycle.ORPHAN_GUARD): find the package from this file, whatever the engine's env
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from engine_adapters.process_group import stop_group  # noqa: E402 - stdlib only, like this guard

POLL_S = 0.5
GRACE_S = 10.0


def _stop_group(child: subprocess.Popen[bytes]) -> None:
    """SIGTERM the group (the guard ignores it), SIGKILL it after the grace period; the final
    SIGKILL ends the guard too: nobody waits for its status any more."""
    stop_group(0, main=child, grace_s=GRACE_S)


def _exit_like(code: int) -> int:
    if code < 0:  # killed by a signal: die the same way
        sig = -code
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        print(f"orphan_guard: the engine was killed by {name}", file=sys.stderr, flush=True)
        if sig not in (signal.SIGKILL, signal.SIGSTOP):  # these two cannot be caught, so need no reset
            try:
                signal.signal(sig, signal.SIG_DFL)
            except (OSError, ValueError):
                pass
        os.kill(os.getpid(), sig)
        return 128 + sig  # only reached if the signal did not end this process (e.g. SIGCHLD-like)
    return code


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        print("usage: python -m engine_adapters.orphan_guard CONSOLE_PID -- ENGINE_ARGV...", file=sys.stderr)
        return 2
    console, cmd = int(argv[0]), argv[2:]
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    try:  # the engine gets default signal dispositions back (restore_signals covers SIGPIPE etc. only)
        child = subprocess.Popen(cmd, preexec_fn=_default_signals)
    except OSError as exc:
        print(f"cannot start {cmd[0]!r}: {exc.strerror or exc}", file=sys.stderr, flush=True)
        return 127
    while True:
        try:
            return _exit_like(child.wait(POLL_S))
        except subprocess.TimeoutExpired:
            pass
        if os.getppid() != console:
            print(f"orphan_guard: console {console} is gone; stopping the engine (pid {child.pid})",
                  file=sys.stderr, flush=True)
            _stop_group(child)
            return _exit_like(child.wait())


def _default_signals() -> None:
    # runs in the forked child before exec; the guard is single-threaded, so this is safe here
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, signal.SIG_DFL)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
