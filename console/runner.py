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
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from data import candidates
from data.audit import append_event, atomic
from data.profiler import close_plan_windows, exclude_overlapping, open_plan_windows
from data.checkpoints import frozen_digests
from data.digest import row_sha256, run_digest
from data.errors import CampaignError, first_line
from data.hashing import canonical_json
from data.launches import update_launch
from data.manifest import build_manifest, holdout_opened, load_plan_workload
from data.plan_loading import engine_environment, plan_secrets
from data.plan_model import EngineSpec, Plan
from data.store import Store, utcnow
from data.workload import Utterance
from engine_adapters.process_group import stop_group

HOLDOUT_SUFFIX = "@holdout"
EXPLORATORY_NOTE = "exploratory: no restart between cells"


# -- cells ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    engine: str
    concurrency: int
    kind: str  # warmup, measured, exploratory, profiled
    repeat: int  # counted separately for warmups and measured repeats
    pool: str | None
    phase: str = "sweep"  # sweep or holdout

    @property
    def key(self) -> str:
        return f"{self.engine}/c{self.concurrency}/{self.kind}/{self.repeat}" + (HOLDOUT_SUFFIX if self.phase == "holdout" else "")


def measured_kind(plan: Plan) -> str:
    """A sweep without restarts between cells is exploratory whatever the plan calls it."""
    if plan.sweep.restart == "never" and plan.sweep.kind == "measured":
        return "exploratory"
    return plan.sweep.kind


def plan_cells(plan: Plan, phase: str = "sweep") -> list[Cell]:
    """All cells of a phase in execution order."""
    if phase == "holdout":
        engines = list(dict.fromkeys(e for e in (plan.quality.baseline, *plan.quality_candidates) if e))
        if not engines:
            raise CampaignError(f"plan {plan.hash[:12]}: quality.baseline/candidate not set; no holdout phase")
        concurrencies, pool = plan.quality.concurrencies, plan.quality.pool
    else:
        engines = [e.name for e in plan.engines]
        concurrencies, pool = plan.sweep.concurrencies, plan.workload.pool
    slots = [("warmup", r) for r in range(plan.sweep.warmup_repeats)]
    slots += [(measured_kind(plan), r) for r in range(plan.sweep.measured_repeats)]
    if plan.sweep.interleave == "alternate":
        return [Cell(e, c, k, r, pool, phase) for c in concurrencies for k, r in slots for e in engines]
    return [Cell(e, c, k, r, pool, phase) for e in engines for c in concurrencies for k, r in slots]


def select_requests(utterances: list[Utterance], n: int | None) -> list[Utterance]:
    """The first n utterances of the pool in pool order, cycling if the pool is smaller; the same
    list for every engine and repeat so runs pair by utterance."""
    if not utterances:
        raise CampaignError("workload pool is empty")
    if n is None:
        return list(utterances)
    return [utterances[i % len(utterances)] for i in range(n)]


# -- engine lifecycle --------------------------------------------------------------------------
@dataclass
class Launch:
    engine: EngineSpec
    process: Any  # engine_adapters.lifecycle.EngineProcess
    run_ids: list[str] = field(default_factory=list)

    @property
    def launch_id(self) -> str:
        return self.process.launch_id


