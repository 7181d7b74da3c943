"""engine_adapters/process_group.py: real process groups, stopped the one way the lifecycle, the
runner (resume) and the orphan guard stop an engine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from engine_adapters.process_group import group_alive, live_stat, stop_group

# a process that ignores SIGTERM, optionally after starting a child that ignores it too; it
# prints its pid (and the child's) once both are set up
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
kids = [subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"], stdout=subprocess.PIPE, text=True) for _ in range(int(sys.argv[1]))]
for k in kids:
    k.stdout.readline()
print(" ".join(str(p) for p in [__import__("os").getpid()] + [k.pid for k in kids]), flush=True)
time.sleep(600)
"""

# a leader that ends on SIGTERM (the default) but leaves a child behind that ignores it
LEAVES_STRAGGLER = """
import subprocess, sys, time
kid = subprocess.Popen([sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"], stdout=subprocess.PIPE, text=True)
kid.stdout.readline()
print(kid.pid, flush=True)
time.sleep(600)
"""


def _group(code: str, *args: str) -> tuple[subprocess.Popen[bytes], list[int]]:
    proc = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None
    pids = [int(x) for x in proc.stdout.readline().split()]
    return proc, pids


def test_group_ignoring_sigterm_is_killed_and_reaped():
    proc, pids = _group(STUBBORN, "2")
    kids = pids[1:]
    assert len(kids) == 2 and all(live_stat(k) for k in kids) and group_alive(proc.pid)
    t0 = time.monotonic()
    stop_group(proc.pid, main=proc, grace_s=0.5)
    # waited the grace period, then SIGKILL; the upper bound only says it did not hang (10x the
    # grace, room for a box whose 2 cores other test processes share: docs/testing.md)
    assert 0.5 <= time.monotonic() - t0 < 5
    assert proc.returncode == -signal.SIGKILL  # reaped: Popen has its status
    assert live_stat(proc.pid) is None and not any(live_stat(k) for k in kids)
    assert not group_alive(proc.pid)


def test_straggler_left_by_a_leader_that_ends_on_sigterm_is_killed():
    proc, (kid,) = _group(LEAVES_STRAGGLER)
    t0 = time.monotonic()
    stop_group(proc.pid, main=proc, grace_s=10.0)
    # the leader ended on SIGTERM: no waiting out the 10 s grace period (half of it is the bound,
    # room for a loaded box that still fails a wait for the grace)
    assert time.monotonic() - t0 < 5
    assert proc.returncode == -signal.SIGTERM
    assert live_stat(kid) is None and not group_alive(proc.pid)


def test_group_that_is_not_our_child_is_stopped():
    """As the runner stops an engine a dead runner left: its leader is nobody's child here."""
    launcher = subprocess.run(
        [sys.executable, "-c", "import subprocess, sys\n"
         f"p = subprocess.Popen([sys.executable, '-c', {STUBBORN!r}, '1'], stdout=subprocess.PIPE, "
         "stderr=subprocess.DEVNULL, start_new_session=True)\n"
         "print(p.stdout.readline().decode().strip(), flush=True)"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=30, check=True)
    leader, kid = (int(x) for x in launcher.stdout.split())
    try:
        st = live_stat(leader)
        assert st is not None and st[1] == leader  # alive and leads its own group; its parent exited
        stop_group(leader, grace_s=0.3, kill_wait_s=5.0)
        assert live_stat(leader) is None and live_stat(kid) is None and not group_alive(leader)
    finally:
        for pid in (leader, kid):
            if live_stat(pid):
                os.kill(pid, signal.SIGKILL)


def test_stopping_a_group_that_is_gone_is_a_no_op():
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    proc.wait(10)
    stop_group(proc.pid, main=proc, grace_s=0.1)
    assert proc.returncode == 0
