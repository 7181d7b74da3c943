"""The engine's deploy configuration as part of what is measured (docs/engines.md, "Deploy
configuration").

vLLM-Omni serves MiniCPM-o 4.5 as `vllm serve <model> --omni --deploy-config <yaml>`. The file may
name a `base_config` (relative to its own folder) that it overlays; the console resolves the chain
the way vllm-omni 0.30.0 does (vllm_omni/config/stage_config.py `resolve_deploy_yaml`): top-level
scalars of the overlay win; `stages` merge by `stage_id` (the overlay's fields win, and the
sampling/engine dicts merge key by key); `connectors` merge recursively; `platforms` merge per
platform and stage. From the result it keeps what decides queueing and sampling: the session mode
(absent = "turn", as `load_deploy_config`), the duplex `max_sessions`, and per stage
`max_num_seqs`, `num_replicas` and `default_sampling_params`. The engine admits at most
`admission_limit` requests at once: the smallest stage capacity (max_num_seqs x replicas), and in
duplex mode no more than max_sessions. A sweep above it measures queueing inside the engine.

SGLang-Omni takes options as `--stage.section.key value`; they are recorded as a nested dict and
any `max_running_requests` / `max_num_seqs` among them bounds the admission limit the same way.

Admission-limit flags on the command line win over the files: vLLM's `--max-num-seqs N` typed on
`vllm serve --omni` is applied to every stage over the deploy YAML (vllm-omni 0.30.0
`config_factory` merges explicitly typed CLI values over the YAML for each stage), and SGLang-Omni's
`--thinker-max-running-requests N` / `--max-running-requests N` (`sglang_omni/cli/serve.py`) set
the thinker's / generation stage's `max_running_requests`; each is recorded and bounds the limit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from data.errors import CampaignError, first_line
from data.hashing import sha256_file

DEEP_MERGE_KEYS = ("default_sampling_params", "default_pooling_params", "subtalker_sampling_params",
                   "engine_extras", "engine_args")
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "repetition_penalty", "min_tokens", "max_tokens", "seed")
CAPACITY_KEYS = ("max_running_requests", "max_num_seqs")
VLLM_SEQS_FLAG = "--max-num-seqs"  # vLLM's engine flag; under --omni it overrides each stage's max_num_seqs
SGLANG_CAPACITY_FLAGS = ("--thinker-max-running-requests", "--max-running-requests")  # sgl-omni serve
MAX_CHAIN = 16


def _merge(base: Any, over: Any) -> Any:
    """Recursive dict merge; anything else: the overlay replaces."""
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: _merge(base.get(k), v) for k, v in over.items()}}
    return over


def _merge_stages(base: list | None, over: list | None) -> list[dict[str, Any]]:
    by_id: dict[Any, dict[str, Any]] = {s.get("stage_id"): dict(s) for s in base or []}
    for s in over or []:
        sid = s.get("stage_id")
        old = by_id.get(sid)
        if old is None:
            by_id[sid] = dict(s)
            continue
        merged = {**old, **s}
        for key in DEEP_MERGE_KEYS:
            if isinstance(old.get(key), dict) and isinstance(s.get(key), dict):
                merged[key] = _merge(old[key], s[key])
        by_id[sid] = merged
    return list(by_id.values())


def _merge_platforms(base: dict | None, over: dict | None) -> dict[str, Any] | None:
    if not base and not over:
        return None
    base, over = base or {}, over or {}
    out = {}
    for name in sorted(set(base) | set(over)):
        b, o = base.get(name) or {}, over.get(name) or {}
        out[name] = {**b, **{k: v for k, v in o.items() if k != "stages"},
                     "stages": _merge_stages(b.get("stages"), o.get("stages"))}
    return out


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CampaignError(f"deploy config {path}: cannot read ({exc.strerror})") from None
    except yaml.YAMLError as exc:
        raise CampaignError(f"deploy config {path}: invalid YAML ({first_line(exc)})") from None
    if not isinstance(doc, dict):
        raise CampaignError(f"deploy config {path}: expected a mapping at the top level")
    return doc


def resolve_deploy_yaml(path: str | Path) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """(effective deploy dict, the files read with their SHA-256, overlay first)."""
    files: list[dict[str, str]] = []
    seen: set[Path] = set()

    def load(p: Path) -> dict[str, Any]:
        p = p.resolve()
        if p in seen or len(seen) >= MAX_CHAIN:
            raise CampaignError(f"deploy config {p}: base_config chain loops or is longer than {MAX_CHAIN}")
        seen.add(p)
        if not p.is_file():
            raise CampaignError(f"deploy config {p}: no such file")
        files.append({"path": str(p), "sha256": sha256_file(p)})
        raw = _read_yaml(p)
        base_name = raw.pop("base_config", None)
        if base_name is None:
            return raw
        base = load(p.parent / str(base_name))
        merged = {**base, **{k: v for k, v in raw.items() if k not in ("connectors", "stages", "platforms")}}
        if base.get("connectors") or raw.get("connectors"):
            merged["connectors"] = _merge(base.get("connectors") or {}, raw.get("connectors") or {})
        merged["stages"] = _merge_stages(base.get("stages"), raw.get("stages"))
        platforms = _merge_platforms(base.get("platforms"), raw.get("platforms"))
        if platforms is not None:
            merged["platforms"] = platforms
        return merged

    return load(Path(path)), files


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def vllm_deploy_summary(path: str | Path) -> dict[str, Any]:
    """What a launch stores about a vLLM-Omni deploy file (see the module docstring)."""
    doc, files = resolve_deploy_yaml(path)
    mode = doc.get("session_mode", "turn")
    duplex = doc.get("duplex_session") or {}
    stages = []
    for s in doc.get("stages") or []:
        sampling = s.get("default_sampling_params") or {}
        stages.append({"stage_id": s.get("stage_id"), "max_num_seqs": _int(s.get("max_num_seqs")),
                       "num_replicas": _int(s.get("num_replicas")) or 1, "devices": s.get("devices"),
                       "default_sampling_params": {k: sampling[k] for k in SAMPLING_KEYS if k in sampling}})
    caps = [st["max_num_seqs"] * st["num_replicas"] for st in stages if st["max_num_seqs"]]
    max_sessions = _int(duplex.get("max_sessions"))
    if mode == "duplex" and max_sessions:
        caps.append(max_sessions)
    return {"kind": "vllm-omni deploy-config", "files": files, "pipeline": doc.get("pipeline"),
            "session_mode": mode, "max_sessions": max_sessions, "stages": stages,
            "admission_limit": min(caps) if caps else None}


def flag_value(argv: list[str] | tuple[str, ...], flag: str) -> str | None:
    """The last value of `flag` (`--flag V`, `--flag=V`, or its underscore spelling) in argv."""
    names = (flag, "--" + flag[2:].replace("-", "_"))
    value = None
    for i, tok in enumerate(argv):
        if tok in names and i + 1 < len(argv):
            value = argv[i + 1]
        elif tok.split("=", 1)[0] in names and "=" in tok:
            value = tok.split("=", 1)[1]
    return value


def _cli_seqs(summary: dict[str, Any], argv: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """A deploy summary with a typed `--max-num-seqs N` applied to every stage (it wins over the YAML)."""
    given = flag_value(argv, VLLM_SEQS_FLAG)
    if given is None or not given.isdigit():
        return summary
    n = int(given)
    stages = [{**st, "max_num_seqs": n} for st in summary["stages"]]
    caps = [n * st["num_replicas"] for st in stages] or [n]
    if summary["session_mode"] == "duplex" and summary["max_sessions"]:
        caps.append(summary["max_sessions"])
    return {**summary, "stages": stages, "cli": {"max_num_seqs": n}, "admission_limit": min(caps)}


def stage_options(argv: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """SGLang-Omni's `--stage.section.key value` options as a nested dict (values as given)."""
    out: dict[str, Any] = {}
    for i, tok in enumerate(argv):
        if not tok.startswith("--") or tok.count(".") < 1:
            continue
        key, eq, value = tok[2:].partition("=")
        if not eq:
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else "true"
        node = out
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {}) if isinstance(node.get(p, {}), dict) else {}
        node[parts[-1]] = value
    return out


