"""The bootstrap parameters: the one place their defaults and the method names are defined
(docs/statistics.md, "Bootstrap").

Every noninferiority bound is a paired prompt-cluster bootstrap (stats/bootstrap.py) with B draws
from one seed, read off by a method at a confidence level. A plan freezes them (`bootstrap`
section, `data.plan_model.Plan.bootstrap` is this type); `campaign gate --scores` and
`campaign controls` take them as flags whose defaults are these. Free of project imports, so
`campaign --help` can show the defaults without loading the statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

METHODS = ("percentile", "bca")  # stats/bootstrap.py implements both; data/plan_schema.json admits these


@dataclass(frozen=True)
class BootstrapParams:
    draws: int = 20_000
    seed: int = 20261022
    method: str = METHODS[0]
    confidence: float = 0.95


BOOTSTRAP_DEFAULTS = BootstrapParams()
