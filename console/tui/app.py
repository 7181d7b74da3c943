"""The Omni Campaign Console TUI (`campaign tui`).

Browser mode reads the run store (runs, run detail, report, verdicts, audit); live mode follows
a running campaign through its snapshot file (console/live.py) because the campaign's process
owns the DuckDB file. Loading happens in named thread workers that post custom messages
(console/tui/messages.py); the handlers only render.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.timer import Timer
from textual.widget import Widget
from textual.widgets import DataTable, Footer, Header, Input, Static, TabbedContent, TabPane

from console.live import live_path, read_snapshot, writer_alive
from console.tui.data import load_browser
from console.tui.messages import (
    AuditLoaded,
    CampaignFinished,
    LiveSnapshotUpdated,
    ReadingSnapshot,
    ReportsLoaded,
    RunSelected,
    RunsLoaded,
    StoreLocked,
    StoreUnavailable,
    VerdictsLoaded,
)
from console.tui.panes.gates import GatesPane
from console.tui.panes.live import LivePane
from console.tui.panes.plan import PlanPane
from console.tui.panes.sql import SqlPane
from console.tui.screens import RunDetailScreen
from console.tui.widgets import (
    FAIL_STYLE,
    PASS_STYLE,
    STALL_STYLE,
    display_path,
    metric_cell,
    num,
    run_label,
    spread_cell,
    status_text,
    verdict_text,
)
from data.errors import CampaignError
from stats.metrics import METRICS_VERSION
from stats.metrics.registry import RUNS, metrics_on
from stats.results.report import columns as report_columns
from stats.results.report import column_label as report_label
from stats.quality.metrics import NAMES as QUALITY_NAMES  # wer, sim, mos
from stats.results.quality_load import QualityLoad
from stats.results.report import SpreadText, concurrency_label

LOCK_MARK = "in use by another process"
# how often the console looks at the live snapshot file: a stat on the UI thread, the file read
# and parsed only when the campaign has written a new one (it writes at most 4 a second)
LIVE_POLL_S = 0.5
CONSOLE_NICE = 19  # the console process's nice value while it runs (lower_priority)

RUN_HEAD = ("engine", "C", "kind", "pool", "rep", "status", "excluded")
RUN_TAIL = ("started (UTC)", "plan", "run id")


def run_columns() -> tuple[tuple[str, ...], set[str]]:
    """The runs table's columns (the registry's `runs` metrics between the run's identity and its
    start, plan and id) and the numeric ones among them, by name, never by position."""
    metrics = tuple(d.short_header() for d in metrics_on(RUNS))
    return RUN_HEAD + metrics + RUN_TAIL, {"C", "rep", *metrics}

VERDICT_COLUMNS = ("issued (UTC)", "kind", "name", "verdict", "evidence", "method", "draws", "seed", "plan",
                   "verdict id")
CHECK_COLUMNS = ("C", "metric", "unit", "status", "ids", "estimate", "bound", "margin", "baseline", "candidate", "reason")
AUDIT_COLUMNS = ("seq", "time (UTC)", "kind", "plan", "subject", "payload")


@dataclass
class TableRows:
    """A table's full rows, so a filter can narrow and restore them."""
    rows: list[tuple[str, tuple[Any, ...], str]]  # (key, cells, lower-case search text)


