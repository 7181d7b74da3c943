"""`campaign equivalence` end to end against real reference-engine processes over HTTP (real
DuckDB, the CLI as a subprocess): bit-exact PASS (fast vs baseline), within-tolerance PASS with
non-zero distances (precision vs baseline), FAIL naming its measures (lossy), INCONCLUSIVE on
failed requests (injected HTTP 500), and the engines' tensor dumps compared by name."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest

from data.store import Store
from plans_helpers import inproc, make_workload, plan_dict, write_json

pytestmark = pytest.mark.timeout(300)

TOLERANCES = {"max_length_diff": 0, "max_abs": 0.01, "min_snr_db": 40.0, "max_log_mel_db": 1.0,
              "tensor_max_abs": 0.01, "tensor_max_rel": 0.01, "tensor_min_cosine": 0.9999}


def _plan(tmp_path):
    wl = make_workload(tmp_path / "wl", n=6, n_holdout=2, short=True)
    doc = plan_dict(wl, profiles=("baseline", "fast", "precision", "lossy", "baseline"), repeats=1)
    doc["engines"][-1]["name"] = "ref-broken"  # baseline whose every request meets an injected HTTP 500
    doc["engines"][-1]["request"] = {"headers": {"X-Reference-Fault": "http_500"}}
    doc["equivalence"] = {"_comment": "C=1: deterministic batch composition",
                          "pairs": [{"reference": "ref-baseline", "candidate": c}
                                    for c in ("ref-fast", "ref-precision", "ref-lossy", "ref-broken")],
                          "utterances": 3, "concurrency": 1, "repeats": 1, "tensors": True, "tolerances": TOLERANCES}
    return write_json(tmp_path / "plan.json", doc)


@pytest.fixture(scope="module")
def campaign_db(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("eq")
    plan = _plan(tmp)
    db = tmp / "c.duckdb"
    fr = subprocess.run([sys.executable, "-m", "console.cli", "plan", "freeze", str(plan), "--db", str(db)],
                        capture_output=True, text=True)
    assert fr.returncode == 0, fr.stderr
    r = subprocess.run([sys.executable, "-m", "console.cli", "equivalence", str(plan), "--db", str(db)],
                       capture_output=True, text=True)
    return plan, db, r


def _verdicts(db):
    with Store(db) as s:
        return {v["name"]: v for v in s.query("SELECT * FROM verdicts WHERE kind = 'equivalence'")}


def _rows(db, name):
    with Store(db) as s:
        vid = s.scalar("SELECT verdict_id FROM verdicts WHERE name = ?", [name])
        return s.query("SELECT * FROM equivalence_measures WHERE verdict_id = ? ORDER BY utt_id, measure", [vid])


@pytest.mark.slow  # a full campaign (the module's campaign_db)
def test_outcomes_and_exit_status(campaign_db):
    _, db, r = campaign_db
    print(r.stdout, r.stderr)
    assert r.returncode == 1, r.stdout + r.stderr  # a FAIL among the pairs
    v = _verdicts(db)
    assert {n: x["verdict"] for n, x in v.items()} == {
        "ref-fast vs ref-baseline": "PASS", "ref-precision vs ref-baseline": "PASS",
        "ref-lossy vs ref-baseline": "FAIL", "ref-broken vs ref-baseline": "INCONCLUSIVE"}
    assert "ref-fast vs ref-baseline: PASS (bit-exact)" in r.stdout
    assert "ref-precision vs ref-baseline: PASS (" in r.stdout


@pytest.mark.slow  # a full campaign (the module's campaign_db)
def test_bit_exact_rows(campaign_db):
    rows = _rows(campaign_db[1], "ref-fast vs ref-baseline")
    assert {x["value"] for x in rows if x["measure"] in ("pcm_identical", "samples_identical")} == {1.0}
    assert {x["value"] for x in rows if x["measure"] == "snr_db"} == {math.inf}
    assert all(x["passed"] is not False for x in rows)


@pytest.mark.slow  # a full campaign (the module's campaign_db)
def test_precision_close_but_not_equal(campaign_db):
    rows = _rows(campaign_db[1], "ref-precision vs ref-baseline")
    by = lambda m: [x["value"] for x in rows if x["measure"] == m]  # noqa: E731
    assert by("pcm_identical") == [0.0] * 3 and by("length_diff") == [0.0] * 3
    assert all(0 < v <= 0.01 for v in by("max_abs"))
    assert all(40 <= v < math.inf for v in by("snr_db"))
    assert all(0 < v <= 1.0 for v in by("log_mel_db"))
    # the frame energies are computed in float16: close, not equal; the voice is the same
    assert all(0 < v for v in [x["value"] for x in rows if x["measure"] == "tensor:frame_energy:max_abs"])
    assert {x["value"] for x in rows if x["measure"] == "tensor:voice:max_abs"} == {0.0}


@pytest.mark.slow  # a full campaign (the module's campaign_db)
def test_fail_names_worst_measures(campaign_db):
    _, db, r = campaign_db
    v = _verdicts(db)["ref-lossy vs ref-baseline"]
    doc = json.loads(v["document_json"])
    assert doc["label"] == "FAIL" and doc["reasons"]
    assert any(m in " ".join(doc["reasons"]) for m in ("snr_db", "max_abs", "log_mel_db", "length_diff"))
    assert "ref-lossy vs ref-baseline: FAIL" in r.stdout


@pytest.mark.slow  # a full campaign (the module's campaign_db)
def test_documents_follow_the_verdict_schema(campaign_db):
    import jsonschema

    from stats.verdict_doc import load_schema

    for v in _verdicts(campaign_db[1]).values():
        jsonschema.validate(json.loads(v["document_json"]), load_schema())


@pytest.mark.slow  # a full campaign (the module's campaign_db)
def test_inconclusive_names_failed_requests(campaign_db):
    _, db, r = campaign_db
    doc = json.loads(_verdicts(db)["ref-broken vs ref-baseline"]["document_json"])
    assert len(doc["reasons"]) == 3 and all("candidate: http_status" in x for x in doc["reasons"])


@pytest.mark.slow  # a full campaign (the module's campaign_db)
def test_rows_equal_the_verdict_checks_and_audit_holds(campaign_db):
    _, db, _ = campaign_db
    from data.integrity import verify_store

    with Store(db) as s:
        checks = verify_store(s)
    bad = [c for c in checks if not c.ok]
    assert not bad, bad


@pytest.mark.slow  # a full campaign (the module's campaign_db)
def test_an_edited_row_fails_audit_verify(campaign_db, tmp_path):
    """A distance edited by hand in a copy of the store: `campaign audit verify` names the verdict."""
    import shutil

    db = tmp_path / "copy.duckdb"
    shutil.copy(campaign_db[1], db)
    with Store(db) as s:
        s.con.execute("UPDATE equivalence_measures SET value = 0.5 WHERE measure = 'snr_db' "
                      "AND candidate = 'ref-lossy' AND utt_id = (SELECT min(utt_id) FROM equivalence_measures)")
    r = subprocess.run([sys.executable, "-m", "console.cli", "audit", "verify", "--db", str(db)],
                       capture_output=True, text=True)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "equivalence verdict equivalence-" in r.stdout and "differ from the checks it was issued with" in r.stdout


@pytest.mark.slow  # a full campaign (the module's campaign_db)
def test_tensor_dumps_compared_missing_and_shape(campaign_db, tmp_path):
    """The real dumps of one request: identical arms compare equal; a tensor removed from the
    candidate is a failure, as is one of another shape."""
    from console.equivalence import TENSOR_DIR, read_tensors, tensor_folder
    from stats.equivalence import FAIL, PASS, Output, Tolerances, judge, measure_pair

    _, db, _ = campaign_db
    with Store(db) as s:
        rows = s.query("SELECT r.engine, q.run_id, q.request_index FROM requests q JOIN runs r USING (run_id) "
                       "WHERE r.kind = 'equivalence' AND q.request_index = 0 AND r.engine IN ('ref-baseline', 'ref-fast')")
    art = db.parent / "artifacts" / TENSOR_DIR
    t = {x["engine"]: read_tensors(art / tensor_folder(x["run_id"], 0)) for x in rows}
    assert set(t["ref-baseline"]) == {"voice", "frame_energy", "output"}
    tol = Tolerances(**{k: v for k, v in TOLERANCES.items()})
    x = t["ref-baseline"]["output"].astype(np.float64) / 32768

    def verdict(cand_tensors):
        return judge(measure_pair("u", 0, Output("a", x, 24000, tensors=t["ref-baseline"]),
                                  Output("a", x, 24000, tensors=cand_tensors), tol, True))

    assert verdict(t["ref-fast"]).verdict == PASS
    missing = verdict({k: v for k, v in t["ref-fast"].items() if k != "frame_energy"})
    assert missing.verdict == FAIL and "tensor:frame_energy:present" in missing.reasons[0]
    assert "missing_in_candidate" in missing.reasons[0]
    reshaped = verdict({**t["ref-fast"], "voice": t["ref-fast"]["voice"].reshape(1, 3)})
    assert reshaped.verdict == FAIL and "shape_mismatch" in reshaped.reasons[0]


@pytest.mark.slow  # a full campaign (the module's campaign_db)
def test_reuse_stored_outputs(campaign_db):
    """reuse_stored: the stored outputs of identical requests (the runs above) give the same rows."""
    from console.equivalence import compare_pair, reused_arm
    from data.plan_freeze import frozen_plan_for_file

    plan_path, db, _ = campaign_db
    with Store(db) as s:
        plan = frozen_plan_for_file(s, plan_path)
        plan = replace(plan, equivalence=replace(plan.equivalence, reuse_stored=True))
        from console.equivalence import equivalence_utterances

        utts = equivalence_utterances(s, plan)
        art = db.parent / "artifacts"
        arms = {e: reused_arm(s, plan, e, utts, art) for e in ("ref-baseline", "ref-precision")}
        out = compare_pair(plan.equivalence.pairs[1], arms["ref-baseline"], arms["ref-precision"], utts, plan.equivalence)
        stored = _rows(db, "ref-precision vs ref-baseline")
    assert out.result.verdict == "PASS" and arms["ref-baseline"].reused
    got = {(r["utt_id"], r["measure"]): r["value"] for r in out.rows}
    assert {(r["utt_id"], r["measure"]): r["value"] for r in stored} == {
        k: (math.inf if v == "inf" else v) for k, v in got.items()}


def test_refusals_are_one_line(tmp_path, capsys):
    """No section: refused before anything runs (exit 2, one line)."""
    wl = make_workload(tmp_path / "wl", n=4, n_holdout=1, short=True)
    plan = write_json(tmp_path / "plan.json", plan_dict(wl))
    db = tmp_path / "c.duckdb"
    assert inproc(capsys, "plan", "freeze", str(plan), db=db).returncode == 0
    r = inproc(capsys, "equivalence", str(plan), db=db)
    assert r.returncode == 2 and "has no `equivalence` section" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    # the reserved holdout is not spent by an equivalence check; nothing is launched or stored
    doc = plan_dict(wl)
    doc["name"] = "holdout-equivalence"
    doc["equivalence"] = {"pairs": [{"reference": "ref-baseline", "candidate": "ref-fast"}], "pool": "holdout",
                          "tolerances": TOLERANCES}
    plan2 = write_json(tmp_path / "plan2.json", doc)
    assert inproc(capsys, "plan", "freeze", str(plan2), db=db).returncode == 0
    r = inproc(capsys, "equivalence", str(plan2), db=db)
    assert r.returncode == 2 and "is the reserved holdout; it is not opened" in r.stderr, r.stderr
    with Store(db) as s:
        assert s.scalar("SELECT count(*) FROM runs") == 0
    # a pair naming an engine the plan lacks is refused at freeze, naming the field
    doc["equivalence"]["pairs"] = [{"reference": "ref-baseline", "candidate": "ref-nope"}]
    r = inproc(capsys, "plan", "freeze", str(write_json(tmp_path / "plan3.json", doc)), db=db)
    assert r.returncode == 2 and "equivalence.pairs[0].candidate: 'ref-nope' is not an engine" in r.stderr


@pytest.mark.slow  # a full campaign (the module's campaign_db)
def test_precision_change_precondition(campaign_db, tmp_path):
    """A candidate with precision_change gets no quality PASS without a PASS equivalence verdict
    against the quality baseline; the first one issued binds, a later PASS does not replace it."""
    import shutil

    from console.equivalence import (ArmOutputs, PairOutcome, apply_precondition, equivalence_precondition,
                                     issue_equivalence)
    from data.plan_freeze import frozen_plan_for_file
    from stats.equivalence import EquivalenceResult
    from stats.gates import GateConfig, GateResult

    db = tmp_path / "copy.duckdb"
    shutil.copy(campaign_db[1], db)
    passing = GateResult("PASS", [], GateConfig(margins={"wer": 0.2, "sim": 0.5, "mos": 0.05}), {})
    with Store(db) as s:
        plan = frozen_plan_for_file(s, campaign_db[0])
        assert equivalence_precondition(s, plan, "ref-lossy", False) is None
        assert equivalence_precondition(s, plan, "ref-precision", True) is None
        lossy = equivalence_precondition(s, plan, "ref-lossy", True)
        assert lossy is not None and lossy.cap == "FAIL" and "is FAIL" in lossy.reason
        capped = apply_precondition(passing, lossy)
        assert capped.verdict == "FAIL" and "equivalence_precondition" in capped.inputs
        none = equivalence_precondition(s, plan, "ref-peer", True)  # no equivalence verdict at all
        assert none is not None and none.cap == "INCONCLUSIVE" and "campaign equivalence" in none.reason
        # a later PASS for ref-lossy is stored beside the FAIL; the first issued still binds
        pair = plan.equivalence.pairs[2]
        issue_equivalence(s, plan, PairOutcome(pair, EquivalenceResult("PASS", False, []), []),
                          {"ref-baseline": ArmOutputs("ref-baseline"), "ref-lossy": ArmOutputs("ref-lossy")})
        assert s.scalar("SELECT count(*) FROM verdicts WHERE name = 'ref-lossy vs ref-baseline'") == 2
        assert equivalence_precondition(s, plan, "ref-lossy", True).cap == "FAIL"


@pytest.mark.slow  # a full campaign (the module's campaign_db)
def test_evidence_bundle_rederives_equivalence(campaign_db, tmp_path):
    """The bundle holds the rows; verify re-derives every equivalence verdict from them and the
    bundled audio hashes. A distance edited in the bundled rows (MANIFEST re-signed) is named."""
    import duckdb
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    plan, db, _ = campaign_db
    out = tmp_path / "bundle"
    r = subprocess.run([sys.executable, "-m", "console.cli", "export", "evidence", str(plan), str(out), "--db", str(db)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    v = subprocess.run([sys.executable, "-m", "console.cli", "evidence", "verify", str(out)], capture_output=True, text=True)
    assert v.returncode == 0, v.stdout + v.stderr
    assert "PASS (bit-exact): " in v.stdout and "FAIL: " in v.stdout and "INCONCLUSIVE: " in v.stdout
    path = out / "tables" / "equivalence_measures.parquet"
    con = duckdb.connect()
    con.execute(f"COPY (SELECT * REPLACE (CASE WHEN candidate = 'ref-lossy' AND measure = 'snr_db' THEN 99.0 "
                f"ELSE value END AS value) FROM read_parquet('{path}')) TO '{path}.new' (FORMAT parquet)")
    con.close()
    path.with_name(path.name + ".new").replace(path)
    pacsv.write_csv(pq.read_table(path), path.with_suffix(".csv"))
    files = sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and p.name != "MANIFEST.sha256")
    sums = subprocess.run(["sha256sum", "--", *files], cwd=out, capture_output=True, text=True, check=True)
    (out / "MANIFEST.sha256").write_text(sums.stdout)
    bad = subprocess.run([sys.executable, "-m", "console.cli", "evidence", "verify", str(out)], capture_output=True, text=True)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "differ from the checks it was issued with" in bad.stdout + bad.stderr


@pytest.mark.slow  # a full campaign (the module's campaign_db)
def test_html_report_shows_equivalence(campaign_db, tmp_path):
    """The report's verdict section names each pair's label and reasons; the figure is drawn."""
    plan, db, _ = campaign_db
    out = tmp_path / "report.html"
    r = subprocess.run([sys.executable, "-m", "console.cli", "report", str(plan), "--html", str(out), "--figures",
                        str(tmp_path / "figs"), "--db", str(db)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    text = out.read_text()
    assert "PASS (bit-exact)" in text and "ref-lossy vs ref-baseline" in text and 'id="fig-equivalence"' in text
    assert "candidate: http_status" in text  # the INCONCLUSIVE's named failed requests
    assert (tmp_path / "figs" / "equivalence.png").stat().st_size > 10_000


@pytest.mark.slow  # a full campaign (the module's campaign_db)
def test_tui_gates_tab_lists_issued_equivalence(campaign_db):
    """The Gates tab's data (read as the TUI reads it) and its equivalence block."""
    from console.tui.data import open_read_only
    from console.tui.panes.gates import GatesPane, load_gates

    with open_read_only(campaign_db[1]) as store:
        data = load_gates(store)
    text = GatesPane.equivalence_text(data).plain
    assert "PASS (bit-exact)  ref-fast vs ref-baseline" in text
    assert "FAIL  ref-lossy vs ref-baseline" in text and "INCONCLUSIVE  ref-broken vs ref-baseline" in text
    assert "min snr_db 7" in text  # precision's distances shown (SNR about 73 dB)


