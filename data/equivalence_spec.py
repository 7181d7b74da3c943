"""The plan's `equivalence` section (docs/equivalence.md, docs/plans.md): which engine pairs are
compared, on which requests, at which concurrency, and the frozen tolerances.

Parsed here (not in data/plan_model.py) so the section is one concept in one module; the plan model
only calls `equivalence_from_dict` and validation `equivalence_errors`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

DEFAULT_UTTERANCES = 8


def _written(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if not k.startswith("_")}


@dataclass(frozen=True)
class EquivalencePair:
    reference: str
    candidate: str
    tolerances: dict[str, Any] = field(default_factory=dict)  # the section's, overridden by the pair's own

    @property
    def name(self) -> str:
        """The verdict's name: both engines, reference first."""
        return f"{self.candidate} vs {self.reference}"


@dataclass(frozen=True)
class EquivalenceSpec:
    pairs: tuple[EquivalencePair, ...]
    pool: str | None = None  # None: the plan's tuning pool (workload.pool)
    utterances: int = DEFAULT_UTTERANCES  # the first N of the pool, in pool order
    concurrency: int = 1  # 1: deterministic batch composition (docs/equivalence.md)
    repeats: int = 1
    reuse_stored: bool = False  # compare stored outputs of identical requests instead of sending them
    tensors: bool = False  # ask each arm to dump per-request tensors and compare them by name

    def pair(self, name: str) -> EquivalencePair:
        for p in self.pairs:
            if name in (p.name, p.candidate):
                return p
        raise KeyError(name)


def equivalence_from_dict(raw: Mapping[str, Any]) -> EquivalenceSpec:
    """The typed section from its validated dict."""
    base = _written(raw.get("tolerances") or {})
    pairs = tuple(EquivalencePair(p["reference"], p["candidate"], {**base, **_written(p.get("tolerances") or {})})
                  for p in raw["pairs"])
    return EquivalenceSpec(pairs=pairs, pool=raw.get("pool"), utterances=int(raw.get("utterances", DEFAULT_UTTERANCES)),
                           concurrency=int(raw.get("concurrency", 1)), repeats=int(raw.get("repeats", 1)),
                           reuse_stored=bool(raw.get("reuse_stored", False)), tensors=bool(raw.get("tensors", False)))


def equivalence_errors(raw: Mapping[str, Any], engines: set[str]) -> list[str]:
    """Cross-field rules: pair engines exist and differ; no pair twice."""
    errs: list[str] = []
    seen: set[tuple[str, str]] = set()
    for i, p in enumerate(raw.get("pairs") or []):
        for key in ("reference", "candidate"):
            if p[key] not in engines:
                errs.append(f"equivalence.pairs[{i}].{key}: {p[key]!r} is not an engine in this plan "
                            f"(have: {', '.join(sorted(engines))})")
        if p["reference"] == p["candidate"]:
            errs.append(f"equivalence.pairs[{i}]: reference and candidate are both {p['reference']!r}")
        if (p["reference"], p["candidate"]) in seen:
            errs.append(f"equivalence.pairs[{i}]: the pair {p['candidate']!r} vs {p['reference']!r} is listed twice")
        seen.add((p["reference"], p["candidate"]))
    return errs