class EngineManager:
    """Starts and stops engines through the shared lifecycle adapters (console.recording.launch_engine
    stores every launch in engine_launches) and records each launch's outcome as an attempt."""

    def __init__(self, store: Store, plan: Plan, logs_dir: Path, log: Callable[[str], None],
                 env: dict[str, dict[str, str]] | None = None):
        self.store, self.plan, self.logs_dir, self.log = store, plan, logs_dir, log
        self.env = env or {}  # engine name -> real environment (data.plan_loading.engine_environment)
        self.up: dict[str, Launch] = {}
        self.checkpoints = frozen_digests(store, plan.hash)  # each launch must find these (data/checkpoints.py)

    def adapter_spec(self, engine: EngineSpec) -> EngineSpec:
        """The spec to launch: the plan's engine with its real environment (when it has one)."""
        frozen = self.checkpoints.get(engine.name, {}) if self.checkpoints is not None else None
        return replace(engine, env=self.env.get(engine.name, engine.env), frozen_checkpoints=frozen)

    def launch(self, engine: EngineSpec) -> Launch:
        """Spawn and wait for health; a startup failure is recorded and raised as EngineStartupFailed."""
        from console.recording import launch_engine
        from engine_adapters.lifecycle import EngineStartError

        spec = self.adapter_spec(engine)
        try:
            process = launch_engine(self.store, spec, log_dir=self.logs_dir, plan_hash=self.plan.hash,
                                    checkpoint_cache=self.logs_dir / "checkpoint-sha256.json")
        except EngineStartError as exc:  # the attempt names its own launch row (never "the latest by wall clock")
            record_attempt(self.store, self.plan, engine, "startup_failed", reason=str(exc), launch_id=exc.launch_id)
            raise EngineStartupFailed(f"startup failed: {exc}") from None
        launch = Launch(engine, process)
        self.up[engine.name] = launch
        self.log(f"engine {engine.name} ready ({spec.url}, launch {process.launch_id})")
        return launch

    def stop(self, name: str, outcome: str = "measured") -> None:
        from console.recording import stop_engine

        launch = self.up.pop(name, None)
        if launch is None:
            return
        stop_engine(self.store, launch.process)
        crashed = launch.process.row.get("status") == "crashed"
        record_attempt(self.store, self.plan, launch.engine, outcome, launch_id=launch.launch_id, run_ids=launch.run_ids,
                       reason=launch.process.row.get("failure_reason") if crashed else None)

    def stop_all(self, outcome: str = "measured") -> None:
        for name in list(self.up):
            self.stop(name, outcome)


class EngineStartupFailed(CampaignError):
    """An engine did not become healthy; recorded as data, the runner skips its cells."""


def _argv_or_reason(engine: EngineSpec) -> list[str]:
    from engine_adapters.specs import launch_argv

    try:
        return launch_argv(engine)
    except CampaignError as exc:
        return [f"<no argv: {exc}>"]


def record_attempt(store: Store, plan: Plan, engine: EngineSpec, outcome: str, *, reason: str | None = None,
                   launch_id: str | None = None, run_ids: list[str] | None = None) -> str:
    """One attempts row and its event; the configuration's candidate is registered and moved on by
    the outcome in the same transaction (data/candidates.py)."""
    from console.candidates import engine_config

    config = {"adapter": engine.adapter, "revision": engine.revision, "profile": engine.profile,
              "argv": _argv_or_reason(engine), "env": engine.env,  # names -> sha256 (data/secrets.py)
              "env_passthrough": engine.env_passthrough}
    with atomic(store):
        key = candidates.register(store, engine.name, engine_config(engine, plan_sampling(plan)),
                                  hypothesis=engine.hypothesis, plan_hash=plan.hash)
        attempt_id = store_attempt(store, plan.hash, engine.name, config, outcome, reason=reason, launch_id=launch_id,
                                   run_ids=run_ids, config_sha256=key)
        candidates.record_outcome(store, key, outcome, plan_hash=plan.hash, reason=reason)
    return attempt_id


