"""Nine-check gate timing: 256 ids × 3 repeats × 3 concurrencies, 20 000 draws (docs/statistics.md).

Prints our time (median of several cold runs: the count-matrix cache is cleared each time) for
(a) the bootstrap core — per-id aggregates -> nine bounds — and (b) the whole gate from an
in-memory long table (aggregation included, attribution excluded), next to scipy.stats.bootstrap
computing the same nine bounds on the same data, and the largest bound difference.

    .venv/bin/python bench/bench_bootstrap.py [--ids 256] [--repeats 3] [--draws 20000] [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import scipy.stats  # noqa: E402

from stats import bootstrap as bs  # noqa: E402
from stats.controls import baseline_table, with_candidate  # noqa: E402
from stats.gates import GateConfig, aggregate_cell, evaluate_gates  # noqa: E402

SEED = 20261022


def core(cells, draws):
    bs._counts_cached.cache_clear()
    return bs.bounds_many(cells, [("wer", "sim", "mos")] * len(cells), draws=draws, seed=SEED)


def scipy_nine(cells, draws):
    out = []
    for c in cells:
        r = {}
        for m, data, stat in (("wer", (c.e_base, c.e_cand, c.n_base), bs.wer_degradation),
                              ("sim", (c.sim_base, c.sim_cand), bs.mean_drop),
                              ("mos", (c.mos_base, c.mos_cand), bs.mean_drop)):
            res = scipy.stats.bootstrap(data, stat, paired=True, vectorized=True, method="percentile",
                                        alternative="less", n_resamples=draws,
                                        rng=np.random.default_rng(SEED), confidence_level=0.95)
            r[m] = res.confidence_interval.high
        out.append(r)
    return out


def timed(fn, runs):
    times, result = [], None
    for _ in range(runs):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), min(times), result


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ids", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--draws", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    frame = with_candidate(baseline_table(n_ids=a.ids, repeats=a.repeats),
                           extra_errors=lambda ids: (np.arange(len(ids)) % 5 == 0).astype(int),
                           sim_shift=0.1, sim_noise=0.4, mos_shift=0.01, mos_noise=0.03)
    cfg = GateConfig(margins={"wer": 0.2, "sim": 0.5, "mos": 0.05}, draws=a.draws, seed=SEED)
    cells = [aggregate_cell(frame[frame.concurrency == c], c).cell() for c in (1, 16, 32)]

    def gate():
        bs._counts_cached.cache_clear()
        return evaluate_gates(frame, cfg, attribution=False)

    t_core, t_core_min, ours = timed(lambda: core(cells, a.draws), a.runs)
    t_gate, t_gate_min, _ = timed(gate, a.runs)
    t_sp, t_sp_min, theirs = timed(lambda: scipy_nine(cells, a.draws), max(1, min(a.runs, 3)))
    diff = max(abs(o[m].bound - t[m]) for o, t in zip(ours, theirs) for m in ("wer", "sim", "mos"))
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (figures are noisy on a shared box; compare the ratio)")
    print(f"data: {a.ids} ids x {a.repeats} repeats x 3 concurrencies x 2 arms = {len(frame)} rows; B={a.draws}")
    print(f"ours  core (aggregates -> 9 bounds): median {t_core * 1e3:7.1f} ms  (min {t_core_min * 1e3:.1f})")
    print(f"ours  gate (long table -> verdict):  median {t_gate * 1e3:7.1f} ms  (min {t_gate_min * 1e3:.1f})")
    print(f"scipy.stats.bootstrap, same 9 bounds: median {t_sp * 1e3:7.1f} ms  (min {t_sp_min * 1e3:.1f})")
    print(f"speed-up core vs scipy: {t_sp / t_core:.1f}x; largest |bound difference|: {diff:.3g}")
    print(f"target: core < 150 ms -> {'met' if t_core < 0.150 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
