"""`utmos22`: UTMOS22 strong (the UTokyo-SaruLab VoiceMOS 2022 system) from a local checkpoint.

Honest limitation: UTMOS22 strong is a fairseq wav2vec 2.0 SSL front end plus domain and
listener embeddings, a BLSTM and a projection head, distributed as a Lightning checkpoint
together with its own model code (sarulab-speech/UTMOS22, or tarepan/SpeechMOS's
`utmos22_strong`). That model code is not installed here and is not on the package index this
project may use, and re-implementing its layer layout without the checkpoint to verify it
against would produce numbers nobody could trust. So this scorer never scores: it reports
"unavailable: <why>" (the MOS gates become INCONCLUSIVE) and docs/quality.md says what to
install. DNSMOS (`dnsmos`) is the bundled MOS scorer and is labelled as DNSMOS, never UTMOS.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from stats.quality.base import ScoreItem, ScoreResult, Scorer

NEEDS = ("the UTMOS22 strong model code (sarulab-speech/UTMOS22 `lightning_module.py` or "
         "tarepan/SpeechMOS `utmos22_strong`), which this console does not ship")


class Utmos22Scorer(Scorer):
    name = "utmos22"
    scorer_id = "utmos22"
    metric = "mos"
    label = "UTMOS22 strong"

    @property
    def version(self) -> str:
        return "utmos22-strong (no loader)"

    def model_files(self) -> list[Path]:
        if self.model_dir is None or not self.model_dir.is_dir():
            return []
        return sorted(p for p in self.model_dir.rglob("*") if p.is_file() and p.suffix in (".ckpt", ".pt", ".pth"))

    def available(self) -> tuple[bool, str]:
        if self.model_dir is None:
            return False, "no UTMOS22 checkpoint directory configured (quality.model_paths.utmos22 or $CAMPAIGN_UTMOS_DIR)"
        if not self.model_dir.is_dir():
            return False, f"model directory {self.model_dir} does not exist"
        if not self.model_files():
            return False, f"{self.model_dir} holds no .ckpt/.pt checkpoint"
        return False, f"checkpoint found in {self.model_dir}, but loading it needs {NEEDS}"

    def load(self) -> None:
        raise RuntimeError(self.available()[1])

    def score_batch(self, items: Sequence[ScoreItem]) -> list[ScoreResult]:
        why = self.available()[1]
        return [ScoreResult.failed(f"utmos22 unavailable: {why}") for _ in items]
