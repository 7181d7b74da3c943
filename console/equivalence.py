"""`campaign equivalence`: send identical requests through both engines of each pair of the plan's
`equivalence` section (or reuse stored outputs of identical requests), compare the outputs per
utterance and issue one insert-only verdict of kind `equivalence` per pair (docs/equivalence.md).

Each arm's requests are an ordinary run (kind `equivalence`, cell key
`<engine>/c<C>/equivalence/<repeat>@equivalence`): stored with its requests, chunks, audio and
audit events like any run, and never part of an aggregate (those read measured runs only). An
engine that appears in several pairs runs once per invocation. Measures and the verdict rule are
stats/equivalence.py; the verdict's rows are stored in `equivalence_measures` and, identical, in
the verdict's checks, in one transaction with its `verdict_issued` event.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from data.audit import atomic
from data.equivalence_spec import EquivalencePair, EquivalenceSpec
from data.errors import CampaignError, first_line
from data.hashing import sha256_json
from data.plan_model import Plan
from data.store import Store, utcnow
from data.verdicts import VerdictRow, insert_verdict, new_verdict_id
from stats.equivalence import EquivalenceResult, Measure, MelParams, Output, Tolerances, judge, measure_pair

KIND = "equivalence"
CELL_SUFFIX = "@equivalence"
TENSOR_DIR = "tensors"  # under the artifacts folder: <run_id>-r<request_index>/<name>.npy
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def tolerances(pair: EquivalencePair) -> Tolerances:
    return Tolerances(**pair.tolerances)


def tensor_folder(run_id: str, request_index: int) -> str:
    """The folder name the console gives an engine for one request's tensors (one path part)."""
    return f"{_SAFE.sub('_', run_id)}-r{request_index}"


@dataclass
class ArmOutputs:
    """One engine's outputs: (utt_id, repeat) -> (Output, run_id, request_index)."""

    engine: str
    outputs: dict[tuple[str, int], tuple[Output, str | None, int | None]] = field(default_factory=dict)
    run_ids: list[str] = field(default_factory=list)
    reused: bool = False


def spec_of(plan: Plan) -> EquivalenceSpec:
    if plan.equivalence is None:
        raise CampaignError(f"plan {plan.hash[:12]} ({plan.name}): has no `equivalence` section (docs/equivalence.md)")
    return plan.equivalence


def equivalence_utterances(store: Store, plan: Plan) -> list[Any]:
    """The first `utterances` of the section's pool (default: the tuning pool), in pool order."""
    from data.manifest import load_plan_workload

    from data.manifest import holdout_opened

    spec = spec_of(plan)
    pool_name = spec.pool if spec.pool is not None else plan.workload.pool
    if pool_name and pool_name == plan.workload.holdout_pool and not holdout_opened(store, plan.hash):
        raise CampaignError(f"plan {plan.hash[:12]}: equivalence.pool {pool_name!r} is the reserved holdout; "
                            "it is not opened (equivalence would spend it)")
    utts = load_plan_workload(plan).pool(pool_name)
    if not utts:
        raise CampaignError(f"plan {plan.hash[:12]}: equivalence pool {pool_name!r} is empty")
    return list(utts)[: spec.utterances]


def _read_output(row: dict[str, Any], artifacts_dir: Path, tensors: bool) -> Output:
    from stats.quality.audio import AudioError, read_native
    from stats.quality.scoring import resolve_audio

    if row["outcome"] != "ok":
        return Output(None, None, None, error=f"{row['outcome']}: {row['error_detail'] or ''}".rstrip(": "))
    if not row["audio_path"]:
        return Output(None, None, None, error="no audio stored")
    try:
        samples, rate = read_native(resolve_audio(artifacts_dir, row["audio_path"]))
    except AudioError as exc:
        return Output(row["audio_sha256"], None, None, error=str(exc))
    folder = artifacts_dir / TENSOR_DIR / tensor_folder(row["run_id"], row["request_index"])
    try:
        arrays = read_tensors(folder) if tensors else None
    except (OSError, ValueError) as exc:  # a truncated or foreign file: this output's tensors are unusable
        return Output(row["audio_sha256"], None, None, error=f"unreadable tensor dump in {folder}: {first_line(exc)}")
    return Output(row["audio_sha256"], np.asarray(samples, np.float64), rate, tensors=arrays)


