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

import numpy as np

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
    import torch.nn.functional as F

    kern, width, orig, new = sinc_kernel(int(orig_rate), int(new_rate))
    n = wave.shape[-1]
    x = torch.from_numpy(np.ascontiguousarray(wave)).reshape(1, 1, n)
    x = F.pad(x, (width, width + orig))
    with torch.inference_mode():
        y = F.conv1d(x, torch.from_numpy(kern)[:, None, :], stride=orig)  # [1, new, frames]
    y = y.transpose(1, 2).reshape(-1)
    return y[: math.ceil(new * n / orig)].numpy().copy()
