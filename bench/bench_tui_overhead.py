"""What an attached console costs the measurement: TTFA p50 at C=32 against the reference engine
with `campaign tui --live` following the campaign inside tmux, vs with no console, alternating
in one invocation (docs/performance.md; the target is a difference under 1 ms).

    python bench/bench_tui_overhead.py [--pairs 3] [--requests 96] [--concurrency 32] [--profile wide]

Each round is a fresh store and a frozen one-cell plan (one reference engine, a warmup repeat
then one measured repeat at C), run by `campaign run` in a subprocess exactly as a user runs it.
In an attached round the console is started in a detached tmux session (100x30) on the store
before the run, shows its Live tab, and follows the live snapshot through the whole campaign,
as a user over SSH would. Rounds alternate attached/headless, the order flipping each pair
(ABBA...), so drift on a shared box falls on both sides. TTFA p50 is the stored measured run's
(stats.metrics.run_metrics). The default profile `wide` admits every stream at once, so TTFA
is the engine's first step plus the client's own work, not queueing (which at C=32 on `fast`,
16 sequences, adds ~700 ms and ~10 ms of run-to-run noise). Prints both medians over rounds, their difference, and the median
of per-pair differences.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from data.store import open_store  # noqa: E402
from plans_helpers import make_workload, plan_dict, write_json  # noqa: E402
from stats.metrics.compute import run_metrics  # noqa: E402

SOCKET = f"omni-bench-tui-{os.getpid()}"
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def tmux(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["tmux", "-L", SOCKET, *args], capture_output=True, text=True, check=check, timeout=10)


def campaign(*args: str, db: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "console.cli", *args, "--db", str(db)], capture_output=True,
                       text=True, env=ENV, cwd=REPO, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"campaign {' '.join(args)} failed (exit {r.returncode}): {r.stderr.strip() or r.stdout.strip()}")


def attach_console(name: str, db: Path, timeout_s: float = 60.0) -> None:
    """`campaign tui --live` in tmux; returns once it shows the Live tab and has read the store
    (so its read-only open cannot race the campaign's own)."""
    cmd = (f"cd {shlex.quote(str(REPO))} && env PYTHONPATH={shlex.quote(str(REPO))} TERM=xterm-256color "
           f"{shlex.quote(sys.executable)} -m console.cli tui --live --db {shlex.quote(str(db))}")
    tmux("new-session", "-d", "-s", name, "-x", "100", "-y", "30", cmd)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pane = tmux("capture-pane", "-p", "-t", name, check=False).stdout
        if "No live snapshot yet." in pane and "reading " not in pane:
            time.sleep(1.0)
            return
        time.sleep(0.3)
    raise SystemExit(f"the console did not come up in tmux within {timeout_s:.0f} s")


def one_round(root: Path, attached: bool, args: argparse.Namespace) -> float:
    wl = root.parent / "wl"
    if not wl.exists():
        make_workload(wl, n=24, n_holdout=4)
    doc = plan_dict(wl, concurrencies=(args.concurrency,), requests=args.requests, warmups=1, repeats=1,
                    profiles=(args.profile,))
    for e in doc["engines"]:
        e["argv"] = [sys.executable, "-m", "engine_adapters.reference", "--dialect", e["dialect"],
                     "--profile", e["profile"], "--host", "127.0.0.1", "--port", str(e["port"])]
    root.mkdir(parents=True)
    plan, db = write_json(root / "plan.json", doc), root / "c.duckdb"
    campaign("plan", "freeze", str(plan), db=db)
    name = f"tui-{root.name}"
    try:
        if attached:
            attach_console(name, db)
        campaign("run", str(plan), "--no-telemetry", db=db)
        if attached and tmux("has-session", "-t", name, check=False).returncode != 0:
            raise SystemExit("the console exited during the campaign")
    finally:
        tmux("kill-session", "-t", name, check=False)
    with open_store(db, read_only=True) as store:
        run_id = store.scalar("SELECT run_id FROM runs WHERE kind = 'measured'")
        m = run_metrics(store, run_id)
    if m.ttfa_p50_s is None or m.failed:
        raise SystemExit(f"round {root.name}: {m.failed} failed request(s), TTFA p50 {m.ttfa_p50_s}")
    return m.ttfa_p50_s * 1000.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--requests", type=int, default=96)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--profile", default="wide")
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is not installed (apt-get install -y tmux)")
    t0 = time.monotonic()
    ttfa: dict[bool, list[float]] = {True: [], False: []}
    diffs = []
    with tempfile.TemporaryDirectory(prefix="bench-tui-") as tmp:
        try:
            for p in range(args.pairs):
                order = (True, False) if p % 2 == 0 else (False, True)
                got = {}
                for attached in order:
                    got[attached] = one_round(Path(tmp) / f"r{p}{'a' if attached else 'h'}", attached, args)
                    ttfa[attached].append(got[attached])
                    print(f"pair {p} {'attached' if attached else 'headless'}: TTFA p50 {got[attached]:.2f} ms", flush=True)
                diffs.append(got[True] - got[False])
        finally:
            tmux("kill-server", check=False)
    att, head = statistics.median(ttfa[True]), statistics.median(ttfa[False])
    print(f"\nTTFA p50 at C={args.concurrency}, {args.requests} requests, profile {args.profile}, {args.pairs} pairs "
          f"({time.monotonic() - t0:.0f} s):")
    print(f"  console attached (campaign tui --live in tmux): {att:.2f} ms  (rounds: {', '.join(f'{x:.2f}' for x in ttfa[True])})")
    print(f"  headless (no console):                         {head:.2f} ms  (rounds: {', '.join(f'{x:.2f}' for x in ttfa[False])})")
    print(f"  difference (attached - headless), medians:     {att - head:+.2f} ms")
    print(f"  median of per-pair differences:                {statistics.median(diffs):+.2f} ms  (target: under 1 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
