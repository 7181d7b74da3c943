"""Issue 28, the campaign's record: imported results kept apart from measurements, profiler windows
that exclude the runs they overlap (by audit sequence), stored rechecks cited by verdicts, and the
evidence bundle's new tables checked against their events. Real DuckDB stores, the real reference
engine over HTTP for the profiled campaign, the CLI where a user would type it."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from data.audit import append_event, events
from data.digest import DIGEST_VERSION, RUN_TABLES, digestible_columns, run_digests
from data.integrity import verify_store
from data.profiler import exclude_overlapping, reason
from data.queries import aggregate_runs
from data.store import Store
from plans_helpers import inproc, insert_run, make_workload, plan_dict, write_json
from results_store import build_campaign

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
pytestmark = pytest.mark.timeout(300)


def campaign(*args: object, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console.cli", *map(str, args)], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=timeout)


def _started(store: Store, run_id: str) -> None:
    r = store.query("SELECT * FROM runs WHERE run_id = ?", [run_id])[0]
    append_event(store, "run_started", plan_hash=r["plan_hash"], subject=run_id,
                 payload={"engine": r["engine"], "kind": r["kind"], "concurrency": r["concurrency"]})


def _ended(store: Store, run_id: str) -> None:
    """run_ended with the run's digest, as console/recording.py appends it."""
    columns = {table: digestible_columns(table) for table, _ in RUN_TABLES}
    r = store.query("SELECT plan_hash, status FROM runs WHERE run_id = ?", [run_id])[0]
    append_event(store, "run_ended", plan_hash=r["plan_hash"], subject=run_id, payload={
        "status": r["status"], "digest": {"v": DIGEST_VERSION, "columns": columns,
                                          "tables": run_digests(store, [run_id], columns)[run_id]}})


# -- profiler windows -------------------------------------------------------------------------

def test_exclusion_by_window_is_decided_by_audit_sequence(tmp_path, capsys):
    """Runs of the window's engine whose run_started..run_ended overlaps the window's events are
    excluded with 'profiled: window W'; before it, after it, or of another engine: not. An open
    window reaches every later run of its engine."""
    db = tmp_path / "c.duckdb"
    with Store(db) as s:
        for rid, engine in (("before", "e1"), ("straddle", "e1"), ("inside", "e1"), ("other", "e2"),
                            ("after", "e1"), ("late", "e3")):
            insert_run(s, rid, engine=engine, utt_ids=["u1"])
        _started(s, "before")
        _ended(s, "before")
        _started(s, "straddle")
    assert inproc(capsys, "profile", "start", "--engine", "e1", "--tool", "nsys profile", db=db).returncode == 0
    with Store(db) as s:
        wid = s.scalar("SELECT window_id FROM profiler_windows")
        _ended(s, "straddle")
        for rid in ("inside", "other"):
            _started(s, rid)
            _ended(s, rid)
    stop = inproc(capsys, "profile", "stop", db=db)
    assert stop.returncode == 0, stop.stderr
    assert "excluded as profiled: straddle, inside" in stop.stdout
    assert inproc(capsys, "profile", "start", "--engine", "e3", "--tool", "py-spy", db=db).returncode == 0
    with Store(db) as s:
        _started(s, "after")
        _ended(s, "after")
        _started(s, "late")  # still running under an open window: overlaps already
        assert exclude_overlapping(s) == ["late"]
        excl = {r["run_id"]: r["reason"] for r in s.query("SELECT run_id, reason FROM exclusions")}
        assert excl == {"straddle": reason(wid), "inside": reason(wid), "late": excl["late"]}
        assert excl["late"].startswith("profiled: window prof-") and excl["late"] != reason(wid)
        assert exclude_overlapping(s) == []  # idempotent
        _ended(s, "late")
        checks = {c.name: c for c in verify_store(s)}
        assert all(c.ok for c in checks.values()), [c for c in checks.values() if not c.ok]
        assert checks["profiler windows"].message.startswith("2 profiler window(s) match")
    listed = inproc(capsys, "profile", "list", "--format", "json", db=db)
    rows = json.loads(listed.stdout)
    assert [r["excluded_runs"] for r in rows] == ["inside, straddle", "late"]


