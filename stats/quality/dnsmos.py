"""`dnsmos`: Microsoft DNSMOS P.835 (ONNX models bundled in the `speechmos` wheel), 16 kHz only.

This is DNSMOS, not UTMOS: it fills the plan's 'mos' slot when no UTMOS22 checkpoint is on
disk, and everything that shows it says DNSMOS. The stored value is the overall (OVRL) MOS.
A clip costs about a second of CPU (mel spectrogram + two ONNX models over 9 s windows), so
batches fan out over a process pool with one single-threaded ONNX session pair per worker."""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from importlib import metadata
from pathlib import Path
from typing import Sequence

import numpy as np

from stats.quality.audio import AudioError, load_audio
from stats.quality.base import ScoreItem, ScoreResult, Scorer, one_line

_MODEL = None
POOL_MIN_BATCH = 12  # below this, worker start-up costs more than it saves


def _models_dir() -> Path:
    import speechmos
    return Path(speechmos.__file__).resolve().parent / "dnsmos_models"


def _build(threads: int):
    """speechmos' DNSMOS with our own sessions: explicit CPU provider and thread count."""
    import onnxruntime as ort
    from speechmos.dnsmos import DNSMOS

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    d = _models_dir()
    model = DNSMOS.__new__(DNSMOS)
    model.primary_model_path = str(d / "sig_bak_ovr.onnx")
    model.onnx_sess = ort.InferenceSession(model.primary_model_path, opts, providers=["CPUExecutionProvider"])
    model.p808_onnx_sess = ort.InferenceSession(str(d / "model_v8.onnx"), opts, providers=["CPUExecutionProvider"])
    return model


def dnsmos_ovrl(wav: np.ndarray, threads: int = 1) -> float:
    """OVRL MOS of one 16 kHz clip (runs in a worker or in-process)."""
    global _MODEL
    if _MODEL is None:
        _MODEL = _build(threads)
    return float(_MODEL(np.clip(wav, -1.0, 1.0).astype(np.float32), 16000, False)["ovrl_mos"])


def _score_path(path: str) -> tuple[str, float | str]:
    try:
        return "ok", dnsmos_ovrl(load_audio(Path(path)))
    except AudioError as exc:
        return "error", str(exc)
    except Exception as exc:  # one bad clip must not stop the run
        return "error", f"dnsmos failed: {one_line(exc)}"


class DnsmosScorer(Scorer):
    name = "dnsmos"
    scorer_id = "dnsmos"
    metric = "mos"
    label = "DNSMOS OVRL (P.835)"
    default_batch = 32

    def __init__(self, model_dir: Path | None = None, *, device: str | None = None,
                 batch_size: int | None = None, workers: int | None = None):
        super().__init__(model_dir, device="cpu", batch_size=batch_size)
        self.workers = workers if workers is not None else (os.cpu_count() or 1)
        self._pool: ProcessPoolExecutor | None = None

    @property
    def version(self) -> str:
        return f"speechmos {metadata.version('speechmos')} dnsmos sig_bak_ovr+model_v8 OVRL"

    def model_files(self) -> list[Path]:
        d = _models_dir()
        return [d / "sig_bak_ovr.onnx", d / "model_v8.onnx"]

    def available(self) -> tuple[bool, str]:
        try:
            missing = [str(p) for p in self.model_files() if not p.is_file()]
            import onnxruntime  # noqa: F401  (needed at load time)
        except ImportError as exc:
            return False, f"speechmos/onnxruntime not installed ({exc})"
        return (False, f"bundled ONNX models missing: {missing}") if missing else (True, "ok")

    def load(self) -> None:
        """Nothing to load up front: the pool starts with the first batch big enough to repay
        its start-up (each spawned worker imports librosa, a few seconds)."""
        self._pool = None

    def score_wave(self, wav: np.ndarray) -> float:
        self.ensure_loaded()
        return dnsmos_ovrl(wav, threads=os.cpu_count() or 1)

    def score_batch(self, items: Sequence[ScoreItem]) -> list[ScoreResult]:
        self.ensure_loaded()
        paths = [str(it.audio_path) for it in items]
        if self.workers > 1 and len(paths) >= POOL_MIN_BATCH and self._pool is None:
            ctx = multiprocessing.get_context("spawn")  # no fork of a process holding torch threads
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx)
        if self._pool is None or len(paths) == 1:
            outs = [_score_path(p) for p in paths]
        else:
            outs = list(self._pool.map(_score_path, paths))
        return [ScoreResult("ok", value=v) if st == "ok" else ScoreResult.failed(v) for st, v in outs]

    def describe(self) -> dict:
        return super().describe() | {"workers": self.workers}

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._loaded = False
