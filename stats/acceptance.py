"""The acceptance decision (docs/statistics.md, "Acceptance"): one verdict that combines every
piece a candidate needs, naming each.

Pieces: `quality` (its latest quality verdict of the plan's family: PASS with all nine checks, i.e.
three metrics at every scored concurrency, on an untouched holdout unless the plan declares a
regression check), `throughput` (the latest verdict of every decision rule whose candidate it is),
`validators` (data/validators.py's precondition), `equivalence` (where the plan has an
`equivalence` section naming the candidate: its equivalence verdict against the quality baseline;
otherwise not required), `selection` (the candidate's recorded status: selected, before the
holdout opened) and `pinning` (the candidate and the engines it is compared with name their
source). PASS only when every piece passes (or is not required); FAIL when any fails;
otherwise INCONCLUSIVE. Only what the chain announced before the acceptance counts ("before" by
audit seq), so `evidence verify` re-derives the same pieces from a bundle.

The pieces are computed from plain records (`Issued`, `CandidateState`), which the store
(`issued_from_store`) and an evidence bundle (console/evidence.py) both provide.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from data.pool_status import REUSED, with_evidence

if TYPE_CHECKING:
    from data.plan_model import Plan
    from data.store import Store

PASS, FAIL, INCONCLUSIVE, NOT_REQUIRED = "PASS", "FAIL", "INCONCLUSIVE", "not required"
# 2 (2026-12-04): reused quality evidence, a post-holdout selection and an unpinned compared engine
# keep an acceptance from PASS; documents without `rules_version` were decided by the rules before
RULES_VERSION = 2
PIECES = ("quality", "throughput", "validators", "equivalence", "selection", "pinning")
RULE = ("PASS only when every piece passes or is not required: the candidate's latest quality verdict PASS with all "
        "checks (three metrics at every scored concurrency) passed, the latest verdict of every decision rule whose "
        "candidate it is PASS, every validator applying to it passed after the freeze and its latest launch, its "
        "equivalence verdict PASS where the plan's `equivalence` section names it, and its selection recorded before the "
        "holdout was opened, and the source of it and of every engine it is compared with pinned (engines[].source); "
        "a quality PASS on reused prompts counts only where the plan declares a regression check; FAIL when any piece "
        "fails; otherwise INCONCLUSIVE. Only events before the acceptance's own (audit seq) count.")


@dataclass(frozen=True)
class Issued:
    """One issued verdict as an acceptance reads it."""

    verdict_id: str
    seq: int
    kind: str
    name: str | None
    verdict: str
    plan_hash: str | None
    judged: str | None  # the engine it judged (quality candidate, rule candidate)
    checks: tuple[str, ...] = ()  # quality: each check's status
    evidence: str | None = None  # quality: its evidence class (data/pool_status.py)


@dataclass(frozen=True)
class Piece:
    piece: str
    status: str  # PASS, FAIL, INCONCLUSIVE or NOT_REQUIRED
    detail: str
    verdicts: tuple[str, ...] = field(default_factory=tuple)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "verdicts": list(self.verdicts)}


def _latest(issued: Sequence[Issued], pred: Callable[[Issued], bool]) -> Issued | None:
    hits = [v for v in issued if pred(v)]
    return max(hits, key=lambda v: v.seq) if hits else None


def _first(issued: Sequence[Issued], pred: Callable[[Issued], bool]) -> Issued | None:
    """The first issued by audit sequence: an equivalence verdict binds, a later one never
    replaces it (docs/equivalence.md)."""
    hits = [v for v in issued if pred(v)]
    return min(hits, key=lambda v: v.seq) if hits else None


def _named(kind: str, name: str) -> Callable[[Issued], bool]:
    return lambda v: v.kind == kind and v.name == name


def quality_piece(plan: Plan, candidate: str, issued: Sequence[Issued]) -> Piece:
    if candidate not in plan.quality_candidates:
        return Piece("quality", INCONCLUSIVE, f"the plan judges no quality of {candidate} (not a quality candidate)")
    v = _latest(issued, lambda v: v.kind == "quality" and v.judged == candidate)
    if v is None:
        return Piece("quality", INCONCLUSIVE, f"no quality verdict of {candidate} issued (`campaign gate`)")
    want = 3 * len(plan.quality.scored_concurrencies)
    passed = sum(1 for c in v.checks if c == PASS)
    if v.verdict == PASS and (len(v.checks) != want or passed != want):
        return Piece("quality", INCONCLUSIVE, f"{v.verdict_id} PASS but {passed} of {want} checks passed", (v.verdict_id,))
    shown = with_evidence(v.verdict, v.evidence)
    if v.verdict == PASS and v.evidence == REUSED and not plan.quality.regression_check:
        return Piece("quality", INCONCLUSIVE, f"{v.verdict_id} {shown}: its prompts were used before its quality runs; "
                     "acceptance needs an untouched holdout unless the plan declares a regression check "
                     "(quality.regression_check)", (v.verdict_id,))
    status = v.verdict if v.verdict in (PASS, FAIL) else INCONCLUSIVE
    return Piece("quality", status, f"{v.verdict_id} {shown}: {passed} of {len(v.checks)} checks passed"
                 + ("; a declared regression check" if v.evidence == REUSED else ""), (v.verdict_id,))


def throughput_piece(plan: Plan, candidate: str, issued: Sequence[Issued]) -> Piece:
    rules = [r for r in plan.decision_rules if r.candidate == candidate]
    if not rules:
        return Piece("throughput", INCONCLUSIVE, f"no decision rule of the plan has {candidate} as its candidate")
    found, parts, statuses = [], [], []
    for r in rules:
        v = _latest(issued, _named("throughput", r.name))
        if v is None:
            parts.append(f"{r.name}: no verdict issued")
            statuses.append(INCONCLUSIVE)
            continue
        found.append(v.verdict_id)
        parts.append(f"{r.name} vs {r.reference}: {v.verdict_id} {v.verdict}")
        statuses.append(v.verdict)
    return Piece("throughput", combine(statuses), "; ".join(parts), tuple(found))


def equivalence_pairs(plan: Plan, candidate: str) -> list[str] | None:
    """The equivalence verdict names the plan requires of `candidate` ("CANDIDATE vs REFERENCE",
    kind `equivalence`, docs/equivalence.md), or None when the plan has no `equivalence` section
    (the typed `Plan.equivalence`, pairs of .candidate and .reference). The one place that reads
    that section: adjust here if its shape changes."""
    section = getattr(plan, "equivalence", None)
    if section is None:
        return None
    return [f"{p.candidate} vs {p.reference}" for p in section.pairs if p.candidate == candidate]


def equivalence_piece(plan: Plan, candidate: str, issued: Sequence[Issued]) -> Piece:
    names = equivalence_pairs(plan, candidate)
    if not names:
        why = "the plan has no `equivalence` section" if names is None else f"no equivalence pair names {candidate}"
        return Piece("equivalence", NOT_REQUIRED, why)
    found, parts, statuses = [], [], []
    for n in names:
        v = _first(issued, _named("equivalence", n))
        if v is None:
            parts.append(f"{n}: no equivalence verdict issued")
            statuses.append(INCONCLUSIVE)
            continue
        found.append(v.verdict_id)
        parts.append(f"{n}: {v.verdict_id} {v.verdict}")
        statuses.append(v.verdict)
    return Piece("equivalence", combine(statuses), "; ".join(parts), tuple(found))


def validators_piece(pre: Any) -> Piece:
    """From data.validators.Precondition: passed -> PASS, a failed or timed-out run -> FAIL,
    not run or not started -> INCONCLUSIVE."""
    if not pre.standings:
        return Piece("validators", PASS, f"no validator applies to {pre.engine}")
    if pre.ok:
        return Piece("validators", PASS, ", ".join(f"{s.validator} passed (seq {s.seq})" for s in pre.standings))
    failed = any(s.status in ("failed", "timed_out") for s in pre.standings)
    return Piece("validators", FAIL if failed else INCONCLUSIVE, pre.reason)


@dataclass(frozen=True)
class CandidateState:
    """A candidate's status as of an audit seq (its last candidate_recorded event before it)."""

    config_sha256: str | None
    status: str | None
    reason: str | None = None
    verdicts: tuple[str, ...] = ()
    seq: int | None = None
    post_holdout: dict[str, Any] | None = None  # the holdout_opened event the decision came after


