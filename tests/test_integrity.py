"""Stored results cannot change unnoticed: `audit verify` against hand edits of a real campaign's
store (made with the `duckdb` module directly, as a user with shell access would), the read-only
`campaign sql`, the head anchor against tail truncation, corrupt and truncated files, and every
export path on the installed DuckDB."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import jsonschema
import pandas as pd
import pyarrow.parquet as pq
import pytest

from data.anchor import PARQUET_KEY, SUFFIX, anchor_path
from data.errors import StoreCorrupt, StoreLocked
from data.store import Store
from plans_helpers import inproc, make_workload, plan_dict, write_json
from stats.verdict_doc import load_schema

pytestmark = pytest.mark.timeout(240)


def _cli(*args: str, db: Path) -> tuple[int, str]:
    """The CLI in this process, output captured (a module fixture has no capsys)."""
    import contextlib
    import io

    from console.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        rc = main([*args, "--db", str(db)])
    return rc, out.getvalue()


@pytest.fixture(scope="module")
def campaign(tmp_path_factory) -> dict:
    """Freeze, run (two reference engines, 2 x 2 requests each) and gate a small plan: a store
    with plans, runs, requests, chunks, two issued verdicts and the side anchor. Tests copy it."""
    root = tmp_path_factory.mktemp("campaign")
    wl = make_workload(root / "wl", short=True)
    doc = plan_dict(wl, concurrencies=(1,), requests=2, repeats=2, restart="per_cell", interleave="sequential")
    doc["quality"]["concurrencies"] = [1, 16, 32]  # the built-in controls' concurrencies
    # two rule verdicts: the quality arms are never run here, so the gate has no quality verdict to issue
    doc["decision_rules"] = [{"name": "fast-exceeds", "kind": "throughput_exceeds", "candidate": "ref-fast",
                              "reference": "ref-baseline", "concurrencies": [1], "confidence": 0.95},
                             {"name": "baseline-exceeds", "kind": "throughput_exceeds", "candidate": "ref-baseline",
                              "reference": "ref-fast", "concurrencies": [1], "confidence": 0.95}]
    for e in doc["engines"]:
        e["argv"] = [sys.executable, "-m", "engine_adapters.reference", "--dialect", e["dialect"],
                     "--profile", e["profile"], "--host", "127.0.0.1", "--port", str(e["port"])]
    plan = write_json(root / "plan.json", doc)
    db = root / "c.duckdb"
    rc, out = _cli("plan", "freeze", str(plan), db=db)
    assert rc == 0, out
    rc, out = _cli("run", str(plan), db=db)
    assert rc == 0, out
    rc, out = _cli("gate", str(plan), db=db)
    assert len(re.findall(r"verdict issued: (\S+)", out)) == 2, out
    return {"db": db, "plan": plan}


def _copy(campaign, tmp_path) -> Path:
    """A private copy of the store and its side anchor (each tamper case edits its own)."""
    db = tmp_path / "c.duckdb"
    shutil.copy(campaign["db"], db)
    if anchor_path(campaign["db"]).exists():
        shutil.copy(anchor_path(campaign["db"]), anchor_path(db))
    return db


def _tamper(db: Path, *statements: str) -> None:
    con = duckdb.connect(str(db))
    try:
        for sql in statements:
            con.execute(sql)
    finally:
        con.close()


def _verify(capsys, db, *args):
    return inproc(capsys, "audit", "verify", *args, db=db)


@pytest.mark.slow  # a full campaign (the module's campaign)
def test_untouched_store_verifies(campaign, tmp_path, capsys):
    db = _copy(campaign, tmp_path)
    r = _verify(capsys, db)
    assert r.returncode == 0, r.stdout
    assert "audit chain OK" in r.stdout and "audit verify OK" in r.stdout
    assert re.search(r"ok +runs +4 run\(s\) match the digests recorded at run end", r.stdout)
    assert re.search(r"ok +attempts +[1-9]\d* attempt\(s\) match their attempt_recorded events", r.stdout)
    assert re.search(r"ok +launches +[1-9]\d* launch\(es\) match their launch_recorded events\n", r.stdout)
    assert re.search(r"ok +verdicts +2 verdict", r.stdout)
    assert re.search(r"ok +anchor +the chain still holds", r.stdout)
    assert re.search(r"ok +metrics +[1-9]\d* stored run-metrics row\(s\) equal a recomputation", r.stdout)


# (id, statements, the check audit verify must name first, a word its message must hold)
TAMPER = [
    ("verdict-pass-to-fail",  # the throughput rule's verdict (the faster profile: PASS)
     ["UPDATE verdicts SET verdict = CASE verdict WHEN 'PASS' THEN 'FAIL' ELSE 'PASS' END WHERE kind = 'throughput'"],
     "verdicts", "its verdict_issued event"),
    ("delete-newest-event",
     ["DELETE FROM audit_events WHERE seq = (SELECT max(seq) FROM audit_events)"], "anchor", "tail truncated"),
    ("delete-verdicts-and-events",
     # the verdicts and their events with everything after them (a FAIL's candidate rejection follows its verdict)
     ["DELETE FROM verdicts", "DELETE FROM audit_events WHERE seq >= (SELECT min(seq) FROM audit_events "
      "WHERE kind = 'verdict_issued')"], "anchor", "tail truncated"),
    ("edit-plan-row",
     ["UPDATE plans SET canonical_json = replace(canonical_json, '\"requests_per_run\":2', '\"requests_per_run\":3')"],
     "plans", "frozen"),
    ("edit-first-audio",
     ["UPDATE requests SET t_first_audio_ns = t_first_audio_ns - 50000000 "
      "WHERE request_index = 0 AND run_id = (SELECT min(run_id) FROM runs)"], "runs", "a stored value was edited"),
    ("delete-request-rows",
     ["DELETE FROM requests WHERE request_index = 1 AND run_id = (SELECT max(run_id) FROM runs)"], "runs",
     "rows deleted or added"),
    ("drop-verdicts", ["DROP TABLE verdicts"], "schema", "verdicts is missing"),
    # every configuration tried: deleting or rewording one hides what was tried before the winner
    ("delete-an-attempt", ["DELETE FROM attempts WHERE attempt_id = (SELECT min(attempt_id) FROM attempts)"],
     "attempts", "its row is missing (deleted)"),
    ("reword-an-attempt", ["UPDATE attempts SET config_json = replace(config_json, 'fast', 'slow') "
                           "WHERE engine = 'ref-fast'"], "attempts", "row differs from the one recorded"),
    ("attempt-outcome", ["UPDATE attempts SET outcome = 'rejected' WHERE attempt_id = (SELECT min(attempt_id) "
                         "FROM attempts)"], "attempts", "outcome is 'rejected' but its attempt_recorded event"),
    # what exactly ran: a launch's argv, revision, checkpoint hashes and how it ended
    ("edit-a-launch", ["UPDATE engine_launches SET revision = 'v9-hand-edited' WHERE launch_id = "
                       "(SELECT min(launch_id) FROM engine_launches)"], "launches", "row differs from the one recorded"),
    ("launch-status", ["UPDATE engine_launches SET status = 'crashed' WHERE launch_id = "
                       "(SELECT min(launch_id) FROM engine_launches)"], "launches",
     "status is 'crashed' but its last launch_recorded event"),
    ("delete-a-launch", ["DELETE FROM engine_launches WHERE launch_id = (SELECT min(launch_id) FROM engine_launches)"],
     "launches", "its row is missing (deleted)"),
    ("insert-a-launch", ["INSERT INTO engine_launches SELECT * REPLACE ('hand-' || launch_id AS launch_id, now() AS "
                         "started_at) FROM engine_launches WHERE launch_id = (SELECT min(launch_id) FROM engine_launches)"],
     "launches", "no launch_recorded event for it (inserted by hand)"),
    # the stored per-run metrics every view reads: an edit there changes what users see
    ("edit-stored-metrics",
     ["UPDATE run_metrics SET metrics_json = replace(metrics_json, '\"throughput\": ', '\"throughput\": 1')"],
     "metrics", "differ from the ones its requests and chunks give (throughput)"),
]


@pytest.mark.parametrize("statements, check, needle", [t[1:] for t in TAMPER], ids=[t[0] for t in TAMPER])
@pytest.mark.slow  # a full campaign (the module's campaign)
def test_each_hand_edit_fails_verify_naming_the_check(campaign, tmp_path, capsys, statements, check, needle):
    db = _copy(campaign, tmp_path)
    before = _tamper_guard(db, statements)
    _tamper(db, *statements)
    assert _tamper_guard(db, statements) != before, "the edit changed nothing: the case tests nothing"
    r = _verify(capsys, db)
    assert r.returncode == 1, r.stdout
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith(f"audit verify FAILED: {check}: "), r.stdout
    assert needle in last, last


def _tamper_guard(db: Path, statements: list[str]) -> str:
    """A fingerprint of the tables a case edits, to prove the edit happened."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        tables = {t for t in ("verdicts", "audit_events", "plans", "requests", "run_metrics", "attempts", "engine_launches")
                  if any(t in s for s in statements)}
        present = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        return json.dumps({t: str(con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()) if t in present else None
                           for t in sorted(tables)})
    finally:
        con.close()


