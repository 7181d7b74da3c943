"""The streaming load driver: closed-loop concurrency over an ordered request list, in its own
process with its own event loop, so nothing else in the console can delay its timestamps.

Timing: `t_send_ns` is stamped just before the request is handed to the client; every body
read is stamped with `perf_counter_ns()` before any parsing and events take the stamp of the
read that delivered their first byte (see dialects/base.py). With the default transport the
stamp is taken inside the connection's `data_received` callback and the hot path runs right
there (transport.py): "stamp -> append stamp and bytes" plus two C-speed tail checks (end marker,
event-size guard). SSE framing, JSON, base64 and WAV decoding all happen in the parent process,
on a thread at idle priority (DriverProcess), so they never take a core from the driver. Batches
leave the driver process through a pipe written by a sender thread with `os.writev` (the GIL is
released while the kernel copies the audio bytes; the metadata is packed in C); pickling them on
a multiprocessing.Queue held the GIL for milliseconds per batch and showed up as arrival-stamp
delay (bench/bench_timing_fidelity.py).

Closed loop: C workers each take the next request as soon as their previous one ends, so exactly
C requests are in flight until the list is exhausted. Warmup requests (flagged `is_warmup`) run
first, as their own closed-loop phase, so they never overlap measured requests.

Every request that was sent yields exactly one RequestRecord, whatever happens (timeout,
transport failure, cancellation), so requests sent = requests stored.
"""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import multiprocessing as mp
import operator
import os
import pickle
import queue as queue_mod
import re
import signal
import struct
import sys
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterator

from data.records import AudioFileRecord, ChunkRecord, RequestRecord
from engine_adapters.dialects import get_dialect
from engine_adapters.dialects.base import MAX_EVENT_BYTES, Unexpected, cut_detail
from engine_adapters.dialects.wav import encode_wav
from engine_adapters.transport import DEFAULT_TRANSPORT, TRANSPORTS, TransportError

TICK_S = 0.010  # event-loop lag ticker period
FLUSH_S = 0.100  # how often the child ships a batch of records
INFLIGHT_S = 0.5  # how often the child reports the requests still streaming (when asked to)
GC_VALVE = 1_000_000  # net new GC-tracked objects that trigger one collection while the collector is off
SWITCH_INTERVAL_S = 0.0002  # the driver process's GIL switch interval (see _child_main)
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
# an SSE end-marker event closing the bytes read so far (checked on the last 64 bytes only)
_DONE_TAIL = re.compile(rb"(?:\A|\n)data: ?\[DONE\]\r?\n\r?\n\Z")


@dataclass(frozen=True)
class RequestSpec:
    utt_id: str
    text: str
    prompt_wav: Path | None
    prompt_text: str | None = None
    headers: tuple[tuple[str, str], ...] = ()  # per-request extra headers (e.g. fault injection in tests)


@dataclass
class DriveSpec:
    run_id: str
    url: str  # base URL, e.g. http://127.0.0.1:8091
    dialect: str
    concurrency: int
    requests: list[RequestSpec]
    warmup_requests: int = 0
    timeout_s: float = 120.0
    artifacts_dir: Path = Path("artifacts")
    sampling: dict[str, Any] = field(default_factory=dict)
    request_options: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.warmup_requests < 0:
            raise ValueError(f"warmup_requests must be >= 0, got {self.warmup_requests}")
        for name, value in (self.request_options.get("headers") or {}).items():
            try:  # HTTP/1.1 header fields are latin-1 on the wire
                f"{name}: {value}".encode("latin-1")
            except UnicodeEncodeError:
                raise ValueError(f"request header {name!r}: value {value!r} is not latin-1 text") from None
        get_dialect(self.dialect).request_config(self.request_options)


@dataclass
class DriveSummary:
    """What the driver process reports at the end (besides its records)."""
    loop_impl: str
    client_impl: str
    anchor_wall_ns: int
    anchor_perf_ns: int
    sent: int
    cancelled: bool
    overhead: dict[str, Any]
    error: str | None = None


