"""`utmos22` from the SpeechMOS release state dict (`utmos22_strong_step7459_v1.pt`, key layout of
tarepan/SpeechMOS@ed25eacb speechmos/utmos22/strong/model.py + fairseq_alt.py), loaded through
the real scorer from a tiny random state dict in those key names: the wav2vec 2.0 part equals
transformers' Wav2Vec2Model on the same weights, the whole model equals an unbatched reference
forward (plain LSTM over the whole clip, plain mean), batching clips of different lengths
changes no score, and a wrong state dict is "unavailable: <why>"."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf
import torch

from data.plan_model import QualitySpec
from stats.quality.base import ScoreItem, ScorerUnavailable
from stats.quality.registry import make_scorer, scorer_status
from stats.quality.tiny_checkpoints import build_tiny_utmos22
from stats.quality.utmos import Utmos22Scorer
from stats.quality.utmos import STATE_FILE


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return build_tiny_utmos22(tmp_path_factory.mktemp("utmos-state"), seed=4)


@pytest.fixture(scope="module")
def scorer(folder):
    s = Utmos22Scorer(folder, device="cpu", batch_size=4)
    s.ensure_loaded()
    return s


def _waves(lengths=(3000, 16000, 8123, 400, 11111, 20000), seed=0):
    rng = np.random.default_rng(seed)
    return [(0.2 * np.sin(np.arange(n) * (0.05 + 0.01 * i)) + 0.05 * rng.standard_normal(n)).astype(np.float32)
            for i, n in enumerate(lengths)]


def _hf_w2v(model):
    from transformers import Wav2Vec2Config, Wav2Vec2Model
    c = model.wav2vec2.cfg
    hf = Wav2Vec2Model(Wav2Vec2Config(
        hidden_size=c.embed_dim, num_hidden_layers=c.layers, num_attention_heads=c.heads, intermediate_size=c.ffn_dim,
        conv_dim=[x[0] for x in c.conv_layers], conv_kernel=[x[1] for x in c.conv_layers],
        conv_stride=[x[2] for x in c.conv_layers], conv_bias=False, feat_extract_norm="group",
        do_stable_layer_norm=False, num_conv_pos_embeddings=c.conv_pos, num_conv_pos_embedding_groups=c.conv_pos_groups,
        hidden_act="gelu", feat_extract_activation="gelu")).eval()
    sd = {}
    for k, v in model.wav2vec2.state_dict().items():
        n = k
        if n.startswith("feature_extractor.conv_layers."):
            i, rest = n.split(".")[2], ".".join(n.split(".")[3:])
            n = f"feature_extractor.conv_layers.{i}." + {"0.weight": "conv.weight", "2.weight": "layer_norm.weight",
                                                         "2.bias": "layer_norm.bias"}[rest]
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
            n = (n.replace(".self_attn.", ".attention.").replace(".self_attn_layer_norm.", ".layer_norm.")
                  .replace(".fc1.", ".feed_forward.intermediate_dense.").replace(".fc2.", ".feed_forward.output_dense."))
        sd[n] = v
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    return hf


def test_equals_transformers_wav2vec2_and_unbatched_reference(scorer):
    m = scorer._native
    hf = _hf_w2v(m)
    for w in _waves((8000, 12345), seed=2):
        x = torch.from_numpy(w)[None]
        with torch.no_grad():
            states, frames = m.wav2vec2(x, torch.tensor([len(w)]))
            ref_units = hf(x).last_hidden_state
            torch.testing.assert_close(states[-1], ref_units, atol=2e-5, rtol=1e-4)
            f = ref_units.shape[1]
            cat = torch.cat([ref_units, m.domain_emb[:, None].expand(1, f, -1), m.judge_emb[:, None].expand(1, f, -1)], 2)
            ref = m.projection(m.blstm(cat)[0]).mean(dim=1).squeeze(1) * 2 + 3
        assert scorer.score_waves([w])[0] == pytest.approx(float(ref), abs=1e-5)


@pytest.mark.slow  # a MOS model, batched and alone
def test_batched_equals_one_at_a_time_and_deterministic(scorer, folder):
    w = _waves()
    batched = scorer.score_waves(w)
    assert scorer.last_calls == [4, 2]
    singles = [scorer.score_waves([x])[0] for x in w]
    assert batched == pytest.approx(singles, abs=1e-5)
    again = Utmos22Scorer(folder, device="cpu", batch_size=3)
    assert again.score_waves(w) == pytest.approx(batched, abs=1e-5)
    assert again.model_hash == scorer.model_hash and STATE_FILE in scorer.version and "float32" in scorer.version


def test_score_batch_reads_files_and_reports_bad_ones(scorer, tmp_path):
    good, text, empty = tmp_path / "a.wav", tmp_path / "t.wav", tmp_path / "e.wav"
    sf.write(good, _waves((24000,))[0], 24000)
    text.write_text("not audio")
    empty.write_bytes(b"")
    res = scorer.score_batch([ScoreItem("r", i, "u", p, "", None) for i, p in enumerate((good, text, empty))])
    assert res[0].status == "ok" and 1.0 < res[0].value < 5.0
    assert res[1].status == "error" and "t.wav" in res[1].error
    assert res[2].status == "error" and "e.wav" in res[2].error


def test_host_lengths_change_no_score(scorer):
    """The forward pass given the lengths on the host (no device round trip; longest first, or in
    any order) scores exactly as the one that counts them on the device."""
    m = scorer._native
    w = _waves((16000, 11111, 8123, 3000))
    x = torch.zeros(len(w), 16000)
    for j, a in enumerate(w):
        x[j, : len(a)] = torch.from_numpy(a)
    lengths = torch.tensor([len(a) for a in w])
    with torch.inference_mode():
        device_counted = m(x, lengths)
        host_sorted = m(x, lengths, [len(a) for a in w])
        flipped = m(x.flip(0), lengths.flip(0), [len(a) for a in w][::-1])
    assert torch.equal(device_counted, host_sorted)
    torch.testing.assert_close(flipped.flip(0), host_sorted, atol=1e-6, rtol=0)


def test_files_resampled_in_batches_equal_each_file_resampled_alone(folder, tmp_path):
    """score_batch reads files at their own rates and resamples a padded batch at once
    (stats.quality.resample.resample_sinc_batch); every score equals the one from that file read
    and resampled alone (load_audio, sinc) and scored alone, across rates and lengths in one batch."""
    from stats.quality.audio import load_audio

    paths = []
    for i, (n, rate) in enumerate([(24000, 24000), (30011, 24000), (7001, 24000), (16000, 16000), (44100, 44100),
                                   (9000, 22050)]):
        p = tmp_path / f"c{i}.wav"
        sf.write(p, _waves((n,), seed=i)[0], rate)
        paths.append(p)
    s = Utmos22Scorer(folder, device="cpu", batch_size=8)
    res = s.score_batch([ScoreItem("r", i, "u", p, "", None) for i, p in enumerate(paths)])
    assert sorted(s.last_calls) == [1, 1, 1, 3]  # one call per rate: 16, 22.05, 24 (three clips) and 44.1 kHz
    alone = [s.score_waves([load_audio(p, resampler="sinc")])[0] for p in paths]
    assert [r.status for r in res] == ["ok"] * len(paths)
    assert [r.value for r in res] == pytest.approx(alone, abs=1e-6)


@pytest.mark.parametrize("how, needle", [
    ("truncated", "not a PyTorch checkpoint"),
    ("missing tensor", "lacks 1 tensor(s), e.g. blstm.bias_hh_l0"),
    ("other architecture", "missing wav2vec2.feature_extractor.conv_layers.0.0.weight"),
    ("garbage", "not a PyTorch checkpoint"),
])
def test_bad_state_dict_is_unavailable(tmp_path, how, needle):
    folder = build_tiny_utmos22(tmp_path / "m", seed=1)
    p = folder / STATE_FILE
    if how == "truncated":
        p.write_bytes(p.read_bytes()[:1000])
    elif how == "missing tensor":
        sd = torch.load(p, weights_only=True)
        sd.pop("blstm.bias_hh_l0")
        torch.save(sd, p)
    elif how == "other architecture":  # e.g. a state dict of another model under the release name
        torch.save({"encoder.weight": torch.zeros(3, 3)}, p)
    else:
        p.write_bytes(b"\0" * 16)
    s = make_scorer("utmos22", {"utmos22": str(folder)}, device="cpu")
    ok, why = s.available()
    assert not ok and needle in why and "\n" not in why, why
    with pytest.raises(ScorerUnavailable):
        s.ensure_loaded()
    st = scorer_status(QualitySpec(scorers={"mos": "utmos22"}, model_paths={"utmos22": str(folder)}))
    assert st["mos"].startswith("unavailable: ") and needle in st["mos"]
