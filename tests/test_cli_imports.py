"""`campaign --help`, `campaign CMD --help` and argument parsing import only what the parser needs:
every command imports its heavy dependencies when it runs (docs/performance.md, "Starting
`campaign`"). Every test and demo step spawns `campaign`, so its start-up time is paid many times.

Checked in a fresh interpreter (this one has imported everything already): build the parser, render
the help of every command and sub-command, parse a few command lines, then look at sys.modules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from console.cli import _is_duckdb_error

REPO = Path(__file__).resolve().parent.parent

# libraries and project modules a parser never needs (each costs tens to hundreds of ms to import);
# "stats" covers stats.gates, stats.bootstrap and every other statistics module
HEAVY = ("pandas", "scipy", "numpy", "pyarrow", "aiohttp", "torch", "duckdb", "textual", "jsonschema", "rich",
         "engine_adapters.reference.server", "engine_adapters.driver", "stats", "data.integrity", "data.store",
         "data.plan_validation", "data.plan_loading", "data.plan_freeze", "console.runner", "console.cell_executor", "console.tui",
         "asyncio", "ssl", "engine_adapters.transport")

PROBE = r"""
import argparse, json, sys
import console.cli

def walk(parser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from walk(sub)

parser = console.cli.build_parser()
helps = [p.format_help() for p in walk(parser)]
for argv in (["runs", "list"], ["db", "info"], ["gate", "--scores", "x.csv", "--wer-margin", "0.2"],
             ["probe", "--url", "http://127.0.0.1:1", "--dialect", "vllm-omni"], ["engine", "profiles"]):
    assert callable(parser.parse_args(argv).func), argv
print(json.dumps({"helps": len(helps), "modules": sorted(sys.modules)}))
"""


def _probe() -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_parser_and_help_import_no_heavy_module():
    res = _probe()
    assert res["helps"] > 30  # every command and sub-command was rendered
    loaded = set(res["modules"])
    heavy = sorted(m for m in loaded for h in HEAVY if m == h or m.startswith(h + "."))
    assert not heavy, f"building the parser imported {heavy}"


def test_duckdb_errors_are_recognised_without_importing_duckdb_first():
    """console/cli.py no longer imports DuckDB to catch its errors; they still read as one line, exit 2."""
    with pytest.raises(duckdb.Error) as info:
        duckdb.connect(":memory:").execute("SELECT * FROM no_such_table")
    assert _is_duckdb_error(info.value)
    assert not _is_duckdb_error(ValueError("x")) and not _is_duckdb_error(BrokenPipeError())
