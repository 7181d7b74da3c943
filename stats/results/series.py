"""Per-request and per-sample series of a plan's aggregate runs for the figures (docs/results.md):
the RTF of every ok measured request by cell and the GPU samples of every run, each read with one
query. RTF is `stats.metrics.compute.request_rtf`, the definition the run metrics use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from data.store import Store
from stats.metrics.compute import NS, request_rtf

GPU_SERIES_COLUMNS = ("util_gpu_pct", "power_w")


def _in_list(ids: Sequence[str]) -> str:
    return ", ".join("?" for _ in ids)


def request_rtfs(store: Store, run_ids: Sequence[str]) -> dict[str, list[float]]:
    """run_id -> RTF of each ok measured request (request order)."""
    out: dict[str, list[float]] = {r: [] for r in run_ids}
    if not run_ids:
        return out
    rows = store.con.execute(
        "SELECT run_id, t_send_ns, t_last_audio_ns, audio_samples, sample_rate FROM requests WHERE run_id IN "
        f"({_in_list(run_ids)}) AND NOT is_warmup AND outcome = 'ok' ORDER BY run_id, request_index",
        list(run_ids)).fetchall()
    for rid, t_send, t_last, samples, rate in rows:
        rtf = request_rtf(t_send, t_last, (samples or 0) / rate if rate else 0.0)
        if rtf is not None:
            out[rid].append(rtf)
    return out


@dataclass(frozen=True)
class GpuRunSeries:
    run_id: str
    gpu_index: int
    t_s: list[float]  # seconds since the run's first sample on this GPU
    values: dict[str, list[float | None]]


def gpu_series(store: Store, run_ids: Sequence[str]) -> list[GpuRunSeries]:
    """GPU utilisation and power over time, one series per (run, GPU)."""
    if not run_ids:
        return []
    cols = ", ".join(GPU_SERIES_COLUMNS)
    rows = store.con.execute(
        f"SELECT run_id, gpu_index, t_ns, {cols} FROM gpu_samples WHERE run_id IN ({_in_list(run_ids)}) "
        "ORDER BY run_id, gpu_index, t_ns", list(run_ids)).fetchall()
    series: dict[tuple[str, int], list[tuple]] = {}
    for r in rows:
        series.setdefault((r[0], int(r[1])), []).append(r[2:])
    out = []
    for (rid, g), samples in series.items():
        t0 = samples[0][0]
        out.append(GpuRunSeries(rid, g, [(s[0] - t0) / NS for s in samples],
                                {c: [s[1 + i] for s in samples] for i, c in enumerate(GPU_SERIES_COLUMNS)}))
    return out
