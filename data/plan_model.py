"""The typed plan: every section the code reads is a frozen dataclass, parsed once from the
validated document by `plan_from_dict` (docs/plans.md).

Nothing outside this module reads the document itself (`Plan.document()` gives a copy for display
and export). Sequences are tuples; mappings are plain dicts (JSON-serialisable), never to be
mutated. Validation is data/plan_validation.py, hashing data/plan_hashing.py, reading files and
the store data/plan_loading.py, freezing data/plan_freeze.py.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, Mapping, TypeVar

from data.bootstrap_params import BootstrapParams
from data.equivalence_spec import EquivalenceSpec, equivalence_from_dict
from data.errors import CampaignError
from data.metric_params import MetricParams
from data.server_plan import DEFAULT_METRICS_PATH, ScrapeSpec, SloSpec, scrape_spec, slo_spec
from data.secrets import redact_document, secret_values

DEFAULT_MODEL = "openbmb/MiniCPM-o-4_5"  # an EngineSpec's model when built outside a plan (docs/plans.md)
DEFAULT_HEALTH_TIMEOUT_S = 600.0  # an engine's `health_timeout_s` when the plan leaves it out (docs/plans.md)
DEFAULT_QUALITY_CONCURRENCIES = (1, 16, 32)

# The values of the plan's enumerated fields that only this model names (the others have their
# registries: dialects, adapters, presets, dtypes, bootstrap methods); tests/test_plan_enums.py
# checks data/plan_schema.json against each, so the schema and the code cannot drift apart.
Restart = Literal["per_repeat", "per_cell", "never"]  # when engines restart (console/runner.py)
Interleave = Literal["alternate", "sequential"]  # the order of the cells (console/runner.py)
RunKind = Literal["measured", "exploratory", "profiled"]  # the sweep runs' kind (docs/plans.md)
RuleKind = Literal["throughput_exceeds"]  # decision rules (stats/throughput_rules.py)
ClaimStatus = Literal["draft", "final"]
Selection = Literal["required", "optional"]


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
    health_timeout_s: float = DEFAULT_HEALTH_TIMEOUT_S
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
    declared_changes: tuple[str, ...] = ()  # launch-setting keys its hypothesis changes (docs/engines.md, "Launch settings")
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
    restart: Restart = "per_repeat"
    interleave: Interleave = "alternate"
    timeout_s: float = 120.0
    kind: RunKind = "measured"
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
    regression_check: bool = False  # declared: the verdicts check reused prompts; acceptance may PASS on them
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


BootstrapSpec = BootstrapParams  # the plan's `bootstrap` section (data/bootstrap_params.py holds the defaults)


@dataclass(frozen=True)
class DecisionRule:
    name: str
    kind: RuleKind
    candidate: str
    reference: str
    concurrencies: tuple[int, ...]
    confidence: float = 0.95
    metric: str = "throughput"
    min_ratio: float = 1.0


@dataclass(frozen=True)
class ClaimsSpec:
    """The plan's `claims`: the claim an acceptance verdict carries (docs/plans.md, "Claims")."""
    status: ClaimStatus = "draft"
    scope: str = ""
    non_claims: tuple[str, ...] = ()
    concurrencies: tuple[int, ...] = ()  # the quality concurrencies claimed (each one the plan checks)


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
    selection: Selection = "optional"  # required: the holdout opens only after a recorded selection (docs/plans.md)
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


def without_comments(data: Mapping[str, Any]) -> dict[str, Any]:
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
                  scorers=dict(q.get("scorers") or {}), named=frozenset(without_comments(q)))


def _engine(e: Mapping[str, Any], model: ModelSpec) -> EngineSpec:
    """An engine entry; it is given `model.checkpoint_paths` unless it names its own."""
    return _build(EngineSpec, e, env=dict(e.get("env") or {}), request=without_comments(e.get("request") or {}),
                  health_timeout_s=float(e.get("health_timeout_s", DEFAULT_HEALTH_TIMEOUT_S)), model=model.id,
                  source=without_comments(e["source"]) if e.get("source") else None,
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
        sections["sampling"] = SamplingSpec(fields=without_comments(raw["sampling"]))
    if "quality" in raw:
        sections["quality"] = _quality(raw["quality"])
    if raw.get("claims"):
        sections["claims"] = _build(ClaimsSpec, raw["claims"])
    if "selection" in raw:
        sections["selection"] = raw["selection"]
    if "equivalence" in raw:
        sections["equivalence"] = equivalence_from_dict(raw["equivalence"])
    sections.update(server_metrics=scrape_spec(raw), slo=slo_spec(raw))
    if sections["slo"] is not None:  # goodput is a run metric: its bounds are metric parameters
        sections["metrics"] = replace(sections.get("metrics", MetricsSpec()), slo_ttfa_ms=sections["slo"].ttfa_ms,
                                      slo_rtf=sections["slo"].rtf)
    return Plan(schema=raw["schema"], name=raw["name"], description=raw.get("description", ""), model=model,
                engines=tuple(_engine(e, model) for e in raw["engines"]),
                workload=_build(WorkloadSpec, raw["workload"]), sweep=_build(SweepSpec, raw["sweep"]),
                decision_rules=tuple(_build(DecisionRule, r) for r in raw.get("decision_rules", [])),
                validators=tuple(_build(Validator, v, env=dict(v.get("env") or {}),
                                        timeout_s=float(v.get("timeout_s", DEFAULT_VALIDATOR_TIMEOUT_S)))
                                 for v in raw.get("validators", [])),
                hash=hash, raw=raw, kind=kind, parent_hash=parent_hash, source_path=source_path, secrets=secrets,
                **sections)

