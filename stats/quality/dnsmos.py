"""`dnsmos`: Microsoft DNSMOS P.835 (ONNX models bundled in the `speechmos` wheel), 16 kHz only.

This is DNSMOS, not UTMOS: it fills the plan's 'mos' slot when no UTMOS22 checkpoint is on
disk, and everything that shows it says DNSMOS. The stored value is the overall (OVRL) MOS.

`dnsmos_ovrl` mirrors `speechmos.dnsmos.DNSMOS.__call__` (speechmos 0.0.1.1) for the OVRL value
and tests check it returns speechmos' numbers: clips shorter than 9.01 s are doubled until long
enough, 9.01 s windows at 1 s hops go through `sig_bak_ovr.onnx` one at a time, the raw OVRL
goes through the non-personalised P.835 polynomial, and windows are averaged. Why not call
speechmos: OVRL needs only `sig_bak_ovr.onnx`, but speechmos also computes a librosa mel
spectrogram and the P.808 model for every window (unused here), imports librosa (seconds per
worker) and builds its sessions with onnxruntime's default threading. Profiling showed the
sessions were already kept (not rebuilt per call); 95 % of the rest is the conv layers of
sig_bak_ovr (~0.25 s per window on one core), which is intrinsic, so outputs with identical
bytes are scored once (`stats.quality.scoring.content_key`). Batches fan out over a process
pool with one single-threaded session per worker."""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path
from typing import Sequence

import numpy as np

from data.errors import one_line
from data.extras import extra_hint
from stats.quality.audio import AudioError, load_audio
from stats.quality.base import ScoreItem, ScoreResult, Scorer
from stats.quality.pool import ProcessPoolMixin

SR = 16000
INPUT_LENGTH = 9.01  # seconds per DNSMOS window (speechmos.dnsmos.INPUT_LENGTH)
OVRL_POLY = np.poly1d([-0.06766283, 1.11546468, 0.04602535])  # speechmos get_polyfit_val, not personalised
_SESSION = None
_THREADS = os.cpu_count() or 1  # in-process: all cores; pool workers set 1 (one session per core)


def _models_dir() -> Path:
    import speechmos
    return Path(speechmos.__file__).resolve().parent / "dnsmos_models"


def _session(threads: int):
    """The sig_bak_ovr session, built once per process: CPU provider, explicit thread counts, and
    no spin-waiting (on a shared box spinning threads burn cores other work needs)."""
    global _SESSION
    if _SESSION is None:
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        _SESSION = ort.InferenceSession(str(_models_dir() / "sig_bak_ovr.onnx"), opts,
                                        providers=["CPUExecutionProvider"])
    return _SESSION


def _worker_init() -> None:
    global _THREADS
    _THREADS = 1


def dnsmos_ovrl(wav: np.ndarray, threads: int | None = None) -> float:
    """OVRL MOS of one 16 kHz clip in [-1, 1] (runs in a worker or in-process); the same arithmetic
    as speechmos, including its window bounds (a window whose float end rounds short is skipped)."""
    sess = _session(threads or _THREADS)
    audio = np.clip(wav, -1.0, 1.0).astype(np.float32)
    fs = SR
    len_samples = int(INPUT_LENGTH * fs)
    while len(audio) < len_samples:
        audio = np.append(audio, audio)
    num_hops = int(np.floor(len(audio) / fs) - INPUT_LENGTH) + 1
    ovr = []
    for idx in range(num_hops):
        seg = audio[int(idx * fs): int((idx + INPUT_LENGTH) * fs)]
        if len(seg) < len_samples:
            continue
        raw = sess.run(None, {"input_1": np.array(seg).astype("float32")[np.newaxis, :]})[0][0]
        ovr.append(OVRL_POLY(raw[2]))
    return float(np.mean(ovr))


def _score_path(path: str) -> ScoreResult:
    try:
        return ScoreResult("ok", value=dnsmos_ovrl(load_audio(Path(path))))
    except AudioError as exc:
        return ScoreResult.failed(str(exc))
    except Exception as exc:  # one bad clip must not stop the run
        return ScoreResult.failed(f"dnsmos failed: {one_line(exc)}")


class DnsmosScorer(ProcessPoolMixin, Scorer):
    name = "dnsmos"
    scorer_id = "dnsmos"
    metric = "mos"
    label = "DNSMOS OVRL (P.835)"
    default_batch = 32
    pool_min_batch = 8
    pool_initializer = staticmethod(_worker_init)

    @property
    def version(self) -> str:
        # unchanged since OVRL never depended on model_v8 (P.808): rows from before stay comparable
        return f"speechmos {metadata.version('speechmos')} dnsmos sig_bak_ovr+model_v8 OVRL"

    def model_files(self) -> list[Path]:
        # model_v8 stays in the hash so the model hash of earlier rows still matches
        d = _models_dir()
        return [d / "sig_bak_ovr.onnx", d / "model_v8.onnx"]

    def available(self) -> tuple[bool, str]:
        try:
            missing = [str(p) for p in self.model_files() if not p.is_file()]
            import onnxruntime  # noqa: F401  (needed at load time)
        except ImportError as exc:
            return False, extra_hint("quality", exc)
        return (False, f"bundled ONNX models missing: {missing}") if missing else (True, "ok")

    def load(self) -> None:
        """Nothing to load up front: the pool starts with the first batch big enough to repay
        its start-up (a spawned worker imports numpy, soxr and onnxruntime, about a second)."""
        self._pool = None

    def score_wave(self, wav: np.ndarray) -> float:
        self.ensure_loaded()
        return dnsmos_ovrl(wav)

    def score_batch(self, items: Sequence[ScoreItem]) -> list[ScoreResult]:
        self.ensure_loaded()
        return self.map_in_pool(_score_path, [str(it.audio_path) for it in items])

    def describe(self) -> dict:
        return super().describe() | {"workers": self.workers}

    def close(self) -> None:
        self.close_pool()
        self._loaded = False
