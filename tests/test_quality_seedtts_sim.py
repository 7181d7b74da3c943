"""`seedtts-sim`: the seed-tts-eval speaker-verification model (WavLM + ECAPA-TDNN small) loaded
through the real loader from tiny random checkpoints written in the published formats and key
names (`wavlm_large.pt` = {'cfg', 'model'} in unilm/s3prl keys, `wavlm_large_finetune.pth` =
{'model'} in UniSpeech ECAPA_TDNN_SMALL keys). Sources read for the layouts and semantics
(cited in docs/quality.md): s3prl/s3prl@7ab62aaf s3prl/upstream/wavlm/{WavLM,modules,expert}.py,
BytedanceSpeech/seed-tts-eval@752f4297 thirdparty/UniSpeech/downstreams/speaker_verification/
{models/ecapa_tdnn.py,verification.py,verification_pair_list_v2.py}.

Checks: determinism; batched == one clip at a time; WavLM hidden states == transformers'
WavLMModel on the same weights (both extractor modes, pre- and post-LayerNorm); the head ==
an unmasked reference written from UniSpeech's forward with torch's own InstanceNorm1d and
softmax; bad folders are "unavailable: <why>" and make the SIM gates INCONCLUSIVE."""

from __future__ import annotations

import math

import numpy as np
import pytest
import soundfile as sf
import torch
import torch.nn.functional as F

from data.plan_model import QualitySpec
from stats.controls import baseline_table, with_candidate
from stats.gates import INCONCLUSIVE, PASS, GateConfig, evaluate_gates
from stats.quality.base import ScoreItem, ScorerUnavailable
from stats.quality.registry import make_scorer, scorer_status
from stats.quality.resample import resample_sinc, sinc_kernel
from stats.quality.sim import SeedTtsSimScorer
from stats.quality.sv_checkpoint import SSL_FILE, SSL_PREFIX, SV_FILE
from stats.quality.tiny_checkpoints import TINY_WAVLM_CFG, build_tiny_seedtts_sim
from stats.quality.wavlm import WavLM, WavLMConfig, parse_conv_layers

LENGTHS = (3000, 16000, 8123, 400, 11111, 20000)


def _waves(seed: int = 0, lengths=LENGTHS) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    t = [np.arange(n) / 16000 for n in lengths]
    return [(0.3 * np.sin(2 * np.pi * (120 + 40 * i) * x) + 0.05 * rng.standard_normal(len(x))).astype(np.float32)
            for i, x in enumerate(t)]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_tiny_seedtts_sim(tmp_path_factory.mktemp("seedtts-sim"), seed=3)


@pytest.fixture(scope="module")
def scorer(folder):
    s = SeedTtsSimScorer(folder, device="cpu", batch_size=4)
    s.ensure_loaded()
    return s


def test_loads_published_layout_and_is_deterministic(folder, scorer, tmp_path):
    assert scorer.available() == (True, "ok")
    assert scorer.describe()["ssl_weights"] == "finetuned" and scorer.describe()["dtype"] == "float32"
    again = build_tiny_seedtts_sim(tmp_path / "again", seed=3)
    other = SeedTtsSimScorer(again, device="cpu", batch_size=4)
    assert other.model_hash == scorer.model_hash  # same seed, same bytes, same hash
    assert "float32" in scorer.version and scorer.model_hash[:12] in scorer.version
    w = _waves()
    a, b = scorer.embed(w), other.embed(w)
    for x, y in zip(a, b):
        assert np.array_equal(x, y)
    assert SeedTtsSimScorer(again, device="cpu", dtype="float16").model_hash != scorer.model_hash


