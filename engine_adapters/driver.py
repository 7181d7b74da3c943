"""The streaming load driver: closed-loop concurrency over an ordered request list, in its own
process with its own event loop, so nothing else in the console can delay its timestamps.

Timing: `t_send_ns` is stamped just before the request is handed to the client; every body
read is stamped with `perf_counter_ns()` before any parsing and events take the stamp of the
read that delivered their first byte (see dialects/base.py).

Closed loop: C workers each take the next request as soon as their previous one ends, so exactly
C requests are in flight until the list is exhausted. Warmup requests (flagged `is_warmup`) run
first, as their own closed-loop phase, so they never overlap measured requests.

Every request that was sent yields exactly one RequestRecord, whatever happens (timeout,
transport failure, cancellation), so requests sent = requests stored.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import multiprocessing as mp
import os
import queue as queue_mod
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from data.records import AudioFileRecord, ChunkRecord, RequestRecord
from engine_adapters.dialects import get_dialect
from engine_adapters.dialects.wav import encode_wav
from engine_adapters.transport import TRANSPORTS, TransportError

TICK_S = 0.010  # event-loop lag ticker period
FLUSH_S = 0.100  # how often the child ships a batch of records
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class RequestSpec:
    utt_id: str
    text: str
    prompt_wav: Path | None
    prompt_text: str | None = None


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
        get_dialect(self.dialect)


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

    def __init__(self, spec: DriveSpec, emit: Callable[[list[Any]], None]):
        self.spec = spec
        self.emit = emit
        self.dialect = get_dialect(spec.dialect)
        opts = spec.request_options
        self.url = spec.url.rstrip("/") + opts.get("path", self.dialect.path)
        self.pending: list[Any] = []
        self.send_lag_ns: list[int] = []
        self.loop_lag_ns: list[int] = []
        self.sent = 0
        self.cancelled = False
        self.writer_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wav-writer")
        self.finalisers: list[asyncio.Future] = []
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

    async def one(self, transport: Any, index: int, req: RequestSpec, warm: bool) -> None:
        spec = self.spec
        parser = self.dialect.new_parser(spec.request_options)
        rec = RequestRecord(run_id=spec.run_id, request_index=index, utt_id=req.utt_id, is_warmup=warm,
                            outcome="cancelled", t_send_ns=0)
        chunks: list[ChunkRecord] = []
        pcm_parts: list[bytes] = []
        nbytes = 0

        def stamp_send() -> None:
            rec.t_send_ns = time.perf_counter_ns()

        def take(events: list) -> None:
            for ev in events:
                chunks.append(ChunkRecord(spec.run_id, index, len(chunks), ev.t_arrival_ns, ev.kind,
                                          ev.samples, ev.payload_bytes, ev.server_emit_ns))
                if ev.pcm:
                    pcm_parts.append(ev.pcm)

        failure: tuple[str, str] | None = None
        try:
            async with asyncio.timeout(spec.timeout_s):
                async with transport.post(self.url, self._bodies[req.utt_id], stamp_send) as resp:
                    rec.http_status = resp.status
                    if not 200 <= resp.status < 300:
                        body = await resp.read_error_body()
                        rec.t_end_ns = time.perf_counter_ns()
                        failure = ("http_status", f"HTTP {resp.status}: {_error_text(body)}")
                    else:
                        async for data in resp.chunks():
                            t = time.perf_counter_ns()
                            if rec.t_first_byte_ns is None:
                                rec.t_first_byte_ns = t
                            nbytes += len(data)
                            take(parser.feed(data, t))
                            if parser.done:
                                break
                        else:
                            parser.eof()
                        rec.t_end_ns = time.perf_counter_ns()
        except TransportError as exc:
            failure = ("transport", str(exc))
        except TimeoutError:
            failure = ("timeout", f"no completion within {spec.timeout_s:g} s")
        except asyncio.CancelledError:
            failure = ("cancelled", "run cancelled while the request was in flight")
            self.cancelled = True
            raise
        finally:
            if rec.t_send_ns == 0:
                rec.t_send_ns = time.perf_counter_ns()
            if rec.t_end_ns is None:
                rec.t_end_ns = time.perf_counter_ns()
            st = parser.state
            outcome, detail = parser.outcome()
            if st.failure is None and failure is not None:
                outcome, detail = failure
            elif failure is not None and failure[0] == "http_status":
                outcome, detail = failure
            rec.outcome, rec.error_detail = outcome, detail
            rec.t_first_audio_ns, rec.t_last_audio_ns = st.t_first_audio_ns, st.t_last_audio_ns
            rec.audio_samples, rec.sample_rate = st.samples, st.sample_rate
            rec.audio_chunks, rec.events, rec.bytes_received = st.audio_chunks, st.events, nbytes
            rec.text = st.text
            self.sent += 1
            self.finalisers.append(asyncio.ensure_future(self.finalise(rec, chunks, pcm_parts)))

    async def finalise(self, rec: RequestRecord, chunks: list[ChunkRecord], pcm_parts: list[bytes]) -> None:
        """Write the request's WAV off the event loop, then queue its records."""
        audio: AudioFileRecord | None = None
        if rec.audio_samples and rec.sample_rate:
            rel = audio_relpath(rec.run_id, rec.request_index, rec.utt_id)
            loop = asyncio.get_running_loop()
            sha = await loop.run_in_executor(self.writer_pool, _write_wav, self.spec.artifacts_dir / rel,
                                             b"".join(pcm_parts), rec.sample_rate)
            rec.audio_path, rec.audio_sha256 = rel, sha
            audio = AudioFileRecord(sha, rel, rec.run_id, rec.request_index, rec.sample_rate, rec.audio_samples)
        self.pending.append(rec)
        self.pending.extend(chunks)
        if audio:
            self.pending.append(audio)

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
        loop = asyncio.get_running_loop()
        due = loop.time() + TICK_S
        while True:
            await asyncio.sleep(max(0.0, due - loop.time()))
            late = loop.time() - due
            self.loop_lag_ns.append(max(0, int(late * 1e9)))
            due += TICK_S * (1 + int(late // TICK_S))

    async def flusher(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_S)
            self.flush()

    def flush(self) -> None:
        if self.pending:
            batch, self.pending = self.pending, []
            self.emit(batch)

    async def main(self, cancel: Callable[[], bool]) -> DriveSummary:
        spec = self.spec
        anchor_perf = time.perf_counter_ns()
        anchor_wall = time.time_ns()
        transport_cls = TRANSPORTS[spec.request_options.get("client", "httpx")]
        transport = transport_cls(spec.concurrency, spec.request_options.get("headers"))
        items = self.schedule()
        warm = [x for x in items if x[2]]
        measured = [x for x in items if not x[2]]
        aux = [asyncio.ensure_future(self.ticker()), asyncio.ensure_future(self.flusher())]

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
            await asyncio.gather(*self.finalisers, return_exceptions=True)
            await transport.close()
            self.writer_pool.shutdown(wait=True)
            self.flush()
        return DriveSummary(
            loop_impl=_loop_impl(), client_impl=transport.version,
            anchor_wall_ns=anchor_wall, anchor_perf_ns=anchor_perf, sent=self.sent, cancelled=self.cancelled,
            overhead={"send_lag": _summarise_ns(self.send_lag_ns), "loop_lag": _summarise_ns(self.loop_lag_ns),
                      "tick_ms": TICK_S * 1000},
            error=error,
        )


def _write_wav(path: Path, pcm: bytes, rate: int) -> str:
    data = encode_wav(pcm, rate)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".wav.part")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return hashlib.sha256(data).hexdigest()


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


def drive_in_process(spec: DriveSpec, emit: Callable[[list[Any]], None],
                     cancel: Callable[[], bool] = lambda: False) -> DriveSummary:
    """Run a drive on a fresh event loop in the calling thread (what the driver process runs)."""
    spec.validate()
    loop = new_event_loop()
    try:
        return loop.run_until_complete(_Run(spec, emit).main(cancel))
    finally:
        loop.close()


def _child_main(spec: DriveSpec, out: Any, cancel_evt: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent owns Ctrl-C and asks via cancel_evt
    try:
        summary = drive_in_process(spec, lambda batch: out.put(("records", batch)), cancel_evt.is_set)
    except BaseException as exc:  # report, never hang the parent
        out.put(("fatal", f"{type(exc).__name__}: {exc}"))
        return
    out.put(("summary", summary))


class DriverProcess:
    """The driver in its own process ('spawn': a clean interpreter, no inherited loop or locks).

    Iterate `batches()` in the owner of the store; `summary` is set once the child is done.
    """

    def __init__(self, spec: DriveSpec):
        spec.validate()
        self.spec = spec
        ctx = mp.get_context("spawn")
        self._queue = ctx.Queue()
        self._cancel = ctx.Event()
        self._proc = ctx.Process(target=_child_main, args=(spec, self._queue, self._cancel),
                                 name=f"driver-{spec.run_id}", daemon=True)
        self.summary: DriveSummary | None = None
        self.fatal: str | None = None

    def start(self) -> "DriverProcess":
        self._proc.start()
        return self

    def cancel(self) -> None:
        self._cancel.set()

    def batches(self, poll_s: float = 0.2) -> Iterator[list[Any]]:
        """Record batches as the child ships them, until it reports its summary or dies."""
        while True:
            try:
                kind, payload = self._queue.get(timeout=poll_s)
            except queue_mod.Empty:
                if not self._proc.is_alive():
                    # drain anything shipped right before exit
                    try:
                        kind, payload = self._queue.get(timeout=1.0)
                    except queue_mod.Empty:
                        self.fatal = self.fatal or f"driver process exited with code {self._proc.exitcode}"
                        return
                else:
                    continue
            if kind == "records":
                yield payload
            elif kind == "summary":
                self.summary = payload
                return
            else:
                self.fatal = payload
                return

    def join(self, timeout: float = 10.0) -> None:
        self._proc.join(timeout)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5.0)
