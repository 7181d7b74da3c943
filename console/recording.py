"""Record one run: the `runs` row, the driver process, batched ingestion, GPU telemetry and the
run_started / run_ended audit events (shared contract 3); run_ended records the digest of the
run's stored rows (data/digest.py) that `audit verify` recomputes.

The driver runs in its own process and ships record batches; this process owns the DuckDB file
and commits each batch as it arrives, so an interruption loses nothing already received and the
run is marked 'incomplete' rather than silently short. `record_run` is three steps, each its own
piece: `open_run` (the row, telemetry, the live view), a `BatchSink` the driver feeds while
`receive_batches` counts what arrived, and `close_run` (last records, status, run_ended).
"""

from __future__ import annotations

import json
import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from data.audit import append_event
from data.digest import run_digest
from data.errors import DiskFull, disk_full
from data.launches import store_launch, update_launch
from data.manifest import reserved_ids_sent, reserved_refusal
from data.plan_model import EngineSpec
from data.records import RequestRecord
from data.store import Store, utcnow
from data.writer import BatchWriter
from engine_adapters.dialects import get_dialect
from engine_adapters.driver import DriverProcess, DriveSpec
from engine_adapters.lifecycle import EngineProcess, EngineStartError
from engine_adapters.sampling import body_sampling
from stats.metrics import METRICS_VERSION


def new_run_id(engine: str, concurrency: int) -> str:
    stamp = utcnow().strftime("%Y%m%dT%H%M%S")
    return f"{stamp}-{engine}-c{concurrency}-{uuid.uuid4().hex[:6]}"


def _telemetry(run_id: str, enabled: bool) -> tuple[list[dict[str, Any]], str, Any]:
    """(gpu identity rows, status, sampler or None); never raises: telemetry is evidence, not a gate."""
    if not enabled:
        return [], "disabled", None
    try:
        from engine_adapters.telemetry import GpuSampler, gpu_identity
    except ImportError as exc:
        return [], f"unavailable: {exc}", None
    gpus, status = gpu_identity()
    sampler = None
    if status == "ok":
        sampler = GpuSampler(hz=10.0)
        sampler.start(run_id)
    return gpus, status, sampler


def local_placement(gpus: list[dict[str, Any]]) -> dict[str, Any]:
    """Where a local run ran: no Ray node; the GPU the engine sees first (engine_adapters/placement.py)."""
    from engine_adapters.placement import assigned_gpu

    gpu = assigned_gpu(gpus)
    return {"node_id": None, "gpu_uuid": gpu.get("uuid") if gpu else None, "gpu_name": gpu.get("name") if gpu else None}


def begin_run(store: Store, spec: DriveSpec, *, engine: str, kind: str, plan_hash: str | None, cell_key: str | None,
              launch_id: str | None, pool: str | None, repeat_index: int, note: str | None, params: dict | None,
              gpus: list[dict[str, Any]], telemetry_status: str, placement: dict[str, Any] | None = None) -> None:
    """The `runs` row (status 'running'), its GPU rows and run_started, in one transaction. Shared
    by local runs and runs a cluster node drives (console/cluster/recorder.py); `placement` is the
    run's node_id / gpu_uuid / gpu_name."""
    dialect = get_dialect(spec.dialect)
    request = dialect.request_config(spec.request_options)
    if hit := reserved_ids_sent(store, [r.utt_id for r in spec.requests], plan_hash, pool):
        raise reserved_refusal(f"run {spec.run_id} ({kind}, pool {pool!r})", *hit)  # warmups cycle these same requests
    total = len(spec.requests) + spec.warmup_requests
    all_params = {
        "timeout_s": spec.timeout_s, "warmup_requests": spec.warmup_requests,
        "request_options": {k: v for k, v in spec.request_options.items() if k != "extra_body"},
        **(params or {}),
        # what the body carries (plan sampling, a preset's own, extra_body), never a default it replaced
        "sampling": body_sampling(dialect.body_template(spec.sampling, spec.request_options)),
    }
    with store.transaction():
        store.insert("runs", {
            "run_id": spec.run_id, "plan_hash": plan_hash, "cell_key": cell_key, "engine": engine,
            "launch_id": launch_id, "dialect": spec.dialect, "url": spec.url, "concurrency": spec.concurrency,
            "repeat_index": repeat_index, "kind": kind, "status": "running", "pool": pool,
            "requests_planned": total, "started_at": utcnow(), "gpu_json": json.dumps(gpus),
            "telemetry_status": telemetry_status, "params_json": json.dumps(all_params, sort_keys=True, default=str),
            "metrics_version": METRICS_VERSION, "note": note, "request_preset": request.preset,
            "voice_placement": request.voice_placement,
            "body_template_sha256": dialect.body_template_sha256(spec.sampling, spec.request_options),
            **{k: v for k, v in (placement or {}).items() if k in ("node_id", "gpu_uuid", "gpu_name")},
        })
        for g in gpus:
            store.insert("gpu_devices", {"run_id": spec.run_id, **{k: g.get(k) for k in (
                "gpu_index", "name", "uuid", "driver_version", "memory_total_mib", "power_limit_w")}})
        append_event(store, "run_started", plan_hash=plan_hash, subject=spec.run_id,
                     payload={"engine": engine, "kind": kind, "concurrency": spec.concurrency,
                              "cell_key": cell_key, "requests_planned": total, "url": spec.url,
                              "request_preset": request.preset, "voice_placement": request.voice_placement,
                              **({"node_id": placement["node_id"]} if placement and placement.get("node_id") else {})})


