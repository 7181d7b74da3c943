"""`campaign runs list|exclude`: runs of a campaign, and explicit exclusions with a reason."""

from __future__ import annotations

from console.flags import add_plan_hash
from console.commands.db import add_db_arg
from console.output import FORMATS, print_rows


def register(sub) -> None:
    p = sub.add_parser("runs", help="list runs; exclude a run from aggregates")
    ps = p.add_subparsers(dest="runs_command", metavar="ACTION", required=True)
    ls = ps.add_parser("list", help="runs (newest last) with kind, status and exclusion")
    add_plan_hash(ls)
    ls.add_argument("--engine")
    ls.add_argument("--format", choices=FORMATS, default="table")
    add_db_arg(ls)
    ls.set_defaults(func=cmd_list)
    ex = ps.add_parser("exclude", help="exclude a run from every aggregate (it stays in the store)")
    ex.add_argument("run_id")
    ex.add_argument("--reason", required=True, help="why (recorded in the audit chain)")
    add_db_arg(ex)
    ex.set_defaults(func=cmd_exclude)


def cmd_list(args) -> int:
    from data.launches import IDENTITY_SQL, identity_label
    from data.plan_loading import resolve_hash
    from data.store import open_store

    with open_store(args.db) as store:
        where, params = [], []
        if args.plan:
            where.append("r.plan_hash = ?")
            params.append(resolve_hash(store, args.plan))
        if args.engine:
            where.append("r.engine = ?")
            params.append(args.engine)
        rows = store.query(
            "SELECT r.run_id, r.engine, r.concurrency, r.kind, r.repeat_index, r.status, r.pool, r.cell_key, "
            "(SELECT count(*) FROM requests q WHERE q.run_id = r.run_id) AS requests, r.started_at, x.reason AS excluded, "
            f"{IDENTITY_SQL} FROM runs r LEFT JOIN exclusions x USING (run_id) "
            "LEFT JOIN engine_launches l ON l.launch_id = r.launch_id"
            + (" WHERE " + " AND ".join(where) if where else "") + " ORDER BY r.started_at, r.run_id", params)
    for r in rows:  # what code served the run (docs/engines.md, "Engine identity and patches")
        r.update(identity=identity_label(r), precision="CHANGED" if r["precision_change"] else "")
    cols = ["run_id", "engine", "concurrency", "kind", "repeat_index", "status", "pool", "requests", "started_at",
            "identity", "precision", "excluded"]
    print_rows(cols, [[r[c] for c in cols] for r in rows], args.format)
    return 0


def cmd_exclude(args) -> int:
    from data.queries import exclude_run
    from data.store import open_store

    with open_store(args.db) as store:
        seq = exclude_run(store, args.run_id, args.reason)
    print(f"run {args.run_id} excluded from aggregates (audit seq {seq}); it stays in the store")
    return 0
