"""The ECAPA-TDNN speaker head of UniSpeech's speaker-verification models (`ECAPA_TDNN_SMALL`),
written for masked batches; parameter names match the `model` state dict of
`wavlm_large_finetune.pth`. Sizes come from tensor shapes (docs/quality.md, "seedtts-sim").

Forward, per clip (B clips, F_b valid frames each):
  softmax(feature_weight)-weighted sum of the SSL model's hidden states (all layer inputs and the
  encoder output) -> [B, C, F] + 1e-6 -> instance norm (per channel over the clip's frames, no
  affine, eps 1e-5) -> layer1 (conv k5 -> ReLU -> BN) -> three SE-Res2 blocks (dilation 2, 3, 4)
  -> concat of the three -> 1x1 conv -> ReLU -> attentive statistics pooling -> BN -> linear.
Masks: padded frames are zeroed before every conv wider than one frame (so a clip sees the zero
padding it would see alone), and the instance norm, the SE means and the attention softmax run
over valid frames only; a clip's embedding does not depend on its batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
import torch.nn as nn
import torch.nn.functional as F

DILATIONS = (2, 3, 4)  # layer2..layer4 of ECAPA_TDNN


class HeadShapeError(ValueError):
    """The head's tensors do not describe an ECAPA-TDNN small head (names the key)."""


@dataclass(frozen=True)
class HeadConfig:
    n_states: int
    feat_dim: int
    channels: int
    kernel1: int
    scale: int
    se_dim: int
    cat_channels: int
    out_channels: int
    att_channels: int
    global_context: bool
    emb_dim: int

    @classmethod
    def from_state(cls, sd: Mapping[str, torch.Tensor]) -> "HeadConfig":
        def shape(key: str) -> tuple[int, ...]:
            if key not in sd:
                raise HeadShapeError(f"missing {key}")
            return tuple(sd[key].shape)

        n_states = shape("feature_weight")
        c1 = shape("layer1.conv.weight")
        width = shape("layer2.Res2Conv1dReluBn.convs.0.weight")
        nums = sum(1 for k in sd if k.startswith("layer2.Res2Conv1dReluBn.convs.") and k.endswith(".weight"))
        scale = nums + 1 if nums > 1 or width[0] != c1[0] else 1
        conv = shape("conv.weight")
        att = shape("pooling.linear1.weight")
        emb = shape("linear.weight")
        cfg = cls(n_states[0], c1[1], c1[0], c1[2], scale, shape("layer2.SE_Connect.linear1.weight")[0], conv[1],
                  conv[0], att[0], att[1] == 3 * conv[0], emb[0])
        if len(n_states) != 1:
            raise HeadShapeError(f"feature_weight has shape {n_states}, expected one weight per hidden state")
        if cfg.cat_channels != 3 * cfg.channels:
            raise HeadShapeError(f"conv.weight takes {cfg.cat_channels} channels, expected 3 x {cfg.channels}")
        if cfg.channels % cfg.scale:
            raise HeadShapeError(f"channels {cfg.channels} not divisible by Res2 scale {cfg.scale}")
        for i in (5, 6):
            if any(k.startswith(f"layer{i}.") for k in sd):
                raise HeadShapeError(f"unexpected layer{i}: ECAPA-TDNN small has layer1..layer4")
        return cfg


