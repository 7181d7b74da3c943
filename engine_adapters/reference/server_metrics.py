"""The reference engine's own Prometheus metrics at ``/metrics``, in the families of the engine
whose dialect it speaks (docs/engines.md, "Engine metrics"): vLLM-Omni 0.30.0's
``vllm_omni:audio_*`` and request families, SGLang-Omni's ``sglang_omni:audio_*``. Names,
types, labels, buckets and units are those of the real engines' sources; the values are
computed from what this engine really wrote: arrival is the chat handler's entry, a chunk's
time is its ``emit_ns`` (stamped just before the write), both ``perf_counter_ns``.

``ttfa_skew_s`` (the profile's ``metrics_ttfa_skew_s``) adds a constant to every reported time
to first audio: an engine whose own figure is wrong, for the console's reconciliation flag.
The pcm dialect (a peer engine streaming raw bytes) publishes nothing: ``/metrics`` is 404.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from engine_adapters.reference.profiles import OUTPUT_SAMPLE_RATE

# vllm_omni/metrics/definitions.py (vllm-omni 0.30.0)
VLLM_SECONDS_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0)
VLLM_SECONDS_FAST_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0)
VLLM_RTF_BUCKETS = (0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.25, 1.5, 2.0, 5.0, 10.0)
VLLM_CONTINUITY_THRESHOLD_S = 0.1  # AUDIO_CONTINUITY_DEFAULT_THRESHOLD_S
VLLM_STAGE, VLLM_REPLICA = "1", "0"  # the audio-emitting stage of a two-stage thinker/talker deploy
# sglang_omni/metrics/types.py (sgl-project/sglang-omni, commit 843e9ec)
SGLANG_LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
SGLANG_FAST_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
SGLANG_RTF_BUCKETS = (0.1, 0.2, 0.5, 0.75, 1, 1.25, 1.5, 2, 3, 5, 10)
SGLANG_CONTINUITY_THRESHOLDS_MS = (50, 100, 200)

PCM_BYTES_PER_SAMPLE = 2  # s16le mono


def deficit_underrun_s(arrivals_s: list[float], durations_s: list[float]) -> float:
    """vLLM-Omni's ``compute_continuity_stats`` (vllm_omni/benchmarks/audio_continuity.py, 0.30.0):
    a player that never rebuffers; worst (time since first chunk - audio received before it)."""
    worst, received = 0.0, 0.0
    for i, (a, d) in enumerate(zip(arrivals_s, durations_s)):
        if i:
            worst = max(worst, (a - arrivals_s[0]) - received)
        received += d
    return worst


def pause_resume_underrun_s(arrivals_s: list[float], durations_s: list[float]) -> float:
    """SGLang-Omni's ``AudioMetrics.record_chunk`` (sglang_omni/metrics/audio.py): a player that
    pauses when it runs dry and resumes with the next chunk; the worst single gap."""
    worst, buffered = 0.0, durations_s[0] if durations_s else 0.0
    for prev, a, d in zip(arrivals_s, arrivals_s[1:], durations_s[1:]):
        interval = max(0.0, a - prev)
        worst = max(worst, interval - buffered)
        buffered = max(0.0, buffered - interval) + d
    return worst


@dataclass
class _Stream:
    """One request as the server saw it: arrival and each audio write (perf_counter_ns)."""
    arrival_ns: int
    emits_ns: list[int] = field(default_factory=list)
    samples: list[int] = field(default_factory=list)


class _Families:
    """One dialect's families on a private registry; ``observe`` takes one finished request."""

    def __init__(self, model_name: str) -> None:
        self.registry = CollectorRegistry()
        self.model_name = model_name

    def first_audio(self, ttfp_s: float) -> None: ...
    def done(self, s: _Stream, end_ns: int, samples: int, gen_s: float | None, reason: str) -> None: ...
    def failed(self, reason: str) -> None: ...


