"""Pilot tests of `campaign tui`: message sequences, drill-down and back, filter, the locked
database, live following, and SVG snapshots of three screens (fixed data, fixed size)."""

from __future__ import annotations

import asyncio
import functools
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_tui_fixtures import populate
from textual.widgets import DataTable, Input, Static, TabbedContent

from console.live import LiveFeed
from console.tui import messages as M
from console.tui.app import CampaignApp
from console.tui.screens import RunDetailScreen
from data.records import ChunkRecord, RequestRecord
from data.store import Store
from engine_adapters.driver import InflightRow

SIZE = (160, 45)
OURS = tuple(v for v in vars(M).values() if isinstance(v, type) and issubclass(v, M.Message) and v is not M.Message)


@pytest.fixture(scope="module")
def campaign_db(tmp_path_factory):
    root = tmp_path_factory.mktemp("tui")
    cwd = Path.cwd()
    import os
    os.chdir(root)
    try:
        return populate(root)
    finally:
        os.chdir(cwd)


def sync(fn):
    """No pytest-asyncio here: run the coroutine test on a fresh event loop."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(fn(*args, **kwargs))
    return wrapper


def recorder():
    seen: list = []
    return seen, (lambda m: seen.append(m) if isinstance(m, OURS) else None)


async def settle(pilot, app):
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()


async def until(pilot, condition, what: str = "condition"):
    """Let the app handle its messages until `condition()` holds (a worker's end, a widget's
    content): each round waits for its workers to end and its queued messages to be handled, then
    yields to its timers. No deadline and no fixed sleep: a loaded box makes this slower, never
    wrong; a condition that never holds is a hang, which the suite's per-test timeout ends
    (pyproject.toml), the captured output naming what was awaited."""
    if condition():
        return
    print(f"waiting for {what}")
    while not condition():
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        if not condition():
            await asyncio.sleep(0.01)  # a yield to the app's timers (its live poll), not a deadline


async def panes_settled(pilot):
    """Every tab component's loads have ended and their results are rendered (Pane.busy), and
    the app's own loaders too; then one more round of messages for what the results trigger
    (a table's first highlighted row)."""
    panes = list(pilot.app.query("GatesPane, PlanPane, SqlPane, LivePane"))
    await until(pilot, lambda: not any(p.busy for p in panes), what="the tab loaders")
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.wait_for_scheduled_animations()


def names(seen) -> list[str]:
    return [type(m).__name__ for m in seen]


@sync
async def test_browse_drill_down_and_back(campaign_db):
    seen, hook = recorder()
    app = CampaignApp(campaign_db)
    async with app.run_test(size=SIZE, message_hook=hook) as pilot:
        await settle(pilot, app)
        assert names(seen)[:4] == ["RunsLoaded", "ReportsLoaded", "VerdictsLoaded", "AuditLoaded"]
        table = app.query_one("#runs-table", DataTable)
        assert table.row_count == 10
        # newest first: the exploratory run; move to the first measured ref-fast C2 run with a failure
        target = "run-fast-c2-m1"
        row = [str(k.value) for k in table.rows].index(target)
        table.move_cursor(row=row)
        await pilot.press("enter")
        await settle(pilot, app)
        assert isinstance(app.screen, RunDetailScreen)
        after = names(seen)[4:]
        assert after == ["RunSelected", "RunDetailLoaded"]
        selected = next(m for m in seen if isinstance(m, M.RunSelected))
        assert selected.run_id == target
        detail = app.screen.detail
        assert detail.metrics.failed == 1 and detail.metrics.failures_by_class == {"no_end_marker": 1}
        requests = app.screen.query_one("#requests", DataTable)
        assert requests.row_count == 4
        assert "no_end_marker" in str(requests.get_row_at(3)[2])
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, RunDetailScreen)
        assert app.focused is app.query_one("#runs-table", DataTable)


