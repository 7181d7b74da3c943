"""Loading seed-tts-eval's speaker-verification model from the two published files.

A folder holds `wavlm_large.pt` (s3prl-converted WavLM: `{'cfg': dict, 'model': state dict}` in
the unilm key layout) and `wavlm_large_finetune.pth` (UniSpeech: `{'model': state dict}` of the
whole ECAPA_TDNN_SMALL, the SSL model under `feature_extract.model.`). UniSpeech builds WavLM
from the first file and then loads the second over it; the same happens here, with stricter
checks (docs/quality.md, "seedtts-sim"):

* `wavlm_large.pt` must describe exactly the WavLM its cfg builds (every key, every shape);
* the fine-tuned file's `feature_extract.model.*` tensors replace the SSL weights, all of them or
  none (then the SSL weights stay, as UniSpeech's strict=False load leaves them); a partial set,
  an unknown key under `feature_extract.model.` or a shape that differs is refused;
* the head must hold every ECAPA-TDNN tensor, with one layer weight per hidden state.

Every failure is a `CheckpointError` whose text becomes "unavailable: <why>". `inspect_folder`
reads key names and shapes through mmap (no tensor data), so availability is cheap to ask.
"""

from __future__ import annotations

import argparse
import os
import pickle
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from data.errors import first_line, one_line

SSL_FILE = "wavlm_large.pt"
SV_FILE = "wavlm_large_finetune.pth"
SSL_PREFIX = "feature_extract.model."
TRUST_ENV = "CAMPAIGN_TRUST_CHECKPOINTS"


class CheckpointError(Exception):
    """The folder cannot give the verification model; the text says why (one line)."""


@dataclass
class SvCheckpoint:
    cfg: dict
    ssl_state: dict            # WavLM state dict (fine-tuned tensors already applied)
    head_state: dict           # ECAPA head state dict
    ssl_source: str            # 'finetuned' | 'pretrained'
    ignored: list[str] = field(default_factory=list)  # keys UniSpeech would also ignore


def file_problem(path: Path) -> str | None:
    """Why `path` is not a readable PyTorch checkpoint (None if it looks like one), without loading."""
    if not path.is_file():
        return f"{path} is missing"
    size = path.stat().st_size
    if size == 0:
        return f"{path} is empty (0 bytes)"
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
        except (OSError, zipfile.BadZipFile) as exc:
            return f"{path}: unreadable zip ({exc})"
        if not any(n.endswith("data.pkl") for n in names):
            return f"{path} is a zip file but not a torch.save checkpoint (no data.pkl)"
        return None
    with open(path, "rb") as f:
        head = f.read(2)
    if head[:1] == b"\x80":  # legacy (pre-1.6) torch.save: a pickle stream
        return None
    return f"{path} is not a PyTorch checkpoint (truncated, or another file type; {size} bytes)"


def _trusted() -> bool:
    return os.environ.get(TRUST_ENV, "") == "1"


def load_checkpoint(path: Path, *, mmap: bool = True) -> Any:
    """torch.load with weights_only (argparse.Namespace allowed: UniSpeech-era files carry one);
    full unpickling only when $CAMPAIGN_TRUST_CHECKPOINTS=1."""
    import torch

    problem = file_problem(path)
    if problem:
        raise CheckpointError(problem)
    use_mmap = mmap and zipfile.is_zipfile(path)
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            return torch.load(str(path), map_location="cpu", weights_only=True, mmap=use_mmap)
    except pickle.UnpicklingError as exc:
        if not _trusted():
            why = first_line(exc, 160, default="non-tensor objects")
            raise CheckpointError(f"{path} holds Python objects that weights_only loading refuses ({why}); "
                                  f"set {TRUST_ENV}=1 to unpickle it fully if you trust the file") from None
    except Exception as exc:  # truncated archive, bad pickle...
        raise CheckpointError(f"{path}: cannot be loaded ({one_line(exc, 200)})") from None
    try:
        return torch.load(str(path), map_location="cpu", weights_only=False, mmap=use_mmap)
    except Exception as exc:
        raise CheckpointError(f"{path}: cannot be loaded ({one_line(exc, 200)})") from None


def _state(obj: Any, path: Path, what: str) -> dict:
    import torch

    if not isinstance(obj, Mapping) or "model" not in obj:
        keys = ", ".join(sorted(map(str, obj))[:5]) if isinstance(obj, Mapping) else type(obj).__name__
        raise CheckpointError(f"{path}: expected a dict with 'model' ({what}), found {keys}")
    sd = obj["model"]
    if not isinstance(sd, Mapping) or not sd or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise CheckpointError(f"{path}: 'model' is not a state dict of tensors")
    return dict(sd)


