"""The load driver's CPU per audio event, old tree against new, alternating against one engine.

    python bench/bench_event_cpu.py [--baseline REV] [--profile wide] [--concurrency 64]
        [--requests 256] [--rounds 6] [--shards 1] [--json PATH]

The box this runs on is shared and noisy, so a per-event figure from one drive says little and
two drives an hour apart say less. This starts ONE reference engine and then drives the same load
with the driver code of two trees in turn: `git archive REV` (default HEAD~1) unpacked into a
temporary folder, and the working tree. Each drive runs in a fresh interpreter whose
PYTHONPATH is that tree, through that tree's own `DriverProcess` (the real driver process: spawn,
collector freeze, sender thread, pipe, the parent's decode thread), exactly the path
`record_run` uses, minus the store. The figure is the driver's own `driver_overhead_json.cpu_s`
(user + system, every thread of the driver process(es)) divided by the audio events decoded
(docs/performance.md, "Per-event CPU (issue 18, item 1)"). It prints every round and the median
per tree, with the ratio new / old.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_timing_fidelity import start_engine  # noqa: E402

from engine_adapters.driver.overhead import cpu_us_per_event  # noqa: E402

# run in a fresh interpreter with PYTHONPATH = the tree under test: only the API both trees share
DRIVE = r"""
import json, sys, time
from pathlib import Path
from bench_timing_fidelity import TEXTS, prompt_wav
from engine_adapters.driver import DriveSpec, DriverProcess, RequestSpec

url, c, n, shards, tmp = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], Path(sys.argv[5])
prompt = prompt_wav(tmp / "prompt.wav")
reqs = [RequestSpec(f"s{i % 2}-{i}", TEXTS[i % 2], prompt) for i in range(n)]
spec = DriveSpec(f"cpu-{time.monotonic_ns()}", url, "vllm-omni", c, reqs, timeout_s=300,
                 artifacts_dir=tmp / "art", shards=int(shards) if shards != "auto" else shards)
audio = failed = 0
proc = DriverProcess(spec).start()
for batch in proc.batches():
    for rec in batch:
        audio += getattr(rec, "kind", None) == "audio"
        failed += getattr(rec, "outcome", "ok") != "ok"
proc.join()
s = proc.summary
assert s is not None and not proc.fatal, proc.fatal
print(json.dumps({"cpu_s": s.overhead["cpu_s"], "audio": audio, "sent": s.sent, "failed": failed,
                  "loop_lag_max_ms": s.overhead["loop_lag"]["max_ms"], "page_faults": s.overhead.get("page_faults")}))
"""


def export_tree(rev: str, dest: Path) -> Path:
    """The tree of `rev` unpacked into dest (no worktree registered, nothing in the repo changes)."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", rev], check=True,
                             capture_output=True).stdout
    tar = dest / "tree.tar"
    tar.write_bytes(archive)
    with tarfile.open(tar) as t:
        t.extractall(dest / "tree", filter="data")
    return dest / "tree"


def drive(tree: Path, url: str, c: int, n: int, shards: str, tmp: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{tree / 'bench'}"}
    out = subprocess.run([sys.executable, "-c", DRIVE, url, str(c), str(n), shards, str(tmp)], env=env, cwd=tree,
                         check=True, capture_output=True, text=True, timeout=900)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    if got["failed"]:  # fewer streams than asked for: a lighter load, not the same drive (docs/performance.md)
        raise SystemExit(f"{tree}: {got['failed']} of {got['sent']} requests failed; CPU per event over that "
                         "drive does not compare")
    got["us_per_event"] = cpu_us_per_event(got["cpu_s"], got["audio"])
    return got


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline", default="HEAD~1", help="git revision whose driver is 'old' (default HEAD~1)")
    ap.add_argument("--profile", default="wide")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=6, help="old/new pairs, alternating (order flips every round)")
    ap.add_argument("--shards", default="1")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.concurrency < 1 or args.requests < 1:
        ap.error("--rounds, --concurrency and --requests must be >= 1")
    rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.baseline], capture_output=True,
                         text=True)
    if rev.returncode:
        ap.error(f"--baseline: {args.baseline!r} is not a revision of {ROOT}")
    rows: dict[str, list[dict]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        trees = {"old": export_tree(args.baseline, tmp), "new": ROOT}
        eng = start_engine(tmp, profile=args.profile)
        try:
            for k in range(args.rounds):
                for who in (("old", "new") if k % 2 == 0 else ("new", "old")):
                    got = drive(trees[who], eng.spec.url, args.concurrency, args.requests, args.shards, tmp)
                    rows[who].append(got)
                    print(f"round {k + 1} {who}: {got['us_per_event']:.1f} us/event ({got['audio']} audio events, "
                          f"cpu {got['cpu_s']:.3f} s, loop lag max {got['loop_lag_max_ms']:.2f} ms, "
                          f"page faults {got['page_faults'] if got['page_faults'] is not None else 'not reported'})",
                          file=sys.stderr, flush=True)
        finally:
            eng.stop()
    med = {who: statistics.median(r["us_per_event"] for r in rs) for who, rs in rows.items()}
    ratios = [n["us_per_event"] / o["us_per_event"] for o, n in zip(rows["old"], rows["new"])]
    print(f"profile {args.profile}; C={args.concurrency}; {args.requests} requests; shards {args.shards}; "
          f"{args.rounds} rounds; old = {args.baseline} ({rev.stdout.strip()}); {os.cpu_count()} CPUs")
    print(f"driver CPU per audio event: old {med['old']:.1f} us, new {med['new']:.1f} us, "
          f"new/old {med['new'] / med['old']:.2f} (medians); per round new/old "
          f"{', '.join(f'{r:.2f}' for r in ratios)}")
    if args.json:
        args.json.write_text(json.dumps({
            "command": "python bench/bench_event_cpu.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "baseline": args.baseline, "median_us_per_event": med, "round_ratios": ratios, "rounds": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
