"""The scorer interface shared by every quality backend.

A scorer has a stable `scorer_id` (the key of its rows in `quality_scores`), a `version`
(package and model version) and a `model_hash` (SHA-256 over its model files), measures one
`metric` ('wer', 'sim' or 'mos'), says whether it can run *before* anything is loaded
(`available()`), and scores batches of stored output WAVs. A scorer never downloads: model
directories come from the plan or environment (`stats.quality.paths`), and a missing one is
"unavailable: <why>", which makes the gates that need it INCONCLUSIVE.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, ClassVar, Sequence, TypeVar

from data.hashing import cached_sha256_files, sha256_text
from stats.quality.metrics import NAMES
from stats.quality.wer import WerCounts

METRICS = NAMES  # stats/quality/metrics.py: the one table of quality metrics


@dataclass(frozen=True)
class ScoreItem:
    """One stored output to score."""
    run_id: str
    request_index: int
    utt_id: str
    audio_path: Path
    target_text: str
    prompt_wav: Path | None
    audio_sha256: str | None = None


@dataclass(frozen=True)
class ScoreResult:
    """Outcome for one item: a value (and WER counts for ASR scorers), or an error."""
    status: str  # 'ok' | 'error'
    value: float | None = None
    error: str | None = None
    wer: WerCounts | None = None
    hypothesis: str | None = None

    @classmethod
    def failed(cls, why: str) -> "ScoreResult":
        return cls("error", error=why)


def offline_env() -> None:
    """Forbid the Hugging Face libraries any network access, whatever the caller's env says."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ["HF_DATASETS_OFFLINE"] = "1"


def hash_model_files(files: Sequence[Path], root: Path | None = None) -> str:
    """SHA-256 over (relative name, file SHA-256) of every model file, in sorted order.

    Multi-GB checkpoints take seconds to hash, so file digests come from the one digest cache
    (data/hashing.py), keyed by (path, size, mtime_ns); a changed file is hashed again."""
    ordered = sorted(Path(p) for p in files)
    lines: list[str] = []
    for f, digest in zip(ordered, cached_sha256_files(ordered)):
        name = str(f.relative_to(root)) if root and f.is_relative_to(root) else f.name
        lines.append(f"{name}\0{digest}\n")
    return sha256_text("".join(lines))


T = TypeVar("T")


class Scorer(ABC):
    """Base class of all scorers; subclasses set the class attributes and implement scoring."""

    name: ClassVar[str]        # registry name used in plans and on the command line
    scorer_id: ClassVar[str]   # stable key of this scorer's rows in quality_scores
    metric: ClassVar[str]      # 'wer' | 'sim' | 'mos'
    label: ClassVar[str]       # what reports call the value, e.g. 'DNSMOS OVRL'
    default_batch: ClassVar[int] = 8
    dtypes: ClassVar[tuple[str, ...]] = ("float32",)  # compute dtypes the scorer offers; first = default
    # device scorers read the next batch's WAVs (with their `resampler`) while the model runs
    # (stats.quality.audio.Prefetcher)
    prefetches: ClassVar[bool] = False

    @property
    def resampler(self) -> str:
        """How stored WAVs reach 16 kHz (stats.quality.audio.load_audio); a scorer names its own."""
        return "soxr"

    @property
    def reads_as(self) -> str:
        """What the prefetcher reads the next batch's WAVs as: `resampler`, or "native" (the file's
        own rate) for a scorer that resamples on its device."""
        return self.resampler

    def __init__(self, model_dir: Path | None = None, *, device: str | None = None,
                 batch_size: int | None = None, dtype: str | None = None):
        self.model_dir = Path(model_dir).expanduser() if model_dir else None
        self.device = device or self.default_device()
        self.batch_size = batch_size or self.default_batch
        if dtype is not None and dtype not in self.dtypes:
            raise ValueError(f"{self.name}: dtype {dtype!r} is not offered (have: {', '.join(self.dtypes)})")
        self.dtype = dtype or self.dtypes[0]
        self._model_hash: str | None = None
        self._loaded = False

    # -- identity -------------------------------------------------------------------------
    @property
    @abstractmethod
    def version(self) -> str:
        """Package and model version, stored with every row."""

    @abstractmethod
    def model_files(self) -> list[Path]:
        """The files whose bytes define the model (hashed into model_hash)."""

    @property
    def model_hash(self) -> str:
        """SHA-256 over the model files; a compute dtype other than the scorer's default is folded
        in, so fp16 rows never mix with (or get copied from) fp32 rows under one scorer id."""
        if self._model_hash is None:
            h = hash_model_files(self.model_files(), self.model_dir)
            if self.dtype != self.dtypes[0]:
                h = sha256_text(f"{h}\0dtype={self.dtype}")
            self._model_hash = h
        return self._model_hash

    # -- availability and loading ------------------------------------------------------------
    @abstractmethod
    def available(self) -> tuple[bool, str]:
        """(True, 'ok') or (False, why), without loading the model or touching the network."""

    @staticmethod
    def default_device() -> str:
        try:
            import torch
            return "cuda" if torch.cuda.is_available() else "cpu"
        except ImportError:
            return "cpu"

    def ensure_loaded(self) -> None:
        if not self._loaded:
            ok, why = self.available()
            if not ok:
                raise ScorerUnavailable(f"{self.name}: unavailable: {why}")
            if self.dtype != "float32" and not str(self.device).startswith("cuda"):
                from data.errors import CampaignError
                raise CampaignError(f"{self.name}: {self.dtype} needs a CUDA device (device is {self.device})")
            offline_env()
            self.load()
            self._loaded = True

    @abstractmethod
    def load(self) -> None:
        """Load the model (called once, lazily, after available() said yes)."""

    def folder(self) -> Path:
        """The model directory of a scorer that loads from one (available() requires it)."""
        if self.model_dir is None:
            raise ScorerUnavailable(f"{self.name}: unavailable: no model directory configured")
        return self.model_dir

    def loaded(self, part: T | None) -> T:
        """A model part that load() set: a clear error, not an AttributeError on None, before it ran."""
        if part is None:
            raise ScorerUnavailable(f"{self.name}: the model is not loaded")
        return part

    # -- scoring --------------------------------------------------------------------------
    @abstractmethod
    def score_batch(self, items: Sequence[ScoreItem]) -> list[ScoreResult]:
        """Score items; a per-item failure is an error result, never an exception."""

    def submit_batch(self, items: Sequence[ScoreItem]) -> Callable[[], list[ScoreResult]]:
        """Start scoring `items` and return what finishes it. A device scorer queues its work and
        returns before the device is done, so `scored_in_batches` stages the next batch (and the
        caller stores the previous one) while the device runs; here: score now."""
        results = self.score_batch(items)
        return lambda: results

    def describe(self) -> dict:
        """What ran: for progress lines and bench output."""
        return {"scorer": self.scorer_id, "metric": self.metric, "device": self.device,
                "batch_size": self.batch_size, "dtype": self.dtype, "version": self.version}

    def close(self) -> None:
        """Release worker processes or GPU memory (default: nothing to release)."""
        return None


class ScorerUnavailable(Exception):
    """Raised when a scorer is asked to score although available() says no."""
