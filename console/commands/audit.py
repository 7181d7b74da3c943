"""`campaign audit verify|log`: the hash-chained audit trail."""

from __future__ import annotations

from rich.console import Console

from console.commands.db import add_db_arg
from console.output import FORMATS, print_rows
from data.audit import EVENT_KINDS, events, verify_chain
from data.store import open_store


def register(sub) -> None:
    p = sub.add_parser("audit", help="verify and list the audit chain")
    ps = p.add_subparsers(dest="audit_command", metavar="ACTION", required=True)
    v = ps.add_parser("verify", help="recompute the hash chain; names the first broken link")
    add_db_arg(v)
    v.set_defaults(func=cmd_verify)
    lg = ps.add_parser("log", help="list audit events")
    lg.add_argument("--kind", choices=EVENT_KINDS)
    lg.add_argument("--plan", help="plan hash (prefix) to filter on")
    lg.add_argument("--last", type=int, default=0, help="only the last N events")
    lg.add_argument("--format", choices=FORMATS, default="table")
    add_db_arg(lg)
    lg.set_defaults(func=cmd_log)


def cmd_verify(args) -> int:
    with open_store(args.db) as store:
        res = verify_chain(store)
    if res.ok:
        print(f"audit chain OK: {res.message}")
        return 0
    print(f"audit chain BROKEN at seq {res.first_broken_seq}: {res.message}")
    return 1


def cmd_log(args) -> int:
    with open_store(args.db) as store:
        rows = events(store, kind=args.kind)
    if args.plan:
        rows = [r for r in rows if (r["plan_hash"] or "").startswith(args.plan.lower())]
    if args.last:
        rows = rows[-args.last:]
    print_rows(["seq", "time", "kind", "plan", "subject", "payload"],
               [(r["seq"], r["event_time"].strftime("%Y-%m-%d %H:%M:%S"), r["kind"], (r["plan_hash"] or "")[:12],
                 r["subject"], r["payload_json"] if args.format != "table" else r["payload_json"][:100])
                for r in rows], args.format, console=Console(width=200))
    return 0
