"""Live view of a running campaign, shared through a snapshot file next to the run store.

DuckDB allows one writing process per file and a running campaign's process owns the store, so
the TUI cannot read it while a campaign runs. Instead the owner of the store (console/recording
and console/runner) feeds a `LiveFeed` with the records it is already writing; the feed keeps a
small `LiveSnapshot` (current plan/cell/run, counters, per-request rows, the last GPU samples,
run metrics so far) and writes it as `<db path>.live.json` atomically (tmp file + os.replace) at
most `max_hz` times a second, from its own thread. The TUI polls that file (docs/timing.md: the UI
renders from snapshots at a few Hz; nothing the UI does can slow the driver, which runs in its
own process anyway).

A feed never raises into the campaign: a snapshot that cannot be written is a UI problem, not a
measurement problem, so write errors are remembered in `last_error` and the campaign goes on.
Every figure comes from stats.metrics (request_metrics / metrics_from_records) on the completed
records, so the live numbers equal what the store will report afterwards.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable

from data.metric_params import DEFAULT_METRIC_PARAMS, MetricParams
from data.records import ChunkRecord, GpuSample, RequestRecord
from engine_adapters.dialects import get_dialect
from engine_adapters.driver import idle_priority
from stats.metrics import metrics_from_records, request_metrics
from stats.metrics.registry import LIVE, names_on

SNAPSHOT_SCHEMA = "omni-campaign-live/1"
LIVE_SUFFIX = ".live.json"
NS = 1e9


def live_metrics() -> tuple[str, ...]:
    """Run metrics shown live: the registry's `live` surface (stats/metrics/registry.py)."""
    return names_on(LIVE)


def live_path(db_path: str | os.PathLike) -> Path:
    """The snapshot file of a run store: `<db path>.live.json`."""
    return Path(str(db_path) + LIVE_SUFFIX)


@dataclass
class LiveRequest:
    """One completed request as the stream table shows it."""
    index: int
    utt_id: str
    warmup: bool
    outcome: str  # ok or the failure class
    ttfa_s: float | None
    rtf: float | None
    chunks: int
    audio_s: float
    stalls: int
    stall_total_s: float
    end_s: float  # completion, seconds since the run's first send (orders the stream)
    detail: str | None = None


@dataclass
class LiveInflight:
    """One request still streaming, as of the driver's last in-flight report."""
    index: int
    utt_id: str
    warmup: bool
    elapsed_s: float  # since its send
    silent_s: float  # since its last body read (since its send before the first)
    reads: int  # body reads so far
    # decoded so far (when the feed knows the run's dialect); playback as of the report
    ttfa_s: float | None = None
    audio_s: float = 0.0
    chunks: int = 0
    stalls: int = 0  # an open stall (the player has run dry) included
    stall_total_s: float = 0.0
    buffer_s: float | None = None  # audio ahead of the player; 0 while stalled


class _LiveStream:
    """Incremental decode of one in-flight request's body, for the live view only (the stored
    records come from the full decode when the request ends)."""

    def __init__(self, parser: Any):
        self.parser = parser
        self.audio: list[tuple[int, int]] = []  # (t_arrival_ns, samples) of audio-bearing events

    def feed(self, stamps: list[int], chunks: list[bytes]) -> None:
        self.audio += [(e.t_arrival_ns, e.samples) for e in self.parser.feed_reads(stamps, chunks) if e.samples > 0]


@dataclass
class LiveRun:
    run_id: str
    engine: str
    concurrency: int
    kind: str
    planned: int
    status: str = "running"
    started_wall: float = 0.0  # time.time() at run start
    completed: int = 0  # ok requests (warmups included; they are requests too)
    failed: dict[str, int] = field(default_factory=dict)  # failure class -> count
    metrics: dict[str, float | int | None] = field(default_factory=dict)  # live_metrics(), measured requests

    @property
    def done(self) -> int:
        return self.completed + sum(self.failed.values())

    @property
    def in_flight_estimate(self) -> int:
        """Closed loop: C requests are out while at least C remain (before the driver's first
        in-flight report, or when a run is fed without one)."""
        if self.status != "running":
            return 0
        return max(0, min(self.concurrency, self.planned - self.done))


@dataclass
class LiveGpu:
    t_s: float  # seconds since the feed started
    gpu_index: int
    util_gpu_pct: float | None
    power_w: float | None
    sm_clock_mhz: float | None


