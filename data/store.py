"""The run store: one DuckDB file that holds every plan, run, request, chunk, GPU sample, score
and verdict of a campaign.

`Store` owns the connection, applies forward migrations on open and refuses a file written by a
newer version of the code. Everything else talks SQL through it; bulk ingestion goes through
`data.writer.BatchWriter`.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Sequence

import duckdb

from data.errors import StoreError
from data.schema import MIGRATIONS, SCHEMA_VERSION, TABLES, TABLES_BY_NAME

DEFAULT_DB = "campaign.duckdb"
ENV_DB = "CAMPAIGN_DB"


def resolve_db_path(arg: str | os.PathLike | None = None) -> Path:
    """--db flag, then $CAMPAIGN_DB, then ./campaign.duckdb."""
    return Path(arg or os.environ.get(ENV_DB) or DEFAULT_DB)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


class Store:
    """A migrated connection to one run-store file."""

    def __init__(self, path: str | os.PathLike, read_only: bool = False):
        self.path = Path(path)
        if read_only and not self.path.exists():
            raise StoreError(f"{self.path}: no such database")
        if self.path.exists() and self.path.is_dir():
            raise StoreError(f"{self.path}: is a directory, not a DuckDB database")
        try:
            self.con = duckdb.connect(str(self.path), read_only=read_only)
        except duckdb.Error as exc:
            msg = first_line(exc)
            if "lock" in msg.lower():
                raise StoreError(f"{self.path}: database is in use by another process ({msg})") from None
            raise StoreError(f"{self.path}: not a DuckDB database or unreadable ({msg})") from None
        self.read_only = read_only
        try:
            self._migrate()
        except Exception:
            self.con.close()
            raise

    # -- schema ---------------------------------------------------------------------------
    def schema_version(self) -> int:
        exists = self.con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'"
        ).fetchone()[0]
        if not exists:
            return 0
        return self.con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]

    def _migrate(self) -> None:
        current = self.schema_version()
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: schema version {current} is newer than this console knows "
                f"({SCHEMA_VERSION}); upgrade the console"
            )
        if current == SCHEMA_VERSION:
            return
        if self.read_only:
            raise StoreError(f"{self.path}: schema version {current} needs migration; open it read-write once")
        self.con.execute("BEGIN TRANSACTION")
        try:
            self.con.execute(
                "CREATE TABLE IF NOT EXISTS schema_version "
                "(version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL, description VARCHAR)"
            )
            for version, description, statements in MIGRATIONS:
                if version <= current:
                    continue
                for stmt in statements:
                    self.con.execute(stmt)
                self.con.execute(
                    "INSERT INTO schema_version VALUES (?, ?, ?)", [version, utcnow(), description]
                )
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise

    # -- queries --------------------------------------------------------------------------
    def table_counts(self) -> dict[str, int]:
        return {t.name: self.con.execute(f"SELECT count(*) FROM {t.name}").fetchone()[0] for t in TABLES}

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        """Rows as dicts (column name -> value)."""
        cur = self.con.execute(sql, params or [])
        cols = [d[0] for d in cur.description] if cur.description else []
        return [dict(zip(cols, row)) for row in cur.fetchall()]

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        row = self.con.execute(sql, params or []).fetchone()
        return row[0] if row else None

    def insert(self, table: str, row: dict[str, Any]) -> None:
        """Insert one row; unknown columns are an error, missing ones are NULL."""
        spec = TABLES_BY_NAME[table]
        unknown = set(row) - set(spec.column_names)
        if unknown:
            raise StoreError(f"{table}: unknown column(s) {sorted(unknown)}")
        cols = [c for c in spec.column_names if c in row]
        placeholders = ", ".join("?" for _ in cols)
        self.con.execute(
            f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({placeholders})", [row[c] for c in cols]
        )

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield self.con
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        self.con.execute("COMMIT")

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_store(path: str | os.PathLike | None = None, read_only: bool = False) -> Store:
    return Store(resolve_db_path(path), read_only=read_only)
