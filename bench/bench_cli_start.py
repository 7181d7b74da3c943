"""How long `campaign` takes to start: the median wall time of `campaign --help` and of one light
real command (`campaign db info` on a small store) for this tree, and for a baseline tree in the
same invocation, with the ratio (docs/performance.md, "Starting `campaign`").

    python bench/bench_cli_start.py [--runs 15] [--baseline-src DIR]

DIR is a checkout of the code to compare against, e.g. the commit before the lazy imports
(`git worktree add /tmp/cli-base COMMIT`). Without it only this tree is timed. Each timing is
one `python -m console.cli ...` subprocess, exactly as a user or a test spawns it, with
PYTHONPATH naming the tree and the working directory a scratch folder. Runs alternate between
the trees, the order flipping each round (ABBA...), so drift on a shared box falls on both sides;
each tree has its own store (created, and its schema migrated, by an untimed first `db info`).
Needs only the repository's Python dependencies; no network, no GPU. Exit 2 if a command fails.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COMMANDS = {"--help": ["--help"], "db info": ["db", "info"]}


@dataclass
class Tree:
    """One source tree to time, with its own scratch store."""

    label: str
    src: Path
    db: Path
    times: dict[str, list[float]] = field(default_factory=dict)

    def argv(self, name: str) -> list[str]:
        extra = ["--db", str(self.db)] if name != "--help" else []
        return [sys.executable, "-m", "console.cli", *COMMANDS[name], *extra]

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(self.src)}


def revision(src: Path) -> str:
    """The tree's commit (and a '+' if its work tree differs), or '?' when it is no git checkout."""
    try:
        head = subprocess.run(["git", "-C", str(src), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"
    return head + ("+" if dirty else "")


def run_once(tree: Tree, name: str, cwd: Path) -> float:
    """Wall seconds of one `campaign` process; exits 2 naming the command if it fails."""
    t0 = time.perf_counter()
    proc = subprocess.run(tree.argv(name), capture_output=True, text=True, env=tree.env(), cwd=cwd)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        sys.exit(f"bench_cli_start: {tree.label}: `campaign {name}` exited {proc.returncode}: {last}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=15, help="timed runs per command and tree (default 15)")
    ap.add_argument("--baseline-src", type=Path, help="source tree to compare against (a worktree of the old commit)")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error(f"--runs: must be >= 1, got {args.runs}")
    if args.baseline_src and not (args.baseline_src / "console" / "cli.py").is_file():
        ap.error(f"--baseline-src {args.baseline_src}: no console/cli.py there")
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        scratch = Path(tmp)
        trees = [Tree("this tree", REPO, scratch / "this.duckdb")]
        if args.baseline_src:
            trees.append(Tree("baseline", args.baseline_src.resolve(), scratch / "baseline.duckdb"))
        for tree in trees:
            run_once(tree, "db info", scratch)  # creates and migrates the store; warms the file cache
        for i in range(args.runs):
            order = trees if i % 2 == 0 else trees[::-1]
            for name in COMMANDS:
                for tree in order:
                    tree.times.setdefault(name, []).append(run_once(tree, name, scratch))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {args.runs} runs per command and tree; "
          "wall ms: median [min - max]")
    for tree in trees:
        print(f"  {tree.label}: {tree.src} @ {revision(tree.src)}")
    head = f"{'command':<16}" + "".join(f"{t.label:>26}" for t in trees) + ("   baseline / this" if len(trees) > 1 else "")
    print(head)
    for name in COMMANDS:
        cells = []
        for t in trees:
            ms = [1000 * x for x in t.times[name]]
            cells.append(f"{statistics.median(ms):>8.0f} [{min(ms):.0f} - {max(ms):.0f}]")
        line = f"campaign {name:<7}" + "".join(f"{c:>26}" for c in cells)
        if len(trees) > 1:
            this, base = (statistics.median(t.times[name]) for t in trees)
            line += f"   {base / this:.1f}x"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
