"""`campaign report PLAN`: the per-engine concurrency table of a campaign, and with `--html FILE`
the self-contained HTML report with figures (console/html_report.py; `--figures DIR` also writes
each figure as PNG and SVG).

Every figure comes from the results layer (stats/results: the stored run metrics of aggregate
runs; docs/results.md). Each cell shows the median across repeats with its [min - max] range and
CV, never a single best run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from console.commands.db import add_db_arg
from console.commands.plan import plan_for_arg
from console.output import FORMATS, print_rows

if TYPE_CHECKING:
    from stats.results.plan_results import PlanResults


def register(sub) -> None:
    p = sub.add_parser("report", help="per-engine concurrency table (median [min-max] cv across repeats); "
                                      "--html FILE: the HTML report with figures")
    p.add_argument("plan", help="frozen plan file or hash")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.add_argument("--html", metavar="FILE", help="write the self-contained HTML report (figures inline) to FILE")
    p.add_argument("--figures", metavar="DIR", help="with --html: also write every figure as PNG and SVG into DIR")
    add_db_arg(p)
    p.set_defaults(func=cmd_report)


def table_rows(res: PlanResults) -> tuple[list[str], list[list[Any]]]:
    """The machine-readable report (--format csv/json/...): one row per cell, raw spread values."""
    from stats.results.report import columns, service_columns

    names = (*columns(), *service_columns())  # both tables' metrics (goodput None without an SLO)
    rows: list[list[Any]] = []
    for cell in res.cells:
        row: list[Any] = [cell.engine, cell.concurrency, res.limits.get(cell.engine), cell.n]
        for f in names:
            s = cell.spreads[f]
            row += [s.median, s.min, s.max, s.cv]
        rows.append(row)
    cols = ["engine", "concurrency", "admission_limit", "repeats"] + [f"{f}_{k}" for f in names
                                                                      for k in ("median", "min", "max", "cv")]
    return cols, rows


def rule_lines(store, plan_hash: str) -> list[str]:
    """The plan's throughput verdicts, each cell as the test it applied, then its noise note
    (stats/rule_noise.py) naming the runs with host steal or repeat spread above the thresholds."""
    from stats.results.plan_results import load_verdicts
    from stats.rule_noise import noise_summary, store_rule_noise

    out = []
    for v in load_verdicts(store, plan_hash, documents=True):
        if v.kind != "throughput":
            continue
        out.append(f"throughput rule {v.name}: {v.verdict} ({v.verdict_id})")
        out += [f"  C{c.concurrency}: ratio {c.formatted('point')}, {c.test}" for c in v.checks]
        rule = (v.document or {}).get("decision_rule") or {}
        notes = store_rule_noise(store, (v.document or {}).get("checks") or [], str(rule.get("candidate")),
                                 str(rule.get("reference")))
        if notes:
            out += [f"  {noise_summary(notes)}:"] + [f"    {n.text()}" for n in notes]
    return out


def reconciliations(store, res) -> list:
    """Each aggregate run's reconciliation, in report order (stats/server_reconcile.py)."""
    from stats.server_reconcile import reconcile_run

    return [reconcile_run(store, rid) for c in res.cells for rid in c.run_ids]


def print_reconciliation(recs: list, console) -> None:
    """The server-vs-client table (docs/results.md, "Server metrics"): one row per pair of each run
    with server samples; a line per run says what the pairs rest on."""
    from stats.server_reconcile import COLUMNS, pair_row, summary_line

    if not recs:
        return
    rows = [[rec.run_id] + pair_row(p) for rec in recs for p in rec.pairs]
    if rows:
        print_rows(list(COLUMNS), rows, console=console,
                   title="Server metrics: the engine's own figures beside the console's (flag: beyond tolerance)")
    for rec in recs:
        console.print(summary_line(rec), highlight=False, markup=False)


def print_quality_load(ql, console) -> None:
    """Quality under load (docs/results.md): the table the HTML report and the TUI show, from the
    one computation (stats/results/quality_load.py): each engine's WER, SIM and MOS at every
    measured concurrency, the estimate and its percentile bootstrap interval, or why none."""
    if not ql.cells:
        return
    from stats.quality.metrics import NAMES as QUALITY_NAMES  # wer, sim, mos

    metrics = QUALITY_NAMES
    rows = [[c.engine, f"C{c.concurrency}" + ("*" if c.concurrency in ql.gated else ""), c.runs]
            + [" ".join(x for x in (c.text(m).value, c.text(m).interval) if x) for m in metrics] for c in ql.cells]
    console.print(f"Quality under load: {ql.caption()}", highlight=False, markup=False)
    print_rows(["engine", "C", "runs", *map(ql.header, metrics)], rows, console=console)


