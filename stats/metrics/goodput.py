"""Goodput: the requests that met the plan's service-level objective (docs/metrics.md, "Goodput").

A measured request meets `slo: {ttfa_ms, rtf}` when it succeeded, its TTFA is at most `ttfa_ms`
and, when the SLO names one, its RTF at most `rtf` (TTFA and RTF as in docs/metrics.md). Per run:
the share of measured requests that met it (a failed request did not), their rate per second of
the run's wall time, and the throughput counted over them alone (throughput_scale x their audio
seconds / wall time), beside the run's throughput over every successful request.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Sequence

from data.metric_params import MetricParams
from data.server_plan import SloSpec

if TYPE_CHECKING:  # compute's named reductions call goodput(): no import cycle at run time
    from stats.metrics.compute import RequestMetrics


@dataclass(frozen=True)
class Goodput:
    ttfa_ms: float
    rtf: float | None
    requests: int  # measured requests
    met: int
    share: float | None  # met / requests
    rate_per_s: float | None  # met / wall_s
    throughput: float | None  # scale x audio seconds of the requests that met it / wall_s
    wall_s: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def slo_of(params: MetricParams) -> SloSpec | None:
    """The SLO a run's metric parameters carry (data/metric_params.py), None without one."""
    return None if params.slo_ttfa_ms is None else SloSpec(params.slo_ttfa_ms, params.slo_rtf)


def meets(m: RequestMetrics, slo: SloSpec) -> bool:
    """Did one request meet the SLO?"""
    if m.outcome != "ok" or m.ttfa_s is None or m.ttfa_s > slo.ttfa_ms / 1000:
        return False
    return slo.rtf is None or (m.rtf is not None and m.rtf <= slo.rtf)


def goodput(per_request: Sequence[RequestMetrics], slo: SloSpec, wall_s: float | None,
            throughput_scale: float) -> Goodput:
    """Goodput over measured requests' metrics and the run's wall time."""
    good = [m for m in per_request if meets(m, slo)]
    n = len(per_request)
    timed = wall_s is not None and wall_s > 0
    return Goodput(
        ttfa_ms=slo.ttfa_ms, rtf=slo.rtf, requests=n, met=len(good), share=len(good) / n if n else None,
        rate_per_s=len(good) / wall_s if timed and wall_s else None,
        throughput=throughput_scale * sum(m.audio_s for m in good) / wall_s if timed and wall_s else None,
        wall_s=wall_s)
