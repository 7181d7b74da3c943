"""Paired prompt-cluster bootstrap (docs/statistics.md), written so any numpy user can reproduce a bound.

Protocol for one concurrency cell with K utterance ids (ascending string order):

    idx = numpy.random.default_rng(seed).integers(0, K, (B, K))      # one matrix, shared by metrics
    WER pp    = 100 * (sum(E_cand[idx]) - sum(E_base[idx])) / sum(N_base[idx])
    SIM drop  = mean(SIM_base[idx]) - mean(SIM_cand[idx])
    MOS drop  = mean(MOS_base[idx]) - mean(MOS_cand[idx])
    bound     = numpy.quantile(replicates, 0.95)                       # linear, one-sided upper

`scipy.stats.bootstrap((arrays...), statistic, paired=True, vectorized=True, method="percentile",
alternative="less", n_resamples=B, rng=numpy.random.default_rng(seed))` draws exactly this matrix
(scipy 1.17: `rng.integers(0, n, (B, n))` over the pair indices, batch=None), so its `high` end
equals our bound (tests check 1e-12).

Speed: instead of gathering B×K values per metric we turn the index matrix into a count matrix
(how often each id was drawn in each replicate) and take one matrix product with the per-id
columns. Integer columns (WER error and word sums) stay exact in float64, so WER replicates are
bit-identical to scipy's; float means differ only in summation order (~1e-14).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from scipy.special import ndtr, ndtri

from data.bootstrap_params import BOOTSTRAP_DEFAULTS, METHODS


def index_matrix(seed: int, k: int, draws: int) -> np.ndarray:
    """The protocol's index matrix (B×K, int64): column k is the k-th id in ascending order."""
    return np.random.default_rng(seed).integers(0, k, (draws, k))


@lru_cache(maxsize=3)  # 20000×256 float64 = 41 MB each
def _counts_cached(seed: int, k: int, draws: int) -> np.ndarray:
    idx = index_matrix(seed, k, draws)
    idx += (np.arange(draws, dtype=np.int64) * k)[:, None]  # row offsets, in place: one bincount
    counts = np.bincount(idx.ravel(), minlength=draws * k).reshape(draws, k).astype(np.float64)
    counts.flags.writeable = False
    return counts


def counts_matrix(seed: int, k: int, draws: int) -> np.ndarray:
    """B×K float64 counts of each id per replicate (cached: cells with equal K share the matrix,
    which is the same matrix the protocol draws for each of them)."""
    return _counts_cached(int(seed), int(k), int(draws))


def resample_counts(idx: np.ndarray) -> np.ndarray:
    """Row-wise bincount of an index matrix, as float64 (B×K)."""
    b, k = idx.shape
    flat = np.add(idx, (np.arange(b, dtype=np.int64) * k)[:, None], dtype=np.int64)
    return np.bincount(flat.ravel(), minlength=b * k).reshape(b, k).astype(np.float64)


# -- statistics (vectorised over the last axis; the same callables are handed to scipy in tests) --

def wer_degradation(e_base, e_cand, n_base, axis=-1):
    """WER change in percentage points over the resampled ids: 100 ΣΔE / ΣN_base."""
    return 100.0 * (np.sum(e_cand, axis=axis) - np.sum(e_base, axis=axis)) / np.sum(n_base, axis=axis)


def mean_drop(base, cand, axis=-1):
    """Drop of the mean (base − cand): positive = the candidate is worse."""
    return np.mean(base, axis=axis) - np.mean(cand, axis=axis)


