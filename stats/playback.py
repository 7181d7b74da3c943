"""Playback-stall simulation (docs/metrics.md, "Playback stalls"), a pure function over one request's audio chunks.

A player starts at the arrival of the first audio chunk (TTFA) plus an optional pre-roll delay
and plays in real time. Whenever it has played everything received while the stream is still
open, it stalls until the next chunk arrives. Nothing after the last chunk is a stall: the
stream has ended, unless `now_s` says the stream is still open (a live view of a request in
flight): then a player that has run dry is in an open stall that has lasted until `now_s`, which
counts, and `buffer_s` is the audio it still has ahead of it.

`max_deficit_s` is the largest lag of delivery behind real time measured from the first audio
arrival: max over chunks j of (a_j - a_0 - audio received before j). It equals the total stall
with zero pre-roll, i.e. the smallest pre-roll that would have played without a stall; vLLM-Omni
reports the same figure as `audio_underrun_s`, so the two compare directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class PlaybackResult:
    stall_count: int
    stall_total_s: float
    longest_stall_s: float
    max_deficit_s: float
    audio_s: float
    buffer_s: float | None = None  # with now_s: audio buffered ahead of the player (0 while stalled)

    def continuity_ok(self, threshold_s: float) -> bool:
        """"Continuity OK" = total stall at most the plan's threshold."""
        return self.stall_total_s <= threshold_s


NO_AUDIO = PlaybackResult(0, 0.0, 0.0, 0.0, 0.0)
_EPS_S = 1e-9  # one nanosecond: the stamps' resolution; float noise below it is not a stall


def simulate_playback(
    arrivals_s: Sequence[float],
    durations_s: Sequence[float],
    *,
    preroll_s: float = 0.0,
    now_s: float | None = None,
) -> PlaybackResult:
    """Stalls of a real-time player fed chunks of `durations_s` audio at `arrivals_s` (seconds, any
    common origin, non-decreasing). Zero-length chunks carry no audio and are ignored. `now_s`
    (same origin, not before the last arrival): the stream is still open at that time."""
    if len(arrivals_s) != len(durations_s):
        raise ValueError(f"arrivals ({len(arrivals_s)}) and durations ({len(durations_s)}) differ in length")
    if preroll_s < 0:
        raise ValueError(f"preroll_s must be >= 0, got {preroll_s}")
    chunks = [(float(a), float(d)) for a, d in zip(arrivals_s, durations_s) if d > 0]
    if not chunks:
        return NO_AUDIO if now_s is None else PlaybackResult(0, 0.0, 0.0, 0.0, 0.0, 0.0)
    first = chunks[0][0]
    # max deficit: delivery lag behind real time from the first audio arrival
    received = 0.0
    max_deficit = 0.0
    for a, d in chunks:
        max_deficit = max(max_deficit, (a - first) - received)
        received += d
    # stall simulation: drain_at = wall time at which the buffer runs dry
    start = first + preroll_s
    drain_at = start
    stalls: list[float] = []
    for a, d in chunks:
        if a <= start:
            drain_at += d  # buffered before playback began
            continue
        if a > drain_at + _EPS_S:
            stalls.append(a - drain_at)
            drain_at = a
        drain_at += d
    buffer_s = None
    if now_s is not None:
        max_deficit = max(max_deficit, (now_s - first) - received)  # delivery is behind until now too
        if now_s > drain_at + _EPS_S:  # (drain_at >= start) run dry and still waiting: an open stall
            stalls.append(now_s - drain_at)
        buffer_s = max(0.0, drain_at - max(now_s, start))
    return PlaybackResult(
        stall_count=len(stalls),
        stall_total_s=float(sum(stalls)),
        longest_stall_s=float(max(stalls, default=0.0)),
        max_deficit_s=float(max_deficit),
        audio_s=float(received),
        buffer_s=buffer_s,
    )
