"""Connecting the console to a Ray cluster: `--cluster local|auto|ray://HOST:PORT` (docs/cluster.md).

`local` starts a Ray instance inside this process (or reuses the one already initialised, as the
tests do with fake GPU resources); `auto` joins the cluster `ray start` runs on this host;
`ray://HOST:PORT` connects through Ray Client. Ray is imported here only, on demand.
"""

from __future__ import annotations

import os
from typing import Any

from data.errors import CampaignError, first_line


class ClusterError(CampaignError):
    """The cluster cannot be reached, or is not what the plan expects; nothing was run."""


def check_address(address: str) -> str:
    """The address as given when it is one of the accepted forms, else a one-line ClusterError."""
    if address in ("local", "auto") or (address.startswith("ray://") and ":" in address[len("ray://"):]):
        return address
    raise ClusterError(f"--cluster: {address!r} is not local, auto or ray://HOST:PORT")


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - ray is a dependency
        raise ClusterError(f"--cluster needs the 'ray' package ({exc}); pip install ray") from None
    return ray


def connect(address: str) -> Any:
    """Initialise Ray for `address`; returns the ray module. Idempotent for an initialised Ray."""
    check_address(address)
    ray = import_ray()
    if ray.is_initialized():
        return ray
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": "ERROR"}
    try:
        if address == "local":
            ray.init(num_cpus=os.cpu_count() or 1, **kwargs)
        else:
            ray.init(address=address, **kwargs)
    except Exception as exc:  # ConnectionError, RuntimeError ... : one line, nothing ran
        raise ClusterError(f"--cluster {address}: cannot connect to Ray: {first_line(exc)}") from None
    return ray
