"""Compute precision is set for each model call, not inherited from process-wide flags
(stats.quality.precision; docs/quality.md "Compute precision")."""

from __future__ import annotations

import pytest
import torch

from stats.quality.precision import DTYPES, precision
from stats.quality.registry import make_scorer
from stats.quality.tiny_checkpoints import build_tiny_seedtts_sim


def test_float32_call_ignores_a_tf32_flag_set_elsewhere_and_restores_it():
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("high")  # another library asked for TF32 matmuls
        with precision("float32", "cpu"):
            assert torch.get_float32_matmul_precision() == "highest"
        assert torch.get_float32_matmul_precision() == "high"
    finally:
        torch.set_float32_matmul_precision(before)


def test_flags_are_restored_when_the_call_raises():
    before = torch.get_float32_matmul_precision()
    with pytest.raises(RuntimeError):
        with precision("float32", "cpu"):
            raise RuntimeError("model failed")
    assert torch.get_float32_matmul_precision() == before


@pytest.mark.parametrize("dtype", ["tf32", "float16"])
def test_reduced_precision_needs_cuda(dtype):
    with pytest.raises(ValueError, match=f"{dtype} needs a CUDA device"):
        with precision(dtype, "cpu"):
            pass


def test_unknown_dtype_is_named():
    with pytest.raises(ValueError, match="unknown compute dtype 'bf16'"):
        with precision("bf16", "cpu"):
            pass


@pytest.mark.parametrize("name", ["seedtts-sim", "utmos22", "whisper"])
def test_protocol_scorers_offer_every_precision_with_float32_first(name):
    cls = type(make_scorer(name, {}, device="cpu"))
    assert cls.dtypes == DTYPES and cls.dtypes[0] == "float32"


@pytest.mark.slow  # 7 s in a loaded `make check`
def test_tf32_rows_never_share_a_model_hash_with_fp32(tmp_path):
    folder = build_tiny_seedtts_sim(tmp_path / "sim", seed=3)
    fp32 = make_scorer("seedtts-sim", {"seedtts-sim": folder}, device="cpu")
    tf32 = make_scorer("seedtts-sim", {"seedtts-sim": folder}, device="cpu", dtype="tf32")
    assert fp32.model_hash != tf32.model_hash and "tf32" in tf32.version
    with pytest.raises(Exception, match="tf32 needs a CUDA device"):
        tf32.ensure_loaded()


def test_positional_conv_and_resampler_run_in_fp32_under_autocast():
    """The positional conv (cuDNN's fp16 kernels for it were 7x slower) and the resampler (the
    model's input must not depend on the compute dtype) leave autocast: under a reduced-precision
    autocast they give the fp32 result (CPU bfloat16 autocast stands in for CUDA fp16 here)."""
    from stats.quality.resample import resample_sinc_batch
    from stats.quality.wavlm import PosConv, WavLMConfig

    torch.manual_seed(0)
    pc = PosConv(WavLMConfig.from_cfg({"encoder_embed_dim": 32, "encoder_attention_heads": 4, "conv_pos": 8,
                                       "conv_pos_groups": 4}))
    torch.nn.init.normal_(pc._modules["0"].weight_v)
    x = torch.randn(2, 32, 50)
    wave = torch.randn(2, 2400)
    with torch.inference_mode():
        want, want_rs = pc(x), resample_sinc_batch(wave, 24000, 16000)
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
            got, got_rs = pc(x), resample_sinc_batch(wave, 24000, 16000)
    assert got.dtype == torch.float32 and torch.equal(got, want)
    assert got_rs.dtype == torch.float32 and torch.equal(got_rs, want_rs)
