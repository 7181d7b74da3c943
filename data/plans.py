"""Campaign plans: JSON documents validated against a published JSON Schema, frozen as canonical
JSON + SHA-256 before any measurement, and amended only by addenda bound to a parent hash.

The schema lives in `data/plan_schema.json` (validated with `jsonschema`, a well-kept library,
rather than hand-written checks); cross-field rules the schema cannot express (engine names that
rules refer to, unique names) are checked here. Errors name the file, the exact field path and the
problem in one line, e.g. `plan.json: sweep.concurrencies[2]: -4 is less than the minimum of 1`.

Keys starting with `_` are comments. They are part of the frozen document (the hash covers
exactly what was frozen), so editing a comment after freezing also reads as an altered plan.

Engine `env` values are secrets as far as the store is concerned (data/secrets.py): the frozen
document, and so the plan hash, is the redacted form in which each value is its SHA-256; the plan
file keeps the value and `campaign run` takes it from there. Numbers must be finite and inside
the bounds data/plan_schema.json declares (docs/plans.md lists them).
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence, TypeVar

import jsonschema

from data.audio_rates import rate_errors
from data.audit import append_event, atomic, canonical_json, sha256_text, whoami
from data.digest import row_sha256
from data import jsonfile
from data.equivalence_spec import EquivalenceSpec, equivalence_errors, equivalence_from_dict
from data.errors import CampaignError
from data.metric_params import MetricParams
from data.plan_ids import ADDENDUM_SCHEMA_ID as ADDENDUM_SCHEMA_ID  # re-exported: the ids' home is data/plan_ids.py
from data.plan_ids import PLAN_SCHEMA_ID as PLAN_SCHEMA_ID
from data.queries import plan_seq
from data.server_plan import DEFAULT_METRICS_PATH, ScrapeSpec, SloSpec, scrape_spec, slo_spec
from data.secrets import argv_secret_errors, passthrough_errors, redact_document, resolve_env, secret_values
from data.store import Store, utcnow

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


# -- the typed plan ---------------------------------------------------------------------------
# Every section the code reads is a frozen dataclass, parsed once from the validated document by
# plan_from_dict; nothing outside this module reads the document itself (Plan.document() gives a
# copy for display and export). Sequences are tuples; mappings are plain dicts (JSON-serialisable),
# never to be mutated.
DEFAULT_MODEL = "openbmb/MiniCPM-o-4_5"  # an EngineSpec's model when built outside a plan (docs/engines.md)
DEFAULT_QUALITY_CONCURRENCIES = (1, 16, 32)


@dataclass(frozen=True)
class ModelSpec:
    id: str
    revision: str | None = None
    checkpoint_paths: tuple[str, ...] = ()


@dataclass(frozen=True)
class GpuSpec:
    expected_name: str | None = None


@dataclass(frozen=True)
class ClusterSpec:
    """The cluster a `campaign run --cluster` expects: every GPU named `gpu_name`, `gpus` of them
    in all (docs/cluster.md). Checked before any cell runs."""
    gpu_name: str | None = None
    gpus: int | None = None


@dataclass(frozen=True)
class EngineSpec:
    """One plan `engines[]` entry, which is also what the lifecycle launches (engine_adapters/specs.py
    supplies each adapter's default command line when `argv` is empty, docs/engines.md). In a
    loaded plan `env` values are "sha256:<hex>" (data/secrets.py); the runner puts the real values
    in just before a launch. `model` is the plan's `model.id`."""

    name: str
    adapter: str
    dialect: str
    port: int = 8091
    revision: str | None = None
    profile: str | None = None
    argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    env_passthrough: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    health_timeout_s: float = 600.0
    config_path: str | None = None
    checkpoint_paths: tuple[str, ...] = ()
    request: dict[str, Any] = field(default_factory=dict)  # dialect request options (docs/engines.md), no comments
    model: str = DEFAULT_MODEL
    health_path: str = "/health"
    metrics_path: str | None = DEFAULT_METRICS_PATH  # scraped during each run; None: not (data/server_plan.py)
    # where the engine's code is and how it differs from `revision` (docs/engines.md, "Engine identity")
    source: dict[str, str] | None = None  # {"git": DIR} or {"dist": NAME}, optional "python"
    patch: str | None = None  # a file equal to the checkout's diff against its commit
    precision_change: bool = False  # the engine alters precision (opt-in, shown in every view)
    hypothesis: str | None = None  # what the configuration is expected to show (its candidate's, docs/results.md)
    # file -> sha256 frozen with the plan (data/checkpoints.py); set by the runner, never by a plan
    frozen_checkpoints: dict[str, str] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@dataclass(frozen=True)
class WorkloadSpec:
    root: str
    locale: str | None = None
    pool: str | None = "tuning"
    holdout_pool: str | None = None
    manifest_sha256: str | None = None
    pools_file: str | None = None  # {name: [utt ids]} written by `campaign workload pools`


@dataclass(frozen=True)
class SweepSpec:
    concurrencies: tuple[int, ...]
    requests_per_run: int
    measured_repeats: int
    requests_per_slot: int = 0  # at least this many requests per concurrency slot (docs/plans.md)
    warmup_repeats: int = 0
    restart: str = "per_repeat"
    interleave: str = "alternate"
    timeout_s: float = 120.0
    kind: str = "measured"
    warmup_requests: int = 0
    driver_shards: int | str = 1  # driver processes per run: an integer or "auto" (docs/plans.md, docs/timing.md)
    driver_busy_poll_us: int = 0  # how long each driver loop polls after a read instead of sleeping (docs/timing.md)


@dataclass(frozen=True)
class SamplingSpec:
    """The plan's `sampling` section: request fields every request sends exactly as written, in the
    plan's order (docs/engines.md); the schema types seed, temperature and max_tokens and admits
    others. A field the plan leaves out is not sent (the engine's default applies)."""

    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def seed(self) -> int | None:
        return self.fields.get("seed")

    @property
    def temperature(self) -> float | None:
        return self.fields.get("temperature")

    @property
    def max_tokens(self) -> int | None:
        return self.fields.get("max_tokens")


MetricsSpec = MetricParams  # the plan's `metrics` section (data/metric_params.py holds the defaults)


@dataclass(frozen=True)
class Margins:
    """`quality.margins` (docs/quality.md). None where the plan sets none: a margin is the
    campaign's decision, so the gate refuses a missing one rather than assume it."""
    wer_pp: float | None = None
    sim: float | None = None
    mos: float | None = None


@dataclass(frozen=True)
class QualitySpec:
    baseline: str | None = None
    candidate: str | None = None
    # several candidates, each judged against the baseline by its own quality verdict (docs/plans.md)
    candidates: tuple[str, ...] = ()
    concurrencies: tuple[int, ...] = DEFAULT_QUALITY_CONCURRENCIES  # of the holdout cells
    pool: str | None = "holdout"  # of the holdout cells
    scorers: dict[str, str] = field(default_factory=dict)  # metric -> scorer name (stats/quality/registry.py fills the rest)
    model_paths: dict[str, str] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)  # scorer name -> 'float32' | 'tf32' | 'float16' (docs/quality.md)
    margins: Margins = field(default_factory=Margins)
    allow_truncated: bool = False  # truncated outputs (finish_reason "length") count as covered
    named: frozenset[str] = frozenset()  # the fields the plan itself sets (the others hold the defaults above)

    @property
    def scored_concurrencies(self) -> tuple[int, ...]:
        """The concurrencies the scores and the gate cover: those of the holdout cells, i.e. the
        plan's `quality.concurrencies` or, when it names none, the default the cells run at."""
        return self.concurrencies

    @property
    def scored_pool(self) -> str | None:
        """The pool the scores are read from: the holdout cells' pool (the plan's `quality.pool`,
        else the default `holdout`); None only when the plan writes `"pool": null` (any pool)."""
        return self.pool


