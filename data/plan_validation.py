"""Plan validation: the published JSON Schema (`data/plan_schema.json`, checked with
`jsonschema`, a well-kept library, rather than hand-written checks) and the cross-field rules the
schema cannot express (engine names that rules refer to, unique names).

Errors name the file, the exact field path and the problem in one line, e.g.
`plan.json: sweep.concurrencies[2]: -4 is less than the minimum of 1`. Numbers must be finite and
inside the bounds the schema declares (docs/plans.md lists them). Keys starting with `_` are
comments.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import jsonschema

from data.audio_rates import rate_errors
from data.equivalence_spec import equivalence_errors
from data.errors import CampaignError
from data.plan_hashing import flatten
from data.plan_ids import ADDENDUM_SCHEMA_ID
from data.plan_model import DEFAULT_QUALITY_CONCURRENCIES, without_comments
from data.secrets import passthrough_errors

SCHEMA_PATH = Path(__file__).resolve().parent / "plan_schema.json"

ADDENDUM_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": ADDENDUM_SCHEMA_ID,
    "type": "object",
    "properties": {
        "schema": {"const": ADDENDUM_SCHEMA_ID},
        # the parent plan's hash or a unique prefix of it (>= 6 hex digits, as on the command line)
        "parent": {"type": "string", "pattern": "^[0-9a-fA-F]{6,64}$"},
        "name": {"type": "string", "minLength": 1},
        "reason": {"type": "string", "minLength": 1},
        "changes": {"type": "object", "minProperties": 1},
    },
    "patternProperties": {"^_": {}},
    "additionalProperties": False,
    "required": ["schema", "parent", "name", "reason", "changes"],
}


@lru_cache(maxsize=1)
def plan_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))


def format_path(path: Any) -> str:
    """`sweep.concurrencies[2]` from a jsonschema absolute path."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def _message(err: jsonschema.ValidationError) -> str:
    instance, schema, values = err.instance, err.schema, err.validator_value
    if err.validator == "additionalProperties" and isinstance(instance, Mapping) and isinstance(schema, Mapping):
        extra = sorted(set(instance) - set(schema.get("properties", {})))
        extra = [e for e in extra if not e.startswith("_")]
        return f"unknown field(s) {', '.join(map(repr, extra))} (comments must start with '_')"
    if err.validator == "enum" and isinstance(values, list) and "propertyNames" in err.schema_path:
        return f"key {err.instance!r} is not one of {', '.join(map(repr, values))}"
    if err.validator == "enum" and isinstance(values, list):
        return f"{err.instance!r} is not one of {', '.join(map(repr, values))}"
    if err.validator == "oneOf" and isinstance(values, list) and all("required" in v for v in values):
        names = ", ".join(repr(v["required"][0]) for v in values)
        return f"give exactly one of {names}, found {', '.join(map(repr, sorted(without_comments(instance)))) or 'none'}" \
            if isinstance(instance, Mapping) else err.message
    if err.validator == "const":
        return f"{err.instance!r} must be {err.validator_value!r}"
    if err.validator == "type" and isinstance(instance, str) and list(err.absolute_path)[-1:] == ["argv"]:
        return f"{instance!r} is a shell string; argv is a list of arguments, run without a shell, e.g. {instance.split()!r}"
    return err.message


# JSON Schema counts 2.0 as an integer; range(2.0) does not: an integer field takes an int only
_STRICT_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda _checker, v: isinstance(v, int) and not isinstance(v, bool))
_Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=_STRICT_TYPES)

MAX_SWEEP_REQUESTS = 10_000_000  # engines x concurrencies x repeats x requests (docs/plans.md)


def schema_errors(doc: Any, schema: dict[str, Any]) -> list[str]:
    """Every schema violation as 'field.path: problem', sorted by path."""
    validator = _Validator(schema)
    errors = sorted(validator.iter_errors(doc), key=lambda e: (list(map(str, e.absolute_path)), e.message))
    return [f"{format_path(e.absolute_path)}: {_message(e)}" for e in errors]


