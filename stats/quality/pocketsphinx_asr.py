"""`pocketsphinx` and `pocketsphinx-domain`: offline English ASR from the pocketsphinx wheel.

`pocketsphinx` is the general recogniser: the bundled CMU en-us acoustic model, dictionary and LM.
Weak next to Whisper, but needs nothing from outside. On espeak-ng speech (the reference engine)
its WER is ~85-90 % whatever the audio preprocessing or decoder settings (docs/quality.md), so it
cannot tell a candidate that drops words from one that does not.

`pocketsphinx-domain` is a **domain model**, not a general ASR: the same acoustic model with an
n-gram LM and a dictionary built from the workload's texts (stats/quality/domain_lm.py). It knows
which words the workload can contain and how often they follow each other, which brings espeak
speech down to a low WER while a skipped word still shows as a deletion. Its model identity is
the acoustic model plus the generated LM and dictionary (their SHA-256s), so rows scored with a
different workload's LM never mix with these. Every label names it a domain model.

Decoding is CPU-bound and single-threaded per decoder, so batches fan out over a process pool (one
decoder per worker and model, created once)."""

from __future__ import annotations

import functools
import os
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from data.errors import CampaignError
from data.extras import extra_hint
from stats.quality.asr import AsrScorer
from stats.quality.pool import ProcessPoolMixin

if TYPE_CHECKING:
    from stats.quality.domain_lm import DomainModel

_DECODERS: dict[tuple[tuple[str, object], ...], Any] = {}


def _model_root() -> Path:
    import pocketsphinx
    return Path(pocketsphinx.get_model_path())


def _decoder(settings: tuple[tuple[str, object], ...] = ()):
    """This process's decoder for these settings (the bundled defaults plus `settings`)."""
    if settings not in _DECODERS:
        from pocketsphinx import Decoder
        _DECODERS[settings] = Decoder(samprate=16000, loglevel="FATAL", **dict(settings))
    return _DECODERS[settings]


def decode_pcm16(pcm: bytes, settings: tuple[tuple[str, object], ...] = ()) -> str:
    """Decode one utterance of 16 kHz s16le PCM; runs in a worker (or in-process)."""
    d = _decoder(settings)
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


# -- the domain model ---------------------------------------------------------------------------
# Decoder settings of the domain model (docs/quality.md "pocketsphinx-domain" has the measurements):
# the language weight stays pocketsphinx's default; `topn` scores 64 Gaussians per frame instead of 4
# (the AM's scores of formant speech are poor with 4); `frate` 115 frames/s instead of 100 lets an
# HMM (3 states, at least one frame each) fit espeak's short phones instead of deleting the word.
DOMAIN_DECODER: tuple[tuple[str, object], ...] = (("lw", 6.5), ("topn", 64), ("frate", 115))
DOMAIN_MODEL_DIR = "pocketsphinx-domain"  # under the project's cache folder (data/hashing.py)


def domain_texts(source: Path) -> list[str]:
    """The texts an LM is built from: a Seed-TTS workload folder or its `meta.lst` (every
    utterance's target text, whatever the pools), else a text file with one text per line."""
    from data.workload import META_NAME, load_workload

    if source.is_dir() or source.name == META_NAME:
        return [u.target_text for u in load_workload(source).utterances]
    return [line for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write_once(path: Path, text: str) -> None:
    """Write `text` unless the file already holds it (atomically: concurrent builders agree)."""
    data = text.encode("utf-8")
    if path.is_file() and path.read_bytes() == data:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


class PocketsphinxDomainScorer(PocketsphinxScorer):
    """pocketsphinx with the workload-domain LM and dictionary (module doc). Its "model folder"
    (`quality.model_paths.pocketsphinx-domain`, or $CAMPAIGN_DOMAIN_LM_TEXTS) names the texts the
    LM is built from; the built files live in the cache folder, named by their content."""

    name = "pocketsphinx-domain"
    scorer_id = "pocketsphinx-domain-lm"
    label = "WER (pocketsphinx + workload-domain LM: not a general ASR)"

    def __init__(self, model_dir=None, **kw):
        super().__init__(model_dir, **kw)
        self._built: tuple[Path, Path, DomainModel] | None = None

    def _build(self) -> tuple[Path, Path, DomainModel]:
        """(LM file, dictionary file, model) for the configured texts, written once per content."""
        if self._built is None:
            from data.hashing import default_cache_path, sha256_text
            from stats.quality.domain_lm import build

            model = build(domain_texts(self.folder()), _model_root() / "en-us" / "cmudict-en-us.dict")
            key = sha256_text(f"{model.arpa}\0{model.dictionary}")[:16]
            folder = default_cache_path().parent / DOMAIN_MODEL_DIR / key
            folder.mkdir(parents=True, exist_ok=True)
            lm, dic = folder / "domain.lm", folder / "domain.dict"
            _write_once(lm, model.arpa)
            _write_once(dic, model.dictionary)
            self._built = (lm, dic, model)
        return self._built

    @property
    def version(self) -> str:
        from stats.quality.domain_lm import DISCOUNT, ORDER

        words = len(self._build()[2].words) if self.model_dir is not None else "?"
        decoder = ", ".join(f"{k} {v}" for k, v in DOMAIN_DECODER)
        return (f"pocketsphinx {metadata.version('pocketsphinx')} en-us AM + domain LM (order {ORDER}, "
                f"discount {DISCOUNT}, {words} workload words; {decoder})")

    @property
    def model_hash(self) -> str:
        """The files' hash (`model_files`) with the decoder settings folded in: they change transcripts too."""
        from data.hashing import sha256_text

        return sha256_text(f"{super().model_hash}\0decoder={DOMAIN_DECODER!r}")

    def model_files(self) -> list[Path]:
        """The acoustic model, the generated LM and dictionary (the texts are in them)."""
        lm, dic, _ = self._build()
        root = _model_root() / "en-us" / "en-us"
        return sorted(p for p in root.rglob("*") if p.is_file()) + [lm, dic]

    def available(self) -> tuple[bool, str]:
        if self.model_dir is None:
            return False, ("no LM texts configured: set quality.model_paths.pocketsphinx-domain (or "
                           "$CAMPAIGN_DOMAIN_LM_TEXTS) to the workload folder, its meta.lst or a text file")
        if not self.model_dir.exists():
            return False, f"LM texts {self.model_dir} do not exist"
        try:
            return super().available()
        except (OSError, ValueError, CampaignError) as exc:  # unreadable texts, a malformed workload
            return False, f"LM texts {self.model_dir}: {exc}"

    @property
    def missing_words(self) -> tuple[str, ...]:
        """Workload words without a pronunciation: outside the LM, so always an error."""
        return self._build()[2].missing

    def settings(self) -> tuple[tuple[str, object], ...]:
        lm, dic, _ = self._build()
        return (("dict", str(dic)), ("lm", str(lm)), *DOMAIN_DECODER)

    def transcribe(self, wavs: Sequence[np.ndarray]) -> list[str]:
        return self.map_in_pool(functools.partial(decode_pcm16, settings=self.settings()),
                                [_to_pcm16(w) for w in wavs])

    def describe(self) -> dict:
        return super().describe() | {"domain_lm": str(self._build()[0]), "missing_words": list(self.missing_words)}