class _VllmOmni(_Families):
    """vllm_omni/metrics/modality.py and prometheus.py (0.30.0): labels (model_name, stage, replica)."""

    def __init__(self, model_name: str) -> None:
        super().__init__(model_name)
        r, stage = self.registry, ["model_name", "stage", "replica"]
        self.ttfp = Histogram("vllm_omni:audio_ttfp_s", "Time from request arrival to first audio packet/frame, "
                              "in seconds.", stage, buckets=VLLM_SECONDS_BUCKETS, registry=r)
        self.duration = Histogram("vllm_omni:audio_duration_s", "Generated audio content duration in seconds "
                                  "(audio_frames / sample_rate).", stage, buckets=VLLM_SECONDS_BUCKETS, registry=r)
        self.rtf = Histogram("vllm_omni:audio_rtf", "Audio real-time factor (stage_gen_time_s / audio_duration_s).",
                             stage, buckets=VLLM_RTF_BUCKETS, registry=r)
        self.frames = Counter("vllm_omni:audio_frames", "Cumulative audio frame count.", stage, registry=r)
        self.underrun = Histogram("vllm_omni:audio_underrun_s", "Per-request worst-case player-deficit in seconds.",
                                  stage, buckets=VLLM_SECONDS_FAST_BUCKETS, registry=r)
        self.continuity = Counter("vllm_omni:audio_continuity_ok", "Incremented when the request's worst underrun "
                                  "stayed below threshold_ms.", [*stage, "threshold_ms"], registry=r)
        self.skipped = Counter("vllm_omni:audio_skipped_requests", "Requests that returned no audio.",
                               [*stage, "reason"], registry=r)
        self.success = Counter("vllm_omni:requests_success", "Total requests by completion reason.",
                               ["model_name", "finished_reason"], registry=r)
        self.failed_ = Counter("vllm_omni:requests_failed", "Total requests by failure reason.",
                               ["model_name", "reason"], registry=r)
        self.e2e = Histogram("vllm_omni:e2e_request_latency_s", "Pipeline-global end-to-end request latency in "
                             "seconds.", ["model_name"], buckets=VLLM_SECONDS_BUCKETS, registry=r)

    def _stage(self) -> dict[str, str]:
        return {"model_name": self.model_name, "stage": VLLM_STAGE, "replica": VLLM_REPLICA}

    def first_audio(self, ttfp_s: float) -> None:
        self.ttfp.labels(**self._stage()).observe(max(ttfp_s, 0.0))

    def done(self, s: _Stream, end_ns: int, samples: int, gen_s: float | None, reason: str) -> None:
        st = self._stage()
        self.success.labels(model_name=self.model_name, finished_reason=reason).inc()
        self.e2e.labels(model_name=self.model_name).observe(max(0.0, (end_ns - s.arrival_ns) / 1e9))
        if samples > 0:
            self.frames.labels(**st).inc(samples)
            duration = samples / OUTPUT_SAMPLE_RATE
            self.duration.labels(**st).observe(duration)
            if gen_s is not None:
                self.rtf.labels(**st).observe(gen_s / duration)
        else:
            self.skipped.labels(**st, reason="no_audio_data").inc()
        if s.emits_ns:  # streaming only (observe_audio_streaming_finalize)
            arrivals = [(e - s.arrival_ns) / 1e9 for e in s.emits_ns]
            underrun = deficit_underrun_s(arrivals, [n / OUTPUT_SAMPLE_RATE for n in s.samples])
            self.underrun.labels(**st).observe(max(underrun, 0.0))
            if underrun <= VLLM_CONTINUITY_THRESHOLD_S:
                self.continuity.labels(**st, threshold_ms=str(int(VLLM_CONTINUITY_THRESHOLD_S * 1000))).inc()

    def failed(self, reason: str) -> None:
        self.failed_.labels(model_name=self.model_name, reason=reason).inc()


