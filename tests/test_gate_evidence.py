"""Plan-mode gates on a real store: controls at the plan's concurrencies ([1, 4] and [1]), coverage
against the plan's measured repeats (a failed, incomplete or excluded run is a gap naming ids and
repeats), and what kind of evidence each verdict is (reserved holdout vs reused prompts), with an
addendum issuing a new verdict beside the old one, which stays unchanged.

Runs are stored as the driver writes them (outputs synthesised with espeak in the prompt
speakers' voices) and scored with the bundled scorers."""

from __future__ import annotations

import json
import re
import shutil
from datetime import datetime, timezone
from pathlib import Path

import jsonschema
import pytest

from console.cli import main
from data.audit import events
from data.plan_freeze import freeze
from data.plan_loading import plan_from_store
from data.queries import exclude_run
from data.store import Store
from data.workload import load_workload
from stats.quality.scoring import score_plan
from stats.verdict_doc import load_schema
from test_quality_support import add_run, make_workload, plan_for

HOLDOUT = ["spk1-t2", "spk2-t1", "spk2-t2"]


def flat(out: str) -> str:
    """Console output with table borders removed and whitespace collapsed (cells wrap)."""
    return re.sub(r"\s+", " ", re.sub(r"[│┃┏┓┗┛┡┩└┘━─┳┻╇┼┬┴]", " ", out))


def gate(capsys, *args) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(["gate", *map(str, args)])
    return rc, flat(capsys.readouterr().out)


def write_workload(root: Path) -> Path:
    make_workload(root)
    (root / "pools.json").write_text(json.dumps({"tuning": ["spk1-t1"], "holdout": HOLDOUT}))
    return root


def plan_raw(wl_root: Path, name: str, *, concurrencies, repeats=2, reserve=True) -> dict:
    raw = plan_for(wl_root, concurrencies=concurrencies, repeats=repeats).document()
    raw["name"] = name
    raw["workload"].update(pool="tuning" if reserve else "holdout", **({"holdout_pool": "holdout"} if reserve else {}))
    raw["bootstrap"] = {"draws": 2000, "seed": 20261022}
    raw["quality"]["margins"] = {"wer_pp": 0.2, "sim": 0.5, "mos": 0.05}
    return raw


