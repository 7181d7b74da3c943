"""`campaign report PLAN --html FILE [--figures DIR]`: one self-contained HTML file (no network,
no script; figures inline as base64 PNG) with the report tables, every figure of console/figures.py,
the verdicts with their checks, the plan hash, the audit head and the metric definitions
(docs/results.md). Every number comes from the results layer; the tables use the same spread text as
`campaign report`."""

from __future__ import annotations

import base64
import html
import io
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

from console import figures as F
from data.anchor import current_head
from data.errors import CampaignError, first_line
from data.pool_status import with_evidence
from data.imported import MARK, imported_rows
from data.store import Store
from stats.metrics import METRICS_VERSION, registry
from stats.rule_noise import noise_summary, store_rule_noise
from console.equivalence_report import equivalence_figure, equivalence_tables, family_equivalence
from stats.results.plan_results import PlanResults, VerdictResult, load_verdicts
from stats.results.provenance import provenance
from stats.quality.metrics import NAMES as QUALITY_NAMES  # wer, sim, mos
from stats.results.quality_load import QualityLoad, quality_under_load
from stats.results.replicates import CheckReplicates, document_replicates
from stats.results.report import column_label, columns, concurrency_label, service_columns
from stats.results.series import gpu_series, request_rtfs


@dataclass
class HtmlReport:
    path: Path
    figures: list[F.FigureOut] = field(default_factory=list)


def build_figures(store: Store, res: PlanResults, verdicts: list[VerdictResult],
                  quality: QualityLoad | None = None) -> list[F.FigureOut]:
    quality = quality_under_load(store, res.plan) if quality is None else quality
    run_ids = [rid for c in res.cells for rid in c.run_ids]
    reps: dict[str, list[CheckReplicates]] = {v.verdict_id: document_replicates(v.document)
                                              for v in verdicts if v.kind == "quality" and v.document}
    with matplotlib.rc_context(F.STYLE):
        figs = [
            F.throughput_figure(res, imported_rows(store)),
            F.latency_figure(res),
            F.rtf_figure(res, request_rtfs(store, run_ids)),
            F.stalls_failures_figure(res),
            F.gpu_figure(res, gpu_series(store, run_ids)),
            F.forest_figure(verdicts),
            F.replicates_figure(verdicts, reps),
            F.ratios_figure(verdicts),
            F.coverage_figure(verdicts),
            F.quality_load_figure(quality),
            equivalence_figure(verdicts),
        ]
    for f in figs:
        F.fit_labels(f.figure)  # no two tick labels overlap, at any engine count
    return figs


def _png(fig) -> bytes:
    buf = io.BytesIO()
    with matplotlib.rc_context(F.STYLE):
        fig.savefig(buf, format="png")
    return buf.getvalue()


def _e(text: object) -> str:
    return html.escape(str(text))