def read_tensors(folder: Path) -> dict[str, np.ndarray] | None:
    """name -> array from `<name>.npy` and `.safetensors` files in a request's folder; None if none."""
    if not folder.is_dir():
        return None
    out: dict[str, np.ndarray] = {}
    for f in sorted(folder.iterdir()):
        if f.suffix == ".npy" and not f.name.startswith("."):
            out[f.stem] = np.load(f, allow_pickle=False)
        elif f.suffix == ".safetensors":
            from safetensors import SafetensorError
            from safetensors.numpy import load_file

            try:
                out.update({f"{f.stem}.{k}": v for k, v in load_file(str(f)).items()})
            except SafetensorError as exc:
                raise ValueError(f"{f.name}: {first_line(exc)}") from None
    return out


def outputs_of_runs(store: Store, runs: list[tuple[int, str]], artifacts_dir: Path, tensors: bool,
                    utt_ids: list[str]) -> dict[tuple[str, int], tuple[Output, str | None, int | None]]:
    """(repeat, run_id) -> every requested utterance's output; an utterance a run lacks is missing."""
    out: dict[tuple[str, int], tuple[Output, str | None, int | None]] = {}
    for repeat, run_id in runs:
        rows = store.query("SELECT run_id, request_index, utt_id, outcome, error_detail, audio_path, audio_sha256 "
                           "FROM requests WHERE run_id = ? AND NOT is_warmup ORDER BY request_index", [run_id])
        by_utt = {r["utt_id"]: r for r in rows}
        for u in utt_ids:
            r = by_utt.get(u)
            out[(u, repeat)] = ((_read_output(r, artifacts_dir, tensors), run_id, r["request_index"]) if r
                                else (Output(None, None, None, error=f"no request for it in run {run_id}"), run_id, None))
    return out


# -- driving the arms -------------------------------------------------------------------------
def drive_arm(store: Store, plan: Plan, engine_name: str, utts: list[Any], artifacts_dir: Path,
              log: Callable[[str], None], env: dict[str, dict[str, str]]) -> ArmOutputs:
    """Launch the engine (with `--dump-tensors` when the section asks for tensors), send the
    identical requests `repeats` times at the section's concurrency, stop it."""
    from console.recording import record_run
    from console.cell_executor import StoreLaunches, plan_sampling
    from engine_adapters.cell_loop import EngineManager
    from engine_adapters.driver import DriveSpec, RequestSpec
    from engine_adapters.specs import launch_argv

    spec = spec_of(plan)
    engine = plan.engine(engine_name)
    if spec.tensors:
        engine = replace(engine, argv=(*launch_argv(engine), "--dump-tensors", str(artifacts_dir / TENSOR_DIR)))
    launches = StoreLaunches(store, plan, artifacts_dir / "logs", log, env)
    manager = EngineManager(launches)
    arm = ArmOutputs(engine_name)
    try:
        launch, _ = manager.launch(engine)
        if launch is None:  # recorded and logged as a startup failure (console/cell_executor.py StoreLaunches)
            exc = launches.failures[engine_name]
            arm.outputs = {(u.utt_id, r): (Output(None, None, None, error=f"engine did not start: {exc}"), None, None)
                           for u in utts for r in range(spec.repeats)}
            return arm
        runs: list[tuple[int, str]] = []
        for repeat in range(spec.repeats):
            run_id = f"{plan.hash[:8]}-{engine_name}-eq{repeat}-{uuid.uuid4().hex[:6]}"
            requests = [RequestSpec(u.utt_id, u.target_text, u.prompt_wav, u.prompt_text,
                                    headers=(("X-Dump-Tensors", tensor_folder(run_id, i)),) if spec.tensors else ())
                        for i, u in enumerate(utts)]
            drive = DriveSpec(run_id=run_id, url=engine.url, dialect=engine.dialect, concurrency=spec.concurrency,
                              requests=requests, timeout_s=plan.sweep.timeout_s, artifacts_dir=artifacts_dir,
                              sampling=plan_sampling(plan), request_options=dict(engine.request))
            launch.run_ids.append(run_id)
            record_run(store, drive, engine=engine_name, kind=KIND, plan_hash=plan.hash,
                       cell_key=f"{engine_name}/c{spec.concurrency}/{KIND}/{repeat}{CELL_SUFFIX}",
                       launch_id=launch.launch_id, pool=spec.pool or plan.workload.pool, repeat_index=repeat,
                       params={"phase": KIND, "engine_profile": engine.profile, "tensors": spec.tensors},
                       telemetry=False, engine_process=launch.process)
            status = store.scalar("SELECT status FROM runs WHERE run_id = ?", [run_id])
            log(f"{engine_name} repeat {repeat}: run {run_id} {status}")
            runs.append((repeat, run_id))
            arm.run_ids.append(run_id)
    finally:
        manager.stop_all()
    arm.outputs = outputs_of_runs(store, runs, artifacts_dir, spec.tensors, [u.utt_id for u in utts])
    return arm


