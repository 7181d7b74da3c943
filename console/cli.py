"""`campaign` command line.

Subcommands live one per module in `console/commands/`; each module exposes
`register(subparsers)` and sets `func` on its parser. User errors (`CampaignError`) print as
one line and exit 2; nothing a user types should end in a traceback.

Building the parser imports only what the parser needs: each command imports its run-time
dependencies (DuckDB, pandas, scipy, the engines ...) when it runs, so `campaign --help` and every
short command start fast (docs/performance.md, "Starting `campaign`"; tests/test_cli_imports.py).
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

import console.commands as commands_pkg
from data.errors import CampaignError, first_line
from data.extras import needs_extra


# The subcommands in the order a campaign uses them (docs/results.md, "Command line"): `campaign
# --help` lists them so, and its epilog names the steps. tests/test_cli_help.py holds every
# registered command to exactly one step.
WORKFLOW: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("try", ("demo", "engine", "probe")),
    ("plan", ("workload", "plan", "controls")),
    ("measure", ("run", "profile", "import", "equivalence", "validate")),
    ("score and decide", ("scorers", "score", "gate", "verdicts", "candidates", "accept")),
    ("read and check", ("tui", "report", "runs", "export", "evidence", "audit", "db", "sql")),
)


def _epilog() -> str:
    width = max(len(step) for step, _ in WORKFLOW)
    return "workflow:\n" + "\n".join(f"  {step:<{width}}  {', '.join(names)}" for step, names in WORKFLOW)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="campaign",
        description="Omni Campaign Console: auditable benchmark campaigns for speech-output serving engines.",
        epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for mod in sorted(pkgutil.iter_modules(commands_pkg.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"console.commands.{mod.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(sub)
    _workflow_order(sub)
    return parser


def _workflow_order(sub: argparse._SubParsersAction) -> None:
    """List the subcommands in WORKFLOW order in `--help` (argparse lists them in the order they
    were added; a command missing from WORKFLOW goes last)."""
    order = {name: i for i, name in enumerate(n for _, names in WORKFLOW for n in names)}
    sub._choices_actions.sort(key=lambda a: order.get(a.dest, len(order)))


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
    except KeyboardInterrupt:
        print("campaign: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except ImportError as exc:  # a lazily imported package of an extra that is not installed
        missing = needs_extra(f"campaign {args.command}", exc)
        if missing is None:
            raise
        print(f"campaign: error: {missing}", file=sys.stderr)
        return 2
    except Exception as exc:
        if not _is_duckdb_error(exc):
            raise
        print(f"campaign: database error: {first_line(exc)}", file=sys.stderr)
        return 2


def _is_duckdb_error(exc: BaseException) -> bool:
    """A DuckDB error, without importing DuckDB: one can only have been raised if it was imported."""
    duckdb = sys.modules.get("duckdb")
    return duckdb is not None and isinstance(exc, duckdb.Error)


if __name__ == "__main__":
    sys.exit(main())
