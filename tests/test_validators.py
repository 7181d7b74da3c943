"""Validators that run (issue 27): `campaign validate` runs a frozen plan's validators without a
shell, stores every run in validator_runs with a validator_run audit event, `audit verify` catches an
edited run, and a PASS needs every validator of the candidate to have passed after the freeze and
the candidate's latest launch, by audit sequence (docs/plans.md, "Validators")."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import jsonschema
import pytest

from console.cli import main
from data.anchor import anchor_path
from data.hashing import sha256_text
from data.launches import store_launch
from data.plan_freeze import frozen_plan_for_file
from data.store import Store, utcnow
from data.validators import precondition
from plans_helpers import make_workload, plan_dict
from results_store import announce_runs
from stats.verdict_doc import load_schema
from test_verdicts import _add_run

ROOT = Path(__file__).resolve().parents[1]
SECRET = "validator-secret-value-1234"


def campaign(*args, db: Path, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The CLI as a user runs it, in its own process."""
    return subprocess.run([sys.executable, "-m", "console.cli", *args, "--db", str(db)], capture_output=True,
                          text=True, cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)})


def _validators(tmp: Path) -> list[dict]:
    return [
        {"name": "passes", "argv": ["true"]},
        {"name": "fails", "argv": ["false"], "applies_to": ["ref-fast"]},
        {"name": "self-check", "argv": [sys.executable, "-m", "engine_adapters.reference", "--self-check"],
         "cwd": str(ROOT), "timeout_s": 120},
        {"name": "too-slow", "argv": ["sleep", "30"], "timeout_s": 0.5},
        {"name": "no-binary", "argv": ["no-such-validator-binary"]},
        {"name": "env", "argv": ["sh", "-c", 'test "$TOKEN" = "$EXPECT" && echo "token is $TOKEN"'],
         "env": {"TOKEN": SECRET, "EXPECT": SECRET}, "cwd": str(tmp)},
    ]


def _frozen(tmp: Path, validators: list[dict]) -> tuple[Path, Path]:
    doc = plan_dict(make_workload(tmp / "wl"))
    doc["validators"] = validators
    plan = tmp / "plan.json"
    plan.write_text(json.dumps(doc, indent=2))
    db = tmp / "c.duckdb"
    r = campaign("plan", "freeze", str(plan), db=db)
    assert r.returncode == 0, r.stderr
    return plan, db


@pytest.mark.slow  # 9 s in a loaded `make check`
def test_validate_stores_every_run_with_its_event_and_tells_the_truth_in_its_exit_code(tmp_path):
    plan, db = _frozen(tmp_path, _validators(tmp_path))
    r = campaign("validate", str(plan), db=db)
    assert r.returncode == 1, r.stdout + r.stderr  # three failed validations
    failed = [ln for ln in r.stdout.splitlines() if ln.startswith("validator ") and ": " in ln and "(run " in ln]
    assert len(failed) == 3, r.stdout
    assert any(ln.startswith("validator fails: failed: exit 1") for ln in failed)
    assert any(ln.startswith("validator too-slow: timed_out: still running after timeout_s 0.5 s") for ln in failed)
    assert any(ln.startswith("validator no-binary: not_started: no-such-validator-binary: no such executable")
               for ln in failed)
    assert "3 of 6 validator(s) passed" in r.stdout
    with Store(db, read_only=True) as s:
        rows = {r["name"]: r for r in s.query("SELECT * FROM validator_runs")}
        evs = s.query("SELECT seq, subject, payload_json FROM audit_events WHERE kind = 'validator_run' ORDER BY seq")
        plan_hash = s.scalar("SELECT plan_hash FROM plans")
    assert {n: (x["status"], x["exit_code"]) for n, x in rows.items()} == {
        "passes": ("passed", 0), "fails": ("failed", 1), "self-check": ("passed", 0), "too-slow": ("timed_out", -9),
        "no-binary": ("not_started", None), "env": ("passed", 0)}
    assert all(x["plan_hash"] == plan_hash for x in rows.values())
    assert json.loads(rows["fails"]["engines_json"]) == ["ref-fast"]
    assert json.loads(rows["passes"]["engines_json"]) == ["ref-baseline", "ref-fast"]  # no applies_to: every engine
    assert json.loads(rows["self-check"]["argv_json"])[1:] == ["-m", "engine_adapters.reference", "--self-check"]
    assert rows["self-check"]["stdout_tail"].startswith("self-check OK: profile baseline")
    assert rows["self-check"]["stdout_sha256"] == sha256_text(rows["self-check"]["stdout_tail"])
    assert rows["too-slow"]["duration_ns"] < 20e9
    # one event per run, in run order, each naming its row; the secret is nowhere in the store
    assert [e["subject"] for e in evs] == [rows[n]["validator_run_id"] for n in
                                           ("passes", "fails", "self-check", "too-slow", "no-binary", "env")]
    assert json.loads(evs[1]["payload_json"])["status"] == "failed"
    assert rows["env"]["stdout_tail"] == "token is <redacted>\n"
    assert json.loads(rows["env"]["env_json"])["TOKEN"] == "sha256:" + sha256_text(SECRET)
    raw = db.read_bytes()
    assert SECRET.encode() not in raw
    assert campaign("audit", "verify", db=db).returncode == 0

    only = campaign("validate", str(plan), "--only", "passes", db=db)
    assert only.returncode == 0 and "1 of 1 validator(s) passed" in only.stdout, only.stdout + only.stderr


