"""GPU telemetry through NVML (`pynvml` from nvidia-ml-py): device identity per run and a sampler
on a fixed deadline schedule.

The sampler's k-th tick is due at start + k*period (never "sleep a period after the last
sample", which drifts by the read time every tick). If a tick is late by more than a period the
missed ticks are skipped and counted, not bunched up. Where NVML or a GPU is absent everything
still works: identity is empty, the sampler returns no samples, and `status` says why.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from data.records import GpuSample

try:  # nvidia-ml-py is a declared dependency, but a broken install must not stop a run
    import pynvml
except ImportError:  # pragma: no cover - depends on the environment
    pynvml = None


def _nvml_init() -> str:
    """'ok' or why NVML cannot be used here."""
    if pynvml is None:
        return "unavailable: pynvml (nvidia-ml-py) is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"unavailable: NVML could not initialise ({exc}; no NVIDIA driver on this host?)"
    except OSError as exc:
        return f"unavailable: NVML library could not load ({exc})"
    try:
        count = pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as exc:
        pynvml.nvmlShutdown()
        return f"unavailable: NVML device count failed ({exc})"
    if count == 0:
        pynvml.nvmlShutdown()
        return "unavailable: NVML sees no GPU"
    return "ok"


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _read(fn: Callable[..., Any], *args: Any) -> Any:
    """One NVML read; a field the device does not support reads as None rather than failing."""
    try:
        return fn(*args)
    except pynvml.NVMLError:
        return None


def _clock_event_reasons_fn() -> Callable[..., Any] | None:
    return getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)


def gpu_identity() -> tuple[list[dict[str, Any]], str]:
    """[{gpu_index, name, uuid, driver_version, memory_total_mib, power_limit_w}], status."""
    status = _nvml_init()
    if status != "ok":
        return [], status
    try:
        driver = _text(_read(pynvml.nvmlSystemGetDriverVersion) or "")
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            mem = _read(pynvml.nvmlDeviceGetMemoryInfo, h)
            limit = _read(pynvml.nvmlDeviceGetEnforcedPowerLimit, h)
            out.append({
                "gpu_index": i,
                "name": _text(_read(pynvml.nvmlDeviceGetName, h)),
                "uuid": _text(_read(pynvml.nvmlDeviceGetUUID, h)),
                "driver_version": driver,
                "memory_total_mib": mem.total / 2**20 if mem is not None else None,
                "power_limit_w": limit / 1000.0 if limit is not None else None,
            })
        return out, "ok"
    finally:
        pynvml.nvmlShutdown()


def read_sample(run_id: str, index: int, handle: Any, reasons_fn: Callable[..., Any] | None,
                energy: bool = True) -> GpuSample:
    """The fields of one device at one instant (perf_counter_ns stamped before the reads).

    The energy counter is read last and only when asked: on an H200 that one read costs ~3 ms
    (15 ms p99) while every other field costs microseconds (bench/gpu_nvml_read_cost.py)."""
    t = time.perf_counter_ns()
    util = _read(pynvml.nvmlDeviceGetUtilizationRates, handle)
    mem = _read(pynvml.nvmlDeviceGetMemoryInfo, handle)
    power = _read(pynvml.nvmlDeviceGetPowerUsage, handle)
    sm = _read(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM)
    memclk = _read(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM)
    temp = _read(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
    reasons = _read(reasons_fn, handle) if reasons_fn else None
    total_mj = _read(pynvml.nvmlDeviceGetTotalEnergyConsumption, handle) if energy else None
    return GpuSample(
        run_id=run_id, gpu_index=index, t_ns=t,
        util_gpu_pct=float(util.gpu) if util is not None else None,
        util_mem_pct=float(util.memory) if util is not None else None,
        mem_used_mib=mem.used / 2**20 if mem is not None else None,
        power_w=power / 1000.0 if power is not None else None,
        sm_clock_mhz=float(sm) if sm is not None else None,
        mem_clock_mhz=float(memclk) if memclk is not None else None,
        temp_c=float(temp) if temp is not None else None,
        energy_mj=float(total_mj) if total_mj is not None else None,
        clock_event_reasons=int(reasons) if reasons is not None else None,
    )


@dataclass
class ScheduleStats:
    """How well the sampler kept its schedule: lateness of each tick versus its deadline."""

    ticks: int = 0
    missed_ticks: int = 0
    lateness_ns: list[int] = field(default_factory=list)
    read_ns: list[int] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        import numpy as np

        late = np.asarray(self.lateness_ns or [0]) / 1e3
        reads = np.asarray(self.read_ns or [0]) / 1e3
        return {"ticks": self.ticks, "missed_ticks": self.missed_ticks,
                "lateness_us_p50": float(np.percentile(late, 50)), "lateness_us_p99": float(np.percentile(late, 99)),
                "lateness_us_max": float(late.max()), "read_us_p50": float(np.percentile(reads, 50)),
                "read_us_max": float(reads.max())}


def next_tick(start_ns: int, period_ns: int, k: int, now_ns: int) -> tuple[int, int]:
    """(next tick index, ticks skipped): the first tick > k whose deadline is not already more
    than one period past. Pure, so the no-drift rule is testable without a GPU."""
    k += 1
    behind = (now_ns - (start_ns + k * period_ns)) // period_ns
    if behind >= 1:
        return k + behind, behind
    return k, 0


class GpuSampler:
    """Samples every visible GPU at `hz` on a fixed deadline schedule in a daemon thread.

    The cumulative energy counter is read about once a second (every `energy_every`-th tick) and
    once more when sampling stops, so a run's energy (last minus first reading) is exact at both
    ends while a tick stays at microseconds instead of the counter's milliseconds."""

    def __init__(self, hz: float = 10.0, on_sample: Callable[[GpuSample], None] | None = None):
        if hz <= 0:
            raise ValueError("hz must be > 0")
        self.period_ns = int(1e9 / hz)
        self.energy_every = max(1, round(hz))
        self.on_sample = on_sample
        self.status = "not started"
        self.stats = ScheduleStats()
        self._samples: list[GpuSample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self, run_id: str) -> str:
        """Begin sampling; returns 'ok' or why no samples will come."""
        self.status = _nvml_init()
        if self.status != "ok":
            return self.status
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, args=(run_id,), name="gpu-sampler", daemon=True)
        self._thread.start()
        return self.status

    def _loop(self, run_id: str) -> None:
        try:
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            reasons_fn = _clock_event_reasons_fn()

            def read_all(energy: bool) -> list[GpuSample]:
                return [read_sample(run_id, i, h, reasons_fn, energy) for i, h in enumerate(handles)]

            start = time.perf_counter_ns()
            k = 0
            while True:
                deadline = start + k * self.period_ns
                delay = deadline - time.perf_counter_ns()
                if (delay > 0 and self._stop.wait(delay / 1e9)) or self._stop.is_set():
                    break
                t0 = time.perf_counter_ns()
                batch = read_all(energy=k % self.energy_every == 0)
                t1 = time.perf_counter_ns()
                with self._lock:
                    self._samples.extend(batch)
                    self.stats.ticks += 1
                    self.stats.lateness_ns.append(t0 - deadline)
                    self.stats.read_ns.append(t1 - t0)
                if self.on_sample:
                    for s in batch:
                        self.on_sample(s)
                k, skipped = next_tick(start, self.period_ns, k, time.perf_counter_ns())
                self.stats.missed_ticks += skipped
            last = read_all(energy=True)  # off-schedule: the run's closing energy reading
            with self._lock:
                self._samples.extend(last)
        except Exception as exc:  # a sampler failure must never take the run down; it is reported
            self.status = f"failed during sampling: {type(exc).__name__}: {exc}"
        finally:
            pynvml.nvmlShutdown()

    def drain(self) -> list[GpuSample]:
        """Samples collected since the last drain (for periodic flushing during long runs)."""
        with self._lock:
            out, self._samples = self._samples, []
        return out

    def stop(self) -> list[GpuSample]:
        """Stop the thread and return the samples not yet drained."""
        if self._thread is not None:
            self._stop.set()
            self._thread.join(timeout=5)
            self._thread = None
        return self.drain()