@sync
@pytest.mark.slow  # 6 s in a loaded `make check`
async def test_filter_and_report_drill_down(campaign_db):
    app = CampaignApp(campaign_db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("slash")
        assert app.query_one("#filter", Input).has_focus
        await pilot.press(*"fast c2")
        await pilot.pause()
        table = app.query_one("#runs-table", DataTable)
        assert sorted(str(k.value) for k in table.rows) == ["run-fast-c2-m0", "run-fast-c2-m1"]
        await pilot.press("escape")
        await pilot.pause()
        assert table.row_count == 10 and not app.query_one("#filter", Input).display
        # report: enter on a cell lists its runs
        await pilot.press("2")
        await pilot.pause()
        report = app.query(".report-table").last()
        report.focus()
        report.move_cursor(row=1)  # ref-fast, C=2
        await pilot.press("enter")
        await pilot.pause()
        assert app.query_one(TabbedContent).active == "runs"
        assert sorted(str(k.value) for k in table.rows) == ["run-fast-c2-m0", "run-fast-c2-m1"]


@sync
@pytest.mark.slow  # 3 s in a loaded `make check`
async def test_locked_database_is_reported_not_crashed(campaign_db, tmp_path):
    db = tmp_path / "busy.duckdb"
    Store(db).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from data.store import Store; s = Store(sys.argv[1]); print('ready', flush=True); "
         "sys.stdin.read()", str(db)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[1])
    try:
        assert holder.stdout.readline().strip() == "ready"
        seen, hook = recorder()
        app = CampaignApp(db, poll_s=0.05)
        async with app.run_test(size=SIZE, message_hook=hook) as pilot:
            await settle(pilot, app)
            locked = [m for m in seen if isinstance(m, M.StoreLocked)]
            assert locked and "in use by another process" in locked[0].message
            status = str(app.query_one("#status", Static).render())
            assert "database in use by another process" in status
            assert app.query_one(TabbedContent).active == "live"
            # the campaign now publishes a snapshot: the live tab follows it
            feed = LiveFeed(db, max_hz=20, plan_name="busy-plan")
            feed.run_started("r1", "ref-baseline", 2, "measured", 2)
            feed.records([RequestRecord("r1", 0, "spk0-0000", False, "timeout", 1_000_000_000,
                                        t_end_ns=2_000_000_000)])
            await until(pilot, lambda: any(isinstance(m, M.LiveSnapshotUpdated) for m in seen)
                        and "timeout 1" in str(app.query_one("#live-counts", Static).render()), what="the snapshot")
            snap = next(m for m in seen if isinstance(m, M.LiveSnapshotUpdated)).snapshot
            assert snap.plan_name == "busy-plan" and snap.run.failed == {"timeout": 1}
            counts = str(app.query_one("#live-counts", Static).render())
            assert "timeout 1" in counts
            feed.close()
    finally:
        holder.communicate("", timeout=10)


@sync
@pytest.mark.slow  # 4 s in a loaded `make check`
async def test_live_following_then_finished_switches_to_browser(campaign_db, tmp_path):
    """A LiveFeed fed with records read back from the store; when it says finished the TUI
    reads the store and shows the Runs tab."""
    db = tmp_path / "c.duckdb"
    db.write_bytes(campaign_db.read_bytes())
    with Store(db, read_only=True) as s:
        reqs = s.query("SELECT * EXCLUDE (text) FROM requests WHERE run_id = 'run-fast-c2-m1' ORDER BY request_index")
        chunks = s.query("SELECT * FROM chunks WHERE run_id = 'run-fast-c2-m1' ORDER BY request_index, chunk_index")
    feed = LiveFeed(db, max_hz=50, plan_name="test-plan")
    feed.cell(0, 1, "ref-fast/c2/measured/1", "running")
    feed.run_started("run-fast-c2-m1", "ref-fast", 2, "measured", 4)
    feed.records([ChunkRecord(**c) for c in chunks] + [RequestRecord(**r) for r in reqs])
    now = time.perf_counter_ns()  # one request still streaming, silent for 1.5 s
    feed.inflight([InflightRow(7, "spk9-0001", False, now - 3_000_000_000, 5, now - 2_800_000_000,
                               now - 1_500_000_000)], now)
    feed.close()
    seen, hook = recorder()
    app = CampaignApp(db, live=True, poll_s=0.05)
    async with app.run_test(size=SIZE, message_hook=hook) as pilot:
        await settle(pilot, app)
        table = app.query_one("#live-requests", DataTable)
        await until(pilot, lambda: table.row_count >= 5, what="the live requests")
        assert app.query_one(TabbedContent).active == "live"
        assert table.row_count == 5  # the streaming request first, then the four that ended
        first = [str(c) for c in table.get_row_at(0)]
        assert first[:3] == ["7", "spk9-0001", "waiting 3.0 s, silent 1.5 s"]  # no dialect given: not decoded
        assert "in flight 1 " in str(app.query_one("#live-counts", Static).render())
        seen.clear()
        feed2 = LiveFeed(db, max_hz=50)
        feed2.finished()
        await until(pilot, lambda: "RunsLoaded" in names(seen), what="the store read after the campaign finished")
        order = [n for n in names(seen) if n in ("LiveSnapshotUpdated", "CampaignFinished", "RunsLoaded")]
        assert order[:3] == ["LiveSnapshotUpdated", "CampaignFinished", "RunsLoaded"]
        assert app.query_one(TabbedContent).active == "runs"