@pytest.mark.slow  # 3 s in a loaded `make check`
def test_window_errors_and_edits(tmp_path, capsys):
    db = tmp_path / "c.duckdb"
    Store(db).close()  # only plan freeze, run and probe create a store (docs/integrity.md)
    r = inproc(capsys, "profile", "stop", db=db)
    assert r.returncode == 2 and r.stderr.strip() == "campaign: error: profile stop: no open profiler window"
    assert inproc(capsys, "profile", "start", "--engine", "e1", "--tool", "nsys", db=db).returncode == 0
    again = inproc(capsys, "profile", "start", "--engine", "e1", "--tool", "nsys", db=db)
    assert again.returncode == 2 and "is already open" in again.stderr and len(again.stderr.strip().splitlines()) == 1
    with Store(db) as s:
        insert_run(s, "inside", engine="e1", utt_ids=["u1"])
        _started(s, "inside")
        _ended(s, "inside")
    assert inproc(capsys, "profile", "stop", "--engine", "e1", db=db).returncode == 0
    with Store(db) as s:
        assert all(c.ok for c in verify_store(s))
        # the exclusion and its event gone (the chain re-hashed by a forger): the overlap still shows
        seq = s.scalar("SELECT audit_seq FROM exclusions")
        s.con.execute("DELETE FROM exclusions")
        s.con.execute("UPDATE audit_events SET kind = 'sql_write' WHERE seq = ?", [seq])
        bad = {c.name: c for c in verify_store(s)}["profiler windows"]
        assert not bad.ok and "run inside: overlapped profiler window" in bad.message and "not excluded" in bad.message
        s.con.execute("UPDATE profiler_windows SET stop_seq = stop_seq + 5")  # a later stop: reaches more runs
        bad = {c.name: c for c in verify_store(s)}["profiler windows"]
        assert not bad.ok and "stop_seq" in bad.message
        s.con.execute("DELETE FROM profiler_windows")
        bad = {c.name: c for c in verify_store(s)}["profiler windows"]
        assert not bad.ok and "row is missing (deleted)" in bad.message


@pytest.mark.slow  # a full campaign
def test_runs_of_a_real_campaign_inside_a_window_leave_every_aggregate(tmp_path, capsys):
    """`profile start --engine ref-fast`, `campaign run`, `profile stop`: every ref-fast run
    (real engine, real HTTP) is excluded naming the window; ref-baseline's stay; the verdict
    document's record section names them."""
    wl = make_workload(tmp_path / "wl", short=True)
    doc = plan_dict(wl, concurrencies=(1,), requests=2, repeats=2)
    for e in doc["engines"]:
        e["argv"] = [sys.executable, "-m", "engine_adapters.reference", "--dialect", e["dialect"],
                     "--profile", e["profile"], "--host", "127.0.0.1", "--port", str(e["port"])]
    plan = write_json(tmp_path / "plan.json", doc)
    db = tmp_path / "c.duckdb"
    assert inproc(capsys, "plan", "freeze", str(plan), db=db).returncode == 0
    assert inproc(capsys, "profile", "start", "--engine", "ref-fast", "--tool", "nsys profile", db=db).returncode == 0
    r = campaign("run", plan, "--db", db)
    assert r.returncode == 0, r.stdout + r.stderr
    stop = inproc(capsys, "profile", "stop", db=db)
    assert stop.returncode == 0, stop.stderr
    from data.plan_loading import plan_from_store
    from stats.verdict_doc import record_section
    with Store(db) as s:
        h = s.scalar("SELECT plan_hash FROM plans")
        wid = s.scalar("SELECT window_id FROM profiler_windows")
        fast = {x[0] for x in s.con.execute("SELECT run_id FROM runs WHERE engine = 'ref-fast' AND kind = 'measured'")
                .fetchall()}
        assert len(fast) == 2
        excl = dict(s.con.execute("SELECT run_id, reason FROM exclusions").fetchall())
        assert excl == {rid: f"profiled: window {wid}" for rid in fast}
        kept = aggregate_runs(s, h)
        assert {x["engine"] for x in kept} == {"ref-baseline"} and len(kept) == 2
        sec = record_section(s, plan_from_store(s, h))["profiler_windows"]
        assert {x["run_id"] for x in sec["overlapping_runs"]} == fast
        assert sec["statement"].startswith("excluded from every aggregate as profiled: ")
        assert all(c.ok for c in verify_store(s))


