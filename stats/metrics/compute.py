"""The one implementation of the run metrics (docs/timing.md); every screen, report and verdict
calls these functions rather than re-deriving figures from SQL.

Percentiles use numpy's 'linear' method everywhere (`percentile`). Latency (TTFA, TTFB,
end-to-end), RTF and stall figures are over successful (outcome 'ok') measured requests; warmup
requests are excluded; failed requests count by class and their delivered audio is reported
beside throughput. A truncated request (finish_reason "length", docs/timing.md) is ok and
counted apart, so a token limit that cuts every output never hides.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Final, Iterable, Mapping, Sequence

import numpy as np

from data.errors import CampaignError
from data.metric_params import DEFAULT_METRIC_PARAMS, MetricParams
from data.server_plan import SloSpec
from data.records import FAILURE_CLASSES
from data.store import Store
from stats.metrics import registry
from stats.metrics.continuity import MODELS, continuity_rates, underrun_of
from stats.metrics.goodput import Goodput, goodput, slo_of
from stats.metrics.registry import METRICS_VERSION, MetricDef
from stats.playback import PlaybackResult, simulate_playback

PERCENTILE_METHOD: Final = "linear"
NS = 1e9


def percentile(values: Sequence[float | None], q: float) -> float | None:
    """q-th percentile (0..100) by numpy's 'linear' method over the values that are not None; None for none."""
    arr = np.asarray([v for v in values if v is not None], dtype=float)
    if arr.size == 0:
        return None
    return float(np.percentile(arr, q, method=PERCENTILE_METHOD))


@dataclass(frozen=True)
class Spread:
    """Repeat variability: min / median / max and coefficient of variation (sample std, ddof=1,
    over mean; None when n < 2 or the mean is 0)."""
    min: float | None
    median: float | None
    max: float | None
    cv: float | None
    n: int


def spread(values: Iterable[float | None]) -> Spread:
    """Spread of the finite values (None/NaN are dropped; n counts what remains)."""
    arr = np.asarray([float(v) for v in values if v is not None and not math.isnan(float(v))], dtype=float)
    n = int(arr.size)
    if n == 0:
        return Spread(None, None, None, None, 0)
    mean = float(arr.mean())
    cv = float(arr.std(ddof=1) / mean) if n >= 2 and mean != 0 else None
    return Spread(float(arr.min()), float(np.median(arr)), float(arr.max()), cv, n)


@dataclass(frozen=True)
class RequestMetrics:
    request_index: int
    outcome: str
    ttfb_s: float | None
    ttfa_s: float | None
    rtf: float | None
    audio_s: float
    audio_chunks: int
    playback: PlaybackResult
    e2e_s: float | None = None  # t_end - t_send: the peers' headline latency
    finish_reason: str | None = None
    # the request's underrun under each engine's player model (stats/metrics/continuity.py; None:
    # unscored, or a request still streaming)
    underruns: Mapping[str, float | None] = field(default_factory=dict)

    @property
    def truncated(self) -> bool:
        """Output cut by a token limit (finish_reason "length"); the request still counts as ok."""
        return self.finish_reason == "length"


def request_rtf(t_send_ns: int, t_last_audio_ns: int | None, audio_s: float) -> float | None:
    """Real-time factor of a finished request: (t_last_audio - t_send) / audio seconds."""
    return (t_last_audio_ns - t_send_ns) / NS / audio_s if t_last_audio_ns is not None and audio_s > 0 else None


def _get(row: Any, name: str) -> Any:
    return row[name] if isinstance(row, Mapping) else getattr(row, name)


def _opt(row: Any, name: str) -> Any:
    """A field a partial row (a live view's streaming request) may not have yet."""
    return row.get(name) if isinstance(row, Mapping) else getattr(row, name, None)


