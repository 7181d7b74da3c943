"""Quality verdicts: paired-bootstrap noninferiority of a candidate against the baseline
(docs/statistics.md), the one place their decision is made. A gate result becomes the verdict to
issue once its preconditions are applied: a precision change needs a PASS equivalence verdict
(docs/equivalence.md) and a PASS needs the candidate's validators (docs/plans.md, "Validators").
`campaign gate`, the TUI's Gates tab (a dry run) and `campaign evidence verify` (as of the verdict's
own audit seq) all decide through `decide`, so no view shows a verdict the gate would not issue."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from console.equivalence import Precondition as EquivalencePrecondition
from console.equivalence import apply_precondition, equivalence_precondition
from console.evidence_steps import EvidenceMismatch
from console.verdicts.base import VerdictKind, compare_fields, same_verdict
from data.errors import CampaignError, first_line
from data.plan_model import Plan
from data.pool_status import evidence_of, with_evidence
from data.store import Store
from data.validators import Precondition as ValidatorPrecondition
from data.validators import precondition

CHECK_FIELDS = ("status", "n_ids", "n_expected", "point", "bound", "base_value", "cand_value", "margin")


@dataclass(frozen=True)
class QualityDecision:
    """`result` is the gate result to issue: capped by the equivalence precondition, its verdict
    then passed through the validators'."""

    result: Any  # stats.gates.GateResult
    equivalence_cap: EquivalencePrecondition | None  # the cap that turned a PASS down, if one did
    validators: ValidatorPrecondition

    @property
    def reasons(self) -> list[str]:
        """Why a PASS was turned down (the equivalence cap's, then the validators'), as the gate says."""
        return [why for why in (self.equivalence_cap.reason if self.equivalence_cap else "", self.validators.reason)
                if why]


def decide(store: Store, plan: Plan, candidate: str, result: Any, before_seq: int | None = None) -> QualityDecision:
    """`before_seq`: decide from the record as it stood before that audit seq (the verdict's own
    `verdict_issued` event, when `campaign evidence verify` re-derives an issued verdict)."""
    pre = equivalence_precondition(store, plan, candidate, plan.engine(candidate).precision_change, before_seq)
    capped = apply_precondition(result, pre)
    validators = precondition(store, plan, candidate, before_seq)
    capped.verdict = validators.verdict(capped.verdict)
    return QualityDecision(capped, pre if capped is not result else None, validators)


def judged_plan(store: Store, plan_hash: str, doc: dict[str, Any]) -> Plan:
    """The plan as the quality verdict `doc` judged it: a plan with several quality candidates
    issues one verdict per candidate, each over its own view (`Plan.for_candidate`), which the
    document records as its effective plan."""
    from data.plan_loading import plan_from_store

    plan = plan_from_store(store, plan_hash)
    cand = (((doc.get("plan") or {}).get("effective") or {}).get("quality") or {}).get("candidate")
    return plan.for_candidate(cand) if cand in plan.quality_candidates else plan


