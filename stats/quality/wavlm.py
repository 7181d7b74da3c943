"""WavLM (Chen et al. 2022) in the unilm / s3prl checkpoint layout, written for batched scoring.

The module tree is named so that the `model` state dict of an s3prl-converted `wavlm_large.pt`
(`{'cfg': {...}, 'model': {...}}`) loads into it unchanged; every size comes from the `cfg`
dict (unilm `WavLMConfig` defaults for absent keys) and is cross-checked against tensor shapes.
docs/quality.md ("seedtts-sim") lists the sources and what each piece reproduces:

* feature encoder: conv stack from `conv_feature_layers`; `extractor_mode` 'default' = one
  per-channel GroupNorm after the first conv, 'layer_norm' = a LayerNorm over channels after
  every conv; GELU; then LayerNorm over the conv channels and `post_extract_proj`;
* encoder: padded frames zeroed, + grouped conv positional embedding (weight norm over dim 2,
  `SamePad` drops the last frame, GELU), LayerNorm before the layers unless `layer_norm_first`;
* layers: self-attention with a bucketed relative position bias (computed once, by layer 0,
  shared by all layers) scaled per query by the gated relative position gate (`gru_rel_pos`),
  then the feed-forward block; pre- or post-LayerNorm per `layer_norm_first`; final LayerNorm
  when `layer_norm_first`.

Batching: each clip keeps its own frame count (the conv length formula on its own samples) and
padded frames never reach a valid one (zeroed before the positional conv, masked as attention
keys, the GroupNorm statistics taken over valid frames only), so a clip's states do not depend
on what it is batched with. s3prl's own batched forward marks frames valid by ceil(samples /
320), one more than a lone clip has; one clip at a time (what seed-tts-eval runs) is the
reference here.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

# unilm WavLMConfig defaults, used for keys a cfg dict leaves out (as WavLMConfig.update does)
CFG_DEFAULTS: dict[str, Any] = {
    "extractor_mode": "default", "encoder_layers": 12, "encoder_embed_dim": 768, "encoder_ffn_embed_dim": 3072,
    "encoder_attention_heads": 12, "activation_fn": "gelu", "layer_norm_first": False,
    "conv_feature_layers": "[(512,10,5)] + [(512,3,2)] * 4 + [(512,2,2)] * 2", "conv_bias": False,
    "normalize": False, "conv_pos": 128, "conv_pos_groups": 16, "relative_position_embedding": False,
    "num_buckets": 320, "max_distance": 1280, "gru_rel_pos": False,
}
ACTIVATIONS = ("gelu", "relu")


class WavLMConfigError(ValueError):
    """A cfg dict this implementation cannot build (names the key and value)."""


def parse_conv_layers(spec: Any) -> tuple[tuple[int, int, int], ...]:
    """`conv_feature_layers` ("[(512,10,5)] + [(512,3,2)] * 4 ...") without eval(): only list and
    tuple literals of integers, `+` and `*` are accepted."""
    if isinstance(spec, (list, tuple)):
        layers = spec
    else:
        try:
            layers = _literal(ast.parse(str(spec), mode="eval").body)
        except (SyntaxError, ValueError, TypeError) as exc:
            raise WavLMConfigError(f"cfg.conv_feature_layers {spec!r}: {exc}") from None
    out = []
    for layer in layers:
        if not (isinstance(layer, (list, tuple)) and len(layer) == 3 and all(isinstance(v, int) and v > 0 for v in layer)):
            raise WavLMConfigError(f"cfg.conv_feature_layers: {layer!r} is not (dim, kernel, stride)")
        out.append(tuple(layer))
    if not out:
        raise WavLMConfigError("cfg.conv_feature_layers is empty")
    return tuple(out)


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple)):
        vals = [_literal(e) for e in node.elts]
        return vals if isinstance(node, ast.List) else tuple(vals)
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Mult)):
        a, b = _literal(node.left), _literal(node.right)
        return a + b if isinstance(node.op, ast.Add) else a * b
    raise ValueError(f"unsupported expression {ast.dump(node)[:60]}")


@dataclass(frozen=True)
class WavLMConfig:
    extractor_mode: str
    conv_layers: tuple[tuple[int, int, int], ...]
    conv_bias: bool
    embed_dim: int
    ffn_dim: int
    heads: int
    layers: int
    layer_norm_first: bool
    normalize: bool
    conv_pos: int
    conv_pos_groups: int
    relative_position_embedding: bool
    num_buckets: int
    max_distance: int
    gru_rel_pos: bool
    activation: str

    @classmethod
    def from_cfg(cls, cfg: Mapping[str, Any]) -> "WavLMConfig":
        if not isinstance(cfg, Mapping):
            raise WavLMConfigError(f"cfg is a {type(cfg).__name__}, expected a dict")
        c = {**CFG_DEFAULTS, **{k: v for k, v in cfg.items() if k in CFG_DEFAULTS}}
        if c["extractor_mode"] not in ("default", "layer_norm"):
            raise WavLMConfigError(f"cfg.extractor_mode {c['extractor_mode']!r} (expected 'default' or 'layer_norm')")
        if c["activation_fn"] not in ACTIVATIONS:
            raise WavLMConfigError(f"cfg.activation_fn {c['activation_fn']!r} is not supported ({', '.join(ACTIVATIONS)})")
        ints = ("encoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim", "encoder_attention_heads", "conv_pos",
                "conv_pos_groups", "num_buckets", "max_distance")
        for k in ints:
            if not isinstance(c[k], int) or isinstance(c[k], bool) or c[k] <= 0:
                raise WavLMConfigError(f"cfg.{k} {c[k]!r} is not a positive integer")
        if c["encoder_embed_dim"] % c["encoder_attention_heads"]:
            raise WavLMConfigError(f"cfg.encoder_embed_dim {c['encoder_embed_dim']} is not divisible by "
                                   f"encoder_attention_heads {c['encoder_attention_heads']}")
        return cls(c["extractor_mode"], parse_conv_layers(c["conv_feature_layers"]), bool(c["conv_bias"]),
                   c["encoder_embed_dim"], c["encoder_ffn_embed_dim"], c["encoder_attention_heads"],
                   c["encoder_layers"], bool(c["layer_norm_first"]), bool(c["normalize"]), c["conv_pos"],
                   c["conv_pos_groups"], bool(c["relative_position_embedding"]), c["num_buckets"], c["max_distance"],
                   bool(c["gru_rel_pos"]), c["activation_fn"])

    def frames(self, samples: int) -> int:
        """Frames the conv stack makes of one clip of `samples` samples (0 if too short)."""
        n = samples
        for _, k, s in self.conv_layers:
            n = conv_frames(n, k, s)
        return max(n, 0)

    @property
    def min_samples(self) -> int:
        """Fewest samples that give one frame."""
        n = 1
        for _, k, s in reversed(self.conv_layers):
            n = (n - 1) * s + k
        return n


def conv_frames(samples: int, kernel: int, stride: int) -> int:
    """Outputs of one unpadded conv layer over `samples` inputs (0 if shorter than the kernel)."""
    return (samples - kernel) // stride + 1 if samples >= kernel else 0


def frame_mask(lengths: torch.Tensor, frames: int) -> torch.Tensor:
    """[B, frames] bool, True where a frame is valid."""
    return torch.arange(frames, device=lengths.device)[None, :] < lengths[:, None]


def masked_group_norm(x: torch.Tensor, valid: torch.Tensor, norm: nn.GroupNorm,
                      counts: Sequence[int] | None = None) -> torch.Tensor:
    """GroupNorm with one channel per group over valid frames only (fp32, as unilm's Fp32GroupNorm).

    This tensor is the largest of the forward pass (512 channels at 3.2 kHz): each clip's statistics
    come from one `var_mean` over its own valid frames and the affine map is one fused `addcmul`,
    so the tensor is read three times instead of the dozen passes an elementwise masked formula
    makes (docs/quality.md, "Throughput"). `counts`, each clip's valid frames known on the host,
    spares a device-to-host wait in the middle of the forward pass."""
    xf = x.float()
    full = xf.shape[-1]
    stats = []
    for j, n in enumerate(valid.sum(1).tolist() if counts is None else counts):
        if n == 0:  # no valid frame: mean 0, variance 0 (the clip is rejected before the model anyway)
            stats.append((xf.new_zeros(xf.shape[1], 1), xf.new_zeros(xf.shape[1], 1)))
        else:
            stats.append(torch.var_mean(xf[j] if n == full else xf[j, :, :n], dim=-1, correction=0, keepdim=True))
    var = torch.stack([v for v, _ in stats])
    mean = torch.stack([m for _, m in stats])
    scale = torch.rsqrt(var + norm.eps) * norm.weight.float()[None, :, None]
    shift = norm.bias.float()[None, :, None] - mean * scale
    return torch.addcmul(shift, xf, scale).to(x.dtype)


class _Transpose(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.transpose(-2, -1)


class ConvBlock(nn.Module):
    """conv -> (norm) -> GELU; children named '0' (conv) and '2' (norm) as in the checkpoint."""

    def __init__(self, n_in: int, n_out: int, k: int, stride: int, bias: bool, norm: str | None):
        super().__init__()
        self.stride, self.kernel, self.norm_kind = stride, k, norm
        self.add_module("0", nn.Conv1d(n_in, n_out, k, stride=stride, bias=bias))
        self.add_module("1", nn.Identity())  # dropout slot of the original
        if norm == "layer":
            self.add_module("2", nn.Sequential(_Transpose(), nn.LayerNorm(n_out), _Transpose()))
        elif norm == "group":
            self.add_module("2", nn.GroupNorm(n_out, n_out, affine=True))

    def forward(self, x: torch.Tensor, valid: torch.Tensor, counts: Sequence[int] | None = None) -> torch.Tensor:
        x = getattr(self, "0")(x)
        if self.norm_kind == "layer":
            ln = getattr(self, "2")[1]
            x = F.layer_norm(x.float().transpose(1, 2), ln.normalized_shape, ln.weight.float(), ln.bias.float(),
                             ln.eps).transpose(1, 2).to(x.dtype)
        elif self.norm_kind == "group":
            x = masked_group_norm(x, valid[:, : x.shape[-1]], getattr(self, "2"), counts)
        return F.gelu(x)


class FeatureExtractor(nn.Module):
    def __init__(self, cfg: WavLMConfig):
        super().__init__()
        self.cfg = cfg
        blocks, n_in = [], 1
        for i, (dim, k, s) in enumerate(cfg.conv_layers):
            norm = "layer" if cfg.extractor_mode == "layer_norm" else ("group" if i == 0 else None)
            blocks.append(ConvBlock(n_in, dim, k, s, cfg.conv_bias, norm))
            n_in = dim
        self.conv_layers = nn.ModuleList(blocks)

    def forward(self, wave: torch.Tensor, lengths: torch.Tensor,
                host_lengths: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """[B, T] samples -> ([B, C, F] features, [B] frame counts). `host_lengths`: the same
        lengths on the host, so the masked norm need not wait for the device to count them."""
        x = wave[:, None, :]
        n = lengths
        host = list(host_lengths) if host_lengths is not None else None
        for block, (_, kernel, stride) in zip(self.conv_layers, self.cfg.conv_layers):  # the blocks' k, stride
            n = torch.where(n >= kernel, torch.div(n - kernel, stride, rounding_mode="floor") + 1,
                            torch.zeros_like(n))
            if host is not None:
                host = [conv_frames(c, kernel, stride) for c in host]
            frames = (x.shape[-1] - kernel) // stride + 1
            x = block(x, frame_mask(n, frames), host)
        return x, n


class WeightNormConv(nn.Module):
    """Conv1d whose weight is g * v / ||v|| with the norm over dims (0, 1) (weight_norm, dim=2)."""

    def __init__(self, channels: int, kernel: int, groups: int):
        super().__init__()
        self.padding, self.groups = kernel // 2, groups
        self.weight_g = nn.Parameter(torch.ones(1, 1, kernel))
        self.weight_v = nn.Parameter(torch.empty(channels, channels // groups, kernel))
        self.bias = nn.Parameter(torch.zeros(channels))

    def weight(self) -> torch.Tensor:
        v = self.weight_v
        return v * (self.weight_g / v.float().pow(2).sum(dim=(0, 1), keepdim=True).sqrt().to(v.dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv1d(x, self.weight(), self.bias, padding=self.padding, groups=self.groups)


class PosConv(nn.Module):
    def __init__(self, cfg: WavLMConfig):
        super().__init__()
        self.add_module("0", WeightNormConv(cfg.embed_dim, cfg.conv_pos, cfg.conv_pos_groups))
        self.remove = 1 if cfg.conv_pos % 2 == 0 else 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, C, T]
        # in fp32 whatever the compute dtype: cuDNN's fp16 kernels for this grouped 128-tap conv
        # were 7x slower than its fp32 ones on the H200 (docs/quality.md, "Throughput")
        with torch.autocast(device_type=x.device.type, enabled=False):
            y = getattr(self, "0")(x.float())
            if self.remove:
                y = y[:, :, : -self.remove]
            return F.gelu(y).to(x.dtype)


def relative_buckets(q_len: int, k_len: int, num_buckets: int, max_distance: int, device) -> torch.Tensor:
    """Bidirectional log-spaced buckets of (key position - query position), [q_len, k_len]."""
    rel = torch.arange(k_len, device=device)[None, :] - torch.arange(q_len, device=device)[:, None]
    half = num_buckets // 2
    out = (rel > 0).long() * half
    rel = rel.abs()
    exact = half // 2
    far = exact + (torch.log(rel.float().clamp(min=1) / exact) / math.log(max_distance / exact)
                   * (half - exact)).long()
    far = torch.clamp(far, max=half - 1)
    return out + torch.where(rel < exact, rel, far)


class SelfAttention(nn.Module):
    def __init__(self, cfg: WavLMConfig, has_bias_table: bool):
        super().__init__()
        d, h = cfg.embed_dim, cfg.heads
        self.heads, self.head_dim = h, d // h
        self.num_buckets, self.max_distance = cfg.num_buckets, cfg.max_distance
        self.k_proj, self.v_proj, self.q_proj, self.out_proj = (nn.Linear(d, d) for _ in range(4))
        self.has_bias_table = has_bias_table
        if has_bias_table:
            self.relative_attention_bias = nn.Embedding(cfg.num_buckets, h)
        self.gru_rel_pos = cfg.gru_rel_pos
        if cfg.gru_rel_pos:
            self.grep_linear = nn.Linear(self.head_dim, 8)
            self.grep_a = nn.Parameter(torch.ones(1, h, 1, 1))

    def position_bias(self, t: int, device) -> torch.Tensor:
        """[H, T, T] bias from the bucket table."""
        b = relative_buckets(t, t, self.num_buckets, self.max_distance, device)
        return self.relative_attention_bias(b).permute(2, 0, 1)

    def forward(self, x: torch.Tensor, key_pad: torch.Tensor, pos_bias: torch.Tensor | None) -> torch.Tensor:
        """x [B, T, C]; key_pad [B, T] True at padding; pos_bias [H, T, T] or None."""
        b, t, c = x.shape
        split = lambda y: y.view(b, t, self.heads, self.head_dim).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        mask = torch.zeros(b, 1, 1, t, dtype=q.dtype, device=x.device).masked_fill(
            key_pad[:, None, None, :], float("-inf"))
        if pos_bias is not None:
            bias = pos_bias[None].to(q.dtype)
            if self.gru_rel_pos:  # gate from the layer's (unprojected) query input, per head
                g = torch.sigmoid(self.grep_linear(split(x)).view(b, self.heads, t, 2, 4).sum(-1))
                gate_a, gate_b = g[..., :1], g[..., 1:]
                bias = (gate_a * (gate_b * self.grep_a - 1.0) + 2.0) * bias
            mask = mask + bias
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.out_proj(y.transpose(1, 2).reshape(b, t, c))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: WavLMConfig, has_bias_table: bool):
        super().__init__()
        self.pre_norm = cfg.layer_norm_first
        self.act = F.gelu if cfg.activation == "gelu" else F.relu
        self.self_attn = SelfAttention(cfg, has_bias_table)
        self.self_attn_layer_norm = nn.LayerNorm(cfg.embed_dim)
        self.fc1 = nn.Linear(cfg.embed_dim, cfg.ffn_dim)
        self.fc2 = nn.Linear(cfg.ffn_dim, cfg.embed_dim)
        self.final_layer_norm = nn.LayerNorm(cfg.embed_dim)

    def _ffn(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        return self.fc2(self.act(h.float()).to(h.dtype) if self.act is F.gelu else self.act(h))

    def forward(self, x: torch.Tensor, key_pad: torch.Tensor, pos_bias: torch.Tensor | None) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.self_attn(self.self_attn_layer_norm(x), key_pad, pos_bias)
            return x + self._ffn(self.final_layer_norm(x))
        x = self.self_attn_layer_norm(x + self.self_attn(x, key_pad, pos_bias))
        return self.final_layer_norm(x + self._ffn(x))


class Encoder(nn.Module):
    def __init__(self, cfg: WavLMConfig):
        super().__init__()
        self.cfg = cfg
        self.pos_conv = PosConv(cfg)
        self.layers = nn.ModuleList(
            EncoderLayer(cfg, cfg.relative_position_embedding and i == 0) for i in range(cfg.layers))
        self.layer_norm = nn.LayerNorm(cfg.embed_dim)

    def forward(self, x: torch.Tensor, valid: torch.Tensor) -> list[torch.Tensor]:
        """x [B, T, C] -> hidden states: the input of every layer, then the encoder output."""
        x = x.masked_fill(~valid[:, :, None], 0.0)
        x = x + self.pos_conv(x.transpose(1, 2)).transpose(1, 2)
        if not self.cfg.layer_norm_first:
            x = self.layer_norm(x)
        key_pad = ~valid
        first = self.layers[0] if len(self.layers) else None
        attn = first.self_attn if isinstance(first, EncoderLayer) else None
        pos_bias = attn.position_bias(x.shape[1], x.device) if attn is not None and attn.has_bias_table else None
        states = []
        for layer in self.layers:
            states.append(x)
            x = layer(x, key_pad, pos_bias)
        if self.cfg.layer_norm_first:
            x = self.layer_norm(x)
        states.append(x)
        return states


class WavLM(nn.Module):
    """forward(wave [B, T], lengths [B]) -> (hidden states [L+1] x [B, F, C], frame counts [B])."""

    def __init__(self, cfg: WavLMConfig):
        super().__init__()
        self.cfg = cfg
        embed = cfg.conv_layers[-1][0]
        self.feature_extractor = FeatureExtractor(cfg)
        self.layer_norm = nn.LayerNorm(embed)
        self.post_extract_proj = nn.Linear(embed, cfg.embed_dim) if embed != cfg.embed_dim else None
        self.mask_emb = nn.Parameter(torch.zeros(cfg.embed_dim))  # pre-training only; kept for the key
        self.encoder = Encoder(cfg)

    def normalize_waves(self, wave: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Per-clip zero mean / unit variance over its own samples (cfg.normalize), padding stays 0."""
        valid = frame_mask(lengths, wave.shape[1])
        m = valid.to(wave.dtype)
        n = m.sum(1, keepdim=True).clamp(min=1.0)
        mean = (wave * m).sum(1, keepdim=True) / n
        var = (((wave - mean) * m) ** 2).sum(1, keepdim=True) / n
        return ((wave - mean) / torch.sqrt(var + 1e-5)) * m

    def forward(self, wave: torch.Tensor, lengths: torch.Tensor,
                host_lengths: Sequence[int] | None = None) -> tuple[list[torch.Tensor], torch.Tensor]:
        if self.cfg.normalize:
            wave = self.normalize_waves(wave.float(), lengths).to(wave.dtype)
        feats, frames = self.feature_extractor(wave, lengths, host_lengths)
        x = self.layer_norm(feats.transpose(1, 2))
        if self.post_extract_proj is not None:
            x = self.post_extract_proj(x)
        return self.encoder(x, frame_mask(frames, x.shape[1])), frames


def remap_weight_norm_keys(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """torch >= 2.1 `parametrizations.weight.original0/1` names -> `weight_g`/`weight_v`."""
    out = {}
    for k, v in state.items():
        k = k.replace("parametrizations.weight.original0", "weight_g").replace("parametrizations.weight.original1",
                                                                               "weight_v")
        out[k] = v
    return out
