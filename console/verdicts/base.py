"""What every verdict kind declares (docs/architecture.md, "Verdict kinds"): how the evidence bundle
carries it, how `campaign evidence verify` re-derives it, and the lines every view prints for it.
A kind's decision lives in its own module beside this, and the registry (console/verdicts/__init__.py)
is the only place that picks a kind by name."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Iterable

from console.evidence_steps import EvidenceMismatch
from data.store import Store


class VerdictKind(ABC):
    """One kind of verdict. `row` is a `verdicts` row (verdict, checks_json, attribution_json,
    document_json, ...); `doc` a verdict document; `seq` its `verdict_issued` event's seq."""

    name: ClassVar[str]

    def bundle_files(self, verdict_id: str) -> tuple[str, ...]:
        """The files under verdicts/ beside `<id>.json` that the bundle carries for the verdict."""
        return ()

    def export(self, store: Store, row: dict[str, Any], doc: dict[str, Any], folder: Path) -> None:
        """Write `bundle_files` into the bundle's verdicts/ folder."""

    @abstractmethod
    def reverify(self, root: Path, store: Store, doc: dict[str, Any], seq: int) -> str:
        """Re-derive the verdict from the bundled record alone through the implementation that
        decided it; one line saying what was checked, or EvidenceMismatch."""

    def label(self, row: dict[str, Any]) -> str:
        """The verdict as printed wherever it is listed."""
        return str(row["verdict"])

    def detail_lines(self, store: Store, row: dict[str, Any]) -> list[str]:
        """What a summary prints under the verdict line."""
        return []


def same_value(a: Any, b: Any) -> bool:
    """Bit-identical numbers (None == None; NaN/inf are stored as None)."""
    if isinstance(a, float) and not math.isfinite(a):
        a = None
    if isinstance(b, float) and not math.isfinite(b):
        b = None
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return a == b
    return float(a) == float(b)


def compare_fields(where: str, stored: dict[str, Any], derived: dict[str, Any], fields: Iterable[str]) -> None:
    for f in fields:
        if not same_value(stored.get(f), derived.get(f)):
            raise EvidenceMismatch(f"{where}: {f} re-derived as {derived.get(f)!r}, the document says {stored.get(f)!r}")


def same_verdict(vid: str, derived: str, doc: dict[str, Any]) -> None:
    if derived != doc.get("verdict"):
        raise EvidenceMismatch(f"verdict {vid}: re-derived {derived}, the document says {doc.get('verdict')}")
