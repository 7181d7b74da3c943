"""The demo campaign end to end (`campaign demo --quick`, real commands, real engines) and the
console's Gates, Plan, SQL and Live tabs driven with keys on the store it leaves; SVG snapshots
of the new tabs on the fixed fixture store (tests/test_tui_fixtures.py)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_tui_app import SIZE, _app_in, _loaded, campaign_db, panes_settled, settle, sync, until  # noqa: F401 - fixture
from textual.widgets import DataTable, Input, Log, OptionList, Static, TabbedContent, Tree

from console.live import LiveRun, LiveSnapshot, live_path
from console.tui.app import CampaignApp
from console.tui.panes.live import ConfirmStop
from console.tui.panes.sql import SqlPane
from data.store import Store

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.timeout(900)


def test_quick_demo_tells_the_whole_story(quick_demo):
    text, db = quick_demo
    assert re.search(r"PASS \(untouched holdout\)\s+quality\s+demo-reference-ab: ref-fast vs ref-baseline", text)
    assert re.search(r"FAIL \(untouched holdout\)\s+quality\s+demo-reference-ab: ref-lossy vs ref-baseline", text)
    assert re.search(r"failing checks: \S+@C16", text)
    assert re.search(r"(PASS|FAIL|INCONCLUSIVE)\s+throughput fast-exceeds-peer", text)
    assert "C32: ratio" in text and "audit verify OK" in text
    assert text.count(".venv/bin/campaign sql ") == 3
    with Store(db, read_only=True) as s:
        # the hand exclusion, and the probe inside its profiler window (issue 28)
        assert s.scalar("SELECT count(*) FROM exclusions WHERE reason LIKE 'profiled:%'") == 2
        wid = s.scalar("SELECT window_id FROM profiler_windows WHERE engine = 'ref-probe-empty-deltas'")
        assert s.query("SELECT r.engine, r.kind FROM exclusions x JOIN runs r USING (run_id) WHERE x.reason = ?",
                       [f"profiled: window {wid}"]) == [{"engine": "ref-probe-empty-deltas", "kind": "exploratory"}]
        assert s.query("SELECT engine, value_text FROM imported_results") == [
            {"engine": "ref-peer (its README)", "value_text": "95.0"}]
        assert s.scalar("SELECT count(*) FROM audit_events WHERE kind = 'holdout_opened'") == 1
        assert s.scalar("SELECT count(DISTINCT engine) FROM runs WHERE pool = 'holdout'") == 3
        # the reference engine's self-check ran after the last launch: ref-fast's PASS rests on it
        assert s.query("SELECT name, status FROM validator_runs") == [{"name": "reference-self-check", "status": "passed"}]
        assert s.scalar("SELECT max(seq) FROM audit_events WHERE kind = 'launch_recorded'") < s.scalar(
            "SELECT seq FROM audit_events WHERE kind = 'validator_run'")
        evidence = [json.loads(d)["evidence"]["status"] for (d,) in s.con.execute(
            "SELECT document_json FROM verdicts WHERE kind = 'quality'").fetchall()]
    assert evidence == ["untouched", "untouched"]
    # what each engine was: the demo's engines are the installed console's code (docs/engines.md)
    from importlib.metadata import version
    label = f"dist omni-campaign-console {version('omni-campaign-console')}"
    assert re.search(rf"ref-fast \(reference, profile fast.*{re.escape(label)}", text), text
    with Store(db, read_only=True) as s:
        assert {r["source_kind"] for r in s.query("SELECT source_kind FROM engine_launches")} == {"dist"}
        plan_hash = s.scalar("SELECT plan_hash FROM plans WHERE kind = 'plan'")
    html = db.parent / "identity-report.html"
    r = subprocess.run([sys.executable, "-m", "console.cli", "report", plan_hash, "--db", str(db), "--html", str(html)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert f"<code>{label}</code>" in html.read_text(encoding="utf-8")


TAB_OF_KEY = dict(zip("12345678", ("runs", "report", "verdicts", "gates", "plan", "sql", "live", "audit")))


async def _tab(pilot, key):
    """Switch tabs with a number key and wait until the tab shows its loaded content: the tab is
    active, its component's load has started (the app starts it on the TabActivated message,
    which can trail the key press on a loaded box) and ended, and the result is rendered."""
    app = pilot.app
    tab = TAB_OF_KEY[key]
    await pilot.press(key)
    await until(pilot, lambda: app.query_one(TabbedContent).active == tab
                and (tab not in app.PANES or tab in app.panes_loaded), what=f"the {tab} tab")
    await panes_settled(pilot)


async def _submit(pilot):
    """Enter in the SQL box, then wait for that query's result (or error) to be shown."""
    pane = pilot.app.query_one(SqlPane)
    ended = pane.ended
    await pilot.press("enter")
    await until(pilot, lambda: pane.ended > ended and not pane.busy, what="the query")
    await panes_settled(pilot)


