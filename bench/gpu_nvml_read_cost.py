"""What each NVML read in a telemetry tick costs (run on an NVIDIA host): times every call that
`engine_adapters.telemetry.read_sample` makes, the whole tick, and the field-values batch that
could replace several of them, so the sampler's field set can be chosen by cost.

    .venv/bin/python bench/gpu_nvml_read_cost.py [--n 200]

Prints p50 / p99 in microseconds per call on GPU 0, idle.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine_adapters.telemetry import _clock_event_reasons_fn, read_sample  # noqa: E402


def timed(fn, n: int) -> tuple[float, float]:
    out = []
    for _ in range(n):
        t = time.perf_counter_ns()
        try:
            fn()
        except Exception:  # a field this device lacks: time the failure too, it is what a tick pays
            pass
        out.append(time.perf_counter_ns() - t)
    a = np.asarray(out) / 1e3
    return float(np.percentile(a, 50)), float(np.percentile(a, 99))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200)
    args = ap.parse_args()
    import pynvml

    pynvml.nvmlInit()
    try:
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        reasons = _clock_event_reasons_fn()
        fi = [pynvml.NVML_FI_DEV_POWER_INSTANT, pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION]
        calls = {
            "utilization": lambda: pynvml.nvmlDeviceGetUtilizationRates(h),
            "memory info": lambda: pynvml.nvmlDeviceGetMemoryInfo(h),
            "power usage": lambda: pynvml.nvmlDeviceGetPowerUsage(h),
            "SM clock": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
            "memory clock": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
            "temperature": lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
            "total energy": lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h),
            "clock event reasons": (lambda: reasons(h)) if reasons else (lambda: None),
            "whole tick (read_sample)": lambda: read_sample("bench", 0, h, reasons),
            "field values: power+energy": lambda: pynvml.nvmlDeviceGetFieldValues(h, fi),
        }
        print(f"{'NVML call':<30} {'p50 us':>9} {'p99 us':>9}   ({args.n} calls each, GPU 0)")
        for name, fn in calls.items():
            p50, p99 = timed(fn, args.n)
            print(f"{name:<30} {p50:>9.1f} {p99:>9.1f}")
    finally:
        pynvml.nvmlShutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
