"""Compute precision of a scorer's forward pass, set explicitly for every call.

A scorer's numbers depend on more than its weights: on CUDA, PyTorch may run fp32 matrix products
and convolutions on TF32 tensor cores (10-bit mantissa) depending on process-wide flags that any
library or environment variable can flip. Each model call therefore runs inside `precision(dtype,
device)`, which sets those flags for the call and restores them after, so a stored row's
`dtype` (part of scorer_version, and of model_hash when not the default) says exactly how it was
computed. docs/quality.md ("Compute precision") states the three settings and what was measured.

- `float32`: matrix products in IEEE fp32; convolutions as PyTorch's defaults leave them (cuDNN may
  use TF32), which is how seed-tts-eval's and SpeechMOS's scripts run. The default everywhere.
- `tf32`: matrix products and convolutions on TF32 tensor cores; fp32 storage and accumulation.
- `float16`: CUDA autocast to fp16 (norms, softmax and reductions stay fp32 as autocast decides).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

DTYPES = ("float32", "tf32", "float16")


@contextmanager
def precision(dtype: str, device: str) -> Iterator[None]:
    """Run the enclosed model call at `dtype` on `device` (flags restored on exit)."""
    import torch

    if dtype not in DTYPES:
        raise ValueError(f"unknown compute dtype {dtype!r} (have: {', '.join(DTYPES)})")
    cuda = str(device).startswith("cuda")
    if dtype != "float32" and not cuda:
        raise ValueError(f"compute dtype {dtype} needs a CUDA device (device is {device})")
    saved_matmul = torch.get_float32_matmul_precision()
    saved_conv = torch.backends.cudnn.allow_tf32
    torch.set_float32_matmul_precision("high" if dtype == "tf32" else "highest")
    torch.backends.cudnn.allow_tf32 = True  # PyTorch's default; tf32 relies on it too
    try:
        with torch.autocast(device_type="cuda", dtype=torch.float16, enabled=cuda and dtype == "float16"):
            yield
    finally:
        torch.set_float32_matmul_precision(saved_matmul)
        torch.backends.cudnn.allow_tf32 = saved_conv
