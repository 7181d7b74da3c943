"""The asyncio client loop of one drive: closed-loop workers over the ordered requests, the hot path
that stamps and keeps every body read, the loop-lag ticker and the flusher that ships batches
(docs/timing.md). It runs in the driver process (child.py); `drive_in_process` runs it here."""

from __future__ import annotations

import asyncio
import gc
import json
import re
import time
from typing import Any, Callable

from engine_adapters.dialects import get_dialect
from engine_adapters.dialects.base import MAX_EVENT_BYTES
from engine_adapters.driver.answers import error_text, what_arrived
from engine_adapters.driver.decode import decode_batch
from engine_adapters.driver.instruments import Instruments
from engine_adapters.driver.instruments import instruments as driver_instruments
from engine_adapters.driver.overhead import loop_lag_summary, summarise_ns
from engine_adapters.driver.pacing import SendPacer
from engine_adapters.driver.periodic import Periodic
from engine_adapters.driver import realtime
from engine_adapters.driver.results import DriveSummary, RawResult
from engine_adapters.driver.shards import Meetings, PeerStopped, ShardRole
from engine_adapters.driver.spec import DriveSpec, RequestSpec
from engine_adapters.transport import TRANSPORTS, TransportError
from engine_adapters.transport_names import DEFAULT_TRANSPORT

TICK_S = 0.010  # event-loop lag ticker period
FLUSH_S = 0.100  # how often the child ships a batch of records
INFLIGHT_S = 0.5  # how often the child reports the requests still streaming (when asked to)
WATCH_S = 0.05  # how often the drive asks whether it is cancelled
GC_VALVE = 1_000_000  # net new GC-tracked objects that trigger one collection while the collector is off
# an SSE end-marker event closing the bytes read so far (checked on the last 64 bytes only)
_DONE_TAIL = re.compile(rb"(?:\A|\n)data: ?\[DONE\]\r?\n\r?\n\Z")
_DONE_ENDS = (b"]\n\n", b"]\r\n\r\n", b"]\n\r\n", b"]\r\n\n")  # every ending _DONE_TAIL accepts

Item = tuple[int, RequestSpec, bool]  # (request index, request, is_warmup)


