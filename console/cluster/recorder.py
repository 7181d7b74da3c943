"""Storing what cluster nodes stream back (engine_adapters/cluster.py messages), in the console
process, the store's only writer. The rows are the ones a local run writes, through the same
hooks (console/recording.py begin_run / finish_run, data/launches.py update_launch, data/writer.py write_tables,
console/cell_executor.py record_attempt), plus each run's placement (runs.node_id, gpu_uuid, gpu_name).

A group whose task is lost (worker or node died, docs/cluster.md) has its open run finished as
'incomplete' with the reason and its open launch marked crashed; `lost` returns the cells that
did not finish, for the dispatcher to re-queue once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from console.recording import begin_run, finish_run
from console.server_scrape import store_server_metrics
from console.cell_executor import EXPLORATORY_NOTE, Cell, cell_problem, record_attempt
from data.hashing import sha256_bytes
from data.launches import store_launch, update_launch
from data.store import Store
from data.writer import BatchWriter
from engine_adapters.driver.decode import store_audio


@dataclass
class OpenRun:
    cell: Cell
    spec: Any  # engine_adapters.driver.DriveSpec as the console built it
    stored: int = 0
    started: bool = False
    launch_id: str | None = None


@dataclass
class GroupState:
    group_id: str
    cells: list[Cell]
    runs: dict[str, OpenRun]  # run id -> run (one per cell)
    placement: dict[str, Any] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)  # cell keys ended or skipped
    launches: dict[str, dict[str, Any]] = field(default_factory=dict)  # open launch id -> row


def run_placement(placed: dict[str, Any], shape: Any) -> dict[str, Any]:
    """node_id / gpu_uuid / gpu_name of runs in a placed group. Without NVML on the node the GPU
    is named by the cluster shape and identified as ray-gpu:<node id>/<slot> (docs/cluster.md)."""
    gpu = placed.get("gpu") or {}
    node = shape.node(placed["node_id"]) if shape is not None else None
    return {"node_id": placed["node_id"],
            "gpu_uuid": gpu.get("uuid") or f"ray-gpu:{placed['node_id'][:12]}/{placed['slot']}",
            "gpu_name": gpu.get("name") or (node.gpu_name(placed["slot"]) if node else None)}


class Recorder:
    """Applies node messages to the store; call everything from the store owner's thread."""

    def __init__(self, store: Store, plan: Any, *, artifacts_dir: Path, params: dict[str, Any], shape: Any,
                 index: dict[str, int], total: int, log: Callable[[str], None],
                 on_cell: Callable[..., None] | None = None, on_progress: Callable[..., None] | None = None,
                 on_node: Callable[[dict[str, Any]], None] | None = None, live: Any = None):
        self.store, self.plan, self.artifacts_dir, self.params, self.shape = store, plan, Path(artifacts_dir), params, shape
        self.index, self.total, self.log = index, total, log
        self.on_cell, self.on_progress, self.on_node, self.live = on_cell, on_progress, on_node, live
        self.writer = BatchWriter(store)
        self.groups: dict[str, GroupState] = {}
        self.run_ids: list[str] = []
        self.failed: dict[str, str] = {}
        self.problems: list[tuple[str, str]] = []
        self.finished_cells = 0
        self._lock = threading.Lock()  # groups are registered from dispatch threads

    # -- registration (dispatch threads) -------------------------------------------------------
    def register(self, group_id: str, cells: list[Cell], specs: dict[str, Any]) -> None:
        with self._lock:
            self.groups[group_id] = GroupState(group_id, cells, {rid: OpenRun(c, specs[rid]) for rid, c in
                                                                   zip(specs, cells)})

    def _cell_run(self, g: GroupState, cell_key: str) -> tuple[str, OpenRun]:
        return next((rid, r) for rid, r in g.runs.items() if r.cell.key == cell_key)

    def _label(self, g: GroupState) -> str:
        p = g.placement
        return f"{p.get('hostname', '?')}/gpu{p.get('slot', '?')}" if p else g.group_id

    # -- messages ------------------------------------------------------------------------------
    def apply(self, group_id: str, kind: str, payload: dict[str, Any]) -> None:
        g = self.groups[group_id]
        getattr(self, f"_on_{kind}")(g, payload)

    def _on_placed(self, g: GroupState, p: dict[str, Any]) -> None:
        g.placement = {**p, **run_placement(p, self.shape)}
        self.log(f"group {g.group_id} ({', '.join(c.key for c in g.cells)}) on node {p['node_id'][:12]} "
                 f"({p.get('hostname')}) GPU {p['slot']} [{g.placement['gpu_name']}], worker pid {p.get('pid')}")
        if self.on_node:
            self.on_node({**g.placement, "group_id": g.group_id, "cells": [c.key for c in g.cells]})
        self._live(g, state="placed")

    def _on_refused(self, g: GroupState, p: dict[str, Any]) -> None:
        for c in g.cells:
            self._finish_cell(g, c, f"not run: {p['reason']}")
        self.log(f"group {g.group_id}: {p['reason']}")

    def _keep_log(self, row: dict[str, Any]) -> dict[str, Any]:
        """The row with log_path on this host: the node's log is written under artifacts/logs."""
        row = dict(row)
        data = row.pop("log_bytes", None)
        path = self.artifacts_dir / "logs" / Path(row.get("log_path") or f"{row['engine']}-{row['launch_id']}.log").name
        if data is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        row["log_path"] = str(path)
        return row

    def _on_launch(self, g: GroupState, row: dict[str, Any]) -> None:
        row = self._keep_log(row)
        store_launch(self.store, row)
        engine = self.plan.engine(row["engine"])
        if row.get("status") == "startup_failed":
            reason = f"startup failed: engine {row['engine']!r}: {row.get('failure_reason')}"
            record_attempt(self.store, self.plan, engine, "startup_failed", reason=reason, launch_id=row["launch_id"])
            self.failed.setdefault(row["engine"], reason)
            self.log(f"engine {row['engine']} on {self._label(g)}: {reason}")
            return
        g.launches[row["launch_id"]] = row
        self.log(f"engine {row['engine']} ready on {self._label(g)} ({row.get('url')}, launch {row['launch_id']})")

    def _on_launch_ended(self, g: GroupState, row: dict[str, Any]) -> None:
        row = self._keep_log(row)
        update_launch(self.store, row)
        g.launches.pop(row["launch_id"], None)
        crashed = row.get("status") == "crashed"
        record_attempt(self.store, self.plan, self.plan.engine(row["engine"]), "measured", launch_id=row["launch_id"],
                       run_ids=row.get("run_ids") or [], reason=row.get("failure_reason") if crashed else None)

    def _on_skipped(self, g: GroupState, p: dict[str, Any]) -> None:
        _, run = self._cell_run(g, p["cell_key"])
        self._finish_cell(g, run.cell, p["reason"])

    def _on_run_started(self, g: GroupState, p: dict[str, Any]) -> None:
        run = g.runs[p["run_id"]]
        run.spec = replace(run.spec, url=p["url"])
        run.started, run.launch_id = True, p["launch_id"]
        cell = run.cell
        gpu = g.placement.get("gpu")
        begin_run(self.store, run.spec, engine=cell.engine, kind=cell.kind, plan_hash=self.plan.hash,
                  cell_key=cell.key, launch_id=p["launch_id"], pool=cell.pool, repeat_index=cell.repeat,
                  note=EXPLORATORY_NOTE if cell.kind == "exploratory" else None,
                  params={**self.params, "engine_profile": self.plan.engine(cell.engine).profile,
                          "placement": {k: g.placement.get(k) for k in ("node_id", "hostname", "slot", "gpu_ids")}},
                  gpus=[gpu] if gpu else [], telemetry_status=g.placement.get("telemetry_status", "unknown"),
                  placement=g.placement)
        self.run_ids.append(p["run_id"])
        if self.on_cell:
            self.on_cell(self.index[cell.key], self.total, cell, "running")
        self._live(g, state="running", cell=cell.key, run_id=p["run_id"], done=0,
                   planned=len(run.spec.requests) + run.spec.warmup_requests)

    def _on_batch(self, g: GroupState, p: dict[str, Any]) -> None:
        run = g.runs[p["run_id"]]
        tables = p["tables"]
        self._store_audio(tables.get("audio_files"), p["audio"])
        self.writer.write_tables(tables)
        run.stored += p["requests"]
        planned = len(run.spec.requests) + run.spec.warmup_requests
        if self.on_progress and p["requests"]:
            self.on_progress(run.stored, planned)
        self._live(g, done=run.stored, planned=planned)

    def _store_audio(self, audio_files: Any, blobs: dict[str, bytes]) -> None:
        """Write the node's audio files under this console's artifacts folder, checking each against
        the SHA-256 its audio_files row carries (a file that does not match is not stored)."""
        expected = {}
        if audio_files is not None:
            expected = dict(zip(audio_files.column("path").to_pylist(), audio_files.column("sha256").to_pylist()))
        for rel, data in blobs.items():
            sha = sha256_bytes(data)
            if expected.get(rel) != sha:
                raise ValueError(f"audio {rel}: sha256 {sha[:12]} does not match its record {str(expected.get(rel))[:12]}")
            store_audio(self.artifacts_dir, rel, data)  # as a local run saves it (engine_adapters/driver/decode.py)

    def _on_run_ended(self, g: GroupState, p: dict[str, Any]) -> None:
        self._end_run(g, p["run_id"], summary=p["summary"], fatal=p["fatal"], engine_exit=p["engine_exit"])
        # the engine's own metrics, scraped on the node; stored as a local run's are
        store_server_metrics(self.store, p["run_id"], p.get("server_metrics"), say=self.log)

    def _end_run(self, g: GroupState, run_id: str, *, summary: Any = None, fatal: str | None = None,
                 engine_exit: str | None = None, lost: str | None = None) -> str:
        run = g.runs[run_id]
        status = finish_run(self.store, run_id, plan_hash=self.plan.hash,
                            note=EXPLORATORY_NOTE if run.cell.kind == "exploratory" else None, summary=summary,
                            fatal=fatal, engine_exit=engine_exit, stored=run.stored, interrupted=False, lost=lost)
        problem = cell_problem(self.store, run_id)
        detail = f" ({engine_exit or lost})" if (engine_exit or lost) else ("; no request succeeded" if status == "complete" and problem else "")
        self.finished_cells += 1
        self.log(f"[{self.finished_cells}/{self.total}] {run.cell.key}: run {run_id} {status}{detail} on {self._label(g)}")
        g.finished.add(run.cell.key)
        if problem and not lost:
            self.problems.append((run.cell.key, problem))
        if self.on_cell:
            self.on_cell(self.index[run.cell.key], self.total, run.cell, status or "unknown")
        self._live(g, state=status)
        if self.live:
            self.live.run_ended(run_id, status)
        return status

    def _finish_cell(self, g: GroupState, cell: Cell, reason: str) -> None:
        g.finished.add(cell.key)
        self.problems.append((cell.key, reason))
        if self.on_cell:
            self.on_cell(self.index[cell.key], self.total, cell, "skipped")

    # -- faults ----------------------------------------------------------------------------------
    def lost(self, group_id: str, reason: str) -> list[Cell]:
        """The group's task died: its open run is 'incomplete' with `reason`, its open launches are
        crashed; returns the cells it did not finish."""
        g = self.groups[group_id]
        cut = set()
        for run_id, run in g.runs.items():
            if run.started and run.cell.key not in g.finished:
                self._end_run(g, run_id, lost=reason)
                cut.add(run.cell.key)
        for row in list(g.launches.values()):
            row = {**row, "status": "crashed", "failure_reason": reason}
            update_launch(self.store, row)
            record_attempt(self.store, self.plan, self.plan.engine(row["engine"]), "interrupted", reason=reason,
                           launch_id=row["launch_id"],
                           run_ids=[rid for rid, r in g.runs.items() if r.launch_id == row["launch_id"]])
        g.launches.clear()
        return [c for c in g.cells if c.key in cut or c.key not in g.finished]

    def give_up(self, cell: Cell, reason: str) -> None:
        self.problems.append((cell.key, reason))

    # -- live view --------------------------------------------------------------------------------
    def _live(self, g: GroupState, **fields: Any) -> None:
        if self.live is not None and hasattr(self.live, "node"):
            p = g.placement
            self.live.node(self._label(g), node_id=p.get("node_id"), gpu_name=p.get("gpu_name"),
                           group=g.group_id, **fields)
