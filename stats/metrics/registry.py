"""The run-metric registry: the only place a run metric exists (docs/metrics.md, "The registry").

Each `MetricDef` says what the metric is (name, label, unit, definition), how a run's value is
computed from its requests (`source` per-request field, `reduce`, `population`: stats/metrics/
compute.py iterates this tuple), which way is better, and on which surfaces it appears (`on`).
Every screen, the report and its figures, the verdict documents, the exports and the SQL view
`run_summary` ask this module for their columns, so adding a metric is one entry here.

Values are stored in base units (seconds, ratios); `scale` converts for display (e.g. s -> ms),
and `column` is the name of the display-unit column in `run_summary` (e.g. ttfa_p50_ms).
Tuple order is display order on every surface.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterator, Mapping

METRICS_VERSION = "2"  # 2: e2e latency p50/p95 and the truncated count

# Surfaces a metric can appear on (MetricDef.on).
RUNS = "runs"  # the TUI's runs table (console/tui/app.py)
DETAIL = "detail"  # a run's detail screen, first line: latency (console/tui/screens.py)
DETAIL_DELIVERY = "detail_delivery"  # a run's detail screen, second line: delivery and stalls
DETAIL_SERVICE = "detail_service"  # ... third line: continuity pass rates by model, goodput
LIVE = "live"  # the live view of a run in progress (console/live.py)
REPORT = "report"  # the report table: `campaign report`, the TUI's report tab, the HTML report
REPORT_SERVICE = "report_service"  # each engine's second report table (`campaign report`, HTML): continuity, goodput
VERDICT = "verdict"  # per-repeat figures in a verdict document's throughput table (stats/verdict_doc.py)
VERDICT_SPREAD = "verdict_spread"  # ... and a spread across repeats there
PROBE = "probe"  # `campaign probe`'s metrics table
SURFACES = (RUNS, DETAIL, DETAIL_DELIVERY, DETAIL_SERVICE, LIVE, REPORT, REPORT_SERVICE, VERDICT, VERDICT_SPREAD, PROBE)
# Every metric is also a column of the `run_summary` view and of `campaign export summary`.

# Reductions (MetricDef.reduce): "p<q>" percentile q (numpy 'linear'), "mean", "sum", "max",
# "min", "count" (requests of the population, or those whose source is true), "rate" (share of
# the population whose source is true), "within<ms>ms" (a continuity pass rate: the share of the
# requests the source scores, i.e. not None, whose value is at most ms milliseconds;
# stats/metrics/continuity.py) or "fn:<name>" (a named function of stats/metrics/compute.py).
_PERCENTILE = re.compile(r"^p(\d+(?:\.\d+)?)$")
_WITHIN = re.compile(r"^within(\d+)ms$")
REDUCTIONS = ("mean", "sum", "max", "min", "count", "rate")
POPULATIONS = ("ok", "failed", "measured")  # which measured requests the reduction runs over


@dataclass(frozen=True)
class MetricDef:
    name: str  # key in RunMetrics and in run_metrics.metrics_json (base units)
    label: str
    unit: str  # unit after `scale`
    fmt: str  # format spec for the scaled value
    higher_is_better: bool | None  # None: neither (counts, context)
    graphable: bool
    scale: float = 1.0
    doc: str = ""  # the definition: the report's definitions table, docs/metrics.md
    source: str = ""  # per-request field (compute.REQUEST_FIELDS) the reduction reads
    reduce: str = ""  # see REDUCTIONS above
    population: str = "ok"
    on: frozenset[str] = frozenset()  # surfaces (SURFACES)
    figure: str = ""  # key of the report figure that draws it against concurrency ("" none)
    column: str = ""  # run_summary column (display units); default: name
    empty: float | int | None = None  # the value over an empty population (percentile/mean/min/max)
    table_unit: bool = True  # False: narrow tables show the label alone (the unit is a formula)

    def format(self, value: float | int | None) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "-"
        scaled = value * self.scale
        if self.fmt.endswith("d"):
            scaled = int(round(scaled))
        return format(scaled, self.fmt)

    @property
    def integer(self) -> bool:
        """Counts: stored as int, an INTEGER column in run_summary."""
        return self.fmt.endswith("d")

    @property
    def sql_column(self) -> str:
        return self.column or self.name

    @property
    def needs_slo(self) -> bool:
        """A goodput figure: None, and left off the screens, for a run whose plan sets no SLO."""
        return self.reduce.startswith("fn:goodput")

    @property
    def within_ms(self) -> int | None:
        m = _WITHIN.match(self.reduce)
        return int(m.group(1)) if m else None

    @property
    def percentile_q(self) -> float | None:
        m = _PERCENTILE.match(self.reduce)
        return float(m.group(1)) if m else None

    def header(self, label: str | None = None) -> str:
        """Column header: label and display unit."""
        label = label or self.label
        return f"{label} ({self.unit})" if self.unit else label

    def short_header(self) -> str:
        """Header in a narrow table (runs table, live view)."""
        return self.header() if self.table_unit else self.label

    @property
    def direction(self) -> str:
        return {True: "higher is better", False: "lower is better", None: "neither"}[self.higher_is_better]


def _all(*extra: str) -> frozenset[str]:
    return frozenset(extra)


M = MetricDef
_R, _D, _DD, _L, _P, _V, _VS, _PR = RUNS, DETAIL, DETAIL_DELIVERY, LIVE, REPORT, VERDICT, VERDICT_SPREAD, PROBE
_DS, _PS = DETAIL_SERVICE, REPORT_SERVICE
_MODEL_LABEL = {"pause_resume": "pause/resume", "deficit": "deficit"}
_MODEL_DOC = {"pause_resume": "SGLang-Omni's pause/resume player: longest single pause; needs ≥ 2 audio chunks",
              "deficit": "vLLM-Omni's never-rebuffering player: largest deficit, gaps add up"}


def _continuity(model: str, ms: int) -> MetricDef:
    """c50 / c100 / c200 under one engine's player model (docs/metrics.md, "Continuity pass rates")."""
    return MetricDef(
        f"continuity_{model}_c{ms}", f"c{ms} {_MODEL_LABEL[model]}", "%", ".1f", True, False, 100.0,
        f"share of scored ok requests whose underrun ≤ {ms} ms under {_MODEL_DOC[model]} (zero pre-roll)",
        source=f"underrun_{model}_s", reduce=f"within{ms}ms", on=frozenset({DETAIL_SERVICE, REPORT_SERVICE, VERDICT, PROBE}),
        column=f"{model}_c{ms}_pct")
