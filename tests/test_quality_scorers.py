"""Real scorers on real audio: SIM (identical vs different speakers), DNSMOS on a noisy copy,
pocketsphinx through the process pool, and the model-folder scorers (whisper, wavlm-ecapa)
loaded for real on CPU from tiny randomly initialised checkpoints; a missing folder is
'unavailable', never a crash or a download."""

from __future__ import annotations

import socket

import numpy as np
import pytest
import soundfile as sf

from data.plan_model import QualitySpec
from stats.quality.audio import load_audio
from stats.quality.base import ScoreItem, ScorerUnavailable
from stats.quality.registry import make_scorer, model_dir_for, scorer_status
from stats.quality.tiny_checkpoints import build_tiny_wavlm, build_tiny_whisper
from test_quality_support import SPEAKERS, TARGETS, synth


@pytest.fixture(scope="module")
def wavs(tmp_path_factory):
    d = tmp_path_factory.mktemp("wavs")
    out = {}
    for spk, voice in SPEAKERS.items():
        for tid, text in TARGETS.items():
            pcm, sr = synth(text, **voice)
            sf.write(d / f"{spk}-{tid}.wav", pcm, sr, subtype="PCM_16")
            out[f"{spk}-{tid}"] = d / f"{spk}-{tid}.wav"
    clean = load_audio(out["spk1-t1"])
    rng = np.random.default_rng(7)
    noisy = np.clip(clean + 0.08 * rng.standard_normal(len(clean)), -1, 1).astype(np.float32)
    sf.write(d / "noisy.wav", noisy, 16000, subtype="PCM_16")
    out["noisy"] = d / "noisy.wav"
    return out


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a network connection fails the test."""
    def refuse(*a, **k):
        raise AssertionError(f"network access attempted: {a[1:] if len(a) > 1 else a}")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.mark.slow  # a speaker model on CPU
def test_resemblyzer_identical_vs_other_speaker(wavs):
    s = make_scorer("resemblyzer", device="cpu")
    same = s.similarity(load_audio(wavs["spk1-t1"]), load_audio(wavs["spk1-t1"]))
    same_spk = s.similarity(load_audio(wavs["spk1-t1"]), load_audio(wavs["spk1-t2"]))
    other = s.similarity(load_audio(wavs["spk1-t1"]), load_audio(wavs["spk2-t1"]))
    assert same == pytest.approx(100.0, abs=0.01)
    assert other < same_spk - 10 and other < 85, (same_spk, other)
    # batch path: output vs prompt
    items = [ScoreItem("r", 0, "u", wavs["spk1-t1"], "x", wavs["spk1-t1"]),
             ScoreItem("r", 1, "u", wavs["spk2-t1"], "x", wavs["spk1-t1"]),
             ScoreItem("r", 2, "u", wavs["spk2-t1"].with_name("absent.wav"), "x", wavs["spk1-t1"])]
    res = s.score_batch(items)
    assert res[0].value == pytest.approx(100.0, abs=0.01) and res[1].value < 85
    assert res[2].status == "error" and "absent.wav" in res[2].error


def test_dnsmos_falls_for_noisy_copy(wavs):
    s = make_scorer("dnsmos", workers=1)
    clean = s.score_wave(load_audio(wavs["spk1-t1"]))
    noisy = s.score_wave(load_audio(wavs["noisy"]))
    assert 1.0 <= noisy < clean - 0.5 <= 5.0, (clean, noisy)
    assert s.label.startswith("DNSMOS") and "utmos" not in s.scorer_id


@pytest.mark.slow  # 13 s in a loaded `make check`
def test_dnsmos_ovrl_equals_speechmos(wavs):
    """Our DNSMOS keeps one session and skips the unused P.808 branch; the OVRL value must stay
    exactly speechmos' (short clips are looped; a 10.5 s clip takes the multi-window path)."""
    from speechmos import dnsmos as speechmos_dnsmos
    from stats.quality.dnsmos import dnsmos_ovrl

    clips = [load_audio(wavs[k]) for k in ("spk1-t1", "spk2-t2", "noisy")]
    clips.append(np.concatenate([clips[0], clips[1], clips[0], clips[1]])[:168000])
    ours = [dnsmos_ovrl(c) for c in clips]
    theirs = [float(speechmos_dnsmos.run(c, 16000)["ovrl_mos"]) for c in clips]
    assert ours == pytest.approx(theirs, abs=1e-9, rel=0), (ours, theirs)


@pytest.mark.slow  # a scorer process pool
def test_pocketsphinx_pool_matches_in_process(wavs):
    items = [ScoreItem("r", i, k, p, TARGETS[k.split("-")[1]], None)
             for i, (k, p) in enumerate(sorted((k, p) for k, p in wavs.items() if k != "noisy")[:3])] * 2
    pooled = make_scorer("pocketsphinx", workers=2)
    single = make_scorer("pocketsphinx", workers=1)
    try:
        a = pooled.score_batch(items)
        assert pooled._pool is not None  # 6 items >= POOL_MIN_BATCH: the worker pool ran them
        b = single.score_batch(items[:3])
    finally:
        pooled.close()
    assert all(r.status == "ok" for r in a)
    # a transcript depends on its audio only: same in every worker, in-process, in any order
    assert [r.hypothesis for r in a[:3]] == [r.hypothesis for r in a[3:]] == [r.hypothesis for r in b]
    assert all(r.wer.ref_words == 8 for r in a) and all(r.value == r.wer.errors / 8 for r in a)