@dataclass(frozen=True)
class BootstrapSpec:
    draws: int = 20000
    seed: int = 20261022
    method: str = "percentile"
    confidence: float = 0.95


@dataclass(frozen=True)
class DecisionRule:
    name: str
    kind: str
    candidate: str
    reference: str
    concurrencies: tuple[int, ...]
    confidence: float = 0.95
    metric: str = "throughput"
    min_ratio: float = 1.0


@dataclass(frozen=True)
class ClaimsSpec:
    """The plan's `claims`: the claim an acceptance verdict carries (docs/plans.md, "Claims")."""
    status: str = "draft"  # draft or final
    scope: str = ""
    non_claims: tuple[str, ...] = ()


DEFAULT_VALIDATOR_TIMEOUT_S = 600.0  # docs/plans.md, "Validators"


@dataclass(frozen=True)
class Validator:
    """One plan `validators[]` entry: a repository check `campaign validate` runs without a shell
    (docs/plans.md, "Validators"). `applies_to` empty means every engine of the plan (what a plan
    written before the field gates); `env` values are "sha256:<hex>" in a loaded plan, as for
    engines."""

    name: str
    argv: tuple[str, ...]
    cwd: str | None = None
    timeout_s: float = DEFAULT_VALIDATOR_TIMEOUT_S
    applies_to: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    env_passthrough: tuple[str, ...] = ()

    def engines(self, plan: "Plan") -> tuple[str, ...]:
        """The engines whose PASS this validator gates."""
        return self.applies_to or tuple(e.name for e in plan.engines)