def reused_arm(store: Store, plan: Plan, engine_name: str, utts: list[Any], artifacts_dir: Path) -> ArmOutputs:
    """Stored outputs of identical requests: complete, not excluded runs of this plan and engine
    at the section's concurrency whose request body template (runs.body_template_sha256) and
    sampling fields are the ones this engine sends now, so that with the same utterance the
    request body is the same; repeat r takes the r-th such request of each utterance in audit
    order (run_started seq)."""
    from engine_adapters.dialects import get_dialect
    from console.cell_executor import plan_sampling

    spec = spec_of(plan)
    engine = plan.engine(engine_name)
    template = get_dialect(engine.dialect).body_template_sha256(plan_sampling(plan), dict(engine.request))
    rows = store.query(
        "SELECT q.run_id, q.request_index, q.utt_id, q.outcome, q.error_detail, q.audio_path, q.audio_sha256, "
        "r.params_json, e.seq FROM requests q JOIN runs r USING (run_id) "
        "JOIN audit_events e ON e.kind = 'run_started' AND e.subject = r.run_id "
        "LEFT JOIN exclusions x USING (run_id) "
        "WHERE r.plan_hash = ? AND r.engine = ? AND r.concurrency = ? AND r.status = 'complete' AND x.run_id IS NULL "
        "AND r.body_template_sha256 = ? AND q.outcome = 'ok' AND NOT q.is_warmup ORDER BY e.seq, q.request_index",
        [plan.hash, engine_name, spec.concurrency, template])
    from engine_adapters.sampling import effective_sampling

    sampling = sha256_json(effective_sampling(plan, engine))  # as runs.params_json stores it (console/recording.py)
    arm = ArmOutputs(engine_name, reused=True)
    seen: dict[str, int] = {}
    wanted = {u.utt_id for u in utts}
    for r in rows:
        if r["utt_id"] not in wanted or sha256_json(json.loads(r["params_json"]).get("sampling")) != sampling:
            continue
        rep = seen.get(r["utt_id"], 0)
        if rep >= spec.repeats:
            continue
        seen[r["utt_id"]] = rep + 1
        arm.outputs[(r["utt_id"], rep)] = (_read_output(r, artifacts_dir, spec.tensors), r["run_id"], r["request_index"])
        if r["run_id"] not in arm.run_ids:
            arm.run_ids.append(r["run_id"])
    for u in utts:
        for rep in range(spec.repeats):
            arm.outputs.setdefault((u.utt_id, rep), (Output(None, None, None, error="no stored output of an identical "
                                                            f"request (repeat {rep})"), None, None))
    return arm


# -- comparing and issuing ----------------------------------------------------------------------
@dataclass
class PairOutcome:
    pair: EquivalencePair
    result: EquivalenceResult
    rows: list[dict[str, Any]]
    verdict_id: str | None = None


def compare_pair(pair: EquivalencePair, ref: ArmOutputs, cand: ArmOutputs, utts: list[Any], spec: EquivalenceSpec,
                 mel: MelParams = MelParams()) -> PairOutcome:
    tol = tolerances(pair)
    measures: list[Measure] = []
    rows: list[dict[str, Any]] = []
    for u in utts:
        for rep in range(spec.repeats):
            ro, rrun, ridx = ref.outputs[(u.utt_id, rep)]
            co, crun, cidx = cand.outputs[(u.utt_id, rep)]
            ms = measure_pair(u.utt_id, rep, ro, co, tol, spec.tensors, mel)
            measures += ms
            rows += [measure_row(pair, m, (rrun, ridx, ro.audio_sha256), (crun, cidx, co.audio_sha256)) for m in ms]
    return PairOutcome(pair, judge(measures), rows)


