"""Rendering of tabular results on the terminal (Rich) or as CSV/JSON for pipes."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal, Sequence

if TYPE_CHECKING:
    from rich.console import Console

FORMATS = ("table", "csv", "json")


def _jsonable(v: Any) -> Any:
    if hasattr(v, "__rich_console__") and hasattr(v, "plain"):  # Rich Text: its characters
        return v.plain
    if isinstance(v, (datetime, date)):
        return v.isoformat()
    if isinstance(v, Decimal):
        return float(v)
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    return v


def copyable(column: str) -> bool:
    """A column whose values a user copies into another command (`campaign export verdict ID`,
    `runs exclude RUN`): an id, shown whole on one line at any terminal width (docs/results.md)."""
    name = column.lower().replace(" ", "_")
    return name in ("id", "run", "verdict", "launch") or name.endswith(("_id", "_hash"))


def output_console(stderr: bool = False) -> Console:
    """The console a command prints through: at a terminal, Rich's (its width); in a pipe or a file,
    lines as written, never wrapped at 80 columns (`print_rows` prints tables at natural width)."""
    from rich.console import Console

    con = Console(stderr=stderr)
    if not con.is_terminal:
        con.soft_wrap = True
    return con


def _cell(v: Any) -> Any:
    """A table cell: Rich text as it is (styled), anything else as text (None as NULL)."""
    if v is None:
        return "NULL"
    return v if hasattr(v, "__rich_console__") else str(_jsonable(v))


def print_rows(columns: Sequence[str], rows: Sequence[Sequence[Any]], fmt: str = "table",
               title: str | None = None, console: Console | None = None, turn: bool = True,
               right: Sequence[str] = ()) -> None:
    """Rows as a Rich table, CSV or JSON (cells may be Rich `Text`: CSV and JSON get its plain
    text). In the table nothing is cut with an ellipsis and no word is broken: at a terminal a
    table whose words do not fit its width is turned on its side (`fitting_table`); in a pipe or a
    file it is printed at its natural width, one line per row whatever COLUMNS says (`turn=False`:
    at a terminal, as Rich wraps it). A copyable column (`copyable`) never wraps; `right`: the
    columns aligned right (numbers)."""
    if fmt == "csv":
        w = csv.writer(sys.stdout)
        w.writerow(columns)
        w.writerows([[_jsonable(v) for v in r] for r in rows])
    elif fmt == "json":
        json.dump([{c: _jsonable(v) for c, v in zip(columns, r)} for r in rows], sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
    else:
        con = console or output_console()
        cells = [[_cell(v) for v in r] for r in rows]
        names = [str(c) for c in columns]
        if not con.is_terminal:
            _print_natural(con, _table(names, cells, title, right))
        else:
            con.print(fitting_table(con, names, cells, title, right) if turn else _table(names, cells, title, right))


def _print_natural(con: Console, table: Any) -> None:
    """`table` on one line per row: a console as wide as the table's widest rendering, on the same
    file (Rich would otherwise wrap it at 80 columns, or at $COLUMNS)."""
    from rich.console import Console
    from rich.measure import Measurement

    width = Measurement.get(con, con.options.update_width(1 << 20), table).maximum
    wide = Console(file=con.file, width=max(width, 1), color_system=None, highlight=False)
    wide.print(table)


def _table(columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None, right: Sequence[str] = ()) -> Any:
    from rich.table import Table

    table = Table(title=title, show_lines=False)
    for i, c in enumerate(columns):
        justify: Literal["right", "left"] = "right" if c in right else "left"
        if copyable(str(c)):
            widest = max([len(str(c))] + [len(str(r[i])) for r in rows if i < len(r)])
            table.add_column(str(c), no_wrap=True, min_width=widest, overflow="fold", justify=justify)
        else:
            table.add_column(str(c), overflow="fold", justify=justify)
    for r in rows:
        table.add_row(*r)
    return table


def _fits(console: Console, table: Any) -> bool:
    """Whether every word of every header and cell fits on the console's width (a table that does
    not fit is cut to `sco… met…` by Rich)."""
    from rich.measure import Measurement

    return Measurement.get(console, console.options.update_width(1 << 20), table).minimum <= console.width


def fitting_table(console: Console, columns: list[str], rows: list[list[Any]], title: str | None,
                  right: Sequence[str] = ()) -> Any:
    """The table as given when its words fit the terminal; else turned on its side (one line per
    column, one column per row) when that fits; else one two-column block per row. Nothing is cut."""
    from rich.console import Group

    table = _table(columns, rows, title, right)
    if not rows or _fits(console, table):
        return table
    side = _table(["", *[str(i + 1) for i in range(len(rows))]],
                  [[c, *[r[j] for r in rows]] for j, c in enumerate(columns)], title)
    if _fits(console, side):
        return side
    return Group(*[_table(["", f"{title or 'row'} {i + 1}"], [[c, v] for c, v in zip(columns, r)], None)
                   for i, r in enumerate(rows)])


class ClosedStdoutGuard(io.TextIOBase):
    """Stands in for sys.stdout during a long command (`campaign run`): when the reader goes away
    (`campaign run PLAN | head -2`), the first write that meets the closed pipe says so once on
    stderr, points fd 1 at /dev/null (so child processes and the interpreter's final flush do not
    meet it either) and the command carries on with its output discarded. `closed_pipe` tells the
    command to put its closing summary on stderr (the policy: console/commands/run.py)."""

    def __init__(self, inner: Any, notice: str):
        super().__init__()
        self.inner, self.notice, self.closed_pipe = inner, notice, False

    def _closed(self) -> None:
        self.closed_pipe = True
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self.inner.fileno())
            os.close(null)
            self.inner.flush()  # what was buffered goes to /dev/null now
        except (OSError, ValueError):
            pass
        try:
            print(self.notice, file=sys.stderr, flush=True)
        except OSError:
            pass

    def write(self, s: str) -> int:
        if not self.closed_pipe:
            try:
                return self.inner.write(s)
            except BrokenPipeError:
                self._closed()
        return len(s)

    def flush(self) -> None:
        if not self.closed_pipe:
            try:
                self.inner.flush()
            except BrokenPipeError:
                self._closed()

    def isatty(self) -> bool:
        return self.inner.isatty()

    def fileno(self) -> int:
        return self.inner.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.inner.encoding

    def writable(self) -> bool:
        return True

    @property
    def summary_stream(self) -> Any:
        """Where a closing summary can still be read."""
        return sys.stderr if self.closed_pipe else self


def guard_stdout(notice: str) -> ClosedStdoutGuard:
    """Install a ClosedStdoutGuard as sys.stdout (idempotent) and return it."""
    if not isinstance(sys.stdout, ClosedStdoutGuard):
        sys.stdout = ClosedStdoutGuard(sys.stdout, notice)
    return sys.stdout
