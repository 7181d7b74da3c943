"""The reference engine's duplex Realtime sessions (`--dialect vllm-omni-realtime`): the WebSocket
`/v1/realtime?duplex=1` (and its alias `/v1/duplex`) as vLLM-Omni's DuplexOmni server speaks it
for MiniCPM-o 4.5 (docs/engines.md, "vLLM-Omni realtime", where each fact is cited by file).

A session opens with `session.update` (within 10 s, else `error` config_timeout); the voice is
`session.ref_audio` (required: `ref_audio_required`), the text the seeded
`extra_body.duplex_initial_user_text` (or `session.initial_user_text`). The answer starts with the
first `input_audio_buffer.append` (the real model speaks per 1 s audio unit; this engine needs one
append) and is the same synthesis and batch scheduler as the chat dialects, so a session's audio
is byte-identical to a chat request's at the talker's seed (REALTIME_SEED: the deploy config's
stage-1 seed, never the request's). Each event is one text frame written with `server_event_seq`
and this engine's `emit_ns` (stamped just before the write; the real server sends no emit stamp).
Faults (X-Reference-Fault on the upgrade request, or the profile's rates): `http_500` refuses the
upgrade when forced by the header (a drawn one, known only once the text is, is an `error`
event), `in_stream_error` an `error` then `response.done` failed, `drop` aborts the TCP
connection, `stall` sleeps, `fatal` kills the engine, `emit_ns_overflow` and `wav_rate` lie in
every event.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from typing import TYPE_CHECKING, Any

import numpy as np
from aiohttp import WSMsgType, web

from engine_adapters.reference.chat_request import RequestError, _decode_data_uri
from engine_adapters.reference.encoders import json_template, pcm_bytes, wav_bytes
from engine_adapters.reference.faults import (EMIT_NS_FAULT_SHIFT, FAULT_HEADER, LABEL_FAULTS, WAV_FAULT_RATE,
                                              FaultHeaderError, draw_fault, forced_fault)
from engine_adapters.reference.profiles import OUTPUT_SAMPLE_RATE
from engine_adapters.reference.scheduler import Chunk, Failed
from engine_adapters.reference.synthesis import PromptError, decode_prompt, stable_seed

if TYPE_CHECKING:
    from engine_adapters.reference.server import ReferenceEngine

_HOLE = "\x00"  # json_template's marker (encoders.py): JSON-encodes as "\u0000", never in base64
REALTIME_SEED = 42  # the talker's seed in vllm-omni's deploy config (stage 1), not a request field
CONFIG_TIMEOUT_S = 10.0  # entrypoints/duplex/serving.py _DEFAULT_CONFIG_TIMEOUT_S
IDLE_TIMEOUT_S = 300.0  # _DEFAULT_IDLE_TIMEOUT_S
MAX_CLIENT_EVENT_BYTES = 15 * 1024 * 1024  # entrypoints/duplex/websocket.py MAX_EVENT_BYTES
_ERROR_TYPES = {"config_timeout": "invalid_request_error", "invalid_json": "invalid_request_error",
                "bad_event": "invalid_request_error", "unknown_event": "invalid_request_error",
                "ref_audio_required": "invalid_request_error", "invalid_session_config": "invalid_request_error",
                "engine_error": "server_error", "runtime_data_plane_stream_failed": "server_error"}


def _json(obj: dict[str, Any]) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _event_id() -> str:
    return f"event_{uuid.uuid4().hex}"


class _Wire:
    """One socket's writer: numbers every event (`server_event_seq`) and stamps it last."""

    def __init__(self, engine: "ReferenceEngine", ws: web.WebSocketResponse, shift: int) -> None:
        self.engine, self.ws, self.shift, self.seq = engine, ws, shift, 0

    async def send(self, text: str, samples: int = 0, request_id: str = "", chunk: int = -1, due_ns: int = 0) -> None:
        self.seq += 1
        emit_ns = time.perf_counter_ns()
        await self.ws.send_str(f'{text[:-1]},"server_event_seq":{self.seq},"emit_ns":{emit_ns + self.shift}}}')
        self.engine.scheduler.schedule.chunk(emit_ns, due_ns, time.perf_counter_ns())
        if samples and self.engine.emit_log is not None:
            self.engine.emit_log.record(request_id, chunk, emit_ns, samples, len(text))

    async def event(self, obj: dict[str, Any]) -> None:
        await self.send(_json({"type": obj.pop("type"), "event_id": _event_id(), **obj}))

    async def error(self, code: str, message: str) -> None:
        await self.event({"type": "error", "error": {"type": _ERROR_TYPES.get(code, "invalid_request_error"),
                                                      "code": code, "message": message}})


