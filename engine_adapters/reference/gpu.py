"""Real GPU work per decode step for ``--device cuda``, so GPU telemetry follows the engine's load.

Each step runs a chain of bf16 matmuls whose total duration is
``cuda_busy_fraction * step_duration * active / max_num_seqs``: an idle engine
leaves the GPU idle, a full batch keeps it busy most of the step, like a real
decoder. The matmul time is measured once at start-up so the amount of work maps
onto seconds on whatever GPU this is. torch is imported only here, only on demand.
"""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from data.extras import extra_hint


class CudaUnavailable(RuntimeError):
    """``--device cuda`` was asked for on a machine where torch sees no CUDA GPU."""


@dataclass(slots=True)
class GpuStats:
    device_name: str
    matmul_ms: float  # measured time of one unit of work
    steps: int = 0
    matmuls: int = 0
    gpu_busy_s: float = 0.0
    per_batch_matmuls: dict[int, int] = field(default_factory=dict)


def check_cuda() -> str:
    """Name of CUDA device 0, or :class:`CudaUnavailable` with a one-line reason."""
    try:
        import torch
    except ImportError as exc:  # torch comes with the 'quality' extra (data/extras.py)
        raise CudaUnavailable(f"--device cuda {extra_hint('quality', exc)}") from None
    if not torch.cuda.is_available():
        build = "a CPU-only torch build" if torch.version.cuda is None else f"torch built for CUDA {torch.version.cuda}"
        raise CudaUnavailable(f"--device cuda: no CUDA GPU is visible ({build}, torch {torch.__version__})")
    return torch.cuda.get_device_name(0)


class CudaStepWorker:
    """Runs each step's matmuls on one dedicated thread (CUDA calls release the GIL)."""

    def __init__(self, busy_fraction: float, max_num_seqs: int, dim: int = 4096, rows: int = 2048,
                 device: str = "cuda") -> None:
        import torch

        self._torch = torch
        self._busy_fraction = busy_fraction
        self._max_num_seqs = max_num_seqs
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reference-cuda")
        # device="cpu" exists for tests of the bookkeeping on machines without a GPU.
        self._device = torch.device("cuda", 0) if device == "cuda" else torch.device(device)
        gen = torch.Generator(device=self._device).manual_seed(0)
        self._x = torch.randn(rows, dim, device=self._device, dtype=torch.bfloat16, generator=gen)
        self._w = torch.randn(dim, dim, device=self._device, dtype=torch.bfloat16, generator=gen) / dim**0.5
        self._out = torch.empty(rows, dim, device=self._device, dtype=torch.bfloat16)
        # Measure on the worker thread itself, so its cuBLAS handle exists before the first step.
        matmul_ms = self._executor.submit(self._measure_ms).result()
        name = torch.cuda.get_device_name(0) if self._device.type == "cuda" else str(self._device)
        self.stats = GpuStats(device_name=name, matmul_ms=matmul_ms)

    def _sync(self) -> None:
        if self._device.type == "cuda":
            self._torch.cuda.synchronize()

    def _measure_ms(self, reps: int = 50) -> float:
        torch = self._torch
        for _ in range(5):
            torch.matmul(self._x, self._w, out=self._out)
        self._sync()
        start = time.perf_counter()
        for _ in range(reps):
            torch.matmul(self._x, self._w, out=self._out)
        self._sync()
        return (time.perf_counter() - start) * 1000 / reps

    def _run(self, matmuls: int) -> float:
        start = time.perf_counter()
        for _ in range(matmuls):
            self._torch.matmul(self._x, self._w, out=self._out)
        self._sync()
        return time.perf_counter() - start

    def matmuls_for(self, active: int, step_s: float) -> int:
        """Units of work for a step of ``step_s`` seconds with ``active`` sequences."""
        busy_s = self._busy_fraction * step_s * min(1.0, active / self._max_num_seqs)
        return max(1, round(busy_s * 1000 / self.stats.matmul_ms)) if active else 0

    async def step(self, active: int, step_s: float) -> None:
        """Scheduler hook: do this step's GPU work without blocking the event loop."""
        n = self.matmuls_for(active, step_s)
        if n == 0:
            return
        elapsed = await asyncio.get_running_loop().run_in_executor(self._executor, self._run, n)
        self.stats.steps += 1
        self.stats.matmuls += n
        self.stats.gpu_busy_s += elapsed
        self.stats.per_batch_matmuls[active] = self.stats.per_batch_matmuls.get(active, 0) + n

    def close(self) -> None:
        self._executor.shutdown(wait=True)
