"""Stored ASR rechecks (`campaign score --recheck`; docs/quality.md, docs/results.md).

A recheck re-transcribes stored outputs to tell audio errors from ASR noise; its rows go into
`recheck_results` with one `recheck_stored` audit event holding their digest, so a verdict's
diagnostics can cite them and `audit verify` / `evidence verify` find an edited or deleted row.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Sequence

from data.audit import append_event, atomic
from data.digest import digestible_columns, table_digests

if TYPE_CHECKING:
    from data.store import Store

TABLE = "recheck_results"
ORDER = ("run_id", "request_index", "scorer_id")


def rows_digest(store: Store, recheck_id: str) -> dict[str, Any]:
    cols = digestible_columns(TABLE)
    d = table_digests(store, TABLE, cols, "recheck_id", ORDER, keys=[recheck_id])[recheck_id]
    return {"rows": d.rows, "sha256": d.sha256, "columns": cols}


def record(store: Store, results: Sequence[Any]) -> tuple[str, int]:
    """Store `results` (stats/quality/recheck.py's RecheckResult) and their event; (id, seq)."""
    now = datetime.now(timezone.utc)
    rid = f"rchk-{now:%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    plans = dict(store.con.execute("SELECT run_id, plan_hash FROM runs WHERE list_contains(?, run_id)",
                                   [sorted({r.run_id for r in results})]).fetchall())
    with atomic(store):
        for r in results:
            store.insert(TABLE, {**asdict(r), "note": r.note or None, "recheck_id": rid,
                                 "plan_hash": plans.get(r.run_id), "rechecked_at": now})
        plan_hashes = sorted({h for h in plans.values() if h})
        seq = append_event(store, "recheck_stored", plan_hash=plan_hashes[0] if len(plan_hashes) == 1 else None,
                           subject=rid, payload={
                               "utt_ids": sorted({r.utt_id for r in results}), "plans": plan_hashes,
                               "reproduced": sum(1 for r in results if r.reproduces),
                               "digest": rows_digest(store, rid)})
    return rid, seq


def for_plans(store: Store, plan_hashes: Sequence[str]) -> list[dict[str, Any]]:
    """Each stored recheck of the plans' runs, summarised for a verdict's diagnostics."""
    return store.query(
        f"SELECT recheck_id, utt_id, count(*) AS outputs, count(*) FILTER (WHERE reproduces) AS reproduced, "
        f"bool_and(same_model) AS same_model FROM {TABLE} WHERE list_contains(?, plan_hash) "
        "GROUP BY recheck_id, utt_id ORDER BY recheck_id, utt_id", [list(plan_hashes)])