class DriveLoop:
    """State of one drive inside the driver process."""

    def __init__(self, spec: DriveSpec, emit: Callable[[list[RawResult]], None],
                 emit_inflight: Callable[[list[RawResult]], None] | None = None, shard: ShardRole | None = None):
        self.spec = spec
        self.shard = shard  # this process's part of a sharded drive (shards.py), else the whole drive
        self.emit = emit
        self.emit_inflight = emit_inflight
        self.inflight: dict[int, RawResult] = {}
        self._inflight_due = 0.0
        self.dialect = get_dialect(spec.dialect)
        opts = spec.request_options
        self.url = spec.url.rstrip("/") + opts.get("path", self.dialect.path)
        self.pending: list[RawResult] = []
        self.send_lag_ns: list[int] = []
        self.loop_lag_ns: list[int] = []
        self.loop_lag_at_ns: list[int] = []  # each probe's arming instant, beside its lag
        self.teardown_lag_ns: list[int] = []  # probes that ran after the drive's last request ended
        self.sent = 0
        self.pacer = SendPacer(spec.sends_per_pass)
        self.read_hooks: tuple[Callable[[int], None], ...] = ()  # instruments told every read (instruments.py)
        self.cancelled = False
        self.max_event_bytes = int(opts.get("max_event_bytes", MAX_EVENT_BYTES))
        self.sse = self.dialect.name != "pcm" and self.dialect.request_config(opts).stream
        # a WebSocket session per request (driver/realtime.py) instead of an HTTP exchange
        self.session_plan = (realtime.wire.session_plan(opts) if self.dialect.transport == "websocket" else None)
        self.expected_type = self.dialect.response_content_type(opts)
        self.expected_rate = self.dialect.sample_rate(opts)
        # bodies built before the clock starts: JSON-encoding a base64 prompt is not send lag
        self._bodies: dict[str, bytes] = {}
        own = spec.requests if shard is None else [r for _, r, _ in self.own_items()]
        for r in own:
            if r.utt_id not in self._bodies:
                body = self.dialect.build_body(r.text, str(r.prompt_wav) if r.prompt_wav else None, r.prompt_text,
                                               sampling=spec.sampling, options=opts)
                self._bodies[r.utt_id] = json.dumps(body).encode()

    def schedule(self) -> list[Item]:
        reqs = self.spec.requests
        w = self.spec.warmup_requests if reqs else 0
        warm = [(i, reqs[i % len(reqs)], True) for i in range(w)]
        return warm + [(w + i, r, False) for i, r in enumerate(reqs)]

    def phases(self) -> tuple[tuple[list[Item], int], tuple[list[Item], int]]:
        """((warmup items, workers), (measured items, workers)) this process runs."""
        items = self.schedule()
        warm = [x for x in items if x[2]]
        measured = [x for x in items if not x[2]]
        c = self.spec.concurrency
        if self.shard is None:
            return (warm, min(c, len(warm))), (measured, min(c, len(measured)))
        return self.shard.take(warm, c), self.shard.take(measured, c)

    def own_items(self) -> list[Item]:
        (warm, _), (measured, _) = self.phases()
        return warm + measured

    def _sink(self, raw: RawResult) -> Callable[[int, bytes], bool]:
        """The hot path, called with each body read and its stamp (inside the protocol callback
        for the default transport): append, then two C-speed tail checks; True = stop reading."""
        stamps, chunks, limit = raw.stamps.append, raw.chunks.append, self.max_event_bytes
        if not self.sse:
            def keep(t: int, data: bytes) -> bool:
                stamps(t)
                chunks(data)
                return False
            return keep
        open_bytes = 0  # bytes since the last newline: a lower bound on the open event's size
        tail = b""

        def sink(t: int, data: bytes) -> bool:
            nonlocal open_bytes, tail
            stamps(t)
            chunks(data)
            k = data.rfind(b"\n")
            open_bytes = open_bytes + len(data) if k < 0 else len(data) - k - 1
            if open_bytes > limit:
                raw.overflow = f"SSE event exceeds {limit} bytes"
                return True
            # `tail` ends with the last 64 bytes read: a long read is its own tail (a reference, no
            # copy per read); only a short one is joined to what came before
            tail = data if len(data) >= 64 else tail[-64:] + data
            # a C endswith pre-check keeps the regex to the few reads that could end with the marker
            # (an audio event ends with "}" then the blank line; docs/performance.md, "Per-event CPU")
            return tail.endswith(_DONE_ENDS) and _DONE_TAIL.search(tail[-64:]) is not None
        return sink

    def _traced(self, sink: Callable[[int, bytes], bool]) -> Callable[[int, bytes], bool]:
        """`sink`, with every read also told to the instruments that watch reads (the busy poll and
        the stall trace, when they are on)."""
        hooks = self.read_hooks
        if not hooks:  # the measured default: the sink itself, nothing added per read
            return sink

        def hooked(t: int, data: bytes) -> bool:
            for h in hooks:
                h(t)
            return sink(t, data)
        return hooked

    async def one(self, transport: Any, index: int, req: RequestSpec, warm: bool) -> None:
        """Send one request and collect its stamped reads; decoding happens later, elsewhere."""
        spec = self.spec
        raw = RawResult(index=index, utt_id=req.utt_id, is_warmup=warm, t_send_ns=0)
        self.inflight[index] = raw
        now = time.perf_counter_ns

        def stamp_send() -> None:
            raw.t_send_ns = now()

        try:
            async with asyncio.timeout(spec.timeout_s):
                if self.session_plan is not None:
                    await realtime.session(self.url, self._bodies[req.utt_id], raw, stamp_send,
                                           dict(req.headers) if req.headers else None, self.session_plan,
                                           self.max_event_bytes)
                    return
                async with transport.post(self.url, self._bodies[req.utt_id], stamp_send,
                                          dict(req.headers) if req.headers else None) as resp:
                    raw.http_status = resp.status
                    if not 200 <= resp.status < 300:
                        body = await resp.read_error_body()
                        raw.t_end_ns = now()
                        raw.failure = ("http_status", f"HTTP {resp.status}: {error_text(body)}")
                    elif unexpected := self.dialect.check_response(resp.content_type, resp.content_encoding,
                                                                   self.expected_type, self.expected_rate):
                        raw.failure = ("decode_error", await what_arrived(resp, unexpected))
                        raw.t_end_ns = now()
                    else:
                        raw.clean_eof = await resp.body(self._traced(self._sink(raw)))
                        raw.t_end_ns = now()
        except TransportError as exc:
            raw.failure = ("transport", str(exc))
        except TimeoutError:
            raw.failure = ("timeout", f"no completion within {spec.timeout_s:g} s")
        except asyncio.CancelledError:
            raw.failure = ("cancelled", "run cancelled while the request was in flight")
            self.cancelled = True
            raise
        finally:
            if raw.t_send_ns == 0:
                raw.t_send_ns = now()
            if raw.t_end_ns is None:
                raw.t_end_ns = now()
            self.sent += 1
            del self.inflight[index]
            self.pending.append(raw)

    async def phase(self, transport: Any, items: list[Item], workers: int) -> None:
        it = iter(items)
        turn = self.pacer.turn

        async def worker() -> None:
            freed: int | None = None
            for index, req, warm in it:
                if (wait := turn()) is not None:  # this pass's sends are spent: a later pass (pacing.py)
                    await wait
                if freed is not None:
                    self.send_lag_ns.append(time.perf_counter_ns() - freed)
                await self.one(transport, index, req, warm)
                freed = time.perf_counter_ns()

        tasks = [asyncio.ensure_future(worker()) for _ in range(workers)]
        try:
            await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            for w in tasks:
                w.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    def ticker(self, chores: tuple[tuple[int, Callable[[], object]], ...] = (),
               driving: Callable[[], bool] = lambda: True) -> Periodic:
        """Event-loop lag: every TICK_S, how long a callback scheduled with call_soon waits before
        it runs, i.e. how long the loop is busy with work already queued. Not the lateness of a
        timer: uvloop's timers and loop.time() have 1 ms resolution, which read as a steady
        ~1 ms "lag" on an idle loop. The probe is scheduled from a ready callback (`arm`), as the
        ticker task's step scheduled it when it woke from its sleep: it then waits for the loop's
        next pass, socket reads included, not only for the rest of the timer phase.

        `chores` are (n, fn): fn runs on every n-th tick, before the probe is armed (so never
        inside a probe's window). The flusher and the cancel watch ride on the ticker's wake-ups
        instead of waking the loop on their own timers: a wake-up of a loop that was waiting
        costs tens of µs of CPU, whatever little it does (docs/performance.md, "Per-event CPU").

        A probe that runs once `driving()` is false (the drive's requests have all ended) timed the
        teardown, not the drive: it goes to `teardown_lag_ns`, apart (docs/timing.md)."""
        loop = asyncio.get_running_loop()
        lag, at, teardown = self.loop_lag_ns, self.loop_lag_at_ns, self.teardown_lag_ns
        now = time.perf_counter_ns
        ticks = 0

        def probe(t0: int) -> None:
            if driving():
                lag.append(now() - t0)
                at.append(t0)
            else:
                teardown.append(now() - t0)

        def arm() -> None:
            loop.call_soon(probe, now())
            if not gc.isenabled() and gc.get_count()[0] > GC_VALVE:
                gc.collect(1)  # only a leak gets here: pause once rather than grow without bound

        def tick() -> None:
            nonlocal ticks
            ticks += 1
            for n, fn in chores:
                if ticks % n == 0:
                    fn()
            loop.call_soon(arm)

        return Periodic(TICK_S, tick)

    def flush(self) -> None:
        if self.pending:
            batch, self.pending = self.pending, []
            self.emit(batch)
        if self.emit_inflight is not None and time.monotonic() >= self._inflight_due:
            self._inflight_due = time.monotonic() + INFLIGHT_S
            self.emit_inflight(list(self.inflight.values()))  # a C-speed copy; the sender builds the rows

    async def main(self, cancel: Callable[[], bool], freeze_gc: bool = False) -> DriveSummary:
        """The drive: both phases over one client pool, the ticker beside it, the instruments
        (instruments.py) around it; `freeze_gc` in the driver process."""
        spec = self.spec
        anchor_perf = time.perf_counter_ns()
        anchor_wall = time.time_ns()
        transport_cls = TRANSPORTS[spec.request_options.get("client", DEFAULT_TRANSPORT)]
        slots = spec.concurrency if self.shard is None else self.shard.slots(spec.concurrency)
        transport: Any = transport_cls(slots, spec.request_options.get("headers"))
        (warm, warm_workers), (measured, measured_workers) = self.phases()
        # every shard of a sharded drive runs the warmup phase: they all meet between the phases
        meetings = Meetings(self.shard, spec.warmup_requests > 0 and bool(spec.requests))
        task: asyncio.Future | None = None
        instruments = Instruments(driver_instruments(spec, slots, freeze_gc=freeze_gc,
                                                     driving=lambda: task is None or not task.done()))
        instruments.start(before_barrier=True)
        meetings.start()  # the run's shared start instant
        started_ns = time.perf_counter_ns()
        instruments.start(before_barrier=False)
        self.read_hooks = instruments.read_hooks()

        async def drive() -> None:
            meetings.check_start()
            if warm:
                await self.phase(transport, warm, warm_workers)
            await meetings.between_phases()
            await self.phase(transport, measured, measured_workers)

        task = asyncio.ensure_future(drive())

        def watch() -> None:
            if not task.done() and cancel():
                task.cancel()

        asyncio.get_running_loop().call_soon(watch)  # once right after the drive's first step, then with the ticks
        ticker = self.ticker(((round(FLUSH_S / TICK_S), self.flush), (round(WATCH_S / TICK_S), watch)),
                             driving=lambda: not task.done())
        error = None
        try:
            await task
        except asyncio.CancelledError:
            self.cancelled = True
        except PeerStopped as exc:  # the peer's own cause reaches the parent from the peer
            error = str(exc)
        except Exception as exc:  # a driver bug must still ship the records it has
            error = f"{type(exc).__name__}: {exc}"
        finally:
            meetings.leave()
            ticker.cancel()
            await transport.close()
            self.flush()
            instruments.stop()
        return DriveSummary(
            loop_impl=loop_impl(), client_impl=realtime.CLIENT if self.session_plan else transport.version,
            anchor_wall_ns=anchor_wall, anchor_perf_ns=anchor_perf, sent=self.sent, cancelled=self.cancelled,
            overhead={"send_lag": summarise_ns(self.send_lag_ns),
                      "sends_per_pass": self.pacer.per_pass, "deferred_sends": self.pacer.deferred,
                      "loop_lag": loop_lag_summary(self.loop_lag_ns, self.loop_lag_at_ns, self.teardown_lag_ns),
                      "tick_ms": TICK_S * 1000, **instruments.summary()},
            error=error,
            samples_ns={} if self.shard is None else {"send_lag": self.send_lag_ns, "loop_lag": self.loop_lag_ns,
                                                      "loop_lag_at": self.loop_lag_at_ns,
                                                      "teardown_lag": self.teardown_lag_ns, "start": [started_ns]},
        )