def measure_row(pair: EquivalencePair, m: Measure, ref: tuple[Any, Any, Any], cand: tuple[Any, Any, Any]) -> dict[str, Any]:
    """A checks/`equivalence_measures` row; JSON-ready (infinity as "inf", docs/equivalence.md)."""
    return {"reference": pair.reference, "candidate": pair.candidate, **m.as_dict(),
            "ref_run_id": ref[0], "ref_request_index": ref[1], "ref_audio_sha256": ref[2],
            "cand_run_id": cand[0], "cand_request_index": cand[1], "cand_audio_sha256": cand[2]}


def _db_value(v: Any) -> float | None:
    if isinstance(v, str):
        return math.inf if v == "inf" else -math.inf
    return v


def issue_equivalence(store: Store, plan: Plan, outcome: PairOutcome, arms: dict[str, ArmOutputs]) -> str:
    """The verdict, its rows and its `verdict_issued` event in one transaction."""
    from stats.equivalence_doc import equivalence_document

    created = utcnow()
    pair, result = outcome.pair, outcome.result
    vid = new_verdict_id(KIND, [pair.name, outcome.rows], created)
    inputs = {"reference_runs": arms[pair.reference].run_ids, "candidate_runs": arms[pair.candidate].run_ids,
              "reused": arms[pair.reference].reused or arms[pair.candidate].reused,
              "rows": len(outcome.rows), "rows_sha256": sha256_json(outcome.rows)}
    doc = equivalence_document(verdict_id=vid, created_at=created, plan=plan, store=store, pair=pair,
                               spec=spec_of(plan), result=result, rows=outcome.rows, inputs=inputs)
    with atomic(store):
        insert_verdict(store, VerdictRow(kind=KIND, verdict=result.verdict, name=pair.name, plan_hash=plan.hash,
                                         inputs=inputs, checks=outcome.rows, document=doc, verdict_id=vid,
                                         created_at=created,
                                         attribution={"label": result.label, "reasons": result.reasons}))
        for r in outcome.rows:
            store.insert("equivalence_measures", {"verdict_id": vid, "repeat_index": r["repeat"],
                                                  **{k: (_db_value(v) if k == "value" else v) for k, v in r.items()
                                                     if k != "repeat"}})
    outcome.verdict_id = vid
    return vid


def run_equivalence(store: Store, plan: Plan, artifacts_dir: Path, log: Callable[[str], None] = print,
                    issue: bool = True, only: list[str] | None = None) -> list[PairOutcome]:
    """Every pair of the section (or those named in `only`: a pair name or its candidate)."""
    from console.cell_executor import check_preconditions
    from data.plan_loading import engine_environment, plan_secrets
    from engine_adapters.driver import discard_warm

    spec = spec_of(plan)
    pairs = list(spec.pairs)
    if only:
        try:
            pairs = [spec.pair(n) for n in only]
        except KeyError as exc:
            raise CampaignError(f"plan {plan.hash[:12]}: no equivalence pair {exc.args[0]!r} "
                                f"(have: {', '.join(p.name for p in spec.pairs)})") from None
    check_preconditions(store, plan, "sweep")
    utts = equivalence_utterances(store, plan)
    engines = list(dict.fromkeys(e for p in pairs for e in (p.reference, p.candidate)))
    env = engine_environment(plan, plan_secrets(store, plan), set(engines))
    arms: dict[str, ArmOutputs] = {}
    try:
        for name in engines:
            arms[name] = (reused_arm(store, plan, name, utts, artifacts_dir) if spec.reuse_stored
                          else drive_arm(store, plan, name, utts, artifacts_dir, log, env))
    finally:
        discard_warm()
    outcomes = [compare_pair(p, arms[p.reference], arms[p.candidate], utts, spec) for p in pairs]
    if issue:
        for o in outcomes:
            issue_equivalence(store, plan, o, arms)
    return outcomes


# -- the precondition of a precision change ------------------------------------------------------
@dataclass(frozen=True)
class Precondition:
    """What a precision-changing candidate's quality verdict may be at best, and why."""

    cap: str  # INCONCLUSIVE (no equivalence verdict yet) or FAIL (the binding one is not a PASS)
    reason: str