@sync
async def test_missing_database_message(tmp_path):
    seen, hook = recorder()
    app = CampaignApp(tmp_path / "nope.duckdb")
    async with app.run_test(size=SIZE, message_hook=hook) as pilot:
        await settle(pilot, app)
        assert names(seen) == ["StoreUnavailable"]
        assert "no such database" in str(app.query_one("#status", Static).render())


# -- SVG snapshots ----------------------------------------------------------------------------
def _app_in(campaign_db, monkeypatch):
    monkeypatch.chdir(campaign_db.parent)  # relative db label: the same text in every test run
    return CampaignApp(Path(campaign_db.name))


async def _loaded(pilot):
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def _on_tab(key: str):
    """A snapshot's run_before: the store loaded, then the tab behind number key `key`."""
    async def before(pilot):
        await _loaded(pilot)
        await pilot.press(key)
        await pilot.pause()
    return before


def test_snapshot_runs(campaign_db, monkeypatch, snap_compare):
    assert snap_compare(_app_in(campaign_db, monkeypatch), terminal_size=SIZE, run_before=_loaded)


@pytest.mark.slow  # 4 s in a loaded `make check`
def test_snapshot_report(campaign_db, monkeypatch, snap_compare):
    assert snap_compare(_app_in(campaign_db, monkeypatch), terminal_size=SIZE, run_before=_on_tab("2"))


@pytest.mark.slow  # 3 s in a loaded `make check`
def test_snapshot_verdicts(campaign_db, monkeypatch, snap_compare):
    assert snap_compare(_app_in(campaign_db, monkeypatch), terminal_size=SIZE, run_before=_on_tab("3"))


@pytest.mark.slow  # 3 s in a loaded `make check`
def test_snapshot_audit(campaign_db, monkeypatch, snap_compare):
    assert snap_compare(_app_in(campaign_db, monkeypatch), terminal_size=SIZE, run_before=_on_tab("8"))


def test_snapshot_run_detail_with_gpu(campaign_db, monkeypatch, snap_compare):
    async def before(pilot):
        await _loaded(pilot)
        table = pilot.app.query_one("#runs-table", DataTable)
        table.move_cursor(row=[str(k.value) for k in table.rows].index("run-baseline-c1-m0"))
        await pilot.press("enter")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.app.screen.workers.wait_for_complete()
        await pilot.pause()
    assert snap_compare(_app_in(campaign_db, monkeypatch), terminal_size=SIZE, run_before=before)