def cmd_report(args) -> int:
    if args.figures and not args.html:
        from data.errors import CampaignError
        raise CampaignError("--figures DIR goes with --html FILE")
    from console.output import output_console
    from data.snapshot import open_or_snapshot
    from data.store import resolve_db_path
    from collections import Counter

    from data.candidates import plan_record
    from data.imported import MARK, imported_rows
    from data.launches import engine_identities
    from data.manifest import plan_lineage
    from stats.metrics import METRICS_VERSION
    from stats.results.plan_results import load_plan_results
    from stats.results.provenance import provenance
    from stats.results.quality_load import quality_under_load
    from stats.results.report import column_label, columns, concurrency_label, service_columns

    with open_or_snapshot(resolve_db_path(args.db)) as store:  # a snapshot while a campaign runs
        plan = plan_for_arg(store, args.plan)
        res = load_plan_results(store, plan)
        identities = engine_identities(store, plan.hash)  # what code each engine ran (docs/engines.md)
        imported = imported_rows(store)  # outside figures: shown marked, never aggregated (data/imported.py)
        cands, attempts = plan_record(store, plan_lineage(store, plan.hash))  # docs/results.md, "Candidates"
        where = provenance(store, plan)  # host, GPU, driver, time span (docs/results.md, "The report's header")
        rules = rule_lines(store, plan.hash)
        recs = reconciliations(store, res)  # the engines' own figures beside the console's
        quality = quality_under_load(store, plan)  # the HTML report's and the TUI's table
        if args.html:
            from console.html_report import write_report
            out = write_report(store, res, Path(args.html), Path(args.figures) if args.figures else None)
            print(f"{out.path}: HTML report of plan {plan.hash[:12]}, {len(out.figures)} figures"
                  + (f"; PNG and SVG in {args.figures}" if args.figures else ""))
            return 0
    if args.format != "table":
        cols, rows = table_rows(res)
        print_rows(cols, rows, args.format)
        return 0
    console = output_console()
    console.print(f"[bold]{plan.name}[/bold] plan {plan.hash[:12]}  metrics v{METRICS_VERSION}  "
                  f"audio tok/s = {plan.metrics.throughput_scale:g} x audio s / wall s (codec tokens, not text)  "
                  f"(median \\[min-max] cv across measured repeats)", highlight=False)
    console.print(f"host {where.host} · GPU {'; '.join(where.gpus)} · driver {', '.join(where.drivers) or 'not recorded'}"
                  f" · runs {where.time_span()}", highlight=False, markup=False)
    for engine in plan.engines:
        limit = res.limits.get(engine.name)
        rows = [[concurrency_label(c.concurrency, limit), c.n] + [c.text(f).one_line() for f in columns()]
                for c in res.cells_of(engine.name)]
        print_rows(["C", "n"] + [column_label(f, plan.metrics.throughput_scale) for f in columns()], rows,
                   console=console,
                   title=f"{engine.name} ({engine.adapter}, profile {engine.profile or '-'}"
                         + (f", admits {limit} at once: larger C queues in the engine" if limit is not None else "")
                         + "".join(f", {label}" for label in identities.get(engine.name, []))
                         + (", PRECISION CHANGED" if engine.precision_change else "") + ")")
        service = service_columns(plan)
        print_rows(["C", "n"] + [column_label(f, plan.metrics.throughput_scale) for f in service],
                   [[concurrency_label(c.concurrency, limit), c.n] + [c.text(f).one_line() for f in service]
                    for c in res.cells_of(engine.name)], console=console,
                   title=f"{engine.name}: continuity pass rates by player model (docs/metrics.md)"
                         + (", goodput under the plan's SLO" if plan.slo is not None else ""))
    print_reconciliation(recs, console)
    print_quality_load(quality, console)
    if res.left_out:
        console.print("not in aggregates: " + ", ".join(o.label() for o in res.left_out), highlight=False)
    if imported:
        print_rows(["engine", "C", "metric", "value", "unit", "source", "reference", "status"],
                   [[r["engine"], r["concurrency"], r["metric"], r["value_text"], r["unit"], r["source"], r["reference"],
                     MARK] for r in imported], console=console,
                   title=f"Imported results ({MARK}: in no aggregate, gate, rule or verdict)")
    print_rows(["candidate", "config", "status", "reason", "launches", "startup failures", "runs", "verdicts"],
               [[c["name"], c["config_sha256"][:12], c["status"], c["reason"] or "-", c["launches"],
                 len(c["startup_failures"]), len(c["runs"]), "; ".join(c["verdicts"]) or "-"] for c in cands],
               console=console, title="Candidates and attempts (`campaign candidates` for every configuration)")
    for line in rules:
        console.print(line, highlight=False, markup=False)
    if plan.claims is not None:  # docs/plans.md, "Claims"
        c = plan.claims
        console.print(f"claim ({c.status}): {c.scope}" + (f"; not claimed: {'; '.join(c.non_claims)}" if c.non_claims
                                                           else ""), highlight=False)
    console.print(f"attempts: {len(attempts)} ("
                  + ", ".join(f"{n} {o}" for o, n in sorted(Counter(a['outcome'] for a in attempts).items())) + ")",
                  highlight=False)
    return 0
