"""Speaker similarity scorers: cosine x 100 between speaker embeddings of the output and the
prompt wav, both at 16 kHz. Prompt embeddings are cached (many outputs share one prompt)."""

from __future__ import annotations

import json
from abc import abstractmethod
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from data.errors import one_line
from data.extras import extra_hint
from stats.quality.audio import NATIVE, SCORER_RATE, load_each, load_each_native
from stats.quality.base import ScoreItem, ScoreResult, Scorer
from stats.quality.precision import DTYPES, precision

if TYPE_CHECKING:
    from transformers import WavLMForXVector

    from stats.quality.ecapa import EcapaHead
    from stats.quality.wavlm import WavLM


def cosine100(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine similarity x 100 (the Seed-TTS SIM scale)."""
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        raise ValueError("zero-length speaker embedding")
    return 100.0 * float(np.dot(a, b)) / (na * nb)


class SimScorer(Scorer):
    metric = "sim"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._prompt_cache: dict[Path, np.ndarray] = {}


    @abstractmethod
    def embed(self, wavs: Sequence[np.ndarray]) -> list[np.ndarray | str]:
        """Speaker embeddings of 16 kHz mono float32 waveforms (an error text for a clip the
        model cannot embed, e.g. shorter than its first conv window)."""

    def _embed_files(self, paths: Sequence[Path]) -> tuple[list[Any], dict[int, np.ndarray | str]]:
        """(per file: its samples or its load error text; index -> embedding or error text for
        those that loaded)."""
        loaded, good = load_each(paths, resampler=self.resampler)
        return loaded, dict(zip(good, self.embed(list(good.values())))) if good else {}

    def similarity(self, a: np.ndarray, b: np.ndarray) -> float:
        """SIM between two waveforms (used by tests and the GPU check)."""
        self.ensure_loaded()
        ea, eb = self.embed([a, b])
        if isinstance(ea, str) or isinstance(eb, str):
            raise ValueError(ea if isinstance(ea, str) else eb)
        return cosine100(ea, eb)

    def _prompt_embeddings(self, prompts: set[Path]) -> dict[Path, np.ndarray | str]:
        """Embedding (or error text) per prompt wav; embeddings are cached for the scorer's life."""
        todo = sorted(p for p in prompts if p not in self._prompt_cache)
        loaded, embs = self._embed_files(todo) if todo else ([], {})
        errors: dict[Path, str] = {}
        for k, p in enumerate(todo):
            e = loaded[k] if isinstance(loaded[k], str) else embs[k]
            if isinstance(e, str):
                errors[p] = f"prompt wav: {e}"
            else:
                self._prompt_cache[p] = e
        return {p: errors[p] if p in errors else self._prompt_cache[p] for p in prompts}

    def score_batch(self, items: Sequence[ScoreItem]) -> list[ScoreResult]:
        try:
            self.ensure_loaded()
            prompts = self._prompt_embeddings({it.prompt_wav for it in items if it.prompt_wav})
            outs, embs = self._embed_files([it.audio_path for it in items])
        except Exception as exc:  # a model failure marks the batch, keeps the run going
            return [ScoreResult.failed(f"{self.name} failed: {one_line(exc)}") for _ in items]
        return [_similarity_result(outs[i], None if it.prompt_wav is None else prompts[it.prompt_wav], embs.get(i))
                for i, it in enumerate(items)]


def _similarity_result(out: object, prompt: np.ndarray | str | None, emb: np.ndarray | str | None) -> ScoreResult:
    """One item's SIM from its loaded output (or load error), its prompt embedding (or error; None:
    no prompt wav) and its output embedding (None where the output did not load)."""
    if isinstance(out, str):
        return ScoreResult.failed(out)
    if prompt is None:
        return ScoreResult.failed("no prompt wav for this utterance")
    if isinstance(prompt, str):
        return ScoreResult.failed(prompt)
    if emb is None or isinstance(emb, str):
        return ScoreResult.failed(emb or "no embedding")
    try:
        return ScoreResult("ok", value=cosine100(emb, prompt))
    except ValueError as exc:
        return ScoreResult.failed(str(exc))


class ResemblyzerScorer(SimScorer):
    """`resemblyzer`: the GE2E speaker encoder bundled in the Resemblyzer wheel (pretrained.pt)."""
    name = "resemblyzer"
    scorer_id = "resemblyzer"
    label = "SIM x100 (Resemblyzer GE2E)"
    default_batch = 32

    def __init__(self, model_dir: Path | None = None, **kw):
        super().__init__(model_dir, **kw)
        self._encoder: Any = None  # resemblyzer.VoiceEncoder (the package ships no types)

    @property
    def version(self) -> str:
        return f"resemblyzer {metadata.version('resemblyzer')} pretrained.pt"

    def model_files(self) -> list[Path]:
        import resemblyzer
        return [Path(resemblyzer.__file__).resolve().parent / "pretrained.pt"]

    def available(self) -> tuple[bool, str]:
        try:
            f = self.model_files()[0]
        except ImportError as exc:
            return False, extra_hint("quality", exc)
        return (True, "ok") if f.is_file() else (False, f"bundled encoder missing: {f}")

    def load(self) -> None:
        from resemblyzer import VoiceEncoder
        self._encoder = VoiceEncoder(device=self.device, verbose=False)

    def embed(self, wavs: Sequence[np.ndarray]) -> list[np.ndarray | str]:
        from resemblyzer import preprocess_wav
        encoder = self.loaded(self._encoder)
        out: list[np.ndarray | str] = []
        for w in wavs:
            pre = preprocess_wav(w)  # already 16 kHz: volume-normalise and trim long silences
            if len(pre) < 1600:  # VAD left < 0.1 s: embed the raw clip rather than nothing
                pre = w
            out.append(np.asarray(encoder.embed_utterance(pre), dtype=np.float64))
        return out


class WavlmScorer(SimScorer):
    """`wavlm-ecapa`: WavLM speaker verification from a local Hugging Face directory.

    Expects a `transformers` WavLMForXVector checkpoint folder (config.json with model_type
    'wavlm', model.safetensors or pytorch_model.bin, preprocessor_config.json), e.g. a copy of
    microsoft/wavlm-base-plus-sv or a WavLM-large x-vector model converted to that layout.
    The UniSpeech `wavlm_large_finetune.pth` ECAPA-TDNN file Seed-TTS uses needs the UniSpeech
    model code, which is not shipped; such a folder is reported unavailable, not guessed at."""
    name = "wavlm-ecapa"
    scorer_id = "wavlm-ecapa"
    label = "SIM x100 (WavLM speaker verification)"
    default_batch = 16

    def __init__(self, model_dir: Path | None = None, **kw):
        super().__init__(model_dir, **kw)
        self._model: WavLMForXVector | None = None
        self._fe: Any = None  # the folder's feature extractor (AutoFeatureExtractor picks the class)

    def _config(self) -> dict:
        return json.loads((self.folder() / "config.json").read_text())

    @property
    def version(self) -> str:
        arch = ",".join(self._config().get("architectures") or ["?"]) if self.model_dir else "?"
        return f"transformers {metadata.version('transformers')} {arch} {self.model_dir.name if self.model_dir else ''}".strip()

    def model_files(self) -> list[Path]:
        return sorted(p for p in self.folder().iterdir() if p.is_file() and p.suffix in (".json", ".safetensors", ".bin"))

    def available(self) -> tuple[bool, str]:
        return hf_dir_problems(self.model_dir, "wavlm-ecapa", "CAMPAIGN_WAVLM_DIR", model_type="wavlm",
                               extra=("preprocessor_config.json",))

    def load(self) -> None:
        import torch
        import transformers

        transformers.logging.set_verbosity_error()  # deprecation chatter would bury the progress bar
        from transformers import AutoFeatureExtractor, WavLMForXVector
        self._fe = AutoFeatureExtractor.from_pretrained(self.folder(), local_files_only=True)
        dtype = torch.float16 if self.device.startswith("cuda") else torch.float32
        self._model = WavLMForXVector.from_pretrained(self.folder(), local_files_only=True, dtype=dtype)
        # transformers wraps PreTrainedModel.to with functools.wraps, which types the bound call wrongly
        self._model.to(self.device).eval()  # type: ignore[arg-type]

    def embed(self, wavs: Sequence[np.ndarray]) -> list[np.ndarray | str]:
        import torch
        fe, model = self.loaded(self._fe), self.loaded(self._model)
        out: list[np.ndarray | str] = []
        for start in range(0, len(wavs), self.batch_size):
            chunk = list(wavs[start:start + self.batch_size])
            feats = fe(chunk, sampling_rate=16000, padding=True, return_attention_mask=True,
                             return_tensors="pt")
            feats = {k: v.to(self.device) for k, v in feats.items()}
            feats["input_values"] = feats["input_values"].to(model.dtype)
            with torch.inference_mode():
                emb = model(**feats).embeddings
            out += [e.float().cpu().numpy().astype(np.float64) for e in emb]
        return out


def hf_dir_problems(model_dir: Path | None, name: str, env: str, *, model_type: str,
                    extra: Sequence[str] = ()) -> tuple[bool, str]:
    """Check a local Hugging Face model folder without loading it: (True, 'ok') or (False, why)."""
    if model_dir is None:
        return False, f"no model directory configured (set quality.model_paths.{name} in the plan or ${env})"
    if not model_dir.is_dir():
        return False, f"model directory {model_dir} does not exist"
    cfg = model_dir / "config.json"
    if not cfg.is_file():
        pth = sorted(p.name for p in model_dir.glob("*.pt*"))
        hint = f" (found {pth[0]}: a raw PyTorch checkpoint, not a transformers folder)" if pth else ""
        return False, f"{model_dir} has no config.json{hint}"
    try:
        conf = json.loads(cfg.read_text())
    except ValueError as exc:
        return False, f"{cfg}: invalid JSON ({exc})"
    if conf.get("model_type") != model_type:
        return False, f"{cfg}: model_type {conf.get('model_type')!r}, expected {model_type!r}"
    if not any((model_dir / w).is_file() for w in ("model.safetensors", "pytorch_model.bin")) and \
            not list(model_dir.glob("model-*.safetensors")):
        return False, f"{model_dir} has no model weights (model.safetensors or pytorch_model.bin)"
    for e in extra:
        if not (model_dir / e).is_file():
            return False, f"{model_dir} has no {e}"
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        return False, extra_hint("quality", exc)
    return True, "ok"


class SeedTtsSimScorer(SimScorer):
    """`seedtts-sim`: seed-tts-eval's SIM, UniSpeech's WavLM-large + ECAPA-TDNN verification model,
    from a folder holding `wavlm_large.pt` and `wavlm_large_finetune.pth` exactly as published
    (stats.quality.sv_checkpoint). Inputs reach 16 kHz through the reference scripts' sinc
    resampler; clips are batched by length with per-clip masks (stats.quality.wavlm / ecapa);
    fp32 unless the plan asks for tf32 or float16 (quality.dtypes; stats.quality.precision), which
    then shows in scorer_version and model_hash. docs/quality.md ("seedtts-sim") has the details and what was verified."""
    name = "seedtts-sim"
    scorer_id = "seedtts-sim"
    label = "SIM x100 (seed-tts-eval WavLM-large ECAPA-TDNN)"
    default_batch = 16
    dtypes = DTYPES
    resampler = "sinc"
    prefetches = True

    def __init__(self, model_dir: Path | None = None, **kw):
        super().__init__(model_dir, **kw)
        self._ssl: WavLM | None = None
        self._head: EcapaHead | None = None
        self._source = "?"
        self.last_batches: list[int] = []

    def model_files(self) -> list[Path]:
        from stats.quality.sv_checkpoint import SSL_FILE, SV_FILE
        return [self.model_dir / SSL_FILE, self.model_dir / SV_FILE] if self.model_dir else []

    @property
    def version(self) -> str:
        import torch
        short = self.model_hash[:12] if self.model_dir and all(p.is_file() for p in self.model_files()) else "?"
        return f"seedtts-sim/1 wavlm_large.pt+wavlm_large_finetune.pth {short} {self.dtype} torch {torch.__version__}"

    def available(self) -> tuple[bool, str]:
        from stats.quality.sv_checkpoint import SSL_FILE, SV_FILE, folder_problem
        d = self.model_dir
        if d is None:
            return False, ("no model directory configured (set quality.model_paths.seedtts-sim in the plan or "
                           f"$CAMPAIGN_SEEDTTS_SIM_DIR to a folder holding {SSL_FILE} and {SV_FILE})")
        if not d.is_dir():
            return False, f"model directory {d} does not exist" if not d.exists() else f"{d} is not a directory"
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            return False, extra_hint("quality", exc)
        problem = folder_problem(d)
        return (False, problem) if problem else (True, "ok")

    def load(self) -> None:
        from stats.quality.ecapa import EcapaHead, HeadConfig
        from stats.quality.sv_checkpoint import read_folder
        from stats.quality.wavlm import WavLM, WavLMConfig

        ck = read_folder(self.folder(), mmap=True)
        ssl = WavLM(WavLMConfig.from_cfg(ck.cfg))
        ssl.load_state_dict(ck.ssl_state, strict=True)
        head = EcapaHead(HeadConfig.from_state(ck.head_state))
        head.load_state_dict(ck.head_state, strict=True)
        self._ssl = ssl.to(self.device).eval()
        self._head = head.to(self.device).eval()
        self._source = ck.ssl_source
        del ck

    def embed(self, wavs: Sequence[np.ndarray]) -> list[np.ndarray | str]:
        return self.embed_clips([(w, SCORER_RATE) for w in wavs])

    def embed_clips(self, clips: Sequence[tuple[np.ndarray, int]]) -> list[np.ndarray | str]:
        """Embeddings of clips at their own rates: per rate, length-sorted batches reach 16 kHz on
        the device (stats.quality.resample.padded_batch) and run with per-clip masks."""
        import torch

        from stats.quality.resample import batches_by_rate, padded_batch
        from stats.quality.wavlm import frame_mask

        self.ensure_loaded()
        out: list[np.ndarray | str] = [""] * len(clips)
        ssl, head = self.loaded(self._ssl), self.loaded(self._head)
        need = ssl.cfg.min_samples
        n16, short, batches = batches_by_rate(clips, SCORER_RATE, self.batch_size, need)
        for i in short:
            out[i] = f"clip too short for WavLM: {n16[i]} samples at 16 kHz, needs {need}"
        self.last_batches = [len(idx) for idx in batches]
        for idx in batches:
            wave, lengths, host = padded_batch([clips[i] for i in idx], SCORER_RATE, self.device)
            with torch.inference_mode(), precision(self.dtype, self.device):
                states, frames = ssl(wave, lengths, host)
                emb = head(states, frame_mask(frames, states[0].shape[1]))
            for i, e in zip(idx, emb.float().cpu().numpy()):
                out[i] = e.astype(np.float64)
        return out

    def _embed_files(self, paths: Sequence[Path]) -> tuple[list[Any], dict[int, np.ndarray | str]]:
        loaded, good = load_each_native(paths)
        return loaded, dict(zip(good, self.embed_clips(list(good.values())))) if good else {}

    @property
    def reads_as(self) -> str:
        return NATIVE  # read at the file's own rate, resampled on the device

    def describe(self) -> dict:
        return super().describe() | {"ssl_weights": self._source, "resampler": self.resampler}

    def close(self) -> None:
        self._ssl = None
        self._head = None
        self._loaded = False
        if str(self.device).startswith("cuda"):
            import torch
            torch.cuda.empty_cache()
