"""Parse and validate an OpenAI-style ``/v1/chat/completions`` body into a :class:`SpeechRequest`.

Each dialect takes the voice prompt from where its real engine does (docs/engines.md):
vLLM-Omni (>= 0.28): the first ``audio_url`` content part, else a top-level ``ref_audio``
data URI (with ``ref_text``); SGLang-Omni: ``audio.ref_audio``; the pcm peer accepts an
``audio_url`` part or ``audio.ref_audio``. Audio the thinker reads as input (``audio_url``
parts; SGLang-Omni's top-level ``audios`` list) is collected separately: it costs prefill.
Anything malformed raises :class:`RequestError` with the HTTP status and a message that says
exactly what is wrong, before any response starts.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

# the dialects the reference engine serves, with the audio formats of each (tests/test_plan_enums.py
# checks they are the client's dialects, engine_adapters/dialects)
_AUDIO_FORMATS = {"vllm-omni": ("wav", "pcm"), "sglang-omni": ("wav",), "pcm": ("pcm", "wav")}
# vllm-omni-realtime: a DuplexOmni server, which also answers /v1/chat/completions as vllm-omni
# does (docs/engines.md); its sessions are parsed by reference/realtime.py
REALTIME = "vllm-omni-realtime"
DIALECTS = (*_AUDIO_FORMATS, REALTIME)


def chat_dialect(dialect: str) -> str:
    """The chat-completions dialect an engine serving `dialect` answers HTTP chat requests in."""
    return "vllm-omni" if dialect == REALTIME else dialect


class RequestError(Exception):
    """A request the engine refuses; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


@dataclass(frozen=True, slots=True)
class SpeechRequest:
    """What the engine needs from a chat-completions body."""

    text: str  # text parts of the last user message, joined by spaces
    prompt_wav: bytes | None  # the voice-prompt file bytes, if any
    audio_format: str  # "wav" (a WAV file per delta) or "pcm" (raw s16le per delta)
    seed: int  # 0 when the request gives none
    temperature: float | None
    max_tokens: int | None  # caps the thinker's text tokens (the text the talker then speaks)
    include_usage: bool
    model: str | None
    stream: bool = True  # False: one JSON response with the whole audio
    input_audio: tuple[bytes, ...] = ()  # audio files the thinker reads as input (extra prefill)


def _decode_data_uri(value: Any, where: str) -> bytes:
    """Bytes of a ``data:<mime>;base64,<payload>`` URI (or bare base64)."""
    if not isinstance(value, str) or not value:
        raise RequestError(f"{where} must be a non-empty string (a data:audio/wav;base64,... URI)")
    payload = value
    if value.startswith("data:"):
        header, sep, payload = value.partition(",")
        if not sep or not header.endswith(";base64"):
            raise RequestError(f"{where} must be a base64 data URI (data:audio/wav;base64,...)")
    elif value.startswith(("http://", "https://", "file:")):
        raise RequestError(f"{where}: only data: URIs are supported; this engine fetches nothing")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise RequestError(f"{where} is not valid base64") from None
    if not data:
        raise RequestError(f"{where} decodes to zero bytes")
    return data


def _content_parts(message: dict[str, Any], index: int) -> list[dict[str, Any]]:
    content = message.get("content")
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list) or not all(isinstance(p, dict) for p in content):
        raise RequestError(f"messages[{index}].content must be a string or a list of content parts")
    return content


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            texts = []
            for part in _content_parts(messages[index], index):
                if part.get("type") == "text":
                    if not isinstance(part.get("text"), str):
                        raise RequestError(f"messages[{index}]: a text content part needs a string 'text'")
                    texts.append(part["text"])
            text = " ".join(t.strip() for t in texts if t.strip())
            if not text:
                raise RequestError("no text to synthesise: the last user message has no text content")
            return text
    raise RequestError("no text to synthesise: messages contain no user message")


def _audio_urls(messages: list[dict[str, Any]]) -> list[bytes]:
    """Every ``audio_url`` content part's bytes, in message order."""
    out = []
    for index, message in enumerate(messages):
        for part in _content_parts(message, index):
            if part.get("type") == "audio_url":
                audio_url = part.get("audio_url")
                url = audio_url.get("url") if isinstance(audio_url, dict) else None
                out.append(_decode_data_uri(url, f"messages[{index}] audio_url.url"))
    return out


