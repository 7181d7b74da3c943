"""The same checkpoint bytes for every engine (docs/plans.md, "Checkpoints").

`model.checkpoint_paths` (and any engine's own `checkpoint_paths`) are hashed when the plan is
frozen: every file (a folder expands to its files, in sorted order) with its size and SHA-256,
stored in `plans.checkpoints_json`, which the `plan_frozen` event's row hash covers. Compared
engines (data.plan_model.Plan.compared_pairs) must be given the same bytes, else freeze refuses; every
launch hashes the paths it is given again and must find the frozen digests, else it is a
startup failure naming the file and both hashes (engine_adapters/lifecycle.py).

Two checkpoints are the same when their files' (size, SHA-256) lists are equal in the canonical
order: file names aside, so a copy of the same bytes elsewhere is the same checkpoint. Hashing
uses the one digest cache (data/hashing.py): a file whose path, size and mtime are unchanged is
not read again; docs/plans.md states the cost of a first hash per GB.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from data.errors import CampaignError
from data.hashing import cached_sha256_files

if TYPE_CHECKING:
    from data.plan_model import Plan
    from data.store import Store


def checkpoint_files(paths: Sequence[str]) -> list[Path]:
    """The files `paths` name, in canonical order: each path in the order given, a folder as its
    files sorted by path. A path that does not exist raises a one-line CampaignError naming it."""
    files: list[Path] = []
    for p in paths:
        path = Path(p).expanduser().resolve()
        if path.is_dir():
            files += sorted(f for f in path.rglob("*") if f.is_file())
        elif path.is_file():
            files.append(path)
        else:
            raise CampaignError(f"checkpoint path {p}: no such file or directory")
    return files


def hash_files(paths: Sequence[str], cache_path: Path | None = None) -> dict[str, dict[str, Any]]:
    """{absolute file path: {"size", "sha256"}} in canonical order."""
    files = checkpoint_files(paths)
    digests = cached_sha256_files(files, cache_path)
    return {str(f): {"size": f.stat().st_size, "sha256": d} for f, d in zip(files, digests)}


def fingerprint(files: Mapping[str, Mapping[str, Any]], paths: Sequence[str]) -> list[tuple[int, str]]:
    """The (size, sha256) list of the files `paths` expand to, in canonical order: what 'the same
    checkpoint' compares."""
    return [(files[str(f)]["size"], files[str(f)]["sha256"]) for f in checkpoint_files(paths)]


def freeze_checkpoints(plan: Plan, label: str, cache_path: Path | None = None) -> dict[str, Any] | None:
    """The document stored with a frozen plan: {"files": {path: {size, sha256}}, "engines": {name:
    [paths]}}, or None when the plan names no checkpoint. Refuses (one line) a missing path and
    two compared engines given different bytes."""
    engines = {e.name: list(e.checkpoint_paths) for e in plan.engines}
    paths = list(dict.fromkeys([*plan.model.checkpoint_paths, *(p for ps in engines.values() for p in ps)]))
    if not paths:
        return None
    try:
        files = hash_files(paths, cache_path)
    except CampaignError as exc:
        raise CampaignError(f"{label}: {exc}") from None
    for a, b, where in plan.compared_pairs():
        fa, fb = fingerprint(files, engines[a]), fingerprint(files, engines[b])
        if fa != fb:
            raise CampaignError(f"{label}: engines {a!r} and {b!r} are compared ({where}) but are given different "
                                f"checkpoints: {_difference(files, engines[a], engines[b])}; compared engines must "
                                "load the same checkpoint bytes (docs/plans.md)")
    return {"files": files, "engines": {n: [str(f) for f in checkpoint_files(ps)] for n, ps in engines.items()}}


def _difference(files: Mapping[str, Mapping[str, Any]], a: Sequence[str], b: Sequence[str]) -> str:
    fa, fb = checkpoint_files(a), checkpoint_files(b)
    for x, y in zip(fa, fb):
        if (files[str(x)]["size"], files[str(x)]["sha256"]) != (files[str(y)]["size"], files[str(y)]["sha256"]):
            return f"{x} (sha256 {files[str(x)]['sha256'][:16]}) vs {y} (sha256 {files[str(y)]['sha256'][:16]})"
    return f"{len(fa)} file(s) vs {len(fb)} file(s)"


def frozen_digests(store: Store, plan_hash: str) -> dict[str, dict[str, str]] | None:
    """engine name -> {file path: sha256} as frozen with the plan (an addendum's effective plan is
    hashed when the addendum is frozen), or None for a plan that names no checkpoint or was frozen
    before checkpoints were hashed at freeze (nothing to check at launch)."""
    raw = store.scalar("SELECT checkpoints_json FROM plans WHERE plan_hash = ?", [plan_hash])
    if raw is None:
        return None
    doc = json.loads(raw)
    return {name: {f: doc["files"][f]["sha256"] for f in files} for name, files in doc["engines"].items()}


def launch_mismatch(frozen: Mapping[str, str], got: Mapping[str, str]) -> str | None:
    """Why a launch's checkpoint digests are not the frozen ones (one line naming the file and
    both hashes), or None."""
    for path, sha in got.items():
        want = frozen.get(path)
        if want is None:
            return f"checkpoint file {path} was not part of the plan when it was frozen (sha256 {sha} now)"
        if want != sha:
            return f"checkpoint file {path} changed since the plan was frozen: sha256 {sha} now, {want} at freeze"
    gone = [p for p in frozen if p not in got]
    if gone:
        return f"checkpoint file {gone[0]} is gone since the plan was frozen (sha256 {frozen[gone[0]]} at freeze)"
    return None
