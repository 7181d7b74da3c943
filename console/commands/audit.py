"""`campaign audit verify|log`: the hash-chained audit trail."""

from __future__ import annotations

from typing import TYPE_CHECKING

from console.flags import add_plan_hash
from console.commands.db import add_db_arg
from console.output import FORMATS, print_rows
from data.audit import EVENT_KINDS
from data.errors import StoreCorrupt

if TYPE_CHECKING:
    from data.integrity import Check


def register(sub) -> None:
    p = sub.add_parser("audit", help="verify and list the audit chain")
    ps = p.add_subparsers(dest="audit_command", metavar="ACTION", required=True)
    v = ps.add_parser("verify", help="recompute the hash chain and cross-check every plan, verdict and run "
                                     "against it; names the first failing check (docs/integrity.md)")
    v.add_argument("--against", action="append", default=[], metavar="FILE",
                   help="also check that the store still holds the chain up to the head recorded in FILE: an "
                        "exported verdict document, a runs export or an anchor file (repeatable)")
    add_db_arg(v)
    v.set_defaults(func=cmd_verify)
    lg = ps.add_parser("log", help="list audit events")
    lg.add_argument("--kind", choices=EVENT_KINDS)
    add_plan_hash(lg)
    lg.add_argument("--last", type=int, default=0, help="only the last N events")
    lg.add_argument("--format", choices=FORMATS, default="table")
    add_db_arg(lg)
    lg.set_defaults(func=cmd_log)


def cmd_verify(args) -> int:
    from data.integrity import FAILED, load_exported, verify_store
    from data.store import open_store

    against = [load_exported(f) for f in args.against]
    try:
        with open_store(args.db, read_only=True) as store:
            checks = verify_store(store, against)
            if all(c.ok for c in checks):
                checks.append(_metrics_check(store))
    except StoreCorrupt as exc:
        print(f"audit verify FAILED: store file: {exc}")
        return 1
    for c in checks:
        print(f"{c.status:<11} {c.name:<10} {c.message}")
    failed = next((c for c in checks if c.status == FAILED), None)
    if failed:
        print(f"audit verify FAILED: {failed.name}: {failed.message}")
        return 1
    print(f"audit verify OK: {len(checks)} checks")
    return 0


def _metrics_check(store) -> Check:
    """Stored per-run metrics against a recomputation (the results every view reads)."""
    from data.integrity import FAILED, OK, Check
    from stats.metrics.stored import stored_metrics_problems

    n, problems = stored_metrics_problems(store)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        return Check("metrics", FAILED, problems[0] + more)
    return Check("metrics", OK, f"{n} stored run-metrics row(s) equal a recomputation from their runs")


def cmd_log(args) -> int:
    from data.audit import events
    from data.store import open_store

    with open_store(args.db) as store:
        rows = events(store, kind=args.kind)
    if args.plan:
        rows = [r for r in rows if (r["plan_hash"] or "").startswith(args.plan.lower())]
    if args.last:
        rows = rows[-args.last:]
    print_rows(["seq", "time", "kind", "plan", "subject", "payload"],
               [(r["seq"], r["event_time"].strftime("%Y-%m-%d %H:%M:%S"), r["kind"], (r["plan_hash"] or "")[:12],
                 r["subject"], r["payload_json"] if args.format != "table" else r["payload_json"][:100])
                for r in rows], args.format)
    return 0
