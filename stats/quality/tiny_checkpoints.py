"""Randomly initialised, tiny Whisper and WavLM x-vector checkpoints written to a folder in the
exact layout of real Hugging Face checkpoints, built offline from transformers configs.

They exist to prove the real loading, batching and device path of the `whisper` and
`wavlm-ecapa` scorers end to end (tests on CPU, bench/gpu_check_quality.py on a GPU) without a
download. Their transcripts and embeddings are meaningless by construction.

The Whisper tokenizer is a byte-level BPE over the 256 byte symbols plus a few merges and the
special tokens Whisper's generation needs (<|startoftranscript|>, <|en|>, <|transcribe|>,
<|notimestamps|> ...); `generation_config.json` carries lang_to_id/task_to_id like the real one.
"""

from __future__ import annotations

import json
from pathlib import Path

WHISPER_SPECIALS = ["<|endoftext|>", "<|startoftranscript|>", "<|en|>", "<|translate|>", "<|transcribe|>",
                    "<|startoflm|>", "<|startofprev|>", "<|nocaptions|>", "<|notimestamps|>"]


def build_tiny_whisper(folder: Path, *, seed: int = 0, d_model: int = 64, layers: int = 2,
                       max_new_tokens: int = 24, heads: int = 2, ffn: int | None = None, mel_bins: int = 80) -> Path:
    import torch
    from transformers import (GenerationConfig, WhisperConfig, WhisperFeatureExtractor,
                              WhisperForConditionalGeneration, WhisperProcessor, WhisperTokenizer)
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {c: i for i, c in enumerate(bytes_to_unicode().values())}
    merges = [("t", "h"), ("h", "e"), ("Ġ", "t"), ("Ġt", "h"), ("Ġth", "e")]
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(f"{a} {b}" for a, b in merges) + "\n")
    tok = WhisperTokenizer(str(folder / "vocab.json"), str(folder / "merges.txt"), unk_token="<|endoftext|>",
                           bos_token="<|endoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    tok.add_special_tokens({"additional_special_tokens": WHISPER_SPECIALS[1:]})
    special_ids = tok.convert_tokens_to_ids(WHISPER_SPECIALS)  # a list for a list of tokens
    assert isinstance(special_ids, list)
    ids = dict(zip(WHISPER_SPECIALS, special_ids))
    proc = WhisperProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=mel_bins), tokenizer=tok)
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    ffn = ffn or 2 * d_model
    cfg = WhisperConfig(vocab_size=len(tok), num_mel_bins=mel_bins, d_model=d_model, encoder_layers=layers,
                        decoder_layers=layers, encoder_attention_heads=heads, decoder_attention_heads=heads,
                        encoder_ffn_dim=ffn, decoder_ffn_dim=ffn, max_source_positions=1500,
                        max_target_positions=64, pad_token_id=eot, bos_token_id=eot, eos_token_id=eot,
                        decoder_start_token_id=sot)
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(cfg)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=sot, eos_token_id=eot, pad_token_id=eot, bos_token_id=eot,
        max_length=4 + max_new_tokens, lang_to_id={"<|en|>": ids["<|en|>"]},
        task_to_id={"translate": ids["<|translate|>"], "transcribe": ids["<|transcribe|>"]},
        is_multilingual=True, no_timestamps_token_id=ids["<|notimestamps|>"], begin_suppress_tokens=[],
        suppress_tokens=[])
    model.save_pretrained(folder)
    proc.save_pretrained(folder)
    # real checkpoints ship preprocessor_config.json; write it too so both layouts are covered
    proc.feature_extractor.save_pretrained(folder)
    return folder


def build_tiny_wavlm(folder: Path, *, seed: int = 0, hidden: int = 32, layers: int = 2) -> Path:
    import torch
    from transformers import Wav2Vec2FeatureExtractor, WavLMConfig, WavLMForXVector

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = WavLMConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=2,
                      intermediate_size=2 * hidden, conv_dim=(32, 32, 32, 32, 32, 32, 32),
                      num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
                      tdnn_dim=(32, 32, 32, 32, 64), xvector_output_dim=32, num_buckets=32,
                      max_bucket_distance=100, architectures=["WavLMForXVector"])
    torch.manual_seed(seed)
    WavLMForXVector(cfg).save_pretrained(folder)
    Wav2Vec2FeatureExtractor(feature_size=1, sampling_rate=16000, padding_value=0.0, do_normalize=True,
                             return_attention_mask=True).save_pretrained(folder)
    return folder