def request_metrics(
    request: Any,
    audio_chunks: Sequence[tuple[int, int]],
    *,
    preroll_s: float = 0.0,
    now_ns: int | None = None,
) -> RequestMetrics:
    """Per-request figures from a requests row (mapping or RequestRecord) and its audio-bearing
    chunks as (t_arrival_ns, samples) in arrival order. `now_ns`: the request is still streaming
    at that time (a live view): playback counts an open stall and reports its buffer, and RTF,
    which ends at the last audio of a finished request, is None."""
    t_send = _get(request, "t_send_ns")
    rate = _get(request, "sample_rate")
    t_fb = _get(request, "t_first_byte_ns")
    t_fa = _get(request, "t_first_audio_ns")
    t_la = _get(request, "t_last_audio_ns")
    t_end = _opt(request, "t_end_ns")
    finish = _opt(request, "finish_reason")
    samples = _get(request, "audio_samples") or 0
    audio_s = samples / rate if rate else 0.0
    ttfa = (t_fa - t_send) / NS if t_fa is not None else None
    rtf = request_rtf(t_send, t_la, audio_s) if now_ns is None else None
    now_s = None if now_ns is None else (now_ns - t_send) / NS
    n_audio = sum(1 for _, s in audio_chunks if s > 0)
    underruns: dict[str, float | None] = {}
    if rate and audio_chunks:
        arrivals = [(t - t_send) / NS for t, _ in audio_chunks]
        durations = [s / rate for _, s in audio_chunks]
        pb = simulate_playback(arrivals, durations, preroll_s=preroll_s, now_s=now_s)
        if now_ns is None:  # the engines' models play from the first audio, no pre-roll
            pb0 = pb if preroll_s == 0 else simulate_playback(arrivals, durations)
            underruns = {model: underrun_of(model, pb0, n_audio) for model in MODELS}
    else:
        pb = simulate_playback([], [], now_s=now_s)
    return RequestMetrics(
        request_index=_get(request, "request_index"),
        outcome=_get(request, "outcome"),
        ttfb_s=(t_fb - t_send) / NS if t_fb is not None else None,
        ttfa_s=ttfa,
        rtf=rtf,
        audio_s=audio_s,
        audio_chunks=n_audio,
        playback=pb,
        e2e_s=(t_end - t_send) / NS if t_end is not None and now_ns is None else None,
        finish_reason=finish,
        underruns=underruns,
    )


# Keys of `run_metrics.metrics_json` in the order version 2 wrote them: `to_dict` keeps it, so the
# JSON of a run's metrics is byte-identical to what earlier consoles stored and bundled (evidence
# verify compares it byte for byte, docs/results.md); metrics added later follow in registry order.
_BASE_FIELDS = ("run_id", "metrics_version", "throughput_scale", "stall_threshold_s", "preroll_s", "requests",
                "warmup_requests")
_V2_ORDER = ("completed", "failed", "failures_by_class", "wall_s", "throughput", "audio_s_ok", "audio_s_failed",
             "ttfa_p50_s", "ttfa_p95_s", "ttfb_p50_s", "e2e_p50_s", "e2e_p95_s", "truncated", "rtf_mean", "rtf_p50",
             "chunks_mean", "chunks_min", "chunks_max", "stall_count", "stall_total_s", "stall_longest_s",
             "stall_max_deficit_s", "continuity_ok_rate")

V2_KEYS = (*_BASE_FIELDS, *_V2_ORDER)  # every row any console stored holds these
_SLO_FIELDS = ("slo_ttfa_ms", "slo_rtf")  # stored only when the plan sets an SLO

Value = float | int | None


@dataclass(frozen=True)
class RunMetrics:
    """One run's metrics: the run's identity and parameters, the request counts, the failures by
    class, and `values`: one entry per registry metric (stats/metrics/registry.py), also readable
    as attributes (`m.throughput`)."""
    run_id: str
    metrics_version: str
    throughput_scale: float
    stall_threshold_s: float
    preroll_s: float
    requests: int  # measured (non-warmup) requests stored
    warmup_requests: int
    failures_by_class: dict[str, int] = field(default_factory=dict)
    values: dict[str, Value] = field(default_factory=dict)
    slo_ttfa_ms: float | None = None  # the goodput SLO the values were computed under (None: none)
    slo_rtf: float | None = None

    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("values")
        if values is not None and name in values:
            return values[name]
        raise AttributeError(f"RunMetrics has no metric {name!r}")

    def get(self, name: str) -> Value:
        """A registry metric's value (None when this row predates the metric)."""
        return self.values.get(name)

    def to_dict(self) -> dict[str, Any]:
        """The flat stored form (`run_metrics.metrics_json`)."""
        out: dict[str, Any] = {k: getattr(self, k) for k in _BASE_FIELDS}
        out.update({k: getattr(self, k) for k in _SLO_FIELDS if getattr(self, k) is not None})  # absent: no SLO
        extra = {"failures_by_class": dict(self.failures_by_class), **self.values}
        for k in _V2_ORDER:
            if k in extra:
                out[k] = extra.pop(k)
        out.update(extra)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "RunMetrics":
        base = {k: d[k] for k in _BASE_FIELDS}
        skip = {*_BASE_FIELDS, *_SLO_FIELDS, "failures_by_class"}
        values = {k: v for k, v in d.items() if k not in skip}
        return cls(**base, failures_by_class=dict(d.get("failures_by_class") or {}), values=values,
                   slo_ttfa_ms=d.get("slo_ttfa_ms"), slo_rtf=d.get("slo_rtf"))

    @property
    def params(self) -> MetricParams:
        return MetricParams(self.throughput_scale, self.stall_threshold_s, self.preroll_s, self.slo_ttfa_ms,
                            self.slo_rtf)