@dataclass
class LiveSnapshot:
    schema: str = SNAPSHOT_SCHEMA
    state: str = "running"  # running or finished
    pid: int = 0  # process that writes the snapshot (the store's owner)
    updated_wall: float = 0.0
    seq: int = 0  # increments on every write
    plan_name: str | None = None
    plan_hash: str | None = None
    cell_index: int = 0  # cells of this invocation started so far (1-based while running)
    cells_total: int = 0
    cell_key: str | None = None
    run: LiveRun | None = None
    runs_done: list[dict[str, Any]] = field(default_factory=list)  # (run_id, cell, status) of finished runs
    requests: list[LiveRequest] = field(default_factory=list)  # newest first
    inflight: list[LiveInflight] | None = None  # None until the driver reports; oldest send first
    gpu: list[LiveGpu] = field(default_factory=list)  # oldest first
    # a cluster run (docs/cluster.md): "<host>/gpu<slot>" -> node id, GPU name, group, cell, run, done, planned, state
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def in_flight(self) -> int:
        """Requests streaming now: the driver's report when there is one, else the estimate."""
        if self.run is None or self.run.status != "running":
            return 0
        return len(self.inflight) if self.inflight is not None else self.run.in_flight_estimate

    def to_json(self) -> str:
        return json.dumps(_finite(asdict(self)), separators=(",", ":"), allow_nan=False)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> "LiveSnapshot":
        if not isinstance(doc, dict) or doc.get("schema") != SNAPSHOT_SCHEMA:
            raise ValueError(f"not a live snapshot (schema {doc.get('schema') if isinstance(doc, dict) else None!r})")
        known = {f.name for f in fields(cls)}
        vals = {k: v for k, v in doc.items() if k in known}
        run, inflight = vals.get("run"), vals.get("inflight")
        vals.update(run=LiveRun(**run) if isinstance(run, dict) else None,
                    requests=[LiveRequest(**r) for r in vals.get("requests", [])],
                    inflight=None if inflight is None else [LiveInflight(**r) for r in inflight],
                    gpu=[LiveGpu(**g) for g in vals.get("gpu", [])])
        return cls(**vals)


def _finite(obj: Any) -> Any:
    """NaN/inf -> null so the file is strict JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def read_snapshot(path: str | os.PathLike) -> LiveSnapshot | None:
    """The snapshot at `path`, or None when there is none; a damaged file raises ValueError."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return LiveSnapshot.from_dict(json.loads(text))
    except (json.JSONDecodeError, TypeError) as exc:
        raise ValueError(f"{path}: damaged live snapshot ({exc})") from None


