"""Validator runs under the audit chain, and the precondition they set on a PASS (docs/plans.md,
"Validators").

`campaign validate` runs each plan validator and stores one `validator_runs` row per run with a
`validator_run` audit event in the same transaction (row hash included, so `audit verify` finds an
edited row). A quality or throughput PASS for a candidate needs, for every validator that applies
to the candidate, its latest run after both the plan's freeze event and the candidate's latest
launch (the `launch_recorded` event that inserted its newest launch row: where the engine's
identity is recorded) to have passed; otherwise the verdict is INCONCLUSIVE naming the validator.
"After" is by audit sequence, never by wall-clock time.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from data.audit import append_event, atomic, whoami
from data.digest import row_sha256
from data.hashing import sha256_bytes
from data.secrets import redact_env, scrub

if TYPE_CHECKING:
    from data.plan_model import Plan, Validator
    from data.store import Store

PASSED, FAILED, TIMED_OUT, NOT_STARTED, NOT_RUN = "passed", "failed", "timed_out", "not_started", "not_run"
TAIL_CHARS = 4000  # stdout/stderr kept in the row (the whole output is hashed)


@dataclass(frozen=True)
class Outcome:
    """How one validator process ended (console/validation.py runs it)."""

    status: str  # PASSED, FAILED, TIMED_OUT or NOT_STARTED
    exit_code: int | None
    reason: str
    duration_ns: int
    stdout: bytes
    stderr: bytes
    started_at: datetime
    ended_at: datetime
    cwd: str


def _tail(data: bytes, secrets: list[str]) -> str:
    return scrub(data.decode("utf-8", errors="replace")[-TAIL_CHARS:], secrets)


def record_run(store: Store, plan: Plan, validator: Validator, env: dict[str, str], outcome: Outcome) -> tuple[str, int]:
    """Store one validator run and its `validator_run` event atomically; (run id, audit seq)."""
    rid = f"val-{outcome.started_at:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    secrets = list(env.values())
    row = {
        "validator_run_id": rid, "plan_hash": plan.hash, "name": validator.name,
        "engines_json": json.dumps(list(validator.engines(plan))), "argv_json": json.dumps(list(validator.argv)),
        "cwd": outcome.cwd, "env_json": json.dumps(redact_env(env), sort_keys=True), "timeout_s": validator.timeout_s,
        "status": outcome.status, "exit_code": outcome.exit_code, "reason": outcome.reason or None,
        "duration_ns": outcome.duration_ns,
        "stdout_sha256": sha256_bytes(outcome.stdout), "stderr_sha256": sha256_bytes(outcome.stderr),
        "stdout_tail": _tail(outcome.stdout, secrets), "stderr_tail": _tail(outcome.stderr, secrets),
        "started_at": outcome.started_at, "ended_at": outcome.ended_at, "host": whoami(),
    }
    with atomic(store):
        store.insert("validator_runs", row)
        seq = append_event(store, "validator_run", plan_hash=plan.hash, subject=rid, payload={
            "name": validator.name, "status": outcome.status, "exit_code": outcome.exit_code,
            "engines": list(validator.engines(plan)),
            **row_sha256(store, "validator_runs", "validator_run_id", rid)})
    return rid, seq


# -- the precondition on a PASS ----------------------------------------------------------------
@dataclass(frozen=True)
class Standing:
    """Where one validator stands for one engine: its latest run that counts, or none."""

    validator: str
    status: str  # PASSED, FAILED, TIMED_OUT, NOT_STARTED, or NOT_RUN (no run after the thresholds)
    reason: str = ""
    validator_run_id: str | None = None
    seq: int | None = None

    def line(self, after_seq: int) -> str:
        if self.status == NOT_RUN:
            return f"{self.validator} (no run after seq {after_seq})"
        return f"{self.validator} ({self.status}{': ' + self.reason if self.reason else ''}; seq {self.seq})"


@dataclass(frozen=True)
class Precondition:
    """The validators a candidate's PASS needs, and where each stands (docs/plans.md, "Validators")."""

    engine: str
    freeze_seq: int | None
    identity_seq: int | None  # the candidate's newest launch_recorded insert event, if it was launched
    before_seq: int | None  # only events before it count (a verdict re-derived later: its issue event)
    standings: tuple[Standing, ...] = field(default_factory=tuple)

    @property
    def after_seq(self) -> int:
        return max(self.freeze_seq or 0, self.identity_seq or 0)

    @property
    def ok(self) -> bool:
        return all(s.status == PASSED for s in self.standings)

    @property
    def reason(self) -> str:
        bad = [s.line(self.after_seq) for s in self.standings if s.status != PASSED]
        if not bad:
            return ""
        return (f"validator{'s' if len(bad) > 1 else ''} of {self.engine} not passed after the plan's freeze (seq "
                f"{self.freeze_seq}) and its latest launch (seq {self.identity_seq if self.identity_seq else '-'}): "
                + ", ".join(bad))

    def verdict(self, verdict: str) -> str:
        """A PASS becomes INCONCLUSIVE unless every validator passed; FAIL and INCONCLUSIVE stay."""
        return "INCONCLUSIVE" if verdict == "PASS" and not self.ok else verdict

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "standings": [asdict(s) for s in self.standings], "after_seq": self.after_seq,
                "ok": self.ok, "reason": self.reason,
                "rule": "a PASS needs, for every validator that applies to the candidate, its latest run after "
                        "both seq freeze_seq and seq identity_seq (audit sequence) to have passed; otherwise "
                        "INCONCLUSIVE"}


