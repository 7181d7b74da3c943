"""Acceptance verdicts: the requester's decision over a candidate's pieces (quality, throughput,
validators, equivalence, selection, pinning; docs/results.md, "What acceptance requires"), decided
by stats/acceptance.decide for `campaign accept` and, as of the verdict's own audit seq, for
`campaign evidence verify`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from console.evidence_steps import EvidenceMismatch
from console.verdicts.base import VerdictKind
from data.store import Store


class AcceptanceKind(VerdictKind):
    name: ClassVar[str] = "acceptance"

    def reverify(self, root: Path, store: Store, doc: dict[str, Any], seq: int) -> str:
        """Each piece re-derived from the bundled chain, verdicts, candidates and validator runs as
        they stood before the acceptance's own event, equal to the document's."""
        from data.plan_loading import plan_from_store
        from stats.acceptance import RULES_VERSION, decide

        vid = doc["verdict_id"]
        if doc.get("rules_version") != RULES_VERSION:
            return f"{vid} {doc.get('verdict')}: not re-derived (decided under the acceptance rules before 2026-12-04)"
        plan = plan_from_store(store, doc["plan"]["hash"])
        acc = decide(store, plan, str(doc.get("candidate")), doc.get("candidate_config_sha256"), before_seq=seq)
        derived, stored = [p.as_dict() for p in acc.pieces], doc.get("pieces") or []
        for d, s in zip(derived, stored):
            if d != s:
                raise EvidenceMismatch(f"verdict {vid}: piece {d['piece']} re-derived as {d['status']} ({d['detail']}), "
                                       f"the document says {s.get('status')} ({s.get('detail')})")
        if len(derived) != len(stored) or acc.verdict != doc.get("verdict"):
            raise EvidenceMismatch(f"verdict {vid}: re-derived {acc.verdict} over {len(derived)} pieces, the document "
                                   f"says {doc.get('verdict')} over {len(stored)}")
        return f"{vid} {acc.verdict}: {len(derived)} pieces re-derived"

    def detail_lines(self, store: Store, row: dict[str, Any]) -> list[str]:
        checks = json.loads(row.get("checks_json") or "[]")
        return [", ".join(f"{c.get('piece')} {c.get('status')}" for c in checks)]


KIND = AcceptanceKind()
