"""Report cells: one typed row per (engine, sweep concurrency) of a plan with the spread of every
report column across the cell's measured repeats (median, [min - max], CV), never a single best run.

Only aggregate runs (data.queries.aggregate_runs: measured, complete, not excluded) of the sweep
(its pool and phase) enter a cell, and every figure comes from the stored run metrics
(stats.metrics.stored). The spreads are computed by `stats.metrics.views.cell_aggregates_sql`, the
statement the `cell_summary` view is made of, so the view's sweep cells equal these.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from data.queries import launch_seq
from data.store import Store
from stats.metrics import METRICS_BY_NAME, SWEEP_POOL, CellRun, Spread, plan_cell_runs, spread
from stats.metrics.registry import REPORT, REPORT_SERVICE, names_on, throughput_unit
from stats.metrics.views import cell_aggregates_sql, cell_metrics


def columns() -> tuple[str, ...]:
    """The report table's metrics (RunMetrics names) in order: the registry's `report` surface."""
    return names_on(REPORT)


def service_columns(plan: Any = None) -> tuple[str, ...]:
    """Each engine's second report table (the registry's `report_service` surface: continuity pass
    rates by player model, goodput); with `plan`, the goodput columns only when it sets an SLO."""
    names = names_on(REPORT_SERVICE)
    if plan is None or plan.metrics.slo_ttfa_ms is not None:
        return names
    return tuple(n for n in names if not METRICS_BY_NAME[n].needs_slo)


@dataclass(frozen=True)
class SpreadText:
    """A spread as display text: the median, and the '[min-max] cv x%' line when n > 1."""
    median: str
    range: str = ""

    def one_line(self) -> str:
        return f"{self.median} {self.range}" if self.range else self.median


@dataclass(frozen=True)
class ReportCell:
    engine: str
    concurrency: int
    run_ids: list[str]
    spreads: dict[str, Spread]
    runs: list[CellRun] = field(default_factory=list, compare=False, repr=False)  # repeat order

    @property
    def n(self) -> int:
        return self.spreads["throughput"].n

    def text(self, name: str) -> SpreadText:
        return spread_text(name, self.spreads[name])


def cell_spreads(store: Store, runs: list[CellRun]) -> dict[tuple[str, int], dict[str, Spread]]:
    """(engine, concurrency) -> metric -> spread across the runs, by `cell_aggregates_sql` (the
    `cell_summary` view's statement) over these runs' metrics on the store's connection."""
    import pyarrow as pa

    if not runs:
        return {}
    names = [d.name for d in cell_metrics()]
    table = pa.table({"plan_hash": pa.array([x.run["plan_hash"] for x in runs], pa.string()),
                      "engine": pa.array([x.run["engine"] for x in runs], pa.string()),
                      "concurrency": pa.array([int(x.run["concurrency"]) for x in runs], pa.int64()),
                      "phase": pa.array(["cell"] * len(runs), pa.string()),
                      **{n: pa.array([_number(x.metrics.get(n)) for x in runs], pa.float64()) for n in names}})
    view = "_report_cell_runs"
    store.con.register(view, table)
    try:
        cur = store.con.execute(cell_aggregates_sql(view))
        cols = [d[0] for d in cur.description]
        rows = [dict(zip(cols, r)) for r in cur.fetchall()]
    finally:
        store.con.unregister(view)
    return {(r["engine"], int(r["concurrency"])): {
        n: Spread(r[f"{n}__min"], r[f"{n}__median"], r[f"{n}__max"], r[f"{n}__cv"], int(r[f"{n}__n"])) for n in names}
        for r in rows}


def _number(v: Any) -> float | None:
    return None if v is None else float(v)


def build_report(store: Store, plan: Any, pool: Any = SWEEP_POOL) -> list[ReportCell]:
    """One cell per engine x sweep concurrency (empty cells kept so gaps show); one metrics read."""
    by_cell: dict[tuple[str, int], list[CellRun]] = {}
    every = plan_cell_runs(store, plan, pool)
    for x in every:
        by_cell.setdefault((x.run["engine"], int(x.run["concurrency"])), []).append(x)
    spreads_of = cell_spreads(store, every)
    empty = {f: spread(()) for f in (*columns(), *service_columns())}
    out = []
    for engine in plan.engines:
        for c in plan.sweep.concurrencies:
            runs = by_cell.get((engine.name, int(c)), [])
            spreads = {f: spreads_of.get((engine.name, int(c)), empty)[f] for f in (*columns(), *service_columns())}
            out.append(ReportCell(engine.name, int(c), [x.run_id for x in runs], spreads, runs))
    return out


def format_value(name: str, v: float) -> str:
    d = METRICS_BY_NAME[name]
    # counts are ints in the registry format; a median of counts can be fractional
    if d.fmt == "d":
        return str(int(v)) if float(v).is_integer() else f"{v:.1f}"
    return format(v * d.scale, d.fmt)


def spread_text(name: str, s: Spread) -> SpreadText:
    if s.n == 0 or s.median is None:
        return SpreadText("-")
    if s.n == 1 or s.min is None or s.max is None:
        return SpreadText(format_value(name, s.median))
    rng = f"[{format_value(name, s.min)}-{format_value(name, s.max)}]"
    if s.cv is not None:
        rng += f" cv {s.cv * 100:.1f}%"
    return SpreadText(format_value(name, s.median), rng)


def column_label(name: str, throughput_scale: float | None = None) -> str:
    """The registry's label and unit (throughput's and goodput throughput's unit for the plan's scale)."""
    d = METRICS_BY_NAME[name]
    if name not in ("throughput", "goodput_throughput") or throughput_scale is None:
        return d.header()
    unit = throughput_unit(throughput_scale)
    return f"{d.label} ({unit.replace('audio s', 'audio s met') if name == 'goodput_throughput' else unit})"


def concurrency_label(c: int, limit: int | None) -> str:
    """C, marked when it exceeds the engine's admission limit (the excess queues inside the engine)."""
    return f"{c} > limit {limit}" if limit is not None and c > limit else str(c)


def admission_limits(store: Store, plan: Any) -> dict[str, int]:
    """engine -> the admission limit its latest launch under the plan recorded from its deploy
    configuration (engine_adapters/deploy_config.py); engines without one are absent."""
    out: dict[str, int] = {}
    for r in store.query("SELECT engine, deploy_json FROM engine_launches l WHERE plan_hash = ? AND deploy_json IS NOT NULL "
                         f"ORDER BY {launch_seq('l')} NULLS FIRST, launch_id", [plan.hash]):  # latest: chain order
        limit = json.loads(r["deploy_json"]).get("admission_limit")
        if isinstance(limit, int):
            out[r["engine"]] = limit
    return out


@dataclass(frozen=True)
class LeftOut:
    """Runs of a plan that are not in aggregates, counted by kind / status / exclusion."""
    kind: str
    status: str
    excluded: bool
    n: int

    def label(self) -> str:
        return f"{self.n} {self.kind}/{self.status}{' excluded' if self.excluded else ''}"


def left_out(store: Store, plan_hash: str) -> list[LeftOut]:
    rows = store.query(
        "SELECT r.kind, r.status, (x.run_id IS NOT NULL) AS excluded, count(*) AS n FROM runs r "
        "LEFT JOIN exclusions x USING (run_id) WHERE r.plan_hash = ? AND (r.kind <> 'measured' OR "
        "r.status <> 'complete' OR x.run_id IS NOT NULL) GROUP BY ALL ORDER BY ALL", [plan_hash])
    return [LeftOut(r["kind"], r["status"], bool(r["excluded"]), int(r["n"])) for r in rows]
