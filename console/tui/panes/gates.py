"""Gates: a dry run of the plan's gates on the current store (nothing issued).

The nine checks of each quality candidate (estimate, bound, margin, ids, status), the bootstrap
replicate distribution of the highlighted check as a histogram with its bound and margin marked,
coverage gaps, WER attribution and the throughput rules with their paired ratios. Everything is
computed by the gate's own functions (stats.gates, stats.throughput_rules) on a read-only store
or the running campaign's snapshot; it is what `campaign gate PLAN --dry-run` would print.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Static

from console.tui.panes.base import Pane
from console.tui.widgets import FAIL_STYLE, PASS_STYLE, STALL_STYLE, num, verdict_text
from stats.results.checks import CHECK_DEFS

HIST_BINS = 60
SPARK = "▁▂▃▄▅▆▇█"
CHECK_COLUMNS = ("candidate", "C", "metric", "status", "ids", "estimate", "upper bound", "margin", "baseline",
                 "candidate value", "note")


@dataclass(frozen=True)
class Histogram:
    """Replicate counts over [lo, hi] and where the bound and the margin fall."""
    counts: list[int]
    lo: float
    hi: float
    bound: float | None
    margin: float

    def column(self, x: float) -> int:
        if self.hi <= self.lo:
            return 0
        return min(HIST_BINS - 1, max(0, int((x - self.lo) / (self.hi - self.lo) * HIST_BINS)))


def histogram(replicates: np.ndarray, bound: float | None, margin: float) -> Histogram:
    values = replicates[np.isfinite(replicates)]
    marks = [margin] + ([bound] if bound is not None else [])
    lo = float(min(values.min(initial=margin), *marks))
    hi = float(max(values.max(initial=margin), *marks))
    if hi <= lo:
        hi = lo + 1e-9
    counts, _ = np.histogram(values, bins=HIST_BINS, range=(lo, hi))
    return Histogram([int(c) for c in counts], lo, hi, bound, margin)


def render_histogram(h: Histogram | None, title: str) -> Text:
    if h is None:
        return Text(f"{title}: no replicate distribution (fewer than 2 covered ids or scorer unavailable)", style="dim")
    top = max(h.counts) or 1
    bars = "".join(" " if c == 0 else SPARK[min(len(SPARK) - 1, int(c / top * (len(SPARK) - 1) + 0.999))]
                   for c in h.counts)
    marks = [" "] * HIST_BINS
    marks[h.column(h.margin)] = "M"
    if h.bound is not None:
        marks[h.column(h.bound)] = "B" if marks[h.column(h.bound)] == " " else "*"
    fmt = CHECK_DEFS["bound"].format
    out = Text.assemble((title, "bold"), f"  bootstrap replicates, {sum(h.counts)} draws\n")
    out.append(bars + "\n")
    out.append("".join(marks) + "\n", style="bold")
    out.append(f"{fmt(h.lo)} … {fmt(h.hi)}   B upper bound {fmt(h.bound)}   M margin {fmt(h.margin)}", style="dim")
    return out


@dataclass
class CandidateGates:
    candidate: str
    baseline: str
    verdict: str
    checks: list[dict[str, Any]]
    histograms: list[Histogram | None]
    evidence: str
    gaps: list[dict[str, Any]]
    attribution: list[str]
    preconditions: list[str] = field(default_factory=list)  # why a PASS was turned down, as the gate says it


@dataclass
class GatesData:
    plan_name: str
    plan_hash: str
    candidates: list[CandidateGates] = field(default_factory=list)
    rules: list[Any] = field(default_factory=list)  # stats.throughput_rules.RuleResult
    note: str = ""
    equivalence: list[tuple[str, str, str, list[str]]] = field(default_factory=list)  # issued (console/equivalence.py)


def _replicates(frame, cfg, concurrency: int, metric: str) -> np.ndarray | None:
    from stats.bootstrap import cell_bounds
    from stats.gates import aggregate_cell

    part = aggregate_cell(frame[frame["concurrency"] == concurrency], concurrency, cfg.repeats).cell(metric)
    if part.k < 2:
        return None
    return cell_bounds(part, draws=cfg.draws, seed=cfg.seed, confidence=cfg.confidence, method=cfg.method,
                       metrics=(metric,))[metric].replicates


def short_events(text: str) -> str:
    """'audit #2 plan_frozen 6e32c32703ea' -> 'audit #2 plan_frozen': the seq names the event on
    this screen (the Plan tab lists them); the hash stays in the verdict document."""
    return re.sub(r"(audit #\d+ \w+) [0-9a-f]{12}", r"\1", text)


def attribution_lines(result) -> list[str]:
    out = []
    for a in result.attribution:
        if not a["contributions"] or a["net_error_change"] == 0:
            continue
        top = a["contributions"][0]
        out.append(f"C{a['concurrency']}: net {a['net_error_change']:+d} errors; top {top['utt_id']} {top['delta']:+d} "
                   f"({(top['share_of_net'] or 0) * 100:.0f}% of net)"
                   + ("; survives without it" if a.get("survives_without_top") else "") + " [diagnostic]")
    return out


def load_gates(store, plan_hash: str | None = None) -> GatesData | None:
    """The dry run for the newest frozen plan (or `plan_hash`), and the equivalence verdicts issued
    for it and its family; None when no plan is frozen."""
    from console.equivalence import equivalence_lines, family_equivalence
    from console.verdicts import quality, throughput
    from data.plan_loading import plan_from_store
    from data.pool_status import pool_status
    from data.queries import plan_seq
    from stats.gates import GateConfig, evaluate_gates
    from stats.quality.registry import scorer_status
    from stats.quality.scoring import coverage, scores_frame

    if plan_hash is None:
        plan_hash = store.scalar(f"SELECT plan_hash FROM plans p ORDER BY {plan_seq('p')} DESC NULLS LAST LIMIT 1")
    if plan_hash is None:
        return None
    plan = plan_from_store(store, plan_hash)
    cfg = GateConfig.from_plan(plan)
    data = GatesData(plan.name, plan.hash)
    baseline = plan.quality.baseline or ""
    for cand in plan.quality_candidates if baseline else []:
        view = plan.for_candidate(cand)
        frame = scores_frame(store, view)
        if frame.empty:
            data.note = "no quality rows yet (run the holdout phase and `campaign score`)"
            continue
        result = evaluate_gates(frame, cfg, scorer_status=scorer_status(view), source=f"plan {plan.hash[:12]}")
        decision = quality.decide(store, plan, cand, result)  # as `campaign gate` decides
        checks = result.checks_dicts()
        hists = []
        for c in checks:
            reps = _replicates(frame, cfg, int(c["concurrency"]), c["metric"]) if c["bound"] is not None else None
            hists.append(histogram(reps, c["bound"], float(c["margin"])) if reps is not None else None)
        data.candidates.append(CandidateGates(
            cand, baseline, decision.result.verdict, checks, hists, short_events(pool_status(store, view).summary),
            coverage(store, view)[1], attribution_lines(result), decision.reasons))
    data.rules = [throughput.decide(store, plan, r)[0] for r in plan.decision_rules  # as `campaign gate` decides
                  if r.kind == "throughput_exceeds"]
    data.equivalence = equivalence_lines(family_equivalence(store, plan.hash))
    return data


class GatesPane(Pane):
    """The Gates tab."""

    class Loaded(Message):
        def __init__(self, data: GatesData | None) -> None:
            super().__init__()
            self.data = data

    DEFAULT_CSS = """
    GatesPane { height: 1fr; }
    GatesPane #gates-head { height: auto; padding: 0 1; }
    GatesPane #gates-checks { height: auto; max-height: 45%; }
    GatesPane #gates-body { height: 1fr; padding: 0 1; }
    GatesPane #gates-hist, GatesPane #gates-rules, GatesPane #gates-equivalence, GatesPane #gates-more { height: auto; margin-top: 1; }
    """

    def __init__(self, db_path: Path, **kw: Any) -> None:
        super().__init__(**kw)
        self.db_path = db_path
        self.data: GatesData | None = None
        self.rows: list[tuple[CandidateGates, int]] = []

    def compose(self) -> ComposeResult:
        yield Static("press r to run the gates on the current store", id="gates-head")
        yield DataTable(id="gates-checks", cursor_type="row")
        with VerticalScroll(id="gates-body"):
            yield Static("", id="gates-hist")
            yield Static("", id="gates-rules")
            yield Static("", id="gates-equivalence")
            yield Static("", id="gates-more")

    def on_mount(self) -> None:
        table = self.query_one("#gates-checks", DataTable)
        for i, col in enumerate(CHECK_COLUMNS):
            table.add_column(Text(col, justify="right") if 3 < i < 10 else col, key=col)

    def load(self) -> None:
        self.query_one("#gates-head", Static).update("running the gates on the current store (dry run) ...")
        self.started(self.dry_run())

    @work(thread=True, exclusive=True, group="gates", name="gates-dry-run", exit_on_error=False)
    def dry_run(self) -> None:
        from console.tui.data import open_read_only

        with open_read_only(self.db_path) as store:
            data = load_gates(store)
        self.post_message(self.Loaded(data))

    def show_error(self, text: str) -> None:
        self.query_one("#gates-head", Static).update(Text(f"gates: {text}", style=FAIL_STYLE))

    def on_gates_pane_loaded(self, msg: "GatesPane.Loaded") -> None:
        self.data = d = msg.data
        head = self.query_one("#gates-head", Static)
        table = self.query_one("#gates-checks", DataTable)
        table.clear()
        self.rows = []
        if d is None:
            head.update("No frozen plan in this store: `campaign plan freeze PLAN` first.")
            return
        line = Text.assemble(("dry run", "bold"), f" of plan {d.plan_name} {d.plan_hash[:12]} on the current store "
                             "(nothing issued):  ")
        for cg in d.candidates:
            line.append(f"{cg.candidate} ")
            line.append_text(verdict_text(cg.verdict))
            line.append("   ")
        for rr in d.rules:
            line.append(f"{rr.name} ")
            line.append_text(verdict_text(rr.verdict))
            line.append("   ")
        if d.note:
            line.append(d.note, style=STALL_STYLE)
        head.update(line)
        for cg in d.candidates:
            for i, c in enumerate(cg.checks):
                style = {"PASS": PASS_STYLE, "FAIL": FAIL_STYLE}.get(c["status"], STALL_STYLE)
                table.add_row(cg.candidate, num(str(c["concurrency"])), c["label"] or c["metric"], verdict_text(c["status"]),
                              num(f"{c['n_ids']}/{c['n_expected']}"),
                              *(num(CHECK_DEFS[k].format(c[k]), style if k == "bound" else None)
                                for k in ("point", "bound", "margin", "base_value", "cand_value")),
                              Text(c["reason"] or "", style="dim"), key=f"{cg.candidate}|{i}")
                self.rows.append((cg, i))
        self.show_check(0)
        self.query_one("#gates-rules", Static).update(self.rules_text(d))
        self.query_one("#gates-equivalence", Static).update(self.equivalence_text(d))
        self.query_one("#gates-more", Static).update(self.more_text(d))

    @on(DataTable.RowHighlighted, "#gates-checks")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self.show_check(event.cursor_row)

    def show_check(self, row: int) -> None:
        hist = self.query_one("#gates-hist", Static)
        if not self.rows:
            hist.update("no quality checks to show")
            return
        cg, i = self.rows[min(row, len(self.rows) - 1)]
        c = cg.checks[i]
        hist.update(render_histogram(cg.histograms[i], f"{cg.candidate} C{c['concurrency']} {c['label'] or c['metric']}"))

    @staticmethod
    def rules_text(d: GatesData) -> Text:
        out = Text()
        for rr in d.rules:
            out.append(f"throughput rule {rr.name}: {rr.candidate} / {rr.reference} {rr.metric}, pass iff the lower "
                       f"{rr.confidence:g} bound > {rr.min_ratio:g}  ", style="bold")
            out.append_text(verdict_text(rr.verdict))
            for c in rr.cells:
                ratios = ", ".join(f"{p['ratio']:.3f}" for p in c.pairs) or "-"
                out.append(f"\n  C{c.concurrency}: paired ratios {ratios}; geo-mean "
                           f"{CHECK_DEFS['point'].format(c.geo_mean_ratio)}, lower bound "
                           f"{CHECK_DEFS['bound'].format(c.lower_bound_ratio)}  ")
                out.append_text(verdict_text(c.status))
                if c.reason:
                    out.append(f"  {c.reason}", style="dim")
            out.append("\n")
        return out or Text("no throughput rules in this plan", style="dim")

    @staticmethod
    def equivalence_text(d: GatesData) -> Text:
        """Issued equivalence verdicts (they need the engines, so no dry run): docs/equivalence.md."""
        if not d.equivalence:
            return Text("no equivalence verdicts issued (campaign equivalence PLAN)", style="dim")
        out = Text("equivalence (issued):\n", style="bold")
        for verdict, label, line, reasons in d.equivalence:
            out.append("  ")
            out.append_text(verdict_text(verdict))
            if label != verdict:
                out.append(label[len(verdict):], style=PASS_STYLE)
            out.append(f"  {line}\n")
            for r in reasons[:3]:
                out.append(f"      {r}\n", style="dim")
        return out

    @staticmethod
    def more_text(d: GatesData) -> Text:
        out = Text()
        for cg in d.candidates:
            out.append(f"{cg.candidate}: ", style="bold")
            out.append(f"evidence: {cg.evidence}\n")
            if cg.gaps:
                out.append(f"  coverage gaps: {len(cg.gaps)}; first: ", style=STALL_STYLE)
                out.append("; ".join(f"{g['engine']} C{g['concurrency']} {g['utt_id']} {g['metric']}: {g['cause']}"
                                     for g in cg.gaps[:3]) + "\n", style="dim")
            else:
                out.append("  coverage: every expected output scored\n", style="dim")
            for line in cg.attribution:
                out.append(f"  WER attribution {line}\n", style="dim")
            for why in cg.preconditions:
                out.append(f"  no PASS: {why}\n", style=STALL_STYLE)
        return out