def selection_piece(candidate: str, state: CandidateState) -> Piece:
    if state.status == "selected" and state.post_holdout:
        return Piece("selection", INCONCLUSIVE, f"{candidate} ({(state.config_sha256 or '')[:12]}) selected at seq "
                     f"{state.seq}, after the holdout was opened (seq {state.post_holdout.get('opened_seq')}): POST-HOLDOUT "
                     "selection; candidates are selected on tuning data before the holdout opens", state.verdicts)
    if state.status == "selected":
        return Piece("selection", PASS, f"{candidate} ({(state.config_sha256 or '')[:12]}) selected at seq {state.seq}"
                     f" because {', '.join(state.verdicts)}", state.verdicts)
    if state.status == "rejected":
        return Piece("selection", FAIL, f"{candidate} rejected at seq {state.seq}: {state.reason}", state.verdicts)
    return Piece("selection", INCONCLUSIVE, f"no selection of {candidate} recorded (status {state.status or 'unknown'}; "
                 "`campaign candidates select`)")


def compared_engines(plan: Plan, candidate: str) -> list[str]:
    """The candidate and every engine the plan compares it with (Plan.compared_pairs), in plan order."""
    names = {candidate} | {a for a, b, _ in plan.compared_pairs() if b == candidate}
    return [e.name for e in plan.engines if e.name in names]


