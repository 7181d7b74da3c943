"""`dnsmos`: Microsoft DNSMOS P.835 (ONNX models bundled in the `speechmos` wheel), 16 kHz only.

This is DNSMOS, not UTMOS: it fills the plan's 'mos' slot when no UTMOS22 checkpoint is on
disk, and everything that shows it says DNSMOS. The stored value is the overall (OVRL) MOS."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Sequence

import numpy as np

from stats.quality.audio import AudioError, load_audio
from stats.quality.base import ScoreItem, ScoreResult, Scorer, one_line


def _models_dir() -> Path:
    import speechmos
    return Path(speechmos.__file__).resolve().parent / "dnsmos_models"


class DnsmosScorer(Scorer):
    name = "dnsmos"
    scorer_id = "dnsmos"
    metric = "mos"
    label = "DNSMOS OVRL (P.835)"
    default_batch = 16

    def __init__(self, model_dir: Path | None = None, *, device: str | None = None,
                 batch_size: int | None = None):
        super().__init__(model_dir, device="cpu", batch_size=batch_size)
        self._model = None

    @property
    def version(self) -> str:
        return f"speechmos {metadata.version('speechmos')} dnsmos sig_bak_ovr+model_v8"

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
        from speechmos.dnsmos import DNSMOS
        primary, p808 = self.model_files()
        self._model = DNSMOS(str(primary), str(p808))

    def score_wave(self, wav: np.ndarray) -> float:
        self.ensure_loaded()
        return float(self._model(np.clip(wav, -1.0, 1.0), 16000, False)["ovrl_mos"])

    def score_batch(self, items: Sequence[ScoreItem]) -> list[ScoreResult]:
        out = []
        for it in items:
            try:
                out.append(ScoreResult("ok", value=self.score_wave(load_audio(it.audio_path))))
            except AudioError as exc:
                out.append(ScoreResult.failed(str(exc)))
            except Exception as exc:  # model failure on one clip must not stop the run
                out.append(ScoreResult.failed(f"dnsmos failed: {one_line(exc)}"))
        return out
