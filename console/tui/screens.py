"""The run detail screen: per-request table, chunk-arrival timeline, GPU sparklines."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Label, Sparkline, Static

from console.tui.data import RunDetail, load_run_detail, open_read_only
from console.tui.messages import RunDetailFailed, RunDetailLoaded
from console.tui.widgets import (
    FAIL_STYLE,
    SECONDS_DEF,
    GpuPanel,
    arrival_bins,
    fmt,
    header,
    num,
    outcome_text,
    stalls_cell,
    status_text,
)
from data.errors import CampaignError
from stats.metrics import METRICS_BY_NAME
from stats.metrics.registry import DETAIL, DETAIL_DELIVERY, DETAIL_SERVICE, metrics_on
from stats.server_reconcile import COLUMNS as RECONCILE_COLUMNS
from stats.server_reconcile import Reconciliation, pair_row, summary_line

REQUEST_COLUMNS = ("#", "utterance", "outcome", header(METRICS_BY_NAME["ttfa_p50_s"], "TTFA"),
                   header(METRICS_BY_NAME["ttfb_p50_s"], "TTFB"), header(METRICS_BY_NAME["rtf_mean"], "RTF"),
                   "chunks", header(METRICS_BY_NAME["audio_s_ok"], "audio"), "stalls",
                   header(METRICS_BY_NAME["stall_total_s"], "stall"), "detail")
TIMELINE_BINS = 120


def server_text(rec: Reconciliation | None) -> Text:
    """The reconciliation of the run (docs/results.md, "Server metrics"): one line per pair, a
    flagged pair in the failure style."""
    if rec is None:
        return Text("")
    out = Text(summary_line(rec) + "\n", style="dim")
    if not rec.pairs:
        return out
    rows = [pair_row(p) for p in rec.pairs]
    heads = list(RECONCILE_COLUMNS[1:])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(heads)]
    out.append("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(heads, widths))).rstrip()
               + "\n", style="bold")
    for p, r in zip(rec.pairs, rows):
        line = "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))).rstrip()
        out.append(line + "\n", style=FAIL_STYLE if p.flagged else "")
    return out


class RunDetailScreen(Screen):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("r", "refresh", "Refresh"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, db_path: Path, run_id: str) -> None:
        super().__init__()
        self.db_path = db_path
        self.run_id = run_id
        self.detail: RunDetail | None = None

    def compose(self) -> ComposeResult:
        yield Static(Text(f"run {self.run_id}", style="bold"), id="detail-title")
        yield Static("loading ...", id="detail-metrics")
        yield Static("", id="detail-server")
        yield DataTable(id="requests", cursor_type="row")
        yield Label("", id="timeline-label")
        yield Sparkline([], summary_function=sum, id="timeline")
        yield GpuPanel(id="detail-gpu")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#requests", DataTable)
        for i, col in enumerate(REQUEST_COLUMNS):
            table.add_column(col if i in (1, 2, 10) else Text(col, justify="right"), key=col)
        self.load()

    def action_refresh(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, name="load-run-detail")
    def load(self) -> None:
        try:
            with open_read_only(self.db_path) as store:
                detail = load_run_detail(store, self.run_id)
        except CampaignError as exc:
            self.post_message(RunDetailFailed(self.run_id, str(exc)))
            return
        self.post_message(RunDetailLoaded(detail))

    def on_run_detail_failed(self, msg: RunDetailFailed) -> None:
        self.query_one("#detail-metrics", Static).update(Text(msg.message, style=FAIL_STYLE))

    def on_run_detail_loaded(self, msg: RunDetailLoaded) -> None:
        d = self.detail = msg.detail
        run, m = d.run, d.metrics
        title = Text.assemble((f"run {run['run_id']}", "bold"), f"   {run['engine']}  C={run['concurrency']}  "
                              f"{run['kind']} #{run['repeat_index']}  ", status_text(run["status"]))
        if run.get("identity"):
            title.append(f"   {run['identity']}")
        if run.get("precision_change"):
            title.append("   PRECISION CHANGED", style=FAIL_STYLE)
        if run.get("excluded"):
            title.append(f"   excluded: {run['excluded']}", style=FAIL_STYLE)
        if run.get("note"):
            title.append(f"   {run['note']}", style="dim")
        self.query_one("#detail-title", Static).update(title)
        line = Text()
        for i, surface in enumerate((DETAIL, DETAIL_DELIVERY, DETAIL_SERVICE)):  # the registry's detail lines
            if i:
                line.append("\n")
            for md in metrics_on(surface):
                if md.needs_slo and m.slo_ttfa_ms is None:
                    continue  # goodput: the run's plan set no SLO
                name = md.name
                value = m.get(name)
                style = "yellow" if (name.startswith("stall") or name == "truncated") and value else "bold"
                line.append(f"{md.label} ")
                line.append(f"{md.format(value)}{(' ' + md.unit) if md.unit else ''}", style=style)
                line.append("   ")
        line.append("requests ")
        line.append(f"{fmt('completed', m.completed)} ok", style="bold")
        if m.failed:
            line.append("  ")
            line.append(f"{fmt('failed', m.failed)} failed: " + ", ".join(
                f"{k} {v}" for k, v in m.failures_by_class.items()), style=FAIL_STYLE)
        self.query_one("#detail-metrics", Static).update(line)
        self.query_one("#detail-server", Static).update(server_text(d.reconciliation))
        table = self.query_one("#requests", DataTable)
        table.clear()
        for r in d.requests:
            rm = r.metrics
            pb = rm.playback
            table.add_row(
                num(f"{r.index}{'w' if r.warmup else ''}"), r.utt_id, outcome_text(r.outcome),
                num(fmt("ttfa_p50_s", rm.ttfa_s)), num(fmt("ttfb_p50_s", rm.ttfb_s)), num(fmt("rtf_mean", rm.rtf)),
                num(fmt("chunks_min", rm.audio_chunks)), num(fmt("audio_s_ok", rm.audio_s)),
                stalls_cell(pb.stall_count), num(fmt("stall_total_s", pb.stall_total_s), "yellow" if pb.stall_count else None),
                Text(r.detail or "", style=FAIL_STYLE if r.outcome != "ok" else "dim"),
                key=str(r.index),
            )
        if d.gpu:
            g = d.gpu[0]
            span = g.t_s[-1] if g.t_s else 0.0
            note = f"GPU {g.gpu_index}: {len(g.t_s)} samples over {SECONDS_DEF.format(span)} s"
            self.query_one(GpuPanel).show(g.values, note)
        else:
            self.query_one(GpuPanel).show({}, f"GPU: no samples ({d.telemetry_status or 'none recorded'})")
        self.show_timeline(0)

    @on(DataTable.RowHighlighted, "#requests")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_timeline(event.cursor_row)

    def show_timeline(self, row: int) -> None:
        if not self.detail or not self.detail.requests:
            self.query_one("#timeline-label", Label).update("no requests stored")
            return
        r = self.detail.requests[min(row, len(self.detail.requests) - 1)]
        span = max((t for t, _ in r.arrivals), default=0.0)
        label = Text(f"request {r.index} ({r.utt_id}) audio arrival, t_send -> last chunk "
                     f"{SECONDS_DEF.format(span)} s, {len(r.arrivals)} audio chunks")
        if r.metrics.playback.stall_count:
            label.append(f"  {r.metrics.playback.stall_count} stall(s)", style="yellow")
        self.query_one("#timeline-label", Label).update(label)
        self.query_one("#timeline", Sparkline).data = arrival_bins(r.arrivals, TIMELINE_BINS, span or None)