def pinning_piece(plan: Plan, candidate: str) -> Piece:
    """PASS when the candidate and every engine it is compared with name their source (a git
    checkout or an installed distribution, docs/engines.md): an unpinned engine ran whatever was
    installed, so what was measured cannot be named."""
    names = compared_engines(plan, candidate)
    unpinned = [n for n in names if plan.engine(n).source is None]
    if unpinned:
        return Piece("pinning", INCONCLUSIVE, f"unpinned: {', '.join(unpinned)} (no engines[].source: it ran whatever "
                     "was installed)")
    return Piece("pinning", PASS, "sources pinned: " + ", ".join(
        f"{n} ({', '.join(f'{k} {v}' for k, v in sorted((plan.engine(n).source or {}).items()))})" for n in names))


def combine(statuses: Sequence[str]) -> str:
    if FAIL in statuses:
        return FAIL
    if all(s in (PASS, NOT_REQUIRED) for s in statuses):
        return PASS
    return INCONCLUSIVE


def pieces(plan: Plan, candidate: str, issued: Sequence[Issued], pre: Any, state: CandidateState) -> list[Piece]:
    return [quality_piece(plan, candidate, issued), throughput_piece(plan, candidate, issued), validators_piece(pre),
            equivalence_piece(plan, candidate, issued), selection_piece(candidate, state), pinning_piece(plan, candidate)]


# -- from the store ---------------------------------------------------------------------------
JUDGED_SQL = ("CASE v.kind WHEN 'quality' THEN json_extract_string(v.document_json, '$.plan.effective.quality.candidate') "
              "WHEN 'throughput' THEN json_extract_string(v.document_json, '$.decision_rule.candidate') END")


def issued_from_store(store: Store, plan_hashes: Sequence[str], before_seq: int | None = None) -> list[Issued]:
    rows = store.query(
        f"SELECT v.verdict_id, e.seq, v.kind, v.name, v.verdict, v.plan_hash, {JUDGED_SQL} AS judged, v.checks_json, "
        "json_extract_string(v.document_json, '$.evidence.status') AS evidence "
        "FROM verdicts v JOIN audit_events e ON e.kind = 'verdict_issued' AND e.subject = v.verdict_id "
        "WHERE list_contains(?, v.plan_hash) AND e.seq < ? ORDER BY e.seq", [list(plan_hashes), before_seq or 2**62])
    import json

    return [Issued(r["verdict_id"], r["seq"], r["kind"], r["name"], r["verdict"], r["plan_hash"], r["judged"],
                   tuple(str(c.get("status")) for c in json.loads(r["checks_json"] or "[]"))
                   if r["kind"] == "quality" else (), r["evidence"] if r["kind"] == "quality" else None) for r in rows]


def candidate_state(store: Store, key: str | None, before_seq: int | None = None) -> CandidateState:
    """The candidate's status from its last candidate_recorded event before `before_seq`."""
    if key is None:
        return CandidateState(None, None)
    rows = store.query("SELECT seq, payload_json FROM audit_events WHERE kind = 'candidate_recorded' AND subject = ? "
                       "AND seq < ? ORDER BY seq DESC LIMIT 1", [key, before_seq or 2**62])
    if not rows:
        return CandidateState(key, None)
    import json

    p = json.loads(rows[0]["payload_json"])
    return CandidateState(key, p.get("status"), p.get("reason"), tuple(p.get("verdicts") or ()), rows[0]["seq"],
                          p.get("post_holdout"))


# -- the verdict ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Acceptance:
    candidate: str
    config_sha256: str | None
    verdict: str
    pieces: tuple[Piece, ...]

    @property
    def cited(self) -> list[str]:
        return list(dict.fromkeys(v for p in self.pieces for v in p.verdicts))


