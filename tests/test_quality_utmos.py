"""`utmos22` scorer: loading a TorchScript export, 16 kHz resampling, equal-length-only batching,
honest "unavailable" reasons, and scoring through the project's scoring runner.

The real UTMOS22 strong weights cannot be fetched here (no network), so the model under test is
a small real TorchScript program with the SpeechMOS call signature `forward(wave[B, T], sr) ->
MOS[B]` (a conv front end whose frame scores are averaged over time, like UTMOS). Everything
between the stored WAV and that program (discovery, archive checks, loading, resampling, batching,
per-clip errors, row writing) is the production path."""

from __future__ import annotations

import hashlib
import math
import socket

import numpy as np
import pytest
import soundfile as sf
import soxr
import torch

from data.plan_model import QualitySpec
from stats.quality.audio import load_audio
from stats.quality.base import ScoreItem
from stats.quality.registry import make_scorer, scorer_status
from stats.quality.scoring import score_plan, scores_frame
from stats.quality.utmos import (EXPORT_NAME, Utmos22Scorer, equal_length_groups, export_torchscript,
                                 read_export_meta, torchscript_problem)
from test_quality_support import add_run, campaign_setup

PROMPTS = ["spk01.wav", "spk02.wav", "spk03.wav"]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


class TinyMos(torch.nn.Module):
    """Frame scores from a strided conv, averaged over the clip, mapped to the MOS scale."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(7)
        self.conv = torch.nn.Conv1d(1, 8, kernel_size=400, stride=320)
        self.head = torch.nn.Linear(8, 1)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)

    def forward(self, wave: torch.Tensor, sr: int) -> torch.Tensor:
        if sr != 16000:
            raise RuntimeError("UTMOS22 expects 16 kHz input")
        frames = torch.tanh(self.conv(wave.unsqueeze(1)))          # (B, 8, F)
        return self.head(frames.transpose(1, 2)).mean(dim=1).squeeze(1) * 2 + 3


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A folder holding a scripted (wave, sr) predictor under the accepted file name."""
    d = tmp_path_factory.mktemp("utmos22")
    torch.jit.script(TinyMos().eval()).save(str(d / EXPORT_NAME))
    return d


@pytest.fixture(scope="module")
def wavs(tmp_path_factory):
    """Three 16 kHz sample-workload prompts, a 24 kHz stereo copy of the first, an exact copy
    of the second (equal length: may share a forward call) and a clip too short for the model."""
    from pathlib import Path
    src = Path(__file__).resolve().parents[1] / "data/sample_workload/en/prompt-wavs"
    d = tmp_path_factory.mktemp("wavs")
    paths = [src / p for p in PROMPTS]
    pcm, sr = sf.read(str(paths[0]), dtype="float32")
    assert sr == 16000
    up = soxr.resample(pcm, 16000, 24000, quality="HQ")
    sf.write(d / "spk01-24k-stereo.wav", np.stack([up, up], axis=1), 24000, subtype="FLOAT")
    (d / "spk02-copy.wav").write_bytes(paths[1].read_bytes())
    sf.write(d / "short.wav", np.zeros(100, np.float32), 16000)
    return paths + [d / "spk01-24k-stereo.wav", d / "spk02-copy.wav", d / "short.wav"]


def items(paths):
    return [ScoreItem("r", i, p.stem, p, "", None) for i, p in enumerate(paths)]


def direct(module, wav: np.ndarray, device: str = "cpu") -> float:
    """The module called by hand on the scorer's device (GPU and CPU kernels differ in the last bits)."""
    with torch.no_grad():
        return float(module(torch.from_numpy(wav)[None].to(device), 16000)[0])


@pytest.mark.parametrize("device", DEVICES)
def test_scores_equal_the_module_on_16k_audio(model_dir, wavs, device):
    s = make_scorer("utmos22", {"utmos22": str(model_dir)}, device=device)
    assert isinstance(s, Utmos22Scorer) and s.available() == (True, "ok")
    assert s.label == "UTMOS22 strong" and s.scorer_id == "utmos22" and s.metric == "mos"
    res = s.score_batch(items(wavs))
    ref = torch.jit.load(str(model_dir / EXPORT_NAME), map_location=device)
    for r, p in zip(res[:3], wavs[:3]):
        assert r.status == "ok" and math.isfinite(r.value)
        assert r.value == pytest.approx(direct(ref, sf.read(str(p), dtype="float32")[0], device), abs=1e-5)
    # 24 kHz stereo: resampled to 16 kHz mono by the loader, scored as the module scores that
    assert res[3].value == pytest.approx(direct(ref, load_audio(wavs[3]), device), abs=1e-5)
    assert res[3].value == pytest.approx(res[0].value, abs=2e-3)  # and close to the 16 kHz original
    assert res[4].value == pytest.approx(res[1].value, abs=1e-5)
    assert res[5].status == "error" and "Kernel size" in res[5].error  # one bad clip, the rest scored
    assert len({r.value for r in res[:3]}) == 3
    # equal lengths share a forward call (spk02 + its copy; spk01 + its 24k round trip), and the
    # batched scores equal the one-clip calls above; the rest run one clip per call
    assert len(load_audio(wavs[3])) == len(load_audio(wavs[0]))
    assert sorted(s.last_calls) == [1, 1, 2, 2]
    s.close()


