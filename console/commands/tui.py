"""`campaign tui [--db PATH] [--live]`: the Textual console over the run store.

Tabs (TABS below): runs (with run detail), report, verdicts, gates, plan, SQL, live and audit; while
a campaign owns the database it follows the campaign's live snapshot (`<db>.live.json`) instead.
"""

from __future__ import annotations

from console.commands.db import add_db_arg
from data.errors import CampaignError


# the tabs of console/tui/app.py in their order, and what each shows (tests/test_cli_help.py holds
# this list to the app's tabs)
TABS = (("Runs", "every run; enter opens its run detail"),
        ("Report", "the per-engine concurrency table"),
        ("Verdicts", "issued verdicts and their checks"),
        ("Gates", "a dry run of the plan's gates (checks, bootstrap histogram, throughput rules)"),
        ("Plan", "the frozen plan, addenda, holdout, candidates and exclusions"),
        ("SQL", "read-only queries on the store"),
        ("Live", "the running campaign: cells, the current run, events, stop"),
        ("Audit", "the audit chain"))


def register(sub) -> None:
    import argparse

    tabs = ", ".join(name for name, _ in TABS)
    p = sub.add_parser("tui", help=f"interactive console, {len(TABS)} tabs: {tabs}",
                       formatter_class=argparse.RawDescriptionHelpFormatter,
                       description="The Textual console over the run store. Tabs:\n"
                                   + "\n".join(f"  {name:<9} {what}" for name, what in TABS))
    add_db_arg(p)
    p.add_argument("--live", action="store_true",
                   help="follow the running campaign's live snapshot (<db>.live.json) from the start")
    p.set_defaults(func=cmd_tui)


def cmd_tui(args) -> int:
    from console.live import live_path
    from console.tui.app import CampaignApp, lower_priority
    from data.store import resolve_db_path

    path = resolve_db_path(args.db)
    if path.is_dir():
        raise CampaignError(f"{path}: is a directory, not a DuckDB database")
    if not path.exists() and not (args.live and live_path(path).exists()):
        raise CampaignError(f"{path}: no such database (give --db PATH or set $CAMPAIGN_DB)")
    lower_priority()  # the console never competes with the campaign it watches for a core
    CampaignApp(path, live=args.live).run()
    return 0
