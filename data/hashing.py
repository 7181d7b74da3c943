"""SHA-256 the one way the project hashes: bytes, text (UTF-8), canonical JSON and files, plus
the one cache of file digests.

Every hash a user can re-derive (plan hashes, the audit chain, manifests, evidence bundles) is
SHA-256 in hex over these forms (docs/integrity.md). Checkpoints and model folders are many GB,
so their file digests are cached by (absolute path, size, mtime_ns) in one small JSON file: a
changed file gets a new key and is hashed again. The cache only saves time; a missing, damaged
or unwritable cache file costs re-hashing, never a wrong digest that a changed file would not
reveal.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Sequence

BLOCK = 1 << 20  # bytes read at a time: files are streamed, never read whole
CACHE_FILE = "sha256-cache.json"
CACHE_ENV = "OMNI_CAMPAIGN_CACHE"  # folder of the cache file; default $XDG_CACHE_HOME/omni-campaign


def canonical_json(obj: Any) -> str:
    """The one canonical serialisation every hash in the project covers."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_bytes(data: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_text(text: str) -> str:
    return sha256_bytes(text.encode("utf-8"))


def sha256_json(obj: Any) -> str:
    """SHA-256 of `obj`'s canonical JSON: equal hashes, equal documents."""
    return sha256_text(canonical_json(obj))


def sha256_file(path: str | os.PathLike[str], block: int = BLOCK) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            h.update(chunk)
    return h.hexdigest()


def default_cache_path() -> Path:
    """$OMNI_CAMPAIGN_CACHE/sha256-cache.json, else under $XDG_CACHE_HOME (~/.cache)/omni-campaign."""
    folder = os.environ.get(CACHE_ENV) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "omni-campaign"
    return Path(folder) / CACHE_FILE


def cached_sha256_files(files: Sequence[Path], cache_path: Path | None = None) -> list[str]:
    """SHA-256 of each file (in order), reusing a cached digest while the file's absolute path,
    size and mtime_ns are unchanged; new digests are saved to `cache_path` (default
    `default_cache_path()`)."""
    path = cache_path or default_cache_path()
    cache = _load(path)
    out: list[str] = []
    dirty = False
    for f in files:
        resolved = Path(f).resolve()
        st = resolved.stat()
        key = f"{resolved}|{st.st_size}|{st.st_mtime_ns}"
        if key not in cache:
            cache[key] = sha256_file(resolved)
            dirty = True
        out.append(cache[key])
    if dirty:
        _save(path, cache)
    return out


def _load(path: Path) -> dict[str, str]:
    try:
        data = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _save(path: Path, cache: dict[str, str]) -> bool:
    """Best effort, atomic (a reader never sees half a file): a read-only home is not an error."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(cache, sort_keys=True))
        os.replace(tmp, path)
        return True
    except OSError:
        return False
