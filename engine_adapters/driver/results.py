"""What the driver process hands back: undecoded results of sent requests, in-flight rows for live
views, and the drive's summary. Decoding them into records happens elsewhere (decode.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class DriveSummary:
    """What the driver process reports at the end (besides its records)."""
    loop_impl: str
    client_impl: str
    anchor_wall_ns: int
    anchor_perf_ns: int
    sent: int
    cancelled: bool
    overhead: dict[str, Any]
    error: str | None = None
    # a shard's raw send / loop lag samples and its start instant, for the parent to merge
    # (shards.merge_summaries); empty for an unsharded drive
    samples_ns: dict[str, list[int]] = field(default_factory=dict)


@dataclass
class RawResult:
    """One sent request as the timing path saw it: stamps and undecoded body reads (first-byte
    time and byte count derive from them, in decode_result, off the timing path)."""
    index: int
    utt_id: str
    is_warmup: bool
    t_send_ns: int
    t_end_ns: int | None = None
    http_status: int | None = None
    failure: tuple[str, str] | None = None  # transport-level: http_status, transport, timeout, cancelled
    clean_eof: bool = False
    # one stamp and one bytes object per body read, in two flat lists (a (stamp, bytes) tuple per
    # read would be one more GC-tracked allocation per read in the timing path)
    stamps: list[int] = field(default_factory=list)
    chunks: list[bytes] = field(default_factory=list)
    overflow: str | None = None


@dataclass
class InflightRow:
    """A request still streaming, as the driver saw it at a flush (for live views), with the body
    reads that arrived since the previous report."""
    index: int
    utt_id: str
    is_warmup: bool
    t_send_ns: int
    reads: int  # body reads so far
    t_first_byte_ns: int | None
    t_last_read_ns: int | None
    stamps: list[int] = field(default_factory=list)  # the new reads: stamps ...
    chunks: list[bytes] = field(default_factory=list)  # ... and bytes
