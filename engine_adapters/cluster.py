"""The node side of a cluster run (docs/cluster.md): one pair group of cells on the GPU a Ray task
reserved, with the engine and the load driver launched on that node so timing stays local to the
engine.

`drive_group` is a generator: the Ray task yields its messages as they happen and the console
process (console/cluster/) stores them; it is the store's only writer, nothing here touches a
store. Records leave the node as Arrow tables (data/writer.py records_to_tables) together with the
bytes of the WAV files they reference, so the console keeps every output audio file under its own
artifacts folder exactly as a local run does.

Messages are (kind, payload dict):
  placed        node_id, hostname, pid, slot, gpu (the reserved GPU's NVML row or None), gpus, telemetry_status
  refused       reason (the node's workload differs from the frozen manifest); nothing ran
  launch        the engine_launches row (status ready or startup_failed; log_bytes when failed)
  launch_ended  the launch row once stopped (stopped / crashed), run_ids it served, log_bytes
  run_started   cell_key, run_id, launch_id, url
  batch         run_id, tables (table -> pyarrow.Table), audio (relpath -> WAV bytes), requests
  run_ended     run_id, summary (DriveSummary), fatal, engine_exit, requests, server_metrics (the
                engine's own metrics scraped on the node around the run, an Arrow table or None)
  skipped       cell_key, reason (its engine did not start on this node)
This module imports Ray only inside the functions a node runs.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator

from data.plan_model import EngineSpec
from data.records import AudioFileRecord, RequestRecord
from data.writer import records_to_tables
from engine_adapters.cell_loop import EngineManager, Launch, run_cells
from engine_adapters.driver import DriveSpec, DriverProcess
from engine_adapters.lifecycle import EngineProcess, EngineStartError, port_in_use
from engine_adapters.placement import assigned_gpu, slot_port, with_port
from engine_adapters.server_scrape import Scraper, scrape_target

Message = tuple[str, dict[str, Any]]
PORT_WAIT_S = 15.0
LOG_BYTES = 16 << 20


@dataclass(frozen=True)
class NodeCell:
    """One cell as a node runs it: the engine to serve it and the drive (run id chosen by the console)."""
    cell_key: str
    engine: EngineSpec  # adapter spec with the real environment (data/plan_loading.py engine_environment)
    drive: DriveSpec
    concurrency: int
    metrics_path: str | None = None  # the engine's own metrics, scraped around the run (docs/cluster.md)
    scrape_interval_s: float | None = None  # the plan's server_metrics.interval_s; None: not scraped


@dataclass(frozen=True)
class NodeGroup:
    """Cells a paired comparison compares, run back to back on one GPU (console/cluster/groups.py)."""
    group_id: str
    plan_hash: str
    restart: str  # per_repeat, per_cell, never (engine_adapters/cell_loop.py)
    cells: list[NodeCell]
    telemetry: bool = True
    plan: Any = None  # data.plan_model.Plan, to rebuild the workload manifest on the node
    manifest_hash: str | None = None
    expected_checkpoints: dict[str, dict[str, str]] = field(default_factory=dict)  # engine -> path -> sha256


# -- where this task runs -----------------------------------------------------------------------
def node_placement(telemetry: bool = True) -> dict[str, Any]:
    """Ray node id, host, worker pid, the reserved GPU's slot and its NVML identity (None without NVML)."""
    import ray

    ids = ray.get_gpu_ids()
    slot = int(ids[0]) if ids and str(ids[0]).isdigit() else 0
    gpus: list[dict[str, Any]] = []
    status = "disabled"
    if telemetry:
        from engine_adapters.telemetry import gpu_identity

        gpus, status = gpu_identity()
    return {"node_id": ray.get_runtime_context().get_node_id(), "hostname": socket.gethostname(),
            "pid": os.getpid(), "slot": slot, "gpu_ids": [str(i) for i in ids], "gpu": assigned_gpu(gpus),
            "gpus": gpus, "telemetry_status": status}


def verify_workload(group: NodeGroup) -> str | None:
    """Why this node's workload folder is not the frozen one, or None (docs/cluster.md)."""
    if group.plan is None or not group.manifest_hash:
        return None
    from data.errors import CampaignError
    from data.manifest import build_manifest

    try:
        manifest = build_manifest(group.plan, f"plan {group.plan_hash[:12]}")
    except CampaignError as exc:
        return f"workload on {socket.gethostname()}: {exc}"
    if manifest.hash != group.manifest_hash:
        return (f"workload {manifest.root} on {socket.gethostname()} differs from the frozen manifest "
                f"({manifest.hash[:12]} != {group.manifest_hash[:12]})")
    return None


def checkpoint_mismatch(row: dict[str, Any], expected: dict[str, str]) -> str | None:
    """Why a launch's checkpoint hashes differ from those the campaign's earlier launches recorded."""
    got = json.loads(row.get("checkpoint_sha256_json") or "{}")
    for path, sha in sorted(expected.items()):
        if path in got and got[path] != sha:
            return (f"checkpoint {path} on {socket.gethostname()} has sha256 {got[path][:12]}, "
                    f"earlier launches had {sha[:12]}")
    return None


def wait_port_free(host: str, port: int, timeout_s: float = PORT_WAIT_S) -> None:
    """Give an engine a lost worker left behind (its orphan guard stops it within a second or
    two) time to let go of the port before this slot's launch; a port still held afterwards is
    the launch's startup failure, as locally."""
    deadline = time.monotonic() + timeout_s
    while port_in_use(host, port) and time.monotonic() < deadline:
        time.sleep(0.25)


