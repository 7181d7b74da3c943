"""Per-request intermediate arrays, for the console's equivalence check (docs/equivalence.md).

An engine started with `--dump-tensors DIR` writes, for each request carrying the header
`X-Dump-Tensors: NAME`, one `.npy` file per array under `DIR/NAME/`, with stable names:

- `voice.npy`: float32 [rate, pitch, range], the espeak voice matched to the prompt;
- `frame_energy.npy`: RMS of each 40 ms codec frame (960 samples) of the output, computed in
  the profile's precision (float16 for `audio = "precision"`, else float32);
- `output.npy`: the waveform the stream carries, float32 in full-scale units (int16 / 32768).

Files are written (atomically: a temporary name, then a rename) before the stream's first
byte, so a client that has read the whole response finds them complete.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from engine_adapters.reference.profiles import SAMPLES_PER_FRAME, Profile

DUMP_HEADER = "X-Dump-Tensors"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")


class DumpNameError(ValueError):
    """The header's value is not one safe folder name."""


def dump_name(value: str | None) -> str | None:
    """The folder name a request asked for (None: no dump); refuses anything but one plain name."""
    if value is None:
        return None
    if not _NAME.match(value) or value in (".", ".."):
        raise DumpNameError(f"{DUMP_HEADER}: {value!r} is not a plain folder name ([A-Za-z0-9._-], at most 200)")
    return value


def intermediates(samples: np.ndarray, voice: tuple[int, int, int], profile: Profile) -> dict[str, np.ndarray]:
    dtype: type[np.floating] = np.float16 if profile.reduced_precision else np.float32
    frames = -(-len(samples) // SAMPLES_PER_FRAME)
    padded = np.zeros(frames * SAMPLES_PER_FRAME, np.float64)
    padded[: len(samples)] = samples
    x = (padded / 32768.0).astype(dtype).reshape(frames, SAMPLES_PER_FRAME)
    energy = np.sqrt(np.mean(np.square(x), axis=1, dtype=dtype)).astype(dtype)
    return {"voice": np.asarray(voice, np.float32), "frame_energy": energy,
            "output": (samples.astype(np.float32) / np.float32(32768.0))}


def write_dump(root: Path, name: str, arrays: dict[str, np.ndarray]) -> None:
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    for key, arr in arrays.items():
        tmp = folder / f".{key}.npy.tmp"
        with open(tmp, "wb") as f:
            np.save(f, arr, allow_pickle=False)
        os.replace(tmp, folder / f"{key}.npy")