@pytest.mark.slow  # a full campaign (the module's campaign)
def test_sql_is_read_only_unless_write_and_writes_are_audited(campaign, tmp_path, capsys):
    db = _copy(campaign, tmp_path)
    r = inproc(capsys, "sql", "DELETE FROM verdicts", db=db)
    assert r.returncode == 2
    assert "refused" in r.stderr and "--write" in r.stderr and r.stderr.count("\n") == 1
    with Store(db, read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM verdicts") == 2
        n_events = s.scalar("SELECT count(*) FROM audit_events")
        assert s.scalar("SELECT current_setting('autoload_known_extensions')") is False
        assert s.scalar("SELECT current_setting('autoinstall_known_extensions')") is False
    ok = inproc(capsys, "sql", "SELECT count(*) AS n FROM verdicts", "--format", "json", db=db)
    assert ok.returncode == 0 and json.loads(ok.stdout) == [{"n": 2}]

    w = inproc(capsys, "sql", "DELETE FROM verdicts", "--write", db=db)
    assert w.returncode == 0 and "sql_write" in w.stderr
    with Store(db, read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM verdicts") == 0
        ev = s.query("SELECT seq, kind, payload_json FROM audit_events ORDER BY seq DESC LIMIT 1")[0]
    assert ev["seq"] == n_events + 1 and ev["kind"] == "sql_write"
    payload = json.loads(ev["payload_json"])
    assert payload["statement"] == "DELETE FROM verdicts" and len(payload["statement_sha256"]) == 64
    assert json.loads(anchor_path(db).read_text())["length"] == n_events + 1
    r = _verify(capsys, db)
    assert r.returncode == 1
    assert re.search(r"sql writes +1 statement\(s\) changed the store by hand", r.stdout)
    assert "audit verify FAILED: verdicts: " in r.stdout and "row is missing (deleted)" in r.stdout

    bad = inproc(capsys, "sql", "DROP TABLE audit_events", "--write", db=db)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    with Store(db, read_only=True) as s:  # the failed write left nothing behind
        assert s.scalar("SELECT count(*) FROM audit_events") == n_events + 1


@pytest.mark.slow  # a full campaign (the module's campaign)
def test_exported_heads_show_truncation_even_without_the_side_anchor(campaign, tmp_path, capsys):
    db = _copy(campaign, tmp_path)
    with Store(db, read_only=True) as s:
        n = s.scalar("SELECT max(seq) FROM audit_events")
        vseq, vid = s.query("SELECT seq, subject FROM audit_events WHERE kind = 'verdict_issued' "
                            "ORDER BY seq DESC LIMIT 1")[0].values()
    doc_path = tmp_path / "verdict.json"
    assert inproc(capsys, "export", "verdict", vid, "-o", str(doc_path), db=db).returncode == 0
    doc = json.loads(doc_path.read_text())
    jsonschema.validate(doc, load_schema())
    assert doc["audit_head"]["length"] == n and len(doc["audit_head"]["head_hash"]) == 64
    pq_path = tmp_path / "runs.parquet"
    assert inproc(capsys, "export", "runs", "--format", "parquet", "-o", str(pq_path), db=db).returncode == 0
    assert json.loads(pq.read_schema(pq_path).metadata[PARQUET_KEY])["length"] == n
    ok = _verify(capsys, db, "--against", str(doc_path), "--against", str(pq_path))
    assert ok.returncode == 0, ok.stdout
    assert re.search(r"ok +exports +1 exported verdict document", ok.stdout)

    anchor_path(db).unlink()  # the attacker removes the side anchor too
    _tamper(db, f"DELETE FROM verdicts WHERE verdict_id = '{vid}'", f"DELETE FROM audit_events WHERE seq >= {vseq}")
    blind = _verify(capsys, db)
    assert re.search(r"not checked +anchor +no anchor", blind.stdout)
    r = _verify(capsys, db, "--against", str(doc_path))
    assert r.returncode == 1
    assert f"audit verify FAILED: anchor: {doc_path} records {n} events" in r.stdout
    assert re.search(rf"FAILED +exports +{re.escape(str(doc_path))}: verdict {vid} was never issued", r.stdout)


@pytest.mark.slow  # a full campaign (the module's campaign)
def test_edited_export_does_not_match_its_issued_verdict(campaign, tmp_path, capsys):
    db = _copy(campaign, tmp_path)
    with Store(db, read_only=True) as s:
        vid = s.scalar("SELECT min(verdict_id) FROM verdicts")
    doc_path = tmp_path / "verdict.json"
    assert inproc(capsys, "export", "verdict", vid, "-o", str(doc_path), db=db).returncode == 0
    doc = json.loads(doc_path.read_text())
    doc["verdict"] = "FAIL" if doc["verdict"] == "PASS" else "PASS"
    doc_path.write_text(json.dumps(doc))
    r = _verify(capsys, db, "--against", str(doc_path))
    assert r.returncode == 1 and "audit verify FAILED: exports: " in r.stdout and "differs from the document" in r.stdout


@pytest.mark.slow  # a full campaign (the module's campaign)
def test_anchor_never_moves_back_over_a_truncation(campaign, tmp_path, capsys):
    from data.queries import exclude_run

    db = _copy(campaign, tmp_path)
    anchored = json.loads(anchor_path(db).read_text())
    _tamper(db, "DELETE FROM audit_events WHERE seq = (SELECT max(seq) FROM audit_events)")
    with Store(db) as s:  # a later append must not hide the loss by rewriting the anchor
        exclude_run(s, s.scalar("SELECT min(run_id) FROM runs"), "profiler attached")
    assert "the anchor is left as it is" in capsys.readouterr().err
    assert json.loads(anchor_path(db).read_text())["head_hash"] == anchored["head_hash"]
    r = _verify(capsys, db)
    assert r.returncode == 1 and "audit verify FAILED: anchor: " in r.stdout and "history" in r.stdout


@pytest.mark.slow  # a full campaign (the module's campaign)
def test_half_size_store_is_reported_corrupt(campaign, tmp_path, capsys):
    db = _copy(campaign, tmp_path)
    with open(db, "r+b") as f:
        f.truncate(db.stat().st_size // 2)
    info = inproc(capsys, "db", "info", db=db)
    assert info.returncode != 0
    assert "corrupt" in info.stderr and "in use" not in info.stderr and info.stderr.count("\n") == 1
    r = _verify(capsys, db)
    assert r.returncode == 1
    assert r.stdout.count("\n") == 1 and "audit verify FAILED: store file: " in r.stdout and "corrupt" in r.stdout
    with pytest.raises(StoreCorrupt, match="truncated"):
        Store(db, read_only=True)


@pytest.mark.slow  # a full campaign (the module's campaign)
def test_damaged_block_is_corrupt_never_in_use(campaign, tmp_path, capsys):
    """DuckDB's checksum message ends in '... in block at location N': "block" contains "lock"."""
    db = _copy(campaign, tmp_path)
    with open(db, "r+b") as f:
        f.seek(3 * 4096 + 100)  # the first block after the headers
        f.write(b"\x55" * 2000)
    for args in (("db", "info"), ("audit", "verify"), ("runs", "list")):
        r = inproc(capsys, *args, db=db)
        text = r.stdout + r.stderr
        assert r.returncode != 0 and "corrupt" in text and "in use" not in text, (args, text)
    with pytest.raises(StoreCorrupt):
        Store(db)


def test_store_held_by_another_process_is_locked(tmp_path):
    db = tmp_path / "c.duckdb"
    Store(db).close()
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time, duckdb\n"
                               f"con = duckdb.connect({str(db)!r}); print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreLocked, match="in use by another process"):
            Store(db, read_only=True)
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("plan_filter", [False, True], ids=["all-runs", "plan"])
@pytest.mark.slow  # a full campaign (the module's campaign)
def test_export_runs_every_path(campaign, tmp_path, capsys, fmt, plan_filter):
    db = _copy(campaign, tmp_path)
    with Store(db, read_only=True) as s:
        n = s.scalar("SELECT count(*) FROM requests")
        plan_hash = s.scalar("SELECT plan_hash FROM plans")
    out = tmp_path / f"runs.{fmt}"
    args = ["export", "runs", "--format", fmt, "-o", str(out)] + (["--plan", plan_hash[:12]] if plan_filter else [])
    r = inproc(capsys, *args, db=db)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(out) if fmt == "csv" else pd.read_parquet(out)
    assert len(df) == n == 8 and {"engine", "concurrency", "kind", "excluded_reason", "t_first_audio_ns"} <= set(df.columns)
    head = out.with_name(out.name + SUFFIX) if fmt == "csv" else out
    assert _verify(capsys, db, "--against", str(head)).returncode == 0


@pytest.mark.slow  # a full campaign (the module's campaign)
def test_export_verdict_to_stdout_and_file(campaign, tmp_path, capsys):
    db = _copy(campaign, tmp_path)
    with Store(db, read_only=True) as s:
        ids = [r[0] for r in s.con.execute("SELECT verdict_id FROM verdicts ORDER BY verdict_id").fetchall()]
    for vid in ids:
        r = inproc(capsys, "export", "verdict", vid, db=db)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        jsonschema.validate(doc, load_schema())
        assert doc["verdict_id"] == vid and doc["audit_head"]["schema"] == "omni-campaign-audit-head/1"
        f = tmp_path / f"{vid}.json"
        assert inproc(capsys, "export", "verdict", vid[:-2], "-o", str(f), db=db).returncode == 0
        assert json.loads(f.read_text())["verdict_id"] == vid


def test_digest_line_is_the_documented_canonical_form(store):
    """docs/integrity.md: fields joined by ',', VARCHAR as <length>:<text>, NULL as '~', then '\\n';
    a change here would invalidate every digest already recorded."""
    import hashlib

    from data.digest import line_sql, table_digests

    store.insert("chunks", {"run_id": "r,1", "request_index": 0, "chunk_index": 2, "t_arrival_ns": -5,
                            "kind": "a\nb", "samples": 0, "payload_bytes": 7})
    cols = ["run_id", "request_index", "chunk_index", "t_arrival_ns", "kind", "samples", "payload_bytes",
            "server_emit_ns"]
    line = store.scalar(f"SELECT {line_sql('chunks', cols)} FROM chunks")
    assert line == "3:r,1,0,2,-5,3:a\nb,0,7,~\n"
    got = table_digests(store, "chunks", cols, "run_id", ("request_index", "chunk_index"), keys=["r,1", "none"])
    assert got["r,1"].rows == 1 and got["r,1"].sha256 == hashlib.sha256(line.encode()).hexdigest()
    assert got["none"].rows == 0 and got["none"].sha256 == hashlib.sha256(b"").hexdigest()


# -- quality scores: the rows a gate reads are announced when stored (data/score_digest.py) ---
@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> dict:
    """A holdout campaign (the quality arms at C=1, one repeat of the 4-id holdout) whose outputs
    are scored by the bundled DNSMOS scorer."""
    root = tmp_path_factory.mktemp("scored")
    wl = make_workload(root / "wl", short=True)
    doc = plan_dict(wl, concurrencies=(1,), requests=4, repeats=1, restart="per_cell", interleave="sequential")
    for e in doc["engines"]:
        e["argv"] = [sys.executable, "-m", "engine_adapters.reference", "--dialect", e["dialect"],
                     "--profile", e["profile"], "--host", "127.0.0.1", "--port", str(e["port"])]
    plan = write_json(root / "plan.json", doc)
    db = root / "c.duckdb"
    for args in (("plan", "freeze", str(plan)), ("plan", "open-holdout", str(plan), "--reason", "test"),
                 ("run", str(plan), "--holdout"), ("score", str(plan), "--scorer", "dnsmos")):
        rc, out = _cli(*args, db=db)
        assert rc == 0, out
    with Store(db, read_only=True) as s:
        n = s.scalar("SELECT count(*) FROM quality_scores WHERE status = 'ok'")
    assert n == 8, out  # 2 arms x 4 holdout ids
    return {"db": db, "plan": plan, "rows": n}


@pytest.mark.slow  # a scored campaign (the module's scored)
def test_scored_store_verifies_every_score_row(scored, tmp_path, capsys):
    db = _copy(scored, tmp_path)
    r = _verify(capsys, db)
    assert r.returncode == 0, r.stdout
    assert re.search(rf"ok +scores +{scored['rows']} score row\(s\) match the digests recorded when stored", r.stdout)
    with Store(db, read_only=True) as s:
        stored = s.query("SELECT payload_json FROM audit_events WHERE kind = 'scores_stored'")
        summary = json.loads(s.scalar("SELECT payload_json FROM audit_events WHERE kind = 'scores_recorded'"))
    assert sum(json.loads(e["payload_json"])["rows"] for e in stored) == scored["rows"]
    assert summary["batches"] == len(stored)


SCORE_TAMPER = [
    ("edit-a-mos", ["UPDATE quality_scores SET value = value + 0.25 WHERE request_index = 0 "
                    "AND run_id = (SELECT min(run_id) FROM quality_scores)"], "differ from their digest"),
    ("ok-to-error", ["UPDATE quality_scores SET status = 'error', error = 'x', value = NULL WHERE request_index = 1 "
                     "AND run_id = (SELECT max(run_id) FROM quality_scores)"], "differ from their digest"),
    ("delete-a-score", ["DELETE FROM quality_scores WHERE request_index = 0 "
                        "AND run_id = (SELECT max(run_id) FROM quality_scores)"], "missing (deleted)"),
    ("slip-one-in", ["INSERT INTO quality_scores SELECT * REPLACE ('other-mos' AS scorer_id) FROM quality_scores "
                     "LIMIT 1"], "not in the audit chain (no scores_stored event: inserted by hand)"),
]


@pytest.mark.parametrize("statements, needle", [t[1:] for t in SCORE_TAMPER], ids=[t[0] for t in SCORE_TAMPER])
@pytest.mark.slow  # a scored campaign (the module's scored)
def test_each_hand_edit_of_a_score_fails_verify(scored, tmp_path, capsys, statements, needle):
    """Before score digests, `audit verify` passed all of these: a gate re-run on the edited
    store reads the edited scores, and nothing said they had changed."""
    db = _copy(scored, tmp_path)
    before = _scores(db)
    _tamper(db, *statements)
    assert _scores(db) != before, "the edit changed nothing: the case tests nothing"
    r = _verify(capsys, db)
    assert r.returncode == 1, r.stdout
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("audit verify FAILED: scores: ") and needle in last, r.stdout


def _scores(db: Path) -> list:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT * FROM quality_scores ORDER BY ALL").fetchall()
    finally:
        con.close()


@pytest.mark.slow  # a scored campaign (the module's scored)
def test_scores_stored_before_score_digests_are_counted_not_compared(scored, tmp_path, capsys):
    """A store scored by an older console: its passes' `scores_recorded` events carry no
    `batches` and no `scores_stored` events exist; verify passes and says the rows were not
    compared (as for runs that ended before run digests)."""
    from data.audit import append_event

    con = duckdb.connect(str(scored["db"]), read_only=True)
    try:
        rows = con.execute("SELECT * FROM quality_scores").fetch_df()
    finally:
        con.close()
    db = _copy(scored, tmp_path)  # the store as the older code would have scored it
    with Store(db) as s:
        s.con.execute("DELETE FROM quality_scores")
        s.con.execute("DELETE FROM audit_events WHERE kind IN ('scores_stored', 'scores_recorded')")
    anchor_path(db).unlink()  # (the scoring events were the newest: the anchor would see the rewrite)
    with Store(db) as s:
        s.con.register("scored_rows", rows)
        s.con.execute("INSERT INTO quality_scores SELECT * FROM scored_rows")
        append_event(s, "scores_recorded", subject="dnsmos", payload={"scorer_id": "dnsmos", "rows_written": len(rows)})
    r = _verify(capsys, db)
    assert r.returncode == 0, r.stdout
    assert re.search(rf"ok +scores +0 score row\(s\) match .*; {len(rows)} row\(s\) scored before score digests "
                     "were recorded: not compared", r.stdout)
    _tamper(db, "INSERT INTO quality_scores SELECT * REPLACE ('utmos22' AS scorer_id) FROM quality_scores LIMIT 1")
    r = _verify(capsys, db)  # a row of a scorer no older pass recorded: slipped in
    assert r.returncode == 1 and "audit verify FAILED: scores: score utmos22 run " in r.stdout, r.stdout


def test_launches_from_before_launch_events_are_counted_not_compared(tmp_path, capsys):
    """A store written before launch_recorded events existed: its launches have none, and audit
    verify says they were not compared instead of calling them inserted by hand."""
    from datetime import datetime, timezone

    db = tmp_path / "old.duckdb"
    with Store(db) as s:
        s.insert("engine_launches", {"launch_id": "old-1", "engine": "e", "adapter": "reference", "status": "stopped",
                                     "started_at": datetime(2026, 1, 1, tzinfo=timezone.utc)})
    r = _verify(capsys, db)
    assert r.returncode == 0, r.stdout
    assert re.search(r"ok +launches +0 launch\(es\) match their launch_recorded events; 1 from before launch "
                     r"events counted, not compared", r.stdout)


def test_a_launch_inserted_by_hand_with_an_old_date_is_named_not_counted_as_legacy(tmp_path, capsys):
    """Once launch events exist, whether a launch predates them is decided by the audit sequence:
    a row inserted by hand and dated 2020 is inserted by hand (started_at used to make it legacy
    and skip it); a launch an event placed before the first launch_recorded stays legacy."""
    from datetime import datetime, timezone

    from data.audit import append_event
    from data.launches import store_launch

    db = tmp_path / "c.duckdb"
    old = datetime(2020, 1, 1, tzinfo=timezone.utc)
    with Store(db) as s:
        s.insert("engine_launches", {"launch_id": "old-1", "engine": "e", "adapter": "reference", "status": "stopped",
                                     "started_at": datetime.now(timezone.utc)})  # a clock that says "now"
        s.insert("runs", {"run_id": "run-1", "engine": "e", "dialect": "vllm-omni", "concurrency": 1, "kind": "measured", "repeat_index": 0,
                          "status": "running", "launch_id": "old-1", "started_at": datetime.now(timezone.utc)})
        append_event(s, "run_started", subject="run-1", payload={"engine": "e"})  # places old-1 in the chain
        store_launch(s, {"launch_id": "new-1", "engine": "e", "adapter": "reference", "status": "ready",
                         "started_at": datetime.now(timezone.utc)})
    r = _verify(capsys, db)
    assert r.returncode == 0, r.stdout
    assert re.search(r"ok +launches +1 launch\(es\) match their launch_recorded events; 1 from before launch "
                     r"events counted, not compared", r.stdout), r.stdout
    _tamper(db, "INSERT INTO engine_launches (launch_id, engine, adapter, status, started_at) "
                f"VALUES ('forged-1', 'e', 'reference', 'stopped', TIMESTAMPTZ '{old.isoformat()}')")
    r = _verify(capsys, db)
    assert r.returncode == 1 and "launch forged-1: no launch_recorded event for it (inserted by hand)" in r.stdout, \
        r.stdout