def add_cells(store, plan, art, wl, concurrencies, repeats=2, status=None, prefix=""):
    """Baseline and candidate measured runs of every quality cell; `status` maps
    (engine, concurrency, repeat) -> a run status other than complete."""
    for c in concurrencies:
        for rep in range(repeats):
            for engine in ("ref-base", "ref-cand"):
                st = (status or {}).get((engine, c, rep), "complete")
                add_run(store, plan, f"{prefix}{engine}-c{c}-r{rep}", engine, art, wl, concurrency=c, repeat=rep,
                        status=st)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A store with plan P (reserved holdout, quality at C1 and C4, 2 repeats): frozen, holdout
    opened, every quality cell measured (identical outputs in both arms) and scored."""
    tmp = tmp_path_factory.mktemp("evidence")
    wl_root = write_workload(tmp / "workload")
    wl = load_workload(wl_root, "en")
    art = tmp / "artifacts"
    db = tmp / "campaign.duckdb"
    path = tmp / "plan.json"
    path.write_text(json.dumps(plan_raw(wl_root, "evidence-parent", concurrencies=[1, 4]), indent=1))
    with Store(db) as store:
        plan = plan_from_store(store, freeze(store, path).hash)
    assert main(["plan", "open-holdout", str(path), "--reason", "candidate frozen", "--db", str(db)]) == 0
    with Store(db) as store:
        add_cells(store, plan, art, wl, (1, 4))
        score_plan(store, plan, artifacts_dir=art)
    return {"tmp": tmp, "db": db, "plan_path": path, "plan": plan, "wl_root": wl_root, "wl": wl, "art": art}


def verdict_row(db, vid):
    with Store(db) as s:
        return s.query("SELECT * FROM verdicts WHERE verdict_id = ?", [vid])[0]


@pytest.mark.slow  # a full campaign (the module's world)
def test_reserved_holdout_verdict_at_plan_concurrencies_then_addendum_on_reused_prompts(world, capsys):
    db, plan = world["db"], world["plan"]
    # Controls at the plan's concurrencies [1, 4] pass, and a verdict is issued.
    assert main(["controls", "--plan", str(world["plan_path"])]) == 0
    rc, out = gate(capsys, world["plan_path"], "--db", db)
    assert rc == 0, out
    assert re.search(r"synthetic controls: (\d+)/\1 gave their known answer", out)
    assert "Quality verdict: PASS (untouched holdout)" in out
    assert "every id needs exactly measured repeats 0, 1 in both arms" in out
    with Store(db) as s:
        frozen_ev = next(e for e in events(s, kind="plan_frozen", plan_hash=plan.hash))
        opened_ev = events(s, kind="holdout_opened", plan_hash=plan.hash)[0]
    assert (f"evidence: untouched — holdout pool 'holdout' (3 ids) reserved and unused at freeze (audit "
            f"#{frozen_ev['seq']} plan_frozen {frozen_ev['event_hash'][:12]}), opened by audit #{opened_ev['seq']} "
            f"holdout_opened {opened_ev['event_hash'][:12]}") in out
    v1 = re.search(r"verdict issued: (quality-\S+)", out).group(1)
    old_row = verdict_row(db, v1)
    doc = json.loads(old_row["document_json"])
    jsonschema.validate(doc, load_schema())
    ev = doc["evidence"]
    assert ev["status"] == "untouched" and ev["earlier_runs"] == [] and ev["ids"] == 3
    assert ev["frozen"]["event_hash"] == frozen_ev["event_hash"] and ev["opened"]["seq"] == opened_ev["seq"]
    assert [c["expected_repeats"] for c in doc["coverage"]["cells"]] == [[0, 1], [0, 1]]
    assert "measured repeats" in doc["coverage"]["rule"] and "Coverage:" in doc["rule"]

    # An addendum keeps the protocol and the now-used reservation (it may not drop it, nor narrow the
    # quality concurrencies: docs/plans.md, "What an addendum may change"); its parent is the same
    # hash prefix the command line takes.
    add = world["tmp"] / "addendum.json"
    add.write_text(json.dumps({"schema": "omni-campaign-addendum/1", "parent": plan.hash[:10],
                               "name": "post-integration", "reason": "regression check after integration",
                               "changes": {"description": "post-integration regression check"}}))
    assert main(["plan", "addendum", plan.hash[:8], str(add), "--db", str(db)]) == 0
    with Store(db) as store:
        child = plan_from_store(store, store.scalar("SELECT plan_hash FROM plans WHERE name = 'post-integration'"))
        assert child.parent_hash == plan.hash
        add_cells(store, child, world["art"], world["wl"], (1, 4), prefix="a-")
        score_plan(store, child, artifacts_dir=world["art"])
    assert main(["controls", "--plan", str(world["plan_path"])]) == 0
    rc, out = gate(capsys, add, "--db", db)
    assert rc == 0, out
    assert re.search(r"synthetic controls: (\d+)/\1 gave", out) and "Quality verdict: PASS (reused prompts)" in out
    assert ("evidence: reused — REUSED prompts: pool 'holdout' (3 ids) was requested by 8 earlier run(s) of plan(s) "
            f"{plan.hash[:12]}") in out and "not a new untouched holdout" in out
    v2 = re.search(r"verdict issued: (quality-\S+)", out).group(1)
    assert f"earlier verdict of parent plan {plan.hash[:12]} stays as issued: {v1} (PASS)" in out
    doc2 = json.loads(verdict_row(db, v2)["document_json"])
    jsonschema.validate(doc2, load_schema())
    assert doc2["evidence"]["status"] == "reused" and doc2["evidence"]["earlier_runs_total"] == 8
    assert {r["plan_hash"] for r in doc2["evidence"]["earlier_runs"]} == {plan.hash}
    assert [c["concurrency"] for c in doc2["cells"]] == [1, 4]

    # The earlier verdict is never re-judged: its row is byte-for-byte what it was; both are listed.
    assert verdict_row(db, v1) == old_row
    capsys.readouterr()
    assert main(["verdicts", "--format", "csv", "--db", str(db)]) == 0
    listing = capsys.readouterr().out
    assert re.search(rf"{v1},.*,PASS,untouched,", listing) and re.search(rf"{v2},.*,PASS,reused,", listing), listing


@pytest.mark.slow  # a full campaign (the module's world)
def test_tui_verdicts_view_shows_the_evidence(world, capsys):
    import asyncio

    from textual.widgets import DataTable, Static

    from console.tui.app import VERDICT_COLUMNS, CampaignApp

    rc, out = gate(capsys, world["plan_path"], "--db", world["db"])
    assert rc == 0
    vid = re.search(r"verdict issued: (quality-\S+)", out).group(1)

    async def look():
        app = CampaignApp(world["db"])
        async with app.run_test(size=(200, 50)) as pilot:
            await pilot.pause()
            await app.workers.wait_for_complete()
            await pilot.pause()
            await pilot.press("3")
            await pilot.pause()
            table = app.query_one("#verdicts-table", DataTable)
            rows = {str(k.value): [str(c) for c in table.get_row(k)] for k in table.rows}
            title = str(app.query_one("#checks-title", Static).render())
            return rows, title

    rows, title = asyncio.run(look())
    assert rows[vid][VERDICT_COLUMNS.index("evidence")] == "untouched"
    assert vid in title and "evidence: holdout pool 'holdout' (3 ids) reserved and unused at freeze" in title


@pytest.mark.slow  # a full campaign (the module's world)
def test_plan_mode_failed_incomplete_or_excluded_run_is_a_gap_naming_ids_and_repeat(world, tmp_path, capsys):
    """The candidate's repeat-1 run is failed at C1, incomplete at C2 and excluded at C3: every id
    lacks that repeat, so every check is INCONCLUSIVE and names the ids, the repeat and the cause.
    With the workload moved away (the missing runs' ids are no longer knowable from disk) the
    plan's measured repeats still find every gap."""
    wl_root = tmp_path / "workload"
    shutil.copytree(world["wl_root"], wl_root)
    wl = load_workload(wl_root, "en")
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_raw(wl_root, "gaps", concurrencies=[1, 2, 3], reserve=False), indent=1))
    db, art = world["db"], world["art"]
    status = {("ref-cand", 1, 1): "failed", ("ref-cand", 2, 1): "incomplete"}
    with Store(db) as store:
        plan = plan_from_store(store, freeze(store, path).hash)
        add_cells(store, plan, art, wl, (1, 2, 3), status=status, prefix="gaps-")
        score_plan(store, plan, artifacts_dir=art)
        exclude_run(store, "gaps-ref-cand-c3-r1", "GPU shared with another job")
    for moved in (False, True):
        if moved:
            shutil.move(wl_root, tmp_path / "elsewhere")
        rc, out = gate(capsys, path, "--db", db, "--dry-run")
        assert rc == 3, out
        assert "Quality verdict: INCONCLUSIVE" in out and out.count("coverage gap: 3 of 3 ids") == 9, out
        for c in (1, 2, 3):
            for uid in HOLDOUT:
                assert f"{uid} (candidate lacks repeat 1" in out
            if not moved:
                assert f"run missing: no measured run for ref-cand c{c} repeat 1" in out


