"""Running one plan validator: its argv as a subprocess (never a shell), in its cwd, with its env,
killed with its whole process group at its timeout (docs/plans.md, "Validators").

A non-zero exit is `failed`, the timeout `timed_out`, and an argv[0] that cannot be executed (or a
cwd that is not a folder) `not_started`: each is a failed validation with a one-line reason.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from data.plan_model import Validator
from data.store import utcnow
from data.validators import FAILED, NOT_STARTED, PASSED, TIMED_OUT, Outcome


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


def run_validator(v: Validator, env: dict[str, str]) -> Outcome:
    """Run `v` once with the console's environment plus `env` (its resolved plan env)."""
    cwd = Path(v.cwd or ".").expanduser().resolve()
    started, t0 = utcnow(), time.perf_counter_ns()

    def not_started(why: str) -> Outcome:
        return Outcome(NOT_STARTED, None, why, time.perf_counter_ns() - t0, b"", b"", started, utcnow(), str(cwd))

    if not cwd.is_dir():
        return not_started(f"cwd {cwd}: not a folder")
    try:
        proc = subprocess.Popen(list(v.argv), cwd=cwd, env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    except FileNotFoundError:
        return not_started(f"{v.argv[0]}: no such executable (searched PATH)" if os.sep not in v.argv[0]
                           else f"{v.argv[0]}: no such file")
    except PermissionError:
        return not_started(f"{v.argv[0]}: not executable (permission denied)")
    except OSError as exc:
        return not_started(f"{v.argv[0]}: cannot be executed ({exc.strerror or exc})")
    try:
        out, err = proc.communicate(timeout=v.timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the group is the validator and its children
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        return Outcome(TIMED_OUT, proc.returncode, f"still running after timeout_s {v.timeout_s:g} s; killed",
                       time.perf_counter_ns() - t0, out, err, started, utcnow(), str(cwd))
    code = proc.returncode
    return Outcome(PASSED if code == 0 else FAILED, code, "" if code == 0 else _exit_reason(code),
                   time.perf_counter_ns() - t0, out, err, started, utcnow(), str(cwd))
