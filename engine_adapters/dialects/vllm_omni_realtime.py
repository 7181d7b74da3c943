"""vLLM-Omni's duplex Realtime dialect: MiniCPM-o 4.5 as a DuplexOmni server over the WebSocket
`/v1/realtime?duplex=1` (docs/engines.md, "vLLM-Omni realtime"; every fact cited there by file).

One request is one duplex session, as vllm-omni's own Seed-TTS realtime benchmark drives it
(0.30.0 `benchmarks/patch/patch.py` `async_request_openai_realtime_duplex`): open with
`session.update` (the voice in `session.ref_audio`, the text to speak seeded as
`extra_body.duplex_initial_user_text`, because a model-native session answers audio only), append
16 kHz PCM16 silence in real time (200 ms per append) so the model has units to speak on, read
`response.output_audio.delta` events (base64 PCM16 or WAV at `sample_rate_hz`) until
`response.done`, then `session.close`. What the client sends is built here; the driver
(engine_adapters/driver/realtime.py) does the I/O and records every socket read after the
handshake, stamped before the library parses it; this parser frames those bytes again with the
`websockets` sans-I/O protocol, off the timing path.

An event's arrival is the stamp of the read that delivered the first byte of its WebSocket frame
(frames are contiguous after the handshake, and an unmasked, uncompressed server frame is
2 / 4 / 10 header bytes plus its payload). The end marker is `response.done` with status
`completed`; another status, or an `error` event, is an in_stream_error; `session.closed` /
`session.expired` or a close frame before it is no_end_marker.
"""

from __future__ import annotations

import base64
import json
import re
from collections import deque
from dataclasses import dataclass
from typing import Any

from websockets.exceptions import ProtocolError
from websockets.frames import Close, Frame, Opcode
from websockets.protocol import Protocol, Side

from data.errors import first_line
from engine_adapters.dialects.base import (DEFAULT_SAMPLE_RATE, MAX_EVENT_BYTES, Event, StreamParser, b64decode,
                                           cut_detail, emit_stamp, error_detail)

NAME = "vllm-omni-realtime"
# vllm-omni 0.30.0 api_server.realtime_websocket: `duplex=1` selects the duplex handler; the
# upstream client sends `autostart=0` so the server waits for its session.update (clients/duplex.py)
PATH = "/v1/realtime?duplex=1&autostart=0"
CONTENT_TYPE = "application/json"  # one JSON object per WebSocket text frame (no HTTP body)
TRANSPORT = "websocket"
PLACEMENTS = ("ref_audio", "none")  # session.ref_audio (MiniCPM-o refuses audio output without it)
DEFAULT_AUDIO_FORMAT = "pcm"  # pcm16 on the wire: what vllm-omni's clients and benchmark ask for

INPUT_RATE = 16_000  # the duplex input format (clients/duplex.py PCM16_SAMPLE_RATE)
APPEND_MS = 200  # the benchmark's silence append (`_RealtimeTTSProbe.stream_silence`, chunk_ms)
SILENCE_S = 30.0  # the benchmark's most silence per turn (`_SEED_TTS_SILENCE_SECONDS`)
CLOSE_WAIT_S = 10.0  # how long the client waits for session.closed after session.close
# a dropped socket holds the session slot for disconnect_grace_s (30 s), so every session is closed

END_TYPES = frozenset({"response.done", "error", "session.closed", "session.expired", "session.resync_required"})
AUDIO_DELTA = "response.output_audio.delta"
TEXT_DELTAS = frozenset({"response.output_audio_transcript.delta", "response.output_text.delta"})
_PCM_FORMATS = frozenset({"pcm16", "pcm", "pcm_s16le", "s16le", "audio/pcm"})
_TYPE_HEAD = re.compile(rb'\A\s*\{\s*"type"\s*:\s*"([^"\\]{1,64})"')


@dataclass(frozen=True)
class SessionPlan:
    """What the driver does around the session.update it sends (request options, else the
    benchmark's values): the silence it streams and how long it waits for the close."""
    append_ms: int = APPEND_MS
    silence_s: float = SILENCE_S
    close_wait_s: float = CLOSE_WAIT_S

    @property
    def append_bytes(self) -> int:
        return INPUT_RATE * 2 * self.append_ms // 1000


def session_plan(options: dict[str, Any]) -> SessionPlan:
    return SessionPlan(int(options.get("append_ms", APPEND_MS)), float(options.get("silence_s", SILENCE_S)),
                       float(options.get("close_wait_s", CLOSE_WAIT_S)))


def wire_format(audio_format: str) -> str:
    """The Realtime output format for `request.audio_format` (`pcm` -> `pcm16`)."""
    return "wav" if audio_format == "wav" else "pcm16"


