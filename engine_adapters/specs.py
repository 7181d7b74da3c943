"""Engine specs (one plan `engines[]` entry) and the per-engine adapters that turn a spec into a
launch argv. An explicit `argv` in the plan always wins; adapters only supply the documented
default command line of each engine (docs/engines.md).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable

from data.errors import CampaignError
from engine_adapters.dialects import DIALECTS

ADAPTERS = ("vllm_omni", "sglang_omni", "peer", "reference")
DEFAULT_MODEL = "openbmb/MiniCPM-o-4_5"


@dataclass(frozen=True)
class EngineSpec:
    name: str
    adapter: str
    dialect: str
    argv: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: int = 8091
    health_timeout_s: float = 600.0
    revision: str | None = None
    profile: str | None = None
    config_path: str | None = None
    checkpoint_paths: tuple[str, ...] = ()
    request: dict[str, Any] = field(default_factory=dict)
    model: str = DEFAULT_MODEL
    health_path: str = "/health"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def launch_argv(self) -> list[str]:
        return list(self.argv) if self.argv else _DEFAULT_ARGV[self.adapter](self)


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


def spec_from_plan(entry: dict[str, Any], model: str | None = None, where: str = "engines[]") -> EngineSpec:
    """An EngineSpec from a plan `engines[]` entry; bad fields raise a one-line CampaignError."""
    def need(key: str, kinds: type | tuple[type, ...]) -> Any:
        if key not in entry:
            raise CampaignError(f"{where}: missing field {key!r}")
        if not isinstance(entry[key], kinds):
            raise CampaignError(f"{where}.{key}: expected {getattr(kinds, '__name__', kinds)}, got {entry[key]!r}")
        return entry[key]

    name = need("name", str)
    adapter = need("adapter", str)
    if adapter not in ADAPTERS:
        raise CampaignError(f"{where}.adapter: {adapter!r} is not one of {', '.join(ADAPTERS)}")
    dialect = need("dialect", str)
    if dialect not in DIALECTS:
        raise CampaignError(f"{where}.dialect: {dialect!r} is not one of {', '.join(DIALECTS)}")
    argv = entry.get("argv") or []
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise CampaignError(f"{where}.argv: expected a list of strings (never a shell string), got {argv!r}")
    env = entry.get("env") or {}
    if not isinstance(env, dict):
        raise CampaignError(f"{where}.env: expected an object, got {env!r}")
    port = entry.get("port", 8091)
    if not isinstance(port, int) or not 0 < port < 65536:
        raise CampaignError(f"{where}.port: expected a TCP port number, got {port!r}")
    return EngineSpec(
        name=name, adapter=adapter, dialect=dialect, argv=tuple(argv),
        env={str(k): str(v) for k, v in env.items()}, host=str(entry.get("host", "127.0.0.1")), port=port,
        health_timeout_s=float(entry.get("health_timeout_s", 600)), revision=entry.get("revision"),
        profile=entry.get("profile"), config_path=entry.get("config_path"),
        checkpoint_paths=tuple(entry.get("checkpoint_paths") or ()), request=dict(entry.get("request") or {}),
        model=model or DEFAULT_MODEL,
    )
