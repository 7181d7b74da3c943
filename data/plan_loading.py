"""Reading plans: from a file (a plan, or an addendum over its stored parent) or from the store,
each validated into a typed Plan (data/plan_model.py); and the engines' and validators' real
environments.

Engine `env` values are secrets as far as the store is concerned (data/secrets.py): the frozen
document, and so the plan hash, is the redacted form in which each value is its SHA-256; the plan
file keeps the value and `campaign run` takes it from there (docs/plans.md).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from data import jsonfile
from data.errors import CampaignError
from data.manifest import plan_lineage
from data.plan_hashing import document_hash, hash_matches, is_addendum, merge_patch
from data.plan_model import Plan, plan_from_dict
from data.plan_validation import (ADDENDUM_SCHEMA, nonfinite_errors, plan_error, schema_errors,
                                  validate_plan_dict)
from data.secrets import argv_secret_errors, redact_document, resolve_env, secret_values
from data.store import Store


def read_json(path: str | Path) -> Any:
    """A plan or addendum file: strict JSON (duplicate keys and deep nesting refused, data/jsonfile.py)."""
    return jsonfile.read(path, "plan file")


def load_plan(path: str | Path, store: Store | None = None) -> Plan:
    """Read and validate a plan file (or, given the store that holds its parent, an addendum)."""
    doc = read_json(path)
    label = str(path)
    if errs := argv_secret_errors(doc):  # files only: a plan frozen before this rule stays readable
        raise plan_error(label, errs)
    if is_addendum(doc):
        if store is None:
            raise CampaignError(f"{label}: is an addendum; its parent plan comes from the run store")
        return _addendum_plan(store, doc, label, source_path=str(path))
    validate_plan_dict(redact_document(doc), label)  # messages name fields, never an env value
    return plan_from_dict(doc, hash=document_hash(doc), source_path=str(path))


def _addendum_plan(store: Store, doc: dict[str, Any], label: str, source_path: str | None = None,
                   parent_full: str | None = None) -> Plan:
    """`parent_full`: the full parent hash recorded at freeze (a prefix could become ambiguous later)."""
    errs = nonfinite_errors(doc, ADDENDUM_SCHEMA) or schema_errors(doc, ADDENDUM_SCHEMA)
    if errs:
        raise plan_error(label, errs)
    if parent_full is None:
        try:
            parent_full = resolve_hash(store, doc["parent"])
        except CampaignError as exc:
            raise CampaignError(f"{label}: parent: {exc}") from None
    elif not parent_full.startswith(doc["parent"].strip().lower()):
        raise CampaignError(f"{label}: parent: stored parent hash {parent_full[:12]} does not match the document's "
                            f"{doc['parent']!r} (store tampered)")
    parent = plan_from_store(store, parent_full, label=f"{label}: parent")
    merged = merge_patch(parent.document(), redact_document(doc)["changes"])
    validate_plan_dict(merged, f"{label} (parent + changes)")
    return plan_from_dict(merged, hash=document_hash(doc), kind="addendum", parent_hash=parent.hash,
                          source_path=source_path, secrets=secret_values(doc))


def resolve_hash(store: Store, prefix: str) -> str:
    """A full plan hash from a unique prefix (at least 6 hex digits)."""
    prefix = prefix.strip().lower()
    if len(prefix) < 6:
        raise CampaignError(f"plan hash {prefix!r}: give at least 6 hex digits")
    rows = store.query("SELECT plan_hash FROM plans WHERE plan_hash LIKE ? ORDER BY plan_hash", [prefix + "%"])
    if not rows:
        raise CampaignError(f"plan {prefix}: not frozen in {store.path}")
    if len(rows) > 1:
        raise CampaignError(f"plan hash prefix {prefix!r} is ambiguous ({len(rows)} plans)")
    return rows[0]["plan_hash"]


def plan_from_store(store: Store, plan_hash: str, label: str | None = None) -> Plan:
    """The effective frozen plan (an addendum resolves through its parent chain)."""
    full = resolve_hash(store, plan_hash)
    row = store.query("SELECT * FROM plans WHERE plan_hash = ?", [full])[0]
    doc = json.loads(row["canonical_json"])
    if not hash_matches(doc, full):
        raise CampaignError(f"{label or 'plan'} {full[:12]}: stored JSON no longer matches its hash (store tampered)")
    if row["kind"] == "addendum":
        return _addendum_plan(store, doc, f"addendum {full[:12]}", source_path=row["source_path"],
                              parent_full=row["parent_hash"])
    validate_plan_dict(redact_document(doc), f"plan {full[:12]}")
    return plan_from_dict(doc, hash=full, source_path=row["source_path"])


def plan_secrets(store: Store, plan: Plan, paths: Sequence[str | Path] = ()) -> dict[str, str]:
    """Env values of a frozen plan, found by their hash: in `paths` (the file given on the command
    line), the plan itself, and the files its lineage was frozen from. A file that is gone, or
    that no longer holds a value, simply contributes nothing (data/secrets.py)."""
    found: dict[str, str] = {}
    rows = store.query("SELECT source_path FROM plans WHERE plan_hash IN (SELECT unnest(?))", [plan_lineage(store, plan.hash)])
    for p in [*paths, *(r["source_path"] for r in rows if r["source_path"])]:
        try:
            found.update(secret_values(json.loads(Path(p).read_text(encoding="utf-8"))))
        except (OSError, ValueError):
            continue
    return {**found, **plan.secrets}


def engine_environment(plan: Plan, secrets: dict[str, str], names: set[str] | None = None,
                       environ: Mapping[str, str] | None = None) -> dict[str, dict[str, str]]:
    """engine name -> the real env it is launched with (values and passed-through variables), for
    the engines in `names` (default: all); refuses, naming the field, when a value is not
    available, so this is checked before any launch."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    return {e.name: resolve_env(e.env, e.env_passthrough, secrets, env, f"engines[{i}]")
            for i, e in enumerate(plan.engines) if names is None or e.name in names}


def validator_environment(plan: Plan, secrets: dict[str, str], names: set[str] | None = None,
                          environ: Mapping[str, str] | None = None) -> dict[str, dict[str, str]]:
    """validator name -> the env it runs with (its plan values and passed-through variables),
    with the same rules and one-line refusals as engine_environment."""
    env: Mapping[str, str] = os.environ if environ is None else environ
    return {v.name: resolve_env(v.env, v.env_passthrough, secrets, env, f"validators[{i}]")
            for i, v in enumerate(plan.validators) if names is None or v.name in names}


def stored_document(store: Store, plan_hash: str) -> dict[str, Any] | None:
    """The frozen document as shown and exported: redacted (a row frozen before redaction existed
    may still hold env values; they are never shown or exported)."""
    row = store.query("SELECT canonical_json FROM plans WHERE plan_hash = ?", [plan_hash])
    return redact_document(json.loads(row[0]["canonical_json"])) if row else None

