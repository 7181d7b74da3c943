"""The audit head anchor: the chain's length and newest hash, kept outside the events table.

A chain that lost its newest events still links, so the chain alone cannot show truncation. The
anchor can: it is rewritten next to the store (`<store>.audit-head.json`, atomically) after every
committed append, and embedded in every export (`audit_head`), and `campaign audit verify`
checks that the store still holds the chain up to each anchor it is given (docs/integrity.md).
The anchor only ever moves forward along the chain: if the store no longer holds the anchored
head, it is left as it is, so verify keeps reporting the loss.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from data.errors import CampaignError, first_line

if TYPE_CHECKING:  # annotations only
    from data.store import Store

ANCHOR_SCHEMA = "omni-campaign-audit-head/1"
SUFFIX = ".audit-head.json"
PARQUET_KEY = b"omni_campaign.audit_head"  # key of the anchor in an exported Parquet file's metadata


@dataclass(frozen=True)
class Head:
    """The chain up to `length` events, ending in `head_hash` ('' for an empty chain)."""

    length: int
    head_hash: str

    def document(self, store_path: Path | None = None) -> dict[str, Any]:
        doc = {"schema": ANCHOR_SCHEMA, "length": self.length, "head_hash": self.head_hash,
               "written_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
        if store_path is not None:
            doc["store"] = Path(store_path).name
        return doc


def anchor_path(db_path: str | os.PathLike) -> Path:
    return Path(str(db_path) + SUFFIX)


def current_head(store: Store) -> Head:
    rows = store.con.execute("SELECT seq, event_hash FROM audit_events ORDER BY seq DESC LIMIT 1").fetchall()
    return Head(rows[0][0], rows[0][1]) if rows else Head(0, "")


def holds(store: Store, head: Head, source: str) -> str | None:
    """None when the store's event `head.length` is the anchored head, else what was lost. The
    links below the head are `verify_chain`'s job."""
    if head.length == 0:
        return None
    rows = store.con.execute("SELECT event_hash FROM audit_events WHERE seq = ?", [head.length]).fetchall()
    stored = current_head(store)
    if not rows:
        return (f"{source} records {head.length} events (head {head.head_hash[:12]}) but the store holds "
                f"{stored.length}: the newest {head.length - stored.length} were deleted (tail truncated)")
    if rows[0][0] != head.head_hash:
        return (f"{source} records event seq {head.length} as {head.head_hash[:12]}, the store's is "
                f"{rows[0][0][:12]}: history up to that event was rewritten")
    return None


def _head_from(doc: Any, label: str) -> Head:
    if isinstance(doc, dict) and doc.get("schema") != ANCHOR_SCHEMA and isinstance(doc.get("audit_head"), dict):
        doc = doc["audit_head"]  # an exported document that embeds its anchor
    if not isinstance(doc, dict) or doc.get("schema") != ANCHOR_SCHEMA:
        raise CampaignError(f"{label}: no audit head in it (expected an anchor file, an exported verdict "
                            f"document or runs export with 'audit_head' / {ANCHOR_SCHEMA})")
    length, head_hash = doc.get("length"), doc.get("head_hash")
    if not isinstance(length, int) or isinstance(length, bool) or length < 0:
        raise CampaignError(f"{label}: audit_head.length: {length!r} is not a non-negative integer")
    if not isinstance(head_hash, str) or (length and len(head_hash) != 64):
        raise CampaignError(f"{label}: audit_head.head_hash: {head_hash!r} is not a SHA-256 hex digest")
    return Head(length, head_hash)


def read_head(path: str | os.PathLike) -> Head:
    """The anchor in an anchor file, an exported verdict document (JSON) or a runs export
    (Parquet metadata, or the CSV's `.audit-head.json` companion)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise CampaignError(f"{p}: cannot read ({exc.strerror})") from None
    if raw[:4] == b"PAR1":
        import pyarrow.parquet as pq

        meta = pq.read_schema(p).metadata or {}
        if PARQUET_KEY not in meta:
            raise CampaignError(f"{p}: Parquet file without {PARQUET_KEY.decode()} metadata")
        raw = meta[PARQUET_KEY]
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CampaignError(f"{p}: not JSON ({first_line(exc)})") from None
    except RecursionError:  # json.loads recurses once per nesting level
        raise CampaignError(f"{p}: not an audit head (JSON nested too deeply to read)") from None
    return _head_from(doc, str(p))


def write_anchor(path: Path, doc: dict[str, Any]) -> None:
    """Replace the anchor file atomically: a crash leaves the old anchor or the new one."""
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(doc, indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def advance_anchor(store: Store) -> None:
    """Move the side anchor to the store's current head, unless the store no longer holds the
    head it records (then warn and leave it, so verify reports the loss). A store file this
    process created starts a fresh anchor. Never raises: the events are committed already."""
    path = anchor_path(store.path)
    try:
        if path.exists() and not store.created:
            problem = holds(store, read_head(path), str(path))
            if problem:
                print(f"campaign: warning: {problem}; the anchor is left as it is", file=sys.stderr)
                return
        write_anchor(path, current_head(store).document(store.path))
    except (OSError, CampaignError) as exc:
        print(f"campaign: warning: {path}: audit anchor not updated ({first_line(exc)})", file=sys.stderr)
