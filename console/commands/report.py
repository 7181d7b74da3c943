"""`campaign report PLAN`: the per-engine concurrency table of a campaign.

Only aggregate runs (data.queries.aggregate_runs: measured, complete, not excluded) enter the
table, and every figure comes from stats.metrics, the one metric implementation. Each cell shows
the median across repeats with its [min - max] range and CV, never a single best run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Console

from console.commands.db import add_db_arg
from console.commands.plan import plan_for_arg
from console.output import FORMATS, print_rows
from data.plans import Plan
from data.snapshot import open_or_snapshot
from data.store import Store, resolve_db_path
from stats.metrics import METRICS_BY_NAME, METRICS_VERSION, SWEEP_POOL, Spread, cell_runs, spread
from stats.metrics.registry import throughput_unit

# (RunMetrics field, column label) in table order
COLUMNS = (
    ("throughput", "audio tok/s"),
    ("ttfa_p50_s", "TTFA p50"),
    ("ttfa_p95_s", "TTFA p95"),
    ("e2e_p50_s", "e2e p50"),
    ("e2e_p95_s", "e2e p95"),
    ("rtf_mean", "mean RTF"),
    ("stall_count", "stalls"),
    ("failed", "failures"),
    ("truncated", "truncated"),
    ("chunks_mean", "chunks/req"),
)


@dataclass(frozen=True)
class ReportCell:
    engine: str
    concurrency: int
    run_ids: list[str]
    spreads: dict[str, Spread]


def build_report(store: Store, plan: Plan, pool: Any = SWEEP_POOL) -> list[ReportCell]:
    """One cell per engine x sweep concurrency (empty cells kept so gaps show)."""
    out = []
    for engine in plan.engines:
        for c in plan.sweep.concurrencies:
            runs = cell_runs(store, plan, engine.name, c, pool)
            spreads = {f: spread(getattr(x.metrics, f) for x in runs) for f, _ in COLUMNS}
            out.append(ReportCell(engine.name, c, [x.run_id for x in runs], spreads))
    return out


def format_spread(field: str, s: Spread) -> str:
    if s.n == 0:
        return "-"
    d = METRICS_BY_NAME[field]

    def f(v: float) -> str:
        # counts are ints in the registry format; a median of counts can be fractional
        if d.fmt == "d":
            return str(int(v)) if float(v).is_integer() else f"{v:.1f}"
        return format(v * d.scale, d.fmt)
    text = f(s.median)
    if s.n > 1:
        text += f" [{f(s.min)}-{f(s.max)}]"
        if s.cv is not None:
            text += f" cv {s.cv * 100:.1f}%"
    return text


def admission_limits(store: Store, plan: Plan) -> dict[str, int]:
    """engine -> the admission limit its latest launch under the plan recorded from its deploy
    configuration (engine_adapters/deploy_config.py); engines without one are absent."""
    import json

    out: dict[str, int] = {}
    for r in store.query("SELECT engine, deploy_json FROM engine_launches WHERE plan_hash = ? AND deploy_json IS NOT NULL "
                         "ORDER BY started_at", [plan.hash]):
        limit = json.loads(r["deploy_json"]).get("admission_limit")
        if isinstance(limit, int):
            out[r["engine"]] = limit
    return out


def concurrency_label(c: int, limit: int | None) -> str:
    """C, marked when it exceeds the engine's admission limit (the excess queues inside the engine)."""
    return f"{c} > limit {limit}" if limit is not None and c > limit else str(c)


def column_label(field: str, label: str, throughput_scale: float | None = None) -> str:
    unit = METRICS_BY_NAME[field].unit
    if field == "throughput" and throughput_scale is not None:
        unit = throughput_unit(throughput_scale)
    return f"{label} ({unit})" if unit else label


def register(sub) -> None:
    p = sub.add_parser("report", help="per-engine concurrency table (median [min-max] cv across repeats)")
    p.add_argument("plan", help="frozen plan file or hash")
    p.add_argument("--format", choices=FORMATS, default="table")
    add_db_arg(p)
    p.set_defaults(func=cmd_report)


def cmd_report(args) -> int:
    with open_or_snapshot(resolve_db_path(args.db)) as store:  # a snapshot while a campaign runs
        plan = plan_for_arg(store, args.plan)
        cells = build_report(store, plan)
        limits = admission_limits(store, plan)
        others = store.query(
            "SELECT r.kind, r.status, (x.run_id IS NOT NULL) AS excluded, count(*) AS n FROM runs r "
            "LEFT JOIN exclusions x USING (run_id) WHERE r.plan_hash = ? GROUP BY ALL ORDER BY ALL", [plan.hash])
    if args.format != "table":
        rows: list[list[Any]] = []
        for cell in cells:
            row: list[Any] = [cell.engine, cell.concurrency, limits.get(cell.engine), cell.spreads["throughput"].n]
            for f, _ in COLUMNS:
                s = cell.spreads[f]
                row += [s.median, s.min, s.max, s.cv]
            rows.append(row)
        cols = ["engine", "concurrency", "admission_limit", "repeats"] + [f"{f}_{k}" for f, _ in COLUMNS for k in ("median", "min", "max", "cv")]
        print_rows(cols, rows, args.format)
        return 0
    console = Console(width=max(Console().width, 160))
    console.print(f"[bold]{plan.name}[/bold] plan {plan.hash[:12]}  metrics v{METRICS_VERSION}  "
                  f"audio tok/s = {plan.metrics.throughput_scale:g} x audio s / wall s (codec tokens, not text)  "
                  f"(median \\[min-max] cv across measured repeats)", highlight=False)
    for engine in plan.engines:
        limit = limits.get(engine.name)
        rows = [[concurrency_label(c.concurrency, limit), c.spreads["throughput"].n]
                + [format_spread(f, c.spreads[f]) for f, _ in COLUMNS] for c in cells if c.engine == engine.name]
        print_rows(["C", "n"] + [column_label(f, lbl, plan.metrics.throughput_scale) for f, lbl in COLUMNS], rows, console=console,
                   title=f"{engine.name} ({engine.adapter}, profile {engine.profile or '-'}"
                         + (f", admits {limit} at once: larger C queues in the engine" if limit is not None else "") + ")")
    left_out = [o for o in others if o["kind"] != "measured" or o["status"] != "complete" or o["excluded"]]
    if left_out:
        console.print("not in aggregates: " + ", ".join(
            f"{o['n']} {o['kind']}/{o['status']}{' excluded' if o['excluded'] else ''}" for o in left_out), highlight=False)
    return 0
