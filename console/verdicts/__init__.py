"""The registry of verdict kinds (docs/architecture.md, "Verdict kinds"): one module per kind owns
its decision, how the bundle carries and verify re-derives it, and the lines views print for it.
Adding a kind is its module, its line here, and its test."""

from __future__ import annotations

from console.evidence_steps import EvidenceMismatch
from console.verdicts import acceptance, equivalence, quality, throughput
from console.verdicts.base import VerdictKind

KINDS: dict[str, VerdictKind] = {k.name: k for k in (
    quality.KIND,
    throughput.KIND,
    equivalence.KIND,
    acceptance.KIND,
)}


def kind_of(name: object, where: str = "verdict") -> VerdictKind:
    """The kind named `name`; a name no module declares is refused in one line."""
    kind = KINDS.get(str(name))
    if kind is None:
        raise EvidenceMismatch(f"{where}: kind {name!r} is not a verdict kind ({', '.join(KINDS)})")
    return kind
