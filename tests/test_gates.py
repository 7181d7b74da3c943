"""Gates: the nine checks, coverage, the pass/fail boundary, input validation, attribution."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from data.errors import CampaignError
from plans_helpers import minimal_plan
from stats.controls import OUTLIER_ID, _outlier, baseline_table, with_candidate
from stats.gates import (
    FAIL, INCONCLUSIVE, PASS, GateConfig, combine, decide, evaluate_gates, frame_sha256,
    validate_long_frame,
)

CFG = GateConfig(margins={"wer": 0.2, "sim": 0.5, "mos": 0.05}, draws=2000, seed=20261022)


def test_decide_boundary_equal_fails():
    assert decide(0.1999999, 0.2) == PASS
    assert decide(0.2, 0.2) == FAIL
    assert decide(0.2000001, 0.2) == FAIL
    assert decide(float("nan"), 0.2) == INCONCLUSIVE
    assert decide(None, 0.2) == INCONCLUSIVE


def test_combine():
    assert combine([PASS] * 9) == PASS
    assert combine([PASS, INCONCLUSIVE, FAIL]) == FAIL
    assert combine([PASS, INCONCLUSIVE]) == INCONCLUSIVE
    assert combine([]) == INCONCLUSIVE


def test_nine_checks_and_bound_equal_to_margin_fails():
    data = with_candidate(baseline_table(n_ids=40), sim_shift=0.1, sim_noise=0.3)
    res = evaluate_gates(data, CFG)
    assert [(c.concurrency, c.metric) for c in res.checks] == [
        (c, m) for c in (1, 16, 32) for m in ("wer", "sim", "mos")]
    assert res.verdict == PASS
    sim1 = next(c for c in res.checks if c.concurrency == 1 and c.metric == "sim")
    assert 0 < sim1.bound < 0.5
    at_edge = evaluate_gates(data, replace(CFG, margins={**CFG.margins, "sim": sim1.bound}))
    edge = next(c for c in at_edge.checks if c.concurrency == 1 and c.metric == "sim")
    assert edge.bound == sim1.bound and edge.status == FAIL and at_edge.verdict == FAIL
    just_above = evaluate_gates(data, replace(CFG, margins={**CFG.margins, "sim": np.nextafter(sim1.bound, 1)}))
    assert next(c for c in just_above.checks if c.concurrency == 1 and c.metric == "sim").status == PASS


def test_repeats_are_aggregated_within_ids():
    """Bootstrapping ids, not waveforms: the WER point = 100 Σ(Ec−Eb)/ΣNb over every repeat."""
    base = baseline_table(n_ids=20, repeats=3, concurrencies=(1,))
    data = with_candidate(base, extra_errors=lambda ids: (ids == ids[0]).astype(int))
    res = evaluate_gates(data, replace(CFG, concurrencies=(1,)))
    wer = res.checks[0]
    b = data[data.arm == "baseline"]
    c = data[data.arm == "candidate"]
    assert wer.point == pytest.approx(100 * (c.wer_errors.sum() - b.wer_errors.sum()) / b.wer_words.sum())
    assert wer.n_ids == 20


def test_missing_id_in_either_arm_is_inconclusive_never_pass():
    data = with_candidate(baseline_table(n_ids=30))
    gone = data[~((data.arm == "baseline") & (data.concurrency == 32) & (data.utt_id == data.utt_id.iloc[0])
                  & (data.repeat == 1))]
    res = evaluate_gates(gone, CFG)
    assert res.verdict == INCONCLUSIVE
    c32 = [c for c in res.checks if c.concurrency == 32]
    assert all(c.status == INCONCLUSIVE and c.diagnostic_only and c.n_ids == 29 and c.n_expected == 30 for c in c32)
    nan_sim = data.copy()
    nan_sim.loc[(nan_sim.arm == "candidate") & (nan_sim.concurrency == 1) & (nan_sim.utt_id == nan_sim.utt_id.iloc[3]), "sim"] = np.nan
    res = evaluate_gates(nan_sim, CFG)
    statuses = {(c.concurrency, c.metric): c.status for c in res.checks}
    assert statuses[(1, "sim")] == INCONCLUSIVE and statuses[(1, "wer")] == PASS and res.verdict == INCONCLUSIVE


def test_fail_beats_inconclusive_and_unavailable_scorer():
    data = with_candidate(baseline_table(n_ids=30), sim_shift=2.0)
    res = evaluate_gates(data.assign(mos=np.nan), CFG, scorer_status={"wer": "ok", "sim": "ok", "mos": "unavailable: no model"})
    assert res.verdict == FAIL
    assert all(c.status == INCONCLUSIVE and "scorer unavailable" in c.reason for c in res.checks if c.metric == "mos")


def test_attribution_names_outlier():
    data = with_candidate(baseline_table(n_ids=40), extra_errors=_outlier)
    res = evaluate_gates(data, CFG)
    assert res.verdict == FAIL
    for a in res.attribution:
        assert a["top_id"] == OUTLIER_ID
        assert a["contributions"][0]["delta"] == a["net_error_change"] == 36
        assert a["contributions"][0]["share_of_net"] == 1.0
        assert a["survives_without_top"] is False
        assert a["without_top"]["point_pp"] == 0.0 and a["without_top"]["would_pass"] is True


def test_frame_hash_is_order_independent_and_content_sensitive():
    data = with_candidate(baseline_table(n_ids=10))
    h = frame_sha256(data)
    assert frame_sha256(data.sample(frac=1.0, random_state=1)) == h
    changed = data.copy()
    changed.loc[5, "sim"] += 1e-9
    assert frame_sha256(changed) != h


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d.drop(columns=["sim"]), "missing column(s) sim"),
    (lambda d: d.assign(arm=["base"] + list(d.arm[1:])), "row 1: arm 'base'"),
    (lambda d: d.assign(wer_errors=[-1] + list(d.wer_errors[1:])), "row 1: wer_errors -1"),
    (lambda d: d.assign(wer_words=[0] + list(d.wer_words[1:])), "row 1: wer_words 0"),
    (lambda d: d.assign(concurrency=["x"] + list(d.concurrency[1:])), "row 1: concurrency 'x'"),
    (lambda d: d.assign(mos=["abc"] + list(d.mos[1:])), "row 1: mos 'abc'"),
    (lambda d: pd.concat([d, d.iloc[:1]]), "rows 1 and 9 are duplicates (arm=baseline concurrency=1 repeat=0"),
])
def test_validation_one_line_errors(mutate, needle):
    data = with_candidate(baseline_table(n_ids=4, repeats=1, concurrencies=(1,)))
    with pytest.raises(CampaignError) as e:
        validate_long_frame(mutate(data), "my.csv")
    msg = str(e.value)
    assert needle in msg and msg.startswith("my.csv: ") and "\n" not in msg


def test_config_from_plan():
    cfg = GateConfig.from_plan(minimal_plan(
        quality={"concurrencies": [1, 16], "margins": {"wer_pp": 0.2, "sim": 0.5, "mos": 0.05}},
        bootstrap={"draws": 100, "seed": 9, "method": "BCa", "confidence": 0.95}))
    assert cfg.margins == {"wer": 0.2, "sim": 0.5, "mos": 0.05} and cfg.method == "bca"
    assert cfg.concurrencies == (1, 16) and cfg.draws == 100 and cfg.seed == 9
    with pytest.raises(CampaignError, match="margin for sim"):
        GateConfig.from_plan(minimal_plan(quality={"margins": {"wer_pp": 0.2}}))


def test_mos_slot_filled_by_dnsmos_is_never_labelled_utmos():
    data = baseline_table(n_ids=12)
    data.attrs["labels"] = {"wer": "WER (pocketsphinx en-us)", "sim": "SIM (resemblyzer)",
                            "mos": "DNSMOS OVRL (P.835)"}
    res = evaluate_gates(data, CFG)
    mos = [c.as_dict()["label"] for c in res.checks if c.metric == "mos"]
    assert mos == ["MOS drop (DNSMOS OVRL (P.835))"] * 3
    assert "UTMOS" not in res.labels["mos"]
    data.attrs["labels"] = {"mos": "UTMOS22 strong"}
    assert evaluate_gates(data, CFG).labels["mos"] == "MOS drop (UTMOS22 strong)"  # the scorer named, as DNSMOS is
