"""One drive over several driver processes (shards), each with its own event loop and connections,
so a step's burst of events is read by several cores instead of one (docs/performance.md).

Assignment: within each phase (warmup, then measured) the items keep their order and their
request indexes; the phase's closed-loop slots 0..c-1 (c = min(concurrency, items)) are dealt
round-robin to the shards, and item p goes to the shard of slot p mod c. So shard k runs
`len(range(k, c, K))` workers over its items, the shards together keep c requests in flight, and
with K dividing c this is plain round-robin by position. Every shard waits at a shared barrier
before its first request (one start instant for the run) and again between the warmup and the
measured phase, so warmup requests never overlap measured ones in any shard.

The parent merges what the shards report into one DriveSummary (merge_summaries): records are
those one process would produce (same request indexes, same fields); sent and CPU add up, loop and
send lag are summarised over every shard's samples, and `overhead.shards` keeps each shard's own.
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
from dataclasses import dataclass
from typing import Any, Sequence, TypeVar

from engine_adapters.driver.overhead import host_steal_summary, loop_lag_summary, runqueue_summary, summarise_ns
from engine_adapters.driver.results import DriveSummary

AUTO = "auto"
STREAMS_PER_SHARD = 256  # `auto`: one shard per this many concurrent streams (docs/performance.md)
READY_TIMEOUT_S = 600.0  # the longest a shard waits for its peers to start
PEER_STOPPED = "another driver shard of this run stopped"

T = TypeVar("T")


def resolve_shards(requested: int | str, concurrency: int, cpus: int | None = None) -> int:
    """How many driver processes a drive uses: `requested` (an integer, or `auto` = one per
    STREAMS_PER_SHARD streams, at most one fewer than the CPUs), never more than `concurrency`."""
    if requested == AUTO:
        n_cpu = cpus if cpus is not None else (os.cpu_count() or 1)
        k = min(n_cpu - 1, math.ceil(concurrency / STREAMS_PER_SHARD))
    else:
        k = int(requested)
    return max(1, min(k, concurrency))


def check_shards(value: Any) -> None:
    """ValueError naming the value unless it is an integer >= 1 or `auto`."""
    if value == AUTO:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"shards must be an integer >= 1 or {AUTO!r}, got {value!r}")


def slot_shard(position: int, slots: int, count: int) -> int:
    """The shard that runs a phase's item at `position`: its closed-loop slot (position mod the
    phase's `slots`), dealt round-robin to `count` shards."""
    return (position % slots) % count


def shard_items(items: Sequence[T], concurrency: int, index: int, count: int) -> tuple[list[T], int]:
    """(the items shard `index` of `count` runs, in order; how many workers it runs them with)."""
    c = min(concurrency, len(items))
    if count == 1 or c == 0:
        return list(items), c
    mine = [x for p, x in enumerate(items) if slot_shard(p, c, count) == index]
    return mine, len(range(index, c, count))


@dataclass
class ShardRole:
    """What one driver process knows of its place in a sharded drive. `barrier` is a
    multiprocessing Barrier of `count` parties, passed at spawn (it cannot travel later)."""
    index: int
    count: int
    barrier: Any

    def take(self, items: Sequence[T], concurrency: int) -> tuple[list[T], int]:
        return shard_items(items, concurrency, self.index, self.count)

    def slots(self, concurrency: int) -> int:
        """The most requests this shard has in flight at once."""
        return max(1, len(range(self.index, concurrency, self.count)))

    def wait_ready(self) -> bool:
        """Block until every shard is ready to send (the run's shared start instant); False if
        a peer stopped first or they did not all start within READY_TIMEOUT_S."""
        try:
            self.barrier.wait(READY_TIMEOUT_S)
        except threading.BrokenBarrierError:
            return False
        return True

    async def wait_phase(self) -> bool:
        """Wait, without blocking the loop, until every shard has finished its warmup; False if
        a peer stopped. A cancelled wait breaks the barrier, so no peer waits for this shard."""
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, self.barrier.wait)
        except threading.BrokenBarrierError:
            return False
        except asyncio.CancelledError:
            self.abort()
            raise
        return True

    def abort(self) -> None:
        self.barrier.abort()


class PeerStopped(Exception):
    """Another shard of the drive stopped (its cause reaches the parent from that shard)."""


