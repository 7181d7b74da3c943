"""One phase of a frozen plan's cells, wherever they run: what the local runner
(console/runner.py) and the cluster dispatcher (console/cluster/dispatch.py) share.

- what a cell is, the cells of a phase in plan order, and what each cell's run sends and records;
- the preamble (`prepare_phase`): the frozen workload checked, the phase refused without
  --resume when it has runs, a dead runner's runs marked incomplete, the cells still to run;
- launches on this host recorded in the store (`StoreLaunches`, the Launcher of the shared
  engine manager and cell loop in engine_adapters/cell_loop.py, which hold the restart rule);
- attempts (`record_attempt`) and why a recorded run is not a successful cell (`cell_problem`).
The rules themselves are in console/runner.py's docstring and docs/plans.md.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from data import candidates
from data.audit import append_event, atomic
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
from engine_adapters.cell_loop import Launch
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
def adapter_spec(engine: EngineSpec, env: dict[str, dict[str, str]], checkpoints: dict[str, dict[str, str]] | None
                 ) -> EngineSpec:
    """The spec to launch: the plan's engine with its real environment (when it has one;
    data.plan_loading.engine_environment) and the checkpoint digests its launch must find
    (data/checkpoints.py frozen_digests)."""
    frozen = checkpoints.get(engine.name, {}) if checkpoints is not None else None
    return replace(engine, env=env.get(engine.name, engine.env), frozen_checkpoints=frozen)


class StoreLaunches:
    """Launches on this host, each an engine_launches row (console.recording.launch_engine) and its
    outcome an attempts row (engine_adapters/cell_loop.py Launcher). A startup failure is logged
    and kept in `failures` (engine -> reason)."""

    def __init__(self, store: Store, plan: Plan, logs_dir: Path, log: Callable[[str], None],
                 env: dict[str, dict[str, str]] | None = None):
        self.store, self.plan, self.logs_dir, self.log = store, plan, logs_dir, log
        self.env = env or {}  # engine name -> real environment (data.plan_loading.engine_environment)
        self.checkpoints = frozen_digests(store, plan.hash)  # each launch must find these (data/checkpoints.py)
        self.failures: dict[str, str] = {}

    def adapter_spec(self, engine: EngineSpec) -> EngineSpec:
        return adapter_spec(engine, self.env, self.checkpoints)

    def start(self, engine: EngineSpec) -> tuple[Any | None, list[Any]]:
        """Spawn and wait for health; a startup failure is recorded (its launch row and an attempt)."""
        from console.recording import launch_engine
        from engine_adapters.lifecycle import EngineStartError

        spec = self.adapter_spec(engine)
        try:
            process = launch_engine(self.store, spec, log_dir=self.logs_dir, plan_hash=self.plan.hash,
                                    checkpoint_cache=self.logs_dir / "checkpoint-sha256.json")
        except EngineStartError as exc:  # the attempt names its own launch row (never "the latest by wall clock")
            record_attempt(self.store, self.plan, engine, "startup_failed", reason=str(exc), launch_id=exc.launch_id)
            self.failures[engine.name] = f"startup failed: {exc}"
            self.log(f"engine {engine.name}: startup failed: {exc}")
            return None, []
        self.log(f"engine {engine.name} ready ({spec.url}, launch {process.launch_id})")
        return process, []

    def stop(self, launch: Launch, outcome: str) -> list[Any]:
        from console.recording import stop_engine

        stop_engine(self.store, launch.process)
        crashed = launch.process.row.get("status") == "crashed"
        record_attempt(self.store, self.plan, launch.engine, outcome, launch_id=launch.launch_id, run_ids=launch.run_ids,
                       reason=launch.process.row.get("failure_reason") if crashed else None)
        return []


def argv_or_reason(engine: EngineSpec) -> list[str]:
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
              "argv": argv_or_reason(engine), "env": engine.env,  # names -> sha256 (data/secrets.py)
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
def pid_matches(pid: int, argv: list[str]) -> bool:
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
        if o["pid"] and pid_matches(o["pid"], json.loads(o["argv_json"])):
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


# -- a phase's result and options ------------------------------------------------------------
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
    from engine_adapters.launch_settings import settings_errors

    if errs := settings_errors(plan):  # the files may have changed since freeze: compared arms still agree
        raise CampaignError(f"plan {plan.hash[:12]}: {errs[0]}" + (f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""))
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
            "preroll_s": plan.metrics.preroll_s, "phase": phase,
            **{k: v for k, v in plan.metrics.as_dict().items() if k.startswith("slo_")}}  # goodput's SLO, if set


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


# -- the preamble -----------------------------------------------------------------------------
@dataclass
class Phase:
    """A phase ready to run: its cells, those still to run and what every run of it sends and records."""
    manifest_hash: str
    cells: list[Cell]
    todo: list[Cell]
    env: dict[str, dict[str, str]]  # engine -> real environment
    requests: dict[int, list[Any]]  # concurrency -> the requests its cells send
    params: dict[str, Any]  # runs.params_json, besides the engine's profile
    recovered: list[str]  # runs a dead runner left open, marked incomplete (--resume)

    def result(self, plan_hash: str, run_ids: list[str], failed: dict[str, str],
               problems: list[tuple[str, str]]) -> RunnerResult:
        return RunnerResult(plan_hash, len(self.cells), len(self.cells) - len(self.todo), run_ids, failed,
                            self.recovered, len(self.todo), problems)


def prepare_phase(store: Store, plan: Plan, opts: RunnerOptions, *, local_gpu: bool = True,
                  where: str = "") -> Phase:
    """Everything before the first cell, the same for a local and a cluster run (module docstring);
    `where` ends the log line (the cluster's shape)."""
    manifest_hash = check_preconditions(store, plan, opts.phase, local_gpu=local_gpu)
    cells = plan_cells(plan, opts.phase)
    env = engine_environment(plan, plan_secrets(store, plan), {c.engine for c in cells})
    refuse_rerun(store, plan, {c.key for c in cells}, opts.resume)
    recovered = recover_interrupted(store, plan, opts.log) if opts.resume else []
    done = completed_cells(store, plan.hash)
    todo = [c for c in cells if c.key not in done]
    phase = Phase(manifest_hash, cells, todo, env, plan_requests(plan, cells, opts.phase),
                  run_params(plan, manifest_hash, opts.phase), recovered)
    opts.log(f"plan {plan.hash[:12]} ({plan.name}): {len(cells)} cells, {len(cells) - len(todo)} already complete, "
             f"{len(todo)} to run{where}; restart={plan.sweep.restart} interleave={plan.sweep.interleave}")
    return phase
