"""Shared pieces of the wire dialects: stream events, the incremental SSE framer and the parser
state machine that turns response bytes into events and one final outcome.

Timing rule (docs/metrics.md, "Clocks"): the caller stamps `perf_counter_ns()` right after each read returns,
before any parsing, and passes that stamp with the bytes; an event's arrival is the stamp of the
read that delivered its FIRST byte. Parsing cost therefore never shifts a timestamp.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

from data.errors import first_line

MAX_EVENT_BYTES = 64 * 1024 * 1024  # one event larger than this ends the request (no memory blow-up)
DEFAULT_SAMPLE_RATE = 24_000
AUDIO_FORMATS = ("wav", "pcm")  # what decode_audio reads: WAV chunks or raw s16le (`request.audio_format`)
INT64 = (-(1 << 63), (1 << 63) - 1)  # the BIGINT range an engine's emit_ns is stored in (chunks.server_emit_ns)


@dataclass(slots=True)
class Event:
    t_arrival_ns: int
    kind: str  # audio, text, usage, error, other (data.records.CHUNK_KINDS)
    payload_bytes: int
    samples: int = 0
    pcm: bytes | None = None
    text: str | None = None
    server_emit_ns: int | None = None


@dataclass
class ParseState:
    """What a parser has learned so far; `failure` holds the first failure (class, detail)."""
    events: int = 0
    audio_chunks: int = 0
    samples: int = 0
    sample_rate: int | None = None
    text_parts: list[str] = field(default_factory=list)
    end_marker: bool = False
    failure: tuple[str, str] | None = None
    t_first_audio_ns: int | None = None
    t_last_audio_ns: int | None = None
    finish_reason: str | None = None  # "length" once any choice said so, else the last one given

    def note_finish(self, reason: Any) -> None:
        """Record a choice's finish_reason: "length" (output cut by a token limit) sticks, so an
        engine that ends with "stop" after truncating still reads as truncated."""
        if isinstance(reason, str) and reason and self.finish_reason != "length":
            self.finish_reason = reason

    @property
    def text(self) -> str | None:
        return "".join(self.text_parts) if self.text_parts else None


class StreamParser(ABC):
    """Incremental byte-stream parser. `feed()` returns the events completed by these bytes;
    `done` turns true at the end marker or the first failure (the caller stops reading);
    `outcome()` gives the final (class, detail) once the stream is over."""

    def __init__(self, sample_rate: int = DEFAULT_SAMPLE_RATE, max_event_bytes: int = MAX_EVENT_BYTES):
        self.state = ParseState()
        self.default_rate = sample_rate  # the rate the engine is expected to deliver (docs/engines.md, "Sample rate")
        self.max_event_bytes = max_event_bytes

    @property
    def done(self) -> bool:
        return self.state.end_marker or self.state.failure is not None

    def fail(self, cls: str, detail: str) -> None:
        if self.state.failure is None:
            self.state.failure = (cls, detail)

    @abstractmethod
    def feed(self, data: bytes, t_ns: int) -> list[Event]:
        """Consume bytes read at `t_ns`; return the events they complete."""

    def feed_reads(self, stamps: Sequence[int], chunks: Sequence[bytes]) -> list[Event]:
        """Feed stamped body reads in order (the driver's (stamp, bytes) pairs), stopping once the
        parser is done; events carry the stamp of the read that delivered their first byte."""
        events: list[Event] = []
        for t, data in zip(stamps, chunks):
            if self.done:
                break
            events += self.feed(data, t)
        return events

    def eof(self) -> list[Event]:
        """The connection closed cleanly (no transport error); returns any events that only a
        complete body yields (a non-streamed response)."""
        return []

    def outcome(self) -> tuple[str, str | None]:
        """Final outcome: 'ok' or one failure class, with a one-line detail."""
        st = self.state
        if st.failure is not None:
            return st.failure
        if not st.end_marker:
            return "no_end_marker", cut_detail(st.events, "the body ended without the end marker")
        if st.samples == 0:
            return "no_audio", "stream completed without any audio samples"
        return "ok", None

    # -- helpers for dialects -------------------------------------------------------------
    def audio_event(self, t_ns: int, payload_bytes: int, pcm: bytes, rate: int, emit_ns: int | None) -> Event:
        st = self.state
        if rate != self.default_rate:  # its samples would count as seconds of another rate's audio
            self.fail("decode_error", f"audio delivered at sample rate {rate} Hz; this engine is expected to deliver "
                                      f"{self.default_rate} Hz (request.sample_rate)")
            return Event(t_ns, "other", payload_bytes, server_emit_ns=emit_ns)
        st.sample_rate = rate
        n = len(pcm) // 2
        if n:
            st.audio_chunks += 1
            st.samples += n
            if st.t_first_audio_ns is None:
                st.t_first_audio_ns = t_ns
            st.t_last_audio_ns = t_ns
        return Event(t_ns, "audio", payload_bytes, n, pcm, None, emit_ns)

    def decode_audio(self, b64: Any, t_ns: int, wire: int, emit_ns: int | None, fmt: str) -> Event:
        from engine_adapters.dialects.wav import WavError, decode_wav

        try:
            raw = b64decode(b64)
        except (ValueError, binascii.Error) as exc:
            raise ValueError(f"bad base64 audio ({str(exc)[:80]})") from None
        if fmt == "pcm":
            if len(raw) % 2:
                raise ValueError(f"odd number of s16le bytes ({len(raw)})")
            return self.audio_event(t_ns, wire, raw, self.default_rate, emit_ns)
        try:
            audio = decode_wav(raw)
        except WavError as exc:
            raise ValueError(f"corrupt WAV chunk: {exc}") from None
        return self.audio_event(t_ns, wire, audio.pcm, audio.sample_rate, emit_ns)


def emit_stamp(value: Any) -> tuple[int | None, str | None]:
    """(the stamp to store, why it is refused) of an event's `emit_ns`: an integer inside the
    int64 column it is stored in, else None and a one-line reason naming the field and value (the
    request is a decode_error; an out-of-range value once ended the campaign in a traceback)."""
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, int):
        return None, f"emit_ns {str(value)[:40]!r} is not an integer"
    if not INT64[0] <= value <= INT64[1]:
        return None, f"emit_ns {str(value)[:40]} is outside the int64 range chunks.server_emit_ns holds"
    return value, None


def announced_rate(content_type: str | None) -> str | None:
    """The `rate` parameter of an audio Content-Type (`audio/pcm; rate=16000`), as written, or None."""
    media, _, params = (content_type or "").partition(";")
    if not media.strip().lower().startswith("audio/"):
        return None
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "rate":
            return value.strip().strip('"')
    return None


def cut_detail(events: int, what: str) -> str:
    """The detail of a stream that ended early: after events arrived, the server closed it
    mid-response (how SGLang-Omni ends a stream that failed), else it ended before any event."""
    if events:
        return f"server closed the stream mid-response: {events} event(s) arrived, then {what}"
    return f"stream ended before any event: {what}"


# Media types by the format they announce; a 2xx answer announcing a format other than the
# dialect's is reported as what it is (docs/engines.md, "Say what arrived"). A missing or generic
# type (application/octet-stream, text/plain) says nothing and the body is decoded as usual.
def _format_of(media: str) -> str | None:
    if media == "application/json" or media.endswith("+json"):
        return "json"
    if media == "text/event-stream":
        return "sse"
    if media.startswith("audio/"):
        return "audio"
    if media == "text/html":
        return "html"
    return None


@dataclass(frozen=True)
class Unexpected:
    """A 2xx response that is not the dialect's stream: what arrived, and whether its body is
    worth reading for an error message (a compressed one is not)."""
    detail: str
    readable: bool


def unexpected_response(expected: str, content_type: str | None, content_encoding: str | None,
                        rate: int | None = None) -> Unexpected | None:
    """Why a 2xx response is not a stream the driver can decode as `expected`, or None.

    - a Content-Encoding other than identity: the driver asks for `accept-encoding: identity` and
      does not decode compressed streams (decoding would sit on the timing path);
    - a Content-Type announcing another format, e.g. application/json: a complete, non-streaming
      answer (the engine ignored `"stream": true`), so no chunk timing exists;
    - an audio Content-Type announcing a `rate` other than `rate`, the Hz the engine is expected
      to deliver: its samples would be counted at the wrong rate (docs/engines.md, "Sample rate")."""
    enc = (content_encoding or "").strip().lower()
    if enc and enc != "identity":
        return Unexpected(f"{enc}-encoded body: the driver does not decode compressed streams "
                          f"(it asks for accept-encoding: identity)", readable=False)
    media = (content_type or "").split(";", 1)[0].strip().lower()
    got = _format_of(media)
    announced = announced_rate(content_type)
    if rate is not None and announced is not None and got == "audio" == _format_of(expected) \
            and announced != str(rate):
        return Unexpected(f"server announced {media} at rate={announced[:20]} Hz; this engine is expected to "
                          f"deliver {rate} Hz (request.sample_rate)", readable=False)
    if got is None or got == _format_of(expected):
        return None
    what = " (a non-streaming answer)" if got == "json" else ""
    return Unexpected(f"server answered {media}{what}, not {expected}", readable=True)


class SSEFramer:
    """Splits an SSE byte stream into (arrival_ns, data, wire_bytes) events.

    Incremental and linear: it only scans bytes it has not scanned before. A pending event that
    grows past `max_event_bytes` raises OverflowError.
    """

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES):
        self.buf = bytearray()
        self.scan = 0
        self.start_ns = 0  # stamp of the read that brought the first pending byte (set with that byte)
        self.max_event_bytes = max_event_bytes

    def feed(self, data: bytes, t_ns: int) -> list[tuple[int, bytes, int]]:
        out: list[tuple[int, bytes, int]] = []
        if not self.buf:
            self.start_ns = t_ns
        self.buf += data
        buf = self.buf
        while True:
            i = buf.find(b"\n\n", self.scan)
            j = buf.find(b"\r\n\r\n", self.scan)
            if i < 0 and j < 0:
                break
            end, sep = (i, 2) if j < 0 or (0 <= i < j) else (j, 4)
            raw = bytes(buf[:end])
            del buf[:end + sep]
            self.scan = 0
            out.append((self.start_ns, raw, end + sep))
            self.start_ns = t_ns  # any remaining bytes came in this read
        # keep up to 3 bytes of overlap so a separator split across reads is still found
        self.scan = max(0, len(buf) - 3)
        if len(buf) > self.max_event_bytes:
            raise OverflowError(f"SSE event exceeds {self.max_event_bytes} bytes")
        return out

    @property
    def pending(self) -> int:
        return len(self.buf)


def sse_data(raw: bytes) -> tuple[str | None, str | None]:
    """(event name, data) of one SSE event block; data lines are joined with '\\n';
    comment-only or empty blocks give (None, None)."""
    event = None
    data_lines: list[str] = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        if not line or line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data_lines.append(value)
        elif name == "event":
            event = value
    return event, ("\n".join(data_lines) if data_lines else None)


def b64decode(s: Any) -> bytes:
    """Strict base64; raises ValueError (binascii.Error) on bad input."""
    if not isinstance(s, str):
        raise ValueError(f"expected a base64 string, got {type(s).__name__}")
    return base64.b64decode(s, validate=True)


def parse_json_event(data: str) -> dict[str, Any]:
    obj = json.loads(data)
    if not isinstance(obj, dict):
        raise ValueError(f"event JSON is a {type(obj).__name__}, expected an object")
    return obj


def error_detail(err: Any) -> str:
    """One line from an OpenAI-style error object."""
    if isinstance(err, dict):
        parts = [str(err.get(k)) for k in ("type", "code") if err.get(k) is not None]
        msg = str(err.get("message", "")).strip().splitlines()
        return (f"[{'/'.join(parts)}] " if parts else "") + (msg[0] if msg else json.dumps(err)[:200])
    return str(err)[:200]


class SSEJsonParser(StreamParser):
    """Base for the OpenAI-style SSE dialects: `data: {json}` events closed by `data: [DONE]`.
    Subclasses implement `on_json(obj, t_ns, wire_bytes, emit_ns) -> Event`; `audio_format` is what
    the request asked the engine for ("wav": a standalone WAV per delta, "pcm": raw s16le)."""

    def __init__(self, audio_format: str = "wav", sample_rate: int = DEFAULT_SAMPLE_RATE,
                 max_event_bytes: int = MAX_EVENT_BYTES):
        super().__init__(sample_rate, max_event_bytes)
        self.audio_format = audio_format
        self.framer = SSEFramer(max_event_bytes)

    def first_delta(self, obj: dict[str, Any], t_ns: int, wire: int, emit_ns: int | None) -> tuple[dict[str, Any], Event | None]:
        """choices[0].delta, or the event for a chunk without choices (the final usage chunk)."""
        choices = obj.get("choices")
        if not choices:
            kind = "usage" if obj.get("usage") is not None else "other"
            return {}, Event(t_ns, kind, wire, server_emit_ns=emit_ns)
        self.state.note_finish(choices[0].get("finish_reason"))
        return choices[0].get("delta") or {}, None

    def feed(self, data: bytes, t_ns: int) -> list[Event]:
        if self.done:
            return []
        try:
            frames = self.framer.feed(data, t_ns)
        except OverflowError as exc:
            self.fail("decode_error", str(exc))
            return []
        return self.feed_frames(frames)

    def feed_frames(self, frames: list[tuple[int, bytes, int]]) -> list[Event]:
        """Decode already-framed events (arrival_ns, raw block, wire bytes)."""
        events: list[Event] = []
        for arrival, raw, wire in frames:
            if self.done:
                break
            _, payload = sse_data(raw)
            if payload is None:
                continue
            if payload.strip() == "[DONE]":
                self.state.end_marker = True
                break
            self.state.events += 1
            try:
                obj = parse_json_event(payload)
            except ValueError as exc:
                self.fail("decode_error", f"event is not valid JSON: {str(exc)[:120]}")
                events.append(Event(arrival, "other", wire))
                break
            emit_ns, bad = emit_stamp(obj.get("emit_ns"))
            if bad:
                self.fail("decode_error", bad)
            if "error" in obj and obj["error"]:
                self.fail("in_stream_error", error_detail(obj["error"]))
                events.append(Event(arrival, "error", wire, server_emit_ns=emit_ns))
                continue  # the stream may still close with [DONE]
            try:
                events.append(self.on_json(obj, arrival, wire, emit_ns))
            except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
                self.fail("decode_error", f"bad {self.name} event: {first_line(exc, 160)}")
                events.append(Event(arrival, "other", wire, server_emit_ns=emit_ns))
        return events

    name = "sse"

    @abstractmethod
    def on_json(self, obj: dict[str, Any], t_ns: int, wire: int, emit_ns: int | None) -> Event:
        """One decoded JSON event of this dialect (raise ValueError/TypeError/KeyError on bad shape)."""

class WholeJsonParser(StreamParser):
    """A non-streamed (`"stream": false`) chat completion: one JSON object holding the whole
    audio in `choices[i].message.audio.data` (base64 WAV; docs/engines.md). Nothing can be played
    before the body is complete, so the audio event takes the stamp of the LAST read: TTFA of a
    non-streamed response is its end-to-end latency. A complete JSON body at a clean close is the
    end marker."""

    name = "json"

    def __init__(self, audio_format: str = "wav", sample_rate: int = DEFAULT_SAMPLE_RATE,
                 max_event_bytes: int = MAX_EVENT_BYTES):
        super().__init__(sample_rate, max_event_bytes)
        self.audio_format = audio_format
        self.parts: list[bytes] = []
        self.size = 0
        self.t_last: int | None = None

    def feed(self, data: bytes, t_ns: int) -> list[Event]:
        if self.done or not data:
            return []
        self.parts.append(data)
        self.size += len(data)
        self.t_last = t_ns
        if self.size > self.max_event_bytes:
            self.fail("decode_error", f"response body exceeds {self.max_event_bytes} bytes")
        return []

    def eof(self) -> list[Event]:
        if self.done or self.t_last is None:
            return []
        t, wire = self.t_last, self.size
        try:
            obj = parse_json_event(b"".join(self.parts).decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            self.fail("decode_error", f"response is not a JSON object: {first_line(exc, 160)}")
            return [Event(t, "other", wire)]
        self.state.events += 1
        self.state.end_marker = True
        if obj.get("error"):
            self.fail("in_stream_error", error_detail(obj["error"]))
            return [Event(t, "error", wire)]
        try:
            return [self._message(obj, t, wire)]
        except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
            self.fail("decode_error", f"bad {self.name} response: {first_line(exc, 160)}")
            return [Event(t, "other", wire)]

    def _message(self, obj: dict[str, Any], t: int, wire: int) -> Event:
        audio = None
        for choice in obj.get("choices") or []:
            self.state.note_finish(choice.get("finish_reason"))
            message = choice.get("message") or {}
            if isinstance(message.get("content"), str) and message["content"]:
                self.state.text_parts.append(message["content"])
            if audio is None and isinstance(message.get("audio"), dict) and message["audio"].get("data"):
                audio = message["audio"]["data"]
        if audio is None:
            return Event(t, "other", wire)
        return self.decode_audio(audio, t, wire, None, self.audio_format)


@lru_cache(maxsize=4096)
def _data_uri_cached(path: str, size: int, mtime_ns: int) -> str:
    return "data:audio/wav;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def prompt_data_uri(path: str | os.PathLike) -> str:
    """`data:audio/wav;base64,...` of a prompt wav, cached by path+size+mtime (a run sends each
    prompt many times)."""
    st = os.stat(path)
    return _data_uri_cached(str(path), st.st_size, st.st_mtime_ns)
