"""Bootstrap replicates of a quality verdict, redrawn from its own document (docs/statistics.md):
the per-id aggregates in `cells`, the recorded seed, draws, confidence and method. The HTML report
plots them; the bound they give equals the verdict's stored bound (the report states whether it does)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from stats.bootstrap import CellArrays, bounds_many
from stats.quality.metrics import NAMES, canonical

ARRAY_KEYS = ("e_base", "e_cand", "n_base", "sim_base", "sim_cand", "mos_base", "mos_cand")


@dataclass(frozen=True)
class CheckReplicates:
    concurrency: int
    metric: str
    point: float
    bound: float
    replicates: np.ndarray


def cell_arrays(cell: Mapping[str, Any]) -> CellArrays:
    a = cell.get("arrays") or {}
    a = {k.replace("utmos_", "mos_") if k.startswith("utmos_") else k: v for k, v in a.items()}  # older documents
    return CellArrays(tuple(cell.get("ids") or ()),
                      **{k: np.asarray([np.nan if v is None else v for v in a.get(k, [])], dtype=np.float64)
                         for k in ARRAY_KEYS})


def document_replicates(doc: Mapping[str, Any]) -> list[CheckReplicates]:
    """Replicates of every full-coverage check of a quality verdict document (none for others)."""
    b = doc.get("bootstrap") or {}
    cells, metrics, concs = [], [], []
    for cell in doc.get("cells") or []:
        cov = {canonical(m): v for m, v in (cell.get("full_coverage") or {}).items()}  # an older document's utmos
        full = tuple(m for m in NAMES if cov.get(m))
        if full and len(cell.get("ids") or ()) >= 2:
            cells.append(cell_arrays(cell))
            metrics.append(full)
            concs.append(int(cell["concurrency"]))
    if not cells:
        return []
    res = bounds_many(cells, metrics, draws=int(b["draws"]), seed=int(b["seed"]),
                      confidence=float(b["confidence"]), method=str(b["method"]))
    return [CheckReplicates(c, m, r[m].point, r[m].bound, r[m].replicates)
            for c, ms, r in zip(concs, metrics, res) for m in ms]
