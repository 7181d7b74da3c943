"""Connecting the console to a Ray cluster: `--cluster local|auto|ray://HOST:PORT` (docs/cluster.md).

`local` starts a Ray instance inside this process (or reuses the one already initialised, as the
tests do with fake GPU resources); `auto` joins the cluster `ray start` runs on this host (the one
RAY_ADDRESS names, else the latest one started here); `ray://HOST:PORT` connects through Ray
Client. Ray is imported here only, on demand, and needs the `cluster` extra.

A head started on the loopback address (docs/cluster.md, "One host") listens there only, but Ray
swaps a loopback address it is given for the host's network address before it connects
(ray._private.services.resolve_ip_for_localhost) unless RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0;
`connect` sets that for this process when the address it is given is a loopback one.
"""

from __future__ import annotations

import ipaddress
import os
from typing import Any

from data.errors import CampaignError, first_line
from data.extras import needs_extra

# Ray keeps a loopback address as given (instead of the host's network address) when this is "0"
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


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
    except ImportError as exc:
        raise needs_extra("--cluster", exc) or ClusterError(f"--cluster: cannot import Ray: {first_line(exc)}") from None
    return ray


def target_host(address: str, env: dict[str, str] | None = None) -> str | None:
    """The host `address` connects to: RAY_ADDRESS's for `auto`, HOST for `ray://HOST:PORT`; None
    when it is not named (`local`, or `auto` without RAY_ADDRESS)."""
    env = dict(os.environ) if env is None else env
    raw = env.get("RAY_ADDRESS", "") if address == "auto" else address
    raw = raw.strip().removeprefix("ray://")
    if not raw or raw in ("auto", "local"):
        return None
    host = raw.rsplit(":", 1)[0] if raw.count(":") == 1 or raw.startswith("[") else raw  # HOST:PORT, [V6]:PORT
    return host.strip("[]") or None


def is_loopback(host: str | None) -> bool:
    if host is None:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def keep_loopback(address: str) -> None:
    """When `address` names a loopback host, tell Ray to keep it (module docstring). Takes effect
    only before Ray is imported: Ray reads the variable at import."""
    if is_loopback(target_host(address)):
        os.environ.setdefault(LOOPBACK_ENV, "0")


def connect(address: str) -> Any:
    """Initialise Ray for `address`; returns the ray module. Idempotent for an initialised Ray."""
    check_address(address)
    keep_loopback(address)
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
        raise ClusterError(f"--cluster {address}: cannot connect to Ray: {first_line(exc)}{_hint(address)}") from None
    return ray


def _hint(address: str) -> str:
    """What to check when joining an existing cluster fails (docs/cluster.md, "Starting Ray")."""
    if address == "local":
        return ""
    token = "" if os.environ.get("RAY_AUTH_MODE", "").lower() == "token" else (
        "a head started with RAY_AUTH_MODE=token needs RAY_AUTH_MODE=token and its token here too; ")
    return f" ({token}see docs/cluster.md, 'Starting Ray')"