TINY_WAVLM_CFG = {
    # unilm WavLMConfig keys, as in an s3prl-converted wavlm_large.pt (sizes shrunk)
    "extractor_mode": "layer_norm", "encoder_layers": 3, "encoder_embed_dim": 32, "encoder_ffn_embed_dim": 64,
    "encoder_attention_heads": 4, "activation_fn": "gelu", "layer_norm_first": True,
    "conv_feature_layers": "[(24,10,5)] + [(24,3,2)] * 4 + [(24,2,2)] * 2", "conv_bias": False,
    "feature_grad_mult": 1.0, "normalize": True, "dropout": 0.1, "attention_dropout": 0.1,
    "activation_dropout": 0.0, "encoder_layerdrop": 0.0, "dropout_input": 0.0, "dropout_features": 0.0,
    "mask_length": 10, "mask_prob": 0.8, "mask_selection": "static", "mask_other": 0.0, "no_mask_overlap": False,
    "mask_min_space": 1, "mask_channel_length": 10, "mask_channel_prob": 0.0, "mask_channel_selection": "static",
    "mask_channel_other": 0.0, "no_mask_channel_overlap": False, "mask_channel_min_space": 1, "conv_pos": 16,
    "conv_pos_groups": 4, "relative_position_embedding": True, "num_buckets": 32, "max_distance": 100,
    "gru_rel_pos": True,
}


def _randomise(module, gen) -> None:
    """Every float parameter and BatchNorm running statistic drawn from N(0, 0.3^2) (running_var
    from U(0.5, 1.5)), so no tensor is left at an init value that could hide a wrong mapping."""
    import torch
    with torch.no_grad():
        for name, t in module.state_dict().items():
            if not t.is_floating_point():
                continue
            if name.endswith("running_var"):
                t.copy_(0.5 + torch.rand(t.shape, generator=gen))
            elif name.endswith("weight_g"):
                t.copy_(1.0 + 0.3 * torch.rand(t.shape, generator=gen))
            else:
                t.copy_(0.3 * torch.randn(t.shape, generator=gen))


def build_tiny_seedtts_sim(folder: Path, *, seed: int = 0, cfg: dict | None = None, channels: int = 32,
                           emb_dim: int = 16, finetuned: bool = True) -> Path:
    """`wavlm_large.pt` ({'cfg', 'model'}, unilm keys) and `wavlm_large_finetune.pth` ({'model'}:
    ECAPA_TDNN_SMALL keys, WavLM under feature_extract.model.) with small random weights."""
    import torch

    from stats.quality.ecapa import EcapaHead, HeadConfig
    from stats.quality.sv_checkpoint import SSL_FILE, SSL_PREFIX, SV_FILE
    from stats.quality.wavlm import WavLM, WavLMConfig

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cfg = dict(cfg or TINY_WAVLM_CFG)
    gen = torch.Generator().manual_seed(seed)
    wcfg = WavLMConfig.from_cfg(cfg)
    ssl = WavLM(wcfg)
    _randomise(ssl, gen)
    torch.save({"cfg": cfg, "model": ssl.state_dict()}, folder / SSL_FILE)
    head = EcapaHead(HeadConfig(wcfg.layers + 1, wcfg.embed_dim, channels, 5, 8, 8, 3 * channels, 3 * channels,
                                8, False, emb_dim))
    _randomise(head, gen)
    state = dict(head.state_dict())
    if finetuned:  # the fine-tuned extractor: the SSL weights moved a little
        state.update({SSL_PREFIX + k: v + 0.05 * torch.randn(v.shape, generator=gen) if v.is_floating_point() else v
                      for k, v in ssl.state_dict().items()})
    torch.save({"model": state}, folder / SV_FILE)
    return folder


def build_tiny_utmos22(folder: Path, *, seed: int = 0, embed: int = 24, layers: int = 2, conv: int = 16,
                       rnn: int = 8, proj: int = 16, emb: int = 4) -> Path:
    """`utmos22_strong_step7459_v1.pt`: a bare state dict in SpeechMOS UTMOS22Strong key names
    (wav2vec2.*, domain_emb, judge_emb, blstm.*, projection.*), small random weights."""
    import torch

    from stats.quality.utmos import STATE_FILE
    from stats.quality.utmos_model import HEADS, STRIDES, Utmos22Strong
    from stats.quality.wavlm import WavLMConfig

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    kernels = (10, 3, 3, 3, 3, 2, 2)
    cfg = WavLMConfig.from_cfg({"extractor_mode": "default", "encoder_layers": layers, "encoder_embed_dim": embed,
                                "encoder_ffn_embed_dim": 2 * embed, "encoder_attention_heads": HEADS,
                                "conv_feature_layers": repr([(conv, k, s) for k, s in zip(kernels, STRIDES)]),
                                "conv_pos": 16, "conv_pos_groups": 4})
    gen = torch.Generator().manual_seed(seed)
    model = Utmos22Strong(cfg, emb, emb, rnn, proj)
    _randomise(model, gen)
    torch.save(model.state_dict(), folder / STATE_FILE)
    return folder