def _json_number(v: float) -> str:
    return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")


def _subschema(schema: dict[str, Any], path: list[Any]) -> dict[str, Any]:
    """The schema of one field (for its declared range); {} when the path leaves the schema."""
    for part in path:
        if isinstance(part, int):
            schema = schema.get("items", {})
        else:
            schema = schema.get("properties", {}).get(part, schema.get("additionalProperties", {}))
        if not isinstance(schema, dict):
            return {}
    return schema


def allowed_range(schema: dict[str, Any], path: list[Any]) -> str:
    """'0 < timeout_s <= 86400' from a field's declared bounds ('' when it declares none)."""
    sub = _subschema(schema, path)
    name = next((str(p) for p in reversed(path) if isinstance(p, str)), "value")
    low = (f"{sub['exclusiveMinimum']:g} < " if "exclusiveMinimum" in sub
           else f"{sub['minimum']:g} <= " if "minimum" in sub else "")
    high = (f" < {sub['exclusiveMaximum']:g}" if "exclusiveMaximum" in sub
            else f" <= {sub['maximum']:g}" if "maximum" in sub else "")
    return f"{low}{name}{high}" if low or high else ""


def nonfinite_errors(doc: Any, schema: dict[str, Any], path: list[Any] | None = None) -> list[str]:
    """NaN and Infinity (Python's json reads them, and 1e400 as Infinity) anywhere in the
    document: they pass every JSON Schema range check, so they are refused here."""
    path = path or []
    if isinstance(doc, float) and not math.isfinite(doc):
        rng = allowed_range(schema, path)
        return [f"{format_path(path)}: {_json_number(doc)} is not a finite number" + (f" (allowed: {rng})" if rng else "")]
    if isinstance(doc, dict):
        return [e for k, v in doc.items() for e in nonfinite_errors(v, schema, path + [k])]
    if isinstance(doc, list):
        return [e for i, v in enumerate(doc) for e in nonfinite_errors(v, schema, path + [i])]
    return []


def _sweep_size_errors(raw: dict[str, Any]) -> list[str]:
    sw = raw["sweep"]
    per_run = sum(max(sw["requests_per_run"], sw.get("requests_per_slot", 0) * c) for c in sw["concurrencies"])
    total = (len(raw["engines"]) * (sw.get("warmup_repeats", 0) + sw["measured_repeats"])
             * (per_run + len(sw["concurrencies"]) * sw.get("warmup_requests", 0)))
    if total > MAX_SWEEP_REQUESTS:
        return [f"sweep: {total} requests in all (engines x concurrencies x repeats x requests); at most {MAX_SWEEP_REQUESTS}"]
    return []


