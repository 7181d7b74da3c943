"""Per-cell summaries of the long table: both WER figures (named), mean SIM and mean MOS."""

from __future__ import annotations

import math
from dataclasses import dataclass

from stats.quality.wer import corpus_wer, seed_tts_wer


@dataclass(frozen=True)
class CellSummary:
    arm: str
    engine: str
    concurrency: int
    outputs: int
    gaps: int
    seed_tts_wer: float   # mean of per-utterance WER (ratio)
    corpus_wer: float     # sum errors / sum words (ratio)
    sim: float            # mean SIM x100
    mos: float            # mean of the plan's MOS scorer (label in frame.attrs)


def summarise(frame) -> list[CellSummary]:
    """One line per (arm, engine, concurrency) of a `scores_frame`."""
    out = []
    for (arm, engine, conc), g in frame.groupby(["arm", "engine", "concurrency"], sort=True):
        pairs = [(int(e), int(n)) for e, n in zip(g["wer_errors"], g["wer_words"])
                 if not (math.isnan(e) or math.isnan(n))]
        out.append(CellSummary(arm, engine, int(conc), len(g), int(g["gap"].notna().sum()),
                               seed_tts_wer(pairs), corpus_wer(pairs),
                               float(g["sim"].mean()) if g["sim"].notna().any() else math.nan,
                               float(g["mos"].mean()) if g["mos"].notna().any() else math.nan))
    return out
