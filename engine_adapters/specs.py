"""Each adapter's launch command line for an engine spec (data.plan_model.EngineSpec: one plan
`engines[]` entry). An explicit `argv` in the plan always wins; adapters only supply the documented
default command line of each engine (docs/engines.md).
"""

from __future__ import annotations

import sys
from typing import Callable

from data.errors import CampaignError
from data.plan_model import EngineSpec


def launch_argv(spec: EngineSpec) -> list[str]:
    """The command that starts the engine: the plan's `argv`, else the adapter's default."""
    return list(spec.argv) if spec.argv else _DEFAULT_ARGV[spec.adapter](spec)


def _vllm_omni(s: EngineSpec) -> list[str]:
    return ["vllm", "serve", s.model, "--omni", "--trust-remote-code", "--host", s.host, "--port", str(s.port)]


def _sglang_omni(s: EngineSpec) -> list[str]:
    return ["sgl-omni", "serve", "--model-path", s.model, "--model-name", "minicpmo", "--host", s.host,
            "--port", str(s.port)]


def _peer(s: EngineSpec) -> list[str]:
    raise CampaignError(f"engine {s.name!r}: the peer adapter needs an explicit 'argv' in the plan")


def _reference(s: EngineSpec) -> list[str]:
    # the engine's own entry point (`campaign engine reference` is the same engine): it starts
    # without importing the console's commands, which saves about a second per launch
    return [sys.executable, "-m", "engine_adapters.reference", "--dialect", s.dialect,
            "--profile", s.profile or "baseline", "--host", s.host, "--port", str(s.port)]


_DEFAULT_ARGV: dict[str, Callable[[EngineSpec], list[str]]] = {
    "vllm_omni": _vllm_omni, "sglang_omni": _sglang_omni, "peer": _peer, "reference": _reference,
}
ADAPTERS = tuple(_DEFAULT_ARGV)  # the plan's `engines[].adapter` values (data/plan_schema.json is tested equal)
