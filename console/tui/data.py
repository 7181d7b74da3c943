"""What the TUI shows, read from the run store: plain dataclasses built by small functions that
run in thread workers, never on the UI thread (dolphie's split: polling apart from rendering).

The store is opened read-only for one load and closed right away, so the TUI never keeps a
campaign from opening its database. Every figure comes from the results layer (stats/results,
stats.metrics.stored: the stored run metrics, computed in memory where a run has none stored);
nothing here re-derives a metric.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from data.audit import ChainResult, verify_chain
from data.launches import IDENTITY_SQL, identity_label
from data.metric_params import MetricParams
from data.plan_loading import plan_from_store
from data.queries import plan_seq
from data.snapshot import open_reader
from data.store import Store
from stats.server_reconcile import Reconciliation, reconcile_run
from stats.metrics import RequestMetrics, RunMetrics, load_run_records, metrics_for_runs, request_metrics
from stats.results.plan_results import PlanResults, VerdictResult, load_plan_results, load_verdicts
from stats.results.quality_load import QualityLoad, quality_under_load

PlanReport = PlanResults  # the Report tab shows the results layer's rows as they are
VerdictRowView = VerdictResult


def open_read_only(path: str | Path) -> Store:
    """Read-only: several readers may share the file, and the TUI never migrates it; while a
    campaign owns the file, a consistent snapshot its process serves (data/snapshot.py)."""
    return open_reader(path)


def run_params(run: Mapping[str, Any]) -> MetricParams:
    """The metric parameters stored with a run (the plan's values), else the defaults."""
    return MetricParams.from_run_json(run.get("params_json"))


@dataclass(frozen=True)
class RunRow:
    run_id: str
    plan_hash: str | None
    plan_name: str | None
    engine: str
    concurrency: int
    kind: str
    pool: str | None  # workload pool: the sweep's tuning pool or the reserved holdout
    repeat_index: int
    status: str
    excluded: str | None  # the exclusion reason
    started: str  # 'MM-DD HH:MM:SS' UTC, or ''
    metrics: RunMetrics


def load_runs(store: Store) -> list[RunRow]:
    """Every run (oldest first) with its metrics."""
    rows = store.query(
        "SELECT r.run_id, r.plan_hash, p.name AS plan_name, r.engine, r.concurrency, r.kind, r.pool, r.repeat_index, "
        "r.status, x.reason AS excluded, strftime(r.started_at AT TIME ZONE 'UTC', '%m-%d %H:%M:%S') AS started, "
        "r.params_json FROM runs r LEFT JOIN exclusions x USING (run_id) LEFT JOIN plans p USING (plan_hash) "
        "ORDER BY r.started_at, r.run_id")
    metrics = metrics_for_runs(store, rows, run_params)  # stored metrics; in memory where none are stored
    return [RunRow(r["run_id"], r["plan_hash"], r["plan_name"], r["engine"], r["concurrency"], r["kind"],
                   r["pool"], r["repeat_index"], r["status"], r["excluded"], r["started"] or "", metrics[r["run_id"]])
            for r in rows]


@dataclass(frozen=True)
class RequestRow:
    index: int
    utt_id: str
    warmup: bool
    outcome: str
    detail: str | None
    metrics: RequestMetrics
    arrivals: list[tuple[float, float]]  # (seconds since t_send, audio seconds) per audio chunk


@dataclass(frozen=True)
class GpuSeries:
    gpu_index: int
    t_s: list[float]  # seconds since the run's first sample
    values: dict[str, list[float | None]]  # gpu_samples column -> values


@dataclass(frozen=True)
class RunDetail:
    run: dict[str, Any]
    metrics: RunMetrics
    requests: list[RequestRow]
    gpu: list[GpuSeries]
    telemetry_status: str | None
    reconciliation: Reconciliation | None = None  # the engine's own figures beside the console's


GPU_COLUMNS = ("util_gpu_pct", "power_w", "sm_clock_mhz")


def load_run_detail(store: Store, run_id: str) -> RunDetail:
    runs = store.query(
        f"SELECT r.*, x.reason AS excluded, {IDENTITY_SQL} FROM runs r LEFT JOIN exclusions x USING (run_id) "
        "LEFT JOIN engine_launches l ON l.launch_id = r.launch_id WHERE run_id = ?", [run_id])
    if not runs:
        from data.errors import CampaignError
        raise CampaignError(f"{store.path}: no run with id {run_id!r}")
    run = {**runs[0], "identity": identity_label(runs[0])}  # what code served it (docs/engines.md)
    params = run_params(run)
    metrics = metrics_for_runs(store, [run], params)[run_id]
    requests, chunks = load_run_records(store, run_id, extra_columns=("error_detail",))
    rows = []
    for r in requests:
        cs = chunks.get(r["request_index"], [])
        rate = r["sample_rate"] or 0
        arrivals = [((t - r["t_send_ns"]) / 1e9, s / rate if rate else 0.0) for t, s in cs]
        rows.append(RequestRow(r["request_index"], r["utt_id"], bool(r["is_warmup"]), r["outcome"],
                               r["error_detail"],
                               request_metrics(r, cs, preroll_s=params.preroll_s), arrivals))
    series = []
    samples = store.query(
        f"SELECT gpu_index, t_ns, {', '.join(GPU_COLUMNS)} FROM gpu_samples WHERE run_id = ? ORDER BY gpu_index, t_ns",
        [run_id])
    for g in sorted({s["gpu_index"] for s in samples}):
        mine = [s for s in samples if s["gpu_index"] == g]
        t0 = mine[0]["t_ns"]
        series.append(GpuSeries(g, [(s["t_ns"] - t0) / 1e9 for s in mine],
                                {c: [s[c] for s in mine] for c in GPU_COLUMNS}))
    return RunDetail(run, metrics, rows, series, run.get("telemetry_status"), reconcile_run(store, run_id))


def load_reports(store: Store) -> list[PlanResults]:
    """The results of every root plan in the store (what `campaign report` shows)."""
    return [load_plan_results(store, plan_from_store(store, h)) for (h,) in store.con.execute(
        f"SELECT plan_hash FROM plans p WHERE kind = 'plan' ORDER BY {plan_seq('p')} NULLS FIRST").fetchall()]


@dataclass(frozen=True)
class AuditView:
    chain: ChainResult
    events: list[dict[str, Any]]


def load_audit(store: Store) -> AuditView:
    events = store.query(
        "SELECT seq, strftime(event_time AT TIME ZONE 'UTC', '%Y-%m-%d %H:%M:%S') AS time, kind, plan_hash, subject, "
        "payload_json FROM audit_events ORDER BY seq")
    return AuditView(verify_chain(store), events)


@dataclass(frozen=True)
class BrowserData:
    runs: list[RunRow]
    reports: list[PlanResults]
    verdicts: list[VerdictResult]
    audit: AuditView
    snapshot_of: Path | None = None  # read from the running campaign's snapshot of this store
    quality: dict[str, QualityLoad] | None = None  # plan hash -> quality under load (the Report tab)


def load_browser(path: str | Path) -> BrowserData:
    """Everything the browser tabs show, in one short read-only session."""
    with open_read_only(path) as store:
        reports = load_reports(store)
        return BrowserData(load_runs(store), reports, load_verdicts(store), load_audit(store), store.snapshot_of,
                           {r.plan.hash: quality_under_load(store, r.plan) for r in reports})