def masked_fill_time(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    return x * valid[:, None, :].to(x.dtype)


def masked_mean(x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    m = valid[:, None, :].to(x.dtype)
    return (x * m).sum(-1) / m.sum(-1).clamp(min=1.0)


class Conv1dReluBn(nn.Module):
    def __init__(self, n_in: int, n_out: int, kernel: int = 1, dilation: int = 1):
        super().__init__()
        self.kernel = kernel
        self.conv = nn.Conv1d(n_in, n_out, kernel, padding=dilation * (kernel - 1) // 2, dilation=dilation)
        self.bn = nn.BatchNorm1d(n_out)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        if self.kernel > 1:
            x = masked_fill_time(x, valid)
        return self.bn(F.relu(self.conv(x)))


class Res2Conv1dReluBn(nn.Module):
    def __init__(self, channels: int, kernel: int, dilation: int, scale: int):
        super().__init__()
        self.scale, self.width = scale, channels // scale
        self.nums = scale if scale == 1 else scale - 1
        pad = dilation * (kernel - 1) // 2
        self.convs = nn.ModuleList(nn.Conv1d(self.width, self.width, kernel, padding=pad, dilation=dilation)
                                   for _ in range(self.nums))
        self.bns = nn.ModuleList(nn.BatchNorm1d(self.width) for _ in range(self.nums))

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        parts = torch.split(x, self.width, dim=1)
        out: list[torch.Tensor] = []
        sp = parts[0]
        for i in range(self.nums):
            if i > 0:
                sp = sp + parts[i]
            sp = self.bns[i](F.relu(self.convs[i](masked_fill_time(sp, valid))))
            out.append(sp)
        if self.scale != 1:
            out.append(parts[self.nums])
        return torch.cat(out, dim=1)


class SEConnect(nn.Module):
    def __init__(self, channels: int, bottleneck: int):
        super().__init__()
        self.linear1 = nn.Linear(channels, bottleneck)
        self.linear2 = nn.Linear(bottleneck, channels)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(self.linear2(F.relu(self.linear1(masked_mean(x, valid)))))
        return x * s[:, :, None]


class SERes2Block(nn.Module):
    def __init__(self, cfg: HeadConfig, dilation: int, n_in: int):
        super().__init__()
        c = cfg.channels
        self.Conv1dReluBn1 = Conv1dReluBn(n_in, c)
        self.Res2Conv1dReluBn = Res2Conv1dReluBn(c, 3, dilation, cfg.scale)
        self.Conv1dReluBn2 = Conv1dReluBn(c, c)
        self.SE_Connect = SEConnect(c, cfg.se_dim)
        self.shortcut = nn.Conv1d(n_in, c, kernel_size=1) if n_in != c else None

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        res = self.shortcut(x) if self.shortcut is not None else x
        x = self.Conv1dReluBn1(x, valid)
        x = self.Res2Conv1dReluBn(x, valid)
        x = self.Conv1dReluBn2(x, valid)
        return self.SE_Connect(x, valid) + res


class AttentiveStatsPool(nn.Module):
    def __init__(self, dim: int, att: int, global_context: bool):
        super().__init__()
        self.global_context = global_context
        self.linear1 = nn.Conv1d(dim * 3 if global_context else dim, att, kernel_size=1)
        self.linear2 = nn.Conv1d(att, dim, kernel_size=1)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        m = valid[:, None, :]
        if self.global_context:
            mean = masked_mean(x, valid)[:, :, None]
            n = m.to(x.dtype).sum(-1, keepdim=True)
            var = (((x - mean) * m) ** 2).sum(-1, keepdim=True) / (n - 1).clamp(min=1.0)  # torch.var: unbiased
            x_in = torch.cat([x, mean.expand_as(x), torch.sqrt(var + 1e-10).expand_as(x)], dim=1)
        else:
            x_in = x
        scores = self.linear2(torch.tanh(self.linear1(x_in))).masked_fill(~m, float("-inf"))
        alpha = torch.softmax(scores, dim=2)
        mean = (alpha * x).sum(2)
        var = (alpha * x * x).sum(2) - mean * mean
        return torch.cat([mean, torch.sqrt(var.clamp(min=1e-9))], dim=1)


class EcapaHead(nn.Module):
    """forward(hidden states [L] x [B, F, C], valid [B, F]) -> embeddings [B, emb_dim]."""

    def __init__(self, cfg: HeadConfig):
        super().__init__()
        self.cfg = cfg
        self.feature_weight = nn.Parameter(torch.zeros(cfg.n_states))
        self.layer1 = Conv1dReluBn(cfg.feat_dim, cfg.channels, cfg.kernel1)
        self.layer2 = SERes2Block(cfg, DILATIONS[0], cfg.channels)
        self.layer3 = SERes2Block(cfg, DILATIONS[1], cfg.channels)
        self.layer4 = SERes2Block(cfg, DILATIONS[2], cfg.channels)
        self.conv = nn.Conv1d(cfg.cat_channels, cfg.out_channels, kernel_size=1)
        self.pooling = AttentiveStatsPool(cfg.out_channels, cfg.att_channels, cfg.global_context)
        self.bn = nn.BatchNorm1d(cfg.out_channels * 2)
        self.linear = nn.Linear(cfg.out_channels * 2, cfg.emb_dim)

    def features(self, states: list[torch.Tensor], valid: torch.Tensor) -> torch.Tensor:
        """Weighted layer sum + instance norm over valid frames: [B, C, F] (fp32)."""
        if len(states) != self.cfg.n_states:
            raise HeadShapeError(f"the SSL model gives {len(states)} hidden states, feature_weight has {self.cfg.n_states}")
        w = torch.softmax(self.feature_weight.float(), dim=-1)
        x = w[0] * states[0].float()
        for i in range(1, len(states)):
            x = x + w[i] * states[i].float()
        x = x.transpose(1, 2) + 1e-6
        m = valid[:, None, :].to(x.dtype)
        n = m.sum(-1, keepdim=True).clamp(min=1.0)
        mean = (x * m).sum(-1, keepdim=True) / n
        var = (((x - mean) * m) ** 2).sum(-1, keepdim=True) / n
        return masked_fill_time((x - mean) / torch.sqrt(var + 1e-5), valid)

    def forward(self, states: list[torch.Tensor], valid: torch.Tensor) -> torch.Tensor:
        x = self.features(states, valid)
        x = x.to(self.layer1.conv.weight.dtype)
        out1 = self.layer1(x, valid)
        out2 = self.layer2(out1, valid)
        out3 = self.layer3(out2, valid)
        out4 = self.layer4(out3, valid)
        out = F.relu(self.conv(torch.cat([out2, out3, out4], dim=1)))
        return self.linear(self.bn(self.pooling(out, valid)))
