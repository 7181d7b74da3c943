"""Byte-level encoders for the three wire dialects the reference engine speaks (docs/engines.md).

An encoder turns engine events (text, an audio chunk, the end, an error) into the
exact bytes a real engine of that dialect would write. JSON events are encoded
*without* the emit stamp; :func:`stamp` splices ``"emit_ns"`` in at the last
moment, so the stamp is taken after all encoding work and right before the write.
"""

from __future__ import annotations

import base64
import json
import struct
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine_adapters.reference.profiles import OUTPUT_SAMPLE_RATE

SSE_DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True, slots=True)
class Frame:
    """One write: ``body`` is a JSON object to frame as SSE (``sse=True``) or raw bytes."""

    body: bytes
    sse: bool
    audio_samples: int = 0


@dataclass(frozen=True, slots=True)
class StreamContext:
    """Per-response values that appear in every chunk."""

    request_id: str
    created: int
    model: str
    audio_format: str  # "wav" or "pcm"
    include_usage: bool
    # misbehaviour faults (faults.py, LABEL_FAULTS): added to each written emit_ns; the rate WAV headers claim
    emit_shift: int = 0
    wav_rate: int = OUTPUT_SAMPLE_RATE


@dataclass(frozen=True, slots=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    def as_dict(self) -> dict[str, int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}


def wav_bytes(samples: np.ndarray, sample_rate: int = OUTPUT_SAMPLE_RATE) -> bytes:
    """A complete standalone WAV file (RIFF, 16-bit PCM mono) holding ``samples``."""
    pcm = samples.astype("<i2", copy=False).tobytes()
    header = struct.pack(
        "<4sI4s4sIHHIIHH4sI",
        b"RIFF", 36 + len(pcm), b"WAVE", b"fmt ", 16, 1, 1,
        sample_rate, sample_rate * 2, 2, 16, b"data", len(pcm),
    )
    return header + pcm


def pcm_bytes(samples: np.ndarray) -> bytes:
    """Raw little-endian signed 16-bit samples."""
    return samples.astype("<i2", copy=False).tobytes()


def _json(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def stamp(frame: Frame, shift: int = 0) -> tuple[bytes, int]:
    """The bytes to write now and the ``perf_counter_ns`` emit time (carried inside SSE JSON frames,
    plus ``shift``: nonzero only for the ``emit_ns_overflow`` fault)."""
    now = time.perf_counter_ns()
    if not frame.sse:
        return frame.body, now
    return b"data: " + frame.body[:-1] + b',"emit_ns":' + str(now + shift).encode() + b"}\n\n", now


def _b64_audio(samples: np.ndarray, audio_format: str, rate: int = OUTPUT_SAMPLE_RATE) -> str:
    raw = wav_bytes(samples, rate) if audio_format == "wav" else pcm_bytes(samples)
    return base64.b64encode(raw).decode("ascii")


_HOLE = "\x00"  # JSON-encodes as "\u0000": a marker no base64 payload contains
_HOLE_JSON = b'"\\u0000"'


def json_template(obj: dict[str, Any]) -> tuple[bytes, bytes]:
    """(head, tail) with ``head + b'"' + payload + b'"' + tail`` equal to the JSON of ``obj`` with
    the string _HOLE replaced by ``payload`` (base64: nothing in it needs escaping), so an audio
    event is built by concatenation, without re-encoding its long string."""
    head, tail = _json(obj).split(_HOLE_JSON)
    return head + b'"', b'"' + tail


class VllmOmniEncoder:
    """vLLM-Omni chat streaming: top-level ``modality``; audio base64 in ``delta.content``.

    Like the MiniCPM-o deployment, every audio chunk carries ``finish_reason: "stop"``,
    so only ``data: [DONE]`` ends the stream; errors mid-stream are an ``error`` object
    followed by ``[DONE]``.
    """

    name = "vllm-omni"
    content_type = "text/event-stream"
    error_aborts = False  # in-stream errors are framed

    def _chunk(self, ctx: StreamContext, delta: dict[str, Any], finish: str | None, modality: str) -> dict[str, Any]:
        return {
            "id": ctx.request_id, "object": "chat.completion.chunk", "created": ctx.created, "model": ctx.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
            "modality": modality,
        }

    def error_body(self, status: int, message: str, err_type: str) -> bytes:
        return _json({"error": {"message": message, "type": err_type, "param": None, "code": status}})

    def text(self, ctx: StreamContext, text: str) -> list[Frame]:
        return [Frame(_json(self._chunk(ctx, {"role": "assistant", "content": text}, None, "text")), sse=True)]

    def audio(self, ctx: StreamContext, samples: np.ndarray, finish: str = "stop") -> list[Frame]:
        """An audio delta; the last one carries the real finish_reason ("length" when cut)."""
        delta = {"role": "assistant", "content": _b64_audio(samples, ctx.audio_format, ctx.wav_rate)}
        return [Frame(_json(self._chunk(ctx, delta, finish, "audio")), sse=True, audio_samples=len(samples))]

    def audio_payload(self, samples: np.ndarray, audio_format: str) -> bytes:
        """The part of an audio event that depends on the samples (see AudioTemplate)."""
        return _b64_audio(samples, audio_format).encode("ascii")

    def audio_template(self, ctx: StreamContext, finish: str = "stop") -> "AudioTemplate":
        delta = {"role": "assistant", "content": _HOLE}
        return AudioTemplate(*json_template(self._chunk(ctx, delta, finish, "audio")), sse=True)

    def empty_audio(self, ctx: StreamContext, finish: str | None) -> list[Frame]:
        """vllm-omni 0.30.0's delta for an empty talker segment: modality audio, content ""."""
        return [Frame(_json(self._chunk(ctx, {"role": "assistant", "content": ""}, finish, "audio")), sse=True)]

    def whole(self, ctx: StreamContext, text: str, samples: np.ndarray, finish: str, usage: Usage) -> bytes:
        """The non-streamed response (vllm-omni 0.30.0 folds the audio into the text choice)."""
        audio = {"id": f"audio-{ctx.request_id[-16:]}", "data": _b64_audio(samples, ctx.audio_format, ctx.wav_rate),
                 "expires_at": ctx.created + 86400, "transcript": ""}
        return _json({"id": ctx.request_id, "object": "chat.completion", "created": ctx.created, "model": ctx.model,
                      "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "audio": audio},
                                   "logprobs": None, "finish_reason": finish}],
                      "usage": usage.as_dict()})

    def finish(self, ctx: StreamContext, finish_reason: str, usage: Usage) -> list[Frame]:
        frames = []
        if ctx.include_usage:
            frames.append(Frame(_json({
                "id": ctx.request_id, "object": "chat.completion.chunk", "created": ctx.created,
                "model": ctx.model, "choices": [], "usage": usage.as_dict(), "modality": "text",
            }), sse=True))
        frames.append(Frame(SSE_DONE, sse=False))
        return frames

    def stream_error(self, ctx: StreamContext, message: str) -> list[Frame] | None:
        error = {"error": {"message": message, "type": "InternalServerError", "code": 500}}
        return [Frame(_json(error), sse=True), Frame(SSE_DONE, sse=False)]


