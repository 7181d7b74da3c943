"""The report's figures, one function per figure, each from the results layer's typed rows.

Plotting library: matplotlib (Agg backend, `matplotlib.figure.Figure` without pyplot's global
state). Chosen for quality and install size: it renders publication-grade static PNG and SVG with
no browser or JavaScript runtime, installs from PyPI as a wheel of ~8 MB plus small pure-Python or
wheel dependencies (pillow, fonttools, kiwisolver, contourpy), and its output can be inlined in one
HTML file that opens offline. Plotly and Bokeh draw in the browser and need a ~3-4 MB JavaScript
bundle inlined into every report (or a CDN, i.e. network); seaborn and plotnine are layers over
matplotlib that add pandas-heavy dependencies for nothing this report needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import matplotlib

matplotlib.use("Agg")  # no display; before anything imports pyplot

import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from stats.metrics.registry import metrics_in_figure  # noqa: E402
from stats.results.plan_results import PlanResults, VerdictResult  # noqa: E402
from stats.quality.metrics import NAMES as QUALITY_NAMES  # noqa: E402  (wer, sim, mos)
from stats.results.quality_load import QualityLoad  # noqa: E402
from stats.results.replicates import CheckReplicates  # noqa: E402
from stats.results.series import GpuRunSeries  # noqa: E402

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

STYLE: dict[RcKeyType, Any] = {
    "figure.dpi": 100, "savefig.dpi": 110, "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9,
    "axes.spines.top": False, "axes.spines.right": False, "axes.grid": True, "grid.alpha": 0.3,
    "legend.fontsize": 8, "legend.frameon": False, "svg.fonttype": "none",
}
PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf")
PASS_COLOR, FAIL_COLOR, INCONCLUSIVE_COLOR = "#2ca02c", "#d62728", "#bcbd22"
STATUS_COLOR = {"PASS": PASS_COLOR, "FAIL": FAIL_COLOR, "INCONCLUSIVE": INCONCLUSIVE_COLOR}


@dataclass
class FigureOut:
    key: str  # file stem for --figures
    title: str
    caption: str
    figure: Figure


def _figure(title: str, ncols: int = 1, nrows: int = 1, width: float = 10.0, height: float = 3.6) -> tuple[Figure, Any]:
    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=(width, height * nrows), layout="constrained")
        axes = fig.subplots(nrows, ncols, squeeze=False)
        fig.suptitle(title, fontweight="bold")
    return fig, axes


def _color(engines: Sequence[str], name: str) -> str:
    return PALETTE[list(engines).index(name) % len(PALETTE)] if name in engines else "#555555"


EMPTY_NOTE = "empty-note"  # the gid of a panel's note on why it has no data (SVG: <g id="empty-note">)


def _empty(ax, text: str) -> None:
    """A panel with nothing to draw says why, in its middle, and has no axes scale to misread."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666666", wrap=True,
            gid=EMPTY_NOTE)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)


def _overlaps(boxes: list[Any], pad: float) -> bool:
    boxes = sorted(boxes, key=lambda b: b.x0)
    return any(b.x0 < a.x1 + pad and b.y0 < a.y1 + pad and a.y0 < b.y1 + pad for a, b in zip(boxes, boxes[1:]))


def _label_boxes(fig: Figure, ax, axis: str) -> list[Any]:
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [t.get_window_extent(renderer) for t in labels if t.get_visible() and t.get_text()]


