"""A deterministic run store for the TUI tests and snapshots (helper "tui").

Real plan freeze, real audit chain, real exclusion and verdict insertion through the project's
own functions; the measurement rows are fixed numbers so the rendered screens are stable.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Iterator

import pytest
from plans_helpers import make_workload, plan_dict

from data.audit import append_event
from data.plan_freeze import freeze
from data.queries import exclude_run
from data.store import Store
from data.verdicts import VerdictRow, insert_verdict

RATE = 24_000
CHUNK_SAMPLES = 12_000  # 0.5 s of audio per chunk
BASE_NS = 1_000_000_000_000


def _run(store: Store, plan_hash: str, run_id: str, engine: str, c: int, kind: str, rep: int, minute: int,
         *, gaps_s: tuple[float, ...] = (0.3, 0.3), fail: str | None = None, gpu: bool = False) -> None:
    """One run of 4 requests x 3 audio chunks; `gaps_s` are the arrival gaps after the first chunk
    (a gap above 0.5 s is a playback stall); `fail` makes request 3 fail with that class."""
    started = datetime(2025, 11, 30, 10, minute, 0, tzinfo=timezone.utc)
    params = {"throughput_scale": 25, "stall_threshold_s": 0.1, "preroll_s": 0.0}
    store.insert("runs", {
        "run_id": run_id, "plan_hash": plan_hash, "cell_key": f"{engine}/c{c}/{kind}/{rep}", "engine": engine,
        "dialect": "vllm-omni", "url": "http://127.0.0.1:8101", "concurrency": c, "repeat_index": rep, "kind": kind,
        "status": "complete", "pool": "tuning", "requests_planned": 4, "started_at": started, "ended_at": started,
        "anchor_wall_ns": 0, "anchor_perf_ns": BASE_NS, "params_json": json.dumps(params),
        "telemetry_status": "ok" if gpu else "unavailable: no NVML", "metrics_version": "1",
    })
    append_event(store, "run_started", plan_hash=plan_hash, subject=run_id, payload={"engine": engine, "concurrency": c})
    for i in range(4):
        t_send = BASE_NS + (i // c) * 2_000_000_000 + i * 1_000_000
        ttfa = int((0.12 + 0.01 * i + (0.05 if engine.endswith("baseline") else 0.0)) * 1e9)
        arrivals = [t_send + ttfa]
        for g in gaps_s:
            arrivals.append(arrivals[-1] + int(g * 1e9))
        failed = fail is not None and i == 3
        chunks = arrivals[:1] if failed else arrivals
        store.insert("requests", {
            "run_id": run_id, "request_index": i, "utt_id": f"spk{i % 3}-{i:04d}", "is_warmup": False,
            "outcome": fail if failed else "ok", "error_detail": "stream ended without [DONE]" if failed else None,
            "http_status": 200, "t_send_ns": t_send, "t_first_byte_ns": t_send + ttfa - 20_000_000,
            "t_first_audio_ns": chunks[0], "t_last_audio_ns": chunks[-1], "t_end_ns": chunks[-1] + 1_000_000,
            "audio_samples": CHUNK_SAMPLES * len(chunks), "sample_rate": RATE, "audio_chunks": len(chunks),
            "events": len(chunks) + 1, "bytes_received": 24_000 * len(chunks),
        })
        for k, t in enumerate(chunks):
            store.insert("chunks", {"run_id": run_id, "request_index": i, "chunk_index": k, "t_arrival_ns": t,
                                    "kind": "audio", "samples": CHUNK_SAMPLES, "payload_bytes": 24_000})
    if gpu:
        for k in range(40):
            store.insert("gpu_samples", {
                "run_id": run_id, "gpu_index": 0, "t_ns": BASE_NS + k * 100_000_000,
                "util_gpu_pct": min(100.0, k * 10.0), "power_w": 85.0 + min(605.0, k * 50.0),
                "sm_clock_mhz": 1980.0 - min(480.0, k * 40.0)})
    append_event(store, "run_ended", plan_hash=plan_hash, subject=run_id, payload={"status": "complete"})


FIXTURE_START = datetime(2025, 11, 30, 9, 58, 0, tzinfo=timezone.utc)


@contextmanager
def fixture_clock(start: datetime = FIXTURE_START) -> Iterator[None]:
    """Fixed times for the store's own clock reads, so the times the Plan and Audit screens show
    are the same in every test run (their SVG snapshots pin them): each audit event is one
    second after the one before it, from `start`; other stamps (plan freeze, exclusions) read
    the time of the last event. The audit chain hashes these times like any others."""
    import data.audit
    import data.plan_freeze
    import data.store

    now = [start]

    def event_time() -> datetime:  # called once per audit event (data.audit.append_event)
        now[0] += timedelta(seconds=1)
        return now[0]

    class Clock(datetime):
        @classmethod
        def now(cls, tz=None):  # type: ignore[override]
            return event_time() if tz is not None else event_time().replace(tzinfo=None)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(data.audit, "datetime", Clock)
        mp.setattr(data.plan_freeze, "utcnow", lambda: now[0])
        mp.setattr(data.store, "utcnow", lambda: now[0])  # exclusions (data.queries imports it when called)
        yield


def populate(root: Path) -> Path:
    """Build `root/campaign.duckdb`; call with the working directory at `root` (the plan names
    its workload by a relative path so the plan hash is the same in every test run)."""
    make_workload(root / "wl")
    doc = plan_dict(Path("wl"), concurrencies=(1, 2), requests=4, repeats=2, ports=[8101, 8102])
    plan_path = root / "plan.json"
    plan_path.write_text(json.dumps(doc, indent=2))
    db = root / "campaign.duckdb"
    with Store(db) as store, fixture_clock():
        plan_hash = freeze(store, "plan.json").hash
        minute = 0
        for c in (1, 2):
            for rep in range(2):
                for engine in ("ref-baseline", "ref-fast"):
                    gaps = (0.3, 0.9) if engine == "ref-fast" and c == 2 else (0.3, 0.3)
                    fail = "no_end_marker" if engine == "ref-fast" and c == 2 and rep == 1 else None
                    _run(store, plan_hash, f"run-{engine[4:]}-c{c}-m{rep}", engine, c, "measured", rep, minute,
                         gaps_s=gaps, fail=fail, gpu=(engine == "ref-baseline" and c == 1 and rep == 0))
                    minute += 1
        _run(store, plan_hash, "run-baseline-c2-x9", "ref-baseline", 2, "measured", 9, minute)
        exclude_run(store, "run-baseline-c2-x9", "GPU shared with another job")
        _run(store, plan_hash, "run-fast-c1-e0", "ref-fast", 1, "exploratory", 0, minute + 1)
        checks = [{"concurrency": 1, "metric": "wer", "label": "WER", "status": "PASS", "margin": 0.2, "n_ids": 8,
                   "n_expected": 8, "point": 0.01, "bound": 0.12, "base_value": 3.1, "cand_value": 3.11, "reason": ""},
                  {"concurrency": 1, "metric": "mos", "label": "UTMOS", "status": "INCONCLUSIVE", "margin": 0.05,
                   "n_ids": 0, "n_expected": 8, "point": None, "bound": None, "base_value": None, "cand_value": None,
                   "reason": "scorer unavailable: utmos22"}]
        insert_verdict(store, VerdictRow(
            kind="quality", verdict="INCONCLUSIVE", name="quality-gates", plan_hash=plan_hash, method="percentile",
            draws=1000, seed=20261022, metrics_version="1", checks=checks, verdict_id="quality-20251130T110000Z-fixture",
            created_at=datetime(2025, 11, 30, 11, 0, 0, tzinfo=timezone.utc)))
    return db
