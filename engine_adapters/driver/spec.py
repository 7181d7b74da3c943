"""What a drive is asked to do: the ordered requests and the run's settings (docs/timing.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine_adapters.dialects import get_dialect
from engine_adapters.driver.shards import check_shards

SENDS_PER_PASS = 4  # docs/timing.md, "Sends per loop pass"


@dataclass(frozen=True)
class RequestSpec:
    utt_id: str
    text: str
    prompt_wav: Path | None
    prompt_text: str | None = None
    headers: tuple[tuple[str, str], ...] = ()  # per-request extra headers (e.g. fault injection in tests)


@dataclass
class DriveSpec:
    run_id: str
    url: str  # base URL, e.g. http://127.0.0.1:8091
    dialect: str
    concurrency: int
    requests: list[RequestSpec]
    warmup_requests: int = 0
    timeout_s: float = 120.0
    artifacts_dir: Path = Path("artifacts")
    sampling: dict[str, Any] = field(default_factory=dict)
    request_options: dict[str, Any] = field(default_factory=dict)
    # driver processes the drive is spread over: an integer, or "auto" (driver/shards.py)
    shards: int | str = 1
    # CPUs to pin the driver to: process k of the drive (shard k; 0 unsharded) runs on
    # cpus[k % len(cpus)], its sender thread with it. Empty: the scheduler places them
    cpus: tuple[int, ...] = ()
    # the most requests one driver process starts in one pass of its event loop (pacing.py)
    sends_per_pass: int = SENDS_PER_PASS
    # how long (µs) a driver process's loop keeps polling after a read instead of sleeping; 0: never (busy_poll.py)
    busy_poll_us: int = 0
    # a diagnostic: each driver process records its long silences and its sender's spans (stall_trace.py)
    trace_stalls: bool = False

    def validate(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.warmup_requests < 0:
            raise ValueError(f"warmup_requests must be >= 0, got {self.warmup_requests}")
        check_shards(self.shards)
        if isinstance(self.sends_per_pass, bool) or not isinstance(self.sends_per_pass, int) or self.sends_per_pass < 1:
            raise ValueError(f"sends_per_pass must be an integer >= 1, got {self.sends_per_pass!r}")
        if isinstance(self.busy_poll_us, bool) or not isinstance(self.busy_poll_us, int) or self.busy_poll_us < 0:
            raise ValueError(f"busy_poll_us must be an integer >= 0, got {self.busy_poll_us!r}")
        if not isinstance(self.trace_stalls, bool):
            raise ValueError(f"trace_stalls must be true or false, got {self.trace_stalls!r}")
        if self.cpus:  # against the machine's CPUs, not this process's affinity (a pinned shard checks too)
            if not hasattr(os, "sched_setaffinity"):
                raise ValueError("cpus: this OS cannot pin a process to a CPU")
            n = os.cpu_count() or 1
            for cpu in self.cpus:
                if isinstance(cpu, bool) or not isinstance(cpu, int) or not 0 <= cpu < n:
                    raise ValueError(f"cpus: {cpu!r} is not a CPU of this machine (0-{n - 1})")
        for name, value in (self.request_options.get("headers") or {}).items():
            try:  # HTTP/1.1 header fields are latin-1 on the wire
                f"{name}: {value}".encode("latin-1")
            except UnicodeEncodeError:
                raise ValueError(f"request header {name!r}: value {value!r} is not latin-1 text") from None
        get_dialect(self.dialect).request_config(self.request_options)
