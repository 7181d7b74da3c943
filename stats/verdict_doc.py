"""The verdict document (JSON, `schema_version` omni-campaign-verdict/1, docs/verdict.schema.json)
and the issuing of verdicts.

The document is assembled once, when the verdict is issued, and stored with it (insert-only), so
`campaign export verdict` writes exactly what was decided. It carries what a reviewer needs to
redo the decision without the console: the frozen plan, every check, the per-id aggregates the
bootstrap resampled (so a dozen lines of numpy reproduce each bound), the coverage rule and every
gap (ids and repeats), the validators it rests on and every validator run of the plan, what kind
of evidence it is (the quality pool's status: reserved and unused
at freeze, or reused, see data.pool_status), attribution, the throughput table of every
concurrency, the runs used, the exclusions with reasons, and the commands. docs/statistics.md
states the protocol.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from data.store import Store, utcnow
from data.verdicts import VerdictRow, insert_verdict, new_verdict_id
from stats.quality.metrics import QUALITY_METRICS

SCHEMA_VERSION = "omni-campaign-verdict/1"
COVERAGE_RULE = (
    "an utterance id enters a check only if both arms have exactly one usable value at every expected "
    "measured repeat and none at any other repeat; the expected repeats are the plan's measured repeats "
    "(0 .. sweep.measured_repeats-1) in plan mode, or every repeat either arm has at that concurrency for "
    "a user's scores table. An id whose set of measured repeats differs between the arms or from the plan's "
    "(a run missing, failed, incomplete or excluded; a failed request; a scorer error) is a coverage gap: "
    "the check is INCONCLUSIVE, names the ids and repeats, and its figures over the covered ids are "
    "diagnostic only"
)
SCHEMA_PATH = Path(__file__).resolve().parents[1] / "docs" / "verdict.schema.json"

NUMPY_SNIPPET = '''\
import json, numpy as np
doc = json.load(open("verdict.json"))
b = doc["bootstrap"]
for cell in doc["cells"]:
    a = {k: np.array(v, dtype=float) for k, v in cell["arrays"].items()}
    K = len(cell["ids"])                     # ids in ascending string order
    idx = np.random.default_rng(b["seed"]).integers(0, K, (b["draws"], K))
    wer = 100 * (a["e_cand"][idx].sum(1) - a["e_base"][idx].sum(1)) / a["n_base"][idx].sum(1)
    sim = a["sim_base"][idx].mean(1) - a["sim_cand"][idx].mean(1)
    mos = a["mos_base"][idx].mean(1) - a["mos_cand"][idx].mean(1)
    print(cell["concurrency"], [float(np.quantile(r, b["confidence"])) for r in (wer, sim, mos)])
'''


def finite(obj: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, NaN/inf to None."""
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [finite(v) for v in obj.tolist()]
    return obj


def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


# -- pieces -----------------------------------------------------------------------------------

def cells_section(frame, result) -> list[dict[str, Any]]:
    """Per-id aggregates each concurrency's bootstrap resampled (ids ascending)."""
    from stats.gates import aggregate_cell

    out = []
    for c in result.ids:
        cov = aggregate_cell(frame[frame["concurrency"] == c], c, result.config.repeats)
        out.append({
            "concurrency": int(c),
            "ids": list(cov.ids),
            "repeats": list(cov.repeats),
            "arrays": {k: finite(v) for k, v in cov.arrays.items()},
            "full_coverage": {m: bool(cov.covered[m].all()) for m in cov.covered},
        })
    return out


def coverage_section(frame, result) -> dict[str, Any]:
    """The coverage rule and, per concurrency, the expected repeats and every gap by metric."""
    from stats.gates import METRICS, aggregate_cell

    cells = []
    for c in result.ids:
        cov = aggregate_cell(frame[frame["concurrency"] == c], c, result.config.repeats)
        cells.append({"concurrency": int(c), "expected_repeats": list(cov.repeats), "ids": len(cov.ids),
                      "gaps": {m: cov.gap_list(m) for m in METRICS}})
    return {"rule": COVERAGE_RULE, "cells": cells}


def throughput_table(store: Store, plan) -> list[dict[str, Any]]:
    """Every engine × every sweep concurrency: per-repeat metrics of the aggregate runs (the
    registry's `verdict` surface, with the request count and failures by class) and the spread of
    its `verdict_spread` metrics."""
    from stats.metrics import cell_runs, spread
    from stats.metrics.registry import VERDICT, VERDICT_SPREAD, names_on

    rows: list[dict[str, Any]] = []
    for engine in [e.name for e in plan.engines]:
        for c in plan.sweep.concurrencies:
            repeats: list[dict[str, Any]] = []
            for x in cell_runs(store, plan, engine, int(c)):
                rm = x.metrics
                repeats.append({"run_id": x.run_id, "repeat": x.repeat, "requests": rm.requests,
                                "failures_by_class": dict(rm.failures_by_class),
                                **{name: rm.get(name) for name in names_on(VERDICT)}})
            spreads: dict[str, dict[str, Any]] = {}
            for key in names_on(VERDICT_SPREAD):
                s = spread([r[key] for r in repeats])
                spreads[key] = {"min": s.min, "median": s.median, "max": s.max, "cv": s.cv, "n": s.n}
            rows.append({"engine": engine, "concurrency": int(c), "repeats": repeats, "spread": spreads})
    return finite(rows)


