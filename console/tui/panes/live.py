"""Live: the running campaign as a whole — the grid of engine x concurrency x repeat cells with
their state, the cell running now (console/tui/widgets.LiveView: progress, in-flight streams, GPU
panels), an event log of stalls, failures by class and engine launches, and a stop action that
asks for confirmation. Everything comes from the live snapshot (console/live.py) and, for the
plan's cells, from a read-only view of the store (the campaign's own snapshot while it runs)."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Log, Static

from console.live import LiveSnapshot
from console.tui.panes.base import Pane
from console.tui.widgets import FAIL_STYLE, PASS_STYLE, STALL_STYLE, LiveView

STATE_GLYPH = {"pending": ("·", "dim"), "running": ("▶", "bold"), "complete": ("✓", PASS_STYLE),
               "incomplete": ("✗", STALL_STYLE), "failed": ("✗", FAIL_STYLE), "skipped": ("-", STALL_STYLE)}
HOLDOUT = "@holdout"

if TYPE_CHECKING:
    from data.plan_model import Plan


@dataclass(frozen=True)
class GridCell:
    key: str
    engine: str
    concurrency: int
    kind: str
    repeat: int


def grid_cells(plan: Plan, phase: str) -> list[GridCell]:
    from console.runner import plan_cells

    return [GridCell(c.key, c.engine, c.concurrency, c.kind, c.repeat) for c in plan_cells(plan, phase)]


def load_cells(db_path: Path, plan_hash: str, phase: str) -> list[GridCell]:
    """The plan's cells read from the store: only for a plan the console has not read yet, since
    while a campaign runs this costs the campaign's process a snapshot copy (data/snapshot.py)."""
    from console.tui.data import open_read_only
    from data.plan_loading import plan_from_store

    with open_read_only(db_path) as store:
        plan = plan_from_store(store, plan_hash)
    return grid_cells(plan, phase)


def cell_states(cells: list[GridCell], snap: LiveSnapshot) -> dict[str, str]:
    states = {c.key: "pending" for c in cells}
    for r in snap.runs_done:
        if r.get("cell") in states:
            states[r["cell"]] = str(r.get("status") or "complete")
    if snap.cell_key in states and snap.state == "running" and snap.run is not None and snap.run.status == "running":
        states[snap.cell_key] = "running"
    return states


def grid_rows(cells: list[GridCell], states: dict[str, str]) -> tuple[list[str], list[tuple[str, list[Text]]]]:
    """Columns 'C<c>' (one glyph per repeat, warmups first); one row per engine."""
    concs = sorted({c.concurrency for c in cells})
    engines = list(dict.fromkeys(c.engine for c in cells))
    rows = []
    for e in engines:
        out = []
        for conc in concs:
            t = Text()
            for c in (x for x in cells if x.engine == e and x.concurrency == conc):
                glyph, style = STATE_GLYPH.get(states.get(c.key, "pending"), ("?", ""))
                t.append(glyph, style=style)
            out.append(t)
        rows.append((e, out))
    return [f"C{c}" for c in concs], rows


class EventTracker:
    """Turns successive snapshots into log lines: cells started and ended, new failures by
    class, stalls seen in flight."""

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.failed: dict[str, int] = {}
        self.stalled: set[tuple[str, int]] = set()
        self.done: int = 0

    def lines(self, snap: LiveSnapshot) -> list[str]:
        out = []
        for r in snap.runs_done[self.done:]:
            out.append(f"cell {r.get('cell')}: run {r.get('run_id')} {r.get('status')}")
        self.done = len(snap.runs_done)
        run = snap.run
        if run is not None and run.run_id != self.run_id:
            self.run_id, self.failed = run.run_id, {}
            out.append(f"cell {snap.cell_index}/{snap.cells_total} {snap.cell_key}: engine {run.engine} up, "
                       f"run {run.run_id} started (C={run.concurrency})")
        if run is not None:
            for cls, n in sorted(run.failed.items()):
                if n > self.failed.get(cls, 0):
                    out.append(f"failure: {cls} x{n - self.failed.get(cls, 0)} in {run.engine} C={run.concurrency}")
            self.failed = dict(run.failed)
        for f in snap.inflight or ():
            if f.buffer_s is not None and f.buffer_s <= 0 and (self.run_id or "", f.index) not in self.stalled:
                self.stalled.add((self.run_id or "", f.index))
                out.append(f"stall: request {f.index} ({f.utt_id}) ran dry after {f.audio_s:.1f} s of audio")
        return out


