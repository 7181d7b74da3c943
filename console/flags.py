"""Flag names with one meaning across `campaign` (docs/results.md, "Command line"): `--plan-hash
HASH` filters by a frozen plan's hash (or unique prefix), `--plan FILE` is a plan file, `--format
table|csv|json` picks the output's form. Old spellings stay as hidden, deprecated aliases (left out
of `--help`, listed in docs/results.md) that still work, so scripts written against them do not
break and their output does not change."""

from __future__ import annotations

import argparse
from typing import Sequence

FORMATS = ("table", "csv", "json")


def add_plan_hash(parser: argparse.ArgumentParser, help: str = "plan hash (or unique prefix) to filter on") -> None:
    """`--plan-hash HASH` (dest `plan`); the old `--plan HASH` is a hidden deprecated alias."""
    parser.add_argument("--plan-hash", dest="plan", metavar="HASH", help=help)
    parser.add_argument("--plan", dest="plan", help=argparse.SUPPRESS)  # deprecated: a hash, not a file


def add_format(parser: argparse.ArgumentParser, choices: Sequence[str] = FORMATS, default: str = "table",
               dest: str = "format", help_extra: str = "") -> None:
    """`--format table|csv|json`: a table at a terminal (at natural width in a pipe), or the
    command's table as CSV or a JSON array on stdout, its other lines then on stderr
    (console/output.py)."""
    parser.add_argument("--format", choices=tuple(choices), default=default, dest=dest,
                        help=f"output form: {', '.join(choices)} (default {default}){help_extra}")
