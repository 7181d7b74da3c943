"""Throughput of the protocol scorers (whisper, seedtts-sim, utmos22): audio seconds scored per
second at batch sizes 1, 8 and 32, against a plain loop that scores one file at a time the way
seed-tts-eval's scripts do (SIM: both embeddings recomputed per pair), same clips, same run.
Full-size architectures with random weights (timing only; values are meaningless), or tiny ones
with --quick (a CPU smoke run). Ends with an ESTIMATE, from the measured rates, of the reference
campaign's quality phase: 256 prompts x 3 repeats x 3 concurrencies x 2 arms = 4,608 outputs of
about 4 s, all three scorers, one device.

Two comparisons, both printed:
- `memory`: model calls only, on 16 kHz arrays already in memory (batched `embed`/`score_waves`/
  `transcribe` against the same calls one clip at a time);
- `files`: from 24 kHz WAV files (what engines write) to values. The plain loop is the reference
  scripts' own per-file sequence: seed-tts-eval's verification() (read both files, build a
  torchaudio Resample per file on the CPU, move to the device, embed, cosine, `.item()`), SpeechMOS's
  README (read, `predictor(wave, sr)` resampling on the device), seed-tts-eval's run_wer.py (read,
  scipy FFT resample, one generate per file); against `score_files`, the code `campaign score` and
  `campaign scorers run` use (batched, next batch read while the model runs).
`--dtype` picks the compute precision of the batched side (stats.quality.precision; default
float32); the plain loop always runs in fp32, as the reference scripts do, so every ratio is
against what seed-tts-eval and SpeechMOS actually run.

    python bench/bench_scorers.py --device cuda                   # on the H200
    python bench/bench_scorers.py --device cuda --dtype tf32      # tensor-core precision, same run shape
    python bench/bench_scorers.py --device cpu --quick            # smoke run here
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import scorer_models  # noqa: E402

OUTPUTS, CLIP_S = 4608, 4.0
ENGINE_RATE = 24000  # what the engines write (docs/engines.md)


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
    dtype, s.dtype = s.dtype, "float32"  # the plain loop runs as the reference scripts do: fp32
    work(s, wavs[:2], prompts[:2])  # warm-up (kernels, allocator)
    rates["loop"] = audio_s / timed(lambda: loop(s, wavs, prompts), device)
    s.dtype = dtype
    for b in batches:
        s.batch_size = b
        work(s, wavs[:b], prompts[:b])
        rates[f"batch {b}"] = audio_s / timed(lambda: work(s, wavs, prompts), device)
    s.close()
    print(f"{name:12s} " + "  ".join(f"{k}: {v:8.1f} audio-s/s" for k, v in rates.items())
          + f"  (best batched / loop = {max(v for k, v in rates.items() if k != 'loop') / rates['loop']:.1f}x)",
          flush=True)
    return rates


def write_files(folder: Path, wavs: list[np.ndarray], prompts: list[np.ndarray]) -> tuple[list[Path], list[Path]]:
    """The clips as 24 kHz int16 WAVs (resampled from 16 kHz), prompts deduplicated as in a campaign."""
    import soundfile as sf

    from stats.quality.resample import resample_sinc
    folder.mkdir(parents=True, exist_ok=True)
    outs, by_id = [], {}
    for i, w in enumerate(wavs):
        p = folder / f"out{i:04d}.wav"
        sf.write(p, np.clip(resample_sinc(w, 16000, ENGINE_RATE), -1, 1), ENGINE_RATE, subtype="PCM_16")
        outs.append(p)
    for w in prompts:
        if id(w) not in by_id:
            p = folder / f"prompt{len(by_id):03d}.wav"
            sf.write(p, np.clip(resample_sinc(w, 16000, ENGINE_RATE), -1, 1), ENGINE_RATE, subtype="PCM_16")
            by_id[id(w)] = p
    return outs, [by_id[id(w)] for w in prompts]


def script_read(path: Path):
    """librosa.load(path, sr=None, mono=...) as the scripts call it: the file's own rate, float32."""
    import soundfile as sf
    wave, sr = sf.read(str(path), dtype="float32", always_2d=True)
    return wave[:, 0], sr