def decide(store: Store, plan: Plan, candidate: str, key: str | None, before_seq: int | None = None) -> Acceptance:
    """Every piece for `candidate` from what the chain announced before `before_seq` (all of it
    when None), and the combined verdict."""
    from data.manifest import plan_lineage
    from data.validators import precondition

    issued = issued_from_store(store, plan_lineage(store, plan.hash), before_seq)
    ps = pieces(plan, candidate, issued, precondition(store, plan, candidate, before_seq=before_seq),
                candidate_state(store, key, before_seq))
    return Acceptance(candidate, key, combine([p.status for p in ps]), tuple(ps))


def claims_section(plan: Plan) -> dict[str, Any] | None:
    """The plan's `claims` as the verdict carries them (docs/plans.md, "Claims"), with what the
    plan's checks cover (`covers`); None when unset."""
    c = plan.claims
    if c is None:
        return None
    out: dict[str, Any] = {"status": c.status, "scope": c.scope, "non_claims": list(c.non_claims)}
    if c.concurrencies:
        out["concurrencies"] = list(c.concurrencies)
    out["covers"] = coverage(plan)
    return out


def coverage(plan: Plan) -> dict[str, Any]:
    """What the plan's verdicts can support: its quality checks (metrics x concurrencies) and each
    decision rule's concurrencies. A claim beyond them is refused at freeze (claims.concurrencies)."""
    concs = list(plan.quality.scored_concurrencies)
    return {"quality_checks": 3 * len(concs), "quality_concurrencies": concs, "quality_metrics": ["wer", "sim", "mos"],
            "rules": {r.name: list(r.concurrencies) for r in plan.decision_rules}}


def coverage_text(plan: Plan) -> str:
    cov = coverage(plan)
    rules = "; ".join(f"{n} at C{', C'.join(map(str, cs))}" for n, cs in cov["rules"].items()) or "none"
    return (f"covers: {cov['quality_checks']} quality checks (WER, SIM, MOS at "
            f"C{', C'.join(map(str, cov['quality_concurrencies']))}); throughput rules: {rules}")


def acceptance_document(store: Store, plan: Plan, acc: Acceptance, *, verdict_id: str, created_at: Any,
                        metrics_version: str | None) -> dict[str, Any]:
    from data.plan_freeze import frozen_plan_records
    from stats.verdict_doc import SCHEMA_VERSION, engines_section, finite, plan_section

    return finite({
        "schema_version": SCHEMA_VERSION, "verdict_id": verdict_id, "created_at": created_at.isoformat(),
        "kind": "acceptance", "name": f"{plan.name}: {acc.candidate} acceptance", "verdict": acc.verdict,
        "rule": RULE, "rules_version": RULES_VERSION, "candidate": acc.candidate, "candidate_config_sha256": acc.config_sha256,
        "pieces": [p.as_dict() for p in acc.pieces], "claims": claims_section(plan),
        "store_plans": frozen_plan_records(store),  # every plan frozen in the store, abandoned ones too
        "plan": plan_section(store, plan), "engines": engines_section(store, plan), "validators": None,
        "metrics_version": metrics_version,
        "checks": [{"piece": p.piece, "status": p.status, "verdicts": list(p.verdicts)} for p in acc.pieces],
        "attribution": [], "inputs": {"verdicts": acc.cited, "candidate": acc.candidate,
                                      "config_sha256": acc.config_sha256},
        "cells": [], "throughput": [], "runs": [], "exclusions": [], "controls": None,
        "reproduce": {"commands": [f"campaign accept {plan.source_path or plan.hash} --candidate {acc.candidate}",
                                   f"campaign export verdict {verdict_id} -o verdict.json"],
                      "note": "each piece names the verdicts it rests on; `campaign evidence verify` re-derives the "
                              "pieces from the bundled chain, verdicts, candidates and validator runs"},
    })


def issue_acceptance(store: Store, plan: Plan, acc: Acceptance, metrics_version: str | None) -> str:
    """Store the acceptance verdict (insert-only, audited) with its document; returns its id."""
    from data.store import utcnow
    from data.verdicts import VerdictRow, insert_verdict, new_verdict_id

    created = utcnow()
    vid = new_verdict_id("acceptance", [acc.candidate, [p.as_dict() for p in acc.pieces]], created)
    doc = acceptance_document(store, plan, acc, verdict_id=vid, created_at=created, metrics_version=metrics_version)
    return insert_verdict(store, VerdictRow(
        kind="acceptance", verdict=acc.verdict, name=doc["name"], plan_hash=plan.hash, metrics_version=metrics_version,
        inputs=doc["inputs"], checks=doc["checks"], attribution=[], document=doc, verdict_id=vid, created_at=created))
