"""UTMOS22 strong (Saeki et al. 2022, as packaged by tarepan/SpeechMOS) from the release state
dict `utmos22_strong_step7459_v1.pt`, written for masked batches (docs/utmos22.md).

SpeechMOS's `UTMOS22Strong`: a wav2vec 2.0 base encoder (conv stack with one GroupNorm, post-LN
transformer, no input normalisation; here `stats.quality.wavlm.WavLM` with relative positions
off, which has exactly those keys under `wav2vec2.`), its last layer's output concatenated per
frame with the learned data-domain and judge embeddings, a one-layer BLSTM, a
Linear-ReLU-Linear projection to one score per frame, the mean over frames, x 2 + 3.
Sizes come from tensor shapes; what shapes cannot carry is fixed by the architecture: the conv
strides (5, 2, 2, 2, 2, 2, 2) and 12 attention heads. A clip in a batch keeps its own frame
count: the GroupNorm statistics, attention keys, the BLSTM (packed sequences) and the mean all
see its valid frames only, so batching does not change a score.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch
import torch.nn as nn

from stats.quality.wavlm import WavLM, WavLMConfig, frame_mask, remap_weight_norm_keys

STRIDES = (5, 2, 2, 2, 2, 2, 2)
HEADS = 12
SSL = "wav2vec2."


class UtmosShapeError(ValueError):
    """The state dict is not UTMOS22 strong's (names the key)."""


def _shape(sd: Mapping[str, torch.Tensor], key: str) -> tuple[int, ...]:
    if key not in sd:
        raise UtmosShapeError(f"missing {key}")
    return tuple(sd[key].shape)


def ssl_config(sd: Mapping[str, torch.Tensor]) -> WavLMConfig:
    """The wav2vec 2.0 config the state dict's shapes describe."""
    convs = []
    for i, stride in enumerate(STRIDES):
        out, _, k = _shape(sd, f"{SSL}feature_extractor.conv_layers.{i}.0.weight")
        convs.append((out, k, stride))
    if any(k.startswith(f"{SSL}feature_extractor.conv_layers.{len(STRIDES)}.") for k in sd):
        raise UtmosShapeError(f"more than {len(STRIDES)} conv layers")
    embed = _shape(sd, f"{SSL}encoder.layer_norm.weight")[0]
    layers = len({k.split(".")[3] for k in sd if k.startswith(f"{SSL}encoder.layers.")})
    wv = _shape(sd, f"{SSL}encoder.pos_conv.0.weight_v")
    if embed % HEADS:
        raise UtmosShapeError(f"encoder width {embed} is not divisible by {HEADS} heads")
    cfg = {"extractor_mode": "default", "encoder_layers": layers, "encoder_embed_dim": embed,
           "encoder_ffn_embed_dim": _shape(sd, f"{SSL}encoder.layers.0.fc1.weight")[0],
           "encoder_attention_heads": HEADS, "activation_fn": "gelu", "layer_norm_first": False,
           "conv_feature_layers": repr([tuple(c) for c in convs]), "conv_bias": False, "normalize": False,
           "conv_pos": wv[2], "conv_pos_groups": embed // wv[1], "relative_position_embedding": False,
           "gru_rel_pos": False}
    return WavLMConfig.from_cfg(cfg)


class Utmos22Strong(nn.Module):
    """forward(wave [B, T] at 16 kHz, lengths [B]) -> MOS [B]."""

    def __init__(self, ssl_cfg: WavLMConfig, domain: int, judge: int, rnn: int, proj: int):
        super().__init__()
        self.wav2vec2 = WavLM(ssl_cfg)
        self.domain_emb = nn.Parameter(torch.zeros(1, domain), requires_grad=False)
        self.judge_emb = nn.Parameter(torch.zeros(1, judge), requires_grad=False)
        self.blstm = nn.LSTM(ssl_cfg.embed_dim + domain + judge, rnn, batch_first=True, bidirectional=True)
        self.projection = nn.Sequential(nn.Linear(2 * rnn, proj), nn.ReLU(), nn.Linear(proj, 1))

    @classmethod
    def from_state(cls, sd: Mapping[str, torch.Tensor]) -> "Utmos22Strong":
        ssl = ssl_config(sd)
        rnn = _shape(sd, "blstm.weight_hh_l0")[1]
        return cls(ssl, _shape(sd, "domain_emb")[1], _shape(sd, "judge_emb")[1], rnn,
                   _shape(sd, "projection.0.weight")[0])

    @property
    def min_samples(self) -> int:
        return self.wav2vec2.cfg.min_samples

    def forward(self, wave: torch.Tensor, lengths: torch.Tensor, host_lengths: Sequence[int] | None = None) -> torch.Tensor:
        """`host_lengths` (the lengths on the host, longest first) lets the whole pass run without
        waiting for the device: the norm's frame counts and the BLSTM's packing come from them."""
        states, frames = self.wav2vec2(wave, lengths, host_lengths)
        x = states[-1]
        b, f, _ = x.shape
        x = torch.cat([x, self.domain_emb[:, None, :].expand(b, f, -1).to(x.dtype),
                       self.judge_emb[:, None, :].expand(b, f, -1).to(x.dtype)], dim=2)
        host = [self.wav2vec2.cfg.frames(n) for n in host_lengths] if host_lengths is not None else frames.tolist()
        descending = all(a >= b for a, b in zip(host, host[1:]))
        packed = nn.utils.rnn.pack_padded_sequence(x, torch.tensor(host), batch_first=True, enforce_sorted=descending)
        out, _ = self.blstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=f)
        score = self.projection(out).squeeze(-1)  # [B, F]
        m = frame_mask(frames, f).to(score.dtype)
        return (score * m).sum(1) / m.sum(1) * 2 + 3


def check_state(ref: Mapping[str, torch.Tensor], sd: Mapping[str, torch.Tensor]) -> None:
    """UtmosShapeError unless `sd` has exactly the keys and shapes of `ref`."""
    missing, extra = sorted(set(ref) - set(sd)), sorted(set(sd) - set(ref))
    if missing:
        raise UtmosShapeError(f"lacks {len(missing)} tensor(s), e.g. {missing[0]}")
    if extra:
        raise UtmosShapeError(f"has {len(extra)} unexpected tensor(s), e.g. {extra[0]}")
    for k, v in ref.items():
        if tuple(sd[k].shape) != tuple(v.shape):
            raise UtmosShapeError(f"{k} has shape {tuple(sd[k].shape)}, expected {tuple(v.shape)}")


def load_state(sd: Mapping[str, torch.Tensor]) -> Utmos22Strong:
    """Build from shapes and load strictly; UtmosShapeError (one line) when the dict is not UTMOS22's."""
    sd = remap_weight_norm_keys(sd)
    model = Utmos22Strong.from_state(sd)
    check_state(model.state_dict(), sd)
    model.load_state_dict(sd, strict=True)
    return model.eval()
