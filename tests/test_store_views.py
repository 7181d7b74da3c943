"""The store's views live in the file (data/views.py, schema version 14): a DuckDB client without
the console reads `run_summary`, `cell_summary` and `quality_summary`; an older store is read
without a write and gets them on its next write open; an edited or outdated view is shadowed for
the console's readers and replaced by its next write open; `cell_summary`'s sweep cells are the
report's, number for number (the campaign here: tests/results_store.py; real runs:
tests/test_demo_queries.py)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import duckdb
import pytest
from results_store import build_campaign

from data.plan_loading import plan_from_store
from data.schema import SCHEMA_VERSION
from data.store import Store
from data.views import VIEWS, comment_sha256, definition_sha256
from stats.metrics.views import cell_metrics
from stats.results.plan_results import load_plan_results

ROOT = Path(__file__).resolve().parents[1]
NAMES = ("run_summary", "cell_summary", "quality_summary")

# A client that knows nothing of the console: DuckDB alone, run from an empty folder.
PLAIN = r"""
import json, sys, duckdb
con = duckdb.connect(sys.argv[1], read_only=True)
out = {}
for v in ("run_summary", "cell_summary", "quality_summary"):
    rel = con.sql(f"FROM {v}")
    out[v] = {"columns": rel.columns, "rows": [list(r) for r in rel.fetchall()]}
print(json.dumps(out, default=str))
"""


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    db, _ = build_campaign(tmp_path_factory.mktemp("views"))
    return db


def _plain_client(db: Path, cwd: Path) -> dict:
    r = subprocess.run([sys.executable, "-c", PLAIN, str(db)], capture_output=True, text=True, cwd=cwd, timeout=120,
                       env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stored_views(db: Path) -> dict[str, str | None]:
    """name -> comment of each view stored in the file (read without the console)."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        return dict(con.execute("SELECT view_name, comment FROM duckdb_views() WHERE NOT internal AND NOT temporary")
                    .fetchall())
    finally:
        con.close()


def _as_older_store(db: Path) -> None:
    """What a console of schema version 13 left: no stored views."""
    con = duckdb.connect(str(db))
    try:
        for v in NAMES:
            con.execute(f"DROP VIEW IF EXISTS {v}")
        con.execute("DELETE FROM schema_version WHERE version = 14")
    finally:
        con.close()


def test_a_client_without_the_console_reads_every_view(campaign, tmp_path):
    got = _plain_client(campaign, tmp_path)
    with Store(campaign, read_only=True) as s:
        n_runs = s.scalar("SELECT count(*) FROM runs")
        n_scores = s.scalar("SELECT count(*) FROM quality_scores")
    assert len(got["run_summary"]["rows"]) == n_runs
    assert len(got["quality_summary"]["rows"]) == n_scores
    assert {"phase", "excluded", "throughput", "ttfa_p50_ms"} <= set(got["run_summary"]["columns"])
    assert {"phase", "runs", "throughput", "throughput_min", "throughput_max", "throughput_cv_pct"} \
        <= set(got["cell_summary"]["columns"])
    assert {"pool", "phase", "excluded", "wer_pct", "sim_x100", "mos"} <= set(got["quality_summary"]["columns"])
    assert "value" not in got["quality_summary"]["columns"]  # one unit per column
    # each stored view carries its definition's version
    comments = _stored_views(campaign)
    for v in NAMES:
        assert comment_sha256(comments[v]) == definition_sha256(VIEWS[v].sql()), v


def test_each_view_has_the_columns_its_documentation_lists(campaign):
    with Store(campaign, read_only=True) as s:
        for v in NAMES:
            cols = [d[0] for d in s.con.execute(f"SELECT * FROM {v} LIMIT 0").description]
            assert cols == [c.name for c in VIEWS[v].columns()], v


def test_cell_summary_is_the_report_cell_for_cell(campaign):
    with Store(campaign) as s:  # writable: the report stores what metrics it computes (the view reads them)
        res = load_plan_results(s, plan_from_store(s, s.scalar("SELECT plan_hash FROM plans")))
    con = duckdb.connect(str(campaign), read_only=True)
    try:
        rel = con.sql("FROM cell_summary WHERE phase = 'sweep'")
        rows = {(r[1], r[2]): dict(zip(rel.columns, r)) for r in rel.fetchall()}
        phases = dict(con.sql("SELECT phase, count(*) FROM run_summary GROUP BY ALL").fetchall())
    finally:
        con.close()
    assert phases == {"sweep": 18, "quality": 6}  # the holdout arms are not the sweep's
    assert set(rows) == {(c.engine, c.concurrency) for c in res.cells}
    for c in res.cells:
        row = rows[(c.engine, c.concurrency)]
        assert row["runs"] == c.n == len(c.run_ids)
        for d in cell_metrics():
            s = c.spreads[d.name]
            want = [None if v is None else v * d.scale for v in (s.median, s.min, s.max)]
            want.append(None if s.cv is None else s.cv * 100)
            got = [row[d.sql_column], row[f"{d.sql_column}_min"], row[f"{d.sql_column}_max"],
                   row[f"{d.sql_column}_cv_pct"]]
            assert got == want, (c.engine, c.concurrency, d.name)  # exact: one statement computes both


