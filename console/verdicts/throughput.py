"""Throughput verdicts: a plan's `throughput_exceeds` decision rule over paired repeats
(docs/statistics.md, "Decision rules"), the one place their decision is made: the rule's paired
ratios and bounds, then the candidate's validators (docs/plans.md, "Validators"). `campaign gate`,
the TUI's Gates tab and `campaign evidence verify` (as of the verdict's own audit seq) all decide
through `decide`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar

from console.evidence_steps import EvidenceMismatch
from console.verdicts.base import VerdictKind, compare_fields, same_verdict
from data.plan_model import DecisionRule, Plan
from data.store import Store
from data.validators import Precondition, precondition

RULE_FIELDS = ("status", "n_pairs", "geo_mean_ratio", "lower_bound_ratio", "min_ratio")
PAIR_FIELDS = ("candidate_run", "reference_run", "candidate", "reference", "ratio")


def decide(store: Store, plan: Plan, rule: DecisionRule, values: Any = None,
           before_seq: int | None = None) -> tuple[Any, Precondition]:
    """(the rule's result with its verdict under the candidate's validators, those validators);
    `values` as stats.throughput_rules.collect_values gives them (collected here when absent)."""
    from stats.throughput_rules import collect_values, evaluate_rule

    rr = evaluate_rule(rule, collect_values(store, plan, rule) if values is None else values)
    validators = precondition(store, plan, rule.candidate, before_seq)
    rr.verdict = validators.verdict(rr.verdict)
    return rr, validators


class ThroughputKind(VerdictKind):
    name: ClassVar[str] = "throughput"

    def reverify(self, root: Path, store: Store, doc: dict[str, Any], seq: int) -> str:
        from data.plan_loading import plan_from_store

        vid = doc["verdict_id"]
        plan = plan_from_store(store, doc["plan"]["hash"])
        name = (doc.get("decision_rule") or {}).get("name")
        rule = next((r for r in plan.decision_rules if r.name == name), None)
        if rule is None:
            raise EvidenceMismatch(f"verdict {vid}: the bundled plan {plan.hash[:12]} has no decision rule {name!r}")
        if isinstance(doc.get("validators"), dict):
            rr, _ = decide(store, plan, rule, before_seq=seq)
        else:  # issued before validators gated verdicts: the rule alone
            from stats.throughput_rules import collect_values, evaluate_rule

            rr = evaluate_rule(rule, collect_values(store, plan, rule))
        stored, derived = doc.get("checks") or [], rr.checks_dicts()
        if len(derived) != len(stored):
            raise EvidenceMismatch(f"verdict {vid}: {len(derived)} cells re-derived, the document has {len(stored)}")
        for s, d in zip(stored, derived):
            where = f"verdict {vid} C{s.get('concurrency')}"
            compare_fields(where, s, d, RULE_FIELDS)
            sp, dp = s.get("pairs") or [], d.get("pairs") or []
            if len(sp) != len(dp):
                raise EvidenceMismatch(f"{where}: {len(dp)} pairs re-derived, the document has {len(sp)}")
            for a, b in zip(sp, dp):
                compare_fields(f"{where} repeat {a.get('repeat')}", a, b, PAIR_FIELDS)
        same_verdict(vid, rr.verdict, doc)
        return f"{vid} {rr.verdict}: {len(derived)} cell(s), ratios and lower bounds bit-identical"

    def detail_lines(self, store: Store, row: dict[str, Any]) -> list[str]:
        """Each cell's ratio and test, then the rule's noise note (stats/rule_noise.py)."""
        from stats.results.checks import CheckRow
        from stats.rule_noise import noise_summary, store_rule_noise

        checks = json.loads(row.get("checks_json") or "[]")
        lines = [f"C{c.get('concurrency')}: ratio {c.get('geo_mean_ratio') or float('nan'):.2f}, "
                 + CheckRow.from_rule_cell(c).test for c in checks]
        rule = (json.loads(row.get("document_json") or "{}") or {}).get("decision_rule") or {}
        notes = store_rule_noise(store, checks, str(rule.get("candidate")), str(rule.get("reference")))
        return lines + ([f"[yellow]{noise_summary(notes)}:[/]"] + [f"  {n.text()}" for n in notes] if notes else [])


KIND = ThroughputKind()
