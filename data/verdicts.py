"""Verdict storage: insert-only (docs/statistics.md).

A new analysis adds a verdict; nothing here (or anywhere: tests scan the code base) updates or
deletes one. Inserting an id that already exists is refused, and every verdict is announced in the
audit chain (`verdict_issued`) in the same transaction as its row.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from data.audit import append_event, atomic
from data.digest import row_sha256
from data.errors import CampaignError
from data.hashing import sha256_json, sha256_text
from data.store import Store, utcnow

VERDICT_VALUES = ("PASS", "FAIL", "INCONCLUSIVE")
VERDICT_KINDS = ("quality", "throughput", "equivalence", "acceptance")


class VerdictExists(CampaignError):
    """An insert would overwrite an issued verdict."""


@dataclass(frozen=True)
class VerdictRow:
    kind: str
    verdict: str
    name: str | None = None
    plan_hash: str | None = None
    method: str | None = None
    draws: int | None = None
    seed: int | None = None
    metrics_version: str | None = None
    inputs: dict[str, Any] = field(default_factory=dict)
    checks: list[dict[str, Any]] = field(default_factory=list)
    attribution: Any = None
    document: dict[str, Any] | None = None
    verdict_id: str | None = None
    created_at: datetime | None = None


def new_verdict_id(kind: str, content: Any, when: datetime | None = None) -> str:
    """`<kind>-<UTC time>-<8 hex of the content hash>`: sortable, readable, unique in practice."""
    when = when or utcnow()
    digest = sha256_json([kind, when.isoformat(), content])[:8]
    return f"{kind}-{when.strftime('%Y%m%dT%H%M%S')}Z-{digest}"


def _finite(obj: Any) -> Any:
    """NaN/inf -> null so stored JSON is strict (other tools reject NaN literals)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def _json(obj: Any) -> str:
    return json.dumps(_finite(obj), sort_keys=True, allow_nan=False, default=str)


def stored_json_sha256(text: str | None) -> str | None:
    """The hash a `verdict_issued` event records for a stored JSON column."""
    return sha256_text(text) if text is not None else None


def document_sha256(document: dict[str, Any]) -> str:
    """The `document_sha256` of a verdict document as stored (also of an exported copy with its
    `audit_head` taken out: export adds nothing else)."""
    return sha256_text(_json(document))  # = stored_json_sha256 of the stored text


def insert_verdict(store: Store, row: VerdictRow) -> str:
    """Insert one verdict and its `verdict_issued` audit event atomically; returns the verdict id.
    Refuses an id that already exists (verdicts are never overwritten)."""
    if row.verdict not in VERDICT_VALUES:
        raise CampaignError(f"verdict {row.verdict!r}: expected one of {', '.join(VERDICT_VALUES)}")
    if row.kind not in VERDICT_KINDS:
        raise CampaignError(f"verdict kind {row.kind!r}: expected one of {', '.join(VERDICT_KINDS)}")
    created = row.created_at or utcnow()
    vid = row.verdict_id or new_verdict_id(row.kind, [row.name, row.inputs, row.checks], created)
    checks_json = _json(row.checks)
    document_json = _json(row.document) if row.document is not None else None
    with atomic(store):
        existing = store.query("SELECT verdict, created_at FROM verdicts WHERE verdict_id = ?", [vid])
        if existing:
            e = existing[0]
            raise VerdictExists(
                f"verdict {vid} already exists ({e['verdict']}, issued {e['created_at']}); verdicts are "
                "insert-only: issue a new verdict instead of overwriting"
            )
        store.insert("verdicts", {
            "verdict_id": vid, "created_at": created, "plan_hash": row.plan_hash, "kind": row.kind,
            "name": row.name, "verdict": row.verdict, "method": row.method, "draws": row.draws,
            "seed": row.seed, "metrics_version": row.metrics_version, "inputs_json": _json(row.inputs),
            "checks_json": checks_json, "attribution_json": _json(row.attribution),
            "document_json": document_json,
        })
        append_event(store, "verdict_issued", plan_hash=row.plan_hash, subject=vid, payload={
            "kind": row.kind, "name": row.name, "verdict": row.verdict, "method": row.method,
            "draws": row.draws, "seed": row.seed,
            "inputs_sha256": stored_json_sha256(_json(row.inputs)),
            "checks_sha256": stored_json_sha256(checks_json),
            "document_sha256": stored_json_sha256(document_json),
            **row_sha256(store, "verdicts", "verdict_id", vid),  # the whole row, for audit verify
        })
    return vid


def _decode(r: dict[str, Any]) -> dict[str, Any]:
    for col in ("inputs_json", "checks_json", "attribution_json", "document_json"):
        key = col[:-5]
        r[key] = json.loads(r[col]) if r.get(col) is not None else None
    return r


def resolve_verdict_id(store: Store, ident: str) -> str:
    """A full verdict id from the id or a unique prefix."""
    rows = store.query("SELECT verdict_id FROM verdicts WHERE verdict_id = ? OR starts_with(verdict_id, ?) "
                       "ORDER BY verdict_id", [ident, ident])
    exact = [r for r in rows if r["verdict_id"] == ident]
    if exact:
        return ident
    if not rows:
        raise CampaignError(f"verdict {ident}: no such verdict in {store.path}")
    if len(rows) > 1:
        raise CampaignError(f"verdict id prefix {ident!r} is ambiguous ({len(rows)} verdicts)")
    return rows[0]["verdict_id"]


def get_verdict(store: Store, ident: str) -> dict[str, Any]:
    vid = resolve_verdict_id(store, ident)
    return _decode(store.query("SELECT * FROM verdicts WHERE verdict_id = ?", [vid])[0])


def list_verdicts(store: Store, plan_hash: str | None = None) -> list[dict[str, Any]]:
    sql = ("SELECT verdict_id, created_at, plan_hash, kind, name, verdict, method, draws, seed "
           "FROM verdicts")
    params: list[Any] = []
    if plan_hash:
        sql += " WHERE plan_hash = ?"
        params.append(plan_hash)
    # issue order is the verdict_issued event's seq (the chain), never created_at (a clock)
    order = (" ORDER BY (SELECT min(e.seq) FROM audit_events e WHERE e.kind = 'verdict_issued' "
             "AND e.subject = verdicts.verdict_id) NULLS LAST, verdict_id")
    return store.query(sql + order, params)


def sign_off(store: Store, verdict_id: str, requester: str, statement: str) -> int:
    """The requester's sign-off on an acceptance verdict (`campaign accept --requester --statement`):
    an audit event naming who signed, what they said and the verdict as issued; its seq."""
    from data.audit import whoami

    if not requester.strip() or not statement.strip():
        raise CampaignError("--requester and --statement: both must be non-empty")
    v = get_verdict(store, verdict_id)
    if v["kind"] != "acceptance":
        raise CampaignError(f"verdict {verdict_id}: a sign-off is on an acceptance verdict, not {v['kind']}")
    with atomic(store):
        return append_event(store, "acceptance_signed", plan_hash=v["plan_hash"], subject=v["verdict_id"],
                            payload={"requester": requester.strip(), "statement": statement.strip(),
                                     "verdict": v["verdict"], "recorded_by": whoami()})


def sign_offs(store: Store) -> list[dict[str, Any]]:
    """Every sign-off in chain order: seq, verdict_id, requester, statement, verdict."""
    rows = store.query("SELECT seq, subject, payload_json FROM audit_events WHERE kind = 'acceptance_signed' ORDER BY seq")
    return [{"seq": r["seq"], "verdict_id": r["subject"], **json.loads(r["payload_json"])} for r in rows]
