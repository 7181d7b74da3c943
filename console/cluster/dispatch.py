"""`campaign run PLAN --cluster ...`: the plan's cells as Ray tasks, one GPU each (docs/cluster.md).

The same rules as a local run (console/runner.py), from the same code: the preamble is
console/cell_executor.py's (only a frozen plan whose workload still matches runs; a phase with
runs continues only with --resume, which marks runs a dead runner left 'running' as 'incomplete'
and runs their cells again; every cell has a `cell_key`), and each group runs on its node through
the cell loop a local run uses (engine_adapters/cell_loop.py: the restart rule, the engine
manager). Ray only decides where a group runs. On top:

- the cluster must have the shape the plan states (shape.py), checked before anything runs;
- each pair group (groups.py) is one Ray task reserving `num_gpus=1`; the engine and the driver
  run on the node that holds the GPU (engine_adapters/cluster.py) and stream their records
  back; this process stores them (recorder.py) and is the store's only writer;
- a task that dies mid-group (worker killed, node lost) leaves its open run 'incomplete' with the
  reason; the cells it did not finish are queued again once; a second loss is a cell problem.

One dispatch thread per GPU submits a group and follows its stream; they hand the messages to
this thread through a queue. Ctrl-C cancels the tasks (their engines stop with them: each has an
orphan guard) and marks the open runs 'incomplete'.
"""

from __future__ import annotations

import itertools
import queue
import threading
from typing import Any

from console.cluster.connect import connect
from console.cluster.groups import pair_groups
from console.cluster.recorder import Recorder
from console.cluster.shape import check_shape, probe
from console.cell_executor import (
    Cell,
    RunnerOptions,
    RunnerResult,
    adapter_spec,
    drive_spec,
    new_cell_run_id,
    prepare_phase,
)
from data.errors import CampaignError, one_line
from data.checkpoints import frozen_digests
from data.plan_model import Plan
from data.queries import launch_seq
from data.store import Store
from engine_adapters.cluster import NodeCell, NodeGroup, drive_group

REQUEUES = 1  # a cell whose task was lost runs again this many times


def expected_checkpoints(store: Store, plan: Plan) -> dict[str, dict[str, str]]:
    """engine -> checkpoint path -> sha256 of the plan's first launch of it that hashed any
    (every node must serve the same model files, docs/cluster.md)."""
    import json

    out: dict[str, dict[str, str]] = {}
    for r in store.query("SELECT engine, checkpoint_sha256_json FROM engine_launches l WHERE plan_hash = ? "
                         f"ORDER BY {launch_seq('l')} NULLS LAST, launch_id", [plan.hash]):  # first: chain order
        got = json.loads(r["checkpoint_sha256_json"] or "{}")
        if got and r["engine"] not in out:
            out[r["engine"]] = got
    return out


def group_task(ray: Any) -> Any:
    """The Ray task that runs one group on the node holding its GPU (a streaming generator)."""
    @ray.remote(num_gpus=1, num_cpus=1, max_retries=0)
    def run_group(group: NodeGroup):
        yield from drive_group(group)

    return run_group


