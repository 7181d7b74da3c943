"""One source for each enum (issue 30): every `enum` in data/plan_schema.json equals the registry
the code reads, so a value the code handles is never refused by the schema (as `tf32` in
`quality.dtypes` was) and a value the schema admits always has code behind it. A new enum in the
schema fails here until it is given its registry."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, get_args, get_type_hints

import pytest

import console.cli
from data.audio_rates import DIALECT_SAMPLE_RATES
from data.bootstrap_params import BOOTSTRAP_DEFAULTS, METHODS, BootstrapParams
from data.errors import CampaignError
from data.plan_freeze import frozen_plan_for_file
from data.plan_model import BootstrapSpec, ClaimsSpec, DecisionRule, Plan, SweepSpec
from data.plan_validation import plan_schema, validate_plan_dict
from engine_adapters.dialects import DIALECTS, get_dialect
from engine_adapters.dialects.base import AUDIO_FORMATS
from engine_adapters.dialects.presets import PRESETS
from engine_adapters.reference.chat_request import DIALECTS as REFERENCE_DIALECTS
from engine_adapters.specs import ADAPTERS
from data.store import open_store
from plans_helpers import make_workload, minimal_plan_doc, plan_dict, write_json
from stats.bootstrap import METHODS as BOOTSTRAP_METHODS
from stats.gates import GateConfig
from stats.quality.base import METRICS as QUALITY_METRICS
from stats.quality.precision import DTYPES
from stats.quality.registry import SCORERS, dtype_for, make_scorer

ROOT = Path(__file__).resolve().parents[1]


def _literal(cls: type, name: str) -> tuple[Any, ...]:
    return get_args(get_type_hints(cls)[name])


def _placements() -> set[str]:
    """Every voice placement a request can ask for: each dialect's, and each preset's."""
    out = {p for d in DIALECTS for p in get_dialect(d).placements}
    return out | {p for preset in PRESETS.values() for p in preset.placements or ()}


# schema path (`[]` for an array's items, `*` for an object's values) -> the registry the code reads
REGISTRIES: dict[str, Any] = {
    "engines[].adapter": lambda: ADAPTERS,
    "engines[].dialect": lambda: DIALECTS,
    "engines[].request.audio_format": lambda: AUDIO_FORMATS,
    "engines[].request.voice_prompt": _placements,
    "engines[].request.preset": lambda: tuple(PRESETS),
    "sweep.restart": lambda: _literal(SweepSpec, "restart"),
    "sweep.interleave": lambda: _literal(SweepSpec, "interleave"),
    "sweep.kind": lambda: _literal(SweepSpec, "kind"),
    "quality.dtypes.*": lambda: DTYPES,
    "quality.dtypes{}": lambda: (*QUALITY_METRICS, *{n for c in SCORERS.values() for n in (c.name, c.scorer_id)}),
    "bootstrap.method": lambda: METHODS,
    "decision_rules[].kind": lambda: _literal(DecisionRule, "kind"),
    "selection": lambda: _literal(Plan, "selection"),
    "claims.status": lambda: _literal(ClaimsSpec, "status"),
}


def schema_enums(node: Any, path: str = "") -> Iterator[tuple[str, list[Any]]]:
    """(path, values) of every `enum` in a JSON Schema."""
    if isinstance(node, dict):
        if "enum" in node:
            yield path, node["enum"]
        for key, sub in (node.get("properties") or {}).items():
            yield from schema_enums(sub, f"{path}.{key}" if path else key)
        if isinstance(node.get("items"), dict):
            yield from schema_enums(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            yield from schema_enums(node["additionalProperties"], f"{path}.*")
        if isinstance(node.get("propertyNames"), dict):
            yield from schema_enums(node["propertyNames"], f"{path}{{}}")


def test_every_schema_enum_has_a_registry():
    found = dict(schema_enums(plan_schema()))
    assert len(found) >= 13
    assert sorted(found) == sorted(REGISTRIES), "an enum of data/plan_schema.json without a registry here (or gone)"


@pytest.mark.parametrize("path", sorted(REGISTRIES))
def test_schema_enum_equals_its_registry(path):
    values = dict(schema_enums(plan_schema()))[path]
    registry = REGISTRIES[path]()
    assert len(values) == len(set(values))
    assert sorted(values) == sorted(registry), f"{path}: schema {values} != registry {sorted(registry)}"


def test_the_file_on_disk_is_the_schema_checked():
    assert plan_schema() == json.loads((ROOT / "data" / "plan_schema.json").read_text(encoding="utf-8"))


def test_dialect_names_agree_everywhere():
    """The client's dialects (engine_adapters/dialects), the sample rates the plan check reads
    (data/, which cannot import engine_adapters) and the reference engine's served dialects."""
    assert list(DIALECT_SAMPLE_RATES) == list(DIALECTS) == list(REFERENCE_DIALECTS)