class SglangOmniEncoder:
    """SGLang-Omni chat streaming: role on the first chunk, audio in ``delta.audio``, usage at the end.

    An error mid-stream writes nothing more: the response just ends without ``[DONE]``.
    """

    name = "sglang-omni"
    content_type = "text/event-stream"
    error_aborts = False  # the response ends cleanly, just without [DONE]

    def _chunk(self, ctx: StreamContext, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        return {
            "id": ctx.request_id, "object": "chat.completion.chunk", "created": ctx.created, "model": ctx.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    def error_body(self, status: int, message: str, err_type: str) -> bytes:
        return _json({"detail": message})

    def text(self, ctx: StreamContext, text: str) -> list[Frame]:
        return [Frame(_json(self._chunk(ctx, {"role": "assistant", "content": text}, None)), sse=True)]

    def audio(self, ctx: StreamContext, samples: np.ndarray, finish: str = "stop") -> list[Frame]:
        delta = {"audio": {"id": f"audio-{ctx.request_id}", "data": _b64_audio(samples, "wav", ctx.wav_rate)}}
        return [Frame(_json(self._chunk(ctx, delta, None)), sse=True, audio_samples=len(samples))]

    def audio_payload(self, samples: np.ndarray, audio_format: str) -> bytes:
        return _b64_audio(samples, "wav").encode("ascii")

    def audio_template(self, ctx: StreamContext, finish: str = "stop") -> "AudioTemplate":
        delta = {"audio": {"id": f"audio-{ctx.request_id}", "data": _HOLE}}
        return AudioTemplate(*json_template(self._chunk(ctx, delta, None)), sse=True)

    def empty_audio(self, ctx: StreamContext, finish: str | None) -> list[Frame]:
        return []

    def whole(self, ctx: StreamContext, text: str, samples: np.ndarray, finish: str, usage: Usage) -> bytes:
        """The non-streamed response: `choices[0].message.audio.data` is the whole WAV."""
        audio = {"id": f"audio-{ctx.request_id}", "data": _b64_audio(samples, "wav", ctx.wav_rate)}
        return _json({"id": ctx.request_id, "object": "chat.completion", "created": ctx.created, "model": ctx.model,
                      "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "audio": audio},
                                   "finish_reason": finish}],
                      "usage": usage.as_dict()})

    def finish(self, ctx: StreamContext, finish_reason: str, usage: Usage) -> list[Frame]:
        final = self._chunk(ctx, {}, finish_reason)
        final["usage"] = usage.as_dict()
        return [Frame(_json(final), sse=True), Frame(SSE_DONE, sse=False)]

    def stream_error(self, ctx: StreamContext, message: str) -> list[Frame] | None:
        return None