def _table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    out = [f'<table class="{cls}"><thead><tr>' + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr></thead><tbody>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>")
    return "".join(out) + "</tbody></table>"


def report_tables(res: PlanResults) -> str:
    plan = res.plan
    parts = []
    for e in plan.engines:
        limit = res.limits.get(e.name)
        tables = []
        for names in (columns(), service_columns(plan)):  # the registry's report and report_service tables
            rows = []
            for c in res.cells_of(e.name):
                cells = [_e(concurrency_label(c.concurrency, limit)), str(c.n)]
                for f in names:
                    t = c.text(f)
                    cells.append(f'<span class="med">{_e(t.median)}</span>'
                                 + (f'<br><span class="rng">{_e(t.range)}</span>' if t.range else ""))
                rows.append(cells)
            tables.append(_table(["C", "n"] + [column_label(f, plan.metrics.throughput_scale) for f in names], rows,
                                 "report"))
        parts.append(f"<h3>{_e(e.name)} ({_e(e.adapter)}, profile {_e(e.profile or '-')}"
                     + (f", admits {limit} at once" if limit is not None else "") + ")</h3>" + tables[0]
                     + "<p class=note>continuity pass rates by player model (docs/metrics.md)"
                     + (", goodput under the plan's SLO" if plan.slo is not None else "") + "</p>" + tables[1])
    if res.left_out:
        parts.append(f"<p class=note>not in aggregates: {_e(', '.join(o.label() for o in res.left_out))}</p>")
    return "".join(parts)


def server_metrics_section(store: Store, res: PlanResults) -> str:
    """Each aggregate run's server figures beside the client's (stats/server_reconcile.py), a
    flagged pair marked; a line per run says what the pairs rest on."""
    from stats.server_reconcile import COLUMNS, FLAG, pair_row, reconcile_run, summary_line

    recs = [reconcile_run(store, rid) for c in res.cells for rid in c.run_ids]
    rows = []
    for rec in recs:
        for p in rec.pairs:
            cells = [f"<code>{_e(rec.run_id)}</code>"] + [_e(x) for x in pair_row(p)]
            if p.flagged:
                cells[-1] = f'<b class="flag">{_e(FLAG)}</b>'
            rows.append(cells)
    notes = "".join(f"<li>{_e(summary_line(r))}</li>" for r in recs)
    return ((_table(list(COLUMNS), rows, "reconcile") if rows else "<p class=note>no server samples in these runs</p>")
            + (f"<ul class=note>{notes}</ul>" if notes else "")
            + "<p class=note>Server: the change of the engine's own families between the run's first and last scrape; "
              "client: the same requests (warm-ups included), each figure defined as the engine defines it "
              "(docs/results.md, \"Server metrics\").</p>")


def engines_table(store: Store, plan) -> str:
    """What each engine was: adapter, revision, the code identities its launches recorded (commit,
    tree, patch, or installed distribution; docs/engines.md) and a precision change."""
    from data.launches import engine_identities

    identities = engine_identities(store, plan.hash)
    rows = [[_e(e.name), _e(e.adapter), f"<code>{_e(e.revision or '-')}</code>",
             "<br>".join(f"<code>{_e(x)}</code>" for x in identities.get(e.name, [])) or "not recorded (no source given)",
             "CHANGED" if e.precision_change else "-"] for e in plan.engines]
    return _table(["engine", "adapter", "revision", "code identity (launches)", "precision"], rows, "meta")


def imported_table(rows: list[dict]) -> str:
    """Outside figures beside the measured ones, marked: none of them is in any aggregate above."""
    if not rows:
        return ""
    body = [[_e(r["engine"]), _e(r["concurrency"] if r["concurrency"] is not None else "-"), _e(r["metric"]),
             _e(r["value_text"]), _e(r["unit"]), _e(r["source"]), _e(r["reference"]), f"<code>{_e(r['import_id'])}</code>",
             _e(MARK)] for r in rows]
    return (f"<h3>Imported results ({_e(MARK)})</h3><p class=note>Figures published elsewhere, kept as hypotheses: "
            "no aggregate, gate, rule or verdict uses them (docs/results.md).</p>"
            + _table(["engine", "C", "metric", "value", "unit", "source", "reference", "import", "status"], body, "report"))


def quality_load_section(ql: QualityLoad) -> str:
    """Quality under load (docs/results.md): each engine's WER, SIM and MOS at every measured
    concurrency with its percentile bootstrap interval over utterance ids, or why a cell has none."""
    metrics = QUALITY_NAMES
    rows = []
    for c in ql.cells:
        cells = [_e(c.engine), _e(f"C{c.concurrency}" + (" (gated)" if c.concurrency in ql.gated else "")), str(c.runs)]
        for m in metrics:
            t = c.text(m)
            cells.append(f'<span class="med">{_e(t.value)}</span>'
                         + (f'<br><span class="rng">{_e(t.interval)}</span>' if t.interval else ""))
        rows.append(cells)
    head = ["engine", "C", "runs"] + [ql.header(m) for m in metrics]
    return ('<div id="quality-load">'
            f"<p class=note>The plan's quality runs (measured, complete, not excluded; pool {_e(ql.pool or 'any')}) at "
            f"every measured concurrency; gated: a concurrency the quality gate judges. Each figure is "
            f"{_e(ql.method())}</p>"
            + _table(head, rows, "report") + "</div>")


def noise_note(store: Store, v: VerdictResult) -> str:
    """A throughput verdict's noise note (stats/rule_noise.py): the runs with host steal or a repeat
    spread above the thresholds, named; empty when there is none."""
    if v.kind != "throughput" or not v.document:
        return ""
    rule = v.document.get("decision_rule") or {}
    notes = store_rule_noise(store, v.document.get("checks") or [], str(rule.get("candidate")), str(rule.get("reference")))
    if not notes:
        return ""
    return (f'<p class="noise">{_e(noise_summary(notes))}:</p><ul class="noise">'
            + "".join(f"<li>{_e(n.text())}</li>" for n in notes) + "</ul>")


def verdict_tables(store: Store, verdicts: list[VerdictResult]) -> str:
    if not verdicts:
        return "<p>No verdicts issued for this plan.</p>"
    parts = []
    for v in verdicts:
        if v.kind == "equivalence":
            parts.append(equivalence_tables([v]))
            continue
        rows = [[_e(c.concurrency), _e(c.label), _e(c.unit), f'<b class="{_e(c.status)}">{_e(c.status)}</b>',
                 _e(c.formatted("n_ids")), _e(c.formatted("point")), _e(c.formatted("bound")),
                 _e(c.formatted("margin")), _e(c.formatted("base_value")), _e(c.formatted("cand_value")),
                 _e(c.test + (f"; {c.reason}" if c.reason else ""))] for c in v.checks]
        parts.append(f'<h3>{_e(v.verdict_id)}: <b class="{_e(v.verdict)}">{_e(with_evidence(v.verdict, v.evidence))}</b></h3>'
                     f"<p>{_e(v.kind)} · {_e(v.name or '-')} · issued {_e(v.created)} UTC · {_e(v.method or '-')}"
                     + (f" · B={v.draws} seed={v.seed}" if v.draws else "")
                     + (f" · evidence: {_e(v.evidence)} ({_e(v.evidence_summary)})" if v.evidence_summary else "") + "</p>"
                     + _table(["C", "check", "unit", "status", "ids", "estimate", "bound", "margin", "baseline",
                               "candidate", "test applied; note"], rows, "checks")
                     + noise_note(store, v))
    return "".join(parts)


def record_section(store: Store, plan) -> str:
    """Candidates and attempts (docs/results.md, "Candidates"): every configuration tried under the
    plan's family with its fate, every attempt with its outcome, and the plan's claim."""
    from data.candidates import plan_record
    from data.manifest import plan_lineage

    cands, attempts = plan_record(store, plan_lineage(store, plan.hash))
    parts = []
    if plan.claims is not None:
        c = plan.claims
        parts.append(f"<p>claim ({_e(c.status)}): {_e(c.scope)}"
                     + (f"<br>not claimed: {_e('; '.join(c.non_claims))}" if c.non_claims else "") + "</p>")
    rows = [[_e(c["name"]), f"<code>{_e(c['config_sha256'][:12])}</code>", _e(c["origin"]),
             f'<b class="{"FAIL" if c["status"] == "rejected" else "PASS" if c["status"] == "selected" else ""}">'
             f'{_e(c["status"])}</b>', _e(c["reason"] or "-"), _e(c["hypothesis"] or "-"), str(c["launches"]),
             str(len(c["startup_failures"])), str(len(c["runs"])), _e("; ".join(c["verdicts"]) or "-")] for c in cands]
    parts.append(_table(["candidate", "config", "origin", "status", "reason", "hypothesis", "launches",
                         "startup failures", "runs", "verdicts"], rows, "checks") if rows else
                 "<p>No candidate recorded for this plan.</p>")
    arows = [[_e(str(a["created_at"])[:19]), _e(a["engine"]), _e(a["outcome"]), _e(a["reason"] or "-"),
              f"<code>{_e(a['launch_id'] or '-')}</code>", str(a["runs"]), f"<code>{_e((a['config_sha256'] or '-')[:12])}</code>"]
             for a in attempts]
    if arows:
        parts.append(_table(["at (UTC)", "engine", "outcome", "reason", "launch", "runs", "candidate"], arows, "checks"))
    return "".join(parts)


def definitions() -> str:
    """The registry's definitions (stats/metrics/registry.py), one row per metric."""
    rows = [[_e(m.label), f"<code>{_e(m.name)}</code>", f"<code>{_e(m.sql_column)}</code>", _e(m.unit), _e(m.doc)]
            for m in registry.METRICS]
    return _table(["metric", "field", "run_summary column", "unit", "definition"], rows, "defs")


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;max-width:1280px;color:#222}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}h3{font-size:14px}
table{border-collapse:collapse;font-size:12px;margin:6px 0 14px}th,td{border:1px solid #ddd;padding:3px 6px;text-align:right}
th{background:#f4f4f4}table.defs td,table.checks td:last-child{text-align:left}.rng{color:#777;font-size:11px}
figure{margin:18px 0;border:1px solid #eee;padding:8px}figure img{max-width:100%;height:auto;display:block}
figcaption{font-size:12px;color:#444;margin-top:4px}figcaption b{font-size:13px;color:#111}
.PASS{color:#1a7f1a}.FAIL{color:#c62828}.INCONCLUSIVE{color:#9a8a00}code{font-size:11px}.meta td{text-align:left}
.note{color:#666;font-size:12px}.noise{color:#8a5a00;font-size:12px;margin:2px 0}.flag{color:#c62828}
"""


def render_html(store: Store, res: PlanResults, verdicts: list[VerdictResult], figs: list[F.FigureOut],
                pngs: dict[str, bytes], quality: QualityLoad | None = None) -> str:
    plan = res.plan
    quality = quality_under_load(store, plan) if quality is None else quality
    head = current_head(store)
    where = provenance(store, plan)
    meta = _table(["field", "value"], [
        ["plan", _e(plan.name)], ["plan hash", f"<code>{_e(plan.hash)}</code>"], ["frozen", _e(res.frozen_at + " UTC")],
        ["host", _e(where.host)], ["GPU", _e("; ".join(where.gpus))],
        ["driver", _e(", ".join(where.drivers) or "not recorded")],
        ["engines", "<br>".join(f"<b>{_e(name)}</b>: " + (", ".join(f"<code>{_e(x)}</code>" for x in ids)
                                                          or "code identity not recorded (no source given)")
                                for name, ids in where.engines.items())],
        ["runs", _e(where.time_span())],
        ["audit head", f"seq {head.length}, <code>{_e(head.head_hash)}</code>"],
        ["metrics version", _e(METRICS_VERSION)],
        ["metric parameters", _e(", ".join(f"{k} = {v:g}" for k, v in plan.metrics.as_dict().items()))],
        ["aggregates", "measured, complete, not excluded runs of the sweep pool; median [min-max] cv across repeats"],
    ], "meta")
    body = [f"<h1>{_e(plan.name)}: campaign report</h1>", f'<div id="report-header">{meta}</div>', "<h2>Engines</h2>", engines_table(store, plan),
            "<h2>Report</h2>", report_tables(res), imported_table(imported_rows(store)),
            "<h2>Quality under load</h2>", quality_load_section(quality),
            '<h2 id="server-metrics">Server metrics</h2>', server_metrics_section(store, res), "<h2>Figures</h2>"]
    for f in figs:
        data = base64.b64encode(pngs[f.key]).decode()
        body.append(f'<figure id="fig-{f.key}"><img alt="{_e(f.title)}" src="data:image/png;base64,{data}">'
                    f"<figcaption><b>{_e(f.title)}</b>. {_e(f.caption)}</figcaption></figure>")
    body += ["<h2>Verdicts</h2>", verdict_tables(store, verdicts), "<h2>Candidates and attempts</h2>",
             record_section(store, plan), "<h2>Metric definitions</h2>", definitions(),
             "<p class=note>Definitions: docs/results.md, docs/statistics.md and docs/timing.md of the console.</p>"]
    return ("<!DOCTYPE html><html lang=en><head><meta charset=utf-8>"
            f"<title>{_e(plan.name)} report {_e(plan.hash[:12])}</title><style>{CSS}</style></head><body>"
            + "".join(body) + "</body></html>\n")


def write_report(store: Store, res: PlanResults, path: Path, figures_dir: Path | None = None) -> HtmlReport:
    """Write the HTML report (and each figure as PNG and SVG into `figures_dir`)."""
    verdicts = load_verdicts(store, res.plan.hash, documents=True)
    verdicts += [v for v in family_equivalence(store, res.plan.hash) if v.plan_hash != res.plan.hash]
    quality = quality_under_load(store, res.plan)
    figs = build_figures(store, res, verdicts, quality)
    pngs = {f.key: _png(f.figure) for f in figs}
    text = render_html(store, res, verdicts, figs, pngs, quality)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if figures_dir is not None:
            figures_dir.mkdir(parents=True, exist_ok=True)
            for f in figs:
                (figures_dir / f"{f.key}.png").write_bytes(pngs[f.key])
                with matplotlib.rc_context(F.STYLE):
                    f.figure.savefig(figures_dir / f"{f.key}.svg", format="svg", metadata={"Date": None})
    except OSError as exc:
        raise CampaignError(f"{exc.filename or path}: cannot write ({first_line(exc)})") from None
    return HtmlReport(path, figs)
