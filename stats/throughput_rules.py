"""Throughput decision rules, e.g. "candidate exceeds peer at C16 and C32" (docs/statistics.md).

Over the plan's repeated, interleaved measured runs (`data.queries.aggregate_runs`: complete, not
excluded, not profiled/exploratory/warmup) every repeat is reported with its spread, repeats are
paired by repeat index (repeat i of the candidate ran next to repeat i of the reference), and the
claim rests on the paired ratio candidate/reference.

Bound: a one-sided lower `confidence` bound on the mean log ratio by Student's t over the pairs,
    L = mean(log r) − t(confidence, n−1) · sd(log r, ddof=1) / √n,  ratio bound = exp(L).
t rather than a bootstrap because a campaign has a handful of repeats (3 in the reference
campaign) and a bootstrap over 3 values has only 10 distinct resamples. The log makes the ratio
symmetric (A/B vs B/A). A cell passes iff exp(L) > min_ratio (1.0 = "exceeds"; equal fails);
fewer than two pairs is INCONCLUSIVE, never PASS.

Placement (docs/cluster.md): a pair whose two runs ran on different GPU models is refused (not
used for the bound, named in the reason); a pair on two GPUs of the same model is used and
reported (`same_gpu` false in the pair, counted in the reason). Runs without a recorded GPU name
are not refused.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats as sps

from data.plan_model import DecisionRule, Plan
from data.store import Store
from stats.gates import FAIL, INCONCLUSIVE, PASS, combine

BOUND_METHOD = "one-sided Student t lower bound on the mean log paired ratio"


@dataclass(frozen=True)
class RepeatValue:
    repeat: int
    run_id: str
    value: float | None
    gpu_name: str | None = None  # runs.gpu_name
    gpu: str | None = None  # where: runs.node_id / runs.gpu_uuid


@dataclass(frozen=True)
class RuleCell:
    concurrency: int
    status: str
    candidate: list[dict[str, Any]]
    reference: list[dict[str, Any]]
    candidate_spread: dict[str, Any]
    reference_spread: dict[str, Any]
    pairs: list[dict[str, Any]]
    n_pairs: int
    geo_mean_ratio: float | None
    lower_bound_ratio: float | None
    min_ratio: float
    reason: str = ""


@dataclass
class RuleResult:
    name: str
    kind: str
    candidate: str
    reference: str
    metric: str
    confidence: float
    min_ratio: float
    verdict: str
    cells: list[RuleCell] = field(default_factory=list)
    method: str = BOUND_METHOD

    def checks_dicts(self) -> list[dict[str, Any]]:
        return [asdict(c) for c in self.cells]


def _spread(values: Sequence[float | None]) -> dict[str, Any]:
    """min/median/max/CV (sample std over mean), the same definition as stats.metrics.spread."""
    arr = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if arr.size == 0:
        return {"n": 0, "min": None, "median": None, "max": None, "cv": None, "mean": None}
    mean = float(arr.mean())
    cv = float(arr.std(ddof=1) / mean) if arr.size >= 2 and mean != 0 else None
    return {"n": int(arr.size), "min": float(arr.min()), "median": float(np.median(arr)),
            "max": float(arr.max()), "cv": cv, "mean": mean}


def lower_ratio_bound(ratios: Sequence[float], confidence: float) -> tuple[float, float]:
    """(geometric-mean ratio, one-sided lower bound of the ratio) from paired ratios (n >= 2)."""
    logs = np.log(np.asarray(ratios, dtype=float))
    n = logs.size
    mean = float(logs.mean())
    sd = float(logs.std(ddof=1))
    t = float(sps.t.ppf(confidence, n - 1))
    return math.exp(mean), math.exp(mean - t * sd / math.sqrt(n))


def _as_rows(values: Sequence[RepeatValue]) -> list[dict[str, Any]]:
    return [asdict(v) for v in sorted(values, key=lambda v: v.repeat)]


def evaluate_cell(concurrency: int, cand: Sequence[RepeatValue], ref: Sequence[RepeatValue], *,
                  confidence: float, min_ratio: float) -> RuleCell:
    by_rep_ref = {r.repeat: r for r in ref}
    pairs: list[dict[str, Any]] = []
    refused: list[str] = []
    for c in sorted(cand, key=lambda r: r.repeat):
        r = by_rep_ref.get(c.repeat)
        if r is None or not c.value or not r.value or c.value <= 0 or r.value <= 0:
            continue
        if c.gpu_name and r.gpu_name and c.gpu_name != r.gpu_name:
            refused.append(f"repeat {c.repeat} ran on {c.gpu_name} vs {r.gpu_name}")
            continue
        pairs.append({"repeat": c.repeat, "candidate_run": c.run_id, "reference_run": r.run_id,
                      "candidate": c.value, "reference": r.value, "ratio": c.value / r.value,
                      "same_gpu": None if not (c.gpu and r.gpu) else c.gpu == r.gpu})

    def cell(status: str, geo: float | None, lower: float | None, reason: str) -> RuleCell:
        return RuleCell(concurrency=concurrency, status=status, candidate=_as_rows(cand), reference=_as_rows(ref),
                        candidate_spread=_spread([v.value for v in cand]), reference_spread=_spread([v.value for v in ref]),
                        pairs=pairs, n_pairs=len(pairs), geo_mean_ratio=geo, lower_bound_ratio=lower,
                        min_ratio=min_ratio, reason=reason)

    unpaired = len(cand) + len(ref) - 2 * len(pairs) - 2 * len(refused)
    notes: list[str] = []
    if refused:
        notes.append(f"{len(refused)} pair(s) refused: different GPU models ({'; '.join(refused)})")
    if (apart := sum(p["same_gpu"] is False for p in pairs)):
        notes.append(f"{apart} pair(s) ran on different GPUs of the same model")
    if len(pairs) < 2:
        return cell(INCONCLUSIVE, pairs[0]["ratio"] if pairs else None, None,
                    "; ".join([f"{len(pairs)} paired repeat(s); a bound needs at least 2"
                               + (f" ({unpaired} unpaired run(s))" if unpaired else "")] + notes))
    geo, lower = lower_ratio_bound([p["ratio"] for p in pairs], confidence)
    status = PASS if lower > min_ratio else FAIL
    reason = "; ".join(([f"{unpaired} unpaired run(s) not used"] if unpaired else []) + notes)
    return cell(status, geo, lower, reason)


def evaluate_rule(rule: DecisionRule, values: Mapping[tuple[str, int], Sequence[RepeatValue]]) -> RuleResult:
    """Apply one `throughput_exceeds` rule to per-(engine, concurrency) repeat values."""
    confidence = float(rule.confidence)
    min_ratio = float(rule.min_ratio or 1.0)
    cand, ref = rule.candidate, rule.reference
    cells = [evaluate_cell(int(c), values.get((cand, int(c)), []), values.get((ref, int(c)), []),
                           confidence=confidence, min_ratio=min_ratio) for c in rule.concurrencies]
    return RuleResult(name=rule.name, kind=rule.kind, candidate=cand, reference=ref,
                      metric=rule.metric or "throughput", confidence=confidence,
                      min_ratio=min_ratio, verdict=combine([c.status for c in cells]), cells=cells)


def collect_values(store: Store, plan: Plan, rule: DecisionRule) -> dict[tuple[str, int], list[RepeatValue]]:
    """Throughput of every aggregate run of the rule's two engines at its concurrencies."""
    from data.errors import CampaignError
    from stats.metrics import cell_runs

    metric = rule.metric or "throughput"
    if metric != "throughput":
        raise CampaignError(f"decision rule {rule.name!r}: metric {metric!r} is not supported (throughput only)")
    out: dict[tuple[str, int], list[RepeatValue]] = {}
    for engine in (rule.candidate, rule.reference):
        for c in rule.concurrencies:
            runs = cell_runs(store, plan, engine, int(c))
            where = run_placement(store, [x.run_id for x in runs])
            out[(engine, int(c))] = [RepeatValue(x.repeat, x.run_id, x.metrics.throughput, *where.get(x.run_id, (None, None)))
                                     for x in runs]
    return out