@pytest.mark.slow  # a speaker model, batched and alone
def test_batched_equals_one_at_a_time(scorer):
    w = _waves(1)
    batched = scorer.embed(w)
    assert scorer.last_batches == [4, 2]
    for x, e in zip(w, batched):
        single = scorer.embed([x])[0]
        assert np.abs(single - e).max() <= 1e-5 * max(1.0, np.abs(single).max()), len(x)
    # SIM between batched embeddings equals SIM of one-at-a-time embeddings
    from stats.quality.sim import cosine100
    singles = [scorer.embed([x])[0] for x in w]
    for i in range(1, len(w)):
        assert cosine100(batched[0], batched[i]) == pytest.approx(cosine100(singles[0], singles[i]), abs=1e-3)


@pytest.mark.slow  # a speaker model over many files
def test_files_at_several_rates_score_as_each_file_resampled_alone(folder, tmp_path):
    """score_batch reads outputs and prompts at their own rates and resamples each rate's padded
    batch at once on the device (stats.quality.resample.padded_batch): every SIM equals the one
    from embedding each file read and resampled alone (load_audio, sinc)."""
    import soundfile as sf

    from stats.quality.audio import load_audio
    from stats.quality.base import ScoreItem
    from stats.quality.sim import cosine100

    def wav(name, n, rate, seed):
        p = tmp_path / name
        sf.write(p, _waves(seed, (n,))[0], rate)
        return p

    prompts = [wav("p0.wav", 30000, 24000, 7), wav("p1.wav", 20000, 16000, 8)]
    outs = [wav(f"o{i}.wav", n, r, i) for i, (n, r) in enumerate([(24000, 24000), (31001, 24000), (9000, 22050),
                                                                   (16000, 16000), (44100, 44100)])]
    s = SeedTtsSimScorer(folder, device="cpu", batch_size=8)
    items = [ScoreItem("r", i, "u", o, "", prompts[i % 2]) for i, o in enumerate(outs)]
    res = s.score_batch(items)
    alone = SeedTtsSimScorer(folder, device="cpu", batch_size=1)
    for it, r in zip(items, res):
        a = alone.embed([load_audio(it.audio_path, resampler="sinc")])[0]
        b = alone.embed([load_audio(it.prompt_wav, resampler="sinc")])[0]
        assert r.status == "ok" and r.value == pytest.approx(cosine100(a, b), abs=1e-4)


def test_too_short_clip_is_an_error_not_a_crash(scorer, tmp_path):
    short, ok = tmp_path / "short.wav", tmp_path / "ok.wav"
    sf.write(short, np.zeros(200, dtype=np.float32), 16000)
    sf.write(ok, _waves(2)[1], 16000)
    res = scorer.score_batch([ScoreItem("r", 0, "u", short, "", ok), ScoreItem("r", 1, "u", ok, "", ok)])
    assert res[0].status == "error" and "too short" in res[0].error
    assert res[1].status == "ok" and res[1].value == pytest.approx(100.0, abs=1e-3)


def _hf_state(sd: dict, cfg: WavLMConfig) -> dict:
    """unilm/s3prl WavLM keys -> transformers WavLMModel keys."""
    out = {}
    for k, v in sd.items():
        n = k
        n = n.replace("feature_extractor.conv_layers.", "FE.")
        if n.startswith("FE."):
            i, rest = n[3:].split(".", 1)
            rest = {"0.weight": "conv.weight", "0.bias": "conv.bias", "2.1.weight": "layer_norm.weight",
                    "2.1.bias": "layer_norm.bias", "2.weight": "layer_norm.weight", "2.bias": "layer_norm.bias"}[rest]
            n = f"feature_extractor.conv_layers.{i}.{rest}"
        elif n.startswith("layer_norm."):
            n = "feature_projection." + n
        elif n.startswith("post_extract_proj."):
            n = n.replace("post_extract_proj.", "feature_projection.projection.")
        elif n == "mask_emb":
            n = "masked_spec_embed"
        elif n.startswith("encoder.pos_conv.0."):
            n = n.replace("encoder.pos_conv.0.", "encoder.pos_conv_embed.conv.").replace(
                "weight_g", "parametrizations.weight.original0").replace("weight_v", "parametrizations.weight.original1")
        else:
            n = (n.replace(".self_attn.grep_linear.", ".attention.gru_rel_pos_linear.")
                  .replace(".self_attn.grep_a", ".attention.gru_rel_pos_const")
                  .replace(".self_attn.relative_attention_bias.", ".attention.rel_attn_embed.")
                  .replace(".self_attn.", ".attention.").replace(".self_attn_layer_norm.", ".layer_norm.")
                  .replace(".fc1.", ".feed_forward.intermediate_dense.")
                  .replace(".fc2.", ".feed_forward.output_dense."))
        out[n] = v
    return out


