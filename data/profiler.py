"""Profiler windows, and the runs they take out of every aggregate (docs/results.md, "Profiler
windows").

A window is opened by `campaign profile start --engine NAME --tool TEXT` (or by a plan whose sweep
kind is `profiled`, around that sweep) and closed by `campaign profile stop`; each is a
`profiler_window` audit event (row hash included). A run of the window's engine overlaps the
window when its `run_started` event comes before the window's stop event (an open window has
none) and its `run_ended` event (a run still running has none) after the window's start event:
audit sequence, never wall time. Every overlapping run is excluded through the ordinary exclusion
(`data/queries.py` `exclude_run`, a `run_excluded` event) with the reason "profiled: window W", so
aggregates, gates and rules already leave it out. `exclude_overlapping` is idempotent; it runs when
a window closes, after each run of a campaign, and before gates.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from data.anchor import current_head
from data.audit import append_event, atomic, whoami
from data.digest import row_sha256
from data.errors import CampaignError

if TYPE_CHECKING:
    from data.store import Store

TABLE = "profiler_windows"
REASON_PREFIX = "profiled: window "


def reason(window_id: str) -> str:
    return f"{REASON_PREFIX}{window_id}"


def _event(store: Store, window_id: str, action: str, expected_seq: int, plan_hash: str | None) -> int:
    row = store.query(f"SELECT engine, tool, status FROM {TABLE} WHERE window_id = ?", [window_id])[0]
    seq = append_event(store, "profiler_window", plan_hash=plan_hash, subject=window_id, payload={
        "action": action, "engine": row["engine"], "tool": row["tool"], "status": row["status"],
        **row_sha256(store, TABLE, "window_id", window_id)})
    if seq != expected_seq:  # the row records the seq of its own event (one writer: cannot differ)
        raise CampaignError(f"profiler window {window_id}: event seq {seq}, expected {expected_seq}")
    return seq


def start(store: Store, engine: str, tool: str, note: str | None = None, plan_hash: str | None = None) -> tuple[str, int]:
    """Open a window; (window id, seq). One open window per engine."""
    if not engine.strip():
        raise CampaignError("--engine: name the engine being profiled")
    if not tool.strip():
        raise CampaignError("--tool: name the profiler (e.g. 'nsys profile')")
    already = store.query(f"SELECT window_id, start_seq FROM {TABLE} WHERE engine = ? AND status = 'open'", [engine])
    if already:
        raise CampaignError(f"engine {engine}: profiler window {already[0]['window_id']} is already open "
                            f"(seq {already[0]['start_seq']}); stop it first")
    now = datetime.now(timezone.utc)
    wid = f"prof-{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:6]}"
    with atomic(store):
        seq = current_head(store).length + 1
        store.insert(TABLE, {"window_id": wid, "plan_hash": plan_hash, "engine": engine.strip(), "tool": tool.strip(),
                             "note": (note or "").strip() or None, "status": "open", "start_seq": seq,
                             "started_at": now, "started_by": whoami()})
        _event(store, wid, "start", seq, plan_hash)
    return wid, seq


def stop(store: Store, window_id: str | None = None, engine: str | None = None) -> tuple[str, int, list[str]]:
    """Close the open window (the only one, or the given one / engine's); (id, seq, runs excluded)."""
    sql, params = f"SELECT window_id, plan_hash FROM {TABLE} WHERE status = 'open'", []
    if window_id:
        sql, params = sql + " AND window_id = ?", [window_id]
    if engine:
        sql, params = sql + " AND engine = ?", [*params, engine]
    open_ = store.query(sql + " ORDER BY start_seq", params)
    if not open_:
        raise CampaignError("profile stop: no open profiler window" + (f" {window_id}" if window_id else "")
                            + (f" for engine {engine}" if engine else ""))
    if len(open_) > 1:
        raise CampaignError(f"profile stop: {len(open_)} windows are open ({', '.join(w['window_id'] for w in open_)}); "
                            "give --window ID or --engine NAME")
    wid, plan_hash = open_[0]["window_id"], open_[0]["plan_hash"]
    with atomic(store):
        seq = current_head(store).length + 1
        store.con.execute(f"UPDATE {TABLE} SET status = 'closed', stop_seq = ?, stopped_at = ? WHERE window_id = ?",
                          [seq, datetime.now(timezone.utc), wid])
        _event(store, wid, "stop", seq, plan_hash)
        excluded = exclude_overlapping(store)
    return wid, seq, excluded


@dataclass(frozen=True)
class Overlap:
    run_id: str
    window_id: str


def overlaps(store: Store) -> list[Overlap]:
    """Every (measured run, window) pair of the same engine whose audit spans overlap."""
    rows = store.query(
        "WITH s AS (SELECT subject AS run_id, min(seq) AS s FROM audit_events WHERE kind = 'run_started' GROUP BY 1), "
        "e AS (SELECT subject AS run_id, max(seq) AS e FROM audit_events WHERE kind = 'run_ended' GROUP BY 1) "
        f"SELECT r.run_id, w.window_id FROM runs r JOIN s USING (run_id) LEFT JOIN e USING (run_id) "
        f"JOIN {TABLE} w ON w.engine = r.engine "
        "WHERE r.kind IN ('measured', 'exploratory', 'profiled') "
        "AND s.s < coalesce(w.stop_seq, 9223372036854775807) AND coalesce(e.e, 9223372036854775807) > w.start_seq "
        "ORDER BY s.s, w.start_seq")
    return [Overlap(r["run_id"], r["window_id"]) for r in rows]


def exclude_overlapping(store: Store) -> list[str]:
    """Exclude every overlapping run not yet excluded (the first window it overlaps names the
    reason); returns the runs excluded now."""
    from data.queries import exclude_run

    done = {r[0] for r in store.con.execute("SELECT run_id FROM exclusions").fetchall()}
    out = []
    for o in overlaps(store):
        if o.run_id in done:
            continue
        exclude_run(store, o.run_id, reason(o.window_id))
        done.add(o.run_id)
        out.append(o.run_id)
    return out


def plan_statement(store: Store, plan_hashes: list[str]) -> dict[str, Any]:
    """For a verdict document: which of the plans' runs overlapped a profiler window (and are
    therefore excluded), or that none did."""
    pairs = [o for o in overlaps(store)]
    runs = {r[0]: r[1] for r in store.con.execute(
        "SELECT run_id, engine FROM runs WHERE list_contains(?, plan_hash)", [plan_hashes]).fetchall()}
    hit = [{"run_id": o.run_id, "engine": runs[o.run_id], "window_id": o.window_id} for o in pairs if o.run_id in runs]
    windows = store.scalar(f"SELECT count(*) FROM {TABLE}")
    if not hit:
        text = f"none of the plan's runs overlapped a profiler window ({windows} window(s) in the store)"
    else:
        text = ("excluded from every aggregate as profiled: " + ", ".join(f"{h['run_id']} (window {h['window_id']})"
                                                                          for h in hit))
    return {"overlapping_runs": hit, "statement": text,
            "rule": "a run of the window's engine whose run_started..run_ended overlaps the window's start..stop "
                    "events (audit sequence) is excluded with reason 'profiled: window W' (docs/results.md)"}


PLAN_TOOL = "the plan's profiled sweep (sweep.kind: profiled)"


def open_plan_windows(store: Store, plan: Any, cells: list[Any]) -> list[str]:
    """A plan whose cells are `profiled` runs its sweep inside one window per engine, opened
    here (the profiler itself is the engine's business: its argv or environment)."""
    engines = list(dict.fromkeys(c.engine for c in cells if c.kind == "profiled"))
    held = {r[0] for r in store.con.execute(f"SELECT engine FROM {TABLE} WHERE status = 'open'").fetchall()}
    engines = [e for e in engines if e not in held]  # a window left open (resume) already covers them
    return [start(store, e, PLAN_TOOL, f"plan {plan.name}", plan_hash=plan.hash)[0] for e in engines]


def close_plan_windows(store: Store, window_ids: list[str]) -> None:
    """Close what `open_plan_windows` opened. Best effort on the way out of a failed campaign: a
    window left open reaches every later run of its engine, which errs on the side of exclusion."""
    for wid in window_ids:
        try:
            stop(store, wid)
        except Exception:  # noqa: BLE001 - the campaign's own error is the one to report
            return


def windows(store: Store) -> list[dict[str, Any]]:
    return store.query(f"SELECT * FROM {TABLE} ORDER BY start_seq")
