"""`campaign run PLAN [--resume] [--holdout]`: execute a frozen plan (see console/runner.py).

Exit status: 0 only when every cell this invocation ran has a complete run in which a request
succeeded; 1 when a cell failed, measured nothing or was skipped, or a full disk stopped the
campaign; 2 for a refusal before anything ran; 130 when interrupted. A closed stdout (`| head`) neither stops the campaign nor changes its
exit status: it goes on with its output discarded and says so on stderr (measurement is the
point, and everything is in the store); the closing summary then goes to stderr.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from console.commands.db import add_db_arg
from console.commands.plan import check_plan_arg, plan_for_arg
from console.output import guard_stdout
from data.errors import disk_full

if TYPE_CHECKING:
    from rich.console import Console

    from console.live import LiveFeed

STDOUT_CLOSED = ("campaign: stdout is closed (broken pipe); the campaign goes on with its output discarded "
                 "(follow it with `campaign tui` or `campaign runs`); the exit status is the campaign's")


def register(sub) -> None:
    p = sub.add_parser("run", help="run a frozen plan's sweep (engine x concurrency x repeat cells)")
    p.add_argument("plan", help="frozen plan file (must match its frozen hash) or plan hash")
    p.add_argument("--resume", action="store_true", help="continue after an interruption; completed cells are kept")
    p.add_argument("--holdout", action="store_true", help="run the quality arms on the opened holdout pool")
    p.add_argument("--artifacts", help="folder for output audio and engine logs (default: next to the database)")
    p.add_argument("--no-telemetry", action="store_true", help="do not sample the GPU")
    p.add_argument("--cluster", metavar="local|auto|ray://HOST:PORT",
                   help="run the cells as Ray tasks, one GPU each, on this Ray cluster (docs/cluster.md); "
                        "without it everything runs on this host, one cell at a time")
    p.add_argument("--detach", action="store_true",
                   help="run in the background in its own session (survives an SSH drop); follow with `campaign tui`")
    add_db_arg(p)
    p.set_defaults(func=cmd_run)


def _sigterm_to_interrupt(signum, frame):  # noqa: ARG001 - signal handler signature
    raise KeyboardInterrupt


def detach(args) -> int:
    """Re-run this command in a new session with no terminal: closing the SSH connection sends no
    SIGHUP to it, and its output goes to `<db>.run.log`. Progress is followed through the live file.
    Everything that can be checked before the campaign starts is checked here, in the foreground
    (console/preflight.py), so a refusal is an error and exit status 2, not a line in the log."""
    from console.preflight import check_startable
    from data.store import open_store, resolve_db_path

    db = resolve_db_path(args.db).resolve()
    check_plan_arg(args.plan)
    with open_store(db, create=True) as store:
        plan = plan_for_arg(store, args.plan)
        check_startable(store, plan, "holdout" if args.holdout else "sweep", args.resume, args.cluster)
    log_path = db.with_name(db.name + ".run.log")
    argv = [sys.executable, "-m", "console.cli", "run", args.plan, "--db", str(db)]
    argv += ["--resume"] * args.resume + ["--holdout"] * args.holdout + ["--no-telemetry"] * args.no_telemetry
    argv += ["--artifacts", str(Path(args.artifacts).resolve())] if args.artifacts else []
    argv += ["--cluster", args.cluster] if args.cluster else []
    with open(log_path, "ab") as log, open(os.devnull, "rb") as null:
        proc = subprocess.Popen(argv, stdin=null, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=os.getcwd())
    print(f"campaign running in the background (pid {proc.pid}); log {log_path}\n"
          f"follow it with `campaign tui --db {db}`; stop it with `kill {proc.pid}` (the current run is marked "
          f"incomplete; `--resume` continues)")
    return 0


def cmd_run(args) -> int:
    if args.detach:
        return detach(args)
    stdout = guard_stdout(STDOUT_CLOSED)
    try:
        return _run(args, stdout)
    finally:
        sys.stdout = stdout.inner


def _run(args, stdout) -> int:
    from rich.console import Console

    from console.live import LiveFeed
    from data.snapshot import SnapshotServer
    from data.store import open_store, resolve_db_path

    console = Console(stderr=False)
    signal.signal(signal.SIGTERM, _sigterm_to_interrupt)  # `kill` interrupts like Ctrl-C: runs marked incomplete
    # the live file is the running campaign's: it is written only once this process holds the store
    # and has its plan, so a refused run (store in use, bad plan) never touches it
    check_plan_arg(args.plan)  # a mistyped plan file creates no store
    store = open_store(args.db, create=True)
    try:
        plan = plan_for_arg(store, args.plan)
    except BaseException:
        store.close()
        raise
    feed = LiveFeed(resolve_db_path(args.db))
    snapshots = SnapshotServer(store).start()  # readers in other processes get consistent copies
    try:
        with store:  # closes before the feed says "finished", so the TUI may then open the store
            try:
                res = _sweep(args, console, store, plan, feed)
            except Exception as exc:
                cause = disk_full(exc)
                if cause is None:
                    raise
                return _stopped_by_full_disk(args, store, plan, cause)
            finally:
                snapshots.stop()
    finally:
        feed.finished()
    if res is None:
        return 130
    out = stdout.summary_stream
    print(f"plan {res.plan_hash[:12]}: {len(res.run_ids)} run(s) recorded, {res.cells_skipped} cell(s) already complete"
          + (f", {len(res.recovered)} interrupted run(s) marked incomplete" if res.recovered else ""), file=out)
    for engine, why in res.failed_engines.items():
        print(f"engine {engine}: {why}; its remaining cells were skipped (resume to retry)", file=out)
    for key, why in res.problems:
        print(f"cell {key}: {why}", file=out)
    if res.problems:
        print(f"{len(res.problems)} of {res.cells_run} cell(s) did not succeed", file=out)
    out.flush()
    return 0 if res.ok else 1


def cell_summary(store, plan, cell_key: str) -> str | None:
    """One line on a cell's latest run as it ends: requests done, throughput and TTFA p50, read
    from the one metric implementation (stats/metrics, docs/metrics.md) under the plan's parameters."""
    from data.queries import run_seq
    from stats.metrics.registry import throughput_unit
    from stats.metrics.stored import metrics_for_runs

    rows = store.query(f"SELECT run_id, status FROM runs r WHERE plan_hash = ? AND cell_key = ? "
                       f"ORDER BY {run_seq('r')} DESC NULLS LAST LIMIT 1", [plan.hash, cell_key])
    if not rows:
        return None
    m = metrics_for_runs(store, rows, plan.metrics)[rows[0]["run_id"]]
    thr = "-" if m.throughput is None else f"{m.throughput:.2f} ({throughput_unit(m.params.throughput_scale)})"
    ttfa = "-" if m.ttfa_p50_s is None else f"{m.ttfa_p50_s * 1000:.0f} ms"
    failed = f", {m.failed} failed" if m.failed else ""
    return f"    {cell_key}: {m.completed}/{m.requests} requests done{failed}, throughput {thr}, TTFA p50 {ttfa}"


