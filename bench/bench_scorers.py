"""Throughput of the protocol scorers (whisper, seedtts-sim, utmos22): audio seconds scored per
second at batch sizes 1, 8 and 32, against a plain loop that scores one file at a time the way
seed-tts-eval's scripts do (SIM: both embeddings recomputed per pair), same clips, same run.
Full-size architectures with random weights (timing only; values are meaningless), or tiny ones
with --quick (a CPU smoke run). Ends with an ESTIMATE, from the measured rates, of the reference
campaign's quality phase: 256 prompts x 3 repeats x 3 concurrencies x 2 arms = 4,608 outputs of
about 4 s, all three scorers, one device.

    python bench/bench_scorers.py --device cuda            # on the H200
    python bench/bench_scorers.py --device cpu --quick     # smoke run here
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import scorer_models  # noqa: E402

OUTPUTS, CLIP_S = 4608, 4.0


def clips(n: int, seed: int = 0) -> list[np.ndarray]:
    """Speech-like clips of 3-5 s at 16 kHz (harmonics with vibrato plus noise)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        t = np.arange(int(rng.uniform(3.0, 5.0) * 16000)) / 16000
        f0 = rng.uniform(100, 220) * (1 + 0.05 * np.sin(2 * np.pi * 3 * t))
        ph = 2 * np.pi * np.cumsum(f0) / 16000
        w = sum(np.sin(k * ph) / k for k in range(1, 6)) * (0.5 + 0.5 * np.sin(2 * np.pi * 1.3 * t) ** 2)
        out.append((0.2 * w + 0.01 * rng.standard_normal(len(t))).astype(np.float32))
    return out


def sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch
        torch.cuda.synchronize()


def timed(fn, device: str) -> float:
    sync(device)
    t0 = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t0


def run_one(name: str, make, work, loop, wavs, prompts, device: str, batches) -> dict[str, float]:
    audio_s = sum(len(w) for w in wavs) / 16000
    rates = {}
    s = make(1)
    work(s, wavs[:2], prompts[:2])  # warm-up (kernels, allocator)
    rates["loop"] = audio_s / timed(lambda: loop(s, wavs, prompts), device)
    for b in batches:
        s.batch_size = b
        work(s, wavs[:b], prompts[:b])
        rates[f"batch {b}"] = audio_s / timed(lambda: work(s, wavs, prompts), device)
    s.close()
    print(f"{name:12s} " + "  ".join(f"{k}: {v:8.1f} audio-s/s" for k, v in rates.items())
          + f"  (best batched / loop = {max(v for k, v in rates.items() if k != 'loop') / rates['loop']:.1f}x)",
          flush=True)
    return rates


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="tiny architectures and few clips (CPU smoke run)")
    ap.add_argument("--n", type=int, help="clips per measurement (default 64, --quick 8)")
    ap.add_argument("--only", nargs="*", choices=("whisper", "seedtts-sim", "utmos22"))
    args = ap.parse_args()
    n = args.n or (8 if args.quick else 64)
    batches = (1, 8, 32) if not args.quick else (1, 8)
    wavs, prompts = clips(n, 1), clips(max(1, n // 8), 2)
    prompts = [prompts[i % len(prompts)] for i in range(n)]  # outputs share prompts, as in a campaign
    print(f"device {args.device}, {'tiny' if args.quick else 'full-size'} random-weight models, {n} clips "
          f"({sum(len(w) for w in wavs) / 16000:.0f} audio-s)", flush=True)
    todo = args.only or ["seedtts-sim", "utmos22", "whisper"]
    best: dict[str, float] = {}
    if "seedtts-sim" in todo:
        def sim_work(s, w, p):  # batched outputs, one embedding per distinct prompt
            uniq = {id(x): x for x in p}
            s.embed(list(uniq.values()))
            s.embed(w)

        def sim_loop(s, w, p):  # seed-tts-eval: verification() embeds both files for every pair
            for a, b in zip(w, p):
                s.embed([a])
                s.embed([b])
        r = run_one("seedtts-sim", lambda b: scorer_models.seedtts_sim(args.device, args.quick, b), sim_work, sim_loop,
                    wavs, prompts, args.device, batches)
        best["seedtts-sim"] = max(v for k, v in r.items() if k != "loop")
    if "utmos22" in todo:
        r = run_one("utmos22", lambda b: scorer_models.utmos22(args.device, args.quick, b),
                    lambda s, w, p: s.score_waves(w), lambda s, w, p: [s.score_waves([x]) for x in w],
                    wavs, prompts, args.device, batches)
        best["utmos22"] = max(v for k, v in r.items() if k != "loop")
    if "whisper" in todo:
        r = run_one("whisper", lambda b: scorer_models.whisper(args.device, args.quick, b),
                    lambda s, w, p: s.transcribe(w), lambda s, w, p: [s.transcribe([x]) for x in w],
                    wavs, prompts, args.device, batches)
        best["whisper"] = max(v for k, v in r.items() if k != "loop")
    total_audio = OUTPUTS * CLIP_S
    est = {k: total_audio / v for k, v in best.items()}
    print(f"ESTIMATE (not a measurement): quality phase of {OUTPUTS} outputs x {CLIP_S:.0f} s = {total_audio:.0f} "
          f"audio-s at the best measured rates: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in est.items())
          + f"; all {len(est)} scorers {sum(est.values()) / 60:.1f} min on this device "
          f"({'tiny models: meaningless for the target' if args.quick else 'target < 10 min'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
