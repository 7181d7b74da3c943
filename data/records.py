"""Typed records that producers (the load driver, the GPU sampler) emit and the store ingests.

Field names equal the column names in `data.schema`, so a record maps to a row without a
translation table. `slots=True` keeps them small: the driver ships many thousands per second.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

FAILURE_CLASSES = (
    "http_status", "transport", "in_stream_error", "no_end_marker",
    "timeout", "no_audio", "decode_error", "cancelled",
)
OUTCOMES = ("ok",) + FAILURE_CLASSES
CHUNK_KINDS = ("audio", "text", "usage", "error", "other")


@dataclass(slots=True)
class ChunkRecord:
    run_id: str
    request_index: int
    chunk_index: int
    t_arrival_ns: int
    kind: str
    samples: int
    payload_bytes: int
    server_emit_ns: int | None = None


@dataclass(slots=True)
class RequestRecord:
    run_id: str
    request_index: int
    utt_id: str
    is_warmup: bool
    outcome: str
    t_send_ns: int
    error_detail: str | None = None
    http_status: int | None = None
    t_first_byte_ns: int | None = None
    t_first_audio_ns: int | None = None
    t_last_audio_ns: int | None = None
    t_end_ns: int | None = None
    audio_samples: int = 0
    sample_rate: int | None = None
    audio_chunks: int = 0
    events: int = 0
    bytes_received: int = 0
    text: str | None = None
    audio_path: str | None = None
    audio_sha256: str | None = None
    finish_reason: str | None = None  # the engine's finish_reason; "length" = cut by a token limit


@dataclass(slots=True)
class GpuSample:
    run_id: str
    gpu_index: int
    t_ns: int
    util_gpu_pct: float | None = None
    util_mem_pct: float | None = None
    mem_used_mib: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    temp_c: float | None = None
    energy_mj: float | None = None
    clock_event_reasons: int | None = None


@dataclass(slots=True)
class AudioFileRecord:
    sha256: str
    path: str
    run_id: str
    request_index: int
    sample_rate: int
    samples: int


def field_names(cls: type) -> list[str]:
    return [f.name for f in fields(cls)]
