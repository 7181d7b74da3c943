"""The plan document as data: its hash, the addendum merge (RFC 7386) and a field-level diff.

The plan hash is the SHA-256 of the canonical JSON of the redacted document (env values as their
SHA-256, data/secrets.py), so a stored plan verifies without its secrets; `_` comment keys are part
of the frozen document, so editing a comment after freezing also reads as an altered plan
(docs/plans.md).
"""

from __future__ import annotations

from typing import Any

from data.hashing import canonical_json, sha256_text
from data.plan_ids import ADDENDUM_SCHEMA_ID
from data.secrets import redact_document


def document_hash(doc: Any) -> str:
    """The plan hash: SHA-256 of the canonical JSON of the redacted document (env values as
    their SHA-256, data/secrets.py), so a stored plan verifies without its secrets. A document
    without env values is its own redacted form."""
    return sha256_text(canonical_json(redact_document(doc)))


def legacy_hash(doc: Any) -> str:
    """How plans with env values were hashed before redaction (over the values themselves)."""
    return sha256_text(canonical_json(doc))


def hash_matches(doc: Any, plan_hash: str) -> bool:
    """Does a stored plan document still match its hash? (Redacted definition, or the pre-redaction
    one for a row with env values frozen by an earlier version: docs/plans.md.)"""
    return plan_hash in (document_hash(doc), legacy_hash(doc))


def is_addendum(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("schema") == ADDENDUM_SCHEMA_ID


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """{'sweep.concurrencies[2]': 4, ...}: leaf paths for a field-level diff."""
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out or {prefix: {}}
    if isinstance(obj, list):
        out = {}
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}[{i}]"))
        return out or {prefix: []}
    return {prefix: obj}


def diff_documents(frozen: Any, current: Any) -> list[tuple[str, Any, Any]]:
    """(path, frozen value, current value) for every leaf that differs; missing = '<absent>'."""
    a, b = flatten(frozen), flatten(current)
    missing = "<absent>"
    return [(p, a.get(p, missing), b.get(p, missing)) for p in sorted(set(a) | set(b)) if a.get(p, missing) != b.get(p, missing)]

