"""GPU telemetry check (run on an NVIDIA host): samples NVML at 10 Hz through
`engine_adapters.telemetry.GpuSampler` while the GPU idles, runs a bf16 matmul loop, then idles
again, and prints a compact timeline plus the sampler's schedule figures.

    .venv/bin/python bench/gpu_check_telemetry.py [--hz 10] [--idle 2] [--load 4] [--size 8192]

Expect: utilisation near 0 when idle and ~100 within ~0.5 s of load; power ramping up over about
a second; SM clock moving under load; tick lateness well under a period and no drift (the last
tick lands at start + k*period).
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine_adapters.telemetry import GpuSampler, gpu_identity  # noqa: E402


def matmul_loop(stop: threading.Event, size: int, started: list[float]) -> None:
    import torch

    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    torch.cuda.synchronize()
    started.append(time.perf_counter())
    while not stop.is_set():
        for _ in range(8):
            a = (a @ b).clamp_(-1, 1)
        torch.cuda.synchronize()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hz", type=float, default=10.0)
    ap.add_argument("--idle", type=float, default=2.0, help="idle seconds before and after the load")
    ap.add_argument("--load", type=float, default=4.0, help="seconds of bf16 matmul load")
    ap.add_argument("--size", type=int, default=8192)
    args = ap.parse_args()

    gpus, status = gpu_identity()
    print(f"NVML: {status}")
    for g in gpus:
        print(f"  gpu {g['gpu_index']}: {g['name']} {g['uuid']} driver {g['driver_version']} "
              f"{g['memory_total_mib']:.0f} MiB, power limit {g['power_limit_w']} W")
    if status != "ok":
        return 1
    try:
        import torch

        if not torch.cuda.is_available():
            print("torch has no CUDA (CPU build?): sampling idle only")
            args.load = 0
    except ImportError:
        print("torch not installed: sampling idle only")
        args.load = 0

    sampler = GpuSampler(hz=args.hz)
    t0 = time.perf_counter()
    sampler.start("gpu-check")
    time.sleep(args.idle)
    marks = {"load_start": time.perf_counter() - t0}
    started: list[float] = []
    if args.load:
        stop = threading.Event()
        th = threading.Thread(target=matmul_loop, args=(stop, args.size, started))
        th.start()
        time.sleep(args.load)
        stop.set()
        th.join()
    marks["load_end"] = time.perf_counter() - t0
    time.sleep(args.idle)
    samples = sampler.stop()
    if started:
        marks["matmul_first"] = started[0] - t0

    gpu0 = [s for s in samples if s.gpu_index == 0]
    base = gpu0[0].t_ns if gpu0 else 0
    print("\nmarks (s from sampler start): " + ", ".join(f"{k} {v:.2f}" for k, v in marks.items()))
    print(f"{'t s':>6} {'util':>5} {'memu':>5} {'mem MiB':>8} {'power W':>8} {'SM MHz':>7} {'mem MHz':>8} "
          f"{'temp':>5} {'energy J':>9} reasons")
    e0 = gpu0[0].energy_mj if gpu0 and gpu0[0].energy_mj is not None else None
    for s in gpu0:
        energy = f"{(s.energy_mj - e0) / 1000:9.1f}" if e0 is not None and s.energy_mj is not None else f"{'-':>9}"
        print(f"{(s.t_ns - base) / 1e9:6.2f} {s.util_gpu_pct!s:>5} {s.util_mem_pct!s:>5} {s.mem_used_mib or 0:8.0f} "
              f"{s.power_w or 0:8.1f} {s.sm_clock_mhz!s:>7} {s.mem_clock_mhz!s:>8} {s.temp_c!s:>5} {energy} "
              f"{hex(s.clock_event_reasons) if s.clock_event_reasons is not None else '-'}")

    summ = sampler.stats.summary()
    period_ms = 1000.0 / args.hz
    print(f"\nschedule: {summ['ticks']} ticks at {args.hz:g} Hz ({len(gpus)} GPU(s) per tick), "
          f"missed {summ['missed_ticks']}; lateness p50 {summ['lateness_us_p50']:.0f} us, "
          f"p99 {summ['lateness_us_p99']:.0f} us, max {summ['lateness_us_max']:.0f} us "
          f"(period {period_ms:.0f} ms); NVML read per tick p50 {summ['read_us_p50']:.0f} us, max {summ['read_us_max']:.0f} us")
    sched = gpu0[:summ["ticks"]]  # the sampler adds one off-schedule sample (energy) when it stops
    if len(sched) > 1:
        span = (sched[-1].t_ns - sched[0].t_ns) / 1e9
        ideal = (summ["ticks"] + summ["missed_ticks"] - 1) * period_ms / 1000
        print(f"drift: last tick at {span:.4f} s vs grid {ideal:.4f} s ({(span - ideal) * 1e3:+.2f} ms over the run)")
    if args.load and gpu0:
        ls, le = marks["load_start"], marks["load_end"]
        busy = [s for s in gpu0 if ls * 1e9 <= s.t_ns - base <= le * 1e9]
        idle = [s for s in gpu0 if s.t_ns - base < ls * 1e9]
        first100 = next(((s.t_ns - base) / 1e9 - ls for s in busy if (s.util_gpu_pct or 0) >= 95), None)
        pw = [s.power_w for s in busy if s.power_w]
        sm = [s.sm_clock_mhz for s in busy if s.sm_clock_mhz]
        print(f"load: util>=95 after {first100 if first100 is None else round(first100, 2)} s; "
              f"power idle {idle[-1].power_w if idle else '-'} W -> max {max(pw) if pw else '-'} W; "
              f"SM clock idle {idle[-1].sm_clock_mhz if idle else '-'} -> min under load {min(sm) if sm else '-'} MHz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
