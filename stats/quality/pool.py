"""The CPU process pool shared by the bundled CPU scorers (pocketsphinx, DNSMOS).

Both are single-threaded C/ONNX work per clip, so clips fan out to a 'spawn' pool (no fork of a
process that holds torch threads). The pool starts only with the first batch big enough to repay
its start-up: a spawned worker imports numpy, soxr and its model library, about a second.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Callable, Iterable, TypeVar

from stats.quality.base import Scorer

T = TypeVar("T")
R = TypeVar("R")


class ProcessPoolMixin(Scorer):
    """Put before a `Scorer` subclass in the bases: CPU-only construction, then `map_in_pool(...)`."""

    pool_min_batch: int = 8  # below this, worker start-up costs more than it saves
    pool_initializer: Callable[[], Any] | None = None

    def __init__(self, model_dir=None, *, device: str | None = None, batch_size: int | None = None,
                 workers: int | None = None, dtype: str | None = None):
        super().__init__(model_dir, device="cpu", batch_size=batch_size, dtype=dtype)  # CPU-only by construction
        self.init_pool(workers)

    def init_pool(self, workers: int | None) -> None:
        self.workers = workers if workers is not None else (os.cpu_count() or 1)
        self._pool: ProcessPoolExecutor | None = None

    def map_in_pool(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        items = list(items)
        if self.workers > 1 and len(items) >= self.pool_min_batch and self._pool is None:
            ctx = multiprocessing.get_context("spawn")
            init = type(self).pool_initializer
            self._pool = ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx, initializer=init)
        if self._pool is None or len(items) == 1:
            return [fn(x) for x in items]
        return list(self._pool.map(fn, items))

    def close_pool(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
