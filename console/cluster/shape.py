"""The cluster's GPUs as the plan sees them: per node, how many GPUs Ray offers and their model
name, checked against the plan's `cluster` section (docs/cluster.md).

GPU names come from NVML on each node (a probe task pinned to the node). A node without NVML
(CI, fake GPU resources) names its GPUs by its Ray `accelerator_type:<name>` resource, or
'unknown'.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from console.cluster.connect import ClusterError
from data.errors import one_line

ACCELERATOR_PREFIX = "accelerator_type:"


@dataclass(frozen=True)
class NodeShape:
    node_id: str
    address: str
    gpus: int  # GPUs Ray offers on the node
    gpu_names: tuple[str, ...]  # one per GPU slot
    nvml: bool  # names (and UUIDs) read through NVML

    def gpu_name(self, slot: int) -> str:
        return self.gpu_names[slot] if 0 <= slot < len(self.gpu_names) else (self.gpu_names[0] if self.gpu_names else "unknown")


@dataclass(frozen=True)
class ClusterShape:
    nodes: tuple[NodeShape, ...]

    @property
    def gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    def names(self) -> Counter:
        return Counter(name for n in self.nodes for name in n.gpu_names[:n.gpus])

    def node(self, node_id: str) -> NodeShape | None:
        return next((n for n in self.nodes if n.node_id == node_id), None)

    def describe(self) -> str:
        names = ", ".join(f"{k} x {v}" for k, v in sorted(self.names().items())) or "no GPUs"
        return f"{names} on {len(self.nodes)} node(s)"


def _fallback_names(resources: dict[str, float], count: int) -> tuple[str, ...]:
    names = [k[len(ACCELERATOR_PREFIX):] for k in resources if k.startswith(ACCELERATOR_PREFIX)]
    return tuple([names[0] if len(names) == 1 else "unknown"] * count)


def node_shape(node: dict[str, Any], nvml_gpus: list[dict[str, Any]]) -> NodeShape:
    """One node from its ray.nodes() entry and the NVML rows its probe read (pure)."""
    resources = node.get("Resources") or {}
    count = int(resources.get("GPU", 0))
    if nvml_gpus:
        names = tuple(g.get("name") or "unknown" for g in nvml_gpus)
        names = (names + (names[-1],) * count)[:max(count, 0)] if len(names) < count else names[:count]
    else:
        names = _fallback_names(resources, count)
    return NodeShape(node["NodeID"], node.get("NodeManagerAddress", "?"), count, names, bool(nvml_gpus))


def probe(ray: Any) -> ClusterShape:
    """Ask every alive node with GPUs for its NVML identity (one pinned task per node)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from engine_adapters.telemetry import gpu_identity

    @ray.remote(num_cpus=0, max_retries=0)
    def _identity() -> list[dict[str, Any]]:
        return gpu_identity()[0]

    nodes = [n for n in ray.nodes() if n.get("Alive") and (n.get("Resources") or {}).get("GPU", 0) > 0]
    refs = [_identity.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
            for n in nodes]
    try:
        found = ray.get(refs, timeout=120)
    except Exception as exc:
        raise ClusterError(f"cluster: probing the GPU nodes failed: {one_line(exc)}") from None
    return ClusterShape(tuple(node_shape(n, g) for n, g in zip(nodes, found)))


def shape_problem(plan: Any, shape: ClusterShape) -> str | None:
    """Why the cluster is not the one the plan expects (plan.cluster, plan.gpu.expected_name), or None."""
    where = f"plan {plan.hash[:12]}"
    if shape.gpus == 0:
        return f"{where}: the Ray cluster offers no GPUs (a cell reserves one; start nodes with GPUs or --num-gpus)"
    want_name = plan.cluster.gpu_name or plan.gpu.expected_name
    names = shape.names()
    if want_name and set(names) != {want_name}:
        field = "cluster.gpu_name" if plan.cluster.gpu_name else "gpu.expected_name"
        return (f"{where}: {field}: expected every GPU to be {want_name!r}, the cluster has "
                f"{shape.describe()}")
    if plan.cluster.gpus is not None and shape.gpus != plan.cluster.gpus:
        return f"{where}: cluster.gpus: expected {plan.cluster.gpus} GPU(s), the cluster has {shape.describe()}"
    return None


def check_shape(plan: Any, shape: ClusterShape) -> None:
    problem = shape_problem(plan, shape)
    if problem:
        raise ClusterError(problem)
