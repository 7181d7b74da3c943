"""What an `audit verify` check returns, and the comparisons the checks share: each row against the
audit event that announced it (docs/integrity.md). Used by data/integrity.py (the store's tables)
and data/integrity_record.py (imports, profiler windows, rechecks); a module of its own so neither
of those imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from data.digest import table_digests
from data.store import Store

OK, FAILED, NOT_CHECKED = "ok", "FAILED", "not checked"


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    message: str

    @property
    def ok(self) -> bool:
        return self.status != FAILED


def check_result(name: str, problems: list[str], ok_message: str) -> Check:
    if not problems:
        return Check(name, OK, ok_message)
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return Check(name, FAILED, problems[0] + more)


def by_subject(evs: list[dict[str, Any]], *kinds: str, last: bool = False) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for e in evs:
        if e["kind"] in kinds and (last or e["subject"] not in out):
            out[e["subject"]] = e
    return out


def row_matches(store: Store, table: str, key: str, value: str, payload: dict[str, Any]) -> bool:
    """The row hash recorded with the event (events from before row hashes: nothing to compare)."""
    if "row_sha256" not in payload:
        return True
    got = table_digests(store, table, payload["row_columns"], key, keys=[value])[value]
    return got.rows == 1 and got.sha256 == payload["row_sha256"]


def rows_against_events(store: Store, evs: list[dict[str, Any]], *, table: str, key: str, kind: str, noun: str,
                         verb: str, fields: Sequence[str],
                         extra: Callable[[dict[str, Any], dict[str, Any], int], list[str]] | None = None,
                         order: str = "created_at", last: bool = False,
                         unannounced_ok: Callable[[dict[str, Any]], bool] | None = None
                         ) -> tuple[list[str], int, int]:
    """(problems, rows compared, rows passed by `unannounced_ok`) for a table whose every row an
    event announced: each row has its event (with `last`, its latest: a row rewritten over its
    life), the `fields` and the plan hash equal the event's, `extra` finds nothing, the row
    matches the event's row hash, and every event still has its row. A row without an event is
    inserted by hand unless `unannounced_ok` says it predates such events."""
    announced = by_subject(evs, kind, last=last)
    which = f"last {kind}" if last else kind
    rows = store.query(f"SELECT * FROM {table} ORDER BY {order}, {key}")
    problems, legacy = [], 0
    for r in rows:
        rid = r[key]
        e = announced.get(rid)
        if e is None:
            if unannounced_ok is not None and unannounced_ok(r):
                legacy += 1
            else:
                problems.append(f"{noun} {rid}: no {kind} event for it (inserted by hand)")
            continue
        p, seq = e["payload"], e["seq"]
        wrong = [f"{k} is {r[k]!r} but its {which} event (seq {seq}) says {p.get(k)!r}" for k in fields if r[k] != p.get(k)]
        if r["plan_hash"] != e["plan_hash"]:
            wrong.append(f"plan_hash is {r['plan_hash']!r} but its {which} event (seq {seq}) says {e['plan_hash']!r}")
        wrong += extra(r, p, seq) if extra else []
        if wrong:
            problems.append(f"{noun} {rid}: {wrong[0]}")
        elif not row_matches(store, table, key, rid, p):
            problems.append(f"{noun} {rid}: row differs from the one {verb} at seq {seq} (edited)")
    stored = {r[key] for r in rows}
    problems += [f"{noun} {rid}: {verb} at seq {e['seq']} but its row is missing (deleted)"
                 for rid, e in announced.items() if rid not in stored]
    return problems, len(rows) - legacy, legacy