class CampaignApp(App):
    """Browse a run store; follow a running campaign live."""

    TITLE = "Omni Campaign Console"
    CSS_PATH = "app.tcss"
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("r", "refresh", "Refresh"),
        Binding("slash", "filter", "Filter"),
        Binding("f", "filter", "Filter", show=False),
        Binding("escape", "close_filter", "Clear filter", show=False),
        Binding("1", "tab('runs')", "Runs"),
        Binding("2", "tab('report')", "Report"),
        Binding("3", "tab('verdicts')", "Verdicts"),
        Binding("4", "tab('gates')", "Gates"),
        Binding("5", "tab('plan')", "Plan"),
        Binding("6", "tab('sql')", "SQL"),
        Binding("7", "tab('live')", "Live"),
        Binding("8", "tab('audit')", "Audit"),
        Binding("s", "stop_campaign", "Stop campaign"),
    ]

    def __init__(self, db_path: str | Path, *, live: bool = False, poll_s: float = LIVE_POLL_S) -> None:
        super().__init__()
        self.db_path = Path(db_path)
        self.live_file = live_path(self.db_path)
        self.live_requested = live
        self.poll_s = poll_s
        self.tables: dict[str, TableRows] = {}
        self.panes_loaded: set[str] = set()
        self.verdicts: list[Any] = []
        self.locked = False
        self.finished_seen = False
        self._live_timer: Timer | None = None
        self._last_seq: tuple[int, float] | None = None
        self._last_stat: tuple[int, int, int] | None = None  # (inode, mtime ns, size) of the file last read
        self.db_label = display_path(self.db_path)
        self.sub_title = self.db_label

    # -- layout -----------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="status")
        yield Input(placeholder="filter rows (substring, space = and); escape clears", id="filter")
        with TabbedContent(id="tabs", initial="live" if self.live_requested else "runs"):
            with TabPane("Runs", id="runs"):
                yield DataTable(id="runs-table", cursor_type="row")
            with TabPane("Report", id="report"):
                yield VerticalScroll(Static("loading ..."), id="report-body")
            with TabPane("Verdicts", id="verdicts"):
                yield DataTable(id="verdicts-table", cursor_type="row")
                yield Static("", id="checks-title")
                yield DataTable(id="checks-table", cursor_type="row")
            with TabPane("Gates", id="gates"):
                yield GatesPane(self.db_path, id="gates-pane")
            with TabPane("Plan", id="plan"):
                yield PlanPane(self.db_path, id="plan-pane")
            with TabPane("SQL", id="sql"):
                yield SqlPane(self.db_path, id="sql-pane")
            with TabPane("Live", id="live"):
                yield LivePane(self.db_path, id="live-pane")
            with TabPane("Audit", id="audit"):
                yield Static("", id="chain")
                yield DataTable(id="audit-table", cursor_type="row")
        yield Footer()

    def on_mount(self) -> None:
        self._columns("runs-table", *run_columns())
        self._columns("verdicts-table", VERDICT_COLUMNS, {"draws", "seed"})
        self._columns("checks-table", CHECK_COLUMNS, {"C", "ids", "estimate", "bound", "margin", "baseline", "candidate"})
        self._columns("audit-table", AUDIT_COLUMNS, {"seq"})
        self.query_one("#filter", Input).disabled = True
        self.set_status(f"reading {self.db_label} ...")
        if self.live_requested:  # composed on the Live tab: focusing the runs table first would pull it back
            self.start_live()
            self.show_tab("live")
        else:
            self.query_one("#runs-table", DataTable).focus()
        self.load_store()

    def _columns(self, table_id: str, columns: tuple[str, ...], numeric: set[str]) -> None:
        table = self.query_one(f"#{table_id}", DataTable)
        for col in columns:
            table.add_column(Text(col, justify="right") if col in numeric else col, key=col)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Tabs and the filter belong to the main screen; hide them over the run detail."""
        if action in ("filter", "close_filter", "tab", "stop_campaign") and len(self.screen_stack) > 1:
            return False
        if action == "stop_campaign":
            return self.query_one(TabbedContent).active == "live"
        return True

    def set_status(self, text: str | Text, style: str = "") -> None:
        self.query_one("#status", Static).update(Text(text, style=style) if isinstance(text, str) else text)

    # -- loading (thread workers post messages) ---------------------------------------------
    @work(thread=True, exclusive=True, group="store", name="load-store")
    def load_store(self) -> None:
        try:
            data = load_browser(self.db_path)
        except CampaignError as exc:
            text = str(exc)
            self.post_message(StoreLocked(text) if LOCK_MARK in text else StoreUnavailable(text))
            return
        self.post_message(RunsLoaded(data.runs))
        self.post_message(ReportsLoaded(data.reports, data.quality))  # also gives the Live grid its plans (no store read later)
        self.post_message(VerdictsLoaded(data.verdicts))
        self.post_message(AuditLoaded(data.audit))
        if data.snapshot_of is not None:
            self.post_message(ReadingSnapshot(str(data.snapshot_of)))

    def action_refresh(self) -> None:
        self.set_status(f"reading {self.db_label} ...")
        self.load_store()
        pane = self.PANES.get(self.query_one(TabbedContent).active)
        if pane is not None:
            self.query_one(pane).load()

    # the tabs that are components (console/tui/panes/), loaded when first shown and on r
    PANES: dict[str, type] = {"gates": GatesPane, "plan": PlanPane, "sql": SqlPane, "live": LivePane}

    def action_stop_campaign(self) -> None:
        self.query_one(LivePane).request_stop()

    def on_store_locked(self, msg: StoreLocked) -> None:
        self.locked = True
        if self.finished_seen:
            # the campaign said it finished; its process is closing the file: try again shortly
            self.set_timer(1.0, self.load_store)
            return
        snap_note = (f"following the live snapshot {self.live_file.name}" if self.live_file.exists()
                     else f"no live snapshot ({self.live_file.name}) yet; press r to retry")
        self.set_status(Text.assemble(("database in use by another process", "bold yellow"),
                                      f" (a campaign is probably running): {snap_note}"))
        self.start_live()
        self.show_tab("live")

    def on_reading_snapshot(self, msg: ReadingSnapshot) -> None:
        """A campaign owns the store: browse the snapshot it served and follow it live."""
        self.set_status(Text.assemble(("campaign running", "bold"), f": {self.db_label} as of a snapshot its "
                                      "process served just now (r reads a newer one); Live follows it"))
        self.start_live()

    def on_store_unavailable(self, msg: StoreUnavailable) -> None:
        self.set_status(msg.message, FAIL_STYLE)

    # -- runs -------------------------------------------------------------------------------
    def on_runs_loaded(self, msg: RunsLoaded) -> None:
        self.locked = False
        rows = []
        for r in reversed(msg.rows):  # newest first
            m = r.metrics
            cells = (
                r.engine, num(str(r.concurrency)), r.kind, r.pool or "", num(str(r.repeat_index)),
                status_text(r.status), Text("excluded", style="yellow") if r.excluded else "",
                *(metric_cell(d.name, m.get(d.name)) for d in metrics_on(RUNS)), r.started,
                r.plan_name or "ad-hoc", run_label(r.run_id, r.plan_hash),  # full id: run detail
            )
            text = (" ".join(str(c) for c in cells).lower() + f" c{r.concurrency} " + (r.excluded or "").lower()
                    + f" {r.run_id.lower()}")
            rows.append((r.run_id, cells, text))
        self.tables["runs-table"] = TableRows(rows)
        self._fill("runs-table")
        self.set_status(f"{self.db_label}: {len(msg.rows)} runs · metrics v{METRICS_VERSION} · "
                        f"enter opens a run, / filters, r refreshes")

    def _fill(self, table_id: str) -> None:
        table = self.query_one(f"#{table_id}", DataTable)
        terms = self._terms()
        table.clear()
        for key, cells, text in self.tables.get(table_id, TableRows([])).rows:
            if all(t in text for t in terms):
                table.add_row(*cells, key=key)

    @on(DataTable.RowSelected, "#runs-table")
    def _run_chosen(self, event: DataTable.RowSelected) -> None:
        self.post_message(RunSelected(str(event.row_key.value)))

    def on_run_selected(self, msg: RunSelected) -> None:
        self.push_screen(RunDetailScreen(self.db_path, msg.run_id))

    # -- report -----------------------------------------------------------------------------
    def on_reports_loaded(self, msg: ReportsLoaded) -> None:
        if not self.query("#report-body"):  # a load that ends while the app closes
            return
        self.query_one(LivePane).remember_plans(rep.plan for rep in msg.reports)
        body = self.query_one("#report-body", VerticalScroll)
        body.remove_children()
        if not msg.reports:
            body.mount(Static("No frozen plans in this store: `campaign plan freeze PLAN` first."))
            return
        widgets: list[Widget] = []
        cols = ["C", "n"] + [report_label(f) for f in report_columns()]
        for rep in msg.reports:
            plan = rep.plan
            widgets.append(Static(Text.assemble(
                (plan.name, "bold"), f"   plan {plan.hash[:12]}  metrics v{METRICS_VERSION}  "
                f"median [min-max] cv across measured repeats"), classes="report-title"))
            for engine in plan.engines:
                table: DataTable[Text] = DataTable(cursor_type="row", classes="report-table")
                limit = rep.limits.get(engine.name)
                table.border_title = (f"{engine.name} ({engine.adapter}, profile {engine.profile or '-'}"
                                      + (f", admits {limit} at once" if limit is not None else "") + ")")
                table.add_columns(*[Text(c, justify="right") for c in cols])
                for cell in rep.cells:
                    if cell.engine != engine.name:
                        continue
                    over = limit is not None and cell.concurrency > limit  # queues inside the engine
                    row = [num(concurrency_label(cell.concurrency, limit), STALL_STYLE if over else None),
                           num(str(cell.n))]
                    for f in report_columns():
                        style = None
                        if f == "failed" and cell.spreads[f].max:
                            style = FAIL_STYLE
                        elif f == "stall_count" and cell.spreads[f].max:
                            style = "yellow"
                        row.append(spread_cell(cell.text(f), style))
                    table.add_row(*row, key=f"{engine.name}|{cell.concurrency}", height=2)
                widgets.append(table)
            if rep.left_out:
                widgets.append(Static(Text("not in aggregates: " + ", ".join(o.label() for o in rep.left_out),
                                           style="dim")))
            ql = msg.quality.get(plan.hash)
            if ql is not None:
                widgets.append(quality_load_table(ql))
        body.mount_all(widgets)

    @on(DataTable.RowSelected, ".report-table")
    def _cell_chosen(self, event: DataTable.RowSelected) -> None:
        """Drill down from a report cell to its runs: the Runs tab filtered to engine and C."""
        engine, c = str(event.row_key.value).split("|")
        self.show_tab("runs")
        self.action_filter(f"{engine} c{c} measured")

    @on(DataTable.RowSelected, ".quality-load-table")
    def _quality_cell_chosen(self, event: DataTable.RowSelected) -> None:
        """The same drill-down from a quality-under-load cell (its holdout runs are among those listed)."""
        self._cell_chosen(event)

    # -- verdicts ---------------------------------------------------------------------------
    def on_verdicts_loaded(self, msg: VerdictsLoaded) -> None:
        if not self.query("#verdicts-table"):  # a load that ends while the app closes
            return
        self.verdicts = list(reversed(msg.verdicts))
        rows = []
        for v in self.verdicts:
            cells = (v.created, v.kind, v.name or "-", verdict_text(v.verdict, v.evidence), v.evidence, v.method or "-",
                     num(plain(v.draws)), num(plain(v.seed)), (v.plan_hash or "-")[:12], v.verdict_id)
            rows.append((v.verdict_id, cells, " ".join(str(c) for c in cells).lower()))
        self.tables["verdicts-table"] = TableRows(rows)
        self._fill("verdicts-table")
        self.show_checks(self.verdicts[0] if self.verdicts else None)

    @on(DataTable.RowHighlighted, "#verdicts-table")
    def _verdict_highlighted(self, event: DataTable.RowHighlighted) -> None:
        key = event.row_key.value if event.row_key else None
        self.show_checks(next((v for v in self.verdicts if v.verdict_id == key), None))

    def show_checks(self, v: Any) -> None:
        table = self.query_one("#checks-table", DataTable)
        table.clear()
        title = self.query_one("#checks-title", Static)
        if v is None:
            title.update("No verdicts issued yet.")
            return
        title.update(Text.assemble("checks of ", (v.verdict_id, "bold"), "  ", verdict_text(v.verdict, v.evidence),
                                   *(("\nevidence: ", (v.evidence_summary, "bold")) if v.evidence_summary else ())))
        for i, c in enumerate(v.checks):  # typed rows (stats.results.checks), quality and throughput alike
            table.add_row(
                num("-" if c.concurrency is None else str(c.concurrency)), c.label or c.metric or "-", c.unit,
                verdict_text(c.status), *(num(c.formatted(k)) for k in
                                          ("n_ids", "point", "bound", "margin", "base_value", "cand_value")),
                Text(c.reason or ("" if c.upper else c.rule), style="dim"), key=str(i))

    # -- audit ------------------------------------------------------------------------------
    def on_audit_loaded(self, msg: AuditLoaded) -> None:
        if not self.query("#chain"):  # a load that ends while the app closes
            return
        chain = msg.audit.chain
        if chain.ok:
            self.query_one("#chain", Static).update(Text.assemble(("audit chain OK", PASS_STYLE), f"  {chain.message}"))
        else:
            self.query_one("#chain", Static).update(Text.assemble(
                (f"audit chain BROKEN at seq {chain.first_broken_seq}", FAIL_STYLE), f"  {chain.message}"))
        rows = []
        for e in reversed(msg.audit.events):
            broken = not chain.ok and chain.first_broken_seq is not None and e["seq"] >= chain.first_broken_seq
            cells = (num(str(e["seq"]), FAIL_STYLE if broken else None), e["time"], e["kind"], (e["plan_hash"] or "")[:12],
                     e["subject"] or "", e["payload_json"][:120])
            rows.append((str(e["seq"]), cells, " ".join(str(c) for c in cells).lower()))
        self.tables["audit-table"] = TableRows(rows)
        self._fill("audit-table")

    # -- filter -----------------------------------------------------------------------------
    def _terms(self) -> list[str]:
        return self.query_one("#filter", Input).value.lower().split()

    def _active_table(self) -> str | None:
        return {"runs": "runs-table", "verdicts": "verdicts-table", "audit": "audit-table"}.get(
            self.query_one(TabbedContent).active)

    def action_filter(self, text: str | None = None) -> None:
        box = self.query_one("#filter", Input)
        box.display = True
        box.disabled = False
        if text is not None:
            box.value = text
        box.focus()

    def action_close_filter(self) -> None:
        box = self.query_one("#filter", Input)
        if box.value or box.display:
            box.value = ""
            box.display = False
            box.disabled = True
            for table_id in self.tables:
                self._fill(table_id)
            table = self._active_table()
            if table:
                self.query_one(f"#{table}", DataTable).focus()

    @on(Input.Changed, "#filter")
    def _filter_changed(self) -> None:
        table = self._active_table()
        if table:
            self._fill(table)

    @on(Input.Submitted, "#filter")
    def _filter_done(self) -> None:
        table = self._active_table()
        if table:
            self.query_one(f"#{table}", DataTable).focus()

    @on(TabbedContent.TabActivated)
    def _tab_changed(self) -> None:
        table = self._active_table()
        if table:
            self._fill(table)
        active = self.query_one(TabbedContent).active
        if active in self.PANES and active not in self.panes_loaded:
            self.panes_loaded.add(active)
            self.query_one(self.PANES[active]).load()
        self.query_one(LivePane).set_visible(active == "live")
        if active == "live" and self._live_timer is None and not self.live_requested:
            self.peek_live()

    def action_tab(self, tab: str) -> None:
        self.show_tab(tab)

    MAIN_WIDGET = {"runs": "#runs-table", "report": "#report-body", "verdicts": "#verdicts-table",
                   "gates": "#gates-checks", "plan": "#plan-tree", "sql": "#sql-input",
                   "audit": "#audit-table", "live": "#live-requests"}

    def show_tab(self, tab: str) -> None:
        """Activate a tab and focus its main widget (focus left in a hidden pane would pull
        TabbedContent back to that pane)."""
        self.query_one(TabbedContent).active = tab
        self.query_one(self.MAIN_WIDGET[tab]).focus()

    # -- live -------------------------------------------------------------------------------
    def start_live(self) -> None:
        if self._live_timer is None:
            self._live_timer = self.set_interval(self.poll_s, self.poll_tick)
            self.poll_tick()

    def poll_tick(self) -> None:
        """One look at the snapshot file, on the UI thread: a stat, so a file the campaign has
        not rewritten since the last read costs nothing more (docs/performance.md, "An attached
        console"); a new file is read and parsed by the poll worker."""
        try:
            st = os.stat(self.live_file)
        except OSError:
            return  # no snapshot yet
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key != self._last_stat:
            self._last_stat = key
            self.poll_live()
            return
        snap = self.query_one(LivePane).snapshot
        if snap is not None and snap.state == "running" and not writer_alive(snap):
            self.post_message(CampaignFinished(f"campaign process {snap.pid} is gone; its last snapshot is shown"))

    @work(thread=True, exclusive=True, group="live-peek", name="peek-live", exit_on_error=False)
    def peek_live(self) -> None:
        """Not following a campaign (the store is free): show the last snapshot once, e.g. the
        finished campaign a new console re-attaches to."""
        snap = read_snapshot(self.live_file)
        if snap is not None and self._live_timer is None:
            self.post_message(LiveSnapshotUpdated(snap, writer_alive(snap)))

    @work(thread=True, exclusive=True, group="live", name="poll-live")
    def poll_live(self) -> None:
        try:
            snap = read_snapshot(self.live_file)
        except ValueError as exc:
            self.call_from_thread(self.set_status, str(exc), FAIL_STYLE)
            return
        if snap is None:
            return
        key = (snap.seq, snap.updated_wall)
        if key == self._last_seq:
            return  # the file was replaced by the same snapshot: nothing to render
        self._last_seq = key
        self.post_message(LiveSnapshotUpdated(snap, writer_alive(snap)))

    def on_live_snapshot_updated(self, msg: LiveSnapshotUpdated) -> None:
        self.query_one(LivePane).show(msg.snapshot, msg.writer_alive)
        if self._live_timer is None:
            return  # a look at the last snapshot (Live tab opened on a free store), not a campaign followed
        if msg.snapshot.state == "finished":
            self.post_message(CampaignFinished("campaign finished"))
        elif not msg.writer_alive:
            self.post_message(CampaignFinished(f"campaign process {msg.snapshot.pid} is gone; its last snapshot is shown"))

    def on_campaign_finished(self, msg: CampaignFinished) -> None:
        if self.finished_seen:
            return
        self.finished_seen = True
        if self._live_timer is not None:
            self._live_timer.stop()
            self._live_timer = None
        self.set_status(f"{msg.reason}; reading {self.db_label} ...")
        self.show_tab("runs")
        self.load_store()


def quality_load_table(ql: QualityLoad) -> DataTable:
    """Quality under load (docs/results.md): each engine's WER, SIM and MOS at every measured
    concurrency, the estimate over a dim line with its percentile bootstrap interval, or why none."""
    metrics = QUALITY_NAMES
    table: DataTable[Text] = DataTable(cursor_type="row", classes="quality-load-table")
    table.border_title = f"quality under load: {ql.caption()}"
    table.add_columns(Text("engine"), *[Text(c, justify="right") for c in ("C", "runs", *map(ql.header, metrics))])
    for c in ql.cells:
        row = [Text(c.engine), num(f"C{c.concurrency}" + ("*" if c.concurrency in ql.gated else "")), num(str(c.runs))]
        for m in metrics:
            t = c.text(m)
            row.append(spread_cell(SpreadText(t.value, t.interval), None if t.interval else "dim"))
        table.add_row(*row, key=f"{c.engine}|{c.concurrency}", height=2)
    return table


def lower_priority(nice: int = CONSOLE_NICE) -> str:
    """Make the console process give way to the campaign it watches: every thread it has (Linux
    keeps the nice value per thread; threads started later inherit it) goes to `nice`. The
    campaign's driver and engines run at normal priority, so on a box whose cores they keep busy
    the console gets what they leave (a nice-19 thread weighs 15 against a normal one's 1024) and
    still answers keys; SCHED_IDLE, used for the campaign's own side work (docs/timing.md), would
    freeze the screen while scoring saturates the cores. Call it once, before `App.run`; not in
    tests, where it would slow every later test in the process. Returns what it set."""
    try:
        tids = [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        tids = [0]  # not Linux: the calling thread (the process, where the nice value is per process)
    done = False
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, max(nice, os.getpriority(os.PRIO_PROCESS, tid)))
            done = True
        except (AttributeError, OSError):
            continue
    return f"nice {nice}" if done else "normal"


def plain(value: Any) -> str:
    """Integers that are not metrics (draws, seeds) print plainly; '-' when absent."""
    return "-" if value is None else str(value)
