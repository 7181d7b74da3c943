"""Digests of stored quality scores, so `audit verify` can tell when a score row was edited,
deleted or slipped in after it was stored.

Every transaction that writes `quality_scores` rows appends a `scores_stored` event in the same
transaction, naming the rows (scorer, run, request indexes) and the SHA-256 of their canonical
lines; a crash between batches leaves no row without its event. Unlike runs' digests
(data/digest.py, lines built by DuckDB), a score row holds a DOUBLE (`value`), which has no exact
SQL text form, so the lines are built here: a DOUBLE is the 16 hex digits of its IEEE-754 bits.
The line format is in docs/integrity.md ("Quality scores").
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from data.hashing import sha256_bytes
from data.schema import TABLES_BY_NAME
from data.store import Store

SCORE_DIGEST_VERSION = 1
ScoreKey = tuple[str, str, int]  # (scorer_id, run_id, request_index): the table's primary key


def score_columns() -> list[str]:
    """Every declared quality_scores column, in declaration order."""
    return [c.name for c in TABLES_BY_NAME["quality_scores"].columns]


def _select(columns: Sequence[str]) -> str:
    types = {c.name: c.type for c in TABLES_BY_NAME["quality_scores"].columns}
    return ", ".join(f'epoch_us("{c}")' if types[c] == "TIMESTAMPTZ" else f'"{c}"' for c in columns)


def _field(kind: str, v: Any) -> str:
    if v is None:
        return "~"
    if kind == "VARCHAR":
        return f"{len(v)}:{v}"
    if kind == "DOUBLE":
        return struct.pack(">d", v).hex()
    return str(int(v))  # INTEGER, BIGINT, TIMESTAMPTZ as epoch microseconds


def score_line(columns: Sequence[str], values: Sequence[Any]) -> bytes:
    """One row's canonical line, newline included."""
    types = {c.name: c.type for c in TABLES_BY_NAME["quality_scores"].columns}
    return (",".join(_field(types[c], v) for c, v in zip(columns, values)) + "\n").encode()


def score_lines(store: Store, columns: Sequence[str], scorer_id: str | None = None,
                run_ids: Iterable[str] | None = None) -> dict[ScoreKey, tuple[bytes, int]]:
    """{key: (canonical line, scored_at in epoch us)} for the stored rows (all, or one scorer's in
    some runs)."""
    where: list[str] = []
    params: list[Any] = []
    if scorer_id is not None:
        where.append("scorer_id = ?")
        params.append(scorer_id)
    if run_ids is not None:
        where.append("run_id IN (SELECT unnest(?::VARCHAR[]))")
        params.append(sorted(set(run_ids)))
    sql = (f"SELECT scorer_id, run_id, request_index, epoch_us(scored_at), {_select(columns)} FROM quality_scores"
           + (" WHERE " + " AND ".join(where) if where else ""))
    return {(sid, rid, idx): (score_line(columns, rest), at)
            for sid, rid, idx, at, *rest in store.con.execute(sql, params).fetchall()}


@dataclass(frozen=True)
class ScoresStored:
    """What a `scores_stored` event announces: one scorer's rows, by run and request index."""
    scorer_id: str
    requests: dict[str, list[int]]  # run_id -> request indexes, both sorted
    rows: int
    sha256: str
    columns: tuple[str, ...]

    def keys(self) -> list[ScoreKey]:
        return keys_of(self.scorer_id, self.requests)

    def payload(self) -> dict[str, Any]:
        return {"scorer_id": self.scorer_id, "requests": self.requests, "rows": self.rows, "sha256": self.sha256,
                "columns": list(self.columns), "digest_version": SCORE_DIGEST_VERSION}

    @classmethod
    def from_payload(cls, p: Mapping[str, Any]) -> "ScoresStored":
        return cls(p["scorer_id"], {k: list(v) for k, v in p["requests"].items()}, p["rows"], p["sha256"],
                   tuple(p["columns"]))


def keys_of(scorer_id: str, requests: Mapping[str, Sequence[int]]) -> list[ScoreKey]:
    """The announced rows in digest order: run_id, then request index."""
    return [(scorer_id, rid, i) for rid in sorted(requests) for i in sorted(requests[rid])]


def digest_of(keys: Sequence[ScoreKey], lines: Mapping[ScoreKey, tuple[bytes, int]]) -> str:
    return sha256_bytes(b"".join(lines[k][0] for k in keys))


def announce(store: Store, scorer_id: str, rows: Sequence[Mapping[str, Any]]) -> ScoresStored:
    """The announcement of `rows` just inserted (read back from the store, as verify will read
    them); call inside the inserting transaction."""
    requests: dict[str, list[int]] = {}
    for r in rows:
        requests.setdefault(r["run_id"], []).append(int(r["request_index"]))
    requests = {rid: sorted(idx) for rid, idx in sorted(requests.items())}
    columns = tuple(score_columns())
    lines = score_lines(store, columns, scorer_id, requests)
    return ScoresStored(scorer_id, requests, len(rows), digest_of(keys_of(scorer_id, requests), lines), columns)