def _session_text(session: dict[str, Any]) -> str | None:
    extra = session.get("extra_body")
    extra = extra if isinstance(extra, dict) else {}
    for value in (extra.get("duplex_initial_user_text"), session.get("initial_user_text")):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def _output_format(session: dict[str, Any]) -> str:
    """"pcm" or "wav" (the engine's payload formats) from the Realtime output format."""
    fmt: Any = session.get("output_audio_format")
    audio = session.get("audio")
    if fmt is None and isinstance(audio, dict) and isinstance(audio.get("output"), dict):
        fmt = audio["output"].get("format")
    if isinstance(fmt, dict):
        fmt = fmt.get("type")
    return "wav" if isinstance(fmt, str) and fmt.lower() in ("wav", "audio/wav") else "pcm"


async def handle(engine: "ReferenceEngine", request: web.Request) -> web.StreamResponse:
    """One `/v1/realtime` connection: a duplex session (the module docstring)."""
    if engine.state != "ready":
        reason = "engine is starting" if engine.state == "starting" else f"engine is dead: {engine.dead_reason}"
        return engine._error(503, reason, "ServiceUnavailableError")
    try:
        forced, forced_kind = forced_fault(request.headers.get(FAULT_HEADER))
    except FaultHeaderError as exc:
        return engine._error(400, str(exc), "BadRequestError")
    if request.query.get("duplex", "1").lower() not in ("1", "true", "on"):
        return engine._error(400, "this server mounts only the duplex handler (?duplex=1)", "BadRequestError")
    if forced_kind == "http_500":
        engine.outcomes.faults += 1
        return engine._error(500, "injected fault: internal server error before the session", "InternalServerError")
    ws = web.WebSocketResponse(max_msg_size=MAX_CLIENT_EVENT_BYTES, compress=False, autoping=True)
    if not ws.can_prepare(request).ok:
        return engine._error(400, "expected a WebSocket upgrade", "BadRequestError")
    await ws.prepare(request)
    try:
        await _Session(engine, request, ws, forced, forced_kind).run()
    except (ConnectionError, asyncio.CancelledError):
        engine.outcomes.client_gone += 1
        raise
    finally:
        if not ws.closed and request.transport is not None and not request.transport.is_closing():
            await ws.close()
    return ws


