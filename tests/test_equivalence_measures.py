"""The equivalence measures (stats/equivalence.py) against independent numpy computations and
hand-worked values (docs/equivalence.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stats.equivalence import (FAIL, INCONCLUSIVE, PASS, MelParams, Output, Tolerances, compare_tensors,
                               judge, log_mel_distance, max_abs_diff, mel_filterbank, measure_pair, snr_db)

RNG = np.random.default_rng(7)
REF = RNG.standard_normal(24_000) * 0.2
CAND = REF + RNG.standard_normal(24_000) * 1e-3


def test_max_abs_exact_over_common_length():
    cand = np.concatenate([CAND, [5.0, 5.0]])  # the extra samples are the length measure's, not this one's
    expected = max(abs(float(c) - float(r)) for r, c in zip(REF, CAND))
    assert max_abs_diff(REF, cand) == expected


def test_snr_exact_and_edge_cases():
    noise = CAND - REF
    expected = 10 * np.log10(np.dot(REF, REF) / np.dot(noise, noise))
    assert snr_db(REF, CAND) == pytest.approx(expected, rel=1e-12)  # numpy's dot sums in another order
    # exactly, where every sum is exact in binary floating point: signal 4, noise 0.25 -> 10 log10 16
    assert snr_db(np.ones(4), np.array([1.5, 1.0, 1.0, 1.0])) == 10 * math.log10(16.0)
    assert snr_db(REF, REF.copy()) == math.inf
    assert snr_db(np.zeros(10), np.ones(10)) == -math.inf
    assert snr_db(np.zeros(10), np.zeros(10)) == math.inf


def test_log_mel_hand_worked():
    """Amplitude x10 is power x100: +20 dB in every band, so the RMS over bands and the mean
    over frames are 20 dB exactly; x2 is 20 log10(2) = 6.0206 dB. Identity is 0."""
    t = np.arange(4800) / 24000
    x = 0.1 * np.sin(2 * np.pi * 440 * t) + 0.05 * RNG.standard_normal(len(t))  # power in every band
    assert log_mel_distance(x, 10 * x, 24000) == pytest.approx(20.0, abs=1e-9)
    assert log_mel_distance(x, 2 * x, 24000) == pytest.approx(20 * math.log10(2), abs=1e-9)
    assert log_mel_distance(x, x, 24000) == 0.0


def test_log_mel_two_frames_hand_worked():
    """n_fft 4, hop 4, 1 band, two frames: the candidate doubles frame 1 only. Frame 0 differs
    by 0 dB, frame 1 by 20 log10 2 dB; the mean over the two frames is half of that."""
    p = MelParams(n_fft=4, hop=4, n_mels=1, fmin=0.0, fmax=None, top_db=80.0, floor=1e-30)
    ref = np.array([0.0, 1.0, 0.0, -1.0, 0.0, 1.0, 0.0, -1.0])
    cand = ref.copy()
    cand[4:] *= 2
    assert log_mel_distance(ref, cand, 4, p) == pytest.approx(20 * math.log10(2) / 2, abs=1e-12)


def test_filterbank_peaks_and_support():
    fb = mel_filterbank(24000, MelParams())
    assert fb.shape == (80, 513)
    assert np.all(fb >= 0) and np.all(fb.max(axis=1) <= 1.0)
    assert np.all(fb.sum(axis=1) > 0)  # no empty band at these parameters


def test_tensor_comparison_independent():
    a = {"energy": np.array([1.0, 2.0, 4.0]), "pitch": np.ones((2, 3)), "only_ref": np.zeros(2)}
    b = {"energy": np.array([1.0, 2.5, 4.0]), "pitch": np.ones((3, 2)), "only_cand": np.zeros(2)}
    by = {c.name: c for c in compare_tensors(a, b)}
    assert by["energy"].status == "ok"
    assert by["energy"].max_abs == 0.5 and by["energy"].max_rel == 0.5 / 4.0
    expected_cos = np.dot(a["energy"], b["energy"]) / (np.linalg.norm(a["energy"]) * np.linalg.norm(b["energy"]))
    assert by["energy"].cosine == pytest.approx(expected_cos, rel=1e-12)
    assert by["pitch"].status == "shape_mismatch"
    assert by["only_ref"].status == "missing_in_candidate" and by["only_cand"].status == "missing_in_reference"


def _out(x, sha="a"):
    return Output(sha, x, 24000)


def test_judge_outcomes():
    tol = Tolerances(max_abs=0.01, min_snr_db=30, max_log_mel_db=1.0)
    exact = judge(measure_pair("u", 0, _out(REF), _out(REF.copy()), tol, False))
    assert exact.verdict == PASS and exact.bit_exact and exact.label == "PASS (bit-exact)"
    close = judge(measure_pair("u", 0, _out(REF), _out(CAND, "b"), tol, False))
    assert close.verdict == PASS and not close.bit_exact
    far = judge(measure_pair("u", 0, _out(REF), _out(REF + 0.1, "b"), tol, False))
    assert far.verdict == FAIL and any("max_abs" in r for r in far.reasons) and any("snr_db" in r for r in far.reasons)
    gap = judge(measure_pair("u", 0, _out(REF), Output(None, None, None, error="http_status: 500"), tol, False))
    assert gap.verdict == INCONCLUSIVE and "http_status: 500" in gap.reasons[0]
    tensors = judge(measure_pair("u", 0, Output("a", REF, 24000, tensors={"x": np.ones(2)}),
                                 Output("a", REF, 24000, tensors={}), tol, True))
    assert tensors.verdict == FAIL and "missing_in_candidate" in tensors.reasons[0]
