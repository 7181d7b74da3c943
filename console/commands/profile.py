"""`campaign profile start|stop|list`: profiler windows; runs that overlap one are excluded
(data/profiler.py; docs/results.md, "Profiler windows")."""

from __future__ import annotations

from console.commands.db import add_db_arg
from console.output import FORMATS, print_rows

LIST_COLUMNS = ["window_id", "engine", "tool", "status", "start_seq", "stop_seq", "plan_hash", "note", "excluded_runs"]


def register(sub) -> None:
    p = sub.add_parser("profile", help="record profiler windows (their runs leave every aggregate)")
    ps = p.add_subparsers(dest="profile_command", metavar="ACTION", required=True)
    st = ps.add_parser("start", help="open a window: the engine is being profiled from now on")
    st.add_argument("--engine", required=True, help="engine name as runs record it (the plan's name, or probe's --engine)")
    st.add_argument("--tool", required=True, help="the profiler, e.g. 'nsys profile'")
    st.add_argument("--note")
    add_db_arg(st)
    st.set_defaults(func=cmd_start)
    sp = ps.add_parser("stop", help="close the open window; excludes the runs that overlapped it")
    sp.add_argument("--window", help="window id (when several are open)")
    sp.add_argument("--engine", help="the engine's open window (when several are open)")
    add_db_arg(sp)
    sp.set_defaults(func=cmd_stop)
    ls = ps.add_parser("list", help="every window with the runs it excluded")
    ls.add_argument("--format", choices=FORMATS, default="table")
    add_db_arg(ls)
    ls.set_defaults(func=cmd_list)


def cmd_start(args) -> int:
    from data.profiler import start
    from data.store import open_store

    with open_store(args.db) as store:
        wid, seq = start(store, args.engine, args.tool, args.note)
    print(f"profiler window {wid} open for engine {args.engine} (audit seq {seq}); its runs leave every aggregate")
    return 0


def cmd_stop(args) -> int:
    from data.profiler import stop
    from data.store import open_store

    with open_store(args.db) as store:
        wid, seq, excluded = stop(store, args.window, args.engine)
    print(f"profiler window {wid} closed (audit seq {seq}); "
          + (f"excluded as profiled: {', '.join(excluded)}" if excluded else "no run overlapped it"))
    return 0


def cmd_list(args) -> int:
    from data.profiler import REASON_PREFIX, windows
    from data.store import open_store

    with open_store(args.db, read_only=True) as store:
        rows = windows(store)
        ex = store.query("SELECT run_id, reason FROM exclusions WHERE starts_with(reason, ?) ORDER BY run_id",
                         [REASON_PREFIX])
    for r in rows:
        r["excluded_runs"] = ", ".join(x["run_id"] for x in ex if x["reason"] == REASON_PREFIX + r["window_id"])
    print_rows(LIST_COLUMNS, [[r[c] for c in LIST_COLUMNS] for r in rows], args.format)
    return 0