def writer_alive(snap: LiveSnapshot) -> bool:
    """Is the process that writes the snapshot still running (same host)?"""
    if snap.pid <= 0:
        return False
    try:
        os.kill(snap.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LiveFeed:
    """Collects what the store's owner records and publishes it as a LiveSnapshot file.

    Wiring: `run_started` when a run's row is inserted, `records(batch)` with every driver batch
    (with the GPU samples drained so far, console/recording.py), `run_ended` with the final status;
    `cell(i, total, cell, state)` fits `RunnerOptions.on_cell`; `finished()` at the end.
    """

    def __init__(self, db_path: str | os.PathLike, *, max_hz: float = 4.0, gpu_keep: int = 600,
                 requests_keep: int = 500, params: MetricParams = DEFAULT_METRIC_PARAMS,
                 plan_name: str | None = None, plan_hash: str | None = None):
        self.path = live_path(db_path)
        self.min_interval_s = 1.0 / max_hz
        self.metric_params = params.as_dict()
        self.snap = LiveSnapshot(pid=os.getpid(), plan_name=plan_name, plan_hash=plan_hash)
        self.snap.requests = []
        self._requests_keep = requests_keep
        self._gpu: deque[LiveGpu] = deque(maxlen=gpu_keep)
        self._t0_ns = time.perf_counter_ns()
        self._run_requests: list[RequestRecord] = []
        self._run_chunks: dict[int, list[tuple[int, int]]] = {}
        self._first_send_ns: int | None = None
        self._dialect: str | None = None  # the running run's, to decode in-flight streams
        self._request_options: dict[str, Any] = {}
        self._streams: dict[int, _LiveStream] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._dirty = False
        self._closed = False
        self._last_write = 0.0
        self.writes = 0
        self.last_error: str | None = None
        self._thread = threading.Thread(target=self._writer, name="live-feed", daemon=True)
        self._thread.start()
        with self._lock:
            self._touch()

    # -- producer side (called from the store's owner) ---------------------------------------
    def campaign(self, plan_name: str | None, plan_hash: str | None, cells_total: int = 0,
                 metrics: dict[str, float] | None = None) -> None:
        """Name the campaign and its metric parameters (plan fields)."""
        with self._lock:
            self.snap.plan_name, self.snap.plan_hash, self.snap.cells_total = plan_name, plan_hash, cells_total
            self.metric_params.update({k: v for k, v in (metrics or {}).items() if k in self.metric_params})
            self._touch()

    def cell(self, index: int, total: int, cell: Any, state: str) -> None:
        """Same signature as RunnerOptions.on_cell: (index, total, cell, state)."""
        with self._lock:
            self.snap.cells_total = total
            if state == "running":
                self.snap.cell_index = index + 1
                self.snap.cell_key = getattr(cell, "key", str(cell))
            self._touch()

    def node(self, label: str, **fields: Any) -> None:
        """Progress of one GPU of a cluster run (console/cluster/recorder.py): what it runs now."""
        with self._lock:
            self.snap.nodes.setdefault(label, {}).update(fields)
            self._touch()

    def run_started(self, run_id: str, engine: str, concurrency: int, kind: str, planned: int,
                    dialect: str | None = None, request_options: dict[str, Any] | None = None) -> None:
        """`dialect` (and the run's request options): decode in-flight streams for the live view."""
        with self._lock:
            self._dialect, self._request_options = dialect, dict(request_options or {})
            self._streams = {}
            self.snap.run = LiveRun(run_id, engine, int(concurrency), kind, int(planned), started_wall=time.time())
            self.snap.requests = []
            self.snap.inflight = None
            self._run_requests, self._run_chunks, self._first_send_ns = [], {}, None
            self._touch()

    def records(self, batch: Iterable[Any]) -> None:
        """A driver batch (RequestRecord / ChunkRecord / AudioFileRecord / GpuSample, any order)."""
        with self._lock:
            done: list[RequestRecord] = []
            gpu: list[GpuSample] = []
            for rec in batch:
                if isinstance(rec, ChunkRecord):
                    if rec.samples > 0:
                        self._run_chunks.setdefault(rec.request_index, []).append((rec.t_arrival_ns, rec.samples))
                elif isinstance(rec, RequestRecord):
                    done.append(rec)
                elif isinstance(rec, GpuSample):
                    gpu.append(rec)
            for rec in done:  # after the whole batch: a request's chunks may follow it in the batch
                self._complete(rec)
            self._add_gpu(gpu)
            self._touch()

    def inflight(self, rows: Iterable[Any], now_ns: int) -> None:
        """The driver's in-flight report (engine_adapters.driver.InflightRow: stamps on the
        driver's clock, the reads since the last report; `now_ns` on the same clock): what is
        streaming, decoded so far, and whether its player would be stalled now, which is where a
        stall shows before the request ends. Figures come from stats.metrics.request_metrics."""
        with self._lock:
            run = self.snap.run
            if run is None or run.status != "running":
                return
            done = {r.index for r in self.snap.requests}
            streams = self._streams
            out = []
            for r in sorted(rows, key=lambda r: r.t_send_ns):
                if r.index in done:
                    continue
                row = LiveInflight(r.index, r.utt_id, r.is_warmup, round((now_ns - r.t_send_ns) / NS, 3),
                                   round((now_ns - (r.t_last_read_ns or r.t_send_ns)) / NS, 3), r.reads)
                stream = streams.get(r.index)
                if stream is None and self._dialect:
                    stream = streams[r.index] = _LiveStream(get_dialect(self._dialect).new_parser(self._request_options))
                if stream is not None:
                    stream.feed(r.stamps, r.chunks)
                    self._decoded(row, r, stream, now_ns)
                out.append(row)
            live = {r.index for r in out}
            for index in [i for i in streams if i not in live]:
                del streams[index]
            self.snap.inflight = out
            self._touch()

    def _decoded(self, row: LiveInflight, r: Any, stream: _LiveStream, now_ns: int) -> None:
        st = stream.parser.state
        audio = stream.audio
        partial = {"request_index": r.index, "outcome": "streaming", "t_send_ns": r.t_send_ns,
                   "sample_rate": st.sample_rate, "t_first_byte_ns": r.t_first_byte_ns,
                   "t_first_audio_ns": st.t_first_audio_ns, "t_last_audio_ns": st.t_last_audio_ns,
                   "audio_samples": st.samples}
        m = request_metrics(partial, audio, preroll_s=self.metric_params["preroll_s"], now_ns=now_ns)
        row.ttfa_s, row.audio_s, row.chunks = m.ttfa_s, m.audio_s, m.audio_chunks
        row.stalls, row.stall_total_s = m.playback.stall_count, m.playback.stall_total_s
        row.buffer_s = m.playback.buffer_s if audio else None

    def run_ended(self, run_id: str, status: str) -> None:
        with self._lock:
            run = self.snap.run
            if run is not None and run.run_id == run_id:
                run.status = status
                self.snap.inflight = []
                self._update_metrics()
            self.snap.runs_done.append({"run_id": run_id, "cell": self.snap.cell_key, "status": status})
            self._touch(force=True)

    def finished(self) -> None:
        """The campaign process is done with the store: the TUI may open it again."""
        with self._lock:
            self.snap.state = "finished"
            self._touch(force=True)
        self.close()

    def __enter__(self) -> "LiveFeed":
        return self

    def __exit__(self, *exc: object) -> None:
        """Leaving the block means the campaign process is done with the store."""
        self.finished()

    def close(self, timeout: float = 5.0) -> None:
        """Write what is pending and stop the writer thread."""
        with self._lock:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout)

    # -- internals (hold self._lock) ----------------------------------------------------------
    def _complete(self, rec: RequestRecord) -> None:
        run = self.snap.run
        if run is None or rec.run_id != run.run_id:
            return
        chunks = sorted(self._run_chunks.get(rec.request_index, ()))
        self._run_chunks[rec.request_index] = chunks
        m = request_metrics(rec, chunks, preroll_s=self.metric_params["preroll_s"])
        self._run_requests.append(rec)
        if self._first_send_ns is None or rec.t_send_ns < self._first_send_ns:
            self._first_send_ns = rec.t_send_ns
        if rec.outcome == "ok":
            run.completed += 1
        else:
            run.failed[rec.outcome] = run.failed.get(rec.outcome, 0) + 1
        end = rec.t_end_ns or rec.t_last_audio_ns or rec.t_send_ns
        row = LiveRequest(rec.request_index, rec.utt_id, rec.is_warmup, rec.outcome, m.ttfa_s, m.rtf, m.audio_chunks,
                          m.audio_s, m.playback.stall_count, m.playback.stall_total_s,
                          (end - self._t0_ns) / NS, rec.error_detail)
        self.snap.requests.insert(0, row)
        del self.snap.requests[self._requests_keep:]
        if self.snap.inflight:  # it ended since the driver's last in-flight report
            self.snap.inflight = [r for r in self.snap.inflight if r.index != rec.request_index]

    def _update_metrics(self) -> None:
        run = self.snap.run
        if run is None or not self._run_requests:
            return
        m = metrics_from_records(run.run_id, self._run_requests, self._run_chunks, MetricParams(**self.metric_params))
        run.metrics = {name: m.get(name) for name in live_metrics()}

    def _add_gpu(self, samples: Iterable[GpuSample]) -> None:
        for s in samples:
            self._gpu.append(LiveGpu(round((s.t_ns - self._t0_ns) / NS, 3), s.gpu_index, s.util_gpu_pct, s.power_w,
                                     s.sm_clock_mhz))

    def _touch(self, force: bool = False) -> None:
        self._dirty = True
        if force:
            self._last_write = 0.0
        self._wake.notify()

    def _writer(self) -> None:
        """Write dirty state at most max_hz times a second, off the caller's thread."""
        idle_priority()  # a UI snapshot never takes a core from the driver (engine_adapters/driver.py)
        while True:
            with self._lock:
                while not self._dirty and not self._closed:
                    self._wake.wait()
                if not self._dirty and self._closed:
                    return
                wait = self._last_write + self.min_interval_s - time.monotonic()
                if wait > 0 and not self._closed:
                    self._wake.wait(wait)
                    continue
                self._dirty = False
                self._last_write = time.monotonic()
                try:
                    self._update_metrics()
                    self.snap.gpu = list(self._gpu)
                    self.snap.seq += 1
                    self.snap.updated_wall = time.time()
                    text = self.snap.to_json()
                except (ValueError, TypeError) as exc:  # never kill the writer: the campaign goes on
                    self.last_error = f"live snapshot: {exc}"
                    continue
            self._write(text)

    def _write(self, text: str) -> None:
        tmp = self.path.with_name(self.path.name + f".{os.getpid()}.tmp")
        try:
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, self.path)
            self.writes += 1
        except OSError as exc:
            self.last_error = f"{self.path}: {exc}"
            try:  # a full disk leaves no temp file behind (a 0-byte one did, once)
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