def _stopped_by_full_disk(args, store, plan, cause: str) -> int:
    """A write found no room mid-campaign: the open run is marked incomplete with the cause where
    the store still takes it, one line says what happened, and the exit status is a failed
    run's (1), not a refusal's (2): things had run (docs/results.md, "A full disk")."""
    from console.runner import close_stopped_runs

    then = close_stopped_runs(store, plan, cause)
    print(f"campaign: the campaign stopped: the disk is full ({cause}); {then}. Free space, then continue with "
          f"`campaign run {args.plan} --resume`", file=sys.stderr)
    return 1


def _sweep(args, console: Console, store, plan, feed: LiveFeed):
    """Run the sweep with progress output; None when interrupted."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from console.runner import RunnerOptions, run_plan

    feed.campaign(plan.name, plan.hash, metrics=plan.metrics.as_dict())
    artifacts = Path(args.artifacts) if args.artifacts else store.path.resolve().parent / "artifacts"
    interactive = console.is_terminal
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=console, disable=not interactive, transient=False)
    cells_task = progress.add_task("cells", total=None)
    req_task = progress.add_task("requests", total=None)

    def log(msg: str) -> None:
        if interactive:
            progress.console.print(msg, highlight=False, markup=False)
        else:
            print(msg, flush=True)

    def on_cell(i: int, total: int, cell, state: str) -> None:
        feed.cell(i, total, cell, state)
        if state == "running":
            progress.update(cells_task, total=total, completed=i, description=f"cell {cell.key}")
            progress.reset(req_task, total=None, description="requests")
        else:
            progress.update(cells_task, total=total, completed=i + 1)
            if state != "skipped":
                line = cell_summary(store, plan, cell.key)
                if line:
                    log(line)

    def on_progress(done: int, total: int) -> None:
        progress.update(req_task, total=total, completed=done)

    opts = RunnerOptions(artifacts_dir=artifacts, resume=args.resume, phase="holdout" if args.holdout else "sweep",
                         telemetry=not args.no_telemetry, log=log, on_cell=on_cell, on_progress=on_progress, live=feed,
                         cluster=args.cluster)
    try:
        with progress:
            return run_plan(store, plan, opts)
    except KeyboardInterrupt:
        print(f"campaign: interrupted; the current run is marked incomplete. Continue with "
              f"`campaign run {args.plan} --resume`", file=sys.stderr)
        return None
