"""Audit chain: append, verify, tamper detection naming the first broken link; exclusions."""

from __future__ import annotations

import pytest

from data.audit import append_event, events, verify_chain
from data.errors import CampaignError
from data.queries import aggregate_runs, exclude_run
from data.store import Store
from plans_helpers import inproc, insert_run


def _chain(store, n=5):
    for i in range(n):
        append_event(store, "run_started", plan_hash="p" * 64, subject=f"run-{i}", payload={"i": i, "text": "naïve"})


def test_chain_links_and_verifies(store):
    _chain(store)
    rows = store.query("SELECT seq, prev_hash, event_hash FROM audit_events ORDER BY seq")
    assert [r["seq"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[0]["prev_hash"] == ""
    assert all(rows[i]["prev_hash"] == rows[i - 1]["event_hash"] for i in range(1, 5))
    ok, broken, msg = verify_chain(store)
    assert ok and broken is None and "5 events" in msg
    assert events(store, subject="run-3")[0]["payload"] == {"i": 3, "text": "naïve"}


def test_unknown_kind_refused(store):
    with pytest.raises(CampaignError, match="unknown event kind"):
        append_event(store, "plan_thawed", payload={})


@pytest.mark.parametrize("sql, seq", [
    ("UPDATE audit_events SET payload_json = '{\"i\":99,\"text\":\"naïve\"}' WHERE seq = 3", 3),
    ("UPDATE audit_events SET subject = 'run-x' WHERE seq = 2", 2),
    ("UPDATE audit_events SET event_time = event_time + INTERVAL 1 SECOND WHERE seq = 4", 4),
    ("DELETE FROM audit_events WHERE seq = 2", 2),
    ("DELETE FROM audit_events WHERE seq = 5", None),  # truncating the tail cannot be seen without an anchor
])
def test_tamper_names_first_broken_link(store, sql, seq):
    _chain(store)
    store.con.execute(sql)
    res = verify_chain(store)
    if seq is None:
        assert res.ok
        return
    assert not res.ok and res.first_broken_seq == seq
    assert f"seq {seq}" in res.message


def test_rehashed_row_still_breaks_the_next_link(store):
    """An attacker who recomputes the edited row's own hash still breaks the following link."""
    from data.audit import event_hash

    _chain(store)
    row = store.con.execute("SELECT seq, epoch_us(event_time), kind, plan_hash, subject, payload_json, prev_hash "
                            "FROM audit_events WHERE seq = 2").fetchone()
    forged = event_hash(row[0], row[1], row[2], row[3], row[4], '{"i":42}', row[6])
    store.con.execute("UPDATE audit_events SET payload_json = '{\"i\":42}', event_hash = ? WHERE seq = 2", [forged])
    res = verify_chain(store)
    assert not res.ok and res.first_broken_seq == 3 and "prev_hash" in res.message


def test_audit_verify_cli_names_the_seq(tmp_path, capsys):
    db = tmp_path / "c.duckdb"
    with Store(db) as s:
        _chain(s)
        for i in range(5):  # the runs the run_started events announce (verify cross-checks them)
            insert_run(s, f"run-{i}", plan_hash="p" * 64, status="running")
    ok = inproc(capsys, "audit", "verify", db=db)
    assert ok.returncode == 0 and "audit chain OK" in ok.stdout
    with Store(db) as s:
        s.con.execute("UPDATE audit_events SET payload_json = '{}' WHERE seq = 4")
    bad = inproc(capsys, "audit", "verify", db=db)
    assert bad.returncode == 1
    assert "BROKEN at seq 4" in bad.stdout
    log = inproc(capsys, "audit", "log", "--format", "csv", db=db)
    assert log.returncode == 0 and log.stdout.count("run_started") == 5


def test_exclusion_leaves_aggregates_but_not_the_store(store):
    ph = "a" * 64
    insert_run(store, "r1", plan_hash=ph, utt_ids=["s-1"])
    insert_run(store, "r2", plan_hash=ph, utt_ids=["s-1"], repeat=1)
    insert_run(store, "w", plan_hash=ph, kind="warmup", utt_ids=["s-1"])
    insert_run(store, "p", plan_hash=ph, kind="profiled")
    insert_run(store, "x", plan_hash=ph, kind="exploratory")
    insert_run(store, "i", plan_hash=ph, status="incomplete")
    insert_run(store, "other", plan_hash="b" * 64)
    assert [r["run_id"] for r in aggregate_runs(store, ph)] == ["r1", "r2"]
    seq = exclude_run(store, "r1", "profiler attached (two stack snapshots)")
    assert [r["run_id"] for r in aggregate_runs(store, ph)] == ["r2"]
    assert [r["run_id"] for r in aggregate_runs(store, ph, engine="e", concurrency=1)] == ["r2"]
    assert store.scalar("SELECT count(*) FROM runs WHERE run_id = 'r1'") == 1
    assert store.scalar("SELECT count(*) FROM requests WHERE run_id = 'r1'") == 1
    ev = events(store, kind="run_excluded")
    assert ev[0]["seq"] == seq and ev[0]["subject"] == "r1" and "profiler" in ev[0]["payload"]["reason"]
    assert store.scalar("SELECT audit_seq FROM exclusions WHERE run_id = 'r1'") == seq
    with pytest.raises(CampaignError, match="already excluded"):
        exclude_run(store, "r1", "again")
    with pytest.raises(CampaignError, match="no such run"):
        exclude_run(store, "nope", "x")
    with pytest.raises(CampaignError, match="needs a reason"):
        exclude_run(store, "r2", "  ")
    assert verify_chain(store).ok


def test_runs_exclude_cli(tmp_path, capsys):
    db = tmp_path / "c.duckdb"
    with Store(db) as s:
        insert_run(s, "r1", plan_hash="a" * 64)
    r = inproc(capsys, "runs", "exclude", "r1", "--reason", "profiled by accident", db=db)
    assert r.returncode == 0 and "excluded from aggregates" in r.stdout
    ls = inproc(capsys, "runs", "list", "--format", "csv", db=db)
    assert "profiled by accident" in ls.stdout


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000],
                         ids=["list", "object"])
def test_audit_verify_against_deeply_nested_json_is_one_line(tmp_path, text):
    """`--against` a JSON file nested 100,000 deep: one line naming the file, exit 2 (it was a
    RecursionError traceback from json.loads)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    db = tmp_path / "c.duckdb"
    with Store(db) as s:
        _chain(s, 1)
        insert_run(s, "run-0", plan_hash="p" * 64, status="running")
    bad = tmp_path / "verdict.json"
    bad.write_text(text)
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "console.cli", "audit", "verify", "--against", str(bad), "--db", str(db)],
                       capture_output=True, text=True, cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == f"campaign: error: {bad}: not an audit head (JSON nested too deeply to read)"
    assert "Traceback" not in r.stderr
