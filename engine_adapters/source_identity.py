"""What code a launch runs (docs/engines.md, "Engine identity and patches").

An engine entry's `source` says where its code is: `{"git": DIR}`, a checkout, or `{"dist": NAME}`,
an installed distribution. At every launch the identity is read afresh and stored on the launch
row (data/schema.py IDENTITY_COLUMNS):

- git: `git rev-parse HEAD`, `git rev-parse HEAD^{tree}` and `git status --porcelain` (untracked
  files count as dirty; ignored files do not). A dirty checkout is refused unless the entry
  names a `patch` file whose SHA-256 equals that of the checkout's diff against HEAD. The diff is
  `git diff --binary --cached HEAD` over a temporary index (GIT_INDEX_FILE, read from HEAD
  with `git read-tree HEAD`) after `git add -A`, so untracked files are in it and the user's index is
  never touched; `git add` does write the changed files' blobs into the repository's object
  store, as any `git add` would (unreferenced, `git gc` removes them).
- dist: version and the VCS commit pip recorded in `direct_url.json` (an install from git),
  read with importlib.metadata by the engine's own interpreter in a subprocess: `source.python`
  when given, else the engine's argv[0] when it is a Python, else the interpreter its `#!` line
  names (a console script such as `vllm`).

`revision` must match: a prefix of the commit (at least 4 hex digits), or the dist's version.
Every refusal is one line naming both sides; the lifecycle stores it as a startup failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from data.hashing import sha256_bytes, sha256_file
from data.plan_model import EngineSpec

GIT_TIMEOUT_S = 120.0
DIST_SCRIPT = (
    "import importlib.metadata as m, json, sys\n"
    "try:\n"
    "    d = m.distribution(sys.argv[1])\n"
    "except m.PackageNotFoundError:\n"
    "    print(json.dumps({'missing': True})); sys.exit(0)\n"
    "u = d.read_text('direct_url.json')\n"
    "print(json.dumps({'name': d.metadata['Name'], 'version': d.version, 'direct_url': json.loads(u) if u else None}))\n"
)
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")


class IdentityError(Exception):
    """The launch's code is not what the plan says (one line); `columns`: what was read before."""

    def __init__(self, message: str, columns: dict[str, Any] | None = None):
        super().__init__(message)
        self.columns = columns or {}


@dataclass(frozen=True)
class SourceIdentity:
    """The identity columns of one launch (NULL where the plan names no source)."""
    columns: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None  # why the launch is refused, or None


def _git(repo: Path, *args: str, env: dict[str, str] | None = None) -> str:
    try:
        r = subprocess.run(["git", "--no-optional-locks", "-C", str(repo), *args], capture_output=True,
                           env=env, timeout=GIT_TIMEOUT_S)
    except FileNotFoundError:
        raise IdentityError("git is not installed (source.git needs it)") from None
    except subprocess.TimeoutExpired:
        raise IdentityError(f"source.git {repo}: git {args[0]} took over {GIT_TIMEOUT_S:g} s") from None
    if r.returncode != 0:
        msg = (r.stderr.decode(errors="replace").strip().splitlines() or ["failed"])[-1]
        raise IdentityError(f"source.git {repo}: git {' '.join(args)}: {msg}")
    return r.stdout.decode(errors="replace")


