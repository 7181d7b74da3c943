"""Shared run selection: the one definition of which runs enter an aggregate.

Profiled, exploratory and warmup runs, runs that did not complete and explicitly excluded runs stay
in the store but never enter aggregates; everything that aggregates calls `aggregate_runs`.
"""

from __future__ import annotations

from typing import Any

from data.store import Store

AGGREGATE_KIND = "measured"

# What part of a campaign a run measured (docs/results.md, "Phases"), from what the run recorded:
# its kind, its plan and the phase its cells ran in (`runs.params_json` "phase": sweep, holdout,
# equivalence; console/cell_executor.py). `smoke` is the kind of a smoke run (a few requests per
# engine before a campaign), declared here so that no aggregate ever takes one;
# `imported` is the phase of figures imported from outside (imported_results), never a run's.
PHASES = ("sweep", "quality", "equivalence", "probe", "smoke", "imported")
SMOKE_KIND = "smoke"


def run_phase(alias: str = "r") -> str:
    """SQL: the run's phase (PHASES). A run of no plan (`campaign probe`) is a probe; a plan's run
    in the holdout phase is a quality run; any other run of a plan is the sweep's."""
    phase = f"({alias}.params_json->>'$.phase')"
    return (f"CASE WHEN {alias}.kind = '{SMOKE_KIND}' OR {phase} = 'smoke' THEN 'smoke' "
            f"WHEN {alias}.kind = 'equivalence' OR {phase} = 'equivalence' THEN 'equivalence' "
            f"WHEN {alias}.plan_hash IS NULL OR {phase} = 'probe' THEN 'probe' "
            f"WHEN {phase} = 'holdout' THEN 'quality' ELSE 'sweep' END")


def in_aggregates(alias: str = "r") -> str:
    """SQL: the run enters aggregates (measured, complete, not excluded)."""
    return (f"({alias}.kind = '{AGGREGATE_KIND}' AND {alias}.status = 'complete' "
            f"AND NOT EXISTS (SELECT 1 FROM exclusions x WHERE x.run_id = {alias}.run_id))")


# Before/after is the audit sequence, never a clock (started_at, frozen_at, created_at can carry any
# date): a row's place is the seq of the first event that announced it. SQL for ORDER BY.
def run_seq(alias: str = "r") -> str:
    """The seq of a run's run_started event."""
    return f"(SELECT min(e.seq) FROM audit_events e WHERE e.kind = 'run_started' AND e.subject = {alias}.run_id)"


def launch_seq(alias: str) -> str:
    """The seq of a launch's first launch_recorded event."""
    return f"(SELECT min(e.seq) FROM audit_events e WHERE e.kind = 'launch_recorded' AND e.subject = {alias}.launch_id)"


def plan_seq(alias: str) -> str:
    """The seq of a plan's or addendum's freeze event."""
    return (f"(SELECT min(e.seq) FROM audit_events e WHERE e.kind IN ('plan_frozen', 'addendum_frozen') "
            f"AND e.plan_hash = {alias}.plan_hash)")


_STARTED_SEQ = run_seq("r")


def aggregate_runs(store: Store, plan_hash: str, engine: str | None = None,
                   concurrency: int | None = None, pool: str | None = None,
                   phase: str | None = None) -> list[dict[str, Any]]:
    """Measured, complete, not excluded runs of a plan (of one phase: `run_phase`), ordered by
    engine, concurrency, repeat."""
    sql = f"SELECT r.* FROM runs r WHERE r.plan_hash = ? AND {in_aggregates('r')}"
    params: list[Any] = [plan_hash]
    if phase is not None:
        sql += f" AND {run_phase('r')} = ?"
        params.append(phase)
    if engine is not None:
        sql += " AND r.engine = ?"
        params.append(engine)
    if concurrency is not None:
        sql += " AND r.concurrency = ?"
        params.append(concurrency)
    if pool is not None:
        sql += " AND r.pool = ?"
        params.append(pool)
    sql += f" ORDER BY r.engine, r.concurrency, r.repeat_index, {_STARTED_SEQ} NULLS LAST, r.run_id"
    return store.query(sql, params)


def plan_runs(store: Store, plan_hash: str) -> list[dict[str, Any]]:
    """Every run of a plan with its exclusion (if any), for listings."""
    return store.query(
        "SELECT r.*, x.reason AS excluded_reason FROM runs r LEFT JOIN exclusions x USING (run_id) "
        f"WHERE r.plan_hash = ? ORDER BY {_STARTED_SEQ} NULLS LAST, r.run_id", [plan_hash]
    )


def exclude_run(store: Store, run_id: str, reason: str) -> int:
    """Exclude a run from every aggregate (it stays in the store); returns the audit seq."""
    from data.audit import append_event, atomic
    from data.errors import CampaignError
    from data.store import utcnow

    if not reason or not reason.strip():
        raise CampaignError("--reason: an exclusion needs a reason")
    run = store.query("SELECT run_id, plan_hash, engine, concurrency, kind, status FROM runs WHERE run_id = ?", [run_id])
    if not run:
        raise CampaignError(f"run {run_id}: no such run in {store.path}")
    prior = store.query("SELECT reason, audit_seq FROM exclusions WHERE run_id = ?", [run_id])
    if prior:
        raise CampaignError(f"run {run_id}: already excluded (audit seq {prior[0]['audit_seq']}: {prior[0]['reason']})")
    r = run[0]
    with atomic(store):
        seq = append_event(store, "run_excluded", plan_hash=r["plan_hash"], subject=run_id,
                           payload={"reason": reason, "engine": r["engine"], "concurrency": r["concurrency"],
                                    "kind": r["kind"], "status": r["status"]})
        store.insert("exclusions", {"run_id": run_id, "reason": reason, "excluded_at": utcnow(), "audit_seq": seq})
    return seq
