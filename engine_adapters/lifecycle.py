"""Engine lifecycle: launch from an argv list with env and a log file, wait for /health, stop
with SIGTERM then SIGKILL, never leave children behind (the engine runs in its own process
group and the whole group is signalled; an orphan guard stops the group if the console dies
without stopping it, see orphan_guard.py, so `pid` is the guard's, the group leader's). Produces
`engine_launches` rows as plain dicts; the console layer stores them. The row holds each env
variable's name and the SHA-256 of its value, never the value (data/secrets.py).

Only the launched engine is measured (docs/engines.md, "Measuring the right engine"): a launch
on a port another process already listens on is refused, and a 200 from /health counts only
while the launched process is alive, its process tree holds the listening socket, and, when the
answer carries a launch identity (the reference engine's always does), it is this launch's.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

import httpx

from data.checkpoints import checkpoint_files, launch_mismatch
from data.errors import CampaignError, first_line, one_line
from data.hashing import cached_sha256_files, sha256_file
from data.plan_model import EngineSpec
from data.secrets import redact_env, scrub
from engine_adapters import ports
from engine_adapters.identity import LAUNCH_ID_ENV, reported_identity
from engine_adapters.deploy_config import deploy_record
from engine_adapters.launch_settings import launch_settings
from engine_adapters.process_group import stop_group
from engine_adapters.source_identity import identify
from engine_adapters.specs import launch_argv

LOG_TAIL_LINES = 40
IDENTITY_REQUIRED = ("reference",)  # adapters whose engine must report the launch id
ORPHAN_GUARD = Path(__file__).with_name("orphan_guard.py")


class EngineStartError(CampaignError):
    """The engine did not become healthy; the message is the one-line reason, `launch_id` the
    attempt's engine_launches row."""

    def __init__(self, message: str, launch_id: str | None = None):
        super().__init__(message)
        self.launch_id = launch_id


def exit_status(code: int) -> str:
    """A return code in words: 'exit code 3', 'killed by SIGKILL' (Popen: -N = signal N)."""
    if code >= 0:
        return f"exit code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def log_tail(path: Path, lines: int = LOG_TAIL_LINES, max_bytes: int = 64 * 1024) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    return "\n".join(data.decode("utf-8", errors="replace").splitlines()[-lines:])


def hash_checkpoints(paths: list[str] | tuple[str, ...], cache_path: Path | None = None) -> dict[str, str]:
    """SHA-256 of every checkpoint file (directories expand to their files, sorted). A checkpoint
    is many GB, so digests come from the one digest cache (data/hashing.py; `cache_path` replaces
    its default file)."""
    files = checkpoint_files(paths)
    return dict(zip(map(str, files), cached_sha256_files(files, cache_path)))


@contextmanager
def _preparing(what: str) -> Iterator[None]:
    """Any failure in a step of preparing a launch as one line naming the step (a CampaignError
    already names its file, so it passes unchanged)."""
    try:
        yield
    except CampaignError:
        raise
    except Exception as exc:
        raise CampaignError(f"{what}: {one_line(exc)}") from exc


def launch_checkpoints(spec: EngineSpec, cache_path: Path | None = None) -> tuple[dict[str, str], str | None]:
    """The launch's checkpoint digests, and why they are not the ones frozen with the plan (a
    changed, added or missing file: data/checkpoints.py), or None. A path that is gone raises
    (the launch cannot be prepared)."""
    got = hash_checkpoints(spec.checkpoint_paths, cache_path) if spec.checkpoint_paths else {}
    if spec.frozen_checkpoints is None:
        return got, None
    return got, launch_mismatch(spec.frozen_checkpoints, got)


