"""Check rows: one typed row for a quality noninferiority check and for a throughput decision-rule
cell, read from what a verdict stores (`verdicts.checks_json`), so every view shows the same fields
with the same labels, units and formats (docs/results.md).

Quality check: estimate = point degradation, bound = one-sided UPPER bound, pass iff bound < margin.
Throughput cell: ids = paired repeats, estimate = geometric-mean candidate/reference ratio, bound =
its one-sided LOWER bound, margin = the minimum ratio it must exceed, baseline/candidate = median
throughput of the reference / candidate repeats.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from stats.gates import LABELS, UNITS
from stats.quality.metrics import canonical
from stats.metrics import MetricDef

QUALITY, THROUGHPUT = "quality", "throughput"
RULE_LABEL = "throughput ratio (lower bound)"
RULE_UNIT = "cand/ref"

# the figures of a check row, declared as data like the metric registry
CHECK_DEFS: dict[str, MetricDef] = {
    "point": MetricDef("point", "estimate", "", ".3f", None, False),
    "bound": MetricDef("bound", "bound", "", ".3f", None, False),
    "margin": MetricDef("margin", "margin", "", ".3f", None, False),
    "base_value": MetricDef("base_value", "baseline", "", ".3f", None, False),
    "cand_value": MetricDef("cand_value", "candidate", "", ".3f", None, False),
    "n_ids": MetricDef("n_ids", "ids", "", "d", None, False),
}


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


@dataclass(frozen=True)
class CheckRow:
    kind: str  # quality | throughput
    concurrency: int | None
    metric: str  # wer / sim / mos (utmos in an older document), or the rule's metric (throughput)
    label: str
    unit: str
    status: str  # PASS / FAIL / INCONCLUSIVE
    n_ids: int | None  # ids covered (quality) or paired repeats (throughput)
    n_expected: int | None
    point: float | None
    bound: float | None
    margin: float | None
    base_value: float | None
    cand_value: float | None
    reason: str = ""
    diagnostic_only: bool = False
    upper: bool = True  # the bound is an upper bound (quality); a lower one for throughput ratios
    ratios: tuple[float, ...] = field(default=())  # throughput: the paired ratios, repeat order

    @property
    def rule(self) -> str:
        return "pass iff upper bound < margin" if self.upper else "pass iff lower bound > margin"

    @property
    def test(self) -> str:
        """The test applied, as a true statement: 'lower bound 0.660 ≤ 1.0 → FAIL'."""
        return test_text(self.status, self.bound, self.margin, upper=self.upper, n=self.n_ids)

    def formatted(self, name: str) -> str:
        return CHECK_DEFS[name].format(getattr(self, name))

    @classmethod
    def from_quality(cls, c: Mapping[str, Any]) -> "CheckRow":
        metric = str(c.get("metric") or "")
        now = canonical(metric)  # an older document's utmos is the MOS check
        return cls(QUALITY, c.get("concurrency"), metric, str(c.get("label") or LABELS.get(now, metric)),
                   str(c.get("unit") or UNITS.get(now, "")), str(c.get("status") or ""), c.get("n_ids"),
                   c.get("n_expected"), _num(c.get("point")), _num(c.get("bound")), _num(c.get("margin")),
                   _num(c.get("base_value")), _num(c.get("cand_value")), str(c.get("reason") or ""),
                   bool(c.get("diagnostic_only")), True)

    @classmethod
    def from_rule_cell(cls, c: Mapping[str, Any], metric: str = "throughput") -> "CheckRow":
        median = lambda k: _num((c.get(k) or {}).get("median"))  # noqa: E731 - a local accessor
        pairs = c.get("pairs") or []
        return cls(THROUGHPUT, c.get("concurrency"), metric, RULE_LABEL, RULE_UNIT, str(c.get("status") or ""),
                   c.get("n_pairs"), len(c.get("candidate") or []), _num(c.get("geo_mean_ratio")),
                   _num(c.get("lower_bound_ratio")), _num(c.get("min_ratio")), median("reference_spread"),
                   median("candidate_spread"), str(c.get("reason") or ""), False, False,
                   tuple(float(p["ratio"]) for p in pairs))


def _margin_text(m: float) -> str:
    text = f"{m:g}"
    return text if any(ch in text for ch in ".en") else text + ".0"  # 1 -> '1.0': reads as a bound, not a count


def test_text(status: str, bound: float | None, margin: float | None, *, upper: bool, n: int | None = None) -> str:
    """A check's result phrased as the comparison it made (docs/results.md, "Reading a check"): the
    one-sided bound against the margin with the operator that holds, then the status. When the
    status is not that comparison's outcome (a coverage gap, a scorer that did not run) the
    comparison is still stated, then the status after a semicolon; with no bound, why."""
    if bound is None or margin is None:
        why = f"{n} paired repeat(s), a bound needs 2" if not upper and n is not None and n < 2 else "no bound"
        return f"{why} → {status}"
    passed = bound < margin if upper else bound > margin
    op = ("<" if passed else "≥") if upper else (">" if passed else "≤")
    text = f"{'upper' if upper else 'lower'} bound {bound:.3f} {op} {_margin_text(margin)}"
    return f"{text} → {status}" if status == ("PASS" if passed else "FAIL") else f"{text}; {status}"


def check_rows(kind: str, checks: Any) -> list[CheckRow]:
    """The stored checks of a verdict of `kind` as rows (non-list or non-dict entries are skipped)."""
    if not isinstance(checks, list) or kind == "equivalence":  # per-utterance rows: console/equivalence_report.py
        return []
    make = CheckRow.from_rule_cell if kind == THROUGHPUT else CheckRow.from_quality
    return [make(c) for c in checks if isinstance(c, Mapping)]
