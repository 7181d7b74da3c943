"""Engine lifecycle: launch from an argv list with env and a log file, wait for /health, stop
with SIGTERM then SIGKILL, never leave children behind (the engine runs in its own process
group and the whole group is signalled; an orphan guard stops the group if the console dies
without stopping it, see orphan_guard.py, so `pid` is the guard's, the group leader's). Produces
`engine_launches` rows as plain dicts; the console layer stores them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import httpx

from data.errors import CampaignError
from engine_adapters.deploy_config import deploy_record
from engine_adapters.specs import EngineSpec

LOG_TAIL_LINES = 40
ORPHAN_GUARD = Path(__file__).with_name("orphan_guard.py")
HASH_CACHE = Path(os.environ.get("OMNI_CAMPAIGN_CACHE", Path.home() / ".cache" / "omni-campaign")) / "sha256-cache.json"


class EngineStartError(CampaignError):
    """The engine did not become healthy; the message is the one-line reason."""


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


def sha256_file(path: Path, block: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()


def hash_checkpoints(paths: list[str] | tuple[str, ...], cache_path: Path | None = None) -> dict[str, str]:
    """SHA-256 of every checkpoint file (directories expand to their files, sorted). A checkpoint
    is many GB, so hashes are cached by (absolute path, size, mtime_ns) in a small JSON file."""
    cache_path = cache_path or HASH_CACHE
    try:
        cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    except (OSError, ValueError):
        cache = {}
    files: list[Path] = []
    for p in paths:
        path = Path(p).expanduser().resolve()
        if path.is_dir():
            files += sorted(f for f in path.rglob("*") if f.is_file())
        elif path.is_file():
            files.append(path)
        else:
            raise CampaignError(f"checkpoint path {p}: no such file or directory")
    out: dict[str, str] = {}
    dirty = False
    for f in files:
        st = f.stat()
        key = f"{f}|{st.st_size}|{st.st_mtime_ns}"
        if key not in cache:
            cache[key] = sha256_file(f)
            dirty = True
        out[str(f)] = cache[key]
    if dirty:
        try:
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(cache, sort_keys=True))
            os.replace(tmp, cache_path)
        except OSError:
            return out  # an unwritable cache only costs re-hashing next time
    return out


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
        """Spawn the engine and fill the launch row (status 'startup_failed' if it cannot spawn)."""
        spec = self.spec
        argv = spec.launch_argv()
        cfg_sha = None
        if spec.config_path:
            cfg = Path(spec.config_path)
            if not cfg.is_file():
                raise CampaignError(f"engine {spec.name!r}: config_path {cfg} does not exist")
            cfg_sha = sha256_file(cfg)
        deploy = deploy_record(spec.adapter, argv, spec.config_path, spec.name)  # engine_adapters/deploy_config.py
        ckpt = hash_checkpoints(spec.checkpoint_paths, checkpoint_cache) if spec.checkpoint_paths else {}
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.row = {
            "launch_id": self.launch_id, "plan_hash": self.plan_hash, "engine": spec.name, "adapter": spec.adapter,
            "revision": spec.revision, "profile": spec.profile, "argv_json": json.dumps(argv),
            "env_json": json.dumps(spec.env, sort_keys=True), "log_path": str(self.log_path),
            "config_path": spec.config_path, "config_sha256": cfg_sha,
            "checkpoint_sha256_json": json.dumps(ckpt, sort_keys=True), "url": spec.url,
            "deploy_json": json.dumps(deploy, sort_keys=True) if deploy else None,
            "started_at": datetime.now(timezone.utc), "started_ns": time.perf_counter_ns(), "status": "starting",
        }
        env = {**os.environ, **spec.env}
        problem = _not_runnable(argv[0], env.get("PATH"))
        if problem:
            self._failed(f"cannot start {argv[0]!r}: {problem}")
            return self
        log = open(self.log_path, "ab")
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
        finally:
            log.close()
        self.row["pid"] = self.proc.pid if self.proc else None
        return self

    def _failed(self, reason: str, exit_code: int | None = None) -> None:
        self.row.update(status="startup_failed", failure_reason=reason, log_tail=log_tail(self.log_path),
                        exit_code=exit_code)

    def wait_healthy(self, timeout_s: float | None = None, poll_s: float = 0.25) -> None:
        """Poll GET /health until 200; on failure stop the process, set the row and raise
        EngineStartError with a one-line reason."""
        if self.row.get("status") == "startup_failed":
            raise EngineStartError(f"engine {self.spec.name!r}: {self.row['failure_reason']}")
        timeout_s = self.spec.health_timeout_s if timeout_s is None else timeout_s
        url = self.spec.url + self.spec.health_path
        deadline = time.monotonic() + timeout_s
        last = "no answer yet"
        with httpx.Client(timeout=httpx.Timeout(2.0)) as client:
            while True:
                code = self.proc.poll()
                if code is not None:
                    self._failed(f"process exited with code {code} before {url} answered 200", code)
                    self.row["stopped_ns"] = time.perf_counter_ns()
                    raise EngineStartError(f"engine {self.spec.name!r}: {self.row['failure_reason']} (log: {self.log_path})")
                try:
                    r = client.get(url)
                    if r.status_code == 200:
                        self.row.update(status="ready", ready_ns=time.perf_counter_ns())
                        return
                    last = f"HTTP {r.status_code}"
                except httpx.HTTPError as exc:
                    last = type(exc).__name__
                if time.monotonic() >= deadline:
                    self._failed(f"{url} not healthy within {timeout_s:g} s (last: {last})")
                    self.stop()
                    self.row["status"] = "startup_failed"
                    raise EngineStartError(f"engine {self.spec.name!r}: {self.row['failure_reason']} (log: {self.log_path})")
                time.sleep(poll_s)

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the process group, SIGKILL it after `grace_s`, reap; record exit and log tail."""
        if self.proc is None:
            return
        crashed = self.proc.poll() is not None and self.row.get("status") == "ready"
        if self.proc.poll() is None:
            _signal_group(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        _signal_group(self.proc.pid, signal.SIGKILL)  # stragglers the engine forked and left behind
        self.row.update(stopped_ns=time.perf_counter_ns(), exit_code=self.proc.returncode,
                        log_tail=log_tail(self.log_path))
        if self.row.get("status") == "ready":
            self.row["status"] = "crashed" if crashed else "stopped"
            if crashed:
                self.row["failure_reason"] = f"exited with code {self.proc.returncode} while serving"

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


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return
