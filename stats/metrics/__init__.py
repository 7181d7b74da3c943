"""Run and request metrics (docs/results.md): the single implementation the console, reports and
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
from data.metric_params import DEFAULT_METRIC_PARAMS, MetricParams
from stats.metrics.cells import SWEEP_POOL, CellRun, cell_runs, plan_cell_runs
from stats.metrics.stored import metrics_for_runs
from stats.metrics.registry import METRICS, METRICS_BY_NAME, METRICS_VERSION, MetricDef
from stats.metrics import views as _views  # noqa: F401  registers run_summary, quality_summary (data/views.py)

__all__ = [
    "SWEEP_POOL", "CellRun", "cell_runs", "plan_cell_runs", "metrics_for_runs", "MetricParams", "DEFAULT_METRIC_PARAMS",
    "METRICS", "METRICS_BY_NAME", "METRICS_VERSION", "MetricDef", "PERCENTILE_METHOD",
    "RequestMetrics", "RunMetrics", "Spread", "load_run_records", "metrics_from_records",
    "percentile", "request_metrics", "run_metrics", "spread",
]
