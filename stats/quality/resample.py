"""Band-limited sinc resampling with a Hann window: the resampler seed-tts-eval's SIM script and
SpeechMOS's UTMOS22 apply to their inputs (torchaudio's default `sinc_interp_hann`, 6 zero
crossings, roll-off 0.99), written here so the scorers get the same 16 kHz samples without
torchaudio. docs/quality.md ("Resampling") states the algorithm and where it differs from soxr.

y[j] = sum_i x[i] * h(i/orig - j/new), h(t) = scale * sinc(pi*base*t) * cos^2(pi*base*t / (2*W)) for
|base*t| <= W (W = 6 zero crossings, base = min(orig, new) * 0.99 after dividing both rates by their
gcd, scale = base / orig). The `new` distinct phases form a conv1d bank applied at stride `orig`.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING, Sequence

import numpy as np

if TYPE_CHECKING:
    import torch

ZERO_CROSSINGS = 6
ROLLOFF = 0.99


@lru_cache(maxsize=16)
def sinc_kernel(orig: int, new: int, zero_crossings: int = ZERO_CROSSINGS,
                rolloff: float = ROLLOFF) -> tuple[np.ndarray, int, int, int]:
    """(kernel [new, 2*width + orig] float32, width, orig, new) for rates reduced by their gcd.
    The kernel is evaluated in float64 and stored as float32."""
    g = math.gcd(int(orig), int(new))
    orig, new = int(orig) // g, int(new) // g
    base = min(orig, new) * rolloff
    width = math.ceil(zero_crossings * orig / base)
    taps = np.arange(-width, width + orig, dtype=np.float64)[None, :] / orig
    phase = -np.arange(new, dtype=np.float64)[:, None] / new
    t = np.clip((phase + taps) * base, -zero_crossings, zero_crossings)
    window = np.cos(t * math.pi / zero_crossings / 2) ** 2
    arg = t * math.pi
    safe = np.where(arg == 0, 1.0, arg)
    kern = np.where(arg == 0, 1.0, np.sin(safe) / safe) * window * (base / orig)
    return kern.astype(np.float32), width, orig, new


def resample_sinc(wave: np.ndarray, orig_rate: int, new_rate: int) -> np.ndarray:
    """Resample a mono float32 waveform; output length ceil(len * new / orig)."""
    wave = np.asarray(wave, dtype=np.float32)
    if int(orig_rate) == int(new_rate):
        return wave
    import torch

    x = torch.from_numpy(np.ascontiguousarray(wave)).reshape(1, -1)
    return resample_sinc_batch(x, int(orig_rate), int(new_rate))[0, : out_length(len(wave), orig_rate, new_rate)].numpy().copy()


def out_length(samples: int, orig_rate: int, new_rate: int) -> int:
    """How many samples a clip of `samples` at `orig_rate` has at `new_rate`: ceil(n * new / orig)."""
    g = math.gcd(int(orig_rate), int(new_rate))
    orig, new = int(orig_rate) // g, int(new_rate) // g
    return math.ceil(new * int(samples) / orig)


_ON_DEVICE: dict[tuple[int, int, str], "torch.Tensor"] = {}


def _kernel_on(orig_rate: int, new_rate: int, device: "torch.device") -> "torch.Tensor":
    """The conv1d bank on `device`, copied there once (a per-batch copy would wait for the device)."""
    import torch

    key = (orig_rate, new_rate, str(device))
    if key not in _ON_DEVICE:
        _ON_DEVICE[key] = torch.from_numpy(sinc_kernel(orig_rate, new_rate)[0])[:, None, :].to(device)
    return _ON_DEVICE[key]


def resample_sinc_batch(wave: "torch.Tensor", orig_rate: int, new_rate: int) -> "torch.Tensor":
    """[B, T] float32 clips zero-padded at the end, on any device -> [B, out_length(T)].

    Each clip's first out_length(n) outputs equal its own resample_sinc: past a clip's end both
    see zeros, so padding does not reach them. Always IEEE fp32, never TF32 or autocast, whatever
    the scorer's compute dtype: the inputs the model sees must not depend on it."""
    import torch
    import torch.nn.functional as F

    kern, width, orig, new = sinc_kernel(int(orig_rate), int(new_rate))
    b, n = wave.shape
    x = F.pad(wave.float().reshape(b, 1, n), (width, width + orig))
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.inference_mode(), torch.autocast(device_type=wave.device.type, enabled=False):
            y = F.conv1d(x, _kernel_on(int(orig_rate), int(new_rate), wave.device), stride=orig)  # [B, new, frames]
    finally:
        torch.backends.cudnn.allow_tf32 = saved
    return y.transpose(1, 2).reshape(b, -1)[:, : out_length(n, orig, new)]


def padded_batch(clips: Sequence[tuple[np.ndarray, int]], rate: int,
                 device: "str | torch.device") -> tuple["torch.Tensor", "torch.Tensor", list[int]]:
    """Clips that share one source rate -> ([B, T] float32 at `rate` on `device`, [B] lengths
    there, the same lengths on the host).

    The clips are zero-padded at their source rate, moved to the device and resampled there in
    one call; past each clip's own length the batch is zero again, so every row is that clip
    resampled alone and zero-padded. Resampling on the device leaves the CPU only the file reads.
    On CUDA each clip is copied into its row of a zeroed device tensor; a clip read into pinned
    memory (stats.quality.audio.read_native) is copied without the CPU waiting, so it must stay
    alive until the batch's results are back (the caller keeps it; docs/quality.md, "Throughput")."""
    import torch

    from_rate = {int(sr) for _, sr in clips}
    if len(from_rate) != 1:
        raise ValueError(f"padded_batch needs clips of one rate, got {sorted(from_rate)}")
    src = from_rate.pop()
    n = [out_length(len(w), src, rate) for w, _ in clips]
    cuda = torch.device(device).type == "cuda"
    lengths = torch.tensor(n, dtype=torch.long, pin_memory=cuda).to(device, non_blocking=cuda)
    x = torch.zeros(len(clips), max(len(w) for w, _ in clips), dtype=torch.float32, device=device)
    for j, (w, _) in enumerate(clips):  # each clip into its row; on CUDA from pinned memory without waiting
        x[j, : len(w)].copy_(torch.from_numpy(np.asarray(w, dtype=np.float32)), non_blocking=cuda)
    if src != int(rate):
        x = resample_sinc_batch(x, src, int(rate))[:, : max(n)]
        x = x.masked_fill(torch.arange(x.shape[1], device=x.device)[None, :] >= lengths[:, None], 0.0)
    return x, lengths, n


def batches_by_rate(clips: Sequence[tuple[np.ndarray, int]], rate: int, size: int, min_samples: int,
                    longest_first: bool = False) -> tuple[list[int], list[int], list[list[int]]]:
    """How a scorer batches clips at their own rates: (each clip's length at `rate`, the indexes
    of clips too short for the model there, batches of at most `size` indexes, one source rate
    per batch, ordered by length within each rate: longest first or shortest first)."""
    n = [out_length(len(w), sr, rate) for w, sr in clips]
    short = [i for i in range(len(clips)) if n[i] < min_samples]
    ok = [i for i in range(len(clips)) if n[i] >= min_samples]
    batches = []
    for src in sorted({clips[i][1] for i in ok}):
        order = sorted((i for i in ok if clips[i][1] == src), key=lambda i: len(clips[i][0]), reverse=longest_first)
        batches += [order[s:s + size] for s in range(0, len(order), size)]
    return n, short, batches
