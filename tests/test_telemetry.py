"""GPU telemetry: the deadline schedule (pure), graceful absence, and a real-GPU check."""

from __future__ import annotations

import time

import pytest

from engine_adapters.telemetry import GpuSampler, gpu_identity, next_tick

GPUS, STATUS = gpu_identity()


def test_next_tick_never_drifts_and_counts_skips():
    period = 100
    assert next_tick(0, period, 0, 30) == (1, 0)  # on time
    assert next_tick(0, period, 0, 150) == (1, 0)  # late by half a period: still take tick 1
    assert next_tick(0, period, 0, 250) == (2, 1)  # tick 1 is more than a period late: skip it
    assert next_tick(0, period, 3, 1000) == (10, 6)
    # deadlines stay on the start + k*period grid however long each read took
    k, t = 0, 0
    for read_cost in (7, 13, 99, 5):
        t = k * period + read_cost
        k, _ = next_tick(0, period, k, t)
    assert k == 4


@pytest.mark.skipif(STATUS == "ok", reason="this host has a GPU; absence path not testable")
def test_absent_nvml_is_reported_not_raised():
    assert GPUS == [] and STATUS.startswith("unavailable:")
    s = GpuSampler(hz=10)
    assert s.start("run") == STATUS
    assert s.stop() == []


@pytest.mark.gpu
@pytest.mark.skipif(STATUS != "ok", reason=f"no NVIDIA GPU: {STATUS}")
def test_sampler_on_a_real_gpu():
    assert GPUS[0]["name"] and GPUS[0]["uuid"].startswith("GPU-") and GPUS[0]["memory_total_mib"] > 0
    s = GpuSampler(hz=20)
    assert s.start("gpu-test") == "ok"
    time.sleep(1.0)
    samples = s.stop()
    per_gpu = [x for x in samples if x.gpu_index == 0]
    assert 18 <= len(per_gpu) <= 22
    gaps = [b.t_ns - a.t_ns for a, b in zip(per_gpu, per_gpu[1:])]
    assert max(abs(g - 50_000_000) for g in gaps) < 20_000_000
    assert per_gpu[-1].t_ns - per_gpu[0].t_ns == pytest.approx((len(per_gpu) - 1) * 50e6, rel=0.02)
    assert all(x.power_w and x.power_w > 0 for x in per_gpu)
    assert all(x.sm_clock_mhz is not None and x.temp_c is not None for x in per_gpu)
