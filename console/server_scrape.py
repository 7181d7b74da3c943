"""Storing the engine's own metrics scraped around a local run (engine_adapters/server_scrape.py
scrapes; docs/results.md, "Server metrics"): in `server_metrics`, in one transaction, once the run
has ended. A storing failure is said on stderr and is not the run's failure; a run that raised
keeps no samples."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from types import TracebackType
from typing import Any, Callable

import pyarrow as pa

from data.store import Store
from engine_adapters.server_scrape import Scraper, ScrapeTarget, one_line
from engine_adapters.server_scrape import scrape_target as _target


def store_server_metrics(store: Store, run_id: str, table: pa.Table | None,
                         say: Callable[[str], None] = lambda line: print(line, file=sys.stderr)) -> None:
    """A run's scraped rows into `server_metrics`, in one transaction (nothing when there are none).
    The run is stored already: a failure here is said in one line, not raised."""
    if table is None or table.num_rows == 0:
        return
    try:
        with store.transaction():
            store.insert_arrow("server_metrics", table)
    except Exception as exc:  # noqa: BLE001 - the run is stored already; say so, do not fail it
        say(f"server metrics of run {run_id} not stored: {one_line(exc)}")


class ServerScrape(Scraper):
    """`with ServerScrape(store, target):` around a local run: scrapes, then stores the rows."""

    def __init__(self, store: Store, target: ScrapeTarget) -> None:
        super().__init__(target)
        self.store = store

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        super().__exit__(exc_type, exc, tb)
        if exc_type is None:
            store_server_metrics(self.store, self.target.run_id, self.table())


def scrape_target(run_id: str, engine: Any, interval_s: float | None) -> ScrapeTarget | None:
    """The run's target from the plan engine (`url`, `metrics_path`) and the plan's interval."""
    return _target(run_id, engine.name, engine.url, getattr(engine, "metrics_path", None), interval_s)


def server_scrape(store: Store, target: ScrapeTarget | None) -> Any:
    """The context manager the runner wraps a run in: a `ServerScrape`, or nothing when off."""
    return ServerScrape(store, target) if target is not None else nullcontext()
