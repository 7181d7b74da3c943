"""The paired prompt-cluster bootstrap against a plain-loop reference and against scipy."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from stats.bootstrap import (
    CellArrays, cell_bounds, index_matrix, mean_drop, resample_counts, wer_degradation,
)


def make_cell(k: int, seed: int = 3, sim_scale: float = 65.0) -> CellArrays:
    rng = np.random.default_rng(seed)
    nb = rng.integers(20, 60, k).astype(float)
    eb = rng.binomial(nb.astype(int), 0.03).astype(float)
    ec = rng.binomial(nb.astype(int), 0.04).astype(float)
    sb = rng.normal(sim_scale, 3, k)
    sc = sb - rng.normal(0.1, 0.5, k)
    ub = rng.normal(3.5, 0.3, k)
    uc = ub - rng.normal(0.01, 0.05, k)
    return CellArrays(tuple(f"u{i:04d}" for i in range(k)), eb, ec, nb, sb, sc, ub, uc)


def loop_reference(cell: CellArrays, draws: int, seed: int, q: float = 0.95) -> dict[str, float]:
    """Plain Python loops over the protocol's index matrix (no vectorisation, no counts)."""
    idx = np.random.default_rng(seed).integers(0, cell.k, (draws, cell.k))
    reps = {"wer": [], "sim": [], "mos": []}
    for row in idx:
        ec = eb = nb = 0.0
        sb = sc = ub = uc = 0.0
        for i in row:
            ec += cell.e_cand[i]; eb += cell.e_base[i]; nb += cell.n_base[i]
            sb += cell.sim_base[i]; sc += cell.sim_cand[i]
            ub += cell.mos_base[i]; uc += cell.mos_cand[i]
        reps["wer"].append(100.0 * (ec - eb) / nb)
        reps["sim"].append(sb / cell.k - sc / cell.k)
        reps["mos"].append(ub / cell.k - uc / cell.k)
    return {m: float(np.quantile(np.array(v), q)) for m, v in reps.items()}


def test_index_matrix_is_the_protocol_matrix():
    idx = index_matrix(20261022, 37, 500)
    assert idx.shape == (500, 37) and idx.dtype == np.int64
    np.testing.assert_array_equal(idx, np.random.default_rng(20261022).integers(0, 37, (500, 37)))


def test_counts_are_row_bincounts():
    idx = index_matrix(5, 11, 200)
    counts = resample_counts(idx)
    expected = np.stack([np.bincount(r, minlength=11) for r in idx]).astype(float)
    np.testing.assert_array_equal(counts, expected)
    assert (counts.sum(axis=1) == 11).all()


@pytest.mark.parametrize("k,draws,seed", [(7, 300, 1), (25, 1000, 20261022)])
def test_matches_plain_loop_reference(k, draws, seed):
    cell = make_cell(k, seed=k)
    ref = loop_reference(cell, draws, seed)
    got = cell_bounds(cell, draws=draws, seed=seed)
    # WER sums are integers: exact in float64 whatever the order -> bit-identical bounds.
    assert got["wer"].bound == ref["wer"]
    for m in ("sim", "mos"):
        assert got[m].bound == pytest.approx(ref[m], abs=1e-12, rel=0)


@pytest.mark.parametrize("method", ["percentile", "bca"])
@pytest.mark.parametrize("k", [12, 256])
def test_matches_scipy_bootstrap(method, k):
    draws, seed = 20000 if k == 256 else 4000, 20261022
    cell = make_cell(k, seed=k + 1)
    got = cell_bounds(cell, draws=draws, seed=seed, method=method)
    for m, data, stat in (
        ("wer", (cell.e_base, cell.e_cand, cell.n_base), wer_degradation),
        ("sim", (cell.sim_base, cell.sim_cand), mean_drop),
        ("mos", (cell.mos_base, cell.mos_cand), mean_drop),
    ):
        res = scipy.stats.bootstrap(
            data, stat, paired=True, vectorized=True, method=method, alternative="less",
            n_resamples=draws, rng=np.random.default_rng(seed), confidence_level=0.95,
        )
        assert abs(got[m].bound - res.confidence_interval.high) <= 1e-12, (m, method)
        assert got[m].point == stat(*data)
        if m == "wer":
            np.testing.assert_array_equal(got[m].replicates, res.bootstrap_distribution)


def test_identical_arms_bound_zero_and_bca_degenerate():
    cell = make_cell(30)
    same = CellArrays(cell.ids, cell.e_base, cell.e_base, cell.n_base, cell.sim_base, cell.sim_base,
                      cell.mos_base, cell.mos_base)
    for method in ("percentile", "bca"):
        r = cell_bounds(same, draws=1000, seed=1, method=method)
        assert all(r[m].bound == 0.0 and r[m].point == 0.0 for m in r)


def test_seed_changes_bounds_and_same_seed_repeats():
    cell = make_cell(40)
    a = cell_bounds(cell, draws=2000, seed=11)
    b = cell_bounds(cell, draws=2000, seed=11)
    c = cell_bounds(cell, draws=2000, seed=12)
    assert [a[m].bound for m in a] == [b[m].bound for m in b]
    assert [a[m].bound for m in a] != [c[m].bound for m in c]
