"""Profile the batched seedtts-sim and utmos22 paths (full-size random weights, batch 32) with
torch.profiler: where the time goes (CPU ops, CUDA kernels, Python-side gaps), and with --parts
the wall time of each stage of UTMOS22's forward (conv front end, encoder, BLSTM and head),
synchronised around each stage. Run on a GPU host:

    python bench/profile_scorers.py --device cuda
    python bench/profile_scorers.py --device cuda --only utmos22 --dtype float16 --parts
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import scorer_models  # noqa: E402
from bench_scorers import clips, sync  # noqa: E402

from stats.quality.precision import DTYPES  # noqa: E402


def utmos_parts(s, wavs, device: str, dtype: str, batch: int, reps: int = 3) -> None:
    """Per-stage wall time of UTMOS22's own forward (score_waves, one batch per call), the device
    synchronised at each stage boundary by forward hooks on the model's modules: no copy of the
    forward here that could drift from the scored one."""
    m = s._native
    enc = m.wav2vec2.encoder
    stamps: list[tuple[str, float]] = []

    def mark(name: str):
        def hook(*_args) -> None:
            sync(device)
            stamps.append((name, time.perf_counter()))
        return hook

    hooks = [m.wav2vec2.feature_extractor.register_forward_pre_hook(mark("upload")),
             m.wav2vec2.feature_extractor.register_forward_hook(mark("conv front end")),
             enc.layers[0].register_forward_pre_hook(mark("pos conv + norm")),
             enc.layers[-1].register_forward_hook(mark("transformer layers")),
             m.blstm.register_forward_pre_hook(mark("concat + pack")),
             m.blstm.register_forward_hook(mark("blstm"))]
    totals: dict[str, float] = {}
    order = sorted(wavs, key=len, reverse=True)
    s.batch_size = batch
    try:
        for _ in range(reps):
            for k in range(0, len(order), batch):
                sync(device)
                stamps[:] = [("", time.perf_counter())]
                s.score_waves(order[k:k + batch])
                stamps.append(("head + copy", time.perf_counter()))
                for (_, t0), (name, t1) in zip(stamps, stamps[1:]):
                    totals[name] = totals.get(name, 0.0) + t1 - t0
    finally:
        for h in hooks:
            h.remove()
    audio = reps * sum(len(w) for w in wavs) / 16000
    whole = sum(totals.values())
    print(f"== utmos22 parts, {dtype}, batch {batch}: {audio / whole:.0f} audio-s/s over the stages")
    for name, v in totals.items():
        print(f"   {name:20s} {v * 1000 / reps:8.1f} ms per pass  {100 * v / whole:5.1f} %")


def profile_files(s, n: int, device: str, acts) -> None:
    """Wall time and profile of scored_in_batches over `n` WAVs at 24 kHz (reads, staging, model)."""
    import tempfile

    from bench_scorers import write_files
    from torch.profiler import profile

    from stats.quality.base import ScoreItem
    from stats.quality.scoring import scored_in_batches

    wavs = clips(n, 3)
    outs, prompts = write_files(Path(tempfile.mkdtemp()), wavs, clips(max(1, n // 8), 4) * 8)
    items = [ScoreItem("bench", i, f"u{i}", p, "text", q) for i, (p, q) in enumerate(zip(outs, prompts))]
    audio = sum(len(w) for w in wavs) / 16000

    def run() -> None:
        if hasattr(s, "_prompt_cache"):
            s._prompt_cache.clear()
        for _ in scored_in_batches(s, items):
            pass
    run()
    sync(device)
    t0 = time.perf_counter()
    run()
    sync(device)
    wall = time.perf_counter() - t0
    print(f"== files: {n} WAVs ({audio:.0f} audio-s) in {wall * 1000:.0f} ms: {audio / wall:.0f} audio-s/s", flush=True)
    with profile(activities=acts) as prof:
        run()
        sync(device)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=60))
    if device.startswith("cuda"):
        print(prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=15, max_name_column_width=60))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--only", nargs="*", choices=("seedtts-sim", "utmos22"))
    ap.add_argument("--dtype", nargs="*", default=["float32"], choices=DTYPES)
    ap.add_argument("--batch", type=int, nargs="*", default=[32])
    ap.add_argument("--parts", action="store_true", help="utmos22: per-stage wall time instead of the profiler")
    ap.add_argument("--files", type=int, default=0,
                    help="profile the file-to-value path (campaign score's batching) over this many 24 kHz WAVs")
    args = ap.parse_args()
    from torch.profiler import ProfilerActivity, profile

    wavs = clips(args.n, 1)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
    makers = {
        "seedtts-sim": (lambda b, d: scorer_models.seedtts_sim(args.device, args.quick, b, dtype=d),
                        lambda s: s.embed(wavs)),
        "utmos22": (lambda b, d: scorer_models.utmos22(args.device, args.quick, b, dtype=d),
                    lambda s: s.score_waves(wavs)),
    }
    for name, (make, work) in makers.items():
        if args.only and name not in args.only:
            continue
        for dtype in args.dtype:
            for batch in args.batch:
                s = make(batch, dtype)
                work(s)
                sync(args.device)
                t0 = time.perf_counter()
                work(s)
                sync(args.device)
                wall = time.perf_counter() - t0
                audio = sum(len(w) for w in wavs) / 16000
                print(f"== {name} {dtype} batch {batch}: {wall * 1000:.1f} ms wall for {len(wavs)} clips "
                      f"({audio / wall:.0f} audio-s/s)", flush=True)
                if args.files:
                    profile_files(s, args.files, args.device, acts)
                elif args.parts and name == "utmos22":
                    utmos_parts(s, wavs, args.device, dtype, batch)
                elif not args.parts:
                    with profile(activities=acts) as prof:
                        work(s)
                        sync(args.device)
                    sort = "cuda_time_total" if args.device.startswith("cuda") else "cpu_time_total"
                    print(prof.key_averages().table(sort_by=sort, row_limit=18, max_name_column_width=60))
                    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12,
                                                    max_name_column_width=60))
                s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
