"""What an attached console costs the measurement: TTFA p50 at C=32 against the reference engine
with `campaign tui --live` following the campaign inside tmux, vs with no console, alternating
in one invocation (docs/performance.md; the target is a difference under 1 ms).

    python bench/bench_tui_overhead.py [--pairs 12] [--requests 96] [--concurrency 32] [--profile wide]

Needs tmux and the repository's Python dependencies (pyproject.toml; the path exercised is
`campaign run` with the embedded reference engine and `campaign tui`: textual, rich, duckdb, numpy,
scipy, pandas, pyarrow, aiohttp, httptools, uvloop, soundfile, soxr, espeakng-loader, jsonschema,
pyyaml); no GPU and no network.

Each round is a fresh store and a frozen one-cell plan (one reference engine, a warmup repeat
then one measured repeat at C), run by `campaign run` in a subprocess exactly as a user runs it.
In an attached round the console is started in a detached tmux session (100x30) on the store
before the run, shows its Live tab, and follows the live snapshot through the whole campaign,
as a user over SSH would. Rounds alternate attached/headless, the order flipping each pair
(ABBA...), so drift on a shared box falls on both sides. TTFA p50 is the stored measured run's
(stats.metrics.run_metrics). The default profile `wide` admits every stream at once, so TTFA
is the engine's first step plus the client's own work, not queueing (which at C=32 on `fast`,
16 sequences, adds ~700 ms and ~10 ms of run-to-run noise).

Statistics (docs/performance.md, "An attached console"): the pair is the unit, since rounds of one
pair share the box's state; the estimate is the median of the per-pair differences (attached -
headless) with a 95% percentile-bootstrap interval (seeded), and the mean with its 95% t interval
beside it. The console's CPU seconds per attached round (from /proc) show what it cost. The last
line is the verdict line; the exit status is 0 when the interval's upper end is under the target,
1 when it is not (the overhead is not shown to be under 1 ms), 2 on a failed round.
"""

from __future__ import annotations

import argparse
import math
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
TARGET_MS = 1.0
BOOT_DRAWS = 10_000
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}  # keep a wheel dir


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
    cmd = (f"cd {shlex.quote(str(REPO))} && exec env PYTHONPATH={shlex.quote(ENV['PYTHONPATH'])} TERM=xterm-256color "
           f"{shlex.quote(sys.executable)} -m console.cli tui --live --db {shlex.quote(str(db))}")
    tmux("new-session", "-d", "-s", name, "-x", "100", "-y", "30", cmd)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        pane = tmux("capture-pane", "-p", "-t", name, check=False).stdout
        if "No live snapshot yet." in pane and "reading " not in pane:
            time.sleep(1.0)
            return
        time.sleep(0.3)
    shown = " | ".join(line.strip() for line in pane.splitlines() if line.strip())[-400:]
    raise SystemExit(f"the console did not come up in tmux within {timeout_s:.0f} s; the pane shows: {shown or '(nothing)'}")