@dataclass(frozen=True)
class Plan:
    """A validated plan. `hash` is the SHA-256 of the canonical JSON of the frozen document (for an
    addendum: of the addendum document); `raw` is the effective plan document (parent + changes,
    redacted), read only here: elsewhere through the typed sections or `document()`."""

    schema: str
    name: str
    model: ModelSpec
    engines: tuple[EngineSpec, ...]
    workload: WorkloadSpec
    sweep: SweepSpec
    description: str = ""
    gpu: GpuSpec = field(default_factory=GpuSpec)
    cluster: ClusterSpec = field(default_factory=ClusterSpec)
    sampling: SamplingSpec = field(default_factory=SamplingSpec)
    metrics: MetricsSpec = field(default_factory=MetricsSpec)
    quality: QualitySpec = field(default_factory=QualitySpec)
    bootstrap: BootstrapSpec = field(default_factory=BootstrapSpec)
    decision_rules: tuple[DecisionRule, ...] = ()
    validators: tuple[Validator, ...] = ()
    claims: ClaimsSpec | None = None
    selection: str = "optional"  # required: the holdout opens only after a recorded selection (docs/plans.md)
    equivalence: EquivalenceSpec | None = None  # data/equivalence_spec.py
    server_metrics: ScrapeSpec = field(default_factory=ScrapeSpec)  # data/server_plan.py
    slo: SloSpec | None = None  # data/server_plan.py
    hash: str = ""
    raw: dict[str, Any] = field(default_factory=dict, repr=False)
    kind: str = "plan"
    parent_hash: str | None = None
    source_path: str | None = None
    secrets: dict[str, str] = field(default_factory=dict, repr=False, compare=False)  # value hash -> value

    def document(self) -> dict[str, Any]:
        """A copy of the effective document (redacted), for showing and embedding in verdicts."""
        return copy.deepcopy(self.raw)

    @property
    def quality_candidates(self) -> list[str]:
        """Every quality candidate: `quality.candidates`, else the single `quality.candidate`."""
        q = self.quality
        return list(q.candidates) if q.candidates else ([q.candidate] if q.candidate else [])

    def for_candidate(self, name: str) -> "Plan":
        """The same frozen plan (same hash) seen with one quality candidate: what one quality
        verdict judges. Its typed quality section and its document both say so."""
        if name not in self.quality_candidates:
            raise CampaignError(f"plan {self.name!r}: {name!r} is not a quality candidate "
                                f"(have: {', '.join(self.quality_candidates) or 'none'})")
        raw_q = {**(self.raw.get("quality") or {}), "candidate": name, "candidates": [name]}
        quality = replace(self.quality, candidate=name, candidates=(name,),
                          named=self.quality.named | {"candidate", "candidates"})
        return replace(self, quality=quality, raw={**self.raw, "quality": raw_q})

    def requests_at(self, concurrency: int) -> int:
        """Measured requests of one sweep run at `concurrency`: requests_per_run, raised to
        requests_per_slot x C so a high concurrency still sends several requests per slot."""
        return max(self.sweep.requests_per_run, self.sweep.requests_per_slot * concurrency)

    def compared_pairs(self) -> list[tuple[str, str, str]]:
        """(reference engine, compared engine, where the plan says so) for every comparison the plan
        decides: the quality baseline with each candidate, each decision rule's reference with its
        candidate (docs/plans.md). Compared engines load the same checkpoint and send the same
        sampling."""
        out = [(self.quality.baseline, c, "quality") for c in self.quality_candidates if self.quality.baseline]
        out += [(r.reference, r.candidate, f"decision rule {r.name!r}") for r in self.decision_rules]
        return [(a, b, w) for a, b, w in out if a and b and a != b]

    def engine(self, name: str) -> EngineSpec:
        for e in self.engines:
            if e.name == name:
                return e
        raise CampaignError(f"plan {self.name!r}: no engine named {name!r} (have: {', '.join(e.name for e in self.engines)})")


