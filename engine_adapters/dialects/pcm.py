"""Raw PCM dialect: the response body is a chunked `audio/pcm` byte stream (s16le mono, 24 kHz by
default), for a peer engine that streams bytes. Each read is one audio event; a clean end of
the body is the end marker; an odd trailing byte at the end is a decode error.

The request body is chat-completions shaped; where the voice prompt goes is configured
(`voice_prompt`: audio_url | ref_audio | none), since a peer engine's wire format is whatever its
plan entry says (docs/engines.md).
"""

from __future__ import annotations

from typing import Any

from engine_adapters.dialects.base import DEFAULT_SAMPLE_RATE, MAX_EVENT_BYTES, Event, StreamParser

NAME = "pcm"
PATH = "/v1/chat/completions"
CONTENT_TYPE = "audio/pcm"  # what a streaming answer declares
DEFAULT_AUDIO_FORMAT = "pcm"
PLACEMENTS = ("audio_url", "ref_audio", "none")


def build_body(text: str, prompt_uri: str | None, prompt_text: str | None, *, model: str,
               sampling: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    where = options.get("voice_prompt", PLACEMENTS[0])
    content: list[dict[str, Any]] = []
    audio: dict[str, Any] = {"format": "pcm"}
    if prompt_uri and where == "audio_url":
        content.append({"type": "audio_url", "audio_url": {"url": prompt_uri}})
    elif prompt_uri and where == "ref_audio":
        audio["ref_audio"] = prompt_uri
    content.append({"type": "text", "text": text})
    return {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "modalities": ["text", "audio"],
        "audio": audio,
        "stream": True,
    }


class Parser(StreamParser):
    name = NAME

    def __init__(self, audio_format: str = "pcm", sample_rate: int = DEFAULT_SAMPLE_RATE,
                 max_event_bytes: int = MAX_EVENT_BYTES):
        super().__init__(sample_rate, max_event_bytes)
        self._carry = b""

    def feed(self, data: bytes, t_ns: int) -> list[Event]:
        if self.done or not data:
            return []
        self.state.events += 1
        buf = self._carry + data if self._carry else data
        usable = len(buf) - (len(buf) & 1)
        self._carry = buf[usable:]
        return [self.audio_event(t_ns, len(data), bytes(buf[:usable]), self.default_rate, None)]

    def eof(self) -> list[Event]:
        if self.done:
            return []
        if self._carry:
            self.fail("decode_error", "stream ended on half a 16-bit sample")
        else:
            self.state.end_marker = True
        return []
