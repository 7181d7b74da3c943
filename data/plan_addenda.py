"""What an addendum may change (docs/plans.md, "What an addendum may change").

An addendum adds to a frozen plan; it never changes what the parent's verdicts are judged under.
The decision-bearing fields are inherited: the margins, the bootstrap, the required concurrencies,
the metrics and their parameters, the scorers with their models and precisions, sampling and
output-length limits, the model, the quality baseline (name and engine), the decision rules, the
validators, the equivalence tolerances, a required selection and the holdout reservation. Freeze
refuses an addendum whose effective plan differs from its parent in any of them, naming each
field with both values. What an addendum may do: add engines (candidates), quality candidates,
decision rules, validators and equivalence pairs, change the sweep (runs, repeats), and name a
new holdout pool, which freeze audits like any reservation (never used, frozen before any output).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Callable

from data.plan_hashing import diff_documents
from data.plan_model import Plan

ABSENT = "<absent>"
# engine fields that say where it listens or how long to wait for it, not what it computes
_ENGINE_PLACE = ("port", "host", "health_timeout_s", "hypothesis", "frozen_checkpoints")


@dataclass(frozen=True)
class Change:
    """A decision-bearing field the addendum would change."""

    field: str
    parent: Any
    addendum: Any

    def line(self) -> str:
        return f"{self.field}: {_show(self.parent)} in the parent, {_show(self.addendum)} in the addendum"


def _show(v: Any) -> str:
    if isinstance(v, (list, tuple)) and len(v) > 6:
        return f"{len(v)} values [{', '.join(map(repr, v[:3]))}, ...]"
    return v if v == ABSENT else repr(v)


def _leaves(field: str, parent: Any, child: Any) -> list[Change]:
    """Every leaf of `field` that differs (a whole value when neither side is an object)."""
    if isinstance(parent, dict) or isinstance(child, dict):
        return [Change(f"{field}.{p}" if p else field, a, b)
                for p, a, b in diff_documents(parent if isinstance(parent, dict) else {},
                                              child if isinstance(child, dict) else {})]
    return [] if parent == child else [Change(field, parent, child)]


def _by_name(items: tuple[Any, ...], name: Callable[[Any], str]) -> dict[str, Any]:
    return {name(i): i for i in items}


def _kept(field: str, parent: dict[str, Any], child: dict[str, Any]) -> list[Change]:
    """Each of the parent's named items is kept as it is (new ones may be added)."""
    out: list[Change] = []
    for key, value in parent.items():
        out += [Change(f"{field}[{key!r}]", value, ABSENT)] if key not in child else \
            _leaves(f"{field}[{key!r}]", value, child[key])
    return out


def _engine_doc(plan: Plan, name: str | None) -> dict[str, Any] | None:
    for e in plan.engines:
        if e.name == name:
            return {k: v for k, v in asdict(e).items() if k not in _ENGINE_PLACE}
    return None


def protocol_changes(parent: Plan, child: Plan) -> list[Change]:
    """The decision-bearing fields of `parent` that `child` (an addendum's effective plan) changes."""
    p, c = parent, child
    out: list[Change] = []
    out += _leaves("model", asdict(p.model), asdict(c.model))
    out += _leaves("sampling", dict(p.sampling.fields), dict(c.sampling.fields))
    out += _leaves("metrics", asdict(p.metrics), asdict(c.metrics))
    out += _leaves("bootstrap", asdict(p.bootstrap), asdict(c.bootstrap))
    pq, cq = p.quality, c.quality
    out += _leaves("quality.baseline", pq.baseline, cq.baseline)
    out += _leaves("quality.margins", asdict(pq.margins), asdict(cq.margins))
    out += _leaves("quality.concurrencies", list(pq.scored_concurrencies), list(cq.scored_concurrencies))
    for name in ("scorers", "model_paths", "dtypes"):
        out += _leaves(f"quality.{name}", dict(getattr(pq, name)), dict(getattr(cq, name)))
    out += _leaves("quality.allow_truncated", pq.allow_truncated, cq.allow_truncated)
    if pq.baseline:
        out += _leaves(f"engines[{pq.baseline!r}]", _engine_doc(p, pq.baseline), _engine_doc(c, pq.baseline))
    if p.selection == "required" and c.selection != "required":
        out.append(Change("selection", p.selection, c.selection))
    out += _kept("decision_rules", _by_name(tuple(asdict(r) for r in p.decision_rules), lambda r: r["name"]),
                 _by_name(tuple(asdict(r) for r in c.decision_rules), lambda r: r["name"]))
    out += _kept("validators", _by_name(tuple(asdict(v) for v in p.validators), lambda v: v["name"]),
                 _by_name(tuple(asdict(v) for v in c.validators), lambda v: v["name"]))
    if p.equivalence is not None:
        ce = c.equivalence
        out += _kept("equivalence.pairs", {x.name: dict(x.tolerances) for x in p.equivalence.pairs},
                     {x.name: dict(x.tolerances) for x in ce.pairs} if ce else {})
    if p.workload.holdout_pool and not c.workload.holdout_pool:
        out.append(Change("workload.holdout_pool", p.workload.holdout_pool, c.workload.holdout_pool))
    return out


def reserved_ids_change(pool: str, parent_ids: list[str], child_ids: list[str]) -> Change | None:
    """The parent's reserved holdout ids, which an addendum keeping the pool may not change."""
    if list(child_ids) == list(parent_ids):
        return None
    return Change(f"workload.holdout_pool {pool!r} ids (the reservation)", list(parent_ids), list(child_ids))