class ConfirmStop(ModalScreen[bool]):
    """Stop the campaign? y / n."""

    BINDINGS = [Binding("y", "answer(True)", "Stop it"), Binding("n", "answer(False)", "Keep running"),
                Binding("escape", "answer(False)", "Keep running")]
    DEFAULT_CSS = """
    ConfirmStop { align: center middle; }
    ConfirmStop > Vertical { width: 60; height: auto; border: thick $error; padding: 1 2; background: $surface; }
    ConfirmStop Horizontal { height: auto; margin-top: 1; }
    """

    def __init__(self, pid: int, plan: str) -> None:
        super().__init__()
        self.pid, self.plan = pid, plan

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text.assemble(("Stop the campaign?", "bold"), f"\n{self.plan}, process {self.pid}. The run in "
                                       "progress is marked incomplete; `campaign run PLAN --resume` continues."))
            with Horizontal():
                yield Button("Stop (y)", variant="error", id="stop-yes")
                yield Button("Keep running (n)", id="stop-no")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "stop-yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class LivePane(Pane):
    """The Live tab."""

    class CellsLoaded(Message):
        def __init__(self, plan_hash: str, phase: str, cells: list[GridCell]) -> None:
            super().__init__()
            self.plan_hash, self.phase, self.cells = plan_hash, phase, cells

    DEFAULT_CSS = """
    LivePane { height: 1fr; }
    LivePane #live-top { height: auto; max-height: 10; }
    LivePane #live-grid { width: 1fr; height: auto; max-height: 10; }
    LivePane #live-log { width: 1fr; height: 8; border-left: solid $panel-lighten-2; }
    LivePane.-short #live-top, LivePane.-short #live-grid { max-height: 4; }
    LivePane.-short #live-log { height: 4; }
    LivePane.-short GpuPanel { display: none; }
    LivePane.-short #live-progress, LivePane.-short #live-metrics { margin: 0; }
    """
    SHORT_ROWS = 30  # below this height (an 80x24 terminal) the streams keep the room: smaller top, no GPU panel

    def __init__(self, db_path: Path, **kw: Any) -> None:
        super().__init__(**kw)
        self.db_path = db_path
        self.cells: list[GridCell] = []
        self.cells_for: tuple[str, str] | None = None
        self.snapshot: LiveSnapshot | None = None
        self.alive = False
        self.events = EventTracker()
        self.plans: dict[str, Plan] = {}  # frozen plans the console has read (their cells need no store read)
        self.tab_shown = False  # the Live tab is shown: render snapshots; else only note the newest
        self._stale = False  # a snapshot arrived while hidden
        self._grid: tuple[list[str], list[tuple[str, list[Text]]]] | None = None  # what the grid shows now

    def compose(self) -> ComposeResult:
        with Horizontal(id="live-top"):
            yield DataTable(id="live-grid", cursor_type="none", show_cursor=False)
            yield Log(id="live-log", max_lines=500)
        yield LiveView(id="live-view")

    def load(self) -> None:
        """The snapshot poller (the app's) feeds this pane; nothing to load on activation."""

    def on_resize(self, event: events.Resize) -> None:
        self.set_class(event.size.height < self.SHORT_ROWS, "-short")
        self.query_one("#live-log", Log).scroll_end(animate=False)  # the newest events stay in view

    def remember_plans(self, plans: Iterable[Plan]) -> None:
        """Plans the console read from the store (the Report tab's): a campaign of one of them
        gets its grid without reading the store again."""
        self.plans.update((p.hash, p) for p in plans)

    def show(self, snap: LiveSnapshot, writer_alive: bool) -> None:
        """A new snapshot: the event log always takes it (events must not be missed); the views
        render it only while the tab is shown, so a hidden Live tab costs the campaign nothing."""
        self.snapshot, self.alive = snap, writer_alive
        log = self.query_one("#live-log", Log)
        for line in self.events.lines(snap):
            log.write_line(line)
        phase = "holdout" if (snap.cell_key or "").endswith(HOLDOUT) else "sweep"
        if snap.plan_hash and self.cells_for != (snap.plan_hash, phase):
            self.cells_for = (snap.plan_hash, phase)
            plan = self.plans.get(snap.plan_hash)
            if plan is not None:
                self.cells = grid_cells(plan, phase)
            else:
                self.started(self.load_cells(snap.plan_hash, phase))
        self._stale = True
        if self.tab_shown:
            self.render_snapshot()

    def set_visible(self, visible: bool) -> None:
        self.tab_shown = visible
        if visible and self._stale:
            self.render_snapshot()

    def render_snapshot(self) -> None:
        if self.snapshot is None:
            return
        self._stale = False
        self.query_one(LiveView).show(self.snapshot, self.alive)
        self.render_grid()
        self.query_one("#live-log", Log).scroll_end(animate=False)  # lines written while hidden or before a resize

    @work(thread=True, exclusive=True, group="live-cells", name="load-live-cells", exit_on_error=False)
    def load_cells(self, plan_hash: str, phase: str) -> None:
        self.post_message(self.CellsLoaded(plan_hash, phase, load_cells(self.db_path, plan_hash, phase)))

    def on_live_pane_cells_loaded(self, msg: "LivePane.CellsLoaded") -> None:
        if (msg.plan_hash, msg.phase) != self.cells_for:
            return  # the campaign moved on to another plan or phase meanwhile
        self.cells = msg.cells
        if self.tab_shown:
            self.render_grid()

    def render_grid(self) -> None:
        table = self.query_one("#live-grid", DataTable)
        if not self.cells or self.snapshot is None:
            return
        grid = grid_rows(self.cells, cell_states(self.cells, self.snapshot))
        if grid == self._grid:
            return  # cells change state a few times a minute; snapshots come a few times a second
        self._grid = grid
        columns, rows = grid
        table.clear(columns=True)
        table.add_column("engine", key="engine")
        for c in columns:
            table.add_column(c, key=c)
        for engine, glyphs in rows:
            table.add_row(engine, *glyphs, key=engine)

    def show_error(self, text: str) -> None:
        self.query_one("#live-log", Log).write_line(f"error: {text}")

    def request_stop(self) -> None:
        snap = self.snapshot
        if snap is None or snap.state != "running" or not self.alive:
            self.app.notify("no running campaign to stop", severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                os.kill(snap.pid, signal.SIGTERM)  # `campaign run` turns SIGTERM into a clean interrupt
                self.query_one("#live-log", Log).write_line(f"stop requested: SIGTERM sent to process {snap.pid}")

        self.app.push_screen(ConfirmStop(snap.pid, snap.plan_name or "ad-hoc"), answered)
