"""The campaign runner: executes a frozen plan's engine x concurrency x repeat cells in plan order.

- Only a frozen, unaltered plan runs; the workload on disk must still match its frozen manifest.
- Cells run in the plan's order: `alternate` interleaves engines within each (concurrency,
  repeat) slot (A, B, A, B ...), `sequential` runs each engine's whole sweep in turn. Warmup
  repeats come first in each slot group, are recorded with kind 'warmup' and never aggregate.
- Engines restart as the plan says: `per_repeat` (fresh launch for every run), `per_cell` (fresh
  launch when the engine or the concurrency changes) or `never` (every engine stays up for the
  whole sweep; such runs are labelled 'exploratory' and never used for claims).
- Every launch is an `engine_launches` row; every launch outcome (measured, startup_failed,
  interrupted) is an `attempts` row and an audit event.
- Each run carries a `cell_key`. `--resume` skips cells that already have a complete run, marks
  runs left 'running' by a dead runner (e.g. SIGKILL) as 'incomplete', and re-runs those cells as
  new runs, so nothing is duplicated and nothing stored is lost or rewritten.
- The holdout phase (`--holdout`) runs the quality arms on the reserved holdout pool and is
  refused until the holdout has been opened (an audit event).

What a local and a cluster run share is in console/cell_executor.py (cells, the preamble, launches
recorded in the store) and engine_adapters/cell_loop.py (the restart rule and the engine manager,
the loop a cluster node runs too); this module runs a phase's cells on this host, or hands them
to the cluster dispatcher (console/cluster/dispatch.py), which only decides where each group runs.
"""

from __future__ import annotations

from collections import deque

from console.cell_executor import (  # noqa: F401 - the runner's public names, re-exported for its callers
    EXPLORATORY_NOTE,
    HOLDOUT_SUFFIX,
    Cell,
    RunnerOptions,
    RunnerResult,
    StoreLaunches,
    cell_problem,
    check_preconditions,
    close_stopped_runs,
    completed_cells,
    drive_spec,
    measured_kind,
    new_cell_run_id,
    plan_cells,
    plan_requests,
    plan_sampling,
    prepare_phase,
    record_attempt,
    recover_interrupted,
    refuse_rerun,
    run_params,
    select_requests,
    store_attempt,
)
from data.plan_model import Plan
from data.profiler import close_plan_windows, exclude_overlapping, open_plan_windows
from data.store import Store
from engine_adapters.cell_loop import NOT_STARTED, EngineManager, Launch, run_cells


def run_plan(store: Store, plan: Plan, opts: RunnerOptions) -> RunnerResult:
    """Execute the plan's cells for one phase; see the module docstring for the rules. With
    `opts.cluster` the cells run on a Ray cluster (console/cluster/dispatch.py)."""
    from console.recording import record_run
    from console.server_scrape import scrape_target, server_scrape
    from engine_adapters.driver import discard_warm, prewarm

    if opts.cluster:
        from console.cluster.dispatch import run_plan_on_cluster

        return run_plan_on_cluster(store, plan, opts)
    log = opts.log
    phase = prepare_phase(store, plan, opts)
    todo = phase.todo
    index = {c.key: i for i, c in enumerate(todo)}
    launches = StoreLaunches(store, plan, opts.artifacts_dir / "logs", log, phase.env)
    problems: list[tuple[str, str]] = []
    run_ids: list[str] = []

    def on_cell(cell: Cell, state: str) -> None:
        if opts.on_cell:
            opts.on_cell(index[cell.key], len(todo), cell, state)

    def skip(cell: Cell, reason: str) -> tuple[()]:
        problems.append((cell.key, reason))
        if reason != NOT_STARTED:  # a failed launch is its cell's end; its engine's later cells are skipped
            on_cell(cell, "skipped")
        return ()

    def drive(cell: Cell, launch: Launch) -> tuple[()]:
        engine = launch.engine
        on_cell(cell, "running")
        run_id = new_cell_run_id(plan, cell)
        spec = drive_spec(plan, cell, run_id, phase.requests[cell.concurrency], opts.artifacts_dir)
        note = EXPLORATORY_NOTE if cell.kind == "exploratory" else None
        launch.run_ids.append(run_id)
        # the engine's own metrics, scraped from this process around the run (console/server_scrape.py)
        with server_scrape(store, scrape_target(run_id, engine, plan.server_metrics.interval_s)):
            rid = record_run(store, spec, engine=cell.engine, kind=cell.kind, plan_hash=plan.hash,
                             cell_key=cell.key, launch_id=launch.launch_id, pool=cell.pool,
                             repeat_index=cell.repeat, note=note,
                             params={**phase.params, "engine_profile": engine.profile}, telemetry=opts.telemetry,
                             on_progress=opts.on_progress, live=opts.live, engine_process=launch.process)
        run_ids.append(rid)
        exclude_overlapping(store)  # inside a profiler window: out of every aggregate (data/profiler.py)
        status = store.scalar("SELECT status FROM runs WHERE run_id = ?", [rid])
        crash = launch.process.exit_cause()
        problem = cell_problem(store, rid)
        if problem:
            problems.append((cell.key, problem))
        detail = f" ({crash})" if crash else ("; no request succeeded" if status == "complete" and problem else "")
        log(f"[{index[cell.key] + 1}/{len(todo)}] {cell.key}: run {rid} {status}{detail}")
        on_cell(cell, status or "unknown")  # a crashed launch is stopped next, by the cell loop
        return ()

    windows = open_plan_windows(store, plan, todo)  # a profiled sweep is one window per engine
    try:
        # run to the end: the local launcher and drive record as they go, so no message is forwarded
        deque(run_cells(todo, plan.sweep.restart, EngineManager(launches), engine_of=lambda c: plan.engine(c.engine),
                        drive=drive, skip=skip, before=lambda c: prewarm()), maxlen=0)
    finally:
        discard_warm()
        close_plan_windows(store, windows)
    return phase.result(plan.hash, run_ids, dict(launches.failures), problems)
