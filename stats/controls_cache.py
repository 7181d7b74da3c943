"""The synthetic controls' results, kept beside the store and reused by a later gate with exactly
the same settings and code (docs/statistics.md, "Synthetic controls").

The controls are deterministic: their outcome is fixed by the gate settings (margins, draws, seed,
method, confidence, concurrencies, measured repeats), the code that generates and judges the data
and numpy's generator. The cache key is the SHA-256 of all of those, with the source of every module
involved, so a changed setting or a changed line of code never meets an old result: it misses and
the controls run again. A damaged or edited cache file is ignored (the controls run), never
trusted: an entry is used only if it records exactly the settings asked for under its key.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

from data.hashing import canonical_json, sha256_bytes, sha256_text
from stats.gates import GateConfig

SCHEMA = "omni-campaign-controls-cache/1"
SUFFIX = ".controls-cache.json"
KEEP = 32  # newest entries kept: one per distinct gate setting in use
_CODE = ("controls.py", "gates.py", "bootstrap.py", "attribution.py")  # everything a control's outcome runs


def cache_path(store_path: str | os.PathLike) -> Path:
    """The cache file beside a store: STORE.duckdb.controls-cache.json."""
    p = Path(store_path)
    return p.with_name(p.name + SUFFIX)


def code_sha256() -> str:
    """SHA-256 over the source of the modules that build and judge the control data."""
    here = Path(__file__).resolve().parent
    return sha256_text(canonical_json({name: sha256_bytes((here / name).read_bytes()) for name in _CODE}))


def settings(config: GateConfig) -> dict[str, Any]:
    """Everything that changes a control's outcome."""
    return {"gate": config.as_dict(), "code_sha256": code_sha256(), "numpy": np.__version__}


def cache_key(config: GateConfig) -> str:
    return sha256_text(canonical_json(settings(config)))


@dataclass(frozen=True)
class Controls:
    results: list  # ControlResult
    key: str
    cached_at: str | None  # when the reused results were computed; None: they ran now


def _read(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return {}
    entries = doc.get("entries") if isinstance(doc, dict) and doc.get("schema") == SCHEMA else None
    return entries if isinstance(entries, dict) else {}


def _write(path: Path, entries: dict[str, Any]) -> None:
    """Replace the file atomically; a cache that cannot be written is only a cache."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"schema": SCHEMA, "entries": entries}, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)


def controls_for(config: GateConfig, path: Path | None, run: Callable[[GateConfig], list]) -> Controls:
    """The controls' results for `config`: reused from the cache at `path` when an entry has exactly
    these settings, else `run(config)` and stored there. `path` None: no cache."""
    from stats.controls import ControlResult

    want = settings(config)
    key = sha256_text(canonical_json(want))
    entries = _read(path) if path is not None else {}
    hit = entries.get(key)
    if isinstance(hit, dict) and hit.get("settings") == want:
        try:
            return Controls([ControlResult(**r) for r in hit["results"]], key, str(hit["computed_at"]))
        except (KeyError, TypeError):
            pass  # a malformed entry: run them
    results = run(config)
    if path is not None and path.parent.is_dir():
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        entries[key] = {"settings": want, "computed_at": now, "results": [r.as_dict() for r in results]}
        newest = sorted(entries.items(), key=lambda kv: str((kv[1] or {}).get("computed_at")
                                                             if isinstance(kv[1], dict) else ""))[-KEEP:]
        _write(path, dict(newest))
    return Controls(results, key, None)