def _announce(db: Path, run_ids, plan_hash) -> None:
    """The run_started event each run's recorder appends (console/recording.py) for runs added by hand."""
    from data.audit import append_event

    with Store(db) as s:
        for rid in run_ids:
            append_event(s, "run_started", plan_hash=plan_hash, subject=rid, payload={"run_id": rid})


def _probe(db: Path, run_id: str, wl, art, shift: str) -> None:
    """A probe (no plan) requesting every holdout id, announced in the chain, whose started_at is then
    moved by `shift` with duckdb on the file, as a probe with a wrong clock (or a forger) leaves it."""
    import duckdb

    with Store(db) as s:
        s.insert("runs", {"run_id": run_id, "plan_hash": None, "engine": "probe", "dialect": "vllm-omni",
                          "concurrency": 1, "repeat_index": 0, "kind": "exploratory", "status": "complete",
                          "pool": None, "started_at": datetime.now(timezone.utc)})
        for i, uid in enumerate(HOLDOUT):
            s.insert("requests", {"run_id": run_id, "request_index": i, "utt_id": uid, "is_warmup": False,
                                  "t_send_ns": i, "outcome": "ok"})
    _announce(db, [run_id], None)
    con = duckdb.connect(str(db))
    try:
        con.execute(f"UPDATE runs SET started_at = started_at + INTERVAL '{shift}' WHERE run_id = ?", [run_id])
    finally:
        con.close()