def run_status(*, interrupted: bool, summary: Any, fatal: str | None, engine_exit: str | None) -> str:
    """complete / incomplete (interrupted or cancelled) / failed (driver error or engine exit)."""
    if interrupted or (summary and summary.cancelled):
        return "incomplete"
    if summary is None or summary.error or fatal or engine_exit:
        return "failed"
    return "complete"


def finish_run(store: Store, run_id: str, *, plan_hash: str | None, note: str | None, summary: Any,
               fatal: str | None, engine_exit: str | None, stored: int, interrupted: bool,
               lost: str | None = None) -> str:
    """Close the run row and append run_ended with the digest of what was stored; returns the
    status. `lost` (a cluster worker or node lost mid-cell) makes the run 'incomplete' with it as
    the reason, like an interrupted run."""
    status = "incomplete" if lost else run_status(interrupted=interrupted, summary=summary, fatal=fatal,
                                                     engine_exit=engine_exit)
    overhead = dict(summary.overhead) if summary else {}
    full = f"stopped: the disk is full ({cause})" if (cause := disk_full(fatal)) else None  # the note says it
    if summary and summary.error:
        overhead["error"] = summary.error
    if fatal:
        overhead["fatal"] = fatal
    if engine_exit:
        overhead["engine_exit"] = engine_exit
    with store.transaction():
        store.con.execute(
            "UPDATE runs SET status = ?, ended_at = ?, anchor_wall_ns = ?, anchor_perf_ns = ?, loop_impl = ?, "
            "client_impl = ?, driver_overhead_json = ?, note = ? WHERE run_id = ?",
            [status, utcnow() if status == "complete" else None,
             summary.anchor_wall_ns if summary else None, summary.anchor_perf_ns if summary else None,
             summary.loop_impl if summary else None, summary.client_impl if summary else None,
             json.dumps(overhead, sort_keys=True), "; ".join(x for x in (note, engine_exit, lost, full) if x) or None,
             run_id],
        )
        append_event(store, "run_ended", plan_hash=plan_hash, subject=run_id,
                     payload={"status": status, "requests_stored": stored,
                              "requests_sent": summary.sent if summary else None,
                              "error": (summary.error if summary else None) or fatal or engine_exit or lost,
                              "digest": run_digest(store, run_id)})  # rows as stored, for audit verify
    if not full:  # the run's metrics, stored now so run_summary has them at once (docs/metrics.md, "In SQL")
        store_run_metrics(store, run_id, status)
    return status


