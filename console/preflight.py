"""What `campaign run --detach` checks in the foreground before it detaches, so that an error is a
one-line message and a non-zero exit where the user is looking, never a "running in the
background" followed by a failure in a log file: the store opens (not locked by another
campaign, not damaged), the plan is frozen and unaltered, its workload unchanged, the phase can
start (holdout opened, no earlier runs without --resume), every env value is available, and
every engine port is free.
"""

from __future__ import annotations

import json

from console.cell_executor import check_preconditions, pid_matches, plan_cells, refuse_rerun
from data.errors import CampaignError
from data.plan_loading import engine_environment, plan_secrets
from data.plan_model import Plan
from data.store import Store
from engine_adapters.lifecycle import port_in_use


def _orphan_ports(store: Store, plan: Plan) -> set[tuple[str, int]]:
    """Ports held by engines an interrupted runner left up: `--resume` stops them first."""
    rows = store.query("SELECT engine, pid, argv_json FROM engine_launches WHERE plan_hash = ? "
                       "AND status IN ('starting', 'ready')", [plan.hash])
    names = {r["engine"] for r in rows if r["pid"] and pid_matches(r["pid"], json.loads(r["argv_json"]))}
    return {(e.host, e.port) for e in plan.engines if e.name in names}


def check_startable(store: Store, plan: Plan, phase: str, resume: bool, cluster: str | None = None) -> None:
    """Raise a one-line CampaignError when `campaign run` of this plan and phase would refuse.
    With `cluster` the engines run on the cluster's nodes: this host's GPU and ports are not
    theirs (the cluster's shape is checked when the run connects, console/cluster/shape.py)."""
    if cluster:
        from console.cluster.connect import check_address

        check_address(cluster)
    check_preconditions(store, plan, phase, local_gpu=not cluster)
    cells = plan_cells(plan, phase)
    names = {c.engine for c in cells}
    engine_environment(plan, plan_secrets(store, plan), names)
    refuse_rerun(store, plan, {c.key for c in cells}, resume)
    if cluster:
        return
    spare = _orphan_ports(store, plan) if resume else set()
    for i, e in enumerate(plan.engines):
        taken = port_in_use(e.host, e.port) if e.name in names and (e.host, e.port) not in spare else None
        if taken:
            raise CampaignError(f"engines[{i}].port: {taken}; stop it or choose another port (addendum)")
