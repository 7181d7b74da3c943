"""GPU check for the model-folder quality scorers (run by the lead on an H200).

Builds tiny, randomly initialised Whisper and WavLM x-vector checkpoints in a temp folder (the
same Hugging Face layout as real ones, made offline from transformers configs), then runs the
real `whisper` and `wavlm-ecapa` scorer classes over a handful of sample-workload prompt wavs on
the GPU (falls back to CPU and says so), and prints what ran: device, dtype, batch sizes, timings,
and a CPU-vs-GPU agreement figure. Transcripts are meaningless by construction; the point is
the loading, batching and device path end to end.

    .venv/bin/python bench/gpu_check_quality.py [--n 12] [--batch 4]
    CAMPAIGN_WHISPER_DIR=/models/whisper-large-v3 .venv/bin/python bench/gpu_check_quality.py
      (also times the real checkpoint if the folder exists)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from stats.quality.audio import load_audio  # noqa: E402
from stats.quality.base import ScoreItem  # noqa: E402
from stats.quality.registry import make_scorer  # noqa: E402
from stats.quality.tiny_checkpoints import build_tiny_wavlm, build_tiny_whisper  # noqa: E402

PROMPTS = Path(__file__).resolve().parents[1] / "data" / "sample_workload" / "en" / "prompt-wavs"


def _sync(device: str) -> None:
    import torch
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_whisper(folder: Path, wavs: list[Path], device: str, batch: int) -> list[str]:
    s = make_scorer("whisper", {"whisper": str(folder)}, device=device, batch_size=batch)
    ok, why = s.available()
    print(f"  whisper available: {ok} ({why})")
    t0 = time.perf_counter()
    s.ensure_loaded()
    _sync(device)
    t1 = time.perf_counter()
    items = [ScoreItem("bench", i, p.stem, p, "the quick brown fox", None) for i, p in enumerate(wavs)]
    res = s.score_batch(items)
    _sync(device)
    t2 = time.perf_counter()
    errors = [r.error for r in res if r.status != "ok"]
    print(f"  whisper device={s.device} dtype={s._model.dtype} batches={s.last_batches} "
          f"load={t1 - t0:.2f}s score={t2 - t1:.2f}s ({len(wavs) / (t2 - t1):.1f} clips/s) errors={errors[:2]}")
    print(f"  model_hash={s.model_hash[:16]} version={s.version}")
    return [r.hypothesis for r in res]


def run_wavlm(folder: Path, wavs: list[Path], device: str, batch: int) -> np.ndarray:
    s = make_scorer("wavlm-ecapa", {"wavlm-ecapa": str(folder)}, device=device, batch_size=batch)
    ok, why = s.available()
    print(f"  wavlm available: {ok} ({why})")
    t0 = time.perf_counter()
    s.ensure_loaded()
    _sync(device)
    t1 = time.perf_counter()
    items = [ScoreItem("bench", i, p.stem, p, "", wavs[0]) for i, p in enumerate(wavs)]
    res = s.score_batch(items)
    _sync(device)
    t2 = time.perf_counter()
    sims = np.array([r.value if r.status == "ok" else np.nan for r in res])
    print(f"  wavlm device={s.device} dtype={s._model.dtype} batch={s.batch_size} load={t1 - t0:.2f}s "
          f"score={t2 - t1:.2f}s SIM[self]={sims[0]:.3f} SIM range=({np.nanmin(sims):.2f}, {np.nanmax(sims):.2f})")
    return sims


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=12, help="number of prompt wavs to score")
    ap.add_argument("--batch", type=int, default=4)
    args = ap.parse_args()
    import torch
    gpu = torch.cuda.is_available()
    device = "cuda" if gpu else "cpu"
    print(f"torch {torch.__version__} cuda_available={gpu} "
          f"{torch.cuda.get_device_name(0) if gpu else 'NO GPU: running the GPU path on CPU'}")
    wavs = sorted(PROMPTS.glob("*.wav"))[: args.n]
    if not wavs:
        print(f"no wavs under {PROMPTS}")
        return 1
    lens = [len(load_audio(p)) / 16000 for p in wavs]
    print(f"{len(wavs)} wavs, {sum(lens):.1f} s audio (min {min(lens):.1f} s, max {max(lens):.1f} s)")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        wdir = build_tiny_whisper(Path(tmp) / "whisper-tiny-random")
        vdir = build_tiny_wavlm(Path(tmp) / "wavlm-tiny-random")
        print(f"built tiny checkpoints in {time.perf_counter() - t0:.1f}s: {sorted(os.listdir(wdir))}")
        print(f"[{device}]")
        hyp_dev = run_whisper(wdir, wavs, device, args.batch)
        sims_dev = run_wavlm(vdir, wavs, device, args.batch)
        if gpu:
            print("[cpu reference]")
            hyp_cpu = run_whisper(wdir, wavs, "cpu", args.batch)
            sims_cpu = run_wavlm(vdir, wavs, "cpu", args.batch)
            same = sum(a == b for a, b in zip(hyp_dev, hyp_cpu))
            print(f"GPU(fp16) vs CPU(fp32): {same}/{len(wavs)} identical tiny-whisper transcripts, "
                  f"max |SIM diff| {np.nanmax(np.abs(sims_dev - sims_cpu)):.3f}")
    real = os.environ.get("CAMPAIGN_WHISPER_DIR")
    if real and Path(real).is_dir():
        print(f"[real whisper checkpoint {real} on {device}]")
        run_whisper(Path(real), wavs, device, args.batch * 4)
    return 0


if __name__ == "__main__":
    sys.exit(main())
