"""Custom messages: the TUI's components talk through these (Harlequin's pattern), so a test can
assert the sequence a user action produces."""

from __future__ import annotations

from textual.message import Message

from console.live import LiveSnapshot
from console.tui.data import AuditView, PlanReport, RunDetail, RunRow, VerdictRowView
from stats.results.quality_load import QualityLoad


class RunsLoaded(Message):
    def __init__(self, rows: list[RunRow]) -> None:
        super().__init__()
        self.rows = rows


class ReportsLoaded(Message):
    def __init__(self, reports: list[PlanReport], quality: dict[str, QualityLoad] | None = None) -> None:
        super().__init__()
        self.reports = reports
        self.quality = quality or {}  # plan hash -> quality under load


class VerdictsLoaded(Message):
    def __init__(self, verdicts: list[VerdictRowView]) -> None:
        super().__init__()
        self.verdicts = verdicts


class AuditLoaded(Message):
    def __init__(self, audit: AuditView) -> None:
        super().__init__()
        self.audit = audit


class StoreLocked(Message):
    """Another process (a running campaign) owns the database file."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message


class ReadingSnapshot(Message):
    """The store is owned by a running campaign; the tabs show the snapshot it served."""

    def __init__(self, store_path: str) -> None:
        super().__init__()
        self.store_path = store_path


class StoreUnavailable(Message):
    """The database cannot be read for another reason (missing, damaged, newer schema)."""

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message


class RunSelected(Message):
    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id


class RunDetailLoaded(Message, bubble=False):
    """Posted to the run detail screen by its loader; handled there."""

    def __init__(self, detail: RunDetail) -> None:
        super().__init__()
        self.detail = detail


class RunDetailFailed(Message, bubble=False):
    def __init__(self, run_id: str, message: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.message = message


class LiveSnapshotUpdated(Message):
    def __init__(self, snapshot: LiveSnapshot, writer_alive: bool) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.writer_alive = writer_alive


class CampaignFinished(Message):
    """The live snapshot says the campaign is over (or its process is gone): browse the store."""

    def __init__(self, reason: str) -> None:
        super().__init__()
        self.reason = reason