def fit_labels(fig: Figure, pad: float = 2.0, min_size: float = 5.0) -> Figure:
    """Tick labels that never overlap, at any number of cells (docs/results.md, "Figures"): lay the
    figure out and measure every tick label's box (matplotlib's own text extents); where two on one
    axis touch, x labels are put on one line and turned 90°, then the font shrinks down to
    `min_size`, then only every k-th label is kept (y labels: shrink, then every k-th)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    if not isinstance(fig.canvas, FigureCanvasAgg):
        FigureCanvasAgg(fig)
    with matplotlib.rc_context(STYLE):
        fig.canvas.draw()
        for ax in fig.axes:
            for axis in ("x", "y"):
                labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
                if not labels or not _overlaps(_label_boxes(fig, ax, axis), pad):
                    continue
                if axis == "x":
                    for t in labels:
                        t.set_text(t.get_text().replace("\n", " "))
                        t.set_rotation(90)
                        t.set_horizontalalignment("center")
                    ax.set_xticks(ax.get_xticks(), [t.get_text() for t in labels], rotation=90)
                    fig.canvas.draw()
                labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
                size = float(labels[0].get_fontsize())
                while size > min_size and _overlaps(_label_boxes(fig, ax, axis), pad):
                    size -= 0.5
                    for t in labels:
                        t.set_fontsize(size)
                    fig.canvas.draw()
                step = 1
                while _overlaps(_label_boxes(fig, ax, axis), pad) and step < len(labels):
                    step += 1
                    for i, t in enumerate(labels):
                        t.set_visible(i % step == 0)
                    fig.canvas.draw()
    return fig


def _conc_axis(ax, concs: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(concs), [str(c) for c in concs])
    ax.minorticks_off()
    ax.set_xlabel("concurrency C")


def _metric_vs_c(ax, res: PlanResults, name: str, scale: float, ylabel: str) -> None:
    """Every repeat as a point, the median across repeats as a line, per engine."""
    engines = [e.name for e in res.plan.engines]
    concs = list(res.plan.sweep.concurrencies)
    drawn = False
    for e in engines:
        col = _color(engines, e)
        xs, ys, mx, my = [], [], [], []
        for cell in res.cells_of(e):
            vals = [x.metrics.get(name) for x in cell.runs]
            vals = [v * scale for v in vals if v is not None]
            xs += [cell.concurrency] * len(vals)
            ys += vals
            s = cell.spreads.get(name)
            if s is not None and s.median is not None:
                mx.append(cell.concurrency)
                my.append(s.median * scale)
        if xs:
            drawn = True
            jitter = np.exp(np.linspace(-0.04, 0.04, len(xs))) if len(xs) > 1 else np.ones(1)
            ax.scatter(np.asarray(xs) * jitter, ys, s=14, color=col, alpha=0.55, linewidths=0)
        if mx:
            ax.plot(mx, my, "-o", color=col, ms=4, lw=1.6, label=f"{e} (median)")
    if not drawn:
        _empty(ax, "no aggregate runs")
        return
    _conc_axis(ax, concs)
    ax.set_ylabel(ylabel)
    ax.legend(loc="best")


def _imported_points(ax, imported: Sequence[dict[str, Any]]) -> str:
    """Imported throughput figures (data/imported.py) as hollow grey diamonds, labelled as such;
    returns the caption's sentence about them."""
    pts = [r for r in imported if r["metric"] == "throughput" and r["concurrency"]]
    for label in dict.fromkeys(r["engine"] for r in pts):
        mine = [r for r in pts if r["engine"] == label]
        ax.scatter([r["concurrency"] for r in mine], [r["value"] for r in mine], s=36, marker="D",
                   facecolors="none", edgecolors="#777777", label=f"{label} (imported, not measured)")
    if not pts:
        return ""
    ax.legend(loc="best")
    units = ", ".join(sorted({str(r["unit"]) for r in pts}))
    return (f" Hollow diamonds: figures imported from outside (imported, not measured; as stated, in {units}); "
            "no aggregate, gate or verdict uses them.")


def throughput_figure(res: PlanResults, imported: Sequence[dict[str, Any]] = ()) -> FigureOut:
    title = "Throughput vs concurrency"
    fig, axes = _figure(title, width=8.0, height=4.0)
    ax = axes[0][0]
    unit = f"{res.plan.metrics.throughput_scale:g} × audio s / wall s"
    _metric_vs_c(ax, res, "throughput", 1.0, f"audio tok/s ({unit})")
    note = _imported_points(ax, imported)
    ax.set_title("every measured repeat as a point; line = median across repeats")
    return FigureOut("throughput", title, "Throughput (audio tokens per second, codec tokens not text) of every "
                     "aggregate run; the line joins the medians across repeats." + note, fig)


