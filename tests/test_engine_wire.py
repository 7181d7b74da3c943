"""Request bodies field by field against what the real engines' own code sends, and the reference
engine driven with every preset and voice placement over real HTTP (docs/engines.md).

Expected bodies are written from reading the sources, not from the console's code:
- vLLM-Omni 0.30.0 (`pip download --no-deps vllm-omni==0.30.0`):
  vllm_omni/entrypoints/openai/serving_chat.py `_attach_minicpmo45_reference_audio` (top-level
  `ref_audio` is MiniCPM-o 4.5's voice reference) and
  vllm_omni/model_executor/stage_input_processors/minicpmo_4_5_omni.py
  `_extract_prompt_reference_audio` (the messages' first audio wins over it);
  vllm_omni/benchmarks/data_modules/seed_tts_dataset.py `SeedTTSDataset.sample` (ref_audio,
  ref_text, task_type "Base", language, max_new_tokens = output_len 2048) and
  vllm_omni/benchmarks/patch/patch.py `_attach_seed_tts_to_request_func_input` (system + user
  messages) and `async_request_openai_chat_omni_completions` (temperature 0.0, max_tokens,
  stream, stream_options with continuous_usage_stats, modalities added last).
- SGLang-Omni (sgl-project/sglang-omni at 0970348dfdee): benchmarks/eval/benchmark_omni_seedtts.py
  (defaults: --max-new-tokens 256, --temperature 0.7, stream off, voice clone off) and
  benchmarks/tasks/tts.py `VoiceCloneOmni.generate_speech` (the instruction wrapper, `audio`
  format wav, `audios: [ref]` with --voice-clone).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from console.recording import record_run
from data.errors import CampaignError
from data.store import Store
from engine_adapters.dialects import get_dialect
from engine_adapters.dialects.presets import VLLM_BENCH_SYSTEM_PROMPT
from engine_adapters.driver import DriveSpec, RequestSpec
from stats.metrics import run_metrics
from stats.quality.scoring import Expected, truncation_gap

from plans_helpers import minimal_plan
from reference_server import launch_engine, stop_engine, wait_ready

REPO = Path(__file__).resolve().parents[1]
WAVS = REPO / "data" / "sample_workload" / "en" / "prompt-wavs"
SPK = WAVS / "spk01.wav"
URI = "data:audio/wav;base64," + base64.b64encode(SPK.read_bytes()).decode()
MODEL = "openbmb/MiniCPM-o-4_5"


# ---- bodies, field by field ----------------------------------------------------------------------

def test_vllm_omni_protocol_voice_placements():
    d = get_dialect("vllm-omni")
    top = d.build_body("Say this.", str(SPK), "Prompt words.", sampling={"seed": 42, "temperature": 0.0})
    assert top == {
        "model": MODEL, "messages": [{"role": "user", "content": [{"type": "text", "text": "Say this."}]}],
        "modalities": ["text", "audio"], "stream": True, "stream_options": {"include_usage": True},
        "chat_template_kwargs": {"use_tts_template": True, "enable_thinking": False},
        "ref_audio": URI, "ref_text": "Prompt words.", "seed": 42, "temperature": 0.0,
    }
    part = d.build_body("Say this.", str(SPK), "Prompt words.", options={"voice_prompt": "audio_url"})
    assert part["messages"][0]["content"] == [{"type": "audio_url", "audio_url": {"url": URI}},
                                              {"type": "text", "text": "Say this."}]
    assert "ref_audio" not in part and "ref_text" not in part
    none = d.build_body("Say this.", str(SPK), "Prompt words.", options={"voice_prompt": "none"})
    assert "ref_audio" not in none and len(none["messages"][0]["content"]) == 1
    assert d.request_config({}).voice_placement == "ref_audio"


def test_vllm_bench_body_is_vllm_bench_serve_seed_tts():
    body = get_dialect("vllm-omni").build_body("Target text.", str(SPK), " Prompt words. ",
                                               sampling={"seed": 42, "temperature": 0.3},
                                               options={"preset": "vllm-bench"})
    assert body == {
        "model": MODEL,
        "messages": [{"role": "system", "content": [{"type": "text", "text": VLLM_BENCH_SYSTEM_PROMPT}]},
                     {"role": "user", "content": [{"type": "text", "text": "Target text."}]}],
        "temperature": 0.0, "max_tokens": 2048, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "ref_audio": URI, "ref_text": "Prompt words.", "task_type": "Base", "language": "English",
        "max_new_tokens": 2048, "modalities": ["text", "audio"],
    }  # the plan's sampling does not apply to a bench preset: the bench sends its own
    assert VLLM_BENCH_SYSTEM_PROMPT.startswith("You are Qwen, a virtual human developed by the Qwen Team")
    assert VLLM_BENCH_SYSTEM_PROMPT.endswith("while reading the new content clearly.")


def test_sglang_bench_bodies_are_benchmark_omni_seedtts():
    d = get_dialect("sglang-omni")
    plain = d.build_body("Target text.", str(SPK), "Prompt words.", sampling={"seed": 1},
                         options={"preset": "sglang-bench"})
    assert plain == {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Please read the following text out loud in English: Target text."}],
        "modalities": ["text", "audio"], "audio": {"format": "wav"}, "max_tokens": 256, "temperature": 0.7,
        "stream": False,
    }
    clone = d.build_body("Target text.", str(SPK), "Prompt words.",
                         options={"preset": "sglang-bench", "voice_prompt": "audios", "stream": True})
    assert clone["messages"] == [{"role": "user", "content":
                                  'Listen to the audio above. The speaker is reading: "Prompt words.". Now please read '
                                  "the following text out loud in the same voice and style: Target text."}]
    assert clone["audios"] == [URI] and clone["stream"] is True and clone["max_tokens"] == 256
    proto = d.build_body("Target text.", str(SPK), None)
    assert proto["audio"] == {"format": "wav", "ref_audio": URI} and "audios" not in proto


def test_template_hash_names_the_body():
    d = get_dialect("vllm-omni")
    h = {o.get("voice_prompt", "-") + o.get("preset", "-"): d.body_template_sha256({"seed": 42}, o) for o in (
        {}, {"voice_prompt": "audio_url"}, {"preset": "vllm-bench"})}
    assert len(set(h.values())) == 3 and all(len(v) == 64 for v in h.values())
    assert d.body_template_sha256({"seed": 42}, {}) == h["--"]  # deterministic
    assert d.body_template({"seed": 42})["ref_audio"] == "{prompt_wav_data_uri}"


@pytest.mark.parametrize("dialect, options, needle", [
    ("sglang-omni", {"preset": "vllm-bench"}, "request.preset"),
    ("vllm-omni", {"preset": "nope"}, "request.preset"),
    ("vllm-omni", {"voice_prompt": "audios"}, "request.voice_prompt"),
    ("vllm-omni", {"preset": "vllm-bench", "stream": False}, "request.stream"),
    ("pcm", {"stream": False}, "request.stream"),
])
def test_bad_request_options_are_one_line_errors(dialect, options, needle):
    with pytest.raises(CampaignError, match=needle) as info:
        get_dialect(dialect).request_config(options)
    assert "\n" not in str(info.value)


def test_truncated_output_is_a_coverage_gap_unless_allowed():
    e = Expected("candidate", "e", 1, 0, "r", 0, "spk01-0001", "ok", finish_reason="length")
    assert "truncated" in truncation_gap(e, minimal_plan(quality={}))
    assert truncation_gap(e, minimal_plan(quality={"allow_truncated": True})) is None
    assert truncation_gap(Expected("candidate", "e", 1, 0, "r", 0, "u", "ok", finish_reason="stop"), minimal_plan()) is None


# ---- the reference engine over real HTTP ----------------------------------------------------------

@pytest.fixture(scope="module")
def wire(tmp_path_factory):
    """One vllm-omni and one sglang-omni reference engine; the vllm one charges 0.4 s of prefill per
    second of thinker input audio (so an audio_url part shows) and emits empty audio deltas."""
    tmp = tmp_path_factory.mktemp("wire")
    profiles = tmp / "profiles.toml"
    profiles.write_text('[profiles.wire]\ninherits = "fast"\ninput_audio_prefill_s = 0.4\nempty_audio_deltas = true\n')
    procs = {"vllm-omni": launch_engine("vllm-omni", "wire", "--profiles-file", str(profiles)),
             "sglang-omni": launch_engine("sglang-omni", "fast")}
    engines = {}
    try:
        for d, p in procs.items():
            engines[d] = wait_ready(p, d, "wire" if d == "vllm-omni" else "fast", timeout_s=90)
        with Store(tmp / "campaign.duckdb") as store:
            yield engines, store, tmp
    finally:
        for e in engines.values():
            stop_engine(e)
        for p in procs.values():
            if p.poll() is None:
                p.kill()


REQS = [RequestSpec("spk01-0001", "A short sentence for the engine.", SPK, "Prompt words one."),
        RequestSpec("spk02-0002", "Another line of speech to render now.", WAVS / "spk02.wav", "Prompt words two.")]


def _drive(wire, dialect, options, name, sampling=None):
    engines, store, tmp = wire
    spec = DriveSpec(name, engines[dialect].url, dialect, 1, REQS, timeout_s=60, artifacts_dir=tmp / "a",
                     sampling=sampling or {"seed": 42, "temperature": 0.0}, request_options=options)
    rid = record_run(store, spec, engine=f"ref-{dialect}", kind="exploratory", telemetry=False)
    rows = store.query("SELECT * FROM requests WHERE run_id = ? ORDER BY request_index", [rid])
    assert [r["outcome"] for r in rows] == ["ok", "ok"], [r["error_detail"] for r in rows]
    run = store.query("SELECT request_preset, voice_placement, body_template_sha256 FROM runs WHERE run_id = ?", [rid])[0]
    return rid, rows, run


@pytest.mark.slow  # 5 s in a loaded `make check`
def test_vllm_omni_presets_and_placements(wire):
    _, store, _ = wire
    d = get_dialect("vllm-omni")
    ref_id, ref, run = _drive(wire, "vllm-omni", {}, "v-ref")
    assert run == {"request_preset": "protocol", "voice_placement": "ref_audio",
                   "body_template_sha256": d.body_template_sha256({"seed": 42, "temperature": 0.0}, {})}
    url_id, url, run_url = _drive(wire, "vllm-omni", {"voice_prompt": "audio_url"}, "v-url")
    _, none, _ = _drive(wire, "vllm-omni", {"voice_prompt": "none"}, "v-none")
    _, bench, run_bench = _drive(wire, "vllm-omni", {"preset": "vllm-bench"}, "v-bench")
    assert run_url["voice_placement"] == "audio_url" and run_bench["request_preset"] == "vllm-bench"
    assert len({run["body_template_sha256"], run_url["body_template_sha256"], run_bench["body_template_sha256"]}) == 3
    # the voice arriving as top-level ref_audio is the same voice as the same prompt in an audio_url part
    for a, b, c, e in zip(ref, url, bench, none):
        assert a["audio_sha256"] == b["audio_sha256"] == c["audio_sha256"] != e["audio_sha256"]
    # ... but only the audio_url part is thinker input: its prefill delays the first audio
    assert run_metrics(store, url_id).ttfa_p50_s > run_metrics(store, ref_id).ttfa_p50_s + 0.5


def test_empty_audio_deltas_are_not_audio(wire):
    _, store, _ = wire
    rid, rows, _ = _drive(wire, "vllm-omni", {}, "v-empty")
    for r in rows:
        chunks = store.query("SELECT kind, samples, t_arrival_ns FROM chunks WHERE run_id = ? AND request_index = ? "
                             "ORDER BY chunk_index", [rid, r["request_index"]])
        first_audio = next(i for i, c in enumerate(chunks) if c["samples"] > 0)
        assert any(c["kind"] == "other" and c["samples"] == 0 for c in chunks[:first_audio])  # the empty delta
        assert r["t_first_audio_ns"] == chunks[first_audio]["t_arrival_ns"] and r["finish_reason"] == "stop"


@pytest.mark.slow  # 5 s in a loaded `make check`
def test_sglang_omni_presets_and_stream_false(wire):
    _, streamed, _ = _drive(wire, "sglang-omni", {}, "s-ref")
    _, whole, run = _drive(wire, "sglang-omni", {"stream": False}, "s-whole")
    assert run["voice_placement"] == "ref_audio"
    for s, w in zip(streamed, whole):  # stream:false returns the whole audio in one response
        assert w["audio_sha256"] == s["audio_sha256"] and w["audio_chunks"] == 1
        assert w["t_first_audio_ns"] == w["t_last_audio_ns"] and w["finish_reason"] == "stop"
    _, bench, run_b = _drive(wire, "sglang-omni", {"preset": "sglang-bench"}, "s-bench")
    assert (run_b["request_preset"], run_b["voice_placement"]) == ("sglang-bench", "none")
    assert all(b["audio_chunks"] == 1 for b in bench)  # the bench's default: not streamed
    _, clone, run_c = _drive(wire, "sglang-omni", {"preset": "sglang-bench", "voice_prompt": "audios", "stream": True},
                             "s-clone")
    assert run_c["voice_placement"] == "audios"


@pytest.mark.slow  # 2.5 s or more in the full run of 2026-12-03 (docs/testing.md)
def test_max_tokens_caps_thinker_text_and_is_counted_truncated(wire):
    _, store, _ = wire
    full_id, full, _ = _drive(wire, "vllm-omni", {}, "v-full")
    cut_id, cut, _ = _drive(wire, "vllm-omni", {}, "v-cut", sampling={"seed": 42, "temperature": 0.0, "max_tokens": 3})
    for f, c in zip(full, cut):
        assert c["finish_reason"] == "length" and f["finish_reason"] == "stop"
        assert 0 < c["audio_samples"] < f["audio_samples"] and len(c["text"]) <= 12
    m = run_metrics(store, cut_id)
    assert m.truncated == 2 and m.completed == 2 and run_metrics(store, full_id).truncated == 0
    assert m.e2e_p50_s >= m.ttfa_p50_s > 0 and m.e2e_p95_s >= m.e2e_p50_s


@pytest.mark.slow  # 4 s in a loaded `make check`
def test_probe_prints_e2e_and_counts_truncated(wire, tmp_path):
    engines, _, _ = wire
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "console.cli", "probe", "--url", engines["vllm-omni"].url,
                          "--dialect", "vllm-omni", "-c", "1", "-n", "2", "--max-tokens", "3", "--no-telemetry",
                          "--db", str(tmp_path / "p.duckdb"), "--artifacts", str(tmp_path / "a"),
                          "--json", str(tmp_path / "m.json")],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = {line.split("│")[1].strip(): line for line in out.stdout.splitlines() if line.count("│") >= 3}
    assert "e2e p50" in lines and "e2e p95" in lines and "ms" in lines["e2e p50"]
    assert lines["truncated"].split("│")[2].strip() == "2"
    assert "25 × audio s / wall s" in lines["audio tok/s"]
    doc = json.loads((tmp_path / "m.json").read_text())["metrics"]
    assert doc["truncated"] == 2 and doc["e2e_p95_s"] >= doc["e2e_p50_s"] > 0
