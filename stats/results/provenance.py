"""Where and when a plan's runs were measured, for the head of a report (docs/results.md, "The
report's header"): the host, the GPUs with their driver, each engine with the code identities its
launches recorded, the plan hash and the time span of the runs. All of it is read from what the
store already holds; what it does not hold is said ("not recorded"), never guessed."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from data.launches import engine_identities


@dataclass(frozen=True)
class Provenance:
    plan_hash: str
    host: str  # cluster nodes, or the local host named by the plan's freeze
    gpus: list[str]  # '<name>, <memory> MiB' per distinct GPU model, or why none is recorded
    drivers: list[str]  # NVIDIA driver versions
    engines: dict[str, list[str]] = field(default_factory=dict)  # engine -> identity labels (launches)
    first_run: str | None = None  # 'YYYY-MM-DD HH:MM:SS' UTC
    last_run: str | None = None
    span_s: float | None = None

    def time_span(self) -> str:
        if self.first_run is None:
            return "no runs recorded"
        return (f"{self.first_run} – {self.last_run or 'still running'} UTC"
                + (f" ({_duration(self.span_s)})" if self.span_s is not None else ""))


def _duration(s: float) -> str:
    m, sec = divmod(int(round(s)), 60)
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min" if h else f"{m} min {sec:02d} s" if m else f"{sec} s"


def provenance(store: Any, plan: Any) -> Provenance:
    h = plan.hash
    nodes = [r["node_id"] for r in store.query(
        "SELECT DISTINCT node_id FROM runs WHERE plan_hash = ? AND node_id IS NOT NULL ORDER BY node_id", [h])]
    frozen_by = store.scalar("SELECT frozen_by FROM plans WHERE plan_hash = ?", [h])
    if nodes:
        host = f"Ray node(s) {', '.join(nodes)}"
    else:
        where = str(frozen_by).split("@", 1)[-1] if frozen_by else None
        host = (f"{where} (local runs; the host that froze the plan, {frozen_by})" if where
                else "local runs (no host recorded)")
    gpu_rows = store.query(
        "SELECT DISTINCT g.name, g.memory_total_mib, g.driver_version FROM gpu_devices g JOIN runs r USING (run_id) "
        "WHERE r.plan_hash = ? ORDER BY ALL", [h])
    gpus = list(dict.fromkeys(f"{g['name']}" + (f", {g['memory_total_mib']} MiB" if g["memory_total_mib"] else "")
                              for g in gpu_rows if g["name"]))
    drivers = list(dict.fromkeys(str(g["driver_version"]) for g in gpu_rows if g["driver_version"]))
    if not gpus:
        why = [r["telemetry_status"] for r in store.query(
            "SELECT DISTINCT telemetry_status FROM runs WHERE plan_hash = ? AND telemetry_status IS NOT NULL "
            "ORDER BY ALL", [h])]
        gpus = [f"not recorded ({'; '.join(why) or 'no runs'})"]
    span = store.query(
        "SELECT strftime(min(started_at) AT TIME ZONE 'UTC', '%Y-%m-%d %H:%M:%S') AS first, "
        "strftime(max(ended_at) AT TIME ZONE 'UTC', '%Y-%m-%d %H:%M:%S') AS last, "
        "(epoch_ms(max(ended_at)) - epoch_ms(min(started_at))) / 1000.0 AS span_s FROM runs WHERE plan_hash = ?", [h])[0]
    identities = engine_identities(store, h)
    engines = {e.name: identities.get(e.name, []) for e in plan.engines}
    return Provenance(h, host, gpus, drivers, engines, span["first"], span["last"],
                      float(span["span_s"]) if span["span_s"] is not None else None)
