"""What every tab component shares: one Worker.StateChanged handler, and whether a load is still
under way. Loaders are thread workers with exit_on_error=False; when one raises, its pane shows
the error and the app stays up (Worker.StateChanged does not bubble, so the handler lives on the
pane that owns the worker)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.containers import Vertical
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from data.errors import first_line

FINAL_STATES = (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED)


class Pane(Vertical):
    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._loading: set[Worker[Any]] = set()
        self.ended = 0  # loads that have ended (result or error shown), for waits on a new one

    def load(self) -> None:
        """Start (or restart) this tab's loader; called when the tab is first shown and on r."""

    def started(self, worker: Worker[Any]) -> Worker[Any]:
        """Note a loader just started (call with what the @work method returns)."""
        self._loading.add(worker)
        return worker

    @property
    def busy(self) -> bool:
        """A loader started with `started` has not yet reported its end to this pane. Its result
        message is posted before the worker ends, so once this is False the result is shown:
        the condition the pilot tests and snapshots wait for."""
        return bool(self._loading)

    def show_error(self, text: str) -> None:
        """Where a failed load says why; panes with a status line override this to show it there."""
        self.app.notify(text, title="load failed", severity="error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state in FINAL_STATES and event.worker in self._loading:
            self._loading.discard(event.worker)
            self.ended += 1
        if event.state != WorkerState.ERROR:
            return
        error = event.worker.error
        text = first_line(error) if error is not None else "failed"
        self.show_error(text)
        status = self.app.query("#status").results(Static)
        for line in status:
            line.update(Text(f"{event.worker.name}: {text}", style="bold red"))
