"""Everything one plan's results views show, read once: report cells, admission limits, the runs
left out of aggregates, and the issued verdicts with their checks as typed rows (docs/results.md).
The CLI report, the TUI, the HTML report and the evidence bundle read these."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from data.plan_model import Plan
from data.pool_status import evidence_of
from data.store import Store
from stats.results.checks import CheckRow, check_rows
from stats.results.report import LeftOut, ReportCell, admission_limits, build_report, left_out


@dataclass(frozen=True)
class VerdictResult:
    verdict_id: str
    created: str  # 'YYYY-MM-DD HH:MM:SS' UTC
    kind: str
    name: str | None
    verdict: str
    method: str | None
    draws: int | None
    seed: int | None
    plan_hash: str | None
    checks: list[CheckRow]
    evidence: str = "-"  # pool status (data.pool_status): reserved / reused / unreserved / external
    evidence_summary: str = ""  # its one-line statement, as recorded in the verdict document
    document: dict[str, Any] | None = field(default=None, repr=False, compare=False)  # with documents=True


def load_verdicts(store: Store, plan_hash: str | None = None, *, documents: bool = False) -> list[VerdictResult]:
    """Issued verdicts (oldest first), every plan's or one plan's."""
    sql = ("SELECT verdict_id, strftime(created_at AT TIME ZONE 'UTC', '%Y-%m-%d %H:%M:%S') AS created, kind, name, "
           "verdict, method, draws, seed, plan_hash, checks_json, document_json FROM verdicts")
    params: list[Any] = []
    if plan_hash is not None:
        sql += " WHERE plan_hash = ?"
        params.append(plan_hash)
    out = []
    for r in store.query(sql + " ORDER BY created_at, verdict_id", params):
        try:
            checks = check_rows(r["kind"], json.loads(r["checks_json"] or "[]"))
        except json.JSONDecodeError:
            checks = []
        doc = None
        if documents and r["document_json"]:
            try:
                doc = json.loads(r["document_json"])
            except json.JSONDecodeError:
                doc = None
        out.append(VerdictResult(r["verdict_id"], r["created"], r["kind"], r["name"], r["verdict"], r["method"],
                                 r["draws"], r["seed"], r["plan_hash"], checks, *evidence_of(r["document_json"]),
                                 document=doc))
    return out


@dataclass(frozen=True)
class PlanResults:
    plan: Plan
    frozen_at: str  # 'YYYY-MM-DD HH:MM' UTC
    cells: list[ReportCell]
    left_out: list[LeftOut] = field(default_factory=list)  # runs not in aggregates, by kind/status
    limits: dict[str, int] = field(default_factory=dict)  # engine -> admission limit from its deploy config

    def cells_of(self, engine: str) -> list[ReportCell]:
        return [c for c in self.cells if c.engine == engine]


def load_plan_results(store: Store, plan: Plan) -> PlanResults:
    frozen = store.scalar("SELECT strftime(frozen_at AT TIME ZONE 'UTC', '%Y-%m-%d %H:%M') FROM plans "
                          "WHERE plan_hash = ?", [plan.hash])
    return PlanResults(plan, frozen or "", build_report(store, plan), left_out(store, plan.hash),
                       admission_limits(store, plan))