def _hf_model(cfg: WavLMConfig):
    from transformers import WavLMConfig as HFConfig, WavLMModel
    hf = HFConfig(hidden_size=cfg.embed_dim, num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
                  intermediate_size=cfg.ffn_dim, conv_dim=[c[0] for c in cfg.conv_layers],
                  conv_kernel=[c[1] for c in cfg.conv_layers], conv_stride=[c[2] for c in cfg.conv_layers],
                  conv_bias=cfg.conv_bias, feat_extract_norm="layer" if cfg.extractor_mode == "layer_norm" else "group",
                  do_stable_layer_norm=cfg.layer_norm_first, num_conv_pos_embeddings=cfg.conv_pos,
                  num_conv_pos_embedding_groups=cfg.conv_pos_groups, num_buckets=cfg.num_buckets,
                  max_bucket_distance=cfg.max_distance, hidden_act="gelu", feat_extract_activation="gelu")
    return WavLMModel(hf).eval()


BASE_LIKE = {**TINY_WAVLM_CFG, "extractor_mode": "default", "layer_norm_first": False, "normalize": False,
             "conv_bias": True, "encoder_embed_dim": 36, "encoder_attention_heads": 3}


@pytest.mark.parametrize("cfg", [TINY_WAVLM_CFG, BASE_LIKE], ids=["large-like", "base-like"])
@pytest.mark.slow  # 2 s in a loaded `make check`
def test_wavlm_states_equal_transformers(cfg, tmp_path):
    folder = build_tiny_seedtts_sim(tmp_path, seed=5, cfg=cfg)
    ck = torch.load(folder / SSL_FILE, weights_only=True)
    wcfg = WavLMConfig.from_cfg(ck["cfg"])
    mine = WavLM(wcfg).eval()
    mine.load_state_dict(ck["model"])
    hf = _hf_model(wcfg)
    missing, unexpected = hf.load_state_dict(_hf_state(ck["model"], wcfg), strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    for n in (8000, 12345):
        x = torch.from_numpy(_waves(4, (n,))[0])[None]
        with torch.no_grad():
            states, frames = mine(x, torch.tensor([n]))
            xin = mine.normalize_waves(x, torch.tensor([n])) if wcfg.normalize else x
            ref = hf(xin, output_hidden_states=True)
        assert int(frames[0]) == wcfg.frames(n) == ref.last_hidden_state.shape[1]
        # transformers' hidden_states: the encoder input, then each layer's output (the last one
        # before the final LayerNorm when layer_norm_first); s3prl's: every layer's input + the
        # encoder output. They share states[0..L-1]; the encoder output is last_hidden_state.
        assert len(states) == wcfg.layers + 1
        for i in range(wcfg.layers):
            torch.testing.assert_close(states[i], ref.hidden_states[i], atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(states[-1], ref.last_hidden_state, atol=2e-5, rtol=1e-4)


def _reference_head(head, states: list[torch.Tensor]) -> torch.Tensor:
    """UniSpeech ECAPA_TDNN forward for one unpadded clip, with torch's InstanceNorm1d / softmax."""
    w = F.softmax(head.feature_weight, dim=-1)[:, None, None, None]
    x = (w * torch.stack(states, dim=0)).sum(0).transpose(1, 2) + 1e-6
    x = torch.nn.InstanceNorm1d(x.shape[1])(x)

    def crb(m, x):
        return m.bn(F.relu(m.conv(x)))

    def block(b, x):
        r = x if b.shortcut is None else b.shortcut(x)
        y = crb(b.Conv1dReluBn1, x)
        rc = b.Res2Conv1dReluBn
        parts, out, sp = torch.split(y, rc.width, 1), [], None
        for i in range(rc.nums):
            sp = parts[i] if i == 0 else sp + parts[i]
            sp = rc.bns[i](F.relu(rc.convs[i](sp)))
            out.append(sp)
        out.append(parts[rc.nums])
        y = crb(b.Conv1dReluBn2, torch.cat(out, 1))
        se = b.SE_Connect
        s = torch.sigmoid(se.linear2(F.relu(se.linear1(y.mean(dim=2)))))
        return y * s[:, :, None] + r

    o1 = crb(head.layer1, x)
    o2 = block(head.layer2, o1)
    o3 = block(head.layer3, o2)
    o4 = block(head.layer4, o3)
    o = F.relu(head.conv(torch.cat([o2, o3, o4], 1)))
    p = head.pooling
    a = torch.softmax(p.linear2(torch.tanh(p.linear1(o))), dim=2)
    mean = (a * o).sum(2)
    std = torch.sqrt(((a * o ** 2).sum(2) - mean ** 2).clamp(min=1e-9))
    return head.linear(head.bn(torch.cat([mean, std], 1)))


def test_head_equals_unispeech_forward_and_weights_every_state(scorer):
    x = torch.from_numpy(_waves(6, (9000,))[0])[None]
    with torch.no_grad():
        states, frames = scorer._ssl(x, torch.tensor([9000]))
        valid = torch.ones(1, states[0].shape[1], dtype=torch.bool)
        mine = scorer._head(states, valid)
        ref = _reference_head(scorer._head, states)
        torch.testing.assert_close(mine, ref, atol=1e-5, rtol=1e-4)
        # the weighting spans all L+1 states, the pre-encoder one included: all weight on state 0
        saved = scorer._head.feature_weight.clone()
        try:
            scorer._head.feature_weight.copy_(torch.tensor([60.0] + [-60.0] * (len(states) - 1)))
            only0 = scorer._head(states, valid)
            torch.testing.assert_close(only0, _reference_head(scorer._head, [states[0]] * len(states)))
            assert not torch.allclose(only0, mine)
        finally:
            scorer._head.feature_weight.copy_(saved)


def test_resampler_is_the_windowed_sinc_of_the_reference_scripts():
    kern, width, orig, new = sinc_kernel(24000, 16000)
    assert (orig, new, kern.shape) == (3, 2, (2, 2 * width + 3))
    assert width == math.ceil(6 * 3 / (2 * 0.99))
    assert np.allclose(kern.sum(axis=1), 1.0, atol=2e-3)  # unit DC gain in every phase
    t = np.arange(24000 * 2) / 24000
    y = resample_sinc(np.sin(2 * np.pi * 440 * t).astype(np.float32), 24000, 16000)
    assert len(y) == math.ceil(len(t) * 16000 / 24000)
    ref = np.sin(2 * np.pi * 440 * np.arange(len(y)) / 16000)
    assert np.abs(y[200:-200] - ref[200:-200]).max() < 2e-3
    w = _waves(7, (5000,))[0]
    assert resample_sinc(w, 16000, 16000) is not None and np.array_equal(resample_sinc(w, 16000, 16000), w)


def test_conv_layer_spec_is_parsed_without_eval():
    assert parse_conv_layers("[(512,10,5)] + [(512,3,2)] * 4 + [(512,2,2)] * 2") == \
        ((512, 10, 5),) + ((512, 3, 2),) * 4 + ((512, 2, 2),) * 2
    with pytest.raises(ValueError):
        parse_conv_layers("__import__('os').system('true')")


def _break(folder, how: str):
    ssl, sv = folder / SSL_FILE, folder / SV_FILE
    if how == "missing file":
        sv.unlink()
    elif how == "empty file":
        sv.write_bytes(b"")
    elif how == "truncated":
        data = ssl.read_bytes()
        ssl.write_bytes(data[: len(data) // 2])
    elif how == "not a checkpoint":
        sv.write_text("<html>download quota exceeded</html>")
    elif how == "partial finetune":
        obj = torch.load(sv, weights_only=True)
        obj["model"].pop(SSL_PREFIX + "encoder.layers.1.fc1.weight")
        torch.save(obj, sv)
    elif how == "other architecture":  # e.g. the fbank ECAPA-TDNN: no layer weights, 40-dim input
        obj = torch.load(sv, weights_only=True)
        obj["model"] = {k: v for k, v in obj["model"].items() if not k.startswith("feature_extract.")
                        and k != "feature_weight"}
        torch.save(obj, sv)
    elif how == "cfg mismatch":
        obj = torch.load(ssl, weights_only=True)
        obj["cfg"]["encoder_layers"] = 4
        torch.save(obj, ssl)
    elif how == "head layer count":
        obj = torch.load(sv, weights_only=True)
        obj["model"]["feature_weight"] = torch.zeros(7)
        torch.save(obj, sv)
    elif how == "no cfg":
        obj = torch.load(ssl, weights_only=True)
        torch.save(obj["model"], ssl)


@pytest.mark.parametrize("how, needle", [
    ("missing file", "wavlm_large_finetune.pth is missing"),
    ("empty file", "empty (0 bytes)"),
    ("truncated", "wavlm_large.pt"),
    ("not a checkpoint", "not a PyTorch checkpoint"),
    ("partial finetune", "lacks 1 tensor(s), e.g. encoder.layers.1.fc1.weight"),
    ("other architecture", "not an ECAPA-TDNN small head: missing feature_weight"),
    ("cfg mismatch", "lacks"),
    ("head layer count", "feature_weight has 7 layer weights"),
    ("no cfg", "no cfg dict found"),
])
def test_bad_folder_is_unavailable_and_sim_gates_inconclusive(tmp_path, how, needle):
    folder = build_tiny_seedtts_sim(tmp_path / "m", seed=1)
    _break(folder, how)
    s = make_scorer("seedtts-sim", {"seedtts-sim": str(folder)}, device="cpu")
    ok, why = s.available()
    assert not ok and needle in why and "\n" not in why, why
    with pytest.raises(ScorerUnavailable, match="unavailable"):
        s.ensure_loaded()
    quality = QualitySpec(scorers={"wer": "pocketsphinx", "sim": "seedtts-sim", "mos": "dnsmos"},
                          model_paths={"seedtts-sim": str(folder)})
    status = scorer_status(quality)
    assert status["sim"].startswith("unavailable: ") and needle in status["sim"]
    data = with_candidate(baseline_table(n_ids=12))  # SIM values present, but the scorer cannot vouch for them
    res = evaluate_gates(data, GateConfig(margins={"wer": 0.2, "sim": 0.5, "utmos": 0.05}, draws=200, seed=1),
                         scorer_status=status, attribution=False)
    sims = [c for c in res.checks if c.metric == "sim"]
    assert sims and all(c.status == INCONCLUSIVE for c in sims)
    assert res.verdict != PASS


def test_no_folder_configured(monkeypatch):
    monkeypatch.delenv("CAMPAIGN_SEEDTTS_SIM_DIR", raising=False)
    ok, why = make_scorer("seedtts-sim", device="cpu").available()
    assert not ok and "quality.model_paths.seedtts-sim" in why and "CAMPAIGN_SEEDTTS_SIM_DIR" in why


def test_pretrained_only_finetune_keeps_ssl_weights(tmp_path):
    folder = build_tiny_seedtts_sim(tmp_path, seed=2, finetuned=False)
    s = SeedTtsSimScorer(folder, device="cpu")
    s.ensure_loaded()
    assert s.describe()["ssl_weights"] == "pretrained"
