"""SQL views of the run store (docs/schema.md, "Views"): `run_summary`, `quality_summary`,
`cell_summary`, queryable by any DuckDB client (the `duckdb` CLI, pandas, DBeaver), not only by
the console.

The views are stored in the file (schema version 14, data/schema.py). Their SQL is built by the
layer that owns the definitions (the data layer knows no metric: `stats/metrics/views.py`
registers them when imported; the console names that module in `PROVIDERS`, so every store a
console opens has them). Each stored view carries its definition's version in its comment
(`view_comment`: the SHA-256 of its SQL), and on every open the stored definition is compared
with this console's (as DuckDB renders both, so an edited view is found as well as an older one):

- a read-write open replaces a view that differs, in one transaction (derived SQL over the
  tables; no measurement is touched), so an older store gets them on its next write open;
- a read-only open never writes: where the stored view differs or is missing it creates the
  console's own as a TEMP view of the same name, which shadows the stored one in that connection
  only. The console's readers therefore always see this console's definitions, and another
  client sees what the last read-write open of a console stored.
"""

from __future__ import annotations

import hashlib
import importlib
import re
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

# Modules that register views when imported (`register_view`), imported the first time a store
# opens. The console puts the statistics layer's here (console/__init__.py): the data layer
# imports no layer above it by name.
PROVIDERS: list[str] = []

VIEW_TAG = "omni-campaign view definition sha256:"
_TAG = re.compile(re.escape(VIEW_TAG) + r"([0-9a-f]{64})")


def register_view(view: View) -> None:
    """Define `view` for every store opened from now on (a later registration of the same name
    replaces it)."""
    VIEWS[view.name] = view


def load_providers() -> None:
    for module in PROVIDERS:
        importlib.import_module(module)


def definition_sha256(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()


def view_comment(view: View, sql: str) -> str:
    """The stored view's comment: its description, then its definition's version."""
    return f"{view.doc} [{VIEW_TAG}{definition_sha256(sql)}]"


def comment_sha256(comment: str | None) -> str | None:
    """The definition version a stored view's comment names (None: not a console's view)."""
    m = _TAG.search(comment or "")
    return m.group(1) if m else None


def _body(rendered: str) -> str:
    """DuckDB's rendering of a view without its `CREATE [TEMP] VIEW name AS` head."""
    return rendered.split(" AS ", 1)[1] if " AS " in rendered else rendered


def _stored(con: duckdb.DuckDBPyConnection) -> dict[str, str]:
    """name -> DuckDB's rendering of each view stored in the file."""
    return {name: _body(sql) for name, sql in con.execute(
        "SELECT view_name, sql FROM duckdb_views() WHERE NOT temporary AND NOT internal "
        "AND database_name = current_database() AND schema_name = 'main'").fetchall()}


def _rendered(con: duckdb.DuckDBPyConnection, sql: str) -> str:
    """How DuckDB renders a view of `sql` on this connection (a TEMP view made and dropped)."""
    con.execute(f"CREATE OR REPLACE TEMP VIEW __omni_view_probe AS {sql}")
    try:
        return _body(con.execute("SELECT sql FROM duckdb_views() WHERE temporary AND view_name = '__omni_view_probe'")
                     .fetchall()[0][0])
    finally:
        con.execute("DROP VIEW IF EXISTS __omni_view_probe")


def stale_views(con: duckdb.DuckDBPyConnection) -> list[View]:
    """The registered views whose stored definition is missing or differs from this console's."""
    stored = _stored(con)
    return [v for v in VIEWS.values() if stored.get(v.name) != _rendered(con, v.sql())]


def store_views(con: duckdb.DuckDBPyConnection, views: list[View]) -> None:
    """Create or replace `views` in the file, each with its versioned comment (the caller holds
    the transaction)."""
    for v in views:
        sql = v.sql()
        con.execute(f"CREATE OR REPLACE VIEW {v.name} AS {sql}")
        con.execute(f"COMMENT ON VIEW {v.name} IS '{view_comment(v, sql).replace(chr(39), chr(39) * 2)}'")


def shadow_views(con: duckdb.DuckDBPyConnection, views: list[View]) -> None:
    """This console's `views` as TEMP views: they shadow the stored ones in this connection alone
    (a read-only open)."""
    for v in views:
        con.execute(f"CREATE OR REPLACE TEMP VIEW {v.name} AS {v.sql()}")


def markdown(views: list[View]) -> list[str]:
    """The views' part of docs/schema.md."""
    out: list[str] = []
    for v in views:
        out += [f"## view `{v.name}`", "", v.doc, "", "| column | type | meaning |", "|---|---|---|"]
        out += [f"| `{c.name}` | {c.type} | {c.doc} |" for c in v.columns()]
        out.append("")
    return out
