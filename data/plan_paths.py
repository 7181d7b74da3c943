"""Every file and folder a plan names, checked at freeze (docs/plans.md, "What freeze checks").

A plan whose checkpoint folder did not exist used to freeze, and the campaign then ended at the
first launch; now `plan freeze` refuses it, naming every missing path with its field. Paths are
resolved as their users resolve them: engine config and checkpoint paths and scorer model
folders as given (`~` expanded, relative to the current directory, as engine_adapters/lifecycle.py
and stats/quality/registry.py open them), the workload root and pools file as data/manifest.py
does (next to the plan file, else the current directory, else the project root).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from data.errors import CampaignError
from data.manifest import plan_pools_file, resolve_workload_root

if TYPE_CHECKING:
    from data.plan_model import Plan


def named_paths(plan: Plan) -> list[tuple[str, Path]]:
    """(field, resolved path) for every path field of the plan, in document order."""
    out = [(f"model.checkpoint_paths[{i}]", Path(p).expanduser()) for i, p in enumerate(plan.model.checkpoint_paths)]
    for i, e in enumerate(plan.engines):
        if e.config_path:
            out.append((f"engines[{i}].config_path", Path(e.config_path).expanduser()))
        out += [(f"engines[{i}].checkpoint_paths[{j}]", Path(p).expanduser()) for j, p in enumerate(e.checkpoint_paths)]
    out.append(("workload.root", resolve_workload_root(plan.workload.root, plan.source_path)))
    pools = plan_pools_file(plan)
    if pools is not None:
        out.append(("workload.pools_file", pools))
    out += [(f"quality.model_paths.{name}", Path(str(p)).expanduser()) for name, p in plan.quality.model_paths.items()]
    return out


def missing_paths(plan: Plan) -> list[tuple[str, Path]]:
    """Each missing path once, under the first field naming it (an engine without checkpoint
    paths of its own is given the model's: data/checkpoints.py)."""
    seen: set[Path] = set()
    out = []
    for name, p in named_paths(plan):
        if not p.exists() and p not in seen:
            seen.add(p)
            out.append((name, p))
    return out


def check_paths(plan: Plan, label: str) -> None:
    """Refuse, in one line naming each (field and path), a plan that names a path that does not exist."""
    missing = missing_paths(plan)
    if missing:
        listed = "; ".join(f"{name}: {p}" for name, p in missing)
        raise CampaignError(f"{label}: {len(missing)} path(s) the plan names do not exist: {listed}")
