"""What an engine's launch decides about sampling, output length and numerical precision, read from
its command line, its deploy configuration and its checkpoint's config.json (docs/engines.md,
"Launch settings: what compared arms must share").

A request body is not the only place sampling lives: vLLM-Omni's deploy YAML gives each stage
`default_sampling_params` (the MiniCPM-o talker's temperature 0.8, top-k 25, seed 42 in vllm-omni
0.30.0 `vllm_omni/deploy/minicpmo_4_5.yaml`), vLLM's engine flags set the dtype, the quantization,
the KV-cache dtype, the context length and the generation config, and SGLang's server arguments do
the same per stage. Freeze and every run compare these across compared arms (Plan.compared_pairs),
key by key for two launches of the same adapter and by precision alone across adapters (whose
sampling lives in files of different shapes; their request bodies are compared key by key by
engine_adapters/sampling.py): a difference is refused unless the candidate lists the key in `engines[].declared_changes`, and a
difference in a precision key (dtype, quantization, KV-cache dtype) is a precision change the
candidate must declare (`precision_change: true`), so its quality PASS needs an equivalence PASS.
Each launch stores what it read (engine_launches.settings_json).

The keys are read from the engines' own argument parsers (cited in docs/engines.md):
- vLLM 0.30.0 `vllm/engine/arg_utils.py` (EngineArgs.add_cli_args): `--dtype`, `--quantization`
  (`-q`), `--kv-cache-dtype`, `--seed`, `--max-model-len`, `--generation-config`,
  `--override-generation-config`; vllm-omni 0.30.0 applies typed engine flags over each stage of the
  deploy YAML, whose stage entries carry the same engine fields.
- SGLang-Omni `sglang_omni/cli/serve.py` (`sgl-omni serve`): `--quantization` for the backbone
  stage, and `--stage.section.key value` options; SGLang 0.5.23 `sglang/srt/arg_groups/fields/
  model.py` (`dtype`, `quantization`, `kv_cache_dtype`, `context_length`), `device.py`
  (`random_seed`), `serving.py` (`sampling_defaults`, `preferred_sampling_params`).
- The checkpoint's config.json: `torch_dtype`, and for MiniCPM-o its `tts_config` sampling fields.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from data.plan_model import EngineSpec, Plan
from engine_adapters.deploy_config import deploy_path, flag_value, resolve_deploy_yaml, stage_options

PRECISION = ("dtype", "quantization", "kv_cache_dtype", "torch_dtype")  # a difference is a precision change
# vLLM's engine flags (vllm 0.30.0 vllm/engine/arg_utils.py) and SGLang's server arguments
# (sglang 0.5.23 sglang/srt/arg_groups/fields/), as flags
ARGV_FLAGS = {
    "--dtype": "dtype", "--quantization": "quantization", "-q": "quantization", "--kv-cache-dtype": "kv_cache_dtype",
    "--seed": "seed", "--random-seed": "seed", "--max-model-len": "max_model_len", "--context-length": "max_model_len",
    "--generation-config": "generation_config", "--override-generation-config": "override_generation_config",
    "--sampling-defaults": "sampling_defaults", "--preferred-sampling-params": "preferred_sampling_params",
}
# a deploy stage's engine fields and an SGLang stage option's last part that decide the same
STAGE_FIELDS = {"dtype": "dtype", "quantization": "quantization", "kv_cache_dtype": "kv_cache_dtype",
                "seed": "seed", "random_seed": "seed", "max_model_len": "max_model_len",
                "context_length": "max_model_len", "sampling_defaults": "sampling_defaults",
                "preferred_sampling_params": "preferred_sampling_params"}
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                   "frequency_penalty", "min_tokens", "max_tokens", "seed", "max_new_tokens", "min_new_tokens")
DEFAULTS = ("auto", None)  # a value an engine also takes when the key is not given


def _argv_settings(argv: list[str]) -> dict[str, Any]:
    out = {}
    for flag, name in ARGV_FLAGS.items():
        v = flag_value(argv, flag)
        if v is not None:
            out[f"argv.{name}"] = v
    return out


def _deploy_settings(engine: EngineSpec, argv: list[str]) -> dict[str, Any]:
    path = deploy_path(argv, engine.config_path, engine.name) or (
        engine.config_path if str(engine.config_path or "").endswith((".yaml", ".yml")) else None)
    if not path or not Path(path).expanduser().is_file():
        return {}
    doc, _files = resolve_deploy_yaml(Path(path).expanduser())
    out: dict[str, Any] = {}
    for st in doc.get("stages") or []:
        sid = st.get("stage_id")
        for k, name in STAGE_FIELDS.items():
            if k in st:
                out[f"deploy.stage{sid}.{name}"] = st[k]
        for k, v in (st.get("default_sampling_params") or {}).items():
            if k in SAMPLING_FIELDS:
                out[f"deploy.stage{sid}.sampling.{k}"] = v
    return out


def _flatten(node: Any, prefix: str) -> dict[str, Any]:
    if not isinstance(node, dict):
        return {prefix: node}
    out: dict[str, Any] = {}
    for k, v in node.items():
        out.update(_flatten(v, f"{prefix}.{k}"))
    return out


def _option_settings(argv: list[str]) -> dict[str, Any]:
    out = {}
    for key, value in _flatten(stage_options(argv), "options").items():
        last = key.rsplit(".", 1)[-1]
        if last in STAGE_FIELDS or last in SAMPLING_FIELDS:
            out[f"{key.rsplit('.', 1)[0]}.{STAGE_FIELDS.get(last, last)}"] = value
    return out


def _checkpoint_settings(engine: EngineSpec) -> dict[str, Any]:
    """config.json of the first checkpoint folder that has one: torch_dtype and tts_config sampling."""
    for raw in engine.checkpoint_paths:
        cfg = Path(raw).expanduser()
        cfg = cfg / "config.json" if cfg.is_dir() else cfg.with_name("config.json")
        try:
            doc = json.loads(cfg.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(doc, dict):
            continue
        out = {"checkpoint.torch_dtype": doc["torch_dtype"]} if "torch_dtype" in doc else {}
        raw_tts = doc.get("tts_config")
        tts: dict[str, Any] = raw_tts if isinstance(raw_tts, dict) else {}
        out.update({f"checkpoint.tts_config.{k}": tts[k] for k in SAMPLING_FIELDS if k in tts})
        return out
    return {}


def launch_settings(engine: EngineSpec, argv: list[str] | None = None) -> dict[str, Any]:
    """Every setting of this launch that decides sampling, output length or precision, by key."""
    argv = list(engine.argv if argv is None else argv)
    return {**_argv_settings(argv), **_deploy_settings(engine, argv), **_option_settings(argv),
            **_checkpoint_settings(engine)}


def concept(key: str) -> str:
    """The setting a key decides, whatever the file it came from: 'deploy.stage1.dtype' -> 'dtype'."""
    return key.rsplit(".", 1)[-1]


def _declared(engine: EngineSpec, key: str) -> bool:
    return any(key == d or key.endswith("." + d) or concept(key) == d for d in engine.declared_changes)


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, Any, Any]]:
    """Keys whose values differ ('auto' and absent are the same: the engine's own default)."""
    out = []
    for k in sorted(set(a) | set(b)):
        va, vb = a.get(k), b.get(k)
        if va != vb and not (va in DEFAULTS and vb in DEFAULTS):
            out.append((k, va, vb))
    return out


def precision_view(settings: dict[str, Any]) -> dict[str, Any]:
    """The precision an engine runs at, whatever file sets it: concept -> the sorted set of values
    given (defaults left out), for arms of different engines, whose sampling lives in files of
    different shapes (their request bodies are compared by engine_adapters/sampling.py)."""
    out: dict[str, set[str]] = {}
    for k, v in settings.items():
        if concept(k) in PRECISION and v not in DEFAULTS:
            out.setdefault(concept(k), set()).add(str(v))
    return {k: sorted(v) for k, v in sorted(out.items())}


def settings_errors(plan: Plan, parent: Plan | None = None) -> list[str]:
    """One line per compared pair whose launch settings differ where the candidate declares no
    change, or differ in precision where it does not declare `precision_change`."""
    errs: list[str] = []
    cache: dict[str, dict[str, Any]] = {}

    def settings(name: str) -> dict[str, Any]:
        if name not in cache:
            cache[name] = launch_settings(plan.engine(name))
        return cache[name]

    for ref, cand, where in plan.compared_pairs():
        e = plan.engine(cand)
        a, b = settings(ref), settings(cand)
        if plan.engine(ref).adapter != e.adapter:  # other engines keep sampling elsewhere: compare the precision
            a, b = precision_view(a), precision_view(b)
        diffs = differences(a, b)
        undeclared = [d for d in diffs if not _declared(e, d[0])]
        if undeclared:
            shown = "; ".join(f"{k}: {v!r} for {ref!r}, {w!r} for {cand!r}" for k, v, w in undeclared[:4])
            errs.append(f"engines {ref!r} and {cand!r} (compared by {where}) launch with different sampling, length or "
                        f"precision settings: {shown}; list the keys the hypothesis changes in "
                        f"engines[].declared_changes of {cand!r} (docs/engines.md, \"Launch settings\")")
        precision = sorted({concept(k) for k, _, _ in diffs if concept(k) in PRECISION})
        if precision and not e.precision_change:
            errs.append(f"engine {cand!r}: {', '.join(precision)} differ(s) from {ref!r} (compared by {where}): a "
                        "precision change; declare precision_change: true (its quality PASS then needs an "
                        "equivalence PASS, docs/equivalence.md)")
    return errs
