"""The quality verdict a candidate's gate result becomes once its preconditions are applied: a
precision change needs a PASS equivalence verdict (docs/equivalence.md) and a PASS needs the
candidate's validators (docs/plans.md, "Validators"). `campaign gate` and the TUI's Gates tab (a dry
run) both decide here, so the screen never shows a verdict the gate would not issue, and
`campaign evidence verify` re-derives an issued verdict here too (as of its own audit seq)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from console.equivalence import Precondition as EquivalencePrecondition
from console.equivalence import apply_precondition, equivalence_precondition
from data.plan_model import Plan
from data.store import Store
from data.validators import Precondition as ValidatorPrecondition
from data.validators import precondition


@dataclass(frozen=True)
class QualityDecision:
    """`result` is the gate result to issue: capped by the equivalence precondition, its verdict
    then passed through the validators'."""

    result: Any  # stats.gates.GateResult
    equivalence_cap: EquivalencePrecondition | None  # the cap that turned a PASS down, if one did
    validators: ValidatorPrecondition

    @property
    def reasons(self) -> list[str]:
        """Why a PASS was turned down (the equivalence cap's, then the validators'), as the gate says."""
        return [why for why in (self.equivalence_cap.reason if self.equivalence_cap else "", self.validators.reason)
                if why]


def decide_quality(store: Store, plan: Plan, candidate: str, result: Any,
                   before_seq: int | None = None) -> QualityDecision:
    """`before_seq`: decide from the record as it stood before that audit seq (the verdict's own
    `verdict_issued` event, when `campaign evidence verify` re-derives an issued verdict)."""
    pre = equivalence_precondition(store, plan, candidate, plan.engine(candidate).precision_change, before_seq)
    capped = apply_precondition(result, pre)
    validators = precondition(store, plan, candidate, before_seq)
    capped.verdict = validators.verdict(capped.verdict)
    return QualityDecision(capped, pre if capped is not result else None, validators)