def script_loops(device: str, dtype: str):
    """The reference scripts' per-file sequences over our model modules (same weights as the
    batched side), each ending in a host copy of the value as `.item()` does."""
    import torch

    from stats.quality.precision import precision
    from stats.quality.wavlm import frame_mask
    try:
        import torchaudio
        cpu_resample = lambda x, sr: torchaudio.transforms.Resample(orig_freq=sr, new_freq=16000)(x)  # noqa: E731
        dev_resample = lambda x, sr: torchaudio.functional.resample(x, sr, 16000)  # noqa: E731
    except ImportError:  # CPU smoke runs here: our equivalent (docs/quality.md, within 1.2e-7 at 24 kHz)
        print("torchaudio not installed: the script loops resample with stats.quality.resample", flush=True)
        from stats.quality.resample import resample_sinc
        cpu_resample = dev_resample = lambda x, sr: torch.from_numpy(  # noqa: E731
            resample_sinc(x[0].cpu().numpy(), sr, 16000))[None].to(x.device)

    def sim(s, outs, prompts):
        for a, b in zip(outs, prompts):
            embs = []
            for path in (a, b):
                wave, sr = script_read(path)
                x = cpu_resample(torch.from_numpy(wave)[None], sr)
                x = x.to(device)
                with torch.inference_mode(), precision(dtype, device):
                    states, frames = s._ssl(x, torch.tensor([x.shape[1]], device=device))
                    embs.append(s._head(states, frame_mask(frames, states[0].shape[1])))
            torch.nn.functional.cosine_similarity(embs[0].float(), embs[1].float()).cpu().item()

    def mos(s, outs, prompts):
        for path in outs:
            wave, sr = script_read(path)
            x = dev_resample(torch.from_numpy(wave)[None].to(device), sr)
            with torch.inference_mode(), precision(dtype, device):
                s._native(x, torch.tensor([x.shape[1]], device=device)).float().cpu().item()

    def wer(s, outs, prompts):
        from scipy.signal import resample
        for path in outs:
            wave, sr = script_read(path)
            wave = resample(wave, int(len(wave) * 16000 / sr)) if sr != 16000 else wave
            s.transcribe([wave.astype(np.float32)])
    return {"seedtts-sim": sim, "utmos22": mos, "whisper": wer}


