"""A pre-registration nobody can bend (issue 38): an addendum keeps its parent's protocol (item 1)
and one name in a store names one frozen plan (item 2). Real plan files frozen into real DuckDB
stores, through the library and the `campaign` command line; every refusal stores nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from plans_helpers import make_workload, plan_dict, write_json

from data.errors import CampaignError
from data.plan_freeze import freeze
from data.store import Store
from engine_adapters.sampling import freeze_errors

ROOT = Path(__file__).resolve().parents[1]


def campaign(*args: object, db: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "console.cli", *map(str, args), *(["--db", str(db)] if db else [])], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)


def addendum(parent: str, changes: dict, name: str = "amend") -> dict:
    return {"schema": "omni-campaign-addendum/1", "parent": parent, "name": name, "reason": "test", "changes": changes}


def counts(store: Store) -> tuple[int, int]:
    return store.scalar("SELECT count(*) FROM plans"), store.scalar("SELECT count(*) FROM audit_events")


@pytest.fixture
def parent(tmp_path, store):
    wl = make_workload(tmp_path / "wl")
    doc = plan_dict(wl, profiles=("baseline", "fast", "lossy"))
    return freeze(store, write_json(tmp_path / "plan.json", doc), checks=[freeze_errors]).hash, wl


def refused(store: Store, tmp_path: Path, parent_hash: str, changes: dict) -> str:
    before = counts(store)
    with pytest.raises(CampaignError) as err:
        freeze(store, write_json(tmp_path / "add.json", addendum(parent_hash, changes)), checks=[freeze_errors])
    assert counts(store) == before  # nothing stored, not even the addendum's manifest
    assert "\n" not in str(err.value)
    return str(err.value)


# -- item 1: an addendum keeps the protocol -----------------------------------------------------

@pytest.mark.parametrize("changes,named", [
    ({"quality": {"margins": {"wer_pp": 50}}}, ["quality.margins.wer_pp: 0.2 in the parent, 50 in the addendum"]),
    ({"bootstrap": {"draws": 500, "seed": 1}}, ["bootstrap.draws: 1000 in the parent, 500 in the addendum",
                                               "bootstrap.seed: 20261022 in the parent, 1 in the addendum"]),
    ({"sampling": {"temperature": 0.9, "seed": 1}}, ["sampling.temperature: 0.0 in the parent, 0.9 in the addendum",
                                                    "sampling.seed: 42 in the parent, 1 in the addendum"]),
    ({"sampling": {"max_tokens": 64}}, ["sampling.max_tokens: None in the parent, 64 in the addendum"]),
    ({"workload": {"holdout_pool": None}}, ["workload.holdout_pool: 'holdout' in the parent, None in the addendum"]),
    ({"quality": {"concurrencies": [1, 16]}}, ["quality.concurrencies: [1] in the parent, [1, 16] in the addendum"]),
    ({"quality": {"baseline": "ref-fast", "candidate": "ref-lossy"}},
     ["quality.baseline: 'ref-baseline' in the parent, 'ref-fast' in the addendum"]),
    ({"quality": {"scorers": {"wer": "pocketsphinx-domain"}}},
     ["quality.scorers.wer: <absent> in the parent, 'pocketsphinx-domain' in the addendum"]),
    ({"metrics": {"stall_threshold_s": 0.5}}, ["metrics.stall_threshold_s: 0.1 in the parent, 0.5 in the addendum"]),
    ({"model": {"revision": "other"}}, ["model.revision: '503e754' in the parent, 'other' in the addendum"]),
    ({"validators": []}, ["validators['controls']: "]),
])
def test_an_addendum_that_changes_the_protocol_is_refused_naming_each_field(tmp_path, store, parent, changes, named):
    msg = refused(store, tmp_path, parent[0], changes)
    assert "an addendum keeps its parent's protocol" in msg and 'docs/plans.md, "What an addendum may change"' in msg
    for text in named:
        assert text in msg, msg


def test_the_issues_relaxations_at_once_are_all_named(tmp_path, store, parent):
    msg = refused(store, tmp_path, parent[0], {
        "workload": {"holdout_pool": None}, "quality": {"margins": {"wer_pp": 50}},
        "bootstrap": {"draws": 500, "seed": 1}, "sampling": {"temperature": 0.9, "seed": 1}})
    assert "6 decision-bearing field(s) differ" in msg, msg
    for field in ("quality.margins.wer_pp", "bootstrap.draws", "bootstrap.seed", "sampling.temperature",
                  "sampling.seed", "workload.holdout_pool"):
        assert field in msg


def test_the_baseline_engine_and_an_engines_sampling_are_inherited(tmp_path, store, parent):
    doc = plan_dict(parent[1], profiles=("baseline", "fast", "lossy"))
    base = {**doc["engines"][0], "profile": "lossy"}
    msg = refused(store, tmp_path, parent[0], {"engines": [base, *doc["engines"][1:]]})
    assert "engines['ref-baseline'].profile: 'baseline' in the parent, 'lossy' in the addendum" in msg
    lossy = {**doc["engines"][2], "request": {"extra_body": {"temperature": 0.9}}}
    msg = refused(store, tmp_path, parent[0], {"engines": [*doc["engines"][:2], lossy]})
    assert "engines['ref-lossy'] temperature: 0.0 in the parent, 0.9 in the addendum (request.extra_body)" in msg


def test_an_addendum_may_add_runs_repeats_candidates_and_a_new_holdout(tmp_path, store, parent):
    doc = plan_dict(parent[1], profiles=("baseline", "fast", "lossy", "peer"))
    pools = json.loads((parent[1] / "pools.json").read_text())
    new_pool = pools["tuning"][-2:]
    pools["tuning"] = pools["tuning"][:-2]
    pools["fresh"] = new_pool
    write_json(parent[1] / "pools2.json", pools)
    res = freeze(store, write_json(tmp_path / "add.json", addendum(parent[0], {
        "sweep": {"measured_repeats": 3, "concurrencies": [1, 2, 4]}, "engines": doc["engines"],
        "quality": {"candidate": None, "candidates": ["ref-fast", "ref-lossy", "ref-peer"], "pool": "fresh"},
        "selection": "required",
        "workload": {"holdout_pool": "fresh", "pools_file": str(parent[1] / "pools2.json")}})), checks=[freeze_errors])
    assert res.created and res.plan.workload.holdout_pool == "fresh" and res.plan.sweep.measured_repeats == 3


def test_the_reserved_ids_of_an_inherited_holdout_cannot_change(tmp_path, store, parent):
    pools = json.loads((parent[1] / "pools.json").read_text())
    pools["holdout"], pools["tuning"] = pools["holdout"][:-1], pools["tuning"] + pools["holdout"][-1:]
    write_json(parent[1] / "pools2.json", pools)
    msg = refused(store, tmp_path, parent[0], {"workload": {"pools_file": str(parent[1] / "pools2.json")}})
    assert "workload.holdout_pool 'holdout' ids (the reservation)" in msg, msg


def test_the_command_line_refuses_in_one_line(tmp_path):
    db = tmp_path / "c.duckdb"
    wl = make_workload(tmp_path / "wl")
    plan = write_json(tmp_path / "plan.json", plan_dict(wl))
    assert campaign("plan", "freeze", plan, db=db).returncode == 0
    with Store(db) as s:
        h = s.scalar("SELECT plan_hash FROM plans")
    add = write_json(tmp_path / "add.json", addendum(h[:8], {"quality": {"margins": {"wer_pp": 50}}}))
    r = campaign("plan", "addendum", h[:8], add, db=db)
    assert r.returncode == 2 and "quality.margins.wer_pp: 0.2 in the parent, 50 in the addendum" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


# -- item 2: one name, one frozen plan ----------------------------------------------------------

def test_an_edited_plan_refrozen_under_its_name_is_refused_with_the_diff(tmp_path, store):
    wl = make_workload(tmp_path / "wl")
    path = write_json(tmp_path / "plan.json", plan_dict(wl))
    first = freeze(store, path).hash
    doc = json.loads(path.read_text())
    doc["quality"]["margins"]["wer_pp"] = 5.0
    write_json(path, doc)
    before = counts(store)
    with pytest.raises(CampaignError) as err:
        freeze(store, path)
    msg = str(err.value)
    assert f"name 'test-plan' is already frozen in this store as plan {first[:12]}" in msg
    assert "quality.margins.wer_pp: 0.2 -> 5.0" in msg and f"campaign plan addendum {first[:12]} FILE" in msg
    assert counts(store) == before
    doc["name"] = "test-plan-2"  # starting over is deliberate: a new name
    write_json(path, doc)
    assert freeze(store, path).created


def test_run_of_an_altered_file_points_to_an_addendum(tmp_path):
    db = tmp_path / "c.duckdb"
    wl = make_workload(tmp_path / "wl")
    path = write_json(tmp_path / "plan.json", plan_dict(wl))
    assert campaign("plan", "freeze", path, db=db).returncode == 0
    doc = json.loads(path.read_text())
    doc["quality"]["margins"]["wer_pp"] = 5.0
    write_json(path, doc)
    r = campaign("plan", "freeze", path, db=db)
    assert r.returncode == 2 and "already frozen in this store" in r.stderr and "plan addendum" in r.stderr
    r = campaign("run", path, db=db)
    assert r.returncode == 2 and "altered since it was frozen" in r.stderr
    assert r.stderr.index("plan addendum") < r.stderr.index("new `name`"), r.stderr


# -- item 3: no request path outside a plan's quality arms sends its unopened holdout ----------

@pytest.fixture(scope="module")
def engine():
    from reference_server import launch_engine, stop_engine, wait_ready

    eng = wait_ready(launch_engine("vllm-omni", "fast"), "vllm-omni", "fast")
    yield eng
    stop_engine(eng)


def _reserved_store(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    db = tmp_path / "c.duckdb"
    wl = make_workload(tmp_path / "wl", n=10, n_holdout=4)
    plan = write_json(tmp_path / "plan.json", plan_dict(wl))
    assert campaign("plan", "freeze", plan, db=db).returncode == 0
    return db, wl, json.loads((wl / "pools.json").read_text())["holdout"]


def _probe(engine, db: Path, wl: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    return campaign("probe", "--url", engine.url, "--dialect", "vllm-omni", "-c", "2", "-n", "12", "--workload", wl,
                    "--artifacts", tmp_path / "art", "--no-telemetry", *extra, db=db)


@pytest.mark.slow  # a reference engine and three probes as subprocesses
def test_a_probe_never_sends_an_unopened_holdout(engine, tmp_path):
    db, wl, holdout = _reserved_store(tmp_path)
    with Store(db) as s:
        before = counts(s)
    r = _probe(engine, db, wl, tmp_path, "--pool", "holdout")  # named: refused before anything is sent or stored
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert "would send 4 id(s) of the holdout pool 'holdout' of plan 'test-plan'" in r.stderr and "not opened" in r.stderr
    with Store(db) as s:
        assert counts(s) == before and s.scalar("SELECT count(*) FROM runs") == 0
    r = _probe(engine, db, wl, tmp_path)  # by default: the tuning pool, never a reserved id
    assert r.returncode == 0, r.stdout + r.stderr
    with Store(db) as s:
        sent = {u for (u,) in s.con.execute("SELECT DISTINCT utt_id FROM requests").fetchall()}
    assert sent and not sent & set(holdout)


def test_another_plans_pool_may_not_hold_an_unopened_reservation(tmp_path):
    db, wl, holdout = _reserved_store(tmp_path)
    doc = {**plan_dict(wl), "name": "other"}
    pools = json.loads((wl / "pools.json").read_text())
    write_json(wl / "pools2.json", {"tuning": pools["tuning"] + holdout[:1], "h2": []})
    doc["workload"] = {**doc["workload"], "pools_file": str(wl / "pools2.json"), "holdout_pool": None}
    doc["quality"]["pool"] = "tuning"
    r = campaign("plan", "freeze", write_json(tmp_path / "other.json", doc), db=db)
    assert r.returncode == 2 and "workload pool 'tuning' would send 1 id(s) of the holdout pool 'holdout'" in r.stderr, \
        r.stderr


# -- item 4: selection before the holdout -----------------------------------------------------

def test_a_selection_after_the_holdout_is_recorded_post_holdout(tmp_path, store):
    from data import candidates as cands
    from data.audit import events
    from data.manifest import open_holdout
    from data.plan_loading import plan_from_store
    from stats.acceptance import candidate_state, selection_piece

    wl = make_workload(tmp_path / "wl")
    plan = plan_from_store(store, freeze(store, write_json(tmp_path / "plan.json", plan_dict(wl))).hash)
    early = cands.register(store, "a", {"x": 1}, plan_hash=plan.hash)
    late = cands.register(store, "b", {"x": 2}, plan_hash=plan.hash)
    for key in (early, late):
        cands.record_outcome(store, key, "measured", plan_hash=plan.hash)
    cands.select(store, early, ["v1"], None, plan_hash=plan.hash)
    seq, _ = open_holdout(store, plan, "sweep done")
    cands.select(store, late, ["v2"], None, plan_hash=plan.hash)
    recorded = {e["subject"]: e["payload"] for e in events(store, kind="candidate_recorded") if e["payload"]["change"] == "selected"}
    assert "post_holdout" not in recorded[early]
    assert recorded[late]["post_holdout"] == {"opened_seq": seq, "pool": "holdout", "plan_hash": plan.hash}
    assert selection_piece("a", candidate_state(store, early)).status == "PASS"
    piece = selection_piece("b", candidate_state(store, late))
    assert piece.status == "INCONCLUSIVE" and f"after the holdout was opened (seq {seq}): POST-HOLDOUT" in piece.detail


def test_the_templates_require_a_selection(tmp_path):
    from console.commands.plan import template

    assert template(demo=True)["selection"] == "required"
    assert template(False, ["vllm-omni", "peer"], "NVIDIA H200")["selection"] == "required"


# -- item 8: the holdout audited beyond this store ---------------------------------------------

def test_reuse_audit_reads_stores_bundles_and_csvs_and_is_recorded(tmp_path):
    import duckdb

    from data.audit import events

    db = tmp_path / "c.duckdb"
    wl = make_workload(tmp_path / "wl", n=10, n_holdout=4)
    holdout = json.loads((wl / "pools.json").read_text())["holdout"]
    other = tmp_path / "other.duckdb"  # another team's store that requested one of the ids
    con = duckdb.connect(str(other))
    con.execute("CREATE TABLE requests (run_id VARCHAR, utt_id VARCHAR)")
    con.execute("INSERT INTO requests VALUES ('r1', ?), ('r1', 'spk9-9999')", [holdout[2]])
    con.close()
    (tmp_path / "bundle" / "tables").mkdir(parents=True)
    duckdb.sql("SELECT 'x' AS run_id, 'spk9-9999' AS utt_id").write_parquet(str(tmp_path / "bundle" / "tables" /
                                                                               "requests.parquet"))
    csv = tmp_path / "bench.csv"
    csv.write_text("utt_id,ttfa_ms\nspk9-9999,120\nspk9-9998,130\n")
    plan = write_json(tmp_path / "plan.json", plan_dict(wl))
    r = campaign("plan", "freeze", plan, "--reuse-audit", other, csv, db=db)
    assert r.returncode == 2 and f"1 of 4 holdout id(s) were already requested in store {other}: {holdout[2]}" in r.stderr
    with Store(db) as s:
        assert s.scalar("SELECT count(*) FROM plans") == 0
        assert events(s, kind="freeze_refused")[0]["payload"]["reason"].endswith("reserve genuinely unused ids")
    r = campaign("plan", "freeze", plan, "--reuse-audit", tmp_path / "bundle", csv, db=db)
    assert r.returncode == 0 and f"holdout ids absent from {csv}" in r.stdout, r.stderr
    with Store(db) as s:
        audited = events(s, kind="plan_frozen")[0]["payload"]["reuse_audit"]
    assert [(a["kind"], a["ids"], a["requests"]) for a in audited] == [("bundle", 1, 1), ("csv", 2, 2)]
    r = campaign("plan", "freeze", write_json(tmp_path / "p2.json", {**plan_dict(wl), "name": "x"}), "--reuse-audit",
                 tmp_path / "wl", db=db)
    assert r.returncode == 2 and "not an evidence bundle (no tables/requests.parquet)" in r.stderr


# -- item 9: the claim's scope and the requester's sign-off -----------------------------------

def test_a_claim_beyond_the_checked_concurrencies_is_refused(tmp_path, store):
    wl = make_workload(tmp_path / "wl")
    doc = {**plan_dict(wl), "claims": {"status": "final", "scope": "C1 and C32", "concurrencies": [1, 32]}}
    with pytest.raises(CampaignError, match=r"claims.concurrencies\[1\]: C32 is claimed but not checked "
                                            r"\(quality.concurrencies \[1\]\)"):
        freeze(store, write_json(tmp_path / "plan.json", doc))
    doc["claims"]["concurrencies"] = [1]
    assert freeze(store, write_json(tmp_path / "plan.json", doc)).created


@pytest.mark.slow  # a synthetic campaign gated, accepted with a sign-off and exported
def test_sign_off_and_every_plan_of_the_store_reach_the_record_and_the_bundle(tmp_path):
    from results_store import build_campaign

    from data.verdicts import sign_offs

    db, plan = build_campaign(tmp_path, concurrencies=(1,), repeats=2, requests=4, holdout=6, gpu=False, gate=True,
                              sim_gap=False)
    doc = json.loads(plan.read_text())  # a start abandoned for another: no holdout of its own, tuning pool only
    doc.update(name="abandoned-start", workload={**doc["workload"], "holdout_pool": None},
               quality={**doc["quality"], "pool": "tuning"})
    abandoned = write_json(tmp_path / "abandoned.json", doc)
    assert campaign("plan", "freeze", abandoned, db=db).returncode == 0
    r = campaign("accept", plan, "--candidate", "ref-fast", "--requester", "Amy", "--statement", "not accepted yet",
                 db=db)
    assert r.returncode in (1, 3), r.stdout + r.stderr
    assert "signed off by Amy (audit seq" in r.stdout and "plans frozen in this store (2): test-plan" in r.stdout
    assert "abandoned-start (plan" in r.stdout and "claim covers: 3 quality checks" in r.stdout
    with Store(db) as s:
        [signed] = sign_offs(s)
        doc = json.loads(s.scalar("SELECT document_json FROM verdicts WHERE kind = 'acceptance'"))
    assert signed["requester"] == "Amy" and signed["verdict_id"] == doc["verdict_id"]
    assert [p["name"] for p in doc["store_plans"]] == ["test-plan", "abandoned-start"]
    assert campaign("export", "evidence", plan, tmp_path / "b", db=db).returncode == 0
    text = (tmp_path / "b" / "REPRODUCE.md").read_text()
    assert "## Every plan frozen in the store" in text and "plan `abandoned-start`" in text
    assert f"Amy on {doc['verdict_id']}" in text and ": not accepted yet" in text
    v = campaign("evidence", "verify", tmp_path / "b")
    assert v.returncode == 0, v.stdout + v.stderr


# -- item 6: what "same sampling, same length, same precision" compares ----------------------

DEPLOY = """stages:
  - stage_id: 0
    max_num_seqs: 4
    default_sampling_params: {temperature: 0.0, max_tokens: 2048, seed: 42}
  - stage_id: 1
    max_num_seqs: 4
    max_model_len: 4096
    default_sampling_params: {temperature: %s, top_k: 25, seed: 42}