def loop_impl() -> str:
    loop = asyncio.get_running_loop()
    mod = type(loop).__module__
    if mod.startswith("uvloop"):
        import uvloop

        return f"uvloop {uvloop.__version__}"
    return f"asyncio ({type(loop).__name__})"


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when importable, else the default asyncio loop."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def drive_raw(spec: DriveSpec, emit_raw: Callable[[list[RawResult]], None],
              cancel: Callable[[], bool] = lambda: False,
              emit_inflight: Callable[[list[RawResult]], None] | None = None,
              freeze_gc: bool = False, shard: ShardRole | None = None) -> DriveSummary:
    """Run a drive on a fresh event loop in the calling thread (what the driver process runs);
    `emit_raw` receives batches of undecoded RawResults, `emit_inflight` (at every flush) the
    results still streaming, which their requests keep appending to. Without `shard` this runs
    the whole drive (`spec.shards` is for DriverProcess); with it, that shard's part."""
    spec.validate()
    loop = new_event_loop()
    try:
        return loop.run_until_complete(DriveLoop(spec, emit_raw, emit_inflight, shard).main(cancel, freeze_gc))
    finally:
        try:  # finalise any async generator a library left open, while the loop still runs
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def drive_in_process(spec: DriveSpec, emit: Callable[[list[Any]], None],
                     cancel: Callable[[], bool] = lambda: False) -> DriveSummary:
    """`drive_raw` with batches decoded into records before `emit` (tests, tools)."""
    return drive_raw(spec, lambda raws: emit(decode_batch(spec, raws)), cancel)