class PcmEncoder:
    """Raw peer-engine stream: the body is s16le 24 kHz samples, one HTTP chunk per audio chunk.

    There is no framing, so there is no text, no end marker, no per-chunk emit stamp
    (use the engine's ``--emit-log``) and no way to signal an error except aborting
    the connection.
    """

    name = "pcm"
    content_type = "audio/pcm"
    error_aborts = True  # nothing to frame an error with: the connection is aborted

    def error_body(self, status: int, message: str, err_type: str) -> bytes:
        return _json({"detail": message})

    def text(self, ctx: StreamContext, text: str) -> list[Frame]:
        return []

    def audio(self, ctx: StreamContext, samples: np.ndarray, finish: str = "stop") -> list[Frame]:
        return [Frame(pcm_bytes(samples), sse=False, audio_samples=len(samples))]

    def audio_payload(self, samples: np.ndarray, audio_format: str) -> bytes:
        return pcm_bytes(samples)

    def audio_template(self, ctx: StreamContext, finish: str = "stop") -> "AudioTemplate":
        return AudioTemplate(b"", b"", sse=False)

    def empty_audio(self, ctx: StreamContext, finish: str | None) -> list[Frame]:
        return []

    def finish(self, ctx: StreamContext, finish_reason: str, usage: Usage) -> list[Frame]:
        return []

    def stream_error(self, ctx: StreamContext, message: str) -> list[Frame] | None:
        return None

    def whole(self, ctx: StreamContext, text: str, samples: np.ndarray, finish: str, usage: Usage) -> bytes:
        """Never reached: parse_request refuses `stream: false` for the pcm dialect (it only streams)."""
        raise ValueError("the pcm dialect only streams")


@dataclass(frozen=True, slots=True)
class AudioTemplate:
    """An audio event around a pre-rendered payload: ``frame(payload)`` is the Frame that
    ``Encoder.audio`` builds for the same samples, byte for byte."""

    head: bytes
    tail: bytes
    sse: bool

    def frame(self, payload: bytes, samples: int) -> Frame:
        return Frame(self.head + payload + self.tail, sse=self.sse, audio_samples=samples)


Encoder = VllmOmniEncoder | SglangOmniEncoder | PcmEncoder

ENCODERS: dict[str, type[Encoder]] = {
    "vllm-omni": VllmOmniEncoder, "sglang-omni": SglangOmniEncoder, "pcm": PcmEncoder,
}