def run_files(name: str, make, loop, outs: list[Path], prompts: list[Path], audio_s: float, device: str,
              batches) -> dict[str, float]:
    from stats.quality.base import ScoreItem
    from stats.quality.scoring import scored_in_batches

    def score_files(s, items):  # campaign score's batching (the in-memory models have no folder to check)
        return [r for _, results in scored_in_batches(s, items) for r in results]

    items = [ScoreItem("bench", i, f"u{i}", p, "text", q) for i, (p, q) in enumerate(zip(outs, prompts))]
    rates = {}
    s = make(1)
    loop(s, outs[:2], prompts[:2])  # warm-up
    rates["script loop"] = audio_s / timed(lambda: loop(s, outs, prompts), device)
    for b in batches:
        s.batch_size = b
        if hasattr(s, "_prompt_cache"):
            s._prompt_cache.clear()  # a fresh pass: prompts are embedded inside the timed call
        score_files(s, items[:b])
        if hasattr(s, "_prompt_cache"):
            s._prompt_cache.clear()
        rates[f"score_files {b}"] = audio_s / timed(lambda: score_files(s, items), device)
    s.close()
    best = max(v for k, v in rates.items() if k != "script loop")
    print(f"{name:12s} [files] " + "  ".join(f"{k}: {v:8.1f}" for k, v in rates.items())
          + f" audio-s/s  (best / fp32 script loop = {best / rates['script loop']:.1f}x)", flush=True)
    return rates


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true", help="tiny architectures and few clips (CPU smoke run)")
    ap.add_argument("--n", type=int, help="clips per in-memory measurement (default 64, --quick 8)")
    ap.add_argument("--file-n", type=int, help="WAV files per file measurement (default 256, --quick 8): enough "
                    "batches that the first one, read before the model can start, weighs as little as in a campaign")
    ap.add_argument("--only", nargs="*", choices=("whisper", "seedtts-sim", "utmos22"))
    ap.add_argument("--dtype", default="float32", choices=("float32", "tf32", "float16"),
                    help="compute precision of every measured call (stats.quality.precision)")
    ap.add_argument("--batches", type=int, nargs="*", help="batch sizes (default 1 8 32; --quick 1 8)")
    ap.add_argument("--source", default="both", choices=("memory", "files", "both"))
    args = ap.parse_args()
    n = args.n or (8 if args.quick else 64)
    batches = tuple(args.batches) if args.batches else ((1, 8, 32) if not args.quick else (1, 8))
    wavs, prompts = clips(n, 1), clips(max(1, n // 8), 2)
    prompts = [prompts[i % len(prompts)] for i in range(n)]  # outputs share prompts, as in a campaign
    print(f"device {args.device}, {'tiny' if args.quick else 'full-size'} random-weight models, {n} clips "
          f"({sum(len(w) for w in wavs) / 16000:.0f} audio-s), dtype {args.dtype}", flush=True)
    fn = args.file_n or (8 if args.quick else 256)
    fwavs, fprompts = clips(fn, 3), clips(max(1, fn // 8), 4)
    fprompts = [fprompts[i % len(fprompts)] for i in range(fn)]
    audio_s = sum(len(w) for w in fwavs) / 16000
    files = write_files(Path(tempfile.mkdtemp()), fwavs, fprompts) if args.source != "memory" else None
    if files:
        print(f"file measurements: {fn} WAVs at {ENGINE_RATE} Hz ({audio_s:.0f} audio-s)", flush=True)
    loops = script_loops(args.device, "float32") if files else {}
    memory = args.source != "files"
    ratios: dict[str, float] = {}
    todo = args.only or ["seedtts-sim", "utmos22", "whisper"]
    best: dict[str, float] = {}
    def sim_work(s, w, p):  # batched outputs, one embedding per distinct prompt
        uniq = {id(x): x for x in p}
        s.embed(list(uniq.values()))
        s.embed(w)

    def sim_loop(s, w, p):  # seed-tts-eval: verification() embeds both files for every pair
        for a, b in zip(w, p):
            s.embed([a])
            s.embed([b])

    # scorer -> (model maker, batched in-memory call, one-clip-at-a-time in-memory loop)
    scorers = {
        "seedtts-sim": (scorer_models.seedtts_sim, sim_work, sim_loop),
        "utmos22": (scorer_models.utmos22, lambda s, w, p: s.score_waves(w),
                    lambda s, w, p: [s.score_waves([x]) for x in w]),
        "whisper": (scorer_models.whisper, lambda s, w, p: s.transcribe(w),
                    lambda s, w, p: [s.transcribe([x]) for x in w]),
    }
    for name, (maker, work, loop) in scorers.items():
        if name not in todo:
            continue
        make = lambda b, maker=maker: maker(args.device, args.quick, b, dtype=args.dtype)  # noqa: E731
        if memory:
            r = run_one(name, make, work, loop, wavs, prompts, args.device, batches)
            best[name] = max(v for k, v in r.items() if k != "loop")
        if files:
            r = run_files(name, make, loops[name], *files, audio_s, args.device, batches)
            best[name] = max(v for k, v in r.items() if k != "script loop")
            ratios[name] = best[name] / r["script loop"]
    total_audio = OUTPUTS * CLIP_S
    est = {k: total_audio / v for k, v in best.items()}
    print(f"ESTIMATE (not a measurement): quality phase of {OUTPUTS} outputs x {CLIP_S:.0f} s = {total_audio:.0f} "
          f"audio-s at the best measured rates: " + ", ".join(f"{k} {v / 60:.1f} min" for k, v in est.items())
          + f"; all {len(est)} scorers {sum(est.values()) / 60:.1f} min on this device "
          f"({'tiny models: meaningless for the target' if args.quick else 'target < 10 min'})")
    if ratios:
        print(f"files, batched {args.dtype}: best batched / fp32 script loop: "
              + ", ".join(f"{k} {v:.1f}x" for k, v in ratios.items()) + " (target >= 20x for SIM and MOS)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