def _freeze_seq(store: Store, plan_hash: str) -> int | None:
    return store.scalar("SELECT min(seq) FROM audit_events WHERE kind IN ('plan_frozen', 'addendum_frozen') "
                        "AND plan_hash = ?", [plan_hash])


def identity_seq(store: Store, plan_hash: str, engine: str, before_seq: int | None = None) -> int | None:
    """The seq of the event that inserted the engine's newest launch row under this plan or an
    ancestor: each launch's first `launch_recorded` event (later ones record its stop)."""
    from data.manifest import plan_lineage

    rows = store.query(
        "SELECT subject, min(seq) AS seq FROM audit_events WHERE kind = 'launch_recorded' "
        "AND plan_hash IN (SELECT unnest(?::VARCHAR[])) AND json_extract_string(payload_json, '$.engine') = ? "
        "AND seq < ? GROUP BY subject", [plan_lineage(store, plan_hash), engine, before_seq or 2**62])
    return max((r["seq"] for r in rows), default=None)


def precondition(store: Store, plan: Plan, engine: str, before_seq: int | None = None) -> Precondition:
    """Where every validator applying to `engine` stands, counting only events before `before_seq`."""
    freeze, ident = _freeze_seq(store, plan.hash), identity_seq(store, plan.hash, engine, before_seq)
    after = max(freeze or 0, ident or 0)
    runs = store.query(
        "SELECT v.validator_run_id, v.name, v.status, v.reason, v.engines_json, a.seq FROM validator_runs v "
        "JOIN audit_events a ON a.kind = 'validator_run' AND a.subject = v.validator_run_id "
        "WHERE v.plan_hash = ? AND a.seq > ? AND a.seq < ? ORDER BY a.seq", [plan.hash, after, before_seq or 2**62])
    standings = []
    for v in plan.validators:
        if engine not in v.engines(plan):
            continue
        mine = [r for r in runs if r["name"] == v.name and engine in json.loads(r["engines_json"])]
        last = mine[-1] if mine else None
        standings.append(Standing(v.name, NOT_RUN) if last is None else
                         Standing(v.name, last["status"], last["reason"] or "", last["validator_run_id"], last["seq"]))
    return Precondition(engine, freeze, ident, before_seq, tuple(standings))


def plan_runs(store: Store, plan_hash: str) -> list[dict[str, Any]]:
    """Every validator run of a plan with its audit seq, oldest first (for verdict documents)."""
    rows = store.query(
        "SELECT v.validator_run_id, v.name, v.engines_json, v.argv_json, v.cwd, v.status, v.exit_code, v.reason, "
        "v.duration_ns, v.stdout_sha256, v.stderr_sha256, v.started_at, v.ended_at, v.host, a.seq AS audit_seq "
        "FROM validator_runs v LEFT JOIN audit_events a ON a.kind = 'validator_run' AND a.subject = v.validator_run_id "
        "WHERE v.plan_hash = ? ORDER BY a.seq", [plan_hash])
    for r in rows:
        r["engines"] = json.loads(r.pop("engines_json"))
        r["argv"] = json.loads(r.pop("argv_json"))
        r["started_at"], r["ended_at"] = str(r["started_at"]), str(r["ended_at"])
    return rows