def store_attempt(store: Store, plan_hash: str | None, engine: str, config: dict[str, Any], outcome: str, *,
                  reason: str | None = None, launch_id: str | None = None, run_ids: list[str] | None = None,
                  config_sha256: str | None = None) -> str:
    """Insert an attempts row and its attempt_recorded event (row hash included, for audit verify)."""
    attempt_id = f"A-{uuid.uuid4().hex[:12]}"
    with atomic(store):
        store.insert("attempts", {
            "attempt_id": attempt_id, "plan_hash": plan_hash, "created_at": utcnow(), "engine": engine,
            "config_json": canonical_json(config), "outcome": outcome, "reason": reason, "launch_id": launch_id,
            "run_ids_json": json.dumps(run_ids or []), "config_sha256": config_sha256,
        })
        append_event(store, "attempt_recorded", plan_hash=plan_hash, subject=attempt_id,
                     payload={"engine": engine, "outcome": outcome, "reason": reason, "launch_id": launch_id,
                              "runs": len(run_ids or []), "config_sha256": config_sha256,
                              **row_sha256(store, "attempts", "attempt_id", attempt_id)})  # for audit verify
    return attempt_id


# -- resume bookkeeping ----------------------------------------------------------------------
def _pid_matches(pid: int, argv: list[str]) -> bool:
    """Is `pid` still the process we launched (guards against pid reuse)?"""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return [c.decode(errors="replace") for c in cmdline if c] == argv


def _mark_open_runs(store: Store, plan: Plan, note: str, reason: str) -> list[dict[str, Any]]:
    """Mark the plan's runs still 'running' as 'incomplete', `note` added to their note and
    `reason` in a run_ended event each; returns them."""
    stale = store.query("SELECT run_id, cell_key FROM runs WHERE plan_hash = ? AND status = 'running'", [plan.hash])
    for r in stale:
        with atomic(store):
            store.con.execute("UPDATE runs SET status = 'incomplete', note = coalesce(note || '; ', '') || ? WHERE run_id = ?",
                              [note, r["run_id"]])
            append_event(store, "run_ended", plan_hash=plan.hash, subject=r["run_id"],
                         payload={"status": "incomplete", "cell_key": r["cell_key"], "reason": reason,
                                  "digest": run_digest(store, r["run_id"])})
    return stale


def close_stopped_runs(store: Store, plan: Plan, cause: str) -> str:
    """After a full disk stopped the campaign: mark its open run (if the runner could not close
    it) incomplete with the cause, so that --resume and every reader see what happened; returns
    what became of it, one line (the store itself may have no room: --resume then marks the
    run, docs/results.md, "A full disk")."""
    try:
        marked = _mark_open_runs(store, plan, f"stopped: the disk is full ({cause})", f"disk full: {cause}")
    except Exception as exc:  # noqa: BLE001 - best effort: the same full disk may refuse this too
        return f"the open run could not be marked ({first_line(exc)}); `--resume` marks it incomplete"
    if marked:
        return f"run {marked[0]['run_id']} is marked incomplete with this cause"
    return "the run it stopped is recorded as failed with this cause"


def recover_interrupted(store: Store, plan: Plan, log: Callable[[str], None]) -> list[str]:
    """Mark runs a dead runner left 'running' as 'incomplete' (an audit event each) and stop any
    engine it left up. Safe: the DuckDB file lock means no live runner holds this store."""
    stale = _mark_open_runs(store, plan, "interrupted: runner died mid-run (found on resume)",
                            "runner died mid-run; found on resume")
    for r in stale:
        log(f"run {r['run_id']} ({r['cell_key']}) was interrupted; marked incomplete, its cell will run again")
    orphans = store.query(
        "SELECT launch_id, engine, pid, argv_json, failure_reason FROM engine_launches WHERE plan_hash = ? "
        "AND status IN ('starting', 'ready')",
        [plan.hash])
    for o in orphans:
        if o["pid"] and _pid_matches(o["pid"], json.loads(o["argv_json"])):
            # not our child: its end is seen in /proc; returns once the group is gone, so the
            # port is free for the relaunch (engine_adapters/process_group.py)
            stop_group(o["pid"], grace_s=10.0, kill_wait_s=5.0)
            log(f"stopped engine {o['engine']} (pid {o['pid']}) left running by the interrupted runner")
        update_launch(store, {"launch_id": o["launch_id"], "status": "crashed",
                              "failure_reason": o["failure_reason"] if o["failure_reason"] is not None
                              else "runner died while the engine was up"})
    return [r["run_id"] for r in stale]