@pytest.mark.slow  # a full campaign
def test_a_profiled_sweep_runs_inside_its_own_windows(tmp_path, capsys):
    """sweep.kind profiled: the runner opens one window per engine before the first cell and
    closes it after the last; every run is excluded naming its engine's window; audit verify holds."""
    wl = make_workload(tmp_path / "wl", short=True)
    doc = plan_dict(wl, concurrencies=(1,), requests=2, repeats=1, profiles=("baseline", "fast"))
    doc["sweep"]["kind"] = "profiled"
    for e in doc["engines"]:
        e["argv"] = [sys.executable, "-m", "engine_adapters.reference", "--dialect", e["dialect"],
                     "--profile", e["profile"], "--host", "127.0.0.1", "--port", str(e["port"])]
    plan = write_json(tmp_path / "plan.json", doc)
    db = tmp_path / "c.duckdb"
    assert inproc(capsys, "plan", "freeze", str(plan), db=db).returncode == 0
    r = campaign("run", plan, "--db", db)
    assert r.returncode == 0, r.stdout + r.stderr
    with Store(db) as s:
        wins = {w["engine"]: w for w in s.query("SELECT * FROM profiler_windows")}
        assert set(wins) == {"ref-baseline", "ref-fast"} and {w["status"] for w in wins.values()} == {"closed"}
        runs = s.query("SELECT r.run_id, r.engine, r.kind, x.reason FROM runs r LEFT JOIN exclusions x USING (run_id)")
        assert len(runs) == 2 and {x["kind"] for x in runs} == {"profiled"}
        assert all(x["reason"] == reason(wins[x["engine"]]["window_id"]) for x in runs)
        assert all(c.ok for c in verify_store(s))


# -- imported results -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    """A whole synthetic campaign (tests/results_store.py) with its verdicts issued."""
    root = tmp_path_factory.mktemp("record")
    db, plan = build_campaign(root, concurrencies=(1, 2), repeats=2)
    return root, db, plan


def _copy(synthetic, tmp_path) -> tuple[Path, Path]:
    root, db, plan = synthetic
    shutil.copytree(root, tmp_path / "c")
    return tmp_path / "c" / db.name, tmp_path / "c" / plan.name


@pytest.mark.parametrize("name,text,message", [
    ("a.csv", "engine,concurrency,metric,value,unit\nx,16,throughput,abc,tok/s\n",
     "a.csv:2: field 'value': 'abc' is not a number"),
    ("b.csv", "engine,concurrency,metric,value,unit\nx,16,throughput,1,tok/s\nx,many,throughput,2,tok/s\n",
     "b.csv:3: field 'concurrency': 'many' is not a whole number"),
    ("c.csv", "engine,metric,value\nx,throughput,1\n", "c.csv:1: header lacks column 'unit'"),
    ("d.json", '[{"engine": "x", "metric": "throughput", "value": 1, "unit": "tok/s", "speed": 2}]',
     "d.json: result 1: unknown field 'speed'"),
    ("e.json", '{"results": [{"engine": "x", "metric": "throughput", "value": "NaN", "unit": "u"}]}',
     "e.json: result 1: field 'value': 'NaN' is not a finite number"),
    ("f.json", '[{"engine": "", "metric": "t", "value": 1, "unit": "u"}]', "f.json: result 1: field 'engine' is missing"),
    ("g.txt", "x", "g.txt: unknown format '.txt'"),
])
def test_bad_import_files_are_one_line_and_store_nothing(tmp_path, capsys, name, text, message):
    db = tmp_path / "c.duckdb"
    Store(db).close()  # only plan freeze, run and probe create a store (docs/integrity.md)
    (tmp_path / name).write_text(text)
    r = inproc(capsys, "import", "results", str(tmp_path / name), "--source", "s", "--ref", "r", db=db)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert message in r.stderr
    with Store(db) as s:
        assert s.scalar("SELECT count(*) FROM imported_results") == 0 and s.scalar("SELECT count(*) FROM audit_events") == 0