def latency_figure(res: PlanResults) -> FigureOut:
    """One panel per registry metric whose figure is "latency" (stats/metrics/registry.py)."""
    title = "Latency vs concurrency"
    panels = metrics_in_figure("latency")
    fig, axes = _figure(title, ncols=len(panels), width=4.0 * len(panels), height=3.8)
    for ax, d in zip(axes[0], panels):
        _metric_vs_c(ax, res, d.name, d.scale, d.header())
        ax.set_title(d.label)
    return FigureOut("latency", title, "Per run (points) and median across repeats (lines): "
                     + "; ".join(f"{d.label}: {d.doc}" for d in panels) + ".", fig)


def rtf_figure(res: PlanResults, rtfs: dict[str, list[float]]) -> FigureOut:
    title = "RTF distribution per cell"
    fig, axes = _figure(title, width=max(8.0, 0.55 * len(res.cells) + 2), height=4.0)
    ax = axes[0][0]
    engines = [e.name for e in res.plan.engines]
    data, labels, colors = [], [], []
    for cell in res.cells:
        vals = [v for rid in cell.run_ids for v in rtfs.get(rid, [])]
        data.append(vals if vals else [np.nan])
        labels.append(f"{cell.engine}\nC{cell.concurrency}")
        colors.append(_color(engines, cell.engine))
    if not any(np.isfinite(v).any() for v in map(np.asarray, data)):
        _empty(ax, "no ok measured requests")
    else:
        parts = ax.boxplot(data, patch_artist=True, showfliers=True, widths=0.6,
                           flierprops={"markersize": 2, "alpha": 0.4}, medianprops={"color": "#222222", "lw": 1.4})
        for patch, col in zip(parts["boxes"], colors):
            patch.set_facecolor(col)
            patch.set_alpha(0.45)
        ax.set_xticks(range(1, len(labels) + 1), labels, fontsize=7)
        ax.axhline(1.0, color="#444444", lw=0.8, ls="--")
        ax.set_ylabel("RTF per request ((t_last_audio - t_send) / audio s)")
        ax.set_title("ok measured requests of every repeat; dashed: real time (RTF 1)")
    return FigureOut("rtf", title, "Real-time factor of every ok measured request, per engine and concurrency; "
                     "below 1 the audio arrives faster than it plays.", fig)


def stalls_failures_figure(res: PlanResults) -> FigureOut:
    title = "Stalls and failures per cell"
    fig, axes = _figure(title, ncols=2, width=max(11.0, 0.9 * len(res.cells) + 3), height=4.0)
    labels = [f"{c.engine}\nC{c.concurrency}" for c in res.cells]
    x = np.arange(len(res.cells))
    ax = axes[0][0]
    stalls = [sum(r.metrics.stall_count for r in c.runs) for c in res.cells]
    ax.set_title("playback stalls (sum over repeats)")
    if any(stalls):
        ax.bar(x, stalls, color="#ff7f0e")
        ax.set_ylabel("stalls")
        ax.set_xticks(x, labels, fontsize=7)
    else:
        _empty(ax, "no playback stalls in any aggregate run" if any(c.runs for c in res.cells) else "no aggregate runs")
    ax = axes[0][1]
    classes = sorted({k for c in res.cells for r in c.runs for k in r.metrics.failures_by_class})
    bottom = np.zeros(len(res.cells))
    for i, cls in enumerate(classes):
        vals = np.asarray([sum(r.metrics.failures_by_class.get(cls, 0) for r in c.runs) for c in res.cells], float)
        ax.bar(x, vals, bottom=bottom, label=cls, color=PALETTE[(i + 1) % len(PALETTE)])
        bottom += vals
    trunc = [sum(r.metrics.truncated for r in c.runs) for c in res.cells]
    if any(trunc):
        ax.bar(x, trunc, bottom=bottom, label="truncated (ok)", color="#bbbbbb", hatch="//")
    ax.set_title("failed requests by class (sum over repeats)")
    if classes or any(trunc):
        ax.set_ylabel("requests")
        ax.set_xticks(x, labels, fontsize=7)
        ax.legend(loc="upper left")
    else:
        _empty(ax, "no failed requests" if any(c.runs for c in res.cells) else "no aggregate runs")
    return FigureOut("stalls_failures", title, "Playback stalls and failed requests (by failure class) of the "
                     "aggregate runs of each cell.", fig)


