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
                       max_new_tokens: int = 24) -> Path:
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
    ids = dict(zip(WHISPER_SPECIALS, tok.convert_tokens_to_ids(WHISPER_SPECIALS)))
    proc = WhisperProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=80), tokenizer=tok)
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    cfg = WhisperConfig(vocab_size=len(tok), num_mel_bins=80, d_model=d_model, encoder_layers=layers,
                        decoder_layers=layers, encoder_attention_heads=2, decoder_attention_heads=2,
                        encoder_ffn_dim=2 * d_model, decoder_ffn_dim=2 * d_model, max_source_positions=1500,
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