def completed_cells(store: Store, plan_hash: str) -> set[str]:
    return {r["cell_key"] for r in store.query(
        "SELECT DISTINCT cell_key FROM runs WHERE plan_hash = ? AND status = 'complete'", [plan_hash])}


# -- the runner -------------------------------------------------------------------------------
@dataclass
class RunnerResult:
    plan_hash: str
    cells_total: int
    cells_skipped: int  # already complete (resume)
    run_ids: list[str]
    failed_engines: dict[str, str]
    recovered: list[str]
    cells_run: int = 0  # cells this invocation set out to run
    problems: list[tuple[str, str]] = field(default_factory=list)  # (cell key, why it did not succeed)

    @property
    def ok(self) -> bool:
        """Every cell of this invocation has a complete run in which a request succeeded: the exit
        status of `campaign run` (console/commands/run.py)."""
        return not self.failed_engines and not self.problems


def cell_problem(store: Store, run_id: str) -> str | None:
    """Why a recorded run does not count as a successful cell, or None."""
    row = store.con.execute(
        "SELECT r.status, (SELECT count(*) FROM requests q WHERE q.run_id = r.run_id AND q.outcome = 'ok' "
        "AND NOT q.is_warmup) FROM runs r WHERE r.run_id = ?", [run_id]).fetchone()
    if row is None:
        return f"run {run_id} is not in the store"
    status, ok = row
    if status != "complete":
        return f"run {run_id} {status}"
    if not ok:
        return f"no request succeeded (run {run_id})"
    return None


@dataclass
class RunnerOptions:
    artifacts_dir: Path
    resume: bool = False
    phase: str = "sweep"
    telemetry: bool = True
    log: Callable[[str], None] = print
    on_cell: Callable[[int, int, Cell, str], None] | None = None  # (index, total, cell, state)
    on_progress: Callable[..., None] | None = None  # passed through to record_run
    live: Any = None  # console.live.LiveFeed, passed through to record_run
    cluster: str | None = None  # local, auto or ray://HOST:PORT: cells run as Ray tasks (console/cluster/)
    on_node: Callable[[dict[str, Any]], None] | None = None  # cluster only: a group was placed on a node


def check_preconditions(store: Store, plan: Plan, phase: str, local_gpu: bool = True) -> str:
    """Workload unchanged since freeze; holdout opened for the holdout phase; GPU as expected
    (on this host; a cluster run checks its nodes instead, console/cluster/shape.py).
    Returns the manifest hash."""
    frozen = store.query(
        "SELECT payload_json FROM audit_events WHERE kind IN ('plan_frozen', 'addendum_frozen') AND plan_hash = ?",
        [plan.hash])
    manifest = build_manifest(plan, f"plan {plan.hash[:12]}")
    if frozen:
        pinned = json.loads(frozen[0]["payload_json"]).get("manifest_hash")
        if pinned and pinned != manifest.hash:
            raise CampaignError(f"plan {plan.hash[:12]}: workload {manifest.root} changed since the plan was frozen "
                                f"(manifest {manifest.hash[:12]} != frozen {pinned[:12]})")
    if phase == "holdout":
        if not plan.workload.holdout_pool:
            raise CampaignError(f"plan {plan.hash[:12]}: workload.holdout_pool is not set")
        if not holdout_opened(store, plan.hash):
            raise CampaignError(f"plan {plan.hash[:12]}: holdout pool {plan.workload.holdout_pool!r} is reserved; open it "
                                f"first with `campaign plan open-holdout PLAN --reason ...` (an audit event)")
    if plan.gpu.expected_name and local_gpu:
        from engine_adapters.telemetry import gpu_identity

        gpus, status = gpu_identity()
        names = sorted({g["name"] for g in gpus})
        if plan.gpu.expected_name not in names:
            raise CampaignError(f"plan {plan.hash[:12]}: gpu.expected_name: {plan.gpu.expected_name!r} not found "
                                f"(this host: {', '.join(names) if names else status})")
    return manifest.hash


