"""Numbers an engine sends (issue 26, item 6), against the real reference engine over real HTTP
made to misbehave with its fault header: an emit_ns outside int64, a WAV header that claims
another sample rate, a pcm stream whose Content-Type announces another rate. Each request is a
decode_error naming the field and both values; the run completes and stores every request.
Also: a plan whose compared arms expect different rates is refused at freeze."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from plans_helpers import free_port, inproc, make_workload, plan_dict, write_json

from console.recording import launch_engine, record_run, stop_engine
from data.plan_model import EngineSpec
from data.store import Store
from engine_adapters.driver import DriveSpec, RequestSpec

pytestmark = pytest.mark.timeout(240)

TEXTS = ["A short sentence for the engine.", "Another line of speech to render now.",
         "Timing every chunk as it arrives.", "The fourth request says this."]
FAULT = "X-Reference-Fault"


def _drive(store, tmp_path, prompt, dialect, faults, request_options=None):
    """Launch the reference engine, drive one request per fault (C=1), stop it; the run's rows."""
    port = free_port()
    argv = (sys.executable, "-m", "engine_adapters.reference", "--dialect", dialect, "--profile", "fast",
            "--port", str(port))
    spec = EngineSpec(f"ref-{dialect}", "reference", dialect, argv=argv, port=port, health_timeout_s=90, profile="fast")
    eng = launch_engine(store, spec, log_dir=tmp_path / "logs")
    try:
        reqs = [RequestSpec(f"spk-{i}", TEXTS[i % 4], prompt, "prompt", headers=((FAULT, f),)) for i, f in enumerate(faults)]
        drive = DriveSpec(f"num-{dialect}", eng.spec.url, dialect, 1, reqs, timeout_s=60, artifacts_dir=tmp_path / "a",
                          request_options=request_options or {})
        run_id = record_run(store, drive, engine=eng.spec.name, kind="exploratory", telemetry=False)
    finally:
        stop_engine(store, eng, grace_s=2)
    assert store.scalar("SELECT status FROM runs WHERE run_id = ?", [run_id]) == "complete"
    return run_id, store.query("SELECT * FROM requests WHERE run_id = ? ORDER BY request_index", [run_id])


@pytest.mark.parametrize("dialect", ["vllm-omni", "sglang-omni"])
@pytest.mark.slow  # 3 s in a loaded `make check`
def test_sse_emit_ns_and_wav_rate_are_decode_errors(store, tmp_path, prompt, dialect):
    run_id, rows = _drive(store, tmp_path, prompt, dialect, ["none", "emit_ns_overflow", "wav_rate", "none"])
    assert [r["outcome"] for r in rows] == ["ok", "decode_error", "decode_error", "ok"], rows
    emit, wav = rows[1]["error_detail"], rows[2]["error_detail"]
    # the engine sent 2^63 + its clock: the message names that value (above int64 whatever the clock reads)
    got = re.search(r"emit_ns (\d+) is outside the int64 range", emit)
    assert got and int(got.group(1)) >= 1 << 63, emit
    assert "8000 Hz" in wav and "24000 Hz" in wav, wav
    # the mislabelled audio is not counted: no samples at 8 kHz, no saved WAV
    assert rows[2]["audio_samples"] == 0 and rows[2]["audio_path"] is None
    assert rows[0]["sample_rate"] == rows[3]["sample_rate"] == 24_000
    assert store.scalar("SELECT max(server_emit_ns) FROM chunks WHERE run_id = ?", [run_id]) < 1 << 63


@pytest.mark.slow  # 3 s in a loaded `make check`
def test_pcm_content_type_rate_is_checked(store, tmp_path, prompt):
    _, rows = _drive(store, tmp_path, prompt, "pcm", ["none", "pcm_rate", "none"])
    assert [r["outcome"] for r in rows] == ["ok", "decode_error", "ok"], rows
    detail = rows[1]["error_detail"]
    assert "rate=16000" in detail and "24000 Hz" in detail and rows[1]["audio_samples"] == 0, detail


