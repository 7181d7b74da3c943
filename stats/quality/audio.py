"""Loading stored WAVs for scorers: mono float32 at the scorer's rate (16 kHz for all of ours)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import soundfile as sf
import soxr

SCORER_RATE = 16000


class AudioError(Exception):
    """A WAV cannot be read or holds no samples; becomes a scorer-error row, not a crash."""


RESAMPLERS = ("soxr", "sinc", "fft")


def load_audio(path: Path, rate: int = SCORER_RATE, resampler: str = "soxr") -> np.ndarray:
    """Read a WAV, mix to mono, resample to `rate`; float32.

    `soxr`: soxr HQ, clipped to [-1, 1] (the bundled scorers). `sinc`: the Hann-windowed sinc
    resampler the protocol's reference scripts use (stats.quality.resample), not clipped, so a
    protocol scorer sees the samples seed-tts-eval / SpeechMOS would. `fft`: scipy.signal.resample
    to int(n * rate / sr) samples in float64, as seed-tts-eval's run_wer.py feeds Whisper."""
    try:
        data, sr = sf.read(str(path), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, OSError) as exc:
        raise AudioError(f"unreadable audio {path}: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}") from None
    if data.shape[0] == 0:
        raise AudioError(f"empty audio {path}")
    mono = data.mean(axis=1)
    if resampler == "sinc":
        from stats.quality.resample import resample_sinc
        return resample_sinc(mono, sr, rate)
    if resampler == "fft":
        if sr == rate:
            return mono
        from scipy.signal import resample
        return resample(mono.astype(np.float64), int(len(mono) * rate / sr)).astype(np.float32)
    if sr != rate:
        mono = soxr.resample(mono, sr, rate, quality="HQ").astype(np.float32)
    return np.clip(mono, -1.0, 1.0)


def load_each(paths: Sequence[Path], rate: int = SCORER_RATE,
              resampler: str = "soxr") -> tuple[list[np.ndarray | str], dict[int, np.ndarray]]:
    """`load_audio` per path, an unreadable file becoming its error text instead of failing the
    batch; also index -> waveform of those that loaded, which a scorer runs its model on."""
    out: list[np.ndarray | str] = []
    for path in paths:
        try:
            out.append(load_audio(path, rate, resampler))
        except AudioError as exc:
            out.append(str(exc))
    return out, {i: w for i, w in enumerate(out) if not isinstance(w, str)}
