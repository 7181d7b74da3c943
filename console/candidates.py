"""What identifies a candidate, and the console's hooks into its life (docs/results.md, "Candidates").

A plan engine's configuration is the launch argv (the adapter's default when the plan gives none),
the environment's names (never values), the deploy config file and its SHA-256, the source and the
patch file's SHA-256, the precision mark, and the SHA-256 of the request body template its runs
send. A probe's is the URL, dialect and body template it drove. data/candidates.py stores them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from data import candidates as cands
from data.errors import CampaignError
from data.hashing import sha256_file
from data.plan_model import EngineSpec, Plan
from data.store import Store


def _file_sha256(path: str | None) -> str | None:
    """The file's SHA-256 now, or None (no file named, or not readable here)."""
    if not path:
        return None
    try:
        return sha256_file(Path(path).expanduser())
    except OSError:
        return None


def argv_or_reason(engine: EngineSpec) -> list[str]:
    """The launch argv (the adapter's default when the plan gives none), or why there is none."""
    from engine_adapters.specs import launch_argv

    try:
        return launch_argv(engine)
    except CampaignError as exc:
        return [f"<no argv: {exc}>"]


def engine_config(engine: EngineSpec, sampling: dict[str, Any] | None) -> dict[str, Any]:
    from engine_adapters.dialects import get_dialect

    return {
        "kind": "engine", "adapter": engine.adapter, "revision": engine.revision, "profile": engine.profile,
        "argv": argv_or_reason(engine), "env_names": sorted(engine.env), "env_passthrough": sorted(engine.env_passthrough),
        "deploy": {"path": engine.config_path, "sha256": _file_sha256(engine.config_path)},
        "source": engine.source, "patch": {"path": engine.patch, "sha256": _file_sha256(engine.patch)},
        "precision_change": engine.precision_change, "dialect": engine.dialect,
        "body_template_sha256": get_dialect(engine.dialect).body_template_sha256(sampling, dict(engine.request)),
    }


def plan_candidate(store: Store, plan: Plan, name: str) -> str:
    """The key of a plan engine's candidate, registered (proposed) if it is new."""
    e = plan.engine(name)
    return cands.register(store, e.name, engine_config(e, dict(plan.sampling.fields)), hypothesis=e.hypothesis,
                          origin="plan", plan_hash=plan.hash)


def register_plan(store: Store, plan: Plan) -> list[str]:
    """Every engine of a frozen plan as a candidate (those already known keep their status)."""
    return [plan_candidate(store, plan, e.name) for e in plan.engines]


def probe_candidate(store: Store, engine: str, url: str, dialect: str, sampling: dict[str, Any],
                    options: dict[str, Any]) -> str:
    from engine_adapters.dialects import get_dialect

    config = {"kind": "probe", "url": url, "dialect": dialect,
              "body_template_sha256": get_dialect(dialect).body_template_sha256(sampling, options)}
    return cands.register(store, engine, config, origin="probe")


def on_verdict(store: Store, plan: Plan, engine: str, verdict_id: str, verdict: str) -> bool:
    """A FAIL verdict rejects the candidate it judged, naming the verdict (docs/results.md); True
    if that changed its status."""
    if verdict != "FAIL":
        return False
    key = plan_candidate(store, plan, engine)
    return cands.reject(store, key, f"verdict {verdict_id} FAIL", [verdict_id], plan_hash=plan.hash)


def plan_selection(store: Store, plan: Plan) -> list[dict[str, Any]]:
    """The plan's engines whose candidates are selected, each with the verdicts behind it and the
    seq of the event that selected it (what `plan open-holdout` records)."""
    out = []
    for e in plan.engines:
        key = plan_candidate(store, plan, e.name)
        c = cands.get(store, key)
        if c is not None and c.status == cands.SELECTED:
            seq = max(ev["seq"] for ev in cands.status_events(store, key) if ev["payload"].get("change") == "selected")
            out.append({"candidate": e.name, "config_sha256": key, "verdicts": list(c.verdicts), "seq": seq})
    return out