def semantic_errors(raw: dict[str, Any]) -> list[str]:
    """Cross-field rules JSON Schema cannot express."""
    errs: list[str] = (_sweep_size_errors(raw) + passthrough_errors(raw["engines"])
                       + passthrough_errors(raw.get("validators", []), "validators"))
    names = [e["name"] for e in raw["engines"]]
    seen: set[str] = set()
    for i, n in enumerate(names):
        if n in seen:
            errs.append(f"engines[{i}].name: duplicate engine name {n!r}")
        seen.add(n)
    errs += _validator_errors(raw.get("validators", []), names)
    q = raw.get("quality", {})
    for key in ("baseline", "candidate"):
        if q.get(key) is not None and q[key] not in seen:
            errs.append(f"quality.{key}: {q[key]!r} is not an engine in this plan (have: {', '.join(names)})")
    for i, name in enumerate(q.get("candidates") or []):
        if name not in seen:
            errs.append(f"quality.candidates[{i}]: {name!r} is not an engine in this plan (have: {', '.join(names)})")
        elif name == q.get("baseline"):
            errs.append(f"quality.candidates[{i}]: {name!r} is the baseline; a candidate is judged against it")
    if q.get("candidate") and q.get("candidates") and q["candidate"] not in q["candidates"]:
        errs.append(f"quality.candidate: {q['candidate']!r} is not in quality.candidates; give one or the other")
    checked = q.get("concurrencies", list(DEFAULT_QUALITY_CONCURRENCIES))
    for i, c in enumerate((raw.get("claims") or {}).get("concurrencies") or []):
        if checked and c not in checked:
            errs.append(f"claims.concurrencies[{i}]: C{c} is claimed but not checked (quality.concurrencies "
                        f"{checked}); a claim covers only what the plan's quality checks cover")
    concs = set(raw["sweep"]["concurrencies"])
    for i, rule in enumerate(raw.get("decision_rules", [])):
        for key in ("candidate", "reference"):
            if rule[key] not in seen:
                errs.append(f"decision_rules[{i}].{key}: {rule[key]!r} is not an engine in this plan")
        for j, c in enumerate(rule["concurrencies"]):
            if c not in concs:
                errs.append(f"decision_rules[{i}].concurrencies[{j}]: {c} is not a sweep concurrency")
    for i, e in enumerate(raw["engines"]):
        if e.get("patch") and "git" not in (e.get("source") or {}):
            errs.append(f"engines[{i}].patch: a patch applies to a git checkout; give source: {{\"git\": DIR}}")
    errs += equivalence_errors(raw.get("equivalence") or {}, seen)
    wl = raw["workload"]
    if wl.get("holdout_pool") and wl.get("holdout_pool") == wl.get("pool"):
        errs.append(f"workload.holdout_pool: {wl['holdout_pool']!r} is also the tuning pool")
    if raw["sweep"].get("restart") == "never":
        ports: dict[tuple, str] = {}
        for i, e in enumerate(raw["engines"]):
            addr = (e.get("host", "127.0.0.1"), e["port"])
            if addr in ports:
                errs.append(f"engines[{i}].port: {e['port']} is also used by {ports[addr]!r}; restart 'never' keeps every engine up at once")
            ports[addr] = e["name"]
    return errs + rate_errors(raw)


def _validator_errors(validators: list[dict[str, Any]], engines: list[str]) -> list[str]:
    """Validator names are unique (runs are stored by name) and `applies_to` names engines of the plan."""
    errs, seen = [], set()
    for i, v in enumerate(validators):
        if v["name"] in seen:
            errs.append(f"validators[{i}].name: duplicate validator name {v['name']!r}")
        seen.add(v["name"])
        for j, name in enumerate(v.get("applies_to") or []):
            if name not in engines:
                errs.append(f"validators[{i}].applies_to[{j}]: {name!r} is not an engine in this plan "
                            f"(have: {', '.join(engines)})")
    return errs


PLACEHOLDER = re.compile(r"<[^<>]+>")


def placeholder_paths(doc: Any) -> list[str]:
    """Field paths whose value still holds a `<...>` placeholder (as `plan init --engines` writes
    them); `_comment` keys are not values."""
    out = []
    for path, value in flatten(doc).items():
        if any(part.startswith("_") for part in re.split(r"[.\[\]]", path) if part):
            continue
        if isinstance(value, str) and PLACEHOLDER.search(value):
            out.append(path)
    return out


def placeholder_error(doc: Any, label: str) -> CampaignError | None:
    left = placeholder_paths(doc)
    if not left:
        return None
    return CampaignError(f"{label}: {len(left)} placeholder(s) left to fill in: {', '.join(left)}")


def plan_error(label: str, errs: list[str]) -> CampaignError:
    """One line naming every problem, the first in front (a user fixes them all in one edit)."""
    errs = [" ".join(e.split()) for e in errs]
    more = f" (and {len(errs) - 1} more: {'; '.join(errs[1:])})" if len(errs) > 1 else ""
    return CampaignError(f"{label}: {errs[0]}{more}")


def validate_plan_dict(raw: Any, label: str = "plan") -> None:
    """Raise a one-line CampaignError naming every bad field (the first in front), else return."""
    errs = nonfinite_errors(raw, plan_schema()) or schema_errors(raw, plan_schema())
    if not errs:
        errs = semantic_errors(raw)
    if errs:
        raise plan_error(label, errs)