def test_an_older_store_is_read_without_a_write_and_gets_them_on_its_next_write_open(campaign, tmp_path):
    db = tmp_path / "old.duckdb"
    db.write_bytes(campaign.read_bytes())
    _as_older_store(db)
    assert not set(NAMES) & set(_stored_views(db))
    before = _sha(db)
    with Store(db, read_only=True) as s:  # a reader: no migration needed, the views are its own TEMP views
        assert s.schema_version() == 13
        assert s.scalar("SELECT count(*) FROM run_summary") == s.scalar("SELECT count(*) FROM runs")
        temp = dict(s.con.execute("SELECT view_name, temporary FROM duckdb_views() WHERE view_name IN "
                                  "('run_summary', 'cell_summary', 'quality_summary')").fetchall())
        assert temp == {v: True for v in NAMES}
    assert _sha(db) == before  # the read-only open wrote nothing
    with Store(db) as s:
        assert s.schema_version() == SCHEMA_VERSION
    assert set(NAMES) <= set(_stored_views(db))
    assert len(_plain_client(db, tmp_path)["run_summary"]["rows"]) > 0
    reopened = _sha(db)
    Store(db).close()  # current: nothing to store again
    assert _sha(db) == reopened


def test_an_edited_view_is_shadowed_for_readers_and_restored_by_a_write_open(campaign, tmp_path):
    db = tmp_path / "edited.duckdb"
    db.write_bytes(campaign.read_bytes())
    con = duckdb.connect(str(db))
    try:  # what `campaign sql --write` could do: the same comment, another definition
        comment = _stored_views(campaign)["cell_summary"].replace("'", "''")
        con.execute("CREATE OR REPLACE VIEW cell_summary AS SELECT 'ref-fast' AS engine, 1e9 AS throughput")
        con.execute(f"COMMENT ON VIEW cell_summary IS '{comment}'")
    finally:
        con.close()
    before = _sha(db)
    with Store(db, read_only=True) as s:
        assert s.scalar("SELECT max(throughput) FROM cell_summary") < 1e9
        assert s.scalar("SELECT count(*) FROM cell_summary WHERE phase = 'sweep'") == 6
    assert _sha(db) == before
    with Store(db):
        pass
    con = duckdb.connect(str(db), read_only=True)
    try:
        assert con.sql("SELECT count(*) FROM cell_summary WHERE phase = 'sweep'").fetchall() == [(6,)]
    finally:
        con.close()


def test_a_changed_definition_replaces_the_stored_view_with_its_version(campaign, tmp_path, monkeypatch):
    db = tmp_path / "changed.duckdb"
    db.write_bytes(campaign.read_bytes())
    old = VIEWS["quality_summary"]
    new = replace(old, sql=lambda: old.sql() + " WHERE q.status = 'ok'")
    monkeypatch.setitem(VIEWS, "quality_summary", new)
    with Store(db) as s:
        assert s.scalar("SELECT count(*) FROM quality_summary WHERE status <> 'ok'") == 0
    assert comment_sha256(_stored_views(db)["quality_summary"]) == definition_sha256(new.sql())
    monkeypatch.setitem(VIEWS, "quality_summary", old)
    with Store(db, read_only=True) as s:  # this console's own definition, in the reader's connection
        assert s.scalar("SELECT count(*) FROM quality_summary WHERE status <> 'ok'") > 0


def test_a_reader_still_touches_no_file_through_the_stored_views(campaign, tmp_path):
    """`campaign sql` (a subprocess) reads the stored views and still cannot write a file."""
    out = tmp_path / "leak.csv"
    for q in ("SELECT phase, count(*) AS n FROM run_summary GROUP BY ALL ORDER BY ALL",
              f"COPY (FROM cell_summary) TO '{out}'"):
        r = subprocess.run([sys.executable, "-m", "console.cli", "sql", q, "--format", "json", "--db", str(campaign)],
                           capture_output=True, text=True, cwd=ROOT, timeout=120)
        if q.startswith("COPY"):
            assert r.returncode != 0 and not out.exists(), r.stdout
            assert "cannot read or write files" in r.stderr, r.stderr
        else:
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout) == [{"phase": "quality", "n": 6}, {"phase": "sweep", "n": 18}]