@dataclass
class EngineProcess:
    """One launch attempt of one engine spec."""
    spec: EngineSpec
    log_dir: Path
    plan_hash: str | None = None
    launch_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    proc: subprocess.Popen | None = None
    row: dict[str, Any] = field(default_factory=dict)

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.spec.name}-{self.launch_id}.log"

    def start(self, checkpoint_cache: Path | None = None) -> "EngineProcess":
        """Spawn the engine and fill the launch row (status 'startup_failed' if it cannot spawn).

        The row's identity is set before anything that can fail, and any exception while
        preparing the launch (the argv, the deploy config, hashing the checkpoints, the log
        folder) makes it a startup failure with a one-line reason: a launch that cannot start is
        a recorded attempt, never an exception that leaves a row without its launch_id (a
        missing checkpoint folder once ended `campaign run` in a NOT NULL constraint error)."""
        spec = self.spec
        self.row = {
            "launch_id": self.launch_id, "plan_hash": self.plan_hash, "engine": spec.name, "adapter": spec.adapter,
            "revision": spec.revision, "profile": spec.profile, "env_json": json.dumps(redact_env(spec.env), sort_keys=True),
            "log_path": str(self.log_path), "config_path": spec.config_path, "url": spec.url,
            "started_at": datetime.now(timezone.utc), "started_ns": time.perf_counter_ns(), "status": "starting",
        }
        try:
            argv, problem = self._prepare(checkpoint_cache)
        except Exception as exc:  # noqa: BLE001 - whatever it is, the attempt is recorded, not lost
            self._failed(f"cannot prepare the launch: {first_line(exc)}")
            return self
        if problem:  # the code or the checkpoint bytes are not what the plan froze
            self._failed(problem)
            return self
        env = {**os.environ, **spec.env, LAUNCH_ID_ENV: self.launch_id}
        problem = _not_runnable(argv[0], env.get("PATH"))
        if problem:
            self._failed(f"cannot start {argv[0]!r}: {problem}")
            return self
        taken = port_in_use(spec.host, spec.port)
        if taken:
            self._failed(taken)
            return self
        try:
            log = open(self.log_path, "ab")
        except OSError as exc:
            self._failed(f"cannot open the engine log {self.log_path}: {exc.strerror or exc}")
            return self
        try:
            # the orphan guard is the engine's parent: it stops the engine if this process dies
            # without stopping it (engine_adapters/orphan_guard.py); it runs by path, stdlib only
            self.proc = subprocess.Popen(
                [sys.executable, str(ORPHAN_GUARD), str(os.getpid()), "--", *argv], env=env, stdout=log,
                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # own process group: stop() reaps it all
            )
        except OSError as exc:
            self._failed(f"cannot start {argv[0]!r}: {exc.strerror or exc}")
        except (ValueError, TypeError) as exc:  # e.g. a NUL byte in an argument
            self._failed(f"cannot start {argv[0]!r}: {first_line(exc)}")
        finally:
            log.close()
        self.row["pid"] = self.proc.pid if self.proc else None
        return self

    def _prepare(self, checkpoint_cache: Path | None) -> tuple[list[str], str | None]:
        """The argv, with what the launch row records about the engine's inputs (its code's
        identity, config and checkpoint digests, the deploy record) added to the row, and why
        the code or the checkpoint bytes are not what the plan froze (None when they are);
        raises on anything missing."""
        spec = self.spec
        with _preparing("the command line"):
            argv = launch_argv(spec)
        self.row["argv_json"] = json.dumps(argv)
        cfg_sha = None
        with _preparing(f"the deploy configuration ({spec.config_path or 'from the command line'})"):
            if spec.config_path:
                cfg = Path(spec.config_path)
                if not cfg.is_file():
                    raise CampaignError(f"engine {spec.name!r}: config_path {cfg} does not exist")
                cfg_sha = sha256_file(cfg)
            deploy = deploy_record(spec.adapter, argv, spec.config_path, spec.name)  # engine_adapters/deploy_config.py
        with _preparing("reading the engine's source identity"):
            ident = identify(spec)  # engine_adapters/source_identity.py: what code this launch runs
        self.row.update(ident.columns)
        with _preparing("hashing the checkpoints"):
            ckpt, ckpt_problem = launch_checkpoints(spec, checkpoint_cache)
        with _preparing(f"the log folder {self.log_dir}"):
            self.log_dir.mkdir(parents=True, exist_ok=True)
        with _preparing("reading the launch settings"):
            settings = launch_settings(spec, argv)  # engine_adapters/launch_settings.py
        self.row.update(config_sha256=cfg_sha, checkpoint_sha256_json=json.dumps(ckpt, sort_keys=True),
                        deploy_json=json.dumps(deploy, sort_keys=True) if deploy else None,
                        settings_json=json.dumps(settings, sort_keys=True, default=str))
        return argv, ident.problem or ckpt_problem

    def _log_tail(self) -> str:
        """The stored log tail, without the env values (an engine may print its environment)."""
        return scrub(log_tail(self.log_path), self.spec.env.values())

    def _failed(self, reason: str, exit_code: int | None = None) -> None:
        self.row.update(status="startup_failed", failure_reason=reason, log_tail=self._log_tail(),
                        exit_code=exit_code)

    def wait_healthy(self, timeout_s: float | None = None, poll_s: float = 0.05) -> None:
        """Poll GET /health until the launched engine answers 200; on failure stop the process,
        set the row and raise EngineStartError with a one-line reason."""
        if self.row.get("status") == "startup_failed":
            raise EngineStartError(f"engine {self.spec.name!r}: {self.row['failure_reason']}", self.launch_id)
        timeout_s = self.spec.health_timeout_s if timeout_s is None else timeout_s
        url = self.spec.url + self.spec.health_path
        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        proc = self._process()
        with httpx.Client(timeout=httpx.Timeout(2.0)) as client:
            while True:
                code = proc.poll()
                if code is not None:
                    self._exited_before_health(code, url)
                try:
                    r = client.get(url)
                    if r.status_code == 200:
                        problem = self._not_this_launch(url, r)
                        if problem is None:
                            self.row.update(status="ready", ready_ns=time.perf_counter_ns())
                            return
                        self._give_up(problem)
                    last = f"HTTP {r.status_code}"
                except httpx.HTTPError as exc:
                    last = type(exc).__name__
                if time.monotonic() >= deadline:
                    self._give_up(f"{url} not healthy within {timeout_s:g} s (last: {last})")
                time.sleep(poll_s)

    def _process(self) -> subprocess.Popen:
        """The launched process (launch() ran and started it)."""
        if self.proc is None:
            raise EngineStartError(f"engine {self.spec.name!r}: no process was launched", self.launch_id)
        return self.proc

    def _exited_before_health(self, code: int, url: str) -> None:
        how = f"exited with code {code}" if code >= 0 else f"was {exit_status(code)}"
        self._failed(f"process {how} before {url} answered 200", code)
        self.row["stopped_ns"] = time.perf_counter_ns()
        raise EngineStartError(f"engine {self.spec.name!r}: {self.row['failure_reason']} (log: {self.log_path})", self.launch_id)

    def _give_up(self, reason: str) -> None:
        self._failed(reason)
        self.stop()
        self.row["status"] = "startup_failed"
        raise EngineStartError(f"engine {self.spec.name!r}: {self.row['failure_reason']} (log: {self.log_path})", self.launch_id)

    def _not_this_launch(self, url: str, r: httpx.Response) -> str | None:
        """Why a 200 from `url` is not the launched engine's, or None: the process must still be
        alive, hold the listening socket, and report this launch's id when it reports one (the
        adapters in IDENTITY_REQUIRED must)."""
        proc = self._process()
        code = proc.poll()
        if code is not None:
            self._exited_before_health(code, url)
        port = self.spec.port
        foreign = ports.foreign_holders(self.spec.host, port, proc.pid)
        if foreign:
            return (f"{url} answered 200, but port {port} is held by {foreign[0]}, "
                    f"not by the launched engine (pid {proc.pid})")
        got = reported_identity(r.headers, r.content)
        if got is None and self.spec.adapter not in IDENTITY_REQUIRED:
            return None
        if got != self.launch_id:
            return (f"{url} answered 200 for launch {got or '(none reported)'}, not for this launch "
                    f"{self.launch_id}: another engine answers on port {port}")
        return None

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after `grace_s`, reap; record exit and log tail."""
        if self.proc is None:
            return
        crashed = self.proc.poll() is not None and self.row.get("status") == "ready"
        stop_group(self.proc.pid, main=self.proc, grace_s=grace_s)  # engine_adapters/process_group.py
        self.row.update(stopped_ns=time.perf_counter_ns(), exit_code=self.proc.returncode,
                        log_tail=self._log_tail())
        if self.row.get("status") == "ready":
            self.row["status"] = "crashed" if crashed else "stopped"
            if crashed:
                self.row["failure_reason"] = f"engine exited while serving: {exit_status(self.proc.returncode)}"

    def exit_cause(self, wait_s: float = 0.0) -> str | None:
        """'engine exited: killed by SIGKILL' once the launched process has ended (waiting up to
        `wait_s` for it), None while it runs. A run it served is then not a measurement of it."""
        if self.proc is None:
            return None
        try:
            code = self.proc.wait(wait_s) if wait_s > 0 else self.proc.poll()
        except subprocess.TimeoutExpired:
            return None
        return None if code is None else f"engine exited: {exit_status(code)}"

    def __enter__(self) -> "EngineProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _not_runnable(exe: str, path: str | None) -> str | None:
    """Why `exe` cannot be started, or None (checked here so the reason is the launch's, not the
    guard's exit code)."""
    if shutil.which(exe, path=path):
        return None
    if os.sep in exe:
        return "No such file or directory" if not os.path.exists(exe) else "Permission denied (not executable)"
    return "not found on PATH"


def port_in_use(host: str, port: int) -> str | None:
    """The one-line refusal when something already listens where an engine on host:port would
    bind (naming the holder when /proc shows it), else None. Public: a pre-flight check (e.g.
    before `run --detach`) can reuse it."""
    if not ports.port_taken(host, port):
        return None
    holders = ports.port_holders(host, port)
    who = f"held by {holders[0]}" if holders else "held by a process that could not be identified"
    return f"port {port} on {host} is already in use ({who}); refusing to launch an engine that would not own it"