METRICS: tuple[MetricDef, ...] = (
    M("throughput", "audio tok/s", "25 × audio s / wall s", ".1f", True, True,
      doc="throughput_scale × Σ audio_s of ok requests / wall_s: 25 Hz codec tokens, not text tokens",
      reduce="fn:throughput", on=_all(_R, _D, _L, _P, _V, _VS, _PR), figure="throughput", table_unit=False),
    M("goodput_share", "goodput", "%", ".1f", True, True, 100.0,
      "share of measured requests that met the plan's SLO (ok, TTFA ≤ slo.ttfa_ms, RTF ≤ slo.rtf if set); "
      "None without an SLO", reduce="fn:goodput_share", on=_all(_DS, _PS, _V), column="goodput_pct"),
    M("goodput_rate", "goodput rate", "req/s", ".2f", True, False,
      doc="requests that met the plan's SLO / wall_s; None without an SLO", reduce="fn:goodput_rate",
      on=_all(_DS, _PS, _V), column="goodput_rate_per_s"),
    M("goodput_throughput", "goodput tok/s", "25 × audio s met / wall s", ".1f", True, False,
      doc="throughput_scale × Σ audio_s of the requests that met the plan's SLO / wall_s; None without an SLO",
      reduce="fn:goodput_throughput", on=_all(_DS, _PS, _V), table_unit=False),
    M("ttfa_p50_s", "TTFA p50", "ms", ".1f", False, True, 1000.0,
      "first audio-bearing chunk arrival − t_send, median over ok requests", source="ttfa_s", reduce="p50",
      on=_all(_R, _D, _L, _P, _V, _VS, _PR), figure="latency", column="ttfa_p50_ms"),
    M("ttfa_p95_s", "TTFA p95", "ms", ".1f", False, True, 1000.0,
      "first audio-bearing chunk arrival − t_send, 95th percentile over ok requests", source="ttfa_s", reduce="p95",
      on=_all(_R, _D, _L, _P, _V, _VS, _PR), figure="latency", column="ttfa_p95_ms"),
    M("ttfb_p50_s", "TTFB p50", "ms", ".1f", False, False, 1000.0,
      "first response byte − t_send, median over ok requests", source="ttfb_s", reduce="p50",
      on=_all(_D, _V, _PR), column="ttfb_p50_ms"),
    M("e2e_p50_s", "e2e p50", "ms", ".1f", False, True, 1000.0,
      "t_end − t_send (request completion), median over ok requests", source="e2e_s", reduce="p50",
      on=_all(_R, _D, _L, _P, _V, _VS, _PR), figure="latency", column="e2e_p50_ms"),
    M("e2e_p95_s", "e2e p95", "ms", ".1f", False, True, 1000.0,
      "t_end − t_send (request completion), 95th percentile over ok requests", source="e2e_s", reduce="p95",
      on=_all(_D, _P, _V, _VS, _PR), column="e2e_p95_ms"),
    M("rtf_mean", "mean RTF", "", ".3f", False, True,
      doc="(t_last_audio − t_send) / audio_s, mean over ok requests", source="rtf", reduce="mean",
      on=_all(_R, _D, _L, _P, _V, _VS, _PR)),
    M("rtf_p50", "RTF p50", "", ".3f", False, False,
      doc="(t_last_audio − t_send) / audio_s, median over ok requests", source="rtf", reduce="p50",
      on=_all(_V, _PR)),
    M("stall_count", "stalls", "", "d", False, True,
      doc="playback stalls summed over ok requests (docs/metrics.md, \"Playback stalls\")",
      source="stall_count", reduce="sum", on=_all(_R, _DD, _L, _P, _V, _PR)),
    M("failed", "failed", "", "d", False, True,
      doc="measured requests with a failure class (docs/metrics.md, \"Failure classes\")",
      reduce="count", population="failed", on=_all(_R, _P, _V, _PR)),
    M("truncated", "truncated", "", "d", False, True,
      doc="ok requests cut by a token limit (finish_reason 'length')", source="truncated", reduce="count",
      on=_all(_R, _DD, _L, _P, _V, _PR)),
    M("chunks_mean", "chunks/req mean", "", ".1f", None, True,
      doc="audio-bearing chunks per request, mean over ok requests", source="audio_chunks", reduce="mean",
      on=_all(_DD, _P, _V, _PR)),
    M("chunks_min", "chunks/req min", "", "d", None, False,
      doc="audio-bearing chunks per request, fewest over ok requests", source="audio_chunks", reduce="min",
      on=_all(_V, _PR)),
    M("chunks_max", "chunks/req max", "", "d", None, False,
      doc="audio-bearing chunks per request, most over ok requests", source="audio_chunks", reduce="max",
      on=_all(_V, _PR)),
    M("completed", "completed", "", "d", True, False,
      doc="measured requests that ended ok", reduce="count", on=_all(_V, _PR)),
    M("wall_s", "wall", "s", ".2f", None, False,
      doc="first t_send → last request completion (measured requests)", reduce="fn:wall", on=_all(_DD, _V, _PR)),
    M("audio_s_ok", "audio (ok)", "s", ".1f", None, False,
      doc="audio seconds delivered by ok requests (throughput's numerator)", source="audio_s", reduce="sum",
      on=_all(_DD, _V, _PR)),
    M("audio_s_failed", "audio (failed)", "s", ".1f", None, False,
      doc="audio delivered by failed requests; never in throughput", source="audio_s", reduce="sum",
      population="failed", on=_all(_DD, _V, _PR)),
    M("stall_total_s", "stall total", "s", ".3f", False, True,
      doc="total playback stall seconds over ok requests", source="stall_total_s", reduce="sum",
      on=_all(_DD, _V, _PR)),
    M("stall_longest_s", "longest stall", "ms", ".1f", False, False, 1000.0,
      "longest single playback stall over ok requests (0 when none)", source="longest_stall_s", reduce="max",
      empty=0.0, on=_all(_V, _PR), column="stall_longest_ms"),
    M("stall_max_deficit_s", "max deficit (underrun)", "ms", ".1f", False, True, 1000.0,
      "largest lag of delivery behind real time over ok requests (vLLM-Omni's audio_underrun_s)",
      source="max_deficit_s", reduce="max", empty=0.0, on=_all(_DD, _V, _PR), column="stall_max_deficit_ms"),
    M("continuity_ok_rate", "continuity OK", "%", ".1f", True, True, 100.0,
      "share of ok requests whose total stall ≤ stall_threshold_s", source="continuity_ok", reduce="rate",
      on=_all(_DD, _L, _V, _PR), column="continuity_ok_pct"),
    *(_continuity(model, ms) for model in ("pause_resume", "deficit") for ms in (50, 100, 200)),
)


