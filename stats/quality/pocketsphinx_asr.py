"""`pocketsphinx`: offline English ASR with the acoustic model, dictionary and LM bundled in
the pocketsphinx wheel. Weak next to Whisper, but needs nothing from outside, so the demo and
tests have a real WER scorer. Decoding is CPU-bound and single-threaded per decoder, so batches
fan out over a process pool (one decoder per worker, created once).

On espeak-ng speech (the reference engine, the sample workload) its WER is ~85 % whatever the
audio preprocessing or decoder settings (measured in docs/quality.md): intrinsic to the CMU
en-us model on formant synthesis, so the defaults stay as shipped; use `whisper` for a WER gate."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Sequence

import numpy as np

from data.extras import extra_hint
from stats.quality.asr import AsrScorer
from stats.quality.pool import ProcessPoolMixin

_DECODER = None


def _model_root() -> Path:
    import pocketsphinx
    return Path(pocketsphinx.get_model_path())


def _decoder():
    global _DECODER
    if _DECODER is None:
        from pocketsphinx import Decoder
        _DECODER = Decoder(samprate=16000, loglevel="FATAL")
    return _DECODER


def decode_pcm16(pcm: bytes) -> str:
    """Decode one utterance of 16 kHz s16le PCM; runs in a worker (or in-process)."""
    d = _decoder()
    # Live CMN and other feature state carry over between utterances, which made a transcript
    # depend on what the worker decoded before (seen in tests); resetting the feature pipeline
    # makes each transcript a function of its audio alone (idempotent scoring, --recheck).
    d.reinit_feat()
    d.start_utt()
    d.process_raw(pcm, full_utt=True)
    d.end_utt()
    hyp = d.hyp()
    return hyp.hypstr if hyp is not None else ""


def _to_pcm16(wav: np.ndarray) -> bytes:
    return (np.clip(wav, -1.0, 1.0) * 32767.0).round().astype("<i2").tobytes()


class PocketsphinxScorer(ProcessPoolMixin, AsrScorer):
    name = "pocketsphinx"
    scorer_id = "pocketsphinx-en"
    label = "WER (pocketsphinx en-us)"
    default_batch = 16
    pool_min_batch = 6

    @property
    def version(self) -> str:
        return f"pocketsphinx {metadata.version('pocketsphinx')} en-us"

    def model_files(self) -> list[Path]:
        root = _model_root()
        wanted = [root / "en-us" / "en-us", root / "en-us" / "en-us.lm.bin", root / "en-us" / "cmudict-en-us.dict"]
        files = []
        for w in wanted:
            files += sorted(p for p in w.rglob("*") if p.is_file()) if w.is_dir() else [w]
        return files

    def available(self) -> tuple[bool, str]:
        try:
            missing = [str(p) for p in self.model_files() if not p.is_file()]
        except ImportError as exc:
            return False, extra_hint("quality", exc)
        return (False, f"bundled model files missing: {missing[:3]}") if missing else (True, "ok")

    def load(self) -> None:
        """The worker pool starts with the first batch big enough to repay its start-up."""
        self._pool = None

    def transcribe(self, wavs: Sequence[np.ndarray]) -> list[str]:
        return self.map_in_pool(decode_pcm16, [_to_pcm16(w) for w in wavs])

    def describe(self) -> dict:
        return super().describe() | {"workers": self.workers}

    def close(self) -> None:
        self.close_pool()
        self._loaded = False
