"""The audit chain: an append-only, hash-chained log of every campaign state change.

Each event stores the previous event's hash, so editing or deleting any stored row breaks the
chain from that row on and `verify_chain` names the first broken link. Deleting the newest events
leaves a shorter chain that still links; the head anchor kept outside the table (data/anchor.py)
is what shows that (docs/integrity.md). The hash covers
(seq, event time in epoch microseconds, kind, plan_hash, subject, payload_json, prev_hash) as
canonical JSON; microseconds because that is what a DuckDB TIMESTAMPTZ round-trips exactly.
"""

from __future__ import annotations

import getpass
import json
import socket
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from data.anchor import advance_anchor, current_head
from data.errors import CampaignError
from data.hashing import canonical_json as canonical_json  # re-exported: callers import it from here
from data.hashing import sha256_text as sha256_text

if TYPE_CHECKING:  # annotations only: `campaign audit --help` needs EVENT_KINDS, not DuckDB
    from data.store import Store

EVENT_KINDS = (
    "plan_frozen", "addendum_frozen", "manifest_frozen", "run_started", "run_ended",
    "run_excluded", "holdout_opened", "verdict_issued", "scores_recorded", "scores_stored",
    "attempt_recorded", "launch_recorded", "sql_write", "validator_run",
    "results_imported", "profiler_window", "recheck_stored",
    "candidate_recorded", "freeze_refused", "acceptance_signed",
)


def whoami() -> str:
    """user@host for 'frozen_by'-style columns; never fails."""
    try:
        user = getpass.getuser()
    except Exception:  # getpass raises various errors when no user database entry exists
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def epoch_us(t: datetime) -> int:
    """An event time as the chain hashes it: whole epoch microseconds (what TIMESTAMPTZ keeps)."""
    return int(t.timestamp()) * 1_000_000 + t.microsecond


def event_hash(seq: int, event_time_us: int, kind: str, plan_hash: str | None, subject: str | None,
               payload_json: str, prev_hash: str) -> str:
    return sha256_text(canonical_json([seq, event_time_us, kind, plan_hash, subject, payload_json, prev_hash]))


def atomic(store: Store):
    """A transaction that nests: inner uses join the outermost one (Store.transaction)."""
    return store.transaction()


def append_event(store: Store, kind: str, *, plan_hash: str | None = None, subject: str | None = None,
                 payload: dict | None = None) -> int:
    """Append one event to the chain; returns its seq."""
    if kind not in EVENT_KINDS:
        raise CampaignError(f"audit: unknown event kind {kind!r} (known: {', '.join(EVENT_KINDS)})")
    payload_json = canonical_json(payload or {})
    now_us = epoch_us(datetime.now(timezone.utc))
    # No transaction of its own, so callers may append inside theirs (Store.transaction or
    # atomic). One process owns the DuckDB file; the seq primary key turns any race into an
    # error, never a forked chain.
    head = current_head(store)
    seq, prev = head.length + 1, head.head_hash
    h = event_hash(seq, now_us, kind, plan_hash, subject, payload_json, prev)
    store.con.execute(
        "INSERT INTO audit_events (seq, event_time, kind, plan_hash, subject, payload_json, prev_hash, event_hash) "
        "VALUES (?, make_timestamptz(?::BIGINT), ?, ?, ?, ?, ?, ?)",
        [seq, now_us, kind, plan_hash, subject, payload_json, prev, h],
    )
    # the head anchor outside the table moves once the event is committed (data/anchor.py)
    store.on_commit("audit-anchor", lambda: advance_anchor(store))
    return seq


@dataclass(frozen=True)
class ChainResult:
    ok: bool
    first_broken_seq: int | None
    message: str
    events: int

    def __iter__(self):  # unpacks as the contract's (ok, first_broken_seq, message)
        return iter((self.ok, self.first_broken_seq, self.message))


def verify_chain(store: Store) -> ChainResult:
    """Recompute every link; report the first event whose stored hash, link or position is wrong."""
    rows = store.con.execute(
        "SELECT seq, epoch_us(event_time), kind, plan_hash, subject, payload_json, prev_hash, event_hash "
        "FROM audit_events ORDER BY seq"
    ).fetchall()
    prev = ""
    for expected_seq, (seq, t_us, kind, plan_hash, subject, payload_json, prev_hash, stored) in enumerate(rows, 1):
        if seq != expected_seq:
            return ChainResult(False, expected_seq, f"seq {expected_seq}: missing (next stored event is seq {seq})", len(rows))
        if prev_hash != prev:
            return ChainResult(False, seq, f"seq {seq}: prev_hash does not match the hash of seq {seq - 1}", len(rows))
        recomputed = event_hash(seq, t_us, kind, plan_hash, subject, payload_json, prev_hash)
        if recomputed != stored:
            return ChainResult(False, seq, f"seq {seq} ({kind}): contents do not match its stored hash (altered)", len(rows))
        prev = stored
    return ChainResult(True, None, f"{len(rows)} events, chain intact", len(rows))


def events(store: Store, kind: str | None = None, plan_hash: str | None = None,
           subject: str | None = None) -> list[dict[str, Any]]:
    """Events in chain order, optionally filtered; payload decoded."""
    where, params = [], []
    for col, val in (("kind", kind), ("plan_hash", plan_hash), ("subject", subject)):
        if val is not None:
            where.append(f"{col} = ?")
            params.append(val)
    sql = "SELECT * FROM audit_events" + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY seq"
    rows = store.query(sql, params)
    for r in rows:
        r["payload"] = json.loads(r["payload_json"])
    return rows
