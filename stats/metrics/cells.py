"""Per-cell run metrics: the one place where a view asks "which runs, with which numbers" for an
(engine, concurrency) cell of a plan.

Runs come from `data.queries.aggregate_runs` (measured, complete, not excluded) restricted to the
plan's sweep pool by default, so holdout-phase quality runs (another workload) never mix into
throughput repeats; metrics come from `run_metrics` with the plan's frozen metric parameters.
`campaign report`, the throughput decision rules, the verdict export and the TUI all call this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from data.queries import aggregate_runs
from data.store import Store
from stats.metrics.compute import RunMetrics, run_metrics

SWEEP_POOL = object()  # sentinel: the plan's sweep pool (plan.workload.pool)


@dataclass(frozen=True)
class CellRun:
    run: dict[str, Any]
    metrics: RunMetrics

    @property
    def run_id(self) -> str:
        return self.run["run_id"]

    @property
    def repeat(self) -> int:
        return int(self.run["repeat_index"])


def plan_run_metrics(store: Store, plan: Any, run_id: str) -> RunMetrics:
    """`run_metrics` under the plan's frozen throughput scale, stall threshold and pre-roll."""
    m = plan.metrics
    return run_metrics(store, run_id, throughput_scale=m.throughput_scale,
                       stall_threshold_s=m.stall_threshold_s, preroll_s=m.preroll_s)


def cell_runs(store: Store, plan: Any, engine: str, concurrency: int,
              pool: Any = SWEEP_POOL) -> list[CellRun]:
    """Aggregate runs of one cell with their metrics, in repeat order."""
    pool = plan.workload.pool if pool is SWEEP_POOL else pool
    runs = aggregate_runs(store, plan.hash, engine=engine, concurrency=int(concurrency), pool=pool)
    return [CellRun(r, plan_run_metrics(store, plan, r["run_id"])) for r in runs]