def _params(params: MetricParams | None, overrides: Mapping[str, float]) -> MetricParams:
    """`params` (default: the one default set) with single fields overridden by keyword."""
    base = params or DEFAULT_METRIC_PARAMS
    return replace(base, **{k: float(v) for k, v in overrides.items()}) if overrides else base


# Per-request fields a registry metric may reduce (MetricDef.source), over RequestMetrics and the
# run's parameters.
REQUEST_FIELDS: dict[str, Callable[[RequestMetrics, MetricParams], Any]] = {
    "ttfa_s": lambda m, p: m.ttfa_s,
    "ttfb_s": lambda m, p: m.ttfb_s,
    "e2e_s": lambda m, p: m.e2e_s,
    "rtf": lambda m, p: m.rtf,
    "audio_s": lambda m, p: m.audio_s,
    "audio_chunks": lambda m, p: m.audio_chunks,
    "truncated": lambda m, p: m.truncated,
    "stall_count": lambda m, p: m.playback.stall_count,
    "stall_total_s": lambda m, p: m.playback.stall_total_s,
    "longest_stall_s": lambda m, p: m.playback.longest_stall_s,
    "max_deficit_s": lambda m, p: m.playback.max_deficit_s,
    "continuity_ok": lambda m, p: m.playback.continuity_ok(p.stall_threshold_s),
    **{f"underrun_{model}_s": (lambda model: lambda m, p: m.underruns.get(model))(model) for model in MODELS},
}


@dataclass(frozen=True)
class RunContext:
    """What a named reduction sees: the measured request rows, their per-request figures, the
    parameters."""
    measured: Sequence[Any]
    per: Sequence[RequestMetrics]
    params: MetricParams

    def population(self, name: str) -> list[RequestMetrics]:
        if name == "ok":
            return [m for m in self.per if m.outcome == "ok"]
        if name == "failed":
            return [m for m in self.per if m.outcome != "ok"]
        return list(self.per)


def run_wall_s(ctx: RunContext) -> float | None:
    """First t_send -> last completion over measured requests."""
    if not ctx.measured:
        return None
    start = min(_get(r, "t_send_ns") for r in ctx.measured)
    ends = [max(x for x in (_get(r, "t_end_ns"), _get(r, "t_last_audio_ns"), _get(r, "t_send_ns")) if x is not None)
            for r in ctx.measured]
    return (max(ends) - start) / NS


def run_throughput(ctx: RunContext) -> float | None:
    """throughput_scale x audio seconds of ok requests / run wall."""
    wall_s = run_wall_s(ctx)
    audio_ok = float(sum(m.audio_s for m in ctx.population("ok")))
    return ctx.params.throughput_scale * audio_ok / wall_s if wall_s and wall_s > 0 else None


def _goodput(field_name: str) -> Callable[[RunContext], Value]:
    """A goodput figure of the run under the SLO its parameters carry (stats/metrics/goodput.py); None without one."""
    def reduce(ctx: RunContext) -> Value:
        slo = slo_of(ctx.params)
        if slo is None:
            return None
        return getattr(goodput(ctx.per, slo, run_wall_s(ctx), ctx.params.throughput_scale), field_name)
    return reduce


NAMED_REDUCTIONS: dict[str, Callable[[RunContext], Value]] = {
    "wall": run_wall_s, "throughput": run_throughput, "goodput_share": _goodput("share"),
    "goodput_rate": _goodput("rate_per_s"), "goodput_throughput": _goodput("throughput")}


def reduce_metric(d: MetricDef, ctx: RunContext) -> Value:
    """One registry metric of a run (docs/metrics.md, "The registry")."""
    if d.reduce.startswith("fn:"):
        return NAMED_REDUCTIONS[d.reduce[3:]](ctx)
    pop = ctx.population(d.population)
    if d.reduce == "count" and not d.source:
        return len(pop)
    get = REQUEST_FIELDS[d.source]
    raw = [get(m, ctx.params) for m in pop]
    if d.reduce == "count":
        return sum(bool(v) for v in raw)
    if d.reduce == "rate":
        return sum(bool(v) for v in raw) / len(raw) if raw else None
    if (ms := d.within_ms) is not None:  # a continuity pass rate over the scored requests
        return continuity_rates(raw, d.source, (ms,)).rate(ms)
    vals = [v for v in raw if v is not None]
    if d.reduce == "sum":
        return int(sum(vals)) if d.integer else float(sum(vals))
    if not vals:
        return d.empty
    if (q := d.percentile_q) is not None:
        return percentile(vals, q)
    if d.reduce == "mean":
        return float(np.mean(vals))
    picked = max(vals) if d.reduce == "max" else min(vals)
    return int(picked) if d.integer else float(picked)


