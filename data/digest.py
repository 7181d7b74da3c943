"""Content digests of stored rows, recorded in the audit chain so `audit verify` can recompute them.

A digest is the row count and SHA-256 over each row's canonical line, rows in a fixed order
(docs/integrity.md): fields joined by ',' then '\\n'; a VARCHAR is `<length>:<text>`, an integer
or boolean its decimal/`true`/`false` text, a TIMESTAMPTZ its epoch microseconds, NULL `~`. The
length prefix keeps the line unambiguous whatever a text contains, and no field depends on the
session's time zone or a float format. DuckDB builds the lines; their bytes are hashed straight
from the Arrow buffers, one pass in key order, so a store-wide verify is one sorted scan per
table rather than one scan per run.

The column list is recorded with the digest, so a column added by a later migration does not
invalidate digests recorded before it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from data.hashing import sha256_bytes
from data.schema import TABLES_BY_NAME
from data.store import Store

DIGEST_VERSION = 1
_TEXT_TYPES = {"VARCHAR"}
_EXACT_TYPES = {"BOOLEAN", "SMALLINT", "INTEGER", "BIGINT", "UBIGINT"}
EMPTY_SHA256 = sha256_bytes(b"")

# What a run's digest covers: its runs row, then requests and chunks in their natural order.
RUN_TABLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("runs", ()),
    ("requests", ("request_index",)),
    ("chunks", ("request_index", "chunk_index")),
)


@dataclass(frozen=True)
class TableDigest:
    rows: int
    sha256: str

    def as_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "sha256": self.sha256}


def digestible_columns(table: str) -> list[str]:
    """Every declared column whose text form is exact (all of them for runs/requests/chunks)."""
    return [c.name for c in TABLES_BY_NAME[table].columns if c.type in _TEXT_TYPES | _EXACT_TYPES | {"TIMESTAMPTZ"}]


def _field_sql(table: str, column: str) -> str:
    types = {c.name: c.type for c in TABLES_BY_NAME[table].columns}
    kind = types.get(column)
    q = f'"{column}"'
    if kind in _TEXT_TYPES:
        return f"coalesce(length({q})::VARCHAR || ':' || {q}, '~')"
    if kind in _EXACT_TYPES:
        return f"coalesce({q}::VARCHAR, '~')"
    if kind == "TIMESTAMPTZ":
        return f"coalesce(epoch_us({q})::VARCHAR, '~')"
    raise ValueError(f"{table}.{column}: type {kind} has no exact text form for a digest")


def line_sql(table: str, columns: Sequence[str]) -> str:
    """SQL for one row's canonical line, newline included."""
    return " || ',' || ".join(_field_sql(table, c) for c in columns) + " || chr(10)"


def _segments(keys: pa.Array) -> Iterable[tuple[int, int, str]]:
    """(start, end, key) for each run of equal keys in an ordered batch."""
    ree = pc.run_end_encode(keys)  # type: ignore[attr-defined]  # in pyarrow.compute; pyarrow-stubs lacks it
    start = 0
    for end, key in zip(ree.run_ends.to_pylist(), ree.values.to_pylist()):
        yield start, end, key
        start = end


def table_digests(store: Store, table: str, columns: Sequence[str], key: str, order: Sequence[str] = (),
                  keys: Sequence[str] | None = None) -> dict[str, TableDigest]:
    """Digest of `table`'s rows per `key` value (all of them, or only `keys`); a key without rows
    gets rows=0 and the empty-input hash."""
    where, params = "", []
    if keys is not None:
        where = f' WHERE "{key}" IN (SELECT unnest(?::VARCHAR[]))'
        params.append(list(keys))
    order_by = ", ".join(f'"{c}"' for c in (key, *order))
    sql = f'SELECT "{key}" AS k, {line_sql(table, columns)} AS line FROM {table}{where} ORDER BY {order_by}'
    hashers: dict[str, Any] = {}
    counts: dict[str, int] = {}
    reader = store.relation(sql, params).to_arrow_reader(65536)
    for batch in reader:
        lines = batch.column(1).cast(pa.large_binary())
        _, offsets_buf, data = lines.buffers()
        offsets = np.frombuffer(offsets_buf, dtype=np.int64, count=len(lines) + 1, offset=lines.offset * 8)
        view = memoryview(data) if data is not None else memoryview(b"")
        for start, end, k in _segments(batch.column(0)):
            hashers.setdefault(k, hashlib.sha256()).update(view[offsets[start]:offsets[end]])
            counts[k] = counts.get(k, 0) + (end - start)
    out = {k: TableDigest(counts[k], h.hexdigest()) for k, h in hashers.items()}
    for k in keys or ():
        out.setdefault(k, TableDigest(0, EMPTY_SHA256))
    return out


def row_sha256(store: Store, table: str, key: str, value: str) -> dict[str, Any]:
    """{'row_sha256', 'row_columns'} of one row, for the event that announces it."""
    columns = digestible_columns(table)
    return {"row_sha256": table_digests(store, table, columns, key, keys=[value])[value].sha256,
            "row_columns": columns}


def run_digests(store: Store, run_ids: Sequence[str],
                columns: dict[str, list[str]] | None = None) -> dict[str, dict[str, Any]]:
    """{run_id: {table: {rows, sha256}}} for the runs, requests and chunks of `run_ids`, plus
    the gpu_samples row count (its REAL columns have no exact text form)."""
    out: dict[str, dict[str, Any]] = {r: {} for r in run_ids}
    for table, order in RUN_TABLES:
        cols = (columns or {}).get(table) or digestible_columns(table)
        for rid, d in table_digests(store, table, cols, "run_id", order, keys=run_ids).items():
            out[rid][table] = d.as_dict()
    gpu = dict(store.con.execute(
        "SELECT run_id, count(*) FROM gpu_samples WHERE run_id IN (SELECT unnest(?::VARCHAR[])) GROUP BY run_id",
        [list(run_ids)]).fetchall())
    for rid in run_ids:
        out[rid]["gpu_samples"] = {"rows": int(gpu.get(rid, 0))}
    return out


def run_digest(store: Store, run_id: str) -> dict[str, Any]:
    """The digest a run-end event records: version, covered columns and per-table digests."""
    columns = {table: digestible_columns(table) for table, _ in RUN_TABLES}
    return {"v": DIGEST_VERSION, "columns": columns, "tables": run_digests(store, [run_id], columns)[run_id]}