@pytest.mark.slow  # 6 s in a loaded `make check`
def test_validate_refuses_before_running_anything(tmp_path):
    plan, db = _frozen(tmp_path, [{"name": "marker", "argv": ["touch", str(tmp_path / "ran")]}])
    bad = campaign("validate", str(plan), "--only", "nope", db=db)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--only nope" in bad.stderr and "marker" in bad.stderr
    doc = json.loads(plan.read_text())
    doc["validators"][0]["timeout_s"] = 5
    plan.write_text(json.dumps(doc))
    altered = campaign("validate", str(plan), db=db)
    assert altered.returncode == 2 and "altered since it was frozen" in altered.stderr
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**doc, "name": "never-frozen"}))
    unfrozen = campaign("validate", str(other), db=db)
    assert unfrozen.returncode == 2 and "not frozen" in unfrozen.stderr
    assert not (tmp_path / "ran").exists()
    with Store(db, read_only=True) as s:
        assert s.scalar("SELECT count(*) FROM validator_runs") == 0


@pytest.mark.slow  # 4 s in a loaded `make check`
def test_a_shell_string_and_an_unknown_engine_are_refused_at_freeze(tmp_path):
    for validators, want in (([{"name": "v", "argv": "pytest -q tests"}],
                              "validators[0].argv: 'pytest -q tests' is a shell string"),
                             ([{"name": "v", "argv": ["true"], "applies_to": ["ref-nope"]}],
                              "validators[0].applies_to[0]: 'ref-nope' is not an engine in this plan")):
        doc = plan_dict(make_workload(tmp_path / "wl"))
        doc["validators"] = validators
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps(doc))
        r = campaign("plan", "freeze", str(plan), db=tmp_path / "c.duckdb")
        assert r.returncode == 2 and want in r.stderr and r.stderr.count("\n") == 1, r.stderr


@pytest.mark.slow  # 5 s in a loaded `make check`
def test_audit_verify_catches_an_edited_validator_run(tmp_path):
    plan, db = _frozen(tmp_path, [{"name": "fails", "argv": ["false"]}])
    assert campaign("validate", str(plan), db=db).returncode == 1
    assert campaign("audit", "verify", db=db).returncode == 0
    forged = tmp_path / "forged.duckdb"
    shutil.copy(db, forged)
    shutil.copy(anchor_path(db), anchor_path(forged))
    con = duckdb.connect(str(forged))
    con.execute("UPDATE validator_runs SET status = 'passed', exit_code = 0, reason = NULL")
    con.close()
    r = campaign("audit", "verify", db=forged)
    assert r.returncode == 1
    assert re.search(r"validator run val-\S+: status is 'passed' but its validator_run event \(seq \d+\) says "
                     r"'failed'", r.stdout), r.stdout


