"""The metric parameters: the one place their defaults are defined (docs/timing.md).

A run's metrics depend on three numbers besides its stored requests and chunks: the throughput
scale (25 codec tokens per audio second), the stall threshold of the continuity figure and the
playback pre-roll; and, when the plan sets an SLO (`slo: {ttfa_ms, rtf}`, docs/plans.md), on its
two bounds (goodput, docs/metrics.md). A plan freezes them (`metrics` and `slo` sections,
`data.plan_model.Plan.metrics` is this type), a run records them in `runs.params_json`, and the
stored per-run metrics (`run_metrics` table) are keyed by their hash, so a change of any of them
recomputes. An SLO bound that is not set is left out of the canonical form, so the hash of a
parameter set without an SLO is the one it had before the SLO existed (stored rows stay valid).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from data import hashing


@dataclass(frozen=True)
class MetricParams:
    throughput_scale: float = 25.0
    stall_threshold_s: float = 0.1
    preroll_s: float = 0.0
    slo_ttfa_ms: float | None = None  # the plan's slo.ttfa_ms (goodput); None: no SLO
    slo_rtf: float | None = None  # the plan's slo.rtf; None: no RTF bound

    def as_dict(self) -> dict[str, float]:
        """The set fields (an unset SLO bound is absent, never null: see the module docstring)."""
        return {k: float(v) for k, v in asdict(self).items() if v is not None}

    def canonical_json(self) -> str:
        return hashing.canonical_json(self.as_dict())

    @property
    def sha256(self) -> str:
        """What the stored metrics are keyed by (with the metrics version)."""
        return hashing.sha256_text(self.canonical_json())

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any] | None) -> "MetricParams":
        """The parameters named in `values` (finite numbers), defaults for the rest."""
        out: dict[str, float | None] = {}
        for k, d in asdict(cls()).items():
            v = (values or {}).get(k, d)
            out[k] = float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else d
        return cls(**out)  # type: ignore[arg-type]

    @classmethod
    def from_run_json(cls, params_json: str | None) -> "MetricParams":
        """The parameters a run was recorded under (`runs.params_json`), defaults where absent."""
        try:
            params = json.loads(params_json or "{}")
        except json.JSONDecodeError:
            params = {}
        return cls.from_mapping(params if isinstance(params, dict) else {})


DEFAULT_METRIC_PARAMS = MetricParams()
