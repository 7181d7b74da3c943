"""Profile the batched seedtts-sim and utmos22 paths (full-size random weights, batch 32) with
torch.profiler: where the time goes (CPU ops, CUDA kernels, Python-side gaps). Run on a GPU host:

    python bench/profile_scorers.py --device cuda
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--n", type=int, default=64)
    args = ap.parse_args()
    from torch.profiler import ProfilerActivity, profile

    wavs = clips(args.n, 1)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if args.device.startswith("cuda") else [])
    for name, make, work in (
        ("seedtts-sim", lambda: scorer_models.seedtts_sim(args.device, args.quick, 32), lambda s: s.embed(wavs)),
        ("utmos22", lambda: scorer_models.utmos22(args.device, args.quick, 32), lambda s: s.score_waves(wavs)),
    ):
        s = make()
        work(s)
        sync(args.device)
        t0 = time.perf_counter()
        work(s)
        sync(args.device)
        wall = time.perf_counter() - t0
        with profile(activities=acts) as prof:
            work(s)
            sync(args.device)
        sort = "cuda_time_total" if args.device.startswith("cuda") else "cpu_time_total"
        print(f"== {name}: {wall * 1000:.1f} ms wall for {len(wavs)} clips")
        print(prof.key_averages().table(sort_by=sort, row_limit=18, max_name_column_width=60))
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=60))
        s.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