def _gated_plan(tmp_path: Path, flag: Path) -> tuple[Path, Path, dict]:
    """The demo plan whose rule "fast exceeds peer" PASSes on its numbers (test_verdicts' runs),
    with a validator of the candidate that passes once `flag` exists."""
    plan = tmp_path / "plan.json"
    assert main(["plan", "init", "--demo", "-o", str(plan)]) == 0
    raw = json.loads(plan.read_text())
    raw["workload"]["root"] = str(ROOT / raw["workload"]["root"])
    raw["bootstrap"]["draws"] = 2000
    rule = raw["decision_rules"][0]
    raw["validators"] = [{"name": "flag-present", "argv": ["test", "-e", str(flag)], "applies_to": [rule["candidate"]]}]
    plan.write_text(json.dumps(raw))
    db = tmp_path / "c.duckdb"
    assert main(["plan", "freeze", str(plan), "--db", str(db)]) == 0
    with Store(db) as s:
        plan_hash = s.scalar("SELECT plan_hash FROM plans")
        for c in (16, 32):
            for rep in range(3):
                _add_run(s, plan_hash, rule["candidate"], c, rep, 2.0, 1.0 - 0.01 * rep)
                _add_run(s, plan_hash, rule["reference"], c, rep, 2.0, 1.5 + 0.01 * rep)
        announce_runs(s, plan_hash, [r[0] for r in s.con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()])
    return plan, db, rule


def _rule_verdict(db: Path, out: str) -> dict:
    ids = re.findall(r"verdict issued: (\S+)", out)
    with Store(db, read_only=True) as s:
        rows = [json.loads(s.scalar("SELECT document_json FROM verdicts WHERE verdict_id = ?", [i])) for i in ids]
    return next(d for d in rows if d["kind"] == "throughput")