@dataclass
class RawResult:
    """One sent request as the timing path saw it: stamps and undecoded body reads (first-byte
    time and byte count derive from them, in decode_result, off the timing path)."""
    index: int
    utt_id: str
    is_warmup: bool
    t_send_ns: int
    t_end_ns: int | None = None
    http_status: int | None = None
    failure: tuple[str, str] | None = None  # transport-level: http_status, transport, timeout, cancelled
    clean_eof: bool = False
    # one stamp and one bytes object per body read, in two flat lists (a (stamp, bytes) tuple per
    # read would be one more GC-tracked allocation per read in the timing path)
    stamps: list[int] = field(default_factory=list)
    chunks: list[bytes] = field(default_factory=list)
    overflow: str | None = None


@dataclass
class InflightRow:
    """A request still streaming, as the driver saw it at a flush (for live views), with the body
    reads that arrived since the previous report."""
    index: int
    utt_id: str
    is_warmup: bool
    t_send_ns: int
    reads: int  # body reads so far
    t_first_byte_ns: int | None
    t_last_read_ns: int | None
    stamps: list[int] = field(default_factory=list)  # the new reads: stamps ...
    chunks: list[bytes] = field(default_factory=list)  # ... and bytes


class InflightReporter:
    """Builds InflightRows on the sender thread from results the loop thread is still appending
    to. A list only grows and the loop appends a stamp before its bytes, so reading the lengths
    and then the slices below them is safe; only the reads not reported before are sent."""

    def __init__(self) -> None:
        self._sent: dict[int, int] = {}  # request index -> reads already reported

    def rows(self, raws: list[RawResult]) -> tuple[list[tuple], list[bytes]]:
        """(row metadata as tuples, the new reads' bytes back to back): the wire form of
        InflightRows, built without an object per row (this runs on the driver's sender thread,
        which shares the GIL with the loop)."""
        metas, blobs, sent = [], [], {}
        for r in raws:
            n = min(len(r.stamps), len(r.chunks))
            k = self._sent.get(r.index, 0)
            sent[r.index] = n
            new = r.chunks[k:n]
            blobs += new
            metas.append((r.index, r.utt_id, r.is_warmup, r.t_send_ns, n, r.stamps[0] if n else None,
                          r.stamps[n - 1] if n else None, r.stamps[k:n], list(map(len, new))))
        self._sent = sent  # requests that ended drop out
        return metas, blobs


def decode_result(spec: DriveSpec, raw: RawResult) -> list[Any]:
    """Records for one sent request: decode its frames, classify its outcome (the first cause
    wins; an HTTP error status always wins), save its audio WAV with SHA-256."""
    parser = get_dialect(spec.dialect).new_parser(spec.request_options)
    events = parser.feed_reads(raw.stamps, raw.chunks)
    if raw.overflow:
        parser.fail("decode_error", raw.overflow)
    if raw.clean_eof:
        events += parser.eof()
    st = parser.state
    outcome, detail = parser.outcome()
    if raw.failure is not None and (st.failure is None or raw.failure[0] == "http_status"):
        outcome, detail = raw.failure
        if outcome == "transport" and raw.stamps:  # the body broke after bytes had arrived
            detail = cut_detail(st.events, f"the connection ended after {sum(map(len, raw.chunks))} bytes ({detail})")
    rec = RequestRecord(
        run_id=spec.run_id, request_index=raw.index, utt_id=raw.utt_id, is_warmup=raw.is_warmup,
        outcome=outcome, t_send_ns=raw.t_send_ns, error_detail=detail, http_status=raw.http_status,
        t_first_byte_ns=raw.stamps[0] if raw.stamps else None, t_first_audio_ns=st.t_first_audio_ns,
        t_last_audio_ns=st.t_last_audio_ns, t_end_ns=raw.t_end_ns, audio_samples=st.samples,
        sample_rate=st.sample_rate, audio_chunks=st.audio_chunks, events=st.events,
        bytes_received=sum(map(len, raw.chunks)), text=st.text, finish_reason=st.finish_reason,
    )
    out: list[Any] = [rec]
    out += [ChunkRecord(spec.run_id, raw.index, k, e.t_arrival_ns, e.kind, e.samples, e.payload_bytes, e.server_emit_ns)
            for k, e in enumerate(events)]
    if st.samples and st.sample_rate:
        rel = audio_relpath(spec.run_id, raw.index, raw.utt_id)
        sha = _write_wav(Path(spec.artifacts_dir) / rel, b"".join(e.pcm for e in events if e.pcm), st.sample_rate)
        rec.audio_path, rec.audio_sha256 = rel, sha
        out.append(AudioFileRecord(sha, rel, spec.run_id, raw.index, st.sample_rate, st.samples))
    return out


