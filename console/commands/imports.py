"""`campaign import results FILE --source TEXT --ref TEXT [--list]`: outside figures, stored as
imported (hypotheses), never as measurements (data/imported.py; docs/results.md)."""

from __future__ import annotations

from console.commands.db import add_db_arg
from console.output import FORMATS, print_rows

LIST_COLUMNS = ["import_id", "row_number", "engine", "concurrency", "metric", "value_text", "unit", "source",
                "reference", "file_sha256"]


def register(sub) -> None:
    p = sub.add_parser("import", help="import outside results (kept apart: imported, not measured)")
    ps = p.add_subparsers(dest="import_command", metavar="ACTION", required=True)
    r = ps.add_parser("results", help="store the figures of a CSV or JSON file with their provenance")
    r.add_argument("file", nargs="?", help="CSV (engine,concurrency,metric,value,unit) or JSON list of those objects "
                                           "(each may carry `requests`: per-request rows)")
    r.add_argument("--source", help="who published the figures (required with FILE)")
    r.add_argument("--ref", help="where: URL, commit, paper (required with FILE)")
    r.add_argument("--list", action="store_true", help="list the imported figures instead")
    r.add_argument("--format", choices=FORMATS, default="table")
    add_db_arg(r)
    r.set_defaults(func=cmd_results)


def cmd_results(args) -> int:
    from pathlib import Path

    from data.errors import CampaignError
    from data.imported import MARK, import_results, imported_rows
    from data.store import open_store

    if args.list:
        with open_store(args.db, read_only=True) as store:
            rows = imported_rows(store)
        print_rows(LIST_COLUMNS, [[r[c] for c in LIST_COLUMNS] for r in rows], args.format)
        return 0
    if not args.file:
        raise CampaignError("import results: give a FILE (or --list)")
    if args.source is None or args.ref is None:
        raise CampaignError(f"import results {args.file}: --source and --ref are required (provenance)")
    path = Path(args.file)
    if not path.is_file():
        raise CampaignError(f"{path}: no such file")
    with open_store(args.db) as store:
        iid, n, seq = import_results(store, path, args.source, args.ref)
    print(f"imported {n} figure(s) from {path} as {iid} (audit seq {seq}): {MARK}; they enter no aggregate, "
          "gate, rule or verdict")
    return 0