@sync
async def test_gates_tab_dry_run_on_the_demo_store(quick_demo):
    _, db = quick_demo
    app = CampaignApp(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await _tab(pilot, "4")
        assert app.query_one(TabbedContent).active == "gates"
        head = str(app.query_one("#gates-head", Static).render())
        assert "dry run" in head and "ref-fast PASS" in head and "ref-lossy FAIL" in head
        table = app.query_one("#gates-checks", DataTable)
        assert table.row_count == 6  # two candidates x three metrics at C16
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert {r[3] for r in rows if r[0] == "ref-fast"} == {"PASS"}
        assert "FAIL" in {r[3] for r in rows if r[0] == "ref-lossy"}
        table.move_cursor(row=4)
        await pilot.pause()
        hist = str(app.query_one("#gates-hist", Static).render())
        assert hist.startswith("ref-lossy C16") and "B upper bound" in hist and "M margin" in hist
        rules = str(app.query_one("#gates-rules", Static).render())
        assert "fast-exceeds-peer" in rules and "C16: paired ratios" in rules and "C32: paired ratios" in rules
        assert "evidence: holdout pool 'holdout'" in str(app.query_one("#gates-more", Static).render())


@sync
async def test_plan_tab_on_the_demo_store(quick_demo):
    _, db = quick_demo
    app = CampaignApp(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await _tab(pilot, "5")
        head = str(app.query_one("#plan-head", Static).render())
        assert "plan demo-reference-ab" in head and "hash verified" in head
        facts = str(app.query_one("#plan-facts", Static).render())
        assert "reserved at freeze (audit #" in facts and "opened by audit #" in facts
        assert "used by ref-baseline" in facts and "profiled: stands for" in facts and "audit chain OK" in facts
        # issue 28: the profiler window and the imported figure, marked
        assert "profiler windows (1)" in facts and "ref-probe-empty-deltas" in facts
        assert "imported results (1): imported, not measured" in facts and "ref-peer (its README)" in facts
        assert re.search(r"ref-lossy [0-9a-f]{12} rejected: verdict quality-\S+ FAIL", facts), facts  # issue 28
        tree = app.query_one("#plan-tree", Tree)
        labels = {str(n.label) for n in tree.root.children[0].children}
        assert {'schema: "omni-campaign-plan/1"', 'name: "demo-reference-ab"', "quality", "engines [5]", "equivalence"} <= labels
        events = app.query_one("#plan-events", DataTable)
        kinds = {str(events.get_row_at(i)[2]) for i in range(events.row_count)}
        assert {"plan_frozen", "run_excluded", "holdout_opened", "verdict_issued"} <= kinds


@sync
async def test_sql_tab_runs_queries_and_keeps_history(quick_demo):
    _, db = quick_demo
    app = CampaignApp(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await _tab(pilot, "6")
        box = app.query_one("#sql-input", Input)
        assert app.focused is box
        box.value = ""
        await pilot.press(*"SELECT 1 + 41 AS answer")  # digits type into the box, they do not switch tabs
        assert app.query_one(TabbedContent).active == "sql" and box.value == "SELECT 1 + 41 AS answer"
        await _submit(pilot)
        table = app.query_one("#sql-results", DataTable)
        assert table.row_count == 1 and str(table.get_row_at(0)[0]) == "42"
        box.value = "SELECT engine, count(*) AS runs FROM runs GROUP BY ALL ORDER BY ALL"
        box.focus()
        await _submit(pilot)
        assert [str(table.get_row_at(i)[0]) for i in range(table.row_count)] == [
            "ref-baseline", "ref-fast", "ref-lossy", "ref-peer", "ref-precision", "ref-probe-empty-deltas"]  # the probe: issue 28
        assert app.query_one("#sql-history", OptionList).option_count == 2
        box.value = "DELETE FROM runs"  # read-only: refused, shown, nothing changes
        box.focus()
        await _submit(pilot)
        assert "read-only" in str(app.query_one("#sql-info", Static).render()).lower()
    with Store(db, read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM runs") > 0


@sync
async def test_live_tab_grid_events_and_stop_with_confirmation(quick_demo, tmp_path):
    _, demo_db = quick_demo
    db = tmp_path / "c.duckdb"
    shutil.copy(demo_db, db)
    with Store(db, read_only=True) as s:
        plan_hash = s.scalar("SELECT plan_hash FROM plans")
        done = s.query("SELECT run_id, cell_key AS cell, status FROM runs WHERE pool = 'tuning' ORDER BY started_at "
                       "LIMIT 3")
    victim = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()"])  # until a signal: no clock
    try:
        run = LiveRun("r-now", "ref-lossy", 16, "measured", 16, completed=3, failed={"timeout": 2})
        snap = LiveSnapshot(pid=victim.pid, seq=3, plan_name="demo-reference-ab", plan_hash=plan_hash, cell_index=4,
                            cells_total=16, cell_key="ref-lossy/c16/measured/0", run=run, runs_done=done)
        live_path(db).write_text(snap.to_json())
        app = CampaignApp(db, live=True, poll_s=0.05)
        async with app.run_test(size=SIZE) as pilot:
            # the app's own events: its poller shows the snapshot, the grid gets the plan's cells
            grid = app.query_one("#live-grid", DataTable)
            log = app.query_one("#live-log", Log)
            await until(pilot, lambda: grid.row_count == 5 and any("run r-now started" in x for x in log.lines),
                        what="the live grid and its event log")
            assert app.query_one(TabbedContent).active == "live"
            rows = {str(grid.get_row_at(i)[0]): [str(c) for c in grid.get_row_at(i)[1:]] for i in range(grid.row_count)}
            assert sorted(rows) == ["ref-baseline", "ref-fast", "ref-lossy", "ref-peer", "ref-precision"]
            assert rows["ref-lossy"][0] == "▶·"  # C16: the running repeat, then the pending one
            assert "failure: timeout x2 in ref-lossy C=16" in "\n".join(log.lines)
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, ConfirmStop), what="the stop confirmation")
            await pilot.press("n")
            await until(pilot, lambda: not isinstance(app.screen, ConfirmStop), what="the confirmation to close")
            assert victim.poll() is None
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, ConfirmStop), what="the stop confirmation")
            await pilot.press("y")
            await until(pilot, lambda: any(f"SIGTERM sent to process {victim.pid}" in x for x in log.lines),
                        what="the stop to be sent")
        assert victim.wait() == -15  # SIGTERM, as `kill PID` would send (already sent: the log says so)
    finally:
        victim.kill()


