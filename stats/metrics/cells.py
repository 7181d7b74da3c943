"""Per-cell run metrics: the one place where a view asks "which runs, with which numbers" for an
(engine, concurrency) cell of a plan.

Runs come from `data.queries.aggregate_runs` (measured, complete, not excluded) restricted by
default to the sweep: the plan's sweep pool and the sweep phase (`data.queries.run_phase`, the
`phase` of `run_summary` and `cell_summary`), so holdout-phase quality runs never mix into
throughput repeats, not even when they reuse the sweep's prompts; metrics are the stored ones (`stats.metrics.stored`) under the plan's frozen
metric parameters. The results layer (stats/results), the throughput decision rules and the verdict
document all call this.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from data.queries import aggregate_runs
from data.store import Store
from stats.metrics.compute import RunMetrics
from stats.metrics.stored import metrics_for_runs

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


def _selection(plan: Any, pool: Any) -> dict[str, Any]:
    if pool is SWEEP_POOL:
        return {"pool": plan.workload.pool, "phase": "sweep"}
    return {"pool": pool}


def plan_cell_runs(store: Store, plan: Any, pool: Any = SWEEP_POOL) -> list[CellRun]:
    """Every aggregate run of the plan (one pool) with its metrics, one stored-metrics read."""
    runs = aggregate_runs(store, plan.hash, **_selection(plan, pool))
    metrics = metrics_for_runs(store, runs, plan.metrics)
    return [CellRun(r, metrics[r["run_id"]]) for r in runs]


def cell_runs(store: Store, plan: Any, engine: str, concurrency: int,
              pool: Any = SWEEP_POOL) -> list[CellRun]:
    """Aggregate runs of one cell with their metrics, in repeat order."""
    runs = aggregate_runs(store, plan.hash, engine=engine, concurrency=int(concurrency), **_selection(plan, pool))
    metrics = metrics_for_runs(store, runs, plan.metrics)
    return [CellRun(r, metrics[r["run_id"]]) for r in runs]
