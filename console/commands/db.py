"""`campaign sql` and `campaign db info`: the run store is plain DuckDB, queryable with SQL."""

from __future__ import annotations

import argparse

import duckdb

from console.output import FORMATS, print_rows
from data.errors import CampaignError
from data.store import first_line, open_store


def add_db_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", help="run store (default: $CAMPAIGN_DB or ./campaign.duckdb)")


def register(sub) -> None:
    p = sub.add_parser("sql", help="run SQL against the run store")
    p.add_argument("query", help="SQL statement, e.g. \"SELECT * FROM runs\"")
    add_db_arg(p)
    p.add_argument("--format", choices=FORMATS, default="table")
    p.set_defaults(func=cmd_sql)

    d = sub.add_parser("db", help="run store information")
    dsub = d.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    info = dsub.add_parser("info", help="path, schema version and row counts")
    add_db_arg(info)
    info.set_defaults(func=cmd_db_info)


def cmd_sql(args) -> int:
    with open_store(args.db) as store:
        try:
            cur = store.con.execute(args.query)
        except duckdb.Error as exc:
            raise CampaignError(f"SQL error: {first_line(exc)}") from None
        if cur.description is None:
            print("OK")
            return 0
        columns = [d[0] for d in cur.description]
        print_rows(columns, cur.fetchall(), args.format)
    return 0


def cmd_db_info(args) -> int:
    with open_store(args.db) as store:
        print(f"database: {store.path.resolve()}")
        print(f"schema version: {store.schema_version()}")
        counts = store.table_counts()
        print_rows(["table", "rows"], sorted(counts.items()), "table")
    return 0