def refuse_rerun(store: Store, plan: Plan, keys: set[str], resume: bool) -> None:
    """A phase that already has runs continues only with --resume."""
    existing = [r for r in store.query("SELECT run_id, cell_key, status FROM runs WHERE plan_hash = ?", [plan.hash])
                if r["cell_key"] in keys]
    if existing and not resume:
        done = sum(r["status"] == "complete" for r in existing)
        raise CampaignError(f"plan {plan.hash[:12]} already has {len(existing)} run(s) in this phase ({done} complete); "
                            f"use --resume to continue without repeating completed cells")


def plan_requests(plan: Plan, cells: list[Cell], phase: str) -> dict[int, list[Any]]:
    """concurrency -> the requests every cell of the phase at that concurrency sends
    (engine_adapters.driver.RequestSpec): the same list for every engine and repeat, so runs pair
    by utterance; the sweep sends `plan.requests_at(C)`, the holdout its whole pool."""
    from engine_adapters.driver import RequestSpec

    workload = load_plan_workload(plan)
    pool_utts = workload.pool(cells[0].pool) if cells else []
    out: dict[int, list[Any]] = {}
    for c in sorted({cell.concurrency for cell in cells}):
        n_req = None if phase == "holdout" else plan.requests_at(c)
        out[c] = [RequestSpec(u.utt_id, u.target_text, u.prompt_wav, u.prompt_text)
                  for u in select_requests(pool_utts, n_req)]
    return out

def plan_sampling(plan: Plan) -> dict[str, Any]:
    """The sampling fields every request sends and every run records, as the plan writes them."""
    return dict(plan.sampling.fields)


def run_params(plan: Plan, manifest_hash: str, phase: str) -> dict[str, Any]:
    """The parameters every run of the phase records (runs.params_json), besides the engine's profile."""
    return {"sampling": plan_sampling(plan), "timeout_s": plan.sweep.timeout_s, "restart": plan.sweep.restart,
            "interleave": plan.sweep.interleave, "manifest_hash": manifest_hash,
            "throughput_scale": plan.metrics.throughput_scale, "stall_threshold_s": plan.metrics.stall_threshold_s,
            "preroll_s": plan.metrics.preroll_s, "phase": phase}


def new_cell_run_id(plan: Plan, cell: Cell) -> str:
    return f"{plan.hash[:8]}-{cell.engine}-c{cell.concurrency}-{cell.kind[0]}{cell.repeat}-{uuid.uuid4().hex[:6]}"


