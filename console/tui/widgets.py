"""Formatting helpers and composite widgets.

Every number goes through a `MetricDef.format`: run metrics through the registry in
stats.metrics, the few figures that are not run metrics (GPU samples, gate bounds) through
MetricDefs declared here as data, so units and precision live in one place per figure.
Colour carries meaning only: failures red, stalls yellow, PASS green.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Label, ProgressBar, Sparkline, Static

from console.live import LiveInflight, LiveSnapshot, live_metrics
from stats.metrics import METRICS_BY_NAME, MetricDef
from stats.results.report import SpreadText

FAIL_STYLE = "bold red"
STALL_STYLE = "yellow"
PASS_STYLE = "bold green"
DIM = "dim"

# figures that are not run metrics, declared as data like the registry
GPU_DEFS: dict[str, MetricDef] = {
    "util_gpu_pct": MetricDef("util_gpu_pct", "GPU util", "%", ".0f", None, True),
    "power_w": MetricDef("power_w", "power", "W", ".0f", None, True),
    "sm_clock_mhz": MetricDef("sm_clock_mhz", "SM clock", "MHz", ".0f", None, True),
}
TIME_DEF = MetricDef("t", "time", "s", ".1f", None, False)
COUNT_DEF = MetricDef("n", "count", "", "d", None, False)
SECONDS_DEF = MetricDef("s", "seconds", "s", ".2f", None, False)


def display_path(path: str | Path) -> str:
    """A path as the user would type it: relative when under the working directory."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def run_label(run_id: str, plan_hash: str | None) -> str:
    """A run id without the plan-hash prefix every run of its plan shares (console/runner.py names
    runs '<plan hash[:8]>-<engine>-c<C>-<kind><repeat>-<random>'): the part that tells rows apart.
    The run detail screen shows the full id."""
    prefix = f"{plan_hash[:8]}-" if plan_hash else ""
    return run_id[len(prefix):] if prefix and run_id.startswith(prefix) and len(run_id) > len(prefix) else run_id


def fmt(name: str, value: Any) -> str:
    """A run metric formatted by the registry."""
    return METRICS_BY_NAME[name].format(value)


def header(d: MetricDef, label: str | None = None) -> str:
    label = label or d.label
    return f"{label} ({d.unit})" if d.unit else label


def truncated_cell(n: int) -> Text:
    """Requests cut by a token limit: ok on the wire, but not the whole utterance."""
    return num(str(n), STALL_STYLE if n else None)


def spread_cell(s: SpreadText, style: str | None = None) -> Text:
    """A report cell's spread as the median over a dim second line with the range, so the columns
    stay narrow (the parts come typed from the results layer, never parsed from text)."""
    cell = Text(s.median, style=style or "", justify="right")
    if s.range:
        cell.append("\n" + s.range, style=style or "dim")
    return cell


def num(text: str, style: str | None = None) -> Text:
    """A right-aligned numeric cell."""
    return Text(text, justify="right", style=style or "")


def outcome_text(outcome: str) -> Text:
    return Text(outcome, style="" if outcome == "ok" else FAIL_STYLE)


def verdict_text(verdict: str, evidence: str | None = None) -> Text:
    """A verdict, styled; a quality verdict's `evidence` class beside it: `PASS (reused prompts)`."""
    from data.pool_status import with_evidence

    style = {"PASS": PASS_STYLE, "FAIL": FAIL_STYLE, "INCONCLUSIVE": STALL_STYLE}.get(verdict, "")
    return Text(with_evidence(verdict, evidence), style=style)


def status_text(status: str) -> Text:
    style = {"complete": "", "running": "bold", "incomplete": STALL_STYLE, "failed": FAIL_STYLE}.get(status, "")
    return Text(status, style=style)


# Run metrics whose non-zero value a table marks (everything else is a plain number).
ALARM_STYLES = {"stall_count": STALL_STYLE, "failed": FAIL_STYLE, "truncated": STALL_STYLE}


def metric_cell(name: str, value: Any) -> Text:
    """A run metric as a right-aligned cell, formatted by the registry, marked when it alarms."""
    return num(fmt(name, value), ALARM_STYLES.get(name) if value else None)


def stalls_cell(count: int | None) -> Text:
    return num(fmt("stall_count", count), STALL_STYLE if count else None)


def failed_cell(count: int | None) -> Text:
    return num(fmt("failed", count), FAIL_STYLE if count else None)


