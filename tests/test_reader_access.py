"""A reader cannot write (issue 26 items 1 and 2): `campaign sql`, the TUI's SQL tab and a snapshot
read during a run can neither write nor read any file but the store, nor load code; the snapshot
server puts the store's path into SQL as a parameter. Real `campaign run` subprocesses against
the reference engine, real DuckDB files, the CLI as a user runs it, the TUI through its pane."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from test_read_during_run import _wait_running
from test_run_exit import _frozen, campaign
from test_tui_app import SIZE, settle, sync, until
from textual.widgets import Input, Static, TabbedContent

from console.tui.app import CampaignApp
from console.tui.panes.sql import SqlPane, run_query
from data.anchor import anchor_path, read_head
from data.errors import CampaignError
from data.store import Store

pytestmark = pytest.mark.timeout(300)


def lit(path: Path) -> str:
    """A path as a SQL string literal, as a user would type it."""
    return "'" + str(path).replace("'", "''") + "'"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _attacks(tmp: Path, db: Path) -> dict[str, str]:
    """Statements a reader must not run: each writes, reads or loads something outside the store."""
    other = tmp / "other.csv"
    return {
        "COPY onto the store": f"COPY (SELECT 'x' AS a) TO '{db}' (FORMAT csv)",
        "COPY onto the anchor": f"COPY (SELECT 'x' AS a) TO '{anchor_path(db)}' (FORMAT csv)",
        "COPY to another file": f"COPY (SELECT 1 AS a) TO '{other}' (FORMAT csv)",
        "EXPORT DATABASE": f"EXPORT DATABASE '{tmp / 'exported'}'",
        "ATTACH": f"ATTACH '{tmp / 'attached.duckdb'}' AS x",
        "INSTALL": "INSTALL httpfs",
        "LOAD": "LOAD httpfs",
        "read_csv": "SELECT * FROM read_csv('/etc/passwd')",
        "SET back": "SET enable_external_access = true",
    }


def _left_alone(tmp: Path) -> list[Path]:
    return [p for p in (tmp / "other.csv", tmp / "exported", tmp / "attached.duckdb") if p.exists()]


@pytest.mark.slow  # a real campaign
def test_campaign_sql_cannot_touch_files(tmp_path):
    """No run going: each attack is one refused line, exit 2; the store and its anchor are
    byte-identical afterwards and no other file appears. `--write` changes tables, never files."""
    _, _, db = _frozen(tmp_path, concurrencies=(1,), requests=2, repeats=1, profiles=("baseline",))
    anchor = anchor_path(db)
    before = (_digest(db), _digest(anchor))
    for what, sql in _attacks(tmp_path, db).items():
        for write in ((), ("--write",)):
            r = campaign("sql", sql, *write, db=db)
            assert r.returncode == 2, (what, write, r.stdout, r.stderr)
            assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, (what, r.stderr)
            assert "refused" in r.stderr or "SQL error" in r.stderr, (what, r.stderr)
            assert (_digest(db), _digest(anchor)) == before, (what, write)
    assert not _left_alone(tmp_path)
    r = campaign("sql", "SELECT count(*) AS plans FROM plans", "--format", "csv", db=db)
    assert r.returncode == 0 and r.stdout.split() == ["plans", "1"], r.stderr
    r = campaign("sql", f"COPY (SELECT 1 AS a) TO '{tmp_path / 'other.csv'}' (FORMAT csv)", db=db)
    assert "cannot read or write files other than the store" in r.stderr


def _store_ok(db: Path) -> None:
    """The store is still a DuckDB file (DuckDB's magic bytes at offset 8) and the anchor an anchor."""
    with db.open("rb") as f:
        assert f.read(12)[8:12] == b"DUCK", f"{db} is no longer a DuckDB file"
    read_head(anchor_path(db))


@pytest.mark.parametrize("folder", ["o'brien", "x.duckdb' AS evil; CREATE TABLE pwned AS SELECT 42 AS v; SELECT '"],
                         ids=["quote", "crafted"])
@pytest.mark.slow  # reads during a real run
def test_a_read_during_a_run_cannot_write_and_a_quoted_folder_reads(tmp_path, folder):
    """The critical case: while `campaign run` owns the store, `campaign sql` reads the owner's
    snapshot; COPY onto the store or its anchor fails in one line and the campaign finishes with
    its data (before: the store became a 35-byte CSV). The store lives under a folder whose name
    holds a quote (before: every read failed), or SQL (before: the owner ran it)."""
    home = tmp_path / folder
    home.mkdir()
    plan, _, db = _frozen(home, concurrencies=(1,), requests=24, repeats=2, profiles=("baseline", "fast"))
    proc = subprocess.Popen([sys.executable, "-m", "console.cli", "run", str(plan), "--db", str(db)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_running(db, proc)
        sql = campaign("sql", "SELECT count(*) AS plans FROM plans", "--format", "csv", db=db)
        assert sql.returncode == 0 and sql.stdout.split() == ["plans", "1"], sql.stderr
        for target in (db, anchor_path(db)):
            r = campaign("sql", f"COPY (SELECT 'x' AS a) TO {lit(target)} (FORMAT csv)", db=db)
            assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
            assert "refused" in r.stderr, r.stderr
            _store_ok(db)
            with pytest.raises(CampaignError, match="refused"):  # the TUI's SQL tab, its query function
                run_query(db, f"COPY (SELECT 'x' AS a) TO {lit(target)} (FORMAT csv)")
            _store_ok(db)
        assert run_query(db, "SELECT count(*) FROM plans").source == "snapshot"
        assert proc.poll() is None, "the campaign ran out before the reads: raise requests"
    finally:
        out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    _store_ok(db)
    with Store(db, read_only=True) as store:
        assert store.scalar("SELECT count(*) FROM runs WHERE status = 'complete'") == 4
        assert store.scalar("SELECT count(*) FROM information_schema.tables WHERE table_name = 'pwned'") == 0
    assert not (tmp_path / "x.duckdb").exists()  # the crafted ATTACH never ran
    verify = campaign("audit", "verify", db=db)
    assert verify.returncode == 0, verify.stdout + verify.stderr


def test_the_snapshot_server_still_attaches_and_a_reader_reads_it(tmp_path):
    """The owner's own ATTACH (a writer's connection) still works; the reader opens the copy
    with external access off and reads it."""
    from data.snapshot import snapshot_path, take_snapshot

    db = tmp_path / 'o\'brien "x".duckdb'  # both quotes: in the path and in the database's name
    with Store(db) as owner:
        owner.con.execute("CREATE TABLE t AS SELECT 7 AS v")
        take_snapshot(owner, snapshot_path(db))
    with Store(snapshot_path(db), read_only=True) as reader:
        assert reader.scalar("SELECT v FROM t") == 7
        assert reader.scalar("SELECT current_setting('enable_external_access')") is False
        with pytest.raises(duckdb.Error, match="disabled by configuration"):
            reader.con.execute(f"COPY t TO '{tmp_path / 'out.csv'}'")


@sync
@pytest.mark.slow  # 6 s in a loaded `make check`
async def test_tui_sql_tab_refuses_file_access(tmp_path):
    """The SQL tab, driven with keys: COPY onto the anchor and ATTACH are refused and shown; the
    store and anchor are byte-identical afterwards; a plain query still answers."""
    _, _, db = _frozen(tmp_path, concurrencies=(1,), requests=2, repeats=1, profiles=("baseline",))
    anchor = anchor_path(db)
    before = (_digest(db), _digest(anchor))
    app = CampaignApp(db)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot, app)
        await pilot.press("6")
        await until(pilot, lambda: app.query_one(TabbedContent).active == "sql", what="the sql tab")
        pane = app.query_one(SqlPane)
        box = app.query_one("#sql-input", Input)
        info = app.query_one("#sql-info", Static)
        for sql in (f"COPY (SELECT 'x' AS a) TO '{anchor}' (FORMAT csv)", f"COPY (SELECT 'x' AS a) TO '{db}' (FORMAT csv)",
                    f"ATTACH '{tmp_path / 'attached.duckdb'}' AS x", "SELECT * FROM read_csv('/etc/passwd')"):
            box.value = sql
            box.focus()
            ended = pane.ended
            await pilot.press("enter")
            await until(pilot, lambda: pane.ended > ended and not pane.busy, what="the query")
            shown = str(info.render())
            assert "refused" in shown and "files other than the store" in shown, (sql, shown)
            assert (_digest(db), _digest(anchor)) == before, sql
        box.value = "SELECT 1 + 41 AS answer"
        box.focus()
        ended = pane.ended
        await pilot.press("enter")
        await until(pilot, lambda: pane.ended > ended and not pane.busy, what="the query")
        assert "1 row(s) from the store" in str(info.render())
    assert not (tmp_path / "attached.duckdb").exists()
