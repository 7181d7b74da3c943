"""Named behaviours of the reference engine, read from ``profiles.toml`` (plus an optional user file).

A profile is plain data: the scheduler's timing constants, how audio is degraded
and delivered, and which faults are injected at which rates. Keeping all of it in
one readable TOML file lets users add a profile without touching code.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BUILTIN_PROFILES = Path(__file__).with_name("profiles.toml")
PROFILES_ENV = "REFERENCE_ENGINE_PROFILES"

CODEC_FRAME_RATE = 25  # MiniCPM-o's talker emits 25 codec frames per second of audio
OUTPUT_SAMPLE_RATE = 24_000
SAMPLES_PER_FRAME = OUTPUT_SAMPLE_RATE // CODEC_FRAME_RATE

# the last three are misbehaviours (faults.LABEL_FAULTS): the stream completes, but says something false
FAULT_KINDS = ("in_stream_error", "drop", "http_500", "stall", "fatal", "emit_ns_overflow", "wav_rate", "pcm_rate")
AUDIO_MODES = ("lossless", "lossy", "precision")
DELIVERY_MODES = ("stream", "whole")


class ProfileError(ValueError):
    """A profile file or profile is invalid; the message names the file, profile and field."""


@dataclass(frozen=True, slots=True)
class Profile:
    """Everything a profile controls; see profiles.toml for the meaning of each field."""

    name: str
    description: str = ""
    max_num_seqs: int = 16
    prefill_s: float = 0.025
    step_base_s: float = 0.07
    step_per_seq_s: float = 0.004
    chunk_frames: int = 25
    audio: str = "lossless"
    delivery: str = "stream"
    lossy_band_hz: float = 3400.0
    lossy_snr_db: float = 15.0
    lossy_word_drop: float = 0.06
    fault_rates: dict[str, float] = field(default_factory=dict)
    fault_after_chunks: int = 1
    stall_s: float = 120.0
    cuda_busy_fraction: float = 0.8
    input_audio_prefill_s: float = 0.02  # extra prefill per second of thinker input audio
    max_audio_frames: int = 4096  # the talker's own token limit (vllm-omni deploy: stage 1 max_tokens)
    empty_audio_deltas: bool = False  # vllm-omni: empty audio deltas around the audio (as 0.30.0 emits)
    metrics_ttfa_skew_s: float = 0.0  # added to the time to first audio /metrics reports (a wrong server figure)

    @property
    def chunk_samples(self) -> int:
        """Samples of 24 kHz audio per streamed chunk."""
        return self.chunk_frames * SAMPLES_PER_FRAME

    @property
    def lossless(self) -> bool:
        return self.audio == "lossless"

    @property
    def lossy(self) -> bool:
        return self.audio == "lossy"

    @property
    def reduced_precision(self) -> bool:
        """`audio = "precision"`: the output path runs in float16 (synthesis.reduce_precision)."""
        return self.audio == "precision"

    def step_duration(self, active: int, admitted: int, input_audio_s: float = 0.0) -> float:
        """Seconds one decode step takes with ``active`` sequences, ``admitted`` of them new,
        whose thinker input audio totals ``input_audio_s`` seconds."""
        return (self.step_base_s + self.step_per_seq_s * active + self.prefill_s * admitted
                + self.input_audio_prefill_s * input_audio_s)

    def summary(self) -> dict[str, Any]:
        """JSON-friendly view (served on /v1/models so clients can record what they measured)."""
        return dataclasses.asdict(self)


def _validate(p: Profile, source: str) -> Profile:
    where = f"{source}: profile {p.name!r}"
    if p.max_num_seqs < 1:
        raise ProfileError(f"{where}: max_num_seqs must be >= 1")
    if p.chunk_frames < 1:
        raise ProfileError(f"{where}: chunk_frames must be >= 1")
    for name in ("prefill_s", "step_base_s", "step_per_seq_s", "stall_s"):
        if getattr(p, name) < 0:
            raise ProfileError(f"{where}: {name} must be >= 0")
    if p.step_base_s + p.step_per_seq_s <= 0:
        raise ProfileError(f"{where}: a decode step must take some time (step_base_s + step_per_seq_s > 0)")
    if p.audio not in AUDIO_MODES:
        raise ProfileError(f"{where}: audio must be one of {', '.join(AUDIO_MODES)}, not {p.audio!r}")
    if p.delivery not in DELIVERY_MODES:
        raise ProfileError(f"{where}: delivery must be one of {', '.join(DELIVERY_MODES)}, not {p.delivery!r}")
    if not 0 <= p.lossy_word_drop < 1:
        raise ProfileError(f"{where}: lossy_word_drop must be in [0, 1)")
    if p.lossy_band_hz <= 0 or p.lossy_band_hz >= OUTPUT_SAMPLE_RATE / 2:
        raise ProfileError(f"{where}: lossy_band_hz must be in (0, {OUTPUT_SAMPLE_RATE // 2})")
    unknown = sorted(set(p.fault_rates) - set(FAULT_KINDS))
    if unknown:
        raise ProfileError(f"{where}: unknown fault kind(s) {unknown}; known: {', '.join(FAULT_KINDS)}")
    if any(not 0 <= r <= 1 for r in p.fault_rates.values()) or sum(p.fault_rates.values()) > 1:
        raise ProfileError(f"{where}: fault rates must be in [0, 1] and sum to at most 1")
    if p.input_audio_prefill_s < 0:
        raise ProfileError(f"{where}: input_audio_prefill_s must be >= 0")
    if p.max_audio_frames < 1:
        raise ProfileError(f"{where}: max_audio_frames must be >= 1")
    if p.fault_after_chunks < 0:
        raise ProfileError(f"{where}: fault_after_chunks must be >= 0")
    if not -60 <= p.metrics_ttfa_skew_s <= 60:
        raise ProfileError(f"{where}: metrics_ttfa_skew_s must be in [-60, 60] seconds")
    if not 0 <= p.cuda_busy_fraction <= 1:
        raise ProfileError(f"{where}: cuda_busy_fraction must be in [0, 1]")
    return p


_FIELDS = {f.name: f for f in dataclasses.fields(Profile)}


def _read_tables(path: Path) -> dict[str, dict[str, Any]]:
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProfileError(f"{path}: profiles file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: invalid TOML: {exc}") from None
    tables = raw.get("profiles")
    if not isinstance(tables, dict) or not all(isinstance(v, dict) for v in tables.values()):
        raise ProfileError(f"{path}: expected [profiles.NAME] tables")
    return tables


def _resolve(name: str, tables: dict[str, dict[str, Any]], sources: dict[str, str],
             seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """Merge a profile table over the table it inherits from (recursively)."""
    if name in seen:
        raise ProfileError(f"{sources[name]}: profile {name!r} inherits from itself via {' -> '.join(seen)}")
    table = dict(tables[name])
    parent = table.pop("inherits", None)
    if parent is None:
        return table
    if parent not in tables:
        raise ProfileError(f"{sources[name]}: profile {name!r} inherits from unknown profile {parent!r}")
    merged = _resolve(parent, tables, sources, seen + (name,))
    merged.pop("description", None)
    merged.update(table)
    return merged


def _build(name: str, values: dict[str, Any], source: str) -> Profile:
    unknown = sorted(set(values) - set(_FIELDS) - {"name"})
    if unknown:
        raise ProfileError(f"{source}: profile {name!r} has unknown field(s) {unknown}")
    kwargs: dict[str, Any] = {}
    for key, value in values.items():
        if key == "name":
            continue
        default = _FIELDS[key].default
        if key == "fault_rates":
            if not isinstance(value, dict):
                raise ProfileError(f"{source}: profile {name!r}: fault_rates must be a table")
            value = {str(k): float(v) for k, v in value.items()}
        elif isinstance(default, bool) or isinstance(default, str):
            if not isinstance(value, type(default)):
                raise ProfileError(f"{source}: profile {name!r}: {key} must be a {type(default).__name__}")
        elif isinstance(default, int):
            if not isinstance(value, int) or isinstance(value, bool):
                raise ProfileError(f"{source}: profile {name!r}: {key} must be an integer")
        elif isinstance(default, float):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise ProfileError(f"{source}: profile {name!r}: {key} must be a number")
            value = float(value)
        kwargs[key] = value
    return _validate(Profile(name=name, **kwargs), source)


def load_profiles(user_file: str | Path | None = None) -> dict[str, Profile]:
    """Built-in profiles, overlaid by ``user_file`` (or $REFERENCE_ENGINE_PROFILES) when given."""
    tables = _read_tables(BUILTIN_PROFILES)
    sources = {name: str(BUILTIN_PROFILES) for name in tables}
    extra = user_file or os.environ.get(PROFILES_ENV)
    if extra:
        user_path = Path(extra)
        user_tables = _read_tables(user_path)
        tables.update(user_tables)
        sources.update({name: str(user_path) for name in user_tables})
    return {name: _build(name, _resolve(name, tables, sources), sources[name]) for name in tables}


def get_profile(name: str, user_file: str | Path | None = None) -> Profile:
    """The named profile, or :class:`ProfileError` listing the names that exist."""
    profiles = load_profiles(user_file)
    if name not in profiles:
        raise ProfileError(f"no profile named {name!r}; available: {', '.join(sorted(profiles))}")
    return profiles[name]
