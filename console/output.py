"""Rendering of tabular results on the terminal (Rich) or as CSV/JSON for pipes."""

from __future__ import annotations

import csv
import json
import sys
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Sequence

from rich.console import Console
from rich.table import Table

FORMATS = ("table", "csv", "json")


def _jsonable(v: Any) -> Any:
    if isinstance(v, (datetime, date)):
        return v.isoformat()
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    return v


def print_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str = "table",
               title: str | None = None, console: Console | None = None) -> None:
    if fmt == "csv":
        w = csv.writer(sys.stdout)
        w.writerow(columns)
        w.writerows([[_jsonable(v) for v in r] for r in rows])
    elif fmt == "json":
        json.dump([{c: _jsonable(v) for c, v in zip(columns, r)} for r in rows], sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        table = Table(title=title, show_lines=False)
        for c in columns:
            table.add_column(str(c))
        for r in rows:
            table.add_row(*["NULL" if v is None else str(_jsonable(v)) for v in r])
        (console or Console()).print(table)
