"""`campaign sql` and `campaign db info`: the run store is plain DuckDB, queryable with SQL.

`campaign sql` opens the store read-only: DuckDB itself refuses any statement that would change
it. `--write` opens it read-write and records the statement (text and SHA-256) as a `sql_write`
audit event in the same transaction, so a hand edit is never silent (docs/integrity.md).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from console.output import FORMATS, print_rows
from data.errors import CampaignError, first_line

if TYPE_CHECKING:
    from data.store import Store


def add_db_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="run store (default: $CAMPAIGN_DB or ./campaign.duckdb)")


def register(sub) -> None:
    p = sub.add_parser("sql", help="run SQL against the run store")
    p.add_argument("query", help="SQL statement, e.g. \"SELECT * FROM runs\"")
    p.add_argument("--write", action="store_true",
                   help="allow the statement to change the store; it is recorded in the audit chain "
                        "(sql_write event) and `campaign audit verify` shows it")
    add_db_arg(p)
    p.add_argument("--format", choices=FORMATS, default="table")
    p.set_defaults(func=cmd_sql)

    d = sub.add_parser("db", help="run store information")
    dsub = d.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    info = dsub.add_parser("info", help="path, schema version and row counts")
    add_db_arg(info)
    info.set_defaults(func=cmd_db_info)


def _execute(store: Store, query: str) -> tuple[list[str] | None, list[tuple]]:
    """(columns or None for a statement without a result, rows), with the result read to its end."""
    import duckdb

    try:
        cur = store.con.execute(query)
        if cur.description is None:
            return None, []
        return [d[0] for d in cur.description], cur.fetchall()
    except duckdb.Error as exc:
        msg = first_line(exc)
        if not store.read_only or "read-only mode" not in msg:
            raise CampaignError(f"SQL error: {msg}") from None
        raise CampaignError(f"sql: refused: the statement would change the store, which `campaign sql` opens "
                            f"read-only; add --write to run it (it is then recorded in the audit chain) ({msg})") from None


def cmd_sql(args) -> int:
    from data.audit import append_event, whoami
    from data.hashing import sha256_text
    from data.snapshot import open_reader
    from data.store import Store, resolve_db_path

    path = resolve_db_path(args.db)
    if not path.exists():
        Store(path).close()  # as every command: a missing store is created (empty, migrated)
    with (Store(path) if args.write else open_reader(path)) as store:  # a snapshot while a campaign runs
        if args.write:
            with store.transaction():
                columns, rows = _execute(store, args.query)
                seq = append_event(store, "sql_write", subject=sha256_text(args.query)[:12], payload={
                    "statement": args.query, "statement_sha256": sha256_text(args.query), "by": whoami()})
            print(f"recorded as audit event seq {seq} (sql_write)", file=sys.stderr)
        else:
            columns, rows = _execute(store, args.query)
    if columns is None:
        print("OK")
        return 0
    print_rows(columns, rows, args.format)
    return 0


def cmd_db_info(args) -> int:
    from data.store import open_store

    with open_store(args.db) as store:
        print(f"database: {store.path.resolve()}")
        print(f"schema version: {store.schema_version()}")
        counts = store.table_counts()
        print_rows(["table", "rows"], sorted(counts.items()), "table")
    return 0
