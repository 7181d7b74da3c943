"""`campaign tui [--db PATH] [--live]`: the Textual console over the run store.

Browses runs, run details, the report, verdicts and the audit chain; while a campaign owns the
database it follows the campaign's live snapshot (`<db>.live.json`) instead.
"""

from __future__ import annotations

from console.commands.db import add_db_arg
from data.errors import CampaignError


def register(sub) -> None:
    p = sub.add_parser("tui", help="interactive console: runs, run detail, report, verdicts, audit, live campaign")
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
