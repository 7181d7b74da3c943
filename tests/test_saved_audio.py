"""Saved output audio is FLAC (engine_adapters/driver/decode.py; docs/results.md, "Saved audio"): a
real reference engine's output stored the new way holds exactly the int16 samples of the WAV the
console used to write, every reader gets the same samples from both, and the bundled scorers give
the same scores on both; a run's artifacts are FLAC, identical outputs stored once; old WAV
artifacts still read and score."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
import soundfile as sf
from plans_helpers import free_port
from reference_server import chat_body, collect_audio, launch_engine, stop_engine, stream, wait_ready

from console.recording import launch_engine as launch_spec
from console.recording import record_run, stop_engine as stop_spec
from data.hashing import sha256_bytes
from data.plan_model import EngineSpec
from engine_adapters.dialects.wav import encode_wav
from engine_adapters.driver import DriveSpec, RequestSpec
from engine_adapters.driver.decode import CONTENT_DIR, encode_flac, store_audio
from stats.quality.audio import read_native
from stats.quality.base import ScoreItem
from stats.quality.registry import make_scorer
from stats.quality.scoring import score_files

TEXT = "The quick brown fox jumps over the lazy dog near the river bank."


@pytest.fixture(scope="module")
def engine_pcm():
    """24 kHz int16 samples of one real reference-engine answer, as streamed (its WAV deltas)."""
    proc = launch_engine("vllm-omni", "baseline")
    eng = wait_ready(proc, "vllm-omni", "baseline")
    try:
        res = stream(eng.url, chat_body("vllm-omni", TEXT), timeout_s=60)
        assert res.status == 200 and res.done
        samples = collect_audio("vllm-omni", res)
    finally:
        stop_engine(eng)
    assert samples.size > 24_000
    return samples


def test_flac_holds_the_samples_of_the_wav_it_replaces(engine_pcm, tmp_path):
    pcm = engine_pcm.astype("<i2").tobytes()
    wav = tmp_path / "old.wav"
    wav.write_bytes(encode_wav(pcm, 24_000))  # what the console saved before
    flac_bytes = encode_flac(pcm, 24_000)
    sha = store_audio(tmp_path / "art", "run/0-utt.flac", flac_bytes)
    flac = tmp_path / "art" / "run" / "0-utt.flac"
    assert sha == sha256_bytes(flac.read_bytes()) == sha256_bytes(flac_bytes)
    assert sf.info(str(flac)).format == "FLAC" and sf.info(str(flac)).subtype == "PCM_16"
    wav_int16, wav_rate = sf.read(str(wav), dtype="int16")
    flac_int16, flac_rate = sf.read(str(flac), dtype="int16")
    assert wav_rate == flac_rate == 24_000
    assert np.array_equal(flac_int16, wav_int16) and np.array_equal(flac_int16, engine_pcm)
    # every reader (scoring, equivalence: stats.quality.audio.read_native) gets identical samples
    (a, ra), (b, rb) = read_native(wav), read_native(flac)
    assert ra == rb and a.dtype == b.dtype == np.float32 and np.array_equal(a, b)
    assert flac.stat().st_size < wav.stat().st_size


@pytest.mark.slow  # loads the bundled WER and MOS models (about 6 s)
def test_scores_are_the_same_on_flac_and_wav(engine_pcm, tmp_path):
    pcm = engine_pcm.astype("<i2").tobytes()
    wav, flac = tmp_path / "a.wav", tmp_path / "a.flac"
    wav.write_bytes(encode_wav(pcm, 24_000))
    flac.write_bytes(encode_flac(pcm, 24_000))
    for name in ("pocketsphinx", "dnsmos"):
        scorer = make_scorer(name, device="cpu")
        try:
            got = score_files(scorer, [ScoreItem("t", i, "utt", p, TEXT, None) for i, p in enumerate((wav, flac))])
        finally:
            scorer.close()
        assert [r.status for r in got] == ["ok", "ok"], [r.error for r in got]
        assert got[0].value == got[1].value and got[0].hypothesis == got[1].hypothesis, name


@pytest.mark.slow  # a reference engine and a run (about 4 s)
def test_a_run_saves_flac_and_identical_outputs_once(store, tmp_path, prompt):
    port = free_port()
    argv = (sys.executable, "-m", "engine_adapters.reference", "--dialect", "vllm-omni", "--profile", "baseline",
            "--port", str(port))
    eng = launch_spec(store, EngineSpec("ref", "reference", "vllm-omni", argv=argv, port=port, health_timeout_s=90,
                                        profile="baseline"), log_dir=tmp_path / "logs")
    art = tmp_path / "artifacts"
    try:
        reqs = [RequestSpec(f"spk-{i % 2}", TEXT if i % 2 == 0 else TEXT[:30], prompt, "prompt") for i in range(4)]
        spec = DriveSpec("flac-run", eng.spec.url, "vllm-omni", 2, reqs, timeout_s=60, artifacts_dir=art,
                         sampling={"seed": 42, "temperature": 0.0})
        run_id = record_run(store, spec, engine="ref", kind="exploratory", telemetry=False)
    finally:
        stop_spec(store, eng, grace_s=2)
    rows = store.query("SELECT request_index, audio_path, audio_sha256, audio_samples FROM requests WHERE run_id = ? "
                       "ORDER BY request_index", [run_id])
    assert len(rows) == 4
    for r in rows:
        path = art / r["audio_path"]
        assert path.suffix == ".flac" and sha256_bytes(path.read_bytes()) == r["audio_sha256"]
        samples, rate = sf.read(str(path), dtype="int16")
        assert rate == 24_000 and len(samples) == r["audio_samples"]
    # the same request twice gives the same audio: one file on disk, linked from both requests
    by_sha: dict[str, set[int]] = {}
    for r in rows:
        by_sha.setdefault(r["audio_sha256"], set()).add(os.stat(art / r["audio_path"]).st_ino)
    assert len(by_sha) == 2 and all(len(inodes) == 1 for inodes in by_sha.values())
    assert sorted(p.name for p in (art / CONTENT_DIR).rglob("*.flac")) == sorted(f"{s}.flac" for s in by_sha)
    assert not list(art.rglob("*.part")) and not list(art.rglob("*.link"))