def _compare(expected: Mapping[str, Any], got: Mapping[str, Any], path: Path, what: str) -> None:
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    if missing:
        raise CheckpointError(f"{path}: {what} lacks {len(missing)} tensor(s), e.g. {missing[0]} "
                              f"(another architecture, or a partial checkpoint)")
    if extra:
        raise CheckpointError(f"{path}: {what} has {len(extra)} unexpected tensor(s), e.g. {extra[0]} "
                              f"(another architecture?)")
    for k, v in expected.items():
        if tuple(got[k].shape) != tuple(v.shape):
            raise CheckpointError(f"{path}: {k} has shape {tuple(got[k].shape)}, the cfg gives {tuple(v.shape)}")


def read_folder(folder: Path, *, mmap: bool = True) -> SvCheckpoint:
    """Both files, checked against each other and against the modules their cfg and shapes build."""
    import torch

    from stats.quality.ecapa import EcapaHead, HeadConfig, HeadShapeError
    from stats.quality.wavlm import WavLM, WavLMConfig, WavLMConfigError, remap_weight_norm_keys

    ssl_path, sv_path = folder / SSL_FILE, folder / SV_FILE
    for p in (ssl_path, sv_path):
        problem = file_problem(p)
        if problem:
            raise CheckpointError(problem)
    ssl_obj = load_checkpoint(ssl_path, mmap=mmap)
    if not isinstance(ssl_obj, Mapping) or not isinstance(ssl_obj.get("cfg"), Mapping):
        raise CheckpointError(f"{ssl_path}: expected {{'cfg': dict, 'model': state dict}} (the s3prl-converted "
                              f"WavLM checkpoint); no cfg dict found")
    cfg = dict(ssl_obj["cfg"])
    ssl_sd = remap_weight_norm_keys(_state(ssl_obj, ssl_path, "the WavLM weights"))
    try:
        wcfg = WavLMConfig.from_cfg(cfg)
    except WavLMConfigError as exc:
        raise CheckpointError(f"{ssl_path}: {exc}") from None
    with torch.device("meta"):
        ref = WavLM(wcfg).state_dict()
    _compare(ref, ssl_sd, ssl_path, "the WavLM state dict")

    sv_sd = remap_weight_norm_keys(_state(load_checkpoint(sv_path, mmap=mmap), sv_path, "the verification model"))
    over = {k[len(SSL_PREFIX):]: v for k, v in sv_sd.items() if k.startswith(SSL_PREFIX)}
    ignored = sorted(k for k in sv_sd if k.startswith("feature_extract.") and not k.startswith(SSL_PREFIX))
    head = {k: v for k, v in sv_sd.items() if not k.startswith("feature_extract.")}
    source = "pretrained"
    if over:
        _compare(ref, over, sv_path, f"the fine-tuned WavLM ({SSL_PREFIX}*)")
        ssl_sd = over
        source = "finetuned"
    try:
        hcfg = HeadConfig.from_state(head)
    except HeadShapeError as exc:
        raise CheckpointError(f"{sv_path}: not an ECAPA-TDNN small head: {exc}") from None
    if hcfg.n_states != wcfg.layers + 1:
        raise CheckpointError(f"{sv_path}: feature_weight has {hcfg.n_states} layer weights, the WavLM in "
                              f"{SSL_FILE} gives {wcfg.layers + 1} hidden states")
    if hcfg.feat_dim != wcfg.embed_dim:
        raise CheckpointError(f"{sv_path}: the head takes {hcfg.feat_dim}-dim features, the WavLM gives "
                              f"{wcfg.embed_dim}")
    with torch.device("meta"):
        href = EcapaHead(hcfg).state_dict()
    _compare(href, head, sv_path, "the ECAPA-TDNN head")
    return SvCheckpoint(cfg, ssl_sd, head, source, ignored)


_INSPECTED: dict[tuple, str | None] = {}


def folder_problem(folder: Path) -> str | None:
    """Why the folder cannot be loaded (None if it can), from key names and shapes only; cached
    by (path, size, mtime) of both files."""
    try:
        key = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in (folder / SSL_FILE, folder / SV_FILE))
    except OSError:
        key = None
    if key is not None and key in _INSPECTED:
        return _INSPECTED[key]
    try:
        read_folder(folder, mmap=True)
        problem = None
    except CheckpointError as exc:
        problem = str(exc)
    if key is not None:
        _INSPECTED[key] = problem
    return problem
