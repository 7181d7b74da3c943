"""Chunk-row ingestion rate of data.writer.BatchWriter (target: >= 200,000 rows/s on 2 cores).

Prints rows/s for the two producer paths (typed ChunkRecord objects, as the driver ships them,
and column arrays), next to DuckDB's plain `executemany` measured in the same run as the
baseline (on fewer rows: it is orders of magnitude slower).

    .venv/bin/python bench/bench_ingest.py [--rows 1000000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from data.records import ChunkRecord
from data.store import Store
from data.writer import BatchWriter


def records(n: int) -> list[ChunkRecord]:
    return [ChunkRecord("run-bench", i // 50, i % 50, 1_000_000 + i * 997, "audio", 24000, 48044, i * 997)
            for i in range(n)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    n = ap.parse_args().rows
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp) / "bench.duckdb")
        recs = records(n)
        t0 = time.perf_counter()
        with BatchWriter(store) as w:
            w.add(recs)
        t_records = time.perf_counter() - t0

        idx = np.arange(n)
        cols = {
            "run_id": ["run-cols"] * n, "request_index": (idx // 50).astype(np.int32),
            "chunk_index": (idx % 50).astype(np.int32), "t_arrival_ns": idx.astype(np.int64),
            "kind": ["audio"] * n, "samples": np.full(n, 24000, np.int32),
            "payload_bytes": np.full(n, 48044, np.int32), "server_emit_ns": idx.astype(np.int64),
        }
        t0 = time.perf_counter()
        BatchWriter(store).add_columns("chunks", cols)
        t_cols = time.perf_counter() - t0

        base_n = max(2000, n // 500)
        rows = [(r.run_id + "-x", r.request_index, r.chunk_index, r.t_arrival_ns, r.kind, r.samples,
                 r.payload_bytes, r.server_emit_ns) for r in recs[:base_n]]
        t0 = time.perf_counter()
        store.con.executemany("INSERT INTO chunks VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        t_base = time.perf_counter() - t0
        stored = store.scalar("SELECT count(*) FROM chunks")
        store.close()
    assert stored == 2 * n + base_n
    r_rec, r_col, r_base = n / t_records, n / t_cols, base_n / t_base
    print(f"rows={n:,}")
    print(f"BatchWriter.add(ChunkRecord)   {r_rec:12,.0f} rows/s  ({t_records:.2f} s)")
    print(f"BatchWriter.add_columns        {r_col:12,.0f} rows/s  ({t_cols:.2f} s)")
    print(f"baseline executemany ({base_n:,})  {r_base:12,.0f} rows/s")
    print(f"ratio records/baseline = {r_rec / r_base:,.0f}x; target 200,000 rows/s: "
          f"{'met' if r_rec >= 200_000 else 'NOT met'}")


if __name__ == "__main__":
    main()
