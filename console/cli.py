"""`campaign` command line.

Subcommands live one per module in `console/commands/`; each module exposes
`register(subparsers)` and sets `func` on its parser. User errors (`CampaignError`) print as
one line and exit 2; nothing a user types should end in a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import duckdb

import console.commands as commands_pkg
from data.errors import CampaignError, first_line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="campaign",
        description="Omni Campaign Console: auditable benchmark campaigns for speech-output serving engines.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in sorted(pkgutil.iter_modules(commands_pkg.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"console.commands.{mod.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return 0
    try:
        return int(func(args) or 0)
    except CampaignError as exc:
        print(f"campaign: error: {exc}", file=sys.stderr)
        return 2
    except duckdb.Error as exc:
        print(f"campaign: database error: {first_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("campaign: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
