"""SQL views every store connection gets (docs/schema.md, "Views").

A view here is a TEMP view, created on each connection when the store opens (read-only readers
included: a temp view lives in the connection, never in the file), from SQL its owner builds at
that moment. So a view over derived data follows the definitions of the console that opened the
store, and nothing is migrated when they change. The data layer knows no metric: the statistics
layer registers its views (`stats/metrics/views.py`: `run_summary`, `quality_summary`) when it is
imported, and every command that runs user SQL imports it first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import duckdb


@dataclass(frozen=True)
class ViewColumn:
    name: str
    type: str
    doc: str


@dataclass(frozen=True)
class View:
    name: str
    doc: str
    columns: Callable[[], list[ViewColumn]]  # the columns now (docs/schema.md lists them)
    sql: Callable[[], str]  # the SELECT now


VIEWS: dict[str, View] = {}


def register_view(view: View) -> None:
    """Create `view` on every store connection opened from now on (a later registration of the
    same name replaces it)."""
    VIEWS[view.name] = view


def create_views(con: duckdb.DuckDBPyConnection) -> None:
    """Create (or replace) every registered view as a TEMP view on `con`."""
    for v in VIEWS.values():
        con.execute(f"CREATE OR REPLACE TEMP VIEW {v.name} AS {v.sql()}")


def markdown(views: list[View]) -> list[str]:
    """The views' part of docs/schema.md."""
    out: list[str] = []
    for v in views:
        out += [f"## view `{v.name}`", "", v.doc, "", "| column | type | meaning |", "|---|---|---|"]
        out += [f"| `{c.name}` | {c.type} | {c.doc} |" for c in v.columns()]
        out.append("")
    return out
