"""Which GPU a run's engine holds, and the port it listens on when several GPUs of one host serve
cells at once (docs/cluster.md).

A process sees the GPUs CUDA_VISIBLE_DEVICES names (indices or UUIDs; Ray sets it for a task that
reserves `num_gpus=1`); the engine it launches uses the first of them. NVML lists every GPU of the
host whatever CUDA_VISIBLE_DEVICES says, so the run's GPU is looked up there by index or UUID.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

PORT_STRIDE = 100  # GPU slot k of a host serves engine port + k * PORT_STRIDE


def visible_devices(value: str | None = None) -> list[str]:
    """CUDA_VISIBLE_DEVICES as a list of tokens ([] when unset: all devices visible)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES") if value is None else value
    return [t.strip() for t in (value or "").split(",") if t.strip()]


def assigned_gpu(gpus: Sequence[dict[str, Any]], visible: Sequence[str] | None = None) -> dict[str, Any] | None:
    """The NVML row (gpu_index, name, uuid ...) of the first visible device, or None."""
    tokens = visible_devices() if visible is None else list(visible)
    if not gpus:
        return None
    if not tokens:
        return dict(gpus[0])
    first = tokens[0]
    for g in gpus:
        if first.isdigit() and g.get("gpu_index") == int(first):
            return dict(g)
        if not first.isdigit() and g.get("uuid") and (g["uuid"] == first or g["uuid"].startswith(first)):
            return dict(g)
    return None


def slot_port(port: int, slot: int) -> int:
    """The port an engine listens on in GPU slot `slot` of its host (slot 0: the plan's port)."""
    return port + slot * PORT_STRIDE


def with_port(argv: Sequence[str], old: int, new: int) -> list[str]:
    """argv with `--port OLD` / `--port=OLD` rewritten to NEW (an explicit plan argv names the
    port itself; nothing else in it is touched)."""
    out = list(argv)
    for i, a in enumerate(out):
        if a == "--port" and i + 1 < len(out) and out[i + 1] == str(old):
            out[i + 1] = str(new)
        elif a == f"--port={old}":
            out[i] = f"--port={new}"
    return out