def store_run_metrics(store: Store, run_id: str, status: str) -> None:
    """Compute and store an ended run's metrics under the parameters it recorded (runs.params_json):
    derived data (stats/metrics/stored.py), the same row a report would store later."""
    from data.metric_params import MetricParams
    from stats.metrics.stored import metrics_for_runs

    params = MetricParams.from_run_json(store.scalar("SELECT params_json FROM runs WHERE run_id = ?", [run_id]))
    metrics_for_runs(store, [{"run_id": run_id, "status": status}], params)


@dataclass
class OpenRun:
    """A run whose `runs` row is stored as 'running': what consuming its batches and closing it
    need."""
    spec: DriveSpec
    plan_hash: str | None
    note: str | None
    total: int  # requests planned, warm-ups included
    sampler: Any  # engine_adapters.telemetry.GpuSampler, None without telemetry
    live: Any  # console.live.LiveFeed or None


def open_run(store: Store, spec: DriveSpec, *, engine: str, kind: str, plan_hash: str | None, cell_key: str | None,
             launch_id: str | None, pool: str | None, repeat_index: int, note: str | None, params: dict | None,
             telemetry: bool, live: Any) -> OpenRun:
    """Check the request options (a bad one fails before anything is stored), start GPU
    telemetry, store the `runs` row and run_started (`begin_run`), create the artifacts folder
    and tell the live view."""
    get_dialect(spec.dialect).request_config(spec.request_options)
    gpus, tstatus, sampler = _telemetry(spec.run_id, telemetry)
    begin_run(store, spec, engine=engine, kind=kind, plan_hash=plan_hash, cell_key=cell_key, launch_id=launch_id,
              pool=pool, repeat_index=repeat_index, note=note, params=params, gpus=gpus, telemetry_status=tstatus,
              placement=local_placement(gpus))
    Path(spec.artifacts_dir).mkdir(parents=True, exist_ok=True)
    total = len(spec.requests) + spec.warmup_requests
    if live:  # console.live.LiveFeed: the TUI follows the run through its snapshot file
        live.run_started(spec.run_id, engine, spec.concurrency, kind, total, spec.dialect, spec.request_options)
    return OpenRun(spec, plan_hash, note, total, sampler, live)


class BatchSink:
    """The driver's `consume`: stores each decoded batch (with the GPU samples so far) and feeds
    the live view. It runs on the driver's decode thread at idle priority, so storing never
    competes with the driver for a core (engine_adapters/driver.py, DriverProcess)."""

    def __init__(self, store: Store, run: OpenRun) -> None:
        self.writer = BatchWriter(store)
        self.sampler = run.sampler
        self.live = run.live
        self.transport_failures = 0  # requests that failed as `transport`: a sign the engine died

    def __call__(self, batch: list[Any]) -> list[Any]:
        drained = self.sampler.drain() if self.sampler else []
        self.transport_failures += sum(1 for r in batch if isinstance(r, RequestRecord) and r.outcome == "transport")
        self.writer.add(batch)
        self.writer.add(drained)
        self.writer.flush()
        batch = batch + drained
        if self.live:
            self.live.records(batch)
        return batch

    def finish(self) -> None:
        """Once the driver has joined (its decode thread is done with the writer): store what is
        pending and the sampler's last GPU samples."""
        self.writer.flush()
        samples = self.sampler.stop() if self.sampler else []
        if samples:
            self.writer.add(samples)
            self.writer.flush()


@dataclass
class Progress:
    """Requests stored so far and whether the user interrupted, kept current so that a run
    that fails mid-way is closed with what arrived."""
    total: int
    on_progress: Callable[[int, int], None] | None = None
    stored: int = 0
    interrupted: bool = False


def receive_batches(proc: DriverProcess, progress: Progress) -> None:
    """Wait for the driver's batches, counting the stored requests. Ctrl-C asks the driver to
    cancel its in-flight requests, then the draining of its records goes on."""
    while True:
        try:
            for batch in proc.batches():
                done = sum(1 for r in batch if isinstance(r, RequestRecord))
                progress.stored += done
                if progress.on_progress and done:
                    progress.on_progress(progress.stored, progress.total)
            return
        except KeyboardInterrupt:
            progress.interrupted = True
            proc.cancel()


