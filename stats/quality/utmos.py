"""`utmos22`: UTMOS22 strong (UTokyo-SaruLab, VoiceMOS 2022) from a local folder.

Preferred: the SpeechMOS release state dict `utmos22_strong_step7459_v1.pt`, run by the
console's own implementation (stats.quality.utmos_model): inputs reach 16 kHz through the same
windowed-sinc resampler SpeechMOS applies, clips of any lengths share a batch (per-clip masks,
packed BLSTM), fp32. The TorchScript export below stays as an alternative for folders without
the state dict.

TorchScript path: UTMOS22 strong needs its model code (a fairseq-style wav2vec 2.0 front end, BLSTM and head) to
load the published state dict; that code is not shipped with the console and fetching it at run
time is forbidden. So the scorer loads a *TorchScript export* instead: a self-contained program
plus weights, made once on a machine with network from tarepan/SpeechMOS's `utmos22_strong`
(`predictor(wave[B, T], sr) -> MOS[B]`) with `export_torchscript` below (docs/utmos22.md has the
recipe). The folder (quality.model_paths.utmos22 or $CAMPAIGN_UTMOS_DIR) must hold
`utmos22_strong.torchscript.pt`; a folder with only a raw `.ckpt`/`.pt` is "unavailable".

Scoring: every output is read with the project's loader (mono, soxr HQ to 16 kHz, float32 in
[-1, 1]) and scored in fp32. UTMOS averages frame scores over the whole clip (and its first conv
layer normalises over time), so zero padding would change a clip's score: clips are never padded;
only clips of exactly equal length share a forward call, everything else runs one per call.
"""

from __future__ import annotations

import hashlib
import json
import math
import warnings
import zipfile
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from data.errors import CampaignError, one_line
from data.extras import extra_hint
from data.hashing import sha256_file
from stats.quality.audio import NATIVE, SCORER_RATE, load_each, load_each_native
from stats.quality.base import ScoreItem, ScoreResult, Scorer
from stats.quality.precision import DTYPES, precision

if TYPE_CHECKING:
    import torch

    from stats.quality.utmos_model import Utmos22Strong

# the SpeechMOS release state dict (docs/utmos22.md); here, not in utmos_model, which imports torch
STATE_FILE = "utmos22_strong_step7459_v1.pt"

EXPORT_NAME = "utmos22_strong.torchscript.pt"   # the one file name the scorer loads
META_NAME = "utmos22_export.json"                # export metadata stored inside the archive
META_FORMAT = "omni-campaign-utmos22/1"
RAW_SUFFIXES = (".ckpt", ".pt", ".pth")
RECIPE = "export it to TorchScript with docs/utmos22.md"


@contextmanager
def _quiet_jit():
    """torch 2.x marks torch.jit deprecated; it still loads and runs exports, and the warning
    would only bury the progress bar."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def equal_length_groups(lengths: Sequence[int], max_batch: int) -> list[list[int]]:
    """Indexes grouped by exactly equal length (first-seen order), each group cut to max_batch.

    Only equal lengths may share a forward call: padding would change a UTMOS score."""
    groups: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        groups.setdefault(int(n), []).append(i)
    step = max(1, int(max_batch))
    return [idx[s:s + step] for idx in groups.values() for s in range(0, len(idx), step)]


def state_sha256(module: Any) -> str:
    """SHA-256 over the module's state dict (sorted names, dtypes, shapes and bytes): identifies
    the weights independently of where torch.hub cached the downloaded checkpoint."""
    import torch

    h = hashlib.sha256()
    for name, t in sorted(module.state_dict().items()):
        arr = t.detach().cpu().contiguous()
        h.update(f"{name}\0{arr.dtype}\0{tuple(arr.shape)}\n".encode())
        if arr.numel():
            h.update(arr.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def torchscript_problem(path: Path) -> str | None:
    """Why `path` is not a TorchScript archive (None if it looks like one), without loading it.

    torch.jit.save writes a zip holding `<name>/code/...`; torch.save writes a zip without code."""
    try:
        if not zipfile.is_zipfile(path):
            return f"{path} is not a TorchScript archive (not a zip file)"
        with zipfile.ZipFile(path) as z:
            names = z.namelist()
    except OSError as exc:
        return f"{path}: unreadable ({one_line(exc)})"
    if not any("/code/" in n for n in names):
        return f"{path} is a plain PyTorch checkpoint (torch.save), not a TorchScript export"
    return None


def read_export_meta(path: Path) -> dict:
    """The export metadata stored in the archive ({} when absent), read without loading torch."""
    try:
        with zipfile.ZipFile(path) as z:
            name = next((n for n in z.namelist() if n.endswith(f"/extra/{META_NAME}")), None)
            return json.loads(z.read(name)) if name else {}
    except (OSError, ValueError, zipfile.BadZipFile):
        return {}


def script_error(exc: BaseException) -> str:
    """One line for a model failure; TorchScript puts the real cause on the message's last line."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    if len(lines) > 1 and lines[0].startswith("The following operation failed"):
        return lines[-1]
    return one_line(exc)