class _SglangOmni(_Families):
    """sglang_omni/metrics/audio.py (commit ee5df70): unlabelled histograms, continuity by threshold_ms."""

    def __init__(self, model_name: str) -> None:
        super().__init__(model_name)
        r = self.registry
        self.ttfp = Histogram("sglang_omni:audio_ttfp_s", "Time from HTTP request arrival to first streamed audio "
                              "payload.", buckets=SGLANG_LATENCY_BUCKETS, registry=r)
        self.rtf = Histogram("sglang_omni:audio_rtf", "Engine-reported generation time divided by output audio "
                             "duration.", buckets=SGLANG_RTF_BUCKETS, registry=r)
        self.e2e = Histogram("sglang_omni:audio_e2e_latency_s", "Time from HTTP request arrival to final audio "
                             "response.", buckets=SGLANG_LATENCY_BUCKETS, registry=r)
        self.duration = Histogram("sglang_omni:audio_duration_s", "Generated audio duration.",
                                  buckets=SGLANG_LATENCY_BUCKETS, registry=r)
        self.interval = Histogram("sglang_omni:audio_chunk_interval_s", "Wall time between consecutive audio "
                                  "chunks.", buckets=SGLANG_FAST_BUCKETS, registry=r)
        self.underrun = Histogram("sglang_omni:audio_underrun_s", "Largest playback buffer underrun per audio "
                                  "response.", buckets=SGLANG_FAST_BUCKETS, registry=r)
        self.continuity = Counter("sglang_omni:audio_continuity_ok_total", "Audio streams without an underrun "
                                  "beyond the threshold.", ["threshold_ms"], registry=r)

    def first_audio(self, ttfp_s: float) -> None:
        self.ttfp.observe(max(0.0, ttfp_s))

    def done(self, s: _Stream, end_ns: int, samples: int, gen_s: float | None, reason: str) -> None:
        if samples <= 0:
            return  # record_done observes nothing without audio duration
        duration = samples / OUTPUT_SAMPLE_RATE
        self.e2e.observe(max(0.0, (end_ns - s.arrival_ns) / 1e9))
        self.duration.observe(duration)
        if gen_s is not None:
            self.rtf.observe(gen_s / duration)
        if s.emits_ns:
            for a, b in zip(s.emits_ns, s.emits_ns[1:]):
                self.interval.observe(max(0.0, (b - a) / 1e9))
            arrivals = [e / 1e9 for e in s.emits_ns]
            # the server scores a one-chunk stream too (underrun 0), unlike the benchmark's rule
            underrun = pause_resume_underrun_s(arrivals, [n / OUTPUT_SAMPLE_RATE for n in s.samples])
            self.underrun.observe(underrun)
            for ms in SGLANG_CONTINUITY_THRESHOLDS_MS:
                if underrun <= ms / 1000:
                    self.continuity.labels(str(ms)).inc()


_FAMILIES: dict[str, type[_Families]] = {"vllm-omni": _VllmOmni, "sglang-omni": _SglangOmni}


class EngineMetrics:
    """Per-request bookkeeping behind ``/metrics``; every call is on the engine's event loop."""

    def __init__(self, dialect: str, model_name: str, ttfa_skew_s: float = 0.0) -> None:
        cls = _FAMILIES.get(dialect)
        self.families = cls(model_name) if cls else None
        self.ttfa_skew_s = ttfa_skew_s
        self.streams: dict[str, _Stream] = {}

    @property
    def enabled(self) -> bool:
        return self.families is not None

    def begin(self, request_id: str, arrival_ns: int) -> None:
        if self.families is not None:
            self.streams[request_id] = _Stream(arrival_ns)

    def audio(self, request_id: str, emit_ns: int, samples: int) -> None:
        """One audio write of ``samples`` samples, stamped ``emit_ns``."""
        s = self.streams.get(request_id)
        if s is None or self.families is None or samples <= 0:
            return
        if not s.emits_ns:
            self.families.first_audio((emit_ns - s.arrival_ns) / 1e9 + self.ttfa_skew_s)
        s.emits_ns.append(emit_ns)
        s.samples.append(samples)

    def finish(self, request_id: str, end_ns: int, *, samples: int | None = None, reason: str = "stop") -> None:
        """A completed request (``samples``: its audio when it was not streamed chunk by chunk)."""
        s = self.streams.pop(request_id, None)
        if s is None or self.families is None:
            return
        total = sum(s.samples) if samples is None else samples
        gen_s = (s.emits_ns[-1] - s.arrival_ns) / 1e9 if s.emits_ns else (end_ns - s.arrival_ns) / 1e9
        self.families.done(s, end_ns, total, gen_s, reason)

    def fail(self, request_id: str | None, reason: str) -> None:
        """A request that ended without completing (no-op when it already finished)."""
        if request_id is not None and self.streams.pop(request_id, None) is None:
            return
        if self.families is not None:
            self.families.failed(reason)

    def render(self) -> bytes | None:
        """The exposition text, or None when this dialect publishes no metrics."""
        return generate_latest(self.families.registry) if self.families is not None else None
