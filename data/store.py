"""The run store: one DuckDB file that holds every plan, run, request, chunk, GPU sample, score
and verdict of a campaign.

`Store` owns the connection, applies forward migrations on open and refuses a file written by a
newer version of the code. Everything else talks SQL through it; bulk ingestion goes through
`data.writer.BatchWriter`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, Sequence

import duckdb

from data.errors import StoreCorrupt, StoreError, StoreLocked, first_line
from data.schema import MIGRATIONS, READER_SAFE_MIGRATIONS, SCHEMA_VERSION, TABLES, TABLES_BY_NAME
from data.views import load_providers, shadow_views, stale_views, store_views

DEFAULT_DB = "campaign.duckdb"
ENV_DB = "CAMPAIGN_DB"

# Every store connection: a query never installs or loads an extension behind the user's back
# (docs/integrity.md). The same settings on every connection, so one process can reopen a file.
CONNECT_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "autoinstall_known_extensions": False, "autoload_known_extensions": False}

# Every read-only connection (`campaign sql`, the TUI, a snapshot a reader gets during a run,
# `campaign report` on a snapshot, exports): no file outside the database it opened can be read
# or written and no extension loaded, so user SQL cannot COPY over the store or its anchor,
# EXPORT, ATTACH, INSTALL or LOAD; the configuration is locked so a `SET` cannot undo it
# (docs/integrity.md, "What a reader cannot do").
READER_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    **CONNECT_CONFIG, "enable_external_access": False, "lock_configuration": True}

# DuckDB's file layout: three 4 KiB headers, then blocks of `block_size` bytes, block id i at
# offset header + i * block_size (docs/integrity.md). The file must be long enough to hold as many
# blocks as its metadata says are in use; a shorter one has lost blocks its metadata points to.
FILE_HEADER_BYTES = 3 * 4096


# DuckDB's phrases for what READER_CONFIG (and `Store.lock_down`) refuse.
_NO_FILES = ("file system operations are disabled by configuration", "loading external extensions is disabled",
             "configuration has been locked", "belongs to an attached database")
NO_FILES_REASON = ("a query cannot read or write files other than the store, load extensions or change "
                   "settings (docs/integrity.md, \"What a reader cannot do\")")


def reader_refusal(message: str) -> str | None:
    """Why DuckDB refused a user's statement on a locked-down connection: "read-only" (it would
    change the store), NO_FILES_REASON (files, extensions, settings), or None (a plain SQL error)."""
    low = message.lower()
    if "read-only mode" in low:
        return "read-only"
    if any(p in low for p in _NO_FILES):
        return NO_FILES_REASON
    return None


def sql_identifier(name: str) -> str:
    """`name` as a quoted SQL identifier (a database name comes from a file name: any character)."""
    return '"' + name.replace('"', '""') + '"'


def resolve_db_path(arg: str | os.PathLike | None = None) -> Path:
    """--db flag, then $CAMPAIGN_DB, then ./campaign.duckdb."""
    return Path(arg or os.environ.get(ENV_DB) or DEFAULT_DB)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def open_error(path: Path, exc: BaseException) -> StoreError:
    """The typed error for a DuckDB failure on `path`: locked, corrupt, or plain unreadable.
    Matched on DuckDB's own phrases, never on a bare word ("block" contains "lock")."""
    msg = first_line(exc)
    low = msg.lower()
    if "could not set lock on file" in low or "conflicting lock is held" in low:
        return StoreLocked(f"{path}: database is in use by another process ({msg})")
    if "different configuration than existing connections" in low:
        return StoreLocked(f"{path}: database is already open in this process with other settings ({msg})")
    if "permission denied" in low or "no such file" in low:
        return StoreError(f"{path}: cannot open ({msg})")
    if "version number" in low and "can only read" in low:
        return StoreError(f"{path}: written by another DuckDB storage version ({msg})")
    return StoreCorrupt(f"{path}: corrupt: not a DuckDB database, or damaged or truncated ({msg})")


def is_corruption(exc: BaseException) -> bool:
    """A read that failed because the file's bytes are damaged (checksum, short read)."""
    low = first_line(exc).lower()
    return "corrupt database file" in low or "could not read enough bytes" in low


