"""The campaign's own overhead: the share of a sweep's wall time spent outside measured run
windows, and where it goes (docs/performance.md).

    python bench/bench_campaign_overhead.py [--plans demo,real] [--concurrencies 1 8 32] [--repeats N]
        [--no-telemetry] [--json PATH]

Each plan is `campaign plan init --demo` (two reference-engine profiles, restart per repeat),
frozen into a fresh store and run in this process through `console.runner.run_plan`, exactly as
`campaign run` runs it. `demo` keeps the demo's sweep (16 requests per run); `real` is the same
plan at a real size: 320 requests per run, C = 16 and 32, no warmup repeat, one measured repeat.
--concurrencies and --repeats (measured repeats; no warmup) shrink either for a quick look.

The phases are timed by wrapping the functions the runner calls (console.recording's
launch_engine, stop_engine, DriverProcess and record_run); nothing is replaced. A run's measured
window is its drive: first request sent to last request ended (requests.t_send_ns / t_end_ns,
warmup requests included). Breakdown of everything else:

- engine launch + health wait, engine stop;
- run set-up: record_run from entry to the driver process start (runs row, telemetry identity,
  run_started event);
- driver start: the driver process start to its first request sent (spawn, imports, request
  bodies, collector freeze);
- store after drive: last request ended to record_run's return (records still being decoded and
  stored, the driver's exit, the digest, run_ended);
- other: the rest (plan checks, manifest, workload, attempts and audit rows, logging).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import console.recording as recording  # noqa: E402
from console.runner import RunnerOptions, run_plan  # noqa: E402
from data.plan_loading import load_plan  # noqa: E402
from data.store import open_store  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
PHASES = ("engine launch + health", "engine stop", "run set-up", "driver start", "store after drive", "other")


class Timings:
    """Seconds per phase, plus every run's (record_run entry, driver start, record_run exit) in
    perf_counter_ns, to be joined with the stored drive windows."""

    def __init__(self) -> None:
        self.phase: dict[str, float] = defaultdict(float)
        self.runs: dict[str, dict[str, int]] = {}

    def wrap(self, name: str, fn):
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.phase[name] += time.perf_counter() - t
        return timed


def instrument(t: Timings):
    """Wrap the runner's calls into console.recording; returns a function that undoes it."""
    saved = {k: getattr(recording, k) for k in ("launch_engine", "stop_engine", "DriverProcess", "record_run")}
    recording.launch_engine = t.wrap("engine launch + health", saved["launch_engine"])
    recording.stop_engine = t.wrap("engine stop", saved["stop_engine"])

    class TimedDriver(saved["DriverProcess"]):
        def start(self):
            t.runs.setdefault(self.spec.run_id, {})["driver_start"] = time.perf_counter_ns()
            return super().start()

    recording.DriverProcess = TimedDriver
    inner = saved["record_run"]

    def record_run(store, spec, **kw):
        t.runs.setdefault(spec.run_id, {})["enter"] = time.perf_counter_ns()
        try:
            return inner(store, spec, **kw)
        finally:
            t.runs[spec.run_id]["exit"] = time.perf_counter_ns()

    recording.record_run = record_run

    def undo() -> None:
        for k, v in saved.items():
            setattr(recording, k, v)
    return undo


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def campaign(*args: str) -> None:
    """One `campaign` command; its one-line error becomes this bench's."""
    proc = subprocess.run([sys.executable, "-m", "console.cli", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))})
    if proc.returncode:
        raise SystemExit(f"bench_campaign_overhead: `campaign {' '.join(args)}` failed: "
                         f"{(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")