@pytest.mark.slow  # 10 s in a loaded `make check`
def test_an_imported_figure_enters_no_aggregate_gate_or_verdict(synthetic, tmp_path, capsys):
    """The report's cells, the gate's checks and rules (dry run) and the run summary are identical
    with and without an imported figure for a plan engine at a swept concurrency; the report and
    the HTML report show it, marked."""
    db, plan = _copy(synthetic, tmp_path)

    def views() -> tuple[str, str, str]:
        gate = inproc(capsys, "gate", str(plan), "--dry-run", db=db)
        report = inproc(capsys, "report", str(plan), "--format", "json", db=db)
        runs = inproc(capsys, "runs", "list", "--format", "json", db=db)
        return gate.stdout, report.stdout, runs.stdout

    before = views()
    fig = tmp_path / "blog.json"
    fig.write_text(json.dumps({"results": [
        {"engine": "ref-fast", "concurrency": 2, "metric": "throughput", "value": 99999.5, "unit": "audio tok/s",
         "requests": [{"ttfa_ms": 12.5}, {"ttfa_ms": 13.0}]}]}))
    imp = inproc(capsys, "import", "results", str(fig), "--source", "vLLM-Omni blog", "--ref", "https://example.org/p",
                 db=db)
    assert imp.returncode == 0 and "imported, not measured" in imp.stdout
    after = views()
    assert after[0] == before[0] and after[1] == before[1] and after[2] == before[2]
    shown = inproc(capsys, "report", str(plan), db=db)
    assert "Imported results" in shown.stdout and "99999.5" in shown.stdout and "imported, not measured" in shown.stdout
    html = tmp_path / "r.html"
    assert inproc(capsys, "report", str(plan), "--html", str(html), db=db).returncode == 0
    assert "Imported results (imported, not measured)" in html.read_text()
    with Store(db) as s:
        [row] = s.query("SELECT * FROM imported_results")
        assert (row["engine"], row["concurrency"], row["value"], row["value_text"]) == ("ref-fast", 2, 99999.5, "99999.5")
        assert json.loads(row["requests_json"]) == [{"ttfa_ms": 12.5}, {"ttfa_ms": 13.0}]
        [ev] = events(s, kind="results_imported")
        assert ev["payload"]["file_sha256"] == row["file_sha256"] and ev["payload"]["digest"]["rows"] == 1
        assert all(c.ok for c in verify_store(s))
        s.con.execute("UPDATE imported_results SET value = 1.0")
        bad = {c.name: c for c in verify_store(s)}["imported results"]
        assert not bad.ok and "is not its text" in bad.message
    again = inproc(capsys, "import", "results", str(fig), "--source", "x", "--ref", "y", db=db)
    assert again.returncode == 2 and "already imported" in again.stderr


def test_verdicts_cite_stored_rechecks(synthetic, tmp_path, capsys):
    from stats.quality.recheck import RecheckResult
    from data.rechecks import record

    db, plan = _copy(synthetic, tmp_path)
    with Store(db) as s:
        run_id, idx, utt = s.query("SELECT run_id, request_index, utt_id FROM quality_scores WHERE metric = 'wer' "
                                   "ORDER BY ALL LIMIT 1")[0].values()
        rid, _ = record(s, [RecheckResult(run_id, idx, utt, "pocketsphinx-en", "a b", "a b", 0, 0, True, True)])
    assert inproc(capsys, "gate", str(plan), db=db).returncode in (0, 1, 3)
    with Store(db) as s:
        docs = [json.loads(d) for (d,) in s.con.execute("SELECT document_json FROM verdicts ORDER BY created_at DESC "
                                                         "LIMIT 2").fetchall()]
    for d in docs:
        assert d["record"]["rechecks"] == [{"recheck_id": rid, "utt_id": utt, "outputs": 1, "reproduced": 1,
                                            "same_model": True}]
        assert d["record"]["profiler_windows"]["statement"].startswith("none of the plan's runs overlapped")


# -- the evidence bundle ----------------------------------------------------------------------

def _resign(b: Path) -> None:
    files = sorted(p.relative_to(b).as_posix() for p in b.rglob("*") if p.is_file() and p.name != "MANIFEST.sha256")
    out = subprocess.run(["sha256sum", "--", *files], cwd=b, capture_output=True, text=True, check=True)
    (b / "MANIFEST.sha256").write_text(out.stdout)