@dataclass(frozen=True)
class CellArrays:
    """Per-id aggregates for one concurrency (ids ascending; repeats already aggregated)."""

    ids: tuple[str, ...]
    e_base: np.ndarray
    e_cand: np.ndarray
    n_base: np.ndarray
    sim_base: np.ndarray
    sim_cand: np.ndarray
    mos_base: np.ndarray
    mos_cand: np.ndarray

    @property
    def k(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class BoundResult:
    point: float
    bound: float
    replicates: np.ndarray


def point_estimates(cell: CellArrays) -> dict[str, float]:
    return {
        "wer": float(wer_degradation(cell.e_base, cell.e_cand, cell.n_base)),
        "sim": float(mean_drop(cell.sim_base, cell.sim_cand)),
        "mos": float(mean_drop(cell.mos_base, cell.mos_cand)),
    }


def _columns(cell: CellArrays, metrics) -> tuple[list[np.ndarray], dict[str, int]]:
    cols: list[np.ndarray] = []
    layout: dict[str, int] = {}
    if "wer" in metrics:
        layout["wer"] = len(cols)
        cols += [cell.e_cand, cell.e_base, cell.n_base]
    for m, (b, c) in (("sim", (cell.sim_base, cell.sim_cand)), ("mos", (cell.mos_base, cell.mos_cand))):
        if m in metrics:
            layout[m] = len(cols)
            cols += [b, c]
    return cols, layout


def _from_sums(sums: np.ndarray, layout: dict[str, int], k: int) -> dict[str, np.ndarray]:
    """Replicates from resampled column sums; same operation order as the statistics above."""
    out: dict[str, np.ndarray] = {}
    kf = float(k)
    for m, j in layout.items():
        if m == "wer":
            out[m] = 100.0 * (sums[:, j] - sums[:, j + 1]) / sums[:, j + 2]
        else:
            out[m] = sums[:, j] / kf - sums[:, j + 1] / kf
    return out


def replicates_many(cells: list[CellArrays], metrics: list[tuple[str, ...]], *, draws: int, seed: int) -> list[dict[str, np.ndarray]]:
    """Replicates for several cells: cells with equal K share one count matrix (the protocol draws
    the same matrix for them) and one matrix product over all their columns."""
    out: list[dict[str, np.ndarray]] = [{} for _ in cells]
    by_k: dict[int, list[int]] = {}
    for i, cell in enumerate(cells):
        by_k.setdefault(cell.k, []).append(i)
    for k, members in by_k.items():
        cols: list[np.ndarray] = []
        spans: list[tuple[int, int, int, dict[str, int]]] = []
        for i in members:
            c, layout = _columns(cells[i], metrics[i])
            spans.append((i, len(cols), len(c), layout))
            cols += c
        if not cols:
            continue
        sums = counts_matrix(seed, k, draws) @ np.column_stack(cols).astype(np.float64)
        for i, start, width, layout in spans:
            out[i] = _from_sums(sums[:, start:start + width], layout, k)
    return out


def jackknife(cell: CellArrays, metric: str) -> np.ndarray:
    """Leave-one-id-out statistics (closed form; used by BCa's acceleration)."""
    k = cell.k
    if metric == "wer":
        ec = np.sum(cell.e_cand) - cell.e_cand
        eb = np.sum(cell.e_base) - cell.e_base
        nb = np.sum(cell.n_base) - cell.n_base
        return 100.0 * (ec - eb) / nb
    base, cand = (cell.sim_base, cell.sim_cand) if metric == "sim" else (cell.mos_base, cell.mos_cand)
    return (np.sum(base) - base) / (k - 1) - (np.sum(cand) - cand) / (k - 1)


def percentile_upper(replicates: np.ndarray, confidence: float) -> float:
    return float(np.quantile(replicates, confidence))


def bca_upper(replicates: np.ndarray, theta_hat: float, jack: np.ndarray, confidence: float) -> float:
    """One-sided BCa upper bound, following scipy.stats.bootstrap's `_bca_interval` step by step
    (Efron & Tibshirani 14.3, 15.4) so the two agree."""
    if np.all(replicates == replicates[0]):
        return float(replicates[0])  # degenerate distribution: every resample gives the same value
    b = replicates.shape[-1]
    pct = (np.count_nonzero(replicates < theta_hat) + np.count_nonzero(replicates <= theta_hat)) / (2 * b)
    z0 = ndtri(pct)
    n = float(jack.shape[-1])
    u = (n - 1) * (np.mean(jack) - jack)
    a_hat = 1 / 6 * (np.sum(u**3) / n**3) / (np.sum(u**2) / n**2) ** (3 / 2)
    z_1alpha = -float(ndtri(1.0 - confidence))
    num = z0 + z_1alpha
    level = ndtr(z0 + num / (1 - a_hat * num))
    if not np.isfinite(level):
        return float("nan")
    return float(np.quantile(replicates, level))


def bounds_many(cells: list[CellArrays], metrics: list[tuple[str, ...]], *, draws: int, seed: int,
                confidence: float = BOOTSTRAP_DEFAULTS.confidence,
                method: str = BOOTSTRAP_DEFAULTS.method) -> list[dict[str, BoundResult]]:
    """Point estimate, one-sided upper bound and replicates of the given metrics of each cell."""
    if method not in METHODS:
        raise ValueError(f"bootstrap method {method!r}: expected one of {', '.join(METHODS)}")
    reps = replicates_many(cells, metrics, draws=draws, seed=seed)
    out = []
    for cell, ms, rep in zip(cells, metrics, reps):
        points = point_estimates(cell)
        res = {}
        for m in ms:
            if method == "percentile":
                bound = percentile_upper(rep[m], confidence)
            else:
                bound = bca_upper(rep[m], points[m], jackknife(cell, m), confidence)
            res[m] = BoundResult(points[m], bound, rep[m])
        out.append(res)
    return out


def cell_bounds(cell: CellArrays, *, draws: int, seed: int, confidence: float = BOOTSTRAP_DEFAULTS.confidence,
                method: str = BOOTSTRAP_DEFAULTS.method, metrics=("wer", "sim", "mos")) -> dict[str, BoundResult]:
    """Point estimate, one-sided upper bound and replicates of each metric for one cell."""
    return bounds_many([cell], [tuple(metrics)], draws=draws, seed=seed, confidence=confidence, method=method)[0]