@sync
@pytest.mark.slow  # 5 s in a loaded `make check`
async def test_a_failing_load_shows_an_error_and_the_app_lives(campaign_db, tmp_path):
    db = tmp_path / "c.duckdb"
    shutil.copy(campaign_db, db)
    app = CampaignApp(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        db.write_bytes(b"not a database")  # the Gates loader opens it and fails
        await _tab(pilot, "4")
        await until(pilot, lambda: "gates:" in str(app.query_one("#gates-head", Static).render()),
                    what="the gates loader's error")
        assert "gates:" in str(app.query_one("#gates-head", Static).render())
        assert "gates-dry-run" in str(app.query_one("#status", Static).render())
        await _tab(pilot, "1")
        assert app.is_running and app.query_one(TabbedContent).active == "runs"


@sync
async def test_every_tab_at_80x24(quick_demo):
    _, db = quick_demo
    app = CampaignApp(db)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        for key, tab in zip("12345678", ("runs", "report", "verdicts", "gates", "plan", "sql", "live", "audit")):
            if tab == "live":
                await pilot.press("escape")  # out of the SQL box, where digits are query text
            await _tab(pilot, key)
            assert app.query_one(TabbedContent).active == tab


# -- SVG snapshots of the new tabs (fixture store: fixed data, fixed clock) -----------------------
def _snap_tab(key):
    async def before(pilot):
        await _loaded(pilot)
        await _tab(pilot, key)
    return before


@pytest.mark.slow  # 3 s in a loaded `make check`
def test_snapshot_plan(campaign_db, monkeypatch, snap_compare):
    assert snap_compare(_app_in(campaign_db, monkeypatch), terminal_size=SIZE, run_before=_snap_tab("5"))


@pytest.mark.slow  # 4 s in a loaded `make check`
def test_snapshot_plan_at_80x24(campaign_db, monkeypatch, snap_compare):
    assert snap_compare(_app_in(campaign_db, monkeypatch), terminal_size=(80, 24), run_before=_snap_tab("5"))


@pytest.mark.slow  # 5 s in a loaded `make check`
def test_snapshot_gates(campaign_db, monkeypatch, snap_compare):
    assert snap_compare(_app_in(campaign_db, monkeypatch), terminal_size=SIZE, run_before=_snap_tab("4"))


def test_snapshot_sql(campaign_db, monkeypatch, snap_compare):
    async def before(pilot):
        await _loaded(pilot)
        await _tab(pilot, "6")
        box = pilot.app.query_one("#sql-input", Input)
        box.cursor_blink = False  # a blinking cursor is drawn or not depending on the instant of the screenshot
        box.value = "SELECT engine, concurrency, count(*) AS runs FROM runs GROUP BY ALL ORDER BY ALL"
        await _submit(pilot)
    assert snap_compare(_app_in(campaign_db, monkeypatch), terminal_size=SIZE, run_before=before)


@pytest.mark.slow  # 5 s in a loaded `make check`
def test_snapshot_gates_at_80x24(campaign_db, monkeypatch, snap_compare):
    assert snap_compare(_app_in(campaign_db, monkeypatch), terminal_size=(80, 24), run_before=_snap_tab("4"))


@sync
async def test_runs_tab_shows_the_part_of_a_run_id_that_differs(quick_demo):
    """Every plan run's id starts with its plan's hash prefix: the Runs tab shows what follows it
    (issue 32), the filter still finds the full id, and the run detail shows it whole."""
    from console.tui.screens import RunDetailScreen

    _, db = quick_demo
    with Store(db, read_only=True) as s:
        plan_hash = s.scalar("SELECT plan_hash FROM plans WHERE kind = 'plan'")
        full = s.scalar("SELECT run_id FROM runs WHERE plan_hash = ? AND kind = 'measured' ORDER BY run_id LIMIT 1",
                        [plan_hash])
    app = CampaignApp(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        table = app.query_one("#runs-table", DataTable)
        col = [str(c.label) for c in table.columns.values()].index("run id")
        shown = [str(table.get_row_at(i)[col]) for i in range(table.row_count)]
        keys = [str(k.value) for k in table.rows]
        plan_rows = [(s, k) for s, k in zip(shown, keys) if k.startswith(plan_hash[:8] + "-")]
        assert len(plan_rows) > 10 and len({s for s, _ in plan_rows}) == len(plan_rows)
        assert all(k == f"{plan_hash[:8]}-{s}" for s, k in plan_rows)
        row = keys.index(full)
        table.move_cursor(row=row)
        await pilot.press("enter")
        await settle(pilot, app)
        assert isinstance(app.screen, RunDetailScreen)
        assert full in str(app.screen.query_one("#detail-title", Static).render())