def test_deterministic_and_padding_would_change_scores(model_dir, wavs):
    a = make_scorer("utmos22", {"utmos22": str(model_dir)}, device="cpu").score_batch(items(wavs[:3]))
    b = make_scorer("utmos22", {"utmos22": str(model_dir)}, device="cpu", batch_size=1).score_batch(items(wavs[:3]))
    assert [r.value for r in a] == [r.value for r in b]
    # why clips are never zero-padded into one batch: the frame average moves
    ref = torch.jit.load(str(model_dir / EXPORT_NAME))
    w = load_audio(wavs[0])
    padded = np.concatenate([w, np.zeros(16000, np.float32)])
    assert abs(direct(ref, padded) - direct(ref, w)) > 1e-3


def test_equal_length_groups():
    assert equal_length_groups([5, 3, 5, 5, 3, 7], 2) == [[0, 2], [3], [1, 4], [5]]
    assert equal_length_groups([], 4) == []


def test_unavailable_reasons_without_network(tmp_path, monkeypatch):
    def no_network(*a, **k):
        raise AssertionError("utmos22 tried to open a network connection")
    monkeypatch.setattr(socket.socket, "connect", no_network)

    def why(path):
        s = make_scorer("utmos22", {"utmos22": str(path)} if path else {}, device="cpu")
        ok, reason = s.available()
        assert not ok
        return reason

    monkeypatch.delenv("CAMPAIGN_UTMOS_DIR", raising=False)
    assert "no UTMOS22 model directory configured" in why(None)
    assert "does not exist" in why(tmp_path / "missing")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "utmos22_strong_step7459_v1.pt").write_bytes(b"\0" * 16)
    r = why(ckpt)  # the release file name, but not a checkpoint (16 zero bytes)
    assert "utmos22_strong_step7459_v1.pt is not a PyTorch checkpoint" in r
    other = tmp_path / "other"
    other.mkdir()
    (other / "model.ckpt").write_bytes(b"\0" * 16)
    r = why(other)
    assert "holds model.ckpt but neither utmos22_strong_step7459_v1.pt" in r and "docs/utmos22.md" in r
    assert "is a file" in why(ckpt / "utmos22_strong_step7459_v1.pt")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert f"neither utmos22_strong_step7459_v1.pt nor {EXPORT_NAME}" in why(empty)
    plain = tmp_path / "plain"
    plain.mkdir()
    torch.save(TinyMos().state_dict(), plain / EXPORT_NAME)  # right name, but a state dict
    assert "plain PyTorch checkpoint" in why(plain) and torchscript_problem(plain / EXPORT_NAME)
    status = scorer_status(QualitySpec(scorers={"mos": "utmos22"}, model_paths={"utmos22": str(ckpt)}))
    assert status["mos"].startswith("unavailable: ") and "not a PyTorch checkpoint" in status["mos"]


def test_export_recipe_round_trip(tmp_path, wavs):
    """export_torchscript (the docs/utmos22.md recipe) on an eager (wave, sr) predictor."""
    eager = TinyMos().eval()
    path = export_torchscript(eager, tmp_path, source="test:TinyMos")
    assert path.name == EXPORT_NAME and torchscript_problem(path) is None
    meta = read_export_meta(path)
    assert meta["source"] == "test:TinyMos" and meta["sample_rate"] == 16000 and meta["method"] == "script"
    s = Utmos22Scorer(tmp_path, device="cpu")
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert s.version == f"{EXPORT_NAME} sha256:{sha[:12]} test:TinyMos"
    assert len(s.model_hash) == 64
    (r,) = s.score_batch(items(wavs[:1]))
    assert r.value == pytest.approx(direct(eager, load_audio(wavs[0])), abs=1e-5)


def test_score_plan_writes_utmos22_rows(tmp_path, model_dir):
    store, plan, wl, art = campaign_setup(tmp_path, scorers={"wer": "pocketsphinx", "sim": "resemblyzer", "mos": "utmos22"},
                                          model_paths={"utmos22": str(model_dir)})
    try:
        add_run(store, plan, "base-c1", "ref-base", art, wl)
        add_run(store, plan, "cand-c1", "ref-cand", art, wl, fail={"spk2-t2": "timeout"})
        (summary,) = score_plan(store, plan, scorers=["utmos22"], artifacts_dir=art)
        assert (summary.scorer_id, summary.scored_ok, summary.scored_error) == ("utmos22", 7, 0)
        rows = store.query("SELECT q.*, r.audio_path FROM quality_scores q JOIN requests r USING (run_id, request_index) "
                           "WHERE q.scorer_id = 'utmos22' ORDER BY q.run_id, q.request_index")
        assert len(rows) == 7 and store.scalar("SELECT count(*) FROM quality_scores") == 7
        device = "cuda" if torch.cuda.is_available() else "cpu"  # where the scorer ran
        ref = torch.jit.load(str(model_dir / EXPORT_NAME), map_location=device)
        for r in rows:
            assert r["status"] == "ok" and r["metric"] == "mos" and len(r["model_hash"]) == 64
            assert r["scorer_version"].startswith(f"{EXPORT_NAME} sha256:")
            assert r["value"] == pytest.approx(direct(ref, load_audio(art / r["audio_path"]), device), abs=1e-5)
        again = score_plan(store, plan, scorers=["utmos22"], artifacts_dir=art)
        assert again[0].existing == 7 and store.scalar("SELECT count(*) FROM quality_scores") == 7
        df = scores_frame(store, plan, art)
        assert df.attrs["scorers"]["mos"] == "utmos22" and df.attrs["labels"]["mos"] == "UTMOS22 strong"
        scored = df[df["mos"].notna()]
        assert len(scored) == 7 and scored["mos"].apply(math.isfinite).all()
    finally:
        store.close()