def checkout_diff(repo: Path) -> bytes:
    """The checkout's diff against HEAD, untracked files included, the user's index untouched."""
    with tempfile.TemporaryDirectory(prefix="campaign-index-") as tmp:
        # a fresh index read from HEAD, not a copy of the user's: a copied index gets a new mtime,
        # which defeats git's check for files changed within the second of their last staging
        env = {**os.environ, "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        _git(repo, "read-tree", "HEAD", env=env)
        _git(repo, "add", "-A", env=env)
        r = subprocess.run(["git", "--no-optional-locks", "-C", str(repo), "diff", "--binary", "--cached", "HEAD"],
                           capture_output=True, env=env, timeout=GIT_TIMEOUT_S)
        if r.returncode != 0:
            raise IdentityError(f"source.git {repo}: git diff: {r.stderr.decode(errors='replace').strip()}")
        return r.stdout


def git_identity(spec: EngineSpec, repo: Path) -> dict[str, Any]:
    """Identity columns of a checkout; raises IdentityError for a revision mismatch or an
    unaccounted-for change."""
    commit = _git(repo, "rev-parse", "HEAD").strip()
    tree = _git(repo, "rev-parse", "HEAD^{tree}").strip()
    changed = [line[3:] for line in _git(repo, "status", "--porcelain", "--untracked-files=all").splitlines() if line]
    cols: dict[str, Any] = {"source_kind": "git", "source_location": str(repo), "source_commit": commit,
                            "source_tree": tree, "source_dirty": bool(changed)}
    problem = _git_problem(spec, repo, commit, changed, cols)
    if problem:
        raise IdentityError(problem, cols)
    return cols


def _git_problem(spec: EngineSpec, repo: Path, commit: str, changed: list[str], cols: dict[str, Any]) -> str | None:
    """Why the checkout is not what the plan names (revision, patch), or None; adds the patch columns."""
    if spec.revision and not _commit_matches(spec.revision, commit):
        return f"revision {spec.revision!r} does not match the checkout {repo} at commit {commit}"
    if not spec.patch:
        if not changed:
            return None
        more = f" and {len(changed) - 3} more" if len(changed) > 3 else ""
        return (f"the checkout {repo} has uncommitted changes against {commit[:12]} "
                f"({', '.join(changed[:3])}{more}); commit them, or name their diff in `patch`")
    patch = Path(spec.patch).expanduser()
    if not patch.is_file():
        return f"patch {spec.patch}: no such file"
    want = sha256_file(patch)
    cols.update(patch_path=str(patch.resolve()), patch_sha256=want)
    if not changed:
        return (f"patch {spec.patch} is named but the checkout {repo} is clean at commit {commit}: "
                "nothing to patch; remove `patch` or apply it")
    got = sha256_bytes(checkout_diff(repo))
    if got != want:
        return (f"patch {spec.patch} (sha256 {want}) is not the checkout's diff against {commit[:12]} "
                f"(sha256 {got}; `git add -A` then `git diff --binary --cached HEAD` writes it)")
    return None


def _commit_matches(revision: str, commit: str) -> bool:
    rev = revision.strip().lower()
    return len(rev) >= 4 and bool(re.fullmatch(r"[0-9a-f]+", rev)) and commit.startswith(rev)


def engine_python(spec: EngineSpec) -> str:
    """The interpreter that runs the engine: `source.python`, argv[0] when it is a Python, else the
    interpreter named on argv[0]'s `#!` line."""
    from engine_adapters.specs import launch_argv

    given = (spec.source or {}).get("python")
    if given:
        return given
    argv = launch_argv(spec)
    exe = shutil.which(argv[0]) if argv else None
    if exe is None:
        raise IdentityError(f"source.dist: cannot tell which Python runs {argv[0] if argv else 'the engine'!r} "
                            "(not found); give source.python")
    if _PYTHON.match(Path(argv[0]).name):
        return exe
    try:
        with open(exe, "rb") as f:
            first = f.readline(512).decode(errors="replace")
    except OSError as exc:
        raise IdentityError(f"source.dist: cannot read {exe}: {exc.strerror}; give source.python") from None
    words = first[2:].split() if first.startswith("#!") else []
    if words and Path(words[0]).name == "env" and len(words) > 1:
        words = words[1:]
    if words and _PYTHON.match(Path(words[0]).name):
        return shutil.which(words[0]) or words[0]
    raise IdentityError(f"source.dist: {exe} is neither a Python nor a script a Python runs; give source.python")


def dist_identity(spec: EngineSpec, name: str) -> dict[str, Any]:
    """Identity columns of an installed distribution, read by the engine's interpreter."""
    python = engine_python(spec)
    try:
        r = subprocess.run([python, "-c", DIST_SCRIPT, name], capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise IdentityError(f"source.dist {name}: cannot run {python}: {exc}") from None
    if r.returncode != 0:
        raise IdentityError(f"source.dist {name}: {python} failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    info = json.loads(r.stdout)
    if info.get("missing"):
        raise IdentityError(f"source.dist {name}: not installed for {python}")
    vcs = (info.get("direct_url") or {}).get("vcs_info") or {}
    cols = {"source_kind": "dist", "source_location": info["name"], "source_version": info["version"],
            "source_commit": vcs.get("commit_id"), "source_python": python}
    rev = spec.revision
    if rev and rev != info["version"] and not (cols["source_commit"] and _commit_matches(rev, cols["source_commit"])):
        have = f"version {info['version']}" + (f", commit {cols['source_commit']}" if cols["source_commit"] else "")
        raise IdentityError(f"revision {rev!r} does not match {info['name']} installed for {python} ({have})", cols)
    return cols


def identify(spec: EngineSpec) -> SourceIdentity:
    """The launch's identity columns and, when its code is not what the plan says, why."""
    base: dict[str, Any] = {"precision_change": bool(spec.precision_change)}
    src = spec.source or {}
    try:
        if "git" in src:
            cols = git_identity(spec, Path(src["git"]).expanduser().resolve())
        elif "dist" in src:
            cols = dist_identity(spec, src["dist"])
        else:
            return SourceIdentity(base)
    except IdentityError as exc:
        kind = "git" if "git" in src else "dist"
        return SourceIdentity({**base, "source_kind": kind, "source_location": src.get(kind), **exc.columns}, str(exc))
    return SourceIdentity({**base, **cols})