def run_plan_on_cluster(store: Store, plan: Plan, opts: RunnerOptions) -> RunnerResult:
    log = opts.log
    if not opts.cluster:
        raise CampaignError("a cluster run needs a cluster address (--cluster)")
    ray = connect(opts.cluster)
    shape = probe(ray)
    check_shape(plan, shape)
    phase = prepare_phase(store, plan, opts, local_gpu=False, where=f" on {shape.describe()}")
    todo, requests = phase.todo, phase.requests
    frozen = frozen_digests(store, plan.hash)  # each launch must find these (data/checkpoints.py)
    checkpoints = expected_checkpoints(store, plan)

    recorder = Recorder(store, plan, artifacts_dir=opts.artifacts_dir, params=phase.params,
                        shape=shape, index={c.key: i for i, c in enumerate(todo)}, total=len(todo), log=log,
                        on_cell=opts.on_cell, on_progress=opts.on_progress, on_node=opts.on_node, live=opts.live)
    ids = (f"g{i}" for i in itertools.count(1))

    def node_group(cells: list[Cell]) -> NodeGroup | None:
        """The group as a node runs it (cells whose engine already failed to start are dropped)."""
        keep = [c for c in cells if c.engine not in recorder.failed]
        for c in cells:
            if c.engine in recorder.failed:
                events.put((None, "_skipped", c))
        if not keep:
            return None
        gid = next(ids)
        specs = {new_cell_run_id(plan, c): c for c in keep}
        node_cells = [NodeCell(c.key, adapter_spec(plan.engine(c.engine), phase.env, frozen),
                               drive_spec(plan, c, rid, requests[c.concurrency], opts.artifacts_dir), c.concurrency,
                               metrics_path=plan.engine(c.engine).metrics_path,
                               scrape_interval_s=plan.server_metrics.interval_s)  # scraped on the node
                      for rid, c in specs.items()]
        recorder.register(gid, keep, {rid: n.drive for rid, n in zip(specs, node_cells)})
        return NodeGroup(gid, plan.hash, plan.sweep.restart, node_cells, telemetry=opts.telemetry, plan=plan,
                         manifest_hash=phase.manifest_hash, expected_checkpoints=checkpoints)

    task = group_task(ray)
    work: queue.Queue = queue.Queue()
    events: queue.Queue = queue.Queue()
    running: dict[str, Any] = {}

    def dispatcher() -> None:
        while (cells := work.get()) is not None:
            group = node_group(cells)
            if group is None:
                events.put((None, "_done", None))
                continue
            try:
                stream = task.remote(group)
                running[group.group_id] = stream
                for ref in stream:
                    events.put((group.group_id, *ray.get(ref)))
            except Exception as exc:  # the worker or node died, or the task raised: the group is lost
                events.put((group.group_id, "_lost", one_line(exc)))
            else:
                events.put((group.group_id, "_done", None))
            finally:
                running.pop(group.group_id, None)

    pending = 0
    requeued: dict[str, int] = {}
    for g in pair_groups(todo):
        work.put(g)
        pending += 1
    threads = [threading.Thread(target=dispatcher, name=f"cluster-dispatch-{i}", daemon=True)
               for i in range(max(1, min(shape.gpus, pending)))]
    for t in threads:
        t.start()
    try:
        while pending:
            gid, kind, payload = events.get()
            if kind == "_done":
                pending -= 1
            elif kind == "_skipped":
                recorder.give_up(payload, "skipped: its engine did not start")
            elif kind == "_lost":
                pending -= 1
                log(f"group {gid}: task lost: {payload}")
                again = []
                for c in recorder.lost(gid, payload):
                    if requeued.get(c.key, 0) < REQUEUES:
                        requeued[c.key] = requeued.get(c.key, 0) + 1
                        again.append(c)
                    else:
                        recorder.give_up(c, f"lost twice: {payload}")
                if again:
                    recorder.total += sum(1 for c in again if c.key in recorder.groups[gid].finished)
                    log(f"re-queued {len(again)} cell(s): {', '.join(c.key for c in again)}")
                    work.put(again)
                    pending += 1
            else:
                recorder.apply(gid, kind, payload)
    except BaseException:
        for stream in list(running.values()):
            try:
                ray.cancel(stream, force=True)
            except Exception:  # noqa: BLE001 - best effort: the task may be gone already
                pass
        for gid in list(recorder.groups):
            recorder.lost(gid, "interrupted: the console stopped the campaign")
        raise
    finally:
        for _ in threads:
            work.put(None)
    for t in threads:
        t.join(timeout=30)
    return phase.result(plan.hash, recorder.run_ids, dict(recorder.failed), recorder.problems)
