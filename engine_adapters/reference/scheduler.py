"""Continuous-batching scheduler: makes the reference engine's timing behave like a GPU engine.

Audio is synthesised once per request (off the event loop); what is simulated is
*when* it comes out. At most ``max_num_seqs`` sequences decode together and the
rest queue in arrival order. Each decode step lasts
``step_base_s + step_per_seq_s * active + prefill_s * admitted`` and then hands
every active sequence its next chunk, so aggregate throughput rises with the batch
until ``max_num_seqs`` and then flattens while queueing makes each request slower.
Steps follow a nominal timeline (perf_counter_ns): step k is due at the end of step k-1's
nominal time plus its own duration, however long writing step k-1's chunks took, so writing
does not stretch the schedule. When the engine is late by more than a step it starts a new
timeline from now rather than bursting to catch up, and counts the break. How late each chunk
was written against its step's due time is the engine's schedule slip (``ScheduleLog``, served
on ``/stats``): it tells engine delay from client delay in a timing-fidelity figure
(docs/performance.md). Nothing here blocks.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from array import array
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Union

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
    due_ns: int = 0  # the step's nominal end (perf_counter_ns): emit_ns - due_ns is the slip


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
    # set by the writer: events go straight to it, inside the step, instead of waking a task
    # through ``events`` (one task wake-up per chunk cost the loop ~0.2 ms at 1,024 streams)
    sink: Callable[[SequenceEvent], None] | None = None

    def post(self, event: SequenceEvent) -> None:
        if self.sink is not None:
            self.sink(event)
        else:
            self.events.put_nowait(event)

    def attach(self, sink: Callable[[SequenceEvent], None]) -> None:
        """Hand events to ``sink`` from now on, first the ones already queued."""
        self.sink = sink
        while not self.events.empty() and self.sink is sink:
            sink(self.events.get_nowait())


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


class ScheduleLog:
    """The engine's own schedule slip: for every audio chunk, when it was written against when its
    step was due; per step, its due time and whether the timeline had to restart. Bounded (the
    oldest half goes when full) and queried by time window, so a bench asks for one run's span."""

    def __init__(self, capacity: int = 1 << 21) -> None:
        self.capacity = capacity
        self.emit_ns = array("q")
        self.slip_ns = array("q")
        # per chunk: from the emit stamp to the write's return, an upper bound on the engine's own
        # share of a late event (it also counts a preemption after the kernel took the bytes)
        self.gap_ns = array("q")
        # per chunk: 1 if bytes were left in the engine's own write buffer after the write (the
        # kernel took only part; the rest goes when the socket is writable, so the gap above is no
        # bound for it), 0 if the kernel took them all, -1 not measured
        self.queued = array("b")
        self.step_due_ns = array("q")
        self.step_nominal_ns = array("q")
        self.step_breaks = array("b")

    def chunk(self, emit_ns: int, due_ns: int, written_ns: int = 0, queued: int = -1) -> None:
        """One audio write: its emit stamp, its step's due time (0: not a scheduled chunk), when
        the write returned (0: not measured) and whether bytes stayed in the engine's buffer."""
        if due_ns:
            self.emit_ns.append(emit_ns)
            self.slip_ns.append(emit_ns - due_ns)
            self.gap_ns.append(written_ns - emit_ns if written_ns else 0)
            self.queued.append(queued)
            if len(self.emit_ns) > self.capacity:
                half = self.capacity // 2
                del self.emit_ns[:half], self.slip_ns[:half], self.gap_ns[:half], self.queued[:half]

    def step(self, due_ns: int, nominal_ns: int, broke: bool) -> None:
        self.step_due_ns.append(due_ns)
        self.step_nominal_ns.append(nominal_ns)
        self.step_breaks.append(broke)
        if len(self.step_due_ns) > self.capacity:
            half = self.capacity // 2
            del self.step_due_ns[:half], self.step_nominal_ns[:half], self.step_breaks[:half]

    def summary(self, since_ns: int = 0, until_ns: int | None = None) -> dict[str, Any]:
        """Slip percentiles (ms) of the chunks written in [since_ns, until_ns], and of the steps due
        then: how many, how many broke the timeline, nominal time per step."""
        end = until_ns if until_ns is not None else 1 << 62
        emit = np.frombuffer(self.emit_ns, dtype=np.int64)
        keep = (emit >= since_ns) & (emit <= end)
        slip = np.frombuffer(self.slip_ns, dtype=np.int64)[keep] / 1e6
        gap = np.frombuffer(self.gap_ns, dtype=np.int64)[keep] / 1e6
        due = np.frombuffer(self.step_due_ns, dtype=np.int64)
        steps = (due >= since_ns) & (due <= end)
        queued = np.frombuffer(self.queued, dtype=np.int8)[keep]
        out: dict[str, Any] = {"chunks": int(slip.size), "steps": int(steps.sum()),
                               "queued_chunks": int((queued == 1).sum()),
                               "timeline_breaks": int(np.frombuffer(self.step_breaks, dtype=np.int8)[steps].sum()),
                               "slip_p50_ms": None, "slip_p99_ms": None, "slip_max_ms": None,
                               "write_gap_p99_ms": None, "write_gap_max_ms": None, "step_nominal_ms": None}
        if slip.size:
            out.update(slip_p50_ms=round(float(np.percentile(slip, 50)), 3),
                       slip_p99_ms=round(float(np.percentile(slip, 99)), 3), slip_max_ms=round(float(slip.max()), 3),
                       write_gap_p99_ms=round(float(np.percentile(gap, 99)), 3),
                       write_gap_max_ms=round(float(gap.max()), 3))
        if steps.any():
            out["step_nominal_ms"] = round(float(np.frombuffer(self.step_nominal_ns, dtype=np.int64)[steps].mean()) / 1e6, 3)
        return out

    def at(self, emits: list[int]) -> dict[int, dict[str, Any]]:
        """The chunks whose emit stamps are `emits` (a late event's, as the client saw it): slip
        and write gap (ms) and whether bytes stayed queued in the engine (see `queued`)."""
        emit = np.frombuffer(self.emit_ns, dtype=np.int64)
        out: dict[int, dict[str, Any]] = {}
        for e in emits:  # stamps are appended in emit order: one process, one monotonic clock
            i = int(np.searchsorted(emit, e))
            if i < emit.size and emit[i] == e:
                out[e] = {"slip_ms": self.slip_ns[i] / 1e6, "write_gap_ms": self.gap_ns[i] / 1e6,
                          "queued": {1: True, 0: False}.get(self.queued[i])}
        return out


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
        self.schedule = ScheduleLog()

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
                seq.post(Failed(message))
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
            seq.post(Admitted())
            admitted += 1
            audio_s += seq.input_audio_s
        self.stats.admitted += admitted
        return admitted, audio_s

    def _advance(self, seq: Sequence, due_ns: int) -> bool:
        """Emit the sequence's next chunk; True when it is finished and leaves the batch."""
        if seq.cancelled:
            return True
        if not seq.rendered.done():
            return False  # still rendering: it holds its slot like a long prefill would
        if seq.rendered.cancelled() or seq.rendered.exception() is not None:
            exc = None if seq.rendered.cancelled() else seq.rendered.exception()
            seq.post(Failed(f"synthesis failed: {exc!r}"))
            seq.done = True
            self.stats.failed += 1
            return True
        samples = seq.rendered.result().samples
        end = min(len(samples), seq.position + seq.chunk_samples)
        piece = samples[seq.position:end]
        seq.position = end
        last = end >= len(samples)
        seq.post(Chunk(index=seq.chunks_emitted, samples=piece, last=last, due_ns=due_ns))
        seq.chunks_emitted += 1
        self.stats.audio_samples += len(piece)
        return last

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        now = time.perf_counter_ns
        due = 0  # the previous step's nominal end; 0: no timeline (idle)
        while True:
            self._active = [s for s in self._active if not s.cancelled]
            if not self._active and not self._waiting:
                self._wake.clear()
                due = 0
                await self._wake.wait()
                continue
            admitted, input_audio_s = self._admit()
            if not self._active:
                continue
            n = len(self._active)
            self.stats.max_active_seen = max(self.stats.max_active_seen, n)
            duration = self.profile.step_duration(n, admitted, input_audio_s)
            start = loop.time()
            nominal = round(duration * 1e9)
            t = now()
            broke = bool(due) and t - due > nominal  # late by more than a whole step: new timeline
            due = (t if not due or broke else due) + nominal
            self.schedule.step(due, nominal, broke)
            wait = max(0.0, (due - t) / 1e9)
            if self._step_work is not None:
                await asyncio.gather(self._step_work(n, duration), asyncio.sleep(wait))
            else:
                await asyncio.sleep(wait)
            still_running = []
            for seq in self._active:
                if self._advance(seq, due):
                    if not seq.cancelled and not seq.done:
                        seq.done = True
                        self.stats.finished += 1
                else:
                    still_running.append(seq)
            self._active = still_running
            self.stats.steps += 1
            self.stats.busy_s += loop.time() - start