def close_run(store: Store, run: OpenRun, sink: BatchSink, proc: DriverProcess, progress: Progress,
              engine_process: EngineProcess | None) -> str:
    """Join the driver, store the last records and GPU samples, and close the run row with its
    status (`finish_run`); returns the status."""
    proc.join()  # the decode thread has finished with the writer once this returns
    sink.finish()
    # an engine that died makes its requests fail as `transport` at once; its orphan guard
    # ends a moment later, so give it that moment before deciding the engine is still up
    engine_exit = engine_process.exit_cause(0.5 if sink.transport_failures else 0.0) if engine_process else None
    return finish_run(store, run.spec.run_id, plan_hash=run.plan_hash, note=run.note, summary=proc.summary,
                      fatal=proc.fatal, engine_exit=engine_exit, stored=progress.stored,
                      interrupted=progress.interrupted)


def record_run(
    store: Store,
    spec: DriveSpec,
    *,
    engine: str,
    kind: str,
    plan_hash: str | None = None,
    cell_key: str | None = None,
    launch_id: str | None = None,
    pool: str | None = None,
    repeat_index: int = 0,
    note: str | None = None,
    params: dict | None = None,
    telemetry: bool = True,
    on_progress: Callable[[int, int], None] | None = None,
    live: Any = None,
    engine_process: EngineProcess | None = None,
    store_threads: int | None = 1,
) -> str:
    """Drive `spec` and store everything; returns the run id. Re-raises KeyboardInterrupt after
    marking the run incomplete and storing what arrived. With `engine_process`, a run during
    which that engine exited or crashed is 'failed' with the cause in `note` (its requests stay
    stored; no aggregate uses a failed run, docs/engines.md). While the driver drives, the
    store's DuckDB uses `store_threads` threads: 1, all its work on the decoder's idle-priority
    thread (docs/timing.md); None leaves the count as it is, for a bench's comparison."""
    run = open_run(store, spec, engine=engine, kind=kind, plan_hash=plan_hash, cell_key=cell_key,
                   launch_id=launch_id, pool=pool, repeat_index=repeat_index, note=note, params=params,
                   telemetry=telemetry, live=live)
    sink = BatchSink(store, run)
    progress = Progress(run.total, on_progress)
    proc: DriverProcess | None = None
    try:
        # while the driver drives, the store's work stays on the decoder's idle-priority thread;
        # closing the run (its digest's sorted scans) gets every thread back
        with store.single_threaded(store_threads) if store_threads is not None else nullcontext():
            proc = DriverProcess(spec, sink, live.inflight if live else None).start()
            receive_batches(proc, progress)
    finally:
        if proc is not None:  # a driver that never started has no run to close; its error goes on
            status = close_run(store, run, sink, proc, progress, engine_process)
    if live:
        live.run_ended(spec.run_id, status)
    if progress.interrupted:
        raise KeyboardInterrupt
    if proc is not None and (cause := disk_full(proc.fatal)):  # the next run would meet the same full disk
        raise DiskFull(cause)
    return spec.run_id




def launch_engine(store: Store, spec: EngineSpec, *, log_dir: Path, plan_hash: str | None = None,
                  checkpoint_cache: Path | None = None) -> EngineProcess:
    """Launch and wait for health; the attempt is stored in engine_launches either way (a startup
    failure with its reason and log tail) before EngineStartError propagates."""
    eng = EngineProcess(spec, Path(log_dir), plan_hash=plan_hash)
    try:
        eng.start(checkpoint_cache)
        eng.wait_healthy()
    except EngineStartError:
        store_launch(store, eng.row)
        raise
    except BaseException:
        eng.stop()
        if eng.row:  # start() sets the row's identity first thing; an interrupt before it has nothing to record
            eng.row.update(status="startup_failed", failure_reason=eng.row.get("failure_reason") or "launch interrupted")
            store_launch(store, eng.row)
        raise
    store_launch(store, eng.row)
    return eng


def stop_engine(store: Store, eng: EngineProcess, grace_s: float = 10.0) -> None:
    """Stop the engine and update its launch row (stopped, or crashed if it died while serving)."""
    eng.stop(grace_s)
    update_launch(store, eng.row)

