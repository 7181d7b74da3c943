"""Reads while a campaign runs: the owner of the store serves consistent snapshot copies.

DuckDB admits one writing process per file, and a running campaign is that process, so another
process cannot open the store, not even read-only (docs/integrity.md, "Reading during a run").
Instead of answering "in use", a reader asks the owner: `SnapshotServer` (a thread in the
owning process) listens on a Unix socket named after the store's resolved path; on request it
copies every committed row into `<db>.snapshot.duckdb` with DuckDB's own `COPY FROM DATABASE`
on a separate cursor (its own transaction: a consistent view, never a half-written batch) and
replies with the file's path. `open_reader` opens the store itself when it can and the snapshot
when the store is owned, so `campaign sql`, `campaign report` and the TUI read during a run.
A snapshot younger than `max_age_s` is reused, so many readers cost one copy.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import time
from pathlib import Path

from data.errors import StoreError, StoreLocked
from data.hashing import sha256_text
from data.store import Store, require_store, sql_identifier

SNAPSHOT_SUFFIX = ".snapshot.duckdb"
REQUEST = b"snapshot\n"


def socket_path(db_path: str | os.PathLike) -> Path:
    """Short and per user (a Unix socket path holds at most 107 bytes), keyed by the resolved path."""
    key = sha256_text(str(Path(db_path).resolve()))[:16]
    return Path(tempfile.gettempdir()) / f"omni-campaign-{os.getuid()}-{key}.sock"


def snapshot_path(db_path: str | os.PathLike) -> Path:
    return Path(str(Path(db_path).resolve()) + SNAPSHOT_SUFFIX)


def take_snapshot(store: Store, target: Path) -> None:
    """Copy the committed state of `store` into a fresh file at `target` (atomically replaced)."""
    part = target.with_name(target.name + ".part")
    for p in (part, Path(str(part) + ".wal")):
        p.unlink(missing_ok=True)
    cur = store.con.cursor()  # its own connection and transaction: sees committed rows only
    try:
        db = cur.execute("SELECT current_database()").fetchall()[0][0]
        alias = f"snap_{os.getpid()}_{threading.get_ident()}"
        cur.execute(f"ATTACH ? AS {alias}", [str(part)])  # a path is a parameter, never SQL text
        try:
            cur.execute(f"COPY FROM DATABASE {sql_identifier(db)} TO {alias}")
        finally:
            cur.execute(f"DETACH {alias}")
    finally:
        cur.close()
    os.replace(part, target)


class SnapshotServer:
    """Serves snapshot copies of the store its process owns, from one daemon thread."""

    def __init__(self, store: Store, max_age_s: float = 1.0) -> None:
        self.store = store
        self.max_age_s = max_age_s
        self.sock_path = socket_path(store.path)
        self.target = snapshot_path(store.path)
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._taken = 0.0
        self.served = 0
        self.last_error: str | None = None

    def start(self) -> "SnapshotServer":
        """Listen; a socket left by a dead owner is replaced (the store's lock says we own it)."""
        self.sock_path.unlink(missing_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.sock_path))
        os.chmod(self.sock_path, 0o600)
        sock.listen(8)
        self._sock = sock
        self._thread = threading.Thread(target=self._serve, name="store-snapshots", daemon=True)
        self._thread.start()
        return self

    def _serve(self) -> None:
        assert self._sock is not None
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # closed by stop()
            with conn:
                conn.settimeout(5.0)
                try:
                    if conn.recv(64) != REQUEST:
                        continue
                    conn.sendall((json.dumps(self._answer()) + "\n").encode())
                except OSError:
                    continue

    def _answer(self) -> dict:
        try:
            if time.monotonic() - self._taken > self.max_age_s or not self.target.exists():
                take_snapshot(self.store, self.target)
                self._taken = time.monotonic()
            self.served += 1
            return {"path": str(self.target), "pid": os.getpid()}
        except Exception as exc:  # noqa: BLE001 - the campaign goes on; the reader gets the reason
            self.last_error = f"{type(exc).__name__}: {exc}"
            return {"error": self.last_error}

    def stop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self.sock_path.unlink(missing_ok=True)
        for p in (self.target, Path(str(self.target) + ".wal")):
            p.unlink(missing_ok=True)


def request_snapshot(db_path: str | os.PathLike, timeout_s: float = 60.0) -> Path | None:
    """Ask the store's owner for a snapshot; None when no owner serves one."""
    path = socket_path(db_path)
    if not path.exists():
        return None
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout_s)
            s.connect(str(path))
            s.sendall(REQUEST)
            data = b""
            while not data.endswith(b"\n"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
    except OSError:
        return None  # a socket left behind by an owner that died
    try:
        answer = json.loads(data or b"{}")
    except json.JSONDecodeError:
        return None
    if "error" in answer:
        raise StoreError(f"{db_path}: the campaign that owns the store could not take a snapshot ({answer['error']})")
    return Path(answer["path"]) if answer.get("path") else None


def open_reader(db_path: str | os.PathLike) -> Store:
    """The store read-only, or, while a campaign owns it, a consistent snapshot of it
    (`store.snapshot_of` then names the store it copies)."""
    try:
        return Store(db_path, read_only=True)
    except StoreLocked as exc:
        snap = request_snapshot(db_path)
        if snap is None:
            raise StoreLocked(f"{exc}; the process holding it serves no snapshots (a short command such as "
                              "`campaign gate` holds it for seconds: try again)") from None
    store = Store(snap, read_only=True)
    store.snapshot_of = Path(db_path)
    return store


def open_or_snapshot(db_path: str | os.PathLike) -> Store:
    """The store as a command opens it (migrated when needed; never created), or, while a campaign
    owns it, a snapshot: what a read-only command such as `campaign report` uses."""
    require_store(Path(db_path))
    try:
        return Store(db_path)
    except StoreLocked:
        return open_reader(db_path)