def gpu_figure(res: PlanResults, series: list[GpuRunSeries]) -> FigureOut:
    title = "GPU utilisation and power over time per run"
    fig, axes = _figure(title, ncols=2, width=12.0, height=3.8)
    engines = [e.name for e in res.plan.engines]
    engine_of = {r.run_id: c.engine for c in res.cells for r in c.runs}
    if not series:
        for ax in axes[0]:
            _empty(ax, "no GPU samples (no NVML, or telemetry off)")
        axes[0][0].set_title("GPU utilisation (%)")
        axes[0][1].set_title("power (W)")
    for ax, col, lbl in ((axes[0][0], "util_gpu_pct", "GPU utilisation (%)"), (axes[0][1], "power_w", "power (W)")):
        if not series:
            continue
        seen: set[str] = set()
        for s in series:
            e = engine_of.get(s.run_id, "")
            ys = [np.nan if v is None else v for v in s.values[col]]
            ax.plot(s.t_s, ys, lw=0.9, alpha=0.7, color=_color(engines, e),
                    label=e if e not in seen else None)
            seen.add(e)
        ax.set_title(f"{lbl}, one line per run and GPU")
        ax.set_xlabel("seconds since the run's first sample")
        ax.set_ylabel(lbl)
        ax.legend(loc="lower right")
    n = len({s.run_id for s in series})
    return FigureOut("gpu", title, f"NVML samples of {n} aggregate run(s), coloured by engine"
                     + ("" if series else "; none were recorded") + ".", fig)


def _candidate(v: VerdictResult) -> str:
    """The candidate a quality verdict judged ('<plan>: <candidate> vs <baseline> ...'), for labels."""
    m = re.search(r"(\S+) vs \S+", v.name or "")
    return m.group(1) if m else v.verdict_id


def _quality_checks(verdicts: Sequence[VerdictResult]) -> list[tuple[VerdictResult, Any]]:
    return [(v, c) for v in verdicts if v.kind == "quality" for c in v.checks]


def forest_figure(verdicts: Sequence[VerdictResult]) -> FigureOut:
    title = "Quality checks: estimate and one-sided bound vs margin"
    checks = _quality_checks(verdicts)
    metrics = list(dict.fromkeys(c.metric for _, c in checks)) or ["-"]
    n_rows = max([sum(1 for _, c in checks if c.metric == m) for m in metrics] + [1])
    fig, axes = _figure(title, ncols=len(metrics), width=max(10.0, 3.6 * len(metrics)), height=2.2 + 0.35 * n_rows)
    for ax, m in zip(axes[0], metrics):
        rows = [(v, c) for v, c in checks if c.metric == m]
        if not rows:
            _empty(ax, "no quality verdicts issued")
            continue
        for y, (v, c) in enumerate(rows):
            col = STATUS_COLOR.get(c.status, "#777777")
            if c.point is not None and c.bound is not None:
                ax.plot([c.point, c.bound], [y, y], color=col, lw=2.2)
                ax.plot([c.bound], [y], marker="|", ms=12, color=col)
            if c.point is not None:
                ax.plot([c.point], [y], "o", color=col, ms=6)
            else:
                ax.text(0.02, y, f"{c.status}: no estimate", va="center", fontsize=7, color=col,
                        transform=ax.get_yaxis_transform())
            if c.margin is not None:
                ax.plot([c.margin], [y], marker="D", ms=5, color="#333333")
        margins = {c.margin for _, c in rows if c.margin is not None}
        for mg in margins:
            ax.axvline(mg, color="#333333", ls="--", lw=0.9)
        ax.axvline(0.0, color="#999999", lw=0.6)
        ax.set_yticks(range(len(rows)), [f"{_candidate(v)} C{c.concurrency} {c.status}" for v, c in rows])
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.invert_yaxis()
        ax.set_title(f"{rows[0][1].label} ({rows[0][1].unit})")
        ax.set_xlabel(f"degradation ({rows[0][1].unit})")
    return FigureOut("quality_forest", title, "Each quality check per concurrency: point estimate of the degradation "
                     "(dot) and its one-sided upper bound (bar to tick) against the margin (diamond, dashed line); a check passes "
                     "iff the bound is below the margin. Green PASS, red FAIL, olive INCONCLUSIVE.", fig)


