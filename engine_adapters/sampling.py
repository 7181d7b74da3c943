"""Same sampling for compared engines (docs/engines.md, "Sampling and output-length keys").

An engine's effective sampling is what its request body carries under the keys that change
sampling or output length (SAMPLING_KEYS, read from the engines' sources): the plan's `sampling`
section, a bench preset's own values, then `request.extra_body`, merged as the dialect builds the
body (engine_adapters/dialects). Compared engines (data.plan_model.Plan.compared_pairs) must send the
same effective sampling, so a key set in one engine's `extra_body` or preset only, or to another
value, is refused at freeze naming the engine and the key. `runs.params_json` stores the
effective sampling of the run's engine, never the plan's default that a preset or `extra_body`
overrode.
"""

from __future__ import annotations

from typing import Any

from data.plan_model import EngineSpec, Plan
from engine_adapters.dialects import get_dialect
from engine_adapters.dialects.presets import PROTOCOL

# Top-level request keys that change sampling or output length. OpenAI/vLLM chat fields, the keys
# vllm-omni 0.30.0 applies to the thinker stage (serving_chat.ChatCompletionServing.
# _OPENAI_SAMPLING_FIELDS) and its per-stage list (`sampling_params_list`), the bench's
# `max_new_tokens`, and SGLang-Omni's chat request fields (sglang_omni/serve/protocol.py
# ChatCompletionRequest: min_p, repetition_penalty, max_completion_tokens, stage_sampling,
# stage_params, talker_*). docs/engines.md lists each with its source.
SAMPLING_KEYS = (
    "temperature", "top_p", "top_k", "min_p", "seed",
    "repetition_penalty", "presence_penalty", "frequency_penalty",
    "max_tokens", "max_new_tokens", "max_completion_tokens", "min_tokens",
    "stop", "stop_token_ids", "ignore_eos",
    "sampling_params_list",
    "stage_sampling", "stage_params",
    "talker_temperature", "talker_top_p", "talker_top_k", "talker_repetition_penalty", "talker_max_new_tokens",
)


def body_sampling(body: dict[str, Any]) -> dict[str, Any]:
    """The sampling keys a request body carries (what `runs.params_json.sampling` stores)."""
    return {k: body[k] for k in SAMPLING_KEYS if k in body}


def effective_sampling(plan: Plan, engine: EngineSpec) -> dict[str, Any]:
    """The sampling keys of the body this engine is sent (plan sampling, preset, extra_body)."""
    return body_sampling(get_dialect(engine.dialect).body_template(dict(plan.sampling.fields),
                                                                   {**engine.request, "model": engine.model}))


def _origin(plan: Plan, engine: EngineSpec, key: str) -> str:
    """Where an engine's value for `key` comes from, in the plan's words."""
    if key in (engine.request.get("extra_body") or {}):
        return "request.extra_body"
    preset = engine.request.get("preset", PROTOCOL)
    if preset != PROTOCOL:
        return f"request.preset {preset!r}"
    return "sampling" if plan.sampling.fields.get(key) is not None else "not sent"


def sampling_errors(plan: Plan) -> list[str]:
    """One line per compared pair whose effective sampling differs, naming the engine and key
    (the engine whose extra_body or preset sets it, else the compared one)."""
    index = {e.name: i for i, e in enumerate(plan.engines)}
    errs: list[str] = []
    for a, b, where in plan.compared_pairs():
        ea, eb = plan.engine(a), plan.engine(b)
        sa, sb = effective_sampling(plan, ea), effective_sampling(plan, eb)
        for key in [k for k in SAMPLING_KEYS if sa.get(k) != sb.get(k)]:
            oa, ob = _origin(plan, ea, key), _origin(plan, eb, key)
            named, other = (ea, eb) if oa.startswith("request") and not ob.startswith("request") else (eb, ea)
            got, want = (sa, sb) if named is ea else (sb, sa)
            errs.append(f"engines[{index[named.name]}] {named.name!r}: {key} = {_show(got, key)} "
                        f"({_origin(plan, named, key)}) but {_show(want, key)} for {other.name!r} "
                        f"({_origin(plan, other, key)}), compared by {where}; compared engines must send the same "
                        "sampling and output length (docs/engines.md)")
            break
    return errs


def inherited_sampling_errors(plan: Plan, parent: Plan) -> list[str]:
    """An addendum's engines send what they sent under the parent: sampling and output length are
    decision-bearing (docs/plans.md, "What an addendum may change")."""
    errs: list[str] = []
    for e in plan.engines:
        old = next((x for x in parent.engines if x.name == e.name), None)
        if old is None:
            continue
        was, now = effective_sampling(parent, old), effective_sampling(plan, e)
        errs += [f"engines[{e.name!r}] {key}: {_show(was, key)} in the parent, {_show(now, key)} in the addendum "
                 f"({_origin(plan, e, key)}); an addendum keeps sampling and output length"
                 for key in SAMPLING_KEYS if was.get(key) != now.get(key)]
    return errs


def freeze_errors(plan: Plan, parent: Plan | None) -> list[str]:
    """The sampling rules `plan freeze` and `plan addendum` apply (data.plan_freeze.FreezeCheck)."""
    from engine_adapters.launch_settings import settings_errors

    return (sampling_errors(plan) + (inherited_sampling_errors(plan, parent) if parent is not None else [])
            + settings_errors(plan, parent))


def _show(sampling: dict[str, Any], key: str) -> str:
    return repr(sampling[key]) if key in sampling else "absent"