def test_unreadable_and_safetensors_dumps(tmp_path):
    """A truncated .npy raises ValueError (console.equivalence turns it into a named missing output,
    never a traceback); .safetensors entries are
    read by name as <file>.<entry> (safetensors is installed with transformers)."""
    from safetensors.numpy import save_file

    from console.equivalence import read_tensors

    folder = tmp_path / "t"
    folder.mkdir()
    save_file({"k": np.arange(4, dtype=np.float32)}, str(folder / "layer.safetensors"))
    np.save(folder / "voice.npy", np.ones(3, np.float32))
    got = read_tensors(folder)
    assert set(got) == {"layer.k", "voice"} and got["layer.k"].tolist() == [0, 1, 2, 3]
    (folder / "voice.npy").write_bytes(b"\x93NUMPY garbage")
    with pytest.raises(ValueError):
        read_tensors(folder)


@pytest.mark.slow  # 3 s in a loaded `make check`
def test_engine_dump_header_rules_and_precision_determinism(tmp_path):
    """Against real engines: the dump header is refused (400, one line) by an engine started
    without --dump-tensors and for a name that is not one plain folder; the precision profile gives
    the same bytes twice, and its dumped frame energies are float16."""
    from reference_server import chat_body, collect_audio, launch_engine, stop_engine, stream, wait_ready

    plain = wait_ready(launch_engine("vllm-omni", "precision"), "vllm-omni", "precision")
    dumping = wait_ready(launch_engine("vllm-omni", "precision", "--dump-tensors", str(tmp_path / "t")),
                         "vllm-omni", "precision")
    try:
        body = chat_body("vllm-omni", "Good morning.")
        refused = stream(plain.url, body, headers={"X-Dump-Tensors": "r0"})
        assert refused.status == 400 and b"not started with --dump-tensors" in refused.body
        bad = stream(dumping.url, body, headers={"X-Dump-Tensors": "../escape"})
        assert bad.status == 400 and b"is not a plain folder name" in bad.body
        a, b = (stream(dumping.url, body, headers={"X-Dump-Tensors": n}) for n in ("r0", "r1"))
        assert a.status == b.status == 200
        assert np.array_equal(collect_audio("vllm-omni", a), collect_audio("vllm-omni", b))
        energy = np.load(tmp_path / "t" / "r0" / "frame_energy.npy")
        assert energy.dtype == np.float16 and np.array_equal(energy, np.load(tmp_path / "t" / "r1" / "frame_energy.npy"))
        assert not (tmp_path / "escape").exists()
    finally:
        stop_engine(plain)
        stop_engine(dumping)
