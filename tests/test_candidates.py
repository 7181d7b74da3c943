"""Candidates and the acceptance decision (issue 28): every configuration launched or probed is a
candidate with its fate; each status change is an audit event; a FAIL verdict rejects its
candidate naming the verdict; a selection is recorded and followed by the holdout's opening;
`campaign accept` combines every piece and names each; the evidence bundle carries the launches,
attempts, candidates and verdicts and `evidence verify` fails when one is edited
(docs/results.md, "Candidates"; docs/statistics.md, "Acceptance")."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import duckdb
import jsonschema
import pyarrow.parquet as pq
import pytest

from console.cli import main
from console.evidence import write_manifest
from console.runner import record_attempt
from data import candidates as cands
from data.audit import events
from data.errors import CampaignError
from data.integrity import check_candidates
from data.launches import store_launch
from data.plan_freeze import frozen_plan_for_file
from data.plan_model import plan_from_dict
from data.plan_validation import validate_plan_dict
from data.store import Store, utcnow
from data.validators import Precondition
from plans_helpers import make_workload, plan_dict
from results_store import announce_runs, build_campaign
from stats import acceptance as acc
from stats.verdict_doc import load_schema
from test_verdicts import _add_run

ROOT = Path(__file__).resolve().parents[1]


def campaign(*args: str, db: Path | None = None) -> subprocess.CompletedProcess:
    """The CLI as a user runs it, in its own process."""
    extra = ["--db", str(db)] if db is not None else []
    return subprocess.run([sys.executable, "-m", "console.cli", *args, *extra], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def _statuses(store: Store, key: str) -> list[tuple[str, str]]:
    return [(e["payload"]["change"], e["payload"]["status"]) for e in cands.status_events(store, key)]


# -- status changes ---------------------------------------------------------------------------
def test_each_status_change_is_an_event_and_rejected_stays_rejected(tmp_path):
    with Store(tmp_path / "c.duckdb") as s:
        a = cands.register(s, "ref-a", {"argv": ["a"]}, hypothesis="a is faster", plan_hash="p1")
        assert cands.register(s, "ref-a-again", {"argv": ["a"]}) == a  # same configuration, same candidate
        b = cands.register(s, "ref-b", {"argv": ["b"]})
        assert cands.get(s, a).status == cands.PROPOSED and cands.get(s, a).hypothesis == "a is faster"
        cands.record_outcome(s, b, "startup_failed", plan_hash="p1", reason="port 8091 held by pid 7")
        assert cands.get(s, b).status == cands.STARTUP_FAILED and cands.get(s, b).reason == "port 8091 held by pid 7"
        cands.record_outcome(s, a, "measured", plan_hash="p1")
        with pytest.raises(CampaignError, match="--because: name the verdict"):
            cands.select(s, a, [], None, plan_hash="p1")
        with pytest.raises(CampaignError, match="is startup_failed: only a measured candidate can be selected"):
            cands.select(s, b, ["v1"], None, plan_hash="p1")
        cands.select(s, a, ["throughput-1"], "C16 and C32", plan_hash="p1")
        assert cands.get(s, a).status == cands.SELECTED and cands.get(s, a).verdicts == ("throughput-1",)
        cands.record_outcome(s, a, "measured", plan_hash="p1")  # a later launch never undoes a decision
        assert cands.get(s, a).status == cands.SELECTED
        assert cands.reject(s, a, "verdict q-1 FAIL", ["q-1"], plan_hash="p2")
        assert not cands.reject(s, a, "second thoughts", plan_hash="p2")  # the first rejection stands
        with pytest.raises(CampaignError, match="is rejected \\(verdict q-1 FAIL\\); rejected candidates stay rejected"):
            cands.select(s, a, ["throughput-2"], None, plan_hash="p2")
        cands.record_outcome(s, a, "measured", plan_hash="p2")
        c = cands.get(s, a)
        assert (c.status, c.reason, c.verdicts) == (cands.REJECTED, "verdict q-1 FAIL", ("q-1",))
        assert _statuses(s, a) == [("registered", "proposed"), ("measured", "measured"), ("selected", "selected"),
                                   ("rejected", "rejected")]
        assert _statuses(s, b) == [("registered", "proposed"), ("startup_failed", "startup_failed")]
        assert check_candidates(s, events(s)).ok
        # a rejection edited away by hand is found by audit verify
        s.con.execute("UPDATE candidates SET status = 'selected' WHERE config_sha256 = ?", [a])
        bad = check_candidates(s, events(s))
        assert not bad.ok and f"candidate {a}: status is 'selected' but its last candidate_recorded event" in bad.message


@pytest.mark.slow  # 5 s in a loaded `make check`
def test_a_fail_verdict_rejects_its_candidate_naming_it(tmp_path):
    db, plan_path = build_campaign(tmp_path, sim_gap=False)  # `campaign gate` issues ref-fast's quality FAIL
    with Store(db, read_only=True) as s:
        fail = s.scalar("SELECT verdict_id FROM verdicts WHERE kind = 'quality' AND verdict = 'FAIL'")
    assert fail is not None
    r = campaign("candidates", "--format", "json", db=db)
    assert r.returncode == 0, r.stderr
    fast = next(c for c in json.loads(r.stdout) if c["name"] == "ref-fast")
    assert fast["status"] == "rejected" and fast["reason"] == f"verdict {fail} FAIL" and fast["rests_on"] == [fail]
    assert f"{fail} FAIL" in fast["verdicts"]
    # csv carries the same fate; the table names the FAIL verdict too
    rows = list(csv.DictReader(io.StringIO(campaign("candidates", "--format", "csv", db=db).stdout)))
    assert [(x["name"], x["status"]) for x in rows if x["name"] == "ref-fast"] == [("ref-fast", "rejected")]
    # a reject by hand of a rejected candidate leaves the first rejection as it was
    r = campaign("candidates", "reject", "ref-fast", "--reason", "slow", db=db)
    assert r.returncode == 0 and "was already rejected" in r.stdout
    with Store(db, read_only=True) as s:
        assert cands.get(s, fast["config_sha256"]).reason == f"verdict {fail} FAIL"
    # select refuses a verdict that is not a PASS, and an unknown candidate, in one line each
    r = campaign("candidates", "select", "ref-fast", "--because", fail, db=db)
    assert r.returncode == 2 and f"verdict {fail} is FAIL; a selection rests on PASS verdicts" in r.stderr
    r = campaign("candidates", "select", "no-such", "--because", fail, db=db)
    assert r.returncode == 2 and "candidate no-such: no such candidate" in r.stderr and "Traceback" not in r.stderr


# -- selection and the holdout ----------------------------------------------------------------
def _rule_plan(tmp_path: Path, extra: dict) -> tuple[Path, Path, dict]:
    """The demo plan (with `extra` fields) whose rule "fast exceeds peer" PASSes on hand-made runs,
    and a validator of the candidate that passes."""
    plan = tmp_path / "plan.json"
    assert main(["plan", "init", "--demo", "-o", str(plan)]) == 0
    raw = json.loads(plan.read_text())
    raw["workload"]["root"] = str(ROOT / raw["workload"]["root"])
    raw["bootstrap"]["draws"] = 2000
    rule = raw["decision_rules"][0]
    raw["validators"] = [{"name": "true", "argv": ["true"], "applies_to": [rule["candidate"]]}]
    raw.update(extra)
    plan.write_text(json.dumps(raw))
    db = tmp_path / "c.duckdb"
    assert campaign("plan", "freeze", str(plan), db=db).returncode == 0
    with Store(db) as s:
        plan_hash = s.scalar("SELECT plan_hash FROM plans")
        for c in (16, 32):
            for rep in range(3):
                _add_run(s, plan_hash, rule["candidate"], c, rep, 2.0, 1.0 - 0.01 * rep)
                _add_run(s, plan_hash, rule["reference"], c, rep, 2.0, 1.5 + 0.01 * rep)
        announce_runs(s, plan_hash, [r[0] for r in s.con.execute("SELECT run_id FROM runs ORDER BY run_id").fetchall()])
    return plan, db, rule


CLAIMS = {"status": "draft", "scope": "ref-fast vs ref-peer on the bundled sample, C16 and C32",
          "non_claims": ["no optimality claim", "no claim beyond the reference engine"]}


@pytest.mark.slow  # a campaign through selection and acceptance
def test_selection_is_recorded_before_the_holdout_and_acceptance_names_each_piece(tmp_path):
    plan, db, rule = _rule_plan(tmp_path, {"selection": "required", "claims": CLAIMS})
    cand = rule["candidate"]
    with Store(db) as s:  # the freeze registered every engine of the plan as proposed
        assert {r["name"]: r["status"] for r in s.query("SELECT name, status FROM candidates")} == \
            {e: "proposed" for e in ("ref-baseline", "ref-fast", "ref-lossy", "ref-peer")}
        p = frozen_plan_for_file(s, plan)
        record_attempt(s, p, p.engine(cand), "measured", launch_id=None, run_ids=["r1"])  # the runner's own call
        record_attempt(s, p, p.engine("ref-lossy"), "startup_failed", reason="engine exited: code 1")
    r = campaign("plan", "open-holdout", str(plan), "--reason", "sweep done", db=db)
    assert r.returncode == 2 and "selection: required, and no candidate of the plan is selected" in r.stderr
    assert campaign("validate", str(plan), db=db).returncode == 0
    g = campaign("gate", str(plan), db=db)
    rule_vid = re.search(r"verdict issued: (throughput-\S+)", g.stdout).group(1)
    assert "Rule verdict: PASS" in g.stdout, g.stdout + g.stderr
    r = campaign("candidates", "select", cand, "--because", rule_vid, "--note", "C16/C32 throughput", db=db)
    assert r.returncode == 0 and f"selected because {rule_vid}" in r.stdout, r.stderr
    r = campaign("plan", "open-holdout", str(plan), "--reason", "sweep done", db=db)
    assert r.returncode == 0 and f"follows the selection of {cand}" in r.stdout, r.stderr
    with Store(db, read_only=True) as s:
        opened = events(s, kind="holdout_opened")[0]
        sel = opened["payload"]["selection"]
        assert [(x["candidate"], x["verdicts"]) for x in sel] == [(cand, [rule_vid])] and sel[0]["seq"] < opened["seq"]
        lossy = s.query("SELECT status, reason FROM candidates WHERE name = 'ref-lossy'")[0]
        assert (lossy["status"], lossy["reason"]) == ("startup_failed", "engine exited: code 1")
    # acceptance: everything but the quality verdict passes -> INCONCLUSIVE, naming each piece
    a = campaign("accept", str(plan), "--candidate", cand, db=db)
    assert a.returncode == 3, a.stdout + a.stderr
    assert "claim (draft): ref-fast vs ref-peer" in a.stdout and "no optimality claim" in a.stdout
    vid = re.search(r"verdict issued: (acceptance-\S+)", a.stdout).group(1)
    with Store(db, read_only=True) as s:
        doc = json.loads(s.scalar("SELECT document_json FROM verdicts WHERE verdict_id = ?", [vid]))
    jsonschema.validate(doc, load_schema())
    got = {p["piece"]: p["status"] for p in doc["pieces"]}
    assert got == {"quality": "INCONCLUSIVE", "throughput": "PASS", "validators": "PASS",
                   "equivalence": "not required", "selection": "PASS", "pinning": "PASS"}, doc["pieces"]
    assert doc["verdict"] == "INCONCLUSIVE" and doc["claims"] == CLAIMS and doc["candidate"] == cand
    assert rule_vid in doc["inputs"]["verdicts"]
    # the bundle: launches, attempts, candidates and verdicts, verified; the acceptance re-derived
    bundle = tmp_path / "evidence"
    assert campaign("export", "evidence", str(plan), str(bundle), db=db).returncode == 0
    for t in ("engine_launches", "attempts", "candidates", "verdicts"):
        assert (bundle / "tables" / f"{t}.parquet").is_file() and (bundle / "tables" / f"{t}.csv").is_file()
    v = campaign("evidence", "verify", str(bundle))
    assert v.returncode == 0 and f"{vid} INCONCLUSIVE: 6 pieces re-derived" in v.stdout, v.stdout + v.stderr


@pytest.mark.slow  # campaigns run as a user would
def test_select_without_a_measured_run_and_open_holdout_without_selection_required(tmp_path):
    plan, db, rule = _rule_plan(tmp_path, {"selection": "optional"})  # the templates write "required"
    assert campaign("validate", str(plan), db=db).returncode == 0
    g = campaign("gate", str(plan), db=db)
    rule_vid = re.search(r"verdict issued: (throughput-\S+)", g.stdout).group(1)
    r = campaign("candidates", "select", rule["candidate"], "--because", rule_vid, db=db)
    assert r.returncode == 2 and "is proposed: only a measured candidate can be selected" in r.stderr
    r = campaign("plan", "open-holdout", str(plan), "--reason", "no selection needed", db=db)
    assert r.returncode == 0, r.stderr
    with Store(db, read_only=True) as s:
        assert events(s, kind="holdout_opened")[0]["payload"]["selection"] == []


# -- the acceptance rule ----------------------------------------------------------------------
def _plan(tmp_path: Path, pinned: bool = True, **extra):
    doc = plan_dict(make_workload(tmp_path / "wl"), ports=[18101, 18102])
    for e in doc["engines"] if pinned else ():
        e["source"] = {"dist": "omni-campaign-console"}
    doc["decision_rules"] = [{"name": "fast-exceeds-baseline", "kind": "throughput_exceeds", "candidate": "ref-fast",
                              "reference": "ref-baseline", "concurrencies": [2], "confidence": 0.95}]
    doc.update(extra)
    return plan_from_dict(doc, hash="f" * 64)


def _all_pass():
    issued = [acc.Issued("q1", 10, "quality", "q", "PASS", "f" * 64, "ref-fast", ("PASS",) * 3),
              acc.Issued("t1", 11, "throughput", "fast-exceeds-baseline", "PASS", "f" * 64, "ref-fast")]
    return issued, Precondition("ref-fast", 1, None, None), acc.CandidateState("k" * 64, "selected", None, ("t1",), 12)


def test_acceptance_passes_only_when_every_piece_does_and_names_what_is_missing(tmp_path):
    plan = _plan(tmp_path)
    issued, pre, state = _all_pass()
    ps = acc.pieces(plan, "ref-fast", issued, pre, state)
    assert [(p.piece, p.status) for p in ps] == [("quality", "PASS"), ("throughput", "PASS"), ("validators", "PASS"),
                                                 ("equivalence", "not required"), ("selection", "PASS"),
                                                 ("pinning", "PASS")]
    assert acc.combine([p.status for p in ps]) == "PASS"

    def verdict(issued=issued, pre=pre, state=state, plan=plan):
        ps = acc.pieces(plan, "ref-fast", issued, pre, state)
        return acc.combine([p.status for p in ps]), {p.piece: p for p in ps}

    v, by = verdict(issued=issued[:1])  # no throughput verdict
    assert v == "INCONCLUSIVE" and by["throughput"].detail == "fast-exceeds-baseline: no verdict issued"
    v, by = verdict(issued=issued[1:])  # no quality verdict
    assert v == "INCONCLUSIVE" and "no quality verdict of ref-fast issued" in by["quality"].detail
    v, by = verdict(state=acc.CandidateState("k" * 64, "measured"))  # no selection recorded
    assert v == "INCONCLUSIVE" and "no selection of ref-fast recorded (status measured" in by["selection"].detail
    eight = [acc.Issued("q2", 13, "quality", "q", "PASS", "f" * 64, "ref-fast", ("PASS",) * 2), issued[1]]
    v, by = verdict(issued=eight)  # a PASS over fewer checks than the plan's
    assert v == "INCONCLUSIVE" and by["quality"].detail == "q2 PASS but 2 of 3 checks passed"
    # the typed `equivalence` section as its own branch shapes it (pairs of .candidate, .reference)
    eq = _plan(tmp_path)
    object.__setattr__(eq, "equivalence", SimpleNamespace(pairs=(SimpleNamespace(candidate="ref-fast",
                                                                                  reference="ref-baseline"),)))
    v, by = verdict(plan=eq)  # the plan requires equivalence: missing
    assert v == "INCONCLUSIVE" and by["equivalence"].detail == "ref-fast vs ref-baseline: no equivalence verdict issued"
    v, by = verdict(plan=eq, issued=[*issued, acc.Issued("e1", 14, "equivalence", "ref-fast vs ref-baseline", "PASS",
                                                         "f" * 64, None)])
    assert v == "PASS" and by["equivalence"].verdicts == ("e1",)
    # issue 38: reused prompts, a post-holdout selection and an unpinned compared engine keep it from PASS
    reused = [acc.Issued("q4", 13, "quality", "q", "PASS", "f" * 64, "ref-fast", ("PASS",) * 3, "reused"), issued[1]]
    v, by = verdict(issued=reused)
    assert v == "INCONCLUSIVE" and by["quality"].detail.startswith("q4 PASS (reused prompts): its prompts were used")
    v, by = verdict(issued=reused, plan=_plan(tmp_path, quality={**_plan(tmp_path).document()["quality"],
                                                                   "regression_check": True}))
    assert v == "PASS" and by["quality"].detail.endswith("; a declared regression check")
    late = acc.CandidateState("k" * 64, "selected", None, ("t1",), 12, {"opened_seq": 9, "pool": "holdout"})
    v, by = verdict(state=late)
    assert v == "INCONCLUSIVE" and "after the holdout was opened (seq 9): POST-HOLDOUT selection" in by["selection"].detail
    v, by = verdict(plan=_plan(tmp_path, pinned=False))
    assert v == "INCONCLUSIVE" and by["pinning"].detail.startswith("unpinned: ref-baseline, ref-fast")
    failed = [acc.Issued("q3", 15, "quality", "q", "FAIL", "f" * 64, "ref-fast", ("FAIL",) * 3), issued[1]]
    assert verdict(issued=failed)[0] == "FAIL"
    assert verdict(state=acc.CandidateState("k" * 64, "rejected", "verdict q3 FAIL", ("q3",), 16))[0] == "FAIL"


def test_claims_are_typed_stored_and_refused_when_malformed(tmp_path):
    doc = plan_dict(make_workload(tmp_path / "wl"), ports=[18111, 18112])
    validate_plan_dict({**doc, "claims": CLAIMS, "selection": "required"})
    plan = plan_from_dict({**doc, "claims": CLAIMS})
    assert acc.claims_section(plan) == CLAIMS and plan.selection == "optional"
    with pytest.raises(CampaignError, match=r"claims.status: 'maybe' is not one of"):
        validate_plan_dict({**doc, "claims": {**CLAIMS, "status": "maybe"}}, "p.json")
    with pytest.raises(CampaignError, match="selection"):
        validate_plan_dict({**doc, "selection": "sometimes"}, "p.json")


# -- the evidence bundle ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def bundled(tmp_path_factory):
    """A campaign whose store holds a launch and attempts (recorded by the runner's own calls) and
    an acceptance verdict, exported as an evidence bundle."""
    root = tmp_path_factory.mktemp("bundle")
    db, plan_path = build_campaign(root, sim_gap=False)
    with Store(db) as s:
        plan = frozen_plan_for_file(s, plan_path)
        store_launch(s, {"launch_id": "launch-1", "plan_hash": plan.hash, "engine": "ref-baseline",
                         "adapter": "reference", "status": "startup_failed", "failure_reason": "port held",
                         "log_tail": "bind: address in use", "started_at": utcnow()})
        record_attempt(s, plan, plan.engine("ref-baseline"), "startup_failed", reason="port held", launch_id="launch-1")
    assert main(["accept", str(plan_path), "--db", str(db)]) == 1  # ref-fast's quality FAIL
    out = root / "evidence"
    assert main(["export", "evidence", str(plan_path), str(out), "--db", str(db)]) == 0
    return out


def _edit(bundle: Path, tmp_path: Path, table: str, sql: str) -> Path:
    """A copy of the bundle with one table rewritten by `sql` (Parquet and CSV) and MANIFEST
    regenerated: a forger's edit that every file hash agrees with."""
    import shutil

    import pyarrow.csv as pacsv

    copy = tmp_path / "forged"
    shutil.copytree(bundle, copy)
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t AS SELECT * FROM read_parquet('{copy / 'tables' / (table + '.parquet')}')")
    con.execute(sql)
    t = con.sql("SELECT * FROM t").to_arrow_table()
    pq.write_table(t, copy / "tables" / f"{table}.parquet")
    pacsv.write_csv(t, copy / "tables" / f"{table}.csv")
    (copy / "MANIFEST.sha256").unlink()
    write_manifest(copy)
    return copy


@pytest.mark.slow  # a campaign exported as a bundle (the module's bundled: 10 s to set up)
def test_the_bundle_holds_the_new_tables_and_verify_passes(bundled):
    v = campaign("evidence", "verify", str(bundled))
    assert v.returncode == 0, v.stdout + v.stderr
    for line in ("attempts: 1 attempt(s) match", "launches: 1 launch(es) match", "candidates: 2 candidate(s) match",
                 "verdict rows: 3 verdict row(s) match", "FAIL: 6 pieces re-derived"):
        assert line in v.stdout, v.stdout


@pytest.mark.parametrize("table, sql, check, needle", [
    ("candidates", "UPDATE t SET status = 'selected', reason = NULL WHERE name = 'ref-fast'", "candidates",
     "status is 'selected' but its last candidate_recorded event"),
    ("attempts", "UPDATE t SET reason = 'it was fine'", "attempts", "reason is 'it was fine' but its attempt_recorded"),
    ("engine_launches", "UPDATE t SET log_tail = 'nothing to see'", "launches", "row differs from the one recorded"),
    ("engine_launches", "DELETE FROM t", "launches", "recorded at seq"),
    ("verdicts", "UPDATE t SET verdict = 'PASS' WHERE kind = 'acceptance'", "verdict rows", "verdict is 'PASS' but"),
])
@pytest.mark.slow  # a campaign exported as a bundle (the module's bundled: 10 s to set up)
def test_verify_fails_when_a_new_table_is_edited(bundled, tmp_path, table, sql, check, needle):
    forged = _edit(bundled, tmp_path, table, sql)
    v = campaign("evidence", "verify", str(forged))
    assert v.returncode == 1, v.stdout + v.stderr
    assert needle in v.stdout + v.stderr and check in v.stdout + v.stderr, v.stdout + v.stderr
