"""Candidates: every configuration ever launched or probed, as a named hypothesis with its fate
(docs/results.md, "Candidates").

A candidate is keyed by the SHA-256 of its configuration's canonical JSON (what the console
builds in console/candidates.py: argv, env names, deploy config, identity and patch, request body
template). Its status moves proposed -> measured -> selected | rejected, or to startup_failed;
every change is a `candidate_recorded` audit event holding the row's hash as it now stands (the
row changes over its life, like a launch: data/launches.py), so `audit verify` compares each row
with its last event. Rejected is final: a later PASS is a new verdict beside the old one, never a
change back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from data.audit import append_event, atomic, whoami
from data.digest import row_sha256
from data.errors import CampaignError
from data.hashing import canonical_json, sha256_text
from data.store import utcnow

if TYPE_CHECKING:
    from data.store import Store

PROPOSED, MEASURED, STARTUP_FAILED, SELECTED, REJECTED = "proposed", "measured", "startup_failed", "selected", "rejected"
STATUSES = (PROPOSED, MEASURED, STARTUP_FAILED, SELECTED, REJECTED)
# what a launch's outcome moves a candidate to, and from which statuses (a decision is never undone by a launch)
_BY_OUTCOME = {"measured": (MEASURED, (PROPOSED, STARTUP_FAILED)), "startup_failed": (STARTUP_FAILED, (PROPOSED,))}


@dataclass(frozen=True)
class Candidate:
    config_sha256: str
    name: str
    status: str
    hypothesis: str | None = None
    reason: str | None = None
    verdicts: tuple[str, ...] = ()
    plan_hash: str | None = None

    @property
    def short(self) -> str:
        return self.config_sha256[:12]


def config_sha256(config: dict[str, Any]) -> str:
    return sha256_text(canonical_json(config))


def _announce(store: Store, key: str, change: str, extra: dict[str, Any] | None = None) -> int:
    r = store.query("SELECT plan_hash, name, status, reason, verdicts_json FROM candidates WHERE config_sha256 = ?",
                    [key])[0]
    return append_event(store, "candidate_recorded", plan_hash=r["plan_hash"], subject=key,
                        payload={"name": r["name"], "status": r["status"], "reason": r["reason"], "change": change,
                                 "verdicts": json.loads(r["verdicts_json"] or "[]"), **(extra or {}),
                                 **row_sha256(store, "candidates", "config_sha256", key)})


def post_holdout(store: Store, plan_hash: str | None) -> dict[str, Any] | None:
    """The holdout_opened event a decision about `plan_hash`'s candidates comes after, if any:
    candidates are selected on tuning data before the holdout opens (docs/results.md,
    "Candidates"), so a later selection or rejection is recorded as post-holdout."""
    from data.manifest import holdout_opened

    ev = holdout_opened(store, plan_hash) if plan_hash else None
    return {"opened_seq": int(ev["seq"]), "pool": ev["subject"], "plan_hash": ev["plan_hash"]} if ev else None


def get(store: Store, key: str) -> Candidate | None:
    rows = store.query("SELECT * FROM candidates WHERE config_sha256 = ?", [key])
    if not rows:
        return None
    r = rows[0]
    return Candidate(r["config_sha256"], r["name"], r["status"], r["hypothesis"], r["reason"],
                     tuple(json.loads(r["verdicts_json"] or "[]")), r["plan_hash"])


def register(store: Store, name: str, config: dict[str, Any], *, hypothesis: str | None = None,
             origin: str = "plan", plan_hash: str | None = None) -> str:
    """The candidate of `config` (registered as proposed, with its event, if new); its key."""
    key = config_sha256(config)
    with atomic(store):
        if get(store, key) is None:
            who = whoami()
            store.insert("candidates", {
                "config_sha256": key, "name": name, "config_json": canonical_json(config), "hypothesis": hypothesis,
                "origin": origin, "registered_at": utcnow(), "registered_by": who, "status": PROPOSED,
                "reason": None, "verdicts_json": "[]", "plan_hash": plan_hash, "changed_by": who})
            _announce(store, key, "registered")
    return key


def _set(store: Store, key: str, status: str, *, reason: str | None, verdicts: Sequence[str],
         plan_hash: str | None, change: str) -> int:
    decided = status in (SELECTED, REJECTED)
    with atomic(store):
        after = post_holdout(store, plan_hash) if decided else None
        store.con.execute("UPDATE candidates SET status = ?, reason = ?, verdicts_json = ?, plan_hash = ?, "
                          "changed_by = ? WHERE config_sha256 = ?",
                          [status, reason, json.dumps(list(verdicts)), plan_hash, whoami(), key])
        return _announce(store, key, change, {"post_holdout": after} if after else None)


def record_outcome(store: Store, key: str, outcome: str, *, plan_hash: str | None, reason: str | None = None) -> None:
    """A launch's outcome (measured, startup_failed) moves a proposed candidate on; a decided one
    (selected, rejected) and other outcomes (interrupted) leave it as it is."""
    to, sources = _BY_OUTCOME.get(outcome, (None, ()))
    c = get(store, key)
    if to is not None and c is not None and c.status in sources:
        _set(store, key, to, reason=reason, verdicts=(), plan_hash=plan_hash, change=outcome)


def reject(store: Store, key: str, reason: str, verdicts: Sequence[str] = (), *, plan_hash: str | None) -> bool:
    """Mark rejected with its reason and the verdicts it rests on; False if it already was (the
    first rejection stands)."""
    if not reason.strip():
        raise CampaignError("--reason: must not be empty")
    c = get(store, key)
    if c is None:
        raise CampaignError(f"candidate {key[:12]}: not registered")
    if c.status == REJECTED:
        return False
    _set(store, key, REJECTED, reason=reason, verdicts=verdicts, plan_hash=plan_hash, change="rejected")
    return True


def select(store: Store, key: str, verdicts: Sequence[str], reason: str | None, *, plan_hash: str | None) -> int:
    """Record the selection of a measured candidate and the verdicts behind it; its event's seq."""
    c = get(store, key)
    if c is None:
        raise CampaignError(f"candidate {key[:12]}: not registered")
    if c.status == REJECTED:
        raise CampaignError(f"candidate {c.name} ({c.short}) is rejected ({c.reason}); rejected candidates stay "
                            "rejected")
    if c.status not in (MEASURED, SELECTED):
        raise CampaignError(f"candidate {c.name} ({c.short}) is {c.status}: only a measured candidate can be selected")
    if not verdicts:
        raise CampaignError("--because: name the verdict(s) the selection rests on")
    return _set(store, key, SELECTED, reason=reason, verdicts=verdicts, plan_hash=plan_hash, change="selected")


