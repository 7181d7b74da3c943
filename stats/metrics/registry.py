"""The metric registry, declared as data: every table, graph and export labels metrics from here.

Values are stored in base units (seconds, ratios); `scale` converts for display (e.g. s -> ms).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

METRICS_VERSION = "2"  # 2: e2e latency p50/p95 and the truncated count


@dataclass(frozen=True)
class MetricDef:
    name: str  # field name on RunMetrics
    label: str
    unit: str  # unit after `scale`
    fmt: str  # format spec for the scaled value
    higher_is_better: bool | None  # None: neither (counts, context)
    graphable: bool
    scale: float = 1.0
    doc: str = ""

    def format(self, value: float | int | None) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "-"
        scaled = value * self.scale
        if self.fmt.endswith("d"):
            scaled = int(round(scaled))
        return format(scaled, self.fmt)


M = MetricDef
METRICS: tuple[MetricDef, ...] = (
    M("throughput", "audio tok/s", "25 × audio s / wall s", ".1f", True, True,
      doc="throughput_scale x sum(audio_s of ok requests) / wall_s: 25 Hz codec tokens, not text tokens"),
    M("ttfa_p50_s", "TTFA p50", "ms", ".1f", False, True, 1000.0, "first audio-bearing chunk arrival - t_send, ok requests"),
    M("ttfa_p95_s", "TTFA p95", "ms", ".1f", False, True, 1000.0),
    M("rtf_mean", "mean RTF", "", ".3f", False, True, doc="(t_last_audio - t_send) / audio_s, ok requests"),
    M("rtf_p50", "RTF p50", "", ".3f", False, False),
    M("ttfb_p50_s", "TTFB p50", "ms", ".1f", False, False, 1000.0),
    M("e2e_p50_s", "e2e p50", "ms", ".1f", False, True, 1000.0, "t_end - t_send (request completion), ok requests"),
    M("e2e_p95_s", "e2e p95", "ms", ".1f", False, True, 1000.0),
    M("completed", "completed", "", "d", True, False),
    M("failed", "failed", "", "d", False, True),
    M("truncated", "truncated", "", "d", False, True, doc="ok requests cut by a token limit (finish_reason 'length')"),
    M("audio_s_ok", "audio (ok)", "s", ".1f", None, False),
    M("audio_s_failed", "audio (failed)", "s", ".1f", None, False, doc="audio delivered by failed requests; never in throughput"),
    M("wall_s", "wall", "s", ".2f", None, False, doc="first t_send -> last request completion (measured requests)"),
    M("chunks_mean", "chunks/req mean", "", ".1f", None, True),
    M("chunks_min", "chunks/req min", "", "d", None, False),
    M("chunks_max", "chunks/req max", "", "d", None, False),
    M("stall_count", "stalls", "", "d", False, True),
    M("stall_total_s", "stall total", "s", ".3f", False, True),
    M("stall_longest_s", "longest stall", "ms", ".1f", False, False, 1000.0),
    M("stall_max_deficit_s", "max deficit (underrun)", "ms", ".1f", False, True, 1000.0),
    M("continuity_ok_rate", "continuity OK", "%", ".1f", True, True, 100.0,
      "share of ok requests whose total stall <= stall_threshold_s"),
)
METRICS_BY_NAME = {m.name: m for m in METRICS}


def throughput_unit(scale: float) -> str:
    """What the throughput figure is, for a plan's throughput_scale (the registry says 25)."""
    return f"{scale:g} × audio s / wall s"
