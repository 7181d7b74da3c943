"""Run and request metrics (DESIGN.md §3): the single implementation the console, reports and
verdicts share. `METRICS_VERSION` is stored with every run and export."""

from stats.metrics.compute import (
    PERCENTILE_METHOD,
    RequestMetrics,
    RunMetrics,
    Spread,
    load_run_records,
    metrics_from_records,
    percentile,
    request_metrics,
    run_metrics,
    spread,
)
from stats.metrics.cells import SWEEP_POOL, CellRun, cell_runs, plan_run_metrics
from stats.metrics.registry import METRICS, METRICS_BY_NAME, METRICS_VERSION, MetricDef

__all__ = [
    "SWEEP_POOL", "CellRun", "cell_runs", "plan_run_metrics",
    "METRICS", "METRICS_BY_NAME", "METRICS_VERSION", "MetricDef", "PERCENTILE_METHOD",
    "RequestMetrics", "RunMetrics", "Spread", "load_run_records", "metrics_from_records",
    "percentile", "request_metrics", "run_metrics", "spread",
]
