"""The plan's server-side sections (docs/plans.md, "Server metrics and SLO"): how often the
console scrapes each engine's own metrics during a run (`server_metrics`), and the service-level
objective goodput counts against (`slo`). Parsed from a validated plan document."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

DEFAULT_SCRAPE_INTERVAL_S = 1.0
DEFAULT_METRICS_PATH = "/metrics"


@dataclass(frozen=True)
class ScrapeSpec:
    """`server_metrics: {interval_s}`; absent: every 1 s; `server_metrics: null`: no scraping."""
    interval_s: float | None = DEFAULT_SCRAPE_INTERVAL_S

    @property
    def enabled(self) -> bool:
        return self.interval_s is not None


@dataclass(frozen=True)
class SloSpec:
    """`slo: {ttfa_ms, rtf}`: a request meets it when it succeeded, its TTFA is at most `ttfa_ms`
    and (when given) its RTF at most `rtf` (stats/metrics/goodput.py)."""
    ttfa_ms: float
    rtf: float | None = None


def scrape_spec(raw: Mapping[str, Any]) -> ScrapeSpec:
    if "server_metrics" not in raw:
        return ScrapeSpec()
    section = raw["server_metrics"]
    if section is None:
        return ScrapeSpec(interval_s=None)
    return ScrapeSpec(interval_s=float(section.get("interval_s", DEFAULT_SCRAPE_INTERVAL_S)))


def slo_spec(raw: Mapping[str, Any]) -> SloSpec | None:
    section = raw.get("slo")
    if not section:
        return None
    rtf = section.get("rtf")
    return SloSpec(ttfa_ms=float(section["ttfa_ms"]), rtf=float(rtf) if rtf is not None else None)
