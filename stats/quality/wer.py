"""Word error counts and the two WER summaries.

Per utterance we keep the counts (S, D, I, N), never only the ratio, because the gates sum
errors and reference words over repeats and prompts. Two summaries, named as such everywhere:

* ``seed_tts_wer``: the headline Seed-TTS reports, the mean of per-utterance WER ratios;
* ``corpus_wer``: sum of errors over sum of reference words.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

import jiwer

from stats.quality.text import normalize_text


@dataclass(frozen=True)
class WerCounts:
    substitutions: int
    deletions: int
    insertions: int
    ref_words: int
    ref_norm: str
    hyp_norm: str

    @property
    def errors(self) -> int:
        return self.substitutions + self.deletions + self.insertions

    @property
    def wer(self) -> float:
        """Per-utterance WER as a ratio (NaN when the reference has no words)."""
        return self.errors / self.ref_words if self.ref_words else math.nan


def wer_counts(reference: str, hypothesis: str) -> WerCounts:
    """Normalise both texts and align them with jiwer (Levenshtein over words)."""
    ref = normalize_text(reference)
    hyp = normalize_text(hypothesis)
    if not ref:
        # jiwer refuses an empty reference; every hypothesis word is then an insertion.
        return WerCounts(0, 0, len(hyp.split()), 0, ref, hyp)
    if not hyp:
        n = len(ref.split())
        return WerCounts(0, n, 0, n, ref, hyp)
    out = jiwer.process_words(ref, hyp)
    n = out.hits + out.substitutions + out.deletions
    return WerCounts(out.substitutions, out.deletions, out.insertions, n, ref, hyp)


def seed_tts_wer(per_utt: Iterable[tuple[int, int]]) -> float:
    """Seed-TTS headline WER: mean over utterances of errors/words, from (errors, words) pairs.

    Utterances with no reference words are skipped (their ratio is undefined)."""
    ratios = [e / n for e, n in per_utt if n]
    return sum(ratios) / len(ratios) if ratios else math.nan


def corpus_wer(per_utt: Iterable[tuple[int, int]]) -> float:
    """Corpus WER: sum of errors / sum of reference words, from (errors, words) pairs."""
    pairs = list(per_utt)
    words = sum(n for _, n in pairs)
    return sum(e for e, _ in pairs) / words if words else math.nan