def arrival_bins(arrivals: Sequence[tuple[float, float]], bins: int, span_s: float | None = None) -> list[float]:
    """Audio seconds delivered per time bin from t_send to the last arrival (or span_s): the
    chunk-arrival timeline of one request."""
    if not arrivals:
        return [0.0] * bins
    span = span_s or max(t for t, _ in arrivals) or 1e-9
    out = [0.0] * bins
    for t, audio in arrivals:
        out[min(bins - 1, max(0, int(t / span * bins)))] += audio
    return out


def series_range(d: MetricDef, values: Iterable[float | None]) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "no samples"
    return f"{d.format(min(vals))}-{d.format(max(vals))} {d.unit}".rstrip()


class SparkRow(Horizontal):
    """label | sparkline | min-max."""

    DEFAULT_CSS = """
    SparkRow { height: 1; }
    SparkRow > .spark-label { width: 14; }
    SparkRow > Sparkline { width: 1fr; }
    SparkRow > .spark-range { width: 22; text-align: right; }
    """

    def __init__(self, d: MetricDef, id: str | None = None) -> None:
        super().__init__(id=id)
        self.d = d

    def compose(self) -> ComposeResult:
        yield Label(header(self.d, self.d.label).split(" (")[0], classes="spark-label")
        yield Sparkline([], summary_function=max)
        yield Label("", classes="spark-range")

    def show(self, values: Sequence[float | None]) -> None:
        data = [float(v) for v in values if v is not None]
        self.query_one(Sparkline).data = data
        self.query_one(".spark-range", Label).update(series_range(self.d, values))


class GpuPanel(Vertical):
    """GPU utilisation, power and SM clock sparklines."""

    DEFAULT_CSS = """
    GpuPanel { height: auto; }
    """

    def compose(self) -> ComposeResult:
        yield Static("", classes="gpu-note")
        for name, d in GPU_DEFS.items():
            yield SparkRow(d, id=f"spark-{name}")

    def show(self, series: Mapping[str, Sequence[float | None]], note: str) -> None:
        self.query_one(".gpu-note", Static).update(note)
        for name in GPU_DEFS:
            row = self.query_one(f"#spark-{name}", SparkRow)
            values = series.get(name, [])
            row.display = any(v is not None for v in values)  # no flat lines for absent telemetry
            row.show(values)


# before its first audio, a stream that has sent nothing for this long is highlighted
SILENT_WARN_S = 1.0


def inflight_state(f: LiveInflight) -> Text:
    """What an in-flight request's listener would hear now: playing (with the audio buffered ahead),
    stalled (the player ran dry), or still waiting for its first audio."""
    if f.buffer_s is not None and f.buffer_s > 0:
        return Text(f"playing, {TIME_DEF.format(f.buffer_s)} s buffered", style="bold")
    if f.buffer_s is not None:
        return Text(f"stalled, silent {TIME_DEF.format(f.silent_s)} s", style=STALL_STYLE)
    silent = f.silent_s >= SILENT_WARN_S
    return Text(f"waiting {TIME_DEF.format(f.elapsed_s)} s" + (f", silent {TIME_DEF.format(f.silent_s)} s" if silent else ""),
                style=STALL_STYLE if silent else "bold")
LIVE_REQUEST_COLUMNS = ("#", "utterance", "outcome", header(METRICS_BY_NAME["ttfa_p50_s"], "TTFA"),
                        header(METRICS_BY_NAME["rtf_mean"], "RTF"), "chunks",
                        header(METRICS_BY_NAME["audio_s_ok"], "audio"), "stalls",
                        header(METRICS_BY_NAME["stall_total_s"], "stall"), "done at (s)")


# the stream table holds at least this many rows, more when the terminal shows more: every
# snapshot rebuilds it, so it holds what can be seen rather than the whole run (the run detail
# screen lists every request once the run is stored)
LIVE_ROWS_MIN = 20