# -- the group --------------------------------------------------------------------------------
class NodeLaunches:
    """Launches on this GPU slot (engine_adapters/cell_loop.py Launcher): made here, reported to
    the console as `launch` / `launch_ended` messages, which it records as a local run does."""

    def __init__(self, group: NodeGroup, slot: int, scratch: Path):
        self.group, self.slot, self.scratch = group, slot, scratch

    def spec_for(self, engine: EngineSpec) -> EngineSpec:
        """The engine on this GPU slot's port (slot 0: the plan's port; engine_adapters/placement.py)."""
        port = slot_port(engine.port, self.slot)
        if port == engine.port:
            return engine
        return replace(engine, port=port, argv=tuple(with_port(engine.argv, engine.port, port)))

    def start(self, engine: EngineSpec) -> tuple[EngineProcess | None, list[Message]]:
        spec = self.spec_for(engine)
        wait_port_free(spec.host, spec.port)
        eng = EngineProcess(spec, self.scratch / "logs", plan_hash=self.group.plan_hash)
        try:
            eng.start(self.scratch / "checkpoint-sha256.json")
            problem = checkpoint_mismatch(eng.row, self.group.expected_checkpoints.get(engine.name, {}))
            if problem:
                eng.stop()
                eng.row.update(status="startup_failed", failure_reason=problem)
                return None, [("launch", with_log(eng))]
            eng.wait_healthy()
        except EngineStartError:
            return None, [("launch", with_log(eng))]
        except BaseException:
            eng.stop()
            raise
        return eng, [("launch", dict(eng.row))]

    def stop(self, launch: Launch, outcome: str) -> list[Message]:
        """Stop the engine; the console records the outcome from the launch row it gets."""
        launch.process.stop()
        return [("launch_ended", {**with_log(launch.process), "run_ids": list(launch.run_ids)})]


def with_log(eng: EngineProcess) -> dict[str, Any]:
    """The launch row plus the engine's log (its last LOG_BYTES), which the console keeps under its
    artifacts folder as a local run does: the node's scratch folder goes when the group ends."""
    try:
        with open(eng.log_path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - LOG_BYTES))
            data = f.read()
    except OSError:
        data = b""
    return {**eng.row, "log_bytes": data}


def _audio_bytes(records: list[Any], root: Path) -> dict[str, bytes]:
    """The audio files a batch references, read and removed from the node's scratch folder (each
    request's own link: a content stored once stays until the group's scratch folder goes)."""
    out = {}
    for r in records:
        if isinstance(r, AudioFileRecord):
            path = root / r.path
            out[r.path] = path.read_bytes()
            path.unlink(missing_ok=True)
    return out


def drive_cell(cell: NodeCell, eng: EngineProcess, scratch: Path, telemetry: bool,
               telemetry_status: str) -> Iterator[Message]:
    """One run: the driver process on this node; batches leave as Arrow tables with their audio."""
    spec = replace(cell.drive, url=eng.spec.url, artifacts_dir=scratch / "audio")
    Path(spec.artifacts_dir).mkdir(parents=True, exist_ok=True)
    sampler = None
    if telemetry and telemetry_status == "ok":
        from engine_adapters.telemetry import GpuSampler

        sampler = GpuSampler(hz=10.0)
        sampler.start(spec.run_id)
    yield "run_started", {"cell_key": cell.cell_key, "run_id": spec.run_id, "launch_id": eng.launch_id,
                          "url": spec.url}
    # the engine's own metrics, scraped from this node around the run, as the local runner does
    target = scrape_target(spec.run_id, cell.engine.name, spec.url, cell.metrics_path, cell.scrape_interval_s)
    scraper = Scraper(target) if target is not None else None
    sent = transport = 0
    with scraper if scraper is not None else nullcontext():
        proc = DriverProcess(spec).start()
        try:
            for records in proc.batches():
                records = records + (sampler.drain() if sampler else [])
                done = sum(1 for r in records if isinstance(r, RequestRecord))
                transport += sum(1 for r in records if isinstance(r, RequestRecord) and r.outcome == "transport")
                sent += done
                yield "batch", {"run_id": spec.run_id, "tables": records_to_tables(records),
                                "audio": _audio_bytes(records, Path(spec.artifacts_dir)), "requests": done}
        finally:
            proc.join()
    tail = sampler.stop() if sampler else []
    if tail:
        yield "batch", {"run_id": spec.run_id, "tables": records_to_tables(tail), "audio": {}, "requests": 0}
    engine_exit = eng.exit_cause(0.5 if transport else 0.0)
    yield "run_ended", {"run_id": spec.run_id, "summary": proc.summary, "fatal": proc.fatal,
                        "engine_exit": engine_exit, "requests": sent,
                        "server_metrics": scraper.table() if scraper is not None else None}


def drive_group(group: NodeGroup) -> Iterator[Message]:
    """Run the group's cells in order with the plan's restart policy (engine_adapters/cell_loop.py,
    the loop a local run uses); see the module docstring for the messages."""
    where = node_placement(group.telemetry)
    yield "placed", where
    refused = verify_workload(group)
    if refused:
        yield "refused", {"reason": refused}
        return
    scratch = Path(tempfile.mkdtemp(prefix=f"campaign-{group.group_id}-"))

    def drive(cell: NodeCell, launch: Launch) -> Iterator[Message]:
        launch.run_ids.append(cell.drive.run_id)
        return drive_cell(cell, launch.process, scratch, group.telemetry, where["telemetry_status"])

    def skip(cell: NodeCell, reason: str) -> list[Message]:
        return [("skipped", {"cell_key": cell.cell_key, "reason": reason})]

    try:
        yield from run_cells(group.cells, group.restart, EngineManager(NodeLaunches(group, where["slot"], scratch)),
                             engine_of=lambda c: c.engine, drive=drive, skip=skip)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
