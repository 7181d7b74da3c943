"""Engine launch rows under the audit chain (docs/integrity.md, "Launches").

A launch row changes over its life (ready, then stopped or crashed), so it cannot be hashed once
at insert like a verdict. Every write of a row is followed, in the same transaction, by a
`launch_recorded` event holding the row's hash as it now stands; `audit verify` compares each
row with its last event."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from data.audit import append_event
from data.digest import row_sha256

if TYPE_CHECKING:
    from data.store import Store


LATER = ("status", "ready_ns", "stopped_ns", "failure_reason", "log_tail", "exit_code", "pid")  # what changes after launch


def store_launch(store: Store, row: dict[str, Any]) -> None:
    """Insert a launch row and, in the same transaction, its launch_recorded event."""
    with store.transaction():
        store.insert("engine_launches", row)
        announce_launch(store, row["launch_id"])


def update_launch(store: Store, row: dict[str, Any]) -> None:
    """Store a launch's later state (stopped/crashed, exit code, log tail, the `LATER` columns the
    row holds) and, in the same transaction, its launch_recorded event. Used by the engine's stop,
    a resume that finds it orphaned, and a cluster node's report."""
    cols = [c for c in LATER if c in row]
    with store.transaction():
        store.con.execute(f"UPDATE engine_launches SET {', '.join(f'{c} = ?' for c in cols)} WHERE launch_id = ?",
                          [row[c] for c in cols] + [row["launch_id"]])
        announce_launch(store, row["launch_id"])


def announce_launch(store: Store, launch_id: str) -> None:
    """A launch_recorded event for the row as it now stands (engine, status, row hash). Call it
    inside the transaction that wrote the row."""
    r = store.query("SELECT plan_hash, engine, status FROM engine_launches WHERE launch_id = ?", [launch_id])[0]
    append_event(store, "launch_recorded", plan_hash=r["plan_hash"], subject=launch_id,
                 payload={"engine": r["engine"], "status": r["status"],
                          **row_sha256(store, "engine_launches", "launch_id", launch_id)})


IDENTITY_SQL = ("l.source_kind, l.source_location, l.source_commit, l.source_tree, l.source_dirty, l.source_version, "
                "l.patch_sha256, l.precision_change")  # engine_launches columns identity_label reads (alias l)


def identity_label(row: dict[str, Any]) -> str:
    """What code a launch ran, in one short phrase (docs/engines.md, "Engine identity and patches"):
    `git 1a2b3c4d5e6f`, `git 1a2b3c4d5e6f + patch 9f8e7d6c5b4a`, `dist vllm-omni 0.30.0 (3c4d5e6f7a8b)`,
    or '' when the plan names no source."""
    kind = row.get("source_kind")
    commit = (row.get("source_commit") or "")[:12]
    if kind == "git":
        label = f"git {commit or '?'}"
    elif kind == "dist":
        label = f"dist {row.get('source_location')} {row.get('source_version') or '?'}" + (f" ({commit})" if commit else "")
    else:
        return ""
    if row.get("patch_sha256"):
        label += f" + patch {row['patch_sha256'][:12]}"
    elif row.get("source_dirty"):
        label += " (dirty)"
    return label


def engine_identities(store: Store, plan_hash: str) -> dict[str, list[str]]:
    """engine -> the distinct identity labels its launches for the plan recorded (in commit order)."""
    rows = store.query(f"SELECT DISTINCT l.engine, {IDENTITY_SQL} FROM engine_launches l WHERE l.plan_hash = ? "
                       "ORDER BY l.engine, l.source_commit NULLS FIRST, l.patch_sha256 NULLS FIRST", [plan_hash])
    out: dict[str, list[str]] = {}
    for r in rows:
        label = identity_label(r)
        if label and label not in out.setdefault(r["engine"], []):
            out[r["engine"]].append(label)
    return out
