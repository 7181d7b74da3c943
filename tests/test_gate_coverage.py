"""Coverage by repeat sets (docs/statistics.md): an id whose measured repeats differ between the
arms, or from the plan's measured repeats, is a coverage gap; the check is INCONCLUSIVE, never PASS,
and names the ids and repeats."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pandas as pd

from console.cli import main
from plans_helpers import minimal_plan
from stats.controls import baseline_table, with_candidate
from stats.gates import FAIL, INCONCLUSIVE, GateConfig, evaluate_gates

CFG = GateConfig(margins={"wer": 0.2, "sim": 0.5, "mos": 0.05}, draws=1000, seed=20261022)
MARGINS = ["--wer-margin", "0.2", "--sim-margin", "0.5", "--mos-margin", "0.05", "--draws", "1000",
           "--concurrencies", "1"]  # the tables below are at C1


def flat(out: str) -> str:
    """Console output with table borders removed and whitespace collapsed (cells wrap)."""
    return re.sub(r"\s+", " ", re.sub(r"[│┃┏┓┗┛┡┩└┘━─┳┻╇┼┬┴]", " ", out))


def worse_candidate(n_ids=24, concurrencies=(1,)):
    """Baseline with 3 repeats; the candidate makes twice the baseline's errors in every repeat."""
    base = baseline_table(n_ids=n_ids, repeats=3, concurrencies=concurrencies)
    full = with_candidate(base)
    cand = full.arm == "candidate"
    full.loc[cand, "wer_errors"] = 2 * full.loc[cand, "wer_errors"]
    return full


def test_cli_candidate_with_one_of_three_repeats_is_inconclusive_naming_ids_and_repeats(tmp_path, capsys):
    full = worse_candidate()
    complete_csv = tmp_path / "complete.csv"
    full.to_csv(complete_csv, index=False)
    assert main(["gate", "--scores", str(complete_csv), *MARGINS]) == 1  # the complete table FAILs
    assert "Quality verdict: FAIL" in capsys.readouterr().out

    partial = full[(full.arm == "baseline") | (full.repeat == 0)]  # candidate: repeat 0 only
    csv = tmp_path / "partial.csv"
    partial.to_csv(csv, index=False)
    code = main(["gate", "--scores", str(csv), *MARGINS])
    out = capsys.readouterr().out
    assert code == 3, out
    text = flat(out)
    assert "Quality verdict: INCONCLUSIVE" in text and " PASS " not in text
    assert text.count("coverage gap: 24 of 24 ids") == 3  # WER, SIM and UTMOS
    first = sorted(full.utt_id.unique())[0]
    assert f"{first} (candidate lacks repeats 1, 2)" in text, text


def test_baseline_with_fewer_repeats_is_a_gap_not_a_fail():
    data = with_candidate(baseline_table(n_ids=20, repeats=3, concurrencies=(1,)))
    base_first = data[(data.arm == "candidate") | (data.repeat == 0)]
    res = evaluate_gates(base_first, replace(CFG, concurrencies=(1,)))
    assert res.verdict == INCONCLUSIVE
    assert all(c.status == INCONCLUSIVE and c.n_ids == 0 and "baseline lacks repeats 1, 2" in c.reason
               for c in res.checks)


def test_expected_repeats_come_from_the_plan():
    cfg = GateConfig.from_plan(minimal_plan(
        quality={"concurrencies": [1], "margins": {"wer_pp": 0.2, "sim": 0.5, "mos": 0.05}},
        sweep={"concurrencies": [1], "requests_per_run": 1, "measured_repeats": 3}))
    assert cfg.repeats == (0, 1, 2) and cfg.as_dict()["repeats"] == [0, 1, 2]
    two = with_candidate(baseline_table(n_ids=10, repeats=2, concurrencies=(1,)))
    assert evaluate_gates(two, replace(cfg, repeats=None)).verdict != INCONCLUSIVE  # the table alone is balanced
    res = evaluate_gates(two, cfg)  # but the plan measured three repeats: repeat 2 is missing in both arms
    assert res.verdict == INCONCLUSIVE
    assert all("baseline lacks repeat 2; candidate lacks repeat 2" in c.reason for c in res.checks)


def test_repeat_outside_the_plan_or_measured_twice_is_a_gap():
    cfg = replace(CFG, concurrencies=(1,), repeats=(0, 1))
    data = with_candidate(baseline_table(n_ids=10, repeats=2, concurrencies=(1,)))
    assert evaluate_gates(data, cfg).verdict != INCONCLUSIVE
    uid = data.utt_id.iloc[0]
    extra = data[(data.arm == "candidate") & (data.utt_id == uid) & (data.repeat == 1)].assign(repeat=5)
    res = evaluate_gates(pd.concat([data, extra]), cfg)
    assert res.verdict == INCONCLUSIVE
    assert all(f"{uid} (candidate has repeat 5 outside the measured repeats)" in c.reason for c in res.checks)
    twice = data[(data.arm == "baseline") & (data.utt_id == uid) & (data.repeat == 0)]
    res = evaluate_gates(pd.concat([data, twice]), cfg)
    assert all(f"{uid} (baseline has repeat 0 more than once)" in c.reason and c.n_ids == 9 for c in res.checks)


def test_a_nan_value_at_one_repeat_names_that_repeat():
    data = with_candidate(baseline_table(n_ids=10, repeats=3, concurrencies=(1,)))
    uid = data.utt_id.iloc[4]
    data.loc[(data.arm == "candidate") & (data.utt_id == uid) & (data.repeat == 1), "sim"] = np.nan
    res = evaluate_gates(data, replace(CFG, concurrencies=(1,)))
    status = {c.metric: c for c in res.checks}
    assert status["wer"].status != INCONCLUSIVE and status["mos"].status != INCONCLUSIVE
    assert status["sim"].status == INCONCLUSIVE and f"{uid} (candidate lacks repeat 1)" in status["sim"].reason
    assert FAIL not in {c.status for c in res.checks}
