"""The reference engine's HTTP server (aiohttp): health, models, stats and streaming chat completions.

Life cycle: the port is bound first and ``/health`` answers 503 while the engine
warms up (espeak voice calibration, CUDA set-up), then 200. A ``fatal`` fault
turns it to 503 for good, like a crashed engine whose API process still runs.

Each chat request is validated completely before any byte of the response is
written, so malformed requests get a 4xx in the dialect's error shape. Its audio
is rendered on a worker thread while it waits for a batch slot, and cut into the
stream's chunks already encoded for the wire (pre-rendered: base64 and WAV headers
are not the event loop's work). The scheduler then releases the audio chunk by
chunk; each chunk is one ``write`` call, with ``emit_ns`` stamped immediately before it.

Emission. A plain stream (``delivery = "stream"``, no fault to inject) is written by the
scheduler's step itself: the stream's sink (``_DirectStream``) builds the event from its
template and the pre-rendered payload and writes it straight to the connection, so a step
emits its whole batch in one pass with no task wake-up per chunk. Faults and whole-response
delivery keep the per-stream task path (``_stream``'s loop over ``seq.events``). Measured in
docs/performance.md: the task path fell behind its schedule at 128 streams on a 2-core box.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import signal
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
from aiohttp import web
from aiohttp.log import access_logger

from engine_adapters.identity import LAUNCH_ID_HEADER
from engine_adapters.reference import realtime
from engine_adapters.reference.chat_request import REALTIME, RequestError, SpeechRequest, chat_dialect, parse_request
from engine_adapters.reference.config import EngineConfig
from engine_adapters.reference.encoders import ENCODERS, AudioTemplate, Frame, StreamContext, Usage, stamp
from engine_adapters.reference.espeak import EspeakSynth
from engine_adapters.reference.faults import (
    EMIT_NS_FAULT_SHIFT, FAULT_HEADER, LABEL_FAULTS, PCM_FAULT_RATE, WAV_FAULT_RATE, FaultHeaderError, draw_fault,
    forced_fault,
)
from engine_adapters.reference.gpu import CudaStepWorker, CudaUnavailable, check_cuda
from engine_adapters.reference.profiles import (
    CODEC_FRAME_RATE, OUTPUT_SAMPLE_RATE, SAMPLES_PER_FRAME, Profile, ProfileError, get_profile,
)
from engine_adapters.reference.tensors import DUMP_HEADER, DumpNameError, dump_name, intermediates, write_dump
from engine_adapters.reference.scheduler import Admitted, BatchScheduler, Chunk, Failed, Sequence
from engine_adapters.reference.server_metrics import EngineMetrics
from engine_adapters.reference.synthesis import (
    DEFAULT_VOICE, LruCache, PromptAudio, PromptError, Rendered, Synthesizer, cap_text, decode_prompt, stable_seed,
)
from engine_adapters.reference.voice import CALIBRATION_TEXT, calibrate_cached

MAX_BODY_BYTES = 64 * 1024 * 1024
# the event loop waits at most this long for the GIL when a parse or render thread holds it
# (Python's default is 5 ms): a step's writes start on time while requests are being rendered
SWITCH_INTERVAL_S = 0.0005
PAYLOAD_CACHE_BYTES = 128 * 1024 * 1024  # pre-rendered chunks of recent waveforms (a test set's worth)
# the listen queue: uvicorn's default, which vLLM-Omni serves with (docs/engines.md). aiohttp's
# own default of 128 made a closed-loop opening of C >= 256 connections wait 1-3 s for SYN
# retransmits, or be reset, before the engine saw them
LISTEN_BACKLOG = 2048


class ReferenceEngineError(RuntimeError):
    """The engine cannot start as configured; the message is one line for the user."""


@dataclass(slots=True)
class _Outcome:
    """How one stream ended, for /stats."""

    completed: int = 0
    faults: int = 0
    client_gone: int = 0
    rejected: int = 0


class EmitLog:
    """JSON lines, one per audio write, for dialects whose frames cannot carry ``emit_ns``."""

    def __init__(self, path: Path) -> None:
        self._file: IO[str] = open(path, "a", encoding="utf-8")

    def record(self, request_id: str, chunk: int, emit_ns: int, samples: int, nbytes: int) -> None:
        # Flushed per line (after the audio write, so the stamp is unaffected): readers can
        # rely on a chunk's line existing once the client has received that chunk's end.
        self._file.write(json.dumps({"request_id": request_id, "chunk": chunk, "emit_ns": emit_ns,
                                     "samples": samples, "bytes": nbytes}) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def _log(message: str) -> None:
    print(f"[reference-engine] {message}", file=sys.stderr, flush=True)


class ReferenceEngine:
    """Engine state plus the aiohttp handlers."""

    def __init__(self, config: EngineConfig, profile: Profile) -> None:
        self.config = config
        self.profile = profile
        self.chat_dialect = chat_dialect(config.dialect)  # a realtime server answers chat as vllm-omni does
        self.encoder = ENCODERS[self.chat_dialect]()
        self.state = "starting"
        self.dead_reason = ""
        self.started_at = int(time.time())
        self.synth: Synthesizer | None = None
        self.gpu: CudaStepWorker | None = None
        self.scheduler = BatchScheduler(profile, step_work=self._gpu_step)
        # Two workers: espeak itself is serialised by its own lock, but prompt analysis,
        # resampling and degradation of another request can run beside it.
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="reference-render")
        self.parser = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reference-parse")
        self.emit_log = EmitLog(config.emit_log) if config.emit_log else None
        self.outcomes = _Outcome()
        self.metrics = EngineMetrics(self.chat_dialect, config.model_name, profile.metrics_ttfa_skew_s)
        self._payloads: LruCache[tuple[bytes, str], tuple[bytes, ...]] = LruCache(
            PAYLOAD_CACHE_BYTES, size_of=lambda v: sum(map(len, v)))

    # ---- life cycle -------------------------------------------------------------------------

    def _warm_up_blocking(self) -> None:
        espeak = EspeakSynth.shared()
        first = espeak.synthesize(CALIBRATION_TEXT, DEFAULT_VOICE)
        again = espeak.synthesize(CALIBRATION_TEXT, DEFAULT_VOICE)
        if not np.array_equal(first, again):
            raise ReferenceEngineError("espeak-ng output is not reproducible in this process; refusing to serve")
        self.synth = Synthesizer(espeak, calibrate_cached(espeak))
        if self.config.device == "cuda":
            self.gpu = CudaStepWorker(self.profile.cuda_busy_fraction, self.profile.max_num_seqs)

    async def warm_up(self) -> None:
        """Calibrate voices (and the GPU) off the event loop, then report healthy."""
        started = time.perf_counter()
        await asyncio.get_running_loop().run_in_executor(self.executor, self._warm_up_blocking)
        self.scheduler.start()
        self.state = "ready"
        gpu = f", gpu={self.gpu.stats.device_name} ({self.gpu.stats.matmul_ms:.3f} ms/matmul)" if self.gpu else ""
        _log(f"ready in {time.perf_counter() - started:.1f}s: dialect={self.config.dialect} "
             f"profile={self.profile.name} device={self.config.device}{gpu}")

    def die(self, reason: str) -> None:
        """Enter the dead state: /health 503, every stream and later request fails."""
        if self.state == "dead":
            return
        self.state = "dead"
        self.dead_reason = reason
        self.scheduler.fail_all(f"engine died: {reason}")
        _log(f"dead: {reason}")

    async def close(self) -> None:
        await self.scheduler.stop()
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.parser.shutdown(wait=False, cancel_futures=True)
        if self.gpu is not None:
            self.gpu.close()
        if self.emit_log is not None:
            self.emit_log.close()

    async def _gpu_step(self, active: int, step_s: float) -> None:
        if self.gpu is not None:
            await self.gpu.step(active, step_s)

    # ---- small endpoints --------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_get("/health", self.health)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/stats", self.stats)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_post("/v1/chat/completions", self.chat)
        if self.config.dialect == REALTIME:  # vllm-omni's duplex route and its alias (reference/realtime.py)
            app.router.add_get("/v1/realtime", self.realtime)
            app.router.add_get("/v1/duplex", self.realtime)
        return app

    async def realtime(self, request: web.Request) -> web.StreamResponse:
        return await realtime.handle(self, request)

    async def health(self, request: web.Request) -> web.Response:
        """200 once ready, else 503; with the launch id when one was given, so the console can
        tell this process from a stale server on its port (docs/engines.md)."""
        body: dict[str, Any] = {"status": "healthy" if self.state == "ready" else self.state}
        if self.dead_reason:
            body["reason"] = self.dead_reason
        headers = {}
        if self.config.launch_id:
            body["launch_id"] = self.config.launch_id
            headers[LAUNCH_ID_HEADER] = self.config.launch_id
        return web.json_response(body, status=200 if self.state == "ready" else 503, headers=headers)

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{
            "id": self.config.model_name, "object": "model", "created": self.started_at,
            "owned_by": "omni-campaign-console", "root": self.config.model_name,
            "reference_engine": {"dialect": self.config.dialect, "device": self.config.device,
                                 "profile": self.profile.summary()},
        }]})

    async def stats(self, request: web.Request) -> web.Response:
        """Counters, and the schedule slip of the chunks written in ``?since_ns=&until_ns=``
        (perf_counter_ns, this host's CLOCK_MONOTONIC; default: since start); with
        ``&emits=ns,ns,...`` also those chunks' own slip, write gap and queued flag."""
        try:
            since = int(request.query.get("since_ns", 0))
            until = int(request.query["until_ns"]) if "until_ns" in request.query else None
            at = [int(x) for x in request.query.get("emits", "").split(",") if x]
        except ValueError:
            return web.json_response({"error": "since_ns, until_ns and emits must be integers (perf_counter_ns)"},
                                     status=400)
        s = self.scheduler.stats
        body: dict[str, Any] = {
            "state": self.state, "profile": self.profile.name, "active": self.scheduler.active,
            "waiting": self.scheduler.waiting, "steps": s.steps, "busy_s": round(s.busy_s, 6),
            "admitted": s.admitted, "finished": s.finished, "cancelled": s.cancelled, "failed": s.failed,
            "max_active_seen": s.max_active_seen, "audio_s": s.audio_samples / OUTPUT_SAMPLE_RATE,
            "streams": {"completed": self.outcomes.completed, "faults": self.outcomes.faults,
                        "client_gone": self.outcomes.client_gone, "rejected": self.outcomes.rejected},
            "schedule": self.scheduler.schedule.summary(since, until),
        }
        if at:  # chosen chunks by their emit stamps (a bench's latest events)
            body["schedule"]["at"] = {str(e): v for e, v in self.scheduler.schedule.at(at).items()}
        if self.gpu is not None:
            g = self.gpu.stats
            body["gpu"] = {"device": g.device_name, "matmul_ms": g.matmul_ms, "steps": g.steps,
                           "matmuls": g.matmuls, "gpu_busy_s": round(g.gpu_busy_s, 6),
                           "matmuls_by_batch": {str(k): v for k, v in sorted(g.per_batch_matmuls.items())}}
        return web.json_response(body)

    async def prometheus(self, request: web.Request) -> web.Response:
        """The engine's own figures in its dialect's Prometheus families (server_metrics.py); 404
        for a dialect whose engine publishes none."""
        body = self.metrics.render()
        if body is None:
            return web.Response(status=404, text=f"the {self.config.dialect} dialect publishes no metrics\n")
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    def _error(self, status: int, message: str, err_type: str) -> web.Response:
        self.outcomes.rejected += 1
        return web.Response(status=status, body=self.encoder.error_body(status, message, err_type),
                            content_type="application/json")

    # ---- chat completions -------------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        arrival_ns = time.perf_counter_ns()  # the request's arrival for /metrics (server_metrics.py)
        if self.state != "ready":
            reason = "engine is starting" if self.state == "starting" else f"engine is dead: {self.dead_reason}"
            return self._error(503, reason, "ServiceUnavailableError")
        try:
            raw = await request.read()
            forced, forced_kind = forced_fault(request.headers.get(FAULT_HEADER))
            dump = self._dump_name(request.headers.get(DUMP_HEADER))
            # JSON, base64 and the prompt's decoding (~1 ms for a 1.5 s prompt) off the loop: a
            # burst of 1,024 requests parsed on it held up the running batch's steps and /stats
            req, prompt, input_audio_s = await asyncio.get_running_loop().run_in_executor(
                self.parser, self._parse, raw)
        except RequestError as exc:
            return self._error(exc.status, exc.message, "BadRequestError")
        except (PromptError, FaultHeaderError, DumpNameError) as exc:
            return self._error(400, str(exc), "BadRequestError")
        except web.HTTPRequestEntityTooLarge:
            return self._error(413, f"request body larger than {MAX_BODY_BYTES} bytes", "BadRequestError")
        digest = prompt.digest if prompt else ""
        fault = forced_kind if forced else draw_fault(
            self.profile.fault_rates, stable_seed("fault", req.seed, req.text, digest))
        if fault == "http_500":
            self.outcomes.faults += 1
            self.metrics.fail(None, "stage_error")
            return self._error(500, "injected fault: internal server error before the stream", "InternalServerError")

        assert self.synth is not None
        loop = asyncio.get_running_loop()
        rendered = loop.run_in_executor(self.executor, self._render, req.text, prompt, req.seed, req.max_tokens,
                                        req.audio_format, dump)
        seq = self.scheduler.submit(rendered, input_audio_s)
        try:
            return await self._stream(request, req, prompt, seq, fault, arrival_ns)
        except (asyncio.CancelledError, ConnectionError):
            self.outcomes.client_gone += 1
            raise
        finally:
            self.scheduler.cancel(seq)

    def _parse(self, raw: bytes) -> tuple[SpeechRequest, PromptAudio | None, float]:
        """The request, its voice prompt and its thinker input audio seconds (a worker thread's job)."""
        req = parse_request(raw, self.chat_dialect)
        prompt = decode_prompt(req.prompt_wav) if req.prompt_wav is not None else None
        input_audio_s = sum(prompt.duration_s if prompt is not None and a is req.prompt_wav
                            else decode_prompt(a).duration_s for a in req.input_audio)
        return req, prompt, input_audio_s

    def _dump_name(self, header: str | None) -> str | None:
        """The tensor-dump folder a request asks for; refused when this engine dumps nothing."""
        name = dump_name(header)
        if name is not None and self.config.dump_tensors is None:
            raise DumpNameError(f"{DUMP_HEADER}: this engine was not started with --dump-tensors DIR")
        return name

    def _render(self, text: str, prompt: PromptAudio | None, seed: int, max_tokens: int | None,
                audio_format: str, dump: str | None = None) -> Rendered:
        """The waveform and its chunks pre-rendered for the wire (a worker thread's job). The
        chunks are cached by the waveform's digest: identical audio is encoded once. With `dump`,
        the request's intermediate arrays are written first (tensors.py)."""
        assert self.synth is not None
        r = self.synth.render(text, prompt, seed, self.profile, max_tokens)
        if dump is not None and self.config.dump_tensors is not None:
            voice = (r.voice.rate, r.voice.pitch, r.voice.range)
            write_dump(self.config.dump_tensors, dump, intermediates(r.samples, voice, self.profile))
        if self.profile.delivery != "stream":
            return r
        step, samples = self.profile.chunk_samples, r.samples
        # numpy's stubs give ndarray the buffer protocol only for Python >= 3.12
        key = (hashlib.blake2b(np.ascontiguousarray(samples), digest_size=16).digest(), audio_format)  # type: ignore[arg-type]
        payloads = self._payloads.get_or_compute(key, lambda: tuple(
            self.encoder.audio_payload(samples[i:i + step], audio_format) for i in range(0, len(samples), step)))
        return dataclasses.replace(r, payloads=payloads)

    async def _write(self, resp: web.StreamResponse, ctx: StreamContext, frame: Frame, chunk: int,
                     due_ns: int = 0) -> None:
        data, emit_ns = stamp(frame, ctx.emit_shift)
        await resp.write(data)
        self.scheduler.schedule.chunk(emit_ns, due_ns, time.perf_counter_ns())
        if frame.audio_samples:
            self.metrics.audio(ctx.request_id, emit_ns, frame.audio_samples)
        if self.emit_log is not None and frame.audio_samples:
            self.emit_log.record(ctx.request_id, chunk, emit_ns, frame.audio_samples, len(data))

    async def _end_with_error(self, request: web.Request, resp: web.StreamResponse, ctx: StreamContext,
                              message: str) -> web.StreamResponse:
        """Fail the stream the way this dialect's engine does."""
        if self.encoder.error_aborts:
            return self._abort(request, resp)
        for frame in self.encoder.stream_error(ctx, message) or []:
            await self._write(resp, ctx, frame, -1)
        await resp.write_eof()
        return resp

    @staticmethod
    def _abort(request: web.Request, resp: web.StreamResponse) -> web.StreamResponse:
        """Drop the TCP connection mid-body (no terminating chunk)."""
        resp.force_close()
        if request.transport is not None:
            request.transport.abort()
        return resp

    async def _inject(self, fault: str, request: web.Request, resp: web.StreamResponse, ctx: StreamContext,
                      seq: Sequence) -> bool:
        """Apply a mid-stream fault; True when the stream is over."""
        self.outcomes.faults += 1
        _log(f"{ctx.request_id}: injecting fault {fault}")
        if fault == "stall":
            await asyncio.sleep(self.profile.stall_s)
            return False
        self.scheduler.cancel(seq)
        if fault == "drop":
            self._abort(request, resp)
        elif fault == "fatal":
            self.die("injected fatal fault")
            await self._end_with_error(request, resp, ctx, "engine died: injected fatal fault")
        else:
            await self._end_with_error(request, resp, ctx, "injected fault: error during generation")
        return True

    def _usage(self, req: SpeechRequest, prompt: PromptAudio | None, samples: int) -> Usage:
        prompt_tokens = math.ceil(len(req.text) / 4)
        if prompt is not None:
            prompt_tokens += math.ceil(prompt.duration_s * CODEC_FRAME_RATE)
        return Usage(prompt_tokens=prompt_tokens, completion_tokens=math.ceil(samples / SAMPLES_PER_FRAME))

    async def _whole(self, request: web.Request, req: SpeechRequest, prompt: PromptAudio | None,
                     seq: Sequence, fault: str | None, ctx: StreamContext) -> web.StreamResponse:
        """`stream: false`: wait for the whole audio, then one JSON response holding it."""
        held: list[np.ndarray] = []
        while True:
            event = await seq.events.get()
            if isinstance(event, Failed):
                self.outcomes.faults += 1
                return self._error(500, event.message, "InternalServerError")
            if isinstance(event, Chunk):
                held.append(event.samples)
                if event.last:
                    break
        if fault == "stall":
            self.outcomes.faults += 1
            await asyncio.sleep(self.profile.stall_s)
        elif fault is not None:
            self.outcomes.faults += 1
            if fault == "drop":
                resp = web.StreamResponse(status=200)
                await resp.prepare(request)
                return self._abort(request, resp)
            if fault == "fatal":
                self.die("injected fatal fault")
            return self._error(500, f"injected fault: {fault}", "InternalServerError")
        samples = np.concatenate(held) if held else np.zeros(0, np.int16)
        finish = "length" if seq.rendered.result().truncated else "stop"
        body = self.encoder.whole(ctx, cap_text(req.text, req.max_tokens)[0], samples, finish,
                                  self._usage(req, prompt, len(samples)))
        self.outcomes.completed += 1
        self.metrics.finish(ctx.request_id, time.perf_counter_ns(), samples=len(samples), reason=finish)
        return web.Response(body=body, content_type="application/json", headers={"X-Request-Id": ctx.request_id})

    async def _stream(self, request: web.Request, req: SpeechRequest, prompt: PromptAudio | None,
                      seq: Sequence, fault: str | None, arrival_ns: int) -> web.StreamResponse:
        label = fault if fault in LABEL_FAULTS else None  # a misbehaviour: the stream still completes
        ctx = StreamContext(request_id=f"chatcmpl-{uuid.uuid4().hex}", created=int(time.time()),
                            model=self.config.model_name, audio_format=req.audio_format,
                            include_usage=req.include_usage,
                            emit_shift=EMIT_NS_FAULT_SHIFT if label == "emit_ns_overflow" else 0,
                            wav_rate=WAV_FAULT_RATE if label == "wav_rate" else OUTPUT_SAMPLE_RATE)
        self.metrics.begin(ctx.request_id, arrival_ns)
        try:
            return await self._respond(request, req, prompt, seq, fault, label, ctx)
        except (asyncio.CancelledError, ConnectionError):
            self.metrics.fail(ctx.request_id, "client_disconnect")
            raise
        finally:  # a request that did not complete (a no-op for one that did)
            self.metrics.fail(ctx.request_id, "stage_error")

    async def _respond(self, request: web.Request, req: SpeechRequest, prompt: PromptAudio | None,
                       seq: Sequence, fault: str | None, label: str | None,
                       ctx: StreamContext) -> web.StreamResponse:
        if label:
            self.outcomes.faults += 1
            _log(f"{ctx.request_id}: injecting fault {label}")
        if not req.stream:
            return await self._whole(request, req, prompt, seq, None if label else fault, ctx)
        headers = {"Cache-Control": "no-cache", "X-Request-Id": ctx.request_id}
        pcm_rate = PCM_FAULT_RATE if label == "pcm_rate" else OUTPUT_SAMPLE_RATE
        if self.encoder.content_type == "audio/pcm":
            headers.update({"X-Audio-Sample-Rate": str(pcm_rate), "X-Audio-Encoding": "s16le",
                            "X-Audio-Channels": "1"})
        resp = web.StreamResponse(status=200, headers=headers)
        resp.content_type = self.encoder.content_type
        if label == "pcm_rate" and self.encoder.content_type == "audio/pcm":
            resp.headers["Content-Type"] = f"audio/pcm; rate={pcm_rate}"
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        if self.profile.delivery == "stream" and fault is None and request.transport is not None:
            return await self._stream_direct(request, req, prompt, seq, ctx, resp)

        whole = self.profile.delivery == "whole"
        held: list[np.ndarray] = []
        written = 0
        total = 0
        pending_fault = None if label else fault  # a misbehaviour is in ctx, not injected
        while True:
            event = await seq.events.get()
            if isinstance(event, Admitted):
                for frame in self.encoder.text(ctx, cap_text(req.text, req.max_tokens)[0]):
                    await self._write(resp, ctx, frame, -1)
                continue
            if isinstance(event, Failed):
                self.outcomes.faults += 1
                return await self._end_with_error(request, resp, ctx, event.message)
            assert isinstance(event, Chunk)
            samples = event.samples
            if whole:
                held.append(samples)
                if not event.last:
                    continue
                samples = np.concatenate(held)
            if pending_fault and written >= self.profile.fault_after_chunks:
                if await self._inject(pending_fault, request, resp, ctx, seq):
                    return resp
                pending_fault = None
            empty = self.profile.empty_audio_deltas
            finish = ("length" if seq.rendered.result().truncated else "stop") if event.last else "stop"
            if empty and written == 0:
                for frame in self.encoder.empty_audio(ctx, None):
                    await self._write(resp, ctx, frame, -1)
            if len(samples):
                for frame in self.encoder.audio(ctx, samples, "stop" if empty else finish):
                    await self._write(resp, ctx, frame, written, event.due_ns)
                written += 1
                total += len(samples)
            if event.last:
                if empty:
                    for frame in self.encoder.empty_audio(ctx, finish):
                        await self._write(resp, ctx, frame, -1)
                break
        if pending_fault:  # the audio was shorter than fault_after_chunks: fail at the end instead
            if await self._inject(pending_fault, request, resp, ctx, seq):
                return resp
        finish = "length" if seq.rendered.result().truncated else "stop"
        for frame in self.encoder.finish(ctx, finish, self._usage(req, prompt, total)):
            await self._write(resp, ctx, frame, -1)
        # counted once its last frame is written, before the body's terminator: a client that has its
        # last event and hangs up does not turn it into a failure (docs/engines.md, "Engine metrics")
        self.outcomes.completed += 1
        self.metrics.finish(ctx.request_id, time.perf_counter_ns(), reason=finish)
        await resp.write_eof()
        return resp


    async def _stream_direct(self, request: web.Request, req: SpeechRequest, prompt: PromptAudio | None,
                             seq: Sequence, ctx: StreamContext, resp: web.StreamResponse) -> web.StreamResponse:
        """A plain stream written by the scheduler's steps (see the module docstring): wait
        until its sink has written the last event, then end the chunked body."""
        await resp.write(b"")  # the status line and headers go out now: the sink writes after them
        if request.transport is None:
            raise ConnectionResetError("the client went away before the stream started")
        direct = _DirectStream(self, req, prompt, seq, ctx, request.transport)
        seq.attach(direct.event)
        ended = await direct.done  # raises ConnectionResetError if the client went away
        if ended == "abort":
            return self._abort(request, resp)
        if ended == "completed":  # counted before the terminator, as above
            self.outcomes.completed += 1
            self.metrics.finish(ctx.request_id, time.perf_counter_ns(),
                                reason="length" if seq.rendered.result().truncated else "stop")
        await resp.write_eof()
        return resp


class _DirectStream:
    """The sink of one plain stream: turns scheduler events into writes on the connection,
    synchronously, inside the step that produced them. Each event is one chunked-encoding
    frame in one ``transport.write``, stamped just before (the same bytes the task path
    writes; aiohttp has already sent the headers, ``write_eof`` ends the body)."""

    def __init__(self, engine: ReferenceEngine, req: SpeechRequest, prompt: PromptAudio | None, seq: Sequence,
                 ctx: StreamContext, transport: asyncio.BaseTransport) -> None:
        self.engine, self.req, self.prompt, self.seq, self.ctx = engine, req, prompt, seq, ctx
        self.transport = transport
        self.done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.templates: dict[str, AudioTemplate] = {}
        self.written = 0
        self.total = 0

    def _write(self, frame: Frame, chunk: int, due_ns: int = 0) -> None:
        t = self.transport
        if t.is_closing():
            raise ConnectionResetError("the client closed the connection")
        data, emit_ns = stamp(frame)
        t.write(b"%x\r\n%b\r\n" % (len(data), data))  # type: ignore[attr-defined]
        self.engine.scheduler.schedule.chunk(emit_ns, due_ns, time.perf_counter_ns(),
                                             int(t.get_write_buffer_size() > 0))  # type: ignore[attr-defined]
        if frame.audio_samples:
            self.engine.metrics.audio(self.ctx.request_id, emit_ns, frame.audio_samples)
        log = self.engine.emit_log
        if log is not None and frame.audio_samples:
            log.record(self.ctx.request_id, chunk, emit_ns, frame.audio_samples, len(data))

    def _end(self, how: str) -> None:
        if not self.done.done():
            self.done.set_result(how)
        self.seq.sink = _drop

    def event(self, event: Any) -> None:
        if self.done.done():
            return
        try:
            self._event(event)
        except ConnectionError as exc:  # the client went away: the handler counts it, like the task path
            self.engine.scheduler.cancel(self.seq)
            self.seq.sink = _drop
            self.done.set_exception(exc)

    def _event(self, event: Any) -> None:
        enc, ctx = self.engine.encoder, self.ctx
        if isinstance(event, Admitted):
            for frame in enc.text(ctx, cap_text(self.req.text, self.req.max_tokens)[0]):
                self._write(frame, -1)
            return
        if isinstance(event, Failed):
            self.engine.outcomes.faults += 1
            if enc.error_aborts:
                return self._end("abort")
            for frame in enc.stream_error(ctx, event.message) or []:
                self._write(frame, -1)
            return self._end("failed")
        assert isinstance(event, Chunk)
        rendered = self.seq.rendered.result()
        empty = self.engine.profile.empty_audio_deltas
        finish = ("length" if rendered.truncated else "stop") if event.last else "stop"
        if empty and self.written == 0:
            for frame in enc.empty_audio(ctx, None):
                self._write(frame, -1)
        n = len(event.samples)
        if n:
            key = "stop" if empty else finish
            template = self.templates.get(key) or self.templates.setdefault(key, enc.audio_template(ctx, key))
            payload = rendered.payloads[event.index] if rendered.payloads else enc.audio_payload(event.samples, ctx.audio_format)
            self._write(template.frame(payload, n), self.written, event.due_ns)
            self.written += 1
            self.total += n
        if event.last:
            if empty:
                for frame in enc.empty_audio(ctx, finish):
                    self._write(frame, -1)
            finish = "length" if rendered.truncated else "stop"
            for frame in enc.finish(ctx, finish, self.engine._usage(self.req, self.prompt, self.total)):
                self._write(frame, -1)
            self._end("completed")


def _drop(event: Any) -> None:
    """The sink of a stream that has ended: later events (none are expected) go nowhere."""


async def _serve(config: EngineConfig, profile: Profile) -> None:
    engine = ReferenceEngine(config, profile)
    if config.access_log:
        logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    runner = web.AppRunner(engine.app(), handler_cancellation=True,
                           access_log=access_logger if config.access_log else None, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, config.host, config.port, backlog=LISTEN_BACKLOG)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ReferenceEngineError(f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}") from None
    # aiohttp has no public accessor and types _server as AbstractServer, which has no `sockets`;
    # the server it holds (asyncio's or uvloop's Server) has them
    sockets = [s for s in (site._server.sockets if site._server else [])]  # type: ignore[attr-defined]  # noqa: SLF001
    port = sockets[0].getsockname()[1] if sockets else config.port
    print(f"listening on http://{config.host}:{port} (dialect={config.dialect}, profile={profile.name})", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if sys.platform != "win32":  # Windows event loops have no signal handlers; Ctrl-C still stops it there
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    warm = asyncio.create_task(engine.warm_up())
    stopped = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({warm, stopped}, return_when=asyncio.FIRST_COMPLETED)
    failure: BaseException | None = None
    if warm in done:
        failure = warm.exception()
        if failure is None:
            await stopped
    else:
        warm.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await warm
    _log("shutting down")
    await runner.cleanup()
    await engine.close()
    if failure is not None:
        raise ReferenceEngineError(f"warm-up failed: {failure}") from failure


def run_engine(config: EngineConfig) -> None:
    """Start the engine and serve until SIGTERM/SIGINT; :class:`ReferenceEngineError` on bad config."""
    try:
        profile = get_profile(config.profile, config.profiles_file)
    except ProfileError as exc:
        raise ReferenceEngineError(str(exc)) from None
    if config.device == "cuda":
        try:
            check_cuda()
        except CudaUnavailable as exc:
            raise ReferenceEngineError(str(exc)) from None
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux/macOS
        asyncio.run(_serve(config, profile))
    else:
        uvloop.run(_serve(config, profile))
