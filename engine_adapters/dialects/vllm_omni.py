"""vLLM-Omni chat-completions dialect (docs/engines.md, "vLLM-Omni").

Every chunk has a top-level `modality`; audio deltas carry base64 in `choices[i].delta.content`,
each a complete WAV (or raw s16le when the request asked `audio.format: "pcm"`). Some versions
put `finish_reason: "stop"` on every audio chunk, so only `[DONE]` ends a stream; a final usage
chunk has `choices: []`. `data: {"error": ...}` marks a failure even when `[DONE]` follows.
0.30.0 emits audio deltas with empty `content` when the talker yields an empty segment: they
carry no samples and never start TTFA.

Voice prompt placements (`voice_prompt`): `ref_audio` (default; top-level `ref_audio` data URI
plus `ref_text`, MiniCPM-o 4.5's talker reference since vllm-omni 0.28, no thinker cost),
`audio_url` (the first `audio_url` content part: also thinker input audio, i.e. extra prefill),
`none`.
"""

from __future__ import annotations

from typing import Any

from engine_adapters.dialects.base import Event, SSEJsonParser

NAME = "vllm-omni"
PATH = "/v1/chat/completions"
CONTENT_TYPE = "text/event-stream"  # what a streaming answer declares
PLACEMENTS = ("ref_audio", "audio_url", "none")


def build_body(text: str, prompt_uri: str | None, prompt_text: str | None, *, model: str,
               sampling: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """The protocol body: TTS template via chat_template_kwargs, voice where `voice_prompt` says."""
    where = options.get("voice_prompt", PLACEMENTS[0])
    content: list[dict[str, Any]] = []
    if prompt_uri and where == "audio_url":
        content.append({"type": "audio_url", "audio_url": {"url": prompt_uri}})
    content.append({"type": "text", "text": text})
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": content}],
        "modalities": ["text", "audio"],
        "stream": options.get("stream", True),
        "stream_options": {"include_usage": True},
        "chat_template_kwargs": {"use_tts_template": True, "enable_thinking": False},
    }
    if not body["stream"]:
        del body["stream_options"]
    if prompt_uri and where == "ref_audio":
        body["ref_audio"] = prompt_uri
        if prompt_text:
            body["ref_text"] = prompt_text
    if options.get("audio_format", "wav") == "pcm":
        body["audio"] = {"format": "pcm"}
    return body


class Parser(SSEJsonParser):
    name = NAME

    def on_json(self, obj: dict[str, Any], t_ns: int, wire: int, emit_ns: int | None) -> Event:
        delta, event = self.first_delta(obj, t_ns, wire, emit_ns)
        if event is not None:
            return event
        content = delta.get("content")
        modality = obj.get("modality", "text")
        if modality == "audio":
            if not content:
                return Event(t_ns, "other", wire, server_emit_ns=emit_ns)
            return self.decode_audio(content, t_ns, wire, emit_ns, self.audio_format)
        if isinstance(content, str) and content:
            self.state.text_parts.append(content)
            return Event(t_ns, "text", wire, text=content, server_emit_ns=emit_ns)
        return Event(t_ns, "other", wire, server_emit_ns=emit_ns)