class Meetings:
    """One drive's meeting points with its peer shards: the shared start instant, then, when the
    drive has a warmup phase, the end of every shard's warmup (see the module docstring). For a
    drive run whole (`shard` None) every meeting passes at once."""

    def __init__(self, shard: ShardRole | None, has_warmup: bool) -> None:
        self.shard = shard
        self.meet = shard is not None and has_warmup  # the shards meet between the phases
        self.ready = True
        self.passed = False

    def start(self) -> None:
        """Block until every shard is ready to send (outside the event loop's drive)."""
        if self.shard is not None:
            self.ready = self.shard.wait_ready()

    def check_start(self) -> None:
        if not self.ready:
            raise PeerStopped(f"{PEER_STOPPED} before the start")

    async def between_phases(self) -> None:
        if self.meet and self.shard is not None:
            if not await self.shard.wait_phase():
                raise PeerStopped(f"{PEER_STOPPED} during the warmup")
            self.passed = True

    def leave(self) -> None:
        """Leaving before the phases met: break the barrier, so no peer waits for this shard."""
        if self.meet and not self.passed and self.shard is not None:
            self.shard.abort()


def merge_summaries(parts: Sequence[DriveSummary], *, cancelled: bool) -> DriveSummary:
    """One DriveSummary from the shards' (in shard order; `cancelled` as the parent decided)."""
    first = parts[0]
    samples = {key: [v for p in parts for v in p.samples_ns.get(key, [])]
               for key in ("send_lag", "loop_lag", "loop_lag_at", "teardown_lag")}
    starts = [p.samples_ns["start"][0] for p in parts if p.samples_ns.get("start")]
    gcs = [p.overhead.get("gc") or {} for p in parts]
    overhead = {
        "send_lag": summarise_ns(samples["send_lag"]),
        "loop_lag": loop_lag_summary(samples["loop_lag"], samples["loop_lag_at"], samples["teardown_lag"]),
        "tick_ms": first.overhead.get("tick_ms"),
        "sends_per_pass": first.overhead.get("sends_per_pass"),
        "deferred_sends": sum(p.overhead.get("deferred_sends", 0) for p in parts),
        "busy_poll_us": first.overhead.get("busy_poll_us"),
        "busy_poll_passes": sum(p.overhead.get("busy_poll_passes", 0) for p in parts),
        "cpu_s": round(sum(p.overhead.get("cpu_s", 0.0) for p in parts), 4),
        "page_faults": sum(p.overhead.get("page_faults", 0) for p in parts),
        "runqueue": runqueue_summary([p.overhead.get("runqueue") for p in parts]),
        "host_steal": host_steal_summary([p.overhead.get("host_steal") for p in parts]),
        "gc": {"collections": [sum(g.get("collections", [0, 0, 0])[i] for g in gcs) for i in range(3)],
               "max_ms": [max(g.get("max_ms", [0, 0, 0])[i] for g in gcs) for i in range(3)],
               "total_ms": round(sum(g.get("total_ms", 0.0) for g in gcs), 3)},
        "start_spread_ms": round((max(starts) - min(starts)) / 1e6, 3) if starts else None,
        "shards": [{"sent": p.sent, "cpu_s": p.overhead.get("cpu_s"),
                    "loop_lag_max_ms": (p.overhead.get("loop_lag") or {}).get("max_ms"),
                    "gc_collections": (p.overhead.get("gc") or {}).get("collections"),
                    "page_faults": p.overhead.get("page_faults"), "heap": p.overhead.get("heap"),
                    "runqueue": p.overhead.get("runqueue"), "host_steal": p.overhead.get("host_steal"),
                    **({"cpus": p.overhead["cpus"]} if "cpus" in p.overhead else {}),
                    **({"trace": p.overhead["trace"]} if "trace" in p.overhead else {})} for p in parts],
    }
    error = next((p.error for p in parts if p.error and not p.error.startswith(PEER_STOPPED)), None)
    return DriveSummary(loop_impl=first.loop_impl, client_impl=first.client_impl, anchor_wall_ns=first.anchor_wall_ns,
                        anchor_perf_ns=first.anchor_perf_ns, sent=sum(p.sent for p in parts), cancelled=cancelled,
                        overhead=overhead, error=error)