class LiveView(Vertical):
    """The running campaign: plan/cell/run, progress, counters, metrics so far, GPU, stream."""

    def compose(self) -> ComposeResult:
        yield Static("No live snapshot yet.", id="live-head")
        # a total from the start: an indeterminate bar animates at the frame rate, which kept
        # the console busy on half a core while it waited for a campaign (docs/performance.md)
        yield ProgressBar(total=1, show_eta=False, id="live-progress")
        yield Static("", id="live-counts")
        yield Static("", id="live-metrics")
        yield GpuPanel(id="live-gpu")
        table: DataTable[Text | str] = DataTable(id="live-requests", cursor_type="row", zebra_stripes=False)
        yield table

    def on_mount(self) -> None:
        table = self.query_one("#live-requests", DataTable)
        for i, col in enumerate(LIVE_REQUEST_COLUMNS):
            table.add_column(Text(col, justify="right") if i not in (1, 2) else col, key=col)

    def show(self, snap: LiveSnapshot, writer_alive: bool) -> None:
        run = snap.run
        plan = f"{snap.plan_name or 'ad-hoc'}" + (f" · plan {snap.plan_hash[:12]}" if snap.plan_hash else "")
        cell = f"cell {snap.cell_index}/{snap.cells_total} {snap.cell_key}" if snap.cells_total else ""
        state = snap.state if writer_alive or snap.state == "finished" else f"process {snap.pid} gone (interrupted?)"
        head = Text.assemble((plan, "bold"), "   ", cell, "   ", (state, "" if state in ("running", "finished") else FAIL_STYLE))
        if run:
            head.append(f"\nrun {run.run_id}  {run.engine}  C={run.concurrency}  {run.kind}  ")
            head.append(run.status, style={"complete": "", "running": "bold"}.get(run.status, FAIL_STYLE))
        for label, n in sorted(snap.nodes.items()):  # a cluster run: one line per GPU (docs/cluster.md)
            head.append(f"\n{label} [{n.get('gpu_name') or '?'}]  {n.get('cell') or '-'}  ")
            head.append(str(n.get("state") or "-"), style="bold" if n.get("state") == "running" else "")
            if n.get("planned"):
                head.append(f"  {n.get('done', 0)}/{n['planned']} requests")
        self.query_one("#live-head", Static).update(head)
        bar = self.query_one("#live-progress", ProgressBar)
        if run:
            bar.update(total=max(run.planned, 1), progress=run.done)
        counts = Text()
        if run:
            counts.append(f"in flight {COUNT_DEF.format(snap.in_flight())}   completed {COUNT_DEF.format(run.completed)}   ")
            if run.failed:
                counts.append("failed " + ", ".join(f"{k} {COUNT_DEF.format(v)}" for k, v in sorted(run.failed.items())),
                              style=FAIL_STYLE)
            else:
                counts.append("failed 0")
        self.query_one("#live-counts", Static).update(counts)
        metrics = Text()
        if run:
            for name in live_metrics():
                d = METRICS_BY_NAME[name]
                value = run.metrics.get(name)
                style = STALL_STYLE if name == "stall_count" and value else ""
                metrics.append(f"{d.label} ")
                metrics.append(f"{d.format(value)}{(' ' + d.unit) if d.unit else ''}", style=style or "bold")
                metrics.append("   ")
        self.query_one("#live-metrics", Static).update(metrics)
        gpus = sorted({g.gpu_index for g in snap.gpu})
        g0 = [g for g in snap.gpu if gpus and g.gpu_index == gpus[0]]
        note = f"GPU {gpus[0]}: last {TIME_DEF.format(g0[-1].t_s - g0[0].t_s)} s" if g0 else "GPU: no samples (no NVML, or telemetry off)"
        self.query_one(GpuPanel).show({k: [getattr(g, k) for g in g0] for k in GPU_DEFS}, note)
        table = self.query_one("#live-requests", DataTable)
        table.clear()
        room = max(LIVE_ROWS_MIN, table.size.height)  # rows a re-render builds: what fits, not the whole run
        inflight = (snap.inflight or [])[:room]
        for f in inflight:  # streaming now, oldest first
            table.add_row(num(str(f.index) + ("w" if f.warmup else "")), f.utt_id, inflight_state(f),
                          num(fmt("ttfa_p50_s", f.ttfa_s)), num("-"), num(fmt("chunks_min", f.chunks)),
                          num(fmt("audio_s_ok", f.audio_s)), stalls_cell(f.stalls),
                          num(fmt("stall_total_s", f.stall_total_s), STALL_STYLE if f.stalls else None), num("-"))
        for r in snap.requests[:room - len(inflight)]:  # newest first
            table.add_row(
                num(str(r.index) + ("w" if r.warmup else "")), r.utt_id, outcome_text(r.outcome),
                num(fmt("ttfa_p50_s", r.ttfa_s)), num(fmt("rtf_mean", r.rtf)), num(fmt("chunks_min", r.chunks)),
                num(fmt("audio_s_ok", r.audio_s)), stalls_cell(r.stalls),
                num(fmt("stall_total_s", r.stall_total_s), STALL_STYLE if r.stalls else None),
                num(TIME_DEF.format(r.end_s)),
            )