def test_reuse_is_decided_by_the_audit_sequence_not_the_wall_clock(tmp_path):
    """A probe of the reserved ids stamped a day ahead, whose run_started precedes holdout_opened
    and the quality runs in the chain, is reuse; one stamped a day back but announced after the
    quality runs is not (pool status used to compare runs.started_at)."""
    from data.pool_status import REUSED, UNTOUCHED, pool_status

    wl_root = write_workload(tmp_path / "workload")
    wl = load_workload(wl_root, "en")
    art, db, path = tmp_path / "artifacts", tmp_path / "campaign.duckdb", tmp_path / "plan.json"
    path.write_text(json.dumps(plan_raw(wl_root, "clock", concurrencies=[1], repeats=1), indent=1))
    with Store(db) as store:
        plan = plan_from_store(store, freeze(store, path).hash)
    _probe(db, "probe-ahead", wl, art, "1 day")
    assert main(["plan", "open-holdout", str(path), "--reason", "candidate frozen", "--db", str(db)]) == 0
    with Store(db) as store:
        add_cells(store, plan, art, wl, (1,), repeats=1)
    _probe(db, "probe-late", wl, art, "-1 day")
    with Store(db) as store:
        seqs = {e["subject"]: e["seq"] for e in events(store) if e["kind"] in ("run_started", "holdout_opened")}
        opened = events(store, kind="holdout_opened")[0]["seq"]
        st = pool_status(store, plan)
        ahead, quality = store.scalar("SELECT started_at FROM runs WHERE run_id = 'probe-ahead'"), \
            store.scalar("SELECT min(started_at) FROM runs WHERE plan_hash = ?", [plan.hash])
    assert seqs["probe-ahead"] < opened < seqs["ref-base-c1-r0"] < seqs["probe-late"] and ahead > quality
    assert st.status == REUSED and st.status != UNTOUCHED, st.summary
    assert [r["run_id"] for r in st.earlier_runs] == ["probe-ahead"] and st.earlier_runs_total == 1
    assert st.earlier_runs[0]["audit_seq"] == seqs["probe-ahead"]


def _store_counts(db: Path) -> tuple[int, int, int]:
    """(verdict rows, verdict_issued events, audit events) read from the DuckDB file itself."""
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return (con.execute("SELECT count(*) FROM verdicts").fetchone()[0],
                con.execute("SELECT count(*) FROM audit_events WHERE kind = 'verdict_issued'").fetchone()[0],
                con.execute("SELECT count(*) FROM audit_events").fetchone()[0])
    finally:
        con.close()


@pytest.mark.parametrize("stage", ["no runs", "runs not scored"])
@pytest.mark.slow  # campaigns run as a user would
def test_gate_with_nothing_to_judge_issues_nothing(tmp_path, stage):
    """A plan with no runs (or runs never scored) and a throughput rule: gate prints what is missing,
    once per verdict and compactly, stores no verdict and no audit event, and exits 2 (it issued
    three permanent INCONCLUSIVE verdicts, and printed one gap note per id)."""
    import os
    import subprocess
    import sys

    wl_root = write_workload(tmp_path / "workload")
    raw = plan_raw(wl_root, "empty", concurrencies=[1, 4])
    raw["decision_rules"] = [{"name": "cand-exceeds", "kind": "throughput_exceeds", "candidate": "ref-cand",
                              "reference": "ref-base", "concurrencies": [1], "confidence": 0.95}]
    path, db = tmp_path / "plan.json", tmp_path / "campaign.duckdb"
    path.write_text(json.dumps(raw, indent=1))
    with Store(db) as store:
        plan = plan_from_store(store, freeze(store, path).hash)
        if stage == "runs not scored":
            add_cells(store, plan, tmp_path / "artifacts", load_workload(wl_root, "en"), (1, 4))
    before = _store_counts(db)
    root = Path(__file__).resolve().parents[1]
    r = subprocess.run([sys.executable, "-m", "console.cli", "gate", str(path), "--db", str(db)], capture_output=True,
                       text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(root), "COLUMNS": "400"},
                       timeout=300)
    assert r.returncode == 2, r.stdout + r.stderr
    assert _store_counts(db) == before and before[:2] == (0, 0)
    assert r.stderr.strip() == (f"campaign: error: plan {plan.hash[:12]}: nothing to judge (2 verdict(s) lack all "
                                "their evidence: run the cells and `campaign score` first); no verdict issued")
    out = r.stdout
    assert out.count("nothing to judge, no verdict:") == 2 and "verdict issued" not in out
    assert ("nothing to judge, no verdict: quality ref-cand vs ref-base: no baseline or candidate outputs scored "
            "(baseline ref-base: 0 of 12 expected outputs scored, candidate ref-cand: 0 of 12 expected outputs "
            "scored); 3 id(s) lack every value (spk1-t2, spk2-t1, spk2-t2); 24 output(s) by cause: ") in out
    if stage == "no runs":
        assert "nothing to judge, no verdict: decision rule cand-exceeds: no complete measured run of ref-cand or " \
               "ref-base at C1" in out
        assert "3× run missing: no measured run for ref-base c1 repeat 0" in out and "and 5 more cause(s)" in out
    assert out.count("spk1-t2") == 1 and "Quality verdict" not in out and "synthetic controls" not in out
