"""Continuity pass rates under each engine's player model (docs/metrics.md, "Continuity pass rates").

The two real engines define a request's underrun differently, so the console reports both, named:

- ``pause_resume`` (SGLang-Omni): the player pauses when it runs dry and resumes with the next
  chunk, so its deadline is max(deadline, arrival) + chunk duration; a request's underrun is its
  longest single pause. A request needs two audio chunks to be scored.
- ``deficit`` (vLLM-Omni): the player never rebuffers: at each chunk, deficit = time since the
  first audio - audio received before it, so gaps add up; the underrun is the largest deficit.
  A request with one audio chunk scores 0.

Three 0.1 s chunks arriving at 0, 0.3 and 0.6 s: pause_resume 0.2 s, deficit 0.4 s. Both are
read off the playback simulation the stalls come from (stats/playback.py, zero pre-roll): its
longest stall is the pause/resume underrun and its max deficit the vLLM one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from stats.playback import PlaybackResult, simulate_playback

MODELS = ("pause_resume", "deficit")
THRESHOLDS_MS = (50, 100, 200)
NS = 1e9


def underrun_of(model: str, playback: PlaybackResult, audio_chunks: int) -> float | None:
    """A request's underrun under `model`, read off its zero-pre-roll playback simulation; None when
    the model does not score it (pause_resume: fewer than two audio chunks; deficit: none)."""
    if model == "pause_resume":
        return playback.longest_stall_s if audio_chunks >= 2 else None
    return playback.max_deficit_s if audio_chunks >= 1 else None


def pause_resume_underrun_s(arrivals_s: Sequence[float], durations_s: Sequence[float]) -> float | None:
    """Longest pause of a pause/resume player; None with fewer than two audio chunks (unscored)."""
    n = sum(1 for d in durations_s if d > 0)
    return underrun_of("pause_resume", simulate_playback(arrivals_s, durations_s), n) if n >= 2 else None


def deficit_underrun_s(arrivals_s: Sequence[float], durations_s: Sequence[float]) -> float | None:
    """Largest delivery deficit of a never-rebuffering player; None without audio (unscored)."""
    n = sum(1 for d in durations_s if d > 0)
    return underrun_of("deficit", simulate_playback(arrivals_s, durations_s), n) if n else None


UNDERRUN = {"pause_resume": pause_resume_underrun_s, "deficit": deficit_underrun_s}


@dataclass(frozen=True)
class ContinuityRates:
    """Share of scored requests whose underrun is within each threshold, under one model."""
    model: str
    scored: int
    unscored: int
    within: tuple[tuple[int, int], ...]  # (threshold_ms, requests within it)

    def rate(self, threshold_ms: int) -> float | None:
        """The pass rate at `threshold_ms` (c50 / c100 / c200); None when nothing was scored."""
        n = dict(self.within)[threshold_ms]
        return n / self.scored if self.scored else None

    def as_dict(self) -> dict[str, Any]:
        return {"model": self.model, "scored": self.scored, "unscored": self.unscored,
                **{f"c{ms}": self.rate(ms) for ms, _ in self.within}}


def continuity_rates(underruns_s: Sequence[float | None], model: str,
                     thresholds_ms: Sequence[int] = THRESHOLDS_MS) -> ContinuityRates:
    """Pass rates over per-request underruns (None: unscored). A request passes a threshold when
    its underrun is at most that many milliseconds (both engines' `<=`)."""
    scored = [u for u in underruns_s if u is not None]
    within = tuple((ms, sum(1 for u in scored if u <= ms / 1000 + 1e-12)) for ms in thresholds_ms)
    return ContinuityRates(model, len(scored), len(underruns_s) - len(scored), within)


def request_underruns(requests: Sequence[Mapping[str, Any]],
                      chunks_by_request: Mapping[int, Sequence[tuple[int, int]]], model: str) -> list[float | None]:
    """Underrun of each measured, successful request under `model`, from its requests row and its
    audio chunks as (t_arrival_ns, samples) (stats.metrics.compute.load_run_records gives both)."""
    fn = UNDERRUN[model]
    out: list[float | None] = []
    for r in requests:
        if r["is_warmup"] or r["outcome"] != "ok":
            continue
        rate = r["sample_rate"]
        chunks = chunks_by_request.get(r["request_index"], ())
        if not rate or not chunks:
            out.append(None)
            continue
        out.append(fn([(t - r["t_send_ns"]) / NS for t, _ in chunks], [s / rate for _, s in chunks]))
    return out


def run_continuity(requests: Sequence[Mapping[str, Any]], chunks_by_request: Mapping[int, Sequence[tuple[int, int]]],
                   thresholds_ms: Sequence[int] = THRESHOLDS_MS) -> dict[str, ContinuityRates]:
    """A run's pass rates under both models, over its measured successful requests."""
    return {m: continuity_rates(request_underruns(requests, chunks_by_request, m), m, thresholds_ms) for m in MODELS}