# What every throughput-table repeat of a stored document has carried since schema version 1; a
# metric added to the registry later is an optional property, so documents issued before it still
# validate (docs/verdict.schema.json is tested equal to `throughput_repeat_schema`).
V1_REPEAT_REQUIRED = ("run_id", "repeat", "throughput", "ttfa_p50_s", "ttfa_p95_s", "rtf_mean", "failed",
                      "failures_by_class", "stall_count", "chunks_mean", "chunks_min", "chunks_max")


def throughput_repeat_schema() -> dict[str, Any]:
    """The JSON schema of one repeat of the throughput table, from the registry's `verdict` surface."""
    from stats.metrics.registry import VERDICT, metrics_on

    props: dict[str, Any] = {"run_id": {"type": "string"}, "repeat": {"type": "integer"},
                             "requests": {"type": "integer"}, "failures_by_class": {"type": "object"}}
    for d in metrics_on(VERDICT):
        never_null = d.reduce in ("count", "sum") and d.integer
        props[d.name] = {"type": "integer" if never_null else ["integer" if d.integer else "number", "null"],
                         "description": f"{d.label}: {d.doc}"}
    return {"type": "object", "required": list(V1_REPEAT_REQUIRED), "properties": props}


def runs_section(store: Store, plan_hash: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from data.queries import aggregate_runs, plan_runs

    used = {r["run_id"] for r in aggregate_runs(store, plan_hash)}
    runs = [{
        "run_id": r["run_id"], "engine": r["engine"], "concurrency": r["concurrency"],
        "repeat": r["repeat_index"], "kind": r["kind"], "status": r["status"], "pool": r["pool"],
        "in_aggregates": r["run_id"] in used, "excluded_reason": r.get("excluded_reason"),
    } for r in plan_runs(store, plan_hash)]
    excl = store.query(
        "SELECT x.run_id, x.reason, x.excluded_at, x.audit_seq FROM exclusions x JOIN runs r USING (run_id) "
        "WHERE r.plan_hash = ? ORDER BY x.audit_seq, x.run_id", [plan_hash])  # chain order, never the clock
    exclusions = [{"run_id": e["run_id"], "reason": e["reason"], "excluded_at": str(e["excluded_at"]),
                   "audit_seq": e["audit_seq"]} for e in excl]
    return runs, exclusions


def engines_section(store: Store | None, plan) -> list[dict[str, Any]] | None:
    """What code each engine ran (docs/engines.md, "Engine identity and patches"): the plan's
    revision, source and precision mark, and every distinct identity its launches recorded."""
    if plan is None:
        return None
    from data.launches import IDENTITY_SQL, identity_label

    out = []
    for e in plan.engines:
        rows = store.query(f"SELECT DISTINCT {IDENTITY_SQL}, l.patch_path FROM engine_launches l "
                           "WHERE l.plan_hash = ? AND l.engine = ? ORDER BY l.source_commit NULLS FIRST, "
                           "l.patch_sha256 NULLS FIRST", [plan.hash, e.name]) if store is not None else []
        out.append({"engine": e.name, "revision": e.revision, "source": e.source, "patch": e.patch,
                    "precision_change": e.precision_change,
                    "identities": [{**{k: r[k] for k in r}, "label": identity_label(r)} for r in rows]})
    return out


def plan_section(store: Store | None, plan) -> dict[str, Any] | None:
    if plan is None:
        return None
    from data.plan_loading import stored_document

    frozen = stored_document(store, plan.hash) if store is not None else None
    return {"hash": plan.hash, "name": plan.name, "kind": plan.kind, "parent_hash": plan.parent_hash,
            "canonical": frozen if frozen is not None else plan.document(), "effective": plan.document()}


def validators_section(store: Store | None, plan, precondition) -> dict[str, Any] | None:
    """The validator precondition the verdict was decided under (data/validators.py) and every
    validator run of the plan (docs/plans.md, "Validators"); None without a plan."""
    if precondition is None or store is None or plan is None:
        return None
    from data.validators import plan_runs

    return finite({**precondition.as_dict(), "runs": plan_runs(store, plan.hash)})


def record_section(store: Store | None, plan) -> dict[str, Any] | None:
    """Profiler windows the plan's runs overlapped (excluded: data/profiler.py) or that none did,
    and the stored ASR rechecks of its runs (data/rechecks.py) the diagnostics rest on."""
    if store is None or plan is None:
        return None
    from data.manifest import plan_lineage
    from data.profiler import plan_statement
    from data.rechecks import for_plans

    lineage = plan_lineage(store, plan.hash)
    return finite({"profiler_windows": plan_statement(store, lineage), "rechecks": for_plans(store, lineage)})


def quality_name(plan) -> str:
    """A quality verdict's name: the plan and which candidate it judges against which baseline
    (a plan may have several candidates, each with its own verdict)."""
    if plan is None:
        return "scores: noninferiority"
    q = plan.quality
    arms = f" {q.candidate} vs {q.baseline}" if q.candidate and q.baseline else ""
    return f"{plan.name}:{arms} noninferiority"


def reproduce_section(verdict_id: str, plan, source: str | None, config) -> dict[str, Any]:
    cmds = []
    if plan is not None:
        cmds.append(f"campaign plan verify {plan.source_path or 'plan.json'}")
        cmds.append(f"campaign gate {plan.source_path or 'plan.json'} --db campaign.duckdb --dry-run")
    if source:
        m = config.margins
        cmds.append(f"campaign gate --scores {source} --wer-margin {m['wer']:g} --sim-margin {m['sim']:g} "
                    f"--mos-margin {m['mos']:g} --draws {config.draws} --seed {config.seed} "
                    f"--method {config.method}"
                    + (f" --concurrencies {','.join(map(str, config.concurrencies))}" if config.concurrencies else ""))
    cmds.append(f"campaign export verdict {verdict_id} -o verdict.json")
    cmds.append("campaign controls")
    return {"commands": cmds, "numpy": NUMPY_SNIPPET,
            "note": "the numpy snippet reproduces percentile bounds from this file's `cells`; "
                    "BCa: scipy.stats.bootstrap(..., method='bca', paired=True, vectorized=True, "
                    "alternative='less', rng=numpy.random.default_rng(seed))"}


# -- documents --------------------------------------------------------------------------------

def quality_document(*, verdict_id: str, created_at, result, frame, plan=None, store: Store | None = None,
                     metrics_version: str | None = None, controls=None, source: str | None = None,
                     scorer_status: dict | None = None, scorers: dict | None = None,
                     pool: dict | None = None, validators=None) -> dict[str, Any]:
    from stats.gates import HASH_RECIPE, UNITS

    cfg = result.config
    runs, exclusions = runs_section(store, plan.hash) if (store is not None and plan is not None) else ([], [])
    doc = {
        "schema_version": SCHEMA_VERSION,
        "verdict_id": verdict_id,
        "created_at": created_at.isoformat(),
        "kind": "quality",
        "name": quality_name(plan),
        "verdict": result.verdict,
        "rule": "PASS iff every check's one-sided upper bound < its margin and every validator applying to the "
                "candidate passed after the freeze and its latest launch (`validators`); FAIL if any check fails; "
                "otherwise INCONCLUSIVE (coverage gap, scorer unavailable, validator not passed). Coverage: "
                + COVERAGE_RULE,
        "evidence": finite(pool) if pool is not None else None,
        "validators": validators_section(store, plan, validators),
        "record": record_section(store, plan),
        "plan": plan_section(store, plan),
        "engines": engines_section(store, plan),
        "metrics_version": metrics_version,
        "bootstrap": {
            "method": cfg.method, "draws": cfg.draws, "seed": cfg.seed, "confidence": cfg.confidence,
            "index_matrix": "numpy.random.default_rng(seed).integers(0, K, (draws, K)), one per concurrency, "
                            "shared by its metrics; column k = k-th utterance id in ascending string order",
            "bound": "numpy.quantile(replicates, confidence) (linear)" if cfg.method == "percentile"
                     else "BCa (scipy.stats.bootstrap's formulas), one-sided upper",
            "statistics": {
                **{q.name: f"{q.degradation} ({q.unit})" for q in QUALITY_METRICS},
            },
            "aggregation": "within each utterance id over measured repeats: WER errors and words summed, "
                           "SIM and MOS averaged",
        },
        "margins": {q.name: float(cfg.margins[q.name]) for q in QUALITY_METRICS},
        "units": UNITS, "labels": result.labels,
        "checks": finite(result.checks_dicts()),
        "attribution": finite(result.attribution),
        "inputs": finite({**result.inputs, "hash_recipe": HASH_RECIPE, "scorer_status": scorer_status or {},
                          "scorers": scorers or {}}),
        "cells": cells_section(frame, result),
        "coverage": finite(coverage_section(frame, result)),
        "throughput": throughput_table(store, plan) if (store is not None and plan is not None) else [],
        "runs": finite(runs),
        "exclusions": exclusions,
        "controls": [c.as_dict() for c in controls] if controls is not None else None,
        "reproduce": reproduce_section(verdict_id, plan, source, cfg),
    }
    return doc


def rule_document(*, verdict_id: str, created_at, rule_result, plan, store: Store,
                  metrics_version: str | None, validators=None) -> dict[str, Any]:
    runs, exclusions = runs_section(store, plan.hash)
    r = rule_result
    return finite({
        "schema_version": SCHEMA_VERSION,
        "verdict_id": verdict_id,
        "created_at": created_at.isoformat(),
        "kind": "throughput",
        "name": r.name,
        "verdict": r.verdict,
        "rule": f"{r.candidate} / {r.reference} {r.metric}: PASS iff the lower {r.confidence:g} bound of the "
                f"paired ratio > {r.min_ratio:g} at every concurrency ({', '.join(str(c.concurrency) for c in r.cells)}) "
                f"and every validator applying to {r.candidate} passed after the freeze and its latest launch "
                "(`validators`); otherwise INCONCLUSIVE when a cell or a validator is",
        "plan": plan_section(store, plan),
        "engines": engines_section(store, plan),
        "validators": validators_section(store, plan, validators),
        "record": record_section(store, plan),
        "metrics_version": metrics_version,
        "decision_rule": {"name": r.name, "kind": r.kind, "candidate": r.candidate, "reference": r.reference,
                          "metric": r.metric, "confidence": r.confidence, "min_ratio": r.min_ratio,
                          "method": r.method},
        "checks": r.checks_dicts(),
        "attribution": [],
        "inputs": {"runs": sum(len(c.candidate) + len(c.reference) for c in r.cells)},
        "cells": [],
        "throughput": throughput_table(store, plan),
        "runs": runs,
        "exclusions": exclusions,
        "controls": None,
        "reproduce": {"commands": [f"campaign gate {plan.source_path or 'plan.json'} --db campaign.duckdb --dry-run",
                                   f"campaign export verdict {verdict_id} -o verdict.json"],
                      "numpy": "import numpy as np, scipy.stats as st\n"
                               "r = np.log(np.array(ratios))  # per-repeat candidate/reference\n"
                               "lower = np.exp(r.mean() - st.t.ppf(confidence, r.size - 1) * r.std(ddof=1) / np.sqrt(r.size))\n",
                      "note": "ratios are in checks[].pairs"},
    })


# -- issuing ----------------------------------------------------------------------------------

def issue_quality(store: Store, result, frame, *, plan=None, metrics_version: str | None = None, controls=None,
                  source: str | None = None, scorer_status: dict | None = None, scorers: dict | None = None,
                  pool: dict | None = None, validators=None) -> str:
    """Store a quality verdict (insert-only, audited) with its full document; returns its id.
    `pool`: `data.pool_status` as a dict (what kind of evidence this is); computed here if omitted."""
    from data.pool_status import external_status, pool_status

    if pool is None:
        pool = (pool_status(store, plan) if plan is not None else external_status(source or "scores")).as_dict()
    created = utcnow()
    vid = new_verdict_id("quality", [result.inputs, result.checks_dicts()], created)
    doc = quality_document(verdict_id=vid, created_at=created, result=result, frame=frame, plan=plan, store=store,
                           metrics_version=metrics_version, controls=controls, source=source,
                           scorer_status=scorer_status, scorers=scorers, pool=pool, validators=validators)
    cfg = result.config
    return insert_verdict(store, VerdictRow(
        kind="quality", verdict=result.verdict, name=doc["name"], plan_hash=plan.hash if plan else None,
        method=cfg.method, draws=cfg.draws, seed=cfg.seed, metrics_version=metrics_version,
        inputs=doc["inputs"], checks=doc["checks"], attribution=doc["attribution"], document=doc,
        verdict_id=vid, created_at=created))


def issue_rule(store: Store, rule_result, *, plan, metrics_version: str | None, validators=None) -> str:
    created = utcnow()
    vid = new_verdict_id("throughput", [rule_result.name, rule_result.checks_dicts()], created)
    doc = rule_document(verdict_id=vid, created_at=created, rule_result=rule_result, plan=plan, store=store,
                        metrics_version=metrics_version, validators=validators)
    return insert_verdict(store, VerdictRow(
        kind="throughput", verdict=rule_result.verdict, name=rule_result.name, plan_hash=plan.hash,
        method=rule_result.method, metrics_version=metrics_version, inputs=doc["inputs"], checks=doc["checks"],
        attribution=[], document=doc, verdict_id=vid, created_at=created))
