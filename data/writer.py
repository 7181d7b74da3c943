"""Batched, transactional ingestion of high-rate records (requests, chunks, GPU samples).

Records are buffered per table and flushed as Arrow tables inside one transaction, so a
request never lands without its chunks and a crash loses at most the unflushed batch. DuckDB's
Arrow scan is its fastest bulk path (row-by-row INSERT manages a few thousand rows/s).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import pyarrow as pa

from data.records import AudioFileRecord, ChunkRecord, GpuSample, RequestRecord, field_names
from data.schema import TABLES_BY_NAME
from data.store import Store

_TABLE_OF = {
    RequestRecord: "requests",
    ChunkRecord: "chunks",
    GpuSample: "gpu_samples",
    AudioFileRecord: "audio_files",
}

# Arrow types for the columns we ingest in bulk; DuckDB casts the rest by name.
_ARROW = {
    "VARCHAR": pa.string(), "INTEGER": pa.int32(), "BIGINT": pa.int64(), "SMALLINT": pa.int16(),
    "BOOLEAN": pa.bool_(), "DOUBLE": pa.float64(), "REAL": pa.float32(), "UBIGINT": pa.uint64(),
}


def _arrow_table(table: str, columns: dict[str, Sequence[Any]]) -> pa.Table:
    spec = TABLES_BY_NAME[table]
    types = {c.name: _ARROW[c.type] for c in spec.columns}
    return pa.table({name: pa.array(values, type=types[name]) for name, values in columns.items()})


def records_to_tables(records: Iterable[Any]) -> dict[str, pa.Table]:
    """Records grouped per table as Arrow tables: the form a cluster node ships its batches in
    (console/cluster/recorder.py writes them with BatchWriter.write_tables)."""
    grouped: dict[type, list] = {}
    for rec in records:
        grouped.setdefault(type(rec), []).append(rec)
    out = {}
    for cls, recs in grouped.items():
        names = field_names(cls)
        out[_TABLE_OF[cls]] = _arrow_table(_TABLE_OF[cls], {n: [getattr(r, n) for r in recs] for n in names})
    return out


class BatchWriter:
    """Buffers records and writes them in Arrow batches; `flush()` commits one transaction."""

    def __init__(self, store: Store, batch_rows: int = 100_000):
        self.store = store
        self.batch_rows = batch_rows
        self._pending: dict[type, list] = {cls: [] for cls in _TABLE_OF}
        self.rows_written: dict[str, int] = {t: 0 for t in _TABLE_OF.values()}

    def add(self, records: Iterable[Any]) -> None:
        for rec in records:
            self._pending[type(rec)].append(rec)
        if sum(len(v) for v in self._pending.values()) >= self.batch_rows:
            self.flush()

    def add_columns(self, table: str, columns: dict[str, Sequence[Any]]) -> None:
        """Write column arrays directly (one transaction); the fastest path for bulk producers."""
        self._write({table: _arrow_table(table, columns)})

    def flush(self) -> None:
        batches = records_to_tables(r for recs in self._pending.values() for r in recs)
        if batches:
            self._write(batches)
        for recs in self._pending.values():
            recs.clear()

    def write_tables(self, batches: dict[str, pa.Table]) -> None:
        """Write Arrow tables (table name -> rows, as records_to_tables builds them) in one transaction."""
        unknown = sorted(set(batches) - set(_TABLE_OF.values()))
        if unknown:
            raise ValueError(f"write_tables: not an ingest table: {', '.join(unknown)}")
        if batches:
            self._write(batches)

    def _write(self, batches: dict[str, pa.Table]) -> None:
        # requests before chunks: readers that join them never see orphans mid-batch
        order = [t for t in ("requests", "chunks", "audio_files", "gpu_samples") if t in batches]
        with self.store.transaction():
            for table in order:
                self.store.insert_arrow(table, batches[table])
        for name, written in batches.items():
            self.rows_written[name] += written.num_rows

    def close(self) -> None:
        self.flush()

    def __enter__(self) -> "BatchWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None:
            self.flush()