@pytest.mark.slow  # 3 s in a loaded `make check`
def test_the_expected_rate_is_the_plans(store, tmp_path, prompt):
    """request.sample_rate says what the engine must deliver: 24 kHz audio expected at 16 kHz fails."""
    _, rows = _drive(store, tmp_path, prompt, "vllm-omni", ["none"], {"sample_rate": 16_000})
    assert rows[0]["outcome"] == "decode_error", rows
    assert "24000 Hz" in rows[0]["error_detail"] and "16000 Hz" in rows[0]["error_detail"]


@pytest.mark.slow  # a campaign run and resumed
def test_campaign_with_overflowing_emit_ns_completes_and_resumes(tmp_path):
    """`campaign run` as a user runs it: every request's emit_ns overflows; the run is stored
    complete with its requests, exit 1 (measured nothing), and --resume finds the cell complete."""
    wl = make_workload(tmp_path / "wl", short=True)
    doc = plan_dict(wl, profiles=("fast",), concurrencies=(1,), requests=2, warmups=0, repeats=1)
    e = doc["engines"][0]
    e["argv"] = [sys.executable, "-m", "engine_adapters.reference", "--dialect", "vllm-omni", "--profile", "fast",
                 "--host", "127.0.0.1", "--port", str(e["port"])]
    e["request"] = {"headers": {FAULT: "emit_ns_overflow"}}
    plan = write_json(tmp_path / "plan.json", doc)
    db = tmp_path / "c.duckdb"

    def campaign(*args):
        return subprocess.run([sys.executable, "-m", "console.cli", *args, "--db", str(db)],
                              capture_output=True, text=True)

    assert campaign("plan", "freeze", str(plan)).returncode == 0
    for args, code in ((("run", str(plan)), 1), (("run", str(plan), "--resume"), 0)):
        r = campaign(*args)
        assert "Traceback" not in r.stderr and "OverflowError" not in r.stderr, r.stderr[-2000:]
        assert r.returncode == code, (r.returncode, r.stdout, r.stderr)
    assert "1 cell(s) already complete" in r.stdout
    with Store(db) as s:
        runs = s.query("SELECT run_id, status FROM runs")
        assert [r["status"] for r in runs] == ["complete"], runs
        rows = s.query("SELECT outcome, error_detail FROM requests")
        assert len(rows) == 2 and {r["outcome"] for r in rows} == {"decode_error"}
        assert all("emit_ns" in r["error_detail"] for r in rows)


def _two_rate_plan(tmp_path, where: str) -> dict:
    doc = plan_dict(make_workload(tmp_path / "wl", short=True), profiles=("baseline", "fast"), concurrencies=(1,))
    doc["engines"][1]["request"] = {"sample_rate": 16_000}
    if where == "rule":
        doc["quality"] = {"concurrencies": [1], "pool": "holdout"}
        doc["decision_rules"] = [{"name": "tp", "kind": "throughput_exceeds", "candidate": "ref-fast",
                                  "reference": "ref-baseline", "concurrencies": [1]}]
    return doc


@pytest.mark.parametrize("where, field", [("quality", "quality.candidate"), ("rule", "decision_rules[0].candidate")])
def test_compared_arms_with_different_rates_are_refused_at_freeze(tmp_path, capsys, where, field):
    doc = _two_rate_plan(tmp_path, where)
    plan = write_json(tmp_path / "plan.json", doc)
    r = inproc(capsys, "plan", "freeze", str(plan), db=tmp_path / "c.duckdb")
    assert r.returncode == 2, (r.stdout, r.stderr)
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1 and field in line and "16000 Hz" in line and "24000 Hz" in line, line
    # the same plan with both arms at 16 kHz freezes (an explicit rate equal to the default is fine too)
    doc["engines"][0]["request"] = {"sample_rate": 16_000}
    write_json(plan, doc)
    assert inproc(capsys, "plan", "freeze", str(plan), db=tmp_path / "c.duckdb").returncode == 0
    assert json.loads(plan.read_text())["engines"][1]["request"]["sample_rate"] == 16_000