def _choices(*command: str, option: str) -> tuple[Any, ...]:
    parser: argparse.ArgumentParser = console.cli.build_parser()
    for name in command:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = sub.choices[name]
    action = next(a for a in parser._actions if option in a.option_strings)
    assert action.choices is not None
    return tuple(action.choices)


def test_command_line_choices_are_the_registries():
    """The flags that name an enum offer exactly the registry's values."""
    assert _choices("probe", option="--dialect") == DIALECTS
    assert _choices("probe", option="--audio-format") == AUDIO_FORMATS
    assert _choices("gate", option="--method") == METHODS == BOOTSTRAP_METHODS
    assert _choices("controls", option="--method") == METHODS
    assert _choices("scorers", "run", option="--dtype") == DTYPES  # a literal: stats cannot load at --help


def test_bootstrap_defaults_have_one_definition():
    """The plan's section, the gate's configuration and the flags' defaults are one dataclass's."""
    assert BootstrapSpec is BootstrapParams
    assert (BOOTSTRAP_DEFAULTS.draws, BOOTSTRAP_DEFAULTS.seed, BOOTSTRAP_DEFAULTS.method,
            BOOTSTRAP_DEFAULTS.confidence) == (20000, 20261022, "percentile", 0.95)
    cfg = GateConfig(margins={"wer": 0.2, "sim": 0.5, "utmos": 0.05})
    assert (cfg.draws, cfg.seed, cfg.method, cfg.confidence) == (20000, 20261022, "percentile", 0.95)
    parser = console.cli.build_parser()
    args = parser.parse_args(["controls"])
    assert (args.draws, args.seed, args.method) == (20000, 20261022, "percentile")


@pytest.mark.parametrize("dtypes", [{"sim": "tf32"}, {"seedtts-sim": "tf32"}, {"utmos22": "float16"}])
def test_every_offered_dtype_validates(dtypes):
    """stats/quality/precision.py runs tf32 (TF32 tensor cores, docs/quality.md); the schema refused it."""
    validate_plan_dict(minimal_plan_doc(quality={"dtypes": dtypes}))


def test_an_unknown_dtype_is_still_refused():
    with pytest.raises(CampaignError, match=r"quality\.dtypes\.sim: 'bf16' is not one of 'float32', 'tf32', 'float16'"):
        validate_plan_dict(minimal_plan_doc(quality={"dtypes": {"sim": "bf16"}}))


def test_a_dtypes_key_naming_no_scorer_or_metric_is_refused():
    """A misspelt key was frozen and then silently ignored: the scorer ran at its default dtype."""
    with pytest.raises(CampaignError, match=r"quality\.dtypes: key 'siim' is not one of 'wer', 'sim', 'mos', "):
        validate_plan_dict(minimal_plan_doc(quality={"dtypes": {"siim": "tf32"}}))


def test_a_metric_key_sets_the_dtype_of_the_scorer_that_measures_it():
    """`{"sim": "tf32"}` (the issue's own example) reached no scorer: dtypes were looked up by scorer
    name or id only. A scorer's own key wins over its metric's."""
    assert dtype_for("seedtts-sim", {"sim": "tf32"}) == "tf32"
    assert make_scorer("seedtts-sim", dtypes={"sim": "tf32"}, device="cpu").dtype == "tf32"
    assert dtype_for("seedtts-sim", {"sim": "tf32", "seedtts-sim": "float16"}) == "float16"
    assert dtype_for("whisper", {"sim": "tf32"}) is None
    with pytest.raises(ValueError, match="resemblyzer: dtype 'tf32' is not offered"):
        make_scorer("resemblyzer", dtypes={"sim": "tf32"}, device="cpu")


def test_a_plan_with_tf32_freezes(tmp_path):
    """Done-when of issue 30: `quality.dtypes: {"sim": "tf32"}` freezes (`campaign plan freeze`, as a
    user runs it), and the frozen plan keeps the dtype."""
    doc = plan_dict(make_workload(tmp_path / "wl"), ports=[18191, 18192])
    doc["quality"]["dtypes"] = {"sim": "tf32", "seedtts-sim": "tf32"}
    path = write_json(tmp_path / "plan.json", doc)
    db = tmp_path / "c.duckdb"
    out = subprocess.run([sys.executable, "-m", "console.cli", "plan", "freeze", str(path), "--db", str(db)],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "froze plan 'test-plan'" in out.stdout
    with open_store(db) as store:
        plan = frozen_plan_for_file(store, path)
    assert plan.quality.dtypes == {"sim": "tf32", "seedtts-sim": "tf32"}