def metrics_from_records(
    run_id: str,
    requests: Sequence[Any],
    chunks_by_request: Mapping[int, Sequence[tuple[int, int]]],
    params: MetricParams | None = None,
    **overrides: float,
) -> RunMetrics:
    """Run metrics from request rows and their audio chunks (the pure core of `run_metrics`) under
    `params` (data/metric_params.py; keyword overrides of single fields): one value per registry metric."""
    p = _params(params, overrides)
    measured = [r for r in requests if not _get(r, "is_warmup")]
    per = [request_metrics(r, chunks_by_request.get(_get(r, "request_index"), ()), preroll_s=p.preroll_s)
           for r in measured]
    failures = Counter(m.outcome for m in per if m.outcome != "ok")
    ctx = RunContext(measured, per, p)
    return RunMetrics(
        slo_ttfa_ms=p.slo_ttfa_ms, slo_rtf=p.slo_rtf,
        run_id=run_id,
        metrics_version=METRICS_VERSION,
        throughput_scale=float(p.throughput_scale),
        stall_threshold_s=float(p.stall_threshold_s),
        preroll_s=float(p.preroll_s),
        requests=len(measured),
        warmup_requests=len(requests) - len(measured),
        failures_by_class={c: failures.get(c, 0) for c in FAILURE_CLASSES if failures.get(c)},
        values={d.name: reduce_metric(d, ctx) for d in registry.METRICS},
    )


_REQUEST_COLUMNS = ("request_index", "utt_id", "is_warmup", "outcome", "t_send_ns", "t_first_byte_ns",
                    "t_first_audio_ns", "t_last_audio_ns", "t_end_ns", "audio_samples", "sample_rate", "finish_reason")


def load_run_records(store: Store, run_id: str, extra_columns: Sequence[str] = ()
                     ) -> tuple[list[dict[str, Any]], dict[int, list[tuple[int, int]]]]:
    """A run's request rows (the metric columns plus `extra_columns`, so a view that also shows
    e.g. error details reads the table once) and audio-bearing chunks (t_arrival_ns, samples) in
    arrival order."""
    columns = list(_REQUEST_COLUMNS) + [c for c in extra_columns if c not in _REQUEST_COLUMNS]
    requests = store.query(
        f"SELECT {', '.join(columns)} FROM requests WHERE run_id = ? ORDER BY request_index", [run_id]
    )
    rows = store.con.execute(
        "SELECT request_index, t_arrival_ns, samples FROM chunks WHERE run_id = ? AND samples > 0 "
        "ORDER BY request_index, t_arrival_ns, chunk_index", [run_id]
    ).fetchall()
    chunks: dict[int, list[tuple[int, int]]] = {}
    for idx, t, s in rows:
        chunks.setdefault(idx, []).append((t, s))
    return requests, chunks


def run_metrics(store: Store, run_id: str, params: MetricParams | None = None, **overrides: float) -> RunMetrics:
    """Metrics of one stored run (docs/timing.md), computed from its rows now; views read the stored
    ones through `stats.metrics.stored.metrics_for_runs`."""
    if not store.scalar("SELECT count(*) FROM runs WHERE run_id = ?", [run_id]):
        raise CampaignError(f"{store.path}: no run with id {run_id!r}")
    requests, chunks = load_run_records(store, run_id)
    return metrics_from_records(run_id, requests, chunks, _params(params, overrides))


def run_goodput(run_id: str, requests: Sequence[Mapping[str, Any]],
                chunks_by_request: Mapping[int, Sequence[tuple[int, int]]], slo: SloSpec,
                params: MetricParams | None = None) -> Goodput:
    """A run's goodput from its stored rows (stats.metrics.compute.load_run_records), with the
    run's wall time as its other metrics count it."""
    p = params or MetricParams()
    measured = [r for r in requests if not r["is_warmup"]]
    per = [request_metrics(r, chunks_by_request.get(r["request_index"], ()), preroll_s=p.preroll_s) for r in measured]
    wall_s = metrics_from_records(run_id, requests, chunks_by_request, p).wall_s
    return goodput(per, slo, wall_s, p.throughput_scale)