class Store:
    """A migrated connection to one run-store file."""

    def __init__(self, path: str | os.PathLike, read_only: bool = False):
        self.path = Path(path)
        if read_only and not self.path.exists():
            raise StoreError(f"{self.path}: no such database")
        if self.path.exists() and self.path.is_dir():
            raise StoreError(f"{self.path}: is a directory, not a DuckDB database")
        self.created = not self.path.exists()  # a fresh file starts a fresh audit anchor (data/anchor.py)
        self.snapshot_of: Path | None = None  # set by data.snapshot.open_reader: the store this copies
        self._tx_depth = 0
        self._on_commit: dict[str, Callable[[], None]] = {}
        try:
            self.con = duckdb.connect(str(self.path), read_only=read_only,
                                      config=READER_CONFIG if read_only else CONNECT_CONFIG)
        except duckdb.Error as exc:
            raise open_error(self.path, exc) from None
        self.read_only = read_only
        try:
            self.check_file_size()
            load_providers()  # the views' definitions (data/views.py)
            self._migrate()
            self._sync_views()
        except duckdb.Error as exc:
            self.con.close()
            raise open_error(self.path, exc) from None
        except Exception:
            self.con.close()
            raise

    def check_file_size(self) -> None:
        """Refuse a file too short for the blocks its metadata counts as used (a truncated copy
        opens fine and fails only when a lost block is read)."""
        if not self.path.is_file():
            return
        block_size, used_blocks = self.con.execute(
            "SELECT block_size, used_blocks FROM pragma_database_size() WHERE database_name = current_database()"
        ).fetchall()[0]
        need = FILE_HEADER_BYTES + int(block_size) * int(used_blocks) if used_blocks else 0
        size = self.path.stat().st_size
        if size < need:
            raise StoreCorrupt(f"{self.path}: corrupt: truncated: the file is {size} bytes but its metadata "
                               f"counts {used_blocks} used blocks of {block_size} bytes (at least {need} bytes)")

    # -- schema ---------------------------------------------------------------------------
    def schema_version(self) -> int:
        if not self.scalar("SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_version'"):
            return 0
        return self.scalar("SELECT coalesce(max(version), 0) FROM schema_version")

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
            if all(v in READER_SAFE_MIGRATIONS for v, _, _ in MIGRATIONS if v > current):
                return  # only stored views are missing: the reader makes its own (_sync_views)
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
            store_views(self.con, stale_views(self.con))  # version 14: the views are stored in the file
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise

    def _sync_views(self) -> None:
        """The views as this console defines them (data/views.py): a stored view that is missing or
        differs is replaced on a read-write open and shadowed by a TEMP view on a read-only one
        (which writes nothing)."""
        stale = stale_views(self.con)
        if not stale:
            return
        if self.read_only:
            shadow_views(self.con, stale)
            return
        with self.transaction() as con:
            store_views(con, stale)

    # -- queries --------------------------------------------------------------------------
    def table_counts(self) -> dict[str, int]:
        return {t.name: self.scalar(f"SELECT count(*) FROM {t.name}") for t in TABLES}

    def query(self, sql: str, params: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        """Rows as dicts (column name -> value)."""
        cur = self.con.execute(sql, params or [])
        cols = [d[0] for d in cur.description] if cur.description else []
        return [dict(zip(cols, row)) for row in cur.fetchall()]

    def scalar(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        """First column of the first row. Fetches the whole result: DuckDB >= 2 refuses the
        relational API (`con.sql`) while an earlier execute() result is unfinished."""
        rows = self.con.execute(sql, params or []).fetchall()
        return rows[0][0] if rows else None

    def relation(self, sql: str, params: Sequence[Any] | None = None) -> duckdb.DuckDBPyRelation:
        """A relational-API result (Arrow output without the DB-API copy). DuckDB >= 2 refuses it
        while an earlier execute() result is unfinished, so that one is run to its end first."""
        self.con.complete()
        return self.con.sql(sql, params=list(params) if params else None)

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

    def insert_arrow(self, table: str, arrow: Any) -> None:
        """Insert an Arrow table's rows in one statement (its columns by name; the caller holds the
        transaction when several tables must land together)."""
        self.con.register("_arrow_rows", arrow)
        try:
            cols = ", ".join(arrow.column_names)
            self.con.execute(f"INSERT INTO {table} ({cols}) SELECT {cols} FROM _arrow_rows")
        finally:
            self.con.unregister("_arrow_rows")

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One transaction; nested uses join the outermost (DuckDB has no nesting, and a failed
        BEGIN inside a transaction aborts it, so depth is tracked here rather than probed)."""
        if self._tx_depth:
            self._tx_depth += 1
            try:
                yield self.con
            finally:
                self._tx_depth -= 1
            return
        self.con.execute("BEGIN TRANSACTION")
        self._tx_depth = 1
        try:
            yield self.con
        except BaseException:
            self._tx_depth = 0
            self._on_commit.clear()
            self.con.execute("ROLLBACK")
            raise
        self._tx_depth = 0
        try:
            self.con.execute("COMMIT")
        except BaseException:
            self._on_commit.clear()
            raise
        self._run_on_commit()

    @contextmanager
    def single_threaded(self, threads: int = 1) -> Iterator[None]:
        """DuckDB's work on the calling thread alone (or on `threads` threads) until the block
        ends, then its thread count as it was. While a run records, the store is written from
        the decoder's idle-priority thread (engine_adapters/driver/priority.py); DuckDB's own
        worker threads were made at normal priority and took part of every insert and
        checkpoint, CPU the driver's processes could not then have (docs/timing.md, "What is
        kept away from the stamps")."""
        before = int(self.scalar("SELECT current_setting('threads')"))
        self.con.execute(f"SET threads = {int(threads)}")
        try:
            yield
        finally:
            self.con.execute(f"SET threads = {before}")

    def on_commit(self, key: str, fn: Callable[[], None]) -> None:
        """Run `fn` once the current transaction commits (now, outside one); one per key, so a
        transaction that appends many events writes their side effect once."""
        self._on_commit[key] = fn
        if not self._tx_depth:
            self._run_on_commit()

    def _run_on_commit(self) -> None:
        pending, self._on_commit = self._on_commit, {}
        for fn in pending.values():
            fn()

    def lock_down(self) -> None:
        """From now on this connection reads and writes no file but the store, loads no code and
        keeps its settings: what a read-write connection runs user SQL under (`campaign sql
        --write`). A read-only store is opened so already (READER_CONFIG)."""
        if not self.read_only:
            self.con.execute("SET enable_external_access = false")
            self.con.execute("SET lock_configuration = true")

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_store(path: str | os.PathLike | None = None, read_only: bool = False, create: bool = False) -> Store:
    """The store a command names. Only the commands that start a record (`plan freeze`, `run`,
    `probe`, `gate --scores --issue`) pass `create`: any other given a mistyped --db says so rather than making an
    empty store there (docs/integrity.md)."""
    db = resolve_db_path(path)
    if not create:
        require_store(db)
    return Store(db, read_only=read_only)


def require_store(path: Path) -> None:
    """Refuse a store path that holds no file (a typo must not create an empty store)."""
    if not path.exists():
        raise StoreError(f"{path}: no such database")
