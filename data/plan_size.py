"""How many requests a plan sends and about how long it runs, from the plan document alone
(docs/plans.md, "Campaign size and wall time"); `campaign plan init` prints both so a campaign's
cost is known before anything is frozen. Works on the raw JSON document (a template still holding
`<...>` placeholders cannot be loaded as a typed plan)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

DEFAULT_REQUEST_S = 5.0  # assumed seconds one request occupies a concurrency slot
DEFAULT_START_S = 120.0  # assumed seconds from an engine's launch to its health answer


@dataclass(frozen=True)
class PlanSize:
    """A plan's cells, requests, engine launches and estimated wall time."""
    sweep_cells: int
    sweep_requests: int
    holdout_cells: int
    holdout_requests: int | None  # None when the holdout pool's size is not known
    launches: int
    wall_s: float  # the estimate's formula: docs/plans.md
    request_s: float
    start_s: float

    @property
    def requests(self) -> int:
        return self.sweep_requests + (self.holdout_requests or 0)


def _repeats(sweep: Mapping[str, Any]) -> int:
    return int(sweep.get("warmup_repeats", 0)) + int(sweep["measured_repeats"])


def requests_at(sweep: Mapping[str, Any], c: int) -> int:
    """Measured requests of one sweep run at concurrency c (docs/plans.md, "Requests per run")."""
    return max(int(sweep["requests_per_run"]), int(sweep.get("requests_per_slot", 0)) * c)


def launches(sweep: Mapping[str, Any], engines: int, concurrencies: int, cells: int) -> int:
    """Engine launches of one phase under the plan's restart rule (console/runner.py starts one
    engine at a time unless restart is `never`)."""
    restart = sweep.get("restart", "per_repeat")
    if restart == "never":
        return engines
    if restart == "per_cell" and not (sweep.get("interleave") == "alternate" and engines > 1):
        return engines * concurrencies
    return cells  # per_repeat, or per_cell with alternating engines: every cell starts its engine


def plan_size(doc: Mapping[str, Any], holdout_pool_size: int | None = None,
              request_s: float = DEFAULT_REQUEST_S, start_s: float = DEFAULT_START_S) -> PlanSize:
    """The size of `doc`'s sweep and holdout phases and the wall-time estimate
    sum over cells of ceil(requests / C) x request_s, plus launches x start_s."""
    sw = doc["sweep"]
    reps, warm = _repeats(sw), int(sw.get("warmup_requests", 0))
    n_eng = len(doc["engines"])
    cs = [int(c) for c in sw["concurrencies"]]
    sweep_cells = n_eng * len(cs) * reps
    per_c = {c: requests_at(sw, c) + warm for c in cs}
    sweep_requests = n_eng * reps * sum(per_c.values())
    wall = n_eng * reps * sum(math.ceil(n / c) for c, n in per_c.items()) * request_s
    n_launch = launches(sw, n_eng, len(cs), sweep_cells)

    q = doc.get("quality") or {}
    # the holdout runs the baseline and every candidate (a candidate still to be named counts as one)
    q_eng = list(dict.fromkeys(e for e in (q.get("baseline"), *(q.get("candidates") or []), q.get("candidate"))
                               if isinstance(e, str) and e))
    qcs = [int(c) for c in q.get("concurrencies") or []]
    holdout_cells = len(q_eng) * len(qcs) * reps
    holdout_requests = None
    if holdout_pool_size is not None:
        holdout_requests = holdout_cells * (holdout_pool_size + warm)
        wall += len(q_eng) * reps * sum(math.ceil((holdout_pool_size + warm) / c) for c in qcs) * request_s
    if holdout_cells:
        n_launch += launches(sw, len(q_eng), len(qcs), holdout_cells)
    wall += n_launch * start_s
    return PlanSize(sweep_cells, sweep_requests, holdout_cells, holdout_requests, n_launch, wall, request_s, start_s)


def duration_text(seconds: float) -> str:
    """1 h 05 min, 12 min, 40 s."""
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"
    if seconds >= 60:
        return f"{round(seconds / 60)} min"
    return f"{round(seconds)} s"


def size_lines(size: PlanSize) -> list[str]:
    """What `plan init` prints about the campaign's size and time."""
    hold = (f"{size.holdout_requests:,} requests" if size.holdout_requests is not None
            else "each sends the whole holdout pool (size unknown until the workload is filled in)")
    return [f"sweep: {size.sweep_cells} cells, {size.sweep_requests:,} requests; holdout (quality): "
            f"{size.holdout_cells} cells, {hold}",
            f"estimated wall time: about {duration_text(size.wall_s)} = sum over cells of ceil(requests / C) x "
            f"{size.request_s:g} s per request + {size.launches} engine launches x {size.start_s:g} s "
            f"(--request-s, --start-s; scoring not included; docs/plans.md)"]