class _Session:
    def __init__(self, engine: "ReferenceEngine", request: web.Request, ws: web.WebSocketResponse,
                 forced: bool, forced_kind: str | None) -> None:
        self.engine, self.request, self.ws = engine, request, ws
        self.forced, self.forced_kind = forced, forced_kind
        self.session_id = f"duplex-{uuid.uuid4().hex}"
        self.audio_in = asyncio.Event()  # the first input audio arrived
        self.closing = asyncio.Event()  # session.close arrived, or the socket went
        self.out = _Wire(engine, ws, 0)

    async def _receive(self, timeout: float) -> dict[str, Any] | None:
        """The next client event; None when the socket closed or `timeout` passed."""
        try:
            msg = await self.ws.receive(timeout=timeout)
        except TimeoutError:
            return None
        if msg.type != WSMsgType.TEXT:
            return None
        try:
            obj = json.loads(msg.data)
        except ValueError:
            await self.out.error("invalid_json", "Invalid JSON event")
            return {}
        if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
            await self.out.error("bad_event", "Duplex event must be a JSON object with a type")
            return {}
        return obj

    async def run(self) -> None:
        first = await self._receive(CONFIG_TIMEOUT_S)
        if first is None:
            await self.out.error("config_timeout", "Timeout waiting for session.update")
            return
        if first.get("type") != "session.update" or not isinstance(first.get("session"), dict):
            await self.out.error("invalid_session_config", "the first event must be session.update with a session")
            return
        session = first["session"]
        text = _session_text(session)
        if text is None:
            await self.out.error("invalid_session_config", "the reference engine speaks seeded text only: set "
                                 "extra_body.duplex_initial_user_text (or session.initial_user_text)")
            return
        if not isinstance(session.get("ref_audio"), str):
            await self.out.error("ref_audio_required", "MiniCPM-o duplex audio output requires ref_audio")
            return
        try:
            prompt = decode_prompt(_decode_data_uri(session["ref_audio"], "session.ref_audio"))
        except (RequestError, PromptError) as exc:
            await self.out.error("invalid_session_config", getattr(exc, "message", str(exc)))
            return
        fault = self.forced_kind if self.forced else draw_fault(
            self.engine.profile.fault_rates, stable_seed("fault", REALTIME_SEED, text, prompt.digest))
        label = fault if fault in LABEL_FAULTS else None
        if label == "emit_ns_overflow":
            self.out.shift = EMIT_NS_FAULT_SHIFT
        public = {"object": "realtime.session", "type": "realtime", "id": self.session_id, "state": "open",
                  "model": session.get("model") or self.engine.config.model_name, "epoch": 0, "turn_id": 0,
                  "output_audio_format": "wav" if _output_format(session) == "wav" else "pcm16"}
        await self.out.event({"type": "session.created", "session": public})
        await self.out.event({"type": "session.updated", "session": public})
        reader = asyncio.ensure_future(self._read())
        try:
            await self._respond(text, prompt, _output_format(session), fault, label)
            await asyncio.wait_for(self.closing.wait(), IDLE_TIMEOUT_S)
            transport = self.request.transport
            if not self.ws.closed and transport is not None and not transport.is_closing():
                await self.out.event({"type": "session.closed", "session_id": self.session_id, "reason": "client_close",
                                      "event": {"type": "session.closed", "reason": "client_close"}})
                await self.ws.close(code=1000)
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def _read(self) -> None:
        """Client events while the session runs: input audio starts the answer, session.close ends it."""
        while True:
            obj = await self._receive(IDLE_TIMEOUT_S)
            if obj is None:
                self.closing.set()
                self.audio_in.set()
                return
            kind = obj.get("type")
            if kind == "input_audio_buffer.append":
                try:
                    base64.b64decode(obj.get("audio") or "", validate=True)
                except (ValueError, TypeError):
                    await self.out.error("bad_audio", "input_audio_buffer.append: audio is not base64")
                    continue
                self.audio_in.set()
            elif kind == "session.close":
                self.closing.set()
                self.audio_in.set()
                return
            elif kind == "session.heartbeat":
                await self.out.event({"type": "session.heartbeat_ack", "session_id": self.session_id})
            elif kind not in ("input_audio_buffer.commit", "session.event_ack", "playback.ack", ""):
                await self.out.error("unknown_event", f"Unknown duplex event type: {kind}")

    async def _respond(self, text: str, prompt: Any, audio_format: str, fault: str | None, label: str | None) -> None:
        engine, out = self.engine, self.out
        await self.audio_in.wait()
        if self.closing.is_set():
            return
        if fault == "http_500":  # drawn after the upgrade: the engine's error event instead
            engine.outcomes.faults += 1
            await out.error("engine_error", "injected fault: internal server error")
            return
        rid = f"resp_{uuid.uuid4().hex[:12]}"
        iid = f"item_{rid}"
        loop = asyncio.get_running_loop()
        rendered = loop.run_in_executor(engine.executor, engine._render, text, prompt, REALTIME_SEED, None,
                                        audio_format, None)
        seq = engine.scheduler.submit(rendered, 0.0)
        scoped = {"response_id": rid, "item_id": iid, "output_index": 0, "content_index": 0}
        try:
            await out.event({"type": "response.created", "response_id": rid,
                             "response": {"id": rid, "object": "realtime.response", "status": "in_progress",
                                          "status_details": None, "output": [], "modalities": ["audio", "text"]}})
            rate = WAV_FAULT_RATE if label == "wav_rate" else OUTPUT_SAMPLE_RATE
            fmt = "wav" if audio_format == "wav" else "pcm16"
            if label:
                engine.outcomes.faults += 1
            pending = None if label else fault
            written, total = 0, 0
            while True:
                event = await seq.events.get()
                if isinstance(event, Failed):
                    engine.outcomes.faults += 1
                    await self._fail(rid, "engine_error", event.message)
                    return
                if not isinstance(event, Chunk):
                    continue
                if pending and written >= engine.profile.fault_after_chunks:
                    if await self._inject(pending, rid, seq):
                        return
                    pending = None
                n = len(event.samples)
                if n:
                    if written == 0:
                        await out.event({"type": "response.speak", **scoped, "metadata": {"model_speak": True}})
                    total += n
                    # the delta's JSON around its pre-rendered base64 (a hole the payload fills)
                    head, tail = json_template({
                        "type": "response.output_audio.delta", "event_id": _event_id(), **scoped, "delta": _HOLE,
                        "format": fmt, "sample_rate_hz": rate,
                        "metadata": {"session_id": self.session_id, "epoch": 0, "model_speak": True,
                                     "end_of_turn": event.last, "audio_duration_ms": total * 1000 // OUTPUT_SAMPLE_RATE}})
                    body = head + self._payload(seq, event, audio_format, rate) + tail
                    await out.send(body.decode(), samples=n, request_id=rid, chunk=written, due_ns=event.due_ns)
                    if written == 0:
                        await out.event({"type": "response.output_audio_transcript.delta", **scoped, "delta": text})
                    written += 1
                if event.last:
                    break
            if pending and await self._inject(pending, rid, seq):
                return
            item = {"id": iid, "object": "realtime.item", "type": "message", "role": "assistant",
                    "status": "completed", "content": [{"type": "output_audio", "transcript": text}]}
            await out.event({"type": "response.output_audio.done", **scoped})
            await out.event({"type": "response.output_audio_transcript.done", **scoped, "transcript": text})
            await out.event({"type": "response.content_part.done", **scoped,
                             "part": {"type": "audio", "transcript": text}})
            await out.event({"type": "response.output_item.done", "response_id": rid, "output_index": 0, "item": item})
            # counted once its last event is written, as the chat streams are (docs/engines.md)
            engine.outcomes.completed += 1
            await out.event({"type": "response.done", "response_id": rid,
                             "response": {"id": rid, "object": "realtime.response", "status": "completed",
                                          "status_details": None, "output": [item],
                                          "metadata": {"playback": {"generated_ms": total * 1000 // OUTPUT_SAMPLE_RATE}}}})
            await out.event({"type": "rate_limits.updated", "rate_limits": []})
        finally:
            engine.scheduler.cancel(seq)

    def _payload(self, seq: Any, event: Chunk, audio_format: str, rate: int) -> bytes:
        """The chunk's base64, pre-rendered like the chat streams' (the same cache), unless a
        fault rewrites its WAV header."""
        rendered = seq.rendered.result()
        if rate == OUTPUT_SAMPLE_RATE and rendered.payloads:
            return rendered.payloads[event.index]
        samples = np.asarray(event.samples)
        raw = wav_bytes(samples, rate) if audio_format == "wav" else pcm_bytes(samples)
        return base64.b64encode(raw)

    async def _fail(self, rid: str, code: str, message: str) -> None:
        await self.out.error(code, message)
        await self.out.event({"type": "response.done", "response_id": rid,
                              "response": {"id": rid, "object": "realtime.response", "status": "failed",
                                           "status_details": {"type": "failed", "reason": code}, "output": []}})

    async def _inject(self, fault: str, rid: str, seq: Any) -> bool:
        """A mid-response fault; True when the session is over."""
        engine = self.engine
        engine.outcomes.faults += 1
        if fault == "stall":
            await asyncio.sleep(engine.profile.stall_s)
            return False
        engine.scheduler.cancel(seq)
        if fault == "drop":
            if self.request.transport is not None:
                self.request.transport.abort()
            self.closing.set()
        elif fault == "fatal":
            engine.die("injected fatal fault")
            await self.out.error("engine_error", "engine died: injected fatal fault")
            await self.ws.close(code=1011)
            self.closing.set()
        else:
            await self._fail(rid, "runtime_data_plane_stream_failed", "injected fault: error during generation")
        return True