def drive_spec(plan: Plan, cell: Cell, run_id: str, requests: list[Any], artifacts_dir: Path) -> Any:
    """The DriveSpec of one cell's run (engine_adapters.driver)."""
    from engine_adapters.driver import DriveSpec

    engine = plan.engine(cell.engine)
    return DriveSpec(run_id=run_id, url=engine.url, dialect=engine.dialect, concurrency=cell.concurrency,
                     requests=requests, warmup_requests=plan.sweep.warmup_requests, timeout_s=plan.sweep.timeout_s,
                     artifacts_dir=artifacts_dir, sampling=plan_sampling(plan),
                     request_options=dict(engine.request), shards=plan.sweep.driver_shards,
                     busy_poll_us=plan.sweep.driver_busy_poll_us)


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
    manifest_hash = check_preconditions(store, plan, opts.phase)
    cells = plan_cells(plan, opts.phase)
    env = engine_environment(plan, plan_secrets(store, plan), {c.engine for c in cells})
    keys = {c.key for c in cells}
    refuse_rerun(store, plan, keys, opts.resume)
    recovered: list[str] = []
    if opts.resume:
        recovered = recover_interrupted(store, plan, log)
    done = completed_cells(store, plan.hash)
    todo = [c for c in cells if c.key not in done]

    requests = plan_requests(plan, cells, opts.phase)
    params_base = run_params(plan, manifest_hash, opts.phase)

    engines = EngineManager(store, plan, opts.artifacts_dir / "logs", log, env)
    failed: dict[str, str] = {}
    problems: list[tuple[str, str]] = []
    run_ids: list[str] = []
    current: dict[str, int] = {}  # engine -> concurrency it served last (for per_cell restarts)
    log(f"plan {plan.hash[:12]} ({plan.name}): {len(cells)} cells, {len(cells) - len(todo)} already complete, "
        f"{len(todo)} to run; restart={plan.sweep.restart} interleave={plan.sweep.interleave}")
    outcome = "measured"
    windows = open_plan_windows(store, plan, todo)  # a profiled sweep is one window per engine
    try:
        for i, cell in enumerate(todo):
            if cell.engine in failed:
                problems.append((cell.key, "skipped: its engine did not start"))
                if opts.on_cell:
                    opts.on_cell(i, len(todo), cell, "skipped")
                continue
            engine = plan.engine(cell.engine)
            restart = plan.sweep.restart
            fresh = (restart == "per_repeat"
                     or cell.engine not in engines.up
                     or (restart == "per_cell" and current.get(cell.engine) != cell.concurrency))
            prewarm()  # the run's driver process starts while the engine does (docs/performance.md)
            if fresh:
                if restart != "never":
                    engines.stop_all()  # one engine at a time on the GPU
                try:
                    engines.launch(engine)
                except EngineStartupFailed as exc:
                    failed[cell.engine] = str(exc)
                    problems.append((cell.key, "its engine did not start"))
                    log(f"engine {cell.engine}: {exc}")
                    continue
            launch = engines.up[cell.engine]
            current[cell.engine] = cell.concurrency
            if opts.on_cell:
                opts.on_cell(i, len(todo), cell, "running")
            run_id = new_cell_run_id(plan, cell)
            spec = drive_spec(plan, cell, run_id, requests[cell.concurrency], opts.artifacts_dir)
            note = EXPLORATORY_NOTE if cell.kind == "exploratory" else None
            launch.run_ids.append(run_id)
            # the engine's own metrics, scraped from this process around the run (console/server_scrape.py)
            with server_scrape(store, scrape_target(run_id, engine, plan.server_metrics.interval_s)):
                rid = record_run(store, spec, engine=cell.engine, kind=cell.kind, plan_hash=plan.hash,
                                 cell_key=cell.key, launch_id=launch.launch_id, pool=cell.pool,
                                 repeat_index=cell.repeat, note=note,
                                 params={**params_base, "engine_profile": engine.profile}, telemetry=opts.telemetry,
                                 on_progress=opts.on_progress, live=opts.live, engine_process=launch.process)
            run_ids.append(rid)
            exclude_overlapping(store)  # inside a profiler window: out of every aggregate (data/profiler.py)
            status = store.scalar("SELECT status FROM runs WHERE run_id = ?", [rid])
            crash = launch.process.exit_cause()
            problem = cell_problem(store, rid)
            if problem:
                problems.append((cell.key, problem))
            detail = f" ({crash})" if crash else ("; no request succeeded" if status == "complete" and problem else "")
            log(f"[{i + 1}/{len(todo)}] {cell.key}: run {rid} {status}{detail}")
            if crash:  # recorded as a crashed launch; the engine's next cell gets a fresh one
                engines.stop(cell.engine)
            if opts.on_cell:
                opts.on_cell(i, len(todo), cell, status or "unknown")
    except BaseException:
        outcome = "interrupted"
        raise
    finally:
        discard_warm()
        engines.stop_all(outcome)
        close_plan_windows(store, windows)
    return RunnerResult(plan.hash, len(cells), len(cells) - len(todo), run_ids, failed, recovered, len(todo), problems)
