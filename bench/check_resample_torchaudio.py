"""Our sinc resampler (stats/quality/resample.py) against torchaudio's default
`torchaudio.functional.resample` (sinc_interp_hann, 6 zero crossings, roll-off 0.99), which
seed-tts-eval's SIM script and SpeechMOS apply before their models. torchaudio is not installed on
the development machines; run this where it is (the GPU host's image has it):

    python bench/check_resample_torchaudio.py

Prints, per rate pair, the max abs difference and the max abs sample value (so the difference
reads relative to the signal), and exits 1 when any difference exceeds 1e-5.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from stats.quality.resample import resample_sinc  # noqa: E402

TOLERANCE = 1e-5
PAIRS = ((24000, 16000), (22050, 16000), (44100, 16000), (48000, 16000), (8000, 16000), (16000, 16000))


def main() -> int:
    try:
        import torch
        import torchaudio.functional as AF
    except ImportError as exc:
        print(f"torchaudio unavailable here ({exc}); run this on a host that has it")
        return 2
    rng = np.random.default_rng(0)
    worst = 0.0
    for orig, new in PAIRS:
        n = int(orig * 3.7)
        t = np.arange(n) / orig
        wave = (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(n)).astype(np.float32)
        ours = resample_sinc(wave, orig, new)
        theirs = AF.resample(torch.from_numpy(wave), orig, new).numpy()
        if ours.shape != theirs.shape:
            print(f"{orig} -> {new}: length {ours.shape[0]} here vs {theirs.shape[0]} torchaudio")
            return 1
        diff = float(np.max(np.abs(ours - theirs)))
        worst = max(worst, diff)
        print(f"{orig:>6} -> {new}: {len(ours)} samples, max |diff| {diff:.3g} (max |x| {np.max(np.abs(theirs)):.3g})")
    print(f"worst max |diff| {worst:.3g} against tolerance {TOLERANCE:g}")
    return 0 if worst <= TOLERANCE else 1


if __name__ == "__main__":
    raise SystemExit(main())
