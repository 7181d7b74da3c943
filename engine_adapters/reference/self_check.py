"""``python -m engine_adapters.reference --self-check [--profile NAME]``: the reference engine's
own repository check, the demo plan's validator (docs/plans.md, "Validators").

It synthesises one utterance exactly as a request would be rendered (espeak-ng, the profile's
degradation and frame limit), encodes it as the WAV the wire carries, decodes that WAV back with
the engine's own prompt decoder and checks what a listener would: the decoded samples equal the
rendered ones (lossless profiles), the rate is the output rate, it lasts as long as speech of the
sentence should, it is voiced speech at a human pitch, and a second rendering is byte-identical
(the determinism contract). Exit 0 when every check holds; 1 with one line per failed check.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from engine_adapters.reference.encoders import wav_bytes
from engine_adapters.reference.espeak import EspeakSynth
from engine_adapters.reference.profiles import OUTPUT_SAMPLE_RATE, get_profile
from engine_adapters.reference.synthesis import Synthesizer, decode_prompt
from engine_adapters.reference.voice import analyze, calibrate_cached

SENTENCE = "The quick brown fox jumps over the lazy dog."
SEED = 42
DURATION_S = (1.0, 8.0)  # plausible length of SENTENCE at espeak's rates (about 2.5 s at 175 wpm)
F0_HZ = (60.0, 400.0)  # a human speaking pitch


def problems(profile_name: str, profiles_file: Path | None = None) -> tuple[list[str], str]:
    """(failed checks, one-line summary) for one profile."""
    profile = get_profile(profile_name, profiles_file)
    espeak = EspeakSynth.shared()
    synth = Synthesizer(espeak, calibrate_cached(espeak))
    first = synth.render(SENTENCE, None, SEED, profile)
    again = synth.render(SENTENCE, None, SEED, profile)
    out: list[str] = []
    if not np.array_equal(first.samples, again.samples):
        out.append("determinism: two renderings of the same text, voice and seed differ")
    decoded = decode_prompt(wav_bytes(first.samples))
    if decoded.sample_rate != OUTPUT_SAMPLE_RATE:
        out.append(f"rate: the WAV decodes at {decoded.sample_rate} Hz, not {OUTPUT_SAMPLE_RATE}")
    if profile.lossless and not np.array_equal(np.round(decoded.samples * 32768).astype(np.int16), first.samples):
        out.append("decode: the WAV's samples differ from the rendered ones")
    lo, hi = DURATION_S
    if not lo <= decoded.duration_s <= hi:
        out.append(f"duration: {decoded.duration_s:.2f} s of audio for {SENTENCE!r}, expected {lo:g}-{hi:g} s")
    try:
        voice = analyze(decoded.samples, decoded.sample_rate)
        f0 = voice.f0_median_hz
        if not F0_HZ[0] <= f0 <= F0_HZ[1]:
            out.append(f"pitch: median F0 {f0:.0f} Hz is outside {F0_HZ[0]:g}-{F0_HZ[1]:g} Hz")
        summary = (f"profile {profile.name}: {decoded.duration_s:.2f} s at {decoded.sample_rate} Hz, "
                   f"{voice.voiced_s:.2f} s voiced, median F0 {f0:.0f} Hz")
    except ValueError as exc:
        out.append(f"speech: the decoded audio is not voiced speech ({exc})")
        summary = f"profile {profile.name}: {decoded.duration_s:.2f} s at {decoded.sample_rate} Hz"
    return out, summary


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m engine_adapters.reference --self-check",
                                description="synthesise one utterance, decode it and check it")
    p.add_argument("--profile", default="baseline", help="engine profile to render with (default: baseline)")
    p.add_argument("--profiles-file", type=Path, default=None, help="TOML file of extra profiles")
    args = p.parse_args(argv)
    try:
        failed, summary = problems(args.profile, args.profiles_file)
    except Exception as exc:  # espeak missing, bad profile ...: a failed check, said in one line
        print(f"self-check FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    for line in failed:
        print(f"self-check FAILED: {line}", file=sys.stderr)
    print(f"self-check {'FAILED' if failed else 'OK'}: {summary}")
    return 1 if failed else 0
