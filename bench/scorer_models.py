"""Random-weight scorer instances for the scorer bench and GPU check: the real scorer classes
with models of the published architectures (full size) or tiny ones (--quick), built in memory
(a full-size WavLM-large / Whisper-large-v3 file would take minutes to write and read)."""

from __future__ import annotations

import tempfile
from pathlib import Path

WAVLM_LARGE_CFG = {  # s3prl wavlm_large.pt cfg (architecture keys)
    "extractor_mode": "layer_norm", "encoder_layers": 24, "encoder_embed_dim": 1024, "encoder_ffn_embed_dim": 4096,
    "encoder_attention_heads": 16, "activation_fn": "gelu", "layer_norm_first": True,
    "conv_feature_layers": "[(512,10,5)] + [(512,3,2)] * 4 + [(512,2,2)] * 2", "conv_bias": False,
    "normalize": True, "conv_pos": 128, "conv_pos_groups": 16, "relative_position_embedding": True,
    "num_buckets": 320, "max_distance": 800, "gru_rel_pos": True,
}


def seedtts_sim(device: str, quick: bool, batch: int, dtype: str = "float32", seed: int = 0):
    import torch

    from stats.quality.ecapa import EcapaHead, HeadConfig
    from stats.quality.sim import SeedTtsSimScorer
    from stats.quality.tiny_checkpoints import _randomise, build_tiny_seedtts_sim
    from stats.quality.wavlm import WavLM, WavLMConfig

    if quick:
        s = SeedTtsSimScorer(build_tiny_seedtts_sim(Path(tempfile.mkdtemp()), seed=seed), device=device,
                             batch_size=batch, dtype=dtype)
        s.ensure_loaded()
        return s
    gen = torch.Generator().manual_seed(seed)
    cfg = WavLMConfig.from_cfg(WAVLM_LARGE_CFG)
    ssl, head = WavLM(cfg), EcapaHead(HeadConfig(25, 1024, 512, 5, 8, 128, 1536, 1536, 128, False, 256))
    for m in (ssl, head):
        _randomise(m, gen)
        with torch.no_grad():  # keep activations in range at full depth
            for name, p in m.named_parameters():
                if p.dim() > 1 and "weight_v" not in name:
                    p.mul_(1.0 / (0.3 * max(1, p[0].numel()) ** 0.5))
    s = SeedTtsSimScorer(None, device=device, batch_size=batch, dtype=dtype)
    s._ssl, s._head, s._loaded, s._source = ssl.to(device).eval(), head.to(device).eval(), True, "random"
    return s


def utmos22(device: str, quick: bool, batch: int, seed: int = 0, dtype: str = "float32"):
    import torch

    from stats.quality.tiny_checkpoints import _randomise, build_tiny_utmos22
    from stats.quality.utmos import Utmos22Scorer
    from stats.quality.utmos_model import STRIDES, Utmos22Strong
    from stats.quality.wavlm import WavLMConfig

    if quick:
        s = Utmos22Scorer(build_tiny_utmos22(Path(tempfile.mkdtemp()), seed=seed), device=device, batch_size=batch,
                          dtype=dtype)
        s.ensure_loaded()
        return s
    kernels = (10, 3, 3, 3, 3, 2, 2)
    cfg = WavLMConfig.from_cfg({"extractor_mode": "default", "encoder_layers": 12, "encoder_embed_dim": 768,
                                "encoder_ffn_embed_dim": 3072, "encoder_attention_heads": 12,
                                "conv_feature_layers": repr([(512, k, s) for k, s in zip(kernels, STRIDES)])})
    m = Utmos22Strong(cfg, 128, 128, 512, 2048)
    _randomise(m, torch.Generator().manual_seed(seed))
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() > 1 and "weight_v" not in name:
                p.mul_(1.0 / (0.3 * max(1, p[0].numel()) ** 0.5))
    folder = Path(tempfile.mkdtemp())
    s = Utmos22Scorer(folder, device=device, batch_size=batch, dtype=dtype)
    s._native, s._loaded = m.to(device).eval(), True
    return s


def whisper(device: str, quick: bool, batch: int, max_new_tokens: int = 40, seed: int = 0, dtype: str = "float32"):
    """Whisper-large-v3 sizes (quick: tiny) with the tiny byte-level tokenizer; decoding is capped
    at `max_new_tokens` (random weights never stop on their own; ~40 tokens is a 4 s sentence)."""
    from stats.quality.tiny_checkpoints import build_tiny_whisper
    from stats.quality.whisper_asr import WhisperScorer

    folder = Path(tempfile.mkdtemp())
    if quick:
        build_tiny_whisper(folder, seed=seed, max_new_tokens=max_new_tokens)
    else:
        build_tiny_whisper(folder, seed=seed, d_model=1280, layers=32, heads=20, ffn=5120, mel_bins=128,
                           max_new_tokens=max_new_tokens)
    s = WhisperScorer(folder, device=device, batch_size=batch, dtype=dtype)
    s.ensure_loaded()
    return s
