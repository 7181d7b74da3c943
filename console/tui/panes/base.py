"""What every tab component shares: one Worker.StateChanged handler. Loaders are thread workers
with exit_on_error=False; when one raises, its pane shows the error and the app stays up
(Worker.StateChanged does not bubble, so the handler lives on the pane that owns the worker)."""

from __future__ import annotations

from rich.text import Text
from textual.containers import Vertical
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from data.store import first_line


class Pane(Vertical):
    def load(self) -> None:
        """Start (or restart) this tab's loader; called when the tab is first shown and on r."""

    def show_error(self, text: str) -> None:
        """Where a failed load says why; panes with a status line override this to show it there."""
        self.app.notify(text, title="load failed", severity="error")

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state != WorkerState.ERROR:
            return
        error = event.worker.error
        text = first_line(error) if error is not None else "failed"
        self.show_error(text)
        status = self.app.query("#status")
        if status:
            status.first(Static).update(Text(f"{event.worker.name}: {text}", style="bold red"))
