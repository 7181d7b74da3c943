"""Engine patches in the evidence bundle (docs/results.md, "Evidence bundle"; docs/engines.md,
"Engine identity and patches").

A launch from a dirty checkout is accepted only with a `patch` file equal to the checkout's diff
against its commit; the launch row records the file and its SHA-256. The bundle carries each
patch its plan's launches used, under patches/<sha256>.patch, with patches/patches.json naming
the engine, the commit, the hash of each and how to rebuild the engine's code from them (`git
checkout COMMIT && git apply --binary PATCH` in a clone of the checkout).
A patch file that is gone or no longer has its recorded hash stops the export (the bundle would
not prove what ran).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Sequence

from data.errors import CampaignError
from data.hashing import sha256_file
from data.store import Store


def write_patches(store: Store, plan_hashes: Sequence[str], out: Path) -> list[dict[str, Any]]:
    """Copy every patch the plans' launches used into `out`/patches; returns the index written."""
    marks = ", ".join("?" for _ in plan_hashes)
    rows = store.query(
        "SELECT DISTINCT engine, source_location, source_commit, patch_path, patch_sha256 FROM engine_launches "
        f"WHERE plan_hash IN ({marks}) AND patch_sha256 IS NOT NULL ORDER BY engine, patch_sha256", list(plan_hashes))
    if not rows:
        return []
    folder = out / "patches"
    folder.mkdir(parents=True, exist_ok=True)
    index = []
    for r in rows:
        src = Path(r["patch_path"])
        if not src.is_file() or sha256_file(src) != r["patch_sha256"]:
            raise CampaignError(f"patch {src} of engine {r['engine']!r}: {'gone' if not src.is_file() else 'changed'} "
                                f"since it was launched with sha256 {r['patch_sha256']}; the bundle needs that file")
        name = f"{r['patch_sha256']}.patch"
        shutil.copyfile(src, folder / name)
        index.append({"engine": r["engine"], "checkout": r["source_location"], "commit": r["source_commit"],
                      "sha256": r["patch_sha256"], "file": f"patches/{name}", "source_path": str(src),
                      "rebuild": f"git checkout {r['source_commit']} && git apply --binary patches/{name}"})
    (folder / "patches.json").write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")
    return index


def check_patches(root: Path) -> str:
    """Each bundled patch hashes to its name and patches.json lists exactly those files with those
    hashes; returns the step's detail line. (Which launch used which patch is in the launches'
    rows, which the bundle does not hold yet: docs/results.md.)"""
    folder = root / "patches"
    if not folder.is_dir():
        return "no engine patches"
    files = sorted(p.name for p in folder.iterdir() if p.name.endswith(".patch"))
    for name in files:
        got = sha256_file(folder / name)
        if f"{got}.patch" != name:
            raise CampaignError(f"patches/{name}: sha256 {got[:16]}… is not the hash its name states (edited)")
    try:
        index = json.loads((folder / "patches.json").read_text(encoding="utf-8"))
        listed = sorted(str(e["file"]).removeprefix("patches/") for e in index)
        hashes_ok = all(f"{e['sha256']}.patch" == str(e["file"]).removeprefix("patches/") for e in index)
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise CampaignError(f"patches/patches.json: not the index export writes ({exc})") from None
    if sorted(set(listed)) != files or not hashes_ok:
        raise CampaignError("patches/patches.json: does not list exactly the bundled patch files with their hashes")
    return f"{len(files)} engine patch(es) hash to their names and are indexed"
