"""Run store: migrations, version guard, bad files, batched ingestion, the sql/db CLI."""

from __future__ import annotations

import json

import numpy as np
import pytest

from console.cli import main
from data.errors import StoreError
from data.records import ChunkRecord, RequestRecord
from data.schema import MIGRATIONS, SCHEMA_VERSION, TABLES
from data.store import Store
from data.writer import BatchWriter


def test_new_store_has_every_table_empty(store):
    counts = store.table_counts()
    assert set(counts) == {t.name for t in TABLES}
    assert all(v == 0 for v in counts.values())
    assert store.schema_version() == SCHEMA_VERSION


def test_reopen_does_not_migrate_twice(tmp_path):
    path = tmp_path / "c.duckdb"
    Store(path).close()
    with Store(path) as s:
        # one row per migration (versions may have gaps while branches merge)
        assert s.scalar("SELECT count(*) FROM schema_version") == len(MIGRATIONS)


def test_newer_schema_is_refused(tmp_path):
    path = tmp_path / "c.duckdb"
    with Store(path) as s:
        s.con.execute("INSERT INTO schema_version VALUES (?, now(), 'from the future')", [SCHEMA_VERSION + 1])
    with pytest.raises(StoreError, match=r"schema version .* newer"):
        Store(path)


def test_not_a_duckdb_file(tmp_path):
    bad = tmp_path / "notes.duckdb"
    bad.write_text("hello, I am text\n" * 100)
    with pytest.raises(StoreError, match="not a DuckDB database"):
        Store(bad)
    assert bad.read_text().startswith("hello")  # nothing written to it


def test_writer_roundtrip_one_million_chunks(store):
    n = 1_000_000
    per_request = 50
    idx = np.arange(n)
    with BatchWriter(store) as w:
        w.add_columns("chunks", {
            "run_id": ["r1"] * n,
            "request_index": (idx // per_request).astype(np.int32),
            "chunk_index": (idx % per_request).astype(np.int32),
            "t_arrival_ns": (idx * 1000 + 7).astype(np.int64),
            "kind": ["audio"] * n,
            "samples": np.full(n, 24000, dtype=np.int32),
            "payload_bytes": np.full(n, 48044, dtype=np.int32),
            "server_emit_ns": (idx * 1000).astype(np.int64),
        })
    row = store.con.execute(
        "SELECT count(*), sum(samples), max(request_index), sum(t_arrival_ns - server_emit_ns) FROM chunks"
    ).fetchone()
    assert row == (n, n * 24000, n // per_request - 1, 7 * n)


def test_writer_records_land_together(store):
    w = BatchWriter(store, batch_rows=10)
    recs = [RequestRecord("r1", i, f"spk01-{i:04d}", False, "ok", 1000 + i) for i in range(3)]
    chunks = [ChunkRecord("r1", i, j, 2000 + j, "audio", 24000, 100) for i in range(3) for j in range(4)]
    w.add(recs + chunks)  # crosses batch_rows: flushed once inside add
    w.flush()
    assert store.scalar("SELECT count(*) FROM requests") == 3
    assert store.scalar("SELECT count(*) FROM chunks") == 12
    assert w.rows_written == {"requests": 3, "chunks": 12, "gpu_samples": 0, "audio_files": 0}


def test_cli_sql_prints_result(tmp_path, capsys):
    db = tmp_path / "c.duckdb"
    Store(db).close()  # `campaign sql` never creates a store (docs/integrity.md, "No store by accident")
    assert main(["sql", "select 42 as answer", "--db", str(db)]) == 0
    assert "42" in capsys.readouterr().out
    assert main(["sql", "select 42 as answer", "--db", str(db), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [{"answer": 42}]


def test_cli_sql_uses_env_database(tmp_path, monkeypatch, capsys):
    db = tmp_path / "env.duckdb"
    Store(db).close()
    monkeypatch.setenv("CAMPAIGN_DB", str(db))
    assert main(["db", "info"]) == 0
    out = capsys.readouterr().out
    assert str(db) in out and f"schema version: {SCHEMA_VERSION}" in out
    for t in TABLES:
        assert t.name in out


@pytest.mark.parametrize("query, needle", [
    ("select * from no_such_table", "SQL error: Catalog Error"),
    ("selec 1", "SQL error: Parser Error"),
])
def test_cli_sql_errors_are_one_line(tmp_path, capsys, query, needle):
    Store(tmp_path / "c.duckdb").close()
    assert main(["sql", query, "--db", str(tmp_path / "c.duckdb")]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_cli_bad_database_files_are_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.duckdb"
    bad.write_bytes(b"\x00not duckdb" * 1000)
    assert main(["db", "info", "--db", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "not a DuckDB database" in err and err.count("\n") == 1

    newer = tmp_path / "newer.duckdb"
    with Store(newer) as s:
        s.con.execute("INSERT INTO schema_version VALUES (99, now(), 'x')")
    assert main(["db", "info", "--db", str(newer)]) == 2
    err = capsys.readouterr().err
    assert "schema version 99 is newer" in err and err.count("\n") == 1


def test_schema_doc_is_current():
    from pathlib import Path

    import stats.metrics.views  # noqa: F401  registers the views the doc lists
    from data.schema import markdown
    from data.views import VIEWS
    doc = Path(__file__).resolve().parents[1] / "docs" / "schema.md"
    assert doc.read_text() == markdown(list(VIEWS.values())), "docs/schema.md is stale: run `make docs`"