def _write_frame(frame: Any, path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
    meta = {**(t.schema.metadata or {}), b"omni_campaign.frame_attrs": json.dumps(frame.attrs, default=str).encode()}
    pq.write_table(t.replace_schema_metadata(meta), path)


def _read_frame(root: Path, vid: str) -> Any:
    import pyarrow.parquet as pq

    p = root / "verdicts" / f"{vid}.scores.parquet"
    if not p.is_file():
        raise EvidenceMismatch(f"verdicts/{p.name}: missing (the quality verdict's input table)")
    try:
        t = pq.read_table(p)
    except Exception as exc:  # pyarrow raises several error types for a damaged file
        raise EvidenceMismatch(f"verdicts/{p.name}: cannot be read ({first_line(exc)})") from None
    from stats.gates import current_names

    frame = current_names(t.to_pandas())  # a bundle written before the MOS column was `mos` says `utmos`
    frame.attrs.update(json.loads((t.schema.metadata or {}).get(b"omni_campaign.frame_attrs", b"{}")))
    return frame


def _scores_agree(store: Store, frame: Any, doc: dict[str, Any], vid: str) -> None:
    """Every value of the input table equals the bundled quality score it came from."""
    ids = (doc.get("inputs") or {}).get("scorers") or {}
    rows = store.query("SELECT run_id, utt_id, scorer_id, status, value, wer_substitutions + wer_deletions + "
                       "wer_insertions AS errors, wer_ref_words FROM quality_scores")
    by = {(r["run_id"], r["utt_id"], r["scorer_id"]): r for r in rows}
    for rec in frame.itertuples(index=False):
        if rec.run_id is None:
            continue
        for col, metric in (("wer_errors", "wer"), ("sim", "sim"), ("mos", "mos")):
            v = getattr(rec, col)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            sid = ids.get(metric) or (ids.get("utmos") if metric == "mos" else None)  # an older document's name
            s = by.get((rec.run_id, rec.utt_id, sid))
            want = None if s is None or s["status"] != "ok" else (s["errors"] if metric == "wer" else s["value"])
            words_differ = s is not None and metric == "wer" and float(s["wer_ref_words"]) != float(rec.wer_words)
            if want is None or float(want) != float(v) or words_differ:
                raise EvidenceMismatch(f"verdict {vid}: {metric} of {rec.utt_id} in run {rec.run_id} is {v!r} in its "
                                       f"input table but {want!r} in tables/quality_scores")


class QualityKind(VerdictKind):
    name: ClassVar[str] = "quality"

    def bundle_files(self, verdict_id: str) -> tuple[str, ...]:
        return (f"{verdict_id}.scores.parquet",)

    def export(self, store: Store, row: dict[str, Any], doc: dict[str, Any], folder: Path) -> None:
        """The gate's input table, rebuilt from the store and refused unless it hashes as recorded."""
        if not row["plan_hash"]:
            return
        from stats.gates import frame_sha256
        from stats.quality.scoring import scores_frame

        vid = row["verdict_id"]
        frame = scores_frame(store, judged_plan(store, row["plan_hash"], doc))
        if frame_sha256(frame) != (doc.get("inputs") or {}).get("sha256"):
            raise CampaignError(f"verdict {vid}: its input table no longer rebuilds from the store (sha256 "
                                f"{frame_sha256(frame)[:16]}… vs {str((doc.get('inputs') or {}).get('sha256'))[:16]}… "
                                "recorded): scores, runs or audio files changed since it was issued")
        _write_frame(frame, folder / f"{vid}.scores.parquet")

    def reverify(self, root: Path, store: Store, doc: dict[str, Any], seq: int) -> str:
        from stats.gates import GateConfig, evaluate_gates, frame_sha256

        vid = doc["verdict_id"]
        frame = _read_frame(root, vid)
        inputs = doc.get("inputs") or {}
        if frame_sha256(frame) != inputs.get("sha256"):
            raise EvidenceMismatch(f"verdict {vid}: its input table verdicts/{vid}.scores.parquet hashes to "
                                   f"{frame_sha256(frame)[:16]}…, the document says {str(inputs.get('sha256'))[:16]}…")
        _scores_agree(store, frame, doc, vid)
        plan = judged_plan(store, doc["plan"]["hash"], doc)
        result = evaluate_gates(frame, GateConfig.from_plan(plan), scorer_status=inputs.get("scorer_status") or {},
                                attribution=False, source=inputs.get("source") or "scores")
        derived, stored = result.checks_dicts(), doc.get("checks") or []
        if len(derived) != len(stored):
            raise EvidenceMismatch(f"verdict {vid}: {len(derived)} checks re-derived, the document has {len(stored)}")
        for s, d in zip(stored, derived):
            compare_fields(f"verdict {vid} C{s.get('concurrency')} {s.get('metric')}", s, d, CHECK_FIELDS)
        # a document without `validators` was issued before those preconditions existed: its statistics alone
        verdict = (decide(store, plan, doc["validators"]["engine"], result, before_seq=seq).result.verdict
                   if isinstance(doc.get("validators"), dict) else result.verdict)
        same_verdict(vid, verdict, doc)
        return f"{vid} {verdict}: {len(derived)} checks, bounds bit-identical"

    def label(self, row: dict[str, Any]) -> str:
        return with_evidence(str(row["verdict"]), evidence_of(row.get("document_json"))[0])

    def detail_lines(self, store: Store, row: dict[str, Any]) -> list[str]:
        if row["verdict"] == "PASS":
            return []
        checks = json.loads(row.get("checks_json") or "[]")
        bad = [f"{c.get('metric')}@C{c.get('concurrency')}" for c in checks if c.get("status") == "FAIL"]
        return [f"failing checks: {', '.join(bad) or '-'}"]


KIND = QualityKind()