class _Fixed16k:
    """Builds the exported wrapper: forward(wave[B, T]) -> MOS[B], the rate fixed to 16 kHz."""

    @staticmethod
    def build(predictor: Any):
        import torch

        class Utmos22At16k(torch.nn.Module):
            def __init__(self, inner: torch.nn.Module):
                super().__init__()
                self.inner = inner

            def forward(self, wave: torch.Tensor) -> torch.Tensor:
                return self.inner(wave, 16000)

        return Utmos22At16k(predictor).eval()


def _check_waves(seconds: Sequence[float]) -> list[np.ndarray]:
    """Deterministic speech-like test signals (harmonics with vibrato plus a little noise)."""
    rng = np.random.default_rng(20220401)
    out = []
    for s in seconds:
        t = np.arange(int(s * SCORER_RATE)) / SCORER_RATE
        f0 = 140.0 + 20.0 * np.sin(2 * np.pi * 3.0 * t)
        phase = 2 * np.pi * np.cumsum(f0) / SCORER_RATE
        w = sum(np.sin(k * phase) / k for k in range(1, 6)) * (0.5 + 0.5 * np.sin(2 * np.pi * 1.7 * t) ** 2)
        out.append((0.25 * w + 0.01 * rng.standard_normal(len(t))).astype(np.float32))
    return out


