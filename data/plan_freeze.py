"""Freezing a plan (canonical JSON + SHA-256 stored before any measurement, with its workload
manifest, checkpoint digests and holdout reservation) and verifying a file against what was
frozen (docs/plans.md, "What freeze checks"). An addendum is frozen bound to its parent's hash.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

from data.audit import append_event, atomic, whoami
from data.checkpoints import freeze_checkpoints
from data.digest import row_sha256
from data.errors import CampaignError
from data.hashing import canonical_json, sha256_text
from data.manifest import check_holdout_unused, freeze_manifest
from data.plan_hashing import diff_documents, document_hash, is_addendum, legacy_hash
from data.plan_ids import ADDENDUM_SCHEMA_ID
from data.plan_loading import load_plan, plan_from_store, read_json, resolve_hash
from data.plan_model import Plan
from data.plan_paths import check_paths
from data.plan_validation import placeholder_error, plan_error
from data.queries import plan_seq
from data.secrets import redact_document, secret_values
from data.store import Store, utcnow


@dataclass(frozen=True)
class FreezeResult:
    hash: str
    created: bool  # False: this exact content was already frozen (idempotent re-freeze)
    kind: str
    plan: Plan
    manifest_hash: str | None = None
    audit_seq: int | None = None
    name: str = ""  # the frozen document's own name (an addendum's, not its parent's)

    @property
    def message(self) -> str:
        what = "addendum" if self.kind == "addendum" else "plan"
        if self.created:
            return f"froze {what} {self.name!r}: {self.hash}"
        return f"{what} {self.name!r} was already frozen with identical content: {self.hash}"


FreezeCheck = Callable[[Plan], list[str]]


def freeze(store: Store, path: str | Path, expected_parent: str | None = None,
           checks: Sequence[FreezeCheck] = ()) -> FreezeResult:
    """Validate, check every path the plan names exists, reserve the holdout (refusing reuse),
    hash the checkpoints (refusing compared engines on different bytes), store canonical JSON +
    hash, audit it. `checks`: further rules
    on the typed plan that need more than data/ knows (the console passes the compared engines'
    sampling rule, engine_adapters/sampling.py); each returns one-line problems."""
    doc = read_json(path)
    label = str(path)
    if expected_parent is not None:
        if not is_addendum(doc):
            raise CampaignError(f"{label}: schema: expected {ADDENDUM_SCHEMA_ID!r} for an addendum, found {doc.get('schema') if isinstance(doc, dict) else doc!r}")
        parent_full = resolve_hash(store, expected_parent)
        if doc.get("parent") is None:
            raise CampaignError(f"{label}: parent: missing; add \"parent\": \"{parent_full}\" to bind the addendum")
        if not isinstance(doc["parent"], str) or not parent_full.startswith(doc["parent"].strip().lower()) \
                or len(doc["parent"].strip()) < 6:
            raise CampaignError(f"{label}: parent: {doc['parent']!r} is not {parent_full} given on the command line")
    err = placeholder_error(doc, label)  # before validation: a placeholder dialect is not a schema typo
    if err is not None:
        raise err
    plan = load_plan(path, store)
    check_paths(plan, label)  # every model folder, config, checkpoint, scorer folder and workload exists
    h = plan.hash
    existing = store.query("SELECT plan_hash FROM plans WHERE plan_hash = ?", [h])
    if existing:
        return FreezeResult(h, False, plan.kind, plan, name=doc["name"])
    if errs := [e for check in checks for e in check(plan)]:
        raise plan_error(label, errs)
    checkpoints = freeze_checkpoints(plan, label)
    manifest = freeze_manifest(store, plan, label)
    try:
        check_holdout_unused(store, plan, manifest, label)
    except CampaignError as exc:  # the refusal is itself an event: the manifest frozen above has its reason
        with atomic(store):
            append_event(store, "freeze_refused", plan_hash=None, subject=h,
                         payload={"name": doc["name"], "source_path": str(Path(path).resolve()),
                                  "manifest_hash": manifest.hash, "check": "holdout reuse", "reason": str(exc)})
        raise
    kind = plan.kind
    with atomic(store):
        store.insert("plans", {
            "plan_hash": h, "parent_hash": plan.parent_hash, "kind": kind, "name": doc["name"],
            "canonical_json": canonical_json(redact_document(doc)), "source_path": str(Path(path).resolve()),
            "frozen_at": utcnow(), "frozen_by": whoami(),
            "checkpoints_json": canonical_json(checkpoints) if checkpoints else None,
        })
        payload = {"name": doc["name"], "source_path": str(Path(path).resolve()),
                   "manifest_hash": manifest.hash if manifest else None,
                   "holdout_pool": plan.workload.holdout_pool,
                   "holdout_ids": len(manifest.pools.get(plan.workload.holdout_pool, [])) if manifest and plan.workload.holdout_pool else 0}
        if plan.cluster.gpu_name or plan.cluster.gpus:  # the cluster shape the plan expects (docs/cluster.md)
            payload["cluster"] = {"gpu_name": plan.cluster.gpu_name, "gpus": plan.cluster.gpus}
        if checkpoints:  # the frozen digests (data/checkpoints.py); the row hash below covers them too
            payload["checkpoints_sha256"] = sha256_text(canonical_json(checkpoints))
        if plan.parent_hash:
            payload["parent_hash"] = plan.parent_hash
            payload["reason"] = doc.get("reason")
        payload.update(row_sha256(store, "plans", "plan_hash", h))  # the whole row, for audit verify
        seq = append_event(store, "addendum_frozen" if kind == "addendum" else "plan_frozen", plan_hash=h,
                           subject=doc["name"], payload=payload)
    return FreezeResult(h, True, kind, plan, manifest.hash if manifest else None, seq, name=doc["name"])


def freeze_plan(store: Store, path: str | Path) -> str:
    """Contract entry point: freeze and return the hash (idempotent)."""
    return freeze(store, path).hash


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    hash: str
    frozen_hash: str | None  # the frozen plan compared against (same hash if ok)
    differences: list[tuple[str, Any, Any]]
    message: str


def verify_plan_file(store: Store, path: str | Path) -> VerifyResult:
    """Does this file still match a frozen plan? If not, diff it against the frozen plan it came
    from (same source path, else same name, most recent)."""
    doc = read_json(path)
    h = document_hash(doc)
    row = store.query("SELECT plan_hash, frozen_at FROM plans WHERE plan_hash IN (?, ?)", [h, legacy_hash(doc)])
    if row:
        h = row[0]["plan_hash"]
        return VerifyResult(True, h, h, [], f"{path}: matches frozen plan {h} (frozen {row[0]['frozen_at']:%Y-%m-%d %H:%M:%S %Z})")
    name = doc.get("name") if isinstance(doc, dict) else None
    cands = store.query(
        "SELECT plan_hash, canonical_json FROM plans WHERE source_path = ? OR name = ? "
        f"ORDER BY (source_path = ?) DESC, {plan_seq('plans')} DESC NULLS LAST LIMIT 1",
        [str(Path(path).resolve()), name, str(Path(path).resolve())],
    )
    if not cands:
        return VerifyResult(False, h, None, [], f"{path}: not frozen (hash {h}); no frozen plan with this path or name to compare")
    frozen_hash = cands[0]["plan_hash"]
    # both sides redacted: a changed env value shows as a changed hash, never as the value
    diffs = diff_documents(redact_document(json.loads(cands[0]["canonical_json"])), redact_document(doc))
    return VerifyResult(False, h, frozen_hash, diffs,
                        f"{path}: ALTERED since freezing: hash {h} != frozen {frozen_hash} ({len(diffs)} field(s) differ)")


def frozen_plan_for_file(store: Store, path: str | Path) -> Plan:
    """The frozen plan a file stands for; refuses an unfrozen or altered file (used by `run`)."""
    v = verify_plan_file(store, path)
    if not v.ok:
        if v.frozen_hash:
            fields_ = ", ".join(p for p, _, _ in v.differences[:5]) + (" ..." if len(v.differences) > 5 else "")
            raise CampaignError(f"{path}: altered since it was frozen as {v.frozen_hash[:12]} (changed: {fields_}); freeze it again or use an addendum")
        raise CampaignError(f"{path}: plan is not frozen; run `campaign plan freeze {path}` first")
    plan = plan_from_store(store, v.hash)
    return replace(plan, secrets={**secret_values(read_json(path)), **plan.secrets})