def equivalence_precondition(store: Store, plan: Plan, candidate: str, precision_change: bool,
                             before_seq: int | None = None) -> Precondition | None:
    """None when the candidate may PASS: it changes no numerical precision, or the first
    equivalence verdict issued for it against the quality baseline (this plan or an ancestor, in
    audit order) is a PASS. The first one binds: verdicts are insert-only and a later, better
    one does not replace it (docs/equivalence.md). `before_seq`: only verdicts issued before that
    audit seq count (a verdict re-derived as it was decided: `campaign evidence verify`)."""
    if not precision_change:
        return None
    from data.manifest import plan_lineage

    baseline = plan.quality.baseline
    rows = store.query(
        "SELECT v.verdict_id, v.verdict FROM verdicts v JOIN audit_events e ON e.kind = 'verdict_issued' "
        "AND e.subject = v.verdict_id WHERE v.kind = ? AND v.name = ? AND v.plan_hash IN (SELECT unnest(?)) "
        "AND e.seq < ? ORDER BY e.seq LIMIT 1",
        [KIND, EquivalencePair(str(baseline), candidate).name, plan_lineage(store, plan.hash), before_seq or 2**62])
    if not rows:
        return Precondition("INCONCLUSIVE", f"{candidate} changes numerical precision (precision_change: true) and has "
                            f"no equivalence verdict against the quality baseline {baseline}: run "
                            "`campaign equivalence PLAN` first (docs/equivalence.md)")
    if rows[0]["verdict"] != "PASS":
        return Precondition("FAIL", f"{candidate} changes numerical precision and its equivalence verdict against "
                            f"{baseline} ({rows[0]['verdict_id']}, the first issued, which binds) is {rows[0]['verdict']}")
    return None


def apply_precondition(result: Any, pre: Precondition | None) -> Any:
    """A quality GateResult capped by the precondition: a PASS becomes `pre.cap`, the reason is
    recorded in its inputs (and so in the verdict document); a FAIL or INCONCLUSIVE stays."""
    if pre is None or result.verdict != "PASS":
        return result
    return replace(result, verdict=pre.cap, inputs={**result.inputs, "equivalence_precondition": pre.reason})


# -- printing ---------------------------------------------------------------------------------
SHOWN = ("length_diff", "max_abs", "snr_db", "log_mel_db")


def summary(rows: list[dict[str, Any]]) -> dict[str, float | None]:
    """The worst value of each audio measure over the rows (max; min for SNR)."""
    out: dict[str, float | None] = {}
    for m in SHOWN:
        raw = [_db_value(r["value"]) for r in rows if r["measure"] == m]
        vals = [abs(v) if m == "length_diff" else v for v in raw if v is not None]
        out[m] = (min(vals) if m == "snr_db" else max(vals)) if vals else None
    return out


def fmt(measure: str, v: float | None) -> str:
    if v is None:
        return "-"
    if math.isinf(v):
        return "+inf" if v > 0 else "-inf"
    return f"{v:.0f}" if measure == "length_diff" else f"{v:.3g}"


def family_equivalence(store: Store, plan_hash: str) -> list[Any]:
    """Issued equivalence verdicts (stats.results VerdictResult, with documents) of the plan and of
    every addendum below it, oldest first: an equivalence experiment is often an addendum."""
    from console.evidence import plan_family
    from stats.results.plan_results import load_verdicts

    return [v for h in plan_family(store, plan_hash) for v in load_verdicts(store, h, documents=True)
            if v.kind == KIND]


def equivalence_lines(verdicts: list[Any]) -> list[tuple[str, str, str, list[str]]]:
    """(verdict, label, 'name: worst distances', reasons) per issued verdict, for the TUI."""
    out = []
    for v in verdicts:
        doc = v.document or {}
        worst = summary(list(doc.get("checks") or []))
        shown = ", ".join(f"{'min ' if m == 'snr_db' else 'max '}{m} {fmt(m, worst[m])}" for m in SHOWN)
        out.append((v.verdict, str(doc.get("label") or v.verdict), f"{v.name}: {shown}", list(doc.get("reasons") or [])))
    return out


def print_outcomes(console: Any, outcomes: list[PairOutcome]) -> None:
    """One line per pair: the label, the worst value of each measure, then the named reasons."""
    for o in outcomes:
        worst = summary(o.rows)
        shown = ", ".join(f"{'min ' if m == 'snr_db' else 'max '}{m} {fmt(m, worst[m])}" for m in SHOWN)
        vid = f" [{o.verdict_id}]" if o.verdict_id else ""
        console.print(f"equivalence {o.pair.name}: {o.result.label} ({shown}){vid}", markup=False, highlight=False)
        for r in o.result.reasons:
            console.print(f"  {r}", markup=False, highlight=False)