def _rewrite(path: Path, select: str) -> None:
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t AS SELECT * FROM read_parquet('{path}')")
    con.execute(f"COPY ({select}) TO '{path}.new' (FORMAT parquet)")
    con.close()
    os.replace(f"{path}.new", path)
    pacsv.write_csv(pq.read_table(path), path.with_suffix(".csv"))


def _failed(b: Path) -> str:
    r = campaign("evidence", "verify", b)
    lines = [ln for ln in (r.stdout + r.stderr).splitlines() if "FAILED" in ln]
    assert r.returncode == 1 and len(lines) == 1 and "Traceback" not in r.stderr, r.stdout + r.stderr
    return lines[0]


@pytest.fixture(scope="module")
def bundle(synthetic, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bundle")
    root, db, plan = synthetic
    shutil.copytree(root, tmp / "c")
    db, plan = tmp / "c" / db.name, tmp / "c" / plan.name
    (tmp / "fig.csv").write_text("engine,concurrency,metric,value,unit\nsglang-omni (paper),2,throughput,41.5,tok/s\n")
    for args in (("import", "results", tmp / "fig.csv", "--source", "paper", "--ref", "arXiv:0000.00000"),
                 ("profile", "start", "--engine", "ref-fast", "--tool", "nsys"), ("profile", "stop"),
                 ("export", "evidence", plan, tmp / "b")):
        r = campaign(*args, "--db", db)
        assert r.returncode == 0, r.stdout + r.stderr
    return tmp / "b"


@pytest.mark.slow  # an exported campaign (the module's bundle)
def test_bundle_holds_the_record_and_verifies(bundle):
    r = campaign("evidence", "verify", bundle)
    assert r.returncode == 0, r.stdout + r.stderr
    for step in ("manifests", "imported results", "profiler windows", "rechecks", "requests json"):
        assert f"ok  {step}:" in r.stdout, (step, r.stdout)
    t = bundle / "tables"
    assert pq.read_table(t / "imported_results.parquet").column("value_text").to_pylist() == ["41.5"]
    assert pq.read_table(t / "profiler_windows.parquet").num_rows == 1
    assert pq.read_table(t / "workload_manifests.parquet").num_rows == 1
    lines = gzip.decompress((t / "requests.json.gz").read_bytes()).decode().splitlines()
    assert len(lines) == pq.read_table(t / "requests.parquet").num_rows and json.loads(lines[0])["run_id"]
    text = (bundle / "REPRODUCE.md").read_text()
    assert "## Rebuilding each engine" in text and "## Running the campaign again" in text
    assert "engine_launches" in text and "patches/patches.json" in text and "campaign run " in text


@pytest.mark.parametrize("table,select,check", [
    ("imported_results", "SELECT * REPLACE ('45.0' AS value_text, 45.0 AS value) FROM t", "imported results"),
    ("imported_results", "SELECT * REPLACE (45.0 AS value) FROM t", "imported results"),
    ("profiler_windows", "SELECT * REPLACE (stop_seq - 1 AS stop_seq) FROM t", "profiler windows"),
    ("profiler_windows", "SELECT * FROM t WHERE false", "profiler windows"),
    ("workload_manifests", "SELECT * REPLACE (replace(manifest_json, 'holdout', 'h0ldout') AS manifest_json) FROM t",
     "manifests"),
])
@pytest.mark.slow  # an exported campaign (the module's bundle)
def test_an_edited_record_table_fails_verify(bundle, tmp_path, table, select, check):
    b = tmp_path / "b"
    shutil.copytree(bundle, b)
    _rewrite(b / "tables" / f"{table}.parquet", select)
    _resign(b)
    line = _failed(b)
    assert f"FAILED: {check}:" in line, line


@pytest.mark.slow  # an exported campaign (the module's bundle)
def test_an_edited_requests_json_fails_verify(bundle, tmp_path):
    b = tmp_path / "b"
    shutil.copytree(bundle, b)
    p = b / "tables" / "requests.json.gz"
    text = gzip.decompress(p.read_bytes()).decode().replace('"outcome": "ok"', '"outcome": "timeout"', 1)
    p.write_bytes(gzip.compress(text.encode()))
    _resign(b)
    assert "FAILED: requests json: tables/requests.json.gz: differs from tables/requests.parquet" in _failed(b)