"""


def _vllm_plan(tmp_path: Path, temperature: float = 0.8, extra_argv: tuple[str, ...] = (), name: str = "test-plan",
               **cand) -> Path:
    wl = make_workload(tmp_path / "wl")
    doc = {**plan_dict(wl), "name": name}
    for e, t in zip(doc["engines"], (0.8, temperature)):
        yaml = tmp_path / f"{e['name']}.yaml"
        yaml.write_text(DEPLOY % t)
        e.update(adapter="vllm_omni", config_path=str(yaml),
                 argv=["vllm", "serve", "/m", "--omni", "--deploy-config", str(yaml), "--port", str(e["port"])])
    doc["engines"][1]["argv"] += list(extra_argv)
    doc["engines"][1].update(cand)
    return write_json(tmp_path / "plan.json", doc)


def test_deploy_sampling_and_engine_flags_of_compared_arms_must_agree(tmp_path, store):
    msg = str(pytest.raises(CampaignError, freeze, store, _vllm_plan(tmp_path, 0.9), checks=[freeze_errors]).value)
    assert "deploy.stage1.sampling.temperature: 0.8 for 'ref-baseline', 0.9 for 'ref-fast'" in msg
    assert "engines[].declared_changes of 'ref-fast'" in msg
    msg = str(pytest.raises(CampaignError, freeze, store, _vllm_plan(tmp_path, extra_argv=("--kv-cache-dtype", "fp8")),
                            checks=[freeze_errors]).value)
    assert "argv.kv_cache_dtype: None for 'ref-baseline', 'fp8' for 'ref-fast'" in msg
    assert "engine 'ref-fast': kv_cache_dtype differ(s) from 'ref-baseline'" in msg and "precision_change: true" in msg
    # declared: the hypothesis names the key, and the precision change is opt-in
    res = freeze(store, _vllm_plan(tmp_path, extra_argv=("--kv-cache-dtype", "fp8"), declared_changes=["kv_cache_dtype"],
                                   precision_change=True), checks=[freeze_errors])
    assert res.created
    assert freeze(store, _vllm_plan(tmp_path, name="same"), checks=[freeze_errors]).created  # identical settings


def test_across_adapters_the_precision_is_compared(tmp_path, store):
    wl = make_workload(tmp_path / "wl")
    doc = plan_dict(wl)
    doc["engines"][1].update(adapter="peer", argv=["/opt/peer/serve", "--dtype", "float16", "--port", "1"])
    msg = str(pytest.raises(CampaignError, freeze, store, write_json(tmp_path / "p.json", doc),
                            checks=[freeze_errors]).value)
    assert "dtype: None for 'ref-baseline', ['float16'] for 'ref-fast'" in msg and "a precision change" in msg


def test_checkpoint_config_settings_are_read(tmp_path):
    from data.plan_model import EngineSpec
    from engine_adapters.launch_settings import launch_settings

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"torch_dtype": "bfloat16",
                                                  "tts_config": {"temperature": 0.8, "top_k": 25, "hidden_size": 768}}))
    e = EngineSpec("e", "vllm_omni", "vllm-omni", argv=("vllm", "serve", "--dtype", "bfloat16"),
                   checkpoint_paths=(str(ckpt),))
    assert launch_settings(e) == {"argv.dtype": "bfloat16", "checkpoint.torch_dtype": "bfloat16",
                                  "checkpoint.tts_config.temperature": 0.8, "checkpoint.tts_config.top_k": 25}