def export_torchscript(predictor: Any, out_dir: Path, *, source: str, method: str = "auto",
                       check_seconds: Sequence[float] = (1.3, 3.7, 3.72, 8.2), tolerance: float = 1e-4) -> Path:
    """Export a `predictor(wave, sr) -> MOS[B]` (SpeechMOS utmos22_strong) to
    `<out_dir>/utmos22_strong.torchscript.pt` with the rate fixed to 16 kHz.

    Tries torch.jit.script, falls back to torch.jit.trace, then checks the export against the
    eager predictor on clips of several lengths (and one equal-length batch of two) and refuses
    to write it if any score differs by more than `tolerance`. 3.7 s and 3.72 s differ by 320
    samples, i.e. exactly one wav2vec 2.0 frame, so both frame-count parities are compared:
    SpeechMOS pads the frame sequence to an even length in a Python branch that a trace freezes. Metadata (source, weight hash,
    method, torch version, max difference) is stored inside the archive as utmos22_export.json."""
    import torch

    predictor = predictor.eval()
    wrapper = _Fixed16k.build(predictor)
    waves = [torch.from_numpy(w)[None] for w in _check_waves(check_seconds)]
    exported, used = None, method
    if method in ("auto", "script"):
        try:
            with _quiet_jit():
                exported, used = torch.jit.script(wrapper), "script"
        except Exception as exc:  # fairseq-style code often is not scriptable; trace instead
            if method == "script":
                raise
            print(f"torch.jit.script failed ({one_line(exc)}); tracing instead")
    if exported is None:
        with torch.no_grad(), _quiet_jit():
            exported, used = torch.jit.trace(wrapper, (waves[len(waves) // 2],), check_trace=False), "trace"
    worst = 0.0
    with torch.no_grad():
        cases = waves + [torch.cat([waves[0], 0.5 * waves[0]], dim=0)]
        for w in cases:
            want = predictor(w, 16000).reshape(-1)
            got = exported(w).reshape(-1)
            if got.shape != want.shape:
                raise RuntimeError(f"export returns shape {tuple(got.shape)} for input {tuple(w.shape)}, eager {tuple(want.shape)}")
            worst = max(worst, float((got - want).abs().max()))
    if not math.isfinite(worst) or worst > tolerance:
        raise RuntimeError(f"TorchScript export ({used}) differs from the eager model by {worst:.3g} (> {tolerance}); not saved")
    meta = {"format": META_FORMAT, "source": source, "state_sha256": state_sha256(predictor),
            "sample_rate": SCORER_RATE, "method": used, "torch": torch.__version__,
            "max_abs_diff_vs_eager": worst, "check_seconds": list(check_seconds),
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds")}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out_dir / (EXPORT_NAME + ".tmp")
    with _quiet_jit():
        torch.jit.save(exported, str(tmp), _extra_files={META_NAME: json.dumps(meta, indent=1)})
    final = out_dir / EXPORT_NAME
    tmp.replace(final)
    return final


class Utmos22Scorer(Scorer):
    name = "utmos22"
    scorer_id = "utmos22"
    metric = "mos"
    label = "UTMOS22 strong"
    default_batch = 16
    dtypes = DTYPES  # stats.quality.precision
    prefetches = True

    def __init__(self, model_dir: Path | None = None, **kw):
        super().__init__(model_dir, **kw)
        self._module: torch.jit.ScriptModule | None = None
        self._takes_sr = False
        self._file_sha: str | None = None
        self._meta: dict | None = None
        self._native: Utmos22Strong | None = None  # when loaded from the release state dict
        self.last_calls: list[int] = []  # batch size of each forward call of the last score_waves()

    @property
    def state_path(self) -> Path | None:
        return self.model_dir / STATE_FILE if self.model_dir else None

    @property
    def mode(self) -> str:
        """'state' (release state dict, own implementation) or 'torchscript'."""
        p = self.state_path
        return "state" if p is not None and p.exists() else "torchscript"

    @property
    def resampler(self) -> str:
        return "sinc" if self.mode == "state" else "soxr"

    @property
    def export_path(self) -> Path | None:
        return self.model_dir / EXPORT_NAME if self.model_dir else None

    @property
    def meta(self) -> dict:
        """Export metadata (source, weight hash, method...) from the archive; {} if none."""
        if self._meta is None:
            p = self.export_path
            self._meta = read_export_meta(p) if p is not None and p.is_file() else {}
        return self._meta

    @property
    def version(self) -> str:
        """Model file name and SHA-256 prefix (what `sha256sum` prints), plus its source if known."""
        if self.mode == "state":
            import torch
            if self._file_sha is None:
                self._file_sha = sha256_file(self.folder() / STATE_FILE)
            return f"{STATE_FILE} sha256:{self._file_sha[:12]} omni utmos22-strong/1 {self.dtype} torch {torch.__version__}"
        p = self.export_path
        if p is None or not p.is_file():
            return f"{EXPORT_NAME} (missing)"
        if self._file_sha is None:
            self._file_sha = sha256_file(p)
        src = f" {self.meta['source']}" if self.meta.get("source") else ""
        dtype = "" if self.dtype == self.dtypes[0] else f" {self.dtype}"
        return f"{EXPORT_NAME} sha256:{self._file_sha[:12]}{src}{dtype}"

    def model_files(self) -> list[Path]:
        p = self.state_path if self.mode == "state" else self.export_path
        return [p] if p is not None and p.is_file() else []

    def _state_problem(self) -> str | None:
        """Why the release state dict cannot be loaded (names and shapes only, mmap; cached)."""
        from stats.quality.sv_checkpoint import CheckpointError, load_checkpoint
        from stats.quality.utmos_model import UtmosShapeError, Utmos22Strong, check_state
        p = self.folder() / STATE_FILE
        st = p.stat()
        key = (str(p), st.st_size, st.st_mtime_ns)
        if key not in _STATE_PROBLEMS:
            try:
                import torch
                sd = _state_dict(load_checkpoint(p), p)
                with torch.device("meta"):
                    ref = Utmos22Strong.from_state(_remap(sd)).state_dict()
                check_state(ref, _remap(sd))
                _STATE_PROBLEMS[key] = None
            except (CheckpointError, UtmosShapeError) as exc:
                msg = str(exc)
                _STATE_PROBLEMS[key] = msg if msg.startswith(str(p)) else f"{p}: not the UTMOS22 strong state dict: {msg}"
        return _STATE_PROBLEMS[key]

    def available(self) -> tuple[bool, str]:
        d = self.model_dir
        if d is None:
            return False, ("no UTMOS22 model directory configured (set quality.model_paths.utmos22 in the plan "
                           f"or $CAMPAIGN_UTMOS_DIR to a folder holding {EXPORT_NAME})")
        if d.is_file():
            return False, f"{d} is a file; point the path at the folder holding {EXPORT_NAME}"
        if not d.is_dir():
            return False, f"model directory {d} does not exist"
        if self.mode == "state":
            try:
                import torch  # noqa: F401
            except ImportError as exc:
                return False, extra_hint("quality", exc)
            problem = self._state_problem()
            return (False, problem) if problem else (True, "ok")
        p = d / EXPORT_NAME
        if not p.is_file():
            raw = sorted(f.name for f in d.iterdir() if f.is_file() and f.suffix in RAW_SUFFIXES)
            if raw:
                return False, (f"{d} holds {raw[0]} but neither {STATE_FILE} (the SpeechMOS release state dict) "
                               f"nor {EXPORT_NAME}; rename the release file to {STATE_FILE} if it is that one, "
                               f"or {RECIPE}")
            return False, f"{d} has neither {STATE_FILE} nor {EXPORT_NAME}; see docs/utmos22.md"
        problem = torchscript_problem(p)
        if problem:
            return False, f"{problem}; {RECIPE}"
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            return False, extra_hint("quality", exc)
        return True, "ok"

    def load(self) -> None:
        import torch

        if self.mode == "state":
            from stats.quality.sv_checkpoint import load_checkpoint
            from stats.quality.utmos_model import load_state
            state_file = self.folder() / STATE_FILE
            sd = _state_dict(load_checkpoint(state_file), state_file)
            self._native = load_state(sd).to(self.device).eval()
            return
        p = self.export_path
        try:
            with _quiet_jit():
                module = torch.jit.load(str(p), map_location=self.device)
        except Exception as exc:
            raise CampaignError(f"utmos22: cannot load {p}: {script_error(exc)}; {RECIPE}") from None
        rate = self.meta.get("sample_rate", SCORER_RATE)
        if rate != SCORER_RATE:
            raise CampaignError(f"utmos22: {p} was exported for {rate} Hz, the scorer feeds {SCORER_RATE} Hz; {RECIPE}")
        # forward(wave) for our export (rate fixed), or forward(wave, sr) for a scripted SpeechMOS predictor
        n_args = len(module.forward.schema.arguments) - 1
        if n_args not in (1, 2):
            raise CampaignError(f"utmos22: {p}: forward takes {n_args} arguments, expected (wave) or (wave, sr)")
        self._takes_sr = n_args == 2
        self._module = module.eval()

    def _forward(self, batch: np.ndarray) -> np.ndarray:
        import torch

        wave = torch.from_numpy(np.ascontiguousarray(batch, dtype=np.float32)).to(self.device)
        module = self.loaded(self._module)
        with torch.inference_mode(), precision(self.dtype, self.device):
            out = module(wave, SCORER_RATE) if self._takes_sr else module(wave)
        return out.detach().float().reshape(-1).cpu().numpy()

    def _native_scores(self, wavs: Sequence[np.ndarray]) -> list[float | str]:
        """Release-state-dict path over 16 kHz waveforms."""
        return self._launch_clips([(w, SCORER_RATE) for w in wavs])()

    def _launch_clips(self, clips: Sequence[tuple[np.ndarray, int]]) -> Callable[[], list[float | str]]:
        """Release-state-dict path over clips at their own rates: per rate, longest-first
        zero-padded batches go to the device, reach 16 kHz there through the protocol's sinc
        resampler (stats.quality.resample.padded_batch: each clip's samples are those of its own
        resample_sinc), and run with per-clip lengths. At most two batches are in flight: each
        batch's scores are copied back once the next one is queued, and the last one's when the
        returned function is called."""
        import torch

        from stats.quality.resample import batches_by_rate, padded_batch

        out: list[float | str] = [""] * len(clips)
        native = self.loaded(self._native)
        need = native.min_samples
        # longest first: the BLSTM packs a sorted batch without a device round trip
        n16, short, batches = batches_by_rate(clips, SCORER_RATE, self.batch_size, need, longest_first=True)
        for i in short:
            out[i] = f"utmos22: clip too short: {n16[i]} samples at 16 kHz, needs {need}"
        # (indexes, scores on the device, the clips: alive until their copies to the device are done)
        queued: list[tuple[list[int], torch.Tensor, object]] = []

        def collect(idx: list[int], vals: torch.Tensor, _sources: object) -> None:
            for i, v in zip(idx, vals.cpu().numpy()):
                out[i] = float(v) if math.isfinite(float(v)) else f"utmos22 gave a non-finite score ({v})"

        for idx in batches:
            self.last_calls.append(len(idx))
            sources = [clips[i] for i in idx]
            x, lengths, host = padded_batch(sources, SCORER_RATE, self.device)
            with torch.inference_mode(), precision(self.dtype, self.device):
                queued.append((idx, native(x, lengths, host).float(), sources))
            if len(queued) > 1:
                collect(*queued.pop(0))

        def finish() -> list[float | str]:
            while queued:
                collect(*queued.pop(0))
            return out
        return finish

    def score_waves(self, wavs: Sequence[np.ndarray]) -> list[float | str]:
        """MOS per 16 kHz mono waveform, or an error string for a clip the model rejects."""
        self.ensure_loaded()
        self.last_calls = []
        if self._native is not None:
            return self._native_scores(wavs)
        out: list[float | str] = [""] * len(wavs)
        for idx in equal_length_groups([len(w) for w in wavs], self.batch_size):
            self.last_calls.append(len(idx))
            try:
                vals = self._forward(np.stack([wavs[i] for i in idx]))
                if vals.shape != (len(idx),):
                    raise ValueError(f"model returned {vals.shape[0]} scores for {len(idx)} clips")
            except Exception as exc:  # e.g. a clip shorter than the first conv window
                for i in idx:
                    out[i] = f"utmos22 failed: {script_error(exc)}"
                continue
            for i, v in zip(idx, vals):
                out[i] = float(v) if math.isfinite(float(v)) else f"utmos22 gave a non-finite score ({v})"
        return out

    @property
    def reads_as(self) -> str:
        """The release-state-dict path reads files at their own rate and resamples on the device."""
        return NATIVE if self.mode == "state" else self.resampler

    def score_batch(self, items: Sequence[ScoreItem]) -> list[ScoreResult]:
        return self.submit_batch(items)()

    def submit_batch(self, items: Sequence[ScoreItem]) -> Callable[[], list[ScoreResult]]:
        """The release-state-dict path queues the batch on the device and returns; the export runs now."""
        self.ensure_loaded()
        paths = [it.audio_path for it in items]
        loaded: Sequence[object]
        if self._native is not None:
            loaded, clips = load_each_native(paths)
            self.last_calls = []
            finish = self._launch_clips(list(clips.values())) if clips else (lambda: [])
            keys = list(clips)
        else:
            loaded, good = load_each(paths, resampler=self.resampler)
            values = self.score_waves(list(good.values())) if good else []
            finish, keys = (lambda: values), list(good)

        def results() -> list[ScoreResult]:
            scores = dict(zip(keys, finish()))
            out = []
            for i, w in enumerate(loaded):
                v = w if isinstance(w, str) else scores[i]
                out.append(ScoreResult.failed(v) if isinstance(v, str) else ScoreResult("ok", value=v))
            return out
        return results

    def describe(self) -> dict:
        if self.mode == "state":
            return super().describe() | {"state_dict": str(self.state_path), "resampler": self.resampler,
                                         "batching": "any lengths, per-clip masks"}
        return super().describe() | {"export": str(self.export_path), "source": self.meta.get("source"),
                                     "batching": "equal-length clips only, never padded"}

    def close(self) -> None:
        self._native = None
        self._module = None
        self._loaded = False


_STATE_PROBLEMS: dict[tuple, str | None] = {}


def _remap(sd):
    from stats.quality.wavlm import remap_weight_norm_keys
    return remap_weight_norm_keys(sd)


def _state_dict(obj: Any, path: Path) -> dict:
    """The release file is a bare state dict; accept {'model': ...} / {'state_dict': ...} wrappers too."""
    import torch

    from stats.quality.sv_checkpoint import CheckpointError
    if isinstance(obj, dict) and not any(isinstance(v, torch.Tensor) for v in obj.values()):
        for k in ("state_dict", "model"):
            if isinstance(obj.get(k), dict):
                obj = obj[k]
                break
    if not isinstance(obj, dict) or not obj or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(f"{path}: not a state dict of tensors")
    return dict(obj)

