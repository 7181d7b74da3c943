"""Continuous-batching scheduler: makes the reference engine's timing behave like a GPU engine.

Audio is synthesised once per request (off the event loop); what is simulated is
*when* it comes out. At most ``max_num_seqs`` sequences decode together and the
rest queue in arrival order. Each decode step lasts
``step_base_s + step_per_seq_s * active + prefill_s * admitted`` and then hands
every active sequence its next chunk, so aggregate throughput rises with the batch
until ``max_num_seqs`` and then flattens while queueing makes each request slower.
Steps are timed by deadlines on the loop clock; nothing here blocks.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Union

import numpy as np

from engine_adapters.reference.profiles import Profile
from engine_adapters.reference.synthesis import Rendered


@dataclass(frozen=True, slots=True)
class Admitted:
    """The sequence joined the running batch (its prefill happens in this step)."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """The next piece of audio; ``last`` marks the end of the sequence."""

    index: int
    samples: np.ndarray
    last: bool


@dataclass(frozen=True, slots=True)
class Failed:
    """The sequence cannot continue (synthesis error, engine died)."""

    message: str


SequenceEvent = Union[Admitted, Chunk, Failed]


@dataclass(eq=False)
class Sequence:
    """One request inside the engine: its rendered audio (once ready) and its event queue."""

    seq_id: int
    rendered: asyncio.Future[Rendered]
    chunk_samples: int
    input_audio_s: float = 0.0  # thinker input audio: prefill charged in the admitting step
    events: asyncio.Queue[SequenceEvent] = field(default_factory=asyncio.Queue)
    position: int = 0
    chunks_emitted: int = 0
    cancelled: bool = False
    done: bool = False


@dataclass(slots=True)
class SchedulerStats:
    """Counters for /stats and the CUDA check script."""

    steps: int = 0
    busy_s: float = 0.0
    admitted: int = 0
    finished: int = 0
    cancelled: int = 0
    failed: int = 0
    audio_samples: int = 0
    max_active_seen: int = 0


StepWork = Callable[[int, float], Awaitable[None]]


class BatchScheduler:
    """Runs decode steps for the active batch while there is work; idle otherwise."""

    def __init__(self, profile: Profile, step_work: StepWork | None = None) -> None:
        self.profile = profile
        self._step_work = step_work
        self._waiting: deque[Sequence] = deque()
        self._active: list[Sequence] = []
        self._wake = asyncio.Event()
        self._ids = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        self.stats = SchedulerStats()

    @property
    def active(self) -> int:
        return len(self._active)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="reference-scheduler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    def submit(self, rendered: asyncio.Future[Rendered], input_audio_s: float = 0.0) -> Sequence:
        """Queue a request whose audio is being rendered; events arrive on ``seq.events``."""
        seq = Sequence(seq_id=next(self._ids), rendered=rendered, chunk_samples=self.profile.chunk_samples,
                       input_audio_s=input_audio_s)
        self._waiting.append(seq)
        self._wake.set()
        return seq

    def cancel(self, seq: Sequence) -> None:
        """Release the sequence's slot (client went away, fault ended it); idempotent."""
        if seq.done or seq.cancelled:
            return
        seq.cancelled = True
        self.stats.cancelled += 1

    def fail_all(self, message: str) -> None:
        """End every queued and active sequence with ``message`` (the engine died)."""
        for seq in [*self._active, *self._waiting]:
            if not seq.done:
                seq.done = True
                seq.events.put_nowait(Failed(message))
        self._active.clear()
        self._waiting.clear()

    def _admit(self) -> tuple[int, float]:
        """Admit waiting sequences into free slots: (how many, their thinker input audio seconds)."""
        admitted, audio_s = 0, 0.0
        while self._waiting and len(self._active) < self.profile.max_num_seqs:
            seq = self._waiting.popleft()
            if seq.cancelled:
                continue
            self._active.append(seq)
            seq.events.put_nowait(Admitted())
            admitted += 1
            audio_s += seq.input_audio_s
        self.stats.admitted += admitted
        return admitted, audio_s

    def _advance(self, seq: Sequence) -> bool:
        """Emit the sequence's next chunk; True when it is finished and leaves the batch."""
        if seq.cancelled:
            return True
        if not seq.rendered.done():
            return False  # still rendering: it holds its slot like a long prefill would
        if seq.rendered.cancelled() or seq.rendered.exception() is not None:
            exc = None if seq.rendered.cancelled() else seq.rendered.exception()
            seq.events.put_nowait(Failed(f"synthesis failed: {exc!r}"))
            seq.done = True
            self.stats.failed += 1
            return True
        samples = seq.rendered.result().samples
        end = min(len(samples), seq.position + seq.chunk_samples)
        piece = samples[seq.position:end]
        seq.position = end
        last = end >= len(samples)
        seq.events.put_nowait(Chunk(index=seq.chunks_emitted, samples=piece, last=last))
        seq.chunks_emitted += 1
        self.stats.audio_samples += len(piece)
        return last

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._active = [s for s in self._active if not s.cancelled]
            if not self._active and not self._waiting:
                self._wake.clear()
                await self._wake.wait()
                continue
            admitted, input_audio_s = self._admit()
            if not self._active:
                continue
            n = len(self._active)
            self.stats.max_active_seen = max(self.stats.max_active_seen, n)
            duration = self.profile.step_duration(n, admitted, input_audio_s)
            start = loop.time()
            if self._step_work is not None:
                await asyncio.gather(self._step_work(n, duration), asyncio.sleep(duration))
            else:
                await asyncio.sleep(duration)
            still_running = []
            for seq in self._active:
                if self._advance(seq):
                    if not seq.cancelled and not seq.done:
                        seq.done = True
                        self.stats.finished += 1
                else:
                    still_running.append(seq)
            self._active = still_running
            self.stats.steps += 1
            self.stats.busy_s += loop.time() - start