class _ByName(Mapping[str, MetricDef]):
    """name -> MetricDef over the registry as it is now (a test may extend `METRICS`)."""

    def __getitem__(self, name: str) -> MetricDef:
        for m in METRICS:
            if m.name == name:
                return m
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter([m.name for m in METRICS])

    def __len__(self) -> int:
        return len(METRICS)


METRICS_BY_NAME: Mapping[str, MetricDef] = _ByName()


def metrics_on(surface: str) -> tuple[MetricDef, ...]:
    """The metrics a surface shows, in display order (read at call time, never cached)."""
    if surface not in SURFACES:
        raise KeyError(f"unknown metric surface {surface!r} (one of {', '.join(SURFACES)})")
    return tuple(m for m in METRICS if surface in m.on)


def names_on(surface: str) -> tuple[str, ...]:
    return tuple(m.name for m in metrics_on(surface))


def metrics_in_figure(key: str) -> tuple[MetricDef, ...]:
    """The metrics the report figure `key` draws against concurrency, one panel each."""
    return tuple(m for m in METRICS if m.figure == key)


def throughput_unit(scale: float) -> str:
    """What the throughput figure is, for a plan's throughput_scale (the registry says 25)."""
    return f"{scale:g} × audio s / wall s"


def check_registry(metrics: tuple[MetricDef, ...]) -> list[str]:
    """What is wrong with a registry (tests/test_metrics.py runs it): duplicate names or columns,
    an unknown surface, reduction or population, a percentile without a source, a missing definition."""
    problems: list[str] = []
    for kind, values in (("name", [m.name for m in metrics]), ("column", [m.sql_column for m in metrics])):
        dup = sorted({v for v in values if values.count(v) > 1})
        problems += [f"duplicate {kind} {v!r}" for v in dup]
    for m in metrics:
        if unknown := sorted(m.on - set(SURFACES)):
            problems.append(f"{m.name}: unknown surface(s) {', '.join(unknown)}")
        if not (m.reduce in REDUCTIONS or m.percentile_q is not None or m.within_ms is not None
                or m.reduce.startswith("fn:")):
            problems.append(f"{m.name}: unknown reduction {m.reduce!r}")
        if m.population not in POPULATIONS:
            problems.append(f"{m.name}: unknown population {m.population!r}")
        if not m.source and m.reduce not in ("count",) and not m.reduce.startswith("fn:"):
            problems.append(f"{m.name}: reduction {m.reduce!r} needs a source field")
        if not m.doc:
            problems.append(f"{m.name}: no definition (doc)")
        if not re.fullmatch(r"[a-z][a-z0-9_]*", m.sql_column):
            problems.append(f"{m.name}: column {m.sql_column!r} is not a plain SQL identifier")
    return problems