def build_body(text: str, prompt_uri: str | None, prompt_text: str | None, *, model: str,
               sampling: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """The opening `session.update` (clients/duplex.py `SessionConfig.to_session_payload` with the
    MiniCPM-o preset, clients/minicpmo_4_5.py, and the benchmark's extra_body)."""
    session: dict[str, Any] = {
        "model": model,
        "modalities": ["audio", "text"],
        "input_audio_format": "pcm16",
        "output_audio_format": wire_format(options.get("audio_format", DEFAULT_AUDIO_FORMAT)),
        "sample_rate_hz": INPUT_RATE,
        "audio": {"input": {"sample_rate_hz": INPUT_RATE}, "output": {"sample_rate_hz": DEFAULT_SAMPLE_RATE}},
        "turn_detection": None,
        "overlap_policy": "listen_only",
        "playback_commit_policy": "ack_only",
        "extra_body": {"auto_response": True, "duplex_initial_user_text": text, "force_listen_count": 0},
    }
    if prompt_uri and options.get("voice_prompt", PLACEMENTS[0]) == "ref_audio":
        session["ref_audio"] = prompt_uri
    return {"type": "session.update", "session": session}


def apply_sampling(body: dict[str, Any], sampling: dict[str, Any]) -> None:
    """The plan's sampling in the session object. Only `temperature` has a session field, and it is
    the thinker's (0.30.0 minicpmo_4_5/duplex/plugin.py `_apply_default_scheduler_policy`); the
    talker samples with the deploy config's stage-1 defaults whatever the request says, and a
    session's `max_tokens` is a per-unit thinker cap, not an output length, so neither is sent."""
    if sampling.get("temperature") is not None:
        body["session"]["temperature"] = sampling["temperature"]


def append_event(audio_b64: str, append_ms: int, end_ms: int) -> str:
    """One `input_audio_buffer.append` of silence (clients/duplex.py `append_audio`, is_speech false)."""
    return (f'{{"type":"input_audio_buffer.append","audio":"{audio_b64}","format":"pcm16",'
            f'"sample_rate_hz":{INPUT_RATE},"duration_ms":{append_ms},"audio_end_ms":{end_ms},"is_speech":false}}')


def silence_b64(plan: SessionPlan) -> str:
    return base64.b64encode(bytes(plan.append_bytes)).decode("ascii")


CLOSE_EVENT = '{"type":"session.close"}'


def event_type(message: bytes) -> str | None:
    """The `type` of one server message, read from its head (vllm-omni renders `type` first:
    protocol/realtime/events.py `to_realtime`), else from the whole JSON; None if it has none."""
    m = _TYPE_HEAD.match(message)
    if m is not None:
        return m.group(1).decode("ascii", "replace")
    try:
        obj = json.loads(message)
    except ValueError:
        return None
    return obj.get("type") if isinstance(obj, dict) and isinstance(obj.get("type"), str) else None


def _wire_len(frame: Frame) -> int:
    n = len(frame.data)
    return 2 + (0 if n < 126 else 2 if n < 65536 else 8) + n


class Parser(StreamParser):
    """Server frames (the bytes after the 101 response) into events; see the module docstring."""

    name = NAME

    def __init__(self, audio_format: str = DEFAULT_AUDIO_FORMAT, sample_rate: int = DEFAULT_SAMPLE_RATE,
                 max_event_bytes: int = MAX_EVENT_BYTES):
        super().__init__(sample_rate, max_event_bytes)
        self.proto = Protocol(Side.CLIENT, max_size=max_event_bytes)
        self.total = 0  # bytes fed
        self.pos = 0  # offset of the next frame's first byte
        self.reads: deque[tuple[int, int]] = deque()  # (end offset, stamp) of reads not yet all framed
        self.parts: list[bytes] = []  # a fragmented message's frames so far
        self.part_t = 0  # the stamp of its first frame's first byte
        self.part_binary = False
        self.ended: str | None = None  # why the session ended before response.done

    def feed(self, data: bytes, t_ns: int) -> list[Event]:
        if self.done or not data:
            return []
        self.total += len(data)
        self.reads.append((self.total, t_ns))
        self.proto.receive_data(data)
        events: list[Event] = []
        for frame in self.proto.events_received():
            if self.done:
                break
            if not isinstance(frame, Frame):  # a client Protocol in the OPEN state yields frames only
                continue
            start, self.pos = self.pos, self.pos + _wire_len(frame)
            while self.reads and self.reads[0][0] <= start:
                self.reads.popleft()
            t = self.reads[0][1] if self.reads else t_ns
            events += self._frame(frame, t)
        exc = self.proto.parser_exc
        if exc is not None and not self.done:
            cause = f": {first_line(exc.__cause__, 80)}" if isinstance(exc, ProtocolError) and exc.__cause__ else ""
            self.fail("decode_error", f"WebSocket protocol error: {first_line(exc, 80)}{cause}")
        return events

    def _frame(self, frame: Frame, t: int) -> list[Event]:
        if frame.opcode is Opcode.CLOSE:
            close = Close.parse(frame.data) if frame.data else None
            self.ended = self.ended or (f"the server closed the WebSocket (code {close.code}{': ' + close.reason if close and close.reason else ''})"
                                        if close else "the server closed the WebSocket")
            return []
        if frame.opcode in (Opcode.PING, Opcode.PONG):
            return []
        if frame.opcode is not Opcode.CONT:
            self.parts, self.part_t, self.part_binary = [], t, frame.opcode is Opcode.BINARY
        self.parts.append(bytes(frame.data))
        if not frame.fin:
            return []
        message, t0, binary = b"".join(self.parts), self.part_t, self.part_binary
        wire = sum(map(len, self.parts))
        self.parts = []
        self.state.events += 1
        if binary:
            self.fail("decode_error", f"binary WebSocket message of {wire} bytes; the duplex protocol sends JSON text")
            return [Event(t0, "other", wire)]
        return [self._message(message, t0, wire)]

    def _message(self, message: bytes, t: int, wire: int) -> Event:
        try:
            obj = json.loads(message)
            if not isinstance(obj, dict):
                raise ValueError(f"event JSON is a {type(obj).__name__}, expected an object")
        except ValueError as exc:
            self.fail("decode_error", f"event is not valid JSON: {first_line(exc, 120)}")
            return Event(t, "other", wire)
        emit_ns, bad = emit_stamp(obj.get("emit_ns"))
        if bad:
            self.fail("decode_error", bad)
        kind = obj.get("type")
        try:
            return self._event(kind, obj, t, wire, emit_ns)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            self.fail("decode_error", f"bad {kind} event: {first_line(exc, 160)}")
            return Event(t, "other", wire, server_emit_ns=emit_ns)

    def _event(self, kind: Any, obj: dict[str, Any], t: int, wire: int, emit_ns: int | None) -> Event:
        if kind == AUDIO_DELTA:
            delta = obj.get("delta")
            if not delta:
                return Event(t, "other", wire, server_emit_ns=emit_ns)
            fmt = str(obj.get("format") or "pcm16").lower()
            rate = obj.get("sample_rate_hz")
            if fmt in _PCM_FORMATS:
                if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int)):
                    raise ValueError(f"sample_rate_hz {str(rate)[:20]!r} is not an integer")
                try:
                    raw = b64decode(delta)
                except ValueError as exc:
                    raise ValueError(f"bad base64 audio ({str(exc)[:80]})") from None
                if len(raw) % 2:
                    raise ValueError(f"odd number of s16le bytes ({len(raw)})")
                return self.audio_event(t, wire, raw, self.default_rate if rate is None else rate, emit_ns)
            if fmt == "wav":
                return self.decode_audio(delta, t, wire, emit_ns, "wav")
            raise ValueError(f"audio format {fmt[:20]!r} is neither pcm16 nor wav")
        if kind in TEXT_DELTAS:
            text = obj.get("delta")
            if isinstance(text, str) and text:
                self.state.text_parts.append(text)
                return Event(t, "text", wire, text=text, server_emit_ns=emit_ns)
            return Event(t, "other", wire, server_emit_ns=emit_ns)
        if kind == "error":
            err = obj.get("error")
            self.fail("in_stream_error", error_detail(err) if isinstance(err, dict)
                      else error_detail({"code": obj.get("code"), "message": err}))
            return Event(t, "error", wire, server_emit_ns=emit_ns)
        if kind == "response.done":
            response = obj.get("response") or {}
            status = response.get("status")
            details = response.get("status_details") or {}
            reason = details.get("reason") if isinstance(details, dict) else None
            self.state.end_marker = True
            if status == "completed":
                self.state.note_finish("stop")
            elif status == "incomplete" and reason in ("max_output_tokens", "max_tokens", "length"):
                self.state.note_finish("length")  # OpenAI Realtime's token-limit ending
            else:
                self.fail("in_stream_error", f"response.done with status {str(status)[:40]!r}"
                                             + (f" ({str(reason)[:80]})" if reason else ""))
            return Event(t, "other", wire, server_emit_ns=emit_ns)
        if kind in ("session.closed", "session.expired", "session.resync_required"):
            self.ended = f"{kind} ({str(obj.get('reason'))[:80]})"
            return Event(t, "other", wire, server_emit_ns=emit_ns)
        return Event(t, "other", wire, server_emit_ns=emit_ns)

    def outcome(self) -> tuple[str, str | None]:
        st = self.state
        if st.failure is None and not st.end_marker:
            why = self.ended or "the connection ended"
            return "no_end_marker", cut_detail(st.events, f"{why} without response.done")
        return super().outcome()