def _audios_list(body: dict[str, Any]) -> list[bytes]:
    """SGLang-Omni's top-level ``audios`` (thinker input audio; inline data URIs only here)."""
    audios = body.get("audios")
    if audios is None:
        return []
    if not isinstance(audios, list):
        raise RequestError("'audios' must be a list of data URIs")
    return [_decode_data_uri(a, f"audios[{i}]") for i, a in enumerate(audios)]


def _optional_str(body: dict[str, Any], key: str) -> None:
    if body.get(key) is not None and not isinstance(body[key], str):
        raise RequestError(f"'{key}' must be a string")


def _optional_int(body: dict[str, Any], key: str, minimum: int | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise RequestError(f"'{key}' must be an integer")
    if minimum is not None and value < minimum:
        raise RequestError(f"'{key}' must be >= {minimum}")
    return value


def parse_request(raw: bytes, dialect: str) -> SpeechRequest:
    """Validate ``raw`` (the HTTP body) for ``dialect``; raises :class:`RequestError`."""
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError("'stream' must be true or false")
    if not stream and dialect == "pcm":
        raise RequestError("the pcm dialect only streams: set \"stream\": true")
    modalities = body.get("modalities")
    if modalities is not None and (not isinstance(modalities, list) or "audio" not in modalities):
        raise RequestError("'modalities' must be a list that includes \"audio\"")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise RequestError("'messages' must be a non-empty list of message objects")
    text = _last_user_text(messages)

    audio = body.get("audio")
    if audio is not None and not isinstance(audio, dict):
        raise RequestError("'audio' must be an object")
    audio = audio or {}
    audio_format = audio.get("format", "pcm" if dialect == "pcm" else "wav")
    if audio_format not in _AUDIO_FORMATS[dialect]:
        raise RequestError(
            f"unsupported audio format {audio_format!r} for {dialect}; supported: {', '.join(_AUDIO_FORMATS[dialect])}"
        )
    for key in ("ref_text", "task_type", "language"):  # vllm bench serve's Seed-TTS fields
        _optional_str(body, key)
    if dialect == "vllm-omni":
        # serving_chat._attach_minicpmo45_reference_audio: the messages' first audio wins,
        # else the top-level ref_audio; an audio_url part is also thinker input audio
        thinker_audio = _audio_urls(messages)
        prompt = thinker_audio[0] if thinker_audio else None
        if prompt is None and body.get("ref_audio") is not None:
            prompt = _decode_data_uri(body["ref_audio"], "ref_audio")
    elif dialect == "sglang-omni":
        prompt = _decode_data_uri(audio["ref_audio"], "audio.ref_audio") if audio.get("ref_audio") else None
        thinker_audio = _audios_list(body)
    else:
        thinker_audio = _audio_urls(messages)
        prompt = thinker_audio[0] if thinker_audio else None
        if prompt is None and audio.get("ref_audio"):
            prompt = _decode_data_uri(audio["ref_audio"], "audio.ref_audio")

    temperature = body.get("temperature")
    if temperature is not None and (not isinstance(temperature, (int, float)) or isinstance(temperature, bool)
                                    or temperature < 0):
        raise RequestError("'temperature' must be a number >= 0")
    stream_options = body.get("stream_options") or {}
    if not isinstance(stream_options, dict):
        raise RequestError("'stream_options' must be an object")
    template_kwargs = body.get("chat_template_kwargs")
    if template_kwargs is not None and not isinstance(template_kwargs, dict):
        raise RequestError("'chat_template_kwargs' must be an object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError("'model' must be a string")
    seed = _optional_int(body, "seed")
    _optional_int(body, "max_new_tokens", minimum=1)  # accepted; MiniCPM-o's chat route ignores it
    return SpeechRequest(
        text=text,
        prompt_wav=prompt,
        audio_format=audio_format,
        seed=0 if seed is None else seed,
        temperature=None if temperature is None else float(temperature),
        max_tokens=_optional_int(body, "max_tokens", minimum=1),
        include_usage=bool(stream_options.get("include_usage", False)),
        model=model,
        stream=stream,
        input_audio=tuple(thinker_audio),
    )
