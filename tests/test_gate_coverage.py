"""Coverage by repeat sets (docs/statistics.md): an id whose measured repeats differ between the
arms, or from the plan's measured repeats, is a coverage gap; the check is INCONCLUSIVE, never PASS,
and names the ids and repeats."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from console.cli import main
from stats.controls import baseline_table, with_candidate
from stats.gates import FAIL, INCONCLUSIVE, GateConfig, evaluate_gates

CFG = GateConfig(margins={"wer": 0.2, "sim": 0.5, "utmos": 0.05}, draws=1000, seed=20261022)
MARGINS = ["--wer-margin", "0.2", "--sim-margin", "0.5", "--utmos-margin", "0.05", "--draws", "1000"]


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
