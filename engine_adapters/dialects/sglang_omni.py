"""SGLang-Omni chat-completions dialect (docs/engines.md, "SGLang-Omni").

Audio is in `choices[0].delta.audio = {"id", "data"}` (base64 of a complete WAV); the first
chunk carries `role`, a final chunk `finish_reason` and `usage`, then `[DONE]`. An error during
the stream just closes the connection, so a missing `[DONE]` is a failure (no_end_marker, with a
detail saying the server closed the stream mid-response once events had arrived).

Voice prompt placements (`voice_prompt`): `ref_audio` (default; inline in `audio.ref_audio`, the
talker reference), `audios` (a top-level `audios` list: thinker INPUT audio, what the engine's
own Seed-TTS benchmark sends with --voice-clone), `none`.
"""

from __future__ import annotations

from typing import Any

from engine_adapters.dialects.base import Event, SSEJsonParser

NAME = "sglang-omni"
PATH = "/v1/chat/completions"
CONTENT_TYPE = "text/event-stream"  # what a streaming answer declares
PLACEMENTS = ("ref_audio", "audios", "none")


def build_body(text: str, prompt_uri: str | None, prompt_text: str | None, *, model: str,
               sampling: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """The protocol body; the voice goes where `voice_prompt` says."""
    where = options.get("voice_prompt", PLACEMENTS[0])
    audio: dict[str, Any] = {"format": options.get("audio_format", "wav")}
    if prompt_uri and where == "ref_audio":
        audio["ref_audio"] = prompt_uri
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "modalities": ["text", "audio"],
        "audio": audio,
        "stream": options.get("stream", True),
        "stream_options": {"include_usage": True},
    }
    if not body["stream"]:
        del body["stream_options"]
    if prompt_uri and where == "audios":
        body["audios"] = [prompt_uri]
    return body


class Parser(SSEJsonParser):
    name = NAME

    def on_json(self, obj: dict[str, Any], t_ns: int, wire: int, emit_ns: int | None) -> Event:
        delta, event = self.first_delta(obj, t_ns, wire, emit_ns)
        if event is not None:
            return event
        audio = delta.get("audio")
        if audio:
            data = audio.get("data")
            if data:
                return self.decode_audio(data, t_ns, wire, emit_ns, self.audio_format)
        content = delta.get("content")
        if isinstance(content, str) and content:
            self.state.text_parts.append(content)
            return Event(t_ns, "text", wire, text=content, server_emit_ns=emit_ns)
        if obj.get("usage") is not None:
            return Event(t_ns, "usage", wire, server_emit_ns=emit_ns)
        return Event(t_ns, "other", wire, server_emit_ns=emit_ns)
