"""SQL: a query box, a results table and the history of this session's queries. Queries are
read-only (data.snapshot.open_reader: the store itself, or the running campaign's snapshot), so
the tab works while a campaign runs and can never change the store, nor read or write any other
file (docs/integrity.md, "What a reader cannot do")."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.message import Message
from textual.widgets import DataTable, Input, OptionList, Static

from console.tui.panes.base import Pane
from console.tui.widgets import FAIL_STYLE, num

MAX_ROWS = 1000
EXAMPLE = "SELECT engine, concurrency, kind, count(*) AS runs FROM runs GROUP BY ALL ORDER BY ALL"


@dataclass(frozen=True)
class QueryResult:
    sql: str
    columns: list[str]
    rows: list[tuple[Any, ...]]
    total: int
    source: str  # "store" or "snapshot"


def run_query(db_path: Path, sql: str) -> QueryResult:
    """One read-only query; the first MAX_ROWS rows and the row count. The connection is a
    reader's (data/store.py READER_CONFIG): a statement that would change the store, touch a
    file or load code is refused, and the refusal says why."""
    import duckdb

    import stats.metrics.views  # noqa: F401  registers run_summary, quality_summary (data/views.py)
    from data.errors import CampaignError, first_line
    from data.snapshot import open_reader
    from data.store import reader_refusal

    with open_reader(db_path) as store:
        try:
            cur = store.con.execute(sql)
            columns = [d[0] for d in cur.description] if cur.description else []
            rows = cur.fetchall()
        except duckdb.Error as exc:
            msg = first_line(exc)
            why = reader_refusal(msg)
            if why is None:
                raise
            raise CampaignError("refused: " + ("the SQL tab is read-only" if why == "read-only" else why)
                                + f" ({msg})") from None
        source = "snapshot" if store.snapshot_of is not None else "store"
    return QueryResult(sql, columns, [tuple(r) for r in rows[:MAX_ROWS]], len(rows), source)


def cell(value: Any) -> Text | str:
    if value is None:
        return Text("NULL", style="dim")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return num(f"{value:.6g}" if isinstance(value, float) else str(value))
    return str(value)


class SqlPane(Pane):
    """The SQL tab. Keys typed in the query box are the query's (digits too); escape leaves the
    box for the results, where the number keys switch tabs again."""

    BINDINGS = [Binding("escape", "leave_box", "Leave the query box", show=False)]

    class Done(Message):
        def __init__(self, result: QueryResult) -> None:
            super().__init__()
            self.result = result

    DEFAULT_CSS = """
    SqlPane { height: 1fr; }
    SqlPane #sql-input { height: 3; }
    SqlPane #sql-info { height: 1; padding: 0 1; }
    SqlPane #sql-split { height: 1fr; }
    SqlPane #sql-results { width: 3fr; }
    SqlPane #sql-history { width: 1fr; min-width: 20; }
    """

    def __init__(self, db_path: Path, **kw: Any) -> None:
        super().__init__(**kw)
        self.db_path = db_path
        self.history: list[str] = []

    def compose(self) -> ComposeResult:
        yield Input(value=EXAMPLE, placeholder="SQL (read-only); enter runs it", id="sql-input")
        yield Static("enter runs the query (read-only; while a campaign runs, on its snapshot)", id="sql-info")
        with Horizontal(id="sql-split"):
            yield DataTable(id="sql-results", cursor_type="row")
            yield OptionList(id="sql-history")

    def load(self) -> None:
        """Nothing to preload: queries run when submitted."""

    def action_leave_box(self) -> None:
        self.query_one("#sql-results", DataTable).focus()

    @on(Input.Submitted, "#sql-input")
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        sql = event.value.strip()
        if sql:
            self.query_one("#sql-info", Static).update(f"running: {sql[:100]}")
            self.started(self.execute(sql))

    @work(thread=True, exclusive=True, group="sql", name="sql-query", exit_on_error=False)
    def execute(self, sql: str) -> None:
        self.post_message(self.Done(run_query(self.db_path, sql)))

    def show_error(self, text: str) -> None:
        self.query_one("#sql-info", Static).update(Text(text, style=FAIL_STYLE))

    def on_sql_pane_done(self, msg: "SqlPane.Done") -> None:
        r = msg.result
        table = self.query_one("#sql-results", DataTable)
        table.clear(columns=True)
        for c in r.columns:
            table.add_column(c)
        for row in r.rows:
            table.add_row(*(cell(v) for v in row))
        shown = f"{len(r.rows)} of {r.total}" if r.total > len(r.rows) else str(r.total)
        self.query_one("#sql-info", Static).update(f"{shown} row(s) from the {r.source}")
        if r.sql in self.history:
            self.history.remove(r.sql)
        self.history.insert(0, r.sql)
        opts = self.query_one("#sql-history", OptionList)
        opts.clear_options()
        opts.add_options(self.history)

    @on(OptionList.OptionSelected, "#sql-history")
    def _recall(self, event: OptionList.OptionSelected) -> None:
        box = self.query_one("#sql-input", Input)
        box.value = self.history[event.option_index]
        box.focus()