_T = TypeVar("_T")


def _written(data: Mapping[str, Any]) -> dict[str, Any]:
    """A section's fields as written: without its `_comment` keys."""
    return {k: v for k, v in data.items() if not k.startswith("_")}


def _build(cls: type[_T], data: Mapping[str, Any], **given: Any) -> _T:
    """A section's dataclass from its validated dict (JSON arrays become tuples); `given`
    overrides fields parsed on their own."""
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in data.items() if k in names}
    return cls(**{**values, **given})


def _quality(q: Mapping[str, Any]) -> QualitySpec:
    return _build(QualitySpec, q, margins=_build(Margins, q.get("margins") or {}),
                  scorers=dict(q.get("scorers") or {}), named=frozenset(_written(q)))


def _engine(e: Mapping[str, Any], model: ModelSpec) -> EngineSpec:
    """An engine entry; it is given `model.checkpoint_paths` unless it names its own."""
    return _build(EngineSpec, e, env=dict(e.get("env") or {}), request=_written(e.get("request") or {}),
                  health_timeout_s=float(e.get("health_timeout_s", 600.0)), model=model.id,
                  source=_written(e["source"]) if e.get("source") else None,
                  checkpoint_paths=tuple(e.get("checkpoint_paths") or model.checkpoint_paths))


def plan_from_dict(raw: dict[str, Any], *, hash: str = "", kind: str = "plan", parent_hash: str | None = None,
                   source_path: str | None = None, secrets: dict[str, str] | None = None) -> Plan:
    """A Plan from a validated document; `raw` is kept redacted (env values hashed), the values
    found in the document go to `secrets`."""
    secrets = {**secret_values(raw), **(secrets or {})}
    raw = redact_document(raw)
    model = _build(ModelSpec, raw["model"])
    sections: dict[str, Any] = {}
    for key, cls in (("gpu", GpuSpec), ("cluster", ClusterSpec), ("metrics", MetricsSpec),
                     ("bootstrap", BootstrapSpec)):
        if key in raw:
            sections[key] = _build(cls, raw[key])
    if "sampling" in raw:
        sections["sampling"] = SamplingSpec(fields=_written(raw["sampling"]))
    if "quality" in raw:
        sections["quality"] = _quality(raw["quality"])
    if raw.get("claims"):
        sections["claims"] = _build(ClaimsSpec, raw["claims"])
    if "selection" in raw:
        sections["selection"] = raw["selection"]
    if "equivalence" in raw:
        sections["equivalence"] = equivalence_from_dict(raw["equivalence"])
    sections.update(server_metrics=scrape_spec(raw), slo=slo_spec(raw))
    return Plan(schema=raw["schema"], name=raw["name"], description=raw.get("description", ""), model=model,
                engines=tuple(_engine(e, model) for e in raw["engines"]),
                workload=_build(WorkloadSpec, raw["workload"]), sweep=_build(SweepSpec, raw["sweep"]),
                decision_rules=tuple(_build(DecisionRule, r) for r in raw.get("decision_rules", [])),
                validators=tuple(_build(Validator, v, env=dict(v.get("env") or {}),
                                        timeout_s=float(v.get("timeout_s", DEFAULT_VALIDATOR_TIMEOUT_S)))
                                 for v in raw.get("validators", [])),
                hash=hash, raw=raw, kind=kind, parent_hash=parent_hash, source_path=source_path, secrets=secrets,
                **sections)