def _identical_line(flat: Sequence[tuple[VerdictResult, CheckReplicates]]) -> str:
    """One line for the checks whose every replicate is one value (identical arms: nothing to draw)."""
    by_cand: dict[str, list[str]] = {}
    for v, r in flat:
        check = next((c for c in v.checks if c.metric == r.metric and c.concurrency == r.concurrency), None)
        by_cand.setdefault(_candidate(v), []).append(
            f"C{r.concurrency} {check.label if check else r.metric}" + (f" {check.status}" if check else ""))
    value = {float(r.replicates[0]) for _, r in flat}
    shown = f"{value.pop():+.3f}" if len(value) == 1 else "one value per check"
    return ("every bootstrap replicate equals the estimate (identical arms; bound = estimate = " + shown + "): "
            + "; ".join(f"{cand} {', '.join(checks)}" for cand, checks in by_cand.items()))


def replicates_figure(verdicts: Sequence[VerdictResult], reps: dict[str, list[CheckReplicates]]) -> FigureOut:
    """One histogram per check whose replicates spread; the checks whose replicates are all one
    value (a candidate identical to its baseline) are collapsed into one line, not a panel each."""
    title = "Quality checks: bootstrap replicate distributions"
    every = [(v, r) for v in verdicts if v.kind == "quality" for r in reps.get(v.verdict_id, [])]
    flat = [(v, r) for v, r in every if r.replicates.size and float(r.replicates.min()) == float(r.replicates.max())]
    items = [x for x in every if x not in flat]
    ncols = min(3, max(1, len(items)))
    nrows = max(1, -(-len(items) // ncols))
    fig, axes = _figure(title, ncols=ncols, nrows=nrows, width=12.0, height=3.0 if items else 1.6)
    panels = [ax for row in axes for ax in row]
    line = _identical_line(flat) if flat else ""
    if not items:
        _empty(panels[0], line or "no full-coverage quality checks to resample")
    elif line:
        fig.supxlabel(line, fontsize=8, color="#444444", wrap=True)
    for ax, (v, r) in zip(panels, items):
        check = next((c for c in v.checks if c.metric == r.metric and c.concurrency == r.concurrency), None)
        ax.hist(r.replicates, bins=50, color="#1f77b4", alpha=0.7)
        ax.axvline(r.point, color="#333333", lw=1.2, label=f"estimate {r.point:+.3f}")
        ax.axvline(r.bound, color=STATUS_COLOR.get(check.status if check else "", "#777777"), lw=1.6,
                   label=f"bound {r.bound:+.3f}")
        if check is not None and check.margin is not None:
            ax.axvline(check.margin, color="#333333", ls="--", lw=1.0, label=f"margin {check.margin:g}")
        same = check is not None and check.bound == r.bound
        ax.set_title(f"{_candidate(v)} C{r.concurrency} {check.label if check else r.metric}"
                     + ("" if same else " (bound differs!)"))
        ax.set_xlabel(f"replicate ({check.unit if check else ''}), B={r.replicates.size}")
        ax.legend(loc="upper right")
    for ax in panels[len(items):] if items else panels[1:]:
        ax.set_visible(False)
    return FigureOut("quality_replicates", title, "Bootstrap replicates redrawn from each verdict document's per-id "
                     "aggregates with its recorded seed and draws; the solid coloured line is the bound."
                     + (f" Not drawn, {len(flat)} check(s) where {line}." if line else ""), fig)


def ratios_figure(verdicts: Sequence[VerdictResult]) -> FigureOut:
    title = "Throughput rule: paired ratios and lower bound"
    rules = [v for v in verdicts if v.kind == "throughput"]
    fig, axes = _figure(title, ncols=max(1, len(rules)), width=max(8.0, 5.0 * len(rules)), height=3.8)
    if not rules:
        _empty(axes[0][0], "no throughput verdicts issued")
    for ax, v in zip(axes[0], rules):
        for x, c in enumerate(v.checks):
            col = STATUS_COLOR.get(c.status, "#777777")
            if c.ratios:
                ax.scatter([x] * len(c.ratios), c.ratios, color="#1f77b4", s=22, zorder=3,
                           label="paired ratio (one per repeat)" if x == 0 else None)
            if c.point is not None:
                ax.plot([x - 0.25, x + 0.25], [c.point] * 2, color="#333333", lw=1.5,
                        label="geometric mean" if x == 0 else None)
            if c.bound is not None:
                ax.plot([x - 0.3, x + 0.3], [c.bound] * 2, color=col, lw=2.5,
                        label="one-sided lower bound" if x == 0 else None)
            if c.margin is not None:
                ax.plot([x - 0.4, x + 0.4], [c.margin] * 2, color="#333333", ls="--", lw=1.0,
                        label="min ratio" if x == 0 else None)
        ax.set_xticks(range(len(v.checks)), [f"C{c.concurrency}\n{c.status}" for c in v.checks])
        ax.set_xlim(-0.7, len(v.checks) - 0.3)
        ax.set_ylabel("candidate / reference throughput")
        ax.set_title(f"{v.name} ({v.verdict})")
        ax.legend(loc="best")
    return FigureOut("throughput_ratios", title, "Per-repeat candidate/reference throughput ratios of each decision "
                     "rule cell with their geometric mean and one-sided lower bound; a cell passes iff the bound "
                     "exceeds the minimum ratio.", fig)


def coverage_figure(verdicts: Sequence[VerdictResult]) -> FigureOut:
    title = "Coverage gaps and WER attribution"
    fig, axes = _figure(title, ncols=2, width=12.0, height=3.8)
    ax = axes[0][0]
    bars: list[tuple[str, int, int]] = []
    for v in verdicts:
        if v.kind != "quality" or not v.document:
            continue
        for cell in (v.document.get("coverage") or {}).get("cells") or []:
            for m, gaps in (cell.get("gaps") or {}).items():
                bars.append((f"{_candidate(v)}\nC{cell['concurrency']} {m}", len(gaps), int(cell.get("ids") or 0)))
    if bars:
        x = np.arange(len(bars))
        ax.bar(x, [b[2] - b[1] for b in bars], color=PASS_COLOR, alpha=0.7, label="covered ids")
        ax.bar(x, [b[1] for b in bars], bottom=[b[2] - b[1] for b in bars], color=FAIL_COLOR, label="coverage gaps")
        ax.set_xticks(x, [b[0] for b in bars], fontsize=7)
        ax.set_ylabel("utterance ids")
        ax.set_ylim(0, max(b[2] for b in bars) * 1.25 + 0.5)
        ax.legend(loc="upper right", ncols=2)
        ax.set_title("ids per check: covered vs gap" + ("" if any(b[1] for b in bars) else " (no gaps)"))
    else:
        _empty(ax, "no quality verdicts issued")
        ax.set_title("coverage gaps")
    ax = axes[0][1]
    contribs = [(_candidate(v), a["concurrency"], c) for v in verdicts if v.kind == "quality" and v.document
                for a in v.document.get("attribution") or [] for c in a.get("contributions") or []]
    if contribs:
        labels = [f"{who} C{c} {x['utt_id']}" for who, c, x in contribs]
        deltas = [x["delta"] for _, _, x in contribs]
        y = np.arange(len(contribs))
        ax.barh(y, deltas, color=[FAIL_COLOR if d > 0 else PASS_COLOR for d in deltas])
        ax.set_yticks(y, labels, fontsize=7)
        ax.invert_yaxis()
        ax.axvline(0, color="#999999", lw=0.6)
        ax.set_xlabel("candidate - baseline word errors (diagnostic only)")
        ax.set_title("WER attribution: top utterances")
    else:
        _empty(ax, "no WER change to attribute")
        ax.set_title("WER attribution")
    return FigureOut("coverage_attribution", title, "Left: ids each quality check covers and the coverage gaps "
                     "that make a check INCONCLUSIVE. Right: the utterances that carry the WER change.", fig)


def _cells_text(ql: QualityLoad, concs: Sequence[int]) -> str:
    return ", ".join(f"C{c}" for c in concs) or "none"


def quality_load_figure(ql: QualityLoad) -> FigureOut:
    """WER, SIM and MOS of each engine against concurrency (stats/results/quality_load.py): the
    estimate and its percentile bootstrap interval over utterance ids, one panel per metric."""
    title = "Quality under load: WER, SIM and MOS vs concurrency"
    fig, axes = _figure(title, ncols=3, width=13.0, height=3.8)
    engines = list(ql.engines)
    for ax, m in zip(axes[0], QUALITY_NAMES):
        ax.set_title(ql.header(m))
        drawn = False
        for i, e in enumerate(engines):
            pts = [(c.concurrency, lv) for c in ql.cells if c.engine == e and (lv := c.levels[m]) is not None]
            if not pts:
                continue
            drawn = True
            shift = float(np.exp((i - (len(engines) - 1) / 2) * 0.05))  # engines side by side at one C
            xs = np.asarray([c for c, _ in pts], float) * shift
            ys = np.asarray([lv.value for _, lv in pts])
            lo = np.asarray([lv.value - lv.low if lv.low is not None else 0.0 for _, lv in pts])
            hi = np.asarray([lv.high - lv.value if lv.high is not None else 0.0 for _, lv in pts])
            ax.errorbar(xs, ys, yerr=[lo, hi], fmt="-o", ms=4, lw=1.4, capsize=3, color=_color(engines, e), label=e)
        if not drawn:
            ran = any(c.runs for c in ql.cells)
            _empty(ax, f"not scored: no ok {ql.scorers[m]} score in the quality runs" if ran else
                   "no quality runs (measured, complete, not excluded"
                   + (f", pool {ql.pool!r})" if ql.pool else ")"))
            continue
        _conc_axis(ax, ql.concurrencies)
        pad = 1.15 * float(np.exp(0.05 * (len(engines) - 1) / 2))  # the side-by-side shift stays inside
        ax.set_xlim(min(ql.concurrencies) / pad, max(ql.concurrencies) * pad)
        for c in ql.concurrencies:  # a measured concurrency without a figure says why, where its points would be
            notes = {cell.note(m) for cell in ql.cells if cell.concurrency == c}
            if "" not in notes:
                ax.text(c, 0.5, " / ".join(sorted(notes)), transform=ax.get_xaxis_transform(), rotation=90,
                        ha="center", va="center", fontsize=7, color="#888888")
        ax.set_ylabel(ql.header(m))
    handles = {t: h for ax in axes[0] for h, t in zip(*ax.get_legend_handles_labels())}
    if handles:  # one legend for the three panels, below them: it never covers a point
        fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=len(handles))
    missing = [f"{c.engine} C{c.concurrency} ({c.note('wer') or c.note('sim') or c.note('mos')})"
               for c in ql.cells if any(lv is None for lv in c.levels.values())]
    return FigureOut("quality_load", title,
                     f"Each engine's quality runs at every measured concurrency ({_cells_text(ql, ql.concurrencies)}; "
                     f"the gate judges {_cells_text(ql, ql.gated)}): each point is the figure {ql.method()}"
                     + (f" Not scored (some or every metric): {'; '.join(missing)}." if missing else ""), fig)
