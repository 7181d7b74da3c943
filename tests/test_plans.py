"""Plans: schema validation messages, canonical hashing, freeze / verify / addenda, holdout reservation."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest

from console.commands.plan import template
from data.audit import events, verify_chain
from data.errors import CampaignError
from data.manifest import open_holdout
from data.plan_freeze import freeze, freeze_plan
from data.plan_hashing import document_hash, flatten
from data.plan_loading import load_plan, plan_from_store
from data.plan_validation import validate_plan_dict
from plans_helpers import inproc, insert_run, make_workload, plan_dict, write_json


@pytest.fixture
def workload(tmp_path):
    return make_workload(tmp_path / "wl")


@pytest.fixture
def plan_file(tmp_path, workload):
    return write_json(tmp_path / "plan.json", plan_dict(workload, ports=[18091, 18092]))


def cli(*args, db):
    return subprocess.run([sys.executable, "-m", "console.cli", *args, "--db", str(db)], capture_output=True, text=True)


# -- schema validation ------------------------------------------------------------------------
@pytest.mark.parametrize("mutate, message", [
    (lambda d: d["sweep"].__setitem__("concurrencies", [1, 2, -4]), "sweep.concurrencies[2]: -4 is less than the minimum of 1"),
    (lambda d: d["engines"][1].__setitem__("dialect", "grpc"), "engines[1].dialect: 'grpc' is not one of 'vllm-omni', 'sglang-omni', 'pcm'"),
    (lambda d: d["sweep"].__setitem__("restrat", "never"), "sweep: unknown field(s) 'restrat' (comments must start with '_')"),
    (lambda d: d.pop("sweep"), "(top level): 'sweep' is a required property"),
    (lambda d: d["sweep"].__setitem__("requests_per_run", "32"), "sweep.requests_per_run: '32' is not of type 'integer'"),
    (lambda d: d["engines"][0].__setitem__("port", 70000), "engines[0].port: 70000 is greater than the maximum of 65535"),
    (lambda d: d["sweep"].__setitem__("concurrencies", [1, 1]), "sweep.concurrencies: [1, 1] has non-unique elements"),
    (lambda d: d.__setitem__("schema", "omni-campaign-plan/9"), "schema: 'omni-campaign-plan/9' must be 'omni-campaign-plan/1'"),
    (lambda d: d["quality"].__setitem__("candidate", "nope"), "quality.candidate: 'nope' is not an engine in this plan"),
    (lambda d: d["engines"][1].__setitem__("name", "ref-baseline"), "engines[1].name: duplicate engine name 'ref-baseline'"),
    (lambda d: d["workload"].__setitem__("holdout_pool", "tuning"), "workload.holdout_pool: 'tuning' is also the tuning pool"),
])
def test_schema_errors_name_the_field_and_problem(tmp_path, workload, mutate, message):
    doc = plan_dict(workload, ports=[18091, 18092])
    mutate(doc)
    path = write_json(tmp_path / "plan.json", doc)
    with pytest.raises(CampaignError) as err:
        load_plan(path)
    assert str(err.value).startswith(f"{path}: {message}")


def test_several_problems_are_all_named(tmp_path, workload):
    """Every problem is named on the one line, not counted as "(and 1 more problem)" (issue 32)."""
    doc = plan_dict(workload)
    doc["sweep"]["concurrencies"] = [0]
    doc["sweep"]["measured_repeats"] = 0
    path = write_json(tmp_path / "p.json", doc)
    with pytest.raises(CampaignError) as err:
        load_plan(path)
    assert str(err.value) == (f"{path}: sweep.concurrencies[0]: 0 is less than the minimum of 1 (and 1 more: "
                              "sweep.measured_repeats: 0 is less than the minimum of 1)")
    r = cli("plan", "freeze", str(path), db=tmp_path / "c.duckdb")
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "sweep.concurrencies[0]" in r.stderr and "sweep.measured_repeats: 0 is less than the minimum of 1" in r.stderr


def test_invalid_json_and_missing_file(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "omni-campaign-plan/1",\n  "name": }')
    with pytest.raises(CampaignError, match=r"bad.json: invalid JSON at line 2 column 11"):
        load_plan(bad)
    with pytest.raises(CampaignError, match="no such file"):
        load_plan(tmp_path / "missing.json")


def test_templates_validate():
    for demo in (False, True):
        validate_plan_dict(template(demo), "template")
    demo = template(True)
    assert [e["profile"] for e in demo["engines"]] == ["baseline", "fast", "lossy", "peer"]
    assert demo["quality"]["candidates"] == ["ref-fast", "ref-lossy"]
    assert demo["decision_rules"][0]["reference"] == "ref-peer"
    assert demo["sweep"]["concurrencies"] == [1, 4, 16, 32]
    assert template(False)["sweep"]["concurrencies"] == [1, 2, 4, 8, 16, 32]


def test_cli_error_is_one_line(tmp_path, workload):
    doc = plan_dict(workload)
    doc["sweep"]["concurrencies"] = [1, 2, -4]
    path = write_json(tmp_path / "plan.json", doc)
    r = cli("plan", "freeze", str(path), db=tmp_path / "c.duckdb")
    assert r.returncode == 2
    assert r.stderr.strip() == f"campaign: error: {path}: sweep.concurrencies[2]: -4 is less than the minimum of 1"
    assert "Traceback" not in r.stderr


# -- canonical hashing ------------------------------------------------------------------------
def test_key_order_and_whitespace_do_not_change_the_hash(tmp_path, workload):
    doc = plan_dict(workload, ports=[18091, 18092])
    a = load_plan(write_json(tmp_path / "a.json", doc, indent=2))
    b = load_plan(write_json(tmp_path / "b.json", doc, indent=None, reverse=True))
    c_path = tmp_path / "c.json"
    c_path.write_text("\n\n" + json.dumps(doc, indent="\t", separators=(" ,", " :  ")) + "\n  ")
    c = load_plan(c_path)
    assert a.hash == b.hash == c.hash == document_hash(doc)
    assert len(a.hash) == 64


def _set_leaf(doc, path, value):
    """Set a flatten()-style path ('a.b[2].c') in a nested dict."""
    import re
    parts = [int(p[1:-1]) if p.startswith("[") else p for p in re.findall(r"\[\d+\]|[^.\[\]]+", path)]
    target = doc
    for p in parts[:-1]:
        target = target[p]
    target[parts[-1]] = value


def _changed(v):
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + 1
    if isinstance(v, float):
        return v + 0.001
    if isinstance(v, str):
        return v + "x"
    if v is None:
        return 0
    return ["x"]


def test_any_value_change_changes_the_hash(workload):
    doc = plan_dict(workload, ports=[18091, 18092])
    base = document_hash(doc)
    leaves = flatten(doc)
    assert len(leaves) > 50
    seen = {base}
    for path, value in leaves.items():
        changed = copy.deepcopy(doc)
        _set_leaf(changed, path, _changed(value))
        h = document_hash(changed)
        assert h not in seen, path
        seen.add(h)
    # 1 vs 1.0 and "1" vs 1 are different values too
    changed = copy.deepcopy(doc)
    changed["metrics"]["throughput_scale"] = 25.0
    assert document_hash(changed) != base


# -- freeze / verify / tamper -----------------------------------------------------------------
def test_freeze_is_idempotent_and_audited(store, plan_file):
    r1 = freeze(store, plan_file)
    assert r1.created and r1.manifest_hash
    r2 = freeze(store, plan_file)
    assert not r2.created and r2.hash == r1.hash
    assert "already frozen with identical content" in r2.message
    assert store.scalar("SELECT count(*) FROM plans") == 1
    assert [e["kind"] for e in events(store)] == ["manifest_frozen", "plan_frozen"]
    plan = plan_from_store(store, r1.hash[:10])
    assert plan.hash == r1.hash and plan.sweep.concurrencies == (1, 2)
    assert verify_chain(store).ok


def test_verify_shows_differing_fields(tmp_path, plan_file, capsys):
    db = tmp_path / "c.duckdb"
    cli = lambda *a, db: inproc(capsys, *a, db=db)  # noqa: E731
    assert cli("plan", "freeze", str(plan_file), db=db).returncode == 0
    ok = cli("plan", "verify", str(plan_file), db=db)
    assert ok.returncode == 0 and "matches frozen plan" in ok.stdout
    doc = json.loads(plan_file.read_text())
    doc["sweep"]["measured_repeats"] = 3
    doc["engines"][1]["profile"] = "lossy"
    plan_file.write_text(json.dumps(doc, indent=2))
    bad = cli("plan", "verify", str(plan_file), db=db)
    assert bad.returncode == 1
    assert "ALTERED" in bad.stdout and "2 field(s) differ" in bad.stdout
    assert "sweep.measured_repeats" in bad.stdout and "engines[1].profile" in bad.stdout
    assert '"lossy"' in bad.stdout
    run = cli("run", str(plan_file), db=db)
    assert run.returncode == 2 and "altered since it was frozen" in run.stderr


def test_an_altered_file_is_compared_with_its_latest_freeze_in_the_chain_not_by_clock(store, plan_file):
    """Which frozen plan a file is compared with is the one frozen last in the audit chain: a
    `frozen_at` moved a day back (a host clock, a hand edit) does not make an older freeze the
    latest (issue 26, item 4)."""
    from data.plan_freeze import verify_plan_file

    first = freeze(store, plan_file).hash
    doc = json.loads(plan_file.read_text())
    doc["sweep"]["measured_repeats"] = 3
    doc["name"] = "test-plan-restarted"  # one name names one frozen plan: starting over is a new name
    plan_file.write_text(json.dumps(doc))
    second = freeze(store, plan_file).hash
    store.con.execute("UPDATE plans SET frozen_at = frozen_at - INTERVAL 1 DAY WHERE plan_hash = ?", [second])
    doc["engines"][1]["profile"] = "lossy"
    plan_file.write_text(json.dumps(doc))
    v = verify_plan_file(store, plan_file)
    assert not v.ok and v.frozen_hash == second != first
    assert [p for p, _, _ in v.differences] == ["engines[1].profile"]


def test_unfrozen_plan_is_refused_by_run(tmp_path, plan_file, capsys):
    r = inproc(capsys, "run", str(plan_file), db=tmp_path / "c.duckdb")
    assert r.returncode == 2 and "plan is not frozen" in r.stderr


def test_tampered_stored_plan_is_detected(store, plan_file):
    h = freeze_plan(store, plan_file)
    store.con.execute("UPDATE plans SET canonical_json = replace(canonical_json, '\"measured_repeats\":2', '\"measured_repeats\":1')")
    with pytest.raises(CampaignError, match="stored JSON no longer matches its hash"):
        plan_from_store(store, h)


# -- addenda ----------------------------------------------------------------------------------
def test_addendum_is_bound_to_its_parent(tmp_path, store, plan_file):
    parent = freeze_plan(store, plan_file)
    add = {"schema": "omni-campaign-addendum/1", "parent": parent, "name": "repeat-design",
           "reason": "one discarded + three measured repeats", "changes": {"sweep": {"warmup_repeats": 1, "measured_repeats": 3}}}
    path = write_json(tmp_path / "add.json", add)
    res = freeze(store, path, expected_parent=parent[:12])
    assert res.created and res.kind == "addendum" and res.message == f"froze addendum 'repeat-design': {res.hash}"
    eff = plan_from_store(store, res.hash)
    assert eff.parent_hash == parent and eff.sweep.measured_repeats == 3 and eff.sweep.warmup_repeats == 1
    assert eff.sweep.concurrencies == (1, 2)  # untouched fields come from the parent
    ev = events(store, kind="addendum_frozen")
    assert ev[0]["payload"]["parent_hash"] == parent
    # the parent stays as it was
    assert plan_from_store(store, parent).sweep.measured_repeats == 2
    assert not freeze(store, path, expected_parent=parent).created


def test_addendum_refusals(tmp_path, store, plan_file, workload):
    parent = freeze_plan(store, plan_file)
    other = write_json(tmp_path / "other.json", {**plan_dict(workload), "name": "other"})
    other_hash = freeze_plan(store, other)
    add = {"schema": "omni-campaign-addendum/1", "parent": parent, "name": "x", "reason": "r",
           "changes": {"sweep": {"concurrencies": [0]}}}
    with pytest.raises(CampaignError, match=r"\(parent \+ changes\): sweep.concurrencies\[0\]: 0 is less than the minimum of 1"):
        freeze(store, write_json(tmp_path / "a1.json", add), expected_parent=parent)
    add["changes"] = {"sweep": {"measured_repeats": 3}}
    with pytest.raises(CampaignError, match="parent: .* is not .* given on the command line"):
        freeze(store, write_json(tmp_path / "a2.json", add), expected_parent=other_hash)
    del add["parent"]
    with pytest.raises(CampaignError, match=f'parent: missing; add "parent": "{parent}"'):
        freeze(store, write_json(tmp_path / "a3.json", add), expected_parent=parent)


# -- holdout reservation ----------------------------------------------------------------------
def test_holdout_reuse_is_refused_naming_ids_and_runs(tmp_path, store, plan_file, workload):
    from data.workload import load_workload

    holdout = load_workload(workload).pools["holdout"]
    insert_run(store, "old-run-1", utt_ids=[holdout[1], "spk0-0000"])
    insert_run(store, "old-run-2", utt_ids=[holdout[1], holdout[3]])
    with pytest.raises(CampaignError) as err:
        freeze(store, plan_file)
    msg = str(err.value)
    assert "2 of 4 holdout id(s) already appear in stored requests" in msg
    assert f"{holdout[1]} (runs old-run-1, old-run-2)" in msg and f"{holdout[3]} (runs old-run-2)" in msg
    assert store.scalar("SELECT count(*) FROM plans") == 0
    assert store.scalar("SELECT count(*) FROM audit_events WHERE kind = 'plan_frozen'") == 0
    # the refusal is an event of its own, after the manifest it froze, with the reason (issue 28)
    refused = events(store, kind="freeze_refused")
    manifest = events(store, kind="manifest_frozen")
    assert len(refused) == 1 and refused[0]["seq"] > manifest[-1]["seq"]
    assert refused[0]["payload"]["reason"] == msg and refused[0]["payload"]["manifest_hash"] == manifest[-1]["subject"]
    assert refused[0]["payload"]["check"] == "holdout reuse" and verify_chain(store).ok


def test_tuning_ids_may_be_reused_but_not_overlap_holdout(tmp_path, store, workload):
    insert_run(store, "old", utt_ids=["spk0-0000"])  # a tuning id: reuse is fine
    doc = plan_dict(workload)
    assert freeze(store, write_json(tmp_path / "p.json", doc)).created
    pools = json.loads((workload / "pools.json").read_text())
    pools["holdout"].append(pools["tuning"][0])
    (workload / "pools.json").write_text(json.dumps(pools))
    with pytest.raises(CampaignError, match="1 holdout id\\(s\\) are also in tuning pool 'tuning': spk0-0000"):
        freeze(store, write_json(tmp_path / "p2.json", {**doc, "name": "p2"}))


def test_open_holdout_is_an_audit_event(tmp_path, store, plan_file):
    from console.runner import check_preconditions

    plan = plan_from_store(store, freeze_plan(store, plan_file))
    with pytest.raises(CampaignError, match="holdout pool 'holdout' is reserved; open it first"):
        check_preconditions(store, plan, "holdout")
    seq, new = open_holdout(store, plan, "candidate selected on tuning data")
    assert new
    assert open_holdout(store, plan, "again") == (seq, False)
    ev = events(store, kind="holdout_opened")
    assert len(ev) == 1 and ev[0]["payload"]["reason"] == "candidate selected on tuning data"
    check_preconditions(store, plan, "holdout")


def test_workload_change_after_freeze_is_refused(store, plan_file, workload):
    from console.runner import check_preconditions

    plan = plan_from_store(store, freeze_plan(store, plan_file))
    wav = next((workload / "en" / "prompt-wavs").glob("p0.wav"))
    wav.write_bytes(wav.read_bytes()[:-2] + b"\x01\x02")
    with pytest.raises(CampaignError, match="changed since the plan was frozen"):
        check_preconditions(store, plan, "sweep")