def make_plan(tmp: Path, kind: str, concurrencies: list[int] | None, repeats: int | None) -> Path:
    path = tmp / f"{kind}-plan.json"
    campaign("plan", "init", "--demo", "-o", str(path))
    plan = json.loads(path.read_text())
    sweep = plan["sweep"]
    if kind == "real":
        sweep.update(requests_per_run=320, concurrencies=[16, 32], warmup_repeats=0, measured_repeats=1)
    if concurrencies:
        sweep["concurrencies"] = concurrencies
    if repeats:
        sweep.update(warmup_repeats=0, measured_repeats=repeats)
    cs = sweep["concurrencies"]
    for rule in plan.get("decision_rules", []):  # rules and quality cells name sweep concurrencies
        if "concurrencies" in rule:
            rule["concurrencies"] = [c for c in rule["concurrencies"] if c in cs] or cs[:1]
    plan["quality"]["concurrencies"] = [c for c in plan["quality"]["concurrencies"] if c in cs] or cs[:1]
    root = Path(plan["workload"]["root"])
    plan["workload"]["root"] = str(root if root.is_absolute() else REPO / root)
    for engine in plan["engines"]:  # free ports: the demo's 8091 may be taken on a shared host
        engine["port"] = free_port()
    plan["name"] = f"overhead-{kind}"
    path.write_text(json.dumps(plan, indent=1))
    return path


def measure(kind: str, concurrencies: list[int] | None = None, repeats: int | None = None,
            telemetry: bool = True) -> dict:
    """Run one plan's sweep and return its wall time, windows and breakdown (seconds)."""
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        plan_path = make_plan(tmp, kind, concurrencies, repeats)
        db = tmp / "campaign.duckdb"
        campaign("plan", "freeze", str(plan_path), "--db", str(db))
        t = Timings()
        undo = instrument(t)
        try:
            with open_store(db) as store:
                plan = load_plan(plan_path, store)
                t0 = time.perf_counter()
                result = run_plan(store, plan, RunnerOptions(artifacts_dir=tmp / "artifacts", telemetry=telemetry,
                                                             log=lambda line: None))
                wall = time.perf_counter() - t0
                windows = store.query("SELECT run_id, min(t_send_ns) AS a, max(t_end_ns) AS b, count(*) AS n "
                                      "FROM requests GROUP BY run_id")
        finally:
            undo()
    measured = sum((w["b"] - w["a"]) / 1e9 for w in windows)
    phase = dict(t.phase)
    win = {w["run_id"]: w for w in windows}
    phase["run set-up"] = sum((r["driver_start"] - r["enter"]) / 1e9 for r in t.runs.values() if "driver_start" in r)
    phase["driver start"] = sum((win[k]["a"] - r["driver_start"]) / 1e9 for k, r in t.runs.items() if k in win)
    phase["store after drive"] = sum((r["exit"] - win[k]["b"]) / 1e9 for k, r in t.runs.items() if k in win)
    phase["other"] = wall - measured - sum(phase.get(p, 0.0) for p in PHASES if p != "other")
    return {"plan": kind, "runs": len(windows), "requests": sum(w["n"] for w in windows), "ok": result.ok,
            "problems": result.problems + [(k, v) for k, v in result.failed_engines.items()],
            "wall_s": wall, "measured_s": measured, "overhead_share": 1 - measured / wall,
            "phases_s": {p: phase.get(p, 0.0) for p in PHASES}}


def print_result(r: dict) -> None:
    print(f"plan {r['plan']}: {r['runs']} runs, {r['requests']} requests, wall {r['wall_s']:.1f} s, measured windows "
          f"{r['measured_s']:.1f} s, overhead {100 * r['overhead_share']:.1f} % of wall{'' if r['ok'] else ' (problems: ' + str(r['problems']) + ')'}")
    for p in PHASES:
        s = r["phases_s"][p]
        print(f"  {p:<24} {s:>8.2f} s  {100 * s / r['wall_s']:>5.1f} %  ({s / max(r['runs'], 1):.2f} s per run)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plans", default="demo,real", help="comma-separated: demo, real")
    ap.add_argument("--concurrencies", nargs="+", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=None, help="measured repeats (and no warmup repeat)")
    ap.add_argument("--no-telemetry", action="store_true")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    kinds = [k.strip() for k in args.plans.split(",") if k.strip()]
    bad = [k for k in kinds if k not in ("demo", "real")]
    if bad or not kinds:
        ap.error(f"--plans: unknown plan {bad[0] if bad else '(none)'!r}; choose from demo, real")
    results = []
    for kind in kinds:
        results.append(measure(kind, args.concurrencies, args.repeats, not args.no_telemetry))
        print_result(results[-1])
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "command": "python bench/bench_campaign_overhead.py " + " ".join(argv if argv is not None else sys.argv[1:]),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
            "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
