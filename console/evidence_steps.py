"""What `campaign evidence verify` reports: a step's outcome, and the mismatch that fails it. Apart
from console/evidence.py so the record checks (console/evidence_record.py) raise the same error
without importing the verifier that calls them."""

from __future__ import annotations

from dataclasses import dataclass

from data.errors import CampaignError


class EvidenceMismatch(CampaignError):
    """A bundled file or verdict does not match what its data re-derives; `check` names the step
    of verify that found it."""

    check = ""


@dataclass(frozen=True)
class Step:
    name: str
    detail: str
    status: str = "ok"  # or "not verified": a part of the bundle verify does not vouch for (report/)