def missing_runs(rule: DecisionRule, values: Mapping[tuple[str, int], Sequence[RepeatValue]]) -> str | None:
    """Why a rule has nothing to judge, or None: an engine of the rule with no measured throughput at
    any of its concurrencies (docs/statistics.md, "Nothing to judge")."""
    empty = [e for e in (rule.candidate, rule.reference)
             if not any(v.value is not None for c in rule.concurrencies for v in values.get((e, int(c)), []))]
    if not empty:
        return None
    cs = ", ".join(f"C{c}" for c in rule.concurrencies)
    return f"no complete measured run of {' or '.join(empty)} at {cs}"


def run_placement(store: Any, run_ids: Sequence[str]) -> dict[str, tuple[str | None, str | None]]:
    """run id -> (GPU name, 'node/GPU uuid') as stored (runs.node_id / gpu_uuid / gpu_name)."""
    if not run_ids:
        return {}
    rows = store.query(f"SELECT run_id, node_id, gpu_uuid, gpu_name FROM runs WHERE run_id IN "
                       f"({', '.join('?' * len(run_ids))})", list(run_ids))
    return {r["run_id"]: (r["gpu_name"], f"{r['node_id'] or 'local'}/{r['gpu_uuid']}" if r["gpu_uuid"] else None)
            for r in rows}