def live_snapshot_app(campaign_db, monkeypatch, tmp_path):
    """The Live tab while a cell of the fixture plan runs: the grid (two cells done, one running),
    the event log, three requests streaming (playing, stalled, waiting for audio) above two that
    ended, GPU sparklines, counters. A fixed snapshot of the fixture store's own plan, so the SVG
    is stable; returns the app and the wait for it to show everything."""
    import os

    from console.live import LiveGpu, LiveInflight, LiveRequest, LiveRun, LiveSnapshot, live_path

    db = tmp_path / "live.duckdb"
    db.write_bytes(campaign_db.read_bytes())
    with Store(db, read_only=True) as s:
        plan_hash = s.scalar("SELECT plan_hash FROM plans")
        done = s.query("SELECT run_id, cell_key AS cell, status FROM runs WHERE engine = 'ref-fast' AND kind = 'measured' "
                       "AND concurrency = 1 ORDER BY started_at")
    run = LiveRun("run-fast-c2-m0", "ref-fast", 2, "measured", 16, completed=6, failed={"timeout": 1},
                  metrics={"throughput": 926.3, "ttfa_p50_s": 0.16, "ttfa_p95_s": 0.19, "rtf_mean": 0.10,
                           "stall_count": 1, "continuity_ok_rate": 0.857})
    snap = LiveSnapshot(pid=os.getpid(), seq=7, plan_name="plan-test", plan_hash=plan_hash,
                        cell_index=3, cells_total=8, cell_key="ref-fast/c2/measured/0", run=run, runs_done=done,
                        requests=[LiveRequest(6, "spk02-0006", False, "ok", 0.158, 0.101, 4, 3.6, 0, 0.0, 2.41),
                                  LiveRequest(5, "spk01-0005", False, "timeout", None, None, 1, 0.9, 1, 0.35, 2.20,
                                              "no completion within 5 s")],
                        gpu=[LiveGpu(round(0.1 * i, 1), 0, 40 + (i * 7) % 50, 300 + (i * 37) % 300, 1980 - (i % 5) * 60)
                             for i in range(40)],
                        inflight=[LiveInflight(7, "spk03-0007", False, 1.9, 0.05, 5, 0.17, 3.0, 3, 0, 0.0, 1.32),
                                  LiveInflight(8, "spk04-0008", False, 1.6, 1.2, 3, 0.21, 1.0, 2, 1, 0.41, 0.0),
                                  LiveInflight(9, "spk05-0009", False, 0.4, 0.4, 0)])
    live_path(db).write_text(snap.to_json())
    monkeypatch.chdir(tmp_path)

    async def shown(pilot):
        app = pilot.app
        grid, table = app.query_one("#live-grid", DataTable), app.query_one("#live-requests", DataTable)
        await until(pilot, lambda: grid.row_count == 2 and table.row_count >= 1
                    and "10 runs" in str(app.query_one("#status", Static).render()), what="the live snapshot and the store")
        await panes_settled(pilot)

    return CampaignApp(Path(db.name), live=True, poll_s=0.05), shown


@pytest.mark.slow  # 3 s in a loaded `make check`
def test_snapshot_live_with_streaming_requests(campaign_db, monkeypatch, snap_compare, tmp_path):
    app, shown = live_snapshot_app(campaign_db, monkeypatch, tmp_path)
    assert snap_compare(app, terminal_size=SIZE, run_before=shown)


def test_snapshot_live_at_80x24(campaign_db, monkeypatch, snap_compare, tmp_path):
    app, shown = live_snapshot_app(campaign_db, monkeypatch, tmp_path)
    assert snap_compare(app, terminal_size=(80, 24), run_before=shown)


@sync
async def test_live_console_opens_on_the_live_tab_and_never_shows_runs_first(campaign_db, tmp_path):
    """`campaign tui --live` is composed on the Live tab. It used to compose on Runs, focus the
    runs table and then switch; on a fast machine (the H200) the runs table's focus pulled the
    tabs back to Runs and the console never showed Live."""
    db = tmp_path / "c.duckdb"
    db.write_bytes(campaign_db.read_bytes())
    seen: list = []
    app = CampaignApp(db, live=True, poll_s=0.05)
    async with app.run_test(size=SIZE, message_hook=seen.append) as pilot:
        await settle(pilot, app)
        assert app.query_one(TabbedContent).active == "live"
        activated = [m.pane.id for m in seen if isinstance(m, TabbedContent.TabActivated)]
        assert "runs" not in activated
        assert app.focused is not app.query_one("#runs-table", DataTable)


def test_run_detail_reads_the_requests_table_once(campaign_db, tmp_path):
    """With the run's metrics stored (as a campaign leaves them), the run detail reads the request
    rows once: its error details come from the same read as the per-request metrics (it used to
    read `requests` a second time for `error_detail`). The cache's count check is not a row read."""
    from console.tui.data import load_run_detail, run_params
    from stats.metrics.stored import metrics_for_runs

    db = tmp_path / "c.duckdb"
    db.write_bytes(campaign_db.read_bytes())
    with Store(db) as store:  # writable: fill the metrics cache
        runs = store.query("SELECT * FROM runs")
        metrics_for_runs(store, runs, run_params)
    with Store(db, read_only=True) as store:
        run_id = store.scalar("SELECT run_id FROM requests WHERE error_detail IS NOT NULL LIMIT 1")
        real, seen = store.con, []

        class Spy:
            def execute(self, sql, params=None):
                seen.append(sql)
                return real.execute(sql, params or [])

            def __getattr__(self, name):
                return getattr(real, name)

        store.con = Spy()
        try:
            detail = load_run_detail(store, run_id)
        finally:
            store.con = real
    assert sum("FROM requests" in sql and "count(*)" not in sql for sql in seen) == 1
    assert [r.detail for r in detail.requests if r.detail] == ["stream ended without [DONE]"]