# -- validation -------------------------------------------------------------------------------
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
    if err.validator == "enum" and isinstance(values, list):
        return f"{err.instance!r} is not one of {', '.join(map(repr, values))}"
    if err.validator == "oneOf" and isinstance(values, list) and all("required" in v for v in values):
        names = ", ".join(repr(v["required"][0]) for v in values)
        return f"give exactly one of {names}, found {', '.join(map(repr, sorted(_written(instance)))) or 'none'}" \
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


def _fail(label: str, errs: list[str]) -> CampaignError:
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
        raise _fail(label, errs)


def read_json(path: str | Path) -> Any:
    """A plan or addendum file: strict JSON (duplicate keys and deep nesting refused, data/jsonfile.py)."""
    return jsonfile.read(path, "plan file")


def document_hash(doc: Any) -> str:
    """The plan hash: SHA-256 of the canonical JSON of the redacted document (env values as
    their SHA-256, data/secrets.py), so a stored plan verifies without its secrets. A document
    without env values is its own redacted form."""
    return sha256_text(canonical_json(redact_document(doc)))


def _legacy_hash(doc: Any) -> str:
    """How plans with env values were hashed before redaction (over the values themselves)."""
    return sha256_text(canonical_json(doc))


def hash_matches(doc: Any, plan_hash: str) -> bool:
    """Does a stored plan document still match its hash? (Redacted definition, or the pre-redaction
    one for a row with env values frozen by an earlier version: docs/plans.md.)"""
    return plan_hash in (document_hash(doc), _legacy_hash(doc))


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


def load_plan(path: str | Path, store: Store | None = None) -> Plan:
    """Read and validate a plan file (or, given the store that holds its parent, an addendum)."""
    doc = read_json(path)
    label = str(path)
    if errs := argv_secret_errors(doc):  # files only: a plan frozen before this rule stays readable
        raise _fail(label, errs)
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
        raise _fail(label, errs)
    if parent_full is None:
        try:
            parent_full = resolve_hash(store, doc["parent"])
        except CampaignError as exc:
            raise CampaignError(f"{label}: parent: {exc}") from None
    elif not parent_full.startswith(doc["parent"].strip().lower()):
        raise CampaignError(f"{label}: parent: stored parent hash {parent_full[:12]} does not match the document's "
                            f"{doc['parent']!r} (store tampered)")
    parent = plan_from_store(store, parent_full, label=f"{label}: parent")
    merged = merge_patch(parent.raw, redact_document(doc)["changes"])
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
    from data.manifest import plan_lineage

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


# -- freezing ---------------------------------------------------------------------------------
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


FreezeCheck = Callable[["Plan"], list[str]]


def freeze(store: Store, path: str | Path, expected_parent: str | None = None,
           checks: Sequence[FreezeCheck] = ()) -> FreezeResult:
    """Validate, check every path the plan names exists, reserve the holdout (refusing reuse),
    hash the checkpoints (refusing compared engines on different bytes), store canonical JSON +
    hash, audit it. `checks`: further rules
    on the typed plan that need more than data/ knows (the console passes the compared engines'
    sampling rule, engine_adapters/sampling.py); each returns one-line problems."""
    from data.checkpoints import freeze_checkpoints
    from data.manifest import check_holdout_unused, freeze_manifest
    from data.plan_paths import check_paths

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
        raise _fail(label, errs)
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


# -- verification -----------------------------------------------------------------------------
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
    row = store.query("SELECT plan_hash, frozen_at FROM plans WHERE plan_hash IN (?, ?)", [h, _legacy_hash(doc)])
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