def resolve(store: Store, ident: str, keys: Sequence[str] | None = None) -> str:
    """A candidate key from a name or a config hash prefix (among `keys` when given); one line
    naming the choices when it is ambiguous."""
    rows = store.query("SELECT config_sha256, name, status FROM candidates WHERE name = ? OR starts_with(config_sha256, ?) "
                       "ORDER BY registered_at", [ident, ident.lower()])
    if keys is not None:
        rows = [r for r in rows if r["config_sha256"] in keys] or rows
    if not rows:
        raise CampaignError(f"candidate {ident}: no such candidate (name or config hash) in {store.path}")
    if len(rows) > 1:
        shown = ", ".join(f"{r['config_sha256'][:12]} ({r['name']}, {r['status']})" for r in rows[:6])
        raise CampaignError(f"candidate {ident}: {len(rows)} configurations match ({shown}); give the config hash")
    return str(rows[0]["config_sha256"])


def status_events(store: Store, key: str) -> list[dict[str, Any]]:
    """Every `candidate_recorded` event of a candidate, in chain order."""
    from data.audit import events

    return events(store, kind="candidate_recorded", subject=key)


_JUDGED = ("CASE v.kind WHEN 'quality' THEN json_extract_string(v.document_json, '$.plan.effective.quality.candidate') "
           "WHEN 'throughput' THEN json_extract_string(v.document_json, '$.decision_rule.candidate') "
           "ELSE json_extract_string(v.document_json, '$.candidate') END")  # the engine a verdict judged


def fates(store: Store) -> list[dict[str, Any]]:
    """Every candidate with its fate: status and reason, the attempts' launches, startup failures
    and runs, and the verdicts that judged it (a plan it was attempted in, its engine name) or
    that its status rests on; in registration order (docs/results.md, "Candidates")."""
    rows = store.query(
        "SELECT c.*, (SELECT min(seq) FROM audit_events e WHERE e.kind = 'candidate_recorded' "
        "AND e.subject = c.config_sha256) AS seq FROM candidates c ORDER BY seq, c.config_sha256")
    attempts = store.query("SELECT config_sha256, plan_hash, outcome, launch_id, run_ids_json, reason FROM attempts "
                           "WHERE config_sha256 IS NOT NULL ORDER BY created_at")
    event_plans = {r["subject"]: set(r["plans"] or ()) for r in store.query(  # NULL: a probe only
        "SELECT subject, list(DISTINCT plan_hash) FILTER (WHERE plan_hash IS NOT NULL) AS plans FROM audit_events "
        "WHERE kind = 'candidate_recorded' GROUP BY subject")}
    verdicts = store.query(f"SELECT v.verdict_id, v.verdict, v.plan_hash, {_JUDGED} AS judged, e.seq FROM verdicts v "
                           "JOIN audit_events e ON e.kind = 'verdict_issued' AND e.subject = v.verdict_id ORDER BY e.seq")
    out = []
    for r in rows:
        mine = [a for a in attempts if a["config_sha256"] == r["config_sha256"]]
        plans = {a["plan_hash"] for a in mine if a["plan_hash"]} | event_plans.get(r["config_sha256"], set())
        rests = json.loads(r["verdicts_json"] or "[]")
        judged = [v for v in verdicts if v["verdict_id"] in rests or (v["plan_hash"] in plans and v["judged"] == r["name"])]
        out.append({
            "name": r["name"], "config_sha256": r["config_sha256"], "origin": r["origin"], "status": r["status"],
            "reason": r["reason"], "hypothesis": r["hypothesis"], "rests_on": rests,
            "launches": len({a["launch_id"] for a in mine if a["launch_id"]}),
            "startup_failures": [a["reason"] for a in mine if a["outcome"] == "startup_failed"],
            "runs": [rid for a in mine for rid in json.loads(a["run_ids_json"] or "[]")],
            "verdicts": [f"{v['verdict_id']} {v['verdict']}" for v in judged],
            "plans": sorted(plans), "registered_seq": r["seq"], "registered_by": r["registered_by"],
            "registered_at": str(r["registered_at"]),
        })
    return out


def plan_record(store: Store, plan_hashes: Sequence[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The candidates and attempts of a plan family, for the report's "Candidates and attempts":
    every candidate touched under one of the plans (attempted, registered or changed) and every
    attempt, oldest first."""
    fam = set(plan_hashes)
    cands = [c for c in fates(store) if fam & set(c["plans"])]
    attempts = store.query("SELECT created_at, engine, outcome, reason, launch_id, run_ids_json, config_sha256 FROM "
                           "attempts WHERE list_contains(?, plan_hash) ORDER BY created_at, attempt_id", [sorted(fam)])
    for a in attempts:
        a["runs"] = len(json.loads(a.pop("run_ids_json") or "[]"))
    return cands, attempts
