"""`campaign sql` and `campaign db info`: the run store is plain DuckDB, queryable with SQL.

`campaign sql` opens the store read-only: DuckDB itself refuses any statement that would change
it, and the reader connection can neither read nor write any other file nor load code (no
COPY ... TO, EXPORT, ATTACH, INSTALL, LOAD, read_csv; data/store.py READER_CONFIG). `--write`
opens it read-write, equally without file access, and records the statement (text and SHA-256)
as a `sql_write` audit event in the same transaction, so a hand edit is never silent
(docs/integrity.md).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from console.flags import add_format
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
    add_format(info)
    info.set_defaults(func=cmd_db_info)


def sql_message(exc: BaseException) -> str:
    """DuckDB's message on one line with its hint: the lines before the query excerpt ("Binder
    Error: Referenced column "enigne" not found ... Candidate bindings: "engine""; "Did you mean
    "runs"?"), never the excerpt with its carets."""
    text = str(exc).strip()
    head = text.split("\n\n", 1)[0]
    return " ".join(line.strip() for line in head.splitlines() if line.strip()) or first_line(exc)


def _execute(store: Store, query: str) -> tuple[list[str] | None, list[tuple]]:
    """(columns or None for a statement without a result, rows), with the result read to its end."""
    import duckdb

    from data.store import reader_refusal

    try:
        cur = store.con.execute(query)
        if cur.description is None:
            return None, []
        return [d[0] for d in cur.description], cur.fetchall()
    except duckdb.Error as exc:
        msg = sql_message(exc)
        why = reader_refusal(msg)
        if why is None:
            raise CampaignError(f"SQL error: {msg}") from None
        if why == "read-only":
            if not store.read_only:
                raise CampaignError(f"SQL error: {msg}") from None
            raise CampaignError(f"sql: refused: the statement would change the store, which `campaign sql` opens "
                                f"read-only; add --write to run it (it is then recorded in the audit chain) ({msg})") from None
        raise CampaignError(f"sql: refused: {why} ({msg})") from None


def cmd_sql(args) -> int:
    from data.audit import append_event, whoami
    from data.hashing import sha256_text
    from data.snapshot import open_reader
    from data.store import open_store, require_store, resolve_db_path

    path = resolve_db_path(args.db)
    require_store(path)  # a mistyped --db is an error, never a new empty store
    with (open_store(path) if args.write else open_reader(path)) as store:  # a snapshot while a campaign runs
        if args.write:
            store.lock_down()  # --write changes tables, never files: the statement is the user's
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
        out = sys.stdout if args.format == "table" else sys.stderr  # csv/json: stdout holds the table alone
        print(f"database: {store.path.resolve()}", file=out)
        print(f"schema version: {store.schema_version()}", file=out)
        counts = store.table_counts()
        print_rows(["table", "rows"], sorted(counts.items()), args.format)
    return 0