def console_cpu_s(name: str) -> float | None:
    """CPU seconds (user + system) the console process of tmux session `name` has used so far
    (the pane runs it through `exec`, so the pane's process is the console)."""
    pid = tmux("display-message", "-p", "-t", name, "#{pane_pid}", check=False).stdout.strip()
    try:
        fields = Path(f"/proc/{int(pid)}/stat").read_text().rsplit(")", 1)[1].split()
    except (ValueError, OSError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def one_round(root: Path, attached: bool, args: argparse.Namespace) -> tuple[float, float | None, float]:
    """(TTFA p50 ms of the measured run, console CPU s during the campaign or None, campaign wall s)."""
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
    cpu: float | None = None
    try:
        if attached:
            attach_console(name, db)
            cpu0 = console_cpu_s(name)
        t0 = time.monotonic()
        campaign("run", str(plan), "--no-telemetry", db=db)
        wall = time.monotonic() - t0
        if attached:
            if tmux("has-session", "-t", name, check=False).returncode != 0:
                raise SystemExit("the console exited during the campaign")
            cpu1 = console_cpu_s(name)
            cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    finally:
        tmux("kill-session", "-t", name, check=False)
    with open_store(db, read_only=True) as store:
        run_id = store.scalar("SELECT run_id FROM runs WHERE kind = 'measured'")
        m = run_metrics(store, run_id)
    if m.ttfa_p50_s is None or m.failed:
        raise SystemExit(f"round {root.name}: {m.failed} failed request(s), TTFA p50 {m.ttfa_p50_s}")
    return m.ttfa_p50_s * 1000.0, cpu, wall


def median_ci(diffs: list[float], seed: int = 20261201, draws: int = BOOT_DRAWS) -> tuple[float, float, float]:
    """Median of the paired differences and its 95% percentile-bootstrap interval (pairs resampled)."""
    import numpy as np

    d = np.asarray(diffs, dtype=float)
    rng = np.random.default_rng(seed)
    meds = np.median(d[rng.integers(0, d.size, size=(draws, d.size))], axis=1)
    lo, hi = np.quantile(meds, [0.025, 0.975])
    return float(np.median(d)), float(lo), float(hi)


def mean_ci(diffs: list[float]) -> tuple[float, float, float]:
    """Mean of the paired differences and its 95% t interval (nan width for fewer than 2 pairs)."""
    from scipy import stats as st

    n = len(diffs)
    mean = statistics.fmean(diffs)
    if n < 2:
        return mean, math.nan, math.nan
    half = float(st.t.ppf(0.975, n - 1)) * statistics.stdev(diffs) / math.sqrt(n)
    return mean, mean - half, mean + half


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", type=int, default=12)
    ap.add_argument("--requests", type=int, default=96)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--profile", default="wide")
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is not installed (apt-get install -y tmux)")
    if args.pairs < 2:
        raise SystemExit("--pairs: at least 2 (an interval needs more than one pair)")
    t0 = time.monotonic()
    ttfa: dict[bool, list[float]] = {True: [], False: []}
    diffs: list[float] = []
    cpu: list[tuple[float, float]] = []  # (console CPU s, campaign wall s) per attached round
    with tempfile.TemporaryDirectory(prefix="bench-tui-") as tmp:
        try:
            for p in range(args.pairs):
                order = (True, False) if p % 2 == 0 else (False, True)
                got = {}
                for attached in order:
                    got[attached], used, wall = one_round(Path(tmp) / f"r{p}{'a' if attached else 'h'}", attached, args)
                    ttfa[attached].append(got[attached])
                    note = ""
                    if attached and used is not None:
                        cpu.append((used, wall))
                        note = f"  (console CPU {used:.2f} s over the {wall:.1f} s campaign)"
                    print(f"pair {p} {'attached' if attached else 'headless'}: TTFA p50 {got[attached]:.2f} ms{note}",
                          flush=True)
                diffs.append(got[True] - got[False])
        finally:
            tmux("kill-server", check=False)
    att, head = statistics.median(ttfa[True]), statistics.median(ttfa[False])
    med, lo, hi = median_ci(diffs)
    mean, mlo, mhi = mean_ci(diffs)
    print(f"\nTTFA p50 at C={args.concurrency}, {args.requests} requests, profile {args.profile}, {args.pairs} pairs "
          f"({time.monotonic() - t0:.0f} s):")
    print(f"  console attached (campaign tui --live in tmux): median {att:.2f} ms  "
          f"(rounds: {', '.join(f'{x:.2f}' for x in ttfa[True])})")
    print(f"  headless (no console):                          median {head:.2f} ms  "
          f"(rounds: {', '.join(f'{x:.2f}' for x in ttfa[False])})")
    print(f"  per-pair differences (attached - headless): {', '.join(f'{d:+.2f}' for d in diffs)} ms")
    print(f"  mean difference {mean:+.2f} ms (95% t interval [{mlo:+.2f}, {mhi:+.2f}])")
    if cpu:
        used = sum(u for u, _ in cpu)
        wall = sum(w for _, w in cpu)
        print(f"  console CPU while attached: {used:.2f} s over {wall:.0f} s of campaign ({100 * used / wall:.1f}% of one core)")
    met = hi < TARGET_MS
    print(f"  target: the 95% interval's upper end under {TARGET_MS:g} ms: {'met' if met else 'NOT shown'}")
    print(f"TTFA p50 C={args.concurrency}: attached - headless = {med:+.2f} ms (95% CI [{lo:+.2f}, {hi:+.2f}]), "
          f"target < {TARGET_MS:g} ms")
    return 0 if met else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SystemExit as exc:
        if isinstance(exc.code, str):  # a round that failed: its one-line reason, exit 2
            print(exc.code, file=sys.stderr)
            sys.exit(2)
        raise
