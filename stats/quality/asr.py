"""Shared part of the ASR (WER) scorers: transcribe, normalise, count errors."""

from __future__ import annotations

from abc import abstractmethod
from typing import Sequence

import numpy as np

from data.errors import one_line
from stats.quality.audio import AudioError, load_audio
from stats.quality.base import ScoreItem, ScoreResult, Scorer
from stats.quality.wer import wer_counts


class AsrScorer(Scorer):
    metric = "wer"

    @abstractmethod
    def transcribe(self, wavs: Sequence[np.ndarray]) -> list[str]:
        """Raw transcripts of 16 kHz mono float32 waveforms, in order."""

    def transcribe_paths(self, paths: Sequence) -> list[str | AudioError]:
        """Transcripts for files; unreadable files come back as the AudioError."""
        self.ensure_loaded()
        loaded: list[np.ndarray | AudioError] = []
        for p in paths:
            try:
                loaded.append(load_audio(p, resampler=self.resampler))
            except AudioError as exc:
                loaded.append(exc)
        good = [(i, w) for i, w in enumerate(loaded) if not isinstance(w, AudioError)]
        texts = self.transcribe([w for _, w in good]) if good else []
        text_at = dict(zip((i for i, _ in good), texts))
        return [text_at[i] if not isinstance(w, AudioError) else w for i, w in enumerate(loaded)]  # errors stay in place

    def score_batch(self, items: Sequence[ScoreItem]) -> list[ScoreResult]:
        try:
            texts = self.transcribe_paths([it.audio_path for it in items])
        except Exception as exc:  # a model failure marks the whole batch, keeps the run going
            return [ScoreResult.failed(f"asr failed: {one_line(exc)}") for _ in items]
        results = []
        for it, t in zip(items, texts):
            if isinstance(t, AudioError):
                results.append(ScoreResult.failed(str(t)))
                continue
            c = wer_counts(it.target_text, t)
            results.append(ScoreResult("ok", value=c.wer, wer=c, hypothesis=t))
        return results
