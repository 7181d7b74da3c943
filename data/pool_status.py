"""What kind of evidence a quality verdict is: the status of the pool its prompts came from
(docs/statistics.md, "Evidence").

- `untouched`: the quality pool is the plan's reserved holdout; freezing checked that none of its
  ids appeared in any stored request (the freeze event), it was opened by a `holdout_opened`
  event, and no run outside this plan touched its ids before this plan's quality runs (documents
  issued before 2026-12-04 call it `reserved`).
- `reused`: runs outside this plan requested some of the pool's ids before this plan's quality
  runs (listed): a regression check on reused prompts, not a new untouched holdout.
- `unreserved`: the pool is not a reserved holdout of this plan and no earlier run used it.
- `external`: a scores table supplied by the user; the store knows nothing about its prompts.

Computed from the store when the verdict is issued and recorded in its document; the verdict row
itself is never revised (a later addendum issues a new verdict beside it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from data.audit import events
from data.store import Store

if TYPE_CHECKING:
    from data.plan_model import Plan

UNTOUCHED, REUSED, UNRESERVED, EXTERNAL = "untouched", "reused", "unreserved", "external"
LEGACY_UNTOUCHED = "reserved"  # what documents issued before 2026-12-04 call `untouched`
LABELS = {UNTOUCHED: "untouched holdout", LEGACY_UNTOUCHED: "untouched holdout", REUSED: "reused prompts",
          UNRESERVED: "unreserved prompts", EXTERNAL: "external scores"}


def evidence_label(status: str | None) -> str:
    """The evidence class as it is printed beside a verdict: `PASS (reused prompts)`."""
    return LABELS.get(status or "", status or "")


def with_evidence(verdict: str, status: str | None) -> str:
    """A quality verdict with its evidence class, wherever one is printed (docs/statistics.md, "Evidence")."""
    label = evidence_label(status) if status not in (None, "", "-") else ""
    return f"{verdict} ({label})" if label else verdict
SHOWN_RUNS = 20  # earlier runs listed in the document (the count is always complete)


@dataclass(frozen=True)
class EventRef:
    seq: int
    kind: str
    event_hash: str
    at: str

    @classmethod
    def of(cls, ev: dict[str, Any] | None) -> "EventRef | None":
        if ev is None:
            return None
        return cls(int(ev["seq"]), str(ev["kind"]), str(ev["event_hash"]), str(ev["event_time"]))

    @property
    def short(self) -> str:
        return f"audit #{self.seq} {self.kind} {self.event_hash[:12]}"


@dataclass(frozen=True)
class PoolStatus:
    status: str
    pool: str | None
    ids: int
    summary: str  # one line for the gate table, the TUI and listings
    frozen: EventRef | None = None  # the plan's freeze event (the reuse audit ran there)
    opened: EventRef | None = None  # holdout_opened, for a reserved pool
    earlier_runs: list[dict[str, Any]] = field(default_factory=list)  # first SHOWN_RUNS
    earlier_runs_total: int = 0

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("frozen", "opened"):
            d[k] = asdict(getattr(self, k)) if getattr(self, k) else None
        return d


def external_status(source: str) -> PoolStatus:
    return PoolStatus(EXTERNAL, None, 0, f"scores table {source} supplied by the user: pool status unknown "
                                         "(no reservation or reuse audit)")


def _pool_ids(store: Store, plan: "Plan", frozen: dict[str, Any] | None) -> list[str]:
    """The quality pool's ids as frozen (the stored manifest), else as the workload has them now."""
    from data.manifest import ALL, load_plan_workload, stored_manifest

    pool = plan.quality.pool
    mhash = (frozen or {}).get("payload", {}).get("manifest_hash")
    doc = stored_manifest(store, mhash) if mhash else None
    if doc is not None and (pool or ALL) in doc["pools"]:
        return list(doc["pools"][pool or ALL])
    try:
        return [u.utt_id for u in load_plan_workload(plan).pool(pool)]
    except Exception:  # noqa: BLE001 - a moved workload only loses the id list, never the verdict
        return []


def _freeze_event(store: Store, plan_hash: str) -> dict[str, Any] | None:
    evs = [e for e in events(store, plan_hash=plan_hash) if e["kind"] in ("plan_frozen", "addendum_frozen")]
    return evs[0] if evs else None


_STARTED = ("(SELECT subject AS run_id, min(seq) AS seq FROM audit_events WHERE kind = 'run_started' "
            "GROUP BY subject)")