def decode_batch(spec: DriveSpec, raws: list[RawResult]) -> list[Any]:
    out: list[Any] = []
    for r in raws:
        out += decode_result(spec, r)
    return out


def audio_relpath(run_id: str, request_index: int, utt_id: str) -> str:
    return f"{_SAFE.sub('_', run_id)}/{request_index}-{_SAFE.sub('_', utt_id)}.wav"


def _summarise_ns(values: list[int]) -> dict[str, float | int | None]:
    import numpy as np

    if not values:
        return {"n": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    arr = np.asarray(values, dtype=float) / 1e6
    return {"n": int(arr.size), "p50_ms": float(np.percentile(arr, 50, method="linear")),
            "p99_ms": float(np.percentile(arr, 99, method="linear")), "max_ms": float(arr.max())}


class _Run:
    """State of one drive inside the driver process."""

    def __init__(self, spec: DriveSpec, emit: Callable[[list[Any]], None],
                 emit_inflight: Callable[[list[RawResult]], None] | None = None):
        self.spec = spec
        self.emit = emit
        self.emit_inflight = emit_inflight
        self.inflight: dict[int, RawResult] = {}
        self._inflight_due = 0.0
        self.dialect = get_dialect(spec.dialect)
        opts = spec.request_options
        self.url = spec.url.rstrip("/") + opts.get("path", self.dialect.path)
        self.pending: list[Any] = []
        self.send_lag_ns: list[int] = []
        self.loop_lag_ns: list[int] = []
        self.sent = 0
        self.cancelled = False
        self.max_event_bytes = int(opts.get("max_event_bytes", MAX_EVENT_BYTES))
        self.sse = self.dialect.name != "pcm" and self.dialect.request_config(opts).stream
        self.expected_type = self.dialect.response_content_type(opts)
        # bodies built before the clock starts: JSON-encoding a base64 prompt is not send lag
        self._bodies: dict[str, bytes] = {}
        for r in spec.requests:
            if r.utt_id not in self._bodies:
                body = self.dialect.build_body(r.text, str(r.prompt_wav) if r.prompt_wav else None, r.prompt_text,
                                               sampling=spec.sampling, options=opts)
                self._bodies[r.utt_id] = json.dumps(body).encode()

    def schedule(self) -> list[tuple[int, RequestSpec, bool]]:
        reqs = self.spec.requests
        w = self.spec.warmup_requests if reqs else 0
        warm = [(i, reqs[i % len(reqs)], True) for i in range(w)]
        return warm + [(w + i, r, False) for i, r in enumerate(reqs)]

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
            tail = data[-64:] if len(data) >= 64 else (tail + data)[-64:]
            return tail[-1] == 10 and _DONE_TAIL.search(tail) is not None
        return sink

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
                async with transport.post(self.url, self._bodies[req.utt_id], stamp_send,
                                          dict(req.headers) if req.headers else None) as resp:
                    raw.http_status = resp.status
                    if not 200 <= resp.status < 300:
                        body = await resp.read_error_body()
                        raw.t_end_ns = now()
                        raw.failure = ("http_status", f"HTTP {resp.status}: {_error_text(body)}")
                    elif unexpected := self.dialect.check_response(resp.content_type, resp.content_encoding,
                                                                   self.expected_type):
                        raw.failure = ("decode_error", await _what_arrived(resp, unexpected))
                        raw.t_end_ns = now()
                    else:
                        raw.clean_eof = await resp.body(self._sink(raw))
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

    async def phase(self, transport: Any, items: list[tuple[int, RequestSpec, bool]]) -> None:
        it = iter(items)

        async def worker() -> None:
            freed: int | None = None
            for index, req, warm in it:
                if freed is not None:
                    self.send_lag_ns.append(time.perf_counter_ns() - freed)
                await self.one(transport, index, req, warm)
                freed = time.perf_counter_ns()

        workers = [asyncio.ensure_future(worker()) for _ in range(min(self.spec.concurrency, len(items)))]
        try:
            await asyncio.gather(*workers)
        except asyncio.CancelledError:
            for w in workers:
                w.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            raise

    async def ticker(self) -> None:
        """Event-loop lag: every TICK_S, how long a callback scheduled with call_soon waits before
        it runs, i.e. how long the loop is busy with work already queued. Not the lateness of a
        timer: uvloop's timers and loop.time() have 1 ms resolution, which read as a steady
        ~1 ms "lag" on an idle loop."""
        loop = asyncio.get_running_loop()
        lag = self.loop_lag_ns
        now = time.perf_counter_ns

        def probe(t0: int) -> None:
            lag.append(now() - t0)

        while True:
            await asyncio.sleep(TICK_S)
            loop.call_soon(probe, now())
            if not gc.isenabled() and gc.get_count()[0] > GC_VALVE:
                gc.collect(1)  # only a leak gets here: pause once rather than grow without bound

    async def flusher(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            self.flush()

    def flush(self) -> None:
        if self.pending:
            batch, self.pending = self.pending, []
            self.emit(batch)
        if self.emit_inflight is not None and time.monotonic() >= self._inflight_due:
            self._inflight_due = time.monotonic() + INFLIGHT_S
            self.emit_inflight(list(self.inflight.values()))  # a C-speed copy; the sender builds the rows

    async def main(self, cancel: Callable[[], bool], freeze_gc: bool = False) -> DriveSummary:
        spec = self.spec
        anchor_perf = time.perf_counter_ns()
        anchor_wall = time.time_ns()
        transport_cls = TRANSPORTS[spec.request_options.get("client", DEFAULT_TRANSPORT)]
        transport = transport_cls(spec.concurrency, spec.request_options.get("headers"))
        items = self.schedule()
        if freeze_gc:
            # Everything built so far (modules, client, request bodies) lives to the end. Collected
            # and frozen here, no collection walks it again: unfrozen, one full pass walked every
            # imported object and paused the loop for 15-30 ms mid-run (gc.callbacks in the driver
            # process; p99 5-13 ms at C=8). Then the automatic collector is off for the drive: its
            # young-generation passes walk every in-flight request's read lists, so their pauses grow
            # with the streams live (3 ms at C=256 on the 2-core box), and the drive makes almost no
            # cyclic garbage to collect (~1,000 objects per drive, whatever its length:
            # docs/performance.md). GC_VALVE bounds what a leak could pile up.
            gc.collect()
            gc.freeze()
            gc.disable()
        warm = [x for x in items if x[2]]
        measured = [x for x in items if not x[2]]
        aux = [asyncio.ensure_future(self.ticker()), asyncio.ensure_future(self.flusher())]
        pauses = _GcPauses()
        gc.callbacks.append(pauses)
        cpu0 = time.process_time()

        async def drive() -> None:
            if warm:
                await self.phase(transport, warm)
            await self.phase(transport, measured)

        task = asyncio.ensure_future(drive())

        async def watch() -> None:
            while not task.done():
                if cancel():
                    task.cancel()
                    return
                await asyncio.sleep(0.05)

        watcher = asyncio.ensure_future(watch())
        error = None
        try:
            await task
        except asyncio.CancelledError:
            self.cancelled = True
        except Exception as exc:  # a driver bug must still ship the records it has
            error = f"{type(exc).__name__}: {exc}"
        finally:
            watcher.cancel()
            for a in aux:
                a.cancel()
            await transport.close()
            self.flush()
            cpu_s = time.process_time() - cpu0
            gc.callbacks.remove(pauses)
            if freeze_gc:
                gc.enable()
        return DriveSummary(
            loop_impl=_loop_impl(), client_impl=transport.version,
            anchor_wall_ns=anchor_wall, anchor_perf_ns=anchor_perf, sent=self.sent, cancelled=self.cancelled,
            overhead={"send_lag": _summarise_ns(self.send_lag_ns), "loop_lag": _summarise_ns(self.loop_lag_ns),
                      "tick_ms": TICK_S * 1000, "cpu_s": round(cpu_s, 4), "gc": pauses.summary()},
            error=error,
        )


class _GcPauses:
    """gc.callbacks hook: how many collections of each generation ran during the drive and how
    long the longest one stopped the process (a collector pause delays every stamp behind it; in
    the driver process the collector is off, so these count only GC_VALVE's)."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.max_ns = [0, 0, 0]
        self.total_ns = 0
        self._t0 = 0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._t0 = time.perf_counter_ns()
            return
        gen, dt = info["generation"], time.perf_counter_ns() - self._t0
        self.count[gen] += 1
        self.max_ns[gen] = max(self.max_ns[gen], dt)
        self.total_ns += dt

    def summary(self) -> dict[str, Any]:
        return {"collections": self.count, "max_ms": [round(x / 1e6, 3) for x in self.max_ns],
                "total_ms": round(self.total_ns / 1e6, 3)}


def _write_wav(path: Path, pcm: bytes, rate: int) -> str:
    data = encode_wav(pcm, rate)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".wav.part")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return hashlib.sha256(data).hexdigest()


async def _what_arrived(resp: Any, unexpected: Unexpected) -> str:
    """The detail of a 2xx answer that is not the dialect's stream. A readable one (JSON, say) is
    read up to ERROR_BODY_LIMIT for an error message it may carry; a compressed body is left
    unread (its connection is dropped, not reused)."""
    if not unexpected.readable:
        return unexpected.detail
    body = await resp.read_error_body()
    try:
        obj = json.loads(body)
    except ValueError:
        obj = None
    if isinstance(obj, dict) and any(k in obj for k in ("error", "detail", "message")):
        return f"{unexpected.detail}: {_error_text(body)}"
    return unexpected.detail


def _error_text(body: bytes) -> str:
    """One line from an error body: JSON `detail` / `error.message`, else the text."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        if "detail" in obj:
            text = obj["detail"] if isinstance(obj["detail"], str) else json.dumps(obj["detail"])
        elif isinstance(obj.get("error"), dict):
            text = str(obj["error"].get("message", obj["error"]))
        elif "message" in obj:
            text = str(obj["message"])
    lines = text.splitlines()
    return (lines[0] if lines else "(empty body)")[:200]


def _loop_impl() -> str:
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
              freeze_gc: bool = False) -> DriveSummary:
    """Run a drive on a fresh event loop in the calling thread (what the driver process runs);
    `emit_raw` receives batches of undecoded RawResults, `emit_inflight` (at every flush) the
    results still streaming, which their requests keep appending to."""
    spec.validate()
    loop = new_event_loop()
    try:
        return loop.run_until_complete(_Run(spec, emit_raw, emit_inflight).main(cancel, freeze_gc))
    finally:
        try:  # finalise any async generator a library left open, while the loop still runs
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()


def drive_in_process(spec: DriveSpec, emit: Callable[[list[Any]], None],
                     cancel: Callable[[], bool] = lambda: False) -> DriveSummary:
    """`drive_raw` with batches decoded into records before `emit` (tests, tools)."""
    return drive_raw(spec, lambda raws: emit(decode_batch(spec, raws)), cancel)


# -- shipping batches from the driver process to the parent --------------------------------------
# One message = header (meta length, blob length) + pickled metadata + the reads' bytes back to
# back. Only the small metadata is pickled; the audio bytes go to the kernel by os.writev from a
# sender thread, which releases the GIL while they are copied, so the driver's event loop thread
# is never held up by a big pickle (a 6 MB batch took ~4-6 ms of GIL on the 2-core dev box).

_HEADER = struct.Struct("<QQ")
_IOV_MAX = 512


# RawResult as a flat tuple on the wire: attrgetter builds it in C, so the sender thread holds the
# GIL (which the driver's loop thread needs to stamp) for microseconds per batch, not the
# milliseconds a Python-level copy of each result took at C=128
_RAW_META = tuple(f.name for f in fields(RawResult) if f.name != "chunks")
_raw_meta = operator.attrgetter(*_RAW_META)


def _pack(kind: str, payload: Any) -> list[bytes]:
    blobs: list[bytes] = []
    if kind == "raw":
        metas = []
        for r in payload:
            metas.append((_raw_meta(r), list(map(len, r.chunks))))  # sizes; the bytes follow the metadata
            blobs += r.chunks
        payload = metas
    elif kind == "inflight":  # payload: InflightReporter.rows(); the new bytes travel like the reads above
        payload, blobs = payload
    meta = pickle.dumps((kind, payload), protocol=pickle.HIGHEST_PROTOCOL)
    return [_HEADER.pack(len(meta), sum(map(len, blobs))), meta, *blobs]


def _unpack(meta: memoryview, blob: memoryview) -> tuple[str, Any]:
    kind, payload = pickle.loads(meta)
    if kind in ("raw", "inflight"):
        off = 0

        def take(sizes: list[int]) -> list[bytes]:
            nonlocal off
            out = []
            for n in sizes:
                out.append(bytes(blob[off:off + n]))
                off += n
            return out

        if kind == "raw":
            payload = [RawResult(**dict(zip(_RAW_META, values)), chunks=take(sizes)) for values, sizes in payload]
        else:
            payload = [InflightRow(index, utt, warm, t_send, reads, first, last, stamps, take(sizes))
                       for index, utt, warm, t_send, reads, first, last, stamps, sizes in payload]
    return kind, payload


def _write_all(fd: int, bufs: list[bytes]) -> None:
    """os.writev until every byte is out (a pipe write may be partial)."""
    views = [memoryview(b) for b in bufs if len(b)]
    i = 0
    while i < len(views):
        n = os.writev(fd, views[i:i + _IOV_MAX])
        while n:
            if n >= len(views[i]):
                n -= len(views[i])
                i += 1
            else:
                views[i], n = views[i][n:], 0


class _Sender:
    """Writes messages to the parent's pipe on its own thread, in order."""

    def __init__(self, fd: int):
        self.fd = fd
        self.queue: queue_mod.SimpleQueue = queue_mod.SimpleQueue()
        self.thread = threading.Thread(target=self._run, name="driver-sender", daemon=True)
        self.thread.start()

    def put(self, kind: str, payload: Any) -> None:
        self.queue.put((kind, payload))

    def close(self) -> None:
        self.queue.put(None)
        self.thread.join()

    def _run(self) -> None:
        reporter = InflightReporter()
        while (item := self.queue.get()) is not None:
            kind, payload = item
            if kind == "inflight":  # results still being appended to: rows with the new reads
                payload = reporter.rows(payload)
            _write_all(self.fd, _pack(kind, payload))


def _child_main(spec: DriveSpec | None, conn: Any, cancel_evt: Any, report_inflight: bool = False,
                control: Any = None) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns Ctrl-C and asks via cancel_evt
    if control is not None:  # a warm driver (WarmDriver): imported, now waiting for its drive
        try:
            spec, report_inflight = control.recv()
        except EOFError:  # never used: the owner closed the control pipe
            conn.close()
            return
        control.close()
    assert spec is not None
    # when the loop thread wakes with data while the sender thread runs Python code, it waits for
    # the GIL up to the switch interval (5 ms by default) before the sender is made to yield
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    sender = _Sender(conn.fileno())
    try:
        summary = drive_raw(spec, lambda batch: sender.put("raw", batch), cancel_evt.is_set,
                            (lambda raws: sender.put("inflight", raws)) if report_inflight else None,
                            freeze_gc=True)  # the driver process only: freezing is for the process's life
    except BaseException as exc:  # report, never hang the parent
        sender.put("fatal", f"{type(exc).__name__}: {exc}")
    else:
        sender.put("summary", summary)
    finally:
        sender.close()
        conn.close()


def idle_priority() -> str:
    """Put the calling thread (only it: Linux scheduling is per thread) at idle priority.

    Decoding competes with the driver process for a core on a small box: on the 2-core dev box
    the parent decoding C=32..128 streams while the driver ran put the driver's p99 at 2-3 ms
    against 0.2-0.3 ms with decoding out of its way (bench/bench_timing_fidelity.py). A SCHED_IDLE
    thread runs only on otherwise idle CPU and is preempted at once when the driver wakes; it
    catches up as soon as a core is free (at the latest when the run ends). SCHED_BATCH at nice
    10 was measured too and left C=32..128 tails of 2-5 ms. The cost: on a host whose cores are
    all kept busy by other work, this thread waits for them. Measurement is unaffected (the
    driver's sender blocks on the full pipe, its loop does not), but results and the live view
    arrive late."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
        return "SCHED_IDLE"
    except (AttributeError, OSError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        return "nice 19"
    except (AttributeError, OSError):
        return "normal"


class WarmDriver:
    """A driver process started ahead of its run: spawned and imported (about a second: a fresh
    interpreter, numpy, uvloop, the dialects) while the engine starts or the previous run is
    being stored, then handed its DriveSpec when the run begins. Until then it only waits on
    its control pipe; from then on it is exactly the process DriverProcess would have spawned.
    Closing the control pipe (`discard`) makes an unused one exit."""

    def __init__(self) -> None:
        ctx = mp.get_context("spawn")
        self.recv, self.send = ctx.Pipe(duplex=False)
        self.cancel = ctx.Event()
        self._control_recv, self.control = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(target=_child_main, args=(None, self.send, self.cancel, False, self._control_recv),
                                name="driver-warm", daemon=True)
        self.proc.start()
        self._control_recv.close()

    def discard(self) -> None:
        self.control.close()
        self.proc.join(5.0)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5.0)
        self.recv.close()
        self.send.close()


_WARM: list[WarmDriver] = []


def prewarm() -> None:
    """Start a driver process for the next DriverProcess of this process to use (at most one
    waits at a time); the runner calls this before each engine launch and after each run."""
    if not any(w.proc.is_alive() for w in _WARM):
        discard_warm()
        _WARM.append(WarmDriver())


def discard_warm() -> None:
    """End the driver process prewarm() left waiting, if any."""
    while _WARM:
        _WARM.pop().discard()


class DriverProcess:
    """The driver in its own process ('spawn': a clean interpreter, no inherited loop or locks).

    Iterate `batches()` in the owner of the store; `summary` is set once the child is done. The
    pipe is read and decoded by a thread of this process at idle priority (`idle_priority`), so
    decoding never takes CPU from the driver; `consume(records) -> records`, if given, runs on that
    thread too (storing them, say), and `batches()` hands over what it returns, in order.
    `on_inflight(rows, now_ns)`, if given, gets the requests still streaming every INFLIGHT_S (on
    the same thread; `now_ns` is this process's perf_counter_ns, the driver's clock).
    """

    def __init__(self, spec: DriveSpec, consume: Callable[[list[Any]], list[Any]] | None = None,
                 on_inflight: Callable[[list[InflightRow], int], None] | None = None):
        spec.validate()
        self.spec = spec
        self._warm = next((w for w in _WARM if w.proc.is_alive()), None)
        if self._warm is not None:  # prewarm(): already imported, waiting for this spec
            _WARM.remove(self._warm)
            self._recv, self._send, self._cancel, self._proc = (self._warm.recv, self._warm.send, self._warm.cancel,
                                                                self._warm.proc)
        else:
            ctx = mp.get_context("spawn")
            self._recv, self._send = ctx.Pipe(duplex=False)
            self._cancel = ctx.Event()
            self._proc = ctx.Process(target=_child_main, args=(spec, self._send, self._cancel, on_inflight is not None),
                                     name=f"driver-{spec.run_id}", daemon=True)
        self.summary: DriveSummary | None = None
        self.fatal: str | None = None
        self.decoder_priority: str | None = None
        self._consume = consume
        self._on_inflight = on_inflight
        self._buf = bytearray()
        self._out: queue_mod.SimpleQueue = queue_mod.SimpleQueue()
        self._decoder = threading.Thread(target=self._decode_loop, name=f"decode-{spec.run_id}", daemon=True)

    def start(self) -> "DriverProcess":
        if self._warm is not None:
            self._warm.control.send((self.spec, self._on_inflight is not None))
            self._warm.control.close()
        else:
            self._proc.start()
        self._send.close()  # the child holds the write end now: EOF here means the child is gone
        self._decoder.start()
        return self

    def cancel(self) -> None:
        self._cancel.set()

    def batches(self, poll_s: float = 0.2) -> Iterator[list[Any]]:
        """Record batches as the child ships them, until it reports its summary or dies.

        An item leaves the queue only when handed over, so a KeyboardInterrupt in here (the
        caller then cancels and iterates again) loses nothing."""
        while True:
            try:
                kind, payload = self._out.get(timeout=poll_s)
            except queue_mod.Empty:
                continue
            if kind == "records":
                yield payload
                continue
            if kind == "summary":
                self.summary = payload
            elif kind == "fatal":
                self.fatal = payload
            else:  # the pipe closed without a summary: the child died
                self._proc.join(5.0)
                self.fatal = self.fatal or f"driver process exited with code {self._proc.exitcode}"
            return

    def _decode_loop(self) -> None:
        self.decoder_priority = idle_priority()
        try:
            while True:
                msg = self._next_message()
                if msg is None:
                    if not self._fill():
                        self._out.put(("eof", None))
                        return
                    continue
                kind, payload = msg
                if kind == "inflight":
                    if self._on_inflight is not None:
                        self._on_inflight(payload, time.perf_counter_ns())
                    continue
                if kind != "raw":
                    self._out.put((kind, payload))
                    return
                # decoding (SSE framing, JSON, base64, WAV) and WAV writing happen here, in the
                # store owner's process, so they never delay the driver's arrival stamps
                records = decode_batch(self.spec, payload)
                self._out.put(("records", self._consume(records) if self._consume else records))
        except Exception as exc:  # a decoder or consumer failure must end batches(), not hang it
            self._out.put(("fatal", f"handling the driver's batches failed: {type(exc).__name__}: {exc}"))

    def _next_message(self) -> tuple[str, Any] | None:
        """Take the first complete message out of the buffer, else None."""
        buf = self._buf
        if len(buf) < _HEADER.size:
            return None
        meta_len, blob_len = _HEADER.unpack_from(buf)
        end_meta = _HEADER.size + meta_len
        size = end_meta + blob_len
        if len(buf) < size:
            return None
        view = memoryview(buf)
        try:
            msg = _unpack(view[_HEADER.size:end_meta], view[end_meta:size])
        finally:
            view.release()
        del buf[:size]
        return msg

    def _fill(self) -> bool:
        """Read what the pipe holds into the buffer (blocking); False at EOF (the child is gone)."""
        data = os.read(self._recv.fileno(), 8 << 20)
        self._buf += data
        return bool(data)

    def join(self, timeout: float = 10.0) -> None:
        self._proc.join(timeout)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5.0)
        if self._decoder.ident is not None:  # the pipe is at EOF once the child is gone: the thread ends
            self._decoder.join()  # no timeout: the caller may use what `consume` uses once this returns
        self._recv.close()
