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
from data.manifest import (Manifest, build_manifest, check_holdout_unused, freeze_manifest, frozen_manifest,
                           holdout_ids)
from data.reuse_audit import audit_sources
from data.plan_addenda import Change, protocol_changes, reserved_ids_change
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


# a rule on the typed plan (and, for an addendum, its parent) that needs more than data/ knows
FreezeCheck = Callable[[Plan, Plan | None], list[str]]


def freeze(store: Store, path: str | Path, expected_parent: str | None = None,
           checks: Sequence[FreezeCheck] = (), reuse_audit: Sequence[str | Path] = ()) -> FreezeResult:
    """Validate, check every path the plan names exists, reserve the holdout (refusing reuse),
    hash the checkpoints (refusing compared engines on different bytes), store canonical JSON +
    hash, audit it. An addendum may not change what its parent's verdicts are judged under
    (data/plan_addenda.py). `checks`: further rules on the typed plan and its parent that need more
    than data/ knows (the console passes the compared engines' sampling rule,
    engine_adapters/sampling.py); each returns one-line problems. `reuse_audit`: further stores,
    bundles and per-request CSVs the holdout ids must be absent from (data/reuse_audit.py)."""
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
    same_name = store.query(f"SELECT plan_hash, kind, canonical_json FROM plans WHERE name = ? ORDER BY {plan_seq('plans')}",
                            [doc["name"]])
    if same_name and same_name[0]["plan_hash"] != legacy_hash(doc):  # (a pre-redaction row of this very file may be re-frozen)
        raise name_taken_error(label, doc, same_name[0])
    parent = plan_from_store(store, plan.parent_hash) if plan.parent_hash else None
    if parent is not None and (changes := protocol_changes(parent, plan)):
        raise protocol_error(label, changes)
    if errs := [e for check in checks for e in check(plan, parent)]:
        raise plan_error(label, errs)
    checkpoints = freeze_checkpoints(plan, label)
    built = build_manifest(plan, label)
    if parent is not None and (change := reserved_holdout_change(store, parent, built)):
        raise protocol_error(label, [change])  # before the manifest is stored: a refusal stores nothing
    manifest = freeze_manifest(store, plan, label, built)
    inherited = parent is not None and bool(plan.workload.holdout_pool) \
        and plan.workload.holdout_pool == parent.workload.holdout_pool
    if reuse_audit and not plan.workload.holdout_pool:
        raise CampaignError(f"{label}: --reuse-audit: the plan reserves no holdout (workload.holdout_pool) to audit")
    try:
        check_holdout_unused(store, plan, manifest, label, inherited)
        audited = audit_sources(reuse_audit, holdout_ids(plan, manifest), label)
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
        if audited:  # the sources beyond this store the holdout was checked against
            payload["reuse_audit"] = [a.as_dict() for a in audited]
        if unpinned := [e.name for e in plan.engines if e.source is None]:  # they run whatever is installed
            payload["unpinned"] = unpinned
        if plan.cluster.gpu_name or plan.cluster.gpus:  # the cluster shape the plan expects (docs/cluster.md)
            payload["cluster"] = {"gpu_name": plan.cluster.gpu_name, "gpus": plan.cluster.gpus}
        if checkpoints:  # the frozen digests (data/checkpoints.py); the row hash below covers them too
            payload["checkpoints_sha256"] = sha256_text(canonical_json(checkpoints))
        if plan.parent_hash:
            payload["parent_hash"] = plan.parent_hash
            payload["reason"] = doc.get("reason")
            if inherited:
                payload["holdout_inherited"] = True  # the parent's reservation, its ids unchanged
        payload.update(row_sha256(store, "plans", "plan_hash", h))  # the whole row, for audit verify
        seq = append_event(store, "addendum_frozen" if kind == "addendum" else "plan_frozen", plan_hash=h,
                           subject=doc["name"], payload=payload)
    return FreezeResult(h, True, kind, plan, manifest.hash if manifest else None, seq, name=doc["name"])


def name_taken_error(label: str, doc: dict[str, Any], frozen: dict[str, Any]) -> CampaignError:
    """One name in a store names one frozen plan: a changed file under a frozen name is an edit of
    a frozen plan, not a new campaign (docs/plans.md, "One name, one frozen plan")."""
    diffs = diff_documents(json.loads(frozen["canonical_json"]), redact_document(doc))
    shown = "; ".join(f"{p}: {json.dumps(a)} -> {json.dumps(b)}" for p, a, b in diffs[:6]) + (" ..." if len(diffs) > 6 else "")
    return CampaignError(f"{label}: name {doc['name']!r} is already frozen in this store as {frozen['kind']} "
                         f"{frozen['plan_hash'][:12]}, and this file differs ({len(diffs)} field(s): {shown}); to change "
                         f"a frozen plan freeze an addendum (`campaign plan addendum {frozen['plan_hash'][:12]} FILE`), "
                         "or start over deliberately under a new `name`")


def protocol_error(label: str, changes: list[Change]) -> CampaignError:
    return CampaignError(f"{label}: an addendum keeps its parent's protocol; {len(changes)} decision-bearing field(s) "
                         f"differ: {'; '.join(c.line() for c in changes)} (docs/plans.md, \"What an addendum may change\"; "
                         "to judge under other rules, freeze a new plan under a new name)")


def reserved_holdout_change(store: Store, parent: Plan, manifest: Manifest) -> Change | None:
    """An addendum that keeps its parent's holdout pool keeps its ids (the parent's frozen manifest
    against the addendum's)."""
    pool = parent.workload.holdout_pool
    frozen = frozen_manifest(store, parent.hash) if pool else None
    if not pool or frozen is None or pool not in frozen.get("pools", {}) or pool not in manifest.pools:
        return None
    return reserved_ids_change(pool, frozen["pools"][pool], manifest.pools[pool])


def frozen_plan_records(store: Store, before_seq: int | None = None) -> list[dict[str, Any]]:
    """Every plan and addendum frozen in the store, abandoned ones too, in chain order, from their
    freeze events (so a bundle, which carries the whole chain, lists them as the store does):
    seq, plan_hash, name, kind, parent_hash, and the sources its reuse audit read."""
    rows = store.query("SELECT seq, kind, plan_hash, subject, payload_json FROM audit_events WHERE kind IN "
                       "('plan_frozen', 'addendum_frozen') AND seq < ? ORDER BY seq", [before_seq or 2**62])
    out = []
    for r in rows:
        p = json.loads(r["payload_json"])
        out.append({"seq": r["seq"], "plan_hash": r["plan_hash"], "name": p.get("name") or r["subject"],
                    "kind": "addendum" if r["kind"] == "addendum_frozen" else "plan",
                    "parent_hash": p.get("parent_hash"), "reuse_audit": p.get("reuse_audit") or []})
    return out


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
            raise CampaignError(f"{path}: altered since it was frozen as {v.frozen_hash[:12]} (changed: {fields_}); to "
                                f"change a frozen plan freeze an addendum (`campaign plan addendum {v.frozen_hash[:12]} FILE`), "
                                "or restore the file; starting over is a new plan under a new `name`")
        raise CampaignError(f"{path}: plan is not frozen; run `campaign plan freeze {path}` first")
    plan = plan_from_store(store, v.hash)
    return replace(plan, secrets={**secret_values(read_json(path)), **plan.secrets})