def _capacities(node: Any) -> list[int]:
    if not isinstance(node, dict):
        return []
    out = []
    for k, v in node.items():
        if k in CAPACITY_KEYS and str(v).isdigit():
            out.append(int(v))
        out += _capacities(v)
    return out


def deploy_path(argv: list[str] | tuple[str, ...], config_path: str | None, engine: str) -> str | None:
    """The `--deploy-config` file of an argv; it must be the plan's config_path when both are given,
    since config_sha256 is the hash of config_path."""
    given = None
    for i, tok in enumerate(argv):
        if tok == "--deploy-config" and i + 1 < len(argv):
            given = argv[i + 1]
        elif tok.startswith("--deploy-config="):
            given = tok.split("=", 1)[1]
    if given and config_path and Path(given).resolve() != Path(config_path).resolve():
        raise CampaignError(f"engine {engine!r}: argv --deploy-config {given} is not config_path {config_path}; "
                            f"name the same file in both so its hash is the launched file's")
    return given or None


def deploy_record(adapter: str, argv: list[str] | tuple[str, ...], config_path: str | None,
                  engine: str) -> dict[str, Any] | None:
    """The resolved deploy configuration a launch stores (engine_launches.deploy_json), or None."""
    if adapter == "sglang_omni" or (argv and Path(argv[0]).name == "sgl-omni"):
        opts = stage_options(list(argv))
        flags = {f[2:].replace("-", "_"): v for f in SGLANG_CAPACITY_FLAGS if (v := flag_value(argv, f)) is not None}
        if not opts and not flags:
            return None
        caps = _capacities(opts) + [int(v) for v in flags.values() if v.isdigit()]
        return {"kind": "sglang-omni stage options", "options": opts, **({"cli": flags} if flags else {}),
                "admission_limit": min(caps) if caps else None}
    path = deploy_path(argv, config_path, engine)
    if path is None and adapter == "vllm_omni" and config_path and str(config_path).endswith((".yaml", ".yml")):
        path = config_path
    return _cli_seqs(vllm_deploy_summary(path), argv) if path else None