def _earlier_runs(store: Store, plan: "Plan", ids: list[str]) -> list[dict[str, Any]]:
    """Runs of other plans that requested a pool id before this plan's first quality run.

    "Before" is the audit sequence: the seq of each run's `run_started` event, never `started_at`
    (a probe's clock can be set a day ahead). A run the chain does not announce (inserted by hand;
    `audit verify` names it) cannot be placed, so it counts as earlier."""
    if not ids:
        return []
    arms = [a for a in (plan.quality.baseline, plan.quality.candidate) if a]
    first = store.scalar(
        f"SELECT min(s.seq) FROM runs r JOIN {_STARTED} s USING (run_id) WHERE r.plan_hash = ? "
        "AND r.pool IS NOT DISTINCT FROM ? AND r.engine IN "
        f"({', '.join('?' for _ in arms) or 'NULL'})", [plan.hash, plan.quality.pool, *arms])
    return store.query(
        "SELECT r.run_id, r.plan_hash, r.engine, r.concurrency, r.repeat_index AS repeat, r.kind, r.status, "
        "strftime(r.started_at AT TIME ZONE 'UTC', '%Y-%m-%dT%H:%M:%SZ') AS started_at, s.seq AS audit_seq, "
        f"count(DISTINCT q.utt_id) AS ids_used FROM runs r JOIN requests q USING (run_id) LEFT JOIN {_STARTED} s "
        "USING (run_id) WHERE list_contains(?::VARCHAR[], q.utt_id) AND r.plan_hash IS DISTINCT FROM ? "
        "AND (?::BIGINT IS NULL OR s.seq IS NULL OR s.seq < ?::BIGINT) "
        "GROUP BY ALL ORDER BY s.seq NULLS FIRST, r.run_id", [ids, plan.hash, first, first])


def pool_status(store: Store, plan: "Plan") -> PoolStatus:
    """The status of the plan's quality pool, from the freeze event, the holdout_opened event and
    the runs stored so far."""
    from data.manifest import holdout_opened

    pool = plan.quality.pool
    frozen_ev = _freeze_event(store, plan.hash)
    ids = _pool_ids(store, plan, frozen_ev)
    earlier = _earlier_runs(store, plan, ids)
    frozen, name = EventRef.of(frozen_ev), repr(pool) if pool else "(all utterances)"
    reserved = bool(plan.workload.holdout_pool) and plan.workload.holdout_pool == pool
    opened = EventRef.of(holdout_opened(store, plan.hash)) if reserved else None

    def status(kind: str, summary: str) -> PoolStatus:
        return PoolStatus(kind, pool, len(ids), summary, frozen=frozen, opened=opened,
                          earlier_runs=earlier[:SHOWN_RUNS], earlier_runs_total=len(earlier))

    if earlier:
        plans = sorted({(r["plan_hash"] or "none")[:12] for r in earlier})
        shown = ", ".join(r["run_id"] for r in earlier[:3]) + (" ..." if len(earlier) > 3 else "")
        summary = (f"REUSED prompts: pool {name} ({len(ids)} ids) was requested by {len(earlier)} earlier run(s) "
                   f"of plan(s) {', '.join(plans)} ({shown}): a regression check on reused prompts, not a new "
                   "untouched holdout")
        if reserved:
            summary += " (reserved at freeze, used since)"
        return status(REUSED, summary)
    if reserved:
        how = f"opened by {opened.short}" if opened else "not opened"
        summary = (f"holdout pool {name} ({len(ids)} ids) reserved and unused at freeze "
                   f"({frozen.short if frozen else 'no freeze event'}), {how}")
        return status(UNTOUCHED, summary)
    return status(UNRESERVED, f"pool {name} ({len(ids)} ids) is not a reserved holdout of this plan; "
                              "no earlier run used it")


def evidence_of(document_json: str | None) -> tuple[str, str]:
    """(status, summary) recorded in a verdict document ('-' for a throughput verdict)."""
    import json

    try:
        ev = (json.loads(document_json) or {}).get("evidence") if document_json else None
    except json.JSONDecodeError:
        return "?", "document_json is not valid JSON"
    if not isinstance(ev, dict):
        return "-", ""
    return str(ev.get("status") or "?"), str(ev.get("summary") or "")


def verdict_evidence(store: Store) -> dict[str, str]:
    """verdict_id -> the pool status recorded in its document."""
    rows = store.con.execute("SELECT verdict_id, document_json FROM verdicts").fetchall()
    return {vid: evidence_of(doc)[0] for vid, doc in rows}
