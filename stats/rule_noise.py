"""Noise said out loud: the runs under a throughput rule that the host disturbed or whose repeats
spread widely, named beside the rule's result (docs/statistics.md, "Noise beside a throughput rule").

A rule's bound already widens with the spread of its paired ratios; this note says where that
spread may come from, so a FAIL or a PASS measured on a busy host is read as such. It never
changes a status or a verdict. Two signs, each over a stated threshold:

- host steal: the hypervisor took the run's most-stolen CPU for more than `STEAL_SHARE` of the
  run's wall time (`driver_overhead_json.host_steal.max_cpu_ms` over ended_at - started_at;
  docs/timing.md);
- spread: one arm's throughput across the cell's repeats has a CV (sample std / mean) above
  `CV_LIMIT`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

STEAL_SHARE = 0.05  # 5 % of a run's wall time stolen from one CPU (the counter ticks in 10 ms)
CV_LIMIT = 0.10  # 10 % run-to-run CV of one arm's throughput at one concurrency


@dataclass(frozen=True)
class HostSteal:
    """One run's steal: the most-stolen CPU's milliseconds and the run's wall milliseconds."""
    max_cpu_ms: float
    wall_ms: float

    @property
    def share(self) -> float:
        return self.max_cpu_ms / self.wall_ms if self.wall_ms > 0 else 0.0


@dataclass(frozen=True)
class NoiseNote:
    concurrency: int
    engine: str
    sign: str  # "host steal" | "spread"
    run_ids: tuple[str, ...]
    detail: str  # the figure against its threshold

    def text(self) -> str:
        return f"C{self.concurrency} {self.engine}: {self.detail}; runs {', '.join(self.run_ids)}"


def host_steal(store: Any, run_ids: Sequence[str]) -> dict[str, HostSteal]:
    """run id -> its host steal, for the runs that recorded one (null off Linux) and a wall time."""
    if not run_ids:
        return {}
    rows = store.query("SELECT run_id, driver_overhead_json, epoch_ms(ended_at) - epoch_ms(started_at) AS wall_ms "
                       f"FROM runs WHERE run_id IN ({', '.join('?' * len(run_ids))})", list(run_ids))
    out: dict[str, HostSteal] = {}
    for r in rows:
        stolen = (json.loads(r["driver_overhead_json"] or "{}") or {}).get("host_steal")
        if isinstance(stolen, dict) and stolen.get("max_cpu_ms") is not None and r["wall_ms"]:
            out[r["run_id"]] = HostSteal(float(stolen["max_cpu_ms"]), float(r["wall_ms"]))
    return out


def rule_run_ids(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    return [v["run_id"] for c in cells for side in ("candidate", "reference") for v in c.get(side) or []
            if v.get("run_id")]


def rule_noise(cells: Sequence[Mapping[str, Any]], candidate: str, reference: str,
               steal: Mapping[str, HostSteal]) -> list[NoiseNote]:
    """The notes for a rule's cells as a verdict stores them (stats/throughput_rules.RuleCell as a
    dict: candidate/reference repeat rows with run ids, and each arm's spread)."""
    notes: list[NoiseNote] = []
    for c in cells:
        conc = int(c.get("concurrency") or 0)
        for side, engine in (("candidate", candidate), ("reference", reference)):
            rows = c.get(side) or []
            cv = (c.get(f"{side}_spread") or {}).get("cv")
            if cv is not None and cv > CV_LIMIT:
                notes.append(NoiseNote(conc, engine, "spread", tuple(v["run_id"] for v in rows),
                                       f"throughput CV {cv * 100:.1f}% across repeats (> {CV_LIMIT * 100:.0f}%)"))
            for v in rows:
                s = steal.get(v.get("run_id") or "")
                if s is not None and s.share > STEAL_SHARE:
                    notes.append(NoiseNote(conc, engine, "host steal", (v["run_id"],),
                                           f"host steal {s.max_cpu_ms:.0f} ms of {s.wall_ms / 1000:.1f} s on one CPU "
                                           f"({s.share * 100:.0f}% > {STEAL_SHARE * 100:.0f}%)"))
    return notes


def noise_summary(notes: Sequence[NoiseNote]) -> str:
    """The one-line lead of a rule's noise note, or '' when there is none."""
    if not notes:
        return ""
    signs = " and ".join(dict.fromkeys(n.sign for n in notes))
    return (f"noise: {signs} above the thresholds (docs/statistics.md) in {len(notes)} place(s); the result "
            "stands as computed, but a quieter host may give another")


def store_rule_noise(store: Any, cells: Sequence[Mapping[str, Any]], candidate: str, reference: str) -> list[NoiseNote]:
    """`rule_noise` with the runs' host steal read from the store."""
    return rule_noise(cells, candidate, reference, host_steal(store, rule_run_ids(cells)))
