"""`whisper`: any Whisper checkpoint (Whisper-large-v3 for the real protocol) from a local
Hugging Face folder via transformers, run as seed-tts-eval's English path (run_wer.py) runs it:
16 kHz input through scipy's FFT resampler, language English, task transcribe, the checkpoint's
own generation config otherwise (greedy), fp32 (float16 only when the plan asks, and then in
model_hash). What still differs (batching, text normalisation) is listed in docs/quality.md.
`local_files_only=True` and the offline env vars make a missing file an error, never a download."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from stats.quality.asr import AsrScorer
from stats.quality.precision import DTYPES, precision
from stats.quality.sim import hf_dir_problems

if TYPE_CHECKING:
    from transformers import WhisperForConditionalGeneration, WhisperProcessor

WHISPER_WINDOW_S = 30.0
_TOKENIZER_FILES = (("tokenizer.json",), ("vocab.json", "merges.txt"))
_FEATURE_FILES = ("preprocessor_config.json", "processor_config.json")


class WhisperScorer(AsrScorer):
    name = "whisper"
    scorer_id = "whisper"
    label = "WER (Whisper)"
    default_batch = 16
    dtypes = DTYPES  # stats.quality.precision; float16 loads fp16 weights
    resampler = "fft"
    prefetches = True

    def __init__(self, model_dir: Path | None = None, **kw):
        super().__init__(model_dir, **kw)
        self._model: WhisperForConditionalGeneration | None = None
        self._proc: WhisperProcessor | None = None
        self.last_batches: list[int] = []  # batch sizes of the last transcribe() (bench output)

    @property
    def version(self) -> str:
        return (f"transformers {metadata.version('transformers')} whisper {self.model_dir.name if self.model_dir else '?'} "
                f"{self.dtype}")

    def model_files(self) -> list[Path]:
        return sorted(p for p in self.folder().iterdir()
                      if p.is_file() and p.suffix in (".json", ".safetensors", ".bin", ".txt"))

    def available(self) -> tuple[bool, str]:
        ok, why = hf_dir_problems(self.model_dir, "whisper", "CAMPAIGN_WHISPER_DIR", model_type="whisper")
        if not ok:
            return ok, why
        d = self.folder()
        if not any(all((d / f).is_file() for f in group) for group in _TOKENIZER_FILES):
            return False, f"{d} has no tokenizer (tokenizer.json, or vocab.json + merges.txt)"
        if not any((d / f).is_file() for f in _FEATURE_FILES):
            return False, f"{d} has no preprocessor_config.json"
        return True, "ok"

    def load(self) -> None:
        import torch
        import transformers

        transformers.logging.set_verbosity_error()  # deprecation chatter would bury the progress bar
        from transformers import WhisperForConditionalGeneration, WhisperProcessor
        self._proc = WhisperProcessor.from_pretrained(self.folder(), local_files_only=True)
        dtype = torch.float16 if self.dtype == "float16" else torch.float32
        self._model = WhisperForConditionalGeneration.from_pretrained(
            self.folder(), local_files_only=True, dtype=dtype)
        # transformers wraps PreTrainedModel.to with functools.wraps, which types the bound call wrongly
        self._model.to(self.device).eval()  # type: ignore[arg-type]

    def _generate(self, wavs: list[np.ndarray], long_form: bool) -> list[str]:
        import torch
        proc, model = self.loaded(self._proc), self.loaded(self._model)
        fe = proc.feature_extractor
        kw: dict[str, Any] = dict(sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
        if long_form:  # > 30 s: transformers' sequential long-form decoding needs the full input
            kw.update(truncation=False, padding="longest")
        feats = fe(wavs, **kw)
        inputs = feats.input_features.to(self.device, model.dtype)
        mask = feats.attention_mask.to(self.device) if long_form else None
        compute = "float32" if self.dtype == "float16" else self.dtype  # fp16 is in the weights, not autocast
        with torch.inference_mode(), precision(compute, self.device):
            ids = model.generate(inputs, attention_mask=mask, language="en", task="transcribe",
                                       do_sample=False, num_beams=1)
        seqs = ids["sequences"] if isinstance(ids, dict) else ids
        return [t.strip() for t in proc.batch_decode(seqs, skip_special_tokens=True)]

    def transcribe(self, wavs: Sequence[np.ndarray]) -> list[str]:
        """Greedy English transcripts; batches hold similar lengths to waste little padding."""
        self.last_batches = []
        order = sorted(range(len(wavs)), key=lambda i: len(wavs[i]))
        out: list[str] = [""] * len(wavs)
        limit = int(WHISPER_WINDOW_S * 16000)
        short = [i for i in order if len(wavs[i]) <= limit]
        for start in range(0, len(short), self.batch_size):
            idx = short[start:start + self.batch_size]
            self.last_batches.append(len(idx))
            for i, t in zip(idx, self._generate([wavs[i] for i in idx], long_form=False)):
                out[i] = t
        for i in (i for i in order if len(wavs[i]) > limit):
            self.last_batches.append(1)
            out[i] = self._generate([wavs[i]], long_form=True)[0]
        return out
