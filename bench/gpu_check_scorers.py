"""CPU vs CUDA agreement of the protocol scorers' own implementations (seedtts-sim, utmos22):
the same random weights (tiny, or full-size without --quick) and clips on CPU fp32 and on the
device (fp32, tf32 and fp16), printing the max abs difference of embeddings, SIM x100
and MOS, and the one-at-a-time vs batched difference on the device.

    python bench/gpu_check_scorers.py --device cuda
    python bench/gpu_check_scorers.py --device cpu --quick     # runs here; compares CPU with itself
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import scorer_models  # noqa: E402
from bench_scorers import clips  # noqa: E402
from stats.quality.sim import cosine100  # noqa: E402


def sims(embs: list[np.ndarray]) -> np.ndarray:
    return np.array([cosine100(embs[0], e) for e in embs[1:]])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="tiny models")
    ap.add_argument("--n", type=int, default=12)
    args = ap.parse_args()
    wavs = clips(args.n, 3)
    size = "tiny" if args.quick else "full-size"
    cpu = scorer_models.seedtts_sim("cpu", args.quick, 8)
    ref = cpu.embed(wavs)
    for dtype in ("float32", "tf32", "float16") if args.device.startswith("cuda") else ("float32",):
        dev = scorer_models.seedtts_sim(args.device, args.quick, 8, dtype=dtype)
        got = dev.embed(wavs)
        single = [dev.embed([w])[0] for w in wavs]
        emb = max(float(np.abs(a - b).max()) for a, b in zip(ref, got))
        sim = float(np.abs(sims(ref) - sims(got)).max())
        bs = float(np.abs(sims(single) - sims(got)).max())
        print(f"seedtts-sim {size} {args.device} {dtype} vs cpu float32: max |emb diff| {emb:.3g}, "
              f"max |SIM x100 diff| {sim:.3g}; on {args.device}: batched vs one-at-a-time max |SIM diff| {bs:.3g}")
        dev.close()
    cpu.close()
    cpu = scorer_models.utmos22("cpu", args.quick, 8)
    a = np.array(cpu.score_waves(wavs))
    for dtype in ("float32", "tf32", "float16") if args.device.startswith("cuda") else ("float32",):
        dev = scorer_models.utmos22(args.device, args.quick, 8, dtype=dtype)
        b = np.array(dev.score_waves(wavs))
        single = np.array([dev.score_waves([w])[0] for w in wavs])
        print(f"utmos22 {size} {args.device} {dtype} vs cpu float32: max |MOS diff| {np.abs(a - b).max():.3g}; "
              f"on {args.device}: batched vs one-at-a-time {np.abs(single - b).max():.3g}")
        dev.close()
    resample_check(args.device)
    return 0


def resample_check(device: str) -> None:
    """The scorers' device-side resampling (padded_batch, one call per batch) against each clip
    resampled alone on the CPU (resample_sinc), for the rates engines write."""
    from stats.quality.resample import padded_batch, resample_sinc

    rng = np.random.default_rng(9)
    for rate in (24000, 22050, 44100, 48000):
        waves = [(0.3 * rng.standard_normal(int(rate * s))).astype(np.float32) for s in (1.1, 3.7, 4.0, 5.3)]
        x, n, _ = padded_batch([(w, rate) for w in waves], 16000, device)
        worst = max(float(np.abs(x[j, : int(n[j])].cpu().numpy() - resample_sinc(w, rate, 16000)).max())
                    for j, w in enumerate(waves))
        print(f"resample {rate} -> 16000 Hz on {device}, batch of {len(waves)} vs each alone on cpu: max |diff| {worst:.3g}")


if __name__ == "__main__":
    sys.exit(main())