def test_missing_whisper_dir_is_unavailable_not_a_crash(tmp_path, no_network, monkeypatch):
    monkeypatch.delenv("CAMPAIGN_WHISPER_DIR", raising=False)
    s = make_scorer("whisper")
    ok, why = s.available()
    assert not ok and "CAMPAIGN_WHISPER_DIR" in why
    missing = tmp_path / "whisper-large-v3"
    s = make_scorer("whisper", {"whisper": str(missing)})
    ok, why = s.available()
    assert not ok and "does not exist" in why
    with pytest.raises(ScorerUnavailable, match="unavailable"):
        s.ensure_loaded()
    missing.mkdir()
    (missing / "config.json").write_text('{"model_type": "whisper"}')
    assert "no model weights" in make_scorer("whisper", {"whisper": str(missing)}).available()[1]
    status = scorer_status(QualitySpec(scorers={"wer": "whisper", "sim": "resemblyzer", "mos": "utmos22"},
                                       model_paths={"whisper": str(tmp_path / "nope")}))
    assert status["wer"].startswith("unavailable: ") and status["sim"] == "ok"
    assert status["mos"].startswith("unavailable: ")


def test_model_dir_precedence(tmp_path):
    assert model_dir_for("whisper", {"whisper": "/plan/w"}, env={"CAMPAIGN_WHISPER_DIR": "/env/w"}).as_posix() == "/plan/w"
    assert model_dir_for("whisper", {}, env={"CAMPAIGN_WHISPER_DIR": "/env/w"}).as_posix() == "/env/w"
    assert model_dir_for("wavlm-ecapa", None, env={"CAMPAIGN_WAVLM_DIR": "/env/v"}).as_posix() == "/env/v"
    assert model_dir_for("pocketsphinx", None, env={}) is None


def test_utmos22_reports_unavailable_honestly(tmp_path):
    (tmp_path / "utmos22_strong_step7459_v1.pt").write_bytes(b"\0" * 16)
    ok, why = make_scorer("utmos22", {"utmos22": str(tmp_path)}).available()
    assert not ok and "utmos22_strong_step7459_v1.pt is not a PyTorch checkpoint" in why  # 16 zero bytes


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return build_tiny_whisper(root / "whisper-tiny-random"), build_tiny_wavlm(root / "wavlm-tiny-random")


@pytest.mark.slow  # a Whisper model on CPU
def test_tiny_whisper_loads_and_batches_on_cpu(tiny_models, wavs, no_network):
    wdir, _ = tiny_models
    s = make_scorer("whisper", {"whisper": str(wdir)}, device="cpu", batch_size=2)
    assert s.available() == (True, "ok")
    items = [ScoreItem("r", i, k, wavs[k], TARGETS["t1"], None) for i, k in enumerate(["spk1-t1", "spk1-t2", "spk2-t1"])]
    res = s.score_batch(items)
    assert [r.status for r in res] == ["ok"] * 3, [r.error for r in res]
    assert sorted(s.last_batches) == [1, 2]  # 3 clips in batches of 2
    assert all(isinstance(r.hypothesis, str) and r.wer.ref_words == 8 for r in res)
    assert s.transcribe([load_audio(wavs["spk1-t1"])]) == [res[0].hypothesis]  # greedy: deterministic
    assert len(s.model_hash) == 64 and "whisper" in s.version


@pytest.mark.slow  # a WavLM model on CPU (tiny_models: 8 s to set up)
def test_tiny_wavlm_loads_and_scores_on_cpu(tiny_models, wavs, no_network):
    _, vdir = tiny_models
    s = make_scorer("wavlm-ecapa", {"wavlm-ecapa": str(vdir)}, device="cpu", batch_size=2)
    assert s.available() == (True, "ok")
    items = [ScoreItem("r", 0, "u", wavs["spk1-t1"], "x", wavs["spk1-t1"]),
             ScoreItem("r", 1, "u", wavs["spk2-t2"], "x", wavs["spk1-t1"]),
             ScoreItem("r", 2, "u", wavs["spk1-t2"], "x", wavs["spk2-t1"])]
    res = s.score_batch(items)
    assert [r.status for r in res] == ["ok"] * 3
    assert res[0].value == pytest.approx(100.0, abs=0.05)
    assert all(-100.0 <= r.value <= 100.0 for r in res)


def test_wavlm_raw_pth_folder_is_unavailable(tmp_path):
    (tmp_path / "wavlm_large_finetune.pth").write_bytes(b"\0")
    ok, why = make_scorer("wavlm-ecapa", {"wavlm-ecapa": str(tmp_path)}).available()
    assert not ok and "wavlm_large_finetune.pth" in why