@pytest.mark.slow  # a full campaign
def test_a_candidate_whose_validator_failed_gets_no_pass(tmp_path):
    flag = tmp_path / "flag"
    plan, db, rule = _gated_plan(tmp_path, flag)
    # never run: INCONCLUSIVE naming it
    r = campaign("gate", str(plan), db=db)
    assert r.returncode == 3 and "Rule verdict: INCONCLUSIVE" in r.stdout, r.stdout + r.stderr
    assert f"validator of {rule['candidate']} not passed" in r.stdout and "flag-present (no run after seq" in r.stdout
    # failed: INCONCLUSIVE naming it and how it failed
    assert campaign("validate", str(plan), db=db).returncode == 1
    r = campaign("gate", str(plan), db=db)
    assert r.returncode == 3 and "Rule verdict: INCONCLUSIVE" in r.stdout and "flag-present (failed: exit 1" in r.stdout
    doc = _rule_verdict(db, r.stdout)
    jsonschema.validate(doc, load_schema())
    assert doc["verdict"] == "INCONCLUSIVE" and doc["validators"]["engine"] == rule["candidate"]
    assert [(s["validator"], s["status"]) for s in doc["validators"]["standings"]] == [("flag-present", "failed")]
    assert [x["status"] for x in doc["validators"]["runs"]] == ["failed"]
    # passed after the freeze: the rule's own verdict stands (the same numbers PASS)
    flag.touch()
    assert campaign("validate", str(plan), db=db).returncode == 0
    r = campaign("gate", str(plan), db=db)
    assert "Rule verdict: PASS" in r.stdout, r.stdout + r.stderr
    assert _rule_verdict(db, r.stdout)["validators"]["ok"] is True
    # the candidate launched again after that pass: its identity is newer than the validation
    with Store(db) as s:
        plan_hash = s.scalar("SELECT plan_hash FROM plans")
        store_launch(s, {"launch_id": "launch-after", "plan_hash": plan_hash, "engine": rule["candidate"],
                         "adapter": "reference", "status": "ready", "started_at": utcnow()})
    r = campaign("gate", str(plan), "--dry-run", db=db)
    assert r.returncode == 3 and "Rule verdict: INCONCLUSIVE" in r.stdout and "flag-present (no run after seq" in r.stdout
    # the evidence bundle carries the runs, and verify re-derives each verdict with its validators
    bundle = tmp_path / "evidence"
    e = campaign("export", "evidence", str(plan), str(bundle), db=db)
    assert e.returncode == 0, e.stdout + e.stderr
    assert (bundle / "tables" / "validator_runs.parquet").is_file()
    v = subprocess.run([sys.executable, "-m", "console.cli", "evidence", "verify", str(bundle)], capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert v.returncode == 0, v.stdout + v.stderr


@pytest.mark.slow  # 7 s in a loaded `make check`
def test_a_pass_from_before_the_plan_was_frozen_does_not_count(tmp_path):
    """An addendum is frozen after its parent's validator passed: that run is from before the
    addendum's freeze, so it does not count for the addendum until validated again."""
    flag = tmp_path / "flag"
    flag.touch()
    plan, db, rule = _gated_plan(tmp_path, flag)
    assert campaign("validate", str(plan), db=db).returncode == 0
    with Store(db) as s:
        parent = frozen_plan_for_file(s, plan)
        assert precondition(s, parent, rule["candidate"]).ok
    add = tmp_path / "addendum.json"
    add.write_text(json.dumps({"schema": "omni-campaign-addendum/1", "parent": parent.hash, "name": "wider",
                               "reason": "test", "changes": {"description": "after the validation"}}))
    assert campaign("plan", "addendum", parent.hash, str(add), db=db).returncode == 0
    with Store(db) as s:
        child = frozen_plan_for_file(s, add)
        before = precondition(s, child, rule["candidate"])
    assert not before.ok and before.standings[0].status == "not_run"
    assert before.freeze_seq is not None and before.freeze_seq > s_seq(db, parent.hash)
    assert campaign("validate", str(add), db=db).returncode == 0
    with Store(db) as s:
        assert precondition(s, child, rule["candidate"]).ok


def s_seq(db: Path, plan_hash: str) -> int:
    """The seq of the parent's validator run."""
    with Store(db, read_only=True) as s:
        return s.scalar("SELECT max(a.seq) FROM audit_events a JOIN validator_runs v ON a.subject = v.validator_run_id "
                        "WHERE v.plan_hash = ?", [plan_hash])


def test_the_reference_self_check_fails_on_audio_that_is_not_the_sentence(tmp_path):
    """The demo's validator checks something: a profile whose talker stops after 5 frames (0.2 s)
    renders audio that decodes but is too short for the sentence, and the check says so."""
    profiles = tmp_path / "profiles.toml"
    profiles.write_text('[profiles.clipped]\ninherits = "baseline"\nmax_audio_frames = 5\n')
    run = [sys.executable, "-m", "engine_adapters.reference", "--self-check"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ok = subprocess.run(run, capture_output=True, text=True, env=env, cwd=ROOT)
    assert ok.returncode == 0 and ok.stdout.startswith("self-check OK: profile baseline"), ok.stdout + ok.stderr
    bad = subprocess.run([*run, "--profile", "clipped", "--profiles-file", str(profiles)], capture_output=True,
                         text=True, env=env, cwd=ROOT)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "self-check FAILED: duration: 0.20 s of audio" in bad.stderr
    unknown = subprocess.run([*run, "--profile", "nope"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1 and "no profile named 'nope'" in unknown.stderr


def test_a_run_recorded_before_its_plan_was_frozen_does_not_count(tmp_path):
    """The freeze threshold alone: a passing run stored under the plan's hash (through the same
    record_run `campaign validate` uses) before the plan's freeze event is older than the freeze by
    audit sequence, so the candidate still has no validated PASS; a run after it counts."""
    from console.validation import run_validator
    from data.plan_freeze import freeze
    from data.plan_loading import load_plan
    from data.validators import record_run

    doc = plan_dict(make_workload(tmp_path / "wl"))
    doc["validators"] = [{"name": "passes", "argv": ["true"]}]
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    with Store(tmp_path / "c.duckdb") as s:
        unfrozen = load_plan(path)
        v = unfrozen.validators[0]
        _, early = record_run(s, unfrozen, v, {}, run_validator(v, {}))
        plan = freeze(s, path).plan
        standing = precondition(s, plan, "ref-fast")
        assert standing.freeze_seq > early and not standing.ok and standing.standings[0].status == "not_run"
        assert "passes (no run after seq" in standing.reason
        _, late = record_run(s, plan, v, {}, run_validator(v, {}))
        after = precondition(s, plan, "ref-fast")
        assert after.ok and after.standings[0].seq == late
